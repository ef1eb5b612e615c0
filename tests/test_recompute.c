/*
 * Activation recomputation (mega_set_recompute, src/model/stack.c): one forward + backward with
 * MEGA_RECOMPUTE_BLOCKS gives the loss, the gradients and the weights (the batchnorm running
 * statistics are in them: the recomputed forward must not update them again) of
 * MEGA_RECOMPUTE_NONE bit for bit, for every token mixer of the language model (three blocks,
 * dropout on, so each recomputed block must draw its forward's masks), a batchnorm classifier
 * and a two-tower one on ragged batches, and an encoder-decoder; and the memory estimate is that
 * of L - 1 fewer blocks of activations. Each setting gets its own model, created after
 * mega_set_recompute, with the same initialisation.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

enum { B = 3, T = 40, L = 3 };

typedef enum { K_LM, K_CLS, K_S2S } kind;

typedef struct {
    kind k;
    mega_lm_config lm;
    mega_cls_config cls;
    mega_s2s_config s2s;
} model_config;

typedef struct {
    kind k;
    mega_lm *lm;
    mega_cls *cls;
    mega_s2s *s2s;
} model;

static void block(mega_block_config *b, mega_mixer_kind mixer, int chunk, float dropout) {
    b->embed_dim = 16, b->z_dim = 8, b->hidden_dim = 32, b->n_dim = 4, b->ffn_dim = 32;
    b->chunk_size = chunk, b->max_positions = 64, b->mixer = mixer;
    b->dropout = b->attention_dropout = b->hidden_dropout = b->activation_dropout = dropout;
}

static mega_status create(const model_config *c, model *m) {
    memset(m, 0, sizeof *m);
    m->k = c->k;
    return c->k == K_LM ? mega_lm_create(&c->lm, &m->lm) : c->k == K_CLS ? mega_cls_create(&c->cls, &m->cls)
                                                                       : mega_s2s_create(&c->s2s, &m->s2s);
}

static void destroy(model *m) { mega_lm_free(m->lm), mega_cls_free(m->cls), mega_s2s_free(m->s2s); }

static mega_paramset *params(model *m) {
    return m->k == K_LM ? mega_lm_paramset(m->lm) : m->k == K_CLS ? mega_cls_paramset(m->cls) : mega_s2s_paramset(m->s2s);
}

typedef struct {
    int32_t tok[B * T], tgt[B * T], tok2[B * T], len[B], len2[B], lab[B], src[B * T], prev[B * T];
} batch;

static void make_batch(batch *b, int pad) {
    unsigned long long s = 7;
    for (int i = 0; i < B * T; i++) {
        b->tok[i] = (int32_t)(tl_rand01(&s) * 256), b->tgt[i] = (int32_t)(tl_rand01(&s) * 256);
        b->tok2[i] = (int32_t)(tl_rand01(&s) * 256), b->src[i] = (int32_t)(tl_rand01(&s) * 256);
    }
    for (int r = 0; r < B; r++) {
        b->len[r] = T - 7 * r, b->len2[r] = T - 5 * r, b->lab[r] = r % 3;
        for (int t = 0; t < T; t++) {
            const int i = r * T + t;
            b->prev[i] = t == 0 ? 257 : b->tgt[i - 1];
            if (t >= b->len[r]) b->tok[i] = b->src[i] = b->prev[i] = pad, b->tgt[i] = pad;
            if (t >= b->len2[r]) b->tok2[i] = pad;
        }
    }
}

static int step(model *m, const batch *b, double *loss) {
    mega_ps_zero_grad(params(m));
    const mega_lm_run run = {1, 4242};
    mega_status st;
    int64_t cnt;
    if (m->k == K_LM) {
        st = mega_lm_forward(m->lm, b->tok, b->tgt, B, T, &run, loss, &cnt);
        if (st == MEGA_OK) st = mega_lm_backward(m->lm, 1.0);
    } else if (m->k == K_CLS) {
        const mega_cls_input in = {b->tok, NULL, b->len, T}, in2 = {b->tok2, NULL, b->len2, T};
        st = mega_cls_forward(m->cls, &in, mega_cls_get_config(m->cls)->two_tower ? &in2 : NULL, B, b->lab, &run, loss, &cnt);
        if (st == MEGA_OK) st = mega_cls_backward(m->cls, 1.0);
    } else {
        double nll;
        st = mega_s2s_forward(m->s2s, b->src, T, b->prev, b->tgt, T, B, &run, 0.1, loss, &nll, &cnt);
        if (st == MEGA_OK) st = mega_s2s_backward(m->s2s, 1.0);
    }
    if (st != MEGA_OK) fprintf(stderr, "forward/backward: %s\n", mega_last_error());
    return st == MEGA_OK;
}

/* the first tensor whose gradient (or value: running statistics) differs, or NULL */
static const char *first_diff(mega_paramset *a, mega_paramset *b, int grad) {
    for (int i = 0; i < mega_ps_count(a); i++) {
        size_t off, numel;
        unsigned flags;
        const char *name = mega_ps_info(a, i, &off, &numel, &flags);
        const mega_real *x = grad ? mega_ps_grad(a) : mega_ps_data(a), *y = grad ? mega_ps_grad(b) : mega_ps_data(b);
        if (memcmp(x + off, y + off, numel * sizeof(mega_real))) return name;
    }
    return NULL;
}

