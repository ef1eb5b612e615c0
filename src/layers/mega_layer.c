/*
 * Gated attention layer of Mega (Mega eqs. (6)–(15); official moving_average_gated_attention.py
 * MovingAverageGatedAttention.forward; docs/mega.md §2).
 *
 *   xn   = norm(x) if prenorm else x
 *   v    = act(xn Wv^T + bv)                         (then hidden dropout)
 *   m    = silu(EMA(xn) + omega*xn)                  (then dropout)
 *   base = m Wmx^T + bmx = [u | z | r | hx]          widths D, Z, E, D
 *   u = sigmoid, z = silu, r = silu;  q = z*G0 + B0, k = z*G1 + B1
 *   O    = attention(q, k, v) per chunk               (attention dropout on the weights)
 *   h    = act(hx + (O*r) Wh^T + bh)                  (then dropout)
 *   out  = x + u*(h - x);  out = norm(out) if not prenorm
 */
#include "layers/mega_layer.h"
#include "ops/ops.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* dropout sites */
enum { SITE_MX = 1, SITE_HIDDEN, SITE_ATTN, SITE_H };

static inline size_t P_(const mega_block_config *c) { return 2 * (size_t)c->embed_dim + c->z_dim + c->hidden_dim; }

MEGA_MIXER_LAYER_FITS(mega_mlayer);

/* the positions one attention covers when the sequence (or the cache) has n: a chunk, else n */
static int chunk_or(const mega_block_config *c, int n) { return c->chunk_size > 0 ? c->chunk_size : n; }

static mega_status mg_declare(void *layer, const mega_block_config *c, mega_params *P, const char *prefix) {
    mega_mlayer *L = layer;
    char pre[MEGA_NAME_MAX];
    memset(L, 0, sizeof *L);
    L->cfg = c;
    const int64_t D = c->embed_dim, Z = c->z_dim, E = c->hidden_dim;
    snprintf(pre, sizeof pre, "%smega_layer.norm.norm.", prefix);
    MEGA_TRY(mega_seqnorm_declare(&L->norm, P, pre, c->norm_type, c->embed_dim, c->norm_affine));
    if (c->n_dim > 0) { /* n-dim 0: the paper's ablation without the EMA (mx = x_bar) */
        snprintf(pre, sizeof pre, "%smega_layer.move.", prefix);
        MEGA_TRY(mega_ema_declare(&L->ema, P, pre, c->embed_dim, c->n_dim, c->bidirectional, c->truncation));
    }
    snprintf(pre, sizeof pre, "%smega_layer.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "v_proj.weight", MEGA_P_DECAY, &L->v_w, E, D));
    MEGA_TRY(MEGA_PADD(P, pre, "v_proj.bias", 0, &L->v_b, E));
    MEGA_TRY(MEGA_PADD(P, pre, "mx_proj.weight", MEGA_P_DECAY, &L->mx_w, 2 * D + Z + E, D));
    MEGA_TRY(MEGA_PADD(P, pre, "mx_proj.bias", 0, &L->mx_b, 2 * D + Z + E));
    MEGA_TRY(MEGA_PADD(P, pre, "h_proj.weight", MEGA_P_DECAY, &L->h_w, D, E));
    MEGA_TRY(MEGA_PADD(P, pre, "h_proj.bias", 0, &L->h_b, D));
    MEGA_TRY(MEGA_PADD(P, pre, "gamma", 0, &L->qk_g, 2, Z));
    MEGA_TRY(MEGA_PADD(P, pre, "beta", 0, &L->qk_b, 2, Z));
    snprintf(pre, sizeof pre, "%smega_layer.rel_pos_bias.", prefix);
    MEGA_TRY(mega_relpos_declare(&L->rp, P, pre, (c->rel_pos_bias == MEGA_RELPOS_ROTARY), chunk_or(c, c->max_positions),
                                 c->z_dim));
    return MEGA_OK;
}

static void mg_init(const void *layer, real *W, mega_rng *rng) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, E = (size_t)c->hidden_dim;
    mega_seqnorm_init(&L->norm, W);
    if (c->n_dim > 0) mega_ema_init(&L->ema, W, rng);
    /* official reset_parameters: N(0, 0.02) weights, zero biases, gamma N(0,0.02), beta 0 */
    mega_fill_normal(W + L->v_w, E * D, 0, 0.02, rng);
    mega_fill_const(W + L->v_b, E, 0);
    mega_fill_normal(W + L->mx_w, P_(c) * D, 0, 0.02, rng);
    mega_fill_const(W + L->mx_b, P_(c), 0);
    mega_fill_normal(W + L->h_w, D * E, 0, 0.02, rng);
    mega_fill_const(W + L->h_b, D, 0);
    mega_fill_normal(W + L->qk_g, 2 * Z, 0, 0.02, rng);
    mega_fill_const(W + L->qk_b, 2 * Z, 0);
    mega_relpos_init(&L->rp, W, rng);
}

static int attn_len(const mega_block_config *c, int T) { return mega__segment(c->chunk_size, T); }

