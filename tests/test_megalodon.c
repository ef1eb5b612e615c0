/*
 * Megalodon parity: the complex EMA (src/layers/cema.c), the timestep norm (src/layers/tsnorm.c)
 * the inner attention (src/layers/mgattn.c), the whole layer (src/layers/mglayer.c) and the model (the megalodon
 * mixer, src/layers/megalodon.c, in the language model: blocks, final timestep norm, tied head) against the official modules' values in
 * tests/fixtures/megalodon (written by tests/ref/ref_megalodon.py, which runs the official
 * MultiHeadComplexEMA, TimestepNorm, _InnerAttention and MovingAverageGatedAttention on the CPU in float64; gradients by
 * autograd). Forward, final states, decoding and every gradient; relative to each tensor's
 * largest magnitude, 1e-4 in the float build and 1e-9 in the double build (build/t64_megalodon).
 */
#include "fixtures_common.h"
#include "layers/cema.h"
#include "layers/mgattn.h"
#include "layers/mglayer.h"
#include "layers/tsnorm.h"
#include "model/lm.h"
#include <stdlib.h>
#include <string.h>

#define ROOT "tests/fixtures/megalodon"

static mega_real *need(fx_case *c, const char *name, size_t n) {
    size_t got = 0;
    mega_real *t = fx_tensor(c, name, &got);
    if (!t || got != n) {
        printf("FAIL %s: tensor %s missing or of size %zu (want %zu)\n", c->name, name, got, n);
        c->failed = 1;
        free(t);
        return calloc(n ? n : 1, sizeof(mega_real));
    }
    return t;
}

static void cmp(fx_case *c, const char *what, const mega_real *got, size_t n) {
    mega_real *ref = need(c, what, n);
    fx_compare(c, what, got, ref, n, 0);
    free(ref);
}

static int load_weights(fx_case *c, mega_params *P) {
    if (mega_params_alloc(P, 1) || mega_params_load(P, P->data, c->w, "", NULL, 0)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        return -1;
    }
    return 0;
}

static void run_cema(fx_case *c) {
    const int D = fx_cfg_int(c, "dim", 0), N = fx_cfg_int(c, "ndim", 0), B = c->B, T = c->T;
    mega_params P;
    mega_cema e;
    mega_params_init(&P);
    if (mega_cema_declare(&e, &P, "cema.", D, N) || load_weights(c, &P)) {
        c->failed = 1;
        mega_params_free(&P);
        return;
    }
    const size_t R = (size_t)B * T * D, S = (size_t)B * mega_cema_state_size(&e);
    mega_real *x = need(c, "x", R), *h0 = need(c, "h0", S), *gy = need(c, "dout", R);
    mega_real *y = malloc(R * sizeof *y), *hT = malloc(S * sizeof *hT), *dx = malloc(R * sizeof *dx);
    mega_real *dh0 = malloc(S * sizeof *dh0), *coef = malloc(mega_cema_layer_coef_size(&e) * sizeof *coef);
    mega_real *scratch = malloc(mega_cema_layer_scratch(&e) * sizeof *scratch);
    const char *pn[] = {"alpha", "delta", "theta", "gamma", "omega"};
    const size_t po[] = {e.alpha, e.delta, e.theta, e.gamma, e.omega};
    const size_t pc[] = {(size_t)D * N, (size_t)D * N, (size_t)D, 2 * (size_t)D * N, (size_t)D};
    for (int with_h0 = 0; with_h0 < 2; with_h0++) {
        const char *sfx = with_h0 ? "_h0" : "";
        char name[64];
        mega_cema_layer_forward(&e, P.data, coef, y, x, B, T, with_h0 ? h0 : NULL, hT);
        snprintf(name, sizeof name, "out%s", sfx), cmp(c, name, y, R);
        snprintf(name, sizeof name, "hT%s", sfx), cmp(c, name, hT, S);
        mega_params_zero_grad(&P);
        memset(dx, 0, R * sizeof *dx);
        mega_cema_layer_backward(&e, P.data, P.grad, coef, dx, gy, x, B, T, with_h0 ? h0 : NULL, dh0, scratch);
        snprintf(name, sizeof name, "grad%s.x", sfx), cmp(c, name, dx, R);
        if (with_h0) cmp(c, "grad_h0.h0", dh0, S);
        for (int p = 0; p < 5; p++) snprintf(name, sizeof name, "grad%s.%s", sfx, pn[p]), cmp(c, name, P.grad + po[p], pc[p]);
    }
    free(x), free(h0), free(gy), free(y), free(hT), free(dx), free(dh0), free(coef), free(scratch);
    mega_params_free(&P);
}

