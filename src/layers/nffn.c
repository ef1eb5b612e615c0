/*
 * Normalized feed-forward network (Mega §3.4, eq. (21); official normalized_feedforward_network.py
 * NormalizedFeedForwardNetwork.forward; docs/mega.md §6):
 *   prenorm:  y = x + dropout(fc2(hidden_dropout(act(fc1(norm(x))))))
 *   postnorm: y = norm(x + dropout(fc2(hidden_dropout(act(fc1(x))))))
 */
#include "layers/nffn.h"
#include "ops/ops.h"

enum { SITE_FFN_HIDDEN = 5, SITE_FFN_OUT = 6 };

mega_status mega_nffn_declare(mega_nffn *f, mega_params *P, const char *prefix, const mega_block_config *c) {
    char pre[MEGA_NAME_MAX];
    memset(f, 0, sizeof *f);
    f->cfg = c;
    snprintf(pre, sizeof pre, "%snffn.norm.norm.", prefix);
    MEGA_TRY(mega_seqnorm_declare(&f->norm, P, pre, c->norm_type, c->embed_dim, c->norm_affine));
    snprintf(pre, sizeof pre, "%snffn.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "fc1.weight", MEGA_P_DECAY, &f->fc1_w, c->ffn_dim, c->embed_dim));
    MEGA_TRY(MEGA_PADD(P, pre, "fc1.bias", 0, &f->fc1_b, c->ffn_dim));
    MEGA_TRY(MEGA_PADD(P, pre, "fc2.weight", MEGA_P_DECAY, &f->fc2_w, c->embed_dim, c->ffn_dim));
    MEGA_TRY(MEGA_PADD(P, pre, "fc2.bias", 0, &f->fc2_b, c->embed_dim));
    return MEGA_OK;
}

void mega_nffn_init(const mega_nffn *f, real *W, mega_rng *rng) {
    const size_t D = (size_t)f->cfg->embed_dim, F = (size_t)f->cfg->ffn_dim;
    mega_seqnorm_init(&f->norm, W);
    mega_fill_normal(W + f->fc1_w, F * D, 0, 0.02, rng);
    mega_fill_const(W + f->fc1_b, F, 0);
    mega_fill_normal(W + f->fc2_w, D * F, 0, 0.02, rng);
    mega_fill_const(W + f->fc2_b, D, 0);
}

size_t mega_nffn_acts_point(const mega_nffn *f, mega_nffn_acts *A, real *base, int B, int T) {
    const mega_block_config *c = f->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, F = (size_t)c->ffn_dim;
    mega_bump b = {base, 0};
    mega_nffn_acts a;
    memset(&a, 0, sizeof a);
    /* the normalised input and act(fpre) are recomputed by the backward (nffn_hidden) */
    a.nstat = c->prenorm ? mega_bump_take(&b, mega_seqnorm_stat_size(&f->norm, R)) : NULL;
    a.fpre = mega_bump_take(&b, R * F);
    a.ypre = c->prenorm ? NULL : mega_bump_take(&b, R * D);
    a.ystat = c->prenorm ? NULL : mega_bump_take(&b, mega_seqnorm_stat_size(&f->norm, R));
    if (A) *A = a;
    return b.off;
}

size_t mega_nffn_scratch(const mega_nffn *f, int B, int T) {
    const size_t R = (size_t)B * T;
    /* G D, dxn D, dF F, the hidden activation F (the forward: the normalised input in G) */
    return R * (2 * (size_t)f->cfg->embed_dim + 2 * (size_t)f->cfg->ffn_dim) + 64;
}

/* the hidden activation activation_dropout(act(fpre)): the forward's, and the backward's
 * recomputation of it */
static void nffn_hidden(const mega_nffn *f, real *h, const real *fpre, size_t R, const mega_run *run) {
    const mega_block_config *c = f->cfg;
    const size_t n = R * (size_t)c->ffn_dim;
    mega_act_forward(c->activation, h, fpre, n);
    if (run->training) mega_dropout(h, h, n, c->activation_dropout, mega__subkey(run->key, SITE_FFN_HIDDEN));
}

void mega_nffn_forward(const mega_nffn *f, real *W, mega_nffn_acts *A, real *out, const real *x, size_t R,
                       const mega_run *run, real *scratch) {
    const mega_block_config *c = f->cfg;
    const size_t D = (size_t)c->embed_dim, F = (size_t)c->ffn_dim;
    const int train = run->training;
    real *xnb = scratch, *hid = scratch + 2 * R * D + R * F; /* the backward's G and hidden buffers */
    const real *xn = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&f->norm, W, xnb, A->nstat, x, R, train, run->update_stats, run->sync);
        xn = xnb;
    }
    mega_linear_forward(A->fpre, xn, W + f->fc1_w, W + f->fc1_b, R, D, F);
    nffn_hidden(f, hid, A->fpre, R, run);
    real *y = c->prenorm ? out : A->ypre;
    mega_linear_forward(y, hid, W + f->fc2_w, W + f->fc2_b, R, F, D);
    if (train) mega_dropout(y, y, R * D, c->dropout, mega__subkey(run->key, SITE_FFN_OUT));
    for (size_t i = 0; i < R * D; i++) y[i] += x[i];
    if (!c->prenorm) mega_seqnorm_forward(&f->norm, W, out, A->ystat, A->ypre, R, train, run->update_stats, run->sync);
}

