/* ABC kernels (Peng et al. 2022; docs/mixers.md): window read, causal memory scan and its exact
 * reverse scan, bidirectional memory. See abc.h for the layout and the conventions. */
#include "ops/abc.h"
#include "core/rng.h"
#include "ops/ops.h"

static inline real dot(const real *a, const real *b, int d) {
    real s = 0;
    for (int i = 0; i < d; i++) s += a[i] * b[i];
    return s;
}
static inline void axpy(real *y, real a, const real *x, int d) {
    for (int i = 0; i < d; i++) y[i] += a * x[i];
}
static inline void zero(real *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 0;
}
/* attention-dropout factor of slot weight number idx: 0 or 1/(1-p) (1 without dropout) */
static inline real drop_f(const mega_abc_k *k, uint64_t idx) {
    if (k->p_drop <= 0) return 1;
    return mega__hash01(k->key, idx) >= k->p_drop ? (real)(1.0 / (1.0 - k->p_drop)) : 0;
}
static inline size_t HN(const mega_abc_k *k) { return (size_t)k->H * k->n; }
static inline size_t DD(const mega_abc_k *k) { return (size_t)k->H * k->d; }

/* ---- window ----------------------------------------------------------------------------- */

size_t mega_abc_window_tmp(const mega_abc_k *k) { return (size_t)k->n + 16; }

void mega_abc_window_read(const mega_abc_k *k, real *o, real *p, const real *q, const real *kr, const real *vr,
                          size_t ld, int m, const uint8_t *padr, int e, uint64_t pidx) {
    const int d = k->d;
    int nempty = e;
    real mx = -INFINITY;
    for (int i = 0; i < m; i++) {
        if (padr && padr[i]) { /* phi_i = 0 for a pad: its slot is empty */
            p[i] = -INFINITY;
            nempty++;
            continue;
        }
        real s = k->scale * dot(q, kr + (size_t)i * ld, d);
        p[i] = s;
        if (s > mx) mx = s;
    }
    if (k->mask_empty || nempty == 0) {
        mega_softmax_row(p, (size_t)m);
    } else {
        /* literal form: every empty slot has logit 0 (a zero K~ row) and a zero V~ row; it takes
         * softmax mass but adds nothing, so only its count matters */
        if (mx < 0) mx = 0;
        real sum = (real)nempty * R_EXP(-mx);
        for (int i = 0; i < m; i++) {
            if (padr && padr[i]) {
                p[i] = 0;
                continue;
            }
            p[i] = R_EXP(p[i] - mx);
            sum += p[i];
        }
        const real inv = (real)1 / sum;
        for (int i = 0; i < m; i++) p[i] *= inv;
    }
    for (int i = m; i < m + e; i++) p[i] = 0;
    zero(o, (size_t)d);
    for (int i = 0; i < m; i++) {
        real w = p[i] * drop_f(k, pidx + (uint64_t)i);
        if (w != 0) axpy(o, w, vr + (size_t)i * ld, d);
    }
}

void mega_abc_window_forward(const mega_abc_k *k, real *o, real *P, const real *q, const real *kk, const real *v,
                             const uint8_t *pad, int b, int h) {
    const int T = k->T, n = k->n;
    const size_t D = DD(k), Hn = HN(k), off = (size_t)h * k->d;
    for (int t = 0; t < T; t++) {
        /* slot j holds token t-n+1+j; rows u0..t exist, the first n-m slots are empty */
        const int u0 = t - n + 1 < 0 ? 0 : t - n + 1, m = t - u0 + 1;
        const size_t r = (size_t)b * T + t, r0 = (size_t)b * T + u0;
        const size_t pi = r * Hn + (size_t)h * n;
        mega_abc_window_read(k, o + r * D + off, P + pi, q + r * D + off, kk + r0 * D + off, v + r0 * D + off, D, m,
                             pad ? pad + r0 : NULL, n - m, pi);
    }
}

