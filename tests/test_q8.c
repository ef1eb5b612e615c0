/*
 * q8_0 weights (src/ops/q8.c, src/model/quant.c, docs/quantization.md):
 *  - fp16 conversion: every finite half round-trips; rounding at the edges;
 *  - quantize / dequantize: the error of each weight at most 0.57 of its block's scale (half a
 *    step, plus the fp16 rounding of the scale), the padding of a partial block zero;
 *  - the build's kernel (AVX-512 VNNI / AVX-VNNI / AVX2 / portable) against the scalar reference
 *    of the same arithmetic: bit-identical, one row and through mega_q8_linear (4-row tiles, the
 *    rows left over, any number of activation rows, bias and accumulation);
 *  - against float32: within the bound the two roundings allow (derived below);
 *  - a model (byte-level; and word-level with adaptive input and softmax, whose cluster products
 *    go through mega_gemm): quantized, loaded (inference only; a training load refused), its full forward
 *    close to the float model's (loss within 0.01 nats) but not equal (the int8 path ran), the
 *    streaming step equal to the full forward, and corrupt quantized tensors refused.
 */
#include "core/internal.h"
#include "ops/q8.h"
#include "testlib.h"
#include <stdint.h>

static void test_half(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u) continue; /* inf, NaN */
        bad += mega_q8_f2h(mega_q8_h2f((uint16_t)h)) != h;
    }
    TL_CHECK(bad == 0, "fp16: every finite half round-trips (%d do not)", bad);
    TL_CHECK(mega_q8_f2h(1.0f) == 0x3c00 && mega_q8_f2h(65504.0f) == 0x7bff && mega_q8_f2h(65520.0f) == 0x7c00 &&
                 mega_q8_f2h(65519.0f) == 0x7bff && mega_q8_f2h(ldexpf(1, -24)) == 1 && mega_q8_f2h(ldexpf(1, -25)) == 0 &&
                 mega_q8_f2h(ldexpf(3, -25)) == 2 && mega_q8_f2h(1.0f + ldexpf(1, -11)) == 0x3c00 &&
                 mega_q8_f2h(1.0f + ldexpf(3, -11)) == 0x3c02,
             "fp16: the edges (max, overflow, subnormals, ties to even)");
}

static void fill(real *x, size_t n, unsigned long long *s, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(scale * tl_randn(s));
}

static void test_roundtrip(void) {
    unsigned long long s = 7;
    const size_t Ks[] = {1, 31, 32, 33, 100, 256};
    for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
        const size_t K = Ks[c], nb = mega_q8_blocks(K);
        real x[256], y[256];
        int8_t q[256 + 32];
        float d[8];
        fill(x, K, &s, 0.3);
        if (K > 40) x[5] = 0, x[40] = 2.5; /* a large value in a block */
        mega_q8_quantize_row(x, K, q, d, 1);
        mega_q8_dequantize_row(q, d, K, y);
        int ok = 1, pad = 1;
        for (size_t k = 0; k < K; k++) ok &= fabs((double)(x[k] - y[k])) <= 0.57 * d[k / 32] + 1e-12;
        for (size_t k = K; k < nb * 32; k++) pad &= q[k] == 0;
        for (size_t k = 0; k < nb * 32; k++) ok &= q[k] != -128;
        TL_CHECK(ok && pad, "quantize K=%zu: |x - dequantized| <= 0.57 d, values in [-127, 127], zero padding", K);
    }
    real z[40] = {0};
    int8_t q[64];
    float d[2];
    mega_q8_quantize_row(z, 40, q, d, 1);
    TL_CHECK(d[0] == 0 && d[1] == 0 && q[0] == 0 && q[39] == 0, "quantize: a zero block has scale 0 and values 0");
    z[3] = NAN;
    mega_q8_quantize_row(z, 40, q, d, 0);
    TL_CHECK(isnan(d[0]) && d[1] == 0, "quantize: a block with NaN gets a NaN scale (its products NaN)");
}

