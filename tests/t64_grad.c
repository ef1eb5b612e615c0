/*
 * Finite-difference gradient checks of the Mega mixer in double precision (libmega64).
 *
 * 1. The Mega block (gated-attention layer + normalized FFN; official
 *    moving_average_gated_attention.py: MovingAverageGatedAttention and
 *    normalized_feedforward_network.py: NormalizedFeedForwardNetwork), training mode, on tiny
 *    shapes (D=4, Z=4, E=5, N=2, F=6 or 0, B=2, T=7), through the shared driver bt_fd_check
 *    (tests/lib/blocktest.h): 40 configurations covering every attention function, bias kind,
 *    pre/post-norm, norm kind (batchnorm with batch statistics), causal / bidirectional,
 *    right-padding masks (with chunk 3 the chunk {6} is all pad in both sequences, the chunk
 *    {3,4,5} of sequence 1 partly), truncation (none, 3 < T, 10 > T), activation, chunk (3 =
 *    ragged last chunk, -1, 7 = T, 10 > T), with and without the FFN, with and without every
 *    dropout (p = 0.1, fixed key: the masks are a function of the key, so the loss is a
 *    deterministic smooth function), norm affine or not. Every element of dL/dx and of every
 *    trainable tensor (one check per tensor), plus three random directional derivatives over
 *    the whole parameter vector and one over x. relu2 attention (only C1, its scores are not
 *    observable here, so the step cannot be kept away from the kink) uses the two-point stencil
 *    with h = 1e-5, whose error at a kink is O(h); the others the fourth-order one (fd.h).
 *    relu activation: x is redrawn until every relu input is at least 2e-3 away from the kink.
 * 2. The EMA layer alone (mega_ema_layer_forward/backward; official
 *    exponential_moving_average.py: MultiHeadEMA): truncation K < T (also K = 1, K = T, K > T,
 *    K = the backward checkpoint interval), bidirectional, right and interior pads, decays q
 *    near 0 and near 1, several channel blocks and checkpoint segments; through the same
 *    finite-difference engine (fd.h).
 *
 * Error measure (fd.h): per tensor max |analytic - FD| / max(max |analytic|, max |FD|, 1e-3 x
 * the largest gradient of the configuration); directional: |<g,v> - FD| / (|g| |v|). Tolerance
 * 1e-6. Also per configuration: dropout is live and deterministic, and the forwards left every
 * tensor, batchnorm buffers included, unchanged.
 */
#include "blocktest.h"
#include "layers/ema.h"
#include "layers/mega_layer.h"
#include "ops/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long long g_seed = 0x6a4d5eedull;

/* ---------------------------------------------------------------------------------------------
 * 1. block */
enum { S_ = MEGA_ATTN_SOFTMAX, R_ = MEGA_ATTN_RELU2, L_ = MEGA_ATTN_LAPLACE };
enum { LN = MEGA_NORM_LAYER, SN = MEGA_NORM_SCALE, RN = MEGA_NORM_RMS, BN = MEGA_NORM_BATCH };
enum { SILU = MEGA_ACT_SILU, GELU = MEGA_ACT_GELU, RELU = MEGA_ACT_RELU };

typedef struct {
    int fn, rot, pre, norm, bidir, pad, trunc, act, chunk, F, drop, affine;
} gcfg;

