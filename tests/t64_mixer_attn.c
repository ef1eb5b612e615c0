/*
 * The softmax-attention mixers mha, local and mhatw (src/layers/mha.c, ops/mhattn.c,
 * ops/posenc.c; docs/mixers.md "Softmax-attention mixers", "MHATW") in double precision
 * (libmega64).
 *
 * 1. Finite differences through the whole block (mixer norm -> mixer -> residual -> NFFN) with
 *    the shared driver bt_fd_check (tests/lib/blocktest.h), on tiny shapes (B = 2, T = 9, D = 8
 *    or 6, heads 2-4), training mode: every element of dL/dx and of every trainable tensor (one
 *    check per tensor, fourth-order central differences, h = 1e-4), plus three random
 *    directional derivatives over all parameters and one over x. 36 configurations cover every
 *    mixer x every positional scheme (none, rope, alibi, kerple-power, kerple-log, sandwich,
 *    xpos) x causal / bidirectional, right-padding masks (with rows that see no valid key),
 *    windows (local's window and mha/mhatw's attn_window), log-n scaling, mhatw with
 *    max_len < T (the clamping length policy on both sides), pre/post norm, with and without
 *    the FFN, and attention + residual dropout (p = 0.1, fixed key). Error (fd.h): per tensor
 *    max |analytic - FD| / max(max |analytic|, max |FD|, 1e-3 x the configuration's largest
 *    gradient); tolerance 1e-6.
 * 2. Long sequences (T = 150 > the kernel's 64-row blocks): directional derivatives only (four
 *    per configuration), windows, XPOS re-centring across blocks, bidirectional bands.
 * 3. The kernel (mega_mhattn_forward) against a naive per-row double computation, with every
 *    term on (distance table, key bias, window, log-n, pads, XPOS un-centred), T = 150.
 * 4. ALiBi slopes for H = 1, 6, 8, 12, 16 against get_slopes of the ALiBi code
 *    (ofirpress/attention_with_linear_biases, fairseq/models/transformer.py: get_slopes; the
 *    H = 12 list written out); the KERPLE gradient at distance 0 (exactly 0 and finite, both
 *    variants, also through a whole T = 1 block); XPOS at 100k positions: the re-centred kernel
 *    (window 16) equals the un-centred formula in fp64 (which does not overflow there in
 *    double) on sampled rows.
 * 5. Semantics: local(window w) == mha(attn_window w); a window >= T changes nothing; log-n with
 *    train_len >= T is the identity (the max(1, .) variant, a project extension); MHATW with
 *    log f = -m_h delta (ALiBi slopes), beta = gamma = 1 equals mha + alibi (the normalised
 *    form of PENG Bo's time weighting is softmax attention with the bias log f + log beta);
 *    Sandwich table values; the KERPLE forward clamps its parameter data in place (as
 *    chijames/KERPLE ParallelKerplePower); the mixer defaults are applied (local window 64,
 *    mhatw max-len = the training length, else 1024; heads); invalid combinations
 *    (docs/mixers.md "rejected combinations") are rejected by mega_block_config_check with
 *    MEGA_ERR_INVALID; the thread count does not change results.
 */
#include "blocktest.h"
#include "ops/mhattn.h"
#include "ops/posenc.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long g_seed = 0xa77e5eedull;

/* ---------------------------------------------------------------------------------------------
 * block configurations */
enum { MHA = MEGA_MIXER_MHA, LOC = MEGA_MIXER_LOCAL, TW = MEGA_MIXER_MHATW };
enum { PN = MEGA_POS_NONE, PR = MEGA_POS_ROPE, PA = MEGA_POS_ALIBI, PKP = MEGA_POS_KERPLE_POWER,
       PKL = MEGA_POS_KERPLE_LOG, PS = MEGA_POS_SANDWICH, PX = MEGA_POS_XPOS };
enum { LN = MEGA_NORM_LAYER, SN = MEGA_NORM_SCALE, RN = MEGA_NORM_RMS };

typedef struct {
    int mixer, pos, bidir, pad;
    int win;   /* local: window; mha / mhatw: attn_window */
    int logn;  /* train_len (0 = off) */
    int pre, norm, F, drop;
    int H, D;
    int Tm;    /* mhatw max_len (0: = T) */
} acfg;