static size_t btab_size(const mega_mlayer *L, int T) { return mega_relpos_table_size(&L->rp, attn_len(L->cfg, T)); }

size_t mega_mlayer_acts_view(const mega_mlayer *L, mega_mlayer_acts *A, real *base, int B, int T) {
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, E = (size_t)c->hidden_dim;
    mega_bump b = {base, 0};
    mega_mlayer_acts a;
    memset(&a, 0, sizeof a);
    /* only what takes a GEMM, the EMA or the attention to recompute; the element-wise results
     * (x_bar, v, m, q, k, h, the pre-norm output) are recomputed by the backward (recompute_*) */
    a.nstat = c->prenorm ? mega_bump_take(&b, mega_seqnorm_stat_size(&L->norm, R)) : NULL;
    a.vpre = mega_bump_take(&b, R * E);
    a.coef = c->n_dim > 0 ? mega_bump_take(&b, mega_ema_coef_size(&L->ema)) : NULL;
    a.mpre = c->n_dim > 0 ? mega_bump_take(&b, R * D) : NULL;
    a.base = mega_bump_take(&b, R * P_(c));
    a.lse = mega_bump_take(&b, R);
    a.O = mega_bump_take(&b, R * E);
    a.hpre = mega_bump_take(&b, R * D);
    a.ostat = c->prenorm ? NULL : mega_bump_take(&b, mega_seqnorm_stat_size(&L->norm, R));
    a.btab = mega_bump_take(&b, btab_size(L, T));
    a.Mc = L->rp.rotary ? attn_len(c, T) : L->rp.Mp; /* the table's centre (mega_relpos_table) */
    if (A) *A = a;
    return b.off;
}

static mega_attn_k attn_kernel(const mega_mlayer *L, const real *btab, int Mc, const mega_run *run) {
    const mega_block_config *c = L->cfg;
    mega_attn_k k = {0};
    k.Z = c->z_dim, k.E = c->hidden_dim, k.chunk_size = c->chunk_size, k.causal = !c->bidirectional, k.fn = c->attention_activation;
    k.btab = btab, k.Mc = Mc;
    k.p_attn = run && run->training ? c->attention_dropout : 0;
    k.key_attn = run ? mega__subkey(run->key, SITE_ATTN) : 0;
    return k;
}

static size_t mg_scratch(const void *layer, int B, int T, int nthreads) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, E = (size_t)c->hidden_dim;
    if (nthreads < 1) nthreads = 1;
    mega_attn_k k = attn_kernel(L, NULL, (int)((btab_size(L, T) + 1) / 2), NULL);
    size_t attn = mega_attn_scratch(&k, T) * (size_t)nthreads + mega_attn_db_scratch(&k);
    size_t ema = c->n_dim > 0 ? mega_ema_layer_scratch(&L->ema, T, nthreads) : 0;
    /* backward buffers (mg_bwd, bwd_buffers): dbase P, dOr E, dv E, dbtab, then one region that
     * holds [G1 D | dxn D | hb D | Or E] or [v E | q Z | k Z | dq Z | dk Z]; the forward lays out
     * the same buffers (its attention workspace follows them) */
    size_t bufs = R * (P_(c) + 2 * E) + btab_size(L, T) + R * MEGA_MAX(3 * D + E, E + 4 * Z) + 16 * 15;
    return bufs + MEGA_MAX(attn, ema) + 64;
}

/* the backward's scratch buffers (mega_bump layout; sized by mg_scratch). dbase, dOr and dv live
 * through the whole backward. The rest share one region, used twice: G1, dxn, hb and Or by the
 * gate's backward (bwd_gate), then v, q, k, dq and dk by the attention's backward (made after
 * bwd_gate, when the first four are dead; dead themselves after bwd_qk, before the EMA's and
 * v_proj's backward take G1, dxn and hb again). The attention's backward is the peak: dbase, dOr,
 * dv and the second use (min(3D, 4Z) reals per token fewer than a buffer each).
 * The forward uses the same layout for its temporaries (x_bar in hb, m in G1, v in dv, q, k,
 * O*r in Or, h in hb, the post-norm's input in G1), in that order: each is dead before the next
 * that overlaps it is written. The attention runs in ws. */
typedef struct {
    real *G1, *dbase, *Or, *dOr, *dq, *dk, *dv, *dxn, *hb, *q, *k, *v, *dbtab, *ws;
} mg_bwd;

