/* The parameter table (see params.h). */
#include "core/params.h"

void mega_params_init(mega_params *P) { memset(P, 0, sizeof *P); }

void mega_params_free(mega_params *P) {
    free(P->specs);
    mega__free(P->data);
    mega__free(P->grad);
    memset(P, 0, sizeof *P);
}

mega_status mega_params_add(mega_params *P, const char *prefix, const char *name, int ndim,
                            const int64_t *shape, unsigned flags, size_t *off) {
    if (P->data) MEGA_FAIL(MEGA_ERR_INVALID, "internal: parameter '%s' declared after allocation", name);
    if (ndim < 0 || ndim > 4) MEGA_FAIL(MEGA_ERR_INVALID, "internal: parameter '%s' has %d dims", name, ndim);
    mega_pspec *grown = mega__grow(P->specs, &P->cap, P->n, sizeof *P->specs, 64);
    if (!grown) MEGA_FAIL(MEGA_ERR_OOM, "out of memory declaring parameters");
    P->specs = grown;
    mega_pspec *s = &P->specs[P->n];
    memset(s, 0, sizeof *s);
    int w = snprintf(s->name, sizeof s->name, "%s%s", prefix ? prefix : "", name);
    if (w < 0 || (size_t)w >= sizeof s->name) MEGA_FAIL(MEGA_ERR_INVALID, "parameter name too long: %s%s", prefix, name);
    for (int i = 0; i < P->n; i++)
        if (!strcmp(P->specs[i].name, s->name)) MEGA_FAIL(MEGA_ERR_INVALID, "internal: duplicate parameter '%s'", s->name);
    s->ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) MEGA_FAIL(MEGA_ERR_INVALID, "parameter '%s' has a non-positive dimension", s->name);
        s->shape[i] = shape[i];
        if ((size_t)shape[i] > SIZE_MAX / numel / 8) MEGA_FAIL(MEGA_ERR_INVALID, "parameter '%s' is too large", s->name);
        numel *= (size_t)shape[i];
    }
    s->numel = numel;
    s->flags = flags;
    s->offset = (P->total + 15) & ~(size_t)15;
    P->total = s->offset + numel;
    P->n++;
    if (off) *off = s->offset;
    return MEGA_OK;
}

mega_status mega_params_alloc(mega_params *P, int with_grad) {
    P->total = (P->total + 15) & ~(size_t)15;
    P->data = mega__calloc(P->total ? P->total : 1, sizeof(real));
    if (!P->data) MEGA_FAIL(MEGA_ERR_OOM, "out of memory allocating %zu parameters", P->total);
    if (with_grad) {
        P->grad = mega__calloc(P->total ? P->total : 1, sizeof(real));
        if (!P->grad) MEGA_FAIL(MEGA_ERR_OOM, "out of memory allocating %zu gradients", P->total);
    }
    return MEGA_OK;
}

const mega_pspec *mega_params_find(const mega_params *P, const char *name) {
    for (int i = 0; i < P->n; i++)
        if (!strcmp(P->specs[i].name, name)) return &P->specs[i];
    return NULL;
}

void mega_params_zero_grad(mega_params *P) {
    if (P->grad) memset(P->grad, 0, P->total * sizeof(real));
}

size_t mega_params_count_trainable(const mega_params *P) {
    size_t n = 0;
    for (int i = 0; i < P->n; i++)
        if (!(P->specs[i].flags & MEGA_P_BUFFER)) n += P->specs[i].numel;
    return n;
}

static int shape_matches(const mega_pspec *s, const mega_st_tensor *t) {
    if (t->numel != s->numel) return 0;
    if (s->numel == 1) return 1; /* scalars: [] vs [1] */
    if (t->ndim != s->ndim) return 0;
    for (int i = 0; i < s->ndim; i++)
        if (t->shape[i] != s->shape[i]) return 0;
    return 1;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

mega_status mega_params_load(mega_params *P, real *dst, const mega_st_file *f, const char *prefix,
                             const char *const *ignore, int allow_extra) {
    char name[2 * MEGA_NAME_MAX];
    size_t plen = prefix ? strlen(prefix) : 0;
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", s->name);
        const mega_st_tensor *t = mega_st_get(f, name);
        if (!t) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "checkpoint has no tensor '%s' (the model config expects it)", name);
        if (!shape_matches(s, t)) {
            char a[96], b[96];
            fmt_shape(a, sizeof a, s->ndim, s->shape);
            fmt_shape(b, sizeof b, t->ndim, t->shape);
            MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has shape %s in the checkpoint but the model expects %s", name, b, a);
        }
        MEGA_TRY(mega_st_read_real(t, dst + s->offset, s->numel));
        for (size_t j = 0; j < s->numel; j++)
            if (!isfinite((double)dst[s->offset + j]))
                MEGA_FAIL(MEGA_ERR_NUMERIC, "tensor '%s' in the checkpoint holds non-finite values", name);
    }
    if (allow_extra) return MEGA_OK;
    for (int i = 0; i < mega_st_count(f); i++) {
        const mega_st_tensor *t = mega_st_at(f, i);
        if (plen && strncmp(t->name, prefix, plen)) goto unexpected;
        if (mega_params_find(P, t->name + plen)) continue;
        if (ignore) {
            int skip = 0;
            for (const char *const *g = ignore; *g; g++) {
                size_t gl = strlen(*g);
                size_t nl = strlen(t->name);
                /* an ignore entry matches a full name or a name suffix */
                if (nl >= gl && !strcmp(t->name + nl - gl, *g)) skip = 1;
            }
            if (skip) continue;
        }
    unexpected:
        MEGA_FAIL(MEGA_ERR_SHAPE, "checkpoint tensor '%s' does not belong to this model config", t->name);
    }
    return MEGA_OK;
}

mega_status mega_params_save(const mega_params *P, const real *src, mega_st_writer *w, const char *prefix) {
    char name[2 * MEGA_NAME_MAX];
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", s->name);
        size_t n = s->numel;
        if (s->flags & MEGA_P_I64) {
            int64_t v[1];
            MEGA_ASSERT(n == 1);
            v[0] = (int64_t)llround((double)src[s->offset]);
            MEGA_TRY(mega_st_writer_add(w, name, MEGA_DT_I64, s->ndim, s->shape, v));
        } else {
#ifdef MEGA_F64
            MEGA_TRY(mega_st_writer_add(w, name, MEGA_DT_F64, s->ndim, s->shape, src + s->offset));
#else
            MEGA_TRY(mega_st_writer_add(w, name, MEGA_DT_F32, s->ndim, s->shape, src + s->offset));
#endif
        }
    }
    return MEGA_OK;
}

const char *mega_params_info(const mega_params *P, int i, size_t *offset, size_t *numel, unsigned *flags) {
    if (i < 0 || i >= P->n) return NULL;
    const mega_pspec *s = &P->specs[i];
    if (offset) *offset = s->offset;
    if (numel) *numel = s->numel;
    if (flags) *flags = (s->flags & MEGA_P_DECAY ? 1u : 0u) | (s->flags & MEGA_P_BUFFER ? 2u : 0u);
    return s->name;
}
