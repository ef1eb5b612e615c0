/*
 * Multi-head masked softmax attention with pluggable positional terms (Vaswani et al. 2017, with
 * the schemes of docs/mixers.md): the one kernel behind the mha, local and mhatw mixers.
 *
 * Layout: q, k, v, O are [B, T, H*dh] row-major with head h in columns [h*dh, (h+1)*dh) (the
 * output of the projections, no transposes). For query t and key u of head h:
 *
 *   c(t,u)  = scale * <q~_t, k~_u>            (q~, k~: q, k as given, times the XPOS factors)
 *   s(t,u)  = lambda_t * c(t,u) + btab_h[bc + u - t] + kbias_h[min(u, kbl-1)]
 *   visible = (causal: u <= t, and t - w < u with a window w > 0;
 *              bidirectional: |t - u| <= w with a window, else every u) and key u not padding
 *   P(t,.)  = softmax over the visible u (others weight 0); a row with no visible key gives
 *             O = 0 and no gradient (project rule)
 *   O_t     = sum_u dropout(P)(t,u) v_u
 *
 *  - log-n scaling (Chiang & Cholak 2022; Su, kexue.fm/archives/8823; the max(1, .) is a project
 *    extension): lambda_t = max(1, log n_t / log L_train),
 *    n_t = the number of visible keys of row t (valid keys only), multiplying the content term
 *    c only (the positional bias keeps its training-length meaning); lambda = 1 when off.
 *  - btab: a per-head distance table (posenc.h geometry: bl entries per head, distance 0 at bc);
 *    it must cover every distance of a visible pair. NULL: no distance bias.
 *  - kbias: a per-head key-position bias (MHATW log beta_h(u)) of kbl entries;
 *    positions u >= kbl use the last entry (MHATW length policy; project extension). NULL: none.
 *  - XPOS (torchscale, causal only): pairs (2i, 2i+1) of q and k (already rotated by the caller)
 *    are scaled so that pair i of <q~_t, k~_u> carries zeta_i^((t-u)/512). Re-centred per
 *    query block (project extension): for a block starting at m0 the queries get
 *    zeta^((t-m0)/512) and the keys zeta^((m0-u)/512), so no factor exceeds
 *    zeta_0^(-BR/512) ~ 1.17 whatever the length; the decay of distant keys may underflow to 0,
 *    which is the correct limit. xtab[(delta + xoff)*(dh/2) + i] = zeta_i^(delta/512) must cover
 *    delta in [-BR, T) (forward/backward) or [0, max distance] (query).
 *
 * Memory (the tiled form, a project choice): the forward keeps only O and the row log-sum-exp
 * lse [B, H, T]; the backward recomputes each block of scores from q, k and lse. Blocks are
 * MEGA_MHATTN_BR query rows by the keys those rows can see (all T, or BR + window with a local
 * mask), so at most one block of scores (plus its gradient) exists per thread. Threads run over
 * (batch, head) units with per-thread scratch; the bias gradients are summed per unit and
 * reduced in a fixed order, so results do not depend on the thread count. Nothing allocates.
 */
#ifndef MEGA_MHATTN_H
#define MEGA_MHATTN_H
#include "core/internal.h"

#define MEGA_MHATTN_BR 64

typedef struct {
    int H, dh;         /* heads and head width (rows are H*dh wide) */
    int causal;
    int window;        /* > 0: local mask (Su, kexue.fm/archives/9431) */
    real scale;        /* content scale, 1/sqrt(dh) */
    double log_train;  /* log L_train > 0: log-n scaling on; 0: off */
    const real *btab;  /* distance table or NULL */
    int bc, bl;
    const real *kbias; /* key-position bias or NULL */
    int kbl;
    const real *xtab;  /* XPOS factors or NULL */
    int xoff;
    double p_drop;     /* attention dropout on P (training) */
    uint64_t key_drop;
} mega_mhattn_k;

/* reals of scratch for a forward or backward over [B, T] with up to nthreads threads */
size_t mega_mhattn_scratch(const mega_mhattn_k *k, int B, int T, int nthreads);
/* O [B,T,H*dh] (overwritten), lse [B,H,T] */
void mega_mhattn_forward(const mega_mhattn_k *k, real *O, real *lse, const real *q, const real *kk, const real *v,
                         const uint8_t *pad, int B, int T, real *scratch, int nthreads);
/* accumulates dq, dk, dv [B,T,H*dh] (w.r.t. the given, pre-XPOS-scaling q and k), dbtab [H*bl]
 * and dkbias [H*kbl] (either may be NULL) from dO; O and lse: the forward's outputs */
void mega_mhattn_backward(const mega_mhattn_k *k, real *dq, real *dk, real *dv, real *dbtab, real *dkbias,
                          const real *dO, const real *O, const real *q, const real *kk, const real *v, const real *lse,
                          const uint8_t *pad, int B, int T, real *scratch, int nthreads);

/* Streaming (KV cache): head h of one query at absolute position t against the cached keys
 * and values of positions [lo, t]; position u lives in slot u % slots of kc / vc ([slots, H*dh]:
 * a plain cache when slots exceeds every position, else a ring buffer). No mask, no dropout;
 * log-n uses n_t = t - lo + 1; XPOS applies zeta^((t-u)/512) relative to the query (keys are
 * cached rotated but unscaled). Writes o[h*dh .. h*dh+dh). w: t - lo + 1 reals of scratch. */
void mega_mhattn_query(const mega_mhattn_k *k, int h, real *o, const real *q, int64_t t, int64_t lo, const real *kc,
                       const real *vc, int slots, real *w);
#endif