/* a quantized matrix of rows x K from random floats (half scales, as a file stores them) */
static void make_mat(mega_q8_mat *m, real *w, size_t rows, size_t K, unsigned long long *s) {
    m->w = w, m->rows = rows, m->K = K, m->nb = mega_q8_blocks(K);
    m->qs = malloc(rows * m->nb * 32);
    m->d = malloc(rows * m->nb * sizeof(float));
    fill(w, rows * K, s, 0.2);
    for (size_t r = 0; r < rows; r++) mega_q8_quantize_row(w + r * K, K, m->qs + r * m->nb * 32, m->d + r * m->nb, 1);
}

static void test_kernel(void) {
    unsigned long long s = 11;
    const size_t Ks[] = {32, 48, 256, 1000, 4096};
    const size_t Rs[] = {1, 3, 8, 17};
    for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++) {
        const size_t K = Ks[c], O = 70, nb = mega_q8_blocks(K); /* 70: 4-row tiles and 2 rows left over */
        real *w = malloc(O * K * sizeof(real)), *x = malloc(17 * K * sizeof(real));
        real *y = malloc(17 * O * sizeof(real)), bias[70];
        int8_t *xq = malloc(17 * nb * 32);
        float *xd = malloc(17 * nb * sizeof(float));
        mega_q8_mat m;
        make_mat(&m, w, O, K, &s);
        fill(x, 17 * K, &s, 1.0);
        fill(bias, O, &s, 1.0);
        for (size_t i = 0; i < 17; i++) mega_q8_quantize_row(x + i * K, K, xq + i * nb * 32, xd + i * nb, 0);
        int same1 = 1;
        for (size_t j = 0; j < O; j++)
            for (size_t i = 0; i < 3; i++)
                same1 &= mega_q8_dot(m.qs + j * nb * 32, m.d + j * nb, xq + i * nb * 32, xd + i * nb, nb) ==
                         mega_q8_dot_ref(m.qs + j * nb * 32, m.d + j * nb, xq + i * nb * 32, xd + i * nb, nb);
        TL_CHECK(same1, "K=%zu: mega_q8_dot (%s) bit-identical to the scalar reference", K, mega_q8_kernel());
        for (size_t r = 0; r < sizeof Rs / sizeof *Rs; r++) {
            const size_t R = Rs[r];
            int same = 1, sameb = 1, within = 1;
            double worst = 0;
            mega_q8_linear(&m, 0, O, x, R, NULL, 0, y, O, 1);
            for (size_t i = 0; i < R; i++)
                for (size_t j = 0; j < O; j++) {
                    const float ref = mega_q8_dot_ref(m.qs + j * nb * 32, m.d + j * nb, xq + i * nb * 32, xd + i * nb, nb);
                    same &= y[i * O + j] == (real)ref;
                    /* against float32: each weight within 0.57 dw of its value, each activation
                     * within 0.5 dx; the products' error is then at most sum |x| 0.57 dw + |w'| 0.5 dx
                     * (plus float sums, 1e-5 of sum |w x|) */
                    double f = 0, bound = 0, mag = 0;
                    for (size_t k = 0; k < K; k++) {
                        const double wk = (double)w[j * K + k], xk = (double)x[i * K + k];
                        const double wq = (double)m.d[j * nb + k / 32] * m.qs[j * nb * 32 + k];
                        f += wk * xk;
                        mag += fabs(wk * xk);
                        bound += fabs(xk) * 0.57 * m.d[j * nb + k / 32] + fabs(wq) * 0.5 * xd[i * nb + k / 32];
                    }
                    const double e = fabs((double)y[i * O + j] - f);
                    within &= e <= bound + 1e-5 * mag;
                    worst = fmax(worst, e / fmax(bound, 1e-30));
                }
            TL_CHECK(same, "K=%zu R=%zu: mega_q8_linear bit-identical to the reference", K, R);
            TL_CHECK(within, "K=%zu R=%zu: within the rounding bound of the float32 product (worst %.2f of it)", K, R, worst);
            for (size_t i = 0; i < R * O; i++) y[i] = 0.5;
            mega_q8_linear(&m, 0, O, x, R, bias, 0, y, O, 1);
            for (size_t i = 0; i < R; i++)
                for (size_t j = 0; j < O; j++)
                    sameb &= y[i * O + j] ==
                             (real)mega_q8_dot_ref(m.qs + j * nb * 32, m.d + j * nb, xq + i * nb * 32, xd + i * nb, nb) + bias[j];
            TL_CHECK(sameb, "K=%zu R=%zu: with a bias, the reference plus the bias", K, R);
        }
        /* a slice of rows (gmlp's halves) and accumulation (beta 1) */
        for (size_t i = 0; i < 2 * 30; i++) y[i] = 1.0;
        mega_q8_linear(&m, 40, 30, x, 2, NULL, 1, y, 30, 0);
        int acc = 1;
        for (size_t i = 0; i < 2; i++)
            for (size_t j = 0; j < 30; j++)
                acc &= y[i * 30 + j] == (real)mega_q8_dot_ref(m.qs + (40 + j) * nb * 32, m.d + (40 + j) * nb,
                                                             xq + i * nb * 32, xd + i * nb, nb) + (real)1;
        TL_CHECK(acc, "K=%zu: rows 40..69 accumulated into C (beta 1)", K);
        /* the registry: found by any row's address of the matrix, not past it */
        size_t r0 = 99;
        TL_CHECK(mega_q8_find(w, K, O, &r0) == NULL, "registry: nothing registered, nothing found");
        mega_q8_register(&m);
        const mega_q8_mat *f1 = mega_q8_find(w + 40 * K, K, 30, &r0);
        const int f_ok = f1 == &m && r0 == 40 && !mega_q8_find(w + 40 * K, K, 31, &r0) && !mega_q8_find(w + 1, K, 1, &r0) &&
                         !mega_q8_find(w, K + 1, 1, &r0);
        mega_q8_unregister(&m);
        TL_CHECK(f_ok && !mega_q8_find(w, K, O, &r0), "registry: rows found by address and width, unregistered gone");
        free(m.qs), free(m.d), free(w), free(x), free(y), free(xq), free(xd);
    }
}

