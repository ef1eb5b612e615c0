/* Rotary position embedding (Su et al. 2021; SPEC §3.2). Angles in double precision, reduced
 * modulo 2 pi, so positions in the millions keep their accuracy (SPEC §3.7). */
#include "ops/ops.h"

void mega_rope(real *x, int d, int r, int64_t pos, double base, int interleaved, int inverse) {
    (void)d;
    const int h = r / 2;
    for (int i = 0; i < h; i++) {
        double th = pow(base, -2.0 * i / r);
        double ang = fmod((double)pos * th, 6.283185307179586476925);
        if (inverse) ang = -ang;
        real c = (real)cos(ang), s = (real)sin(ang);
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + h;
        real xa = x[a], xb = x[b];
        x[a] = xa * c - xb * s;
        x[b] = xb * c + xa * s;
    }
}