/* mixer pos bidir pad win logn pre norm F drop H D Tm */
static const acfg CFGS[] = {
    {MHA, PN, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0},  {MHA, PN, 1, 1, 0, 0, 0, RN, 0, 0, 2, 8, 0},
    {MHA, PR, 0, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0},  {MHA, PR, 1, 1, 0, 0, 0, SN, 16, 0, 2, 8, 0},
    {MHA, PA, 0, 1, 0, 0, 1, LN, 16, 0, 3, 6, 0},  {MHA, PA, 1, 0, 0, 0, 1, RN, 0, 0, 3, 6, 0},
    {MHA, PKP, 0, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0}, {MHA, PKP, 1, 1, 0, 0, 0, LN, 16, 0, 4, 8, 0},
    {MHA, PKL, 0, 0, 0, 0, 1, RN, 16, 0, 2, 8, 0}, {MHA, PKL, 1, 1, 0, 0, 1, LN, 0, 0, 2, 8, 0},
    {MHA, PS, 0, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0},  {MHA, PS, 1, 1, 0, 0, 0, RN, 16, 0, 2, 8, 0},
    {MHA, PX, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0},  {MHA, PX, 0, 1, 3, 0, 0, SN, 16, 0, 2, 8, 0},
    {MHA, PR, 0, 0, 3, 3, 1, LN, 16, 0, 2, 8, 0},  {MHA, PN, 1, 1, 2, 2, 1, LN, 0, 0, 2, 8, 0},
    {MHA, PA, 0, 1, 0, 4, 0, RN, 16, 0, 4, 8, 0},  {LOC, PR, 0, 1, 3, 0, 1, LN, 16, 0, 2, 8, 0},
    {LOC, PN, 1, 1, 2, 0, 0, LN, 16, 0, 2, 8, 0},  {LOC, PKL, 0, 0, 4, 3, 1, RN, 16, 0, 2, 8, 0},
    {LOC, PX, 0, 1, 4, 0, 1, LN, 0, 0, 2, 8, 0},   {LOC, PS, 1, 0, 3, 2, 1, SN, 16, 0, 2, 8, 0},
    {TW, PN, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0},   {TW, PN, 0, 1, 0, 0, 0, RN, 16, 0, 2, 8, 5},
    {TW, PN, 1, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0},   {TW, PN, 1, 0, 0, 0, 1, SN, 0, 0, 3, 6, 4},
    {TW, PR, 0, 1, 3, 3, 1, LN, 16, 0, 2, 8, 6},   {TW, PA, 1, 1, 0, 0, 0, LN, 16, 0, 2, 8, 0},
    {TW, PKP, 0, 1, 0, 0, 1, RN, 16, 0, 2, 8, 0},  {TW, PX, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 7},
    {TW, PS, 0, 1, 0, 2, 1, LN, 16, 0, 2, 8, 0},   {TW, PKL, 1, 1, 2, 0, 1, RN, 16, 0, 2, 8, 6},
    /* attention + residual dropout (p = 0.1) */
    {MHA, PR, 0, 1, 0, 0, 1, LN, 16, 1, 2, 8, 0},  {TW, PN, 1, 1, 0, 3, 0, LN, 16, 1, 2, 8, 5},
    {LOC, PX, 0, 0, 3, 0, 1, RN, 16, 1, 2, 8, 0},  {MHA, PKP, 1, 1, 2, 0, 1, LN, 0, 1, 2, 8, 0},
};
#define NCFG ((int)(sizeof CFGS / sizeof CFGS[0]))

static void fill_cfg(mega_block_config *c, const acfg *g, int T) {
    mega_block_config_default(c);
    c->mixer = (mega_mixer_kind)g->mixer;
    c->embed_dim = g->D, c->ffn_dim = g->F, c->chunk_size = -1;
    c->bidirectional = g->bidir, c->prenorm = g->pre, c->norm_type = (mega_norm_type)g->norm;
    c->heads = g->H, c->pos = (mega_pos_kind)g->pos;
    if (g->mixer == LOC) c->window = g->win;
    else c->attn_window = g->win;
    c->log_n_scaling = g->logn > 0, c->train_len = g->logn;
    c->max_len = g->mixer == TW ? (g->Tm ? g->Tm : T) : 0;
    if (g->drop) c->dropout = c->attention_dropout = 0.1f;
}

/* the block of a configuration; sequence 0 has one trailing pad, sequence 1 a run (BT_PAD_RIGHT) */
static int open_cfg(bt_ctx *c, const acfg *g, int T, uint64_t seed) {
    mega_block_config cfg;
    fill_cfg(&cfg, g, T);
    const bt_opts o = {.B = 2, .T = T, .pad = g->pad ? BT_PAD_RIGHT : BT_PAD_NONE, .seed = seed};
    return bt_open(c, &cfg, &o);
}

