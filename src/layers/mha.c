/*
 * Softmax-attention token mixers behind the mixer interface (mixer.h): `mha` (Transformer
 * multi-head attention, SPEC §3), `local` (mha with a sliding window always on, SPEC §8.6) and,
 * through the same engine, `mhatw` (MHA with explicit time weighting, SPEC §4.2; its ops table
 * is in mhatw.c). The block wraps the mixer as the standard residual sublayer (block.c), so
 * this is the core only:
 *
 *   Q = x Wq^T + bq,  K = x Wk^T + bk,  V = x Wv^T + bv          (Da = D, H heads of dh = D/H)
 *   Q_t, K_u <- RoPE (half-split pairs, r = dh, base 10000; SPEC §3.2) or the XPOS rotation
 *               (interleaved pairs as in torchscale, SPEC §8.5) at their absolute positions
 *   O = multi-head masked softmax attention (ops/mhattn.h) with the positional terms of
 *       cfg->pos (SPEC §8), the local mask (window), log-n scaling, attention dropout
 *   y = O Wo^T + bo                         (mhatw: y_t <- y_t * gamma(t), SPEC §4.1)
 *
 * Parameters ("<prefix>mixer."): q_proj, k_proj, v_proj, out_proj (.weight [D,D], .bias [D],
 * fairseq names); kerple.bias_p / kerple.bias_a [H] (official KERPLE names, SPEC §8.3);
 * mhatw: time_logw [H, Lw] (log f_h, RWKV layout: entry Tm-1-delta is distance delta;
 * Lw = Tm causal, 2Tm-1 bidirectional), time_logbeta [H, Tm] (log beta_h(u)) and
 * time_gamma [Tm] (gamma(t)), Tm = cfg->max_len. alpha_h(t) cancels in the normalised form
 * (SPEC §4.2) and is not a parameter.
 *
 * Windows: `local` always uses cfg->window (and the smaller of it and cfg->attn_window when
 * both are set); `mha` and `mhatw` use cfg->attn_window when > 0. The mask is applied whenever
 * it is set (forward, backward and step); the CLI sets attn_window for evaluation only
 * (SPEC §8.6, "train short, test long").
 *
 * Streaming (causal): a cache of rotated keys and values per sequence. Without a window it
 * holds every position (capacity `cap`; streaming past it fails cleanly); with a window w it
 * is a ring buffer of w slots (unbounded streams; SPEC §3.5, §8.6). The distance tables (and
 * XPOS factors) are built at state_init for distances < slots, from the parameters of that
 * moment (like Mega's bias table): initialise the state again after a parameter update.
 */
#include "layers/block.h"
#include "ops/mhattn.h"
#include "ops/posenc.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* parameter offsets (mx->off) */
enum { O_QW, O_QB, O_KW, O_KB, O_VW, O_VB, O_OW, O_OB, O_KP, O_KA, O_LW, O_LB, O_G };
/* derived integers (mx->iv) */
enum { I_H, I_DH, I_WIN, I_TM, I_LW, I_TW };
/* activations (mega_mixer_acts.p) */
enum { A_Q, A_K, A_V, A_O, A_LSE, A_BT, A_XT, A_YP };
/* streaming state buffers (mega_mixer_state.p) and integers (iv) */
enum { S_KC, S_VC, S_BT, S_XT };
enum { SI_SLOTS, SI_RING };

enum { SITE_ATTN_DROP = 21 }; /* dropout site of the attention weights */

static inline size_t r16(size_t n) { return (n + 15) & ~(size_t)15; }

static int is_kerple(const mega_block_cfg *c) {
    return c->pos == MEGA_POS_KERPLE_POWER || c->pos == MEGA_POS_KERPLE_LOG;
}
static int has_btab(const mega_mixer *mx) {
    const mega_pos_kind p = mx->cfg->pos;
    return mx->iv[I_TW] || p == MEGA_POS_ALIBI || is_kerple(mx->cfg) || p == MEGA_POS_SANDWICH;
}
static int has_xpos(const mega_mixer *mx) { return mx->cfg->pos == MEGA_POS_XPOS; }

