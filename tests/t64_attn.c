/*
 * The chunked attention kernel (src/ops/attn.h: mega_attn_forward / mega_attn_backward /
 * mega_attn_query) against a naive double-precision reference written here: the full T x T
 * weight matrix of every sequence is materialised with the chunk mask (keys outside the query's
 * chunk get weight 0), the causal mask, the pad rules of the official attention (below) and the
 * attention dropout mask.
 *
 * Reference semantics (attn.h; official moving_average_gated_attention.py:
 * MovingAverageGatedAttention.softmax_attention / element_attention, fairseq/utils.py relu2 and
 * laplace; a shorter last chunk is a project extension, docs/mega.md §3-§5):
 *   chunk-local indices i (query) and j (key); n = the chunk's length (the last one ragged);
 *   softmax: S = q.k/sqrt(Z) + btab[Mc-1+j-i]; keys j>i (causal) and pad keys are excluded,
 *            except in a chunk whose keys are ALL pad (then nothing is pad-masked);
 *            a row without any visible key gets zero weights (and lse = +inf);
 *   relu2 / laplace: S = q.k/len + btab[...], A = f(S) * [key valid] * [j<=i if causal],
 *            len = i+1 (causal), else max(1, valid keys of the chunk) with a pad mask, else n;
 *   dropout: keep iff hash01(key_attn, (b*T + t)*n + j) >= p, kept weights scaled by 1/(1-p).
 * The backward reference is the textbook one (dS from dA, then dq, dk, dv, dbias), itself
 * checked against central finite differences of the reference forward on a small case.
 */
#include "core/rng.h"
#include "ops/attn.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-12

static unsigned long long g_seed = 0x5eed1234ull;

/* independent element functions (official literals mu = 0.707107, sigma = 0.282095) */
static double ref_f(int fn, double s) {
    if (fn == MEGA_ATTN_RELU2) return s > 0 ? s * s : 0;
    return 0.5 * (1.0 + erf((s - 0.707107) / (0.282095 * sqrt(2.0))));
}
static double ref_fgrad(int fn, double s) {
    if (fn == MEGA_ATTN_RELU2) return s > 0 ? 2 * s : 0;
    double c = (s - 0.707107) / 0.282095;
    return exp(-0.5 * c * c) / (0.282095 * sqrt(2.0 * M_PI));
}

typedef struct {
    int Z, E, chunk, causal, fn, Mc, B, T;
    const double *btab;
    double p;
    uint64_t key;
} rcfg;

/* weights: for each b, a T x T matrix; W = post-dropout, A = pre-dropout, S = raw scores,
 * vis = visibility (0/1), lenv = element row divisor; O and lse outputs */
typedef struct {
    double *A, *Wd, *S, *keep, *len;
    unsigned char *vis;
} rstore;

