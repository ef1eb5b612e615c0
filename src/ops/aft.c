/* AFT family kernels (Zhai et al. 2021; docs/mixers.md): the normalised ratio with
 * max-subtraction, the pairwise (full / local) block kernel and the exponential scan. See aft.h. */
#include "ops/aft.h"
#include "ops/ops.h"
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define DB MEGA_AFT_DB
#define BS MEGA_AFT_BS
#define NEG ((real)MEGA_AFT_NEG)
#define EMPTY_L ((real)(-MEGA_AFT_NEG))
#define IS_SET(e) ((e) > NEG / 2) /* a log-scale that is not the empty sentinel */
/* pair kernel: an entry whose scaled denominator is below exp(LOGTAU) is recomputed exactly
 * (the backward factors exp(rowmax + blockmax - lden) are then bounded by exp(-LOGTAU)) */
#ifdef MEGA_F64
#define LOGTAU (-400.0)
#else
#define LOGTAU (-40.0f)
#endif


/* ---- shared pieces ------------------------------------------------------------------------ */

/* One step of the stable decayed log-domain sum (project extension) for nd channels:
 *     S <- exp(-w) S + exp(ls) (x1, x2),   S = (s1, s2) * exp(e)
 * with the new exponent e* = max(e - w, ls), so both factors are <= 1 and K needs no clamping.
 * Optional first moment (m1, m2) = sum of distance * item, in the same exponent frame:
 *     m <- exp(e - w - e*) (m + s)       (every earlier item moves one step away; the new one is at 0)
 * Missing items have ls = NEG and x = 0; the sentinel keeps an empty state NaN-free (every ls is
 * >= NEG, so e stays >= NEG). One of the two factors is exactly 1: a single exp per step
 * (mega_exp: the library's vectorisable exp, 0 below -87 in float). */
static inline void lstep(int nd, real *s1, real *s2, real *e, real *m1, real *m2, const real *w, const real *ls,
                         const real *x1, const real *x2) {
    for (int j = 0; j < nd; j++) {
        const real ep = e[j] - (w ? w[j] : 0), d = ep - ls[j], ex = mega_exp(-R_FABS(d));
        const real en = d >= 0 ? ep : ls[j], fo = d >= 0 ? 1 : ex, fn = d >= 0 ? ex : 1;
        if (m1) {
            m1[j] = fo * (m1[j] + s1[j]);
            m2[j] = fo * (m2[j] + s2[j]);
        }
        s1[j] = fo * s1[j] + fn * x1[j];
        s2[j] = fo * s2[j] + fn * x2[j];
        e[j] = en;
    }
}

/* (s1, s2, e) += (t1, t2, te), log-domain */
static inline void lmerge(real *s1, real *s2, real *e, real t1, real t2, real te) {
    real m = MEGA_MAX(*e, te);
    real a = mega_exp(*e - m), b = mega_exp(te - m);
    *s1 = *s1 * a + t1 * b;
    *s2 = *s2 * a + t2 * b;
    *e = m;
}

/* the normalised ratio ybar = num / den and lden = log den from a scaled pair (project rule: an
 * empty query gives 0 and the sentinel lden = +1e30, so that every backward factor is 0) */
static inline void ratio(real num, real den, real e, real *ybar, real *lden) {
    if (den > 0) {
        *ybar = num / den;
        *lden = e + R_LOG(den);
    } else {
        *ybar = 0;
        *lden = EMPTY_L;
    }
}

static inline int valid_at(const uint8_t *pad, int b, int T, int t) { return !pad || !pad[(size_t)b * T + t]; }

/* value items of key t for channels [d0, d0+nd): log-scale K, payload (V, 1); pads dropped */
static inline void value_items(real *ls, real *x1, real *x2, int nd, const real *K, const real *V, size_t ld,
                               const uint8_t *pad, int b, int T, int t, int d0) {
    const size_t r = ((size_t)b * T + t) * ld + d0;
    if (valid_at(pad, b, T, t)) {
        for (int j = 0; j < nd; j++) ls[j] = K[r + j], x1[j] = V[r + j], x2[j] = 1;
    } else {
        for (int j = 0; j < nd; j++) ls[j] = NEG, x1[j] = 0, x2[j] = 0;
    }
}

/* adjoint items of query t (ours): d loss/d num_t = dy/den, d loss/d den_t = -dy ybar/den,
 * i.e. log-scale -lden and payload (dy, -dy ybar) */
static inline void adjoint_items(real *ls, real *x1, real *x2, int nd, const real *dy, const real *ybar,
                                 const real *lden, size_t r) {
    for (int j = 0; j < nd; j++) {
        int set = lden[r + j] < EMPTY_L / 2;
        ls[j] = set ? -lden[r + j] : NEG;
        x1[j] = set ? dy[r + j] : 0;
        x2[j] = set ? -dy[r + j] * ybar[r + j] : 0;
    }
}

static inline void lreset(real *s1, real *s2, real *e, int n) {
    for (int j = 0; j < n; j++) s1[j] = 0, s2[j] = 0, e[j] = NEG;
}

