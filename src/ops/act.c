/* Element-wise activations (official fairseq/utils.py get_activation_fn: silu, gelu (exact erf
 * form, as torch F.gelu), relu, linear) and their derivatives. */
#include "ops/ops.h"
#include "ops/vec.h"

#define INV_SQRT2 ((real)0.70710678118654752440)
#define INV_SQRT2PI ((real)0.39894228040143267794)

static void act_forward_range(mega_act a, real *y, const real *x, size_t n) {
    size_t i = 0;
    switch (a) {
    case MEGA_ACT_SILU:
#ifdef MEGA_VEXP /* mega_silu on vectors: the scalar form is one dependent chain per element */
        for (const vf one = vbc(1); i + VL <= n; i += VL) {
            const vf v = vld(x + i);
            vst(y + i, v / (one + vexp(-v)));
        }
#endif
        for (; i < n; i++) y[i] = mega_silu(x[i]);
        break;
    case MEGA_ACT_GELU:
        for (i = 0; i < n; i++) y[i] = (real)0.5 * x[i] * ((real)1 + R_ERF(x[i] * INV_SQRT2));
        break;
    case MEGA_ACT_RELU:
        for (i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
        break;
    case MEGA_ACT_LINEAR:
        if (y != x) memmove(y, x, n * sizeof(real));
        break;
    case MEGA_ACT_SIGMOID:
        for (i = 0; i < n; i++) y[i] = mega_sigmoid(x[i]);
        break;
    case MEGA_ACT_COUNT: break; /* not an activation (configs are checked) */
    }
}

static void act_backward_range(mega_act a, real *dx, const real *dy, const real *x, size_t n) {
    size_t i = 0;
    switch (a) {
    case MEGA_ACT_SILU:
#ifdef MEGA_VEXP /* mega_silu_grad on vectors */
        for (const vf one = vbc(1); i + VL <= n; i += VL) {
            const vf v = vld(x + i), s = one / (one + vexp(-v));
            vst(dx + i, vld(dy + i) * (s * (one + v * (one - s))));
        }
#endif
        for (; i < n; i++) dx[i] = dy[i] * mega_silu_grad(x[i]);
        break;
    case MEGA_ACT_GELU:
        for (i = 0; i < n; i++) {
            real v = x[i];
            real cdf = (real)0.5 * ((real)1 + R_ERF(v * INV_SQRT2));
            real pdf = INV_SQRT2PI * mega_exp((real)-0.5 * v * v);
            dx[i] = dy[i] * (cdf + v * pdf);
        }
        break;
    case MEGA_ACT_RELU:
        for (i = 0; i < n; i++) dx[i] = x[i] > 0 ? dy[i] : 0;
        break;
    case MEGA_ACT_LINEAR:
        if (dx != dy) memmove(dx, dy, n * sizeof(real));
        break;
    case MEGA_ACT_SIGMOID:
        for (i = 0; i < n; i++) {
            real s = mega_sigmoid(x[i]);
            dx[i] = dy[i] * s * ((real)1 - s);
        }
        break;
    case MEGA_ACT_COUNT: break;
    }
}

void mega_act_forward_serial(mega_act a, real *y, const real *x, size_t n) { act_forward_range(a, y, x, n); }

void mega_act_rows(mega_act a, real *y, const real *x, size_t R, size_t n) {
    if (R == 1) { /* its slices are whole vectors (ACT_SLICE): the bits of the loop below */
        mega_act_forward(a, y, x, n);
        return;
    }
    if (R * n <= MEGA_PAR_MIN) { /* no region at all (libgomp allocates one even if() false) */
        for (size_t r = 0; r < R; r++) act_forward_range(a, y + r * n, x + r * n, n);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < R; r++) act_forward_range(a, y + r * n, x + r * n, n);
}

void mega_silu_times(real *out, const real *rows, size_t ld, const real *O, size_t R, size_t D) {
#pragma omp parallel for schedule(static) if (R * D > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        real *o = out + r * D;
        const real *g = O + r * D;
        act_forward_range(MEGA_ACT_SILU, o, rows + r * ld, D);
        for (size_t d = 0; d < D; d++) o[d] *= g[d];
    }
}

