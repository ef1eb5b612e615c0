/*
 * Micro-benchmark of the damped-EMA kernels (src/ops/ema.c): mega_ema_forward and
 * mega_ema_backward on the shapes of two `mega bench` workloads, called the way the Mega layer
 * calls them (forward, then backward; the backward needs no saved forward state), plus a check
 * of every output against a plain double-precision reference (the recurrence of docs/mega.md
 * section 1, and its reverse-mode adjoint); and the decode step, mega_ema_layer_step with one
 * token per sequence, at the lm-decode shape (D 256, N 16, B 1 and 8).
 *
 *   make MEGA_INNER=1 BUILD=/tmp/build-ema -j2 lib
 *   gcc -O3 -march=native -fopenmp -std=c11 -Iinclude -Isrc bench/ema_micro.c \
 *       /tmp/build-ema/libmega.a -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lcjson -lm \
 *       -o /tmp/ema_micro
 *   /tmp/ema_micro [reps] [threads]       # default 9 repetitions, 1 thread; median ms per call
 *   /tmp/ema_micro check                  # small shapes (truncation, pads, partial blocks) only
 *   /tmp/ema_micro 15 1 nocheck           # timings only (no reference, no small shapes)
 *   /tmp/ema_micro 15 1 B T D N bidir     # one custom shape, timings only
 *
 * Shapes: lm-train (causal, B=8, T=1024, D=256, N=16) and lra-text-train-c128 (bidirectional,
 * B=2, T=4096, D=128, N=16); untruncated, no pads, as in the benchmark.
 */
#define _POSIX_C_SOURCE 200809L
#include "core/internal.h"
#include "layers/ema.h"
#include "ops/ema.h"
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static double urand(void) { /* xorshift64, [0, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (rs >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(1 - urand())) * cos(6.283185307179586 * urand()); }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    const char *name;
    int B, T, D, N, bidir, K, pads;
} shape;

/* reference forward/backward in double, straight from the recurrence (windowed when 0<K<T) */
static void reference(const shape *s, const double *coef, const double *om, const real *x, const uint8_t *pad,
                      const real *g, double *mpre, double *dx, double *dcoef, double *domega) {
    const int B = s->B, T = s->T, D = s->D, N = s->N, Dp = s->bidir ? 2 * D : D;
    const int trunc = s->K > 0 && s->K < T, K = s->K;
    const size_t S = (size_t)Dp * N;
    double *h = malloc(sizeof(double) * (T + 1)), *lam = malloc(sizeof(double) * (T + 2));
    double *xv = malloc(sizeof(double) * T), *dxv = malloc(sizeof(double) * T);
    for (size_t i = 0; i < (size_t)B * T * D; i++) mpre[i] = 0, dx[i] = 0;
    for (size_t i = 0; i < 4 * S; i++) dcoef[i] = 0;
    for (int d = 0; d < D; d++) domega[d] = 0;
    for (int b = 0; b < B; b++)
        for (int dir = 0; dir < (s->bidir ? 2 : 1); dir++)
            for (int d = 0; d < D; d++) {
                /* time index of scan step i */
#define TI(i) (dir == 0 ? (i) : T - 1 - (i))
                for (int i = 0; i < T; i++) {
                    int t = TI(i);
                    xv[i] = (pad && pad[(size_t)b * T + t]) ? 0 : x[((size_t)b * T + t) * D + d];
                    dxv[i] = 0;
                }
                for (int n = 0; n < N; n++) {
                    size_t o = (size_t)n * Dp + (dir ? D : 0) + d;
                    double pb = coef[o], q = coef[S + o], gs = coef[2 * S + o], qK = coef[3 * S + o];
                    h[0] = 0; /* h[i+1] = state after step i */
                    for (int i = 0; i < T; i++) {
                        double in = xv[i] - (trunc && i >= K ? qK * xv[i - K] : 0);
                        h[i + 1] = q * h[i] + pb * in;
                        mpre[((size_t)b * T + TI(i)) * D + d] += gs * h[i + 1];
                    }
                    /* adjoint lambda_i = dL/dh_i */
                    double l = 0;
                    for (int i = T - 1; i >= 0; i--) {
                        double gt = g[((size_t)b * T + TI(i)) * D + d];
                        l = gs * gt + q * l;
                        lam[i] = l;
                        double in = xv[i] - (trunc && i >= K ? qK * xv[i - K] : 0);
                        dcoef[2 * S + o] += gt * h[i + 1];
                        dcoef[S + o] += l * h[i];
                        dcoef[o] += l * in;
                        dxv[i] += pb * l;
                        if (trunc && i >= K) {
                            dcoef[3 * S + o] -= l * pb * xv[i - K];
                            dxv[i - K] -= l * pb * qK;
                        }
                    }
                }
                for (int i = 0; i < T; i++) {
                    int t = TI(i);
                    if (!(pad && pad[(size_t)b * T + t])) dx[((size_t)b * T + t) * D + d] += dxv[i];
                }
#undef TI
            }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                size_t o = ((size_t)b * T + t) * D + d;
                mpre[o] += om[d] * x[o];
                dx[o] += om[d] * g[o];
                domega[d] += g[o] * x[o];
            }
    free(h), free(lam), free(xv), free(dxv);
}

