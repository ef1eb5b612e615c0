/*
 * Megalodon's timestep normalization (src/layers/tsnorm.c) in double precision:
 *  - every gradient (input, weight, bias, the initial mean and variance) against central finite
 *    differences of sum(gy * y) + sum(gmv * final state), with padding and a prior count;
 *  - streaming: the forward over pieces of [0, T) with the state carried equals one call;
 *  - from an empty prior, the final (mean, var) are the population moments of each group over
 *    all unpadded steps (computed directly here).
 */
#include "layers/tsnorm.h"
#include "fd.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_seed = 0x75e0a11ull;

typedef struct {
    mega_tsnorm n;
    mega_params P;
    int B, T;
    double *x, *y, *gy, *gmv, *mv0, *mv, *dx, *dmv0, *acts;
    int64_t count0[8], count[8];
    uint8_t *pad;
} fx;

static void setup(fx *f, int D, int G, int B, int T, int with_pad) {
    memset(f, 0, sizeof *f);
    mega_params_init(&f->P);
    if (mega_tsnorm_declare(&f->n, &f->P, "norm.", D, G, 1e-5) || mega_params_alloc(&f->P, 1)) {
        printf("FAIL setup: %s\n", mega_last_error());
        exit(1);
    }
    f->B = B, f->T = T;
    for (int k = 0; k < D; k++)
        f->P.data[f->n.weight + k] = 0.5 * tl_randn(&g_seed), f->P.data[f->n.bias + k] = 0.5 * tl_randn(&g_seed);
    const size_t R = (size_t)B * T * D, S = (size_t)B * 2 * G;
    f->x = malloc(R * sizeof(double)), f->y = malloc(R * sizeof(double)), f->gy = malloc(R * sizeof(double));
    f->dx = malloc(R * sizeof(double));
    f->gmv = malloc(S * sizeof(double)), f->mv0 = malloc(S * sizeof(double)), f->mv = malloc(S * sizeof(double));
    f->dmv0 = malloc(S * sizeof(double));
    f->acts = malloc(mega_tsnorm_acts_size(&f->n, B, T) * sizeof(double));
    f->pad = calloc((size_t)B * T, 1);
    for (size_t i = 0; i < R; i++) f->x[i] = 2 * tl_randn(&g_seed) + 0.3, f->gy[i] = tl_randn(&g_seed);
    for (int b = 0; b < B; b++) {
        f->count0[b] = b % 3 == 1 ? 0 : 2 + b;
        for (int g = 0; g < G; g++) {
            f->mv0[(size_t)b * 2 * G + g] = tl_randn(&g_seed);
            f->mv0[(size_t)b * 2 * G + G + g] = 0.5 + tl_rand01(&g_seed);
        }
        if (with_pad) f->pad[(size_t)b * T + T - 1 - b % 2] = 1, f->pad[(size_t)b * T + 1] = b == 0;
    }
    for (size_t i = 0; i < S; i++) f->gmv[i] = tl_randn(&g_seed);
}

static void teardown(fx *f) {
    free(f->x), free(f->y), free(f->gy), free(f->dx), free(f->gmv), free(f->mv0), free(f->mv), free(f->dmv0);
    free(f->acts), free(f->pad);
    mega_params_free(&f->P);
}

static double run(fx *f, int keep) {
    const size_t S = (size_t)f->B * 2 * f->n.G;
    memcpy(f->mv, f->mv0, S * sizeof(double));
    memcpy(f->count, f->count0, sizeof f->count);
    mega_tsnorm_state s = {f->count, f->mv};
    mega_tsnorm_acts a = mega_tsnorm_acts_at(&f->n, f->acts, f->B, f->T);
    mega_tsnorm_forward(&f->n, f->P.data, f->y, f->x, f->pad, f->B, f->T, &s, keep ? &a : NULL);
    double l = 0;
    for (size_t i = 0; i < (size_t)f->B * f->T * f->n.D; i++) l += f->gy[i] * f->y[i];
    for (size_t i = 0; i < S; i++) l += f->gmv[i] * f->mv[i];
    return l;
}
static double loss_fn(void *arg) { return run(arg, 0); }