static void bwd_buffers(const mega_mlayer *L, const mega_mlayer_acts *A, int B, int T, real *scratch, mg_bwd *s) {
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, E = (size_t)c->hidden_dim;
    mega_bump bp = {scratch, 0};
    s->dbase = mega_bump_take(&bp, R * P_(c));
    s->dOr = mega_bump_take(&bp, R * E);
    s->dv = mega_bump_take(&bp, R * E);
    s->dbtab = mega_bump_take(&bp, (size_t)(2 * A->Mc - 1));
    mega_bump g = {scratch + bp.off, 0}, a = g; /* the region: the gate's use, the attention's */
    s->G1 = mega_bump_take(&g, R * D);
    s->dxn = mega_bump_take(&g, R * D);
    s->hb = mega_bump_take(&g, R * D);
    s->Or = mega_bump_take(&g, R * E);
    s->v = mega_bump_take(&a, R * E);
    s->q = mega_bump_take(&a, R * Z);
    s->k = mega_bump_take(&a, R * Z);
    s->dq = mega_bump_take(&a, R * Z);
    s->dk = mega_bump_take(&a, R * Z);
    s->ws = scratch + bp.off + MEGA_MAX(g.off, a.off);
}

/* ---- the element-wise results the forward does not keep: one code for the forward and the
 * backward's recomputation, so both see the same numbers ---------------------------------- */

/* v = hidden_dropout(act(vpre)) */
static void make_v(const mega_mlayer *L, real *v, const real *vpre, size_t R, const mega_run *run) {
    const mega_block_config *c = L->cfg;
    const size_t n = R * (size_t)c->hidden_dim;
    mega_act_forward(c->activation, v, vpre, n);
    if (run->training) mega_dropout(v, v, n, c->hidden_dropout, mega__subkey(run->key, SITE_HIDDEN));
}

/* q = silu(z) * gamma[0] + beta[0], k = silu(z) * gamma[1] + beta[1] */
static void make_qk(const mega_mlayer *L, const real *W, real *q, real *k, const real *base, size_t R) {
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, P = P_(c);
    const real *g0 = W + L->qk_g, *g1 = g0 + Z, *b0 = W + L->qk_b, *b1 = b0 + Z;
#pragma omp parallel for schedule(static) if (R * P > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const real *zr = base + r * P + D;
        real *qr = q + r * Z, *kr = k + r * Z;
        mega_act_forward_serial(MEGA_ACT_SILU, qr, zr, Z); /* z = silu(z_raw), vectorised */
        for (size_t j = 0; j < Z; j++) {
            const real z = qr[j];
            qr[j] = z * g0[j] + b0[j];
            kr[j] = z * g1[j] + b1[j];
        }
    }
}

/* h = dropout(act(hpre)) */
static void make_h(const mega_mlayer *L, real *h, const real *hpre, size_t R, const mega_run *run) {
    const mega_block_config *c = L->cfg;
    const size_t n = R * (size_t)c->embed_dim;
    mega_act_forward(c->activation, h, hpre, n);
    if (run->training) mega_dropout(h, h, n, c->dropout, mega__subkey(run->key, SITE_H));
}

/* o = x + u * (h - x), u = sigmoid(u_raw) (the shared update gate, src/ops/act.c) */
static void make_gated(const mega_mlayer *L, real *o, const real *base, const real *h, const real *x, size_t R) {
    mega_gate_mix(o, base, P_(L->cfg), h, x, R, (size_t)L->cfg->embed_dim);
}

/* m = dropout(silu(mpre)) (the EMA forward writes silu(mpre) itself), or dropout(x_bar) without
 * the EMA */
static void remake_m(const mega_mlayer *L, real *m, const real *mpre, const real *xn, size_t R, const mega_run *run) {
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim;
    if (c->n_dim > 0) {
        mega_act_forward(MEGA_ACT_SILU, m, mpre, R * D);
    } else {
        memcpy(m, xn, R * D * sizeof(real));
    }
    if (run->training) mega_dropout(m, m, R * D, c->dropout, mega__subkey(run->key, SITE_MX));
}

static mega_status mg_forward(const void *layer, real *W, real *acts, real *out, const real *x, const uint8_t *pad,
                              int B, int T, const mega_run *run, real *scratch) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    mega_mlayer_acts av;
    mega_mlayer_acts_view(L, &av, acts, B, T);
    mega_mlayer_acts *A = &av;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, E = (size_t)c->hidden_dim, P = P_(c);
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    const int train = run->training;
    MEGA_TRY(mega_relpos_table(&L->rp, W, attn_len(c, T), A->btab, &A->Mc));
    mg_bwd s;
    bwd_buffers(L, A, B, T, scratch, &s);

    /* x_bar = norm(x) if prenorm (in hb until h) */
    const real *xn = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&L->norm, W, s.hb, A->nstat, x, R, train, run->update_stats, run->sync);
        xn = s.hb;
    }
    /* v = act(v_proj(x_bar)); hidden dropout applied to v before the attention product */
    mega_linear_forward(A->vpre, xn, W + L->v_w, W + L->v_b, R, D, E);
    make_v(L, s.dv, A->vpre, R, run);
    /* mx = dropout(silu(EMA(x_bar) + omega * x_bar)) (in G1) */
    real *m = s.G1;
    if (c->n_dim > 0)
        mega_ema_layer_forward(&L->ema, W, A->coef, A->mpre, m, xn, pad, B, T, nt);
    else
        memcpy(m, xn, R * D * sizeof(real)); /* no EMA: mx = x_bar */
    if (train) mega_dropout(m, m, R * D, c->dropout, mega__subkey(run->key, SITE_MX));
    /* base = mx_proj(mx) = [u | z | r | hx] */
    mega_linear_forward(A->base, m, W + L->mx_w, W + L->mx_b, R, D, P);
    /* q = silu(z) * gamma[0] + beta[0], k = silu(z) * gamma[1] + beta[1] */
    make_qk(L, W, s.q, s.k, A->base, R);
    /* attention per chunk */
    mega_attn_k ak = attn_kernel(L, A->btab, A->Mc, run);
    mega_attn_forward(&ak, A->O, A->lse, s.q, s.k, s.dv, pad, B, T, s.ws, nt);
    /* h = act(hx + h_proj(O * r)); dropout */
    real *Or = s.Or;
    mega_silu_times(Or, A->base + D + c->z_dim, P, A->O, R, E);
    mega_linear_forward(A->hpre, Or, W + L->h_w, W + L->h_b, R, E, D);
