/*
 * gMLP spatial gating unit (Liu et al. 2021, arXiv 2105.08050, §2.1; lucidrains' SpatialGatingUnit)
 * as a token-mixing core of the standard residual sublayer (mixer.h; the block adds the norm
 * before, the residual and the FFN after):
 *
 *   Z1 = gelu(x U1ᵀ + b1), Z2 = gelu(x U2ᵀ + b2)     [U1; U2] = proj_in: D -> F (F = hidden-dim)
 *   N2 = LN(Z2), pad rows zeroed                       (project extension: pads leave the mixing)
 *   G[t, c] = sum_u W_h[t, u] N2[u, c] + b_h[t]         W_h [n x n] per head h of the F/2 channels
 *                                                       (causal: u <= t; n = max-len, L <= n)
 *   s = Z1 * G;   y = s Voutᵀ + b_out                   (proj_out: F/2 -> D)
 *
 * The gMLP width F_g is the block's hidden-dim (cfg->hidden_dim): proj_in has 2 x (F/2) outputs, the
 * spatial projection mixes F/2 channels. Heads (cfg->heads, lucidrains' multi-head SGU) split
 * those channels into H groups with their own W_h and b_h; H = 1 is the paper's gMLP.
 * Parameters ("<prefix>mixer."): proj_in.weight [F, D], proj_in.bias [F], sgu_norm.weight /
 * sgu_norm.bias [F/2], spatial.weight [H, n, n], spatial.bias [H, n], proj_out.weight [D, F/2],
 * proj_out.bias [D].
 * Init: W ~ U(+-1e-3/n), b = 1 (gMLP §2.1 and lucidrains' SpatialGatingUnit, so s ~ Z1 and the
 * unit starts as an FFN), LN weight 1 / bias 0, projections N(0, 0.02) with zero biases (project
 * choice, as the Mega layer).
 * Streaming (causal): the state keeps every past N2 row (t * F/2 floats) and needs
 * row t of W; per token t * F/2 MACs plus the projections.
 */
#include "layers/mixer.h"
#include "layers/seqnorm.h"
#include "ops/ops.h"

typedef struct {
    const mega_block_config *cfg;
    int f2, heads, npos;  /* F/2 mixed channels, heads, n = max-len positions */
    mega_seqnorm ln;      /* sgu_norm: the LayerNorm over Z2 (shared seqnorm kernel) */
    size_t in_w, in_b, sp_w, sp_b, out_w, out_b;
} gmlp_layer;
MEGA_MIXER_LAYER_FITS(gmlp_layer);

/* saved activations [R, F/2] each (st: the LayerNorm statistics) */
typedef struct {
    real *pre1, *pre2, *z1, *z2, *n2, *st, *G, *s;
} gmlp_acts;

static size_t rup(size_t n) { return (n + 15) & ~(size_t)15; }

static void gm_resolve(mega_block_config *c) {
    if (c->heads == 0) c->heads = 1; /* the paper's gMLP */
    if (c->max_len == 0) c->max_len = mega__default_max_len(c);
}

static mega_status gm_check(const mega_block_config *c) {
    if (c->max_len < 1 || c->max_len > 16384)
        MEGA_FAIL(MEGA_ERR_INVALID, "gmlp needs max-len in [1, 16384] (its spatial projection is max-len x max-len), got %d", c->max_len);
    if (c->hidden_dim < 2 || c->hidden_dim % 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "gmlp: hidden-dim (the gMLP width F) must be even, got %d", c->hidden_dim);
    if (c->heads < 1 || (c->hidden_dim / 2) % c->heads)
        MEGA_FAIL(MEGA_ERR_INVALID, "gmlp: heads (%d) must be >= 1 and divide hidden-dim/2 = %d", c->heads, c->hidden_dim / 2);
    return MEGA_OK;
}

