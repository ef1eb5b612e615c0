/* MultiHeadEMA layer: parameters, init (official reset_parameters), forward/backward/step. */
#include "layers/ema.h"
#include "ops/ops.h" /* mega_silu (the step) */

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

void mega_ema_layer_forward(const mega_ema *e, const real *W, real *coef, real *mpre, real *m, const real *x,
                            const uint8_t *pad, int B, int T, int nthreads) {
    /* official: kernel length min(truncation, L) */
    int K = (e->K > 0 && e->K < T) ? e->K : 0;
    mega_ema_coef(coef, W + e->delta, W + e->alpha, W + e->beta, W + e->gamma, (e->bidir ? 2 : 1) * e->D, e->N, K);
    mega_ema_k k = kernel_of(e, W, coef, K);
    (void)nthreads;
    mega_ema_forward(&k, mpre, m, x, pad, B, T, NULL);
}

size_t mega_ema_layer_scratch(const mega_ema *e, int T, int nthreads) {
    mega_ema_k k;
    memset(&k, 0, sizeof k);
    k.D = e->D, k.N = e->N;
    return mega_ema_bwd_scratch(&k, T, nthreads) + 4 * (size_t)(e->bidir ? 2 : 1) * e->D * e->N;
}

void mega_ema_layer_backward(const mega_ema *e, const real *W, real *dW, const real *coef, real *dx, const real *g,
                             const real *x, const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    int K = (e->K > 0 && e->K < T) ? e->K : 0;
    int Dp = (e->bidir ? 2 : 1) * e->D;
    mega_ema_k k = kernel_of(e, W, coef, K);
    real *dcoef = scratch;
    size_t S4 = 4 * (size_t)Dp * e->N;
    memset(dcoef, 0, S4 * sizeof(real));
    mega_ema_backward(&k, dx, dcoef, dW + e->omega, g, x, pad, B, T, scratch + S4, nthreads);
    mega_ema_coef_backward(dcoef, W + e->delta, W + e->alpha, W + e->beta, W + e->gamma, dW + e->delta,
                           dW + e->alpha, dW + e->beta, dW + e->gamma, Dp, e->N, K);
}

void mega_ema_layer_coef(const mega_ema *e, const real *W, real *coef, int K) {
    mega_ema_coef(coef, W + e->delta, W + e->alpha, W + e->beta, W + e->gamma, (e->bidir ? 2 : 1) * e->D, e->N, K);
}

/* the decode step's recurrence over channels [d0, d1) of sequence b, T tokens */
typedef struct {
    const mega_ema_k *k;
    real *state, *mpre, *m;
    const real *x;
    int T, nblk;
} ema_step_args;

#define EMA_STEP_CH 64 /* channels per piece */

static void ema_step_piece(void *arg, int i) {
    const ema_step_args *a = arg;
    const mega_ema_k *k = a->k;
    const size_t D = (size_t)k->D, N = (size_t)k->N, b = (size_t)(i / a->nblk);
    const size_t d0 = (size_t)(i % a->nblk) * EMA_STEP_CH, d1 = MEGA_MIN(D, d0 + EMA_STEP_CH);
    for (int t = 0; t < a->T; t++) {
        const size_t row = (b * (size_t)a->T + (size_t)t) * D;
        const real *xt = a->x + row;
        real *et = a->mpre + row;
        for (size_t j = d0; j < d1; j++) et[j] = 0;
        for (size_t n = 0; n < N; n++) {
            const real *q = k->q + n * D, *pb = k->pb + n * D, *gs = k->gs + n * D;
            real *h = a->state + (b * N + n) * D;
            for (size_t j = d0; j < d1; j++) {
                h[j] = q[j] * h[j] + pb[j] * xt[j];
                et[j] += gs[j] * h[j];
            }
        }
        for (size_t j = d0; j < d1; j++) {
            real z = et[j] + k->omega[j] * xt[j];
            et[j] = z;
            if (a->m) a->m[row + j] = mega_silu(z);
        }
    }
}

void mega_ema_layer_step(const mega_ema *e, const real *W, const real *coef, real *state, real *mpre, real *m,
                         const real *x, int B, int T) {
    /* coef must be prepared untruncated (mega_ema_layer_coef with K = 0): the official
     * incremental path ignores truncation (SPEC §1.6) */
    MEGA_ASSERT(!e->bidir);
    mega_ema_k k = kernel_of(e, W, coef, 0);
    const size_t work = (size_t)B * T * e->D * e->N;
    if (work > MEGA_PAR_MIN && mega_step_may_fork()) {
        mega_ema_forward(&k, mpre, m, x, NULL, B, T, state);
        return;
    }
    /* A few tokens (decode: one per sequence, D*N = 4096 multiply-adds each), or any step inside
     * the step team (where mega_ema_forward's region would be nested), run here in pieces of
     * (sequence, 64 channels) through mega_step_parallel: over the threads when there is enough
     * work, else on this thread, never in a region of one thread (libgomp allocates a team
     * descriptor for each, which would be once per layer and token). Same recurrence and the
     * same operations per element as mega_ema_forward (carried state [B, N, D], no pad,
     * untruncated): h = q h + pb x, e = sum_n gs h in order of n, mpre = e + omega x. */
    const int nblk = (e->D + EMA_STEP_CH - 1) / EMA_STEP_CH;
    ema_step_args a = {&k, state, mpre, m, x, T, nblk};
    mega_step_parallel(B * nblk, ema_step_piece, &a, work >= 16384);
}
