/*
 * Softmax-attention token mixers behind the mixer interface (mixer.h): `mha` (Transformer
 * multi-head attention, Vaswani et al. 2017; fairseq MultiheadAttention names), `local` (mha with
 * a sliding window always on; Su, kexue.fm/archives/9431) and, through the same engine, `mhatw`
 * (MHA with explicit time weighting, PENG Bo's article; below). The block wraps the mixer as the
 * standard residual sublayer (block.c), so this is the core only:
 *
 *   Q = x Wq^T + bq,  K = x Wk^T + bk,  V = x Wv^T + bv          (Da = D, H heads of dh = D/H)
 *   Q_t, K_u <- RoPE (RoFormer; half-split pairs, r = dh, base 10000) or the XPOS rotation
 *               (interleaved pairs as in torchscale XPOS) at their absolute positions
 *   O = multi-head masked softmax attention (ops/mhattn.h) with the positional terms of
 *       cfg->pos (docs/mixers.md), the local mask (window), log-n scaling, attention dropout
 *   y = O Wo^T + bo                         (mhatw: y_t <- y_t * gamma(t), RWKV-v1 time_gamma)
 *
 * Parameters ("<prefix>mixer."): q_proj, k_proj, v_proj, out_proj (.weight [D,D], .bias [D],
 * fairseq names); kerple.bias_p / kerple.bias_a [H] (official KERPLE names, chijames/KERPLE);
 * mhatw: time_logw [H, Lw] (log f_h, RWKV layout: entry Tm-1-delta is distance delta;
 * Lw = Tm causal, 2Tm-1 bidirectional), time_logbeta [H, Tm] (log beta_h(u)) and
 * time_gamma [Tm] (gamma(t)), Tm = cfg->max_len. alpha_h(t) cancels in the normalised form
 * and is not a parameter.
 *
 * Windows: `local` always uses cfg->window (and the smaller of it and cfg->attn_window when
 * both are set); `mha` and `mhatw` use cfg->attn_window when > 0. The mask is applied whenever
 * it is set (forward, backward and step); the CLI sets attn_window for evaluation only
 * (Su, kexue.fm/archives/9431: "train short, test long").
 *
 * Streaming (causal): a cache of rotated keys and values per sequence. Without a window it
 * holds every position (capacity `cap`; streaming past it fails cleanly); with a window w it
 * is a ring buffer of w slots (unbounded streams; project choice). The distance tables (and
 * XPOS factors) are built at state_init for distances < slots, from the parameters of that
 * moment (like Mega's bias table): initialise the state again after a parameter update.
 *
 * `mhatw`: multi-head attention with explicit time weighting, the article's normalised form
 * (PENG Bo's time-weighting article; parameters as in RWKV-v1 MHA_pro / RWKV_TimeMix):
 *
 *   MHATW_t = sum_u W(t,u) exp(q_t.k_u/sqrt dh) v_u / sum_u W(t,u) exp(q_t.k_u/sqrt dh),
 *   W(t,u)  = f_h(t-u) alpha_h(t) beta_h(u),   y_t = gamma(t) (MHATW_t Wo^T + bo)
 *
 * which is softmax attention with the additive bias log f_h(t-u) + log beta_h(u) (alpha_h(t)
 * cancels, so it is not a parameter). Positivity by parameterisation: f = exp(time_logw),
 * beta = exp(time_logbeta) (project extension); gamma (time_gamma) is used directly.
 *   time_logw    [H, Lw]  log f_h(delta) at index Tm-1-delta (RWKV layout: the last causal entry
 *                         is distance 0); causal Lw = Tm; bidirectional Lw = 2Tm-1, the two-sided
 *                         f (project extension), delta in (-Tm, Tm) (entries Tm.. are u > t)
 *   time_logbeta [H, Tm]  log beta_h(u)
 *   time_gamma   [Tm]     gamma(t), shared over channels, applied after the output projection
 * with Tm = cfg->max_len. Init: RWKV_TimeMix's f_h(delta) = exp(-|delta| lambda_h),
 * lambda_h = Tm^(-(h+1)/(H-1)) and a uniform last head; beta = gamma = 1.
 *
 * Length policy (project extension; docs/mixers.md): positions and distances beyond the
 * learned range use the last learned value: f_h(delta) for |delta| >= Tm is f_h(+-(Tm-1)),
 * beta_h(u >= Tm) = beta_h(Tm-1), gamma(t >= Tm) = gamma(Tm-1); they get the gradients of the
 * clamped uses. The alternative (local attention with window Tm, where no distance reaches Tm) is
 * available with --attn-window Tm; positions are still clamped then. Streaming follows the same
 * rule, so an unbounded stream is well defined.
 * Everything else (projections, positional schemes, local mask, log-n, the kernel,
 * streaming) is shared with mha: the mhatw layer is an mha layer with `tw` set (its own declare
 * entry), which adds the time-weighting tensors.
 */