#pragma omp parallel for schedule(static) if (R * P > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const real *hx = A->base + r * P + D + c->z_dim + E;
        real *hp = A->hpre + r * D;
        for (size_t j = 0; j < D; j++) hp[j] += hx[j];
    }
    make_h(L, s.hb, A->hpre, R, run);
    /* out = x + u * (h - x), u = sigmoid(u_raw); post-norm (the pre-norm output in G1) */
    real *o = c->prenorm ? out : s.G1;
    make_gated(L, o, A->base, s.hb, x, R);
    if (!c->prenorm) mega_seqnorm_forward(&L->norm, W, out, A->ostat, o, R, train, run->update_stats, run->sync);
    return MEGA_OK;
}

/* from d out to d(O*r) (in s->dOr) and d[u | r | hx] (in s->dbase); dx gets the residual part:
 * out = x + u*(h - x) (post-norm: through the output norm first), h = dropout(act(hpre)),
 * hpre = hx + h_proj(O*r) */
static void bwd_gate(const mega_mlayer *L, const real *W, real *dW, const mega_mlayer_acts *A, real *dx,
                     const real *dout, const real *x, size_t R, const mega_run *run, const mg_bwd *s) {
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, E = (size_t)c->hidden_dim, P = P_(c);
    real *dbase = s->dbase, *Or = s->Or, *dOr = s->dOr;
    real *dh = s->dxn; /* temporary R x D */
    const real *h = s->hb;
    make_h(L, s->hb, A->hpre, R, run); /* recomputed */
    const real *g = dout;
    if (!c->prenorm) {
        make_gated(L, dh, A->base, h, x, R); /* the pre-norm output, recomputed (dh is free) */
        mega_seqnorm_backward(&L->norm, W, dW, s->G1, dout, dh, A->ostat, R, run->training, 0, run->sync);
        g = s->G1;
    }
    /* dx = g*(1-u); du_raw = g*(h-x)*u(1-u); dh = g*u */
    mega_gate_mix_backward(dx, dh, dbase, P, g, A->base, h, x, R, D);
    if (run->training) mega_dropout(dh, dh, R * D, c->dropout, mega__subkey(run->key, SITE_H));
    mega_act_backward(c->activation, dh, dh, A->hpre, R * D);
    mega_silu_times(Or, A->base + D + Z, P, A->O, R, E);
#pragma omp parallel for schedule(static) if (R * D > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) memcpy(dbase + r * P + D + Z + E, dh + r * D, D * sizeof(real)); /* d hx = dh */
    mega_linear_backward(dOr, dW + L->h_w, dW + L->h_b, dh, Or, W + L->h_w, R, E, D, 0);
    /* dO = dOr * r; dr_raw = dOr * O * silu'(r_raw) */
#pragma omp parallel for schedule(static) if (R * P > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const real *rr = A->base + r * P + D + Z, *o = A->O + r * E;
        real *d = dOr + r * E, *dr = dbase + r * P + D + Z;
        mega_sigmoid_row(dr, rr, E); /* sigmoid(r_raw), vectorised; dr_raw replaces it */
        for (size_t j = 0; j < E; j++) {
            const real rv = rr[j], sg = dr[j];
            dr[j] = d[j] * o[j] * mega_silu_grad_s(rv, sg); /* silu'(r_raw) */
            d[j] *= rv * sg;                                  /* silu(r_raw) */
        }
    }
}

/* q = z*gamma[0] + beta[0], k = z*gamma[1] + beta[1], z = silu(z_raw): d z_raw into s->dbase and
 * the affine parameters' gradients */
