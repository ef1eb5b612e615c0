/*
 * A training step's result does not depend on the number of threads (docs/distributed.md,
 * threads): one forward + backward with 1, 2 and 3 threads gives the same loss and the same
 * gradients, bit for bit, for every token mixer of the language model (chunked and full Mega
 * attention, dropout on), the classifier (batchnorm, a two-tower model) and the
 * encoder-decoder (Mega and MHA mixers, label smoothing). The shapes are large enough that
 * every parallel path of the library runs in parallel (more work than MEGA_PAR_MIN per call).
 * Each thread count gets its own model, created after mega_set_threads, with the same
 * initialisation. A differing result names the first tensor whose gradient differs.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

enum { B = 6, T = 192, NT = 3 };

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
    b->embed_dim = 64, b->z_dim = 32, b->hidden_dim = 128, b->n_dim = 4, b->ffn_dim = 128;
    b->chunk_size = chunk, b->max_positions = 512, b->mixer = mixer;
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

/* the batch: tokens, targets, lengths, a second document (two towers), a source */
typedef struct {
    int32_t tok[B * T], tgt[B * T], tok2[B * T], len[B], len2[B], lab[B], src[B * T], prev[B * T];
} batch;

static void make_batch(batch *b, int pad) {
    unsigned long long s = 99;
    for (int i = 0; i < B * T; i++) {
        b->tok[i] = (int32_t)(tl_rand01(&s) * 256), b->tgt[i] = (int32_t)(tl_rand01(&s) * 256);
        b->tok2[i] = (int32_t)(tl_rand01(&s) * 256), b->src[i] = (int32_t)(tl_rand01(&s) * 256);
    }
    for (int r = 0; r < B; r++) {
        /* ragged lengths: padding on every side of every model */
        b->len[r] = T - 17 * r, b->len2[r] = T - 11 * r, b->lab[r] = r % 3;
        for (int t = 0; t < T; t++) {
            const int i = r * T + t;
            b->prev[i] = t == 0 ? 257 : b->tgt[i - 1];
            if (t >= b->len[r]) b->tok[i] = b->src[i] = b->prev[i] = pad, b->tgt[i] = pad;
            if (t >= b->len2[r]) b->tok2[i] = pad;
        }
    }
}

static int step(model *m, const batch *b, int n, double *loss) {
    mega_set_threads(n);
    mega_ps_zero_grad(params(m));
    const mega_lm_run run = {1, 12345};
    mega_status st;
    if (m->k == K_LM) {
        int64_t cnt;
        st = mega_lm_forward(m->lm, b->tok, b->tgt, B, T, &run, loss, &cnt);
        if (st == MEGA_OK) st = mega_lm_backward(m->lm, 1.0);
    } else if (m->k == K_CLS) {
        const mega_cls_input in = {b->tok, NULL, b->len, T}, in2 = {b->tok2, NULL, b->len2, T};
        int64_t correct;
        st = mega_cls_forward(m->cls, &in, mega_cls_get_config(m->cls)->two_tower ? &in2 : NULL, B, b->lab, &run, loss,
                              &correct);
        if (st == MEGA_OK) st = mega_cls_backward(m->cls, 1.0);
    } else {
        double nll;
        int64_t cnt;
        st = mega_s2s_forward(m->s2s, b->src, T, b->prev, b->tgt, T, B, &run, 0.1, loss, &nll, &cnt);
        if (st == MEGA_OK) st = mega_s2s_backward(m->s2s, 1.0);
    }
    if (st != MEGA_OK) fprintf(stderr, "forward/backward: %s\n", mega_last_error());
    return st == MEGA_OK;
}

/* the first tensor whose gradient differs between two models, or NULL */
static const char *first_diff(mega_paramset *a, mega_paramset *b) {
    for (int i = 0; i < mega_ps_count(a); i++) {
        size_t off, numel;
        unsigned flags;
        const char *name = mega_ps_info(a, i, &off, &numel, &flags);
        if (memcmp(mega_ps_grad(a) + off, mega_ps_grad(b) + off, numel * sizeof(mega_real))) return name;
    }
    return NULL;
}