static void ref_forward(const rcfg *c, const double *q, const double *k, const double *v, const uint8_t *pad,
                        double *O, double *lse, rstore *st) {
    const int T = c->T, Z = c->Z, E = c->E;
    const int C = (c->chunk > 0 && c->chunk < T) ? c->chunk : T;
    const int soft = c->fn == MEGA_ATTN_SOFTMAX;
    for (int b = 0; b < c->B; b++) {
        for (int t = 0; t < T; t++) {
            const int ct = t / C, t0 = ct * C, n = (T - t0 < C) ? T - t0 : C, i = t - t0;
            int nvalid = n;
            if (pad) {
                nvalid = 0;
                for (int j = 0; j < n; j++) nvalid += !pad[(size_t)b * T + t0 + j];
            }
            const int allpad = pad && nvalid == 0;
            const size_t row = ((size_t)b * T + t) * T;
            double len = c->causal ? i + 1 : (pad ? (nvalid > 1 ? nvalid : 1) : n);
            st->len[(size_t)b * T + t] = len;
            double mx = -INFINITY;
            for (int u = 0; u < T; u++) {
                size_t o = row + u;
                st->A[o] = st->Wd[o] = st->S[o] = st->keep[o] = 0;
                st->vis[o] = 0;
                if (u / C != ct) continue; /* other chunk */
                int j = u - t0;
                int pk = pad ? pad[(size_t)b * T + u] : 0;
                int vis = (!c->causal || j <= i) && (soft ? (!pk || allpad) : !pk);
                double dot = 0;
                for (int z = 0; z < Z; z++) dot += q[((size_t)b * T + t) * Z + z] * k[((size_t)b * T + u) * Z + z];
                double bias = c->btab[c->Mc - 1 + j - i];
                double s = soft ? dot / sqrt((double)Z) + bias : dot / len + bias;
                st->S[o] = s;
                st->vis[o] = (unsigned char)vis;
                if (vis && s > mx) mx = s;
                st->keep[o] = mega__hash01(c->key, ((uint64_t)b * T + t) * (uint64_t)n + (uint64_t)j) >= c->p ? 1.0 / (1.0 - c->p) : 0.0;
                if (c->p <= 0) st->keep[o] = 1;
            }
            if (soft) {
                double sum = 0;
                if (mx == -INFINITY) {
                    lse[(size_t)b * T + t] = INFINITY;
                } else {
                    for (int u = 0; u < T; u++)
                        if (st->vis[row + u]) sum += exp(st->S[row + u] - mx);
                    for (int u = 0; u < T; u++)
                        if (st->vis[row + u]) st->A[row + u] = exp(st->S[row + u] - mx) / sum;
                    lse[(size_t)b * T + t] = mx + log(sum);
                }
            } else {
                for (int u = 0; u < T; u++)
                    if (st->vis[row + u]) st->A[row + u] = ref_f(c->fn, st->S[row + u]);
            }
            for (int u = 0; u < T; u++) st->Wd[row + u] = st->A[row + u] * st->keep[row + u];
            for (int e = 0; e < E; e++) {
                double s = 0;
                for (int u = 0; u < T; u++) s += st->Wd[row + u] * v[((size_t)b * T + u) * E + e];
                O[((size_t)b * T + t) * E + e] = s;
            }
        }
    }
}

/* dq, dk, dv, dbtab are overwritten */
static void ref_backward(const rcfg *c, const double *q, const double *k, const double *v, const double *dO,
                         const rstore *st, double *dq, double *dk, double *dv, double *dbtab) {
    const int T = c->T, Z = c->Z, E = c->E;
    const int C = (c->chunk > 0 && c->chunk < T) ? c->chunk : T;
    const int soft = c->fn == MEGA_ATTN_SOFTMAX;
    memset(dq, 0, sizeof(double) * c->B * T * Z);
    memset(dk, 0, sizeof(double) * c->B * T * Z);
    memset(dv, 0, sizeof(double) * c->B * T * E);
    memset(dbtab, 0, sizeof(double) * (2 * c->Mc - 1));
    double *dA = malloc(sizeof(double) * T);
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < T; t++) {
            const size_t row = ((size_t)b * T + t) * T;
            const int i = t % C, t0 = t - i;
            const double *go = dO + ((size_t)b * T + t) * E;
            for (int u = 0; u < T; u++) {
                double g = 0;
                for (int e = 0; e < E; e++) {
                    g += go[e] * v[((size_t)b * T + u) * E + e];
                    dv[((size_t)b * T + u) * E + e] += st->Wd[row + u] * go[e];
                }
                dA[u] = g * st->keep[row + u]; /* through the dropout mask */
            }
            double dot = 0;
            if (soft)
                for (int u = 0; u < T; u++) dot += dA[u] * st->A[row + u];
            for (int u = 0; u < T; u++) {
                if (!st->vis[row + u]) continue;
                double dS, rs;
                if (soft) {
                    dS = st->A[row + u] * (dA[u] - dot);
                    rs = 1.0 / sqrt((double)Z);
                } else {
                    dS = dA[u] * ref_fgrad(c->fn, st->S[row + u]);
                    rs = 1.0 / st->len[(size_t)b * T + t];
                }
                int j = u - t0;
                dbtab[c->Mc - 1 + j - i] += dS;
                for (int z = 0; z < Z; z++) {
                    dq[((size_t)b * T + t) * Z + z] += rs * dS * k[((size_t)b * T + u) * Z + z];
                    dk[((size_t)b * T + u) * Z + z] += rs * dS * q[((size_t)b * T + t) * Z + z];
                }
            }
        }
    free(dA);
}

static void randn_fill(double *x, size_t n, double s) {
    for (size_t i = 0; i < n; i++) x[i] = s * tl_randn(&g_seed);
}

