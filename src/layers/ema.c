/* MultiHeadEMA layer: parameters, init (official reset_parameters), forward/backward/step. */
#include "layers/ema.h"
#include "ops/ops.h" /* mega_step_parallel (the step) */

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

/* the streaming step's pieces: sequence i / np, channel blocks [(i % np)*EMA_STEP_BLK, +EMA_STEP_BLK) */
typedef struct {
    const mega_ema_k *k;
    real *state, *mpre, *m;
    const real *x;
    int T, nblk, np;
} ema_step_args;

/* channels per piece, a whole number of channel blocks (MEGA_EMA_DB is at most 16). At T = 1 the
 * kernel reads each [n][D] coefficient and state row through the piece's adjacent blocks, in
 * runs of the piece's width: with 64 channels (256 bytes of floats) the step measured 8% slower
 * at decode's B = 8 (D 256, N 16) than the per-channel loop it replaced, with 128 on par; and
 * B*D/128 pieces still spread over a few threads */
#define EMA_STEP_CH 128
#define EMA_STEP_BLK (EMA_STEP_CH / MEGA_EMA_DB)
_Static_assert(EMA_STEP_CH % MEGA_EMA_DB == 0, "a piece is whole channel blocks");

static void ema_step_piece(void *arg, int i) {
    const ema_step_args *a = arg;
    const int b = i / a->np, blo = (i % a->np) * EMA_STEP_BLK;
    mega_ema_forward_blocks(a->k, b, blo, MEGA_MIN(a->nblk, blo + EMA_STEP_BLK), a->mpre, a->m, a->x, NULL, a->T,
                            a->state);
}

void mega_ema_layer_step(const mega_ema *e, const real *W, const real *coef, real *state, real *mpre, real *m,
                         const real *x, int B, int T) {
    /* coef must be prepared untruncated (mega_ema_layer_coef with K = 0): the official
     * incremental path (MultiHeadEMA.step) ignores truncation */
    MEGA_ASSERT(!e->bidir);
    mega_ema_k k = kernel_of(e, W, coef, 0);
    const size_t work = (size_t)B * T * e->D * e->N;
    if (work > MEGA_PAR_MIN && mega_step_may_fork()) {
        mega_ema_forward(&k, mpre, m, x, NULL, B, T, state);
        return;
    }
    /* A few tokens (decode: one per sequence, D*N = 4096 multiply-adds each), or any step inside
     * the step team (where mega_ema_forward's region would be nested), run here in pieces of
     * (sequence, EMA_STEP_BLK channel blocks) through mega_step_parallel: over the threads when
     * there is enough work, else on this thread, never in a region of one thread (libgomp
     * allocates a team descriptor for each, which would be once per layer and token). Each piece
     * is a unit of mega_ema_forward (carried state [B, N, D], no pad, untruncated), so the step
     * computes what the forward does over the same tokens. */
    const int nblk = (e->D + MEGA_EMA_DB - 1) / MEGA_EMA_DB, np = (nblk + EMA_STEP_BLK - 1) / EMA_STEP_BLK;
    ema_step_args a = {&k, state, mpre, m, x, T, nblk, np};
    mega_step_parallel(B * np, ema_step_piece, &a, work >= 16384);
}
