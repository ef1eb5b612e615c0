/*
 * Mega's gated-attention layer (official moving_average_gated_attention.py,
 * MovingAverageGatedAttention), the `mega` token mixer: the whole sublayer with its own norm and
 * gated residual (see mega_layer.c for the equations). Exposed for the tests; models reach it
 * through the mixer interface.
 */
#ifndef MEGA_MEGA_LAYER_H
#define MEGA_MEGA_LAYER_H
#include "layers/ema.h"
#include "layers/mixer.h"
#include "layers/relpos.h"
#include "layers/seqnorm.h"
#include "ops/attn.h"

typedef struct {
    const mega_block_config *cfg;
    mega_seqnorm norm;
    mega_ema ema;      /* when n_dim > 0 */
    mega_relpos rp;
    size_t v_w, v_b, mx_w, mx_b, h_w, h_b, qk_g, qk_b;
} mega_mlayer;

/* saved activations (a view into the block's buffer; acts_view points it): what needs a GEMM,
 * the EMA or the attention to recompute. The element-wise results (the normalised input, v, m,
 * q, k, h, the post-norm layer's pre-norm output) are recomputed by the backward from these, the
 * layer input and the dropout keys; the attention keeps one log-sum-exp per row (its
 * probabilities are recomputed blockwise by the backward): docs/performance.md, "Training
 * memory" */
typedef struct {
    real *nstat;               /* statistics of the input norm (prenorm) */
    real *vpre;                /* v_proj pre-activation */
    real *coef;                /* EMA coefficients */
    real *mpre;                /* EMA output before silu (n-dim > 0) */
    real *base;                /* mx_proj output [u | z | r | hx] */
    real *lse, *O;             /* attention: row log-sum-exp, output */
    real *hpre;                /* hx + h_proj(O*r), before the activation */
    real *ostat;               /* output norm statistics (postnorm) */
    real *btab;                /* relative-position table */
    int Mc;                    /* its centre */
} mega_mlayer_acts;

/* point A at base for a B x T batch (base NULL: count); returns reals */
size_t mega_mlayer_acts_view(const mega_mlayer *L, mega_mlayer_acts *A, real *base, int B, int T);
#endif
