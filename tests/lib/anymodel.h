/*
 * A model of any kind behind one handle, and one ragged batch that feeds every kind: for the tests
 * that run one check over language models, classifiers and encoder-decoders alike
 * (test_thread_count: the same result with 1, 2, 3 threads; test_recompute: with and without
 * activation recomputation).
 */
#ifndef MEGA_TEST_ANYMODEL_H
#define MEGA_TEST_ANYMODEL_H
#include "mega.h"

#include <stdint.h>

typedef enum { AM_LM, AM_CLS, AM_S2S } am_kind;

typedef struct {
    am_kind k;
    mega_lm_config lm;
    mega_cls_config cls;
    mega_s2s_config s2s;
} am_config;

typedef struct {
    am_kind k;
    mega_lm *lm;
    mega_cls *cls;
    mega_s2s *s2s;
} am_model;

/* tokens and targets [B*T], a second document (two towers), a source, the decoder's input (the
 * targets shifted right, 257 first); lengths of both documents and a label per row */
typedef struct {
    int B, T;
    int32_t *tok, *tgt, *tok2, *src, *prev, *len, *len2, *lab;
} am_batch;

/* a small block: width D, z D/2, hidden and FFN 2D, EMA dimension 4 */
void am_block(mega_block_config *b, mega_mixer_kind mixer, int D, int chunk, int max_positions, float dropout);
mega_status am_create(const am_config *c, am_model *m);
void am_free(am_model *m);
mega_paramset *am_params(am_model *m);
/* tokens uniform in [0, 256) from seed; row r's lengths T - dlen*r and T - dlen2*r (padding on
 * every side of every model), label r % 3; pad past the lengths. 0 when out of memory. */
int am_batch_make(am_batch *b, int B, int T, unsigned long long seed, int dlen, int dlen2, int pad);
void am_batch_free(am_batch *b);
/* one training forward and backward (gradients zeroed first; dropout key `key`; the
 * encoder-decoder with label smoothing 0.1); 1 when it ran, else 0 after a line on stderr */
int am_step(am_model *m, const am_batch *b, uint64_t key, double *loss);
/* the first tensor whose gradient (grad) or value (!grad) differs between two models of one
 * configuration, bit for bit; NULL when none does */
const char *am_first_diff(mega_paramset *a, mega_paramset *b, int grad);
#endif