static void bwd_qk(const mega_mlayer *L, const real *W, real *dW, const mega_mlayer_acts *A, size_t R, const mg_bwd *s) {
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, P = P_(c);
    const real *g0 = W + L->qk_g, *g1 = g0 + Z, *dq = s->dq, *dk = s->dk;
    real *dg0 = dW + L->qk_g, *dg1 = dg0 + Z, *db0 = dW + L->qk_b, *db1 = db0 + Z;
#pragma omp parallel for schedule(static) if (R * P > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const real *zr = A->base + r * P + D, *dqr = dq + r * Z, *dkr = dk + r * Z;
        real *dz = s->dbase + r * P + D;
        mega_sigmoid_row(dz, zr, Z); /* vectorised; d z_raw replaces it */
        for (size_t j = 0; j < Z; j++) {
            const real sg = dz[j];
            dz[j] = (dqr[j] * g0[j] + dkr[j] * g1[j]) * mega_silu_grad_s(zr[j], sg);
        }
    }
    for (size_t r = 0; r < R; r++) { /* parameter sums: serial over rows, deterministic */
        const real *zr = A->base + r * P + D, *dqr = dq + r * Z, *dkr = dk + r * Z;
        for (size_t j0 = 0; j0 < Z; j0 += MEGA_SIG_BLOCK) {
            const size_t n = MEGA_MIN(Z - j0, (size_t)MEGA_SIG_BLOCK);
            real zs[MEGA_SIG_BLOCK];
            mega_act_forward_serial(MEGA_ACT_SILU, zs, zr + j0, n);
            for (size_t jj = 0; jj < n; jj++) {
                const size_t j = j0 + jj;
                const real z = zs[jj];
                dg0[j] += dqr[j] * z;
                dg1[j] += dkr[j] * z;
                db0[j] += dqr[j];
                db1[j] += dkr[j];
            }
        }
    }
}

static void mg_backward(const void *layer, const real *W, real *dW, const real *acts, real *dx, const real *dout,
                        const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, E = (size_t)c->hidden_dim, P = P_(c);
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    const int train = run->training;
    mega_mlayer_acts av;
    mega_mlayer_acts_view(L, &av, (real *)(uintptr_t)acts, B, T);
    const mega_mlayer_acts *A = &av;
    mg_bwd s;
    bwd_buffers(L, A, B, T, scratch, &s);
    bwd_gate(L, W, dW, A, dx, dout, x, R, run, &s);
    /* attention backward: dq, dk, dv, bias table; q, k and v recomputed (in the region bwd_gate
     * no longer needs) */
    memset(s.dq, 0, R * Z * sizeof(real));
    memset(s.dk, 0, R * Z * sizeof(real));
    memset(s.dv, 0, R * E * sizeof(real));
    memset(s.dbtab, 0, (size_t)(2 * A->Mc - 1) * sizeof(real));
    make_qk(L, W, s.q, s.k, A->base, R);
    make_v(L, s.v, A->vpre, R, run);
    mega_attn_k ak = attn_kernel(L, A->btab, A->Mc, run);
    mega_attn_backward(&ak, s.dq, s.dk, s.dv, s.dbtab, s.dOr, s.q, s.k, s.v, A->lse, pad, B, T, s.ws, nt);
    mega_relpos_backward(&L->rp, W, dW, s.dbtab, A->Mc);
    bwd_qk(L, W, dW, A, R, &s);
    /* v: hidden dropout and activation */
    if (train) mega_dropout(s.dv, s.dv, R * E, c->hidden_dropout, mega__subkey(run->key, SITE_HIDDEN));
    mega_act_backward(c->activation, s.dv, s.dv, A->vpre, R * E);
    /* x_bar recomputed from the saved statistics (in hb, free again), m recomputed (in G1) */
    const real *xn = x;
    if (c->prenorm) {
        mega_seqnorm_apply(&L->norm, W, s.hb, A->nstat, x, R);
        xn = s.hb;
    }
    real *m = s.G1;
    remake_m(L, m, A->mpre, xn, R, run);
    /* base = mx_proj(m): dm (R x D) in dxn, free again */
    real *dm = s.dxn;
    mega_linear_backward(dm, dW + L->mx_w, dW + L->mx_b, s.dbase, m, W + L->mx_w, R, D, P, 0);
    if (train) mega_dropout(dm, dm, R * D, c->dropout, mega__subkey(run->key, SITE_MX));
    /* d x_bar from the EMA (m = silu(mpre); includes the omega skip) and from v_proj */
    real *dxb = s.G1; /* m no longer needed */
    if (c->n_dim > 0) {
        mega_act_backward(MEGA_ACT_SILU, dm, dm, A->mpre, R * D); /* m = silu(mpre) */
        memset(dxb, 0, R * D * sizeof(real));
        mega_ema_layer_backward(&L->ema, W, dW, A->coef, dxb, dm, xn, pad, B, T, s.ws, nt);
    } else {
        memcpy(dxb, dm, R * D * sizeof(real));
    }
    mega_linear_backward(dxb, dW + L->v_w, dW + L->v_b, s.dv, xn, W + L->v_w, R, D, E, 1);
    if (c->prenorm)
        mega_seqnorm_backward(&L->norm, W, dW, dx, dxb, x, A->nstat, R, train, 1, run->sync);
    else
        for (size_t i = 0; i < R * D; i++) dx[i] += dxb[i];
}

/* ---- streaming -------------------------------------------------------------------------- */

