/* Models with q8_0 weights (docs/quantization.md): `mega quantize` writes them
 * (mega_model_quantize), every load of a model reads them (mega__q8_load, through
 * mega__model_fill). A matrix "<name>" of rows x K is two tensors in the file:
 *   "<name>.q8_0"       I8  [rows, nb * 32]  the values, each row's last block zero padded
 *   "<name>.q8_0_scale" F16 [rows, nb]       one scale per block of 32 (nb = ceil(K / 32))
 * and __metadata__ "quantization" = "q8_0". Loaded, such a matrix is kept as blocks (ops/q8.h,
 * which the products of forward and decoding use) and dequantized once into the float parameter
 * buffer (for what reads weights otherwise: embedding lookups, the few products outside
 * mega_linear_forward / _step, mega_model_save). */
#include "model/modelio.h"
#include "ops/q8.h"

typedef struct {
    int n;
    mega_q8_mat *m;
} q8set;

static void q8set_free(void *p) {
    q8set *s = p;
    for (int i = 0; i < s->n; i++) {
        mega_q8_unregister(&s->m[i]);
        free(s->m[i].qs);
        free(s->m[i].d);
    }
    free(s->m);
    free(s);
}

int mega__q8_in_file(const mega_st_file *f) {
    if (mega_st_meta(f, "quantization")) return 1;
    const size_t sl = strlen(MEGA_Q8_SUFFIX);
    for (int i = 0; i < mega_st_count(f); i++) {
        const char *n = mega_st_at(f, i)->name;
        const size_t l = strlen(n);
        if (l > sl && !strcmp(n + l - sl, MEGA_Q8_SUFFIX)) return 1;
    }
    return 0;
}

/* the pair of one matrix, checked as hostile input: dtypes, shapes, values in [-127, 127], zero
 * padding, finite non-negative scales */
static mega_status check_pair(const mega_pspec *s, const mega_st_tensor *q, const mega_st_tensor *d) {
    if (s->ndim != 2)
        MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' is stored as q8_0 but the model declares %d dimensions (q8_0 is for matrices)",
                  s->name, s->ndim);
    if (!d) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "tensor '%s%s' has no scales ('%s%s')", s->name, MEGA_Q8_SUFFIX, s->name,
                      MEGA_Q8_SCALE_SUFFIX);
    const size_t rows = (size_t)s->shape[0], K = (size_t)s->shape[1], nb = mega_q8_blocks(K);
    if (q->dtype != MEGA_DT_I8 || q->ndim != 2 || (size_t)q->shape[0] != rows || (size_t)q->shape[1] != nb * 32)
        MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s%s' must be I8 [%zu, %zu] (the model's [%zu, %zu] in blocks of 32), not %s "
                  "with %d dimensions", s->name, MEGA_Q8_SUFFIX, rows, nb * 32, rows, K, mega_dtype_name(q->dtype), q->ndim);
    if (d->dtype != MEGA_DT_F16 || d->ndim != 2 || (size_t)d->shape[0] != rows || (size_t)d->shape[1] != nb)
        MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s%s' must be F16 [%zu, %zu], not %s with %d dimensions", s->name,
                  MEGA_Q8_SCALE_SUFFIX, rows, nb, mega_dtype_name(d->dtype), d->ndim);
    const int8_t *v = q->data;
    for (size_t r = 0; r < rows; r++)
        for (size_t k = 0; k < nb * 32; k++) {
            const int8_t x = v[r * nb * 32 + k];
            if (x == -128)
                MEGA_FAIL(MEGA_ERR_FORMAT, "tensor '%s%s' holds -128 (q8_0 values are in [-127, 127])", s->name, MEGA_Q8_SUFFIX);
            if (k >= K && x)
                MEGA_FAIL(MEGA_ERR_FORMAT, "tensor '%s%s' has a non-zero value in the padding of row %zu (past column %zu)",
                          s->name, MEGA_Q8_SUFFIX, r, K);
        }
    const unsigned char *h = d->data;
    for (size_t i = 0; i < rows * nb; i++) {
        const float x = mega_q8_h2f((uint16_t)(h[2 * i] | h[2 * i + 1] << 8));
        if (!isfinite(x) || x < 0)
            MEGA_FAIL(MEGA_ERR_NUMERIC, "tensor '%s%s' holds a scale that is negative or not finite", s->name,
                      MEGA_Q8_SCALE_SUFFIX);
    }
    return MEGA_OK;
}

