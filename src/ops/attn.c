/* Chunked single-head attention of Mega: see attn.h for the exact semantics. */
#include "ops/attn.h"
#include "core/rng.h"
#include "ops/ops.h"
#include "ops/vec.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* The Laplace attention function (official utils.laplace) is 0.5 (1 + erf(z)), z = (s - mu) /
 * (sigma sqrt 2). libm's erff is a call per element, which made Laplace attention 3x slower than
 * softmax; on vectors it is computed from e^x with Abramowitz and Stegun's 7.1.26 (Handbook of
 * Mathematical Functions, 1964): erfc(|z|) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-z^2),
 * t = 1 / (1 + p |z|), |error| <= 1.5e-7 (measured against erf in double: test_hgemm), i.e. at
 * most about 2 float ulps of f, which lies in [0, 1]. Then f = 0.5 + sign(z) (0.5 - erfc(|z|)/2).
 * Double builds and builds without vector e^x keep erf. */
void mega_attn_f_row(mega_attn_fn fn, real *s, int n) {
    int j = 0;
#ifdef MEGA_VEXP
    if (fn == MEGA_ATTN_LAPLACE) {
        typedef int vi __attribute__((vector_size(sizeof(vf))));
        const vf mu = vbc(0.707107f), is = vbc((float)(1 / (0.282095 * 1.4142135623730951))), one = vbc(1.0f), half = vbc(0.5f);
        const vi sgn = (vi)vbc(-0.0f);
        for (; j + VL <= n; j += VL) {
            const vf z = (vld(s + j) - mu) * is, az = vmax(z, -z);
            const vf t = one / vfma(vbc(0.3275911f), az, one);
            vf p = vfma(vbc(1.061405429f), t, vbc(-1.453152027f));
            p = vfma(p, t, vbc(1.421413741f));
            p = vfma(p, t, vbc(-0.284496736f));
            p = vfma(p, t, vbc(0.254829592f));
            const vf h = half * (p * t) * vexp(-(az * az)); /* erfc(|z|) / 2 */
            vst(s + j, half + (vf)((vi)(half - h) | ((vi)z & sgn)));
        }
    }
#endif
    for (; j < n; j++) s[j] = mega_attn_f(fn, s[j]);
}

void mega_attn_fgrad_row(mega_attn_fn fn, real *g, const real *s, int n) {
    int j = 0;
#ifdef MEGA_VEXP
    if (fn == MEGA_ATTN_LAPLACE) {
        /* the Gaussian density of mega_attn_fgrad */
        const vf mu = vbc(0.707107f), isig = vbc((float)(1 / 0.282095)), c0 = vbc((float)(1 / (0.282095 * 2.5066282746310002)));
        for (; j + VL <= n; j += VL) {
            const vf c = (vld(s + j) - mu) * isig;
            vst(g + j, vld(g + j) * c0 * vexp(vbc(-0.5f) * c * c));
        }
    }
#endif
    for (; j < n; j++) g[j] *= mega_attn_fgrad(fn, s[j]);
}

/* Query rows per block. Causal chunks keep MEGA_ATTN_BR (64) rows so that blocks above the
 * diagonal are skipped (nk = i1); long bidirectional chunks use 4x taller blocks, because every
 * block re-packs the chunk's whole K and V inside OpenBLAS and taller blocks amortise that
 * (measured on lra-text-train-full, 4096-token chunks: 64 rows 3.0 s/step, 256 rows 2.65 s,
 * 512 rows no better; causal lm-train is 4% slower with 256). */
static inline int block_rows(const mega_attn_k *k, int C) {
    return (!k->causal && C >= 1024) ? 4 * MEGA_ATTN_BR : MEGA_ATTN_BR;
}

static inline int chunk_len(const mega_attn_k *k, int T) { return mega__segment(k->chunk_size, T); }

size_t mega_attn_scratch(const mega_attn_k *k, int T) {
    size_t c = (size_t)chunk_len(k, T);
    return 4 * (size_t)block_rows(k, (int)c) * c + 2 * (size_t)k->Mc + 64;
}

/* strides of q, k, v, O (0 in the kernel description = packed) */
static inline size_t LQ(const mega_attn_k *k) { return (size_t)(k->ldq ? k->ldq : k->Z); }
static inline size_t LK(const mega_attn_k *k) { return (size_t)(k->ldk ? k->ldk : k->Z); }
static inline size_t LV(const mega_attn_k *k) { return (size_t)(k->ldv ? k->ldv : k->E); }
static inline size_t LO(const mega_attn_k *k) { return (size_t)(k->ldo ? k->ldo : k->E); }

