/* Products of one attention head (hgemm.h). Written with GCC/clang vector extensions, so the same
 * code is AVX-512 (16 floats), AVX2 + FMA (8 floats) or 128-bit vectors elsewhere; the register
 * tiles keep the head-wide side (dh = NV vectors) in registers and stream the long side. */
#include "ops/hgemm.h"
#include "ops/ops.h"

#include "ops/vec.h"

int mega__hgemm_off;

#ifdef MEGA_VEC
#define HG_FAST 1
/* at most this many vectors per head row (dh <= MAXV * VL) */
#define MAXV 8

int mega_hgemm_ok(int dh) { return !mega__hgemm_off && dh > 0 && dh % VL == 0 && dh / VL <= MAXV; }

/* rows [0, R) of S = alpha A Bt, R <= 4: columns in pairs of vectors, then single vectors, then
 * one at a time */
INLINE void abt_rows(float *S, size_t lds, const float *A, size_t lda, const float *Bt, size_t ldb, int R, int n, int dh,
                     float alpha) {
    const vf al = vbc(alpha), z = vbc(0);
    int j = 0;
    for (; j + 2 * VL <= n; j += 2 * VL) {
        vf c0[4] = {z, z, z, z}, c1[4] = {z, z, z, z};
        for (int d = 0; d < dh; d++) {
            const float *b = Bt + (size_t)d * ldb + j;
            const vf b0 = vld(b), b1 = vld(b + VL);
            for (int i = 0; i < R; i++) {
                const vf a = vbc(A[(size_t)i * lda + d]);
                c0[i] = vfma(a, b0, c0[i]);
                c1[i] = vfma(a, b1, c1[i]);
            }
        }
        for (int i = 0; i < R; i++) vst(S + (size_t)i * lds + j, c0[i] * al), vst(S + (size_t)i * lds + j + VL, c1[i] * al);
    }
    for (; j + VL <= n; j += VL) {
        vf c0[4] = {z, z, z, z};
        for (int d = 0; d < dh; d++) {
            const vf b0 = vld(Bt + (size_t)d * ldb + j);
            for (int i = 0; i < R; i++) c0[i] = vfma(vbc(A[(size_t)i * lda + d]), b0, c0[i]);
        }
        for (int i = 0; i < R; i++) vst(S + (size_t)i * lds + j, c0[i] * al);
    }
    for (; j < n; j++)
        for (int i = 0; i < R; i++) {
            float s = 0;
            for (int d = 0; d < dh; d++) s += A[(size_t)i * lda + d] * Bt[(size_t)d * ldb + j];
            S[(size_t)i * lds + j] = alpha * s;
        }
}

void mega_hgemm_abt(real *S, size_t lds, const real *A, size_t lda, const real *Bt, size_t ldb, int m, int n, int dh,
                    real alpha) {
    int r = 0;
    for (; r + 4 <= m; r += 4) abt_rows(S + (size_t)r * lds, lds, A + (size_t)r * lda, lda, Bt, ldb, 4, n, dh, alpha);
    for (; r < m; r++) abt_rows(S + (size_t)r * lds, lds, A + (size_t)r * lda, lda, Bt, ldb, 1, n, dh, alpha);
}