static bt_worst g_fd_worst, g_dir_worst;

static void run_fd(int ci) {
    bt_ctx c;
    if (open_cfg(&c, &CFGS[ci], 9, 3000 + (uint64_t)ci)) return;
    const bt_fd_opts fo = {.entries = 1, .directional = 1, .canary = ci == 0, .worst = &g_fd_worst, .worst_dir = &g_dir_worst};
    bt_fd_check(&c, &fo);
    bt_close(&c);
}

/* long sequences: several 64-row blocks, directional derivatives only */
static void run_long(const acfg *g, int T) {
    bt_ctx c;
    if (open_cfg(&c, g, T, 4000 + (uint64_t)T)) return;
    const bt_fd_opts fo = {.directional = 1, .worst_dir = &g_dir_worst};
    bt_fd_check(&c, &fo);
    bt_close(&c);
}

/* ---------------------------------------------------------------------------------------------
 * kernel vs a naive double computation (XPOS un-centred: absolute factors zeta^(t/512) on q,
 * zeta^(-u/512) on k) */
typedef struct {
    int H, dh, causal, window, T, B;
    double log_train;
    const double *btab; /* [H][2T-1] centred at T-1, or NULL */
    const double *kbias;
    int kbl;
    int xpos;
    const uint8_t *pad;
} naive_t;

static void naive_attn(const naive_t *n, double *O, const double *q, const double *k, const double *v, int t_only) {
    const int H = n->H, dh = n->dh, T = n->T;
    const size_t Da = (size_t)H * dh;
    double *s = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < n->B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                if (t_only > 0 && t % t_only && t != T - 1) continue;
                int cnt = 0;
                for (int u = 0; u < T; u++) {
                    int vis = n->causal ? (u <= t && (n->window <= 0 || u > t - n->window))
                                        : (n->window <= 0 || abs(u - t) <= n->window);
                    if (n->pad && n->pad[(size_t)b * T + u]) vis = 0;
                    s[u] = vis ? 0 : -INFINITY;
                    cnt += vis;
                }
                double lam = 1;
                if (n->log_train > 0 && cnt > 1) lam = fmax(1, log((double)cnt) / n->log_train);
                double mx = -INFINITY;
                for (int u = 0; u < T; u++) {
                    if (s[u] == -INFINITY) continue;
                    const double *qt = q + ((size_t)b * T + t) * Da + (size_t)h * dh;
                    const double *ku = k + ((size_t)b * T + u) * Da + (size_t)h * dh;
                    double dot = 0;
                    for (int i = 0; i < dh; i++) {
                        double f = 1;
                        if (n->xpos) {
                            double z = mega_xpos_zeta(i / 2, dh);
                            f = pow(z, t / 512.0) * pow(z, -u / 512.0);
                        }
                        dot += f * qt[i] * ku[i];
                    }
                    s[u] = lam * dot / sqrt((double)dh);
                    if (n->btab) s[u] += n->btab[(size_t)h * (2 * T - 1) + (T - 1) + (u - t)];
                    if (n->kbias) s[u] += n->kbias[(size_t)h * n->kbl + (u < n->kbl ? u : n->kbl - 1)];
                    mx = fmax(mx, s[u]);
                }
                double *o = O + ((size_t)b * T + t) * Da + (size_t)h * dh;
                for (int i = 0; i < dh; i++) o[i] = 0;
                if (mx == -INFINITY) continue;
                double z = 0;
                for (int u = 0; u < T; u++) z += s[u] == -INFINITY ? 0 : exp(s[u] - mx);
                for (int u = 0; u < T; u++) {
                    if (s[u] == -INFINITY) continue;
                    const double p = exp(s[u] - mx) / z;
                    for (int i = 0; i < dh; i++) o[i] += p * v[((size_t)b * T + u) * Da + (size_t)h * dh + i];
                }
            }
    free(s);
}

