/* Internal layout of the language model (public API in mega.h). */
#ifndef MEGA_LM_INTERNAL_H
#define MEGA_LM_INTERNAL_H
#include "model/stack.h"

struct mega_lm {
    mega_lm_config cfg; /* the one copy; the blocks point at cfg.block */
    mega_params P;
    size_t emb, out_w;
    mega_stack st;      /* blocks + final norm, with their buffers */
    /* LM buffers reserved for batches up to Bmax x Tmax (padded length) */
    int Bmax, Tmax;
    real *logits, *lse; /* [R][V], [R] */
    uint8_t *pad;
    int32_t *tok, *tgt;
    /* the last forward */
    int B, T, Tp, any_pad, has_targets;
    int64_t count;
    mega_lm_run run;
};

struct mega_lm_stream {
    mega_lm *m;
    int B, cap, tmax;
    int64_t pos;
    mega_block_state *S;
    real *mem, *x, *scratch;
    int32_t *tok;
    uint8_t *pad;
};
#endif
