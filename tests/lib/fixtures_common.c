#include "fixtures_common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int fx_open(fx_case *c, const char *dir) {
    char p[1200];
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    const char *slash = strrchr(dir, '/');
    snprintf(c->name, sizeof c->name, "%s", slash ? slash + 1 : dir);
    snprintf(p, sizeof p, "%s/case.json", dir);
    char *txt = (char *)tl_read_file(p, NULL);
    if (!txt) {
        printf("FAIL %s: cannot read case.json\n", c->name);
        return -1;
    }
    c->json = cJSON_Parse(txt);
    free(txt);
    if (!c->json) {
        printf("FAIL %s: case.json is not valid JSON\n", c->name);
        return -1;
    }
    c->cfg = cJSON_GetObjectItemCaseSensitive(c->json, "config");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c->json, "dtype");
    c->f64 = cJSON_IsString(dt) && !strcmp(dt->valuestring, "float64");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(c->json, "batch");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(c->json, "seq_len");
    c->B = cJSON_IsNumber(b) ? b->valueint : 0;
    c->T = cJSON_IsNumber(l) ? l->valueint : 0;
    snprintf(p, sizeof p, "%s/weights.safetensors", dir);
    if (mega_st_open(p, &c->w) != MEGA_OK) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        return -1;
    }
    snprintf(p, sizeof p, "%s/io.safetensors", dir);
    if (mega_st_open(p, &c->io) != MEGA_OK) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        return -1;
    }
    /* tolerances: 1e-4 of each tensor's largest magnitude whenever float32 is involved
     * (the reference or this build); float64 against float64 must agree to ~1e-10 */
#ifdef MEGA_F64
    c->tol = c->f64 ? 1e-9 : 1e-4;
#else
    c->tol = 1e-4;
#endif
    c->noise_abs = 1e-6;
    return 0;
}

void fx_close(fx_case *c) {
    cJSON_Delete(c->json);
    mega_st_close(c->w);
    mega_st_close(c->io);
}

static const cJSON *cfg_item(const fx_case *c, const char *key) { return cJSON_GetObjectItemCaseSensitive(c->cfg, key); }
int fx_cfg_int(const fx_case *c, const char *key, int dflt) {
    const cJSON *v = cfg_item(c, key);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}
double fx_cfg_num(const fx_case *c, const char *key, double dflt) {
    const cJSON *v = cfg_item(c, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}
const char *fx_cfg_str(const fx_case *c, const char *key, const char *dflt) {
    const cJSON *v = cfg_item(c, key);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}
int fx_cfg_bool(const fx_case *c, const char *key, int dflt) {
    const cJSON *v = cfg_item(c, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    if (cJSON_IsNumber(v)) return v->valueint != 0;
    return dflt;
}
int fx_is_noise(const fx_case *c, const char *param) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(c->json, "noise_gradients");
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) if (cJSON_IsString(it) && !strcmp(it->valuestring, param)) return 1;
    return 0;
}

mega_real *fx_tensor(const fx_case *c, const char *name, size_t *n) {
    const mega_st_tensor *t = mega_st_get(c->io, name);
    if (!t) return NULL;
    mega_real *x = malloc((t->numel ? t->numel : 1) * sizeof(mega_real));
    if (mega_st_read_real(t, x, t->numel) != MEGA_OK) {
        free(x);
        return NULL;
    }
    if (n) *n = t->numel;
    return x;
}

uint8_t *fx_mask(const fx_case *c, const char *name, size_t n) {
    const mega_st_tensor *t = mega_st_get(c->io, name);
    if (!t || t->numel != n) return NULL;
    int32_t *tmp = malloc(n * sizeof(int32_t));
    uint8_t *m = malloc(n);
    mega_st_read_i32(t, tmp, n);
    for (size_t i = 0; i < n; i++) m[i] = tmp[i] != 0;
    free(tmp);
    return m;
}

int32_t *fx_ints(const fx_case *c, const char *name, size_t *n) {
    const mega_st_tensor *t = mega_st_get(c->io, name);
    if (!t) return NULL;
    int32_t *v = malloc((t->numel ? t->numel : 1) * sizeof(int32_t));
    if (mega_st_read_i32(t, v, t->numel) != MEGA_OK) {
        free(v);
        return NULL;
    }
    if (n) *n = t->numel;
    return v;
}

