/*
 * The complex EMA of Megalodon (src/ops/cema.c through src/layers/cema.h) in double precision:
 *  - against a direct evaluation written here of the official kernel form
 *    (megalodon/csrc/ops/ema_parameters.cc, EMAParametersCPUFwdImpl, and ema_hidden.cc,
 *    EMAHiddenCPUFwdImpl):
 *        k_j = Re sum_n p g q^j,   b_t = Re sum_n g q^{t+1} h0,   y = (k * x) + b + omega x,
 *        h_T = sum_j p q^{T-1-j} x_j + q^T h0
 *    with q^j = exp(j log q), as the official loops compute it;
 *  - the streaming step over any split of [0, T) against one forward call, and one token at a
 *    time (mega_cema_step) bit for bit: the same operations in the same order;
 *  - every gradient (parameters, input, prior state) against central finite differences.
 * Shapes cover a partial channel block (D = 5) and two blocks (D = 21).
 */
#include "layers/cema.h"
#include "fd.h"
#include "testlib.h"
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_seed = 0xce3a5eedull;

typedef struct {
    mega_cema e;
    mega_params P;
    int B, T;
    double *x, *h0, *gy, *y, *hT, *coef, *dx, *dh0, *scratch;
    int use_h0;
} fx;

static void fx_setup(fx *f, int D, int N, int B, int T, int regime) {
    memset(f, 0, sizeof *f);
    mega_params_init(&f->P);
    if (mega_cema_declare(&f->e, &f->P, "cema.", D, N) || mega_params_alloc(&f->P, 1)) {
        printf("FAIL setup: %s\n", mega_last_error());
        exit(1);
    }
    f->B = B, f->T = T;
    double *W = f->P.data;
    for (int i = 0; i < D * N; i++) {
        /* regime 1: decays |q| near 1 (alpha*delta small) */
        W[f->e.alpha + i] = (regime ? -4.0 : 0.0) + tl_randn(&g_seed);
        W[f->e.delta + i] = (regime ? -4.0 : 0.0) + tl_randn(&g_seed);
        W[f->e.gamma + 2 * i] = tl_randn(&g_seed), W[f->e.gamma + 2 * i + 1] = tl_randn(&g_seed);
    }
    for (int d = 0; d < D; d++) W[f->e.theta + d] = 2 * tl_randn(&g_seed), W[f->e.omega + d] = tl_randn(&g_seed);
    size_t R = (size_t)B * T * D, S = (size_t)B * mega_cema_state_size(&f->e);
    f->x = malloc(R * sizeof(double)), f->gy = malloc(R * sizeof(double)), f->y = malloc(R * sizeof(double));
    f->dx = malloc(R * sizeof(double));
    f->h0 = malloc(S * sizeof(double)), f->hT = malloc(S * sizeof(double)), f->dh0 = malloc(S * sizeof(double));
    f->coef = malloc(mega_cema_layer_coef_size(&f->e) * sizeof(double));
    f->scratch = malloc(mega_cema_layer_scratch(&f->e) * sizeof(double));
    for (size_t i = 0; i < R; i++) f->x[i] = tl_randn(&g_seed), f->gy[i] = tl_randn(&g_seed);
    for (size_t i = 0; i < S; i++) f->h0[i] = tl_randn(&g_seed);
}

static void fx_free(fx *f) {
    free(f->x), free(f->gy), free(f->y), free(f->dx), free(f->h0), free(f->hT), free(f->dh0), free(f->coef);
    free(f->scratch);
    mega_params_free(&f->P);
}

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* the official kernel form, directly */
static double direct_err(fx *f, int use_h0) {
    const mega_cema *e = &f->e;
    const int D = e->D, N = e->N, B = f->B, T = f->T;
    const double *W = f->P.data;
    mega_cema_layer_forward(e, W, f->coef, f->y, f->x, B, T, use_h0 ? f->h0 : NULL, f->hT);
    double worst = 0, ymax = 0, hmax = 0;
    for (int d = 0; d < D; d++)
        for (int b = 0; b < B; b++) {
            double complex hT[64];
            for (int t = 0; t < T; t++) {
                double s = W[e->omega + d] * f->x[((size_t)b * T + t) * D + d];
                for (int n = 0; n < N; n++) {
                    size_t i = (size_t)d * N + n;
                    double a = sigm(W[e->alpha + i]), dl = sigm(W[e->delta + i]);
                    double phi = (n + 1) * sigm(W[e->theta + d]) * 2 * M_PI / N;
                    double complex lq = clog((1 - a * dl) * cexp(I * phi));
                    double complex g = (W[e->gamma + 2 * i] + I * W[e->gamma + 2 * i + 1]) / sqrt((double)N);
                    double complex h0 = 0;
                    if (use_h0) {
                        size_t so = (size_t)b * 2 * N * D;
                        h0 = f->h0[so + (size_t)n * D + d] + I * f->h0[so + ((size_t)N + n) * D + d];
                    }
                    for (int j = 0; j <= t; j++)
                        s += creal(a * g * cexp(lq * j)) * f->x[((size_t)b * T + t - j) * D + d];
                    s += creal(g * cexp(lq * (t + 1)) * h0);
                    if (t == T - 1) {
                        double complex h = cexp(lq * T) * h0;
                        for (int j = 0; j < T; j++) h += a * cexp(lq * (T - 1 - j)) * f->x[((size_t)b * T + j) * D + d];
                        hT[n] = h;
                    }
                }
                double err = fabs(s - f->y[((size_t)b * T + t) * D + d]);
                if (err > worst) worst = err;
                if (fabs(s) > ymax) ymax = fabs(s);
            }
            for (int n = 0; n < N; n++) {
                size_t so = (size_t)b * 2 * N * D;
                double er = fabs(creal(hT[n]) - f->hT[so + (size_t)n * D + d]);
                double ei = fabs(cimag(hT[n]) - f->hT[so + ((size_t)N + n) * D + d]);
                if (er > worst) worst = er;
                if (ei > worst) worst = ei;
                hmax = fmax(hmax, cabs(hT[n]));
            }
        }
    return worst / fmax(1.0, fmax(ymax, hmax));
}