#include "layers/mixer.h"
#include "ops/ops.h"
#include "ops/mhattn.h"
#include "ops/posenc.h"
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const mega_block_config *cfg;
    int tw;          /* mhatw: the explicit time weighting */
    int H, dh;       /* heads and head width */
    int win;         /* the local mask applied (0 = none) */
    int Tm, Lw;      /* mhatw: learned positions and time_logw length */
    mega_qkvo proj;            /* q/k/v/out_proj */
    size_t kp, ka;             /* KERPLE bias_p, bias_a */
    size_t logw, logbeta, gamma; /* mhatw time_logw, time_logbeta, time_gamma */
} mha_layer;
MEGA_MIXER_LAYER_FITS(mha_layer);

/* saved activations */
typedef struct {
    real *q, *k, *v, *O, *lse; /* [B,T,D] x 4 (rotated q, k), [B,H,T] */
    real *bt, *xt;             /* distance table, XPOS factors (when used) */
    real *yp;                  /* mhatw: the output before gamma(t) */
} mha_acts;

/* streaming state: a cache of rotated keys and values per sequence */
typedef struct {
    real *kc, *vc; /* [B, slots, D] */
    real *bt, *xt; /* tables for distances < slots */
    int slots, ring;
} mha_state;

enum { SITE_ATTN_DROP = 21 }; /* dropout site of the attention weights */

static inline size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

static int is_kerple(const mega_block_config *c) {
    return c->pos == MEGA_POS_KERPLE_POWER || c->pos == MEGA_POS_KERPLE_LOG;
}
static int has_btab(const mha_layer *L) {
    const mega_pos_kind p = L->cfg->pos;
    return L->tw || p == MEGA_POS_ALIBI || is_kerple(L->cfg) || p == MEGA_POS_SANDWICH;
}
static int has_xpos(const mha_layer *L) { return L->cfg->pos == MEGA_POS_XPOS; }

/* ---- configuration ------------------------------------------------------------------------ */

static void am_resolve(mega_block_config *c) {
    const int even = c->pos == MEGA_POS_ROPE || c->pos == MEGA_POS_XPOS || c->pos == MEGA_POS_SANDWICH;
    if (c->heads == 0) c->heads = mega__default_heads(c->embed_dim, even);
}
static void local_resolve(mega_block_config *c) {
    am_resolve(c);
    if (c->window == 0) c->window = MEGA_DEFAULT_WINDOW;
}
static void mhatw_resolve(mega_block_config *c) {
    am_resolve(c);
    if (c->max_len == 0) c->max_len = mega__default_max_len(c);
}