/* fn rot pre norm bidir pad trunc act chunk F drop affine */
static const gcfg CFGS[] = {
    {S_, 0, 1, LN, 0, 0, 0, SILU, 3, 6, 0, 1},   {S_, 1, 0, SN, 1, 1, 3, GELU, 3, 0, 0, 1},
    {R_, 0, 0, RN, 1, 1, 0, SILU, -1, 6, 0, 1},  {L_, 1, 1, BN, 0, 1, 3, GELU, 7, 6, 0, 1},
    {S_, 0, 1, BN, 1, 1, 3, RELU, 10, 6, 0, 1},  {R_, 1, 1, LN, 0, 0, 3, RELU, 3, 0, 0, 1},
    {L_, 0, 0, LN, 1, 0, 0, GELU, -1, 0, 0, 1},  {S_, 1, 1, RN, 0, 1, 0, SILU, -1, 6, 0, 1},
    {R_, 0, 1, SN, 0, 1, 3, SILU, 10, 6, 0, 1},  {L_, 1, 0, RN, 1, 1, 3, SILU, 3, 6, 0, 1},
    {S_, 0, 0, BN, 0, 0, 3, GELU, 3, 6, 0, 1},   {R_, 1, 0, BN, 1, 0, 0, GELU, 7, 0, 0, 1},
    {L_, 0, 1, SN, 1, 1, 0, RELU, 3, 6, 0, 1},   {S_, 1, 1, LN, 1, 1, 10, SILU, 7, 6, 0, 1},
    {R_, 0, 1, LN, 1, 1, 3, GELU, 3, 6, 0, 1},   {L_, 1, 1, LN, 0, 1, 0, SILU, 10, 0, 0, 1},
    {S_, 0, 0, RN, 0, 1, 3, RELU, 7, 6, 0, 1},   {R_, 1, 0, SN, 0, 0, 0, SILU, -1, 6, 0, 1},
    {L_, 0, 1, BN, 0, 1, 3, SILU, -1, 6, 0, 1},  {S_, 1, 0, LN, 1, 1, 3, SILU, 10, 0, 0, 1},
    {R_, 0, 1, RN, 1, 0, 10, GELU, 3, 6, 0, 1},  {L_, 1, 0, SN, 0, 0, 3, GELU, -1, 6, 0, 1},
    {S_, 0, 1, SN, 0, 1, 0, GELU, 3, 0, 0, 1},   {R_, 1, 1, BN, 0, 1, 0, SILU, 3, 6, 0, 1},
    {L_, 0, 0, BN, 1, 1, 0, RELU, 7, 6, 0, 1},   {S_, 1, 0, RN, 1, 0, 3, RELU, -1, 6, 0, 1},
    {R_, 0, 0, LN, 0, 1, 3, SILU, 7, 0, 0, 1},   {L_, 1, 1, RN, 1, 1, 3, GELU, 10, 6, 0, 1},
    /* every dropout at 0.1 */
    {S_, 0, 1, LN, 1, 1, 3, SILU, 3, 6, 1, 1},   {R_, 1, 0, BN, 0, 1, 0, GELU, -1, 6, 1, 1},
    {L_, 0, 1, RN, 0, 0, 3, SILU, 3, 6, 1, 1},   {S_, 1, 0, SN, 1, 0, 0, GELU, 7, 6, 1, 1},
    {R_, 0, 1, SN, 1, 1, 3, SILU, 10, 0, 1, 1},  {L_, 0, 0, SN, 0, 1, 10, RELU, 3, 6, 1, 1},
    /* norm without affine parameters */
    {S_, 0, 1, LN, 0, 1, 3, SILU, 3, 6, 0, 0},   {R_, 1, 0, SN, 1, 1, 0, GELU, 3, 6, 0, 0},
    {L_, 0, 1, RN, 1, 0, 3, SILU, -1, 6, 0, 0},  {S_, 1, 0, BN, 0, 1, 3, SILU, 7, 6, 0, 0},
    {L_, 1, 1, BN, 1, 1, 3, GELU, 3, 6, 0, 0},   {R_, 0, 0, LN, 1, 1, 3, SILU, 3, 6, 0, 1},
};
#define NCFG ((int)(sizeof CFGS / sizeof CFGS[0]))