/* rows [0, R) of C = alpha A B + beta C with dh = NV vectors, R <= 8 */
INLINE void ab_rows(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb, int R, int NV, int k,
                    float alpha, float beta) {
    const vf z = vbc(0), al = vbc(alpha);
    vf c[8][MAXV];
    for (int i = 0; i < R; i++)
        for (int v = 0; v < NV; v++) c[i][v] = z;
    for (int u = 0; u < k; u++) {
        const float *b = B + (size_t)u * ldb;
        vf bv[MAXV];
        for (int v = 0; v < NV; v++) bv[v] = vld(b + v * VL);
        for (int i = 0; i < R; i++) {
            const vf a = vbc(A[(size_t)i * lda + u]);
            for (int v = 0; v < NV; v++) c[i][v] = vfma(a, bv[v], c[i][v]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int v = 0; v < NV; v++) {
            float *o = C + (size_t)i * ldc + v * VL;
            vst(o, beta != 0 ? vld(o) + c[i][v] * al : c[i][v] * al);
        }
}

/* the register tiles: R rows of NV vectors, R * NV = 8 accumulators where possible: eight
 * independent FMA chains hide the FMA latency (4 cycles, 2 per cycle), and AVX2's 16 registers
 * hold them with the operands */
#define AB_CASE(NV_, R_)                                                                                  \
    case NV_:                                                                                             \
        for (; r + R_ <= m; r += R_)                                                                      \
            ab_rows(C + (size_t)r * ldc, ldc, A + (size_t)r * lda, lda, B, ldb, R_, NV_, k, alpha, beta); \
        for (; r < m; r++) ab_rows(C + (size_t)r * ldc, ldc, A + (size_t)r * lda, lda, B, ldb, 1, NV_, k, alpha, beta); \
        break;

void mega_hgemm_ab(real *C, size_t ldc, const real *A, size_t lda, const real *B, size_t ldb, int m, int k, int dh,
                   real alpha, real beta) {
    int r = 0;
    switch (dh / VL) {
        AB_CASE(1, 8)
        AB_CASE(2, 4)
        AB_CASE(3, 2)
        AB_CASE(4, 2)
        AB_CASE(5, 1)
        AB_CASE(6, 1)
        AB_CASE(7, 1)
        AB_CASE(8, 1)
    }
}

/* rows [0, U) of C += alpha A^T B (columns [0, U) of A) with dh = NV vectors, U <= 8 */
INLINE void atb_rows(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb, int U, int NV, int k,
                     float alpha) {
    const vf z = vbc(0), al = vbc(alpha);
    vf c[8][MAXV];
    for (int j = 0; j < U; j++)
        for (int v = 0; v < NV; v++) c[j][v] = z;
    for (int r = 0; r < k; r++) {
        const float *b = B + (size_t)r * ldb, *a = A + (size_t)r * lda;
        vf bv[MAXV];
        for (int v = 0; v < NV; v++) bv[v] = vld(b + v * VL);
        for (int j = 0; j < U; j++) {
            const vf av = vbc(a[j]);
            for (int v = 0; v < NV; v++) c[j][v] = vfma(av, bv[v], c[j][v]);
        }
    }
    for (int j = 0; j < U; j++)
        for (int v = 0; v < NV; v++) {
            float *o = C + (size_t)j * ldc + v * VL;
            vst(o, vld(o) + c[j][v] * al);
        }
}

#define ATB_CASE(NV_, U_)                                                                              \
    case NV_:                                                                                          \
        for (; u + U_ <= n; u += U_) atb_rows(C + (size_t)u * ldc, ldc, A + u, lda, B, ldb, U_, NV_, k, alpha); \
        for (; u < n; u++) atb_rows(C + (size_t)u * ldc, ldc, A + u, lda, B, ldb, 1, NV_, k, alpha);           \
        break;

void mega_hgemm_atb(real *C, size_t ldc, const real *A, size_t lda, const real *B, size_t ldb, int k, int n, int dh,
                    real alpha) {
    int u = 0;
    switch (dh / VL) {
        ATB_CASE(1, 8)
        ATB_CASE(2, 4)
        ATB_CASE(3, 2)
        ATB_CASE(4, 2)
        ATB_CASE(5, 1)
        ATB_CASE(6, 1)
        ATB_CASE(7, 1)
        ATB_CASE(8, 1)
    }
}

#else /* double builds, other compilers: the callers use mega_gemm_serial */

int mega_hgemm_ok(int dh) { return (void)dh, 0; }
void mega_hgemm_abt(real *S, size_t lds, const real *A, size_t lda, const real *Bt, size_t ldb, int m, int n, int dh,
                    real alpha) {
    mega_gemm_serial(0, 0, (size_t)m, (size_t)n, (size_t)dh, alpha, A, lda, Bt, ldb, 0, S, lds);
}
void mega_hgemm_ab(real *C, size_t ldc, const real *A, size_t lda, const real *B, size_t ldb, int m, int k, int dh,
                   real alpha, real beta) {
    mega_gemm_serial(0, 0, (size_t)m, (size_t)dh, (size_t)k, alpha, A, lda, B, ldb, beta, C, ldc);
}
void mega_hgemm_atb(real *C, size_t ldc, const real *A, size_t lda, const real *B, size_t ldb, int k, int n, int dh,
                    real alpha) {
    mega_gemm_serial(1, 0, (size_t)n, (size_t)dh, (size_t)k, alpha, A, lda, B, ldb, 1, C, ldc);
}
#endif

void mega_hgemm_transpose(real *Xt, size_t ldt, const real *X, size_t ldx, int n, int dh) {
    for (int i = 0; i < n; i++)
        for (int d = 0; d < dh; d++) Xt[(size_t)d * ldt + i] = X[(size_t)i * ldx + d];
}
