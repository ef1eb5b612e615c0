/* The parameter table (see params.h). */
#include "core/params.h"

void mega_params_init(mega_params *P) { memset(P, 0, sizeof *P); }

void mega_params_free(mega_params *P) {
    if (P->quant && P->quant_free) P->quant_free(P->quant);
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
    /* (names are checked for duplicates once, by mega_params_alloc: a check here against every
     * earlier name made declaring n tensors cost n^2 / 2 string compares, seconds for a 1024-layer
     * config read from a small file) */
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

static int cmp_name_ptr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* every declared name once (an internal check of the layers' declarations), in O(n log n) */
static mega_status check_unique_names(const mega_params *P) {
    if (P->n < 2) return MEGA_OK;
    const char **v = malloc((size_t)P->n * sizeof *v);
    if (!v) MEGA_FAIL(MEGA_ERR_OOM, "out of memory declaring parameters");
    for (int i = 0; i < P->n; i++) v[i] = P->specs[i].name;
    qsort(v, (size_t)P->n, sizeof *v, cmp_name_ptr);
    for (int i = 1; i < P->n; i++)
        if (!strcmp(v[i - 1], v[i])) {
            mega_status st = mega__error(MEGA_ERR_INVALID, "internal: duplicate parameter '%s'", v[i]);
            free(v);
            return st;
        }
    free(v);
    return MEGA_OK;
}

mega_status mega_params_alloc(mega_params *P, int with_grad) {
    MEGA_TRY(check_unique_names(P));
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

void mega_params_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

int mega_params_is_float(mega_dtype t) {
    return t == MEGA_DT_F32 || t == MEGA_DT_F64 || t == MEGA_DT_F16 || t == MEGA_DT_BF16;
}

static int is_int(mega_dtype t) {
    return t == MEGA_DT_I64 || t == MEGA_DT_I32 || t == MEGA_DT_I16 || t == MEGA_DT_I8 || t == MEGA_DT_U8;
}

/* whether the file holds `name` as q8_0 blocks (MEGA_Q8_SUFFIX) instead of a tensor */
static int quantized_in(const mega_st_file *f, const char *name) {
    char q[2 * MEGA_NAME_MAX + 16];
    snprintf(q, sizeof q, "%s%s", name, MEGA_Q8_SUFFIX);
    return !mega_st_get(f, name) && mega_st_get(f, q);
}

/* the declared tensor a file's "<name>.q8_0" or "<name>.q8_0_scale" stands for, or NULL */
static const mega_pspec *quantized_of(const mega_params *P, const char *tname) {
    static const char *const sfx[] = {MEGA_Q8_SUFFIX, MEGA_Q8_SCALE_SUFFIX};
    char base[2 * MEGA_NAME_MAX];
    const size_t n = strlen(tname);
    for (int i = 0; i < 2; i++) {
        const size_t sl = strlen(sfx[i]);
        if (n <= sl || n - sl >= sizeof base || strcmp(tname + n - sl, sfx[i])) continue;
        memcpy(base, tname, n - sl);
        base[n - sl] = 0;
        return mega_params_find(P, base);
    }
    return NULL;
}

/* whether t is the ignore list's (a full name or a name suffix) */
static int ignored(const char *name, const char *const *ignore) {
    for (const char *const *g = ignore; g && *g; g++) {
        size_t gl = strlen(*g), nl = strlen(name);
        if (nl >= gl && !strcmp(name + nl - gl, *g)) return 1;
    }
    return 0;
}

mega_status mega_params_check(const mega_params *P, const mega_st_file *f, const char *prefix,
                              const char *const *ignore, int allow_extra) {
    char name[2 * MEGA_NAME_MAX];
    size_t plen = prefix ? strlen(prefix) : 0;
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", s->name);
        if (P->q8_ok && quantized_in(f, name)) continue; /* checked by mega__q8_load */
        const mega_st_tensor *t = mega_st_get(f, name);
        if (!t) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "checkpoint has no tensor '%s' (the model config expects it)", name);
        if (!shape_matches(s, t)) {
            char a[96], b[96];
            mega_params_fmt_shape(a, sizeof a, s->ndim, s->shape);
            mega_params_fmt_shape(b, sizeof b, t->ndim, t->shape);
            MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has shape %s in the checkpoint but the model expects %s", name, b, a);
        }
        /* no silent conversions: weights are floating point, integer buffers integers */
        if (s->flags & MEGA_P_I64) {
            if (!is_int(t->dtype))
                MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has dtype %s in the checkpoint but the model expects an integer (I64)",
                          name, mega_dtype_name(t->dtype));
        } else if (!mega_params_is_float(t->dtype)) {
            MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has dtype %s in the checkpoint but the model expects floating point "
                      "(F32, F64, F16 or BF16)", name, mega_dtype_name(t->dtype));
        }
    }
    if (allow_extra) return MEGA_OK;
    for (int i = 0; i < mega_st_count(f); i++) {
        const mega_st_tensor *t = mega_st_at(f, i);
        const int in_prefix = !plen || !strncmp(t->name, prefix, plen);
        if (in_prefix && (mega_params_find(P, t->name + plen) || ignored(t->name, ignore))) continue;
        if (in_prefix && P->q8_ok && quantized_of(P, t->name + plen)) continue;
        MEGA_FAIL(MEGA_ERR_SHAPE, "checkpoint tensor '%s' does not belong to this model config", t->name);
    }
    return MEGA_OK;
}

mega_status mega_params_read(const mega_params *P, real *dst, const mega_st_file *f, const char *prefix) {
    char name[2 * MEGA_NAME_MAX];
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", s->name);
        if (P->q8_ok && quantized_in(f, name)) continue; /* read by mega__q8_load */
        const mega_st_tensor *t = mega_st_get(f, name);
        if (!t) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "checkpoint has no tensor '%s' (the model config expects it)", name);
        MEGA_TRY(mega_st_read_real(t, dst + s->offset, s->numel));
        for (size_t j = 0; j < s->numel; j++)
            if (!isfinite((double)dst[s->offset + j]))
                MEGA_FAIL(MEGA_ERR_NUMERIC, "tensor '%s' in the checkpoint holds non-finite values", name);
    }
    return MEGA_OK;
}

mega_status mega_params_load(mega_params *P, real *dst, const mega_st_file *f, const char *prefix,
                             const char *const *ignore, int allow_extra) {
    MEGA_TRY(mega_params_check(P, f, prefix, ignore, allow_extra));
    return mega_params_read(P, dst, f, prefix);
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