/* Mega's streaming state (a view of mega_mixer_state.mem) */
typedef struct {
    real *h;     /* EMA state [B, N, D] */
    real *kc;    /* key cache [B, Z, cap] (transposed: mega_attn_query_kt) */
    real *vc;    /* value cache [B, cap, E] */
    real *coef;  /* untruncated EMA coefficients */
    real *btab;  /* bias table covering cap positions */
    int Mc, cap; /* the table's centre; cache capacity */
    int len;     /* cached positions: the stream's position within the current chunk (the
                  * official incremental state clears the cache at every chunk border) */
} mg_state;

/* lay out the state at mem for B sequences and capacity cap (mem NULL: count); returns reals */
static size_t state_view(const mega_mlayer *L, real *mem, int B, int cap, int64_t pos, mg_state *v) {
    const mega_block_config *c = L->cfg;
    mega_bump b = {mem, 0};
    v->h = mega_bump_take(&b, (size_t)B * c->n_dim * c->embed_dim);
    v->kc = mega_bump_take(&b, (size_t)B * cap * c->z_dim);
    v->vc = mega_bump_take(&b, (size_t)B * cap * c->hidden_dim);
    v->coef = mega_bump_take(&b, c->n_dim > 0 ? mega_ema_coef_size(&L->ema) : 0);
    v->btab = mega_bump_take(&b, mega_relpos_table_size(&L->rp, cap));
    v->cap = cap;
    v->Mc = L->rp.rotary ? chunk_or(c, cap) : L->rp.Mp;
    v->len = (int)(c->chunk_size > 0 ? pos % c->chunk_size : pos);
    return b.off;
}

/* token t of every sequence: the step's attention, in two passes over mega_step_parallel pieces
 * (the weights per sequence, then the output in blocks of MEGA_ATTN_QBLOCK values per sequence:
 * reading the value cache is most of the work, and at batch 1 the blocks spread it over the
 * threads; E 512 is 2 blocks with AVX-512, 4 with AVX) */
typedef struct {
    const mega_attn_k *ak;
    mg_state *S;
    real *O, *w;
    const real *q, *kk, *v;
    int T, t, n, nblk;
    const int64_t *rpos; /* per-sequence positions (mega_mixer_state.rpos; T = 1), or NULL */
    int chunk;
} step_attn_args;

/* sequence b's cached positions before this token: its own position's place in the chunk when
 * the sequences stand at their own positions, else the state's */
static size_t step_len(const step_attn_args *a, int b) {
    if (!a->rpos) return (size_t)a->S->len;
    return (size_t)(a->chunk > 0 ? a->rpos[b] % a->chunk : a->rpos[b]);
}

/* sequence b: append its key and value to the cache at S->len, and the attention weights of its
 * query over the n cached positions (w: the sequence's cap weights) */
static void step_attn_weights(void *arg, int b) {
    const step_attn_args *a = arg;
    mg_state *S = a->S;
    const size_t Z = (size_t)a->ak->Z, E = (size_t)a->ak->E, cap = (size_t)S->cap, len = step_len(a, b);
    const size_t r = (size_t)b * a->T + a->t;
    real *kt = S->kc + (size_t)b * Z * cap;
    for (size_t z = 0; z < Z; z++) kt[z * cap + len] = a->kk[r * Z + z];
    memcpy(S->vc + ((size_t)b * cap + len) * E, a->v + r * E, E * sizeof(real));
    mega_attn_query_weights(a->ak, a->q + r * Z, kt, cap, a->rpos ? (int)len + 1 : a->n, a->w + (size_t)b * cap);
}

/* piece i: output block i % nblk of sequence i / nblk */
static void step_attn_out(void *arg, int i) {
    const step_attn_args *a = arg;
    const int b = i / a->nblk, e0 = (i % a->nblk) * MEGA_ATTN_QBLOCK, E = a->ak->E;
    const size_t cap = (size_t)a->S->cap, r = (size_t)b * a->T + a->t;
    mega_attn_query_out(a->O + r * E + e0, a->w + (size_t)b * cap, a->S->vc + (size_t)b * cap * E + e0, (size_t)E,
                        a->rpos ? (int)step_len(a, b) + 1 : a->n, MEGA_MIN(MEGA_ATTN_QBLOCK, E - e0));
}

