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

/* saved activations (a view into the block's buffer; acts_view points it) */
typedef struct {
    real *xn, *nstat;          /* normalised input (prenorm) and its statistics */
    real *vpre, *v;            /* v_proj pre-activation; v after act and hidden dropout */
    real *coef;                /* EMA coefficients */
    real *mpre, *m;            /* EMA pre-silu, EMA output after dropout */
    real *base;                /* mx_proj output [u | z | r | hx] */
    real *q, *k, *lse, *O;     /* attention */
    real *hpre, *h;            /* h_proj pre-activation; h after act and dropout */
    real *opre, *ostat;        /* pre-norm output and statistics (postnorm) */
    real *btab;                /* relative-position table */
    int Mc;                    /* its centre */
} mega_mlayer_acts;

/* point A at base for a B x T batch (base NULL: count); returns reals */
size_t mega_mlayer_acts_view(const mega_mlayer *L, mega_mlayer_acts *A, real *base, int B, int T);
#endif
