/*
 * Timestep normalization of Megalodon (Ma et al. 2024, arXiv 2404.08801, §3.2; official
 * megalodon/modules/timestep_norm.py, TimestepNorm, and its CPU loops csrc/ops/timestep_norm.cc,
 * GroupTimestepNormCPUFwdImpl / GroupTimestepNormCPUBwdImpl).
 *
 * Features [0, D) are split into G groups of D/G consecutive features. Per sequence and group a
 * running (count c, mean M, variance V) is carried over time; at every step t that is not padded
 * the group's population mean m_t and variance v_t over its D/G features are combined into it
 * as one more sample of weight 1 (Welford / Chan's combination, official utils.h WelfordCombine):
 *     c' = c + 1,  a = c / c',  b = 1 / c',  M' = a M + b m_t,
 *     V' = a V + b v_t + (a (m_t - M)) (b (m_t - M))
 *     y_t = (x_t - M') / sqrt(V' + eps) * (1 + weight) + bias
 * (the weight is stored as an offset from 1, as the official module passes weight + 1.0). A
 * padded step gives y_t = 0 and leaves (c, M, V) unchanged. From an empty prior (c = 0), (M, V)
 * after step t are the population mean and variance of the group over all features of the
 * unpadded steps so far. The initial state is the module's prior: count prior_count, mean
 * prior_mean, variance exp(prior_logv) (buffers; Megalodon uses prior_count = 0, which makes the
 * first step ignore them), or a state carried from the previous segment.
 */
#ifndef MEGA_TSNORM_LAYER_H
#define MEGA_TSNORM_LAYER_H
#include "core/params.h"

typedef struct {
    int D, G;
    double eps;
    size_t weight, bias, prior_count, prior_mean, prior_logv;
} mega_tsnorm;

/* carried state of B sequences: count [B] and mv [B][2][G] (means, then variances) */
typedef struct {
    int64_t *count;
    real *mv;
} mega_tsnorm_state;

/* what the backward needs, [B*T*G] each, and the step weights b = 1/c' [B*T] */
typedef struct {
    real *mprev, *mean, *rstd, *coef;
} mega_tsnorm_acts;

mega_status mega_tsnorm_declare(mega_tsnorm *n, mega_params *P, const char *prefix, int D, int G, double eps);
/* official init: weight = bias = 0 (scale 1), prior zero */
void mega_tsnorm_init(const mega_tsnorm *n, real *W);
/* reals of the activations for B sequences of T steps */
static inline size_t mega_tsnorm_acts_size(const mega_tsnorm *n, int B, int T) {
    return (size_t)B * T * (3 * (size_t)n->G + 1);
}
/* carve acts out of buf (mega_tsnorm_acts_size reals) */
mega_tsnorm_acts mega_tsnorm_acts_at(const mega_tsnorm *n, real *buf, int B, int T);
/* the module's prior as the state of B sequences */
void mega_tsnorm_state_prior(const mega_tsnorm *n, const real *W, mega_tsnorm_state *s, int B);

/* y [B,T,D] from x; pad [B,T] (1 = padded) or NULL; s: state in, updated to the state after the
 * last step; a: activations for the backward, or NULL (streaming). Allocates nothing. */
void mega_tsnorm_forward(const mega_tsnorm *n, const real *W, real *y, const real *x, const uint8_t *pad, int B,
                         int T, mega_tsnorm_state *s, const mega_tsnorm_acts *a);
/* backward from gy [B,T,D] and gmv = dL/d(final means, variances) [B][2][G] (NULL: zero):
 * dx +=, dW (weight, bias) +=; dmv0 = dL/d(initial means, variances) [B][2][G] set when non-NULL */
void mega_tsnorm_backward(const mega_tsnorm *n, const real *W, real *dW, real *dx, const real *gy, const real *x,
                          const uint8_t *pad, int B, int T, const mega_tsnorm_acts *a, const real *gmv, real *dmv0);
#endif