/* the blocks of a checked pair into m, their values into dst (rows x K floats) */
static mega_status take_pair(const mega_pspec *s, const mega_st_tensor *q, const mega_st_tensor *d, real *dst,
                             mega_q8_mat *m) {
    const size_t rows = (size_t)s->shape[0], K = (size_t)s->shape[1], nb = mega_q8_blocks(K);
    m->w = dst;
    m->rows = rows, m->K = K, m->nb = nb;
    m->qs = malloc(MEGA_MAX(rows * nb * 32, (size_t)1));
    m->d = malloc(MEGA_MAX(rows * nb, (size_t)1) * sizeof(float));
    if (!m->qs || !m->d) MEGA_FAIL(MEGA_ERR_OOM, "out of memory for the q8_0 blocks of '%s'", s->name);
    memcpy(m->qs, q->data, rows * nb * 32);
    const unsigned char *h = d->data;
    for (size_t i = 0; i < rows * nb; i++) m->d[i] = mega_q8_h2f((uint16_t)(h[2 * i] | h[2 * i + 1] << 8));
    for (size_t r = 0; r < rows; r++) mega_q8_dequantize_row(m->qs + r * nb * 32, m->d + r * nb, K, dst + r * K);
    return MEGA_OK;
}

mega_status mega__q8_load(mega_params *P, const mega_st_file *f) {
    const char *type = mega_st_meta(f, "quantization");
    if (type && strcmp(type, "q8_0"))
        MEGA_FAIL(MEGA_ERR_FORMAT, "quantization '%.40s' in the metadata is not one this build reads (q8_0)", type);
    q8set *set = calloc(1, sizeof *set);
    if (set) set->m = calloc((size_t)P->n, sizeof *set->m);
    if (!set || !set->m) {
        free(set);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    P->quant = set;
    P->quant_free = q8set_free;
    char name[2 * MEGA_NAME_MAX + 16];
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        snprintf(name, sizeof name, "%s%s", s->name, MEGA_Q8_SUFFIX);
        const mega_st_tensor *q = mega_st_get(f, name);
        if (!q || mega_st_get(f, s->name)) continue; /* a float tensor (read by mega_params_read) */
        snprintf(name, sizeof name, "%s%s", s->name, MEGA_Q8_SCALE_SUFFIX);
        const mega_st_tensor *d = mega_st_get(f, name);
        MEGA_TRY(check_pair(s, q, d));
        mega_q8_mat *m = &set->m[set->n++];
        MEGA_TRY(take_pair(s, q, d, P->data + s->offset, m));
        MEGA_TRY(mega_q8_register(m));
    }
    return MEGA_OK;
}

/* ---- mega quantize ------------------------------------------------------------------------------ */

/* the matrices q8_0 stores: the projections and embeddings (2-D, weight-decayed), rows of at
 * least one block; vectors, EMA parameters and buffers stay float32 */
static int quantizable(const mega_pspec *s) {
    return s->ndim == 2 && (s->flags & MEGA_P_DECAY) && !(s->flags & (MEGA_P_BUFFER | MEGA_P_I64)) &&
           s->shape[1] >= MEGA_Q8_BLOCK;
}