void mega_abc_window_backward(const mega_abc_k *k, real *dq, real *dk, real *dv, const real *dO, const real *P,
                              const real *q, const real *kk, const real *v, const uint8_t *pad, int b, int h,
                              real *tmp) {
    const int T = k->T, n = k->n, d = k->d;
    const size_t D = DD(k), Hn = HN(k), off = (size_t)h * d;
    (void)pad; /* pads have weight 0 in P: they receive no gradient */
    for (int t = 0; t < T; t++) {
        const size_t r = (size_t)b * T + t;
        zero(dk + r * D + off, (size_t)d);
        zero(dv + r * D + off, (size_t)d);
    }
    real *ds = tmp;
    for (int t = 0; t < T; t++) {
        const int u0 = t - n + 1 < 0 ? 0 : t - n + 1, m = t - u0 + 1;
        const size_t r = (size_t)b * T + t, r0 = (size_t)b * T + u0, pi = r * Hn + (size_t)h * n;
        const real *p = P + pi, *dOt = dO + r * D + off, *qt = q + r * D + off;
        /* dV~ = dropout(p) dO^T, d dropout(p) = V~ dO (the ABC backward with phi one-hot) */
        for (int i = 0; i < m; i++) {
            const real f = drop_f(k, pi + (uint64_t)i);
            const size_t ru = (r0 + (size_t)i) * D + off;
            ds[i] = f * dot(dOt, v + ru, d);
            if (p[i] * f != 0) axpy(dv + ru, p[i] * f, dOt, d);
        }
        mega_softmax_row_backward(ds, ds, p, (size_t)m);
        real *dqt = dq + r * D + off;
        zero(dqt, (size_t)d);
        for (int i = 0; i < m; i++) {
            if (ds[i] == 0) continue;
            const size_t ru = (r0 + (size_t)i) * D + off;
            axpy(dqt, k->scale * ds[i], kk + ru, d);
            axpy(dk + ru, k->scale * ds[i], qt, d);
        }
    }
}

/* ---- causal scan ------------------------------------------------------------------------ */

static inline const real *crow(const real *c, const mega_abc_k *k, int b, int t, int h) {
    return c + (size_t)b * k->cs_b + (size_t)t * k->cs_t + (size_t)h * k->cs_h;
}
/* decay g and write weight w of one token from its control row c (LOGZ: advances lz) */
static void coefs(const mega_abc_k *k, const real *c, real *lz, real *g, real *w) {
    if (k->mode == MEGA_ABC_SUM) {
        for (int j = 0; j < k->n; j++) g[j] = 1, w[j] = c[j];
    } else {
        for (int j = 0; j < k->n; j++) mega_abc_logz_step(lz + j, c[j], g + j, w + j);
    }
}
static void coefs_none(int n, real *g, real *w) {
    for (int j = 0; j < n; j++) g[j] = 1, w[j] = 0;
}
/* M[j] = g[j] M[j] + w[j] x  (the memory write) */
static void mem_write(const mega_abc_k *k, real *M, const real *g, const real *w, const real *x) {
    const int n = k->n, d = k->d;
    for (int j = 0; j < n; j++) {
        real *Mj = M + (size_t)j * d;
        const real gj = g[j], wj = w[j];
        if (k->mode == MEGA_ABC_SUM)
            for (int i = 0; i < d; i++) Mj[i] += wj * x[i];
        else
            for (int i = 0; i < d; i++) Mj[i] = gj * Mj[i] + wj * x[i];
    }
}
/* o = V~^T dropout(p), p = softmax(scale K~ q) (the ABC read) */
static void mem_read(const mega_abc_k *k, real *o, real *p, const real *q, const real *Mk, const real *Mv,
                     uint64_t pidx) {
    const int n = k->n, d = k->d;
    for (int j = 0; j < n; j++) p[j] = k->scale * dot(q, Mk + (size_t)j * d, d);
    mega_softmax_row(p, (size_t)n);
    zero(o, (size_t)d);
    for (int j = 0; j < n; j++) {
        real w = p[j] * drop_f(k, pidx + (uint64_t)j);
        if (w != 0) axpy(o, w, Mv + (size_t)j * d, d);
    }
}

