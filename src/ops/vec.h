/*
 * Vectors for the hand-vectorised kernels (hgemm.c, the row reductions of softmax.c): GCC/clang
 * vector extensions, so one source is AVX-512 (16 floats), AVX2 + FMA (8 floats) or 128-bit
 * vectors (SSE2, NEON). MEGA_VEC is defined when they exist (float builds with GCC or clang);
 * otherwise callers keep their scalar loops. Private to src/ops.
 */
#ifndef MEGA_OPS_VEC_H
#define MEGA_OPS_VEC_H
#include "core/internal.h"

#if !defined(MEGA_F64) && (defined(__GNUC__) || defined(__clang__))
#define MEGA_VEC 1
#if defined(__AVX512F__)
#include <immintrin.h>
#define VL 16
typedef float vf __attribute__((vector_size(64)));
static inline vf vfma(vf a, vf b, vf c) { return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
static inline vf vbc(float x) { return (vf)_mm512_set1_ps(x); }
static inline vf vmax(vf a, vf b) { return (vf)_mm512_max_ps((__m512)a, (__m512)b); }
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VL 8
typedef float vf __attribute__((vector_size(32)));
static inline vf vfma(vf a, vf b, vf c) { return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
static inline vf vbc(float x) { return (vf)_mm256_set1_ps(x); }
static inline vf vmax(vf a, vf b) { return (vf)_mm256_max_ps((__m256)a, (__m256)b); }
#else /* 128-bit vectors: SSE2 (the x86-64 baseline), NEON */
#define VL 4
typedef float vf __attribute__((vector_size(16)));
static inline vf vfma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vbc(float x) { return (vf){0} + x; }
static inline vf vmax(vf a, vf b) {
    vf r;
    for (int i = 0; i < VL; i++) r[i] = a[i] > b[i] ? a[i] : b[i];
    return r;
}
#endif
#define INLINE static inline __attribute__((always_inline))

INLINE vf vld(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
INLINE void vst(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* e^x on a vector (MEGA_VEXP), as mega_exp (Cody-Waite reduction, the same degree-6 polynomial,
 * exact 0 below the float range and for -inf, +inf above it) with fused multiply-adds, so that a row of weights costs a few
 * cycles per element instead of one dependent chain of twenty operations per element */
#if defined(__AVX512F__)
INLINE vf vexp(vf xv) {
    const __m512 x = (__m512)xv, lo = _mm512_set1_ps(-87.3365447505531f);
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.3762626647949f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    const __m512 z = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), y); /* 0 below the range, -inf */
    return (vf)_mm512_mask_mov_ps(z, _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.3762626647949f), _CMP_GT_OQ),
                                  _mm512_set1_ps(INFINITY));
}
#define MEGA_VEXP 1
#elif defined(__AVX2__) && defined(__FMA__)
INLINE vf vexp(vf xv) {
    const __m256 x = (__m256)xv, lo = _mm256_set1_ps(-87.3365447505531f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3762626647949f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    const __m256 z = _mm256_and_ps(y, _mm256_cmp_ps(x, lo, _CMP_GE_OQ)); /* 0 below the range, -inf */
    return (vf)_mm256_blendv_ps(z, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(88.3762626647949f), _CMP_GT_OQ));
}
#define MEGA_VEXP 1
#endif
#endif
#endif