static void kernel_vs_naive(int causal, int window, int logn, int xpos, int pad, int T) {
    const int B = 2, H = 3, dh = 4;
    const size_t Da = (size_t)H * dh, R = (size_t)B * T;
    double *q = malloc(R * Da * sizeof(double)), *k = malloc(R * Da * sizeof(double)), *v = malloc(R * Da * sizeof(double));
    double *O = calloc(R * Da, sizeof(double)), *On = calloc(R * Da, sizeof(double)), *lse = calloc((size_t)B * H * T, sizeof(double));
    double *bt = malloc((size_t)H * (2 * T - 1) * sizeof(double)), *kb = malloc((size_t)H * 7 * sizeof(double));
    double *xt = xpos ? malloc(((size_t)T + MEGA_MHATTN_BR) * (dh / 2) * sizeof(double)) : NULL;
    uint8_t *pm = calloc(R, 1);
    for (size_t i = 0; i < R * Da; i++) q[i] = tl_randn(&g_seed), k[i] = tl_randn(&g_seed), v[i] = tl_randn(&g_seed);
    for (size_t i = 0; i < (size_t)H * (2 * T - 1); i++) bt[i] = 0.5 * tl_randn(&g_seed);
    for (size_t i = 0; i < (size_t)H * 7; i++) kb[i] = 0.5 * tl_randn(&g_seed);
    for (int t = T - 20; t < T; t++) pm[T + t] = 1;
    if (xt) mega_xpos_table(xt, dh, -MEGA_MHATTN_BR, T);
    mega_mhattn_k kk;
    memset(&kk, 0, sizeof kk);
    kk.H = H, kk.dh = dh, kk.causal = causal, kk.window = window, kk.scale = 1 / sqrt((double)dh);
    kk.log_train = logn ? log(10.0) : 0;
    kk.btab = bt, kk.bc = T - 1, kk.bl = 2 * T - 1, kk.kbias = kb, kk.kbl = 7, kk.xtab = xt, kk.xoff = MEGA_MHATTN_BR;
    const int nt = mega_get_threads();
    double *scr = calloc(mega_mhattn_scratch(&kk, B, T, nt), sizeof(double));
    mega_mhattn_forward(&kk, O, lse, q, k, v, pad ? pm : NULL, B, T, scr, nt);
    naive_t nv = {H, dh, causal, window, T, B, kk.log_train, bt, kb, 7, xpos, pad ? pm : NULL};
    naive_attn(&nv, On, q, k, v, 0);
    double e = bt_rel_diff(O, On, R * Da);
    TL_CHECK(e < 1e-12, "kernel vs naive (T=%d %s window %d log-n %d xpos %d pad %d; distance table + key bias): rel %.2e", T,
             causal ? "causal" : "bidir", window, logn, xpos, pad, e);
    free(q), free(k), free(v), free(O), free(On), free(lse), free(bt), free(kb), free(xt), free(pm), free(scr);
}

/* ---------------------------------------------------------------------------------------------
 * ALiBi slopes (ofirpress/attention_with_linear_biases, fairseq/models/transformer.py: get_slopes) */
static void alibi_slopes(void) {
    static const int Hs[5] = {1, 6, 8, 12, 16};
    for (int k = 0; k < 5; k++) {
        const int H = Hs[k];
        double m[16], ref[16];
        mega_alibi_slopes(m, H);
        if (H == 12) {
            /* get_slopes(12): 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 */
            for (int h = 0; h < 8; h++) ref[h] = pow(2.0, -(h + 1));
            for (int h = 0; h < 4; h++) ref[8 + h] = pow(2.0, -(h + 0.5));
        } else if (H == 6) {
            /* P = 4: 2^-2, 2^-4, 2^-6, 2^-8; the 8-list is 2^-1 .. 2^-8, entries 0 and 2 */
            const double r6[6] = {0.25, 0.0625, 1.0 / 64, 1.0 / 256, 0.5, 0.125};
            memcpy(ref, r6, sizeof r6);
        } else {
            for (int h = 0; h < H; h++) ref[h] = pow(2.0, -8.0 * (h + 1) / H); /* powers of two */
        }
        double e = 0;
        for (int h = 0; h < H; h++) e = fmax(e, fabs(m[h] - ref[h]) / ref[h]);
        TL_CHECK(e < 1e-15, "ALiBi slopes H=%d match get_slopes (worst rel %.1e; first %.6g, last %.6g)", H, e, m[0],
                 m[H - 1]);
    }
    /* the table is -m_h |t - u| */
    double tab[2 * 9];
    memset(tab, 0, sizeof tab);
    mega_alibi_table(tab, 2, 4, 9); /* two heads, d in [-4, 4] */
    double m[2];
    mega_alibi_slopes(m, 2);
    int ok = 1;
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 9; i++) ok &= fabs(tab[h * 9 + i] + m[h] * abs(i - 4)) < 1e-15;
    TL_CHECK(ok, "ALiBi table = -m_h |t - u|");
}


