/*
 * Single-head chunked attention of Mega (Mega eq. (11) and §3.5; official
 * moving_average_gated_attention.py softmax_attention / element_attention; docs/mega.md §3–§5).
 *
 * The sequence is cut into chunks of `chunk_size` positions (the last one may be shorter: the ragged
 * extension, equivalent to the official right-padding); chunk_size <= 0 means one chunk of T.
 * Inside a chunk (chunk-local indices i = query, j = key, n keys):
 *   softmax: S = scale*q.k + Bias[i,j]; causal keys j>i and pad keys get -inf, except that in a
 *            chunk whose keys are ALL pad nothing is pad-masked (official rule); A = softmax(S)
 *   relu2 / laplace: S = q.k / len_i + Bias[i,j]; A = f(S) * [key valid] * [j <= i if causal]
 *            len_i = i+1 (causal); else the number of valid keys in the chunk (at least 1) when a
 *            pad mask is given, else n.
 *   O = dropout(A) v
 * Bias[i,j] = btab[Mc - 1 + j - i] (a Toeplitz table: the simple bias vector itself, or the
 * rotary bias evaluated per distance).
 *
 * Memory: scores are never stored. The forward keeps only the row log-sum-exp (softmax); the
 * backward recomputes S block by block (MEGA_ATTN_BR query rows at a time, 4x that for long
 * bidirectional chunks), so at most one
 * BR x n block of scores exists per thread. Threads run over (batch, chunk) units.
 */
#ifndef MEGA_ATTN_OPS_H
#define MEGA_ATTN_OPS_H
#include "core/internal.h"

#ifndef MEGA_ATTN_BR
#define MEGA_ATTN_BR 64
#endif

typedef struct {
    int Z, E;
    int chunk_size; /* > 0 chunk length; <= 0: one chunk (the block config's chunk_size) */
    int causal;
    mega_attn_fn fn;
    const real *btab; /* bias table, 2*Mc-1 entries, centre Mc-1 (distance 0) */
    int Mc;
    double p_attn;    /* attention dropout (on A) */
    uint64_t key_attn;
    /* row strides of q, k, v, O (and of their gradients); 0 = packed (Z, Z, E, E). Strides let
     * a caller attend with a slice of a wider matrix: the q part of a fused projection, or one
     * head of a multi-head layout */
    int ldq, ldk, ldv, ldo;
} mega_attn_k;

/* element attention functions (official utils.relu2 / utils.laplace) */
static inline real mega_attn_f(mega_attn_fn fn, real s) {
    if (fn == MEGA_ATTN_RELU2) {
        real r = s > 0 ? s : 0;
        return r * r;
    }
    /* laplace: 0.5 * (1 + erf((s - mu) / (sigma * sqrt 2))), official literals */
    return (real)0.5 * ((real)1 + R_ERF((s - (real)0.707107) / ((real)0.282095 * (real)1.4142135623730951)));
}
static inline real mega_attn_fgrad(mega_attn_fn fn, real s) {
    if (fn == MEGA_ATTN_RELU2) return s > 0 ? 2 * s : 0;
    const real sig = (real)0.282095, c = (s - (real)0.707107) / sig;
    return mega_exp((real)-0.5 * c * c) / (sig * (real)2.5066282746310002);
}

/* f (mega_attn_f) on a row in place, and g[j] *= f'(s[j]) (mega_attn_fgrad): the same functions,
 * vectorised where the build has vector e^x (the Laplace function's erf then comes from e^x, see
 * attn.c; within 2e-7 of erff) */
void mega_attn_f_row(mega_attn_fn fn, real *s, int n);
void mega_attn_fgrad_row(mega_attn_fn fn, real *g, const real *s, int n);

/* reals of scratch per thread for sequences of length T */
size_t mega_attn_scratch(const mega_attn_k *k, int T);
/* O [B,T,E] = attention; lse [B,T] (softmax only; may be NULL otherwise) */
void mega_attn_forward(const mega_attn_k *k, real *O, real *lse, const real *q, const real *kk, const real *v,
                       const uint8_t *pad, int B, int T, real *scratch, int nthreads);
