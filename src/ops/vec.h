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
 * exact 0 below the float range and for -inf, +inf above it) with fused multiply-adds, so that a
 * row of weights costs a few cycles per element instead of one dependent chain of twenty
 * operations per element. The few operations without a vector-extension spelling: */
#if defined(__AVX512F__)
#define MEGA_VEXP 1
INLINE vf vmin(vf a, vf b) { return (vf)_mm512_min_ps((__m512)a, (__m512)b); }
INLINE vf vround(vf a) { return (vf)_mm512_roundscale_ps((__m512)a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^n for integral n in [-126, 127] */
INLINE vf vpow2i(vf n) {
    return (vf)_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32((__m512)n), _mm512_set1_epi32(127)), 23));
}
/* y where x >= lo, 0 elsewhere (also for NaN); then +inf where x > hi */
INLINE vf vrange(vf x, vf y, float lo, float hi) {
    const __m512 z = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(lo), _CMP_GE_OQ), (__m512)y);
    return (vf)_mm512_mask_mov_ps(z, _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(hi), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
}
#elif defined(__AVX2__) && defined(__FMA__)
#define MEGA_VEXP 1
INLINE vf vmin(vf a, vf b) { return (vf)_mm256_min_ps((__m256)a, (__m256)b); }
INLINE vf vround(vf a) { return (vf)_mm256_round_ps((__m256)a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
INLINE vf vpow2i(vf n) {
    return (vf)_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32((__m256)n), _mm256_set1_epi32(127)), 23));
}
INLINE vf vrange(vf x, vf y, float lo, float hi) {
    const __m256 z = _mm256_and_ps((__m256)y, _mm256_cmp_ps((__m256)x, _mm256_set1_ps(lo), _CMP_GE_OQ));
    return (vf)_mm256_blendv_ps(z, _mm256_set1_ps(INFINITY), _mm256_cmp_ps((__m256)x, _mm256_set1_ps(hi), _CMP_GT_OQ));
}
#endif
#ifdef MEGA_VEXP
INLINE vf vexp(vf x) {
    const float lo = -87.3365447505531f, hi = 88.3762626647949f;
    const vf xc = vmin(vmax(x, vbc(lo)), vbc(hi));
    const vf n = vround(xc * vbc(1.44269504088896341f));
    vf r = vfma(n, vbc(-0.693359375f), xc);
    r = vfma(n, vbc(2.12194440e-4f), r);
    vf p = vbc(1.9875691500e-4f);
    p = vfma(p, r, vbc(1.3981999507e-3f));
    p = vfma(p, r, vbc(8.3334519073e-3f));
    p = vfma(p, r, vbc(4.1665795894e-2f));
    p = vfma(p, r, vbc(1.6666665459e-1f));
    p = vfma(p, r, vbc(5.0000001201e-1f));
    p = vfma(p * r, r, r + vbc(1.0f));
    return vrange(x, p * vpow2i(n), lo, hi);
}
#endif
#endif
#endif