static double relerr(const double *got, const double *ref, size_t n) {
    tl_err e = tl_compare(got, ref, n);
    return e.ref_max > 0 ? e.max_abs / e.ref_max : e.max_abs;
}

typedef struct {
    rcfg c;
    double *q, *k, *v, *dO, *btab;
    uint8_t *pad;
    rstore st;
    double *O, *lse, *dq, *dk, *dv, *db;
} rcase;

static void rcase_alloc(rcase *r) {
    const size_t B = r->c.B, T = r->c.T, Z = r->c.Z, E = r->c.E;
    r->q = calloc(B * T * Z, sizeof(double));
    r->k = calloc(B * T * Z, sizeof(double));
    r->v = calloc(B * T * E, sizeof(double));
    r->dO = calloc(B * T * E, sizeof(double));
    r->btab = calloc(2 * (size_t)r->c.Mc - 1, sizeof(double));
    r->pad = calloc(B * T, 1);
    r->st.A = calloc(B * T * T, sizeof(double));
    r->st.Wd = calloc(B * T * T, sizeof(double));
    r->st.S = calloc(B * T * T, sizeof(double));
    r->st.keep = calloc(B * T * T, sizeof(double));
    r->st.len = calloc(B * T, sizeof(double));
    r->st.vis = calloc(B * T * T, 1);
    r->O = calloc(B * T * E, sizeof(double));
    r->lse = calloc(B * T, sizeof(double));
    r->dq = calloc(B * T * Z, sizeof(double));
    r->dk = calloc(B * T * Z, sizeof(double));
    r->dv = calloc(B * T * E, sizeof(double));
    r->db = calloc(2 * (size_t)r->c.Mc - 1, sizeof(double));
    r->c.btab = r->btab;
}
static void rcase_free(rcase *r) {
    free(r->q), free(r->k), free(r->v), free(r->dO), free(r->btab), free(r->pad);
    free(r->st.A), free(r->st.Wd), free(r->st.S), free(r->st.keep), free(r->st.len), free(r->st.vis);
    free(r->O), free(r->lse), free(r->dq), free(r->dk), free(r->dv), free(r->db);
}

/* pad modes: 0 none, 1 right pads (b=1 padded from 72% of T: with the chunkings used this
 * includes a chunk entirely of pads), 2 random pads (p=0.3) plus one forced all-pad chunk */
static void make_pads(rcase *r, int mode) {
    const int B = r->c.B, T = r->c.T;
    const int C = (r->c.chunk > 0 && r->c.chunk < T) ? r->c.chunk : T;
    memset(r->pad, 0, (size_t)B * T);
    if (mode == 1) {
        for (int b = 0; b < B; b++) {
            int from = b == 0 ? T - 1 : (int)(0.58 * T);
            for (int t = from; t < T; t++) r->pad[(size_t)b * T + t] = 1;
        }
    } else if (mode == 2) {
        for (int i = 0; i < B * T; i++) r->pad[i] = tl_rand01(&g_seed) < 0.3;
        if (T > C) /* one full chunk of pads in the last sequence */
            for (int t = C; t < 2 * C && t < T; t++) r->pad[(size_t)(B - 1) * T + t] = 1;
    }
}