/* ---- declaration and init --------------------------------------------------------------- */

static mega_status am_declare(mega_mixer *mx, mega_params *P, const char *prefix) {
    const mega_block_cfg *c = mx->cfg;
    const char *nm = mega_mixer_name(c->mixer);
    const int tw = c->mixer == MEGA_MIXER_MHATW, loc = c->mixer == MEGA_MIXER_LOCAL;
    const int H = c->heads, D = c->D;
    /* configuration checks, including the invalid combinations of SPEC §8.8 */
    if (H < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: heads must be >= 1 (got %d)", nm, H);
    if (D % H) MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: embed-dim %d is not divisible by heads %d", nm, D, H);
    const int dh = D / H;
    if ((unsigned)c->pos > MEGA_POS_XPOS) MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: unknown positional scheme", nm);
    if ((c->pos == MEGA_POS_ROPE || c->pos == MEGA_POS_XPOS || c->pos == MEGA_POS_SANDWICH) && dh % 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: --pos %s needs an even head width (embed-dim / heads = %d)", nm,
                  mega_pos_name(c->pos), dh);
    if (c->pos == MEGA_POS_XPOS && c->bidir)
        MEGA_FAIL(MEGA_ERR_INVALID,
                  "mixer %s: --pos xpos is causal only (SPEC §8.5/§8.8: its scaling diverges on one side when "
                  "bidirectional); use rope, alibi, kerple-* or sandwich for encoders",
                  nm);
    if (c->window < 0 || c->attn_window < 0)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: window and attn-window must be >= 0 (0 = none)", nm);
    if (loc && c->window < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mixer local needs --window >= 1 (the attention span)");
    if (tw && c->max_len < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer mhatw needs --max-len >= 1 (the trained context of its time weights)");
    if (c->log_n && c->train_len < 2)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: --log-n-scaling needs the training length (train_len >= 2, got %d)",
                  nm, c->train_len);
    if (!(c->attn_dropout >= 0 && c->attn_dropout < 1))
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s: attention dropout must be in [0, 1)", nm);

    memset(mx->off, 0, sizeof mx->off);
    memset(mx->iv, 0, sizeof mx->iv);
    mx->iv[I_H] = H, mx->iv[I_DH] = dh, mx->iv[I_TW] = tw;
    int win = loc ? c->window : 0;
    if (c->attn_window > 0) win = win > 0 ? MEGA_MIN(win, c->attn_window) : c->attn_window;
    mx->iv[I_WIN] = win;
    if (tw) mx->iv[I_TM] = c->max_len, mx->iv[I_LW] = c->bidir ? 2 * c->max_len - 1 : c->max_len;

    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    static const char *const lin[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int i = 0; i < 4; i++) {
        char nw[64], nb[64];
        snprintf(nw, sizeof nw, "%s.weight", lin[i]);
        snprintf(nb, sizeof nb, "%s.bias", lin[i]);
        MEGA_TRY(MEGA_PADD(P, pre, nw, MEGA_P_DECAY, &mx->off[O_QW + 2 * i], D, D));
        MEGA_TRY(MEGA_PADD(P, pre, nb, 0, &mx->off[O_QB + 2 * i], D));
    }
    if (is_kerple(c)) {
        MEGA_TRY(MEGA_PADD(P, pre, "kerple.bias_p", 0, &mx->off[O_KP], H));
        MEGA_TRY(MEGA_PADD(P, pre, "kerple.bias_a", 0, &mx->off[O_KA], H));
    }
    if (tw) {
        MEGA_TRY(MEGA_PADD(P, pre, "time_logw", 0, &mx->off[O_LW], H, mx->iv[I_LW]));
        MEGA_TRY(MEGA_PADD(P, pre, "time_logbeta", 0, &mx->off[O_LB], H, c->max_len));
        MEGA_TRY(MEGA_PADD(P, pre, "time_gamma", 0, &mx->off[O_G], c->max_len));
    }
    return MEGA_OK;
}

/* xavier-uniform: U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)) */
static void xavier(real *w, size_t out, size_t in, double gain, mega_rng *rng) {
    const double b = gain * sqrt(6.0 / (double)(in + out));
    mega_fill_uniform(w, out * in, -b, b, rng);
}

static void am_init(const mega_mixer *mx, real *W, mega_rng *rng) {
    const mega_block_cfg *c = mx->cfg;
    const size_t D = (size_t)c->D;
    const int H = mx->iv[I_H];
    /* SPEC §3.1 (fairseq MultiheadAttention): q/k/v xavier-uniform with gain 2^-1/2, out_proj
     * xavier-uniform (gain 1); every bias zero (fairseq zeroes out_proj.bias; the q/k/v biases
     * are zero here too, as the SPEC's "all with biases" baseline asks) */
    for (int i = 0; i < 3; i++) xavier(W + mx->off[O_QW + 2 * i], D, D, sqrt(0.5), rng);
    xavier(W + mx->off[O_OW], D, D, 1.0, rng);
    for (int i = 0; i < 4; i++) mega_fill_const(W + mx->off[O_QB + 2 * i], D, 0);
    if (is_kerple(c)) {
        /* official KERPLE init (SPEC §8.3): bias_p ~ U(0, 2), bias_a ~ U(0, 1), then clamped */
        mega_fill_uniform(W + mx->off[O_KP], (size_t)H, 0, 2, rng);
        mega_fill_uniform(W + mx->off[O_KA], (size_t)H, 0, 1, rng);
        mega_kerple_clamp(c->pos == MEGA_POS_KERPLE_POWER, W + mx->off[O_KP], W + mx->off[O_KA], H);
    }
    if (mx->iv[I_TW]) {
        /* RWKV_TimeMix init of f (SPEC §4.1), beta = gamma = 1 */
        mega_tw_init_logw(W + mx->off[O_LW], H, mx->iv[I_LW], mx->iv[I_TM]);
        mega_fill_const(W + mx->off[O_LB], (size_t)H * mx->iv[I_TM], 0);
        mega_fill_const(W + mx->off[O_G], (size_t)mx->iv[I_TM], 1);
    }
}

/* ---- shared pieces ---------------------------------------------------------------------- */

/* rotate (or, inverse, un-rotate) the heads of q and k [R, D] in place; row r is at absolute
 * position pos0 + r % T (RoPE half-split r = dh, or the XPOS rotation, interleaved) */
static void rotate_rows(const mega_mixer *mx, real *q, real *k, size_t R, int T, int64_t pos0, int inverse) {
    const mega_pos_kind p = mx->cfg->pos;
    if (p != MEGA_POS_ROPE && p != MEGA_POS_XPOS) return;
    const int H = mx->iv[I_H], dh = mx->iv[I_DH], inter = p == MEGA_POS_XPOS;
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
static void build_tables(const mega_mixer *mx, const real *W, real *bt, int tc, int tl, real *xt, int xmin, int xmax) {
    const mega_block_cfg *c = mx->cfg;
    const int H = mx->iv[I_H];
    if (bt) {
        memset(bt, 0, (size_t)H * tl * sizeof(real));
        if (c->pos == MEGA_POS_ALIBI) mega_alibi_table(bt, H, tc, tl);
        if (is_kerple(c))
            mega_kerple_table(c->pos == MEGA_POS_KERPLE_POWER, bt, H, tc, tl, W + mx->off[O_KP], W + mx->off[O_KA]);
        if (c->pos == MEGA_POS_SANDWICH) mega_sandwich_table(bt, H, tc, tl, mx->iv[I_DH]);
        if (mx->iv[I_TW]) mega_tw_table(bt, H, tc, tl, W + mx->off[O_LW], mx->iv[I_LW], mx->iv[I_TM]);
    }
    if (xt) mega_xpos_table(xt, mx->iv[I_DH], xmin, xmax);
}

static mega_mhattn_k kernel_of(const mega_mixer *mx, const real *kbias, const real *bt, int tc, int tl, const real *xt,
                               int xoff, double p_drop, uint64_t key) {
    const mega_block_cfg *c = mx->cfg;
    mega_mhattn_k k;
    memset(&k, 0, sizeof k);
    k.H = mx->iv[I_H], k.dh = mx->iv[I_DH];
    k.causal = !c->bidir;
    k.window = mx->iv[I_WIN];
    k.scale = (real)(1.0 / sqrt((double)k.dh));
    k.log_train = c->log_n ? log((double)c->train_len) : 0;
    k.btab = bt, k.bc = tc, k.bl = tl;
    if (kbias) k.kbias = kbias, k.kbl = mx->iv[I_TM];
    k.xtab = xt, k.xoff = xoff;
    k.p_drop = p_drop, k.key_drop = key;
    return k;
}

/* MHATW's key-position bias log beta (the parameter itself; the kernel clamps positions) */
static const real *kbias_of(const mega_mixer *mx, const real *W) { return mx->iv[I_TW] ? W + mx->off[O_LB] : NULL; }

/* forward-pass table geometry: distance 0 at T-1; causal tables hold d <= 0 only */
static void fwd_geometry(const mega_mixer *mx, int T, int *tc, int *tl) {
    *tc = T - 1;
    *tl = mx->cfg->bidir ? 2 * T - 1 : T;
}

/* a kernel description with the right optional parts, for sizing scratch */
static mega_mhattn_k sizing_kernel(const mega_mixer *mx, int T) {
    static const real dummy[1] = {0};
    int tc, tl;
    fwd_geometry(mx, T, &tc, &tl);
    mega_mhattn_k k = kernel_of(mx, mx->iv[I_TW] ? dummy : NULL, has_btab(mx) ? dummy : NULL, tc, tl,
                                has_xpos(mx) ? dummy : NULL, MEGA_MHATTN_BR, mx->cfg->attn_dropout, 0);
    return k;
}

/* mhatw output factor gamma(t), clamped to the last learned position (SPEC §4.1 (c)) */
static inline real gamma_at(const mega_mixer *mx, const real *W, int64_t t) {
    const int Tm = mx->iv[I_TM];
    return W[mx->off[O_G] + (size_t)(t < Tm ? t : Tm - 1)];
}

/* ---- activations, scratch, forward, backward -------------------------------------------- */

static size_t am_acts(const mega_mixer *mx, mega_mixer_acts *A, real *base, int B, int T) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D, H = (size_t)mx->iv[I_H];
    int tc, tl;
    fwd_geometry(mx, T, &tc, &tl);
    const size_t n[8] = {R * D, R * D, R * D, R * D, (size_t)B * H * T, has_btab(mx) ? H * (size_t)tl : 0,
                         has_xpos(mx) ? ((size_t)T + MEGA_MHATTN_BR) * (size_t)(mx->iv[I_DH] / 2) : 0,
                         mx->iv[I_TW] ? R * D : 0};
    size_t off = 0;
    memset(A, 0, sizeof *A);
    for (int i = 0; i < 8; i++) {
        A->p[i] = base && n[i] ? base + off : NULL;
        off += r16(n[i]);
    }
    return off;
}

/* backward scratch: dO, dq, dk, dv [R,D]; dy*gamma [R,D] (mhatw); dtab [H*tl]; kernel */
static size_t am_scratch(const mega_mixer *mx, int B, int T, int nthreads) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D;
    int tc, tl;
    fwd_geometry(mx, T, &tc, &tl);
    mega_mhattn_k k = sizing_kernel(mx, T);
    if (nthreads < 1) nthreads = 1;
    return 4 * r16(R * D) + (mx->iv[I_TW] ? r16(R * D) : 0) + r16((size_t)mx->iv[I_H] * tl) +
           mega_mhattn_scratch(&k, B, T, nthreads) + 16;
}

static mega_status am_forward(const mega_mixer *mx, real *W, mega_mixer_acts *A, real *y, const real *x,
                              const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const mega_block_cfg *c = mx->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->D;
    real *q = A->p[A_Q], *k = A->p[A_K], *v = A->p[A_V], *O = A->p[A_O];
    /* the official KERPLE forward clamps the parameter data in place (SPEC §8.3) */
    if (is_kerple(c))
        mega_kerple_clamp(c->pos == MEGA_POS_KERPLE_POWER, W + mx->off[O_KP], W + mx->off[O_KA], mx->iv[I_H]);
    mega_linear_forward(q, x, W + mx->off[O_QW], W + mx->off[O_QB], R, D, D);
    mega_linear_forward(k, x, W + mx->off[O_KW], W + mx->off[O_KB], R, D, D);
    mega_linear_forward(v, x, W + mx->off[O_VW], W + mx->off[O_VB], R, D, D);
    rotate_rows(mx, q, k, R, T, 0, 0);
    int tc, tl;
    fwd_geometry(mx, T, &tc, &tl);
    build_tables(mx, W, A->p[A_BT], tc, tl, A->p[A_XT], -MEGA_MHATTN_BR, T);
    const double pd = run->training ? c->attn_dropout : 0;
    mega_mhattn_k kk = kernel_of(mx, kbias_of(mx, W), A->p[A_BT], tc, tl, A->p[A_XT], MEGA_MHATTN_BR, pd,
                                 mega__subkey(run->key, SITE_ATTN_DROP));
    mega_mhattn_forward(&kk, O, A->p[A_LSE], q, k, v, pad, B, T, scratch, run->nthreads);
    mega_linear_forward(y, O, W + mx->off[O_OW], W + mx->off[O_OB], R, D, D);
    if (mx->iv[I_TW]) {
        memcpy(A->p[A_YP], y, R * D * sizeof(real));
        for (size_t r = 0; r < R; r++) {
            const real g = gamma_at(mx, W, (int64_t)(r % (size_t)T));
            for (size_t j = 0; j < D; j++) y[r * D + j] *= g;
        }
    }
    return MEGA_OK;
}

static void am_backward(const mega_mixer *mx, const real *W, real *dW, const mega_mixer_acts *A, real *dx,
                        const real *dy, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                        real *scratch) {
    const mega_block_cfg *c = mx->cfg;
    const int H = mx->iv[I_H];
    const size_t R = (size_t)B * T, D = (size_t)c->D;
    int tc, tl;
    fwd_geometry(mx, T, &tc, &tl);
    real *dO = scratch, *dq = dO + r16(R * D), *dk = dq + r16(R * D), *dv = dk + r16(R * D);
    real *dyg = dv + r16(R * D);
    real *dbt = dyg + (mx->iv[I_TW] ? r16(R * D) : 0);
    real *kscr = dbt + r16((size_t)H * tl);
    const real *g = dy;
    if (mx->iv[I_TW]) {
        /* y = gamma(t) ypre: d gamma(min(t, Tm-1)) += <dy_t, ypre_t>, d ypre = gamma dy */
        const real *yp = A->p[A_YP];
        real *dg = dW + mx->off[O_G];
        const int Tm = mx->iv[I_TM];
        for (size_t r = 0; r < R; r++) {
            const size_t t = r % (size_t)T;
            const real gm = gamma_at(mx, W, (int64_t)t);
            real s = 0;
            for (size_t j = 0; j < D; j++) s += dy[r * D + j] * yp[r * D + j], dyg[r * D + j] = gm * dy[r * D + j];
            dg[t < (size_t)Tm ? t : (size_t)Tm - 1] += s;
        }
        g = dyg;
    }
    mega_linear_backward(dO, dW + mx->off[O_OW], dW + mx->off[O_OB], g, A->p[A_O], W + mx->off[O_OW], R, D, D, 0);
    memset(dq, 0, 3 * r16(R * D) * sizeof(real));
    if (A->p[A_BT]) memset(dbt, 0, (size_t)H * tl * sizeof(real));
    const double pd = run->training ? c->attn_dropout : 0;
    mega_mhattn_k kk = kernel_of(mx, kbias_of(mx, W), A->p[A_BT], tc, tl, A->p[A_XT], MEGA_MHATTN_BR, pd,
                                 mega__subkey(run->key, SITE_ATTN_DROP));
    mega_mhattn_backward(&kk, dq, dk, dv, A->p[A_BT] ? dbt : NULL, mx->iv[I_TW] ? dW + mx->off[O_LB] : NULL, dO,
                         A->p[A_Q], A->p[A_K], A->p[A_V], A->p[A_LSE], pad, B, T, kscr, run->nthreads);
    if (A->p[A_BT]) {
        if (is_kerple(c))
            mega_kerple_backward(c->pos == MEGA_POS_KERPLE_POWER, dbt, H, tc, tl, W + mx->off[O_KP], W + mx->off[O_KA],
                                 dW + mx->off[O_KP], dW + mx->off[O_KA]);
        if (mx->iv[I_TW]) mega_tw_table_backward(dbt, H, tc, tl, dW + mx->off[O_LW], mx->iv[I_LW], mx->iv[I_TM]);
    }
    rotate_rows(mx, dq, dk, R, T, 0, 1); /* the rotation is orthogonal: its backward rotates back */
    mega_linear_backward(dx, dW + mx->off[O_QW], dW + mx->off[O_QB], dq, x, W + mx->off[O_QW], R, D, D, 0);
    mega_linear_backward(dx, dW + mx->off[O_KW], dW + mx->off[O_KB], dk, x, W + mx->off[O_KW], R, D, D, 1);
    mega_linear_backward(dx, dW + mx->off[O_VW], dW + mx->off[O_VB], dv, x, W + mx->off[O_VW], R, D, D, 1);
}

/* ---- streaming (SPEC §3.5, §8.6) -------------------------------------------------------- */

/* cache slots: the window (ring buffer) or the capacity */
static int slots_of(const mega_mixer *mx, int cap) { return mx->iv[I_WIN] > 0 ? mx->iv[I_WIN] : cap; }

static size_t state_layout(const mega_mixer *mx, mega_mixer_state *S, real *mem, int B, int cap) {
    const size_t D = (size_t)mx->cfg->D, sl = (size_t)slots_of(mx, cap);
    const size_t n[4] = {(size_t)B * sl * D, (size_t)B * sl * D, has_btab(mx) ? (size_t)mx->iv[I_H] * sl : 0,
                         has_xpos(mx) ? sl * (size_t)(mx->iv[I_DH] / 2) : 0};
    size_t off = 0;
    for (int i = 0; i < 4; i++) {
        if (S) S->p[i] = mem && n[i] ? mem + off : NULL, S->n[i] = n[i];
        off += r16(n[i]);
    }
    return off;
}

static size_t am_state_size(const mega_mixer *mx, int B, int cap) { return state_layout(mx, NULL, NULL, B, cap); }

static void am_state_reset(const mega_mixer *mx, mega_mixer_state *S) {
    (void)mx;
    S->len = 0, S->pos = 0; /* the caches are written before they are read */
}

static mega_status am_state_init(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *mem, int B, int cap) {
    if (mx->cfg->bidir) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "bidirectional %s has no streaming state", mx->ops->name);
    if (B < 1 || cap < 1) MEGA_FAIL(MEGA_ERR_INVALID, "streaming batch and cache capacity must be positive");
    memset(S, 0, sizeof *S);
    S->B = B, S->cap = cap;
    state_layout(mx, S, mem, B, cap);
    const int sl = slots_of(mx, cap);
    S->iv[SI_SLOTS] = sl, S->iv[SI_RING] = mx->iv[I_WIN] > 0;
    /* distances 0 .. slots-1 (a query never sees an older key); KERPLE reads clamped values */
    build_tables(mx, W, S->p[S_BT], sl - 1, sl, S->p[S_XT], 0, sl);
    am_state_reset(mx, S);
    return MEGA_OK;
}

