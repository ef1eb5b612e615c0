/* MultiHeadEMA layer: parameters, init (official reset_parameters), forward/backward/step. */
#include "layers/ema.h"

mega_status mega_ema_declare(mega_ema *e, mega_params *P, const char *prefix, int D, int N, int bidir, int K) {
    memset(e, 0, sizeof *e);
    if (N < 1 || N > 64) MEGA_FAIL(MEGA_ERR_INVALID, "n-dim must be in [1, 64] (got %d)", N);
    e->D = D, e->N = N, e->bidir = bidir, e->K = K > 0 ? K : 0;
    int64_t Dp = bidir ? 2 * (int64_t)D : D;
    unsigned f = MEGA_P_EMA;
    MEGA_TRY(MEGA_PADD(P, prefix, "delta", f, &e->delta, Dp, N, 1));
    MEGA_TRY(MEGA_PADD(P, prefix, "alpha", f, &e->alpha, Dp, N, 1));
    MEGA_TRY(MEGA_PADD(P, prefix, "beta", f, &e->beta, Dp, N, 1));
    MEGA_TRY(MEGA_PADD(P, prefix, "gamma", f, &e->gamma, Dp, N));
    MEGA_TRY(MEGA_PADD(P, prefix, "omega", f, &e->omega, D));
    return MEGA_OK;
}

void mega_ema_init(const mega_ema *e, real *W, mega_rng *rng) {
    size_t Dp = (size_t)(e->bidir ? 2 : 1) * e->D, N = (size_t)e->N;
    mega_fill_normal(W + e->delta, Dp * N, 0, 0.2, rng);
    mega_fill_normal(W + e->alpha, Dp * N, 0, 0.2, rng);
    /* beta ~ N(0, 0.02) + [1, -1, 1, -1, ...] over n ("seems more stable", official) */
    mega_fill_normal(W + e->beta, Dp * N, 0, 0.02, rng);
    for (size_t r = 0; r < Dp; r++)
        for (size_t n = 0; n < N; n++) W[e->beta + r * N + n] += (N > 1 && (n % 2)) ? -1 : 1;
    mega_fill_normal(W + e->gamma, Dp * N, 0, 1.0, rng);
    mega_fill_normal(W + e->omega, (size_t)e->D, 0, 1.0, rng);
}

static mega_ema_k kernel_of(const mega_ema *e, const real *W, const real *coef, int K) {
    mega_ema_k k;
    size_t S = (size_t)(e->bidir ? 2 : 1) * e->D * e->N;
    k.D = e->D, k.N = e->N, k.bidir = e->bidir, k.K = K;
    k.pb = coef, k.q = coef + S, k.gs = coef + 2 * S, k.qK = coef + 3 * S;
    k.omega = W + e->omega;
    return k;
}

size_t mega_ema_layer_ckpt_size(const mega_ema *e, int B, int T) {
    mega_ema_k k;
    memset(&k, 0, sizeof k);
    k.D = e->D, k.N = e->N, k.bidir = e->bidir;
    return mega_ema_ckpt_size(&k, B, T);
}

void mega_ema_layer_forward(const mega_ema *e, const real *W, real *coef, real *mpre, real *m, const real *x,
                            const uint8_t *pad, int B, int T, real *ckpt, int nthreads) {
    /* official: kernel length min(truncation, L) */
    int K = (e->K > 0 && e->K < T) ? e->K : 0;
    mega_ema_coef(coef, W + e->delta, W + e->alpha, W + e->beta, W + e->gamma, (e->bidir ? 2 : 1) * e->D, e->N, K);
    mega_ema_k k = kernel_of(e, W, coef, K);
    (void)nthreads;
    mega_ema_forward(&k, mpre, m, x, pad, B, T, NULL, ckpt);
}

size_t mega_ema_layer_scratch(const mega_ema *e, int T, int nthreads) {
    mega_ema_k k;
    memset(&k, 0, sizeof k);
    k.D = e->D, k.N = e->N;
    return mega_ema_bwd_scratch(&k, T, nthreads) + 4 * (size_t)(e->bidir ? 2 : 1) * e->D * e->N;
}

void mega_ema_layer_backward(const mega_ema *e, const real *W, real *dW, const real *coef, real *dx, const real *g,
                             const real *x, const uint8_t *pad, int B, int T, const real *ckpt, real *scratch,
                             int nthreads) {
    int K = (e->K > 0 && e->K < T) ? e->K : 0;
    int Dp = (e->bidir ? 2 : 1) * e->D;
    mega_ema_k k = kernel_of(e, W, coef, K);
    real *dcoef = scratch;
    size_t S4 = 4 * (size_t)Dp * e->N;
    memset(dcoef, 0, S4 * sizeof(real));
    mega_ema_backward(&k, dx, dcoef, dW + e->omega, g, x, pad, B, T, ckpt, scratch + S4, nthreads);
    mega_ema_coef_backward(dcoef, W + e->delta, W + e->alpha, W + e->beta, W + e->gamma, dW + e->delta,
                           dW + e->alpha, dW + e->beta, dW + e->gamma, Dp, e->N, K);
}

void mega_ema_layer_coef(const mega_ema *e, const real *W, real *coef, int K) {
    mega_ema_coef(coef, W + e->delta, W + e->alpha, W + e->beta, W + e->gamma, (e->bidir ? 2 : 1) * e->D, e->N, K);
}

void mega_ema_layer_step(const mega_ema *e, const real *W, const real *coef, real *state, real *mpre, real *m,
                         const real *x, int B, int T) {
    /* coef must be prepared untruncated (mega_ema_layer_coef with K = 0): the official
     * incremental path ignores truncation (SPEC §1.6) */
    MEGA_ASSERT(!e->bidir);
    mega_ema_k k = kernel_of(e, W, coef, 0);
    mega_ema_forward(&k, mpre, m, x, NULL, B, T, state, NULL);
}