size_t mega_abc_scan_fwd_tmp(const mega_abc_k *k) { return (size_t)5 * k->n + 16; }

void mega_abc_scan_forward(const mega_abc_k *k, real *o, real *P, const real *q, const real *kk, const real *v,
                           const uint8_t *pad, int b, int h, real *Mk, real *Mv, real *lzk, real *lzv, real *tmp) {
    const int T = k->T, n = k->n;
    const size_t D = DD(k), Hn = HN(k), off = (size_t)h * k->d;
    real *gk = tmp, *wk = gk + n, *gv = wk + n, *wv = gv + n, *pt = wv + n;
    for (int t = 0; t < T; t++) {
        const size_t r = (size_t)b * T + t, pi = r * Hn + (size_t)h * n;
        if (!pad || !pad[r]) { /* pads write nothing: g = 1, w = 0 */
            coefs(k, crow(k->ck, k, b, t, h), lzk, gk, wk);
            mem_write(k, Mk, gk, wk, kk + r * D + off);
            coefs(k, crow(k->cv, k, b, t, h), lzv, gv, wv);
            mem_write(k, Mv, gv, wv, v + r * D + off);
        }
        mem_read(k, o + r * D + off, P ? P + pi : pt, q + r * D + off, Mk, Mv, pi);
    }
}

size_t mega_abc_scan_bwd_tmp(const mega_abc_k *k) {
    const size_t n = (size_t)k->n, nd = n * k->d, nseg = ((size_t)k->T + MEGA_ABC_SEG - 1) / MEGA_ABC_SEG;
    return nseg * (2 * nd + 2 * n) + MEGA_ABC_SEG * (2 * nd + 4 * n) + 2 * nd + 7 * n + 16;
}

/*
 * Reverse scan (our derivation). With dK~_t the direct gradient of the read at t,
 *   U_t = dK~_t + g_{t+1} U_{t+1}                    (n x d: rescaled suffix sums)
 *   c_t = dK~_t[j].K~_t[j] + g_{t+1} c_{t+1}         (n: LOGZ only)
 *   dk_t = sum_j w_t[j] U_t[j],  a_t[j] = k_t . U_t[j]
 *   SUM:  dL/dw_t[j] = a_t[j];   LOGZ: dL/dl_t[j] = w_t[j] (a_t[j] - c_t[j])
 * and likewise for the values (dV~_t = dropout(p_t) dO_t^T). The memories K~_t, V~_t are rebuilt
 * one segment at a time from the checkpoints of pass 1.
 */