static void grad_check(fx *f, const char *label) {
    const size_t R = (size_t)f->B * f->T * f->n.D, S = (size_t)f->B * 2 * f->n.G;
    mega_params_zero_grad(&f->P);
    memset(f->dx, 0, R * sizeof(double));
    run(f, 1);
    mega_tsnorm_acts a = mega_tsnorm_acts_at(&f->n, f->acts, f->B, f->T);
    mega_tsnorm_backward(&f->n, f->P.data, f->P.grad, f->dx, f->gy, f->x, f->pad, f->B, f->T, &a, f->gmv, f->dmv0);
    fd_opts o = {loss_fn, f, 0, 0, 0, 0, 1};
    double e;
    e = fd_tensor_err(&o, f->x, f->dx, R, 1e-6);
    TL_CHECK(e < 1e-7, "%s: dx vs finite differences (rel %.2e)", label, e);
    e = fd_tensor_err(&o, f->P.data + f->n.weight, f->P.grad + f->n.weight, (size_t)f->n.D, 1e-6);
    TL_CHECK(e < 1e-7, "%s: dweight vs finite differences (rel %.2e)", label, e);
    e = fd_tensor_err(&o, f->P.data + f->n.bias, f->P.grad + f->n.bias, (size_t)f->n.D, 1e-6);
    TL_CHECK(e < 1e-7, "%s: dbias vs finite differences (rel %.2e)", label, e);
    e = fd_tensor_err(&o, f->mv0, f->dmv0, S, 1e-6);
    TL_CHECK(e < 1e-7, "%s: d(initial mean, var) vs finite differences (rel %.2e)", label, e);
}

static void stream_check(fx *f, const char *label) {
    const int B = f->B, T = f->T, D = f->n.D;
    const size_t S = (size_t)B * 2 * f->n.G;
    run(f, 0);
    double *ys = malloc((size_t)B * T * D * sizeof(double)), *xs = malloc((size_t)B * T * D * sizeof(double));
    double *mv = malloc(S * sizeof(double));
    uint8_t *ps = malloc((size_t)B * T);
    int64_t cnt[8];
    memcpy(mv, f->mv0, S * sizeof(double));
    memcpy(cnt, f->count0, sizeof cnt);
    mega_tsnorm_state s = {cnt, mv};
    double worst = 0;
    for (int t0 = 0, len = 2; t0 < T; t0 += len, len = len % 3 + 1) {
        const int l = MEGA_MIN(len, T - t0);
        for (int b = 0; b < B; b++) {
            memcpy(xs + (size_t)b * l * D, f->x + ((size_t)b * T + t0) * D, sizeof(double) * l * D);
            memcpy(ps + (size_t)b * l, f->pad + (size_t)b * T + t0, (size_t)l);
        }
        mega_tsnorm_forward(&f->n, f->P.data, ys, xs, ps, B, l, &s, NULL);
        for (int b = 0; b < B; b++)
            for (size_t i = 0; i < (size_t)l * D; i++)
                worst = fmax(worst, fabs(ys[(size_t)b * l * D + i] - f->y[((size_t)b * T + t0) * D + i]));
    }
    for (size_t i = 0; i < S; i++) worst = fmax(worst, fabs(mv[i] - f->mv[i]));
    int cnt_ok = 1;
    for (int b = 0; b < B; b++) cnt_ok &= cnt[b] == f->count[b];
    TL_CHECK(worst < 1e-13 && cnt_ok, "%s: forward over pieces == one call (max abs %.2e, counts %s)", label, worst,
             cnt_ok ? "equal" : "differ");
    free(ys), free(xs), free(mv), free(ps);
}

/* from an empty prior: final (mean, var) == population moments over the unpadded steps */
static void moments_check(fx *f, const char *label) {
    const int B = f->B, T = f->T, D = f->n.D, G = f->n.G, Dg = D / G;
    memset(f->count0, 0, sizeof f->count0);
    run(f, 0);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            double s = 0, s2 = 0;
            long m = 0;
            for (int t = 0; t < T; t++) {
                if (f->pad[(size_t)b * T + t]) continue;
                for (int k = g * Dg; k < (g + 1) * Dg; k++) {
                    double v = f->x[((size_t)b * T + t) * D + k];
                    s += v, s2 += v * v, m++;
                }
            }
            const double mean = s / m, var = s2 / m - mean * mean;
            worst = fmax(worst, fabs(mean - f->mv[(size_t)b * 2 * G + g]));
            worst = fmax(worst, fabs(var - f->mv[(size_t)b * 2 * G + G + g]));
        }
    TL_CHECK(worst < 1e-12, "%s: from an empty prior, final state == population moments (max abs %.2e)", label,
             worst);
}

int main(void) {
    const int shapes[][5] = {{8, 4, 3, 7, 1}, {6, 1, 2, 5, 0}, {5, 5, 2, 6, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *c = shapes[i];
        char label[64];
        snprintf(label, sizeof label, "D%d G%d B%d T%d%s", c[0], c[1], c[2], c[3], c[4] ? " pad" : "");
        fx f;
        setup(&f, c[0], c[1], c[2], c[3], c[4]);
        grad_check(&f, label);
        stream_check(&f, label);
        moments_check(&f, label);
        teardown(&f);
    }
    return tl_finish();
}
