/*
 * gMLP spatial gating unit (SPEC §6.1) as a token-mixing core of the standard residual
 * sublayer (mixer.h; the block adds the norm before, the residual and the FFN after):
 *
 *   Z1 = gelu(x U1ᵀ + b1), Z2 = gelu(x U2ᵀ + b2)     [U1; U2] = proj_in: D -> F (F = hidden-dim)
 *   N2 = LN(Z2), pad rows zeroed                       (SPEC §6.1 [ext]: pads leave the mixing)
 *   G[t, c] = sum_u W_h[t, u] N2[u, c] + b_h[t]         W_h [n x n] per head h of the F/2 channels
 *                                                       (causal: u <= t; n = max-len, L <= n)
 *   s = Z1 * G;   y = s Voutᵀ + b_out                   (proj_out: F/2 -> D)
 *
 * The gMLP width F_g is the block's hidden-dim (cfg->E): proj_in has 2 x (F/2) outputs, the
 * spatial projection mixes F/2 channels. Heads (cfg->heads, lucidrains' multi-head SGU) split
 * those channels into H groups with their own W_h and b_h; H = 1 is the paper's gMLP.
 * Parameters ("<prefix>mixer."): proj_in.weight [F, D], proj_in.bias [F], sgu_norm.weight /
 * sgu_norm.bias [F/2], spatial.weight [H, n, n], spatial.bias [H, n], proj_out.weight [D, F/2],
 * proj_out.bias [D].
 * Init: W ~ U(+-1e-3/n), b = 1 (SPEC §6.1, so s ~ Z1 and the unit starts as an FFN), LN weight 1 /
 * bias 0, projections N(0, 0.02) with zero biases [ext, as the Mega layer].
 * Streaming (causal): the state keeps every past N2 row (t * F/2 floats, SPEC §6.4) and needs
 * row t of W; per token t * F/2 MACs plus the projections.
 */
#include "layers/block.h"

/* mx->off */
enum { O_IN_W, O_IN_B, O_LN_W, O_LN_B, O_SP_W, O_SP_B, O_OUT_W, O_OUT_B };
/* mx->iv: [0] F/2, [1] heads, [2] n */
#define F2(mx) ((mx)->iv[0])
#define HEADS(mx) ((mx)->iv[1])
#define NPOS(mx) ((mx)->iv[2])
/* activations: p[0] pre1, p[1] pre2, p[2] z1, p[3] z2, p[4] n2, p[5] LN statistics, p[6] G, p[7] s */

static size_t rup(size_t n) { return (n + 15) & ~(size_t)15; }

/* the LayerNorm over Z2 (shared seqnorm kernel; the struct is rebuilt from the offsets) */
static mega_seqnorm sgu_norm(const mega_mixer *mx) {
    mega_seqnorm n;
    memset(&n, 0, sizeof n);
    n.type = MEGA_NORM_LAYER, n.D = F2(mx), n.affine = 1;
    n.w = mx->off[O_LN_W], n.b = mx->off[O_LN_B];
    return n;
}

static mega_status gm_declare(mega_mixer *mx, mega_params *P, const char *prefix) {
    const mega_block_cfg *c = mx->cfg;
    char pre[MEGA_NAME_MAX];
    memset(mx->off, 0, sizeof mx->off);
    memset(mx->iv, 0, sizeof mx->iv);
    if (c->max_len < 1 || c->max_len > 16384)
        MEGA_FAIL(MEGA_ERR_INVALID, "gmlp needs max-len in [1, 16384] (its spatial projection is max-len x max-len), got %d", c->max_len);
    if (c->E < 2 || c->E % 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "gmlp: hidden-dim (the gMLP width F) must be even, got %d", c->E);
    if (c->heads < 1 || (c->E / 2) % c->heads)
        MEGA_FAIL(MEGA_ERR_INVALID, "gmlp: heads (%d) must be >= 1 and divide hidden-dim/2 = %d", c->heads, c->E / 2);
    F2(mx) = c->E / 2, HEADS(mx) = c->heads, NPOS(mx) = c->max_len;
    const int64_t D = c->D, F = c->E, H = c->heads, n = c->max_len;
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "proj_in.weight", MEGA_P_DECAY, &mx->off[O_IN_W], F, D));
    MEGA_TRY(MEGA_PADD(P, pre, "proj_in.bias", 0, &mx->off[O_IN_B], F));
    mega_seqnorm ln;
    snprintf(pre, sizeof pre, "%smixer.sgu_norm.", prefix);
    MEGA_TRY(mega_seqnorm_declare(&ln, P, pre, MEGA_NORM_LAYER, (int)(F / 2), 1));
    mx->off[O_LN_W] = ln.w, mx->off[O_LN_B] = ln.b;
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "spatial.weight", MEGA_P_DECAY, &mx->off[O_SP_W], H, n, n));
    MEGA_TRY(MEGA_PADD(P, pre, "spatial.bias", 0, &mx->off[O_SP_B], H, n));
    MEGA_TRY(MEGA_PADD(P, pre, "proj_out.weight", MEGA_P_DECAY, &mx->off[O_OUT_W], D, F / 2));
    MEGA_TRY(MEGA_PADD(P, pre, "proj_out.bias", 0, &mx->off[O_OUT_B], D));
    return MEGA_OK;
}