void mega_abc_scan_backward(const mega_abc_k *k, real *dq, real *dk, real *dv, real *dck, real *dcv, const real *dO,
                            const real *P, const real *q, const real *kk, const real *v, const uint8_t *pad, int b,
                            int h, real *ws) {
    const int T = k->T, n = k->n, d = k->d, logz = k->mode == MEGA_ABC_LOGZ;
    const size_t D = DD(k), Hn = HN(k), off = (size_t)h * d, nd = (size_t)n * d;
    const size_t nseg = ((size_t)T + MEGA_ABC_SEG - 1) / MEGA_ABC_SEG, cks = 2 * nd + 2 * (size_t)n;
    real *ckp = ws;                                  /* nseg x (K~, V~, lzK, lzV) before each segment */
    real *seg = ckp + nseg * cks;                    /* SEG x (K~_t, V~_t) */
    real *cf = seg + (size_t)MEGA_ABC_SEG * 2 * nd;  /* SEG x (gk, wk, gv, wv) */
    real *Uk = cf + (size_t)MEGA_ABC_SEG * 4 * n, *Uv = Uk + nd;
    real *cbk = Uv + nd, *cbv = cbk + n, *lzk = cbv + n, *lzv = lzk + n, *ds = lzv + n;

    /* pass 1: the memory before every segment, from an empty memory (Uk, Uv as running state) */
    zero(Uk, 2 * nd);
    for (int j = 0; j < n; j++) lzk[j] = lzv[j] = -INFINITY;
    for (int t = 0; t < T; t++) {
        const size_t r = (size_t)b * T + t;
        if (t % MEGA_ABC_SEG == 0) {
            real *c = ckp + (size_t)(t / MEGA_ABC_SEG) * cks;
            memcpy(c, Uk, 2 * nd * sizeof(real));
            memcpy(c + 2 * nd, lzk, 2 * (size_t)n * sizeof(real));
        }
        if (pad && pad[r]) continue;
        coefs(k, crow(k->ck, k, b, t, h), lzk, cf, cf + n);
        mem_write(k, Uk, cf, cf + n, kk + r * D + off);
        coefs(k, crow(k->cv, k, b, t, h), lzv, cf + 2 * n, cf + 3 * n);
        mem_write(k, Uv, cf + 2 * n, cf + 3 * n, v + r * D + off);
    }
    /* pass 2: segments in reverse order */
    zero(Uk, 2 * nd);
    zero(cbk, 2 * (size_t)n);
    for (size_t c = nseg; c-- > 0;) {
        const int t0 = (int)c * MEGA_ABC_SEG, t1 = MEGA_MIN(T, t0 + MEGA_ABC_SEG);
        const real *c0 = ckp + c * cks;
        memcpy(lzk, c0 + 2 * nd, 2 * (size_t)n * sizeof(real));
        const real *pk = c0, *pv = c0 + nd;
        for (int t = t0; t < t1; t++) {
            const size_t r = (size_t)b * T + t;
            real *sk = seg + (size_t)(t - t0) * 2 * nd, *sv = sk + nd;
            real *gk = cf + (size_t)(t - t0) * 4 * n, *wk = gk + n, *gv = wk + n, *wv = gv + n;
            memcpy(sk, pk, nd * sizeof(real));
            memcpy(sv, pv, nd * sizeof(real));
            if (pad && pad[r]) {
                coefs_none(n, gk, wk);
                coefs_none(n, gv, wv);
            } else {
                coefs(k, crow(k->ck, k, b, t, h), lzk, gk, wk);
                mem_write(k, sk, gk, wk, kk + r * D + off);
                coefs(k, crow(k->cv, k, b, t, h), lzv, gv, wv);
                mem_write(k, sv, gv, wv, v + r * D + off);
            }
            pk = sk, pv = sv;
        }
        for (int t = t1 - 1; t >= t0; t--) {
            const size_t r = (size_t)b * T + t, pi = r * Hn + (size_t)h * n;
            const real *sk = seg + (size_t)(t - t0) * 2 * nd, *sv = sk + nd;
            const real *gk = cf + (size_t)(t - t0) * 4 * n, *wk = gk + n, *gv = wk + n, *wv = gv + n;
            const real *p = P + pi, *dOt = dO + r * D + off, *qt = q + r * D + off;
            /* the read at t: dV~_t = dropout(p) dO^T (into U^V), then the slot softmax */
            for (int j = 0; j < n; j++) {
                const real f = drop_f(k, pi + (uint64_t)j), dpd = dot(sv + (size_t)j * d, dOt, d);
                ds[j] = f * dpd;
                if (p[j] * f != 0) axpy(Uv + (size_t)j * d, p[j] * f, dOt, d);
                if (logz) cbv[j] += p[j] * f * dpd;
            }
            mega_softmax_row_backward(ds, ds, p, (size_t)n);
            /* dq = scale sum_j ds_j K~_t[j]; dK~_t = scale ds q^T (into U^K) */
            real *dqt = dq + r * D + off;
            zero(dqt, (size_t)d);
            for (int j = 0; j < n; j++) {
                if (ds[j] == 0) continue;
                const real *Kj = sk + (size_t)j * d;
                axpy(dqt, k->scale * ds[j], Kj, d);
                axpy(Uk + (size_t)j * d, k->scale * ds[j], qt, d);
                if (logz) cbk[j] += ds[j] * k->scale * dot(qt, Kj, d);
            }
            /* the write at t */
            real *dkt = dk + r * D + off, *dvt = dv + r * D + off;
            real *gck = dck + pi, *gcv = dcv + pi;
            zero(dkt, (size_t)d);
            zero(dvt, (size_t)d);
            if (pad && pad[r]) {
                zero(gck, (size_t)n);
                zero(gcv, (size_t)n);
                continue;
            }
            const real *kt = kk + r * D + off, *vt = v + r * D + off;
            for (int j = 0; j < n; j++) {
                real *Ukj = Uk + (size_t)j * d, *Uvj = Uv + (size_t)j * d;
                axpy(dkt, wk[j], Ukj, d);
                axpy(dvt, wv[j], Uvj, d);
                const real ak = dot(kt, Ukj, d), av = dot(vt, Uvj, d);
                if (logz) {
                    gck[j] = wk[j] * (ak - cbk[j]);
                    gcv[j] = wv[j] * (av - cbv[j]);
                    /* rescale for step t-1: U_{t-1} = dK~_{t-1} + g_t U_t */
                    for (int i = 0; i < d; i++) Ukj[i] *= gk[j], Uvj[i] *= gv[j];
                    cbk[j] *= gk[j], cbv[j] *= gv[j];
                } else {
                    gck[j] = ak;
                    gcv[j] = av;
                }
            }
        }
    }
}