static void kerple_zero(void) {
    /* only distance 0 carries a gradient: both parameters get exactly 0, never NaN */
    for (int power = 0; power <= 1; power++) {
        double bp[2] = {1.3, 0.7}, ba[2] = {0.4, 0.9}, dp[2] = {0, 0}, da[2] = {0, 0};
        double dtab[2 * 5] = {0};
        dtab[0 * 5 + 2] = 1.7, dtab[1 * 5 + 2] = -0.3; /* centre tc = 2 */
        mega_kerple_backward(power, dtab, 2, 2, 5, bp, ba, dp, da);
        TL_CHECK(dp[0] == 0 && dp[1] == 0 && da[0] == 0 && da[1] == 0,
                 "KERPLE-%s gradient at distance 0 is exactly 0 (got %g %g %g %g)", power ? "power" : "log", dp[0], dp[1],
                 da[0], da[1]);
        double tab[10] = {0};
        mega_kerple_table(power, tab, 2, 2, 5, bp, ba);
        TL_CHECK(tab[2] == 0 && tab[7] == 0, "KERPLE-%s bias at distance 0 is 0", power ? "power" : "log");
    }
    /* through a whole block with T = 1 (every pair at distance 0): the KERPLE gradients are 0 */
    for (int power = 0; power <= 1; power++) {
        const acfg a = {MHA, power ? PKP : PKL, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0};
        bt_ctx c;
        if (open_cfg(&c, &a, 1, 77)) continue;
        bt_backward(&c);
        const mega_pspec *sp = mega_params_find(&c.P, "mixer.kerple.bias_p");
        const mega_pspec *sa = mega_params_find(&c.P, "mixer.kerple.bias_a");
        int ok = sp && sa;
        for (int h = 0; ok && h < 2; h++) ok &= c.P.grad[sp->offset + h] == 0 && c.P.grad[sa->offset + h] == 0;
        TL_CHECK(ok, "KERPLE-%s block with T = 1: bias_p / bias_a gradients exactly 0 and finite", power ? "power" : "log");
        bt_close(&c);
    }
    /* the official forward clamps the parameter data in place: >= 0.01, power exponent <= 2 */
    const acfg a = {MHA, PKP, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0};
    bt_ctx c;
    if (open_cfg(&c, &a, 5, 78)) return;
    double *p = bt_param(&c.P, "kerple.bias_p"), *pa = bt_param(&c.P, "kerple.bias_a");
    p[0] = 3.0, p[1] = -1.0, pa[0] = 0.001;
    bt_forward(&c);
    TL_CHECK(p[0] == 2.0 && p[1] == 0.01 && pa[0] == 0.01,
             "KERPLE-power forward clamps bias_p to [0.01, 2] and bias_a to >= 0.01 in place (%g %g %g)", p[0], p[1], pa[0]);
    bt_close(&c);
}
static void xpos_long(void) {
    const int T = 100000, B = 1, H = 2, dh = 8, w = 16;
    const size_t Da = (size_t)H * dh, R = (size_t)B * T;
    double *q = malloc(R * Da * sizeof(double)), *k = malloc(R * Da * sizeof(double)), *v = malloc(R * Da * sizeof(double));
    double *O = calloc(R * Da, sizeof(double)), *lse = calloc((size_t)B * H * T, sizeof(double));
    double *xt = malloc(((size_t)T + MEGA_MHATTN_BR) * (dh / 2) * sizeof(double));
    for (size_t i = 0; i < R * Da; i++) q[i] = tl_randn(&g_seed), k[i] = tl_randn(&g_seed), v[i] = tl_randn(&g_seed);
    mega_xpos_table(xt, dh, -MEGA_MHATTN_BR, T);
    mega_mhattn_k kk;
    memset(&kk, 0, sizeof kk);
    kk.H = H, kk.dh = dh, kk.causal = 1, kk.window = w, kk.scale = 1 / sqrt((double)dh), kk.xtab = xt,
    kk.xoff = MEGA_MHATTN_BR;
    const int nt = mega_get_threads();
    double *scr = calloc(mega_mhattn_scratch(&kk, B, T, nt), sizeof(double));
    mega_mhattn_forward(&kk, O, lse, q, k, v, NULL, B, T, scr, nt);
    int finite = 1;
    for (size_t i = 0; i < R * Da; i++) finite &= isfinite(O[i]);
    /* un-centred reference (c0 = 0): q * zeta^(t/512), k * zeta^(-u/512). At u ~ 1e5 the key
     * factor is exp(0.002447 * 1e5) ~ 4e106: finite in double (it would overflow float at
     * u ~ 36k; XPOS, arXiv 2212.10554, torchscale xpos_relative_position.py), so here both forms exist and must agree to round-off */
    double worst = 0, kmax = 0;
    int rows = 0;
    for (int t = 0; t < T; t += 997, rows++) {
        const int tt = t + (rows % 7); /* vary the position inside the 64-row block */
        if (tt >= T) break;
        for (int h = 0; h < H; h++) {
            double s[16], mx = -INFINITY;
            const int lo = MEGA_MAX(0, tt - w + 1);
            for (int u = lo; u <= tt; u++) {
                double dot = 0;
                for (int i = 0; i < dh; i++) {
                    const double z = mega_xpos_zeta(i / 2, dh), fk = pow(z, -u / 512.0);
                    kmax = fmax(kmax, fk);
                    dot += pow(z, tt / 512.0) * q[(size_t)tt * Da + h * dh + i] * fk * k[(size_t)u * Da + h * dh + i];
                }
                s[u - lo] = dot / sqrt((double)dh);
                mx = fmax(mx, s[u - lo]);
            }
            double z = 0, o[8] = {0};
            for (int u = lo; u <= tt; u++) z += exp(s[u - lo] - mx);
            for (int u = lo; u <= tt; u++)
                for (int i = 0; i < dh; i++) o[i] += exp(s[u - lo] - mx) / z * v[(size_t)u * Da + h * dh + i];
            for (int i = 0; i < dh; i++) worst = fmax(worst, fabs(o[i] - O[(size_t)tt * Da + h * dh + i]));
        }
    }
    TL_CHECK(finite && worst < 1e-11 && kmax > 1e100,
             "XPOS at %d positions (window %d): re-centred kernel finite and equal to the un-centred formula on %d rows "
             "(max abs diff %.2e; largest un-centred key factor %.1e)",
             T, w, rows, worst, kmax);
    free(q), free(k), free(v), free(O), free(lse), free(xt), free(scr);
}