/* ---- scan kernel (AFT-simple, time-weighted AFT as an RNN) ---------------------------------- */

size_t mega_aft_scan_scratch(const mega_aft_scan_k *k, int B, int T, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    size_t per = k->bidir ? 3 * (size_t)T * DB : 0; /* backward-direction states of the forward */
    return per * (size_t)nthreads + (size_t)B * k->Da + 64;  /* + per-batch dw partials */
}

void mega_aft_scan_forward(const mega_aft_scan_k *k, real *ybar, real *lden, const real *K, const real *V, size_t ld,
                           const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    const int Da = k->Da, nblk = (Da + DB - 1) / DB;
    const long units = (long)B * nblk;
    const size_t per = k->bidir ? 3 * (size_t)T * DB : 0;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)B * T * Da > MEGA_PAR_MIN / 4)
    for (long un = 0; un < units; un++) {
        const int b = (int)(un / nblk), d0 = (int)(un % nblk) * DB, nd = MEGA_MIN(DB, Da - d0);
        real w[DB], s1[DB], s2[DB], e[DB], ls[DB], x1[DB], x2[DB];
        for (int j = 0; j < nd; j++) w[j] = k->w ? k->w[d0 + j] : 0;
        real *bs1 = scratch + per * (size_t)mega__thread_id(), *bs2 = bs1 + (size_t)T * DB, *be = bs2 + (size_t)T * DB;
        if (k->bidir) { /* backward direction, inclusive: keys u >= t */
            lreset(s1, s2, e, nd);
            for (int t = T - 1; t >= 0; t--) {
                value_items(ls, x1, x2, nd, K, V, ld, pad, b, T, t, d0);
                lstep(nd, s1, s2, e, NULL, NULL, w, ls, x1, x2);
                for (int j = 0; j < nd; j++)
                    bs1[(size_t)t * DB + j] = s1[j], bs2[(size_t)t * DB + j] = s2[j], be[(size_t)t * DB + j] = e[j];
            }
        }
        lreset(s1, s2, e, nd);
        for (int t = 0; t < T; t++) { /* forward direction, inclusive: keys u <= t */
            value_items(ls, x1, x2, nd, K, V, ld, pad, b, T, t, d0);
            lstep(nd, s1, s2, e, NULL, NULL, w, ls, x1, x2);
            const size_t r = ((size_t)b * T + t) * Da + d0;
            for (int j = 0; j < nd; j++) {
                real a1 = s1[j], a2 = s2[j], ae = e[j];
                /* bidirectional: + keys u > t = the backward state at t+1 decayed one step (the
                 * current token counted once) */
                if (k->bidir && t + 1 < T) {
                    const size_t o = (size_t)(t + 1) * DB + j;
                    lmerge(&a1, &a2, &ae, bs1[o], bs2[o], be[o] - w[j]);
                }
                ratio(a1, a2, ae, ybar + r + j, lden + r + j);
            }
        }
    }
}

void mega_aft_scan_backward(const mega_aft_scan_k *k, real *dK, real *dV, size_t ldd, real *dw, const real *dy,
                            const real *ybar, const real *lden, const real *K, const real *V, size_t ld,
                            const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    const int Da = k->Da, nblk = (Da + DB - 1) / DB;
    const long units = (long)B * nblk;
    const size_t per = k->bidir ? 3 * (size_t)T * DB : 0;
    real *dwp = scratch + per * (size_t)(nthreads < 1 ? 1 : nthreads); /* [B, Da] partial dw per batch */
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)B * T * Da > MEGA_PAR_MIN / 8)
    for (long un = 0; un < units; un++) {
        const int b = (int)(un / nblk), d0 = (int)(un % nblk) * DB, nd = MEGA_MIN(DB, Da - d0);
        real w[DB], s1[DB], s2[DB], e[DB], m1[DB], m2[DB], ls[DB], x1[DB], x2[DB], acc[DB];
        for (int j = 0; j < nd; j++) w[j] = k->w ? k->w[d0 + j] : 0, acc[j] = 0;
        /* dw = -sum_t dy_t exp(-lden_t) (m1_t - ybar_t m2_t): m = first moment of the value sums
         * (d/dw exp(-w d) = -d exp(-w d)); forward direction, then the backward one */
        for (int dir = 0; k->w && dir < (k->bidir ? 2 : 1); dir++) {
            lreset(s1, s2, e, nd);
            for (int j = 0; j < nd; j++) m1[j] = 0, m2[j] = 0;
            for (int i = 0; i < T; i++) {
                const int t = dir ? T - 1 - i : i;
                value_items(ls, x1, x2, nd, K, V, ld, pad, b, T, t, d0);
                lstep(nd, s1, s2, e, m1, m2, w, ls, x1, x2);
                /* (the inclusive moment at t equals the exclusive one: key t is at distance 0) */
                const size_t r = ((size_t)b * T + t) * Da + d0;
                for (int j = 0; j < nd; j++)
                    acc[j] -= dy[r + j] * (m1[j] - ybar[r + j] * m2[j]) * mega_exp(e[j] - lden[r + j]);
            }
        }
        if (k->w)
            for (int j = 0; j < nd; j++) dwp[(size_t)b * Da + d0 + j] = acc[j];
        /* dK, dV: adjoint sums Lambda_u = sum_t exp(-w |t-u|) (d num_t, d den_t) over the queries
         * that see key u: a reverse-time scan (keys u <= t), and for bidirectional a forward
         * exclusive scan (keys u > t); dV_u = e^{K_u} L1, dK_u = e^{K_u} (V_u L1 + L2) */
        for (int dir = 0; dir < (k->bidir ? 2 : 1); dir++) {
            lreset(s1, s2, e, nd);
            for (int i = 0; i < T; i++) {
                const int u = dir ? i : T - 1 - i;
                const size_t r = ((size_t)b * T + u) * Da + d0;
                if (!dir) adjoint_items(ls, x1, x2, nd, dy, ybar, lden, r), lstep(nd, s1, s2, e, NULL, NULL, w, ls, x1, x2);
                if (valid_at(pad, b, T, u)) {
                    const size_t rk = ((size_t)b * T + u) * ld + d0, rd = ((size_t)b * T + u) * ldd + d0;
                    for (int j = 0; j < nd; j++) {
                        /* exponent <= 0: every term exp(K_u - w|t-u| - lden_t) is a share of den_t */
                        real f = mega_exp(K[rk + j] + e[j] - (dir ? w[j] : 0));
                        dV[rd + j] += f * s1[j];
                        dK[rd + j] += f * (V[rk + j] * s1[j] + s2[j]);
                    }
                }
                if (dir) adjoint_items(ls, x1, x2, nd, dy, ybar, lden, r), lstep(nd, s1, s2, e, NULL, NULL, w, ls, x1, x2);
            }
        }
    }
    if (dw)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < Da; c++) dw[c] += dwp[(size_t)b * Da + c];
}

