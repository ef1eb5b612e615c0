#include "testlib.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

int tl_passed, tl_failed;
int tl_verbose;

void tl_check(int ok, const char *fmt, ...) {
    va_list ap;
    if (ok) {
        tl_passed++;
        if (!tl_verbose) return;
        printf("PASS ");
    } else {
        tl_failed++;
        printf("FAIL ");
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

int tl_finish(void) {
    printf("%d passed, %d failed\n", tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}

tl_err tl_compare(const double *got, const double *ref, size_t n) {
    tl_err e = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (!(d <= e.max_abs)) { e.max_abs = d; e.argmax = i; }  /* NaN propagates */
        if (fabs(ref[i]) > e.ref_max) e.ref_max = fabs(ref[i]);
    }
    e.rel = e.ref_max > 0 ? e.max_abs / e.ref_max : e.max_abs;
    return e;
}

static unsigned long long tl_next(unsigned long long *s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double tl_rand01(unsigned long long *s) { return (tl_next(s) >> 11) * (1.0 / 9007199254740992.0); }
double tl_randn(unsigned long long *s) {
    double u1 = tl_rand01(s), u2 = tl_rand01(s);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
