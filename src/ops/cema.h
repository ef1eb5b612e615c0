/*
 * Complex exponential moving average (CEMA) kernels: Megalodon (Ma et al. 2024, arXiv 2404.08801,
 * §3.1) as the official code computes it (megalodon/modules/complex_exponential_moving_average.py,
 * MultiHeadComplexEMA; its CPU ops csrc/ops/ema_parameters.cc and ema_hidden.cc), run as the
 * sequential recurrence.
 *
 * Per channel d and component n (coefficient layout [n][D], as the real EMA of ops/ema.h), with
 *     p = sigmoid(alpha),  q = (1 - sigmoid(alpha) sigmoid(delta)) e^{i phi_n},
 *     phi_n = (n+1) sigmoid(theta_d) 2 pi / N,  g = (gamma_re + i gamma_im) / sqrt(N)
 * the state and output are
 *     h_t = q h_{t-1} + p x_t           (h complex, x real, h_{-1} = h0 or 0)
 *     y_t = Re(sum_n g h_t) + omega x_t
 * which is the official kernel form y = fftconv(x, k) + b + omega x with
 * k_j = Re(sum_n p g q^j) and b_t = Re(sum_n g q^{t+1} h0) (ema_parameters.cc,
 * EMAParametersCPUFwdImpl), and the final state of ema_hidden.cc (EMAHiddenCPUFwdImpl).
 * There is no silu and no padding here: the Megalodon layer applies neither to the CEMA
 * (moving_average_gated_attention.py, MegalodonAttention.forward).
 *
 * State layout [B][2][N][D]: the real plane then the imaginary plane, each [N][D], so the inner
 * loops run over contiguous channels like the real EMA's.
 *
 * Backward (no forward state kept, as the real EMA's): the parameter gradients come from a
 * forward-mode pass that carries h, the unscaled state u_t = q u_{t-1} + x_t and h' = dh/dq
 * (h_t is a polynomial in q with real input, so holomorphic in q; h'_t = q h'_{t-1} + h_{t-1}).
 * With S = sum_t gy_t h_t, P = sum_t gy_t u_t, Z = sum_t gy_t h'_t, and for a complex c and
 * L = Re(c w): dL/dw_re = Re(c), dL/dw_im = -Im(c):
 *     dg = (Re S, -Im S),  dp = Re(g P),  dq = (Re gZ, -Im gZ);
 * dx and dh0 come from the reverse adjoint mu_t = gy_t + q mu_{t+1}:
 *     dx_t = Re(sum_n g p mu_t) + omega gy_t,  dh0 = (Re, -Im) of g q mu_0.
 */
#ifndef MEGA_CEMA_OPS_H
#define MEGA_CEMA_OPS_H
#include "core/internal.h"

typedef struct {
    int D, N;
    /* coefficient arrays [n][D] from mega_cema_coef */
    const real *p, *qr, *qi, *gr, *gi;
    const real *omega; /* [D] */
} mega_cema_k;

/* reals of the coefficient arrays (p, qr, qi, gr, gi) */
static inline size_t mega_cema_coef_size(int D, int N) { return 5 * (size_t)D * N; }
/* coef (mega_cema_coef_size reals) from the official parameters alpha, delta [D,N,1],
 * theta [D,1,1], gamma [D,N,2] (official _calc_coeffs) */
void mega_cema_coef(real *coef, const real *alpha, const real *delta, const real *theta, const real *gamma, int D,
                    int N);
mega_cema_k mega_cema_kernel(const real *coef, const real *omega, int D, int N);

/* y [B,T,D] from x [B,T,D]. h0: [B][2][N][D] prior state or NULL (zero). hT: the state after
 * the last step, [B][2][N][D], or NULL (may equal h0: updated in place). Allocates nothing. */
void mega_cema_forward(const mega_cema_k *k, real *y, const real *x, int B, int T, const real *h0, real *hT);

/* one token (T = 1) of mega_cema_forward from the state h [B][2][N][D], updated in place: the
 * same operations in the same order (so the same bits), read straight from the coefficient
 * arrays [n][D] instead of repacked per channel block (the streaming step). y [B,D] is also the
 * accumulator. Allocates nothing. */
void mega_cema_step(const mega_cema_k *k, real *y, const real *x, int B, real *h);

/* backward from gy = dL/dy [B,T,D]: dx +=, dcoef (layout of mega_cema_coef) +=, domega [D] +=;
 * dh0 ([B][2][N][D], set, not accumulated) when h0 and dh0 are both given. Allocates nothing. */
void mega_cema_backward(const mega_cema_k *k, real *dx, real *dcoef, real *domega, const real *gy, const real *x,
                        int B, int T, const real *h0, real *dh0);

/* chain rule from dcoef to the official parameters; accumulates into dalpha, ddelta, dtheta, dgamma */
void mega_cema_coef_backward(const real *dcoef, const real *alpha, const real *delta, const real *theta,
                             real *dalpha, real *ddelta, real *dtheta, real *dgamma, int D, int N);
#endif
