/* Config field tables (mega.h, mega_field): value access, the per-field validity rule, text and
 * JSON. Every config kind (block, language model, classifier) is described by a table, so these
 * are written once. */
#include "core/json.h"

_Static_assert(sizeof(mega_mixer_kind) == sizeof(int) && sizeof(mega_act) == sizeof(int),
               "enumerated config fields are read and written as int");

static int *ival(const mega_field *f, const void *base) { return (int *)((char *)(uintptr_t)base + f->offset); }
static float *fval(const mega_field *f, const void *base) { return (float *)((char *)(uintptr_t)base + f->offset); }

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
    }
}

/* the one rule of a field: its range (and 0 excluded for MEGA_FIELD_NONZERO), or its choices */
static mega_status field_check(const mega_field *f, const void *base) {
    if (f->type == MEGA_FIELD_FLOAT) {
        double v = *fval(f, base);
        if (!(v >= f->lo && v <= f->hi)) MEGA_FAIL(MEGA_ERR_INVALID, "%s must be in [%g, %g] (got %g)", f->name, f->lo, f->hi, v);
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
        case MEGA_FIELD_CHOICE: {
            char s[64];
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