/* the reference backward against central differences of the reference forward (small case) */
static void check_reference(int fn, int causal, int padmode, double p) {
    rcase r;
    memset(&r, 0, sizeof r);
    r.c = (rcfg){.Z = 3, .E = 2, .chunk = 3, .causal = causal, .fn = fn, .Mc = 4, .B = 2, .T = 7, .p = p, .key = 99};
    rcase_alloc(&r);
    randn_fill(r.q, 2 * 7 * 3, 1), randn_fill(r.k, 2 * 7 * 3, 1), randn_fill(r.v, 2 * 7 * 2, 1);
    randn_fill(r.dO, 2 * 7 * 2, 1), randn_fill(r.btab, 7, 0.5);
    make_pads(&r, padmode);
    const uint8_t *pad = padmode ? r.pad : NULL;
    ref_forward(&r.c, r.q, r.k, r.v, pad, r.O, r.lse, &r.st);
    ref_backward(&r.c, r.q, r.k, r.v, r.dO, &r.st, r.dq, r.dk, r.dv, r.db);
    double *O2 = calloc(2 * 7 * 2, sizeof(double)), *l2 = calloc(14, sizeof(double));
    double *arrs[4] = {r.q, r.k, r.v, r.btab};
    double *grads[4] = {r.dq, r.dk, r.dv, r.db};
    size_t ns[4] = {42, 42, 28, 7};
    double worst = 0, gmax = 0;
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < ns[a]; i++) gmax = fmax(gmax, fabs(grads[a][i]));
    const double h = 1e-6;
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < ns[a]; i++) {
            double sv = arrs[a][i], Lp = 0, Lm = 0;
            arrs[a][i] = sv + h;
            ref_forward(&r.c, r.q, r.k, r.v, pad, O2, l2, &r.st);
            for (int e = 0; e < 28; e++) Lp += O2[e] * r.dO[e];
            arrs[a][i] = sv - h;
            ref_forward(&r.c, r.q, r.k, r.v, pad, O2, l2, &r.st);
            for (int e = 0; e < 28; e++) Lm += O2[e] * r.dO[e];
            arrs[a][i] = sv;
            double fd = (Lp - Lm) / (2 * h);
            worst = fmax(worst, fabs(fd - grads[a][i]) / gmax);
        }
    TL_CHECK(worst < 1e-7 && gmax > 0, "reference backward vs FD (%s %s pads=%d p=%.1f): rel err %.2e",
             mega_attn_fn_name((mega_attn_fn)fn), causal ? "causal" : "bidir", padmode, p, worst);
    free(O2), free(l2);
    rcase_free(&r);
}

static double g_worst_fwd, g_worst_bwd, g_worst_query;
static int g_ncases;

static void run_case(int fn, int causal, int padmode, int T, int chunk, double p, int nthreads) {
    rcase r;
    memset(&r, 0, sizeof r);
    const int C = (chunk > 0 && chunk < T) ? chunk : T;
    const int B = 2, Z = 6, E = 5;
    r.c = (rcfg){.Z = Z, .E = E, .chunk = chunk, .causal = causal, .fn = fn, .Mc = C + 2, .B = B, .T = T, .p = p,
                 .key = 0xabcdef12345ull + (uint64_t)T};
    rcase_alloc(&r);
    const size_t R = (size_t)B * T;
    randn_fill(r.q, R * Z, 1), randn_fill(r.k, R * Z, 1), randn_fill(r.v, R * E, 1);
    randn_fill(r.dO, R * E, 1), randn_fill(r.btab, 2 * (size_t)r.c.Mc - 1, 0.5);
    make_pads(&r, padmode);
    const uint8_t *pad = padmode ? r.pad : NULL;
    ref_forward(&r.c, r.q, r.k, r.v, pad, r.O, r.lse, &r.st);
    ref_backward(&r.c, r.q, r.k, r.v, r.dO, &r.st, r.dq, r.dk, r.dv, r.db);

    mega_attn_k k;
    memset(&k, 0, sizeof k);
    k.Z = Z, k.E = E, k.chunk_size = chunk, k.causal = causal, k.fn = (mega_attn_fn)fn;
    k.btab = r.btab, k.Mc = r.c.Mc, k.p_attn = p, k.key_attn = r.c.key;
    size_t per = mega_attn_scratch(&k, T);
    double *scr = calloc(per * (size_t)nthreads + mega_attn_db_scratch(&k), sizeof(double));
    double *O = calloc(R * E, sizeof(double)), *lse = calloc(R, sizeof(double));
    double *dq = calloc(R * Z, sizeof(double)), *dk = calloc(R * Z, sizeof(double)), *dv = calloc(R * E, sizeof(double));
    double *db = calloc(2 * (size_t)k.Mc - 1, sizeof(double));
    mega_attn_forward(&k, O, lse, r.q, r.k, r.v, pad, B, T, scr, nthreads);
    double eo = relerr(O, r.O, R * E), el = 0;
    if (fn == MEGA_ATTN_SOFTMAX) {
        int infok = 1;
        double lmax = 0, ldiff = 0;
        for (size_t i = 0; i < R; i++) {
            if (isinf(r.lse[i]) || isinf(lse[i])) {
                infok &= isinf(r.lse[i]) && isinf(lse[i]);
                continue;
            }
            lmax = fmax(lmax, fabs(r.lse[i]));
            ldiff = fmax(ldiff, fabs(lse[i] - r.lse[i]));
        }
        el = infok ? ldiff / fmax(lmax, 1) : INFINITY;
    }
    /* backward accumulates: start from a known offset to check += semantics */
    for (size_t i = 0; i < R * Z; i++) dq[i] = 1, dk[i] = -1;
    for (size_t i = 0; i < R * E; i++) dv[i] = 2;
    for (int i = 0; i < 2 * k.Mc - 1; i++) db[i] = 3;
    mega_attn_backward(&k, dq, dk, dv, db, r.dO, r.q, r.k, r.v, lse, pad, B, T, scr, nthreads);
    for (size_t i = 0; i < R * Z; i++) dq[i] -= 1, dk[i] += 1;
    for (size_t i = 0; i < R * E; i++) dv[i] -= 2;
    for (int i = 0; i < 2 * k.Mc - 1; i++) db[i] -= 3;
    double eq = relerr(dq, r.dq, R * Z), ek = relerr(dk, r.dk, R * Z), ev = relerr(dv, r.dv, R * E);
    double eb = relerr(db, r.db, 2 * (size_t)k.Mc - 1);
    double ebw = fmax(fmax(eq, ek), fmax(ev, eb));
    double efw = fmax(eo, el);
    g_worst_fwd = fmax(g_worst_fwd, efw);
    g_worst_bwd = fmax(g_worst_bwd, ebw);
    g_ncases++;
    TL_CHECK(efw < TOL, "attn forward %s %s pads=%d T=%d chunk=%d p=%.1f thr=%d: O %.2e lse %.2e",
             mega_attn_fn_name(k.fn), causal ? "causal" : "bidir", padmode, T, chunk, p, nthreads, eo, el);
    TL_CHECK(ebw < TOL, "attn backward %s %s pads=%d T=%d chunk=%d p=%.1f thr=%d: dq %.2e dk %.2e dv %.2e dbias %.2e",
             mega_attn_fn_name(k.fn), causal ? "causal" : "bidir", padmode, T, chunk, p, nthreads, eq, ek, ev, eb);
    free(scr), free(O), free(lse), free(dq), free(dk), free(dv), free(db);
    rcase_free(&r);
}

