/* The product grid of src/ops/gemm.c (mega_gemm, mega_gemm_serial):
 *  - against a double-precision loop, for every transpose case, with leading dimensions wider
 *    than the rows, alpha and beta (beta 0 and not), over shapes that take each path: one call,
 *    the grid of tiles of C (small and large products), and the split reduction (K cut into
 *    slices summed in a workspace: long K into a small C, as a training step's weight gradients);
 *  - the same bits with 1, 2 and 3 threads, from mega_gemm_serial, and from inside a parallel
 *    region where several threads run split products at the same time (each takes its own
 *    workspace from the pool);
 *  - a split product run again gives the same bits (the workspace is taken back, not reused dirty).
 */
#include "ops/ops.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static unsigned long long rng = 777;

static real *rnd(size_t n) {
    real *p = malloc((n ? n : 1) * sizeof(real));
    for (size_t i = 0; i < n; i++) p[i] = (real)(2 * tl_rand01(&rng) - 1);
    return p;
}

typedef struct {
    int ta, tb;
    size_t M, N, K;
    const char *path;
} shape;

/* the operands of one case, stored with padded leading dimensions */
typedef struct {
    shape s;
    size_t lda, ldb, ldc;
    real alpha, beta;
    real *A, *B, *C0;
} gcase;

static void make_case(gcase *g, shape s, real beta) {
    g->s = s;
    const size_t ar = s.ta ? s.K : s.M, ac = s.ta ? s.M : s.K;
    const size_t br = s.tb ? s.N : s.K, bc = s.tb ? s.K : s.N;
    g->lda = ac + 3, g->ldb = bc + 5, g->ldc = s.N + 2;
    g->alpha = (real)0.5, g->beta = beta;
    g->A = rnd(ar * g->lda), g->B = rnd(br * g->ldb), g->C0 = rnd(s.M * g->ldc);
}

static void free_case(gcase *g) { free(g->A), free(g->B), free(g->C0); }

/* C = the case's product, by mega_gemm (serial: mega_gemm_serial) */
static void run(const gcase *g, int serial, real *C) {
    const shape *s = &g->s;
    memcpy(C, g->C0, s->M * g->ldc * sizeof(real));
    if (serial)
        mega_gemm_serial(s->ta, s->tb, s->M, s->N, s->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, C, g->ldc);
    else
        mega_gemm(s->ta, s->tb, s->M, s->N, s->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, C, g->ldc);
}

/* the worst |C - exact| over the bound sum |alpha a b| + |beta c| of each element */
static double check_exact(const gcase *g, const real *C) {
    const shape *s = &g->s;
    double worst = 0;
    for (size_t i = 0; i < s->M; i++)
        for (size_t j = 0; j < s->N; j++) {
            double acc = 0, mag = 0;
            for (size_t k = 0; k < s->K; k++) {
                const double a = s->ta ? g->A[k * g->lda + i] : g->A[i * g->lda + k];
                const double b = s->tb ? g->B[j * g->ldb + k] : g->B[k * g->ldb + j];
                acc += a * b, mag += fabs(a * b);
            }
            const double c0 = g->C0[i * g->ldc + j];
            const double want = g->alpha * acc + g->beta * c0;
            const double bound = fabs(g->alpha) * mag + fabs(g->beta * c0) + 1e-30;
            worst = fmax(worst, fabs(C[i * g->ldc + j] - want) / bound);
        }
    /* the padding columns of C are left alone */
    for (size_t i = 0; i < s->M; i++)
        for (size_t j = s->N; j < g->ldc; j++)
            if (C[i * g->ldc + j] != g->C0[i * g->ldc + j]) return INFINITY;
    return worst;
}

