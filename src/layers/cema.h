/*
 * MultiHeadComplexEMA layer of Megalodon (official megalodon/modules/
 * complex_exponential_moving_average.py): parameters {prefix}.{alpha,delta,theta,gamma,omega}
 * with the official shapes, the official initialisation, forward y = Re(sum_n g h) + omega x,
 * backward, and the streaming step that carries the complex state [B][2][N][D] (see ops/cema.h).
 */
#ifndef MEGA_CEMA_LAYER_H
#define MEGA_CEMA_LAYER_H
#include "core/params.h"
#include "core/rng.h"
#include "ops/cema.h"

typedef struct {
    int D, N;
    size_t alpha, delta, theta, gamma, omega;
} mega_cema;

mega_status mega_cema_declare(mega_cema *e, mega_params *P, const char *prefix, int D, int N);
void mega_cema_init(const mega_cema *e, real *W, mega_rng *rng);
static inline size_t mega_cema_layer_coef_size(const mega_cema *e) { return mega_cema_coef_size(e->D, e->N); }
/* reals of one carried state per sequence ([2][N][D]) */
static inline size_t mega_cema_state_size(const mega_cema *e) { return 2 * (size_t)e->N * e->D; }
/* coef (mega_cema_layer_coef_size reals) from the parameters; kept for the backward and the step */
void mega_cema_layer_coef(const mega_cema *e, const real *W, real *coef);
/* y [B,T,D] = CEMA(x) + omega x, from a prior state h0 [B][2][N][D] (NULL: zero); hT receives the
 * last state (NULL: not wanted; may equal h0). coef: filled here. */
void mega_cema_layer_forward(const mega_cema *e, const real *W, real *coef, real *y, const real *x, int B, int T,
                             const real *h0, real *hT);
/* scratch reals for mega_cema_layer_backward */
static inline size_t mega_cema_layer_scratch(const mega_cema *e) { return mega_cema_coef_size(e->D, e->N); }
/* gy = dL/dy; dx, dW accumulate; dh0 set when both h0 and dh0 are given */
void mega_cema_layer_backward(const mega_cema *e, const real *W, real *dW, const real *coef, real *dx,
                              const real *gy, const real *x, int B, int T, const real *h0, real *dh0, real *scratch);
/* streaming: T tokens per sequence with the state [B][2][N][D] carried in place; coef from
 * mega_cema_layer_coef. Computes what the forward computes over the same tokens. */
void mega_cema_layer_step(const mega_cema *e, const real *W, const real *coef, real *state, real *y, const real *x,
                          int B, int T);
#endif