/* One unit of work: nq query rows starting at row qrow0 against n key rows starting at krow0 (a
 * chunk of a sequence: qrow0 = krow0 = b*T + t0, nq = n; a cross-attention sequence: the queries
 * and keys of sequence b), the key pad mask (or NULL) and whether every key is pad. Query i sits
 * at position qoff + i for the bias. */
typedef struct {
    size_t qrow0, krow0;
    int nq, n, qoff;
    const uint8_t *pad;
    int allpad, nvalid;
} chunk_t;

static void count_valid(chunk_t *c) {
    c->nvalid = c->n;
    if (c->pad) {
        c->nvalid = 0;
        for (int j = 0; j < c->n; j++) c->nvalid += !c->pad[j];
    }
    c->allpad = c->pad && c->nvalid == 0;
}

static chunk_t get_chunk(const mega_attn_k *k, const uint8_t *pad, int T, int b, int ci) {
    chunk_t c;
    int C = chunk_len(k, T);
    int t0 = ci * C;
    c.qrow0 = c.krow0 = (size_t)b * T + t0;
    c.n = c.nq = MEGA_MIN(C, T - t0);
    c.qoff = 0;
    c.pad = pad ? pad + c.qrow0 : NULL;
    count_valid(&c);
    return c;
}

static chunk_t get_cross(const uint8_t *kpad, int Tq, int Tk, int qoff, int b) {
    chunk_t c;
    c.qrow0 = (size_t)b * Tq, c.krow0 = (size_t)b * Tk;
    c.nq = Tq, c.n = Tk, c.qoff = qoff;
    c.pad = kpad ? kpad + c.krow0 : NULL;
    count_valid(&c);
    return c;
}

/* Scores for query rows [i0, i1) of a unit against keys [0, nk) into S (ld = nk), turned into
 * attention weights A (pre-dropout) in place. For element attention the pre-activation scores
 * are kept in Sraw (if non-NULL). lse receives the softmax row normaliser. */
static void block_weights(const mega_attn_k *k, const chunk_t *c, const real *q, const real *kk, int i0, int i1,
                          int nk, real *S, real *Sraw, real *lse_out, const real *lse_in) {
    const int Z = k->Z;
    const int br = i1 - i0;
    const int soft = k->fn == MEGA_ATTN_SOFTMAX;
    const real scale = soft ? (real)1 / R_SQRT((real)Z) : (real)1;
    mega_gemm_serial(0, 1, (size_t)br, (size_t)nk, (size_t)Z, scale, q + (c->qrow0 + i0) * LQ(k), LQ(k),
                     kk + c->krow0 * LK(k), LK(k), 0, S, (size_t)nk);
    const real *bt = k->btab ? k->btab + (k->Mc - 1) : NULL;
    /* pad keys are masked unless the unit is all pad (softmax rule); element attention always */
    const uint8_t *kpad = (c->pad && !(soft && c->allpad)) ? c->pad : NULL;
    for (int r = 0; r < br; r++) {
        const int i = i0 + r;
        real *s = S + (size_t)r * nk;
        const real *bi = bt ? bt - (c->qoff + i) : NULL; /* bias(i, j) = bi[j] */
        /* causal rows see keys [0, i]; the loops below run over the visible prefix only so that
         * they vectorise, and the masked tail is written once */
        const int jm = k->causal ? MEGA_MIN(nk, i + 1) : nk;
        if (soft) {
            real mx = -INFINITY;
            if (bi)
                for (int j = 0; j < jm; j++) s[j] += bi[j];
            if (kpad)
                for (int j = 0; j < jm; j++) s[j] = kpad[j] ? -INFINITY : s[j];
            mx = mega_row_max(s, (size_t)jm);
            for (int j = jm; j < nk; j++) s[j] = 0;
            real l;
            if (mx == -INFINITY) {
                /* no visible key (cannot happen with right padding): output 0, no gradient */
                for (int j = 0; j < jm; j++) s[j] = 0;
                l = INFINITY;
            } else if (lse_in) {
                l = lse_in[c->qrow0 + i];
                mega_exp_sub(s, (size_t)jm, l, 0);
            } else {
                const real sum = mega_exp_sub(s, (size_t)jm, mx, 1);
                real inv = (real)1 / sum;
                for (int j = 0; j < jm; j++) s[j] *= inv;
                l = mx + R_LOG(sum);
            }
            if (lse_out) lse_out[c->qrow0 + i] = l;
        } else {
            /* length divisor: causal row count, else valid keys (>= 1) with a pad mask, else n */
            real len = k->causal ? (real)(i + 1) : (real)(c->pad ? MEGA_MAX(c->nvalid, 1) : c->n);
            real inv = (real)1 / len;
            real *sr = Sraw ? Sraw + (size_t)r * nk : NULL;
            if (bi)
                for (int j = 0; j < jm; j++) s[j] = s[j] * inv + bi[j];
            else
                for (int j = 0; j < jm; j++) s[j] = s[j] * inv;
            if (sr) memcpy(sr, s, (size_t)jm * sizeof(real));
            mega_attn_f_row(k->fn, s, jm);
            if (kpad)
                for (int j = 0; j < jm; j++) s[j] = kpad[j] ? 0 : s[j];
            for (int j = jm; j < nk; j++) s[j] = 0;
        }
    }
}