/* ---------------------------------------------------------------------------------------------
 * semantics */

/* eval-mode block output of a configuration (B = 2, right pads): the parameters from Wsrc when
 * given (the same layout), copied to Wcopy when given */
static int eval_out(const acfg *g, int T, uint64_t seed, double *out, double *Wcopy, const double *Wsrc) {
    bt_ctx c;
    if (open_cfg(&c, g, T, seed)) return -1;
    if (Wsrc) memcpy(c.P.data, Wsrc, c.P.total * sizeof(double));
    if (Wcopy) memcpy(Wcopy, c.P.data, c.P.total * sizeof(double));
    const mega_status st = bt_eval_forward(&c, out);
    bt_close(&c);
    return st == MEGA_OK ? 0 : -1;
}

/* local(window w) == mha(attn_window w); windows >= T and log-n with train_len >= T are identities */
static void windows(int bidir, int T, double *a, double *b, double *W) {
    const char *dir = bidir ? "bidir" : "causal";
    acfg l = {LOC, bidir ? PA : PR, bidir, 1, 3, 0, 1, LN, 16, 0, 2, 8, 0}, m = l;
    m.mixer = MHA;
    if (!eval_out(&l, T, 11, a, W, NULL) && !eval_out(&m, T, 11, b, NULL, W))
        TL_CHECK(!memcmp(a, b, 2 * T * 8 * sizeof(double)), "%s: local(window 3) == mha(attn-window 3) bitwise", dir);
    m.win = bidir ? T - 1 : T; /* a window covering the whole sequence changes nothing */
    eval_out(&m, T, 11, a, NULL, W);
    m.win = 0;
    eval_out(&m, T, 11, b, NULL, W);
    TL_CHECK(bt_rel_diff(a, b, 2 * T * 8) == 0, "%s: attn-window >= T is the identity", dir);
    m.logn = T; /* log-n with train_len >= T: max(1, log n / log L) = 1 */
    eval_out(&m, T, 11, a, NULL, W);
    TL_CHECK(bt_rel_diff(a, b, 2 * T * 8) == 0, "%s: log-n scaling with train_len >= T is the identity", dir);
    m.logn = 3;
    eval_out(&m, T, 11, a, NULL, W);
    TL_CHECK(bt_rel_diff(a, b, 2 * T * 8) > 1e-6, "%s: log-n scaling with train_len 3 < T changes the output", dir);
}