/* one matrix's pair into the writer */
static mega_status write_pair(const mega_pspec *s, const real *x, mega_st_writer *w) {
    const size_t rows = (size_t)s->shape[0], K = (size_t)s->shape[1], nb = mega_q8_blocks(K);
    int8_t *q = malloc(rows * nb * 32);
    float *d = malloc(nb * sizeof(float));
    uint16_t *h = malloc(rows * nb * sizeof(uint16_t));
    mega_status st = q && d && h ? MEGA_OK : mega__error(MEGA_ERR_OOM, "out of memory");
    for (size_t r = 0; r < rows && !st; r++) {
        mega_q8_quantize_row(x + r * K, K, q + r * nb * 32, d, 1);
        for (size_t b = 0; b < nb; b++) {
            if (!(d[b] <= 65504.0f))
                st = mega__error(MEGA_ERR_NUMERIC, "tensor '%s' row %zu: a block's scale (%g) does not fit fp16", s->name,
                                 r, (double)d[b]);
            h[r * nb + b] = mega_q8_f2h(d[b]);
        }
    }
    char name[2 * MEGA_NAME_MAX + 16];
    const int64_t qs[2] = {(int64_t)rows, (int64_t)(nb * 32)}, ds[2] = {(int64_t)rows, (int64_t)nb};
    snprintf(name, sizeof name, "%s%s", s->name, MEGA_Q8_SUFFIX);
    if (!st) st = mega_st_writer_add(w, name, MEGA_DT_I8, 2, qs, q);
    snprintf(name, sizeof name, "%s%s", s->name, MEGA_Q8_SCALE_SUFFIX);
    if (!st) st = mega_st_writer_add(w, name, MEGA_DT_F16, 2, ds, h);
    free(q), free(d), free(h);
    return st;
}

static mega_status write_quantized(const mega_params *P, const mega_st_file *f, const char *out, size_t *nq) {
    mega_st_writer *w = mega_st_writer_new();
    if (!w) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    mega_status st = MEGA_OK;
    for (int i = 0; i < mega_st_meta_count(f) && !st; i++) {
        const char *k = mega_st_meta_key(f, i);
        if (strcmp(k, "quantization")) st = mega_st_writer_meta(w, k, mega_st_meta(f, k));
    }
    if (!st) st = mega_st_writer_meta(w, "quantization", "q8_0");
    *nq = 0;
    for (int i = 0; i < P->n && !st; i++) {
        const mega_pspec *s = &P->specs[i];
        if (quantizable(s)) {
            st = write_pair(s, P->data + s->offset, w);
            ++*nq;
        } else if (s->flags & MEGA_P_I64) {
            const int64_t v = (int64_t)llround((double)P->data[s->offset]);
            st = mega_st_writer_add(w, s->name, MEGA_DT_I64, s->ndim, s->shape, &v);
        } else {
#ifdef MEGA_F64
            st = mega_st_writer_add(w, s->name, MEGA_DT_F64, s->ndim, s->shape, P->data + s->offset);
#else
            st = mega_st_writer_add(w, s->name, MEGA_DT_F32, s->ndim, s->shape, P->data + s->offset);
#endif
        }
    }
    if (!st) st = mega_st_writer_write(w, out);
    mega_st_writer_free(w);
    return st;
}

mega_status mega_model_quantize(const char *in, const char *out, const char *type, size_t *matrices) {
    size_t nq_local;
    size_t *nq = matrices ? matrices : &nq_local;
    *nq = 0;
    if (type && strcmp(type, "q8_0")) MEGA_FAIL(MEGA_ERR_INVALID, "quantization type '%s': this build writes q8_0", type);
    mega_st_file *f;
    MEGA_TRY(mega__model_st_open(in, &f));
    if (mega__q8_in_file(f)) {
        mega_st_close(f);
        MEGA_FAIL(MEGA_ERR_INVALID, "%s is already quantized", in);
    }
    const mega_load_opts o = {1, 0};
    mega_model *m;
    mega_status st = mega_model_load_ex(in, &o, &m);
    if (!st) {
        st = write_quantized(mega__kind(m->kind)->params(m), f, out, nq);
        mega_model_free(m);
    }
    mega_st_close(f);
    return st;
}

const char *mega_model_quantization(const mega_model *m) {
    const mega_params *P = mega__kind(m->kind)->params((mega_model *)m);
    return P->quant && ((const q8set *)P->quant)->n ? "q8_0" : NULL;
}
