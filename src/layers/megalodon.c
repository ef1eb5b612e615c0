/*
 * The Megalodon block as a token mixer (mixer.h; Ma et al. 2024, arXiv 2404.08801; official
 * megalodon/model/mega.py, MegaBlock, and modules/normalized_feedforward_network.py,
 * NormalizedFeedForwardNetwork). Its forward is the whole block, FFN included, because the FFN's
 * residual is the BLOCK input, not the layer output (the two-hop residual):
 *
 *   y   = MegalodonLayer(x)                        (layers/mglayer.h: y already holds + x)
 *   n   = LayerNorm(y) (1 + w) + b                 (FusedLayerNorm: weight stored as an offset)
 *   hid = hdrop(silu(fc1 n)     [* fc3 n with SwiGLU])    (no biases)
 *   out = alpha * drop(fc2 hid) + x                 (alpha: layer scale when rescale-nffn, else 1)
 *
 * Parameters, under the official names: "<prefix>mega.*" (the layer) and "<prefix>nffn.norm.weight",
 * "nffn.norm.bias", "nffn.fc1.weight" [F, D], "nffn.fc2.weight" [D, F], "nffn.fc3.weight" (SwiGLU),
 * "nffn.alpha" [D] (rescale-nffn). Init as the official code with init_mode 'he': kaiming_normal_
 * with a = sqrt(5) (std 1 / sqrt(3 fan_in)) for every projection, zero biases, norm weights,
 * gamma and beta; alpha = 0.1 * 0.5^layer_id (the layer id read from the prefix "...layers.<i>.").
 *
 * Dropout in training as the official code: the layer's (mglayer.h: hidden_dropout on mx and on
 * attn * r, attention_dropout on the attention weights, dropout on the layer's h) and the FFN's
 * (hidden_dropout on hid, dropout on fc2's output), masks keyed by the run's key (one subkey per
 * site) so a recomputed forward and the backward regenerate them. The official code has no
 * activation dropout: the check refuses it.
 *
 * Not in this mixer (docs/megalodon.md): a padding mask (the LM pads only on the right, where a
 * causal layer cannot see the pads).
 *
 * Streaming state per sequence: the timestep norm's (count, means, variances), the CEMA's complex
 * state [2][N][D] and the attention cache of the current chunk only: O(chunk) memory per layer
 * whatever the length. Rows (MEGA_MIXER_ROWS, a stream's sequences each at its own position):
 * the step reads mega_mixer_state.rpos for the attention's chunk border and rotary position
 * (the norm and the CEMA have no position), views and their reset cover their own sequences, and
 * the reorder moves every part of a sequence's state.
 */
#include "layers/mglayer.h"
#include "layers/mixer.h"
#include "ops/ops.h"

typedef struct {
    const mega_block_config *cfg;
    mega_mglayer mg;
    int F, swiglu, rescale;
    double alpha0;
    size_t ln_w, ln_b, fc1, fc2, fc3, alpha;
} mgb_layer;
MEGA_MIXER_LAYER_FITS(mgb_layer);

static size_t rup(size_t n) { return (n + 15) & ~(size_t)15; }
/* an int64 count per sequence stored in reals */
static size_t count_reals(int B) { return rup(((size_t)B * sizeof(int64_t) + sizeof(real) - 1) / sizeof(real)); }

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

static void mgb_resolve(mega_block_config *c) {
    if (c->heads == 0) c->heads = 1;                                         /* ModelConf.num_heads */
    /* ModelConf's 32 groups, fewer when that leaves groups of under 4 features (small widths) */
    if (c->norm_num_groups == 0) {
        int g = gcd(c->embed_dim, 32);
        while (g > 1 && c->embed_dim / g < 4) g /= 2;
        c->norm_num_groups = g;
    }
}