static void run_tsnorm(fx_case *c) {
    const int D = fx_cfg_int(c, "dim", 0), G = fx_cfg_int(c, "groups", 0), B = c->B, T = c->T;
    mega_params P;
    mega_tsnorm n;
    mega_params_init(&P);
    if (B > 16 || mega_tsnorm_declare(&n, &P, "norm.", D, G, fx_cfg_num(c, "eps", 1e-5)) || load_weights(c, &P)) {
        c->failed = 1;
        mega_params_free(&P);
        return;
    }
    const size_t R = (size_t)B * T * D, SG = (size_t)B * G;
    mega_real *x = need(c, "x", R), *gy = need(c, "dout", R), *pm = need(c, "prev_mean", SG);
    mega_real *pv = need(c, "prev_var", SG), *dm = need(c, "dmean", SG), *dv = need(c, "dvar", SG);
    int32_t *pc = fx_ints(c, "prev_count", NULL), *cnt_ref = fx_ints(c, "count", NULL);
    uint8_t *pad = mega_st_get(c->io, "padding_mask") ? fx_mask(c, "padding_mask", (size_t)B * T) : NULL;
    mega_real *y = malloc(R * sizeof *y), *dx = calloc(R, sizeof *dx), *mv = malloc(2 * SG * sizeof *mv);
    mega_real *gmv = malloc(2 * SG * sizeof *gmv), *dmv0 = malloc(2 * SG * sizeof *dmv0);
    mega_real *acts = malloc(mega_tsnorm_acts_size(&n, B, T) * sizeof *acts), *tmp = malloc(SG * sizeof *tmp);
    int64_t count[16];
    for (int b = 0; b < B; b++) {
        count[b] = pc ? pc[b] : 0;
        memcpy(mv + (size_t)b * 2 * G, pm + (size_t)b * G, G * sizeof *mv);
        memcpy(mv + (size_t)b * 2 * G + G, pv + (size_t)b * G, G * sizeof *mv);
        memcpy(gmv + (size_t)b * 2 * G, dm + (size_t)b * G, G * sizeof *mv);
        memcpy(gmv + (size_t)b * 2 * G + G, dv + (size_t)b * G, G * sizeof *mv);
    }
    mega_tsnorm_state s = {count, mv};
    mega_tsnorm_acts a = mega_tsnorm_acts_at(&n, acts, B, T);
    mega_tsnorm_forward(&n, P.data, y, x, pad, B, T, &s, &a);
    cmp(c, "out", y, R);
    for (int half = 0; half < 2; half++) { /* final means, then variances, as [B, G] */
        for (int b = 0; b < B; b++) memcpy(tmp + (size_t)b * G, mv + (size_t)b * 2 * G + half * G, G * sizeof *tmp);
        cmp(c, half ? "var" : "mean", tmp, SG);
    }
    int cnt_ok = cnt_ref != NULL;
    for (int b = 0; cnt_ok && b < B; b++) cnt_ok = count[b] == cnt_ref[b];
    TL_CHECK(cnt_ok, "%s: final counts equal the official ones", c->name);
    mega_params_zero_grad(&P);
    mega_tsnorm_backward(&n, P.data, P.grad, dx, gy, x, pad, B, T, &a, gmv, dmv0);
    cmp(c, "grad.x", dx, R);
    cmp(c, "grad.weight", P.grad + n.weight, (size_t)D);
    cmp(c, "grad.bias", P.grad + n.bias, (size_t)D);
    if (mega_st_get(c->io, "grad.prev_mean"))
        for (int half = 0; half < 2; half++) {
            for (int b = 0; b < B; b++)
                memcpy(tmp + (size_t)b * G, dmv0 + (size_t)b * 2 * G + half * G, G * sizeof *tmp);
            cmp(c, half ? "grad.prev_var" : "grad.prev_mean", tmp, SG);
        }
    free(x), free(gy), free(pm), free(pv), free(dm), free(dv), free(pc), free(cnt_ref), free(pad), free(y);
    free(dx), free(mv), free(gmv), free(dmv0), free(acts), free(tmp);
    mega_params_free(&P);
}

