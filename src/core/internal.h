/*
 * Internal conventions shared by every library file (not installed).
 *
 *  - `real` is the build's floating type (float, or double with -DMEGA_F64).
 *  - Every size and offset is size_t; indexes into (B, T, X) tensors are computed as
 *    ((size_t)b * T + t) * X + x so that B*T*X never overflows an int.
 *  - Library code reports failures with MEGA_FAIL(status, fmt, ...), which records a one-line
 *    message (mega_last_error) and returns the status. It never exits.
 *  - MEGA_ASSERT is for programmer errors inside kernels (cheap checks, kept in release builds).
 */
#ifndef MEGA_INTERNAL_H
#define MEGA_INTERNAL_H

#include "mega.h"
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef mega_real real;

#ifdef MEGA_F64
#define R_EXP exp
#define R_LOG log
#define R_SQRT sqrt
#define R_ERF erf
#define R_TANH tanh
#define R_FABS fabs
#define R_LOG1P log1p
#define R_EXPM1 expm1
#define R_POW pow
#define R_EPS 2.220446049250313e-16
#else
#define R_EXP expf
#define R_LOG logf
#define R_SQRT sqrtf
#define R_ERF erff
#define R_TANH tanhf
#define R_FABS fabsf
#define R_LOG1P log1pf
#define R_EXPM1 expm1f
#define R_POW powf
#define R_EPS 1.1920929e-07f
#endif

/* Below this many scalar operations a loop is not worth an OpenMP region: on a busy machine a
 * region costs a scheduling quantum whenever one of its threads is descheduled. */
#define MEGA_PAR_MIN 65536
/* e^x for hot loops: inline and branch-free so the compiler vectorises the loops that call it
 * (libm's expf is an opaque call). Cody-Waite reduction + degree-6 polynomial, relative error
 * below 1e-7 over the float range (tests/t64_... and the fixtures check the end results);
 * exact 0 for x < -87.34 (and -inf), +inf above 88.38. The double build uses exp(). */
static inline real mega_exp(real x) {
#ifdef MEGA_F64
    return exp(x);
#else
    const float hi = 88.3762626647949f, lo = -87.3365447505531f;
    float xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    float n = nearbyintf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float sc;
    memcpy(&sc, &e, 4);
    float y = p * sc;
    return x < lo ? 0.0f : (x > hi ? INFINITY : y);
#endif
}

/* the calling thread's number in the current OpenMP team (0 outside a region or without OpenMP):
 * the index of its slice of per-thread scratch */
static inline int mega__thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
/* the number of threads in the current OpenMP team (1 outside a region or without OpenMP) */
static inline int mega__num_threads(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

#define MEGA_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MEGA_MAX(a, b) ((a) > (b) ? (a) : (b))
/* Mega's chunk rule, the one place it is derived: a T-token sequence is attended in segments of
 * chunk positions when 0 < chunk < T, else as one segment of T (chunk <= 0: full attention) */
static inline int mega__segment(int chunk, int T) { return chunk > 0 && chunk < T ? chunk : T; }

/* record an error message; returns st */
mega_status mega__error(mega_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* prepend "prefix: " to the current error message */
mega_status mega__error_prefix(mega_status st, const char *prefix);
#define MEGA_FAIL(st, ...) return mega__error((st), __VA_ARGS__)
#define MEGA_TRY(expr)                                                                        \
    do {                                                                                      \
        mega_status _st = (expr);                                                             \
        if (_st != MEGA_OK) return _st;                                                       \
    } while (0)

void mega__assert_fail(const char *expr, const char *file, int line);
#define MEGA_ASSERT(x) ((x) ? (void)0 : mega__assert_fail(#x, __FILE__, __LINE__))

/* logging through the user's callback (no-op when none is installed) */
void mega__log(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* room for one more element in a growable array of *cap elements of elem bytes holding n
 * (capacity doubles, starting at first): returns the array (moved or not), or NULL when out of
 * memory (arr is then unchanged and still valid) */
void *mega__grow(void *arr, int *cap, int n, size_t elem, int first);

/* zero-initialised, 64-byte aligned allocation; NULL on failure (never exits) */
void *mega__calloc(size_t n, size_t size);
void mega__free(void *p);

/* the names of the enumerated settings (core/names.c), index = value */
extern const char *const mega__names_attn[], *const mega__names_norm[], *const mega__names_act[],
    *const mega__names_relpos[], *const mega__names_pos[], *const mega__names_mixer[];

/* config field tables (core/fields.c): range/choice check of every field of a config struct at
 * base (one-line error naming the field), and JSON both ways (keys = field names) */
/* "a,b,c" into an INTS field's int[MEGA_INTS_MAX] (0-ended); -1 (dst unchanged) for bad text or a 0 */
int mega__ints_parse(const char *s, int *dst);
mega_status mega__fields_check(const mega_field *f, int n, const void *base);

/* bump allocator over a caller-owned real buffer: with base NULL it only counts. Every take is
 * rounded up to 16 reals, so each region starts on a 64-byte boundary of an aligned buffer. */
typedef struct {
    real *base;
    size_t off;
} mega_bump;
static inline real *mega_bump_take(mega_bump *b, size_t n) {
    real *p = b->base ? b->base + b->off : NULL;
    b->off += (n + 15) & ~(size_t)15;
    return p;
}

/* ---- UTF-8 (utf8.c), by Unicode table 3-7: no overlong forms, no surrogates U+D800..DFFF,
 * nothing above U+10FFFF, no sequence cut short by the end ---- */
enum {
    MEGA__UTF8_STRICT = 0, /* an ill-formed sequence returns MEGA__UTF8_BAD, *i unchanged */
    MEGA__UTF8_ESCAPE = 1  /* each byte of an ill-formed sequence is one character 0xDC00 + byte
                            * (Python's surrogateescape: the metrics count such bytes as sacreBLEU
                            * counts its decoded text) */
};
#define MEGA__UTF8_BAD 0xFFFFFFFFu
/* The code point at s[*i] (*i < n), *i moved past it; an ill-formed sequence as mode says. */
uint32_t mega__utf8_next(const unsigned char *s, size_t n, size_t *i, int mode);
/* n when s[0..n) is well-formed, else the offset of the first byte of the first bad sequence
 * (also public, in mega_data.h) */
size_t mega_utf8_check(const void *s, size_t n);

#endif /* MEGA_INTERNAL_H */
