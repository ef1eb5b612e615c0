/* The head products (src/ops/hgemm.c) and the attention kernel's two paths (src/ops/mhattn.c):
 *  - each kernel against a double-precision loop, over shapes that leave every remainder path
 *    (rows not a multiple of the register tile, columns not a multiple of the vector length);
 *  - mega_mhattn_forward / backward with the kernels against the same calls with them switched off
 *    (mega__hgemm_off: the OpenBLAS path the fixtures check against PyTorch), for head widths the
 *    kernels take, causal and bidirectional, local windows, padding, a distance table, key biases,
 *    log-n scaling and attention dropout: every output and gradient.
 * The float fixtures use head widths the kernels do not take on every machine, hence this test. */
#include "ops/hgemm.h"
#include "ops/attn.h"
#include "ops/mhattn.h"
#include "ops/ops.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long rng = 12345;

static real *rnd(size_t n) {
    real *p = malloc((n ? n : 1) * sizeof(real));
    for (size_t i = 0; i < n; i++) p[i] = (real)tl_randn(&rng);
    return p;
}

/* max |a - b| / max |b| */
static double relerr(const real *a, const real *b, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - (double)b[i])), m = fmax(m, fabs((double)b[i]));
    return m > 0 ? e / m : e;
}

static void kernels(int dh) {
    static const int ms[] = {1, 3, 8, 13}, ns[] = {1, 7, 16, 37, 70};
    double worst[3] = {0, 0, 0};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
            const int m = ms[a], n = ns[b];
            const size_t lda = (size_t)dh + 3, ldb = (size_t)n + 5, lds = (size_t)n + 2;
            /* abt: S[m x n] = 0.7 A[m x dh] Bt[dh x n] */
            real *A = rnd((size_t)m * lda), *Bt = rnd((size_t)dh * ldb), *S = rnd((size_t)m * lds), *R = malloc((size_t)m * lds * sizeof(real));
            memcpy(R, S, (size_t)m * lds * sizeof(real));
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int d = 0; d < dh; d++) s += (double)A[(size_t)i * lda + d] * Bt[(size_t)d * ldb + j];
                    R[(size_t)i * lds + j] = (real)(0.7 * s);
                }
            mega_hgemm_abt(S, lds, A, lda, Bt, ldb, m, n, dh, (real)0.7);
            worst[0] = fmax(worst[0], relerr(S, R, (size_t)m * lds)); /* padding columns untouched: equal */
            /* ab: C[m x dh] = 0.5 P[m x n] V[n x dh] + beta C */
            const size_t ldp = (size_t)n + 1, ldv = (size_t)dh + 7, ldc = (size_t)dh + 2;
            real *P = rnd((size_t)m * ldp), *V = rnd((size_t)n * ldv), *C = rnd((size_t)m * ldc), *Q = malloc((size_t)m * ldc * sizeof(real));
            for (int beta = 0; beta <= 1; beta++) {
                memcpy(Q, C, (size_t)m * ldc * sizeof(real));
                for (int i = 0; i < m; i++)
                    for (int d = 0; d < dh; d++) {
                        double s = 0;
                        for (int u = 0; u < n; u++) s += (double)P[(size_t)i * ldp + u] * V[(size_t)u * ldv + d];
                        Q[(size_t)i * ldc + d] = (real)(0.5 * s + (beta ? (double)C[(size_t)i * ldc + d] : 0));
                    }
                mega_hgemm_ab(C, ldc, P, ldp, V, ldv, m, n, dh, (real)0.5, (real)beta);
                worst[1] = fmax(worst[1], relerr(C, Q, (size_t)m * ldc));
            }
            /* atb: D[n x dh] += 0.3 P[m x n]^T G[m x dh] */
            const size_t ldg = (size_t)dh + 1, ldd = (size_t)dh + 4;
            real *G = rnd((size_t)m * ldg), *D = rnd((size_t)n * ldd), *E = malloc((size_t)n * ldd * sizeof(real));
            memcpy(E, D, (size_t)n * ldd * sizeof(real));
            for (int u = 0; u < n; u++)
                for (int d = 0; d < dh; d++) {
                    double s = 0;
                    for (int i = 0; i < m; i++) s += (double)P[(size_t)i * ldp + u] * G[(size_t)i * ldg + d];
                    E[(size_t)u * ldd + d] = (real)(E[(size_t)u * ldd + d] + 0.3 * s);
                }
            mega_hgemm_atb(D, ldd, P, ldp, G, ldg, m, n, dh, (real)0.3);
            worst[2] = fmax(worst[2], relerr(D, E, (size_t)n * ldd));
            free(A), free(Bt), free(S), free(R), free(P), free(V), free(C), free(Q), free(G), free(D), free(E);
        }
    TL_CHECK(worst[0] < 1e-5 && worst[1] < 1e-5 && worst[2] < 1e-5, "dh %d kernels vs double: abt %.1e, ab %.1e, atb %.1e", dh,
             worst[0], worst[1], worst[2]);
}

