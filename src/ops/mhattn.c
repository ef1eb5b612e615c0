/* Multi-head masked softmax attention with additive position terms, local mask, log-n scaling
 * and XPOS (see mhattn.h and docs/mixers.md). Blockwise and allocation-free, like the
 * chunked Mega attention in attn.c. */
#include "ops/mhattn.h"
#include "core/rng.h"
#include "ops/hgemm.h"
#include "ops/ops.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define BR MEGA_MHATTN_BR

static inline size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

/* the most keys one block of BR query rows can see */
static int nk_max(const mega_mhattn_k *k, int T) {
    const int w = k->window;
    if (w <= 0) return T;
    return MEGA_MIN(T, k->causal ? BR + w - 1 : BR + 2 * w);
}

/* keys [lo, hi) seen by query rows [i0, i1) */
static void key_range(const mega_mhattn_k *k, int T, int i0, int i1, int *lo, int *hi) {
    const int w = k->window;
    if (k->causal) {
        *hi = i1;
        *lo = w > 0 ? MEGA_MAX(0, i0 - w + 1) : 0;
    } else if (w > 0) {
        *lo = MEGA_MAX(0, i0 - w);
        *hi = MEGA_MIN(T, i1 + w);
    } else {
        *lo = 0, *hi = T;
    }
}

/* keys [a, b) of row t allowed by the causal / local masks, within [lo, hi) */
static inline void row_range(const mega_mhattn_k *k, int t, int lo, int hi, int *a, int *b) {
    const int w = k->window;
    if (k->causal) {
        *a = w > 0 ? MEGA_MAX(lo, t - w + 1) : lo;
        *b = MEGA_MIN(hi, t + 1);
    } else {
        *a = w > 0 ? MEGA_MAX(lo, t - w) : lo;
        *b = w > 0 ? MEGA_MIN(hi, t + w + 1) : hi;
    }
    if (*b < *a) *b = *a;
}

/* log-n factor of a row with n visible keys (Su, kexue.fm/archives/8823; max(1, .) is ours) */
static inline real lambda_of(const mega_mhattn_k *k, int64_t n) {
    if (k->log_train <= 0 || n < 2) return 1;
    double l = log((double)n) / k->log_train;
    return (real)(l > 1 ? l : 1);
}

/* The head products go through the hgemm kernels (no operand packing: docs/performance.md) when
 * they take this head width; XPOS keeps the BLAS path (its operands are rescaled per block). */
static int fast_path(const mega_mhattn_k *k) { return !k->xtab && mega_hgemm_ok(k->dh); }

/* per-thread scratch; kt, vt: the unit's keys and values transposed ([dh, r16(T)], fast path) */
typedef struct {
    real *P, *G, *Pd, *qs, *dqs, *ks, *dks, *lam, *kt, *vt, *mx, *sm;
    size_t ldt;
} tscr;

/* Fast path: keys in tiles of TK, so that a block's scores, weights and their gradients stay in
 * the core's cache (BR x TK each) while every product that uses them runs; the forward keeps a
 * running maximum and sum per row (the online softmax of FlashAttention, Dao et al. 2022), the
 * backward takes sum_u dP(t,u) P(t,u) = <dO_t, O_t> from the output instead of from a whole row. */
#define TK 256

static size_t layout(const mega_mhattn_k *k, int T, real *base, tscr *s) {
    const size_t nkm = (size_t)nk_max(k, T), dh = (size_t)k->dh;
    size_t off = 0;
#define TAKE(field, n)                                                                        \
    do {                                                                                      \
        if (s) s->field = base ? base + off : NULL;                                           \
        off += r16(n);                                                                        \
    } while (0)
    const size_t wide = fast_path(k) ? MEGA_MIN(nkm, (size_t)TK) : nkm; /* the widest block of scores */
    TAKE(P, BR * wide);
    TAKE(G, BR * wide);
    TAKE(Pd, k->p_drop > 0 ? BR * wide : 0);
    TAKE(qs, k->xtab ? BR * dh : 0);
    TAKE(dqs, k->xtab ? BR * dh : 0);
    TAKE(ks, k->xtab ? nkm * dh : 0);
    TAKE(dks, k->xtab ? nkm * dh : 0);
    TAKE(lam, BR);
    TAKE(kt, fast_path(k) ? dh * r16((size_t)T) : 0);
    TAKE(vt, fast_path(k) ? dh * r16((size_t)T) : 0);
    TAKE(mx, fast_path(k) ? BR : 0);
    TAKE(sm, fast_path(k) ? BR : 0);
    if (s) s->ldt = r16((size_t)T);
#undef TAKE
    return off;
}