static size_t am_step_scratch(const mega_mixer *mx, int B, int T, int cap) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D;
    return 4 * r16(R * D) + r16((size_t)B * mx->iv[I_H] * (size_t)slots_of(mx, cap)) + 16;
}

static mega_status am_step(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                           real *scratch) {
    const mega_block_cfg *c = mx->cfg;
    const int B = S->B, H = mx->iv[I_H], dh = mx->iv[I_DH], win = mx->iv[I_WIN];
    (void)dh; /* read only by the OpenMP pragma */
    const int sl = S->iv[SI_SLOTS];
    const size_t R = (size_t)B * T, D = (size_t)c->D;
    if (T < 1) return MEGA_OK;
    if (!S->iv[SI_RING] && S->pos + T > sl)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s streaming: %lld + %d positions exceed the cache capacity %d", mx->ops->name,
                  (long long)S->pos, T, sl);
    real *q = scratch, *k = q + r16(R * D), *v = k + r16(R * D), *O = v + r16(R * D), *w = O + r16(R * D);
    mega_linear_forward(q, x, W + mx->off[O_QW], W + mx->off[O_QB], R, D, D);
    mega_linear_forward(k, x, W + mx->off[O_KW], W + mx->off[O_KB], R, D, D);
    mega_linear_forward(v, x, W + mx->off[O_VW], W + mx->off[O_VB], R, D, D);
    rotate_rows(mx, q, k, R, T, S->pos, 0); /* absolute positions (SPEC §3.3) */
    mega_mhattn_k kk = kernel_of(mx, kbias_of(mx, W), S->p[S_BT], sl - 1, sl, S->p[S_XT], 0, 0, 0);
    real *kc = S->p[S_KC], *vc = S->p[S_VC];
    const long units = (long)B * H;
    for (int i = 0; i < T; i++) {
        const int64_t t = S->pos + i, lo = win > 0 ? MEGA_MAX(0, t - win + 1) : 0;
        const size_t slot = (size_t)(t % sl);
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T + i;
            memcpy(kc + ((size_t)b * sl + slot) * D, k + r * D, D * sizeof(real));
            memcpy(vc + ((size_t)b * sl + slot) * D, v + r * D, D * sizeof(real));
        }