static mega_status mgb_check(const mega_block_config *c) {
    const int H = c->heads;
    if (c->chunk_size < 1) MEGA_FAIL(MEGA_ERR_INVALID, "megalodon needs a positive chunk-size, got %d", c->chunk_size);
    if (H < 1 || c->z_dim % H || c->hidden_dim % H || (c->z_dim / H) % 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "megalodon: z-dim %d and hidden-dim %d must split into %d heads, z-dim/heads even",
                  c->z_dim, c->hidden_dim, H);
    if (c->n_dim < 1) MEGA_FAIL(MEGA_ERR_INVALID, "megalodon needs n-dim >= 1 (the complex EMA's components)");
    if (c->ffn_dim < 1) MEGA_FAIL(MEGA_ERR_INVALID, "megalodon needs ffn-dim >= 1 (its normalized FFN)");
    if (c->norm_num_groups < 1 || c->embed_dim % c->norm_num_groups)
        MEGA_FAIL(MEGA_ERR_INVALID, "megalodon: norm-num-groups %d must divide embed-dim %d", c->norm_num_groups,
                  c->embed_dim);
    if (c->activation_dropout > 0)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "megalodon has no activation-dropout (its FFN's hidden units take "
                  "hidden-dropout, as the official NormalizedFeedForwardNetwork)");
    return MEGA_OK;
}

static void mgb_context(const mega_block_config *c, int T, mega_block_context *x) {
    mega__context_default(&mega_mixer_ops_megalodon, c, T, x);
    x->segment = T > 0 ? T : c->chunk_size; /* a shorter last chunk is fine: no padding */
    x->cache = c->chunk_size;               /* the state is bounded whatever the cap */
    x->carry = 1;                           /* the timestep norm and the CEMA carry across segments */
    x->eval_len = c->chunk_size;
}