/* ---- a model ------------------------------------------------------------------------------- */

static char dir[512];

/* adaptive: word-level style, adaptive input and softmax (bands 0-99, 100-199, 200-299; the
 * softmax's cluster products go through mega_gemm's A B^T form), tied as the WikiText-103 model */
static mega_lm *small_lm(int adaptive) {
    mega_lm_config c;
    mega_lm_config_default(&c);
    c.vocab_size = 257, c.padding_idx = 256;
    if (adaptive) {
        c.vocab_size = 300, c.padding_idx = 1, c.adaptive_input = 1, c.adaptive_input_factor = 2;
        c.adaptive_softmax_factor = 2, c.tie_adaptive_weights = 1, c.tie_adaptive_proj = 1;
        c.adaptive_input_cutoff[0] = c.adaptive_softmax_cutoff[0] = 100;
        c.adaptive_input_cutoff[1] = c.adaptive_softmax_cutoff[1] = 200;
        c.adaptive_input_cutoff[2] = c.adaptive_softmax_cutoff[2] = 0;
    }
    /* widths with and without a partial block: 48 (ffn) and 80 (hidden) */
    c.layers = 2, c.block.embed_dim = 64, c.block.z_dim = 32, c.block.hidden_dim = 80, c.block.n_dim = 4;
    c.block.ffn_dim = 48, c.block.chunk_size = 8, c.block.max_positions = 64;
    mega_lm *m = NULL;
    TL_CHECK(mega_lm_create(&c, &m) == MEGA_OK, "create the model");
    if (m) mega_lm_init_params(m, 3);
    return m;
}

enum { B = 2, T = 24 };

/* logits of a full forward (eval) and the loss over tokens[1:] */
static double forward(mega_lm *m, const int32_t *tok, mega_real *logits, int V) {
    const mega_lm_run run = {0};
    double loss = 0;
    int64_t n = 0;
    int32_t tgt[B * T];
    for (int i = 0; i < B * T; i++) tgt[i] = (i % T) + 1 < T ? tok[i + 1] : -1;
    if (mega_lm_forward(m, tok, tgt, B, T, &run, &loss, &n) != MEGA_OK) return NAN;
    memcpy(logits, mega_lm_logits(m), sizeof(mega_real) * B * T * (size_t)V);
    return loss;
}

static double max_abs(const mega_real *a, size_t n) {
    double r = 0;
    for (size_t i = 0; i < n; i++) r = fmax(r, fabs((double)a[i]));
    return r;
}