/* apply attention dropout to rows [i0,i1) of a unit: index = global query row * n + key */
static void block_dropout(const mega_attn_k *k, const chunk_t *c, real *A, int i0, int i1, int nk) {
    if (k->p_attn <= 0) return;
    const real sc = (real)(1.0 / (1.0 - k->p_attn));
    for (int r = 0; r < i1 - i0; r++) {
        uint64_t base = (uint64_t)(c->qrow0 + i0 + r) * (uint64_t)c->n;
        real *a = A + (size_t)r * nk;
        for (int j = 0; j < nk; j++) a[j] = mega__hash01(k->key_attn, base + j) >= k->p_attn ? a[j] * sc : 0;
    }
}

/* the forward of one unit in blocks of BR query rows (S: BR x n scratch) */
static void unit_forward(const mega_attn_k *k, const chunk_t *c, int BR, real *O, real *lse, const real *q,
                         const real *kk, const real *v, real *S) {
    for (int i0 = 0; i0 < c->nq; i0 += BR) {
        int i1 = MEGA_MIN(c->nq, i0 + BR);
        int nk = k->causal ? i1 : c->n; /* causal rows never see keys beyond i1 */
        block_weights(k, c, q, kk, i0, i1, nk, S, NULL, lse, NULL);
        block_dropout(k, c, S, i0, i1, nk);
        mega_gemm_serial(0, 0, (size_t)(i1 - i0), (size_t)k->E, (size_t)nk, 1, S, (size_t)nk, v + c->krow0 * LV(k), LV(k),
                         0, O + (c->qrow0 + i0) * LO(k), LO(k));
    }
}

/* the backward of one unit; Wk: the thread's scratch (A, G, Sr blocks of BR x C); db: the
 * bias-table gradient partial (2Mc-1 reals) the unit adds to */