/* worst |a - r| / (max|r| of the array) */
static double relerr(const real *a, const double *r, size_t n) {
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(r[i]));
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - r[i]));
    return m > 0 ? e / m : e;
}

static int run(const shape *s, int reps, int nthreads, int check) {
    const int B = s->B, T = s->T, D = s->D, N = s->N, Dp = s->bidir ? 2 * D : D;
    const size_t R = (size_t)B * T * D, S = (size_t)Dp * N;
    real *x = malloc(R * sizeof(real)), *g = malloc(R * sizeof(real));
    real *mpre = malloc(R * sizeof(real)), *m = malloc(R * sizeof(real)), *dx = malloc(R * sizeof(real));
    real *par = malloc(4 * S * sizeof(real)), *coef = malloc(4 * S * sizeof(real));
    real *dcoef = malloc(4 * S * sizeof(real)), *om = malloc(D * sizeof(real)), *dom = malloc(D * sizeof(real));
    uint8_t *pad = NULL;
    for (size_t i = 0; i < R; i++) x[i] = (real)nrand(), g[i] = (real)(0.01 * nrand());
    /* the official initialisation (mega_ema_init): delta, alpha ~ N(0, 0.2), beta ~ +-1 + N(0, 0.02),
     * gamma ~ N(0, 1), parameter layout [D', N] */
    for (size_t i = 0; i < S; i++) {
        par[i] = (real)(0.2 * nrand());
        par[S + i] = (real)(0.2 * nrand());
        par[2 * S + i] = (real)(((i % N) % 2 ? -1 : 1) + 0.02 * nrand());
        par[3 * S + i] = (real)nrand();
    }
    for (int d = 0; d < D; d++) om[d] = (real)nrand();
    if (s->pads) {
        pad = calloc((size_t)B * T, 1);
        for (int b = 0; b < B; b++)
            for (int t = T - 1 - b; t < T; t++) pad[(size_t)b * T + t] = 1; /* right padding */
        pad[1] = 1;                                                        /* and one inside */
    }
    const int K = (s->K > 0 && s->K < T) ? s->K : 0;
    mega_ema_coef(coef, par, par + S, par + 2 * S, par + 3 * S, Dp, N, K);
    mega_ema_k k;
    k.D = D, k.N = N, k.bidir = s->bidir, k.K = K;
    k.pb = coef, k.q = coef + S, k.gs = coef + 2 * S, k.qK = coef + 3 * S, k.omega = om;
    size_t nscr = mega_ema_bwd_scratch(&k, T, nthreads);
    real *scr = malloc((nscr + 16) * sizeof(real));

    double *tf = malloc(sizeof(double) * reps), *tb = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        mega_ema_forward(&k, mpre, m, x, pad, B, T, NULL);
        double t1 = now();
        memset(dx, 0, R * sizeof(real));
        memset(dcoef, 0, 4 * S * sizeof(real));
        memset(dom, 0, D * sizeof(real));
        double t2 = now();
        mega_ema_backward(&k, dx, dcoef, dom, g, x, pad, B, T, scr, nthreads);
        double t3 = now();
        tf[r] = 1e3 * (t1 - t0), tb[r] = 1e3 * (t3 - t2);
    }
    qsort(tf, reps, sizeof(double), cmp_d);
    qsort(tb, reps, sizeof(double), cmp_d);
    int bad = 0;
    printf("%-22s B=%d T=%d D=%d N=%d %s K=%d pads=%d: forward %8.3f ms  backward %8.3f ms  (min %.3f / %.3f)",
           s->name, B, T, D, N, s->bidir ? "bidir" : "causal", s->K, s->pads, tf[reps / 2], tb[reps / 2], tf[0],
           tb[0]);
    if (check) {
        double *cd = malloc(4 * S * sizeof(double)), *omd = malloc(D * sizeof(double));
        double *rm = malloc(R * sizeof(double)), *rdx = malloc(R * sizeof(double));
        double *rdc = malloc(4 * S * sizeof(double)), *rdo = malloc(D * sizeof(double));
        for (size_t i = 0; i < 4 * S; i++) cd[i] = coef[i];
        for (int d = 0; d < D; d++) omd[d] = om[d];
        reference(s, cd, omd, x, pad, g, rm, rdx, rdc, rdo);
        double e[8] = {relerr(mpre, rm, R), relerr(dx, rdx, R), relerr(dcoef, rdc, S), relerr(dcoef + S, rdc + S, S),
                       relerr(dcoef + 2 * S, rdc + 2 * S, S), K ? relerr(dcoef + 3 * S, rdc + 3 * S, S) : 0,
                       relerr(dom, rdo, D), 0};
        double worst = 0;
        for (int i = 0; i < 7; i++) worst = fmax(worst, e[i]);
        const double tol = sizeof(real) == 4 ? 2e-5 : 1e-12;
        bad = !(worst < tol);
        printf("\n    rel.err mpre %.1e dx %.1e dpb %.1e dq %.1e dgs %.1e dqK %.1e domega %.1e  %s", e[0], e[1],
               e[2], e[3], e[4], e[5], e[6], bad ? "FAIL" : "ok");
        free(cd), free(omd), free(rm), free(rdx), free(rdc), free(rdo);
    }
    printf("\n");
    free(x), free(g), free(mpre), free(m), free(dx), free(par), free(coef), free(dcoef), free(om), free(dom);
    free(pad), free(scr), free(tf), free(tb);
    return bad;
}

