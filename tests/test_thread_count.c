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
#include "anymodel.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

enum { B = 6, T = 192, NT = 3 };

static void block(mega_block_config *b, mega_mixer_kind mixer, int chunk, float dropout) {
    am_block(b, mixer, 64, chunk, 512, dropout);
}

static void check(const char *what, const am_config *c) {
    am_model m[NT];
    int ok = 1;
    for (int i = 0; i < NT; i++) {
        mega_set_threads(i + 1);
        if (am_create(c, &m[i]) != MEGA_OK) {
            fprintf(stderr, "%s: create: %s\n", what, mega_last_error());
            ok = 0;
        }
    }
    am_batch b;
    double loss[NT] = {0};
    /* ragged lengths: padding on every side of every model */
    const int have = am_batch_make(&b, B, T, 99, 17, 11, 256);
    for (int i = 0; i < NT && ok && have; i++) mega_set_threads(i + 1), ok = am_step(&m[i], &b, 12345, &loss[i]);
    if (!ok || !have) {
        TL_CHECK(0, "%s: could not run", what);
    } else {
        const char *d2 = am_first_diff(am_params(&m[0]), am_params(&m[1]), 1),
                   *d3 = am_first_diff(am_params(&m[0]), am_params(&m[2]), 1);
        TL_CHECK(!d2 && !d3 && loss[0] == loss[1] && loss[0] == loss[2],
                 "%s: loss and gradients with 1, 2, 3 threads equal bit for bit (first differing: %s / %s; loss %.17g %.17g %.17g)",
                 what, d2 ? d2 : "-", d3 ? d3 : "-", loss[0], loss[1], loss[2]);
    }
    am_batch_free(&b);
    for (int i = 0; i < NT; i++) am_free(&m[i]);
}

int main(void) {
    am_config c;
    /* language models: every mixer */
    memset(&c, 0, sizeof c);
    c.k = AM_LM;
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
    c.k = AM_CLS;
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
    c.k = AM_S2S;
    mega_s2s_config_default(&c.s2s);
    block(&c.s2s.encoder, MEGA_MIXER_MEGA, -1, 0.1f);
    block(&c.s2s.decoder, MEGA_MIXER_MEGA, -1, 0.1f);
    check("encoder-decoder mega, dropout", &c);
    block(&c.s2s.encoder, MEGA_MIXER_MHA, -1, 0.1f);
    block(&c.s2s.decoder, MEGA_MIXER_MHA, -1, 0.1f);
    check("encoder-decoder mha, dropout", &c);
    return tl_finish();
}