static mega_status gm_declare(void *layer, const mega_block_config *c, mega_params *P, const char *prefix) {
    gmlp_layer *L = layer;
    char pre[MEGA_NAME_MAX];
    memset(L, 0, sizeof *L);
    L->cfg = c;
    L->f2 = c->hidden_dim / 2, L->heads = c->heads, L->npos = c->max_len;
    const int64_t D = c->embed_dim, F = c->hidden_dim, H = c->heads, n = c->max_len;
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "proj_in.weight", MEGA_P_DECAY, &L->in_w, F, D));
    MEGA_TRY(MEGA_PADD(P, pre, "proj_in.bias", 0, &L->in_b, F));
    snprintf(pre, sizeof pre, "%smixer.sgu_norm.", prefix);
    MEGA_TRY(mega_seqnorm_declare(&L->ln, P, pre, MEGA_NORM_LAYER, (int)(F / 2), 1));
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "spatial.weight", MEGA_P_DECAY, &L->sp_w, H, n, n));
    MEGA_TRY(MEGA_PADD(P, pre, "spatial.bias", 0, &L->sp_b, H, n));
    MEGA_TRY(MEGA_PADD(P, pre, "proj_out.weight", MEGA_P_DECAY, &L->out_w, D, F / 2));
    MEGA_TRY(MEGA_PADD(P, pre, "proj_out.bias", 0, &L->out_b, D));
    return MEGA_OK;
}

static void gm_init(const void *layer, real *W, mega_rng *rng) {
    const gmlp_layer *L = layer;
    const size_t D = (size_t)L->cfg->embed_dim, F2 = (size_t)L->f2, H = (size_t)L->heads, n = (size_t)L->npos;
    mega_fill_normal(W + L->in_w, 2 * F2 * D, 0, 0.02, rng);
    mega_fill_const(W + L->in_b, 2 * F2, 0);
    mega_seqnorm_init(&L->ln, W);
    const double eps = 1e-3 / (double)n;
    mega_fill_uniform(W + L->sp_w, H * n * n, -eps, eps, rng);
    mega_fill_const(W + L->sp_b, H * n, 1);
    mega_fill_normal(W + L->out_w, D * F2, 0, 0.02, rng);
    mega_fill_const(W + L->out_b, D, 0);
}

static size_t acts_view(const gmlp_layer *L, gmlp_acts *A, real *base, int B, int T) {
    const size_t R = (size_t)B * T, F2 = (size_t)L->f2;
    mega_bump b = {base, 0};
    A->pre1 = mega_bump_take(&b, R * F2);
    A->pre2 = mega_bump_take(&b, R * F2);
    A->z1 = mega_bump_take(&b, R * F2);
    A->z2 = mega_bump_take(&b, R * F2);
    A->n2 = mega_bump_take(&b, R * F2);
    A->st = mega_bump_take(&b, mega_seqnorm_stat_size(&L->ln, R));
    A->G = mega_bump_take(&b, R * F2);
    A->s = mega_bump_take(&b, R * F2);
    return b.off;
}
static size_t gm_acts_size(const void *L, int B, int T) {
    gmlp_acts A;
    return acts_view(L, &A, NULL, B, T);
}

/* scratch: Wm [T,T] (masked copy) | dWt [T,T] | four [R, F/2] buffers (backward) */
static size_t gm_scratch(const void *layer, int B, int T, int nt) {
    const gmlp_layer *L = layer;
    (void)nt;
    const size_t R = (size_t)B * T, F2 = (size_t)L->f2;
    return 2 * rup((size_t)T * T) + 4 * rup(R * F2) + 64;
}

/* the causal mask of W_h[:T, :T] (copy, upper triangle 0); bidirectional uses W directly */
static const real *spatial_w(const gmlp_layer *L, const real *W, int h, int T, real *Wm, size_t *ld) {
    const size_t n = (size_t)L->npos;
    const real *Wh = W + L->sp_w + (size_t)h * n * n;
    if (L->cfg->bidirectional) {
        *ld = n;
        return Wh;
    }
    for (int t = 0; t < T; t++)
        for (int u = 0; u < T; u++) Wm[(size_t)t * T + u] = u <= t ? Wh[(size_t)t * n + u] : 0;
    *ld = (size_t)T;
    return Wm;
}

