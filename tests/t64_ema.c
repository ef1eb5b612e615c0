/*
 * The EMA recurrence (route A: src/ops/ema.c, driven through src/layers/ema.h) against an
 * independent direct evaluation of the convolution form (Mega, arXiv 2209.10655, eq. (5) and
 * App. A eqs. (24)-(26); official exponential_moving_average.py: MultiHeadEMA.forward / kernel)
 * written here:
 *
 *   p = sigmoid(delta), a = sigmoid(alpha), log q = log1p(-p*a), c_n = p*beta*gamma/sqrt(N)
 *   k_j = sum_n c_n * exp(j * log q_n)                               (Vandermonde kernel)
 *   e_t = sum_{j < K_eff, j <= t} k^f_j x~_{t-j}  (+ sum_{j < K_eff, t+j < T} k^b_j x~_{t+j} bidir)
 *   K_eff = min(K, T), or T when untruncated; x~ = x with pads zeroed
 *   mpre = e + omega * x (un-zeroed x),  m = silu(mpre)
 *
 * Parameters include decays q near 0 and near 1. Also: the carried-state (multi-token
 * incremental) form: one call over [0,T) equals calls over any split of [0,T) with the state
 * carried, and the state form agrees with the direct formula of the official incremental path
 * (MultiHeadEMA.step / one_step; docs/mega.md §9)
 *   e_t = (k*x)_t + sum_n gs_n q_n^{t+1} h_in[n],  h_out = sum_j pb q^{T-1-j} x_j + q^T h_in.
 */
#include "layers/ema.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL_DIRECT 1e-12
#define TOL_SPLIT 1e-13

static unsigned long long g_seed = 0xe3a5eedull;
static double g_worst_direct, g_worst_split, g_worst_state;

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* regimes of the decay q = 1 - p*a: 0 moderate, 1 q near 1 (p*a ~ 1e-6), 2 q near 0
 * (p*a ~ 0.995), 3 mixed per row/component */
static void set_params(const mega_ema *e, double *W, int regime) {
    const int Dp = (e->bidir ? 2 : 1) * e->D, N = e->N;
    for (int r = 0; r < Dp; r++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)r * N + n;
            int rg = regime == 3 ? (int)((r + 2 * n) % 3) : regime;
            double base = rg == 0 ? 0 : rg == 1 ? -7 : 7;
            double sd = rg == 0 ? 1.0 : 0.3;
            W[e->delta + i] = base + sd * tl_randn(&g_seed);
            W[e->alpha + i] = base + sd * tl_randn(&g_seed);
            W[e->beta + i] = ((n % 2) ? -1 : 1) + 0.05 * tl_randn(&g_seed);
            W[e->gamma + i] = tl_randn(&g_seed);
        }
    for (int d = 0; d < e->D; d++) W[e->omega + d] = tl_randn(&g_seed);
}

/* direct kernel of row r, length L: kern[j] */
static void direct_kernel(const mega_ema *e, const double *W, int r, int L, double *kern) {
    const int N = e->N;
    for (int j = 0; j < L; j++) kern[j] = 0;
    for (int n = 0; n < N; n++) {
        size_t i = (size_t)r * N + n;
        double p = sigm(W[e->delta + i]), a = sigm(W[e->alpha + i]);
        double lq = log1p(-p * a);
        double c = p * W[e->beta + i] * W[e->gamma + i] / sqrt((double)N);
        for (int j = 0; j < L; j++) kern[j] += c * (j == 0 ? 1.0 : exp(j * lq));
    }
}

/* e (without omega) by direct convolution */
static void direct_e(const mega_ema *e, const double *W, const double *x, const uint8_t *pad, int B, int T, int K,
                     double *out) {
    const int D = e->D;
    const int Keff = (K > 0 && K < T) ? K : T;
    double *kf = malloc(sizeof(double) * Keff), *kb = malloc(sizeof(double) * Keff);
    for (int d = 0; d < D; d++) {
        direct_kernel(e, W, d, Keff, kf);
        if (e->bidir) direct_kernel(e, W, D + d, Keff, kb);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                double s = 0;
                for (int j = 0; j < Keff && j <= t; j++) {
                    size_t u = (size_t)b * T + t - j;
                    if (!(pad && pad[u])) s += kf[j] * x[u * D + d];
                }
                if (e->bidir)
                    for (int j = 0; j < Keff && t + j < T; j++) {
                        size_t u = (size_t)b * T + t + j;
                        if (!(pad && pad[u])) s += kb[j] * x[u * D + d];
                    }
                out[((size_t)b * T + t) * D + d] = s;
            }
    }
    free(kf), free(kb);
}

