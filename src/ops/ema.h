/*
 * Multi-dimensional damped EMA kernels, route A of SPEC §1.3 (sequential recurrence).
 *
 * Per kernel row r (channel d for the forward direction, D+d for the backward direction of a
 * bidirectional EMA) and component n, with coefficients
 *     pb = p*beta,  q = 1 - p*a,  gs = gamma * N^-1/2,  qK = q^K (truncation window K)
 * the recurrence (SPEC §1.2, windowed form of §1.3 when K < T) is
 *     h_t = q*h_{t-1} + pb*x~_t - qK*pb*x~_{t-K}        x~ = x with pads zeroed
 *     e_t = sum_n gs*h_t
 * and the layer output is  m = silu(e + omega*x)  (official exponential_moving_average.py).
 * Bidirectional: e_t = e^f_t + e^b_t, the backward direction runs the same recurrence from the
 * end of the sequence with rows D..2D-1 (both include the current token, as the official
 * two-sided kernel does).
 *
 * Vectorisation: channels are processed in blocks of MEGA_EMA_DB, the state laid out [n][d] so
 * the innermost loop runs over contiguous channels for any N.
 * Threads: forward over (batch, channel block); backward over channel blocks only, each thread
 * owning its channels' parameter gradients (deterministic for any thread count).
 */
#ifndef MEGA_EMA_OPS_H
#define MEGA_EMA_OPS_H
#include "core/internal.h"

#define MEGA_EMA_DB 32  /* channels per block */
#define MEGA_EMA_SEG 64 /* backward checkpoint interval (time steps) */

typedef struct {
    int D, N, bidir;
    int K;          /* truncation window; <= 0 or >= T means untruncated */
    /* coefficient arrays, layout [n][D'] (D' = D or 2D), prepared by mega_ema_coef */
    const real *pb, *q, *gs, *qK;
    const real *omega; /* [D] */
} mega_ema_k;

/* prepare coefficient arrays (4 * D' * N reals at `coef`) from the official parameters
 * delta, alpha, beta [D',N,1], gamma [D',N]; K as in mega_ema_k (qK only used when 0<K) */
void mega_ema_coef(real *coef, const real *delta, const real *alpha, const real *beta, const real *gamma,
                   int Dp, int N, int K);

/* forward: mpre = e + omega*x, m = silu(mpre) for x [B,T,D]; pad [B,T] (1 = pad) or NULL.
 * state: causal only, [B, N, D] carried in and out (NULL = zero initial state, not returned).
 * Windowed truncation with a carried state is not supported (the official incremental path is
 * untruncated): pass K <= 0 with a state. */
void mega_ema_forward(const mega_ema_k *k, real *mpre, real *m, const real *x, const uint8_t *pad, int B,
                      int T, real *state, real *ckpt);
/* reals of the segment checkpoints the forward can save for the backward (ckpt argument):
 * the state at every MEGA_EMA_SEG-th step, per batch element, channel block and direction */
size_t mega_ema_ckpt_size(const mega_ema_k *k, int B, int T);

/* scratch reals needed by mega_ema_backward */
size_t mega_ema_bwd_scratch(const mega_ema_k *k, int T, int nthreads);
/* backward from g = dL/d mpre [B,T,D]: dx [B,T,D] += (EMA path) + omega*g;
 * dcoef (layout of mega_ema_coef: d pb, d q, d gs, d qK) accumulates; domega [D] accumulates.
 * ckpt: the forward's checkpoints (NULL: the backward recomputes them). */
void mega_ema_backward(const mega_ema_k *k, real *dx, real *dcoef, real *domega, const real *g, const real *x,
                       const uint8_t *pad, int B, int T, const real *ckpt, real *scratch, int nthreads);

/* chain rule from (d pb, d q, d gs) to the official parameters (SPEC §1.5); accumulates */
void mega_ema_coef_backward(const real *dcoef, const real *delta, const real *alpha, const real *beta,
                            const real *gamma, real *ddelta, real *dalpha, real *dbeta, real *dgamma, int Dp,
                            int N, int K);
#endif
