/*
 * Megalodon's inner attention (official moving_average_gated_attention.py, _InnerAttention with
 * efficient_attn = None, and rotary_positional_embedding.py, apply_rotary_emb): H heads over
 * q, k [B,T,H*Z] and v [B,T,H*E], causal softmax attention inside chunks of C positions only (no
 * attention across chunks), rotary positions that restart at 0 in every chunk (interleaved pairs
 * (x_2i, x_2i+1), theta_i = base^(-2i/Z)), and no 1/sqrt(Z) scale on the scores:
 *     O_t = sum_{s in chunk(t), s <= t} softmax_s(rope(q_t, t mod C) . rope(k_s, s mod C)) v_s
 * (the normalisation of q and k and their affine terms come before, in the Megalodon layer). A
 * last chunk shorter than C is allowed (the official model requires T < C or T % C == 0).
 * Computed with the project's chunked attention kernel (ops/attn.h), whose softmax scales by
 * 1/sqrt(Z): the rotated queries are stored multiplied by sqrt(Z), which cancels it.
 * The decode step keeps only the current chunk's rotated keys and values (the official cache:
 * new_count = (count + 1) % C).
 */
#ifndef MEGA_MGATTN_LAYER_H
#define MEGA_MGATTN_LAYER_H
#include "core/internal.h"

typedef struct {
    int H, Z, E, C;   /* heads, q/k and v dims per head, chunk size */
    double rope_base; /* official default 10000 */
} mega_mgattn;

/* kept for the backward: rotated (and sqrt(Z)-scaled) q, rotated k [B,T,H*Z], lse [H][B,T] */
static inline size_t mega_mgattn_acts_size(const mega_mgattn *a, int B, int T) {
    return (size_t)B * T * a->H * (2 * (size_t)a->Z + 1);
}
size_t mega_mgattn_scratch(const mega_mgattn *a, int T, int nthreads);
void mega_mgattn_forward(const mega_mgattn *a, real *O, const real *q, const real *k, const real *v, int B, int T,
                         real *acts, real *scratch, int nthreads);
/* dq, dk, dv accumulate */
void mega_mgattn_backward(const mega_mgattn *a, real *dq, real *dk, real *dv, const real *dO, const real *v, int B,
                          int T, real *acts, real *scratch, int nthreads);

/* decode cache of one sequence: the current chunk's rotated keys [C][H*Z], values [C][H*E], count */
static inline size_t mega_mgattn_cache_size(const mega_mgattn *a) {
    return (size_t)a->C * a->H * ((size_t)a->Z + a->E);
}
/* one token per sequence: q, k [B,H*Z], v [B,H*E] at position pos (the same for all B);
 * cache [B][mega_mgattn_cache_size]; O [B,H*E]; w: scratch of C reals */
void mega_mgattn_step(const mega_mgattn *a, real *O, const real *q, const real *k, const real *v, int B, int64_t pos,
                      real *cache, real *w);
#endif
