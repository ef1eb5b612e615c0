/*
 * Products of one attention head: the shapes where a head width dh (16 to 64) is one of the
 * dimensions, so that OpenBLAS spends more time packing its operands than multiplying (the
 * profile of the mha mixer at dh = 16: a quarter of a training step in sgemm's copy routines,
 * repeated for every block of queries). These kernels read the operands where they lie and keep
 * the head-wide side in vector registers. Serial: the callers run them per (batch, head) unit.
 *
 * Float builds with a head width that is a multiple of the vector length (mega_hgemm_ok); others
 * use mega_gemm_serial. All matrices row-major with the given leading dimensions.
 */
#ifndef MEGA_HGEMM_H
#define MEGA_HGEMM_H
#include "core/internal.h"

/* whether the kernels below take head width dh in this build (never while mega__hgemm_off is set:
 * tests compare the callers' two paths with it) */
int mega_hgemm_ok(int dh);
extern int mega__hgemm_off;

/* S[m x n] = alpha * A[m x dh] . Bt[dh x n]  (Bt: the other operand transposed, e.g. a head's
 * keys as dh rows of n positions: mega_hgemm_transpose) */
void mega_hgemm_abt(real *S, size_t lds, const real *A, size_t lda, const real *Bt, size_t ldb, int m, int n, int dh,
                    real alpha);
/* C[m x dh] = alpha * A[m x k] . B[k x dh] + beta * C  (beta 0 or 1) */
void mega_hgemm_ab(real *C, size_t ldc, const real *A, size_t lda, const real *B, size_t ldb, int m, int k, int dh,
                   real alpha, real beta);
/* C[n x dh] += alpha * A[k x n]^T . B[k x dh] */
void mega_hgemm_atb(real *C, size_t ldc, const real *A, size_t lda, const real *B, size_t ldb, int k, int n, int dh,
                    real alpha);
/* Xt[dh x n] (rows ldt) = the transpose of X[n x dh] (rows ldx) */
void mega_hgemm_transpose(real *Xt, size_t ldt, const real *X, size_t ldx, int n, int dh);
#endif