static void check(const char *what, const model_config *c) {
    model m[2];
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        mega_set_recompute(i ? MEGA_RECOMPUTE_BLOCKS : MEGA_RECOMPUTE_NONE);
        if (create(c, &m[i]) != MEGA_OK) fprintf(stderr, "%s: create: %s\n", what, mega_last_error()), ok = 0;
    }
    mega_set_recompute(MEGA_RECOMPUTE_NONE);
    batch *b = malloc(sizeof *b);
    double loss[2] = {0};
    if (ok && b) {
        make_batch(b, 256);
        for (int i = 0; i < 2 && ok; i++) ok = step(&m[i], b, &loss[i]);
    }
    if (!ok || !b) {
        TL_CHECK(0, "%s: could not run", what);
    } else {
        const char *dg = first_diff(params(&m[0]), params(&m[1]), 1), *dw = first_diff(params(&m[0]), params(&m[1]), 0);
        TL_CHECK(!dg && !dw && loss[0] == loss[1],
                 "%s: loss, gradients and weights with recompute none and blocks equal bit for bit (first differing "
                 "gradient %s, weight %s; loss %.17g %.17g)", what, dg ? dg : "-", dw ? dw : "-", loss[0], loss[1]);
    }
    free(b);
    for (int i = 0; i < 2; i++) destroy(&m[i]);
}

/* the estimate with blocks: L - 1 blocks of activations fewer (mega_lm_memory) */
static void check_memory(void) {
    mega_lm_config c;
    mega_lm_config_default(&c);
    c.layers = L;
    block(&c.block, MEGA_MIXER_MEGA, -1, 0.1f);
    mega_memory none, blocks;
    mega_set_recompute(MEGA_RECOMPUTE_BLOCKS);
    const mega_status st = mega_lm_memory(&c, 1, B, T, &blocks);
    mega_set_recompute(MEGA_RECOMPUTE_NONE);
    TL_CHECK(st == MEGA_OK && mega_lm_memory(&c, 1, B, T, &none) == MEGA_OK && blocks.buffers < none.buffers &&
                 blocks.params == none.params,
             "the memory estimate's buffers are smaller with blocks (%zu < %zu bytes)", blocks.buffers, none.buffers);
    TL_CHECK(!strcmp(mega_recompute_name(MEGA_RECOMPUTE_BLOCKS), "blocks") && !mega_recompute_name(MEGA_RECOMPUTE_COUNT),
             "recompute names");
    mega_set_recompute((mega_recompute)7);
    TL_CHECK(mega_get_recompute() == MEGA_RECOMPUTE_NONE, "an out-of-range level sets none");
}

int main(void) {
    mega_set_threads(1);
    model_config c;
    memset(&c, 0, sizeof c);
    c.k = K_LM;
    for (int k = 0; k < MEGA_MIXER_COUNT; k++) {
        char what[96];
        /* Megalodon refuses dropout (docs/megalodon.md): its recomputation is checked without */
        const int drop = k != MEGA_MIXER_MEGALODON;
        snprintf(what, sizeof what, "lm %s%s", mega_mixer_name((mega_mixer_kind)k), drop ? ", dropout" : "");
        mega_lm_config_default(&c.lm);
        c.lm.layers = L;
        block(&c.lm.block, (mega_mixer_kind)k, 16, drop ? 0.1f : 0.0f);
        check(what, &c);
    }
    mega_lm_config_default(&c.lm);
    c.lm.layers = L;
    block(&c.lm.block, MEGA_MIXER_MEGA, -1, 0.2f);
    c.lm.block.prenorm = 0;
    check("lm mega full attention, post-norm, dropout", &c);
    memset(&c, 0, sizeof c);
    c.k = K_CLS;
    mega_cls_config_default(&c.cls);
    c.cls.layers = L, c.cls.vocab_size = 257, c.cls.padding_idx = 256, c.cls.classes = 3;
    block(&c.cls.block, MEGA_MIXER_MEGA, 16, 0.1f);
    c.cls.block.norm_type = MEGA_NORM_BATCH;
    check("classifier mega, batchnorm, dropout", &c);
    c.cls.block.norm_type = MEGA_NORM_LAYER, c.cls.two_tower = 1;
    block(&c.cls.block, MEGA_MIXER_MEGA, -1, 0.1f);
    check("classifier mega, two towers, full attention", &c);
    memset(&c, 0, sizeof c);
    c.k = K_S2S;
    mega_s2s_config_default(&c.s2s);
    c.s2s.encoder_layers = L;
    block(&c.s2s.encoder, MEGA_MIXER_MEGA, -1, 0.1f);
    block(&c.s2s.decoder, MEGA_MIXER_MEGA, -1, 0.1f);
    check("encoder-decoder mega, dropout", &c);
    check_memory();
    return tl_finish();
}