static void unit_backward(const mega_attn_k *k, const chunk_t *c, int BR, size_t C, real *dq, real *dk, real *dv,
                          const real *dO, const real *q, const real *kk, const real *v, const real *lse, real *Wk,
                          real *db) {
    const int Z = k->Z, E = k->E, Mc = k->Mc;
    const int soft = k->fn == MEGA_ATTN_SOFTMAX;
    const real scale = soft ? (real)1 / R_SQRT((real)Z) : (real)1;
    real *A = Wk;                      /* BR x n: weights (pre-dropout) */
    real *G = A + (size_t)BR * C;      /* BR x n: dA', then dS */
    real *Sr = G + (size_t)BR * C;     /* BR x n: raw element scores */
    const size_t lq = LQ(k), lk = LK(k), lv = LV(k), lo = LO(k);
    const real *vc = v + c->krow0 * lv;
    for (int i0 = 0; i0 < c->nq; i0 += BR) {
        const int i1 = MEGA_MIN(c->nq, i0 + BR), br = i1 - i0;
        const int nk = k->causal ? i1 : c->n;
        const real *dOb = dO + (c->qrow0 + i0) * lo;
        block_weights(k, c, q, kk, i0, i1, nk, A, soft ? NULL : Sr, NULL, lse);
        /* dA' = dO v^T */
        mega_gemm_serial(0, 1, (size_t)br, (size_t)nk, (size_t)E, 1, dOb, lo, vc, lv, 0, G, (size_t)nk);
        if (k->p_attn > 0) {
            /* dv += A'^T dO with A' the dropped weights; then dA = dropout(dA') */
            real *Ad = Sr + (size_t)BR * C;
            memcpy(Ad, A, (size_t)br * nk * sizeof(real));
            block_dropout(k, c, Ad, i0, i1, nk);
            mega_gemm_serial(1, 0, (size_t)nk, (size_t)E, (size_t)br, 1, Ad, (size_t)nk, dOb, lo, 1, dv + c->krow0 * lv, lv);
            block_dropout(k, c, G, i0, i1, nk);
        } else {
            mega_gemm_serial(1, 0, (size_t)nk, (size_t)E, (size_t)br, 1, A, (size_t)nk, dOb, lo, 1, dv + c->krow0 * lv, lv);
        }
        /* dS (rows see keys [0, jm); masked entries have A = 0 (softmax) or get 0 below) */
        real *dbc = db + (Mc - 1);
        const uint8_t *kpad = c->pad;
        for (int r = 0; r < br; r++) {
            const int i = i0 + r;
            const int jm = k->causal ? MEGA_MIN(nk, i + 1) : nk;
            real *g = G + (size_t)r * nk;
            const real *a = A + (size_t)r * nk;
            real rowscale;
            if (soft) {
                mega_softmax_row_backward(g, g, a, (size_t)jm);
                rowscale = scale;
            } else {
                const real *sr = Sr + (size_t)r * nk;
                mega_attn_fgrad_row(k->fn, g, sr, jm);
                if (kpad)
                    for (int j = 0; j < jm; j++) g[j] = kpad[j] ? 0 : g[j];
                real len = k->causal ? (real)(i + 1) : (real)(c->pad ? MEGA_MAX(c->nvalid, 1) : c->n);
                rowscale = (real)1 / len;
            }
            for (int j = jm; j < nk; j++) g[j] = 0;
            /* bias gradient along the diagonals: d btab[Mc-1 + j - i] += dS[i,j] */
            if (k->btab) {
                real *dbi = dbc - (c->qoff + i);
                for (int j = 0; j < jm; j++) dbi[j] += g[j];
            }
            for (int j = 0; j < jm; j++) g[j] *= rowscale;
        }
        /* dq += dS k ; dk += dS^T q */
        mega_gemm_serial(0, 0, (size_t)br, (size_t)Z, (size_t)nk, 1, G, (size_t)nk, kk + c->krow0 * lk, lk, 1,
                         dq + (c->qrow0 + i0) * lq, lq);
        mega_gemm_serial(1, 0, (size_t)nk, (size_t)Z, (size_t)br, 1, G, (size_t)nk, q + (c->qrow0 + i0) * lq, lq, 1,
                         dk + c->krow0 * lk, lk);
    }
}

void mega_attn_forward(const mega_attn_k *k, real *O, real *lse, const real *q, const real *kk, const real *v,
                       const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    const int C = chunk_len(k, T), nch = (T + C - 1) / C;
    const size_t per = mega_attn_scratch(k, T);
    const long units = (long)B * nch;
    const int BR = block_rows(k, C);
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (units > 1 && (size_t)B * T * C * (k->Z + k->E) > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        chunk_t c = get_chunk(k, pad, T, (int)(u / nch), (int)(u % nch));
        unit_forward(k, &c, BR, O, lse, q, kk, v, scratch + per * (size_t)mega__thread_id());
    }
}

/* The bias-table gradient is a sum over every unit. So that it does not depend on the number of
 * threads (a training run's result does not, docs/distributed.md), the units are cut into at most
 * DB_GROUPS fixed contiguous groups, a count that depends on the units alone; each group adds its
 * units in order into its own partial, threads take whole groups, and the partials are added in
 * group order. Without a bias table every unit is a group of its own. */
enum { DB_GROUPS = 64 };

size_t mega_attn_db_scratch(const mega_attn_k *k) { return k->Mc > 0 ? DB_GROUPS * 2 * (size_t)k->Mc : 0; }

/* where the units come from: the chunks of self-attention or the sequences of cross-attention */
typedef struct {
    const mega_attn_k *k;
    const uint8_t *pad;
    int cross, T, nch, Tq, Tk, qoff;
} unit_src;