/* the invalid combinations of the positional schemes (docs/mixers.md) */
static mega_status am_check(const mega_block_config *c) {
    const char *nm = mega_mixer_name(c->mixer);
    const int H = c->heads, D = c->embed_dim;
    if (H < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: heads must be >= 1 (got %d)", nm, H);
    if (D % H) MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: embed-dim %d is not divisible by heads %d", nm, D, H);
    const int dh = D / H;
    if ((c->pos == MEGA_POS_ROPE || c->pos == MEGA_POS_XPOS || c->pos == MEGA_POS_SANDWICH) && dh % 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: --pos %s needs an even head width (embed-dim / heads = %d)", nm,
                  mega_pos_name(c->pos), dh);
    if (c->pos == MEGA_POS_XPOS && c->bidirectional)
        MEGA_FAIL(MEGA_ERR_INVALID,
                  "mixer %s: --pos xpos is causal only: its scaling diverges on one side when "
                  "bidirectional; use rope, alibi, kerple-* or sandwich for encoders",
                  nm);
    if (c->log_n_scaling && c->train_len < 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: --log-n-scaling needs the training length (train-len >= 2, got %d)",
                  nm, c->train_len);
    return MEGA_OK;
}
static mega_status local_check(const mega_block_config *c) {
    MEGA_TRY(mega__window_check(c));
    return am_check(c);
}
static mega_status mhatw_check(const mega_block_config *c) {
    if (c->max_len < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer mhatw needs --max-len >= 1 (the trained context of its time weights)");
    return am_check(c);
}

/* ---- declaration and init --------------------------------------------------------------- */

/* the variants: mha; local (the window always on); mhatw (the time weighting) */
enum { V_MHA, V_LOCAL, V_MHATW };

static mega_status declare(mha_layer *L, const mega_block_config *c, mega_params *P, const char *prefix, int variant) {
    const int tw = variant == V_MHATW, local = variant == V_LOCAL;
    memset(L, 0, sizeof *L);
    L->cfg = c, L->tw = tw;
    const int H = c->heads, D = c->embed_dim;
    L->H = H, L->dh = D / H;
    int win = local ? c->window : 0;
    if (c->attn_window > 0) win = win > 0 ? MEGA_MIN(win, c->attn_window) : c->attn_window;
    L->win = win;
    if (tw) L->Tm = c->max_len, L->Lw = c->bidirectional ? 2 * c->max_len - 1 : c->max_len;

    MEGA_TRY(mega_qkvo_declare(&L->proj, P, prefix, "mixer.", D));
    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    if (is_kerple(c)) {
        MEGA_TRY(MEGA_PADD(P, pre, "kerple.bias_p", 0, &L->kp, H));
        MEGA_TRY(MEGA_PADD(P, pre, "kerple.bias_a", 0, &L->ka, H));
    }
    if (tw) {
        MEGA_TRY(MEGA_PADD(P, pre, "time_logw", 0, &L->logw, H, L->Lw));
        MEGA_TRY(MEGA_PADD(P, pre, "time_logbeta", 0, &L->logbeta, H, c->max_len));
        MEGA_TRY(MEGA_PADD(P, pre, "time_gamma", 0, &L->gamma, c->max_len));
    }
    return MEGA_OK;
}
MEGA_DECLARE_VARIANT(mha_declare, declare, V_MHA)
MEGA_DECLARE_VARIANT(local_declare, declare, V_LOCAL)
MEGA_DECLARE_VARIANT(mhatw_declare, declare, V_MHATW)

static void am_init(const void *layer, real *W, mega_rng *rng) {
    const mha_layer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim;
    const int H = L->H;
    /* fairseq MultiheadAttention.reset_parameters: q/k/v xavier-uniform with gain 2^-1/2, out_proj
     * xavier-uniform (gain 1); every bias zero (fairseq zeroes out_proj.bias; zeroing the q/k/v
     * biases too is a project choice) */
    mega_qkvo_init(&L->proj, W, (int)D, rng);
    if (is_kerple(c)) {
        /* KERPLE init as chijames/KERPLE: bias_p ~ U(0, 2), bias_a ~ U(0, 1), then clamped */
        mega_fill_uniform(W + L->kp, (size_t)H, 0, 2, rng);
        mega_fill_uniform(W + L->ka, (size_t)H, 0, 1, rng);
        mega_kerple_clamp(c->pos == MEGA_POS_KERPLE_POWER, W + L->kp, W + L->ka, H);
    }
    if (L->tw) {
        /* RWKV-v1 RWKV_TimeMix init of f, beta = gamma = 1 */
        mega_tw_init_logw(W + L->logw, H, L->Lw, L->Tm);
        mega_fill_const(W + L->logbeta, (size_t)H * L->Tm, 0);
        mega_fill_const(W + L->gamma, (size_t)L->Tm, 1);
    }
}

/* ---- shared pieces ---------------------------------------------------------------------- */

/* rotate (or, inverse, un-rotate) the heads of q and k [R, D] in place; row r is at absolute
 * position pos0 + r % T (RoPE half-split r = dh, or the XPOS rotation, interleaved) */
static void rotate_rows(const mha_layer *L, real *q, real *k, size_t R, int T, int64_t pos0, int inverse) {
    const mega_pos_kind p = L->cfg->pos;
    if (p != MEGA_POS_ROPE && p != MEGA_POS_XPOS) return;
    const int H = L->H, dh = L->dh, inter = p == MEGA_POS_XPOS;
    const size_t Da = (size_t)H * dh;
    /* each element costs a few transcendental calls: parallel well below MEGA_PAR_MIN rows*cols */
#pragma omp parallel for schedule(static) if (R * Da * 8 > MEGA_PAR_MIN)
    for (long r = 0; r < (long)R; r++) {
        const int64_t pos = pos0 + r % T;
        real cs[1024]; /* angles of this position, shared by every head and by q and k */
        mega_rope_angles(cs, dh, pos, 10000.0, inverse);
        for (int h = 0; h < H; h++) {
            if (q) mega_rope_apply(q + (size_t)r * Da + (size_t)h * dh, cs, dh, inter);
            if (k) mega_rope_apply(k + (size_t)r * Da + (size_t)h * dh, cs, dh, inter);
        }
    }
}

/* the distance table (tc, tl geometry of posenc.h) and the XPOS factors for delta in [xmin, xmax) */
static void build_tables(const mha_layer *L, const real *W, real *bt, int tc, int tl, real *xt, int xmin, int xmax) {
    const mega_block_config *c = L->cfg;
    const int H = L->H;
    if (bt) {
        memset(bt, 0, (size_t)H * tl * sizeof(real));
        if (c->pos == MEGA_POS_ALIBI) mega_alibi_table(bt, H, tc, tl);
        if (is_kerple(c)) mega_kerple_table(c->pos == MEGA_POS_KERPLE_POWER, bt, H, tc, tl, W + L->kp, W + L->ka);
        if (c->pos == MEGA_POS_SANDWICH) mega_sandwich_table(bt, H, tc, tl, L->dh);
        if (L->tw) mega_tw_table(bt, H, tc, tl, W + L->logw, L->Lw, L->Tm);
    }
    if (xt) mega_xpos_table(xt, L->dh, xmin, xmax);
}

static mega_mhattn_k kernel_of(const mha_layer *L, const real *kbias, const real *bt, int tc, int tl, const real *xt,
                               int xoff, double p_drop, uint64_t key) {
    const mega_block_config *c = L->cfg;
    mega_mhattn_k k;
    memset(&k, 0, sizeof k);
    k.H = L->H, k.dh = L->dh;
    k.causal = !c->bidirectional;
    k.window = L->win;
    k.scale = (real)(1.0 / sqrt((double)k.dh));
    k.log_train = c->log_n_scaling ? log((double)c->train_len) : 0;
    k.btab = bt, k.bc = tc, k.bl = tl;
    if (kbias) k.kbias = kbias, k.kbl = L->Tm;
    k.xtab = xt, k.xoff = xoff;
    k.p_drop = p_drop, k.key_drop = key;
    return k;
}

/* MHATW's key-position bias log beta (the parameter itself; the kernel clamps positions) */
static const real *kbias_of(const mha_layer *L, const real *W) { return L->tw ? W + L->logbeta : NULL; }

/* forward-pass table geometry: distance 0 at T-1; causal tables hold d <= 0 only */
static void fwd_geometry(const mha_layer *L, int T, int *tc, int *tl) {
    *tc = T - 1;
    *tl = L->cfg->bidirectional ? 2 * T - 1 : T;
}

/* a kernel description with the right optional parts, for sizing scratch */
static mega_mhattn_k sizing_kernel(const mha_layer *L, int T) {
    static const real dummy[1] = {0};
    int tc, tl;
    fwd_geometry(L, T, &tc, &tl);
    return kernel_of(L, L->tw ? dummy : NULL, has_btab(L) ? dummy : NULL, tc, tl, has_xpos(L) ? dummy : NULL,
                     MEGA_MHATTN_BR, L->cfg->attention_dropout, 0);
}

/* mhatw output factor gamma(t), clamped to the last learned position (length policy) */
static inline real gamma_at(const mha_layer *L, const real *W, int64_t t) {
    return W[L->gamma + (size_t)(t < L->Tm ? t : L->Tm - 1)];
}

/* ---- activations, scratch, forward, backward -------------------------------------------- */

static size_t acts_view(const mha_layer *L, mha_acts *A, real *base, int B, int T) {
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim, H = (size_t)L->H;
    int tc, tl;
    fwd_geometry(L, T, &tc, &tl);
    mega_bump b = {base, 0};
    A->q = mega_bump_take(&b, R * D);
    A->k = mega_bump_take(&b, R * D);
    A->v = mega_bump_take(&b, R * D);
    A->O = mega_bump_take(&b, R * D);
    A->lse = mega_bump_take(&b, (size_t)B * H * T);
    A->bt = has_btab(L) ? mega_bump_take(&b, H * (size_t)tl) : NULL;
    A->xt = has_xpos(L) ? mega_bump_take(&b, ((size_t)T + MEGA_MHATTN_BR) * (size_t)(L->dh / 2)) : NULL;
    A->yp = L->tw ? mega_bump_take(&b, R * D) : NULL;
    return b.off;
}
static size_t am_acts_size(const void *L, int B, int T) {
    mha_acts A;
    return acts_view(L, &A, NULL, B, T);
}

/* backward scratch: dO, dq, dk, dv [R,D]; dy*gamma [R,D] (mhatw); dtab [H*tl]; kernel */
static size_t am_scratch(const void *layer, int B, int T, int nthreads) {
    const mha_layer *L = layer;
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim;
    int tc, tl;
    fwd_geometry(L, T, &tc, &tl);
    mega_mhattn_k k = sizing_kernel(L, T);
    if (nthreads < 1) nthreads = 1;
    return 4 * r16(R * D) + (L->tw ? r16(R * D) : 0) + r16((size_t)L->H * tl) + mega_mhattn_scratch(&k, B, T, nthreads) +
           16;
}

static mega_status am_forward(const void *layer, real *W, real *acts, real *y, const real *x, const uint8_t *pad,
                              int B, int T, const mega_run *run, real *scratch) {
    const mha_layer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim;
    mha_acts A;
    acts_view(L, &A, acts, B, T);
    /* the official KERPLE forward (chijames/KERPLE) clamps the parameter data in place */
    if (is_kerple(c)) mega_kerple_clamp(c->pos == MEGA_POS_KERPLE_POWER, W + L->kp, W + L->ka, L->H);
    mega_linear_forward(A.q, x, W + L->proj.w[MEGA_Q], W + L->proj.b[MEGA_Q], R, D, D);
    mega_linear_forward(A.k, x, W + L->proj.w[MEGA_K], W + L->proj.b[MEGA_K], R, D, D);
    mega_linear_forward(A.v, x, W + L->proj.w[MEGA_V], W + L->proj.b[MEGA_V], R, D, D);
    rotate_rows(L, A.q, A.k, R, T, 0, 0);
    int tc, tl;
    fwd_geometry(L, T, &tc, &tl);
    build_tables(L, W, A.bt, tc, tl, A.xt, -MEGA_MHATTN_BR, T);
    const double pd = run->training ? c->attention_dropout : 0;
    mega_mhattn_k kk = kernel_of(L, kbias_of(L, W), A.bt, tc, tl, A.xt, MEGA_MHATTN_BR, pd,
                                 mega__subkey(run->key, SITE_ATTN_DROP));
    mega_mhattn_forward(&kk, A.O, A.lse, A.q, A.k, A.v, pad, B, T, scratch, run->nthreads);
    mega_linear_forward(y, A.O, W + L->proj.w[MEGA_O], W + L->proj.b[MEGA_O], R, D, D);
    if (L->tw) {
        memcpy(A.yp, y, R * D * sizeof(real));
        for (size_t r = 0; r < R; r++) {
            const real g = gamma_at(L, W, (int64_t)(r % (size_t)T));
            for (size_t j = 0; j < D; j++) y[r * D + j] *= g;
        }
    }
    return MEGA_OK;
}

/* y = gamma(t) ypre: d gamma(min(t, Tm-1)) += <dy_t, ypre_t>, d ypre = gamma dy (into dyg) */
static void gamma_backward(const mha_layer *L, const real *W, real *dW, const real *yp, const real *dy, real *dyg,
                           size_t R, int T) {
    const size_t D = (size_t)L->cfg->embed_dim, Tm = (size_t)L->Tm;
    real *dg = dW + L->gamma;
    for (size_t r = 0; r < R; r++) {
        const size_t t = r % (size_t)T;
        const real gm = gamma_at(L, W, (int64_t)t);
        real s = 0;
        for (size_t j = 0; j < D; j++) s += dy[r * D + j] * yp[r * D + j], dyg[r * D + j] = gm * dy[r * D + j];
        dg[t < Tm ? t : Tm - 1] += s;
    }
}

static void am_backward(const void *layer, const real *W, real *dW, const real *acts, real *dx, const real *dy,
                        const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const mha_layer *L = layer;
    const mega_block_config *c = L->cfg;
    const int H = L->H;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim;
    mha_acts A;
    acts_view(L, &A, (real *)(uintptr_t)acts, B, T);
    int tc, tl;
    fwd_geometry(L, T, &tc, &tl);
    real *dO = scratch, *dq = dO + r16(R * D), *dk = dq + r16(R * D), *dv = dk + r16(R * D);
    real *dyg = dv + r16(R * D);
    real *dbt = dyg + (L->tw ? r16(R * D) : 0);
    real *kscr = dbt + r16((size_t)H * tl);
    const real *g = dy;
    if (L->tw) {
        gamma_backward(L, W, dW, A.yp, dy, dyg, R, T);
        g = dyg;
    }
    mega_linear_backward(dO, dW + L->proj.w[MEGA_O], dW + L->proj.b[MEGA_O], g, A.O, W + L->proj.w[MEGA_O], R, D, D, 0);
    memset(dq, 0, 3 * r16(R * D) * sizeof(real));
    if (A.bt) memset(dbt, 0, (size_t)H * tl * sizeof(real));
    const double pd = run->training ? c->attention_dropout : 0;
    mega_mhattn_k kk = kernel_of(L, kbias_of(L, W), A.bt, tc, tl, A.xt, MEGA_MHATTN_BR, pd,
                                 mega__subkey(run->key, SITE_ATTN_DROP));
    mega_mhattn_backward(&kk, dq, dk, dv, A.bt ? dbt : NULL, L->tw ? dW + L->logbeta : NULL, dO, A.O, A.q, A.k, A.v, A.lse,
                         pad, B, T, kscr, run->nthreads);
    if (A.bt) {
        if (is_kerple(c))
            mega_kerple_backward(c->pos == MEGA_POS_KERPLE_POWER, dbt, H, tc, tl, W + L->kp, W + L->ka, dW + L->kp,
                                 dW + L->ka);
        if (L->tw) mega_tw_table_backward(dbt, H, tc, tl, dW + L->logw, L->Lw, L->Tm);
    }
    rotate_rows(L, dq, dk, R, T, 0, 1); /* the rotation is orthogonal: its backward rotates back */
    mega_linear_backward(dx, dW + L->proj.w[MEGA_Q], dW + L->proj.b[MEGA_Q], dq, x, W + L->proj.w[MEGA_Q], R, D, D, 0);
    mega_linear_backward(dx, dW + L->proj.w[MEGA_K], dW + L->proj.b[MEGA_K], dk, x, W + L->proj.w[MEGA_K], R, D, D, 1);
    mega_linear_backward(dx, dW + L->proj.w[MEGA_V], dW + L->proj.b[MEGA_V], dv, x, W + L->proj.w[MEGA_V], R, D, D, 1);
}

/* ---- streaming (KV cache; a ring buffer with a window) ---------------------------------- */

/* cache slots: the window (ring buffer) or the capacity */
static int slots_of(const mha_layer *L, int cap) { return L->win > 0 ? L->win : cap; }

static size_t state_view(const mha_layer *L, mha_state *S, real *mem, int B, int cap) {
    const size_t D = (size_t)L->cfg->embed_dim, sl = (size_t)slots_of(L, cap);
    mega_bump b = {mem, 0};
    S->kc = mega_bump_take(&b, (size_t)B * sl * D);
    S->vc = mega_bump_take(&b, (size_t)B * sl * D);
    S->bt = has_btab(L) ? mega_bump_take(&b, (size_t)L->H * sl) : NULL;
    S->xt = has_xpos(L) ? mega_bump_take(&b, sl * (size_t)(L->dh / 2)) : NULL;
    S->slots = (int)sl, S->ring = L->win > 0;
    return b.off;
}

static size_t am_state_size(const void *L, int B, int cap) {
    mha_state S;
    return state_view(L, &S, NULL, B, cap);
}

static void am_state_reset(const void *L, mega_mixer_state *S) {
    (void)L;
    S->pos = 0; /* the caches are written before they are read */
}

static void am_state_reorder(const void *layer, mega_mixer_state *St, const int *idx, real *tmp) {
    const mha_layer *L = layer;
    mha_state S;
    state_view(L, &S, St->mem, St->B, St->cap);
    const size_t per = (size_t)S.slots * L->cfg->embed_dim;
    mega__rows_gather(S.kc, per, St->B, idx, tmp);
    mega__rows_gather(S.vc, per, St->B, idx, tmp);
}

static mega_status am_state_init(const void *layer, const real *W, mega_mixer_state *St) {
    const mha_layer *L = layer;
    mha_state S;
    state_view(L, &S, St->mem, St->B, St->cap);
    /* distances 0 .. slots-1 (a query never sees an older key); KERPLE reads clamped values */
    build_tables(L, W, S.bt, S.slots - 1, S.slots, S.xt, 0, S.slots);
    am_state_reset(L, St);
    return MEGA_OK;
}

static size_t am_step_scratch(const void *layer, int B, int T, int cap) {
    const mha_layer *L = layer;
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim;
    return 4 * r16(R * D) + r16((size_t)B * L->H * (size_t)slots_of(L, cap)) + 16;
}

static mega_status am_step(const void *layer, const real *W, mega_mixer_state *St, real *y, const real *x, int T,
                           real *scratch) {
    const mha_layer *L = layer;
    const mega_block_config *c = L->cfg;
    const int B = St->B, H = L->H, dh = L->dh, win = L->win;
    (void)dh; /* read only by the OpenMP pragma */
    mha_state S;
    state_view(L, &S, St->mem, B, St->cap);
    const int sl = S.slots;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim;
    if (T < 1) return MEGA_OK;
    if (!S.ring && St->pos + T > sl)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s streaming: %lld + %d positions exceed the cache capacity %d",
                  mega_mixer_name(c->mixer), (long long)St->pos, T, sl);
    real *q = scratch, *k = q + r16(R * D), *v = k + r16(R * D), *O = v + r16(R * D), *w = O + r16(R * D);
    mega_linear_forward(q, x, W + L->proj.w[MEGA_Q], W + L->proj.b[MEGA_Q], R, D, D);
    mega_linear_forward(k, x, W + L->proj.w[MEGA_K], W + L->proj.b[MEGA_K], R, D, D);
    mega_linear_forward(v, x, W + L->proj.w[MEGA_V], W + L->proj.b[MEGA_V], R, D, D);
    rotate_rows(L, q, k, R, T, St->pos, 0); /* absolute positions, as in training */
    mega_mhattn_k kk = kernel_of(L, kbias_of(L, W), S.bt, sl - 1, sl, S.xt, 0, 0, 0);
    const long units = (long)B * H;
    for (int i = 0; i < T; i++) {
        const int64_t t = St->pos + i, lo = win > 0 ? MEGA_MAX(0, t - win + 1) : 0;
        const size_t slot = (size_t)(t % sl);
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T + i;
            memcpy(S.kc + ((size_t)b * sl + slot) * D, k + r * D, D * sizeof(real));
            memcpy(S.vc + ((size_t)b * sl + slot) * D, v + r * D, D * sizeof(real));
        }
#pragma omp parallel for schedule(static) if (units > 1 && (size_t)units * (size_t)(t - lo + 1) * dh * 2 > MEGA_PAR_MIN)
        for (long un = 0; un < units; un++) {
            const int b = (int)(un / H), h = (int)(un % H);
            const size_t r = (size_t)b * T + i;
            mega_mhattn_query(&kk, h, O + r * D, q + r * D, t, lo, S.kc + (size_t)b * sl * D, S.vc + (size_t)b * sl * D,
                              sl, w + (size_t)un * sl);
        }
    }
    mega_linear_forward(y, O, W + L->proj.w[MEGA_O], W + L->proj.b[MEGA_O], R, D, D);
    if (L->tw)
        for (size_t r = 0; r < R; r++) {
            const real g = gamma_at(L, W, St->pos + (int64_t)(r % (size_t)T));
            for (size_t j = 0; j < D; j++) y[r * D + j] *= g;
        }
    St->pos += T;
    return MEGA_OK;
}