static double max_diff(const mega_real *a, const mega_real *b, size_t n) {
    double r = 0;
    for (size_t i = 0; i < n; i++) r = fmax(r, fabs((double)a[i] - (double)b[i]));
    return r;
}

static void test_model(int adaptive) {
    mega_lm *f = small_lm(adaptive);
    if (!f) return;
    const char *tag = adaptive ? "adaptive: " : "";
    const int V = adaptive ? 300 : 257;
    const char *fp = tl_path(dir, "f.safetensors"), *qp = tl_path(dir, adaptive ? "qa.safetensors" : "q.safetensors");
    size_t nq = 0;
    /* plain: embedding, output projection, per layer v, mx, h, fc1, fc2; adaptive: the 10 block
     * matrices, the embeddings and projections of the bands of width 64 and 32 (not 16: rows
     * shorter than a block stay float32) and the softmax head's cluster rows */
    const size_t want = adaptive ? 15 : 12;
    const int saved = mega_lm_save(f, fp) == MEGA_OK, quantized = saved && mega_model_quantize(fp, qp, NULL, &nq) == MEGA_OK;
    if (!quantized) printf("%s\n", mega_last_error());
    TL_CHECK(quantized && nq == want,
             "%squantize: %zu matrices (%zu)", tag, want, nq);
    TL_CHECK(mega_model_quantize(qp, tl_path(dir, "qq.safetensors"), NULL, NULL) != MEGA_OK,
             "quantize refuses a quantized model: %s", mega_last_error());
    TL_CHECK(mega_model_quantize(fp, tl_path(dir, "q4.safetensors"), "q4_7", NULL) != MEGA_OK, "quantize refuses an unknown type");
    mega_lm *bad = NULL;
    const mega_status st = mega_lm_load(qp, &bad);
    TL_CHECK(st == MEGA_ERR_INVALID && strstr(mega_last_error(), "quantized"), "a training load refuses it: %s", mega_last_error());
    mega_lm_free(bad);
    const mega_load_opts inf = {1, 0};
    mega_lm *q = NULL;
    mega_model *qm = NULL;
    TL_CHECK(mega_lm_load_ex(qp, &inf, &q) == MEGA_OK, "an inference load reads it");
    if (!q) return mega_lm_free(f);
    TL_CHECK(mega_model_load_ex(qp, &inf, &qm) == MEGA_OK && mega_model_quantization(qm) &&
                 !strcmp(mega_model_quantization(qm), "q8_0") && !mega_model_quantization(mega_lm_model(f)),
             "mega_model_quantization: q8_0 for it, NULL for the float model");
    mega_model_free(qm);
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 37 + 11) % 256;
    const size_t n = (size_t)B * T * (size_t)V;
    mega_real *lf = malloc(n * sizeof *lf), *lq = malloc(n * sizeof *lq), *ls = malloc(n * sizeof *ls);
    const double loss_f = forward(f, tok, lf, V), loss_q = forward(q, tok, lq, V);
    const double dl = max_diff(lf, lq, n), mag = max_abs(lf, n);
    TL_CHECK(fabs(loss_q - loss_f) <= 0.01 && dl > 0 && dl <= 0.02 * mag,
             "%sfull forward: loss %.6f vs float %.6f (within 0.01), logits differ by %.3g of max |logit| (0 < d <= 2%%)", tag, loss_q,
             loss_f, dl / mag);
    /* the streaming step against the full forward of the same quantized model: both quantize the
     * same activations row by row; an activation that lands on a rounding boundary of its block
     * may round the other way after a float op that rounded differently (one step: d/127 of
     * the block's largest value), hence 1e-3 of max |logit| rather than BT_STOL */
    mega_lm_stream *s = NULL;
    double ds = INFINITY;
    if (mega_lm_stream_new(q, B, T, &s) == MEGA_OK) {
        mega_real *step = malloc((size_t)B * (size_t)V * sizeof *step);
        for (int t = 0; t < T; t++) {
            int32_t tt[B];
            for (int b = 0; b < B; b++) tt[b] = tok[b * T + t];
            mega_lm_stream_feed(s, tt, 1, step);
            for (int b = 0; b < B; b++) memcpy(ls + ((size_t)b * T + t) * V, step + (size_t)b * V, (size_t)V * sizeof *step);
        }
        ds = max_diff(ls, lq, n);
        free(step);
        mega_lm_stream_free(s);
    }
    TL_CHECK(ds <= 1e-3 * max_abs(lq, n), "%sstreaming step == full forward of the quantized model (%.3g of max |logit|)",
             tag, ds / max_abs(lq, n));
    free(lf), free(lq), free(ls);
    mega_lm_free(q);
    mega_lm_free(f);
}