#pragma omp parallel for schedule(static) if (units > 1 && (size_t)units * (size_t)(t - lo + 1) * dh * 2 > MEGA_PAR_MIN)
        for (long un = 0; un < units; un++) {
            const int b = (int)(un / H), h = (int)(un % H);
            const size_t r = (size_t)b * T + i;
            mega_mhattn_query(&kk, h, O + r * D, q + r * D, t, lo, kc + (size_t)b * sl * D, vc + (size_t)b * sl * D, sl,
                              w + (size_t)un * sl);
        }
    }
    mega_linear_forward(y, O, W + mx->off[O_OW], W + mx->off[O_OB], R, D, D);
    if (mx->iv[I_TW])
        for (size_t r = 0; r < R; r++) {
            const real g = gamma_at(mx, W, S->pos + (int64_t)(r % (size_t)T));
            for (size_t j = 0; j < D; j++) y[r * D + j] *= g;
        }
    S->pos += T;
    S->len = (int)MEGA_MIN(S->pos, (int64_t)sl);
    return MEGA_OK;
}

const mega_mixer_ops mega_mixer_ops_mha = {
    "mha", 0, 1, 1, am_declare, am_init, am_acts, am_scratch, am_forward, am_backward,
    am_state_size, am_state_init, am_state_reset, am_step_scratch, am_step,
};

const mega_mixer_ops mega_mixer_ops_local = {
    "local", 0, 1, 1, am_declare, am_init, am_acts, am_scratch, am_forward, am_backward,
    am_state_size, am_state_init, am_state_reset, am_step_scratch, am_step,
};