/* the per-(batch, head) partial bias gradients in front of the per-thread regions: one
 * partial per unit, reduced in unit order, so the result does not depend on the thread count */
static size_t partials(const mega_mhattn_k *k, int B) {
    const size_t units = (size_t)B * k->H;
    return r16(k->btab ? units * (size_t)k->bl : 0) + r16(k->kbias ? units * (size_t)k->kbl : 0);
}

size_t mega_mhattn_scratch(const mega_mhattn_k *k, int B, int T, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    return partials(k, B) + (layout(k, T, NULL, NULL) + 16) * (size_t)nthreads;
}

/* dst[j] (=|+=) src[j] scaled pairwise by the XPOS factors of delta = d0 + step*j */
static void xscale(const mega_mhattn_k *k, real *dst, size_t ldd, const real *src, size_t lds, int n, int d0,
                   int step, int acc) {
    const int hp = k->dh / 2;
    for (int j = 0; j < n; j++) {
        const real *f = k->xtab + (size_t)(d0 + step * j + k->xoff) * hp;
        const real *a = src + (size_t)j * lds;
        real *o = dst + (size_t)j * ldd;
        if (acc)
            for (int i = 0; i < hp; i++) o[2 * i] += f[i] * a[2 * i], o[2 * i + 1] += f[i] * a[2 * i + 1];
        else
            for (int i = 0; i < hp; i++) o[2 * i] = f[i] * a[2 * i], o[2 * i + 1] = f[i] * a[2 * i + 1];
    }
}

/* the log-n factors of query rows [i0, i1), whose visible keys lie in [lo, hi) */
static void block_lambda(const mega_mhattn_k *k, int i0, int i1, int lo, int hi, const uint8_t *pb, real *lam) {
    for (int t = i0; t < i1; t++) {
        int a, b;
        row_range(k, t, lo, hi, &a, &b);
        int n = b - a;
        if (pb)
            for (int u = a; u < b; u++) n -= pb[u] != 0;
        lam[t - i0] = lambda_of(k, n);
    }
}

/* Scores s(t,u) of query rows [i0, i1) x keys [j0, j1) of head h into S (rows lds), -inf where
 * masked; lam: the rows' log-n factors (block_lambda). Qb: the block's queries; Kb: key j0 (BLAS
 * path) or ts->kt (the unit's transposed keys, fast path). pb: this sequence's pad row or NULL. */
static void block_scores(const mega_mhattn_k *k, int h, int i0, int i1, int j0, int j1, const real *Qb, size_t ldq,
                         const real *Kb, size_t ldk, const tscr *ts, const uint8_t *pb, const real *lam, real *S,
                         size_t lds) {
    const int br = i1 - i0, nk = j1 - j0;
    if (fast_path(k)) /* keys [j0, j1) are columns [j0, j1) of the unit's transposed keys */
        mega_hgemm_abt(S, lds, Qb, ldq, ts->kt + j0, ts->ldt, br, nk, k->dh, k->scale);
    else
        mega_gemm_serial(0, 1, (size_t)br, (size_t)nk, (size_t)k->dh, k->scale, Qb, ldq, Kb, ldk, 0, S, lds);
    const real *bt = k->btab ? k->btab + (size_t)h * k->bl + k->bc : NULL; /* bt[u - t] */
    const real *kb = k->kbias ? k->kbias + (size_t)h * k->kbl : NULL;
    for (int r = 0; r < br; r++) {
        const int t = i0 + r;
        real *s = S + (size_t)r * lds - j0; /* s[u] for u in [j0, j1) */
        int a, b;
        row_range(k, t, j0, j1, &a, &b);
        const real l = lam[r];
        for (int u = j0; u < a; u++) s[u] = -INFINITY;
        for (int u = b; u < j1; u++) s[u] = -INFINITY;
        if (l != 1)
            for (int u = a; u < b; u++) s[u] *= l;
        if (bt)
            for (int u = a; u < b; u++) s[u] += bt[u - t];
        if (kb) {
            const int c = MEGA_MIN(b, k->kbl - 1); /* positions >= kbl - 1 use the last entry */
            for (int u = a; u < c; u++) s[u] += kb[u];
            for (int u = MEGA_MAX(a, c); u < b; u++) s[u] += kb[k->kbl - 1];
        }
        if (pb)
            for (int u = a; u < b; u++)
                if (pb[u]) s[u] = -INFINITY;
    }
}