static void coverage(void) {
    /* every value of every option at least twice */
    int cnt[12][4];
    memset(cnt, 0, sizeof cnt);
    static const int chunks[] = {3, -1, 7, 10}, truncs[] = {0, 3, 10};
    for (int i = 0; i < NCFG; i++) {
        const gcfg *g = &CFGS[i];
        cnt[0][g->fn]++, cnt[1][g->rot]++, cnt[2][g->pre]++, cnt[3][g->norm]++, cnt[4][g->bidir]++, cnt[5][g->pad]++;
        for (int k = 0; k < 3; k++) cnt[6][k] += g->trunc == truncs[k];
        cnt[7][g->act]++;
        for (int k = 0; k < 4; k++) cnt[8][k] += g->chunk == chunks[k];
        cnt[9][g->F > 0]++, cnt[10][g->drop]++, cnt[11][g->affine]++;
    }
    static const int nval[12] = {3, 2, 2, 4, 2, 2, 3, 3, 4, 2, 2, 2};
    static const char *opt[12] = {"attn fn", "bias", "prenorm", "norm", "bidir", "pad", "trunc", "act", "chunk", "ffn", "dropout", "affine"};
    int ok = 1;
    for (int o = 0; o < 12; o++)
        for (int v = 0; v < nval[o]; v++)
            if (cnt[o][v] < 2) {
                ok = 0;
                printf("coverage: option %s value #%d used %d times\n", opt[o], v, cnt[o][v]);
            }
    /* a few combinations that matter: causal with pads, causal with truncation < T, bidirectional
     * with truncation, dropout with each attention function */
    int causal_pad = 0, causal_trunc = 0, bidir_trunc = 0, drop_fn[3] = {0, 0, 0};
    for (int i = 0; i < NCFG; i++) {
        const gcfg *g = &CFGS[i];
        causal_pad += !g->bidir && g->pad;
        causal_trunc += !g->bidir && g->trunc == 3;
        bidir_trunc += g->bidir && g->trunc == 3;
        drop_fn[g->fn] += g->drop;
    }
    ok &= causal_pad >= 2 && causal_trunc >= 2 && bidir_trunc >= 2 && drop_fn[0] && drop_fn[1] && drop_fn[2];
    TL_CHECK(ok && NCFG >= 40, "block FD configurations cover every option value at least twice (%d configs)", NCFG);
}

static void mega_cfg(mega_block_config *c, const gcfg *g) {
    mega_block_config_default(c);
    c->embed_dim = 4, c->z_dim = 4, c->hidden_dim = 5, c->n_dim = 2, c->ffn_dim = g->F;
    c->chunk_size = g->chunk, c->truncation = g->trunc, c->max_positions = 10;
    c->attention_activation = (mega_attn_fn)g->fn, c->rel_pos_bias = g->rot ? MEGA_RELPOS_ROTARY : MEGA_RELPOS_SIMPLE;
    c->bidirectional = g->bidir, c->prenorm = g->pre, c->norm_affine = g->affine;
    c->norm_type = (mega_norm_type)g->norm, c->activation = (mega_act)g->act;
    if (g->drop) c->dropout = c->attention_dropout = c->hidden_dropout = c->activation_dropout = 0.1f;
}

/* every relu input (v, h and the FFN's) at least 2e-3 away from the kink, so that the FD step
 * does not cross it */
static int relu_margin_ok(bt_ctx *c) {
    const mega_block_config *k = &c->cfg;
    const size_t R = (size_t)c->B * c->T;
    mega_mlayer_acts A;
    mega_mlayer_acts_view(mega_block_mixer(&c->bl), &A, c->A.mixer, c->B, c->T);
    double m = INFINITY;
    for (size_t i = 0; i < R * (size_t)k->hidden_dim; i++) m = fmin(m, fabs(A.vpre[i]));
    for (size_t i = 0; i < R * (size_t)k->embed_dim; i++) m = fmin(m, fabs(A.hpre[i]));
    for (size_t i = 0; k->ffn_dim > 0 && i < R * (size_t)k->ffn_dim; i++) m = fmin(m, fabs(c->A.ffn.fpre[i]));
    return m > 2e-3;
}

static bt_worst g_block_worst, g_block_dir, g_ema_worst, g_ema_dir;

static void run_block(int ci) {
    const gcfg *g = &CFGS[ci];
    mega_block_config cfg;
    mega_cfg(&cfg, g);
    bt_ctx c;
    const bt_opts o = {.B = 2, .T = 7, .pad = g->pad ? BT_PAD_RIGHT : BT_PAD_NONE, .seed = 1000 + (uint64_t)ci};
    if (bt_open(&c, &cfg, &o)) return;
    if (g->act == RELU) TL_CHECK(bt_redraw_x(&c, relu_margin_ok, 50), "%s: relu inputs away from the kink", c.name);
    const bt_fd_opts fo = {.two_point = g->fn == R_, .entries = 1, .directional = 1, .canary = ci == 0,
                           .worst = &g_block_worst, .worst_dir = &g_block_dir};
    bt_fd_check(&c, &fo);
    bt_close(&c);
}