static void gm_init(const mega_mixer *mx, real *W, mega_rng *rng) {
    const size_t D = (size_t)mx->cfg->D, F2 = (size_t)F2(mx), H = (size_t)HEADS(mx), n = (size_t)NPOS(mx);
    mega_fill_normal(W + mx->off[O_IN_W], 2 * F2 * D, 0, 0.02, rng);
    mega_fill_const(W + mx->off[O_IN_B], 2 * F2, 0);
    mega_seqnorm ln = sgu_norm(mx);
    mega_seqnorm_init(&ln, W);
    const double eps = 1e-3 / (double)n;
    mega_fill_uniform(W + mx->off[O_SP_W], H * n * n, -eps, eps, rng);
    mega_fill_const(W + mx->off[O_SP_B], H * n, 1);
    mega_fill_normal(W + mx->off[O_OUT_W], D * F2, 0, 0.02, rng);
    mega_fill_const(W + mx->off[O_OUT_B], D, 0);
}

static size_t gm_acts(const mega_mixer *mx, mega_mixer_acts *A, real *base, int B, int T) {
    const size_t R = (size_t)B * T, F2 = (size_t)F2(mx);
    mega_seqnorm ln = sgu_norm(mx);
    mega_bump b = {base, 0};
    mega_mixer_acts a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < 5; i++) a.p[i] = mega_bump_take(&b, R * F2);
    a.p[5] = mega_bump_take(&b, mega_seqnorm_stat_size(&ln, R));
    a.p[6] = mega_bump_take(&b, R * F2);
    a.p[7] = mega_bump_take(&b, R * F2);
    if (A) *A = a;
    return b.off;
}

/* scratch: Wm [T,T] (masked copy) | dWt [T,T] | four [R, F/2] buffers (backward) */
static size_t gm_scratch(const mega_mixer *mx, int B, int T, int nt) {
    (void)nt;
    const size_t R = (size_t)B * T, F2 = (size_t)F2(mx);
    return 2 * rup((size_t)T * T) + 4 * rup(R * F2) + 64;
}