/* MHATW with log f_h(delta) = -m_h |delta| (ALiBi slopes), beta = gamma = 1 == mha + alibi */
static void mhatw_is_alibi(int bidir, int T) {
    const acfg t = {TW, PN, bidir, 1, 0, 0, 1, LN, 16, 0, 3, 6, 0};
    acfg m = t;
    m.mixer = MHA, m.pos = PA;
    bt_ctx cm, ct;
    if (open_cfg(&cm, &m, T, 12)) return;
    if (open_cfg(&ct, &t, T, 12)) {
        bt_close(&cm);
        return;
    }
    /* the shared tensors from the mha model, then the ALiBi time weights */
    for (int i = 0; i < cm.P.n; i++) {
        const mega_pspec *s = mega_params_find(&ct.P, cm.P.specs[i].name);
        if (s) memcpy(ct.P.data + s->offset, cm.P.data + cm.P.specs[i].offset, s->numel * sizeof(double));
    }
    double m3[3];
    mega_alibi_slopes(m3, 3);
    const mega_pspec *lw = mega_params_find(&ct.P, "mixer.time_logw"), *lb = mega_params_find(&ct.P, "mixer.time_logbeta"),
                     *gm = mega_params_find(&ct.P, "mixer.time_gamma");
    const int Lw = (int)lw->shape[1];
    for (int h = 0; h < 3; h++)
        for (int j = 0; j < Lw; j++) ct.P.data[lw->offset + (size_t)h * Lw + j] = -m3[h] * abs(T - 1 - j);
    for (size_t j = 0; j < lb->numel; j++) ct.P.data[lb->offset + j] = 0;
    for (size_t j = 0; j < gm->numel; j++) ct.P.data[gm->offset + j] = 1;
    bt_eval_forward(&cm, NULL), bt_eval_forward(&ct, NULL);
    const double e = bt_rel_diff(ct.out, cm.out, ct.RD);
    TL_CHECK(e < 1e-14, "%s: MHATW with f = exp(-m_h delta), beta = gamma = 1 equals mha + ALiBi (rel %.1e)",
             bidir ? "bidir" : "causal", e);
    bt_close(&cm), bt_close(&ct);
}

/* Sandwich: b(0) = 0, b(d) <= 0, the NeMo formula with i = 1..dbar/2 */
static void sandwich_table(void) {
    const int dbar = 8, Hh = 4, tc = 30, tl = 61;
    double *tab = calloc((size_t)Hh * tl, sizeof(double));
    mega_sandwich_table(tab, Hh, tc, tl, dbar);
    double e = 0;
    int ok = 1;
    for (int h = 0; h < Hh; h++)
        for (int i = 0; i < tl; i++) {
            const int d = abs(i - tc);
            double s = 0;
            for (int f = 1; f <= dbar / 2; f++) s += cos(d * pow(10000.0, -2.0 * f / dbar));
            const double ref = (s - dbar / 2) * Hh / (8.0 * (h + 1));
            e = fmax(e, fabs(tab[(size_t)h * tl + i] - ref));
            ok &= d ? tab[(size_t)h * tl + i] <= 0 : tab[(size_t)h * tl + i] == 0;
        }
    TL_CHECK(ok && e < 1e-13, "Sandwich table: NeMo formula (err %.1e), b(0) = 0, b <= 0 elsewhere", e);
    free(tab);
}

static void semantics(void) {
    const int T = 11;
    double *a = malloc(2 * T * 8 * sizeof(double)), *b = malloc(2 * T * 8 * sizeof(double));
    double *W = malloc(20000 * sizeof(double));
    for (int bidir = 0; bidir <= 1; bidir++) windows(bidir, T, a, b, W);
    for (int bidir = 0; bidir <= 1; bidir++) mhatw_is_alibi(bidir, T);
    sandwich_table();
    /* thread count: the same results with 1 thread */
    const acfg g1 = {TW, PKP, 1, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0};
    bt_ctx c;
    if (!open_cfg(&c, &g1, 150, 99)) {
        bt_threads_check(&c);
        bt_close(&c);
    }
    free(a), free(b), free(W);
}

/* the mixer defaults (mega_block_config_resolve), and invalid configurations rejected by
 * mega_block_config_check (through mega_block_declare) */
