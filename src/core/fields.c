/* Config field tables (mega.h, mega_field): value access, the per-field validity rule, text and
 * JSON. Every config kind (block, language model, classifier) is described by a table, so these
 * are written once. */
#include "core/json.h"

#include <errno.h>
#include <limits.h>

_Static_assert(sizeof(mega_mixer_kind) == sizeof(int) && sizeof(mega_act) == sizeof(int),
               "enumerated config fields are read and written as int");

static int *ival(const mega_field *f, const void *base) { return (int *)((char *)(uintptr_t)base + f->offset); }
static float *fval(const mega_field *f, const void *base) { return (float *)((char *)(uintptr_t)base + f->offset); }

/* the length of an INTS field's list (up to the first 0) */
static int ints_len(const int *v) {
    int n = 0;
    while (n < MEGA_INTS_MAX && v[n]) n++;
    return n;
}

static void ints_format(const int *v, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < ints_len(v) && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? "," : "", v[i]);
}

int mega__ints_parse(const char *s, int *v) {
    int tmp[MEGA_INTS_MAX] = {0}, n = 0;
    while (*s == ' ') s++;
    while (*s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x == 0 || x < -2147483647L || x > 2147483647L || n == MEGA_INTS_MAX) return -1; /* 0 ends a list */
        tmp[n++] = (int)x;
        s = end;
        while (*s == ' ') s++;
        if (*s == ',') s++;
        else if (*s) return -1;
        while (*s == ' ') s++;
    }
    memcpy(v, tmp, sizeof tmp);
    return 0;
}

int mega_field_applies(const mega_field *f, mega_mixer_kind k) {
    return f->mixers == 0 || ((unsigned)k < 32 && ((f->mixers >> k) & 1u));
}

void mega_field_format(const mega_field *f, const void *config, char *buf, size_t n) {
    switch (f->type) {
    case MEGA_FIELD_INT: snprintf(buf, n, "%d", *ival(f, config)); break;
    case MEGA_FIELD_FLOAT: snprintf(buf, n, "%g", (double)*fval(f, config)); break;
    case MEGA_FIELD_BOOL: snprintf(buf, n, "%s", *ival(f, config) ? "true" : "false"); break;
    case MEGA_FIELD_CHOICE: {
        int v = *ival(f, config);
        snprintf(buf, n, "%s", v >= 0 && v < f->nchoices ? f->choices[v] : "?");
        break;
    }
    case MEGA_FIELD_INTS: ints_format(ival(f, config), buf, n); break;
    }
}

mega_status mega_field_parse(const mega_field *f, void *config, const char *text) {
    char *end;
    errno = 0;
    switch (f->type) {
    case MEGA_FIELD_INTS:
        if (mega__ints_parse(text, ival(f, config)))
            MEGA_FAIL(MEGA_ERR_INVALID, "%s expects a list of non-zero integers 'a,b,...' (at most %d), got '%s'", f->name, MEGA_INTS_MAX, text);
        return MEGA_OK;
    case MEGA_FIELD_INT: {
        long v = strtol(text, &end, 10);
        if (!*text || *end || errno || v < INT_MIN || v > INT_MAX) MEGA_FAIL(MEGA_ERR_INVALID, "%s expects an integer, got '%s'", f->name, text);
        *ival(f, config) = (int)v;
        return MEGA_OK;
    }
    case MEGA_FIELD_FLOAT: {
        double v = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(v)) MEGA_FAIL(MEGA_ERR_INVALID, "%s expects a number, got '%s'", f->name, text);
        *fval(f, config) = (float)v;
        return MEGA_OK;
    }
    case MEGA_FIELD_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "1")) *ival(f, config) = 1;
        else if (!strcmp(text, "false") || !strcmp(text, "0")) *ival(f, config) = 0;
        else MEGA_FAIL(MEGA_ERR_INVALID, "%s expects true or false, got '%s'", f->name, text);
        return MEGA_OK;
    case MEGA_FIELD_CHOICE:
        for (int i = 0; i < f->nchoices; i++)
            if (!strcmp(text, f->choices[i])) {
                *ival(f, config) = i;
                return MEGA_OK;
            }
        MEGA_FAIL(MEGA_ERR_INVALID, "%s has no value '%s'", f->name, text);
    }
    MEGA_FAIL(MEGA_ERR_INVALID, "%s: unknown field type", f->name);
}