/* P(t,u) = exp(s(t,u) - lse_t) in place over rows [i0, i1) (the backward's recomputation): 0 where
 * masked, and a row with no visible key (lse = +inf) all 0 */
static void block_exp(real *S, size_t lds, int i0, int i1, int nk, const real *lse) {
    for (int t = i0; t < i1; t++) {
        real *s = S + (size_t)(t - i0) * lds;
        const real L = lse[t];
        if (L == INFINITY)
            for (int j = 0; j < nk; j++) s[j] = 0;
        else
            mega_exp_sub(s, (size_t)nk, L, 0); /* as mega_softmax_row; 0 when masked */
    }
}

/* Attention weights of query rows [i0, i1) x keys [lo, hi) of head h into P (ld hi-lo), and
 * the rows' log-n factors into lam. lse (the unit's row, indexed by t): written when !have,
 * else read (the backward's recomputation). pb: this sequence's pad row or NULL. */
static void block_probs(const mega_mhattn_k *k, int h, int i0, int i1, int lo, int hi, const real *Qb, size_t ldq,
                        const real *Kb, size_t ldk, const tscr *ts, const uint8_t *pb, real *P, real *lam, real *lse,
                        int have) {
    const int nk = hi - lo;
    block_lambda(k, i0, i1, lo, hi, pb, lam);
    block_scores(k, h, i0, i1, lo, hi, Qb, ldq, Kb, ldk, ts, pb, lam, P, (size_t)nk);
    if (have)
        block_exp(P, (size_t)nk, i0, i1, nk, lse);
    else
        for (int t = i0; t < i1; t++) lse[t] = mega_softmax_row(P + (size_t)(t - i0) * nk, (size_t)nk);
}

/* attention dropout of rows [i0,i1) x keys [lo,hi) of unit (b,h): index ((b*H+h)*T + t)*T + u */
static void block_dropout(const mega_mhattn_k *k, real *A, int b, int h, int T, int i0, int i1, int lo, int hi) {
    const real sc = (real)(1.0 / (1.0 - k->p_drop));
    const int nk = hi - lo;
    for (int r = 0; r < i1 - i0; r++) {
        const uint64_t base = (((uint64_t)b * k->H + h) * T + (uint64_t)(i0 + r)) * T + (uint64_t)lo;
        real *a = A + (size_t)r * nk;
        for (int j = 0; j < nk; j++) a[j] = mega__hash01(k->key_drop, base + j) >= k->p_drop ? a[j] * sc : 0;
    }
}

/* the (possibly XPOS-scaled) query and key operands of a block */
static void block_operands(const mega_mhattn_k *k, const tscr *s, const real *q, const real *kk, size_t Da, int b,
                           int h, int T, int i0, int i1, int lo, int hi, const real **Qb, size_t *ldq,
                           const real **Kb, size_t *ldk) {
    const real *qp = q + ((size_t)b * T + i0) * Da + (size_t)h * k->dh;
    const real *kp = kk + ((size_t)b * T + lo) * Da + (size_t)h * k->dh;
    if (k->xtab) {
        /* re-centred at m0 = i0: queries zeta^((t-i0)/B), keys zeta^((i0-u)/B) */
        xscale(k, s->qs, (size_t)k->dh, qp, Da, i1 - i0, 0, 1, 0);
        xscale(k, s->ks, (size_t)k->dh, kp, Da, hi - lo, i0 - lo, -1, 0);
        *Qb = s->qs, *Kb = s->ks, *ldq = *ldk = (size_t)k->dh;
    } else {
        *Qb = qp, *Kb = kp, *ldq = *ldk = Da;
    }
}

/* The rest of dS(t, .) over keys [j0, j1) of row t (g: dS, indexed from j0): the bias gradients
 * (masked entries have P = 0, hence dS = 0: only the visible range matters), then the row's log-n
 * factor, so that g becomes the gradient of the content term */