typedef struct {
    const char *name;
    int causal, window, pad, tables, logn;
    double p_drop;
} att_case;

/* one forward + backward of the attention kernel; outputs into out[0..7] (malloc'd) */
static void run_attn(const mega_mhattn_k *k, int B, int T, const real *q, const real *kk, const real *v, const real *dO,
                     const uint8_t *pad, real **out) {
    const size_t n = (size_t)B * T * k->H * k->dh;
    real *O = calloc(n, sizeof(real)), *lse = calloc((size_t)B * k->H * T, sizeof(real));
    real *dq = calloc(n, sizeof(real)), *dk = calloc(n, sizeof(real)), *dv = calloc(n, sizeof(real));
    real *db = k->btab ? calloc((size_t)k->H * k->bl, sizeof(real)) : NULL;
    real *dkb = k->kbias ? calloc((size_t)k->H * k->kbl, sizeof(real)) : NULL;
    real *scr = malloc(mega_mhattn_scratch(k, B, T, 2) * sizeof(real));
    mega_mhattn_forward(k, O, lse, q, kk, v, pad, B, T, scr, 2);
    mega_mhattn_backward(k, dq, dk, dv, db, dkb, dO, O, q, kk, v, lse, pad, B, T, scr, 2);
    free(scr);
    out[0] = O, out[1] = lse, out[2] = dq, out[3] = dk, out[4] = dv, out[5] = db, out[6] = dkb;
}

static void attention(int dh, const att_case *c) {
    /* T spans three key tiles of the fast path (256 keys) and a partial query block */
    const int B = 2, H = 2, T = 540;
    const size_t n = (size_t)B * T * H * dh;
    real *q = rnd(n), *kk = rnd(n), *v = rnd(n), *dO = rnd(n);
    uint8_t *pad = calloc((size_t)B * T, 1);
    if (c->pad) /* sequence 1: a padded tail and one interior pad */
        for (int t = 0; t < T; t++) pad[T + t] = t >= T - 9 || t == 20 || (t >= 256 && t < 300);
    const int bl = 2 * T - 1, kbl = 40;
    real *bt = c->tables ? rnd((size_t)H * bl) : NULL, *kb = c->tables ? rnd((size_t)H * kbl) : NULL;
    mega_mhattn_k k = {H, dh, c->causal, c->window, (real)(1 / sqrt((double)dh)), c->logn ? log(32.0) : 0, bt, T - 1, bl,
                       kb, kbl, NULL, 0, c->p_drop, 99};
    real *fast[7], *ref[7];
    run_attn(&k, B, T, q, kk, v, dO, c->pad ? pad : NULL, fast);
    mega__hgemm_off = 1;
    run_attn(&k, B, T, q, kk, v, dO, c->pad ? pad : NULL, ref);
    mega__hgemm_off = 0;
    static const char *names[7] = {"out", "lse", "dq", "dk", "dv", "dbias_table", "dkey_bias"};
    const size_t sizes[7] = {n, (size_t)B * H * T, n, n, n, (size_t)H * bl, (size_t)H * kbl};
    double worst = 0;
    int which = 0;
    for (int i = 0; i < 7; i++) {
        if (!fast[i]) continue;
        /* lse of a fully masked row is +inf in both */
        double e = i == 1 ? 0 : relerr(fast[i], ref[i], sizes[i]);
        if (i == 1)
            for (size_t j = 0; j < sizes[i]; j++)
                if (!(fast[i][j] == ref[i][j]) && fabs((double)fast[i][j] - (double)ref[i][j]) > 1e-5 * (1 + fabs((double)ref[i][j]))) e = 1;
        if (e > worst) worst = e, which = i;
    }
    TL_CHECK(worst < 2e-5, "dh %d %s: kernels vs OpenBLAS path, worst %.1e (%s)", dh, c->name, worst, names[which]);
    for (int i = 0; i < 7; i++) free(fast[i]), free(ref[i]);
    free(q), free(kk), free(v), free(dO), free(bt), free(kb), free(pad);
}

/* mega_exp_sub against mega_exp: the masked (-inf) and out-of-range entries exactly 0, every
 * value within a few float ulps, the sum within float rounding */