void mega_aft_scan_state_reset(real *st, int Da) { lreset(st, st + Da, st + 2 * (size_t)Da, Da); }

void mega_aft_scan_step(const mega_aft_scan_k *k, real *st, real *ybar, const real *K, const real *V) {
    const int Da = k->Da;
    real *s1 = st, *s2 = st + Da, *e = st + 2 * (size_t)Da;
    real ones[DB], dummy;
    for (int j = 0; j < DB; j++) ones[j] = 1;
    for (int d0 = 0; d0 < Da; d0 += DB) {
        const int nd = MEGA_MIN(DB, Da - d0);
        /* the same step as the causal forward, so streaming reproduces it exactly */
        lstep(nd, s1 + d0, s2 + d0, e + d0, NULL, NULL, k->w ? k->w + d0 : NULL, K + d0, V + d0, ones);
        if (ybar)
            for (int j = 0; j < nd; j++) ratio(s1[d0 + j], s2[d0 + j], e[d0 + j], ybar + d0 + j, &dummy);
    }
}

void mega_aft_agg_add(real *agg, const real *K, const real *V, int Da) {
    const mega_aft_scan_k k = {Da, 0, NULL};
    mega_aft_scan_step(&k, agg, NULL, K, V);
}

/* ---- pair kernel (AFT-full, AFT-local) ---------------------------------------------------- */

/* w'(t,u) and the index of its table entry (SIZE_MAX: outside the local band, w' = 0) */
static inline real pk_w(const mega_aft_pair_k *k, int t, int u, size_t *idx) {
    if (k->s <= 0) {
        *idx = (size_t)t * k->Tmax + u;
        return k->w[*idx];
    }
    const int d = t - u, s = k->s;
    if (d >= s || (k->bidir ? d <= -s : d < 0)) {
        *idx = SIZE_MAX;
        return 0;
    }
    *idx = (size_t)t * mega_aft_local_cols(s, k->bidir) + (size_t)(s - 1 - d);
    return k->w[*idx];
}

/* key blocks [lo, hi] evaluated pairwise for query block qb; keys in blocks < lo (> hi) are
 * outside the band of every query of qb and enter as the prefix (suffix) aggregate */
static inline void pk_range(const mega_aft_pair_k *k, int qb, int T, int *lo, int *hi) {
    const int nkb = (T + BS - 1) / BS, t0 = qb * BS, t1 = MEGA_MIN(T, t0 + BS);
    if (k->s <= 0) {
        *lo = 0;
        *hi = k->bidir ? nkb - 1 : (t1 - 1) / BS;
        return;
    }
    const long a = (long)t0 - k->s + 1, z = k->bidir ? MEGA_MIN((long)T - 1, (long)t1 - 2 + k->s) : (long)t1 - 1;
    *lo = a <= 0 ? 0 : (int)(a / BS);
    *hi = (int)(z / BS);
}

static inline int masked(const mega_aft_pair_k *k, const uint8_t *padb, int t, int u) {
    return (padb && padb[u]) || (!k->bidir && u > t);
}

