/*
 * Megalodon's inner attention (src/layers/mgattn.c) in double precision:
 *  - against a direct evaluation written here: rotary of interleaved pairs at position t mod C,
 *    unscaled scores, causal softmax inside each chunk only;
 *  - the decode step (cache of the current chunk only) token by token across chunk boundaries
 *    against the full forward;
 *  - the gradients of q, k, v against central finite differences.
 */
#include "layers/mgattn.h"
#include "fd.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_seed = 0x3a77e11ull;

typedef struct {
    mega_mgattn a;
    int B, T;
    double *q, *k, *v, *O, *gO, *acts, *scratch, *dq, *dk, *dv;
} fx;

static double loss_fn(void *arg) {
    fx *f = arg;
    mega_mgattn_forward(&f->a, f->O, f->q, f->k, f->v, f->B, f->T, 0, 0, f->acts, f->scratch, 1);
    double s = 0;
    for (size_t i = 0; i < (size_t)f->B * f->T * f->a.H * f->a.E; i++) s += f->gO[i] * f->O[i];
    return s;
}

static void rot(const mega_mgattn *a, const double *x, double *y, int pos) {
    for (int i = 0; i < a->Z / 2; i++) {
        double th = pos * pow(a->rope_base, -2.0 * i / a->Z), c = cos(th), s = sin(th);
        y[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
        y[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c;
    }
}

static double direct_err(fx *f) {
    const mega_mgattn *a = &f->a;
    const int H = a->H, Z = a->Z, E = a->E, T = f->T, HZ = H * Z, HE = H * E;
    loss_fn(f);
    double worst = 0, mx = 0, qr[64], kr[64], w[64];
    for (int b = 0; b < f->B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const int c0 = t / a->C * a->C;
                rot(a, f->q + ((size_t)b * T + t) * HZ + h * Z, qr, t % a->C);
                double m = -INFINITY, sum = 0;
                for (int s = c0; s <= t; s++) {
                    rot(a, f->k + ((size_t)b * T + s) * HZ + h * Z, kr, s % a->C);
                    double d = 0;
                    for (int i = 0; i < Z; i++) d += qr[i] * kr[i];
                    w[s - c0] = d, m = fmax(m, d);
                }
                for (int s = c0; s <= t; s++) sum += (w[s - c0] = exp(w[s - c0] - m));
                for (int e = 0; e < E; e++) {
                    double o = 0;
                    for (int s = c0; s <= t; s++) o += w[s - c0] / sum * f->v[((size_t)b * T + s) * HE + h * E + e];
                    worst = fmax(worst, fabs(o - f->O[((size_t)b * T + t) * HE + h * E + e]));
                    mx = fmax(mx, fabs(o));
                }
            }
    return worst / fmax(mx, 1.0);
}

static double step_err(fx *f) {
    const mega_mgattn *a = &f->a;
    const int B = f->B, T = f->T, HZ = a->H * a->Z, HE = a->H * a->E;
    loss_fn(f);
    double *cache = malloc((size_t)B * mega_mgattn_cache_size(a) * sizeof(double)), *w = malloc(a->C * sizeof(double));
    double *qs = malloc((size_t)B * HZ * sizeof(double)), *ks = malloc((size_t)B * HZ * sizeof(double));
    double *vs = malloc((size_t)B * HE * sizeof(double)), *os = malloc((size_t)B * HE * sizeof(double));
    double worst = 0;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) {
            memcpy(qs + (size_t)b * HZ, f->q + ((size_t)b * T + t) * HZ, HZ * sizeof(double));
            memcpy(ks + (size_t)b * HZ, f->k + ((size_t)b * T + t) * HZ, HZ * sizeof(double));
            memcpy(vs + (size_t)b * HE, f->v + ((size_t)b * T + t) * HE, HE * sizeof(double));
        }
        mega_mgattn_step(a, os, qs, ks, vs, B, t, NULL, cache, w);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < HE; i++) worst = fmax(worst, fabs(os[(size_t)b * HE + i] - f->O[((size_t)b * T + t) * HE + i]));
    }
    free(cache), free(w), free(qs), free(ks), free(vs), free(os);
    return worst;
}

static void run(int H, int Z, int E, int C, int B, int T) {
    fx f;
    memset(&f, 0, sizeof f);
    f.a.H = H, f.a.Z = Z, f.a.E = E, f.a.C = C, f.a.rope_base = 10000, f.B = B, f.T = T;
    const size_t RZ = (size_t)B * T * H * Z, RE = (size_t)B * T * H * E;
    f.q = malloc(RZ * 8), f.k = malloc(RZ * 8), f.v = malloc(RE * 8), f.O = malloc(RE * 8), f.gO = malloc(RE * 8);
    f.dq = calloc(RZ, 8), f.dk = calloc(RZ, 8), f.dv = calloc(RE, 8);
    f.acts = malloc(mega_mgattn_acts_size(&f.a, B, T) * 8), f.scratch = malloc(mega_mgattn_scratch(&f.a, T, 1) * 8);
    for (size_t i = 0; i < RZ; i++) f.q[i] = 0.7 * tl_randn(&g_seed), f.k[i] = 0.7 * tl_randn(&g_seed);
    for (size_t i = 0; i < RE; i++) f.v[i] = tl_randn(&g_seed), f.gO[i] = tl_randn(&g_seed);
    char label[80];
    snprintf(label, sizeof label, "H%d Z%d E%d C%d B%d T%d", H, Z, E, C, B, T);
    double e = direct_err(&f);
    TL_CHECK(e < 1e-12, "%s: forward == direct chunk-local rotary, unscaled causal softmax (rel %.2e)", label, e);
    e = step_err(&f);
    TL_CHECK(e < 1e-12, "%s: decode step with a one-chunk cache == forward (max abs %.2e)", label, e);
    /* start from nonzero gradients: the backward accumulates (what was there stays) */
    for (size_t i = 0; i < RZ; i++) f.dq[i] = 0.25, f.dk[i] = -0.5;
    for (size_t i = 0; i < RE; i++) f.dv[i] = 0.125;
    loss_fn(&f);
    mega_mgattn_backward(&f.a, f.dq, f.dk, f.dv, f.gO, f.v, B, T, 0, 0, f.acts, f.scratch, 1);
    for (size_t i = 0; i < RZ; i++) f.dq[i] -= 0.25, f.dk[i] += 0.5;
    for (size_t i = 0; i < RE; i++) f.dv[i] -= 0.125;
    fd_opts o = {loss_fn, &f, 0, 0, 0, 0, 1};
    e = fd_tensor_err(&o, f.q, f.dq, RZ, 1e-6);
    TL_CHECK(e < 1e-7, "%s: dq vs finite differences (rel %.2e)", label, e);
    e = fd_tensor_err(&o, f.k, f.dk, RZ, 1e-6);
    TL_CHECK(e < 1e-7, "%s: dk vs finite differences (rel %.2e)", label, e);
    e = fd_tensor_err(&o, f.v, f.dv, RE, 1e-6);
    TL_CHECK(e < 1e-7, "%s: dv vs finite differences (rel %.2e)", label, e);
    free(f.q), free(f.k), free(f.v), free(f.O), free(f.gO), free(f.dq), free(f.dk), free(f.dv), free(f.acts);
    free(f.scratch);
}

int main(void) {
    run(2, 4, 3, 4, 2, 12);  /* three whole chunks */
    run(1, 6, 5, 5, 1, 13);  /* a ragged last chunk */
    run(3, 8, 4, 16, 1, 10); /* one chunk longer than the sequence */
    return tl_finish();
}
