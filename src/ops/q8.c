/* q8_0 blocks and their int8 products (q8.h; the format and the measurements in
 * docs/quantization.md). The kernel is chosen at compile time, as the rest of src/ops (vec.h,
 * gemm.c): the build's -march decides between AVX-512 VNNI, AVX-VNNI, AVX2 and portable C. */
#include "ops/q8.h"
#include "ops/ops.h"
#include <float.h>
#include <stdatomic.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* ---- fp16 (the scales in a file) ---------------------------------------------------------- */

uint16_t mega_q8_f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0)); /* inf, NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and above round to infinity */
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half, m 2^-24 (a * 2^24 is exact) */
        float a;
        memcpy(&a, &ax, sizeof a);
        return (uint16_t)(sign | (uint32_t)rintf(a * 16777216.0f)); /* 1024 is the smallest normal's code */
    }
    uint32_t r = ax - 0x38000000u; /* exponent rebiased from 127 to 15 */
    r += 0xfffu + ((r >> 13) & 1u); /* 23 -> 10 mantissa bits, to nearest even */
    return (uint16_t)(sign | (r >> 13));
}

float mega_q8_h2f(uint16_t h) {
    const unsigned e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 0x400u), (int)e - 25);
    return (h & 0x8000u) ? -v : v;
}

/* ---- quantize, dequantize ------------------------------------------------------------------- */

void mega_q8_quantize_row(const real *x, size_t K, int8_t *qs, float *d, int half_scales) {
    const size_t nb = mega_q8_blocks(K);
    for (size_t b = 0; b < nb; b++) {
        const size_t n = MEGA_MIN((size_t)MEGA_Q8_BLOCK, K - b * MEGA_Q8_BLOCK);
        const real *xb = x + b * MEGA_Q8_BLOCK;
        int8_t *q = qs + b * MEGA_Q8_BLOCK;
        float amax = 0;
        int finite = 1;
        for (size_t t = 0; t < n; t++) { /* comparisons, not fmaxf: a vectorised loop, no libm calls */
            const float a = fabsf((float)xb[t]);
            finite &= a <= FLT_MAX;
            amax = a > amax ? a : amax;
        }
        /* ggml's quantize_row_q8_0: d = amax / 127, the values with 1/d; rounding to nearest even
         * (rintf), as ggml's AVX quantizer (_mm256_round_ps), vectorisable */
        const float db = amax / 127.0f, id = db != 0 ? 1.0f / db : 0.0f;
        for (size_t t = 0; t < n; t++) {
            float v = finite ? rintf((float)xb[t] * id) : 0.0f;
            v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v; /* never -128: the kernels negate values */
            q[t] = (int8_t)v;
        }
        for (size_t t = n; t < MEGA_Q8_BLOCK; t++) q[t] = 0;
        d[b] = !finite ? NAN : half_scales ? mega_q8_h2f(mega_q8_f2h(db)) : db;
    }
}

void mega_q8_dequantize_row(const int8_t *qs, const float *d, size_t K, real *x) {
    for (size_t k = 0; k < K; k++) x[k] = (real)(d[k / MEGA_Q8_BLOCK] * (float)qs[k]);
}

/* ---- the dot products ------------------------------------------------------------------------- */

/* the final tree of q8.h: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
static inline float tree8(const float a[8]) {
    const float u0 = a[0] + a[4], u1 = a[1] + a[5], u2 = a[2] + a[6], u3 = a[3] + a[7];
    return (u0 + u2) + (u1 + u3);
}

float mega_q8_dot_ref(const int8_t *wq, const float *wd, const int8_t *xq, const float *xd, size_t nb) {
    float acc[2][8] = {{0}};
    for (size_t b = 0; b < nb; b++) {
        const float s = wd[b] * xd[b];
        for (int l = 0; l < 8; l++) {
            int32_t p = 0;
            for (int t = 0; t < 4; t++) p += (int32_t)wq[b * 32 + 4 * l + t] * xq[b * 32 + 4 * l + t];
            /* two statements: no compiler may fuse them into one multiply-add */
            const float prod = s * (float)p;
            acc[b % 2][l] = acc[b % 2][l] + prod;
        }
    }
    float e[8];
    for (int l = 0; l < 8; l++) e[l] = acc[0][l] + acc[1][l];
    return tree8(e);
}