double fx_compare(fx_case *c, const char *what, const mega_real *got, const mega_real *ref, size_t n, int noise) {
    double mx = 0, rm = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= mx)) mx = d, at = i; /* NaN wins */
        if (fabs((double)ref[i]) > rm) rm = fabs((double)ref[i]);
    }
    double rel = rm > 0 ? mx / rm : mx;
    int ok;
    if (noise) {
        ok = mx <= c->noise_abs; /* caller scales noise_abs */
        rel = 0;
    } else {
        ok = rel <= c->tol;
    }
    if (tl_verbose || !ok)
        printf("%s %s/%s: max abs %.3e, ref max %.3e, rel %.3e%s (at %zu: got %.8g ref %.8g)\n", ok ? "  ok" : "FAIL",
               c->name, what, mx, rm, rel, noise ? " [noise gradient, absolute]" : "", at, n ? (double)got[at] : 0.0,
               n ? (double)ref[at] : 0.0);
    if (!ok) c->failed = 1;
    if (!noise && !(rel <= c->worst)) {
        c->worst = rel;
        snprintf(c->worst_name, sizeof c->worst_name, "%s", what);
    }
    return rel;
}

void fx_compare_grads(fx_case *c, const mega_params *P, const char *prefix) {
    char name[512];
    /* the noise tolerance is relative to the case's largest gradient magnitude */
    double gmax = 0;
    for (int i = 0; i < mega_st_count(c->io); i++) {
        const mega_st_tensor *t = mega_st_at(c->io, i);
        if (strncmp(t->name, "grad.", 5)) continue;
        mega_real *r = fx_tensor(c, t->name, NULL);
        for (size_t j = 0; j < t->numel; j++)
            if (fabs((double)r[j]) > gmax) gmax = fabs((double)r[j]);
        free(r);
    }
    int seen = 0;
    for (int i = 0; i < mega_st_count(c->io); i++) {
        const mega_st_tensor *t = mega_st_at(c->io, i);
        if (strncmp(t->name, "grad.", 5)) continue;
        const char *pname = t->name + 5;
        size_t pl = strlen(prefix);
        const mega_pspec *s = NULL;
        if (!strncmp(pname, prefix, pl)) s = mega_params_find(P, pname + pl);
        if (!s) {
            printf("FAIL %s: reference gradient %s has no parameter here\n", c->name, t->name);
            c->failed = 1;
            continue;
        }
        size_t n = 0;
        mega_real *ref = fx_tensor(c, t->name, &n);
        if (n != s->numel) {
            printf("FAIL %s: gradient %s size %zu vs %zu\n", c->name, t->name, n, s->numel);
            c->failed = 1;
            free(ref);
            continue;
        }
        int noise = fx_is_noise(c, pname);
        double save = c->noise_abs;
        if (noise) c->noise_abs = 1e-6 * gmax;
        snprintf(name, sizeof name, "%s", t->name);
        fx_compare(c, name, P->grad + s->offset, ref, n, noise);
        c->noise_abs = save;
        free(ref);
        seen++;
    }
    /* every trainable parameter must have a reference gradient */
    for (int i = 0; i < P->n; i++) {
        if (P->specs[i].flags & MEGA_P_BUFFER) continue;
        snprintf(name, sizeof name, "grad.%s%s", prefix, P->specs[i].name);
        if (!mega_st_get(c->io, name)) {
            printf("FAIL %s: no reference gradient for %s\n", c->name, name);
            c->failed = 1;
        }
    }
    (void)seen;
}

static int cmp_str(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

int fx_list(const char *root, char names[][1024], int max) {
    int n = 0;
    char p[2048];
    snprintf(p, sizeof p, "%s/case.json", root);
    struct stat st;
    if (stat(p, &st) == 0) { /* root itself is a case */
        snprintf(names[n++], 1024, "%s", root);
        return n;
    }
    DIR *d = opendir(root);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s/case.json", root, e->d_name);
        if (stat(p, &st) == 0) snprintf(names[n++], 1024, "%s/%s", root, e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, 1024, cmp_str);
    return n;
}
