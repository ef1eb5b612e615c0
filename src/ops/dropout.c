/* Dropout with a counter-based mask: element i is kept iff hash01(key, i) >= p. The same call
 * applied to the gradient in backward reproduces the mask, so nothing is stored. */
#include "core/rng.h"
#include "ops/ops.h"

void mega_dropout(real *y, const real *x, size_t n, double p, uint64_t key) {
    if (p <= 0) {
        if (y != x) memmove(y, x, n * sizeof(real));
        return;
    }
    real scale = (real)(1.0 / (1.0 - p));
#pragma omp parallel for schedule(static) if (n > MEGA_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = mega__hash01(key, i) >= p ? x[i] * scale : 0;
}
