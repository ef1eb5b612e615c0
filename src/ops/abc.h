/*
 * ABC: attention with bounded-memory control (Peng et al. 2022, arXiv 2110.02488; docs/mixers.md
 * "ABC mixers"), the shared kernels.
 *
 * Per head (width d, n memory slots) a query reads a memory K~, V~ in R^{n x d}:
 *     o_t = V~^T softmax_slots(K~ q_t / sqrt(d))                              (ABC paper)
 * and the memory is written through control vectors phi_i in R^n:  K~ = sum_i phi^K_i k_i^T.
 *
 * Layout (every kernel): q, k, v, o are [B, T, D] rows (D = H*d), head h in columns
 * [h*d, (h+1)*d); the slot weights P are [B, T, H, n] (the softmax before attention dropout);
 * a memory is [n, d] row-major. One call handles one (batch b, head h) "unit" and writes only
 * that unit's rows / head columns, so units run in parallel without races.
 *
 * Three kernels (the ABC paper's instances, and its causal recurrence for a context-agnostic phi):
 *   window           causal: slot j of query t holds token t-n+1+j (sliding-window attention of
 *                    width n). Training reads the key/value rows in place; streaming keeps a
 *                    ring buffer. Empty slots (before the start, or pad tokens) are masked
 *                    (mask_empty = 1, default; project extension, exactly sliding-window attention)
 *                    or, in the paper's literal form, take logit 0 and contribute a zero value.
 *   causal scan      the memory after token t, with per-slot decay g_t
 *                    and write weight w_t:   K~_t = g_t . K~_{t-1} + w_t k_t^T   (V~ likewise)
 *                    SUM  (Linformer): g = 1, w_t = control row (E[:, t]);
 *                    LOGZ (ABC-MLP):  control row = logits l_t, normalised cumulative form
 *                      (as fla's naive_cumsum_abc; in log space, a project choice):
 *                      log Z_t = logaddexp(log Z_{t-1}, l_t), g_t = exp(log Z_{t-1} - log Z_t),
 *                      w_t = exp(l_t - log Z_t);  g_t := 0 while the memory is empty.
 *                    Pad tokens write nothing (g = 1, w = 0). The backward is our exact reverse
 *                    scan (suffix sums U, c rescaled by g; never 1/Z or raw alpha), with
 *                    the memories recomputed segment by segment from checkpoints taken every
 *                    MEGA_ABC_SEG steps (as the EMA adjoint in ops/ema.c).
 *   bidirectional    one memory from all positions, K~ = Phi_K^T K (GEMMs); the
 *                    caller supplies Phi^T [n, T] per unit (zero columns at pads). Queries
 *                    may be another sequence than the keys (cross-attention, layers/xattn.c):
 *                    Tq query rows per sequence (0: T), read against the T-key memory; the
 *                    memory (mega_abc_bidir_memory) and the read (mega_abc_bidir_read) are
 *                    also separate calls, so a decoder builds the memory once per source and
 *                    reads it once per step. A slot marked empty (k->empty) is masked.
 * Attention dropout acts on the slot weights (o = dropout(p) V~), mask from
 * mega__hash01(key, index of P).
 */
#ifndef MEGA_ABC_OPS_H
#define MEGA_ABC_OPS_H
#include "core/internal.h"

#define MEGA_ABC_SEG 32

enum { MEGA_ABC_WINDOW = 0, MEGA_ABC_SUM = 1, MEGA_ABC_LOGZ = 2 };

typedef struct {
    int T, n, d, H;        /* rows per sequence, slots, head width, heads (row stride D = H*d) */
    int mode;              /* MEGA_ABC_WINDOW | MEGA_ABC_SUM | MEGA_ABC_LOGZ */
    int mask_empty;        /* window: 1 masks empty slots, 0 is the literal form (logit 0) */
    real scale;            /* 1/sqrt(d) */
    /* causal scan control, row (b,t,h) at ck + b*cs_b + t*cs_t + h*cs_h (n reals):
     * SUM: write weights w_t; LOGZ: logits l_t */
    const real *ck, *cv;
    size_t cs_b, cs_t, cs_h;
    double p_drop;         /* attention dropout on the slot weights (0 in eval / streaming) */
    uint64_t key;
    /* bidirectional only: query rows per sequence (0: T; cross-attention: the target length),
     * and an optional mask of empty slots, slot j of batch b empty when empty[b*empty_b + j] */
    int Tq;
    const uint8_t *empty;
    size_t empty_b;
} mega_abc_k;

/* one step of the normalised cumulative form (in log space) for one slot: lz (in: log Z_{t-1},
 * out: log Z_t), l = the token's logit; g, w as above (g = 0, w = 1 while the memory is empty) */
static inline void mega_abc_logz_step(real *lz, real l, real *g, real *w) {
    if (*lz == -INFINITY) {
        *g = 0, *w = 1, *lz = l;
        return;
    }
    real a = *lz, m = a > l ? a : l, lo = a > l ? l : a;
    real z = m + R_LOG1P(R_EXP(lo - m));
    *g = R_EXP(a - z), *w = R_EXP(l - z), *lz = z;
}

/* ---- window ----------------------------------------------------------------------------- */
/* reals of per-unit temporary storage for the window kernels */
size_t mega_abc_window_tmp(const mega_abc_k *k);
/* one query against m present rows (stride ld) kr/vr, of which rows with padr[i] != 0 are empty
 * (padr may be NULL), plus e further empty slots; p[0..m) receives the slot weights of the rows
 * (0 for empty ones), p[m..m+e) zeros; o (d) = sum_i dropout(p)_i vr_i. pidx: index of p[0] in
 * the dropout stream (ignored when p_drop = 0) */