static void run_attn(fx_case *c) {
    mega_mgattn a = {fx_cfg_int(c, "heads", 0), fx_cfg_int(c, "z_head_dim", 0), fx_cfg_int(c, "v_head_dim", 0),
                     fx_cfg_int(c, "chunk_size", 0), fx_cfg_num(c, "rope_base", 10000)};
    const int B = c->B, T = c->T, HZ = a.H * a.Z, HE = a.H * a.E;
    if (a.H < 1 || a.Z < 2 || a.Z % 2 || a.Z > 64 || a.E < 1 || a.C < 1 || B < 1 || T < 1) {
        printf("FAIL %s: bad config\n", c->name);
        c->failed = 1;
        return;
    }
    const size_t RZ = (size_t)B * T * HZ, RE = (size_t)B * T * HE;
    mega_real *q = need(c, "q", RZ), *k = need(c, "k", RZ), *v = need(c, "v", RE), *gy = need(c, "dout", RE);
    mega_real *O = malloc(RE * sizeof *O), *dq = calloc(RZ, sizeof *dq), *dk = calloc(RZ, sizeof *dk);
    mega_real *dv = calloc(RE, sizeof *dv), *acts = malloc(mega_mgattn_acts_size(&a, B, T) * sizeof *acts);
    mega_real *scratch = malloc(mega_mgattn_scratch(&a, T, 1) * sizeof *scratch);
    mega_real *cache = malloc((size_t)B * mega_mgattn_cache_size(&a) * sizeof *cache), *w = malloc(a.C * sizeof *w);
    mega_real *dec = malloc(RE * sizeof *dec), *qs = malloc((size_t)B * HZ * sizeof *qs);
    mega_real *ks = malloc((size_t)B * HZ * sizeof *ks), *vs = malloc((size_t)B * HE * sizeof *vs);
    mega_real *os = malloc((size_t)B * HE * sizeof *os);
    mega_mgattn_forward(&a, O, q, k, v, B, T, 0, 0, acts, scratch, 1);
    cmp(c, "out", O, RE);
    mega_mgattn_backward(&a, dq, dk, dv, gy, v, B, T, 0, 0, acts, scratch, 1);
    cmp(c, "grad.q", dq, RZ), cmp(c, "grad.k", dk, RZ), cmp(c, "grad.v", dv, RE);
    for (int t = 0; t < T; t++) { /* the official cached decode, token by token */
        for (int b = 0; b < B; b++) {
            memcpy(qs + (size_t)b * HZ, q + ((size_t)b * T + t) * HZ, HZ * sizeof *qs);
            memcpy(ks + (size_t)b * HZ, k + ((size_t)b * T + t) * HZ, HZ * sizeof *ks);
            memcpy(vs + (size_t)b * HE, v + ((size_t)b * T + t) * HE, HE * sizeof *vs);
        }
        mega_mgattn_step(&a, os, qs, ks, vs, B, t, NULL, cache, w);
        for (int b = 0; b < B; b++) memcpy(dec + ((size_t)b * T + t) * HE, os + (size_t)b * HE, HE * sizeof *os);
    }
    cmp(c, "decode.out", dec, RE);
    free(q), free(k), free(v), free(gy), free(O), free(dq), free(dk), free(dv), free(acts), free(scratch);
    free(cache), free(w), free(dec), free(qs), free(ks), free(vs), free(os);
}

static void run_layer(fx_case *c) {
    const int D = fx_cfg_int(c, "dim", 0), G = fx_cfg_int(c, "groups", 0), B = c->B, T = c->T;
    mega_params P;
    mega_mglayer L;
    mega_params_init(&P);
    if (B > 16 ||
        mega_mglayer_declare(&L, &P, "", D, fx_cfg_int(c, "zdim", 0), fx_cfg_int(c, "hdim", 0), fx_cfg_int(c, "heads", 0),
                             fx_cfg_int(c, "ndim", 0), G, fx_cfg_int(c, "chunk_size", 0), fx_cfg_num(c, "eps", 1e-5),
                             fx_cfg_num(c, "rope_base", 10000)) ||
        load_weights(c, &P)) {
        c->failed = 1;
        mega_params_free(&P);
        return;
    }
    const size_t R = (size_t)B * T * D;
    mega_real *x = need(c, "x", R), *gy = need(c, "dout", R), *y = malloc(R * sizeof *y), *dx = calloc(R, sizeof *dx);
    mega_real *acts = malloc(mega_mglayer_acts_size(&L, B, T) * sizeof *acts);
    mega_real *scratch = malloc(mega_mglayer_scratch(&L, B, T) * sizeof *scratch), *mv = malloc((size_t)B * 2 * G * sizeof *mv);
    int64_t count[16];
    mega_tsnorm_state s = {count, mv};
    mega_tsnorm_state_prior(&L.tn, P.data, &s, B);
    mega_mglayer_forward(&L, P.data, y, x, B, T, &s, NULL, NULL, acts, scratch);
    cmp(c, "out", y, R);
    mega_params_zero_grad(&P);
    mega_mglayer_backward(&L, P.data, P.grad, dx, gy, x, B, T, NULL, NULL, acts, scratch);
    cmp(c, "dx", dx, R);
    fx_compare_grads(c, &P, ""); /* every parameter has its grad.<name>, and no other grad.* exists */
    free(x), free(gy), free(y), free(dx), free(acts), free(scratch), free(mv);
    mega_params_free(&P);
}

