#include "cli.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "mega: error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

/* the config field behind each F_INTS flag (cli_add_fields registers them; the flag tables keep
 * their 7 members) */
static struct {
    const void *dst;
    const mega_field *field;
} ints_fields[64];
static int n_ints_fields;

static const mega_field *ints_field(const cli_flag *f) {
    for (int i = 0; i < n_ints_fields; i++)
        if (ints_fields[i].dst == f->dst) return ints_fields[i].field;
    return NULL;
}

static void fmt_default(char *buf, size_t n, const cli_flag *f) {
    switch (f->kind) {
    case F_INT: snprintf(buf, n, "%d", *(int *)f->dst); break;
    case F_I64: snprintf(buf, n, "%lld", (long long)*(int64_t *)f->dst); break;
    case F_DBL: snprintf(buf, n, "%g", *(double *)f->dst); break;
    case F_FLT: snprintf(buf, n, "%g", (double)*(float *)f->dst); break;
    case F_STR:
    case F_ENUM: {
        /* control characters shown as escapes (a default prompt of "\n") */
        const char *v = *(const char **)f->dst;
        size_t o = 0;
        if (!v) v = "(none)";
        for (; *v && o + 3 < n; v++) {
            if (*v == '\n') buf[o++] = '\\', buf[o++] = 'n';
            else if (*v == '\t') buf[o++] = '\\', buf[o++] = 't';
            else buf[o++] = *v;
        }
        buf[o] = 0;
        break;
    }
    case F_CHOICE: {
        /* the v-th entry of choices */
        const char *c = f->choices;
        for (int v = *(int *)f->dst; v > 0 && c; v--) c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL;
        snprintf(buf, n, "%.*s", c ? (int)strcspn(c, "|") : 1, c ? c : "?");
        break;
    }
    case F_BOOL:
    case F_SET: snprintf(buf, n, "%s", *(int *)f->dst ? "on" : "off"); break;
    case F_CLEAR: snprintf(buf, n, "%s", *(int *)f->dst ? "off" : "on"); break;
    case F_SIZE: snprintf(buf, n, "%lld", (long long)*(int64_t *)f->dst); break;
    case F_INTS: {
        const mega_field *g = ints_field(f);
        buf[0] = 0;
        if (g) mega_field_format(g, (char *)f->dst - g->offset, buf, n);
        if (!buf[0]) snprintf(buf, n, "none");
        break;
    }
    }
}

/* one-letter aliases of the most used flags, as llama.cpp users type them (a command that has
 * the long flag accepts the alias) */
static const char *const SHORT[][2] = {{"m", "model"}, {"p", "prompt"}, {"n", "tokens"}, {"t", "threads"}};
#define NSHORT (sizeof SHORT / sizeof *SHORT)

static const char *short_of(const char *name) {
    for (size_t i = 0; i < NSHORT; i++)
        if (!strcmp(SHORT[i][1], name)) return SHORT[i][0];
    return NULL;
}

void cli_help(FILE *out, const char *cmd, const char *usage, const cli_flag *flags) {
    enum { COL = 34 };
    fprintf(out, "usage: mega %s %s\n\n", cmd, usage);
    for (const cli_flag *f = flags; f->name; f++) {
        char left[1024], def[96];
        const char *arg = "";
        switch (f->kind) {
        case F_INT:
        case F_I64: arg = " N"; break;
        case F_SIZE: arg = " BYTES"; break;
        case F_DBL:
        case F_FLT: arg = " X"; break;
        case F_STR: arg = " S"; break;
        case F_INTS: arg = " N,N,..."; break;
        case F_BOOL: arg = "[=false]"; break;
        default: break;
        }
        char sh[8] = "";
        if (short_of(f->name)) snprintf(sh, sizeof sh, "-%s, ", short_of(f->name));
        if (f->kind == F_ENUM || f->kind == F_CHOICE) {
            snprintf(left, sizeof left, "%s--%s {%s}", sh, f->name, f->choices);
        } else {
            snprintf(left, sizeof left, "%s--%s%s", sh, f->name, arg);
        }
        fmt_default(def, sizeof def, f);
        /* a long left part (many choices) gets lines of its own, never cut */
        if (strlen(left) > COL) fprintf(out, "  %s\n  %-*s", left, COL, "");
        else fprintf(out, "  %-*s", COL, left);
        if (f->kind == F_SET || f->kind == F_CLEAR)
            fprintf(out, " %s\n", f->help);
        else if (f->kind == F_BOOL) /* --name or --name=false */
            fprintf(out, " %s (default %s)\n", f->help, *(int *)f->dst ? "true" : "false");
        else
            fprintf(out, " %s (default %s)\n", f->help, def);
    }
    fprintf(out, "  %-*s %s\n", COL, "--help", "this text");
}

