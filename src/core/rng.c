#include "core/rng.h"

double mega_rng_normal(mega_rng *r) {
    /* Box-Muller; u1 in (0,1] so log is finite */
    double u1 = 1.0 - mega_rng_u01(r), u2 = mega_rng_u01(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

uint64_t mega_rng_below(mega_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = mega_rng_u64(r);
    while (x >= lim);
    return x % n;
}

void mega_fill_normal(real *x, size_t n, double mean, double std, mega_rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(mean + std * mega_rng_normal(r));
}
void mega_fill_uniform(real *x, size_t n, double lo, double hi, mega_rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(lo + (hi - lo) * mega_rng_u01(r));
}
void mega_fill_const(real *x, size_t n, double v) {
    for (size_t i = 0; i < n; i++) x[i] = (real)v;
}

void mega_fill_xavier(real *w, size_t out, size_t in, double gain, mega_rng *r) {
    const double b = gain * sqrt(6.0 / (double)(in + out));
    mega_fill_uniform(w, out * in, -b, b, r);
}