static void exps(void) {
    double worst = 0, sumerr = 0;
    int zeros = 1;
    for (int n = 0; n < 70; n += 7) {
        real *s = rnd((size_t)n + 1), *r = malloc(((size_t)n + 1) * sizeof(real));
        for (int j = 0; j < n; j++) s[j] = (real)(s[j] * 30 - 20);
        if (n > 3) s[1] = -INFINITY, s[2] = (real)-200, s[3] = (real)-87.5;
        double want = 0;
        for (int j = 0; j < n; j++) r[j] = mega_exp(s[j] - (real)1.5), want += r[j];
        const real got = mega_exp_sub(s, (size_t)n, (real)1.5, 1);
        for (int j = 0; j < n; j++) {
            if (r[j] == 0) zeros &= s[j] == 0;
            else worst = fmax(worst, fabs((double)s[j] - r[j]) / r[j]);
        }
        sumerr = fmax(sumerr, fabs((double)got - want) / (want > 0 ? want : 1));
        free(s), free(r);
    }
    TL_CHECK(zeros && worst < 1e-6 && sumerr < 1e-6, "mega_exp_sub vs mega_exp: worst %.1e, sum %.1e, zeros kept %d", worst,
             sumerr, zeros);
}

/* the vectorised silu and its gradient (act.c) against the scalar definitions, extremes included */
static void silu(void) {
    enum { N = 203 };
    real x[N], y[N], dy[N], dx[N];
    for (int i = 0; i < N; i++) x[i] = (real)((i - 101) * 0.9), dy[i] = (real)(1 + 0.01 * i);
    x[0] = (real)-200, x[1] = (real)200, x[2] = (real)-88.4, x[3] = (real)88.4, x[4] = 0;
    mega_act_forward(MEGA_ACT_SILU, y, x, N);
    mega_act_backward(MEGA_ACT_SILU, dx, dy, x, N);
    double ey = 0, ed = 0;
    for (int i = 0; i < N; i++) {
        const double s = 1 / (1 + exp(-(double)x[i]));
        const double wy = x[i] * s, wd = dy[i] * s * (1 + x[i] * (1 - s));
        ey = fmax(ey, fabs(y[i] - wy) / fmax(1, fabs(wy)));
        ed = fmax(ed, fabs(dx[i] - wd) / fmax(1, fabs(wd)));
    }
    TL_CHECK(ey < 1e-6 && ed < 1e-6, "silu forward %.1e, backward %.1e (vs double)", ey, ed);
}

/* the Laplace attention rows (attn.c: erf from vector e^x in float builds) against erf in double,
 * extremes included; relu2 rows equal the element function exactly */
static void laplace_rows(void) {
    enum { N = 4001 };
    static real s[N], g[N], r2[N];
    for (int i = 0; i < N; i++) s[i] = (real)(-3 + 6.0 * i / (N - 1)), g[i] = (real)(1 + 0.001 * i);
    s[0] = (real)-1e30, s[1] = (real)1e30, s[2] = (real)-INFINITY, s[3] = (real)0.707107;
    real f[N];
    memcpy(f, s, sizeof f);
    mega_attn_f_row(MEGA_ATTN_LAPLACE, f, N);
    mega_attn_fgrad_row(MEGA_ATTN_LAPLACE, g, s, N);
    double ef = 0, eg = 0;
    const double mu = 0.707107, sig = 0.282095;
    for (int i = 0; i < N; i++) {
        const double z = ((double)s[i] - mu) / sig;
        const double wf = 0.5 * (1 + erf(z / sqrt(2.0))), wg = (1 + 0.001 * i) * exp(-0.5 * z * z) / (sig * sqrt(2 * M_PI));
        ef = fmax(ef, fabs((double)f[i] - wf));
        eg = fmax(eg, fabs((double)g[i] - wg) / fmax(1, fabs(wg)));
    }
    TL_CHECK(ef < 4e-7 && eg < 2e-6, "laplace rows vs erf / the Gaussian in double: |f| error %.1e, f' %.1e", ef, eg);
    int same = 1;
    for (int i = 4; i < N; i++) r2[i] = s[i];
    mega_attn_f_row(MEGA_ATTN_RELU2, r2 + 4, N - 4);
    for (int i = 4; i < N; i++) same &= r2[i] == mega_attn_f(MEGA_ATTN_RELU2, s[i]);
    TL_CHECK(same, "relu2 rows = the element function");
}

int main(void) {
    int any = 0;
    exps();
    silu();
    laplace_rows();
    for (int dh = 4; dh <= 64; dh += 4) {
        if (!mega_hgemm_ok(dh)) continue;
        any = 1;
        kernels(dh);
    }
    static const att_case cases[] = {
        {"bidirectional", 0, 0, 0, 0, 0, 0},
        {"causal, padded, tables", 1, 0, 1, 1, 0, 0},
        {"bidirectional window 6, padded, log-n", 0, 6, 1, 0, 1, 0},
        {"causal window 9, tables, dropout 0.2", 1, 9, 0, 1, 0, 0.2},
        {"bidirectional window 300, padded, tables, dropout 0.1", 0, 300, 1, 1, 0, 0.1},
    };
    for (int dh = 8; dh <= 64; dh *= 2) {
        if (!mega_hgemm_ok(dh)) continue;
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) attention(dh, &cases[i]);
    }
    if (!any) printf("NOTE test_hgemm: this build has no head kernels (double precision or another compiler); nothing to compare\n");
    return tl_finish();
}