/* ---- corrupt files: the quantized file rewritten with one tensor changed ---------------------- */

typedef enum { C_MINUS128, C_PADDING, C_NEG_SCALE, C_INF_SCALE, C_DTYPE, C_SHAPE, C_NO_SCALE, C_META } corruption;

static mega_status write_corrupt(const char *in, const char *out, corruption c) {
    mega_st_file *f;
    MEGA_TRY(mega_st_open(in, &f));
    mega_st_writer *w = mega_st_writer_new();
    for (int i = 0; i < mega_st_meta_count(f); i++) {
        const char *k = mega_st_meta_key(f, i);
        mega_st_writer_meta(w, k, c == C_META && !strcmp(k, "quantization") ? "q9_9" : mega_st_meta(f, k));
    }
    mega_status st = MEGA_OK;
    int done = 0;
    for (int i = 0; i < mega_st_count(f) && !st; i++) {
        const mega_st_tensor *t = mega_st_at(f, i);
        const size_t l = strlen(t->name);
        const int is_q = l > 5 && !strcmp(t->name + l - 5, ".q8_0"), is_d = l > 11 && !strcmp(t->name + l - 11, ".q8_0_scale");
        /* fc2 (K = 48, a partial block) is the one changed */
        const int target = strstr(t->name, "fc2") != NULL && !done;
        unsigned char *data = malloc(t->nbytes ? t->nbytes : 1);
        memcpy(data, t->data, t->nbytes);
        mega_dtype dt = t->dtype;
        int64_t shape[8];
        memcpy(shape, t->shape, sizeof shape);
        if (target && is_q && c == C_MINUS128) data[3] = 0x80, done = 1;
        if (target && is_q && c == C_PADDING) data[50] = 1, done = 1; /* column 50 of row 0: past K = 48 */
        if (target && is_q && c == C_DTYPE) dt = MEGA_DT_U8, done = 1;
        if (target && is_q && c == C_SHAPE) shape[1] = 48, done = 1; /* [rows, K]: fewer bytes, the same rows */
        if (target && is_d && c == C_NEG_SCALE) data[1] |= 0x80, done = 1;
        if (target && is_d && c == C_INF_SCALE) data[2] = 0, data[3] = 0x7c, done = 1;
        if (target && is_d && c == C_NO_SCALE) {
            done = 1;
            free(data);
            continue;
        }
        st = mega_st_writer_add(w, t->name, dt, t->ndim, shape, data);
        free(data);
    }
    if (!st) st = mega_st_writer_write(w, out);
    mega_st_writer_free(w);
    mega_st_close(f);
    return st;
}

static void test_corrupt(void) {
    static const char *what[] = {"a value -128", "a non-zero padding value", "a negative scale", "an infinite scale",
                                 "values as U8",  "values not padded to blocks", "no scales",   "an unknown quantization"};
    const char *qp = tl_path(dir, "q.safetensors");
    for (int c = C_MINUS128; c <= C_META; c++) {
        const char *bp = tl_path(dir, "bad.safetensors");
        const mega_status wst = write_corrupt(qp, bp, (corruption)c);
        const mega_load_opts inf = {1, 0};
        mega_lm *m = NULL;
        const mega_status st = wst ? MEGA_OK : mega_lm_load_ex(bp, &inf, &m);
        TL_CHECK(!wst && st != MEGA_OK && !m, "refused: %s (%s)", what[c], wst ? "not written" : mega_last_error());
        mega_lm_free(m);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    test_half();
    test_roundtrip();
    test_kernel();
    if (tl_mkdtemp(dir, sizeof dir, "mega_q8_") == 0) {
        test_model(0);
        test_model(1);
        test_corrupt();
        tl_rm_rf(dir);
    }
    return tl_finish();
}