static chunk_t unit_at(const unit_src *us, long u) {
    return us->cross ? get_cross(us->pad, us->Tq, us->Tk, us->qoff, (int)u)
                     : get_chunk(us->k, us->pad, us->T, (int)(u / us->nch), (int)(u % us->nch));
}

static void backward_units(const mega_attn_k *k, const unit_src *us, long units, int BR, size_t C, real *dq,
                           real *dk, real *dv, real *dbtab, const real *dO, const real *q, const real *kk,
                           const real *v, const real *lse, real *scratch, size_t per, int nthreads, int par) {
    const int bias = dbtab && k->btab;
    const size_t nb = 2 * (size_t)k->Mc - 1, off = 4 * (size_t)BR * C;
    real *part = scratch + per * (size_t)nthreads; /* DB_GROUPS x 2Mc (mega_attn_db_scratch) */
    const long ng = bias ? MEGA_MIN(units, (long)DB_GROUPS) : units;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (par)
    for (long g = 0; g < ng; g++) {
        real *w = scratch + per * (size_t)mega__thread_id();
        /* without dbtab the kernel's bias gradient goes to the thread's slot and is dropped */
        real *db = bias ? part + (size_t)g * 2 * (size_t)k->Mc : w + off;
        if (k->btab) memset(db, 0, nb * sizeof(real));
        for (long u = units * g / ng; u < units * (g + 1) / ng; u++) {
            chunk_t c = unit_at(us, u);
            unit_backward(k, &c, BR, C, dq, dk, dv, dO, q, kk, v, lse, w, db);
        }
    }
    if (bias)
        for (long g = 0; g < ng; g++) {
            const real *db = part + (size_t)g * 2 * (size_t)k->Mc;
            for (size_t i = 0; i < nb; i++) dbtab[i] += db[i];
        }
}

void mega_attn_backward(const mega_attn_k *k, real *dq, real *dk, real *dv, real *dbtab, const real *dO,
                        const real *q, const real *kk, const real *v, const real *lse, const uint8_t *pad, int B,
                        int T, real *scratch, int nthreads) {
    const int C = chunk_len(k, T), nch = (T + C - 1) / C;
    const size_t per = mega_attn_scratch(k, T);
    const long units = (long)B * nch;
    const int BR = block_rows(k, C);
    if (nthreads < 1) nthreads = 1;
    const unit_src us = {k, pad, 0, T, nch, 0, 0, 0};
    backward_units(k, &us, units, BR, (size_t)C, dq, dk, dv, dbtab, dO, q, kk, v, lse, scratch, per, nthreads,
                   units > 1 && (size_t)B * T * C * (k->Z + k->E) > MEGA_PAR_MIN);
}

/* ---- cross-attention: one unit per sequence, all its queries against all its keys ---------- */

size_t mega_attn_cross_scratch(const mega_attn_k *k, int Tk) {
    return 4 * (size_t)MEGA_ATTN_BR * (size_t)Tk + 2 * (size_t)k->Mc + 64;
}

void mega_attn_cross_forward(const mega_attn_k *k, real *O, real *lse, const real *q, const real *kk, const real *v,
                             const uint8_t *kpad, int B, int Tq, int Tk, int qoff, real *scratch, int nthreads) {
    mega_attn_k kc = *k;
    kc.causal = 0;
    const size_t per = mega_attn_cross_scratch(k, Tk);
    if (nthreads < 1) nthreads = 1;
    /* Small work (a decoding step of a few sentences) runs without an OpenMP region: libgomp
     * allocates a team even for a region that runs on one thread, and the step must not
     * allocate. Larger work takes one region with contiguous pieces per thread rather than a
     * worksharing loop, because LLVM's libomp allocates in a loop's setup (__kmpc_for_static_init)
     * and a beam-search step over many sentences lands here. */
    if (B > 1 && nthreads > 1 && (size_t)B * Tq * Tk * (k->Z + k->E) > MEGA_PAR_MIN) {
#pragma omp parallel num_threads(nthreads)
        {
            const int t = mega__thread_id(), nt = mega__num_threads();
            for (int b = (int)((long)B * t / nt); b < (int)((long)B * (t + 1) / nt); b++) {
                chunk_t c = get_cross(kpad, Tq, Tk, qoff, b);
                unit_forward(&kc, &c, MEGA_ATTN_BR, O, lse, q, kk, v, scratch + per * (size_t)t);
            }
        }
        return;
    }
    for (int b = 0; b < B; b++) {
        chunk_t c = get_cross(kpad, Tq, Tk, qoff, b);
        unit_forward(&kc, &c, MEGA_ATTN_BR, O, lse, q, kk, v, scratch);
    }
}