/* A tile of rows [t0, t0+nq) x keys [u0, u0+nk): mode 1 computes the row maxima mw of w' over
 * the visible keys (NEG if none); mode 2 fills EW = exp(w' - mw) (0 where masked). */
static void pk_tile(const mega_aft_pair_k *k, int t0, int nq, int u0, int nk, const uint8_t *padb, real *EW, real *mw,
                    int mode) {
    size_t idx;
    for (int i = 0; i < nq; i++) {
        const int t = t0 + i;
        if (mode & 1) {
            real mx = NEG;
            for (int j = 0; j < nk; j++)
                if (!masked(k, padb, t, u0 + j)) mx = MEGA_MAX(mx, pk_w(k, t, u0 + j, &idx));
            mw[i] = mx;
        }
        if (mode & 2) {
            real *row = EW + (size_t)i * BS;
            for (int j = 0; j < nk; j++)
                row[j] = masked(k, padb, t, u0 + j) ? 0 : mega_exp(pk_w(k, t, u0 + j, &idx) - mw[i]);
        }
    }
}

/* logits K[u,c] + w'(t,u) and values V[u,c] of the keys u in [ua, ub) (rows u mod ring, or u;
 * pads skipped when padrow is given); returns the count */
static int pk_keys(const mega_aft_pair_k *k, int t, int ua, int ub, const real *K, const real *V, size_t ld, int ring,
                   const uint8_t *padrow, int c, real *lg, real *val) {
    int n = 0;
    size_t idx;
    for (int u = ua; u < ub; u++) {
        if (padrow && padrow[u]) continue;
        const size_t row = (size_t)(ring ? u % ring : u) * ld + c;
        lg[n] = K[row] + pk_w(k, t, u, &idx);
        val[n++] = V[row];
    }
    return n;
}

void mega_aft_pair_query(const mega_aft_pair_k *k, int t, int ua, int ub, const real *K, const real *V, size_t ld,
                         int ring, const real *agg, real *ybar, real *buf) {
    const int Da = k->Da;
    real *lg = buf, *val = buf + (ub - ua + 1);
    for (int c = 0; c < Da; c++) {
        int n = pk_keys(k, t, ua, ub, K, V, ld, ring, NULL, c, lg, val);
        if (agg && agg[Da + c] > 0) { /* the aggregate as one key of weight s2 e^e and value s1/s2 */
            lg[n] = agg[2 * (size_t)Da + c] + R_LOG(agg[Da + c]);
            val[n++] = agg[c] / agg[Da + c];
        }
        mega_softmax_row(lg, (size_t)n);
        real y = 0;
        for (int i = 0; i < n; i++) y += lg[i] * val[i];
        ybar[c] = y;
    }
}

typedef struct {
    int nkb;
    size_t kx, mk, pre, suf, hb, per;
} pk_layout;

/* scratch: shared  KX [B,T,2Da] = [e^{K-mK} | e^{K-mK} V] per key block, mK [B,nkb,Da],
 *          prefix/suffix aggregates [B,nkb+1,3Da], per-query-block adjoint sums [B,nkb,3Da];
 *          per thread: two BS x BS tiles, mw [BS x nkb], M [BS x Da], four BS x 2Da buffers,
 *          the exact path's logits/values (2T + 2) */
static pk_layout pk_lay(const mega_aft_pair_k *k, int B, int T) {
    pk_layout L;
    const size_t Da = (size_t)k->Da;
    L.nkb = (T + BS - 1) / BS;
    L.kx = 0;
    L.mk = L.kx + (size_t)B * T * 2 * Da;
    L.pre = L.mk + (size_t)B * L.nkb * Da;
    L.suf = L.pre + (size_t)B * (L.nkb + 1) * 3 * Da;
    L.hb = L.suf + (size_t)B * (L.nkb + 1) * 3 * Da;
    L.per = L.hb + (size_t)B * L.nkb * 3 * Da;
    return L;
}
static size_t pk_thread_size(const mega_aft_pair_k *k, int T) {
    const size_t nkb = ((size_t)T + BS - 1) / BS, Da = (size_t)k->Da;
    return 2 * (size_t)BS * BS + BS * nkb + BS * Da + 4 * BS * 2 * Da + 2 * (size_t)T + 2 + 64;
}

size_t mega_aft_pair_scratch(const mega_aft_pair_k *k, int B, int T, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return pk_lay(k, B, T).per + pk_thread_size(k, T) * (size_t)nthreads + 64;
}
size_t mega_aft_pair_flag_reals(int B, int T, int Da) {
    return ((size_t)B * T * Da + sizeof(real) - 1) / sizeof(real);
}

/* per key block: mK = max over its valid keys, KX = [e^{K-mK} | e^{K-mK} V] (0 at pads); and
 * (local) the prefix/suffix aggregates of whole blocks: pre[j] = keys of blocks < j,
 * suf[j] = keys of blocks >= j */