static mega_status mgb_declare(void *layer, const mega_block_config *c, mega_params *P, const char *prefix) {
    mgb_layer *L = layer;
    memset(L, 0, sizeof *L);
    L->cfg = c;
    L->F = c->ffn_dim, L->swiglu = c->swiglu, L->rescale = c->rescale_nffn;
    const char *ls = strstr(prefix, "layers.");
    L->alpha0 = 0.1 * pow(0.5, ls ? atoi(ls + 7) : 0); /* MegaBlock: 0.1 * 0.5^layer_id */
    const int64_t D = c->embed_dim, F = c->ffn_dim;
    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%smega.", prefix);
    MEGA_TRY(mega_mglayer_declare(&L->mg, P, pre, c->embed_dim, c->z_dim, c->hidden_dim, c->heads, c->n_dim,
                                  c->norm_num_groups, c->chunk_size, 1e-5, 10000.0));
    snprintf(pre, sizeof pre, "%snffn.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "norm.weight", 0, &L->ln_w, D));
    MEGA_TRY(MEGA_PADD(P, pre, "norm.bias", 0, &L->ln_b, D));
    MEGA_TRY(MEGA_PADD(P, pre, "fc1.weight", MEGA_P_DECAY, &L->fc1, F, D));
    MEGA_TRY(MEGA_PADD(P, pre, "fc2.weight", MEGA_P_DECAY, &L->fc2, D, F));
    if (L->swiglu) MEGA_TRY(MEGA_PADD(P, pre, "fc3.weight", MEGA_P_DECAY, &L->fc3, F, D));
    if (L->rescale) MEGA_TRY(MEGA_PADD(P, pre, "alpha", 0, &L->alpha, D));
    return MEGA_OK;
}

/* kaiming_normal_(a = sqrt 5), fan_in: std = sqrt(2 / (1 + 5)) / sqrt(fan_in) */
static void he(real *w, size_t out, size_t in, mega_rng *rng) {
    mega_fill_normal(w, out * in, 0, 1.0 / sqrt(3.0 * (double)in), rng);
}

static void mgb_init(const void *layer, real *W, mega_rng *rng) {
    const mgb_layer *L = layer;
    const mega_mglayer *g = &L->mg;
    const size_t D = g->D, Z = g->Z, E = g->E, F = L->F;
    mega_tsnorm_init(&g->tn, W);
    mega_cema_init(&g->cema, W, rng);
    mega_fill_const(W + g->rms_w, D, 0);
    he(W + g->wv, E, D, rng), mega_fill_const(W + g->bv, E, 0);
    he(W + g->wz, Z, D, rng), mega_fill_const(W + g->bz, Z, 0);
    he(W + g->wr, E, D, rng), mega_fill_const(W + g->br, E, 0);
    he(W + g->wh1, D, D, rng), mega_fill_const(W + g->bh1, D, 0);
    he(W + g->wh2, D, E, rng);
    mega_fill_const(W + g->gamma, 2 * Z, 0), mega_fill_const(W + g->beta, 2 * Z, 0);
    mega_fill_const(W + L->ln_w, D, 0), mega_fill_const(W + L->ln_b, D, 0);
    he(W + L->fc1, F, D, rng), he(W + L->fc2, D, F, rng);
    if (L->swiglu) he(W + L->fc3, F, D, rng);
    if (L->rescale) mega_fill_const(W + L->alpha, D, L->alpha0);
}

/* the FFN's activations: the layer output y, the norm's statistics and output, the hidden units */
typedef struct {
    real *mg, *y, *mu, *rs, *n, *h1, *h3, *hid, *o;
    size_t total;
} mgb_acts;

static mgb_acts acts_at(const mgb_layer *L, real *base, int B, int T) {
    const size_t R = (size_t)B * T, D = L->mg.D, F = L->F;
    mgb_acts a;
    mega_bump b = {base, 0};
    a.mg = mega_bump_take(&b, mega_mglayer_acts_size(&L->mg, B, T));
    a.y = mega_bump_take(&b, R * D), a.mu = mega_bump_take(&b, R), a.rs = mega_bump_take(&b, R);
    a.n = mega_bump_take(&b, R * D), a.h1 = mega_bump_take(&b, R * F);
    a.h3 = L->swiglu ? mega_bump_take(&b, R * F) : NULL;
    a.hid = mega_bump_take(&b, R * F);
    a.o = L->rescale ? mega_bump_take(&b, R * D) : NULL;
    a.total = b.off;
    return a;
}
static size_t mgb_acts_size(const void *L, int B, int T) { return acts_at(L, NULL, B, T).total; }

/* scratch: the timestep norm's state | the layer's scratch | dy, dn [R,D], dhid, dh3 [R,F] */
static size_t mgb_scratch(const void *layer, int B, int T, int nt) {
    const mgb_layer *L = layer;
    (void)nt;
    const size_t R = (size_t)B * T;
    return count_reals(B) + rup((size_t)B * 2 * L->mg.G) + rup(mega_mglayer_scratch(&L->mg, B, T)) +
           2 * rup(R * L->mg.D) + 2 * rup(R * L->F) + rup(L->mg.D) + 64;
}

/* the FFN's dropout sites, after the layer's (mglayer.c: 1..4) under the same key */
enum { SITE_HID = 5, SITE_FC2 };

/* the layer's dropout in a training run with a dropout set, else NULL */
static const mega_mgdrop *drop_of(const mega_block_config *c, const mega_run *run, mega_mgdrop *d) {
    if (!run || !run->training || !(c->dropout > 0 || c->attention_dropout > 0 || c->hidden_dropout > 0)) return NULL;
    d->p_out = c->dropout, d->p_attn = c->attention_dropout, d->p_hidden = c->hidden_dropout, d->key = run->key;
    return d;
}
static void drop(real *v, size_t n, const mega_mgdrop *dr, double p, int site) {
    if (dr && p > 0) mega_dropout(v, v, n, p, mega__subkey(dr->key, (uint64_t)site));
}

/* row r of the FFN's LayerNorm: n = (y - mu) rs (1 + w) + b; mean and variance in the fixed
 * lanes of mega_row_sum / mega_row_sqdev (ops.h) */
static void ln_row(const mgb_layer *L, const real *W, const mgb_acts *a, const real *y, size_t r) {
    const size_t D = L->mg.D;
    const real *restrict yr = y + r * D, *restrict w = W + L->ln_w, *restrict bb = W + L->ln_b;
    real *restrict nr = a->n + r * D;
    const double m = (double)mega_row_sum(yr, D) / (double)D;
    const double rs = 1.0 / sqrt((double)mega_row_sqdev(yr, (real)m, D) / (double)D + L->mg.eps);
    a->mu[r] = (real)m, a->rs[r] = (real)rs;
    for (size_t i = 0; i < D; i++) nr[i] = (real)((yr[i] - m) * rs * (1 + w[i]) + bb[i]);
}

/* rows of the training forward split over the team; the step's few rows on the calling thread */
#define ROWS_PAR(R, n) ((R) * (n) > MEGA_PAR_MIN)

/* row r of out = [alpha *] o + x (the layer scale when rescale-nffn) */
static void out_row(const mgb_layer *L, const real *W, real *out, const real *o, const real *x, size_t r) {
    const size_t D = L->mg.D;
    for (size_t i = 0; i < D; i++) {
        const size_t k = r * D + i;
        out[k] = (L->rescale ? o[k] * W[L->alpha + i] : o[k]) + x[k];
    }
}

/* out = rescale(drop(fc2 hdrop(hid(LN(y))))) + x over R rows; a: where the intermediates go; dr:
 * dropout (NULL: none); step: the streaming step's few rows, whose products take their step form
 * (ops.h mega_linear_step: each row's sums those it has alone, so a stream's rows get the bits
 * they have alone) */
static void ffn_forward(const mgb_layer *L, const real *W, real *out, const real *y, const real *x, size_t R,
                        const mgb_acts *a, const mega_mgdrop *dr, int step) {
    const size_t D = L->mg.D, F = L->F;
    void (*const lin)(real *, const real *, const real *, const real *, size_t, size_t, size_t) =
        step ? mega_linear_step : mega_linear_forward;
    if (!ROWS_PAR(R, D)) {
        for (size_t r = 0; r < R; r++) ln_row(L, W, a, y, r);
    } else {
#pragma omp parallel for schedule(static)
        for (size_t r = 0; r < R; r++) ln_row(L, W, a, y, r);
    }
    lin(a->h1, a->n, W + L->fc1, NULL, R, D, F);
    if (L->swiglu) lin(a->h3, a->n, W + L->fc3, NULL, R, D, F);
    mega_act_rows(MEGA_ACT_SILU, a->hid, a->h1, R, F);
    if (L->swiglu)
        for (size_t i = 0; i < R * F; i++) a->hid[i] *= a->h3[i];
    drop(a->hid, R * F, dr, dr ? dr->p_hidden : 0, SITE_HID);
    real *o = L->rescale ? a->o : out;
    lin(o, a->hid, W + L->fc2, NULL, R, F, D);
    drop(o, R * D, dr, dr ? dr->p_out : 0, SITE_FC2);
    if (!ROWS_PAR(R, D)) {
        for (size_t r = 0; r < R; r++) out_row(L, W, out, o, x, r);
    } else {
#pragma omp parallel for schedule(static)
        for (size_t r = 0; r < R; r++) out_row(L, W, out, o, x, r);
    }
}

/* dhid arrives as d(hid) over rows of F: with SwiGLU (hid = silu(h1) h3) dh3 = dhid silu(h1) and
 * dhid becomes d(h1) = dhid h3 silu'(h1) (ops.h mega_silu_times_backward_row), without it
 * d(h1) = dhid silu'(h1); the sigmoids vectorised (mega_sigmoid_row) */
static void hid_row_back(real *restrict dhid, real *restrict dh3, const real *restrict h1, const real *restrict h3,
                         size_t F) {
    if (h3) {
        mega_silu_times_backward_row(dh3, dhid, dhid, h3, h1, F);
        return;
    }
    for (size_t j0 = 0; j0 < F; j0 += MEGA_SIG_BLOCK) {
        const size_t m = MEGA_MIN(F - j0, (size_t)MEGA_SIG_BLOCK);
        real s[MEGA_SIG_BLOCK];
        mega_sigmoid_row(s, h1 + j0, m);
        for (size_t j = 0; j < m; j++) dhid[j0 + j] *= mega_silu_grad_s(h1[j0 + j], s[j]);
    }
}

/* the LayerNorm's backward of row r: n = u (1 + w) + b, u = (y - mu) rs:
 * dy = rs (du - mean du - u mean(du u)), du = dn (1 + w); w1 holds 1 + w */
static void ln_row_back(real *restrict dy, const real *restrict dn, const real *restrict y, const real *restrict w1,
                        double mu, double rs, size_t D) {
    real sg, sgx;
    mega_row_norm_sums(dn, w1, y, (real)mu, D, &sg, &sgx);
    const double s1 = (double)sg / (double)D, s2 = (double)sgx * rs / (double)D;
    for (size_t i = 0; i < D; i++) {
        const double u = (y[i] - mu) * rs, du = dn[i] * (double)w1[i];
        dy[i] = (real)(rs * (du - s1 - u * s2));
    }
}
/* the LayerNorm's weight and bias gradients over the rows, columns [i0, i1) */
static void ln_params_cols(real *restrict dw, real *restrict db, const real *restrict dn, const real *restrict y,
                           const real *restrict mu, const real *restrict rs, size_t R, size_t D, size_t i0,
                           size_t i1) {
    for (size_t r = 0; r < R; r++)
        for (size_t i = i0; i < i1; i++) {
            const double u = (y[r * D + i] - (double)mu[r]) * rs[r], g = dn[r * D + i];
            dw[i] += (real)(g * u), db[i] += (real)g;
        }
}
/* split by columns over the team: each column summed over the rows in row order whatever the
 * thread count (32 columns a piece) */
static void ln_params_back(real *dw, real *db, const real *dn, const real *y, const real *mu, const real *rs, size_t R,
                           size_t D) {
    const size_t nb = (D + 31) / 32;
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, D) && nb > 1)
    for (size_t b = 0; b < nb; b++) ln_params_cols(dw, db, dn, y, mu, rs, R, D, b * 32, MEGA_MIN(D, (b + 1) * 32));
}