static void row_dS_tail(const mega_mhattn_k *k, int t, int j0, int j1, real *g, real lam, real *dbt, real *dkb) {
    if (dbt || dkb) {
        int a, e;
        row_range(k, t, j0, j1, &a, &e);
        if (dbt)
            for (int u = a; u < e; u++) dbt[u - t] += g[u - j0];
        if (dkb)
            for (int u = a; u < e; u++) dkb[MEGA_MIN(u, k->kbl - 1)] += g[u - j0];
    }
    if (lam != 1)
        for (int j = 0; j < j1 - j0; j++) g[j] *= lam;
}

/* Fast-path forward of query rows [i0, i1) of unit (b, h): key tiles with a running max (mx) and
 * sum (sm) per row; the unnormalised output accumulates in Ob and is divided by the sum at the
 * end. Dropout applies to the weights that meet V, the sum is over the undropped ones. */
static void fast_block_forward(const mega_mhattn_k *k, const tscr *s, int b, int h, int T, int i0, int i1, int lo, int hi,
                               const real *Qb, size_t ldq, const real *v, const uint8_t *pb, real *Ob, real *lrow) {
    const int br = i1 - i0, dh = k->dh;
    const size_t Da = (size_t)k->H * dh;
    block_lambda(k, i0, i1, lo, hi, pb, s->lam);
    for (int r = 0; r < br; r++) {
        s->mx[r] = -INFINITY, s->sm[r] = 0;
        memset(Ob + (size_t)r * Da, 0, (size_t)dh * sizeof(real));
    }
    for (int j0 = lo; j0 < hi; j0 += TK) {
        const int j1 = MEGA_MIN(hi, j0 + TK), nk = j1 - j0;
        block_scores(k, h, i0, i1, j0, j1, Qb, ldq, NULL, 0, s, pb, s->lam, s->P, (size_t)nk);
        for (int r = 0; r < br; r++) {
            real *p = s->P + (size_t)r * nk;
            const real m = MEGA_MAX(s->mx[r], mega_row_max(p, (size_t)nk));
            if (m == -INFINITY) { /* nothing visible yet: weights 0 */
                memset(p, 0, (size_t)nk * sizeof(real));
                continue;
            }
            const real sum = mega_exp_sub(p, (size_t)nk, m, 1);
            const real f = mega_exp(s->mx[r] - m); /* rescales what came before (0 from -inf) */
            s->sm[r] = s->sm[r] * f + sum;
            if (f != 1)
                for (int d = 0; d < dh; d++) Ob[(size_t)r * Da + d] *= f;
            s->mx[r] = m;
        }
        if (k->p_drop > 0) block_dropout(k, s->P, b, h, T, i0, i1, j0, j1);
        mega_hgemm_ab(Ob, Da, s->P, (size_t)nk, v + ((size_t)b * T + j0) * Da + (size_t)h * dh, Da, br, nk, dh, 1, 1);
    }
    for (int r = 0; r < br; r++) {
        const int t = i0 + r;
        if (s->sm[r] == 0) { /* no visible key: O = 0, lse = +inf (mega_softmax_row's rule) */
            lrow[t] = INFINITY;
            continue;
        }
        const real inv = (real)1 / s->sm[r];
        for (int d = 0; d < dh; d++) Ob[(size_t)r * Da + d] *= inv;
        lrow[t] = s->mx[r] + R_LOG(s->sm[r]);
    }
}

/* Fast-path backward of query rows [i0, i1) of unit (b, h), key tile by key tile: P from the
 * scores and lse, dP' = dO V^T, dV += P'^T dO, dS = P (dP - <dO_t, O_t>), then the bias
 * gradients, the log-n factor, dQ += scale dS K and dK += scale dS^T Q. */
