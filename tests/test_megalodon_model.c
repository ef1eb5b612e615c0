/*
 * The Megalodon block and the language model built from it (src/layers/megalodon.c, the
 * "megalodon" mixer; docs/megalodon.md §6):
 *
 * 1. The block (layer + normalized FFN with the two-hop residual, SwiGLU, layer scale), training
 *    mode, through the shared drivers of tests/lib/blocktest.h:
 *      - (double build) every element of dL/dx and of every trainable tensor against finite
 *        differences (bt_fd_check: fourth-order stencil, tolerance 1e-6), three random
 *        directional derivatives; all parameters moved off their initial values;
 *      - streaming: mega_block_step token by token, in multi-token pieces and the whole sequence
 *        at once against the full forward (BT_STOL: 1e-12 double, 1e-5 float), reset and
 *        re-stream bit-identical. Sequences span 2-4 chunks with a ragged last chunk, so the
 *        attention cache empties at chunk borders while the timestep norm and the CEMA carry.
 * 2. The language model with this mixer (embedding scale, final norm, tied head): the stream's
 *    logits (mega_lm_stream_feed, one token at a time and in pieces of 3) against the full
 *    forward's, across chunk borders; save then load gives the same logits bit for bit; (double)
 *    every parameter's gradient of the cross-entropy against finite differences.
 *    With dropout (the official sites, mglayer.h and megalodon.c): the block's gradients in training
 *    mode (fixed key) against finite differences (a configuration above with every dropout 0.2);
 *    eval mode with dropout set gives the dropout-0 model's logits bit for bit, training mode with
 *    dropout 0 gives the eval loss bit for bit, with dropout it differs and repeats for one key;
 *    (double) the language model's gradients with dropout against finite differences.
 * 3. The configuration: norm-num-groups resolved and checked, activation-dropout refused with its
 *    message, the other dropouts accepted.
 */
#include "blocktest.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEGA_F64
#define LM_TOL 1e-11
#else
#define LM_TOL 2e-5
#endif

typedef struct {
    int D, Z, E, H, N, F, C, G, T, swiglu, rescale;
    float p; /* dropout, attention and hidden dropout */
} mcfg;

static const mcfg CFGS[] = {
    {8, 4, 6, 1, 3, 10, 4, 2, 10, 0, 0, 0},  /* 2.5 chunks */
    {8, 8, 6, 2, 2, 12, 3, 4, 11, 1, 1, 0},  /* two heads, SwiGLU, layer scale, 3.7 chunks */
    {12, 4, 8, 2, 3, 8, 16, 3, 7, 0, 1, 0},  /* one chunk longer than the sequence */
    {6, 4, 4, 1, 2, 6, 5, 1, 13, 1, 0, 0},   /* one norm group */
    {8, 8, 6, 2, 2, 12, 3, 4, 11, 1, 1, 0.2f}, /* every dropout 0.2 */
};
#define NCFG ((int)(sizeof CFGS / sizeof CFGS[0]))

static void fill(mega_block_config *c, const mcfg *m) {
    mega_block_config_default(c);
    c->mixer = MEGA_MIXER_MEGALODON;
    c->embed_dim = m->D, c->z_dim = m->Z, c->hidden_dim = m->E, c->heads = m->H, c->n_dim = m->N;
    c->ffn_dim = m->F, c->chunk_size = m->C, c->norm_num_groups = m->G, c->swiglu = m->swiglu;
    c->rescale_nffn = m->rescale;
    c->dropout = c->attention_dropout = c->hidden_dropout = m->p;
}

#ifdef MEGA_F64
static bt_worst g_fd, g_dir;
#endif
static bt_worst g_stream;

