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