static mega_status mgb_forward(const void *layer, real *W, real *acts, real *y, const real *x, const uint8_t *pad,
                               int B, int T, const mega_run *run, real *scratch) {
    const mgb_layer *L = layer;
    (void)pad;
    mega_mgdrop d;
    const mega_mgdrop *dr = drop_of(L->cfg, run, &d);
    mgb_acts a = acts_at(L, acts, B, T);
    mega_tsnorm_state s = {(int64_t *)(void *)scratch, scratch + count_reals(B)};
    mega_tsnorm_state_prior(&L->mg.tn, W, &s, B); /* every batch starts from the prior */
    real *ls = s.mv + rup((size_t)B * 2 * L->mg.G);
    mega_mglayer_forward(&L->mg, W, a.y, x, B, T, &s, NULL, dr, a.mg, ls);
    ffn_forward(L, W, y, a.y, x, (size_t)B * T, &a, dr, 0);
    return MEGA_OK;
}

static void mgb_backward(const void *layer, const real *W, real *dW, const real *acts, real *dx, const real *dout,
                         const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const mgb_layer *L = layer;
    (void)pad;
    mega_mgdrop d;
    const mega_mgdrop *dr = drop_of(L->cfg, run, &d);
    const size_t R = (size_t)B * T, D = L->mg.D, F = L->F;
    mgb_acts a = acts_at(L, (real *)(uintptr_t)acts, B, T);
    real *dy = scratch, *dn = dy + rup(R * D), *dhid = dn + rup(R * D), *dh3 = dhid + rup(R * F);
    real *ls = dh3 + rup(R * F);
    memcpy(dx, dout, R * D * sizeof(real)); /* the two-hop residual */
    const real *dO = dout; /* d(fc2 hid): dout itself, or with the layer scale or a dropout in dy's slot */
    if (L->rescale) { /* before dy is needed */
        for (size_t r = 0; r < R; r++)
            for (size_t i = 0; i < D; i++) {
                const size_t k = r * D + i;
                dW[L->alpha + i] += dout[k] * a.o[k];
                dy[k] = dout[k] * W[L->alpha + i];
            }
        dO = dy;
    }
    if (dr && dr->p_out > 0) {
        if (dO != dy) memcpy(dy, dout, R * D * sizeof(real));
        drop(dy, R * D, dr, dr->p_out, SITE_FC2);
        dO = dy;
    }
    mega_linear_backward(dhid, dW + L->fc2, NULL, dO, a.hid, W + L->fc2, R, F, D, 0);
    drop(dhid, R * F, dr, dr ? dr->p_hidden : 0, SITE_HID);
    const int sw = L->swiglu;
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, F))
    for (size_t r = 0; r < R; r++)
        hid_row_back(dhid + r * F, sw ? dh3 + r * F : NULL, a.h1 + r * F, sw ? a.h3 + r * F : NULL, F);
    mega_linear_backward(dn, dW + L->fc1, NULL, dhid, a.n, W + L->fc1, R, D, F, 0);
    if (L->swiglu) mega_linear_backward(dn, dW + L->fc3, NULL, dh3, a.n, W + L->fc3, R, D, F, 1);
    /* n = u (1 + w) + b, u = (y - mu) rs */
    ln_params_back(dW + L->ln_w, dW + L->ln_b, dn, a.y, a.mu, a.rs, R, D);
    real *w1 = ls + rup(mega_mglayer_scratch(&L->mg, B, T)); /* 1 + w, after the layer's scratch */
    for (size_t i = 0; i < D; i++) w1[i] = 1 + W[L->ln_w + i];
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, D))
    for (size_t r = 0; r < R; r++) ln_row_back(dy + r * D, dn + r * D, a.y + r * D, w1, a.mu[r], a.rs[r], D);
    mega_mglayer_backward(&L->mg, W, dW, dx, dy, x, B, T, NULL, dr, a.mg, ls);
}