static void pk_prep(const mega_aft_pair_k *k, const pk_layout *L, real *scratch, const real *K, const real *V,
                    size_t ld, const uint8_t *pad, int B, int T, int aggs, int nthreads) {
    const int Da = k->Da, nkb = L->nkb;
    real *KX = scratch + L->kx, *mK = scratch + L->mk;
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)B * T * Da > MEGA_PAR_MIN / 4)
    for (long un = 0; un < (long)B * nkb; un++) {
        const int b = (int)(un / nkb), kb = (int)(un % nkb), u0 = kb * BS, nk = MEGA_MIN(BS, T - u0);
        real *m = mK + ((size_t)b * nkb + kb) * Da;
        for (int c = 0; c < Da; c++) m[c] = NEG;
        for (int j = 0; j < nk; j++)
            if (valid_at(pad, b, T, u0 + j)) {
                const real *kr = K + ((size_t)b * T + u0 + j) * ld;
                for (int c = 0; c < Da; c++) m[c] = MEGA_MAX(m[c], kr[c]);
            }
        for (int j = 0; j < nk; j++) {
            const size_t r = (size_t)b * T + u0 + j;
            real *x = KX + r * 2 * Da;
            if (!valid_at(pad, b, T, u0 + j)) {
                for (int c = 0; c < 2 * Da; c++) x[c] = 0;
                continue;
            }
            for (int c = 0; c < Da; c++) {
                x[c] = mega_exp(K[r * ld + c] - m[c]);
                x[Da + c] = x[c] * V[r * ld + c];
            }
        }
    }
    if (!aggs) return;
    for (int b = 0; b < B; b++) {
        real *pre = scratch + L->pre + (size_t)b * (nkb + 1) * 3 * Da, *suf = scratch + L->suf + (size_t)b * (nkb + 1) * 3 * Da;
        lreset(pre, pre + Da, pre + 2 * Da, Da);
        lreset(suf + (size_t)nkb * 3 * Da, suf + (size_t)nkb * 3 * Da + Da, suf + (size_t)nkb * 3 * Da + 2 * Da, Da);
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < nkb; i++) {
                const int kb = pass ? nkb - 1 - i : i;
                const real *src = pass ? suf + (size_t)(kb + 1) * 3 * Da : pre + (size_t)kb * 3 * Da;
                real *dst = pass ? suf + (size_t)kb * 3 * Da : pre + (size_t)(kb + 1) * 3 * Da;
                memcpy(dst, src, 3 * (size_t)Da * sizeof(real));
                const real *m = mK + ((size_t)b * nkb + kb) * Da;
                for (int c = 0; c < Da; c++) {
                    if (!IS_SET(m[c])) continue;
                    real t1 = 0, t2 = 0;
                    for (int j = 0; j < MEGA_MIN(BS, T - kb * BS); j++) {
                        const real *x = KX + ((size_t)b * T + kb * BS + j) * 2 * Da;
                        t2 += x[c], t1 += x[Da + c];
                    }
                    lmerge(dst + c, dst + Da + c, dst + 2 * Da + c, t1, t2, m[c]);
                }
            }
    }
}

