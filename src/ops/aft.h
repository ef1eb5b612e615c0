/*
 * Kernels of the AFT family (Zhai et al. 2021; docs/mixers.md): the normalised per-channel ratio
 *
 *     ybar[t,c] = sum_u A[t,u,c] V[u,c] / sum_u A[t,u,c],     A[t,u,c] = exp(K[u,c] + b[t,u,c])
 *
 * over the keys u visible from t (causal: u <= t; bidirectional: every u), pad keys dropped
 * from BOTH sums, and a query that sees no key gets ybar = 0 and no gradient (project rules; the
 * AFT papers do not pad).
 * The caller (src/layers/aft.c) applies the gate sigma(Q), the output factor gamma(t) and the
 * projections; the kernels see only K, V and the position bias b:
 *
 *   pair kernel (AFT-full, AFT-local of the AFT paper): b[t,u] = w'[t,u] from a learned table,
 *       full: w' = w (T x T), local: w' = w inside the band |t-u| < s (causal 0 <= t-u < s) and
 *       0 (not -inf) outside. Evaluated block-wise with GEMMs:
 *       exp(w' - rowmax) [BS x BS] times exp(K - blockmax) [BS x 2 D_a], recombined per (t, c)
 *       with max-subtraction (as labml's AFTLocal); for AFT-local the key blocks that are entirely
 *       outside the band of a query block enter as one prefix (and suffix) aggregate, so the cost
 *       is O(L (s + BS) D_a). Entries whose scaled denominator underflows are recomputed exactly
 *       (flagged, and handled exactly in the backward too).
 *   scan kernel (AFT-simple, time-weighted AFT with exponential f as an RNN, as RWKV):
 *       b[t,u,c] = -w_c |t-u|  (w_c >= 0 per channel, 0 for AFT-simple), as the stable
 *       running-max recurrence (project extension): state (s1, s2, e) with sums = s * exp(e); the
 *       bidirectional form is a forward (inclusive) plus a backward (exclusive) scan.
 *       The backward is a reverse-time adjoint scan of the same form (for dK, dV) plus a
 *       first-moment scan for dw (d/dw exp(-w d) = -d exp(-w d); our derivation).
 *
 * Saved by the forward (both kernels): ybar [B,T,D_a] and lden = log(sum_u A) [B,T,D_a]
 * (+1e30 for an empty query), which give every backward factor A/den = exp(K + b - lden) <= 1
 * without overflow. Layouts: K and V are rows of stride ld (they live inside the fused qkv
 * buffer); ybar, lden, dy are contiguous [B,T,D_a]; dK/dV rows of stride ldd, accumulated.
 * Threads: forward over (batch, block) units; backward split by output ownership, so results
 * do not depend on the thread count. No allocation: every kernel works in caller scratch.
 */
#ifndef MEGA_AFT_OPS_H
#define MEGA_AFT_OPS_H
#include "core/internal.h"

#define MEGA_AFT_DB 16         /* channels per block of the scans */
#define MEGA_AFT_BS 64         /* positions per block of the pair kernel */
#define MEGA_AFT_NEG (-1e30)   /* log of an empty sum (a finite sentinel keeps the scans NaN-free) */

/* ---- scan kernel (AFT-simple, AFT-tw) ---------------------------------------------------- */
typedef struct {
    int Da, bidir;
    const real *w; /* per-channel decay w_c >= 0 [Da], or NULL (w = 0: AFT-simple) */
} mega_aft_scan_k;

size_t mega_aft_scan_scratch(const mega_aft_scan_k *k, int B, int T, int nthreads);
void mega_aft_scan_forward(const mega_aft_scan_k *k, real *ybar, real *lden, const real *K, const real *V, size_t ld,
                           const uint8_t *pad, int B, int T, real *scratch, int nthreads);
/* dK, dV (stride ldd) accumulate; dw [Da] accumulates d loss / d w_c (NULL when k->w is NULL) */
void mega_aft_scan_backward(const mega_aft_scan_k *k, real *dK, real *dV, size_t ldd, real *dw, const real *dy,
                            const real *ybar, const real *lden, const real *K, const real *V, size_t ld,
                            const uint8_t *pad, int B, int T, real *scratch, int nthreads);
/* streaming (causal): state [3 * Da] = (s1, s2, e) for one sequence */
void mega_aft_scan_state_reset(real *st, int Da);
/* one token: fold the key (K, V) into the state (decay first), ybar [Da] = its output */
void mega_aft_scan_step(const mega_aft_scan_k *k, real *st, real *ybar, const real *K, const real *V);

/* ---- pair kernel (AFT-full, AFT-local) --------------------------------------------------- */
typedef struct {
    int Da, bidir;
    int s;         /* AFT-local window (>= 1); 0 = AFT-full */
    int Tmax;      /* rows of the table (the mixer's max-len) */
    const real *w; /* full: [Tmax, Tmax]; local: [Tmax, s] causal, [Tmax, 2s-1] bidirectional */
} mega_aft_pair_k;

/* columns of the local table; entry (t, u) of the band lives at column u - t + s - 1 */
static inline int mega_aft_local_cols(int s, int bidir) { return bidir ? 2 * s - 1 : s; }
size_t mega_aft_pair_scratch(const mega_aft_pair_k *k, int B, int T, int nthreads);
/* reals needed to hold the per-(b,t,c) fallback flags (bytes) */
size_t mega_aft_pair_flag_reals(int B, int T, int Da);
void mega_aft_pair_forward(const mega_aft_pair_k *k, real *ybar, real *lden, uint8_t *flags, const real *K,
                           const real *V, size_t ld, const uint8_t *pad, int B, int T, real *scratch, int nthreads);
/* dK, dV (stride ldd) and dw (same layout as k->w) accumulate */
void mega_aft_pair_backward(const mega_aft_pair_k *k, real *dK, real *dV, size_t ldd, real *dw, const real *dy,
                            const real *ybar, const real *lden, const uint8_t *flags, const real *K, const real *V,
                            size_t ld, const uint8_t *pad, int B, int T, real *scratch, int nthreads);
/* Exact evaluation of one query t (streaming): keys u in [ua, ub) whose rows are K/V + (u mod
 * ring) * ld (ring = 0: row u), plus an optional aggregate agg [3 * Da] (s1, s2, e) of earlier
 * keys that carry no position bias (AFT-local's keys outside the band). ybar [Da] = the
 * ratio; buf: 2 * (ub - ua + 1) reals. */
void mega_aft_pair_query(const mega_aft_pair_k *k, int t, int ua, int ub, const real *K, const real *V, size_t ld,
                         int ring, const real *agg, real *ybar, real *buf);
/* fold one key (K, V rows [Da]) without bias into an aggregate (s1, s2, e) [3 * Da] */
void mega_aft_agg_add(real *agg, const real *K, const real *V, int Da);
#endif
