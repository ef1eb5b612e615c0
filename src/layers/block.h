/*
 * The block: the token-mixer sublayer followed by the normalized FFN (official
 * MegaEncoderLayer / MegaDecoderLayer without cross-attention: moving_average_gated_attention +
 * normalized_feedforward_network; every other mixer in the standard residual sublayer, see
 * mixer.h).
 *
 * Shapes: x, out (B, T, D); rows R = B*T. Parameter names are the official ones under the
 * block prefix (e.g. "decoder.layers.3."). All buffers (activations, scratch, streaming state)
 * are owned by the caller and sized by the *_size functions: forward and backward never
 * allocate. The block keeps a pointer to its configuration, which must outlive it (the model's
 * config).
 */
#ifndef MEGA_BLOCK_H
#define MEGA_BLOCK_H
#include "layers/mixer.h"
#include "layers/nffn.h"
#include "layers/seqnorm.h"

typedef struct {
    const mega_block_config *cfg;
    const mega_mixer_ops *ops;
    mega_seqnorm mnorm; /* the sublayer norm of mixers other than Mega */
    mega_nffn ffn;      /* used when cfg->ffn_dim > 0 */
    _Alignas(16) unsigned char mixer[MEGA_MIXER_LAYER_MAX]; /* the mixer's layer struct */
} mega_block;

typedef struct {
    real *mixer;      /* the mixer's saved activations (its own layout) */
    real *mn, *mstat; /* sublayer wrapper: normalised input (prenorm) or residual sum (postnorm), stats */
    mega_nffn_acts ffn;
    real *y1;         /* mixer sublayer output (FFN input) */
    int y1_in_scratch; /* the recomputation layout (mega_block_acts_point_split) */
} mega_block_acts;

/* streaming state of one block: its mixer's (the FFN and the norms have none) */
typedef mega_mixer_state mega_block_state;

/* declares the block's parameters (validating cfg with mega_block_config_check) */
mega_status mega_block_declare(mega_block *bl, mega_params *P, const char *prefix, const mega_block_config *cfg);
void mega_block_init(const mega_block *bl, real *W, mega_rng *rng);
/* the mixer's layer struct (for mixer-specific settings in tests) */
static inline void *mega_block_mixer(mega_block *bl) { return bl->mixer; }

size_t mega_block_acts_size(const mega_block *bl, int B, int T);
/* point A into base (acts_size reals); returns the reals used */
size_t mega_block_acts_point(const mega_block *bl, mega_block_acts *A, real *base, int B, int T);
/* scratch reals for forward + backward */
size_t mega_block_scratch_size(const mega_block *bl, int B, int T, int nthreads);
/* The layout of recomputation (model/stack.c): the mixer's (and its wrapper's) activations in
 * base, and the FFN's input y1 and activations in the scratch, past what the FFN's forward and
 * backward use of it. Those live from the block's forward to the FFN's backward, while the
 * mixer's part of the scratch is unused, so they cost no memory of their own; but any other
 * block's forward clobbers them: the block's forward must be the last to use the scratch before
 * its backward. The scratch
 * is then mega_block_scratch_size_split reals. Returns the reals used in base (as
 * mega_block_acts_point; scratch NULL: count). */
size_t mega_block_acts_point_split(const mega_block *bl, mega_block_acts *A, real *base, real *scratch, int B, int T);
size_t mega_block_scratch_size_split(const mega_block *bl, int B, int T, int nthreads);

/* out [B,T,D] = block(x); pad [B,T] (1 = pad) or NULL */
mega_status mega_block_forward(const mega_block *bl, real *W, mega_block_acts *A, real *out, const real *x,
                               const uint8_t *pad, int B, int T, const mega_run *run, real *scratch);
/* dx [B,T,D] (overwritten) and dW (accumulated) from dout; x is the forward's input */
void mega_block_backward(const mega_block *bl, const real *W, real *dW, const mega_block_acts *A, real *dx,
                         const real *dout, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                         real *scratch);

/* streaming (causal blocks only): cap = attention cache capacity (chunk size when chunked, else
 * the longest sequence to be streamed) */
size_t mega_block_state_size(const mega_block *bl, int B, int cap);
mega_status mega_block_state_init(const mega_block *bl, const real *W, mega_block_state *S, real *mem, int B, int cap);
void mega_block_state_reset(const mega_block *bl, mega_block_state *S);
/* beam search: new row b = old row idx[b]; tmp: mega_block_state_size reals (MEGA_ERR_UNSUPPORTED
 * for a mixer without a reorderable state) */
mega_status mega_block_state_reorder(const mega_block *bl, mega_block_state *S, const int *idx, real *tmp);
size_t mega_block_step_scratch(const mega_block *bl, int B, int T, int cap);
/* T tokens per sequence through the block in streaming mode (eval semantics): equivalent to the
 * causal forward over the whole stream so far */
mega_status mega_block_step(const mega_block *bl, const real *W, mega_block_state *S, real *out, const real *x,
                            int T, real *scratch);
#endif