static void run_block(int i) {
    mega_block_config cfg;
    fill(&cfg, &CFGS[i]);
    const bt_opts o = {.B = 2, .T = CFGS[i].T, .seed = 700 + (uint64_t)i, .nthreads = 1, .prefix = "decoder.layers.1."};
    bt_ctx c;
#ifdef MEGA_F64
    if (bt_open(&c, &cfg, &o)) return;
    const bt_fd_opts fo = {.entries = 1, .directional = 1, .sample_above = 600, .samples = 250, .worst = &g_fd,
                           .worst_dir = &g_dir};
    bt_fd_check(&c, &fo);
    bt_close(&c);
#endif
    if (bt_open(&c, &cfg, &o)) return;
    const bt_stream_opts so = {.cap = CFGS[i].C, .worst = &g_stream};
    bt_stream_check(&c, &so);
    bt_close(&c);
}

/* ---- 2. the language model -------------------------------------------------------------- */
static mega_lm *lm_new(int swiglu, float p) {
    mega_lm_config c;
    mega_lm_config_default(&c);
    c.vocab_size = 23, c.padding_idx = -1, c.layers = 2, c.tie_embeddings = 1, c.scale_embedding = 1;
    fill(&c.block, &CFGS[1]);
    c.block.swiglu = swiglu;
    c.block.dropout = c.block.attention_dropout = c.block.hidden_dropout = p;
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m)) {
        tl_check(0, "megalodon lm: create: %s", mega_last_error());
        return NULL;
    }
    mega_lm_init_params(m, 5);
    unsigned long long seed = 17;
    /* move every trainable tensor off its initial value (norm offsets, gamma, beta start at 0) */
    for (int i = 0; i < mega_lm_tensor_count(m); i++) {
        size_t off, n;
        unsigned fl;
        const char *nm = mega_lm_tensor_info(m, i, &off, &n, &fl);
        if (fl & 2 || strstr(nm, "cema.")) continue;
        for (size_t j = 0; j < n; j++) mega_lm_params(m)[off + j] += (mega_real)(0.2 * tl_randn(&seed));
    }
    return m;
}

typedef struct {
    mega_lm *m;
    const int32_t *tok, *tgt;
    int B, T;
} lm_arg;

#ifdef MEGA_F64
static double lm_loss(void *p) {
    lm_arg *a = p;
    double l = 0;
    mega_lm_run run = {1, 7};
    mega_lm_forward(a->m, a->tok, a->tgt, a->B, a->T, &run, &l, NULL);
    return l;
}
#endif

#ifdef MEGA_F64
/* every parameter's gradient of the cross-entropy (training mode, key 7) against finite differences */
static void lm_fd(mega_lm *m, const int32_t *tok, const int32_t *tgt, int B, int T, const char *what) {
    lm_arg arg = {m, tok, tgt, B, T};
    const double l0 = lm_loss(&arg);
    mega_lm_zero_grad(m);
    mega_lm_backward(m, 1.0);
    const size_t P = mega_lm_param_total(m);
    mega_real *grad = malloc(P * sizeof(mega_real));
    memcpy(grad, mega_lm_grads(m), P * sizeof(mega_real));
    fd_opts o = {lm_loss, &arg, 0, 0, 200, 60, 77};
    double gmax = 0, worst = 0;
    const char *wn = "";
    for (size_t i = 0; i < P; i++) gmax = fmax(gmax, fabs(grad[i]));
    int nt = 0;
    for (int i = 0; i < mega_lm_tensor_count(m); i++) {
        size_t off, n;
        unsigned fl;
        const char *nm = mega_lm_tensor_info(m, i, &off, &n, &fl);
        if (fl & 2) continue;
        nt++;
        const double e = fd_tensor_err(&o, mega_lm_params(m) + off, grad + off, n, 1e-3 * gmax);
        if (!(e <= worst)) worst = e, wn = nm;
    }
    const double dird = fd_directional(&o, mega_lm_params(m), grad, P, NULL);
    TL_CHECK(isfinite(l0) && worst < 1e-6 && dird < 1e-6,
             "megalodon lm%s: %d tensors' gradients = finite differences (worst %.2e in %s, directional %.2e)", what,
             nt, worst, wn, dird);
    free(grad);
}
#endif