void mega_aft_pair_forward(const mega_aft_pair_k *k, real *ybar, real *lden, uint8_t *flags, const real *K,
                           const real *V, size_t ld, const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    const pk_layout L = pk_lay(k, B, T);
    const int Da = k->Da, nkb = L.nkb;
    const size_t D2 = 2 * (size_t)Da, tsz = pk_thread_size(k, T);
    pk_prep(k, &L, scratch, K, V, ld, pad, B, T, k->s > 0, nthreads);
    const real *KX = scratch + L.kx, *mK = scratch + L.mk;
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)B * T * T * Da > MEGA_PAR_MIN)
    for (long un = 0; un < (long)B * nkb; un++) {
        const int b = (int)(un / nkb), qb = (int)(un % nkb), t0 = qb * BS, nq = MEGA_MIN(BS, T - t0);
        real *ws = scratch + L.per + tsz * (size_t)mega__thread_id();
        real *EW = ws, *mw = EW + 2 * (size_t)BS * BS, *M = mw + (size_t)BS * nkb, *acc = M + (size_t)BS * Da;
        real *tmp = acc + BS * D2, *lg = tmp + 3 * BS * D2, *val = lg + T + 1;
        const uint8_t *padb = pad ? pad + (size_t)b * T : NULL;
        int lo, hi;
        pk_range(k, qb, T, &lo, &hi);
        const real *pre = scratch + L.pre + ((size_t)b * (nkb + 1) + lo) * 3 * Da;
        const real *suf = scratch + L.suf + ((size_t)b * (nkb + 1) + hi + 1) * 3 * Da;
        /* pass 1: row maxima per tile and the common exponent M[t,c] = max over the parts */
        for (int kb = lo; kb <= hi; kb++)
            pk_tile(k, t0, nq, kb * BS, MEGA_MIN(BS, T - kb * BS), padb, NULL, mw + (size_t)(kb - lo) * BS, 1);
        for (int i = 0; i < nq; i++) {
            real *Mi = M + (size_t)i * Da;
            for (int c = 0; c < Da; c++)
                Mi[c] = k->s <= 0 ? NEG : k->bidir ? MEGA_MAX(pre[2 * Da + c], suf[2 * Da + c]) : pre[2 * Da + c];
            for (int kb = lo; kb <= hi; kb++) {
                const real m = mw[(size_t)(kb - lo) * BS + i], *mk = mK + ((size_t)b * nkb + kb) * Da;
                if (!IS_SET(m)) continue;
                for (int c = 0; c < Da; c++)
                    if (IS_SET(mk[c])) Mi[c] = MEGA_MAX(Mi[c], m + mk[c]);
            }
        }
        /* pass 2: acc = sum over tiles of (EW x KX) * exp(mw + mK - M), + the aggregates */
        for (size_t i = 0; i < (size_t)nq * D2; i++) acc[i] = 0;
        for (int kb = lo; kb <= hi; kb++) {
            const int u0 = kb * BS, nk = MEGA_MIN(BS, T - u0);
            const real *mwk = mw + (size_t)(kb - lo) * BS, *mk = mK + ((size_t)b * nkb + kb) * Da;
            pk_tile(k, t0, nq, u0, nk, padb, EW, (real *)mwk, 2);
            mega_gemm_serial(0, 0, (size_t)nq, D2, (size_t)nk, 1, EW, BS, KX + ((size_t)b * T + u0) * D2, D2, 0, tmp, D2);
            for (int i = 0; i < nq; i++) {
                if (!IS_SET(mwk[i])) continue;
                const real *Mi = M + (size_t)i * Da, *ti = tmp + (size_t)i * D2;
                real *ai = acc + (size_t)i * D2;
                for (int c = 0; c < Da; c++) {
                    if (!IS_SET(mk[c])) continue;
                    real f = mega_exp(mwk[i] + mk[c] - Mi[c]);
                    ai[c] += f * ti[c];
                    ai[Da + c] += f * ti[Da + c];
                }
            }
        }
        for (int i = 0; i < nq; i++) {
            const int t = t0 + i;
            const real *Mi = M + (size_t)i * Da, *ai = acc + (size_t)i * D2;
            const size_t r = ((size_t)b * T + t) * Da;
            for (int c = 0; c < Da; c++) {
                real den = ai[c], num = ai[Da + c];
                if (k->s > 0)
                    for (int part = 0; part < (k->bidir ? 2 : 1); part++) {
                        const real *g = part ? suf : pre;
                        if (IS_SET(g[2 * Da + c])) {
                            real f = mega_exp(g[2 * Da + c] - Mi[c]);
                            den += f * g[Da + c], num += f * g[c];
                        }
                    }
                flags[r + c] = 0;
                if (!IS_SET(Mi[c])) { /* no visible key */
                    ybar[r + c] = 0, lden[r + c] = EMPTY_L;
                    continue;
                }
                real lz = Mi[c] + R_LOG(den);
                if (lz - Mi[c] >= LOGTAU) {
                    ybar[r + c] = num / den, lden[r + c] = lz;
                } else { /* scaled denominator underflowed: exact evaluation of this entry */
                    flags[r + c] = 1;
                    int n = pk_keys(k, t, 0, k->bidir ? T : t + 1, K + (size_t)b * T * ld, V + (size_t)b * T * ld, ld,
                                    0, padb, c, lg, val);
                    lden[r + c] = mega_softmax_row(lg, (size_t)n);
                    real y = 0;
                    for (int j = 0; j < n; j++) y += lg[j] * val[j];
                    ybar[r + c] = y;
                }
            }
        }
    }
}

/* backward factor of a tile entry: exp(mw + mK - lden) (0 for flagged, empty or masked rows) */
static inline real pk_factor(real mw, real mk, real ld_, uint8_t flag) {
    if (flag || !IS_SET(mw) || !IS_SET(mk) || !(ld_ < EMPTY_L / 2)) return 0;
    return mega_exp(mw + mk - ld_);
}

/* the backward's arguments, shared by its phases */
typedef struct {
    const mega_aft_pair_k *k;
    pk_layout L;
    real *scratch, *HB, *dK, *dV, *dw;
    const real *KX, *mK, *dy, *ybar, *lden, *K, *V;
    const uint8_t *flags, *pad;
    size_t ldd, ld, D2, tsz;
    int Da, nkb, B, T, nthreads, par;
} pb_ctx;

/* (local) adjoint sums of each query block for the keys it sees through its aggregates:
 * H = sum_t exp(-lden_t) (dy_t, dy_t ybar_t), log-scaled (the AFT gradient with w' = 0) */
static void pb_block_sums(const pb_ctx *x) {
    const int Da = x->Da, nkb = x->nkb, T = x->T;
    (void)nkb;
#pragma omp parallel for schedule(static) num_threads(x->nthreads) if (x->par)
    for (long un = 0; un < (long)x->B * nkb; un++) {
        const int b = (int)(un / nkb), qb = (int)(un % nkb), t0 = qb * BS, nq = MEGA_MIN(BS, T - t0);
        real *h = x->HB + ((size_t)b * nkb + qb) * 3 * Da;
        lreset(h, h + Da, h + 2 * Da, Da);
        for (int i = 0; i < nq; i++) {
            const size_t r = ((size_t)b * T + t0 + i) * Da;
            for (int c = 0; c < Da; c++)
                if (!x->flags[r + c] && x->lden[r + c] < EMPTY_L / 2)
                    lmerge(h + c, h + Da + c, h + 2 * Da + c, x->dy[r + c], x->dy[r + c] * x->ybar[r + c], -x->lden[r + c]);
        }
    }
}