#if defined(__AVX2__)
/* 8 x int32, lane l = the 4 products of bytes 4l..4l+3 of a block: |x| (unsigned) times w with the
 * sign of x (ggml's trick for signed x signed with the unsigned x signed instructions); exact, as
 * no value is -128 and a pair of products (at most 2 x 127 x 127) fits maddubs's int16 */
static inline __m256i q8_block(__m256i w, __m256i x) {
    const __m256i ax = _mm256_sign_epi8(x, x), sw = _mm256_sign_epi8(w, x);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sw);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sw);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw), _mm256_set1_epi16(1));
#endif
}

static inline float hsum8(__m256 a) {
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)); /* a_i + a_{i+4} */
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));                                  /* u0 + u2, u1 + u3 */
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
}

#define LD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))

/* acc + s p for one block (the group's chain) */
static inline __m256 q8_step(__m256 acc, const int8_t *w, const int8_t *x, float s) {
    const __m256 p = _mm256_cvtepi32_ps(q8_block(LD(w), LD(x)));
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(s), p));
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* Two blocks per 512-bit vector: lanes 0-7 block b (the even group), 8-15 block b + 1 (the odd
 * group), the arithmetic of q8.h unchanged. A tile of n rows of W by m rows of x (n <= 4, m <= 2):
 * |x| and the sign mask of a row of x serve the n rows of W, a row of W's loaded values and its
 * scales the m rows of x; the scales' vector [s_b x 8, s_b+1 x 8] is the products dw dx, each
 * factor spread by one permute. out[j * ldo + r]: row j of x, row r of W. */
#define Q8_KERNEL "avx512-vnni"
static inline __attribute__((always_inline)) void q8_tile(int n, int m, const int8_t *wq, size_t ldq, const float *wd,
                                                         size_t ldd, const int8_t *xq, const float *xd, size_t nb,
                                                         float *out, size_t ldo) {
    __m512 acc[2][4];
    for (int j = 0; j < m; j++)
        for (int r = 0; r < n; r++) acc[j][r] = _mm512_setzero_ps();
    const __m512i spread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    size_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i ax[2];
        __mmask64 neg[2];
        __m512 dx[2];
        for (int j = 0; j < m; j++) {
            const __m512i x = _mm512_loadu_si512((const void *)(xq + j * ldq + 32 * b));
            ax[j] = _mm512_abs_epi8(x);
            neg[j] = _mm512_movepi8_mask(x);
            dx[j] = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_castsi128_ps(
                                                      _mm_loadl_epi64((const __m128i *)(const void *)(xd + j * nb + b)))));
        }
        for (int r = 0; r < n; r++) {
            const __m512i w = _mm512_loadu_si512((const void *)(wq + r * ldq + 32 * b));
            const __m512 dw = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_castsi128_ps(
                                                                _mm_loadl_epi64((const __m128i *)(const void *)(wd + r * ldd + b)))));
            for (int j = 0; j < m; j++) {
                const __m512i sw = _mm512_mask_sub_epi8(w, neg[j], _mm512_setzero_si512(), w);
                const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ax[j], sw));
                acc[j][r] = _mm512_add_ps(acc[j][r], _mm512_mul_ps(_mm512_mul_ps(dw, dx[j]), p));
            }
        }
    }
    for (int j = 0; j < m; j++)
        for (int r = 0; r < n; r++) {
            __m256 even = _mm512_castps512_ps256(acc[j][r]);
            const __m256 odd = _mm512_extractf32x8_ps(acc[j][r], 1);
            if (b < nb)
                even = q8_step(even, wq + r * ldq + 32 * b, xq + j * ldq + 32 * b, wd[r * ldd + b] * xd[j * nb + b]);
            out[j * ldo + r] = hsum8(_mm256_add_ps(even, odd));
        }
}
#define Q8_TILE_X 2
static inline __attribute__((always_inline)) void q8_dotn(int n, const int8_t *wq, size_t ldq, const float *wd,
                                                         size_t ldd, const int8_t *xq, const float *xd, size_t nb,
                                                         float *out) {
    q8_tile(n, 1, wq, ldq, wd, ldd, xq, xd, nb, out, 0);
}
/* 4 rows of W by 2 rows of x (ldq apart, their scales nb apart): out[j * 4 + r] */
static void q8_dot4x2(const int8_t *wq, size_t ldq, const float *wd, size_t ldd, const int8_t *xq, const float *xd,
                      size_t nb, float out[8]) {
    q8_tile(4, 2, wq, ldq, wd, ldd, xq, xd, nb, out, 4);
}
#else
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define Q8_KERNEL "avx512-vnni (256-bit)"
#elif defined(__AVXVNNI__)
#define Q8_KERNEL "avx-vnni"
#else
#define Q8_KERNEL "avx2"
#endif
/* one block per 256-bit vector, the even and the odd groups in two accumulators */
static inline __attribute__((always_inline)) void q8_dotn(int n, const int8_t *wq, size_t ldq, const float *wd,
                                                         size_t ldd, const int8_t *xq, const float *xd, size_t nb,
                                                         float *out) {
    __m256 acc[4][2];
    for (int r = 0; r < n; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++)
        for (int r = 0; r < n; r++)
            acc[r][b % 2] = q8_step(acc[r][b % 2], wq + r * ldq + 32 * b, xq + 32 * b, wd[r * ldd + b] * xd[b]);
    for (int r = 0; r < n; r++) out[r] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1]));
}
#endif