static void one_case(shape s, real beta) {
    gcase g;
    make_case(&g, s, beta);
    const size_t n = s.M * g.ldc;
    real *ref = malloc(n * sizeof(real)), *C = malloc(n * sizeof(real));
    mega_set_threads(1);
    run(&g, 0, ref);
    const double err = check_exact(&g, ref);
    /* float sums of K products: a few units in the last place per element, relative to the sum
     * of magnitudes (a bound that does not depend on cancellation) */
    const double tol = 1e-6 * (1 + sqrt((double)s.K));
    TL_CHECK(err <= tol, "%s %d%d %zux%zux%zu beta %g: error %.3g of the magnitude (tolerance %.3g)", s.path, s.ta,
             s.tb, s.M, s.N, s.K, (double)beta, err, tol);
    for (int t = 2; t <= 3; t++) {
        mega_set_threads(t);
        run(&g, 0, C);
        TL_CHECK(memcmp(C, ref, n * sizeof(real)) == 0, "%s %d%d %zux%zux%zu: %d threads give the bits of 1", s.path,
                 s.ta, s.tb, s.M, s.N, s.K, t);
    }
    run(&g, 1, C);
    TL_CHECK(memcmp(C, ref, n * sizeof(real)) == 0, "%s %d%d %zux%zux%zu: mega_gemm_serial gives the bits of mega_gemm",
             s.path, s.ta, s.tb, s.M, s.N, s.K);
    run(&g, 0, C);
    TL_CHECK(memcmp(C, ref, n * sizeof(real)) == 0, "%s %d%d %zux%zux%zu: a second run gives the same bits", s.path,
             s.ta, s.tb, s.M, s.N, s.K);
    mega_set_threads(0);
    free(ref), free(C);
    free_case(&g);
}

/* split products run by 3 threads at once inside one parallel region (each on its own thread,
 * each with its own workspace), against the same products run alone */
static void concurrent(void) {
#ifdef _OPENMP
    enum { NC = 3 };
    const shape s[NC] = {{1, 0, 96, 80, 8192, "split"}, {1, 0, 64, 130, 6000, "split"}, {0, 1, 70, 90, 4100, "split"}};
    gcase g[NC];
    real *ref[NC], *C[NC];
    for (int c = 0; c < NC; c++) {
        make_case(&g[c], s[c], (real)0.25);
        ref[c] = malloc(s[c].M * g[c].ldc * sizeof(real)), C[c] = malloc(s[c].M * g[c].ldc * sizeof(real));
        run(&g[c], 0, ref[c]);
    }
    int same[NC] = {0};
    for (int rep = 0; rep < 4; rep++) {
#pragma omp parallel for num_threads(NC) schedule(static, 1)
        for (int c = 0; c < NC; c++) {
            run(&g[c], 0, C[c]);
            same[c] += memcmp(C[c], ref[c], s[c].M * g[c].ldc * sizeof(real)) == 0;
        }
    }
    for (int c = 0; c < NC; c++) {
        TL_CHECK(same[c] == 4, "split %zux%zux%zu run in a parallel region beside two others: %d of 4 runs give the bits "
                 "of the run alone", s[c].M, s[c].N, s[c].K, same[c]);
        free(ref[c]), free(C[c]);
        free_case(&g[c]);
    }
#endif
}

int main(void) {
    static const shape shapes[] = {
        {0, 0, 7, 5, 3, "one call"},
        {0, 1, 300, 200, 300, "grid"},    /* 18M multiply-adds: tiles of C */
        {1, 0, 1500, 700, 300, "grid"},   /* 315M: the large-product tiles (about 16) */
        {0, 0, 520, 260, 150, "grid"},
        {1, 0, 96, 80, 8192, "split"},    /* 4 slices of 2048 */
        {0, 0, 96, 80, 8192, "split"},
        {0, 1, 64, 130, 6000, "split"},   /* 2 slices, the last one shorter */
        {1, 1, 70, 90, 4100, "split"},    /* 2 slices, K not a multiple of 16 */
        {1, 0, 40, 30, 20000, "split"},   /* 8 slices (the most) */
        {1, 0, 1100, 8, 4096, "grid"},    /* K < 4 max(M, N): tiles, no split */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        one_case(shapes[i], (real)0.75);
        one_case(shapes[i], 0);
    }
    concurrent();
    return tl_finish();
}