/* dw: rows of the table belong to query blocks (one unit each, every batch inside) */
static void pb_dw(const pb_ctx *x) {
    const mega_aft_pair_k *k = x->k;
    const int Da = x->Da, nkb = x->nkb, T = x->T;
    const size_t D2 = x->D2;
#pragma omp parallel for schedule(static) num_threads(x->nthreads) if (x->par)
    for (int qb = 0; qb < nkb; qb++) {
        real *ws = x->scratch + x->L.per + x->tsz * (size_t)mega__thread_id();
        real *EW = ws, *DE = EW + (size_t)BS * BS, *mw = DE + (size_t)BS * BS;
        real *GG = mw + (size_t)BS * nkb + (size_t)BS * Da + BS * D2;
        const int t0 = qb * BS, nq = MEGA_MIN(BS, T - t0);
        int lo, hi;
        pk_range(k, qb, T, &lo, &hi);
        for (int b = 0; b < x->B; b++) {
            const uint8_t *padb = x->pad ? x->pad + (size_t)b * T : NULL;
            for (int kb = lo; kb <= hi; kb++) {
                const int u0 = kb * BS, nk = MEGA_MIN(BS, T - u0);
                const real *mk = x->mK + ((size_t)b * nkb + kb) * Da;
                pk_tile(k, t0, nq, u0, nk, padb, EW, mw, 3);
                for (int i = 0; i < nq; i++) {
                    const size_t r = ((size_t)b * T + t0 + i) * Da;
                    real *gi = GG + (size_t)i * D2;
                    for (int c = 0; c < Da; c++) {
                        real f = pk_factor(mw[i], mk[c], x->lden[r + c], x->flags[r + c]);
                        gi[c] = -x->dy[r + c] * x->ybar[r + c] * f; /* pairs with e^{K}   (d den) */
                        gi[Da + c] = x->dy[r + c] * f;              /* pairs with e^{K} V (d num) */
                    }
                }
                /* d EW[t,u] = sum_c GG[t,:] . KX[u,:]; d w' = EW * d EW */
                mega_gemm_serial(0, 1, (size_t)nq, (size_t)nk, D2, 1, GG, D2, x->KX + ((size_t)b * T + u0) * D2, D2, 0, DE, BS);
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < nk; j++) {
                        size_t idx;
                        if (masked(k, padb, t0 + i, u0 + j)) continue;
                        pk_w(k, t0 + i, u0 + j, &idx);
                        if (idx != SIZE_MAX) x->dw[idx] += EW[(size_t)i * BS + j] * DE[(size_t)i * BS + j];
                    }
            }
        }
    }
}

/* dV_u = e^{K_u} P1, dK_u = e^{K_u} (V_u P1 - P2) for the keys of one block (P: the tiles' sums,
 * scaled by e^{-mK}), plus the aggregate part with its own log-scale (K_u + h_e <= 0: key u is in
 * those sums) */
static void pb_key_grads(const pb_ctx *x, int b, int u0, int nk, const real *P, const real *h) {
    const int Da = x->Da, T = x->T;
    for (int j = 0; j < nk; j++) {
        if (!valid_at(x->pad, b, T, u0 + j)) continue;
        const size_t r = (size_t)b * T + u0 + j;
        const real *kx = x->KX + r * x->D2, *p = P + (size_t)j * x->D2;
        for (int c = 0; c < Da; c++) {
            const real v = x->V[r * x->ld + c];
            real g1 = kx[c] * p[c], g2 = kx[c] * (v * p[c] - p[Da + c]);
            if (x->k->s > 0 && IS_SET(h[2 * Da + c])) {
                real f = mega_exp(x->K[r * x->ld + c] + h[2 * Da + c]);
                g1 += f * h[c], g2 += f * (v * h[c] - h[Da + c]);
            }
            x->dV[r * x->ldd + c] += g1;
            x->dK[r * x->ldd + c] += g2;
        }
    }
}