static real *aalloc(size_t n) { /* 64-byte aligned */
    void *p = NULL;
    return posix_memalign(&p, 64, n * sizeof(real)) ? NULL : p;
}

/* the decode step: mega_ema_layer_step with T = 1 at the lm-decode shape (at B = 1 always on the
 * calling thread: B*D*N is below the step's split threshold; at B = 8 over the threads given, in
 * a parallel region per call as outside the decode's step team), buffers 64-byte aligned as the
 * model's are (its bump allocator keeps 64-byte offsets); median and minimum ns per call over
 * reps runs of 4000 calls */
static void run_step(int B, int reps) {
    const int D = 256, N = 16, calls = 4000;
    const size_t S = (size_t)D * N;
    real *W = aalloc(4 * S + D), *coef = aalloc(4 * S), *x = aalloc((size_t)B * D), *mpre = aalloc((size_t)B * D);
    real *m = aalloc((size_t)B * D), *st = aalloc((size_t)B * S);
    if (!W || !coef || !x || !mpre || !m || !st) {
        printf("decode step: out of memory\n");
        free(W), free(coef), free(x), free(mpre), free(m), free(st);
        return;
    }
    mega_ema e;
    memset(&e, 0, sizeof e);
    e.D = D, e.N = N, e.delta = 0, e.alpha = S, e.beta = 2 * S, e.gamma = 3 * S, e.omega = 4 * S;
    for (size_t i = 0; i < S; i++) { /* as in run() */
        W[i] = (real)(0.2 * nrand()), W[S + i] = (real)(0.2 * nrand());
        W[2 * S + i] = (real)(((i % N) % 2 ? -1 : 1) + 0.02 * nrand()), W[3 * S + i] = (real)nrand();
    }
    for (int d = 0; d < D; d++) W[4 * S + d] = (real)nrand();
    for (size_t i = 0; i < (size_t)B * D; i++) x[i] = (real)nrand();
    memset(st, 0, (size_t)B * S * sizeof(real));
    mega_ema_layer_coef(&e, W, coef, 0);
    double *t = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (int c = 0; c < calls; c++) mega_ema_layer_step(&e, W, coef, st, mpre, m, x, B, 1);
        t[r] = 1e9 * (now() - t0) / calls;
    }
    qsort(t, reps, sizeof(double), cmp_d);
    printf("%-22s B=%d T=1 D=%d N=%d causal: step %8.0f ns per call  (min %.0f)\n", "decode-step", B, D, N,
           t[reps / 2], t[0]);
    free(t), free(W), free(coef), free(x), free(mpre), free(m), free(st);
}

int main(int argc, char **argv) {
    int check_only = argc > 1 && !strcmp(argv[1], "check");
    int reps = (!check_only && argc > 1) ? atoi(argv[1]) : 9;
    int nthreads = argc > 2 ? atoi(argv[2]) : 1;
    if (reps < 1) reps = 1;
    mega_set_threads(nthreads);
    const shape big[] = {{"lm-train", 8, 1024, 256, 16, 0, 0, 0}, {"lra-text-train-c128", 2, 4096, 128, 16, 1, 0, 0}};
    const shape small[] = {
        {"causal", 2, 300, 48, 16, 0, 0, 0},      {"bidir", 2, 300, 40, 16, 1, 0, 0},
        {"causal-trunc-pads", 3, 200, 37, 5, 0, 30, 1}, {"bidir-trunc-pads", 2, 170, 20, 3, 1, 64, 1},
        {"bidir-K1-pads", 2, 77, 17, 2, 1, 1, 1}, {"causal-N1", 1, 129, 33, 1, 0, 0, 0},
        {"bidir-N7-pads", 2, 1000, 70, 7, 1, 0, 1}, {"causal-N64-trunc", 1, 150, 16, 64, 0, 100, 0},
    };
    int bad = 0;
    if (argc > 7) {
        shape c = {"custom", atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]), 0, 0};
        return run(&c, reps, nthreads, 0);
    }
    const int check = !(argc > 3 && !strcmp(argv[3], "nocheck"));
    if (check)
        for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) bad += run(&small[i], 1, nthreads, 1);
    if (!check_only) {
        for (size_t i = 0; i < 2; i++) bad += run(&big[i], reps, nthreads, check);
        run_step(1, reps), run_step(8, reps);
    }
    printf("%s\n", bad ? "CHECK FAILED" : "all checks ok");
    return bad != 0;
}
