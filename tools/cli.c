#include "cli.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "mega: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

static void fmt_default(char *buf, size_t n, const cli_flag *f) {
    switch (f->kind) {
    case F_INT: snprintf(buf, n, "%d", *(int *)f->dst); break;
    case F_I64: snprintf(buf, n, "%lld", (long long)*(int64_t *)f->dst); break;
    case F_DBL: snprintf(buf, n, "%g", *(double *)f->dst); break;
    case F_STR:
    case F_ENUM: snprintf(buf, n, "%s", *(const char **)f->dst ? *(const char **)f->dst : "(none)"); break;
    case F_BOOL:
    case F_SET: snprintf(buf, n, "%s", *(int *)f->dst ? "on" : "off"); break;
    case F_CLEAR: snprintf(buf, n, "%s", *(int *)f->dst ? "off" : "on"); break;
    }
}

void cli_help(FILE *out, const char *cmd, const char *usage, const cli_flag *flags) {
    fprintf(out, "usage: mega %s %s\n\n", cmd, usage);
    for (const cli_flag *f = flags; f->name; f++) {
        char left[96], def[96];
        const char *arg = "";
        switch (f->kind) {
        case F_INT:
        case F_I64: arg = " N"; break;
        case F_DBL: arg = " X"; break;
        case F_STR: arg = " S"; break;
        case F_ENUM: arg = ""; break;
        default: break;
        }
        if (f->kind == F_ENUM)
            snprintf(left, sizeof left, "--%s {%s}", f->name, f->choices);
        else
            snprintf(left, sizeof left, "--%s%s", f->name, arg);
        fmt_default(def, sizeof def, f);
        if (f->kind == F_SET || f->kind == F_CLEAR || f->kind == F_BOOL)
            fprintf(out, "  %-34s %s\n", left, f->help);
        else
            fprintf(out, "  %-34s %s (default %s)\n", left, f->help, def);
    }
    fprintf(out, "  %-34s %s\n", "--help", "this text");
}

int cli_seen(const cli_flag *flags, const char *name) {
    for (const cli_flag *f = flags; f->name; f++)
        if (!strcmp(f->name, name)) return f->seen;
    return 0;
}

static int parse_num(const cli_flag *f, const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x)) return cli_error("--%s expects a number, got '%s'", f->name, v);
    if ((f->kind == F_INT || f->kind == F_I64) && x != floor(x))
        return cli_error("--%s expects an integer, got '%s'", f->name, v);
    if (f->kind == F_INT && (x > 2147483647.0 || x < -2147483648.0)) return cli_error("--%s value %s is out of range", f->name, v);
    if (f->lo <= f->hi && (x < f->lo || x > f->hi))
        return cli_error("--%s must be in [%g, %g], got %s", f->name, f->lo, f->hi, v);
    *out = x;
    return 0;
}

int cli_parse(const char *cmd, const char *usage, cli_flag *flags, int argc, char **argv, int i0) {
    for (int i = i0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_help(stdout, cmd, usage, flags);
            return 1;
        }
        if (strncmp(a, "--", 2)) {
            cli_error("unexpected argument '%s' (see 'mega %s --help')", a, cmd);
            return 2;
        }
        const char *name = a + 2, *val = NULL;
        char nb[128];
        const char *eq = strchr(name, '=');
        if (eq) {
            snprintf(nb, sizeof nb, "%.*s", (int)(eq - name), name);
            name = nb;
            val = eq + 1;
        }
        cli_flag *f = NULL;
        for (cli_flag *g = flags; g->name; g++)
            if (!strcmp(g->name, name)) f = g;
        if (!f) {
            cli_error("unknown flag --%s for 'mega %s' (see 'mega %s --help')", name, cmd, cmd);
            return 2;
        }
        f->seen = 1;
        if (f->kind == F_SET || f->kind == F_CLEAR || f->kind == F_BOOL) {
            int on = f->kind != F_CLEAR;
            if (val) {
                if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "on")) on = f->kind != F_CLEAR;
                else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "off")) on = f->kind == F_CLEAR;
                else {
                    cli_error("--%s takes no value (or true/false), got '%s'", f->name, val);
                    return 2;
                }
            }
            *(int *)f->dst = on;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) {
                cli_error("--%s needs a value", f->name);
                return 2;
            }
            val = argv[++i];
        }
        double x;
        switch (f->kind) {
        case F_INT:
            if (parse_num(f, val, &x)) return 2;
            *(int *)f->dst = (int)x;
            break;
        case F_I64:
            if (parse_num(f, val, &x)) return 2;
            *(int64_t *)f->dst = (int64_t)x;
            break;
        case F_DBL:
            if (parse_num(f, val, &x)) return 2;
            *(double *)f->dst = x;
            break;
        case F_STR: *(const char **)f->dst = val; break;
        case F_ENUM: {
            const char *c = f->choices;
            int ok = 0;
            size_t n = strlen(val);
            while (*c) {
                const char *bar = strchr(c, '|');
                size_t l = bar ? (size_t)(bar - c) : strlen(c);
                if (l == n && !strncmp(c, val, n)) ok = 1;
                c += l + (bar ? 1 : 0);
                if (!bar) break;
            }
            if (!ok) {
                cli_error("--%s must be one of {%s}, got '%s'", f->name, f->choices, val);
                return 2;
            }
            *(const char **)f->dst = val;
            break;
        }
        default: break;
        }
    }
    return 0;
}