static void zero_pad_rows(real *x, const uint8_t *pad, size_t R, size_t F2) {
    if (!pad) return;
    for (size_t r = 0; r < R; r++)
        if (pad[r]) memset(x + r * F2, 0, F2 * sizeof(real));
}

static mega_status gm_forward(const void *layer, real *W, real *acts, real *y, const real *x, const uint8_t *pad,
                              int B, int T, const mega_run *run, real *scratch) {
    const gmlp_layer *L = layer;
    gmlp_acts A;
    acts_view(L, &A, acts, B, T);
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim, F2 = (size_t)L->f2, n = (size_t)L->npos;
    const int H = L->heads;
    const size_t hd = F2 / (size_t)H;
    if (T > L->npos) MEGA_FAIL(MEGA_ERR_INVALID, "sequence length %d exceeds the mixer's max-len %d (gmlp: absolute-position spatial projection)", T, L->npos);
    real *pre1 = A.pre1, *pre2 = A.pre2, *z1 = A.z1, *z2 = A.z2, *n2 = A.n2, *st = A.st, *G = A.G, *s = A.s;
    const real *U = W + L->in_w, *bU = W + L->in_b;
    mega_linear_forward(pre1, x, U, bU, R, D, F2);
    mega_linear_forward(pre2, x, U + F2 * D, bU + F2, R, D, F2);
    mega_act_forward(MEGA_ACT_GELU, z1, pre1, R * F2);
    mega_act_forward(MEGA_ACT_GELU, z2, pre2, R * F2);
    mega_seqnorm_forward(&L->ln, W, n2, st, z2, R, run->training, 0, run->sync);
    zero_pad_rows(n2, pad, R, F2);
    /* G = W_h N2 + b_h per (batch, head) */
    const real *bias = W + L->sp_b;
    for (int h = 0; h < H; h++) {
        size_t ldw;
        const real *Wm = spatial_w(L, W, h, T, scratch, &ldw);
        for (int b = 0; b < B; b++) {
            real *Gb = G + (size_t)b * T * F2 + (size_t)h * hd;
            for (int t = 0; t < T; t++)
                for (size_t c = 0; c < hd; c++) Gb[(size_t)t * F2 + c] = bias[(size_t)h * n + t];
            mega_gemm(0, 0, (size_t)T, hd, (size_t)T, 1, Wm, ldw, n2 + (size_t)b * T * F2 + (size_t)h * hd, F2, 1, Gb, F2);
        }
    }
    for (size_t i = 0; i < R * F2; i++) s[i] = z1[i] * G[i];
    mega_linear_forward(y, s, W + L->out_w, W + L->out_b, R, F2, D);
    return MEGA_OK;
}