static double silu(double z) { return z / (1 + exp(-z)); }

typedef struct {
    int D, N, B, T, bidir, K, padmode, regime;
} ecfg;

static void run_direct(const ecfg *c) {
    mega_params P;
    mega_params_init(&P);
    mega_ema e;
    if (mega_ema_declare(&e, &P, "move.", c->D, c->N, c->bidir, c->K) || mega_params_alloc(&P, 0)) {
        TL_CHECK(0, "ema declare: %s", mega_last_error());
        return;
    }
    double *W = P.data;
    set_params(&e, W, c->regime);
    const size_t R = (size_t)c->B * c->T, D = (size_t)c->D;
    double *x = malloc(sizeof(double) * R * D), *mpre = malloc(sizeof(double) * R * D);
    double *m = malloc(sizeof(double) * R * D), *eref = malloc(sizeof(double) * R * D), *elib = malloc(sizeof(double) * R * D);
    double *coef = calloc(mega_ema_coef_size(&e), sizeof(double));
    uint8_t *pad = calloc(R, 1);
    for (size_t i = 0; i < R * D; i++) x[i] = tl_randn(&g_seed);
    if (c->padmode == 1) /* right pads */
        for (int b = 0; b < c->B; b++)
            for (int t = c->T - 1 - 3 * b; t < c->T; t++) pad[(size_t)b * c->T + t] = 1;
    if (c->padmode == 2) /* interior pads too (the EMA keeps decaying over them) */
        for (size_t i = 0; i < R; i++) pad[i] = tl_rand01(&g_seed) < 0.25;
    const uint8_t *pm = c->padmode ? pad : NULL;
    mega_ema_layer_forward(&e, W, coef, mpre, m, x, pm, c->B, c->T, mega_get_threads());
    direct_e(&e, W, x, pm, c->B, c->T, c->K, eref);
    double msil = 0, mmax = 0;
    for (size_t i = 0; i < R * D; i++) {
        size_t d = i % D;
        elib[i] = mpre[i] - W[e.omega + d] * x[i];
        double s = silu(eref[i] + W[e.omega + d] * x[i]);
        msil = fmax(msil, fabs(m[i] - s));
        mmax = fmax(mmax, fabs(s));
    }
    tl_err er = tl_compare(elib, eref, R * D);
    double rel = er.ref_max > 0 ? er.max_abs / er.ref_max : er.max_abs;
    double mrel = msil / fmax(mmax, 1e-300);
    g_worst_direct = fmax(g_worst_direct, fmax(rel, mrel));
    TL_CHECK(rel < TOL_DIRECT && mrel < TOL_DIRECT && er.ref_max > 0,
             "EMA route A vs direct convolution: D=%d N=%d B=%d T=%d %s K=%d pads=%d regime=%d: e %.2e, m %.2e (max|e| %.3g)",
             c->D, c->N, c->B, c->T, c->bidir ? "bidir" : "causal", c->K, c->padmode, c->regime, rel, mrel, er.ref_max);

    /* canary: the comparison sees a 1e-9 change of one decay parameter */
    if (c->regime == 0 && c->K == 0 && !c->bidir && c->padmode == 0) {
        W[e.delta] += 1e-9;
        mega_ema_layer_forward(&e, W, coef, mpre, m, x, NULL, c->B, c->T, 1);
        W[e.delta] -= 1e-9;
        for (size_t i = 0; i < R * D; i++) elib[i] = mpre[i] - W[e.omega + i % D] * x[i];
        er = tl_compare(elib, eref, R * D);
        TL_CHECK(er.max_abs / er.ref_max > 10 * TOL_DIRECT, "canary: a 1e-9 change of delta[0] is detected (%.2e)",
                 er.max_abs / er.ref_max);
    }
    free(x), free(mpre), free(m), free(eref), free(elib), free(coef), free(pad);
    mega_params_free(&P);
}

