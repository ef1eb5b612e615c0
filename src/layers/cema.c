/* MultiHeadComplexEMA layer: parameters, init (official _reset_parameters), forward/backward/step. */
#include "layers/cema.h"

mega_status mega_cema_declare(mega_cema *e, mega_params *P, const char *prefix, int D, int N) {
    memset(e, 0, sizeof *e);
    if (N < 1 || N > 64) MEGA_FAIL(MEGA_ERR_INVALID, "cema n-dim must be in [1, 64] (got %d)", N);
    e->D = D, e->N = N;
    unsigned f = MEGA_P_EMA;
    /* official shapes: alpha, delta [D,N,1], theta [D,1,1], gamma [D,N,2] (re, im), omega [D,1] */
    MEGA_TRY(MEGA_PADD(P, prefix, "alpha", f, &e->alpha, D, N, 1));
    MEGA_TRY(MEGA_PADD(P, prefix, "delta", f, &e->delta, D, N, 1));
    MEGA_TRY(MEGA_PADD(P, prefix, "theta", f, &e->theta, D, 1, 1));
    MEGA_TRY(MEGA_PADD(P, prefix, "gamma", f, &e->gamma, D, N, 2));
    MEGA_TRY(MEGA_PADD(P, prefix, "omega", f, &e->omega, D, 1));
    return MEGA_OK;
}

void mega_cema_init(const mega_cema *e, real *W, mega_rng *rng) {
    const size_t D = (size_t)e->D, N = (size_t)e->N;
    mega_fill_normal(W + e->alpha, D * N, 0, 0.2, rng);
    mega_fill_normal(W + e->delta, D * N, 0, 0.2, rng);
    /* theta: frequencies exp(-i log(D)/D), i = 1..D, in a random permutation over channels,
     * stored as their logit (official _reset_parameters) */
    for (size_t d = 0; d < D; d++) {
        double f = exp(-(double)(d + 1) * log((double)D) / (double)D);
        W[e->theta + d] = (real)log(f / (1.0 - f));
    }
    for (size_t d = D; d > 1; d--) { /* Fisher-Yates */
        size_t j = (size_t)mega_rng_below(rng, d);
        real t = W[e->theta + d - 1];
        W[e->theta + d - 1] = W[e->theta + j], W[e->theta + j] = t;
    }
    /* gamma ~ N(0, 1) with the imaginary part 0 */
    for (size_t i = 0; i < D * N; i++) {
        W[e->gamma + 2 * i] = (real)mega_rng_normal(rng);
        W[e->gamma + 2 * i + 1] = 0;
    }
    /* omega ~ N(0, 0.25) truncated to [-1, 1] (nn.init.trunc_normal_ redraws outside) */
    for (size_t d = 0; d < D; d++) {
        double v;
        do v = 0.25 * mega_rng_normal(rng);
        while (v < -1.0 || v > 1.0);
        W[e->omega + d] = (real)v;
    }
}

void mega_cema_layer_coef(const mega_cema *e, const real *W, real *coef) {
    mega_cema_coef(coef, W + e->alpha, W + e->delta, W + e->theta, W + e->gamma, e->D, e->N);
}

void mega_cema_layer_forward(const mega_cema *e, const real *W, real *coef, real *y, const real *x, int B, int T,
                             const real *h0, real *hT) {
    mega_cema_layer_coef(e, W, coef);
    mega_cema_k k = mega_cema_kernel(coef, W + e->omega, e->D, e->N);
    mega_cema_forward(&k, y, x, B, T, h0, hT);
}

void mega_cema_layer_backward(const mega_cema *e, const real *W, real *dW, const real *coef, real *dx,
                              const real *gy, const real *x, int B, int T, const real *h0, real *dh0, real *scratch) {
    mega_cema_k k = mega_cema_kernel(coef, W + e->omega, e->D, e->N);
    real *dcoef = scratch;
    memset(dcoef, 0, mega_cema_coef_size(e->D, e->N) * sizeof(real));
    mega_cema_backward(&k, dx, dcoef, dW + e->omega, gy, x, B, T, h0, dh0);
    mega_cema_coef_backward(dcoef, W + e->alpha, W + e->delta, W + e->theta, dW + e->alpha, dW + e->delta,
                            dW + e->theta, dW + e->gamma, e->D, e->N);
}

void mega_cema_layer_step(const mega_cema *e, const real *W, const real *coef, real *state, real *y, const real *x,
                          int B, int T) {
    /* the recurrence is the forward's: the step is the forward from the carried state */
    mega_cema_k k = mega_cema_kernel(coef, W + e->omega, e->D, e->N);
    if (T == 1) mega_cema_step(&k, y, x, B, state); /* the same bits, without repacking per token */
    else mega_cema_forward(&k, y, x, B, T, state, state);
}