/* the step over pieces of [0, T) with the state carried, against one forward call */
/* pieces of 1, 2, 3, 1, ... tokens, or of one token each (single) */
static double split_err(fx *f, int single) {
    const mega_cema *e = &f->e;
    const int D = e->D, B = f->B, T = f->T;
    const size_t S = (size_t)B * mega_cema_state_size(e);
    mega_cema_layer_forward(e, f->P.data, f->coef, f->y, f->x, B, T, f->h0, f->hT);
    double *st = malloc(S * sizeof(double)), *xs = malloc((size_t)B * T * D * sizeof(double));
    double *ys = malloc((size_t)B * T * D * sizeof(double));
    memcpy(st, f->h0, S * sizeof(double));
    double worst = 0;
    for (int t0 = 0, len = 1; t0 < T; t0 += len, len = single ? 1 : len % 3 + 1) {
        int l = MEGA_MIN(len, T - t0);
        for (int b = 0; b < B; b++) memcpy(xs + (size_t)b * l * D, f->x + ((size_t)b * T + t0) * D, sizeof(double) * l * D);
        mega_cema_layer_step(e, f->P.data, f->coef, st, ys, xs, B, l);
        for (int b = 0; b < B; b++)
            for (size_t i = 0; i < (size_t)l * D; i++)
                worst = fmax(worst, fabs(ys[(size_t)b * l * D + i] - f->y[((size_t)b * T + t0) * D + i]));
    }
    for (size_t i = 0; i < S; i++) worst = fmax(worst, fabs(st[i] - f->hT[i]));
    free(st), free(xs), free(ys);
    return worst;
}

static double loss_fn(void *arg) {
    fx *f = arg;
    const size_t R = (size_t)f->B * f->T * f->e.D;
    mega_cema_layer_forward(&f->e, f->P.data, f->coef, f->y, f->x, f->B, f->T, f->use_h0 ? f->h0 : NULL, NULL);
    double s = 0;
    for (size_t i = 0; i < R; i++) s += f->gy[i] * f->y[i];
    return s;
}

static void grad_check(fx *f, int use_h0, const char *label) {
    const mega_cema *e = &f->e;
    const size_t R = (size_t)f->B * f->T * e->D, S = (size_t)f->B * mega_cema_state_size(e);
    f->use_h0 = use_h0;
    mega_params_zero_grad(&f->P);
    memset(f->dx, 0, R * sizeof(double));
    memset(f->dh0, 0, S * sizeof(double));
    loss_fn(f);
    mega_cema_layer_backward(e, f->P.data, f->P.grad, f->coef, f->dx, f->gy, f->x, f->B, f->T,
                             use_h0 ? f->h0 : NULL, use_h0 ? f->dh0 : NULL, f->scratch);
    fd_opts o = {loss_fn, f, 0, 0, 0, 0, 1};
    const char *names[] = {"alpha", "delta", "theta", "gamma", "omega"};
    const size_t offs[] = {e->alpha, e->delta, e->theta, e->gamma, e->omega};
    const size_t cnt[] = {(size_t)e->D * e->N, (size_t)e->D * e->N, (size_t)e->D, 2 * (size_t)e->D * e->N,
                          (size_t)e->D};
    for (int p = 0; p < 5; p++) {
        double err = fd_tensor_err(&o, f->P.data + offs[p], f->P.grad + offs[p], cnt[p], 1e-6);
        TL_CHECK(err < 1e-7, "%s: d%s vs finite differences (rel %.2e)", label, names[p], err);
    }
    double err = fd_tensor_err(&o, f->x, f->dx, R, 1e-6);
    TL_CHECK(err < 1e-7, "%s: dx vs finite differences (rel %.2e)", label, err);
    if (use_h0) {
        err = fd_tensor_err(&o, f->h0, f->dh0, S, 1e-6);
        TL_CHECK(err < 1e-7, "%s: dh0 vs finite differences (rel %.2e)", label, err);
    }
}

int main(void) {
    const int shapes[][5] = {{5, 3, 2, 7, 0}, {21, 4, 2, 9, 1}, {5, 16, 1, 40, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *c = shapes[s];
        char label[64];
        snprintf(label, sizeof label, "D%d N%d B%d T%d%s", c[0], c[1], c[2], c[3], c[4] ? " |q|~1" : "");
        fx f;
        fx_setup(&f, c[0], c[1], c[2], c[3], c[4]);
        double e0 = direct_err(&f, 0), e1 = direct_err(&f, 1);
        TL_CHECK(e0 < 1e-12, "%s: forward and final state == official kernel form, no h0 (rel %.2e)", label, e0);
        TL_CHECK(e1 < 1e-12, "%s: forward and final state == official kernel form, with h0 (rel %.2e)", label, e1);
        double es = split_err(&f, 0), e1t = split_err(&f, 1);
        TL_CHECK(es < 1e-13, "%s: step over pieces == forward (max abs %.2e)", label, es);
        TL_CHECK(e1t == 0, "%s: step one token at a time == forward, bit for bit (max abs %.2e)", label, e1t);
        grad_check(&f, 0, label);
        grad_check(&f, 1, label);
        fx_free(&f);
    }
    return tl_finish();
}