/* ---------------------------------------------------------------------------------------------
 * 2. EMA layer alone */
typedef struct {
    int D, N, B, T, bidir, K, padmode, regime;
} ecfg;

typedef struct {
    mega_ema e;
    mega_params P;
    double *x, *Rw, *coef, *mpre, *m;
    const uint8_t *pm;
    const ecfg *c;
} ectx;

static double ema_loss(void *arg) {
    ectx *g = arg;
    const size_t RD = (size_t)g->c->B * g->c->T * g->c->D;
    mega_ema_layer_forward(&g->e, g->P.data, g->coef, g->mpre, g->m, g->x, g->pm, g->c->B, g->c->T, mega_get_threads());
    double s = 0;
    for (size_t i = 0; i < RD; i++) s += g->m[i] * g->Rw[i];
    return s;
}

/* decay regimes: 0 moderate, 1 q near 1 (p*a ~ 1e-6), 2 q near 0 (p*a ~ 0.995), 3 mixed */
static void ema_params(const mega_ema *e, double *W, int regime) {
    const int Dp = (e->bidir ? 2 : 1) * e->D, N = e->N;
    for (int r = 0; r < Dp; r++)
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)r * N + n;
            const int rg = regime == 3 ? (r + 2 * n) % 3 : regime;
            const double base = rg == 0 ? 0 : rg == 1 ? -7 : 7, sd = rg == 0 ? 1.0 : 0.3;
            W[e->delta + i] = base + sd * tl_randn(&g_seed);
            W[e->alpha + i] = base + sd * tl_randn(&g_seed);
            W[e->beta + i] = ((n % 2) ? -1 : 1) + 0.05 * tl_randn(&g_seed);
            W[e->gamma + i] = tl_randn(&g_seed);
        }
    for (int d = 0; d < e->D; d++) W[e->omega + d] = tl_randn(&g_seed);
}

