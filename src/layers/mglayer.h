/*
 * The Megalodon layer (official moving_average_gated_attention.py, MovingAverageGatedAttention,
 * forward without chunk parallelism), over x [B,T,D]:
 *     xn = TimestepNorm(x)                                  (layers/tsnorm.h, state carried)
 *     mx = hdrop(RMSNorm(CEMA(xn)) * (1 + rmsnorm.weight))   (layers/cema.h)
 *     z  = per-head RMSNorm(wz(mx)) (no affine; heads of zdim/H)
 *     q  = z (gamma_0 + 1) / sqrt(zdim/H) + beta_0,  k = z (gamma_1 + 1) / sqrt(zdim/H) + beta_1
 *     v  = silu(wv(xn)),  r = silu(wr(mx))
 *     y  = drop(wh1(mx) + wh2(hdrop(Attention(q, k, v) * r))) + x   (layers/mgattn.h; wh2 has no bias)
 * with hdrop the hidden dropout, drop the dropout and the attention weights under the attention
 * dropout, at the official places (forward: memory_efficient_dropout calls; _InnerAttention).
 * Parameters under the official names: timenorm.*, cema.*, rmsnorm.weight, wz, wv, wr, wh1
 * (weight [out, in], bias), wh2.weight, gamma, beta [2, zdim].
 */
#ifndef MEGA_MGLAYER_H
#define MEGA_MGLAYER_H
#include "layers/cema.h"
#include "layers/mgattn.h"
#include "layers/tsnorm.h"

typedef struct {
    int D, Z, E, H, N, G, C; /* model dim, zdim, hdim, heads, CEMA ndim, norm groups, chunk */
    double eps;
    mega_tsnorm tn;
    mega_cema cema;
    mega_mgattn at;
    size_t rms_w, wz, bz, wv, bv, wr, br, wh1, bh1, wh2, gamma, beta;
} mega_mglayer;

/* dropout in training (NULL: none): probabilities and the key its masks derive from (one
 * subkey per site), so the backward and a recomputed forward regenerate the same masks */
typedef struct {
    double p_out, p_attn, p_hidden; /* dropout, attention_dropout, hidden_dropout */
    uint64_t key;
} mega_mgdrop;

mega_status mega_mglayer_declare(mega_mglayer *L, mega_params *P, const char *prefix, int D, int Z, int E, int H,
                                 int N, int G, int C, double eps, double rope_base);
/* reals of the activations kept for the backward of B sequences of T steps */
size_t mega_mglayer_acts_size(const mega_mglayer *L, int B, int T);
size_t mega_mglayer_scratch(const mega_mglayer *L, int B, int T);
/* y [B,T,D]; s: the timestep norm's state (in, updated); h0: CEMA prior state [B][2][N][D] or
 * NULL (zero); dr: dropout (NULL: none) */
void mega_mglayer_forward(const mega_mglayer *L, const real *W, real *y, const real *x, int B, int T,
                          mega_tsnorm_state *s, const real *h0, const mega_mgdrop *dr, real *acts, real *scratch);
/* dx, dW accumulate; the carried states get no gradient (the official layer detaches them); dr:
 * the forward's */
void mega_mglayer_backward(const mega_mglayer *L, const real *W, real *dW, real *dx, const real *dy, const real *x,
                           int B, int T, const real *h0, const mega_mgdrop *dr, real *acts, real *scratch);

/* streaming: one token per sequence, x [B,D] at position pos (the same for all B, or sequence b
 * at rpos[b] when rpos is not NULL), y [B,D];
 * s: the timestep norm's state, h: the CEMA state [B][2][N][D], cache: B attention caches of
 * mega_mgattn_cache_size (the current chunk only), all carried in place; coef: the CEMA's
 * coefficients (mega_cema_layer_coef); work: mega_mglayer_step_work reals. Computes what the
 * forward computes over the same tokens; a sequence's bits do not depend on the others beside it
 * (the products are mega_linear_step's, every other pass is per sequence). */
size_t mega_mglayer_step_work(const mega_mglayer *L, int B);
void mega_mglayer_step(const mega_mglayer *L, const real *W, const real *coef, real *y, const real *x, int B,
                       int64_t pos, const int64_t *rpos, mega_tsnorm_state *s, real *h, real *cache, real *work);
#endif
