/*
 * A stack of Mega blocks with the optional final norm (prenorm models), shared by the language
 * model (causal) and the classifier (bidirectional): it owns the per-layer activations, the
 * hidden states and the scratch, sized for batches up to Bmax x Tmax.
 *
 *   H[0]            input (written by the caller: embeddings)
 *   H[l+1]          = block_l(H[l])
 *   out             = final_norm(H[L]) (prenorm) else H[L], then zeroed at pads
 *
 * With recomputation (mega_set_recompute, read at declare) the blocks share one activation
 * buffer, and the FFN's input and activations live in the scratch (mega_block_acts_point_split):
 * the backward re-runs block l's forward from H[l] with block l's dropout key just before its
 * backward (the last block's are still there: nothing but the blocks writes the scratch), so it
 * needs H[0..L] and one block's mixer activations instead of L blocks'.
 */
#ifndef MEGA_STACK_H
#define MEGA_STACK_H
#include "layers/block.h"
#include "layers/tsnorm.h"
#include "ops/ops.h"

typedef struct {
    int L;
    const mega_block_config *cfg; /* the model's */
    mega_block *blocks;
    int owns_blocks;
    mega_seqnorm fnorm;
    int has_fnorm;
    /* Megalodon (mixers with MEGA_MIXER_FINAL_TSNORM): the final norm is a timestep norm over
     * groups of norm-num-groups, started from its prior at every forward (has_fnorm 0) */
    mega_tsnorm tfnorm;
    int has_tfnorm;
    real *tf;          /* its activations and state (mega_stack_tf_reals) */
    int nthreads;
    int recompute;     /* MEGA_RECOMPUTE_BLOCKS: one block's activations, re-run by the backward */
    mega_bnsync sync; /* batchnorm statistics over processes (set by the model; fn NULL = none) */
    /* buffers */
    int Bmax, Tmax;    /* the batch that set the capacities (for information) */
    size_t Rcap, scr_cap; /* rows (B*T) and scratch reals the buffers hold */
    size_t acts_per;   /* activation reals per block */
    real *acts;        /* L x acts_per, or one block's with recompute (every A[l] points at it) */
    mega_block_acts *A;
    real *H;           /* [(L+1)][R][D] */
    real *xf, *fstat;  /* output features [R][D] and final-norm statistics */
    real *scratch;
    real *dx, *dy;     /* gradient ping-pong [R][D] */
    /* the last forward */
    int B, T;
    const real *out;   /* features of the last forward (xf or H[L]) */
    const uint8_t *pad;
} mega_stack;

/* declares "<layer_prefix><i>." blocks and "<fnorm_prefix>" final norm (when cfg->prenorm) */
mega_status mega_stack_declare(mega_stack *s, mega_params *P, const char *layer_prefix, const char *fnorm_prefix,
                               const mega_block_config *cfg, int layers, int fnorm_affine);
/* a second stack over the same blocks (own activation buffers): the second tower of a two-tower
 * model, which the official code encodes in a separate pass */
void mega_stack_share(mega_stack *dst, const mega_stack *src);
void mega_stack_init(const mega_stack *s, real *W, mega_rng *rng);
void mega_stack_free(mega_stack *s);
mega_status mega_stack_reserve(mega_stack *s, int B, int T);
/* the activation reals (per block, or the one block of recomputation), scratch reals and
 * feature reals (xf and fstat) that reserve allocates for B x T */
void mega_stack_sizes(const mega_stack *s, int B, int T, size_t *per, size_t *scr, size_t *xf);
static inline real *mega_stack_input(mega_stack *s) { return s->H; }
static inline const real *mega_stack_hidden(const mega_stack *s, int i) {
    return s->H + (size_t)i * s->B * s->T * s->cfg->embed_dim;
}
/* run the blocks on H[0] ([B,T,D], already embedded and pad-zeroed); returns the output features */
mega_status mega_stack_forward(mega_stack *s, real *W, const uint8_t *pad, int B, int T, int training, uint64_t key,
                               const real **out);
/* from d out [B,T,D] (may be s->dx) to d H[0]; returns a pointer to it (one of s->dx / s->dy) */
real *mega_stack_backward(mega_stack *s, const real *W, real *dW, real *dout, int training, uint64_t key);
/* reals of the final timestep norm's activations and state for R rows (0 without one) */
size_t mega_stack_tf_reals(const mega_stack *s, size_t R);
/* dropout key of block l */
static inline uint64_t mega_stack_key(uint64_t key, int l) { return mega__subkey(key, 100 + (uint64_t)l); }
#endif
