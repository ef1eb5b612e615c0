/*
 * Cross-attention of an encoder–decoder layer: the decoder's queries attend over the encoder
 * output. Two kinds, chosen by the decoder's mixer (docs/translation.md):
 *
 * GATED (the Mega decoder; official fairseq/modules/gated_cross_attention.py,
 * GatedCrossAttention.forward), x [L, D] the output of the layer's Mega block, e [S, D] the
 * encoder output, act the block's activation:
 *     xq      = norm(x) if prenorm else x             (only the query side is normalised)
 *     u, r, q = split(q_proj(xq), [D, D, Z]);  u = sigmoid(u), r = silu(r)
 *     k       = k_proj(e)  [S, Z];   v = act(v_proj(e))  [S, D]   (then hidden dropout)
 *     a       = softmax(Z^-1/2 q.k + bias) over the non-pad keys, or
 *               f(q.k / n + bias) * (1 - pad) for relu2 / laplace (n: non-pad keys of the row)
 *     h       = act(h_proj((a v) * r))                 (then dropout)
 *     out     = x + u * (h - x);   out = norm(out) if not prenorm
 *   bias(i, j) = rel_pos_bias[M - 1 + j - i] (simple, M = max(max source, max target positions))
 *   or the rotary bias of the Mega block at distance j - i; every target position sees the whole
 *   source (no chunking, no causal mask).
 *   Parameters "<prefix>cross_attn.": q_proj [2D+Z, D], k_proj [Z, D], v_proj [D, D],
 *   h_proj [D, D] (+ biases), norm.norm.*, rel_pos_bias.* (official names).
 *
 * MHA (every other mixer: the Transformer baseline; fairseq TransformerDecoderLayer's
 * encoder_attn): the standard residual sublayer around multi-head softmax attention
 *     prenorm  y = x + dropout(out_proj(MHA(q_proj(norm(x)), k_proj(e), v_proj(e))))
 *     postnorm y = norm(x + dropout(out_proj(MHA(q_proj(x), k_proj(e), v_proj(e)))))
 *   H = cfg->heads heads of D/H, pad keys masked, no position term (the source positions reach
 *   the decoder through the encoder's own positional scheme). Parameters "<prefix>cross_attn.":
 *   q_proj, k_proj, v_proj, out_proj [D, D] (+ biases), norm.norm.*.
 *
 * Bounded memory (ABC, Peng et al. 2022, arXiv 2110.02488; kinds ABC_WINDOW, ABC_LINFORMER,
 * ABC_MLP): the MHA sublayer above with its core replaced by ABC's read of a memory of n slots
 * per head (paper section 3: K~ = sum_i phi_i k_i^T, V~ = sum_i phi_i v_i^T over the S source
 * positions i, out = V~^T softmax(K~ q / sqrt d)), so a query costs O(n) whatever S:
 *   ABC_WINDOW     phi_i = e_j / |block j|: the valid source positions in blocks of ceil(S/n)
 *                  consecutive ones, slot j the mean of block j (the one-hot control of the
 *                  paper's window/strided examples, scaled to a mean so that a slot does not grow
 *                  with S; project choice); empty slots (S < n) are masked;
 *   ABC_LINFORMER  phi_i = E[:, i] (keys), F[:, i] (values), E, F in R^{n x M} learned per
 *                  source position (Linformer as ABC, paper section 3.1); M max positions;
 *   ABC_MLP        phi_i = softmax over the source positions of W_phi e_i (paper eq. 7,
 *                  ABC_MLP), W_phi in R^{Hn x D} per head, separate for keys and values.
 *   Pad keys have phi_i = 0 (they are not in the memory). Parameters "<prefix>cross_attn.":
 *   q_proj, k_proj, v_proj, out_proj (as MHA), compress_k/compress_v.weight [n, M] (Linformer),
 *   phi_k/phi_v.weight [Hn, D] (MLP); the kernels are those of the ABC mixers (ops/abc.h,
 *   bidirectional form with Tq query rows). Streaming keeps only K~, V~ [B, H, n, d]: built
 *   once per source (mega_xattn_state_init), read once per step.
 *
 * The gradient with respect to the encoder output is ACCUMULATED into dE (every decoder layer
 * attends over the same e). Buffers are the caller's; nothing allocates.
 *
 * Streaming (incremental decoding): the keys and values of the encoder output are computed once
 * per source batch (mega_xattn_state_init: the official static_kv cache) and a step attends with
 * the query at target position t (bias row t). Beam search replicates each source row once per
 * beam, and a reorder only permutes beams of the same sentence, so this state never needs
 * reordering (the official reorder_incremental_state index_selects identical rows).
 */
#ifndef MEGA_XATTN_H
#define MEGA_XATTN_H
#include "layers/mixer.h"
#include "layers/relpos.h"
#include "layers/seqnorm.h"