/* mega_attn_query_kt (streaming: one query, n cached keys transposed, bias row n-1, element
 * divisor n) against the last row of the causal single-chunk reference; E = 5 uses the tail
 * path of the output blocks, E = 70 a full MEGA_ATTN_QBLOCK block and a tail */
static void run_query(int fn, int n, int Mextra, int E) {
    rcase r;
    memset(&r, 0, sizeof r);
    const int Z = 6;
    r.c = (rcfg){.Z = Z, .E = E, .chunk = -1, .causal = 1, .fn = fn, .Mc = n + Mextra, .B = 1, .T = n, .p = 0, .key = 0};
    rcase_alloc(&r);
    randn_fill(r.q, (size_t)n * Z, 1), randn_fill(r.k, (size_t)n * Z, 1), randn_fill(r.v, (size_t)n * E, 1);
    randn_fill(r.btab, 2 * (size_t)r.c.Mc - 1, 0.5);
    ref_forward(&r.c, r.q, r.k, r.v, NULL, r.O, r.lse, &r.st);
    mega_attn_k k;
    memset(&k, 0, sizeof k);
    k.Z = Z, k.E = E, k.chunk_size = -1, k.causal = 1, k.fn = (mega_attn_fn)fn, k.btab = r.btab, k.Mc = r.c.Mc;
    double *o = calloc((size_t)E, sizeof(double)), *w = calloc((size_t)n, sizeof(double));
    double *kt = calloc((size_t)n * Z, sizeof(double));
    for (int j = 0; j < n; j++)
        for (int z = 0; z < Z; z++) kt[(size_t)z * n + j] = r.k[(size_t)j * Z + z];
    mega_attn_query_kt(&k, o, r.q + (size_t)(n - 1) * Z, kt, (size_t)n, r.v, n, w);
    double e = relerr(o, r.O + (size_t)(n - 1) * E, E);
    g_worst_query = fmax(g_worst_query, e);
    TL_CHECK(e < TOL, "attn query %s n=%d Mc=%d E=%d: rel err %.2e", mega_attn_fn_name(k.fn), n, k.Mc, E, e);
    free(o), free(w), free(kt);
    rcase_free(&r);
}