static void run_ema(const ecfg *c) {
    char name[160];
    snprintf(name, sizeof name, "EMA D=%d N=%d B=%d T=%d %s K=%d pads=%d q-regime=%d", c->D, c->N, c->B, c->T,
             c->bidir ? "bidir" : "causal", c->K, c->padmode, c->regime);
    ectx g;
    memset(&g, 0, sizeof g);
    g.c = c;
    mega_params_init(&g.P);
    if (mega_ema_declare(&g.e, &g.P, "move.", c->D, c->N, c->bidir, c->K) || mega_params_alloc(&g.P, 1)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        mega_params_free(&g.P);
        return;
    }
    double *W = g.P.data;
    ema_params(&g.e, W, c->regime);
    const size_t R = (size_t)c->B * c->T, RD = R * c->D;
    const int nt = mega_get_threads();
    g.x = malloc(RD * sizeof(double)), g.Rw = malloc(RD * sizeof(double));
    g.mpre = malloc(RD * sizeof(double)), g.m = malloc(RD * sizeof(double));
    g.coef = calloc(mega_ema_coef_size(&g.e), sizeof(double));
    double *dx = calloc(RD, sizeof(double)), *gg = malloc(RD * sizeof(double));
    double *scr = calloc(mega_ema_layer_scratch(&g.e, c->T, nt), sizeof(double));
    uint8_t *pad = calloc(R, 1);
    for (size_t i = 0; i < RD; i++) g.x[i] = tl_randn(&g_seed), g.Rw[i] = tl_randn(&g_seed);
    if (c->padmode == 1) bt_fill_pad(pad, BT_PAD_RIGHT, c->B, c->T);
    if (c->padmode == 2) /* interior pads anywhere */
        for (size_t i = 0; i < R; i++) pad[i] = tl_rand01(&g_seed) < 0.25;
    g.pm = c->padmode ? pad : NULL;

    /* the layer's backward takes dL/dmpre: the silu of m = silu(mpre) is applied here */
    ema_loss(&g);
    for (size_t i = 0; i < RD; i++) gg[i] = g.Rw[i] * mega_silu_grad(g.mpre[i]);
    mega_params_zero_grad(&g.P);
    mega_ema_layer_backward(&g.e, W, g.P.grad, g.coef, dx, gg, g.x, g.pm, c->B, c->T, scr, nt);
    double gmax = 0;
    for (size_t i = 0; i < RD; i++) gmax = fmax(gmax, fabs(dx[i]));
    for (size_t i = 0; i < g.P.total; i++) gmax = fmax(gmax, fabs(g.P.grad[i]));
    /* x: every element when small, else 400 random elements (and a directional derivative) */
    fd_opts f = {ema_loss, &g, 0, 0, 600, 400, g_seed};
    for (int i = 0; i < g.P.n; i++) {
        const mega_pspec *s = &g.P.specs[i];
        const double e = fd_tensor_err(&f, W + s->offset, g.P.grad + s->offset, s->numel, 1e-3 * gmax);
        TL_CHECK(e < BT_FD_TOL && gmax > 0, "%s: %s: rel err %.2e", name, s->name, e);
        bt_note(&g_ema_worst, e, "%s: %s", name, s->name);
    }
    const double ex = fd_tensor_err(&f, g.x, dx, RD, 1e-3 * gmax);
    TL_CHECK(ex < BT_FD_TOL, "%s: x: rel err %.2e", name, ex);
    bt_note(&g_ema_worst, ex, "%s: x", name);
    /* directional derivatives over all parameters and over all of x */
    const double dw = fmax(fd_directional(&f, W, g.P.grad, g.P.total, NULL), fd_directional(&f, g.x, dx, RD, NULL));
    bt_note(&g_ema_dir, dw, "%s", name);
    TL_CHECK(dw < BT_FD_TOL, "%s: directional derivatives: %.2e", name, dw);
    free(g.x), free(g.Rw), free(g.mpre), free(g.m), free(g.coef), free(dx), free(gg), free(scr), free(pad);
    mega_params_free(&g.P);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    clock_t t0 = clock();
    coverage();
    for (int i = 0; i < NCFG; i++) run_block(i);
    /* D N B T bidir K pads regime */
    static const ecfg E[] = {
        {3, 2, 2, 9, 0, 0, 0, 0},    {3, 2, 2, 9, 1, 4, 1, 0},     {3, 2, 2, 9, 0, 4, 2, 1},
        {3, 2, 2, 9, 1, 0, 2, 2},    {3, 2, 2, 9, 0, 20, 1, 3},    {3, 2, 2, 9, 1, 9, 0, 1},
        {3, 2, 2, 9, 0, 1, 1, 2},    {3, 2, 2, 9, 1, 1, 2, 3},     {3, 2, 2, 9, 0, 3, 0, 2},
        {3, 2, 2, 9, 1, 3, 1, 1},    {35, 3, 2, 150, 0, 40, 1, 3}, {35, 3, 2, 150, 1, 0, 2, 3},
        {4, 1, 2, 65, 0, 64, 0, 0},  {4, 2, 2, 130, 1, 64, 1, 1},  {5, 2, 1, 70, 0, 0, 2, 2},
        {33, 2, 1, 20, 1, 7, 2, 0},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) run_ema(&E[i]);
    printf("NOTE t64_grad: block worst per-tensor FD rel err %.2e (%s)\n", g_block_worst.v, g_block_worst.where);
    printf("NOTE t64_grad: block worst directional FD rel err %.2e (%s)\n", g_block_dir.v, g_block_dir.where);
    printf("NOTE t64_grad: EMA worst per-tensor FD rel err %.2e (%s)\n", g_ema_worst.v, g_ema_worst.where);
    printf("NOTE t64_grad: EMA worst directional FD rel err %.2e (%s)\n", g_ema_dir.v, g_ema_dir.where);
    printf("NOTE t64_grad: %.1f s CPU\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
    return tl_finish();
}
