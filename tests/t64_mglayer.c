/*
 * The Megalodon layer (src/layers/mglayer.c) in double precision: every parameter's gradient and
 * the input's against central finite differences of sum(gy * y) (large tensors on a sample of
 * entries), from the timestep norm's prior with no CEMA prior state, over two and a half chunks;
 * and the streaming step, token by token across chunk boundaries, against the forward.
 */
#include "layers/mglayer.h"
#include "fd.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_seed = 0x6e9a10d0ull;

typedef struct {
    mega_mglayer L;
    mega_params P;
    int B, T;
    double *x, *y, *gy, *dx, *acts, *scratch, *mv;
    int64_t count[4];
} fx;

static double loss_fn(void *arg) {
    fx *f = arg;
    mega_tsnorm_state s = {f->count, f->mv};
    mega_tsnorm_state_prior(&f->L.tn, f->P.data, &s, f->B);
    mega_mglayer_forward(&f->L, f->P.data, f->y, f->x, f->B, f->T, &s, NULL, NULL, f->acts, f->scratch);
    double l = 0;
    for (size_t i = 0; i < (size_t)f->B * f->T * f->L.D; i++) l += f->gy[i] * f->y[i];
    return l;
}

int main(void) {
    fx f;
    memset(&f, 0, sizeof f);
    const int D = 8, Z = 8, E = 6, H = 2, N = 3, G = 4, C = 4, B = 2, T = 10;
    mega_params_init(&f.P);
    if (mega_mglayer_declare(&f.L, &f.P, "", D, Z, E, H, N, G, C, 1e-5, 10000) || mega_params_alloc(&f.P, 1)) {
        printf("FAIL setup: %s\n", mega_last_error());
        return 1;
    }
    f.B = B, f.T = T;
    /* every trainable value random (norm weights, affine terms and biases too) */
    for (int i = 0; i < f.P.n; i++) {
        const mega_pspec *s = &f.P.specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        for (size_t j = 0; j < s->numel; j++) f.P.data[s->offset + j] = 0.4 * tl_randn(&g_seed);
    }
    const size_t R = (size_t)B * T * D;
    f.x = malloc(R * 8), f.y = malloc(R * 8), f.gy = malloc(R * 8), f.dx = calloc(R, 8);
    f.acts = malloc(mega_mglayer_acts_size(&f.L, B, T) * 8), f.scratch = malloc(mega_mglayer_scratch(&f.L, B, T) * 8);
    f.mv = malloc((size_t)B * 2 * G * 8);
    for (size_t i = 0; i < R; i++) f.x[i] = tl_randn(&g_seed) + 0.2, f.gy[i] = tl_randn(&g_seed);
    mega_params_zero_grad(&f.P);
    loss_fn(&f);
    mega_mglayer_backward(&f.L, f.P.data, f.P.grad, f.dx, f.gy, f.x, B, T, NULL, NULL, f.acts, f.scratch);
    fd_opts o = {loss_fn, &f, 0, 0, 24, 24, 1};
    for (int i = 0; i < f.P.n; i++) {
        const mega_pspec *s = &f.P.specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        double e = fd_tensor_err(&o, f.P.data + s->offset, f.P.grad + s->offset, s->numel, 1e-6);
        TL_CHECK(e < 1e-6, "d%s vs finite differences (rel %.2e)", s->name, e);
    }
    double e = fd_tensor_err(&o, f.x, f.dx, R, 1e-6);
    TL_CHECK(e < 1e-6, "dx vs finite differences (rel %.2e)", e);
    /* streaming: token by token with the norm state, the CEMA state and the one-chunk cache */
    loss_fn(&f);
    int64_t cnt[4];
    double *mv = malloc((size_t)B * 2 * G * 8), *h = calloc((size_t)B * 2 * N * D, 8);
    double *cache = malloc((size_t)B * mega_mgattn_cache_size(&f.L.at) * 8);
    double *coef = malloc(mega_cema_layer_coef_size(&f.L.cema) * 8), *work = malloc(mega_mglayer_step_work(&f.L, B) * 8);
    double *xs = malloc((size_t)B * D * 8), *ys = malloc((size_t)B * D * 8), worst = 0;
    mega_tsnorm_state s = {cnt, mv};
    mega_tsnorm_state_prior(&f.L.tn, f.P.data, &s, B);
    mega_cema_layer_coef(&f.L.cema, f.P.data, coef);
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) memcpy(xs + (size_t)b * D, f.x + ((size_t)b * T + t) * D, D * 8);
        mega_mglayer_step(&f.L, f.P.data, coef, ys, xs, B, t, NULL, &s, h, cache, work);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < D; i++) worst = fmax(worst, fabs(ys[(size_t)b * D + i] - f.y[((size_t)b * T + t) * D + i]));
    }
    TL_CHECK(worst < 1e-12, "step token by token over %d chunks of %d == forward (max abs %.2e)", (T + C - 1) / C, C,
             worst);
    free(mv), free(h), free(cache), free(coef), free(work), free(xs), free(ys);
    free(f.x), free(f.y), free(f.gy), free(f.dx), free(f.acts), free(f.scratch), free(f.mv);
    mega_params_free(&f.P);
    return tl_finish();
}