/* reals of scratch the backward passes need beyond the threads' (the bias gradient's fixed
 * partials, which keep it independent of the thread count) */
size_t mega_attn_db_scratch(const mega_attn_k *k);
/* accumulates dq, dk, dv [B,T,*] and dbtab [2*Mc-1]; scratch: mega_attn_scratch * nthreads +
 * mega_attn_db_scratch */
void mega_attn_backward(const mega_attn_k *k, real *dq, real *dk, real *dv, real *dbtab, const real *dO,
                        const real *q, const real *kk, const real *v, const real *lse, const uint8_t *pad, int B,
                        int T, real *scratch, int nthreads);

/* Cross-attention (official gated_cross_attention.py; fairseq MultiheadAttention with an
 * encoder's keys): Tq queries of sequence b against its Tk keys, no chunking, no causal mask.
 * q, O [B,Tq,*], k, v [B,Tk,*]; kpad [B,Tk] (1 = pad key) or NULL. Query i is at position
 * qoff + i (the bias row, so a decoder step t passes qoff = t with Tq = 1); bias(i, j) =
 * btab[Mc - 1 + j - (qoff + i)] (btab NULL: no bias). The rules of the chunked form hold with the
 * whole key sequence as the chunk: softmax masks pad keys (unless all are pad), element attention
 * divides by the valid-key count (Tk without a mask). k->chunk_size and k->causal are ignored.
 * Scratch: mega_attn_cross_scratch per thread (backward: + mega_attn_db_scratch). lse [B,Tq] (softmax). */
size_t mega_attn_cross_scratch(const mega_attn_k *k, int Tk);
void mega_attn_cross_forward(const mega_attn_k *k, real *O, real *lse, const real *q, const real *kk, const real *v,
                             const uint8_t *kpad, int B, int Tq, int Tk, int qoff, real *scratch, int nthreads);
void mega_attn_cross_backward(const mega_attn_k *k, real *dq, real *dk, real *dv, real *dbtab, const real *dO,
                              const real *q, const real *kk, const real *v, const real *lse, const uint8_t *kpad,
                              int B, int Tq, int Tk, int qoff, real *scratch, int nthreads);

/* One query against n cached keys (streaming step; docs/mega.md §9): no causal mask, bias row n-1,
 * element attention divides by n. o [E] = sum_j A_j v_j. w: scratch of n reals. The keys are
 * transposed, kt [Z, ldk] (key j is column j; ldk >= n): the decode step keeps its key cache in
 * this layout so the scores vectorise over the keys */
void mega_attn_query_kt(const mega_attn_k *k, real *o, const real *q, const real *kt, size_t ldk, const real *vc,
                        int n, real *w);
/* its two halves: w [n] = the attention weights of the query; o [ne] = sum_j w_j v_j [0, ne)
 * for value rows ldv apart, ne <= MEGA_ATTN_QBLOCK (the output in blocks, e.g. over threads).
 * A block is 16 vector registers of accumulators (1 KB with AVX-512, 512 bytes with AVX, 256
 * otherwise): each cached value row is then read in runs of that many bytes. With 256-byte
 * blocks (the old fixed 64 floats) lm-decode-b8's attention took 44 us per layer and token, with
 * 1 KB 33 us, on AVX-512 (8 sequences, E 512, reading up to 4 MB of values per layer). Each
 * output is the same sum in the same order whatever the block, so the bits do not depend on it. */
#if defined(__AVX512F__)
#define MEGA_ATTN_QBLOCK_BYTES 1024
#elif defined(__AVX__)
#define MEGA_ATTN_QBLOCK_BYTES 512
#else
#define MEGA_ATTN_QBLOCK_BYTES 256
#endif
#define MEGA_ATTN_QBLOCK ((int)(MEGA_ATTN_QBLOCK_BYTES / sizeof(real)))
void mega_attn_query_weights(const mega_attn_k *k, const real *q, const real *kt, size_t ldk, int n, real *w);
void mega_attn_query_out(real *o, const real *w, const real *v, size_t ldv, int n, int ne);
#endif