static void check(const char *what, const model_config *c) {
    model m[NT];
    int ok = 1;
    for (int i = 0; i < NT; i++) {
        mega_set_threads(i + 1);
        if (create(c, &m[i]) != MEGA_OK) {
            fprintf(stderr, "%s: create: %s\n", what, mega_last_error());
            ok = 0;
        }
    }
    batch *b = malloc(sizeof *b);
    double loss[NT] = {0};
    if (ok && b) {
        make_batch(b, 256);
        for (int i = 0; i < NT && ok; i++) ok = step(&m[i], b, i + 1, &loss[i]);
    }
    if (!ok || !b) {
        TL_CHECK(0, "%s: could not run", what);
    } else {
        const char *d2 = first_diff(params(&m[0]), params(&m[1])), *d3 = first_diff(params(&m[0]), params(&m[2]));
        TL_CHECK(!d2 && !d3 && loss[0] == loss[1] && loss[0] == loss[2],
                 "%s: loss and gradients with 1, 2, 3 threads equal bit for bit (first differing: %s / %s; loss %.17g %.17g %.17g)",
                 what, d2 ? d2 : "-", d3 ? d3 : "-", loss[0], loss[1], loss[2]);
    }
    free(b);
    for (int i = 0; i < NT; i++) destroy(&m[i]);
}

int main(void) {
    model_config c;
    /* language models: every mixer */
    memset(&c, 0, sizeof c);
    c.k = K_LM;
    mega_lm_config_default(&c.lm);
    c.lm.layers = 2;
    block(&c.lm.block, MEGA_MIXER_MEGA, 64, 0);
    check("lm mega chunk 64", &c);
    block(&c.lm.block, MEGA_MIXER_MEGA, -1, 0.1f);
    check("lm mega full attention, dropout", &c);
    for (int k = 0; k < MEGA_MIXER_COUNT; k++) {
        char what[96];
        snprintf(what, sizeof what, "lm %s%s", mega_mixer_name((mega_mixer_kind)k), k == MEGA_MIXER_MEGALODON ? "" : ", dropout");
        mega_lm_config_default(&c.lm);
        c.lm.layers = 2;
        /* the megalodon mixer has no dropout (its check refuses one) */
        block(&c.lm.block, (mega_mixer_kind)k, 64, k == MEGA_MIXER_MEGALODON ? 0.0f : 0.1f);
        check(what, &c);
    }
    /* classifiers: batchnorm; two towers */
    memset(&c, 0, sizeof c);
    c.k = K_CLS;
    mega_cls_config_default(&c.cls);
    c.cls.layers = 2, c.cls.vocab_size = 257, c.cls.padding_idx = 256, c.cls.classes = 3;
    block(&c.cls.block, MEGA_MIXER_MEGA, 64, 0.1f);
    c.cls.block.norm_type = MEGA_NORM_BATCH;
    check("classifier mega, batchnorm, dropout", &c);
    c.cls.block.norm_type = MEGA_NORM_LAYER, c.cls.two_tower = 1;
    block(&c.cls.block, MEGA_MIXER_MEGA, -1, 0.1f);
    check("classifier mega, two towers, full attention", &c);
    /* encoder-decoders */
    memset(&c, 0, sizeof c);
    c.k = K_S2S;
    mega_s2s_config_default(&c.s2s);
    block(&c.s2s.encoder, MEGA_MIXER_MEGA, -1, 0.1f);
    block(&c.s2s.decoder, MEGA_MIXER_MEGA, -1, 0.1f);
    check("encoder-decoder mega, dropout", &c);
    block(&c.s2s.encoder, MEGA_MIXER_MHA, -1, 0.1f);
    block(&c.s2s.decoder, MEGA_MIXER_MHA, -1, 0.1f);
    check("encoder-decoder mha, dropout", &c);
    return tl_finish();
}