static void test_lm(void) {
    enum { B = 2, T = 13, V = 23 };
    int32_t tok[B * T], tgt[B * T];
    unsigned long long s = 3;
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(tl_rand01(&s) * V) % V, tgt[i] = (int32_t)(tl_rand01(&s) * V) % V;
    mega_lm *m = lm_new(1, 0);
    if (!m) return;
    mega_lm_run ev = {0, 0};
    mega_real *full = malloc(sizeof(mega_real) * B * T * V), *st = malloc(sizeof(mega_real) * B * T * V);
    mega_real *out = malloc(sizeof(mega_real) * B * 3 * V);
    mega_status rc = mega_lm_forward(m, tok, NULL, B, T, &ev, NULL, NULL);
    TL_CHECK(rc == MEGA_OK, "megalodon lm: forward (%s)", rc ? mega_last_error() : "");
    memcpy(full, mega_lm_logits(m), sizeof(mega_real) * B * T * V);
    for (int piece = 1; piece <= 3; piece += 2) {
        mega_lm_stream *S = NULL;
        rc = mega_lm_stream_new(m, B, 3, &S);
        TL_CHECK(rc == MEGA_OK, "megalodon lm: stream (%s)", rc ? mega_last_error() : "");
        if (rc) break;
        for (int t = 0; t < T; t += piece) {
            const int n = t + piece <= T ? piece : T - t;
            int32_t in[B * 3];
            for (int b = 0; b < B; b++)
                for (int k = 0; k < n; k++) in[b * n + k] = tok[b * T + t + k];
            if (mega_lm_stream_feed(S, in, n, out)) {
                tl_check(0, "megalodon lm: feed: %s", mega_last_error());
                break;
            }
            for (int b = 0; b < B; b++)
                memcpy(st + ((size_t)b * T + t) * V, out + (size_t)b * n * V, sizeof(mega_real) * n * V);
        }
        mega_lm_stream_free(S);
        const double e = bt_rel_diff(st, full, (size_t)B * T * V);
        TL_CHECK(e < LM_TOL, "megalodon lm: streamed logits (pieces of %d, chunk 3, T 13) = full forward (rel %.2e)",
                 piece, e);
    }
    /* save / load */
    char dir[256], path[512];
    if (tl_mkdtemp(dir, sizeof dir, "mgl")) return;
    snprintf(path, sizeof path, "%s/mgl.safetensors", dir);
    mega_lm *h = NULL;
    double ld = 1;
    if (!mega_lm_save(m, path) && !mega_lm_load(path, &h) && !mega_lm_forward(h, tok, NULL, B, T, &ev, NULL, NULL))
        ld = bt_rel_diff(mega_lm_logits(h), full, (size_t)B * T * V);
    TL_CHECK(ld == 0, "megalodon lm: save/load gives the same logits (rel %.2e)", ld);
    mega_lm_free(h);
    tl_rm_rf(dir);
#ifdef MEGA_F64
    lm_fd(m, tok, tgt, B, T, "");
#else
    (void)tgt;
#endif
    free(full), free(st), free(out);
    mega_lm_free(m);
}


/* dropout: eval ignores it, training with dropout 0 is the eval computation, with dropout the
 * loss changes and is a function of the key; (double) its gradients */