float mega_q8_dot(const int8_t *wq, const float *wd, const int8_t *xq, const float *xd, size_t nb) {
    float out;
    q8_dotn(1, wq, 0, wd, 0, xq, xd, nb, &out);
    return out;
}

/* four weight rows (ldq bytes, ldd scales apart) with one row x: four independent chains */
static void q8_dot4(const int8_t *wq, size_t ldq, const float *wd, size_t ldd, const int8_t *xq, const float *xd,
                    size_t nb, float out[4]) {
    q8_dotn(4, wq, ldq, wd, ldd, xq, xd, nb, out);
}

const char *mega_q8_kernel(void) { return Q8_KERNEL; }
#else
float mega_q8_dot(const int8_t *wq, const float *wd, const int8_t *xq, const float *xd, size_t nb) {
    return mega_q8_dot_ref(wq, wd, xq, xd, nb);
}
static void q8_dot4(const int8_t *wq, size_t ldq, const float *wd, size_t ldd, const int8_t *xq, const float *xd,
                    size_t nb, float out[4]) {
    for (int r = 0; r < 4; r++) out[r] = mega_q8_dot_ref(wq + r * ldq, wd + r * ldd, xq, xd, nb);
}
const char *mega_q8_kernel(void) { return "portable"; }
#endif

/* ---- the product Y = X W^T + bias ------------------------------------------------------------ */

/* the quantized rows of X: one buffer per thread, grown when a product needs more (the first
 * products of a model; never in a decode step after the first), kept for the thread's life */
static _Thread_local int8_t *xq_buf;
static _Thread_local size_t xq_cap;

/* Q8_PIECE outputs per piece: a multiple of 4 (q8_dot4) */
#define Q8_PIECE 64
/* no pieces for other threads below this many multiply-adds (as STEP_SPLIT_MIN in gemm.c) */
#define Q8_SPLIT_MIN 16384

typedef struct {
    const mega_q8_mat *m;
    size_t r0, O, R, ldy;
    const int8_t *xq;
    const float *xd;
    const real *bias;
    real beta;
    real *Y;
} q8_args;

static inline void q8_store(const q8_args *a, size_t i, size_t j, float v) {
    real *y = a->Y + i * a->ldy + j;
    *y = a->bias ? (real)v + a->bias[j] : a->beta != 0 ? (real)v + *y : (real)v;
}