/* ---- streaming: count [B] | means, variances [B][2][G] | CEMA [B][2][N][D] | caches [B][C...] */
typedef struct {
    mega_tsnorm_state s;
    real *h, *cache;
    real *coef; /* the CEMA's coefficients, computed once at state_init as Mega's EMA step does
                 * (mega_layer.c mg_state_init): not per fed token */
} mgb_state;

/* per sequence: the count (an int64 in reals), the means and variances, the CEMA state, the cache */
static size_t per_count(void) { return sizeof(int64_t) / sizeof(real); }

static size_t state_at(const mgb_layer *L, real *mem, int B, mgb_state *v) {
    const size_t Bz = (size_t)B;
    mega_bump b = {mem, 0};
    v->s.count = (int64_t *)(void *)mega_bump_take(&b, count_reals(B));
    v->s.mv = mega_bump_take(&b, Bz * 2 * L->mg.G);
    v->h = mega_bump_take(&b, Bz * 2 * L->mg.N * L->mg.D);
    v->cache = mega_bump_take(&b, Bz * mega_mgattn_cache_size(&L->mg.at));
    v->coef = mega_bump_take(&b, mega_cema_layer_coef_size(&L->mg.cema));
    return b.off;
}
/* the state of S's sequences: all of them, or those of a view ([b0, b0 + B) of Bmem sequences) */
static void state_of(const mgb_layer *L, const mega_mixer_state *S, mgb_state *v) {
    state_at(L, S->mem, S->Bmem ? S->Bmem : S->B, v);
    const size_t b0 = (size_t)S->b0;
    v->s.count += b0, v->s.mv += b0 * 2 * L->mg.G, v->h += b0 * 2 * L->mg.N * L->mg.D;
    v->cache += b0 * mega_mgattn_cache_size(&L->mg.at);
}
static size_t mgb_state_size(const void *L, int B, int cap) {
    mgb_state v;
    (void)cap;
    return state_at(L, NULL, B, &v);
}
/* the empty state: count 0 (Megalodon's prior count, which makes the first step ignore the prior
 * mean and variance), a zero CEMA state; the attention caches are written before they are read */