/* dK, dV: rows belong to key blocks */
static void pb_dkv(const pb_ctx *x) {
    const mega_aft_pair_k *k = x->k;
    const int Da = x->Da, nkb = x->nkb, T = x->T;
    const size_t D2 = x->D2;
#pragma omp parallel for schedule(static) num_threads(x->nthreads) if (x->par)
    for (long un = 0; un < (long)x->B * nkb; un++) {
        const int b = (int)(un / nkb), kb = (int)(un % nkb), u0 = kb * BS, nk = MEGA_MIN(BS, T - u0);
        real *ws = x->scratch + x->L.per + x->tsz * (size_t)mega__thread_id();
        real *EW = ws, *mw = EW + 2 * (size_t)BS * BS, *h = mw + (size_t)BS * nkb;
        real *P = h + (size_t)BS * Da, *GG = P + BS * D2;
        const uint8_t *padb = x->pad ? x->pad + (size_t)b * T : NULL;
        const real *mk = x->mK + ((size_t)b * nkb + kb) * Da;
        for (size_t i = 0; i < (size_t)nk * D2; i++) P[i] = 0;
        lreset(h, h + Da, h + 2 * Da, Da);
        for (int qb = 0; qb < nkb; qb++) {
            int lo, hi;
            pk_range(k, qb, T, &lo, &hi);
            if (kb > hi && !k->bidir) continue; /* future keys */
            if (kb < lo || kb > hi) {             /* keys of this block reach qb through an aggregate */
                const real *hq = x->HB + ((size_t)b * nkb + qb) * 3 * Da;
                for (int c = 0; c < Da; c++) lmerge(h + c, h + Da + c, h + 2 * Da + c, hq[c], hq[Da + c], hq[2 * Da + c]);
                continue;
            }
            const int t0 = qb * BS, nq = MEGA_MIN(BS, T - t0);
            pk_tile(k, t0, nq, u0, nk, padb, EW, mw, 3);
            for (int i = 0; i < nq; i++) {
                const size_t r = ((size_t)b * T + t0 + i) * Da;
                real *gi = GG + (size_t)i * D2;
                for (int c = 0; c < Da; c++) {
                    real f = pk_factor(mw[i], mk[c], x->lden[r + c], x->flags[r + c]);
                    gi[c] = x->dy[r + c] * f;
                    gi[Da + c] = x->dy[r + c] * x->ybar[r + c] * f;
                }
            }
            mega_gemm_serial(1, 0, (size_t)nk, D2, (size_t)nq, 1, EW, BS, GG, D2, 1, P, D2);
        }
        pb_key_grads(x, b, u0, nk, P, h);
    }
}

/* flagged entries: the exact softmax over their keys (serial; rare) */
static void pb_flagged(const pb_ctx *x) {
    const mega_aft_pair_k *k = x->k;
    const int Da = x->Da, T = x->T;
    real *lg = x->scratch + x->L.per + 2 * (size_t)BS * BS + (size_t)BS * x->nkb + (size_t)BS * Da + 4 * BS * x->D2;
    real *val = lg + T + 1;
    for (int b = 0; b < x->B; b++)
        for (int t = 0; t < T; t++) {
            const size_t r = ((size_t)b * T + t) * Da;
            for (int c = 0; c < Da; c++) {
                if (!x->flags[r + c]) continue;
                const uint8_t *padb = x->pad ? x->pad + (size_t)b * T : NULL;
                const int ub = k->bidir ? T : t + 1;
                int n = pk_keys(k, t, 0, ub, x->K + (size_t)b * T * x->ld, x->V + (size_t)b * T * x->ld, x->ld, 0, padb, c,
                                lg, val);
                mega_softmax_row(lg, (size_t)n);
                for (int j = 0; j < n; j++) val[j] *= x->dy[r + c]; /* d p_u = dy V_u */
                real *pr = lg;
                /* ds_u = p_u (dy V_u - dy ybar) (mega_softmax_row_backward), in place over val */
                mega_softmax_row_backward(val, val, pr, (size_t)n);
                for (int u = 0, j = 0; u < ub; u++) {
                    if (padb && padb[u]) continue;
                    const size_t rk = ((size_t)b * T + u) * x->ldd + c;
                    size_t idx;
                    pk_w(k, t, u, &idx);
                    x->dV[rk] += pr[j] * x->dy[r + c];
                    x->dK[rk] += val[j];
                    if (idx != SIZE_MAX) x->dw[idx] += val[j];
                    j++;
                }
            }
        }
}

void mega_aft_pair_backward(const mega_aft_pair_k *k, real *dK, real *dV, size_t ldd, real *dw, const real *dy,
                            const real *ybar, const real *lden, const uint8_t *flags, const real *K, const real *V,
                            size_t ld, const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    pb_ctx x;
    x.k = k, x.L = pk_lay(k, B, T), x.scratch = scratch;
    x.dK = dK, x.dV = dV, x.dw = dw, x.dy = dy, x.ybar = ybar, x.lden = lden, x.K = K, x.V = V;
    x.flags = flags, x.pad = pad, x.ldd = ldd, x.ld = ld;
    x.Da = k->Da, x.nkb = x.L.nkb, x.B = B, x.T = T, x.nthreads = nthreads;
    x.D2 = 2 * (size_t)k->Da, x.tsz = pk_thread_size(k, T);
    x.par = (size_t)B * T * T * k->Da > MEGA_PAR_MIN;
    pk_prep(k, &x.L, scratch, K, V, ld, pad, B, T, 0, nthreads);
    x.KX = scratch + x.L.kx, x.mK = scratch + x.L.mk, x.HB = scratch + x.L.hb;
    if (k->s > 0) pb_block_sums(&x);
    pb_dw(&x);
    pb_dkv(&x);
    pb_flagged(&x);
}
