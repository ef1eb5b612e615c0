/* GEMM: OpenBLAS when available (MEGA_USE_BLAS), else a portable blocked kernel. */
#include "ops/ops.h"
#ifdef MEGA_USE_BLAS
#include <cblas.h>
#endif

/* portable fallback: C = alpha op(A) op(B) + beta C. Loop orders keep the innermost loop
 * contiguous for each transpose case so the compiler vectorises it. */
static void gemm_portable(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A,
                          size_t lda, const real *B, size_t ldb, real beta, real *C, size_t ldc) {
    for (size_t i = 0; i < M; i++) {
        real *c = C + i * ldc;
        if (beta == 0)
            for (size_t j = 0; j < N; j++) c[j] = 0;
        else if (beta != 1)
            for (size_t j = 0; j < N; j++) c[j] *= beta;
    }
    if (!tb) {
        /* C[i,:] += alpha * a(i,k) * B[k,:] */
        for (size_t i = 0; i < M; i++) {
            real *c = C + i * ldc;
            for (size_t k = 0; k < K; k++) {
                real a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
                if (a == 0) continue;
                const real *b = B + k * ldb;
                for (size_t j = 0; j < N; j++) c[j] += a * b[j];
            }
        }
    } else {
        /* C[i,j] += alpha * dot(a(i,:), B[j,:]) */
        for (size_t i = 0; i < M; i++) {
            real *c = C + i * ldc;
            if (!ta) {
                const real *a = A + i * lda;
                for (size_t j = 0; j < N; j++) {
                    const real *b = B + j * ldb;
                    real s = 0;
                    for (size_t k = 0; k < K; k++) s += a[k] * b[k];
                    c[j] += alpha * s;
                }
            } else {
                for (size_t j = 0; j < N; j++) {
                    const real *b = B + j * ldb;
                    real s = 0;
                    for (size_t k = 0; k < K; k++) s += A[k * lda + i] * b[k];
                    c[j] += alpha * s;
                }
            }
        }
    }
}