/* ---- bidirectional ---------------------------------------------------------------------- */

static inline size_t TQ(const mega_abc_k *k) { return (size_t)(k->Tq > 0 ? k->Tq : k->T); }

size_t mega_abc_bidir_tmp(const mega_abc_k *k) {
    return 2 * TQ(k) * k->n + 2 * (size_t)k->n * k->d + 32;
}

/* Pd [Tq, n] = dropout(P) of unit (b, h) */
static void drop_rows(const mega_abc_k *k, real *Pd, const real *P, int b, int h) {
    const size_t Tq = TQ(k), n = (size_t)k->n, Hn = HN(k);
    for (size_t t = 0; t < Tq; t++) {
        const size_t pi = ((size_t)b * Tq + t) * Hn + (size_t)h * n;
        for (size_t j = 0; j < n; j++) Pd[t * n + j] = P[pi + j] * drop_f(k, pi + (uint64_t)j);
    }
}

void mega_abc_bidir_memory(const mega_abc_k *k, real *Km, real *Vm, const real *kk, const real *v, const real *phk,
                           const real *phv, size_t ldph, int b, int h) {
    const size_t T = (size_t)k->T, n = (size_t)k->n, d = (size_t)k->d, D = DD(k);
    const size_t base = (size_t)b * T * D + (size_t)h * d;
    /* K~ = Phi_K^T K, V~ = Phi_V^T V */
    mega_gemm_serial(0, 0, n, d, T, 1, phk, ldph, kk + base, D, 0, Km, d);
    mega_gemm_serial(0, 0, n, d, T, 1, phv, ldph, v + base, D, 0, Vm, d);
}

void mega_abc_bidir_read(const mega_abc_k *k, real *o, real *P, const real *Km, const real *Vm, const real *q, int b,
                         int h, real *tmp) {
    const size_t Tq = TQ(k), n = (size_t)k->n, d = (size_t)k->d, D = DD(k), Hn = HN(k);
    const size_t base = (size_t)b * Tq * D + (size_t)h * d;
    real *Ph = P + (size_t)b * Tq * Hn + (size_t)h * n;
    const uint8_t *em = k->empty ? k->empty + (size_t)b * k->empty_b : NULL;
    /* P = softmax_rows(Q K~^T / sqrt d) over the non-empty slots */
    mega_gemm_serial(0, 1, Tq, n, d, k->scale, q + base, D, Km, d, 0, Ph, Hn);
    for (size_t t = 0; t < Tq; t++) {
        real *row = Ph + t * Hn;
        if (em)
            for (size_t j = 0; j < n; j++)
                if (em[j]) row[j] = -INFINITY;
        mega_softmax_row(row, n);
    }
    const real *A = Ph;
    size_t lda = Hn;
    if (k->p_drop > 0) {
        drop_rows(k, tmp, P, b, h);
        A = tmp, lda = n;
    }
    /* O = dropout(P) V~ */
    mega_gemm_serial(0, 0, Tq, d, n, 1, A, lda, Vm, d, 0, o + base, D);
}

