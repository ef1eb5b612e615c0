/* Internal layout of the language model (public API in mega.h). */
#ifndef MEGA_LM_INTERNAL_H
#define MEGA_LM_INTERNAL_H
#include "layers/block.h"

struct mega_lm {
    mega_lm_config cfg;
    mega_block_cfg bcfg;
    mega_params P;
    size_t emb, out_w;
    mega_seqnorm fnorm;
    int has_fnorm;
    mega_block *blocks;
    int nthreads;
    /* buffers reserved for batches up to Bmax x Tmax (padded length) */
    int Bmax, Tmax;
    size_t acts_per;
    real *acts;         /* per-layer saved activations */
    mega_block_acts *A;
    real *H;            /* hidden states [(L+1)][R][D] */
    real *xf, *fstat;   /* final-norm output and its statistics */
    real *logits, *lse; /* [R][V], [R] */
    real *scratch;
    real *dx, *dy;
    uint8_t *pad;
    int32_t *tok, *tgt;
    /* the last forward */
    int B, T, Tp, any_pad, has_targets;
    int64_t count;
    const real *xfp;    /* features fed to the output projection */
    mega_lm_run run;
};

struct mega_lm_stream {
    mega_lm *m;
    int B, cap, tmax;
    int64_t pos;
    mega_block_state *S;
    real *mem, *x, *scratch;
};
#endif
