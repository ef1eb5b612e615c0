/* Rotary position embedding (Su et al. 2021, RoFormer §3.2). Angles in double precision, reduced
 * modulo 2 pi, so positions in the millions keep their accuracy (project choice; the reference
 * codes use float32 tables). */
#include "ops/ops.h"

void mega_rope_angles(real *cs, int r, int64_t pos, double base, int inverse) {
    const int h = r / 2;
    const double step = pow(base, -2.0 / r); /* theta_i = base^(-2i/r) = step^i */
    double th = 1.0;
    for (int i = 0; i < h; i++, th *= step) {
        double ang = fmod((double)pos * th, 6.283185307179586476925);
        if (inverse) ang = -ang;
        cs[i] = (real)cos(ang);
        cs[h + i] = (real)sin(ang);
    }
}

void mega_rope_apply(real *x, const real *cs, int r, int interleaved) {
    const int h = r / 2;
    for (int i = 0; i < h; i++) {
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + h;
        real c = cs[i], s = cs[h + i], xa = x[a], xb = x[b];
        x[a] = xa * c - xb * s;
        x[b] = xb * c + xa * s;
    }
}

void mega_rope(real *x, int d, int r, int64_t pos, double base, int interleaved, int inverse) {
    (void)d;
    real cs[1024];
    MEGA_ASSERT(r <= 1024);
    mega_rope_angles(cs, r, pos, base, inverse);
    mega_rope_apply(x, cs, r, interleaved);
}