void mega_abc_bidir_forward(const mega_abc_k *k, real *o, real *P, real *Km, real *Vm, const real *q, const real *kk,
                            const real *v, const real *phk, const real *phv, size_t ldph, int b, int h, real *tmp) {
    mega_abc_bidir_memory(k, Km, Vm, kk, v, phk, phv, ldph, b, h);
    mega_abc_bidir_read(k, o, P, Km, Vm, q, b, h, tmp);
}

void mega_abc_bidir_backward(const mega_abc_k *k, real *dq, real *dk, real *dv, real *dphk, real *dphv, size_t ldd,
                             const real *dO, const real *P, const real *Km, const real *Vm, const real *q,
                             const real *kk, const real *v, const real *phk, const real *phv, size_t ldph, int b,
                             int h, real *tmp) {
    const size_t T = (size_t)k->T, Tq = TQ(k), n = (size_t)k->n, d = (size_t)k->d, D = DD(k), Hn = HN(k);
    const size_t base = (size_t)b * T * D + (size_t)h * d, qbase = (size_t)b * Tq * D + (size_t)h * d;
    const real *Ph = P + (size_t)b * Tq * Hn + (size_t)h * n;
    real *Pd = tmp, *G = Pd + Tq * n, *dKm = G + Tq * n, *dVm = dKm + n * d;
    const real *A = Ph;
    size_t lda = Hn;
    if (k->p_drop > 0) {
        drop_rows(k, Pd, P, b, h);
        A = Pd, lda = n;
    }
    /* dV~ = dropout(P)^T dO; G = dO V~^T (gradient of dropout(P)) */
    mega_gemm_serial(1, 0, n, d, Tq, 1, A, lda, dO + qbase, D, 0, dVm, d);
    mega_gemm_serial(0, 1, Tq, n, d, 1, dO + qbase, D, Vm, d, 0, G, n);
    for (size_t t = 0; t < Tq; t++) {
        real *g = G + t * n;
        if (k->p_drop > 0) {
            const size_t pi = ((size_t)b * Tq + t) * Hn + (size_t)h * n;
            for (size_t j = 0; j < n; j++) g[j] *= drop_f(k, pi + j);
        }
        mega_softmax_row_backward(g, g, Ph + t * Hn, n); /* dS (0 at masked slots: p = 0) */
    }
    /* dQ = dS K~ / sqrt d; dK~ = dS^T Q / sqrt d */
    mega_gemm_serial(0, 0, Tq, d, n, k->scale, G, n, Km, d, 0, dq + qbase, D);
    mega_gemm_serial(1, 0, n, d, Tq, k->scale, G, n, q + qbase, D, 0, dKm, d);
    /* dK = Phi_K dK~, dV = Phi_V dV~ */
    mega_gemm_serial(1, 0, T, d, n, 1, phk, ldph, dKm, d, 0, dk + base, D);
    mega_gemm_serial(1, 0, T, d, n, 1, phv, ldph, dVm, d, 0, dv + base, D);
    /* dPhi_K^T = dK~ K^T, dPhi_V^T = dV~ V^T */
    mega_gemm_serial(0, 1, n, T, d, 1, dKm, d, kk + base, D, 0, dphk, ldd);
    mega_gemm_serial(0, 1, n, T, d, 1, dVm, d, v + base, D, 0, dphv, ldd);
}

/* ---- the memory controls of the bidirectional form --------------------------------------- */