static void mgb_state_reset(const void *layer, mega_mixer_state *S) {
    const mgb_layer *L = layer;
    mgb_state v;
    state_of(L, S, &v); /* a view clears its own sequences only */
    const size_t G = L->mg.G;
    for (int b = 0; b < S->B; b++) {
        v.s.count[b] = 0;
        for (size_t g = 0; g < G; g++) v.s.mv[(size_t)b * 2 * G + g] = 0, v.s.mv[(size_t)b * 2 * G + G + g] = 1;
    }
    memset(v.h, 0, (size_t)S->B * 2 * L->mg.N * L->mg.D * sizeof(real));
    S->pos = 0;
}
static mega_status mgb_state_init(const void *layer, const real *W, mega_mixer_state *S) {
    const mgb_layer *L = layer;
    if (W[L->mg.tn.prior_count] != 0)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "megalodon streaming assumes the timestep norm's prior count 0 (got %g)",
                  (double)W[L->mg.tn.prior_count]);
    mgb_state v;
    state_at(L, S->mem, S->B, &v);
    mega_cema_layer_coef(&L->mg.cema, W, v.coef);
    mgb_state_reset(layer, S);
    return MEGA_OK;
}
/* step scratch: layer work | x, y rows [B,D] | the FFN's n, o [B,D], h1, h3, hid [B,F] */
static size_t mgb_step_scratch(const void *layer, int B, int T, int cap) {
    const mgb_layer *L = layer;
    (void)T, (void)cap;
    const size_t Bz = (size_t)B;
    return rup(mega_mglayer_step_work(&L->mg, B)) +
           4 * rup(Bz * L->mg.D) + 3 * rup(Bz * L->F) + 2 * rup(Bz) + 64;
}
static mega_status mgb_step(const void *layer, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                            real *scratch) {
    const mgb_layer *L = layer;
    const int B = S->B;
    const size_t D = L->mg.D, F = L->F, Bz = (size_t)B;
    if (S->rpos && T != 1) MEGA_FAIL(MEGA_ERR_INVALID, "a step of sequences at their own positions takes one token (got %d)", T);
    mgb_state v;
    state_of(L, S, &v);
    mega_bump b = {scratch, 0};
    real *work = mega_bump_take(&b, mega_mglayer_step_work(&L->mg, B));
    real *xr = mega_bump_take(&b, Bz * D), *yr = mega_bump_take(&b, Bz * D), *outr = mega_bump_take(&b, Bz * D);
    mgb_acts a = {0};
    a.n = mega_bump_take(&b, Bz * D), a.h1 = mega_bump_take(&b, Bz * F), a.hid = mega_bump_take(&b, Bz * F);
    a.h3 = L->swiglu ? mega_bump_take(&b, Bz * F) : NULL;
    a.o = L->rescale ? mega_bump_take(&b, Bz * D) : NULL;
    a.mu = mega_bump_take(&b, Bz), a.rs = mega_bump_take(&b, Bz);
    for (int t = 0; t < T; t++) {
        for (int bi = 0; bi < B; bi++) memcpy(xr + bi * D, x + ((size_t)bi * T + t) * D, D * sizeof(real));
        mega_mglayer_step(&L->mg, W, v.coef, yr, xr, B, S->pos, S->rpos, &v.s, v.h, v.cache, work);
        ffn_forward(L, W, outr, yr, xr, Bz, &a, NULL, 1);
        for (int bi = 0; bi < B; bi++) memcpy(y + ((size_t)bi * T + t) * D, outr + bi * D, D * sizeof(real));
        S->pos++;
    }
    return MEGA_OK;
}