void mega_abc_window_read(const mega_abc_k *k, real *o, real *p, const real *q, const real *kr, const real *vr,
                          size_t ld, int m, const uint8_t *padr, int e, uint64_t pidx);
/* training forward of unit (b, h): o, P rows of the unit; pad [B,T] or NULL */
void mega_abc_window_forward(const mega_abc_k *k, real *o, real *P, const real *q, const real *kk, const real *v,
                             const uint8_t *pad, int b, int h);
/* backward: dq, dk, dv (head columns of batch b) are overwritten */
void mega_abc_window_backward(const mega_abc_k *k, real *dq, real *dk, real *dv, const real *dO, const real *P,
                              const real *q, const real *kk, const real *v, const uint8_t *pad, int b, int h,
                              real *tmp);

/* ---- causal scan ------------------------------------------------------------------------ */
size_t mega_abc_scan_fwd_tmp(const mega_abc_k *k);
size_t mega_abc_scan_bwd_tmp(const mega_abc_k *k);
/* forward of unit (b, h) from the state (Mk, Mv [n,d]; lzk, lzv [n], LOGZ only; all updated in
 * place to the state after the last row). P may be NULL (streaming). tmp: scan_fwd_tmp reals */
void mega_abc_scan_forward(const mega_abc_k *k, real *o, real *P, const real *q, const real *kk, const real *v,
                           const uint8_t *pad, int b, int h, real *Mk, real *Mv, real *lzk, real *lzv, real *tmp);
/* backward of unit (b, h) from an empty initial memory: dq, dk, dv head columns overwritten;
 * dck, dcv [B,T,H,n] rows of the unit overwritten with dL/dw (SUM) or dL/dl (LOGZ) */
void mega_abc_scan_backward(const mega_abc_k *k, real *dq, real *dk, real *dv, real *dck, real *dcv, const real *dO,
                            const real *P, const real *q, const real *kk, const real *v, const uint8_t *pad, int b,
                            int h, real *ws);

/* ---- bidirectional ---------------------------------------------------------------------- */
size_t mega_abc_bidir_tmp(const mega_abc_k *k);
/* phk, phv: Phi^T [n, T] of the unit (row stride ldph); Km, Vm [n, d] receive the memories
 * (the ABC paper's memory, K~ = sum_i phi_i k_i^T, as K~ = Phi^T K) */
void mega_abc_bidir_memory(const mega_abc_k *k, real *Km, real *Vm, const real *kk, const real *v, const real *phk,
                           const real *phv, size_t ldph, int b, int h);
/* the read of unit (b, h): P rows = softmax(scale K~ q) over the non-empty slots, o = dropout(P) V~
 * for the Tq queries of batch b */
void mega_abc_bidir_read(const mega_abc_k *k, real *o, real *P, const real *Km, const real *Vm, const real *q, int b,
                         int h, real *tmp);
/* memory then read */
void mega_abc_bidir_forward(const mega_abc_k *k, real *o, real *P, real *Km, real *Vm, const real *q, const real *kk,
                            const real *v, const real *phk, const real *phv, size_t ldph, int b, int h, real *tmp);
/* dq, dk, dv head columns overwritten; dphk, dphv [n, T] (stride ldd) overwritten with dL/dPhi^T */
void mega_abc_bidir_backward(const mega_abc_k *k, real *dq, real *dk, real *dv, real *dphk, real *dphv, size_t ldd,
                             const real *dO, const real *P, const real *Km, const real *Vm, const real *q,
                             const real *kk, const real *v, const real *phk, const real *phv, size_t ldph, int b,
                             int h, real *tmp);

/* ---- the memory controls of the bidirectional form (shared by the ABC mixers and the bounded
 * cross-attention) ----------------------------------------------------------------------- */
/* Linformer: Phi^T [B, n, T] = E[:, :T] (E [n, N], row stride N) with pad columns zeroed (project
 * rule: pads are zeroed before the compression) */
void mega_abc_lin_phi(const real *E, size_t N, int n, real *ph, const uint8_t *pad, int B, int T);
/* dE[j, t] += sum over b and the H units of b of g[((b*H + h)*n + j)*T + t] at the valid t */
void mega_abc_lin_phi_backward(real *dE, size_t N, const real *g, const uint8_t *pad, int B, int H, int n, int T);
/* ABC-MLP (paper eq. 7): Phi^T [B, Hn, T], row j the softmax over the valid positions of
 * l_j = W_phi[j] . x_t (W_phi [Hn, D]); a row with no valid position is 0 */
void mega_abc_mlp_phi(const real *Wp, real *ph, const real *x, const uint8_t *pad, int B, int T, size_t Hn, size_t D);
/* from g = dL/dPhi^T [B, Hn, T] (overwritten with dL/dl): dWp += dl^T X, dx += dl W_phi */
void mega_abc_mlp_phi_backward(const real *Wp, real *dWp, real *dx, real *g, const real *ph, const real *x, int B, int T,
                               size_t Hn, size_t D);
/* Fixed blocks (the cross-attention's abc-window): the S_b valid positions of row b, in order,
 * fall into blocks of c = ceil(S_b / n) consecutive ones; slot j holds the mean of block j:
 * Phi^T [B, n, T] = 1/|block j| at the block's positions, 0 elsewhere (pads included); empty
 * [B, n] marks the slots no position falls into (S_b < n, or the last ones) */
void mega_abc_block_phi(real *ph, uint8_t *empty, const uint8_t *pad, int B, int T, int n);

/* ---- glue for the layer (src/layers/abc.c) ---------------------------------------------- */
/* abc-window only: treat empty memory slots literally (0) instead of masking them; layer is the
 * block's mixer layer (mega_block_mixer) */
void mega_abc_set_mask_empty(void *layer, int on);
#endif