static void fast_block_backward(const mega_mhattn_k *k, const tscr *s, int b, int h, int T, int i0, int i1, int lo,
                                int hi, const real *Qb, size_t ldq, const real *dOb, const real *Orows, const real *kk,
                                const real *lrow, const uint8_t *pb, real *dQb, real *dk, real *dv, real *dbt, real *dkb) {
    const int br = i1 - i0, dh = k->dh;
    const size_t Da = (size_t)k->H * dh;
    block_lambda(k, i0, i1, lo, hi, pb, s->lam);
    for (int r = 0; r < br; r++) s->sm[r] = mega_row_dot(dOb + (size_t)r * Da, Orows + (size_t)r * Da, (size_t)dh);
    for (int j0 = lo; j0 < hi; j0 += TK) {
        const int j1 = MEGA_MIN(hi, j0 + TK), nk = j1 - j0;
        block_scores(k, h, i0, i1, j0, j1, Qb, ldq, NULL, 0, s, pb, s->lam, s->P, (size_t)nk);
        block_exp(s->P, (size_t)nk, i0, i1, nk, lrow);
        mega_hgemm_abt(s->G, (size_t)nk, dOb, Da, s->vt + j0, s->ldt, br, nk, dh, 1);
        const real *Pv = s->P;
        if (k->p_drop > 0) {
            memcpy(s->Pd, s->P, (size_t)br * nk * sizeof(real));
            block_dropout(k, s->Pd, b, h, T, i0, i1, j0, j1);
            block_dropout(k, s->G, b, h, T, i0, i1, j0, j1);
            Pv = s->Pd;
        }
        const size_t kv = ((size_t)b * T + j0) * Da + (size_t)h * dh;
        mega_hgemm_atb(dv + kv, Da, Pv, (size_t)nk, dOb, Da, br, nk, dh, 1);
        for (int r = 0; r < br; r++) {
            const int t = i0 + r;
            real *g = s->G + (size_t)r * nk;
            const real *p = s->P + (size_t)r * nk, D = s->sm[r];
            for (int j = 0; j < nk; j++) g[j] = p[j] * (g[j] - D);
            row_dS_tail(k, t, j0, j1, g, s->lam[r], dbt, dkb);
        }
        mega_hgemm_ab(dQb, Da, s->G, (size_t)nk, kk + kv, Da, br, nk, dh, k->scale, 1);
        mega_hgemm_atb(dk + kv, Da, s->G, (size_t)nk, Qb, ldq, br, nk, dh, k->scale);
    }
}

void mega_mhattn_forward(const mega_mhattn_k *k, real *O, real *lse, const real *q, const real *kk, const real *v,
                         const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    const int H = k->H, dh = k->dh;
    const size_t Da = (size_t)H * dh, per = layout(k, T, NULL, NULL) + 16;
    const long units = (long)B * H;
    const size_t work = (size_t)B * T * (size_t)nk_max(k, T) * Da;
    (void)work; /* read only by the OpenMP pragma */
    if (nthreads < 1) nthreads = 1;
    real *thr = scratch + partials(k, B);
#pragma omp parallel for schedule(static) num_threads(nthreads) if (units > 1 && work > MEGA_PAR_MIN)
    for (long un = 0; un < units; un++) {
        const int tid = mega__thread_id();
        const int b = (int)(un / H), h = (int)(un % H);
        tscr s;
        layout(k, T, thr + per * (size_t)tid, &s);
        const uint8_t *pb = pad ? pad + (size_t)b * T : NULL;
        real *lrow = lse + ((size_t)b * H + h) * T;
        const int fast = fast_path(k);
        if (fast) mega_hgemm_transpose(s.kt, s.ldt, kk + (size_t)b * T * Da + (size_t)h * dh, Da, T, dh);
        for (int i0 = 0; i0 < T; i0 += BR) {
            const int i1 = MEGA_MIN(T, i0 + BR);
            int lo, hi;
            key_range(k, T, i0, i1, &lo, &hi);
            const real *Qb, *Kb;
            size_t ldq, ldk;
            block_operands(k, &s, q, kk, Da, b, h, T, i0, i1, lo, hi, &Qb, &ldq, &Kb, &ldk);
            real *Ob = O + ((size_t)b * T + i0) * Da + (size_t)h * dh;
            if (fast) {
                fast_block_forward(k, &s, b, h, T, i0, i1, lo, hi, Qb, ldq, v, pb, Ob, lrow);
                continue;
            }
            block_probs(k, h, i0, i1, lo, hi, Qb, ldq, Kb, ldk, &s, pb, s.P, s.lam, lrow, 0);
            if (k->p_drop > 0) block_dropout(k, s.P, b, h, T, i0, i1, lo, hi);
            const real *Vb = v + ((size_t)b * T + lo) * Da + (size_t)h * dh;
            mega_gemm_serial(0, 0, (size_t)(i1 - i0), (size_t)dh, (size_t)(hi - lo), 1, s.P, (size_t)(hi - lo), Vb, Da, 0,
                             Ob, Da);
        }
    }
}