static mega_status mg_step(const void *layer, const real *W, mega_mixer_state *St, real *out, const real *x, int T,
                           real *scratch) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    const int B = St->B;
    mg_state sv, *S = &sv;
    state_view(L, St->mem, St->Bmem ? St->Bmem : B, St->cap, St->pos, S);
    if (St->Bmem) { /* sequences [b0, b0 + B) of the state (mega_mixer_state) */
        const size_t b0 = (size_t)St->b0, cap = (size_t)S->cap;
        S->h += b0 * c->n_dim * c->embed_dim, S->kc += b0 * cap * c->z_dim, S->vc += b0 * cap * c->hidden_dim;
    }
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, E = (size_t)c->hidden_dim, P = P_(c);
    if (St->rpos && T != 1) MEGA_FAIL(MEGA_ERR_INVALID, "a step of sequences at their own positions takes one token (got %d)", T);
    int64_t far = S->len; /* the furthest sequence's position before this step */
    if (St->rpos)
        for (int b = 0; b < B; b++) far = b ? MEGA_MAX(far, St->rpos[b]) : St->rpos[b];
    if (c->chunk_size <= 0 && far + T > S->cap)
        MEGA_FAIL(MEGA_ERR_INVALID, "stream of %lld tokens exceeds the attention cache capacity %d", (long long)(far + T), S->cap);
    mega_bump bp = {scratch, 0};
    /* norm statistics: 2R reals per-token norms, 2D for batchnorm (mega_seqnorm_stat_size) */
    real *xn = mega_bump_take(&bp, R * D), *nst = mega_bump_take(&bp, mega_seqnorm_stat_size(&L->norm, R));
    real *v = mega_bump_take(&bp, R * E), *mp = mega_bump_take(&bp, R * D), *m = mega_bump_take(&bp, R * D);
    real *base = mega_bump_take(&bp, R * P), *q = mega_bump_take(&bp, R * Z), *kk = mega_bump_take(&bp, R * Z);
    real *O = mega_bump_take(&bp, R * E), *hp = mega_bump_take(&bp, R * D), *w = mega_bump_take(&bp, (size_t)S->cap * B);
    real *W_ = (real *)W; /* eval-mode norms do not write */

    const real *xb = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&L->norm, W_, xn, nst, x, R, 0, 0, NULL);
        xb = xn;
    }
    /* the projections split their output columns over the threads (mega_linear_step) */
    mega_linear_step(v, xb, W + L->v_w, W + L->v_b, R, D, E);
    mega_act_rows(c->activation, v, v, R, E); /* row by row: a row's bits whatever rows share the step */
    /* EMA with carried state, untruncated (official incremental path); n-dim 0: no EMA */
    if (c->n_dim > 0)
        mega_ema_layer_step(&L->ema, W, S->coef, S->h, mp, m, xb, B, T);
    else
        memcpy(m, xb, R * D * sizeof(real));
    mega_linear_step(base, m, W + L->mx_w, W + L->mx_b, R, D, P);
    const real *g0 = W + L->qk_g, *g1 = g0 + Z, *b0 = W + L->qk_b, *b1 = b0 + Z;
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < Z; j++) {
            real z = mega_silu(base[r * P + D + j]);
            q[r * Z + j] = z * g0[j] + b0[j];
            kk[r * Z + j] = z * g1[j] + b1[j];
        }
    /* token by token: append k, v to the cache, attend with one query over the cache, clear the
     * cache when it reaches a chunk border (official incremental_state handling) */
    mega_attn_k ak = attn_kernel(L, S->btab, S->Mc, NULL);
    /* in parallel when there is enough work (mega_step_parallel: over the step team, or one
     * region each; no region at all otherwise: libgomp allocates a team descriptor for a region
     * of one thread, if() false included) */
    const int nblk = (int)((E + MEGA_ATTN_QBLOCK - 1) / MEGA_ATTN_QBLOCK);
    step_attn_args aa = {&ak, S, O, w, q, kk, v, T, 0, 0, nblk, St->rpos, c->chunk_size};
    for (int t = 0; t < T; t++) {
        /* n: the cached positions after this token (the furthest sequence's with rpos: a bound
         * for the work estimate only; each sequence attends over its own) */
        aa.t = t, aa.n = (St->rpos ? (int)(c->chunk_size > 0 ? MEGA_MIN(far, (int64_t)c->chunk_size - 1) : far) : S->len) + 1;
        const size_t work = (size_t)B * aa.n * (Z + E);
        mega_step_parallel(B, step_attn_weights, &aa, B > 1 && work > MEGA_PAR_MIN);
        mega_step_parallel(B * nblk, step_attn_out, &aa, work > MEGA_PAR_MIN / 2);
        if (St->probe && !St->rpos) memcpy(St->probe + (size_t)S->len * St->probe_ld, w, (size_t)aa.n * sizeof(real));
        S->len = (c->chunk_size > 0 && aa.n == c->chunk_size) ? 0 : aa.n;
    }
    /* h = act(hx + h_proj(O*r)); out = x + u*(h - x); post-norm */
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < E; j++) O[r * E + j] *= mega_silu(base[r * P + D + Z + j]);
    mega_linear_step(hp, O, W + L->h_w, W + L->h_b, R, E, D);
    /* whole rows per pass (vectorised; the activation of a few rows runs on this thread) */
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < D; j++) hp[r * D + j] += base[r * P + D + Z + E + j];
    mega_act_rows(c->activation, hp, hp, R, D);
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < D; j++) {
            real u = mega_sigmoid(base[r * P + j]);
            out[r * D + j] = x[r * D + j] + u * (hp[r * D + j] - x[r * D + j]);
        }
    if (!c->prenorm) mega_seqnorm_forward(&L->norm, W_, out, nst, out, R, 0, 0, NULL);
    St->pos += T;
    return MEGA_OK;
}