/* the one rule of a field: its range (and 0 excluded for MEGA_FIELD_NONZERO), or its choices */
static mega_status field_check(const mega_field *f, const void *base) {
    if (f->type == MEGA_FIELD_FLOAT) {
        double v = *fval(f, base);
        if (!(v >= f->lo && v <= f->hi)) MEGA_FAIL(MEGA_ERR_INVALID, "%s must be in [%g, %g] (got %g)", f->name, f->lo, f->hi, v);
        return MEGA_OK;
    }
    if (f->type == MEGA_FIELD_INTS) {
        const int *v = ival(f, base), n = ints_len(v);
        for (int i = n; i < MEGA_INTS_MAX; i++)
            if (v[i]) MEGA_FAIL(MEGA_ERR_INVALID, "%s has a 0 inside the list", f->name);
        for (int i = 0; i < n; i++) {
            if (v[i] < f->lo || v[i] > f->hi) MEGA_FAIL(MEGA_ERR_INVALID, "%s values must be in [%.0f, %.0f] (got %d)", f->name, f->lo, f->hi, v[i]);
            if (i && v[i] <= v[i - 1]) MEGA_FAIL(MEGA_ERR_INVALID, "%s must be increasing (got %d after %d)", f->name, v[i], v[i - 1]);
        }
        return MEGA_OK;
    }
    const int v = *ival(f, base);
    if (f->type == MEGA_FIELD_CHOICE) {
        if (v < 0 || v >= f->nchoices) MEGA_FAIL(MEGA_ERR_INVALID, "%s has an unknown value (%d)", f->name, v);
        return MEGA_OK;
    }
    if (f->type == MEGA_FIELD_BOOL) {
        if (v != 0 && v != 1) MEGA_FAIL(MEGA_ERR_INVALID, "%s must be true or false (got %d)", f->name, v);
        return MEGA_OK;
    }
    if ((f->flags & MEGA_FIELD_NONZERO) && v == 0) {
        if (f->lo == -1) MEGA_FAIL(MEGA_ERR_INVALID, "%s must be -1 or in [1, %.0f] (got 0)", f->name, f->hi);
        MEGA_FAIL(MEGA_ERR_INVALID, "%s must not be 0", f->name);
    }
    if (v < f->lo || v > f->hi) MEGA_FAIL(MEGA_ERR_INVALID, "%s must be in [%.0f, %.0f] (got %d)", f->name, f->lo, f->hi, v);
    return MEGA_OK;
}

mega_status mega__fields_check(const mega_field *f, int n, const void *base) {
    for (int i = 0; i < n; i++) MEGA_TRY(field_check(&f[i], base));
    return MEGA_OK;
}

void mega__fields_to_json(cJSON *o, const mega_field *f, int n, const void *base) {
    for (int i = 0; i < n; i++) {
        const mega_field *g = &f[i];
        switch (g->type) {
        case MEGA_FIELD_INT: cJSON_AddNumberToObject(o, g->name, *ival(g, base)); break;
        case MEGA_FIELD_FLOAT: cJSON_AddNumberToObject(o, g->name, *fval(g, base)); break;
        case MEGA_FIELD_BOOL: cJSON_AddBoolToObject(o, g->name, *ival(g, base)); break;
        case MEGA_FIELD_CHOICE:
        case MEGA_FIELD_INTS: {
            char s[128];
            mega_field_format(g, base, s, sizeof s);
            cJSON_AddStringToObject(o, g->name, s);
            break;
        }
        }
    }
}

void mega__fields_from_json(mega_json_reader *r, const mega_field *f, int n, void *base) {
    for (int i = 0; i < n; i++) {
        const mega_field *g = &f[i];
        switch (g->type) {
        case MEGA_FIELD_INT: mega_json_int(r, g->name, ival(g, base)); break;
        case MEGA_FIELD_FLOAT: mega_json_flt(r, g->name, fval(g, base)); break;
        case MEGA_FIELD_BOOL: mega_json_bool(r, g->name, ival(g, base), 0); break;
        case MEGA_FIELD_CHOICE: mega_json_choice(r, g->name, g->choices, g->nchoices, ival(g, base)); break;
        case MEGA_FIELD_INTS: mega_json_ints(r, g->name, ival(g, base)); break;
        }
    }
}

/* ---- typed reads ------------------------------------------------------------------------- */

static const cJSON *jget(mega_json_reader *r, const char *k) { return cJSON_GetObjectItemCaseSensitive(r->o, k); }

static void jfail(mega_json_reader *r, const char *k, const char *what) {
    if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' %s", k, what);
}

void mega_json_int(mega_json_reader *r, const char *k, int *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2147483647.0) {
        jfail(r, k, "must be an integer");
        return;
    }
    *dst = (int)v->valuedouble;
}

void mega_json_flt(mega_json_reader *r, const char *k, float *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsNumber(v)) {
        jfail(r, k, "must be a number");
        return;
    }
    *dst = (float)v->valuedouble;
}

void mega_json_bool(mega_json_reader *r, const char *k, int *dst, int invert) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsBool(v)) {
        jfail(r, k, "must be true or false");
        return;
    }
    *dst = cJSON_IsTrue(v) ? !invert : invert;
}

void mega_json_choice(mega_json_reader *r, const char *k, const char *const *names, int n, int *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (cJSON_IsString(v))
        for (int i = 0; i < n; i++)
            if (!strcmp(v->valuestring, names[i])) {
                *dst = i;
                return;
            }
    jfail(r, k, "has an unknown value");
}

void mega_json_ints(mega_json_reader *r, const char *k, int *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (cJSON_IsString(v)) {
        if (mega__ints_parse(v->valuestring, dst)) jfail(r, k, "must be a list of integers \"a,b,...\"");
        return;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > MEGA_INTS_MAX) {
        jfail(r, k, "must be a list of integers \"a,b,...\"");
        return;
    }
    int tmp[MEGA_INTS_MAX] = {0}, n = 0;
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || fabs(e->valuedouble) > 2147483647.0) {
            jfail(r, k, "must be a list of integers");
            return;
        }
        tmp[n++] = (int)e->valuedouble;
        if (!tmp[n - 1]) {
            jfail(r, k, "must not hold 0");
            return;
        }
    }
    memcpy(dst, tmp, sizeof tmp);
}