void mega_mhattn_backward(const mega_mhattn_k *k, real *dq, real *dk, real *dv, real *dbtab, real *dkbias,
                          const real *dO, const real *O, const real *q, const real *kk, const real *v, const real *lse,
                          const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    const int H = k->H, dh = k->dh;
    const size_t Da = (size_t)H * dh, per = layout(k, T, NULL, NULL) + 16;
    const long units = (long)B * H;
    const size_t work = (size_t)B * T * (size_t)nk_max(k, T) * Da;
    (void)work; /* read only by the OpenMP pragma */
    if (nthreads < 1) nthreads = 1;
    const int want_bt = k->btab && dbtab, want_kb = k->kbias && dkbias;
    real *part_bt = scratch, *part_kb = scratch + r16(k->btab ? (size_t)units * k->bl : 0);
    real *thr = scratch + partials(k, B);
#pragma omp parallel for schedule(static) num_threads(nthreads) if (units > 1 && work > MEGA_PAR_MIN)
    for (long un = 0; un < units; un++) {
        const int tid = mega__thread_id();
        const int b = (int)(un / H), h = (int)(un % H);
        tscr s;
        layout(k, T, thr + per * (size_t)tid, &s);
        const uint8_t *pb = pad ? pad + (size_t)b * T : NULL;
        const real *lrow = lse + ((size_t)b * H + h) * T;
        real *dbt = NULL, *dkb = NULL;
        if (want_bt) {
            real *p = part_bt + (size_t)un * k->bl;
            memset(p, 0, (size_t)k->bl * sizeof(real));
            dbt = p + k->bc; /* dbt[u - t] */
        }
        if (want_kb) {
            dkb = part_kb + (size_t)un * k->kbl;
            memset(dkb, 0, (size_t)k->kbl * sizeof(real));
        }
        const int fast = fast_path(k);
        if (fast) {
            mega_hgemm_transpose(s.kt, s.ldt, kk + (size_t)b * T * Da + (size_t)h * dh, Da, T, dh);
            mega_hgemm_transpose(s.vt, s.ldt, v + (size_t)b * T * Da + (size_t)h * dh, Da, T, dh);
        }
        for (int i0 = 0; i0 < T; i0 += BR) {
            const int i1 = MEGA_MIN(T, i0 + BR), br = i1 - i0;
            int lo, hi;
            key_range(k, T, i0, i1, &lo, &hi);
            const int nk = hi - lo;
            const real *Qb, *Kb;
            size_t ldq, ldk;
            block_operands(k, &s, q, kk, Da, b, h, T, i0, i1, lo, hi, &Qb, &ldq, &Kb, &ldk);
            const real *dOb = dO + ((size_t)b * T + i0) * Da + (size_t)h * dh;
            if (fast) {
                fast_block_backward(k, &s, b, h, T, i0, i1, lo, hi, Qb, ldq, dOb, O + ((size_t)b * T + i0) * Da + (size_t)h * dh,
                                    kk, lrow, pb, dq + ((size_t)b * T + i0) * Da + (size_t)h * dh, dk, dv, dbt, dkb);
                continue;
            }
            block_probs(k, h, i0, i1, lo, hi, Qb, ldq, Kb, ldk, &s, pb, s.P, s.lam, (real *)lrow, 1);
            const real *Vb = v + ((size_t)b * T + lo) * Da + (size_t)h * dh;
            real *dVb = dv + ((size_t)b * T + lo) * Da + (size_t)h * dh;
            /* dP' = dO V^T; dV += P'^T dO with P' the dropped weights; dP = dropout(dP') */
            mega_gemm_serial(0, 1, (size_t)br, (size_t)nk, (size_t)dh, 1, dOb, Da, Vb, Da, 0, s.G, (size_t)nk);
            const real *Pv = s.P;
            if (k->p_drop > 0) {
                memcpy(s.Pd, s.P, (size_t)br * nk * sizeof(real));
                block_dropout(k, s.Pd, b, h, T, i0, i1, lo, hi);
                block_dropout(k, s.G, b, h, T, i0, i1, lo, hi);
                Pv = s.Pd;
            }
            mega_gemm_serial(1, 0, (size_t)nk, (size_t)dh, (size_t)br, 1, Pv, (size_t)nk, dOb, Da, 1, dVb, Da);
            /* dS = P (dP - rowsum(dP P)); bias gradients; then the log-n factor of the row */
            for (int r = 0; r < br; r++) {
                const int t = i0 + r;
                real *g = s.G + (size_t)r * nk;
                mega_softmax_row_backward(g, g, s.P + (size_t)r * nk, (size_t)nk);
                row_dS_tail(k, t, lo, hi, g, s.lam[r], dbt, dkb);
            }
            /* dq~ = scale G K~ ; dk~ = scale G^T Q~ ; then the XPOS factors */
            real *dQb = dq + ((size_t)b * T + i0) * Da + (size_t)h * dh;
            real *dKb = dk + ((size_t)b * T + lo) * Da + (size_t)h * dh;
            if (k->xtab) {
                mega_gemm_serial(0, 0, (size_t)br, (size_t)dh, (size_t)nk, k->scale, s.G, (size_t)nk, Kb, ldk, 0, s.dqs,
                                 (size_t)dh);
                mega_gemm_serial(1, 0, (size_t)nk, (size_t)dh, (size_t)br, k->scale, s.G, (size_t)nk, Qb, ldq, 0, s.dks,
                                 (size_t)dh);
                xscale(k, dQb, Da, s.dqs, (size_t)dh, br, 0, 1, 1);
                xscale(k, dKb, Da, s.dks, (size_t)dh, nk, i0 - lo, -1, 1);
            } else {
                mega_gemm_serial(0, 0, (size_t)br, (size_t)dh, (size_t)nk, k->scale, s.G, (size_t)nk, Kb, ldk, 1, dQb,
                                 Da);
                mega_gemm_serial(1, 0, (size_t)nk, (size_t)dh, (size_t)br, k->scale, s.G, (size_t)nk, Qb, ldq, 1, dKb,
                                 Da);
            }
        }
    }
    /* reduce the per-unit partials in (head, batch) order: the same sums for any thread count */
    for (int h = 0; h < H; h++)
        for (int b = 0; b < B; b++) {
            const size_t un = (size_t)b * H + h;
            if (want_bt) {
                const real *p = part_bt + un * k->bl;
                real *d = dbtab + (size_t)h * k->bl;
                for (int i = 0; i < k->bl; i++) d[i] += p[i];
            }
            if (want_kb) {
                const real *p = part_kb + un * k->kbl;
                real *d = dkbias + (size_t)h * k->kbl;
                for (int i = 0; i < k->kbl; i++) d[i] += p[i];
            }
        }
}