/* "a|b|c" of a choice field, kept for the life of the program (made once per list of names, so
 * that building a flag table again does not use up the pool) */
static const char *choices_of(const mega_field *f) {
    static char pool[8192];
    static size_t used;
    static const char *const *made_for[64];
    static const char *made[64];
    static int nmade;
    for (int i = 0; i < nmade; i++)
        if (made_for[i] == f->choices) return made[i];
    if (used >= sizeof pool) return "?";
    char *s = pool + used;
    size_t o = 0;
    for (int i = 0; i < f->nchoices && used + o < sizeof pool; i++)
        o += (size_t)snprintf(s + o, sizeof pool - used - o, "%s%s", i ? "|" : "", f->choices[i]);
    used += o + 1;
    if (used > sizeof pool) return "?";
    if (nmade < 64) made_for[nmade] = f->choices, made[nmade++] = s;
    return s;
}

int cli_add_fields(cli_flag *fl, int n, int cap, const mega_field *f, int nf, void *base) {
    for (int i = 0; i < nf; i++) {
        if (f[i].flags & MEGA_FIELD_NOFLAG) continue;
        if (n + 1 >= cap) return -1; /* keep room for the terminator */
        cli_flag g;
        memset(&g, 0, sizeof g);
        static const flag_kind kinds[] = {F_INT, F_FLT, F_BOOL, F_CHOICE, F_INTS};
        g.name = f[i].name, g.kind = kinds[f[i].type], g.dst = (char *)base + f[i].offset, g.help = f[i].help;
        g.lo = 1, g.hi = 0; /* the config check judges the value */
        if (f[i].type == MEGA_FIELD_CHOICE) g.choices = choices_of(&f[i]);
        if (f[i].type == MEGA_FIELD_INTS && !ints_field(&g)) {
            if (n_ints_fields == (int)(sizeof ints_fields / sizeof *ints_fields)) return -1;
            ints_fields[n_ints_fields].dst = g.dst, ints_fields[n_ints_fields++].field = &f[i];
        }
        fl[n++] = g;
    }
    memset(&fl[n], 0, sizeof fl[n]);
    return n;
}

const char *cli_find(int argc, char **argv, int i0, const char *name) {
    const char *v = NULL;
    const size_t n = strlen(name);
    for (int i = i0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) || strncmp(a + 2, name, n)) continue;
        if (a[2 + n] == '=') v = a + 3 + n;
        else if (!a[2 + n] && i + 1 < argc) v = argv[++i];
    }
    return v;
}

cli_flag *cli_flag_named(const cli_flag *flags, const char *name) {
    for (const cli_flag *f = flags; f->name; f++)
        if (!strcmp(f->name, name)) return (cli_flag *)(uintptr_t)f;
    return NULL;
}

int cli_seen(const cli_flag *flags, const char *name) {
    const cli_flag *f = cli_flag_named(flags, name);
    return f ? f->seen : 0;
}

static int parse_num(const cli_flag *f, const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x)) return cli_error("--%s expects a number, got '%s'", f->name, v);
    if ((f->kind == F_INT || f->kind == F_I64) && x != floor(x))
        return cli_error("--%s expects an integer, got '%s'", f->name, v);
    if (f->kind == F_INT && (x > 2147483647.0 || x < -2147483648.0)) return cli_error("--%s value %s is out of range", f->name, v);
    if (f->kind == F_I64 && !(x >= -9223372036854775808.0 && x < 9223372036854775808.0))
        return cli_error("--%s value %s is out of range", f->name, v);
    if (f->lo <= f->hi && (x < f->lo || x > f->hi)) {
        /* an integer flag's bounds are integers: %g would show 1048576 as 1.04858e+06 */
        if (f->kind == F_INT || f->kind == F_I64)
            return cli_error("--%s must be in [%.0f, %.0f], got %s", f->name, f->lo, f->hi, v);
        return cli_error("--%s must be in [%g, %g], got %s", f->name, f->lo, f->hi, v);
    }
    *out = x;
    return 0;
}

