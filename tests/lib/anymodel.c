/* A model of any kind behind one handle, and one batch for every kind (anymodel.h). */
#include "anymodel.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void am_block(mega_block_config *b, mega_mixer_kind mixer, int D, int chunk, int max_positions, float dropout) {
    b->embed_dim = D, b->z_dim = D / 2, b->hidden_dim = 2 * D, b->n_dim = 4, b->ffn_dim = 2 * D;
    b->chunk_size = chunk, b->max_positions = max_positions, b->mixer = mixer;
    b->dropout = b->attention_dropout = b->hidden_dropout = b->activation_dropout = dropout;
}

mega_status am_create(const am_config *c, am_model *m) {
    memset(m, 0, sizeof *m);
    m->k = c->k;
    return c->k == AM_LM ? mega_lm_create(&c->lm, &m->lm) : c->k == AM_CLS ? mega_cls_create(&c->cls, &m->cls)
                                                                         : mega_s2s_create(&c->s2s, &m->s2s);
}

void am_free(am_model *m) { mega_lm_free(m->lm), mega_cls_free(m->cls), mega_s2s_free(m->s2s); }

mega_paramset *am_params(am_model *m) {
    return m->k == AM_LM ? mega_lm_paramset(m->lm) : m->k == AM_CLS ? mega_cls_paramset(m->cls) : mega_s2s_paramset(m->s2s);
}

void am_batch_free(am_batch *b) {
    free(b->tok), free(b->tgt), free(b->tok2), free(b->src), free(b->prev), free(b->len), free(b->len2), free(b->lab);
    memset(b, 0, sizeof *b);
}

int am_batch_make(am_batch *b, int B, int T, unsigned long long seed, int dlen, int dlen2, int pad) {
    const size_t R = (size_t)B * T;
    memset(b, 0, sizeof *b);
    b->B = B, b->T = T;
    b->tok = malloc(R * sizeof(int32_t)), b->tgt = malloc(R * sizeof(int32_t)), b->tok2 = malloc(R * sizeof(int32_t));
    b->src = malloc(R * sizeof(int32_t)), b->prev = malloc(R * sizeof(int32_t));
    b->len = malloc((size_t)B * sizeof(int32_t)), b->len2 = malloc((size_t)B * sizeof(int32_t)), b->lab = malloc((size_t)B * sizeof(int32_t));
    if (!b->tok || !b->tgt || !b->tok2 || !b->src || !b->prev || !b->len || !b->len2 || !b->lab) return am_batch_free(b), 0;
    unsigned long long s = seed;
    for (size_t i = 0; i < R; i++) {
        b->tok[i] = (int32_t)(tl_rand01(&s) * 256), b->tgt[i] = (int32_t)(tl_rand01(&s) * 256);
        b->tok2[i] = (int32_t)(tl_rand01(&s) * 256), b->src[i] = (int32_t)(tl_rand01(&s) * 256);
    }
    for (int r = 0; r < B; r++) {
        b->len[r] = T - dlen * r, b->len2[r] = T - dlen2 * r, b->lab[r] = r % 3;
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)r * T + t;
            b->prev[i] = t == 0 ? 257 : b->tgt[i - 1];
            if (t >= b->len[r]) b->tok[i] = b->src[i] = b->prev[i] = pad, b->tgt[i] = pad;
            if (t >= b->len2[r]) b->tok2[i] = pad;
        }
    }
    return 1;
}

int am_step(am_model *m, const am_batch *b, uint64_t key, double *loss) {
    mega_ps_zero_grad(am_params(m));
    const mega_lm_run run = {1, key};
    const int B = b->B, T = b->T;
    mega_status st;
    int64_t cnt;
    if (m->k == AM_LM) {
        st = mega_lm_forward(m->lm, b->tok, b->tgt, B, T, &run, loss, &cnt);
        if (st == MEGA_OK) st = mega_lm_backward(m->lm, 1.0);
    } else if (m->k == AM_CLS) {
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

const char *am_first_diff(mega_paramset *a, mega_paramset *b, int grad) {
    for (int i = 0; i < mega_ps_count(a); i++) {
        size_t off, numel;
        unsigned flags;
        const char *name = mega_ps_info(a, i, &off, &numel, &flags);
        const mega_real *x = grad ? mega_ps_grad(a) : mega_ps_data(a), *y = grad ? mega_ps_grad(b) : mega_ps_data(b);
        if (memcmp(x + off, y + off, numel * sizeof(mega_real))) return name;
    }
    return NULL;
}
