/*
 * MultiHeadEMA layer (official exponential_moving_average.py, Mega paper §3.1): parameters
 * move.{delta,alpha,beta,gamma,omega}, forward m = silu(EMA(x) + omega*x), backward, and the
 * streaming step (carried state [B, N, D], untruncated, as the official incremental path).
 */
#ifndef MEGA_EMA_LAYER_H
#define MEGA_EMA_LAYER_H
#include "core/params.h"
#include "core/rng.h"
#include "ops/ema.h"

typedef struct {
    int D, N, bidir, K; /* K: truncation (0 = none) */
    size_t delta, alpha, beta, gamma, omega;
} mega_ema;

mega_status mega_ema_declare(mega_ema *e, mega_params *P, const char *prefix, int D, int N, int bidir, int K);
void mega_ema_init(const mega_ema *e, real *W, mega_rng *rng);
/* reals of coefficient workspace (kept between forward and backward) */
static inline size_t mega_ema_coef_size(const mega_ema *e) { return 4 * (size_t)(e->bidir ? 2 : 1) * e->D * e->N; }
/* coef: workspace of mega_ema_coef_size, filled here and reused by backward */
void mega_ema_layer_forward(const mega_ema *e, const real *W, real *coef, real *mpre, real *m, const real *x,
                            const uint8_t *pad, int B, int T, int nthreads);
size_t mega_ema_layer_scratch(const mega_ema *e, int T, int nthreads);
/* g = dL/dmpre; dx accumulates; dW accumulates; scratch: mega_ema_layer_scratch reals */
void mega_ema_layer_backward(const mega_ema *e, const real *W, real *dW, const real *coef, real *dx, const real *g,
                             const real *x, const uint8_t *pad, int B, int T, real *scratch, int nthreads);
/* coefficients for kernel length K (0 = untruncated) into coef (mega_ema_coef_size reals) */
void mega_ema_layer_coef(const mega_ema *e, const real *W, real *coef, int K);
/* streaming: state [B,N,D] in/out; T tokens; coef from mega_ema_layer_coef(K = 0): untruncated,
 * as the official incremental path */
void mega_ema_layer_step(const mega_ema *e, const real *W, const real *coef, real *state, real *mpre, real *m,
                         const real *x, int B, int T);
#endif