/* "123", "64K", "512M", "1.5G", "2T" (powers of 1024) */
static int parse_size(const cli_flag *f, const char *v, int64_t *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0, end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024, end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024, end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024, end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (!*v || *end || errno || !isfinite(x) || x < 0 || x * mul > 9e18)
        return cli_error("--%s expects a size in bytes (e.g. 123456, 512M, 8G), got '%s'", f->name, v);
    *out = (int64_t)(x * mul);
    return 0;
}

/* the value a boolean flag writes (SET/BOOL: on, CLEAR: the opposite) */
static int bool_value(const cli_flag *f, int on) { return f->kind == F_CLEAR ? !on : on; }

/* a flag's value given with another flag that writes the same variable (--postnorm after
 * --prenorm): 0 when they agree, else 2 after the error */
static int contradicts(const cli_flag *flags, const cli_flag *f, int value, const char *given) {
    for (const cli_flag *g = flags; g->name; g++)
        if (g != f && g->seen && g->dst == f->dst && *(int *)f->dst != value) {
            cli_error("--%s%s%s contradicts --%s, given before it (they set the same option)", f->name, given ? "=" : "",
                      given ? given : "", g->name);
            return 2;
        }
    return 0;
}

/* the most threads worth starting: 4 x the online CPUs (more only adds switching; OpenBLAS spins
 * in each) */
static int thread_cap(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > 1024 ? 4096 : (int)(4 * n);
}

int cli_parse(const char *cmd, const char *usage, cli_flag *flags, int argc, char **argv, int i0) {
    for (int i = i0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_help(stdout, cmd, usage, flags);
            return 1;
        }
        char lb[64];
        if (a[0] == '-' && a[1] && !a[2]) /* -m: the long flag it stands for */
            for (size_t k = 0; k < NSHORT; k++)
                if (a[1] == SHORT[k][0][0]) {
                    snprintf(lb, sizeof lb, "--%s", SHORT[k][1]);
                    a = lb;
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
        cli_flag *f = cli_flag_named(flags, name);
        if (!f) {
            cli_error("unknown flag --%s for 'mega %s' (see 'mega %s --help')", name, cmd, cmd);
            return 2;
        }
        if (f->kind == F_SET || f->kind == F_CLEAR || f->kind == F_BOOL) {
            int on = 1;
            if (val) {
                if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "on")) on = 1;
                else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "off")) on = 0;
                else {
                    cli_error("--%s takes no value (or true/false), got '%s'", f->name, val);
                    return 2;
                }
            }
            if (contradicts(flags, f, bool_value(f, on), val)) return 2;
            f->seen = 1;
            *(int *)f->dst = bool_value(f, on);
            continue;
        }
        f->seen = 1;
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
        case F_FLT:
            if (parse_num(f, val, &x)) return 2;
            *(float *)f->dst = (float)x;
            break;
        case F_SIZE:
            if (parse_size(f, val, (int64_t *)f->dst)) return 2;
            break;
        case F_STR: *(const char **)f->dst = val; break;
        case F_INTS: {
            const mega_field *g = ints_field(f);
            if (!g || mega_field_parse(g, (char *)f->dst - g->offset, val)) {
                cli_error("--%s", g ? mega_last_error() : "unregistered list flag");
                return 2;
            }
            break;
        }
        case F_ENUM:
        case F_CHOICE: {
            const char *c = f->choices;
            int k = -1, ci = 0;
            size_t n = strlen(val);
            while (*c) {
                const char *bar = strchr(c, '|');
                size_t l = bar ? (size_t)(bar - c) : strlen(c);
                if (l == n && !strncmp(c, val, n)) k = ci;
                c += l + (bar ? 1 : 0);
                ci++;
                if (!bar) break;
            }
            if (k < 0) {
                cli_error("--%s must be one of {%s}, got '%s'", f->name, f->choices, val);
                return 2;
            }
            if (f->kind == F_ENUM) *(const char **)f->dst = val;
            else *(int *)f->dst = k;
            break;
        }
        default: break;
        }
    }
    cli_flag *t = cli_flag_named(flags, "threads");
    if (t && t->kind == F_INT && t->seen && *(int *)t->dst > thread_cap()) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        fprintf(stderr, "mega: note: --threads %d is more than 4 x the %ld online CPUs; using %d\n", *(int *)t->dst,
                cpus > 0 ? cpus : 1, thread_cap());
        *(int *)t->dst = thread_cap();
    }
    return 0;
}