void mega_nffn_backward(const mega_nffn *f, const real *W, real *dW, const mega_nffn_acts *A, real *dx,
                        const real *dout, const real *x, size_t R, const mega_run *run, real *scratch) {
    const mega_block_config *c = f->cfg;
    const size_t D = (size_t)c->embed_dim, F = (size_t)c->ffn_dim;
    const int train = run->training;
    real *G = scratch, *dxn = scratch + R * D, *dF = scratch + 2 * R * D, *hid = dF + R * F;
    const real *g = dout;
    if (!c->prenorm) {
        mega_seqnorm_backward(&f->norm, W, dW, G, dout, A->ypre, A->ystat, R, train, 0, run->sync);
        g = G;
    }
    /* residual */
    memcpy(dx, g, R * D * sizeof(real));
    /* fc2 after output dropout */
    const real *g2 = g;
    if (train && c->dropout > 0) {
        if (g != G) memcpy(G, g, R * D * sizeof(real));
        mega_dropout(G, G, R * D, c->dropout, mega__subkey(run->key, SITE_FFN_OUT));
        g2 = G;
    }
    nffn_hidden(f, hid, A->fpre, R, run); /* recomputed */
    mega_linear_backward(dF, dW + f->fc2_w, dW + f->fc2_b, g2, hid, W + f->fc2_w, R, F, D, 0);
    if (train) mega_dropout(dF, dF, R * F, c->activation_dropout, mega__subkey(run->key, SITE_FFN_HIDDEN));
    mega_act_backward(c->activation, dF, dF, A->fpre, R * F);
    /* the normalised input, recomputed from the saved statistics (G is free again) */
    const real *xn = x;
    if (c->prenorm) {
        mega_seqnorm_apply(&f->norm, W, G, A->nstat, x, R);
        xn = G;
    }
    mega_linear_backward(dxn, dW + f->fc1_w, dW + f->fc1_b, dF, xn, W + f->fc1_w, R, D, F, 0);
    if (c->prenorm)
        mega_seqnorm_backward(&f->norm, W, dW, dx, dxn, x, A->nstat, R, train, 1, run->sync);
    else
        for (size_t i = 0; i < R * D; i++) dx[i] += dxn[i];
}

size_t mega_nffn_step_scratch(const mega_nffn *f, size_t R) {
    return R * ((size_t)f->cfg->ffn_dim + f->cfg->embed_dim) + mega_seqnorm_stat_size(&f->norm, R) + 64;
}

void mega_nffn_step(const mega_nffn *f, const real *W, real *out, const real *x, size_t R, real *scratch) {
    const mega_block_config *c = f->cfg;
    const size_t D = (size_t)c->embed_dim, F = (size_t)c->ffn_dim;
    real *xn = scratch, *h = scratch + R * D, *st = h + R * F;
    real *W_ = (real *)W; /* eval-mode norms do not write */
    const real *xb = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&f->norm, W_, xn, st, x, R, 0, 0, NULL);
        xb = xn;
    }
    /* the step forms split the output columns over the threads (decode streams the weights) */
    mega_linear_step(h, xb, W + f->fc1_w, W + f->fc1_b, R, D, F);
    mega_act_rows(c->activation, h, h, R, F); /* row by row: a row's bits whatever rows share the step */
    /* out may alias x: keep the residual in xn when post-norm */
    if (!c->prenorm) memcpy(xn, x, R * D * sizeof(real));
    const real *res = c->prenorm ? x : xn;
    if (c->prenorm && out == x) {
        /* y = x + fc2(h): accumulate into out directly */
        mega_gemm_step(R, D, F, h, F, W + f->fc2_w, F, 1, out, D);
        for (size_t r = 0; r < R; r++)
            for (size_t d = 0; d < D; d++) out[r * D + d] += W[f->fc2_b + d];
        return;
    }
    mega_linear_step(out, h, W + f->fc2_w, W + f->fc2_b, R, F, D);
    for (size_t i = 0; i < R * D; i++) out[i] += res[i];
    if (!c->prenorm) mega_seqnorm_forward(&f->norm, W_, out, st, out, R, 0, 0, NULL);
}