void mega_mhattn_query(const mega_mhattn_k *k, int h, real *o, const real *q, int64_t t, int64_t lo, const real *kc,
                       const real *vc, int slots, real *w) {
    const int dh = k->dh, hp = dh / 2;
    const size_t Da = (size_t)k->H * dh;
    const int64_t n = t - lo + 1;
    const real l = lambda_of(k, n) * k->scale;
    const real *qh = q + (size_t)h * dh;
    const real *bt = k->btab ? k->btab + (size_t)h * k->bl + k->bc : NULL; /* bt[u - t] */
    const real *kb = k->kbias ? k->kbias + (size_t)h * k->kbl : NULL;
    for (int64_t j = 0; j < n; j++) {
        const int64_t u = lo + j;
        const real *kj = kc + (size_t)(u % slots) * Da + (size_t)h * dh;
        real dot = 0;
        if (k->xtab) {
            const real *f = k->xtab + (size_t)(t - u + k->xoff) * hp;
            for (int i = 0; i < hp; i++) dot += f[i] * (qh[2 * i] * kj[2 * i] + qh[2 * i + 1] * kj[2 * i + 1]);
        } else {
            for (int i = 0; i < dh; i++) dot += qh[i] * kj[i];
        }
        real sc = l * dot;
        if (bt) sc += bt[u - t];
        if (kb) sc += kb[u < k->kbl ? u : k->kbl - 1];
        w[j] = sc;
    }
    mega_softmax_row(w, (size_t)n);
    real *oh = o + (size_t)h * dh;
    for (int i = 0; i < dh; i++) oh[i] = 0;
    for (int64_t j = 0; j < n; j++) {
        const real *vj = vc + (size_t)((lo + j) % slots) * Da + (size_t)h * dh;
        const real a = w[j];
        for (int i = 0; i < dh; i++) oh[i] += a * vj[i];
    }
}