/* the order of the s2s config's cross-attention choices after "auto" (s2s.c) */
typedef enum {
    MEGA_XATTN_GATED = 0,
    MEGA_XATTN_MHA,
    MEGA_XATTN_ABC_WINDOW,
    MEGA_XATTN_ABC_LINFORMER,
    MEGA_XATTN_ABC_MLP
} mega_xattn_kind;
/* the default for a decoder mixer: gated for Mega (MEGA_MIXER_GATED_XATTN), multi-head else */
mega_xattn_kind mega_xattn_default_kind(const mega_block_config *dec);

typedef struct {
    const mega_block_config *cfg; /* the decoder's */
    mega_xattn_kind kind;
    int H, dh;                    /* MHA heads */
    int M;                        /* gated simple bias / Linformer columns: max positions */
    int n;                        /* ABC memory slots per head */
    mega_seqnorm norm;
    mega_relpos rp;
    size_t q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b; /* o = h_proj (gated) or out_proj (MHA, ABC) */
    size_t c_k, c_v;              /* ABC control: E, F (Linformer) or W_phi (MLP) for K and V */
} mega_xattn;

/* saved activations of a forward (a view; mega_xattn_acts_view points it) */
typedef struct {
    real *xn, *nstat; /* normalised query input (prenorm) or the residual sum (postnorm); stats */
    real *base;       /* q_proj output [R, 2D+Z] (gated) or [R, D] (MHA) */
    real *k, *vpre, *v; /* encoder side [Rs, Z or D], v_proj pre-activation, v (post act/dropout) */
    real *O, *lse;    /* attention output [R, D]; row normalisers (softmax; [H][R] for MHA) */
    real *hpre, *h;   /* gated: h_proj pre-activation, h after act and dropout; MHA: h = core out */
    real *btab;       /* bias table */
    int Mc;
    /* ABC: slot weights P [R, H n]; memories K~, V~ [B, H, n, d]; the controls Phi^T
     * [B, H or 1, n, Tk] for K and V (abc-window: one, shared); empty slots [B, n] */
    real *P, *km, *vm, *phk, *phv;
    uint8_t *empty;
} mega_xattn_acts;

/* the cross-attention of a decoder layer under prefix ("decoder.layers.3."); M: the gated
 * simple bias's max positions (max(max source, max target positions)), also the Linformer
 * control's columns; n: the ABC kinds' memory slots */
mega_status mega_xattn_declare(mega_xattn *X, mega_params *P, const char *prefix, const mega_block_config *cfg,
                               mega_xattn_kind kind, int n, int M);
void mega_xattn_init(const mega_xattn *X, real *W, mega_rng *rng);
/* reals of activations / scratch for B sequences of Tq queries and Tk keys */
size_t mega_xattn_acts_view(const mega_xattn *X, mega_xattn_acts *A, real *base, int B, int Tq, int Tk);
size_t mega_xattn_scratch_size(const mega_xattn *X, int B, int Tq, int Tk, int nthreads);
/* y [B,Tq,D] = cross-attention of x [B,Tq,D] over e [B,Tk,D] with key pad mask kpad [B,Tk] (or
 * NULL) */
mega_status mega_xattn_forward(const mega_xattn *X, real *W, mega_xattn_acts *A, real *y, const real *x,
                               const real *e, const uint8_t *kpad, int B, int Tq, int Tk, const mega_run *run,
                               real *scratch);
/* dx (overwritten), dE (accumulated) and dW (accumulated) from dy */
void mega_xattn_backward(const mega_xattn *X, const real *W, real *dW, const mega_xattn_acts *A, real *dx, real *dE,
                         const real *dy, const real *x, const real *e, const uint8_t *kpad, int B, int Tq, int Tk,
                         const mega_run *run, real *scratch);

/* streaming state: B rows, up to Tkmax keys, queries up to position tmax - 1 */
typedef struct {
    int B, Tk, Tkmax, tmax;
    real *k, *v;    /* [B, Tkmax, Z or D], [B, Tkmax, D]; ABC: the memories K~, V~ [B, H, n, d] */
    uint8_t *kpad;  /* [B, Tkmax]; ABC: the empty slots [B, n] */
    int any_pad;
    real *btab;
    int Mc;
    real *mem;
} mega_xattn_state;
size_t mega_xattn_state_size(const mega_xattn *X, int B, int Tkmax, int tmax);
/* point S at mem (state_size reals) */
void mega_xattn_state_view(const mega_xattn *X, mega_xattn_state *S, real *mem, int B, int Tkmax, int tmax);
/* the keys and values of e [B,Tk,D] (kpad [B,Tk] or NULL) and the bias table for tmax queries;
 * scratch: mega_xattn_step_scratch reals */
mega_status mega_xattn_state_init(const mega_xattn *X, const real *W, mega_xattn_state *S, const real *e,
                                  const uint8_t *kpad, int Tk, real *scratch);
size_t mega_xattn_step_scratch(const mega_xattn *X, int B, int Tkmax);
/* y [B,D] for the queries x [B,D] at target position t (eval semantics) */
mega_status mega_xattn_step(const mega_xattn *X, const real *W, const mega_xattn_state *S, real *y, const real *x,
                            int t, real *scratch);
#endif