/* the causal mask of W_h[:T, :T] (copy, upper triangle 0); bidirectional uses W directly */
static const real *spatial_w(const mega_mixer *mx, const real *W, int h, int T, real *Wm, size_t *ld) {
    const size_t n = (size_t)NPOS(mx);
    const real *Wh = W + mx->off[O_SP_W] + (size_t)h * n * n;
    if (mx->cfg->bidir) {
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

static mega_status gm_forward(const mega_mixer *mx, real *W, mega_mixer_acts *A, real *y, const real *x, const uint8_t *pad,
                              int B, int T, const mega_run *run, real *scratch) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D, F2 = (size_t)F2(mx), n = (size_t)NPOS(mx);
    const int H = HEADS(mx);
    const size_t hd = F2 / (size_t)H;
    if (T > NPOS(mx)) MEGA_FAIL(MEGA_ERR_INVALID, "sequence length %d exceeds the mixer's max-len %d (gmlp: absolute-position spatial projection)", T, NPOS(mx));
    real *pre1 = A->p[0], *pre2 = A->p[1], *z1 = A->p[2], *z2 = A->p[3], *n2 = A->p[4], *st = A->p[5], *G = A->p[6], *s = A->p[7];
    const real *U = W + mx->off[O_IN_W], *bU = W + mx->off[O_IN_B];
    mega_linear_forward(pre1, x, U, bU, R, D, F2);
    mega_linear_forward(pre2, x, U + F2 * D, bU + F2, R, D, F2);
    mega_act_forward(MEGA_ACT_GELU, z1, pre1, R * F2);
    mega_act_forward(MEGA_ACT_GELU, z2, pre2, R * F2);
    mega_seqnorm ln = sgu_norm(mx);
    mega_seqnorm_forward(&ln, W, n2, st, z2, R, run->training, 0);
    zero_pad_rows(n2, pad, R, F2);
    /* G = W_h N2 + b_h per (batch, head) */
    const real *bias = W + mx->off[O_SP_B];
    for (int h = 0; h < H; h++) {
        size_t ldw;
        const real *Wm = spatial_w(mx, W, h, T, scratch, &ldw);
        for (int b = 0; b < B; b++) {
            real *Gb = G + (size_t)b * T * F2 + (size_t)h * hd;
            for (int t = 0; t < T; t++)
                for (size_t c = 0; c < hd; c++) Gb[(size_t)t * F2 + c] = bias[(size_t)h * n + t];
            mega_gemm(0, 0, (size_t)T, hd, (size_t)T, 1, Wm, ldw, n2 + (size_t)b * T * F2 + (size_t)h * hd, F2, 1, Gb, F2);
        }
    }
    for (size_t i = 0; i < R * F2; i++) s[i] = z1[i] * G[i];
    mega_linear_forward(y, s, W + mx->off[O_OUT_W], W + mx->off[O_OUT_B], R, F2, D);
    return MEGA_OK;
}

static void gm_backward(const mega_mixer *mx, const real *W, real *dW, const mega_mixer_acts *A, real *dx, const real *dy,
                        const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D, F2 = (size_t)F2(mx), n = (size_t)NPOS(mx);
    const int H = HEADS(mx), causal = !mx->cfg->bidir;
    const size_t hd = F2 / (size_t)H;
    const real *pre1 = A->p[0], *pre2 = A->p[1], *z1 = A->p[2], *z2 = A->p[3], *n2 = A->p[4], *st = A->p[5], *G = A->p[6], *s = A->p[7];
    real *Wm = scratch, *dWt = Wm + rup((size_t)T * T);
    real *dG = dWt + rup((size_t)T * T), *dz1 = dG + rup(R * F2), *dn2 = dz1 + rup(R * F2), *dz2 = dn2 + rup(R * F2);
    /* y = s Voutᵀ + b_out */
    mega_linear_backward(dG, dW + mx->off[O_OUT_W], dW + mx->off[O_OUT_B], dy, s, W + mx->off[O_OUT_W], R, F2, D, 0);
    /* s = Z1 G: dZ1 = ds G, dG = ds Z1 (SPEC §6.3) */
    for (size_t i = 0; i < R * F2; i++) {
        dz1[i] = dG[i] * G[i];
        dG[i] *= z1[i];
    }
    real *dbias = dW + mx->off[O_SP_B], *dWsp = dW + mx->off[O_SP_W];
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
        const real *Wh = spatial_w(mx, W, h, T, Wm, &ldw);
        for (int b = 0; b < B; b++)
            mega_gemm(1, 0, (size_t)T, hd, (size_t)T, 1, Wh, ldw, dG + (size_t)b * T * F2 + (size_t)h * hd, F2, 0,
                      dn2 + (size_t)b * T * F2 + (size_t)h * hd, F2);
    }
    zero_pad_rows(dn2, pad, R, F2);
    mega_seqnorm ln = sgu_norm(mx);
    mega_seqnorm_backward(&ln, W, dW, dz2, dn2, z2, st, R, run->training, 0);
    mega_act_backward(MEGA_ACT_GELU, dz1, dz1, pre1, R * F2);
    mega_act_backward(MEGA_ACT_GELU, dz2, dz2, pre2, R * F2);
    const real *U = W + mx->off[O_IN_W];
    real *dU = dW + mx->off[O_IN_W], *dbU = dW + mx->off[O_IN_B];
    mega_linear_backward(dx, dU, dbU, dz1, x, U, R, D, F2, 0);
    mega_linear_backward(dx, dU + F2 * D, dbU + F2, dz2, x, U + F2 * D, R, D, F2, 1);
}

