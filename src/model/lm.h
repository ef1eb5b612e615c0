/* Internal layout of the language model (public API in mega.h). */
#ifndef MEGA_LM_INTERNAL_H
#define MEGA_LM_INTERNAL_H
#include "layers/adaptive.h"
#include "model/kinds.h"
#include "model/stack.h"

struct mega_lm {
    mega_model hdr; /* first: a mega_lm is a mega_model (model/kinds.h) */
    mega_lm_config cfg; /* the one copy; the blocks point at cfg.block */
    mega_params P;
    size_t emb, out_w;
    int has_ai, has_as; /* adaptive input / adaptive softmax (layers/adaptive.h) in place of
                           the embedding table / the output projection */
    mega_adaptive_input ai;
    mega_adaptive_softmax as;
    mega_stack st;      /* blocks + final norm, with their buffers */
    /* LM buffers reserved for batches up to Bmax x Tmax (padded length) */
    int Bmax, Tmax;
    real *logits, *lse; /* [R][V], [R] */
    uint8_t *pad;
    int32_t *tok, *tgt;
    real *ascr;      /* adaptive: the input's scratch, then the softmax's saved activations */
    int32_t *aorder; /* adaptive input: rows grouped by band */
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
    real *ascr;      /* adaptive input scratch / adaptive softmax activations for tmax rows */
    int32_t *aorder;
    mega_tsnorm_state tfs; /* the final timestep norm's state (Megalodon; NULL pointers otherwise;
                            * a view's points into its stream's, tfs_view set) */
    int tfs_view;
    int32_t *tok;
    uint8_t *pad;
    mega_step_tuner tune; /* team or calling thread alone for this stream's steps (stepteam.c) */
    /* a batch decoded as groups of sequences (lm.c, stream_groups): ngroups > 1 streams of
     * consecutive sequences, each with its own buffers and a view of this stream's state
     * (mega_mixer_state.b0); gst/gerr: each group's status and message of the last feed */
    int ngroups;
    mega_lm_stream **group;
    mega_status *gst;
    char (*gerr)[256];
    /* rows (lm.c, mega_lm_stream_row_add ...): sequences [0, nrows) in use, sequence b at its own
     * position rpos[b]; rowv: a view of one sequence (a row's own feed), stepv: a view of the
     * first nrows (one token of every row); rtmp, ridx: moving a row (mega_block_state_reorder) */
    int nrows;
    int64_t *rpos;
    mega_lm_stream *rowv, *stepv;
    real *rtmp;
    int *ridx;
};
#endif