/* mha, mhatw: without a local mask the cache holds every position of the stream (local: a ring
 * of its window, the default context) */
static void am_context(const mega_block_config *c, int T, mega_block_context *x) {
    mega__context_default(mega_mixer_ops_of(c->mixer), c, T, x);
    x->cache_full = c->attn_window <= 0;
}

#define ATTN_OPTIONS "attention-dropout", "heads", "pos", "attn-window", "log-n-scaling"
static const char *const MHA_OPTIONS[] = {ATTN_OPTIONS, NULL};
static const char *const LOCAL_OPTIONS[] = {ATTN_OPTIONS, "window", NULL};
static const char *const MHATW_OPTIONS[] = {ATTN_OPTIONS, "max-len", NULL};

#define ATTN_OPS(NAME, RESOLVE, CHECK, DECLARE, OPTIONS, CONTEXT)                                                    \
    {                                                                                                               \
        .name = NAME, .flags = MEGA_MIXER_CAUSAL | MEGA_MIXER_BIDIR, .layer_size = sizeof(mha_layer),              \
        .resolve = RESOLVE, .check = CHECK, .options = OPTIONS, .context = CONTEXT,                              \
        .declare = DECLARE, .init = am_init, .acts_size = am_acts_size,                                           \
        .scratch_size = am_scratch, .forward = am_forward, .backward = am_backward, .state_size = am_state_size,   \
        .state_init = am_state_init, .state_reset = am_state_reset, .state_reorder = am_state_reorder, .step_scratch = am_step_scratch,              \
        .step = am_step,                                                                                            \
    }
const mega_mixer_ops mega_mixer_ops_mha = ATTN_OPS("mha", am_resolve, am_check, mha_declare, MHA_OPTIONS, am_context);
const mega_mixer_ops mega_mixer_ops_local =
    ATTN_OPS("local", local_resolve, local_check, local_declare, LOCAL_OPTIONS, NULL);
const mega_mixer_ops mega_mixer_ops_mhatw =
    ATTN_OPS("mhatw", mhatw_resolve, mhatw_check, mhatw_declare, MHATW_OPTIONS, am_context);