/* ---- streaming: p[0] = N2 cache [B, rows, F/2], rows = min(cap, max-len) ------------------ */
static int gm_rows(const mega_mixer *mx, int cap) { return MEGA_MAX(1, MEGA_MIN(cap, NPOS(mx))); }

static size_t gm_state_size(const mega_mixer *mx, int B, int cap) {
    return rup((size_t)B * gm_rows(mx, cap) * F2(mx));
}
static void gm_state_reset(const mega_mixer *mx, mega_mixer_state *S) {
    (void)mx;
    S->pos = 0, S->len = 0; /* the cache rows are written before they are read */
}
static mega_status gm_state_init(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *mem, int B, int cap) {
    (void)W;
    if (mx->cfg->bidir) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "bidirectional gmlp has no streaming form");
    if (cap < 1) MEGA_FAIL(MEGA_ERR_INVALID, "streaming capacity must be positive");
    memset(S, 0, sizeof *S);
    S->B = B, S->cap = gm_rows(mx, cap);
    S->p[0] = mem, S->n[0] = (size_t)B * S->cap * F2(mx);
    gm_state_reset(mx, S);
    return MEGA_OK;
}
/* step scratch: pre1, pre2 (-> z1, z2), n2, G [R, F/2] | LN statistics */
static size_t gm_step_scratch(const mega_mixer *mx, int B, int T, int cap) {
    (void)cap;
    const size_t R = (size_t)B * T;
    mega_seqnorm ln = sgu_norm(mx);
    return 4 * rup(R * F2(mx)) + rup(mega_seqnorm_stat_size(&ln, R)) + 64;
}
static mega_status gm_step(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                           real *scratch) {
    const int B = S->B;
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D, F2 = (size_t)F2(mx), n = (size_t)NPOS(mx);
    const int H = HEADS(mx);
    const size_t hd = F2 / (size_t)H;
    if (S->pos + T > NPOS(mx))
        MEGA_FAIL(MEGA_ERR_INVALID, "sequence length %lld exceeds the mixer's max-len %d (gmlp: absolute-position spatial projection)",
                  (long long)S->pos + T, NPOS(mx));
    if (S->pos + T > S->cap)
        MEGA_FAIL(MEGA_ERR_INVALID, "stream of %lld tokens exceeds the gmlp cache capacity %d", (long long)S->pos + T, S->cap);
    real *z1 = scratch, *z2 = z1 + rup(R * F2), *n2 = z2 + rup(R * F2), *G = n2 + rup(R * F2), *st = G + rup(R * F2);
    const real *U = W + mx->off[O_IN_W], *bU = W + mx->off[O_IN_B];
    mega_linear_forward(z1, x, U, bU, R, D, F2);
    mega_linear_forward(z2, x, U + F2 * D, bU + F2, R, D, F2);
    mega_act_forward(MEGA_ACT_GELU, z1, z1, R * F2);
    mega_act_forward(MEGA_ACT_GELU, z2, z2, R * F2);
    mega_seqnorm ln = sgu_norm(mx);
    mega_seqnorm_forward(&ln, (real *)W, n2, st, z2, R, 0, 0);
    const real *bias = W + mx->off[O_SP_B], *Wsp = W + mx->off[O_SP_W];
    for (int b = 0; b < B; b++) {
        real *cache = S->p[0] + (size_t)b * S->cap * F2;
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
    mega_linear_forward(y, G, W + mx->off[O_OUT_W], W + mx->off[O_OUT_B], R, F2, D);
    S->pos += T;
    S->len = (int)S->pos;
    return MEGA_OK;
}

const mega_mixer_ops mega_mixer_ops_gmlp = {
    "gmlp", 0, 1, 1, gm_declare, gm_init, gm_acts, gm_scratch, gm_forward, gm_backward,
    gm_state_size, gm_state_init, gm_state_reset, gm_step_scratch, gm_step,
};