void mega_gemm(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A, size_t lda,
               const real *B, size_t ldb, real beta, real *C, size_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        gemm_portable(ta, tb, M, N, 0, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#ifdef MEGA_USE_BLAS
#ifdef MEGA_F64
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#else
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#endif
#else
    gemm_portable(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

void mega_gemm_serial(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A,
                      size_t lda, const real *B, size_t ldb, real beta, real *C, size_t ldc) {
    /* OpenBLAS runs problems this small on the calling thread; larger nested calls are routed
     * through the same entry point (see docs/performance.md for the threading policy). */
    mega_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mega_linear_forward(real *Y, const real *X, const real *W, const real *b, size_t R, size_t In, size_t O) {
    if (b) {
        for (size_t r = 0; r < R; r++) memcpy(Y + r * O, b, O * sizeof(real));
        mega_gemm(0, 1, R, O, In, 1, X, In, W, In, 1, Y, O);
    } else {
        mega_gemm(0, 1, R, O, In, 1, X, In, W, In, 0, Y, O);
    }
}

void mega_colsum_acc(real *db, const real *dY, size_t R, size_t O) {
    for (size_t r = 0; r < R; r++) {
        const real *d = dY + r * O;
        for (size_t o = 0; o < O; o++) db[o] += d[o];
    }
}

void mega_linear_backward(real *dX, real *dW, real *db, const real *dY, const real *X, const real *W,
                          size_t R, size_t In, size_t O, int acc) {
    if (dX) mega_gemm(0, 0, R, In, O, 1, dY, O, W, In, acc ? 1 : 0, dX, In);
    if (dW) mega_gemm(1, 0, O, In, R, 1, dY, O, X, In, 1, dW, In);
    if (db) mega_colsum_acc(db, dY, R, O);
}

/* ---- the streaming step's products --------------------------------------------------------
 * A decode step multiplies a few rows (batch x tokens) by every weight matrix, so its time is
 * the weights streaming through the cores (13 MB per token for the lm-decode model). A plain
 * mega_gemm runs such a product on the calling thread (OpenBLAS's small-matrix kernel, M = 1) or
 * through OpenBLAS's threaded path (M = 8), which packs (copies) the whole weight matrix for a
 * few rows and mallocs a job table per call. The step forms instead
 *  - cut the output columns (the rows of W) into pieces that OpenBLAS's direct small-matrix
 *    kernels accept (they multiply without packing; see step_piece): at 8 rows about 3x faster
 *    than the packing path;
 *  - run the pieces through mega_step_parallel: over the step team while a token is decoded
 *    (stepteam.c), else over one OpenMP region. Each piece is one single-threaded GEMM call
 *    (the OpenMP build of OpenBLAS runs a call made inside a parallel region on its thread), so
 *    every core streams weights and nothing is allocated.
 * For few rows (decode) the piece grid depends on the shape only, so a product gives the same
 * bits with any number of threads and any assignment of pieces to threads
 * (tests/test_decode_alloc.c checks it). */

#ifdef MEGA_USE_BLAS
int openblas_get_parallel(void); /* OpenBLAS: 0 sequential, 1 pthreads, 2 OpenMP build */
#endif

/* No split below this many multiply-adds: handing pieces to other threads costs about a
 * microsecond as an OpenMP region (less in the step team), while 16K MACs of streamed weights
 * take a few microseconds on one core. */
#define STEP_SPLIT_MIN 16384
/* piece widths are multiples of 16 outputs (whole cache lines of C) and at most STEP_WIDTH, so
 * a decode product has several pieces per thread to balance */
#define STEP_ALIGN 16
#define STEP_WIDTH 128
/* OpenBLAS's threading threshold in interface/gemm.c (M*N*K above 4 x 65536: threaded) */
#define BLAS_THREAD_MIN ((size_t)4 * 65536)

/* Outputs per GEMM call for M rows and inner dimension K (0: no width suits the direct kernel).
 * OpenBLAS (0.3.21, x86-64 AVX-512 kernels) takes a row-major C[M,N] = A B^T -- a TN product
 * of N x M x K in its column-major terms -- through its direct kernel when N*M <= 1200 and
 * N*M*K <= 1e6 (kernel/x86_64/sgemm_small_kernel_permit_skylakex.c); elsewhere pieces cost one
 * more call each and nothing else. The pthread build of OpenBLAS (clang builds) also threads, with
 * its own pool and a malloc per call, any call above BLAS_THREAD_MIN: pieces stay below that. */
static size_t step_piece(size_t M, size_t K) {
#ifdef MEGA_USE_BLAS
    const size_t MK = MEGA_MAX(M * K, (size_t)1);
    size_t p = MEGA_MIN(1200 / M, (size_t)1000000 / MK);
    if (openblas_get_parallel() == 1) p = MEGA_MIN(p, BLAS_THREAD_MIN / MK);
    return p / STEP_ALIGN * STEP_ALIGN;
#else
    (void)M, (void)K;
    return STEP_WIDTH; /* the portable GEMM computes dot products whatever the shape */
#endif
}

typedef struct {
    size_t M, N, K, width;
    const real *A, *B, *bias;
    size_t lda, ldb, ldc;
    real beta;
    real *C;
} step_args;

/* piece i: C[:, j0:j1] = A B[j0:j1]^T + (bias[j0:j1] on every row, or beta C) */
static void step_piece_run(void *arg, int i) {
    const step_args *a = arg;
    const size_t j0 = (size_t)i * a->width, j1 = MEGA_MIN(a->N, j0 + a->width);
    if (a->bias) {
        /* the two calls of mega_linear_forward: bias rows, then accumulate */
        for (size_t r = 0; r < a->M; r++) memcpy(a->C + r * a->ldc + j0, a->bias + j0, (j1 - j0) * sizeof(real));
        mega_gemm(0, 1, a->M, j1 - j0, a->K, 1, a->A, a->lda, a->B + j0 * a->ldb, a->ldb, 1, a->C + j0, a->ldc);
    } else {
        mega_gemm(0, 1, a->M, j1 - j0, a->K, 1, a->A, a->lda, a->B + j0 * a->ldb, a->ldb, a->beta, a->C + j0, a->ldc);
    }
}

static void step_product(size_t M, size_t N, size_t K, const real *A, size_t lda, const real *B, size_t ldb,
                         const real *bias, real beta, real *C, size_t ldc) {
    if (M == 0 || N == 0) return;
    step_args a = {M, N, K, 0, A, B, bias, lda, ldb, ldc, beta, C};
    const size_t p = step_piece(M, K);
    int split = M * N * K >= STEP_SPLIT_MIN;
    if (p) {
        a.width = MEGA_MIN(p, (size_t)STEP_WIDTH);
    } else {
        /* many rows (a prompt): no direct kernel; one slice per thread, each packed once */
        const size_t nt = (size_t)mega_step_threads();
        a.width = ((N + nt - 1) / nt + STEP_ALIGN - 1) / STEP_ALIGN * STEP_ALIGN;
#ifdef MEGA_USE_BLAS
        /* the pthread OpenBLAS would thread such a slice with its own pool: leave it whole */
        if (openblas_get_parallel() == 1 && M * a.width * K > BLAS_THREAD_MIN) a.width = N, split = 0;
#endif
    }
    const size_t n = (N + a.width - 1) / a.width;
    mega_step_parallel((int)n, step_piece_run, &a, split);
}

void mega_gemm_step(size_t M, size_t N, size_t K, const real *A, size_t lda, const real *B, size_t ldb, real beta,
                    real *C, size_t ldc) {
    step_product(M, N, K, A, lda, B, ldb, NULL, beta, C, ldc);
}

void mega_linear_step(real *Y, const real *X, const real *W, const real *b, size_t R, size_t In, size_t O) {
    step_product(R, O, In, X, In, W, In, b, 0, Y, O);
}