static void q8_piece(void *arg, int p) {
    const q8_args *a = arg;
    const mega_q8_mat *m = a->m;
    const size_t nb = m->nb, ldq = nb * MEGA_Q8_BLOCK;
    const size_t j0 = (size_t)p * Q8_PIECE, j1 = MEGA_MIN(a->O, j0 + Q8_PIECE);
    size_t j = j0;
    for (; j + 4 <= j1; j += 4) {
        const int8_t *wq = m->qs + (a->r0 + j) * ldq;
        const float *wd = m->d + (a->r0 + j) * nb;
        size_t i = 0;
#ifdef Q8_TILE_X
        for (; i + 2 <= a->R; i += 2) {
            float out[8];
            q8_dot4x2(wq, ldq, wd, nb, a->xq + i * ldq, a->xd + i * nb, nb, out);
            for (int r = 0; r < 8; r++) q8_store(a, i + (size_t)(r / 4), j + (size_t)(r % 4), out[r]);
        }
#endif
        for (; i < a->R; i++) {
            float out[4];
            q8_dot4(wq, ldq, wd, nb, a->xq + i * ldq, a->xd + i * nb, nb, out);
            for (int r = 0; r < 4; r++) q8_store(a, i, j + (size_t)r, out[r]);
        }
    }
    for (; j < j1; j++)
        for (size_t i = 0; i < a->R; i++)
            q8_store(a, i, j, mega_q8_dot(m->qs + (a->r0 + j) * ldq, m->d + (a->r0 + j) * nb, a->xq + i * ldq,
                                          a->xd + i * nb, nb));
}

int mega_q8_linear(const mega_q8_mat *m, size_t r0, size_t O, const real *X, size_t R, const real *bias, real beta,
                   real *Y, size_t ldy, int split) {
    if (R == 0 || O == 0) return 1;
    const size_t nb = m->nb, ldq = nb * MEGA_Q8_BLOCK;
    /* R rows of quantized values, then R x nb scales (floats, 4-byte aligned as ldq is) */
    const size_t need = R * ldq + R * nb * sizeof(float);
    if (need > xq_cap) {
        int8_t *grown = realloc(xq_buf, need);
        if (!grown) return 0;
        xq_buf = grown;
        xq_cap = need;
    }
    float *xd = (float *)(void *)(xq_buf + R * ldq);
    for (size_t i = 0; i < R; i++) mega_q8_quantize_row(X + i * m->K, m->K, xq_buf + i * ldq, xd + i * nb, 0);
    const q8_args a = {m, r0, O, R, ldy, xq_buf, xd, bias, beta, Y};
    const int n = (int)((O + Q8_PIECE - 1) / Q8_PIECE);
    mega_step_parallel(n, q8_piece, (void *)&a, split && R * O * m->K >= Q8_SPLIT_MIN);
    return 1;
}

/* ---- the registry ------------------------------------------------------------------------------- */

/* slots for every quantized matrix of the models loaded at once (a model has a few per block) */
#define Q8_SLOTS 4096
static _Atomic(const mega_q8_mat *) q8_slots[Q8_SLOTS];
static atomic_int q8_live, q8_hi;

mega_status mega_q8_register(const mega_q8_mat *m) {
    for (int i = 0; i < Q8_SLOTS; i++) {
        const mega_q8_mat *expect = NULL;
        if (atomic_compare_exchange_strong(&q8_slots[i], &expect, m)) {
            int hi = atomic_load(&q8_hi);
            while (hi < i + 1 && !atomic_compare_exchange_weak(&q8_hi, &hi, i + 1)) {
            }
            atomic_fetch_add(&q8_live, 1);
            return MEGA_OK;
        }
    }
    MEGA_FAIL(MEGA_ERR_OOM, "more than %d quantized matrices loaded at once", Q8_SLOTS);
}

void mega_q8_unregister(const mega_q8_mat *m) {
    const int hi = atomic_load(&q8_hi);
    for (int i = 0; i < hi; i++) {
        const mega_q8_mat *expect = m;
        if (atomic_compare_exchange_strong(&q8_slots[i], &expect, NULL)) {
            atomic_fetch_sub(&q8_live, 1);
            return;
        }
    }
}

const mega_q8_mat *mega_q8_find(const real *W, size_t K, size_t O, size_t *r0) {
    if (!atomic_load_explicit(&q8_live, memory_order_acquire)) return NULL;
    const int hi = atomic_load_explicit(&q8_hi, memory_order_acquire);
    const uintptr_t w = (uintptr_t)W;
    for (int i = 0; i < hi; i++) {
        const mega_q8_mat *m = atomic_load_explicit(&q8_slots[i], memory_order_acquire);
        if (!m || m->K != K) continue;
        const uintptr_t base = (uintptr_t)m->w, end = base + m->rows * K * sizeof(real);
        if (w < base || w >= end || (w - base) % (K * sizeof(real))) continue;
        const size_t r = (w - base) / (K * sizeof(real));
        if (r + O > m->rows) continue;
        *r0 = r;
        return m;
    }
    return NULL;
}