static void gm_backward(const void *layer, const real *W, real *dW, const real *acts, real *dx, const real *dy,
                        const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const gmlp_layer *L = layer;
    gmlp_acts A;
    acts_view(L, &A, (real *)(uintptr_t)acts, B, T);
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim, F2 = (size_t)L->f2, n = (size_t)L->npos;
    const int H = L->heads, causal = !L->cfg->bidirectional;
    const size_t hd = F2 / (size_t)H;
    const real *pre1 = A.pre1, *pre2 = A.pre2, *z1 = A.z1, *z2 = A.z2, *n2 = A.n2, *st = A.st, *G = A.G, *s = A.s;
    real *Wm = scratch, *dWt = Wm + rup((size_t)T * T);
    real *dG = dWt + rup((size_t)T * T), *dz1 = dG + rup(R * F2), *dn2 = dz1 + rup(R * F2), *dz2 = dn2 + rup(R * F2);
    /* y = s Voutᵀ + b_out */
    mega_linear_backward(dG, dW + L->out_w, dW + L->out_b, dy, s, W + L->out_w, R, F2, D, 0);
    /* s = Z1 G: dZ1 = ds G, dG = ds Z1 */
    for (size_t i = 0; i < R * F2; i++) {
        dz1[i] = dG[i] * G[i];
        dG[i] *= z1[i];
    }
    real *dbias = dW + L->sp_b, *dWsp = dW + L->sp_w;
    for (int h = 0; h < H; h++) {
        /* db_h[t] = sum over batch and the head's channels of dG */
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const real *g = dG + ((size_t)b * T + t) * F2 + (size_t)h * hd;
                real a = 0;
                for (size_t c = 0; c < hd; c++) a += g[c];
                dbias[(size_t)h * n + t] += a;
            }
        /* dW_h = sum_b dG_bh N2_bhᵀ (lower triangle when causal); dN2_bh = W_hᵀ dG_bh */
        for (int b = 0; b < B; b++)
            mega_gemm(0, 1, (size_t)T, (size_t)T, hd, 1, dG + (size_t)b * T * F2 + (size_t)h * hd, F2,
                      n2 + (size_t)b * T * F2 + (size_t)h * hd, F2, b ? 1 : 0, dWt, (size_t)T);
        real *dWh = dWsp + (size_t)h * n * n;
        for (int t = 0; t < T; t++)
            for (int u = 0; u < (causal ? t + 1 : T); u++) dWh[(size_t)t * n + u] += dWt[(size_t)t * T + u];
        size_t ldw;
        const real *Wh = spatial_w(L, W, h, T, Wm, &ldw);
        for (int b = 0; b < B; b++)
            mega_gemm(1, 0, (size_t)T, hd, (size_t)T, 1, Wh, ldw, dG + (size_t)b * T * F2 + (size_t)h * hd, F2, 0,
                      dn2 + (size_t)b * T * F2 + (size_t)h * hd, F2);
    }
    zero_pad_rows(dn2, pad, R, F2);
    mega_seqnorm_backward(&L->ln, W, dW, dz2, dn2, z2, st, R, run->training, 0, run->sync);
    mega_act_backward(MEGA_ACT_GELU, dz1, dz1, pre1, R * F2);
    mega_act_backward(MEGA_ACT_GELU, dz2, dz2, pre2, R * F2);
    const real *U = W + L->in_w;
    real *dU = dW + L->in_w, *dbU = dW + L->in_b;
    mega_linear_backward(dx, dU, dbU, dz1, x, U, R, D, F2, 0);
    mega_linear_backward(dx, dU + F2 * D, dbU + F2, dz2, x, U + F2 * D, R, D, F2, 1);
}

/* ---- streaming: p[0] = N2 cache [B, rows, F/2], rows = min(cap, max-len) ------------------ */
static int gm_rows(const gmlp_layer *L, int cap) { return MEGA_MAX(1, MEGA_MIN(cap, L->npos)); }

