/*
 * Multi-dimensional damped EMA kernels (Mega paper, arXiv 2209.10655, §3.1), computed as the
 * sequential recurrence (not as a convolution with the materialised kernel).
 *
 * Per kernel row r (channel d for the forward direction, D+d for the backward direction of a
 * bidirectional EMA) and component n, with coefficients
 *     pb = p*beta,  q = 1 - p*a,  gs = gamma * N^-1/2,  qK = q^K (truncation window K)
 * the recurrence (the official exponential_moving_average.py: p = sigmoid(delta),
 * q = 1 - p*sigmoid(alpha), kernel_t = pb*q^t; with truncation K < T the kernel is cut after K
 * taps, which the qK term removes from the state) is
 *     h_t = q*h_{t-1} + pb*x~_t - qK*pb*x~_{t-K}        x~ = x with pads zeroed
 *     e_t = sum_n gs*h_t
 * and the layer output is  m = silu(e + omega*x)  (official exponential_moving_average.py).
 * Bidirectional: e_t = e^f_t + e^b_t, the backward direction runs the same recurrence from the
 * end of the sequence with rows D..2D-1 (both include the current token, as the official
 * two-sided kernel does).
 *
 * Vectorisation: channels are processed in blocks of MEGA_EMA_DB (one SIMD register of the
 * target: 16 floats with AVX-512), time in chunks gathered into contiguous buffers, components in
 * groups whose state stays in registers for a whole chunk (see ema.c).
 * Backward: a single reverse-time pass per direction that needs no forward state (ema.c
 * derives the coefficient gradients from the adjoint alone), so no checkpoints are kept.
 * Threads: forward over (batch element, range of channel blocks), each unit one call of
 * mega_ema_forward_blocks, which the streaming step calls for its pieces too; backward over
 * ranges of channel blocks only, each thread owning its channels' parameter gradients
 * (deterministic for any thread count: a block's results do not depend on the ranges).
 */
#ifndef MEGA_EMA_OPS_H
#define MEGA_EMA_OPS_H
#include "core/internal.h"

/* bytes of one channel block: the widest vector register the target has (AVX-512: 64; the
 * portable default 32, a pair of 128-bit registers or one 256-bit register) */
#if defined(__AVX512F__)
#define MEGA_EMA_VBYTES 64
#else
#define MEGA_EMA_VBYTES 32
#endif
#define MEGA_EMA_DB (MEGA_EMA_VBYTES / (int)sizeof(real)) /* channels per block */

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

/* forward: mpre = e + omega*x, m = silu(mpre) (m may be NULL) for x [B,T,D]; pad [B,T] (1 = pad)
 * or NULL. state: causal only, [B, N, D] carried in and out (NULL = zero initial state, not
 * returned). Windowed truncation with a carried state is not supported (the official incremental
 * path is untruncated): pass K <= 0 with a state. Nothing is saved for the backward, which
 * needs no forward state. */
void mega_ema_forward(const mega_ema_k *k, real *mpre, real *m, const real *x, const uint8_t *pad, int B,
                      int T, real *state);
/* the unit of mega_ema_forward: batch element b (x, mpre, m, pad, state: the whole [B, ...]
 * arrays, as there), channel blocks [blo, bhi) of MEGA_EMA_DB channels (the last one partial when
 * D is not a multiple), on the calling thread; every block's results are those of
 * mega_ema_forward, bit for bit. The streaming step (mega_ema_layer_step) runs its pieces through
 * it, so the recurrence has one implementation. Allocates nothing (its workspace is on the
 * stack); with T <= 16 (one time chunk) full blocks read the coefficients and the carried state
 * in place, so a decode step costs the recurrence only. */
void mega_ema_forward_blocks(const mega_ema_k *k, int b, int blo, int bhi, real *mpre, real *m, const real *x,
                             const uint8_t *pad, int T, real *state);

/* scratch reals needed by mega_ema_backward (depends on k->N and nthreads only; T is unused) */
size_t mega_ema_bwd_scratch(const mega_ema_k *k, int T, int nthreads);
/* backward from g = dL/d mpre [B,T,D]: dx [B,T,D] += (EMA path) + omega*g;
 * dcoef (layout of mega_ema_coef: d pb, d q, d gs, d qK) accumulates; domega [D] accumulates. */
void mega_ema_backward(const mega_ema_k *k, real *dx, real *dcoef, real *domega, const real *g, const real *x,
                       const uint8_t *pad, int B, int T, real *scratch, int nthreads);

/* chain rule from (d pb, d q, d gs, d qK) to the official parameters delta, alpha, beta, gamma
 * (through the formulas of mega_ema_coef); accumulates */
void mega_ema_coef_backward(const real *dcoef, const real *delta, const real *alpha, const real *beta,
                            const real *gamma, real *ddelta, real *dalpha, real *dbeta, real *dgamma, int Dp,
                            int N, int K);
#endif