void mega_abc_lin_phi(const real *E, size_t N, int n, real *ph, const uint8_t *pad, int B, int T) {
    for (int b = 0; b < B; b++)
        for (size_t j = 0; j < (size_t)n; j++) {
            real *row = ph + ((size_t)b * n + j) * T;
            for (int t = 0; t < T; t++) row[t] = (pad && pad[(size_t)b * T + t]) ? 0 : E[j * N + (size_t)t];
        }
}

void mega_abc_lin_phi_backward(real *dE, size_t N, const real *g, const uint8_t *pad, int B, int H, int n, int T) {
#pragma omp parallel for schedule(static) if ((size_t)B * H * n * T > MEGA_PAR_MIN)
    for (int j = 0; j < n; j++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < T; t++)
                    if (!pad || !pad[(size_t)b * T + t]) dE[(size_t)j * N + t] += g[(((size_t)b * H + h) * n + j) * T + t];
}

void mega_abc_mlp_phi(const real *Wp, real *ph, const real *x, const uint8_t *pad, int B, int T, size_t Hn, size_t D) {
    for (int b = 0; b < B; b++) {
        real *pb = ph + (size_t)b * Hn * T;
        mega_gemm(0, 1, Hn, (size_t)T, D, 1, Wp, D, x + (size_t)b * T * D, D, 0, pb, (size_t)T);
        const uint8_t *pr = pad ? pad + (size_t)b * T : NULL;
#pragma omp parallel for schedule(static) if (Hn * (size_t)T > MEGA_PAR_MIN)
        for (size_t j = 0; j < Hn; j++) {
            real *row = pb + j * T;
            if (pr)
                for (int t = 0; t < T; t++)
                    if (pr[t]) row[t] = -INFINITY;
            mega_softmax_row(row, (size_t)T);
        }
    }
}

void mega_abc_mlp_phi_backward(const real *Wp, real *dWp, real *dx, real *g, const real *ph, const real *x, int B, int T,
                               size_t Hn, size_t D) {
    /* each row of Phi^T is a softmax over positions: dl = Phi (dPhi - sum Phi dPhi); then
     * dW_phi += dl^T X, dX += dl W_phi per batch */
#pragma omp parallel for schedule(static) if ((size_t)B * Hn * (size_t)T > MEGA_PAR_MIN)
    for (size_t r = 0; r < (size_t)B * Hn; r++) mega_softmax_row_backward(g + r * T, g + r * T, ph + r * T, (size_t)T);
    for (int b = 0; b < B; b++) {
        const real *gb = g + (size_t)b * Hn * T, *xb = x + (size_t)b * T * D;
        mega_gemm(0, 0, Hn, D, (size_t)T, 1, gb, (size_t)T, xb, D, 1, dWp, D);
        mega_gemm(1, 0, (size_t)T, D, Hn, 1, gb, (size_t)T, Wp, D, 1, dx + (size_t)b * T * D, D);
    }
}

void mega_abc_block_phi(real *ph, uint8_t *empty, const uint8_t *pad, int B, int T, int n) {
    for (int b = 0; b < B; b++) {
        const uint8_t *pr = pad ? pad + (size_t)b * T : NULL;
        real *pb = ph + (size_t)b * n * T;
        uint8_t *em = empty + (size_t)b * n;
        int Sb = 0;
        for (int t = 0; t < T; t++) Sb += !(pr && pr[t]);
        const int c = Sb > n ? (Sb + n - 1) / n : 1; /* block length */
        zero(pb, (size_t)n * T);
        for (int j = 0; j < n; j++) {
            const int lo = j * c, hi = MEGA_MIN(Sb, lo + c); /* ranks [lo, hi) */
            em[j] = hi <= lo;
        }
        for (int t = 0, r = 0; t < T; t++) {
            if (pr && pr[t]) continue;
            const int j = r / c, lo = j * c, len = MEGA_MIN(Sb, lo + c) - lo;
            pb[(size_t)j * T + t] = (real)1 / (real)len;
            r++;
        }
    }
}