/* beam search and a stream's leaving rows: new sequence b = old idx[b], every part of its state */
static void mgb_state_reorder(const void *layer, mega_mixer_state *S, const int *idx, real *tmp) {
    const mgb_layer *L = layer;
    mgb_state v;
    state_at(L, S->mem, S->B, &v);
    mega__rows_gather((real *)(void *)v.s.count, per_count(), S->B, idx, tmp); /* int64 counts moved as their bytes */
    mega__rows_gather(v.s.mv, 2 * L->mg.G, S->B, idx, tmp);
    mega__rows_gather(v.h, 2 * L->mg.N * L->mg.D, S->B, idx, tmp);
    mega__rows_gather(v.cache, mega_mgattn_cache_size(&L->mg.at), S->B, idx, tmp);
}

/* ffn-dim is not listed: no mixer declares it, so it applies to every mixer */
static const char *const MGB_OPTIONS[] = {"z-dim", "hidden-dim", "n-dim", "chunk-size", "heads",
                                          "norm-num-groups", "swiglu", "rescale-nffn", "attention-dropout",
                                          "hidden-dropout", NULL};

const mega_mixer_ops mega_mixer_ops_megalodon = {
    .name = "megalodon",
    .flags = MEGA_MIXER_SELF_RESIDUAL | MEGA_MIXER_CAUSAL | MEGA_MIXER_OWN_FFN | MEGA_MIXER_FINAL_TSNORM |
             MEGA_MIXER_ROWS | MEGA_MIXER_STEP_TEAM,
    .layer_size = sizeof(mgb_layer),
    .resolve = mgb_resolve,
    .check = mgb_check,
    .options = MGB_OPTIONS,
    .context = mgb_context,
    .declare = mgb_declare,
    .init = mgb_init,
    .acts_size = mgb_acts_size,
    .scratch_size = mgb_scratch,
    .forward = mgb_forward,
    .backward = mgb_backward,
    .state_size = mgb_state_size,
    .state_init = mgb_state_init,
    .state_reset = mgb_state_reset,
    .step_scratch = mgb_step_scratch,
    .step = mgb_step,
    .state_reorder = mgb_state_reorder,
};
