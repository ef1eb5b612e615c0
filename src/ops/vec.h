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
#endif
#endif