static void test_lm_dropout(void) {
    enum { B = 2, T = 13, V = 23 };
    int32_t tok[B * T], tgt[B * T];
    unsigned long long s = 9;
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(tl_rand01(&s) * V) % V, tgt[i] = (int32_t)(tl_rand01(&s) * V) % V;
    mega_lm *m0 = lm_new(0, 0), *m1 = lm_new(0, 0.2f);
    if (!m0 || !m1) {
        mega_lm_free(m0), mega_lm_free(m1);
        return;
    }
    mega_lm_run ev = {0, 0}, tr = {1, 7}, tr2 = {1, 8};
    double le0 = 0, le1 = 0, lt0 = 0, lt1 = 0, lt1b = 0, lt1k = 0;
    mega_lm_forward(m0, tok, tgt, B, T, &ev, &le0, NULL);
    mega_lm_forward(m1, tok, tgt, B, T, &ev, &le1, NULL);
    const double dl = bt_rel_diff(mega_lm_logits(m1), mega_lm_logits(m0), (size_t)B * T * V);
    TL_CHECK(dl == 0 && le0 == le1, "megalodon lm: eval with dropout 0.2 = dropout 0, bit for bit (rel %.2e)", dl);
    mega_lm_forward(m0, tok, tgt, B, T, &tr, &lt0, NULL);
    TL_CHECK(lt0 == le0, "megalodon lm: training mode with dropout 0 = eval (%.17g %.17g)", lt0, le0);
    mega_lm_forward(m1, tok, tgt, B, T, &tr, &lt1, NULL);
    mega_lm_forward(m1, tok, tgt, B, T, &tr2, &lt1k, NULL);
    mega_lm_forward(m1, tok, tgt, B, T, &tr, &lt1b, NULL);
    TL_CHECK(isfinite(lt1) && lt1 != le1 && lt1k != lt1 && lt1b == lt1,
             "megalodon lm: training with dropout differs from eval (%.6f, %.6f), from another key (%.6f), repeats "
             "for one key", lt1, le1, lt1k);
#ifdef MEGA_F64
    lm_fd(m1, tok, tgt, B, T, " with dropout 0.2");
#endif
    mega_lm_free(m0), mega_lm_free(m1);
}

/* ---- 3. configuration ---------------------------------------------------------------------- */
static void test_config(void) {
    mega_block_config c;
    fill(&c, &CFGS[0]);
    c.embed_dim = 128, c.norm_num_groups = 0;
    mega_block_config_resolve(&c);
    TL_CHECK(c.norm_num_groups == 32 && c.heads == 1, "defaults: 32 norm groups at width 128 (%d), 1 head (%d)",
             c.norm_num_groups, c.heads);
    c.embed_dim = 16, c.norm_num_groups = 0;
    mega_block_config_resolve(&c);
    TL_CHECK(c.norm_num_groups == 4, "width 16: 4 groups of 4 features (%d)", c.norm_num_groups);
    fill(&c, &CFGS[0]);
    c.norm_num_groups = 3;
    TL_CHECK(mega_block_config_check(&c) != MEGA_OK && strstr(mega_last_error(), "norm-num-groups"),
             "norm-num-groups not dividing embed-dim is refused (%s)", mega_last_error());
    fill(&c, &CFGS[0]);
    c.activation_dropout = 0.1f;
    TL_CHECK(mega_block_config_check(&c) == MEGA_ERR_UNSUPPORTED && strstr(mega_last_error(), "activation-dropout"),
             "activation-dropout is refused with a message (%s)", mega_last_error());
    fill(&c, &CFGS[0]);
    c.dropout = c.attention_dropout = c.hidden_dropout = 0.1f;
    TL_CHECK(mega_block_config_check(&c) == MEGA_OK, "dropout, attention- and hidden-dropout are accepted");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int i = 0; i < NCFG; i++) run_block(i);
#ifdef MEGA_F64
    TL_CHECK(g_fd.v < BT_FD_TOL, "block: worst finite-difference error %.2e (%s)", g_fd.v, g_fd.where);
    TL_CHECK(g_dir.v < BT_FD_TOL, "block: worst directional error %.2e (%s)", g_dir.v, g_dir.where);
#endif
    TL_CHECK(g_stream.v < BT_STOL, "block: worst streaming error %.2e (%s)", g_stream.v, g_stream.where);
    test_lm();
    test_lm_dropout();
    test_config();
    return tl_finish();
}