void mega_attn_cross_backward(const mega_attn_k *k, real *dq, real *dk, real *dv, real *dbtab, const real *dO,
                              const real *q, const real *kk, const real *v, const real *lse, const uint8_t *kpad,
                              int B, int Tq, int Tk, int qoff, real *scratch, int nthreads) {
    mega_attn_k kc = *k;
    kc.causal = 0;
    const size_t per = mega_attn_cross_scratch(k, Tk);
    if (nthreads < 1) nthreads = 1;
    const unit_src us = {&kc, kpad, 1, 0, 0, Tq, Tk, qoff};
    backward_units(&kc, &us, B, MEGA_ATTN_BR, (size_t)Tk, dq, dk, dv, dbtab, dO, q, kk, v, lse, scratch, per, nthreads,
                   B > 1 && (size_t)B * Tq * Tk * (k->Z + k->E) > MEGA_PAR_MIN);
}

/* One query against the streaming cache. Keys are stored transposed, kt [Z, ldk] (cached key j
 * is column j), so the scores of all keys are one vectorised pass per component z instead of n
 * reductions over z, and the output is accumulated in register blocks of MEGA_ATTN_QBLOCK values
 * instead of a load and a store of o[] per key. The two halves are separate so that the step
 * can spread the output blocks over threads (reading the value cache is most of it). */
void mega_attn_query_weights(const mega_attn_k *k, const real *q, const real *kt, size_t ldk, int n, real *w) {
    const int Z = k->Z;
    const int soft = k->fn == MEGA_ATTN_SOFTMAX;
    const real *bi = k->btab + (k->Mc - 1) - (n - 1); /* bias row n-1 */
    for (int j = 0; j < n; j++) w[j] = 0;
    for (int z = 0; z < Z; z++) {
        const real qz = q[z], *kz = kt + (size_t)z * ldk;
        for (int j = 0; j < n; j++) w[j] += qz * kz[j];
    }
    if (soft) {
        const real rs = (real)1 / R_SQRT((real)Z);
        for (int j = 0; j < n; j++) w[j] = w[j] * rs + bi[j];
        const real mx = mega_row_max(w, (size_t)n);
        const real inv = (real)1 / mega_exp_sub(w, (size_t)n, mx, 1);
        for (int j = 0; j < n; j++) w[j] *= inv;
    } else {
        for (int j = 0; j < n; j++) w[j] = w[j] / (real)n + bi[j];
        mega_attn_f_row(k->fn, w, n);
    }
}

void mega_attn_query_out(real *o, const real *w, const real *v, size_t ldv, int n, int ne) {
    enum { QB = MEGA_ATTN_QBLOCK };
    real acc[QB];
    if (ne == QB) { /* fixed trip counts: the accumulators stay in registers */
        for (int e = 0; e < QB; e++) acc[e] = 0;
        for (int j = 0; j < n; j++) {
            const real wj = w[j], *vj = v + (size_t)j * ldv;
            for (int e = 0; e < QB; e++) acc[e] += wj * vj[e];
        }
        for (int e = 0; e < QB; e++) o[e] = acc[e];
        return;
    }
    MEGA_ASSERT(ne >= 0 && ne <= QB);
    for (int e = 0; e < ne; e++) acc[e] = 0;
    for (int j = 0; j < n; j++) {
        const real wj = w[j], *vj = v + (size_t)j * ldv;
        for (int e = 0; e < ne; e++) acc[e] += wj * vj[e];
    }
    for (int e = 0; e < ne; e++) o[e] = acc[e];
}

void mega_attn_query_kt(const mega_attn_k *k, real *o, const real *q, const real *kt, size_t ldk, const real *vc,
                        int n, real *w) {
    mega_attn_query_weights(k, q, kt, ldk, n, w);
    for (int e0 = 0; e0 < k->E; e0 += MEGA_ATTN_QBLOCK)
        mega_attn_query_out(o + e0, w, vc + e0, (size_t)k->E, n, MEGA_MIN(MEGA_ATTN_QBLOCK, k->E - e0));
}