static size_t mg_step_scratch(const void *layer, int B, int T, int cap) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Z = (size_t)c->z_dim, E = (size_t)c->hidden_dim;
    return R * (5 * D + 2 * E + P_(c) + 2 * Z) + mega_seqnorm_stat_size(&L->norm, R) + (size_t)cap * B + 16 * 12;
}

/* ---- the Mega mixer: the official layer behind the token-mixer interface ---------------- */

static mega_status mg_check(const mega_block_config *c) {
    if (c->rel_pos_bias == MEGA_RELPOS_ROTARY && c->z_dim % 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "rotary relative-position bias needs an even z-dim (got %d)", c->z_dim);
    return MEGA_OK;
}

static size_t mg_acts_size(const void *layer, int B, int T) { return mega_mlayer_acts_view(layer, NULL, NULL, B, T); }

static size_t mg_state_size(const void *layer, int B, int cap) {
    mg_state v;
    return state_view(layer, NULL, B, cap, 0, &v);
}

static void mg_state_reset(const void *layer, mega_mixer_state *S) {
    const mega_mlayer *L = layer;
    mg_state v;
    state_view(L, S->mem, S->Bmem ? S->Bmem : S->B, S->cap, 0, &v);
    S->pos = 0;
    /* only the EMA state needs zeroing: the caches are overwritten before being read; a view
     * (mega_mixer_state.b0) clears its own sequences */
    const size_t per = (size_t)L->cfg->n_dim * L->cfg->embed_dim;
    memset(v.h + (size_t)S->b0 * per, 0, (size_t)S->B * per * sizeof(real));
}

static void mg_state_reorder(const void *layer, mega_mixer_state *S, const int *idx, real *tmp) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    mg_state v;
    state_view(L, S->mem, S->B, S->cap, S->pos, &v);
    mega__rows_gather(v.h, (size_t)c->n_dim * c->embed_dim, S->B, idx, tmp);
    mega__rows_gather(v.kc, (size_t)S->cap * c->z_dim, S->B, idx, tmp);
    mega__rows_gather(v.vc, (size_t)S->cap * c->hidden_dim, S->B, idx, tmp);
}

static mega_status mg_state_init(const void *layer, const real *W, mega_mixer_state *S) {
    const mega_mlayer *L = layer;
    const mega_block_config *c = L->cfg;
    if (c->chunk_size > 0 && S->cap < c->chunk_size)
        MEGA_FAIL(MEGA_ERR_INVALID, "streaming cache capacity %d is below the chunk size %d", S->cap, c->chunk_size);
    mg_state v;
    state_view(L, S->mem, S->B, S->cap, 0, &v);
    if (c->n_dim > 0) mega_ema_layer_coef(&L->ema, W, v.coef, 0);
    int Mc;
    MEGA_TRY(mega_relpos_table(&L->rp, W, chunk_or(c, S->cap), v.btab, &Mc));
    mg_state_reset(L, S);
    return MEGA_OK;
}

/* A chunk bounds the stream: one chunk of cache, and the state carried across segments (the EMA
 * carries what lies before the chunk, as in training). Under full attention the cache holds the
 * whole stream and a simple bias covers max-positions. */
static void mg_context(const mega_block_config *c, int T, mega_block_context *x) {
    mega__context_default(&mega_mixer_ops_mega, c, T, x);
    const int chunked = c->chunk_size > 0;
    x->segment = attn_len(c, T);
    x->cache = chunk_or(c, T);
    x->cache_full = !chunked;
    x->carry = chunked;
    x->eval_len = chunk_or(c, 2048);
    x->positions = !chunked && c->rel_pos_bias == MEGA_RELPOS_SIMPLE ? c->max_positions : 0;
}

static const char *const MG_OPTIONS[] = {"z-dim", "hidden-dim", "n-dim", "chunk-size", "truncation", "max-positions",
                                         "attention-activation", "rel-pos-bias", "attention-dropout", "hidden-dropout",
                                         NULL};

const mega_mixer_ops mega_mixer_ops_mega = {
    .name = "mega",
    .flags = MEGA_MIXER_SELF_RESIDUAL | MEGA_MIXER_CAUSAL | MEGA_MIXER_BIDIR | MEGA_MIXER_STEP_TEAM | MEGA_MIXER_PROBE |
             MEGA_MIXER_GATED_XATTN | MEGA_MIXER_ROWS,
    .layer_size = sizeof(mega_mlayer),
    .check = mg_check,
    .options = MG_OPTIONS,
    .context = mg_context,
    .declare = mg_declare,
    .init = mg_init,
    .acts_size = mg_acts_size,
    .scratch_size = mg_scratch,
    .forward = mg_forward,
    .backward = mg_backward,
    .state_size = mg_state_size,
    .state_init = mg_state_init,
    .state_reset = mg_state_reset,
    .state_reorder = mg_state_reorder,
    .step_scratch = mg_step_scratch,
    .step = mg_step,
};
