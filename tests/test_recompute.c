/*
 * Activation recomputation (mega_set_recompute, src/model/stack.c): one forward + backward with
 * MEGA_RECOMPUTE_BLOCKS gives the loss, the gradients and the weights (the batchnorm running
 * statistics are in them: the recomputed forward must not update them again) of
 * MEGA_RECOMPUTE_NONE bit for bit, for every token mixer of the language model (three blocks,
 * dropout on, so each recomputed block must draw its forward's masks), a batchnorm classifier
 * and a two-tower one on ragged batches, and an encoder-decoder (its encoder's stack and its
 * decoder's layers, cross-attention included, recompute); and the memory estimate is that of
 * L - 1 fewer blocks of activations. Each setting gets its own model, created after
 * mega_set_recompute, with the same initialisation.
 */
#include "anymodel.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

enum { B = 3, T = 40, L = 3 };

static void block(mega_block_config *b, mega_mixer_kind mixer, int chunk, float dropout) {
    am_block(b, mixer, 16, chunk, 64, dropout);
}

static void check(const char *what, const am_config *c) {
    am_model m[2];
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        mega_set_recompute(i ? MEGA_RECOMPUTE_BLOCKS : MEGA_RECOMPUTE_NONE);
        if (am_create(c, &m[i]) != MEGA_OK) fprintf(stderr, "%s: create: %s\n", what, mega_last_error()), ok = 0;
    }
    mega_set_recompute(MEGA_RECOMPUTE_NONE);
    am_batch b;
    double loss[2] = {0};
    const int have = am_batch_make(&b, B, T, 7, 7, 5, 256);
    for (int i = 0; i < 2 && ok && have; i++) ok = am_step(&m[i], &b, 4242, &loss[i]);
    if (!ok || !have) {
        TL_CHECK(0, "%s: could not run", what);
    } else {
        const char *dg = am_first_diff(am_params(&m[0]), am_params(&m[1]), 1),
                   *dw = am_first_diff(am_params(&m[0]), am_params(&m[1]), 0);
        TL_CHECK(!dg && !dw && loss[0] == loss[1],
                 "%s: loss, gradients and weights with recompute none and blocks equal bit for bit (first differing "
                 "gradient %s, weight %s; loss %.17g %.17g)", what, dg ? dg : "-", dw ? dw : "-", loss[0], loss[1]);
    }
    am_batch_free(&b);
    for (int i = 0; i < 2; i++) am_free(&m[i]);
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
    am_config c;
    memset(&c, 0, sizeof c);
    c.k = AM_LM;
    for (int k = 0; k < MEGA_MIXER_COUNT; k++) {
        char what[96];
        snprintf(what, sizeof what, "lm %s, dropout", mega_mixer_name((mega_mixer_kind)k));
        mega_lm_config_default(&c.lm);
        c.lm.layers = L;
        block(&c.lm.block, (mega_mixer_kind)k, 16, 0.1f);
        /* Megalodon has no activation dropout (the official FFN's hidden units take hidden-dropout) */
        if (k == MEGA_MIXER_MEGALODON) c.lm.block.activation_dropout = 0;
        check(what, &c);
    }
    mega_lm_config_default(&c.lm);
    c.lm.layers = L;
    block(&c.lm.block, MEGA_MIXER_MEGA, -1, 0.2f);
    c.lm.block.prenorm = 0;
    check("lm mega full attention, post-norm, dropout", &c);
    memset(&c, 0, sizeof c);
    c.k = AM_CLS;
    mega_cls_config_default(&c.cls);
    c.cls.layers = L, c.cls.vocab_size = 257, c.cls.padding_idx = 256, c.cls.classes = 3;
    block(&c.cls.block, MEGA_MIXER_MEGA, 16, 0.1f);
    c.cls.block.norm_type = MEGA_NORM_BATCH;
    check("classifier mega, batchnorm, dropout", &c);
    c.cls.block.norm_type = MEGA_NORM_LAYER, c.cls.two_tower = 1;
    block(&c.cls.block, MEGA_MIXER_MEGA, -1, 0.1f);
    check("classifier mega, two towers, full attention", &c);
    memset(&c, 0, sizeof c);
    c.k = AM_S2S;
    mega_s2s_config_default(&c.s2s);
    c.s2s.encoder_layers = c.s2s.decoder_layers = L;
    block(&c.s2s.encoder, MEGA_MIXER_MEGA, -1, 0.1f);
    block(&c.s2s.decoder, MEGA_MIXER_MEGA, -1, 0.1f);
    check("encoder-decoder mega, three decoder layers, dropout", &c);
    /* chunked decoder (padded to a chunk multiple), multi-head cross-attention, no FFN */
    block(&c.s2s.encoder, MEGA_MIXER_MEGA, 16, 0.1f);
    block(&c.s2s.decoder, MEGA_MIXER_MEGA, 16, 0.1f);
    c.s2s.encoder.ffn_dim = c.s2s.decoder.ffn_dim = 0;
    c.s2s.cross_attention = 2; /* the field's choices: auto, gated, mha, ... */
    check("encoder-decoder mega, chunks, multi-head cross-attention, no FFN, dropout", &c);
    check_memory();
    return tl_finish();
}