/* carried state: splits of [0,T), and the state formulas of the incremental path (MultiHeadEMA.step) */
static void run_state(int D, int N, int B, int T, int regime) {
    mega_params P;
    mega_params_init(&P);
    mega_ema e;
    if (mega_ema_declare(&e, &P, "move.", D, N, 0, 0) || mega_params_alloc(&P, 0)) {
        TL_CHECK(0, "ema declare: %s", mega_last_error());
        return;
    }
    double *W = P.data;
    set_params(&e, W, regime);
    const size_t R = (size_t)B * T, S = (size_t)B * N * D;
    double *coef = calloc(mega_ema_coef_size(&e), sizeof(double));
    mega_ema_layer_coef(&e, W, coef, 0);
    double *x = malloc(sizeof(double) * R * D), *h0 = malloc(sizeof(double) * S);
    double *mp1 = malloc(sizeof(double) * R * D), *m1 = malloc(sizeof(double) * R * D);
    double *mp2 = malloc(sizeof(double) * R * D), *m2 = malloc(sizeof(double) * R * D);
    double *st1 = malloc(sizeof(double) * S), *st2 = malloc(sizeof(double) * S);
    double *xs = malloc(sizeof(double) * R * D), *ps = malloc(sizeof(double) * R * D), *ms = malloc(sizeof(double) * R * D);
    for (size_t i = 0; i < R * D; i++) x[i] = tl_randn(&g_seed);
    for (size_t i = 0; i < S; i++) h0[i] = tl_randn(&g_seed);

    /* one call from h0 */
    memcpy(st1, h0, S * sizeof(double));
    mega_ema_layer_step(&e, W, coef, st1, mp1, m1, x, B, T);

    /* (1) the direct state formula, from h0 */
    {
        double *conv = malloc(sizeof(double) * R * D), *sref = malloc(sizeof(double) * S);
        direct_e(&e, W, x, NULL, B, T, 0, conv);
        for (int b = 0; b < B; b++)
            for (int d = 0; d < D; d++)
                for (int n = 0; n < N; n++) {
                    size_t i = (size_t)d * N + n;
                    double p = sigm(W[e.delta + i]), a = sigm(W[e.alpha + i]), lq = log1p(-p * a);
                    double gs = W[e.gamma + i] / sqrt((double)N), pb = p * W[e.beta + i];
                    double hin = h0[((size_t)b * N + n) * D + d], ho = exp(T * lq) * hin;
                    for (int t = 0; t < T; t++) {
                        conv[((size_t)b * T + t) * D + d] += gs * exp((t + 1) * lq) * hin;
                        ho += pb * exp((T - 1 - t) * lq) * x[((size_t)b * T + t) * D + d];
                    }
                    sref[((size_t)b * N + n) * D + d] = ho;
                }
        for (size_t i = 0; i < R * D; i++) conv[i] += W[e.omega + i % D] * x[i];
        tl_err eo = tl_compare(mp1, conv, R * D), es = tl_compare(st1, sref, S);
        double r1 = eo.max_abs / eo.ref_max, r2 = es.max_abs / es.ref_max;
        g_worst_state = fmax(g_worst_state, fmax(r1, r2));
        TL_CHECK(r1 < TOL_DIRECT && r2 < TOL_DIRECT,
                 "EMA carried state vs the incremental-path formula (D=%d N=%d T=%d regime=%d): out %.2e, final state %.2e", D, N, T,
                 regime, r1, r2);
        free(conv), free(sref);
    }
    /* (2) a zero initial state equals no state */
    {
        memset(st2, 0, S * sizeof(double));
        mega_ema_layer_step(&e, W, coef, st2, mp2, m2, x, B, T);
        mega_ema_k k;
        size_t SS = (size_t)D * N;
        k.D = D, k.N = N, k.bidir = 0, k.K = 0, k.pb = coef, k.q = coef + SS, k.gs = coef + 2 * SS, k.qK = coef + 3 * SS;
        k.omega = W + e.omega;
        mega_ema_forward(&k, ps, ms, x, NULL, B, T, NULL);
        TL_CHECK(!memcmp(ps, mp2, R * D * sizeof(double)) && !memcmp(ms, m2, R * D * sizeof(double)),
                 "EMA: a zero carried state gives exactly the stateless forward (T=%d)", T);
    }
    /* (3) splits of [0,T) with the state carried */
    int splits[6][8] = {{T / 2, T}, {1, T}, {T - 1, T}, {3, 8, T}, {0}, {0}};
    int nsplit = 5;
    {
        int s = 0, *row = splits[4]; /* random partition */
        int c = 0;
        while (s < T && c < 7) {
            s += 1 + (int)(tl_rand01(&g_seed) * 9);
            if (s > T || c == 6) s = T;
            row[c++] = s;
        }
    }
    double worst = 0;
    for (int sp = 0; sp <= nsplit; sp++) {
        int tokwise = sp == nsplit; /* token by token */
        memcpy(st2, h0, S * sizeof(double));
        int a = 0, idx = 0;
        while (a < T) {
            int bnd = tokwise ? a + 1 : splits[sp][idx++];
            if (bnd > T) bnd = T;
            int L = bnd - a;
            if (L <= 0) break;
            for (int b = 0; b < B; b++)
                memcpy(xs + (size_t)b * L * D, x + ((size_t)b * T + a) * D, (size_t)L * D * sizeof(double));
            mega_ema_layer_step(&e, W, coef, st2, ps, ms, xs, B, L);
            for (int b = 0; b < B; b++) {
                memcpy(mp2 + ((size_t)b * T + a) * D, ps + (size_t)b * L * D, (size_t)L * D * sizeof(double));
                memcpy(m2 + ((size_t)b * T + a) * D, ms + (size_t)b * L * D, (size_t)L * D * sizeof(double));
            }
            a = bnd;
        }
        tl_err eo = tl_compare(mp2, mp1, R * D), em = tl_compare(m2, m1, R * D), es = tl_compare(st2, st1, S);
        double r = fmax(fmax(eo.max_abs / eo.ref_max, em.max_abs / em.ref_max), es.max_abs / es.ref_max);
        worst = fmax(worst, r);
        TL_CHECK(r < TOL_SPLIT && a == T, "EMA carried state: split %d of T=%d (regime %d) equals one call: %.2e", sp, T,
                 regime, r);
    }
    g_worst_split = fmax(g_worst_split, worst);
    free(coef), free(x), free(h0), free(mp1), free(m1), free(mp2), free(m2), free(st1), free(st2), free(xs), free(ps),
        free(ms);
    mega_params_free(&P);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    int n = 0;
    /* shapes: tiny; D > MEGA_EMA_DB (several channel blocks, a partial one); long T */
    static const int shapes[][4] = {{3, 2, 2, 9}, {35, 3, 2, 150}, {70, 5, 1, 300}, {4, 1, 3, 65}};
    for (int s = 0; s < 4; s++)
        for (int bidir = 0; bidir < 2; bidir++)
            for (int regime = 0; regime < 4; regime++) {
                int T = shapes[s][3];
                int Ks[] = {0, 1, T / 3 + 1, T - 1, T, T + 7};
                for (int ki = 0; ki < 6; ki++) {
                    /* pads: rotate through none / right / interior */
                    ecfg c = {shapes[s][0], shapes[s][1], shapes[s][2], T, bidir, Ks[ki], (ki + regime + s) % 3, regime};
                    run_direct(&c);
                    n++;
                }
            }
    for (int regime = 0; regime < 4; regime++) {
        run_state(3, 2, 2, 11, regime);
        run_state(35, 4, 2, 97, regime);
    }
    printf("NOTE t64_ema: %d direct configs; worst rel err direct %.2e, state formula %.2e, splits %.2e\n", n,
           g_worst_direct, g_worst_state, g_worst_split);
    return tl_finish();
}
