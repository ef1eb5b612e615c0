#include "fd.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int KS[4] = {-2, -1, 1, 2};

static double step_of(const fd_opts *o) { return o->h > 0 ? o->h : o->two_point ? 1e-5 : 1e-4; }

/* L[i] = L(w + KS[i] h) (the outer two unused by the two-point stencil) */
static double combine(const fd_opts *o, const double L[4]) {
    const double h = step_of(o);
    return o->two_point ? (L[2] - L[1]) / (2 * h) : (8 * (L[2] - L[1]) - (L[3] - L[0])) / (12 * h);
}

double fd_derivative(fd_opts *o, mega_real *p) {
    const mega_real v = *p;
    double L[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        if (o->two_point && (i == 0 || i == 3)) continue;
        *p = (mega_real)(v + KS[i] * step_of(o));
        L[i] = o->loss(o->arg);
    }
    *p = v;
    return combine(o, L);
}

double fd_tensor_err(fd_opts *o, mega_real *val, const mega_real *grad, size_t n, double floor_) {
    const int sample = o->sample_above > 0 && n > o->sample_above;
    const size_t m = sample ? o->samples : n;
    double d = 0, mx = floor_;
    for (size_t q = 0; q < m; q++) {
        const size_t i = sample ? (size_t)(tl_rand01(&o->seed) * (double)n) % n : q;
        const double fd = fd_derivative(o, val + i), e = fabs((double)grad[i] - fd);
        if (!(e <= d)) d = e; /* NaN propagates */
        mx = fmax(mx, fmax(fabs((double)grad[i]), fabs(fd)));
    }
    return mx > 0 ? d / mx : d;
}

double fd_directional(fd_opts *o, mega_real *val, const mega_real *grad, size_t n, const uint8_t *mask) {
    double *v = calloc(n, sizeof *v);
    mega_real *save = malloc(n * sizeof *save);
    double nv = 0, ng = 0, dot = 0, L[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++)
        if (!mask || mask[i]) v[i] = tl_randn(&o->seed);
    for (size_t i = 0; i < n; i++) nv += v[i] * v[i], ng += (v[i] != 0) * grad[i] * grad[i], dot += grad[i] * v[i];
    nv = sqrt(nv), ng = sqrt(ng);
    memcpy(save, val, n * sizeof *save);
    for (int k = 0; k < 4; k++) {
        if (o->two_point && (k == 0 || k == 3)) continue;
        const double s = KS[k] * step_of(o) / nv;
        for (size_t i = 0; i < n; i++) val[i] = (mega_real)(save[i] + s * v[i]);
        L[k] = o->loss(o->arg);
    }
    memcpy(val, save, n * sizeof *save);
    free(v), free(save);
    return fabs(combine(o, L) - dot / nv) / fmax(ng, 1e-300);
}