/* the comparison must be able to fail: a perturbed bias entry or a flipped dropout decision
 * must be visible */
static void canaries(void) {
    const int B = 2, T = 250, Z = 6, E = 5, chunk = 100;
    for (int which = 0; which < 2; which++) {
        rcase r;
        memset(&r, 0, sizeof r);
        r.c = (rcfg){.Z = Z, .E = E, .chunk = chunk, .causal = 0, .fn = MEGA_ATTN_SOFTMAX, .Mc = 100, .B = B, .T = T,
                     .p = which ? 0.1 : 0, .key = 7};
        rcase_alloc(&r);
        const size_t R = (size_t)B * T;
        randn_fill(r.q, R * Z, 1), randn_fill(r.k, R * Z, 1), randn_fill(r.v, R * E, 1);
        randn_fill(r.btab, 199, 0.5);
        mega_attn_k k;
        memset(&k, 0, sizeof k);
        k.Z = Z, k.E = E, k.chunk_size = chunk, k.causal = 0, k.fn = MEGA_ATTN_SOFTMAX, k.btab = r.btab, k.Mc = 100;
        k.p_attn = r.c.p, k.key_attn = 7;
        if (which == 0) {
            ref_forward(&r.c, r.q, r.k, r.v, NULL, r.O, r.lse, &r.st);
            r.btab[99 + 37] += 1e-9; /* one distance, 1e-9 */
        } else {
            r.c.key = 8; /* another mask */
            ref_forward(&r.c, r.q, r.k, r.v, NULL, r.O, r.lse, &r.st);
        }
        double *scr = calloc(mega_attn_scratch(&k, T), sizeof(double));
        double *O = calloc(R * E, sizeof(double)), *lse = calloc(R, sizeof(double));
        mega_attn_forward(&k, O, lse, r.q, r.k, r.v, NULL, B, T, scr, 1);
        double e = relerr(O, r.O, R * E);
        TL_CHECK(e > 10 * TOL, "canary: the comparison detects a %s (rel err %.2e)",
                 which ? "different dropout mask" : "1e-9 change of one bias entry", e);
        free(scr), free(O), free(lse);
        rcase_free(&r);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    const int nt = mega_get_threads();
    /* the reference's own backward */
    for (int fn = 0; fn < 3; fn++)
        for (int causal = 0; causal < 2; causal++)
            for (int pm = 0; pm < 3; pm++) check_reference(fn, causal, pm, pm == 2 ? 0.3 : 0);

    /* geometry: (T, chunk): ragged last chunk; several row blocks of MEGA_ATTN_BR inside a chunk
     * (chunk 100 > 64, and one chunk of 250 = 4 row blocks); chunk > T; chunk == T; one chunk
     * of 1100 (bidirectional chunks of 1024 or more use blocks of 4*MEGA_ATTN_BR rows: 4 full
     * blocks and a ragged one) */
    static const int geo[][2] = {{7, 3}, {250, 100}, {250, -1}, {9, 20}, {12, 12}, {130, 64}, {1100, -1}};
    const int ngeo = (int)(sizeof geo / sizeof geo[0]);
    for (int fn = 0; fn < 3; fn++)
        for (int causal = 0; causal < 2; causal++)
            for (int pm = 0; pm < 3; pm++)
                for (int g = 0; g < ngeo; g++)
                    for (int d = 0; d < 2; d++) {
                        if (geo[g][0] > 1000 && (causal || d)) continue; /* the tall blocks: bidir only */
                        /* thread count alternates so both the serial and the parallel bias
                         * reduction are compared */
                        int thr = ((fn + causal + pm + g + d) % 2) ? nt : 1;
                        run_case(fn, causal, pm, geo[g][0], geo[g][1], d ? 0.2 : 0, thr);
                    }
    for (int fn = 0; fn < 3; fn++) {
        static const int ns[] = {1, 2, 5, 17, 70, 130};
        for (int i = 0; i < 6; i++) run_query(fn, ns[i], i % 3, 5), run_query(fn, ns[i], i % 3, 70);
    }
    canaries();
    printf("NOTE t64_attn: %d kernel cases; worst rel err forward %.2e, backward %.2e, query %.2e\n", g_ncases,
           g_worst_fwd, g_worst_bwd, g_worst_query);
    return tl_finish();
}