/* the whole model through the language model with the megalodon mixer: logits, the mean
 * cross-entropy, every parameter's gradient */
static void run_model(fx_case *c) {
    const int B = c->B, T = c->T, V = fx_cfg_int(c, "vocab", 0);
    mega_lm_config cf;
    mega_lm_config_default(&cf);
    cf.vocab_size = V, cf.padding_idx = -1, cf.layers = fx_cfg_int(c, "layers", 0);
    cf.scale_embedding = 1, cf.tie_embeddings = 1;
    mega_block_config *b = &cf.block;
    b->mixer = MEGA_MIXER_MEGALODON, b->embed_dim = fx_cfg_int(c, "dim", 0), b->z_dim = fx_cfg_int(c, "zdim", 0);
    b->hidden_dim = fx_cfg_int(c, "hdim", 0), b->heads = fx_cfg_int(c, "heads", 0), b->n_dim = fx_cfg_int(c, "ndim", 0);
    b->norm_num_groups = fx_cfg_int(c, "groups", 0), b->chunk_size = fx_cfg_int(c, "chunk_size", 0);
    b->ffn_dim = fx_cfg_int(c, "ffn_dim", 0), b->swiglu = fx_cfg_int(c, "swiglu", 0);
    b->rescale_nffn = fx_cfg_int(c, "rescale", 0);
    const mega_load_opts o = {0, 1};
    char wp[1200];
    snprintf(wp, sizeof wp, "%s/weights.safetensors", c->dir);
    mega_lm *m = NULL;
    if (mega_lm_create_ex(&cf, &o, &m) || mega_lm_load_weights(m, wp)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
        mega_lm_free(m);
        return;
    }
    const size_t R = (size_t)B * T;
    mega_real *tk = need(c, "tokens", R), *tg = need(c, "targets", R), *ref_loss = need(c, "loss", 1);
    int32_t *tok = malloc(R * sizeof *tok), *tgt = malloc(R * sizeof *tgt);
    for (size_t i = 0; i < R; i++) tok[i] = (int32_t)tk[i], tgt[i] = (int32_t)tg[i];
    const mega_lm_run run = {1, 0};
    double loss = 0;
    if (mega_lm_forward(m, tok, tgt, B, T, &run, &loss, NULL)) {
        printf("FAIL %s: %s\n", c->name, mega_last_error());
        c->failed = 1;
    } else {
        cmp(c, "out", mega_lm_logits(m), R * (size_t)V);
        const mega_real lv = (mega_real)loss;
        fx_compare(c, "loss", &lv, ref_loss, 1, 0);
        mega_lm_zero_grad(m);
        mega_lm_backward(m, 1.0);
        fx_compare_grads(c, &m->P, "");
    }
    free(tk), free(tg), free(ref_loss), free(tok), free(tgt);
    mega_lm_free(m);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    static char names[64][1024];
    const int n = fx_list(ROOT, names, 64);
    TL_CHECK(n >= 11, "found the Megalodon fixture cases in " ROOT " (%d)", n);
    for (int i = 0; i < n; i++) {
        fx_case c;
        if (fx_open(&c, names[i])) {
            tl_check(0, "%s opens", names[i]);
            continue;
        }
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(c.json, "kind");
        const char *kind = cJSON_IsString(k) ? k->valuestring : "";
        if (!strcmp(kind, "cema"))
            run_cema(&c);
        else if (!strcmp(kind, "tsnorm"))
            run_tsnorm(&c);
        else if (!strcmp(kind, "attn"))
            run_attn(&c);
        else if (!strcmp(kind, "layer"))
            run_layer(&c);
        else if (!strcmp(kind, "model"))
            run_model(&c);
        else
            printf("FAIL %s: unknown kind '%s'\n", c.name, kind), c.failed = 1;
        tl_check(!c.failed, "%s: forward, states and gradients match the official values (worst rel %.2e at %s)",
                 c.name, c.worst, c.worst_name);
        fx_close(&c);
    }
    return tl_finish();
}