static void defaults_and_invalid(void) {
    const acfg base = {MHA, PN, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0};
    mega_block_config c, r;
    acfg a = base;
    a.mixer = LOC;
    fill_cfg(&c, &a, 9);
    mega_status st = bt_try_declare(&c, &r, NULL);
    TL_CHECK(st == MEGA_OK && r.window == 64, "local with window 0: the default window 64 (got %d)", r.window);
    a.mixer = TW;
    fill_cfg(&c, &a, 9);
    c.max_len = 0;
    st = bt_try_declare(&c, &r, NULL);
    TL_CHECK(st == MEGA_OK && r.max_len == 1024, "mhatw with max-len 0 and no training length: max-len 1024 (got %d)", r.max_len);
    c.train_len = 40;
    st = bt_try_declare(&c, &r, NULL);
    TL_CHECK(st == MEGA_OK && r.max_len == 40, "mhatw with max-len 0: max-len = the training length 40 (got %d)", r.max_len);
    a = base, a.H = 0, a.pos = PR, a.D = 12; /* 4 heads of width 3 could not rotate pairs */
    fill_cfg(&c, &a, 9);
    st = bt_try_declare(&c, &r, NULL);
    TL_CHECK(st == MEGA_OK && r.heads == 2, "mha with heads 0, rope, D 12: the default heads 2 (even head width; got %d)",
             r.heads);
    struct {
        acfg a;
        int field; /* 1: window -1, 2: max-len -1 */
        const char *what;
    } bad[] = {
        {{MHA, PX, 1, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0}, 0, "xpos bidirectional"},
        {{MHA, PN, 0, 0, 0, 0, 1, LN, 16, 0, 3, 8, 0}, 0, "embed-dim not divisible by heads"},
        {{MHA, PR, 0, 0, 0, 0, 1, LN, 16, 0, 8, 8, 0}, 0, "rope with an odd head width"},
        {{MHA, PX, 0, 0, 0, 0, 1, LN, 16, 0, 8, 8, 0}, 0, "xpos with an odd head width"},
        {{LOC, PN, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0}, 1, "local with a negative window"},
        {{TW, PN, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0}, 2, "mhatw with max-len -1"},
        {{MHA, PN, 0, 0, 0, 1, 1, LN, 16, 0, 2, 8, 0}, 0, "log-n with train_len 1"},
        {{MHA, PN, 0, 0, -1, 0, 1, LN, 16, 0, 2, 8, 0}, 0, "negative attn-window"},
        {{MHA, PN, 0, 0, 0, 0, 1, LN, 16, 0, -2, 8, 0}, 0, "negative heads"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fill_cfg(&c, &bad[i].a, 9);
        if (bad[i].field == 1) c.window = -1;
        if (bad[i].field == 2) c.max_len = -1;
        st = bt_try_declare(&c, NULL, NULL);
        TL_CHECK(st == MEGA_ERR_INVALID && strlen(mega_last_error()) > 10, "rejected: %s (\"%s\")", bad[i].what,
                 mega_last_error());
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int i = 0; i < NCFG; i++) run_fd(i);
    /* long: multi-block paths */
    static const acfg LONG[] = {
        {MHA, PX, 0, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0},  {MHA, PX, 0, 1, 40, 20, 1, LN, 16, 0, 2, 8, 0},
        {LOC, PKP, 1, 1, 30, 0, 0, LN, 16, 0, 2, 8, 0}, {TW, PR, 0, 1, 0, 50, 1, RN, 16, 0, 2, 8, 100},
        {TW, PS, 1, 1, 70, 0, 1, LN, 16, 1, 2, 8, 120}, {MHA, PKL, 1, 0, 0, 0, 1, LN, 16, 0, 4, 8, 0},
    };
    for (size_t i = 0; i < sizeof LONG / sizeof LONG[0]; i++) run_long(&LONG[i], 150);
    printf("NOTE worst FD error over %d configurations: %.2e (%s); worst directional %.2e (%s)\n", NCFG, g_fd_worst.v,
           g_fd_worst.where, g_dir_worst.v, g_dir_worst.where);
    for (int causal = 0; causal <= 1; causal++)
        for (int win = 0; win <= 1; win++) {
            kernel_vs_naive(causal, win ? 37 : 0, win, 0, 1, 150);
            if (causal) kernel_vs_naive(causal, win ? 37 : 0, !win, 1, win, 150);
        }
    alibi_slopes();
    kerple_zero();
    xpos_long();
    semantics();
    defaults_and_invalid();
    return tl_finish();
}