static size_t gm_state_size(const void *layer, int B, int cap) {
    const gmlp_layer *L = layer;
    return rup((size_t)B * gm_rows(L, cap) * L->f2);
}
static void gm_state_reset(const void *L, mega_mixer_state *S) {
    (void)L;
    S->pos = 0; /* the cache rows are written before they are read */
}
static mega_status gm_state_init(const void *L, const real *W, mega_mixer_state *S) {
    (void)W;
    gm_state_reset(L, S);
    return MEGA_OK;
}
/* step scratch: pre1, pre2 (-> z1, z2), n2, G [R, F/2] | LN statistics */
static size_t gm_step_scratch(const void *layer, int B, int T, int cap) {
    const gmlp_layer *L = layer;
    (void)cap;
    const size_t R = (size_t)B * T;
    return 4 * rup(R * L->f2) + rup(mega_seqnorm_stat_size(&L->ln, R)) + 64;
}
static mega_status gm_step(const void *layer, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                           real *scratch) {
    const gmlp_layer *L = layer;
    const int B = S->B, rows = gm_rows(L, S->cap);
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim, F2 = (size_t)L->f2, n = (size_t)L->npos;
    const int H = L->heads;
    const size_t hd = F2 / (size_t)H;
    if (S->pos + T > L->npos)
        MEGA_FAIL(MEGA_ERR_INVALID, "sequence length %lld exceeds the mixer's max-len %d (gmlp: absolute-position spatial projection)",
                  (long long)S->pos + T, L->npos);
    if (S->pos + T > rows)
        MEGA_FAIL(MEGA_ERR_INVALID, "stream of %lld tokens exceeds the gmlp cache capacity %d", (long long)S->pos + T, rows);
    real *z1 = scratch, *z2 = z1 + rup(R * F2), *n2 = z2 + rup(R * F2), *G = n2 + rup(R * F2), *st = G + rup(R * F2);
    const real *U = W + L->in_w, *bU = W + L->in_b;
    mega_linear_forward(z1, x, U, bU, R, D, F2);
    mega_linear_forward(z2, x, U + F2 * D, bU + F2, R, D, F2);
    mega_act_forward(MEGA_ACT_GELU, z1, z1, R * F2);
    mega_act_forward(MEGA_ACT_GELU, z2, z2, R * F2);
    mega_seqnorm_forward(&L->ln, (real *)W, n2, st, z2, R, 0, 0, NULL);
    const real *bias = W + L->sp_b, *Wsp = W + L->sp_w;
    for (int b = 0; b < B; b++) {
        real *cache = S->mem + (size_t)b * rows * F2;
        for (int t = 0; t < T; t++) {
            const int64_t p = S->pos + t;
            const size_t r = (size_t)b * T + t;
            memcpy(cache + (size_t)p * F2, n2 + r * F2, F2 * sizeof(real));
            /* G_p = W_h[p, :p+1] N2[:p+1] + b_h[p] (row p of the causal spatial projection) */
            for (int h = 0; h < H; h++) {
                real *g = G + r * F2 + (size_t)h * hd;
                for (size_t c = 0; c < hd; c++) g[c] = bias[(size_t)h * n + (size_t)p];
                mega_gemm_serial(0, 0, 1, hd, (size_t)p + 1, 1, Wsp + ((size_t)h * n + (size_t)p) * n, n,
                                 cache + (size_t)h * hd, F2, 1, g, F2);
            }
        }
    }
    for (size_t i = 0; i < R * F2; i++) G[i] *= z1[i];
    mega_linear_forward(y, G, W + L->out_w, W + L->out_b, R, F2, D);
    S->pos += T;
    return MEGA_OK;
}

/* the stream's cache holds every position's N2 row (up to max-len) */
static void gm_context(const mega_block_config *c, int T, mega_block_context *x) {
    mega__context_default(&mega_mixer_ops_gmlp, c, T, x);
    x->cache_full = 1;
}

static const char *const GM_OPTIONS[] = {"hidden-dim", "heads", "max-len", NULL};

const mega_mixer_ops mega_mixer_ops_gmlp = {
    .name = "gmlp",
    .flags = MEGA_MIXER_CAUSAL | MEGA_MIXER_BIDIR,
    .layer_size = sizeof(gmlp_layer),
    .resolve = gm_resolve,
    .check = gm_check,
    .options = GM_OPTIONS,
    .context = gm_context,
    .declare = gm_declare,
    .init = gm_init,
    .acts_size = gm_acts_size,
    .scratch_size = gm_scratch,
    .forward = gm_forward,
    .backward = gm_backward,
    .state_size = gm_state_size,
    .state_init = gm_state_init,
    .state_reset = gm_state_reset,
    .step_scratch = gm_step_scratch,
    .step = gm_step,
};