void mega_sigmoid_row(real *s, const real *x, size_t n) {
    size_t i = 0;
#ifdef MEGA_VEXP
    for (const vf one = vbc(1); i + VL <= n; i += VL) vst(s + i, one / (one + vexp(-vld(x + i))));
#endif
    for (; i < n; i++) s[i] = mega_sigmoid(x[i]);
}

void mega_silu_times_backward_row(real *da, real *dx, const real *g, const real *a, const real *x, size_t n) {
    for (size_t j0 = 0; j0 < n; j0 += MEGA_SIG_BLOCK) {
        const size_t m = MEGA_MIN(n - j0, (size_t)MEGA_SIG_BLOCK);
        real s[MEGA_SIG_BLOCK];
        mega_sigmoid_row(s, x + j0, m);
        for (size_t j = 0; j < m; j++) {
            const size_t i = j0 + j;
            const real gi = g[i], xi = x[i];
            da[i] = gi * xi * s[j];
            dx[i] = gi * a[i] * mega_silu_grad_s(xi, s[j]);
        }
    }
}

void mega_gate_mix(real *out, const real *u_pre, size_t ld, const real *h, const real *x, size_t R, size_t D) {
#pragma omp parallel for schedule(static) if (R * D > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const real *ur = u_pre + r * ld, *hr = h + r * D, *xr = x + r * D;
        real *o = out + r * D;
        for (size_t j0 = 0; j0 < D; j0 += MEGA_SIG_BLOCK) {
            const size_t n = MEGA_MIN(D - j0, (size_t)MEGA_SIG_BLOCK);
            real u[MEGA_SIG_BLOCK];
            mega_sigmoid_row(u, ur + j0, n); /* vectorised */
            for (size_t j = 0; j < n; j++) o[j0 + j] = xr[j0 + j] + u[j] * (hr[j0 + j] - xr[j0 + j]);
        }
    }
}

void mega_gate_mix_backward(real *dx, real *dh, real *du_pre, size_t ld, const real *g, const real *u_pre, const real *h,
                            const real *x, size_t R, size_t D) {
#pragma omp parallel for schedule(static) if (R * D > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const real *gr = g + r * D, *hr = h + r * D, *xr = x + r * D;
        real *du = du_pre + r * ld, *dxr = dx + r * D, *dhr = dh + r * D;
        mega_sigmoid_row(du, u_pre + r * ld, D); /* u, vectorised; du_pre replaces it below */
        for (size_t j = 0; j < D; j++) {
            const real u = du[j], gj = gr[j];
            du[j] = gj * (hr[j] - xr[j]) * u * ((real)1 - u);
            dxr[j] = gj * ((real)1 - u);
            dhr[j] = gj * u;
        }
    }
}

/* Large activations are split into contiguous slices over the OpenMP team; small ones (the
 * streaming step) run on the calling thread without entering a parallel region at all, because
 * libgomp allocates a team descriptor for every region it enters, even one whose if() is false. */
#define ACT_SLICE 16384

void mega_act_forward(mega_act a, real *y, const real *x, size_t n) {
    if (n <= MEGA_PAR_MIN || a == MEGA_ACT_LINEAR) {
        act_forward_range(a, y, x, n);
        return;
    }
    const long ns = (long)((n + ACT_SLICE - 1) / ACT_SLICE);
#pragma omp parallel for schedule(static)
    for (long s = 0; s < ns; s++) {
        size_t i0 = (size_t)s * ACT_SLICE;
        act_forward_range(a, y + i0, x + i0, MEGA_MIN((size_t)ACT_SLICE, n - i0));
    }
}

void mega_act_backward(mega_act a, real *dx, const real *dy, const real *x, size_t n) {
    if (n <= MEGA_PAR_MIN || a == MEGA_ACT_LINEAR) {
        act_backward_range(a, dx, dy, x, n);
        return;
    }
    const long ns = (long)((n + ACT_SLICE - 1) / ACT_SLICE);
#pragma omp parallel for schedule(static)
    for (long s = 0; s < ns; s++) {
        size_t i0 = (size_t)s * ACT_SLICE;
        act_backward_range(a, dx + i0, dy + i0, x + i0, MEGA_MIN((size_t)ACT_SLICE, n - i0));
    }
}
