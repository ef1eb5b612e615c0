/*
 * Finite-difference gradient checks in double precision (libmega64).
 *
 * 1. The Mega block (gated-attention layer + normalized FFN), training mode, on tiny shapes
 *    (D=4, Z=4, E=5, N=2, F=6 or 0, B=2, T=7): 40 configurations covering every attention
 *    function, bias kind, pre/post-norm, norm kind (batchnorm with batch statistics), causal /
 *    bidirectional, right-padding masks (including chunks made only of pads), truncation
 *    (none, 3 < T, 10 > T), activation, chunk (3 = ragged last chunk, -1, 7 = T, 10 > T), with
 *    and without the FFN, with and without every dropout (p = 0.1, fixed key: the masks are a
 *    function of the key, so the loss is a deterministic smooth function), norm affine or not.
 *    Loss = sum(out * R) for a fixed random R. Checked: dL/dx (every element) and dL/dW for
 *    every element of every trainable tensor (central differences, see H below), plus three
 *    random directional derivatives over the whole parameter vector and one over x.
 *    Parameters: mega_block_init, then moved away from their trivial initial values with the
 *    same rules as tests/ref/gen_fixtures.py perturb() (noise on every tensor, zero biases and
 *    unit norm weights included; batchnorm running statistics too, although training mode
 *    does not use them).
 * 2. The EMA layer alone (mega_ema_layer_forward/backward = mega_ema_forward/backward +
 *    mega_ema_coef_backward): truncation K < T (also K = 1, K = T, K > T, K = the backward
 *    checkpoint interval), bidirectional, right and interior pads, decays q near 0 and near 1,
 *    several channel blocks and several checkpoint segments.
 *
 * Error measure: per tensor, max |analytic - FD| / max(max |analytic|, max |FD|, 1e-3 x the
 * largest gradient of the configuration); directional: |<g,v> - FD| / (|g| |v|). Tolerance 1e-6.
 * Also checked per configuration: dropout is live (another key changes the loss) and
 * deterministic, and the forwards left every tensor, batchnorm buffers included, unchanged.
 * relu activation: x is redrawn until every relu input is at least 2e-3 away from the kink.
 */
#include "layers/block.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOL 1e-6
/* Central differences. Smooth configurations use the fourth-order stencil
 *   (8 (L(w+h) - L(w-h)) - (L(w+2h) - L(w-2h))) / 12h,  h = 1e-4
 * (truncation O(h^4) negligible; rounding ten times below that of the two-point formula with
 * h = 1e-5). Configurations with relu2 attention (f = max(s,0)^2 is only C1 and its scores are
 * not observable here, so the step cannot be kept away from the kink) use the two-point formula
 * with h = 1e-5, whose error at a kink is bounded by O(h). */
static double H = 1e-4;
static int g_four = 1;
static const int KS[4] = {-2, -1, 1, 2};
static double fd_combine(const double L[4]) {
    return g_four ? (8 * (L[2] - L[1]) - (L[3] - L[0])) / (12 * H) : (L[2] - L[1]) / (2 * H);
}
static void set_stencil(int four) {
    g_four = four;
    H = four ? 1e-4 : 1e-5;
}

static unsigned long long g_seed = 0x6a4d5eedull;

/* ---------------------------------------------------------------------------------------------
 * parameter perturbation (the rules of tests/ref/gen_fixtures.py perturb()) */
static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}
static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        double *w = P->data + s->offset;
        const char *nm = s->name, *leaf = strrchr(nm, '.') ? strrchr(nm, '.') + 1 : nm;
        size_t n = s->numel;
#define FILL(expr)                                                                            \
    for (size_t j = 0; j < n; j++) w[j] = (expr)
        if (strstr(nm, ".move.")) {
            if (!strcmp(leaf, "delta") || !strcmp(leaf, "alpha")) FILL(tl_randn(seed));
            else if (!strcmp(leaf, "beta")) FILL(w[j] + 0.05 * tl_randn(seed));
        } else if (strstr(nm, "norm.norm.")) {
            if (!strcmp(leaf, "weight")) FILL(1 + 0.2 * tl_randn(seed));
            else if (!strcmp(leaf, "bias")) FILL(0.1 * tl_randn(seed));
            else if (!strcmp(leaf, "scalar")) FILL(1 + 0.15 * tl_randn(seed));
            else if (!strcmp(leaf, "running_mean")) FILL(0.2 * tl_randn(seed));
            else if (!strcmp(leaf, "running_var")) FILL(0.5 + tl_rand01(seed));
            else if (!strcmp(leaf, "num_batches_tracked")) FILL(5);
        } else if (strstr(nm, "rel_pos_bias.")) {
            FILL(0.3 * tl_randn(seed));
        } else if (ends_with(nm, "mega_layer.gamma")) {
            FILL(tl_randn(seed));
        } else if (ends_with(nm, "mega_layer.beta")) {
            FILL(0.3 * tl_randn(seed));
        } else if (!strcmp(leaf, "weight") && s->ndim == 2) {
            double sd = 1.0 / sqrt((double)s->shape[1]);
            FILL(sd * tl_randn(seed));
        } else if (!strcmp(leaf, "bias")) {
            FILL(0.1 * tl_randn(seed));
        } else {
            TL_CHECK(0, "perturb: no rule for %s", nm);
        }
#undef FILL
    }
}

/* ---------------------------------------------------------------------------------------------
 * comparison helpers */
typedef struct {
    double worst;
    char where[400];
} worst_t;
static void note(worst_t *w, double e, const char *fmt, const char *a, const char *b) {
    if (!(e <= w->worst)) {
        w->worst = e;
        snprintf(w->where, sizeof w->where, fmt, a, b);
    }
}
/* base = save + s * v */
static void shift(double *base, const double *save, const double *v, size_t n, double s) {
    for (size_t i = 0; i < n; i++) base[i] = save[i] + s * v[i];
}
static double tensor_err(const double *g, const double *fd, size_t n, double floor_) {
    double d = 0, m = floor_;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(g[i] - fd[i]);
        if (!(e <= d)) d = e;
        m = fmax(m, fmax(fabs(g[i]), fabs(fd[i])));
    }
    return m > 0 ? d / m : d;
}

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

static void cfg_name(const gcfg *g, char *buf, size_t n) {
    static const char *nn[] = {"LN", "SN", "RN", "BN"}, *an[] = {"silu", "gelu", "relu"};
    snprintf(buf, n, "%s/%s/%s/%s%s/%s/pad%d/trunc%d/%s/chunk%d/F%d%s", mega_attn_fn_name((mega_attn_fn)g->fn),
             g->rot ? "rotary" : "simple", g->pre ? "pre" : "post", nn[g->norm], g->affine ? "" : "-noaffine",
             g->bidir ? "bidir" : "causal", g->pad, g->trunc, an[g->act], g->chunk, g->F, g->drop ? "/dropout" : "");
}

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

typedef struct {
    mega_block bl;
    mega_params P;
    mega_block_acts A;
    double *acts, *scr, *x, *Rw, *out, *dx;
    uint8_t *pad;
    const uint8_t *pm;
    int B, T;
    mega_run run;
    size_t RD;
} gctx;

static double block_loss(gctx *g) {
    mega_status st = mega_block_forward(&g->bl, g->P.data, &g->A, g->out, g->x, g->pm, g->B, g->T, &g->run, g->scr);
    if (st != MEGA_OK) return NAN;
    double s = 0;
    for (size_t i = 0; i < g->RD; i++) s += g->out[i] * g->Rw[i];
    return s;
}
static double fd_at(gctx *g, double *p) {
    const double v = *p;
    double L[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        if (!g_four && (KS[i] == 2 || KS[i] == -2)) continue;
        *p = v + KS[i] * H;
        L[i] = block_loss(g);
    }
    *p = v;
    return fd_combine(L);
}

/* smallest |pre-activation| of the relu sites (the FD step must not cross a kink) */
static double relu_margin(const gctx *g) {
    const mega_block_cfg *c = &g->bl.cfg;
    const size_t R = (size_t)g->B * g->T;
    double m = INFINITY;
    for (size_t i = 0; i < R * (size_t)c->E; i++) m = fmin(m, fabs(g->A.ml.vpre[i]));
    for (size_t i = 0; i < R * (size_t)c->D; i++) m = fmin(m, fabs(g->A.ml.hpre[i]));
    if (c->F > 0)
        for (size_t i = 0; i < R * (size_t)c->F; i++) m = fmin(m, fabs(g->A.ffn.fpre[i]));
    return m;
}

static worst_t g_block_worst, g_block_dir, g_ema_worst, g_ema_dir;

static void run_block(int ci) {
    const gcfg *gc = &CFGS[ci];
    char name[160];
    cfg_name(gc, name, sizeof name);
    mega_block_cfg c;
    memset(&c, 0, sizeof c);
    c.D = 4, c.Z = 4, c.E = 5, c.N = 2, c.F = gc->F;
    c.chunk = gc->chunk, c.trunc = gc->trunc, c.max_positions = 10;
    c.attn_fn = (mega_attn_fn)gc->fn, c.rotary = gc->rot, c.bidir = gc->bidir, c.prenorm = gc->pre;
    c.norm_affine = gc->affine, c.norm = (mega_norm_type)gc->norm, c.act = (mega_act)gc->act;
    if (gc->drop) c.dropout = c.attn_dropout = c.hidden_dropout = c.act_dropout = 0.1;

    gctx g;
    memset(&g, 0, sizeof g);
    g.B = 2, g.T = 7;
    set_stencil(gc->fn != R_);
    const int nt = mega_get_threads();
    g.run = (mega_run){1, 0, 0x1234567890abcdefull + (uint64_t)ci, nt};
    mega_params_init(&g.P);
    if (mega_block_declare(&g.bl, &g.P, "", &c) || mega_params_alloc(&g.P, 1)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        mega_params_free(&g.P);
        return;
    }
    mega_rng rng;
    mega_rng_seed(&rng, 1000 + (uint64_t)ci);
    mega_block_init(&g.bl, g.P.data, &rng);
    perturb(&g.P, &g_seed);
    g.RD = (size_t)g.B * g.T * c.D;
    g.acts = calloc(mega_block_acts_size(&g.bl, g.B, g.T), sizeof(double));
    g.scr = calloc(mega_block_scratch_size(&g.bl, g.B, g.T, nt), sizeof(double));
    mega_block_acts_point(&g.bl, &g.A, g.acts, g.B, g.T);
    g.x = calloc(g.RD, sizeof(double)), g.Rw = calloc(g.RD, sizeof(double));
    g.out = calloc(g.RD, sizeof(double)), g.dx = calloc(g.RD, sizeof(double));
    g.pad = calloc((size_t)g.B * g.T, 1);
    /* right padding: sequence 0 has one pad, sequence 1 three (chunk 3: the chunk {6} is
     * all pad in both, the chunk {3,4,5} of sequence 1 partly) */
    if (gc->pad) {
        g.pad[6] = 1;
        for (int t = 4; t < 7; t++) g.pad[7 + t] = 1;
        g.pm = g.pad;
    }
    for (size_t i = 0; i < g.RD; i++) g.Rw[i] = tl_randn(&g_seed);
    double L0 = NAN;
    for (int tries = 0; tries < 50; tries++) {
        for (size_t i = 0; i < g.RD; i++) g.x[i] = tl_randn(&g_seed);
        L0 = block_loss(&g);
        if (gc->act != RELU || relu_margin(&g) > 2e-3) break;
    }
    TL_CHECK(isfinite(L0), "%s: forward runs (%s)", name, mega_last_error());
    if (!isfinite(L0)) goto done;
    if (gc->act == RELU) TL_CHECK(relu_margin(&g) > 2e-3, "%s: relu inputs away from the kink", name);

    double *w_start = malloc(g.P.total * sizeof(double));
    memcpy(w_start, g.P.data, g.P.total * sizeof(double));
    if (gc->drop) {
        /* the dropout masks are live: another key changes the loss */
        uint64_t k0 = g.run.key;
        g.run.key = k0 ^ 0x55;
        double L1 = block_loss(&g);
        g.run.key = k0;
        TL_CHECK(fabs(L1 - L0) > 1e-6 * fabs(L0) && block_loss(&g) == L0,
                 "%s: dropout active and deterministic for a fixed key (L %.6f, other key %.6f)", name, L0, L1);
    }
    /* analytic gradient */
    mega_params_zero_grad(&g.P);
    mega_block_forward(&g.bl, g.P.data, &g.A, g.out, g.x, g.pm, g.B, g.T, &g.run, g.scr);
    mega_block_backward(&g.bl, g.P.data, g.P.grad, &g.A, g.dx, g.Rw, g.x, g.pm, g.B, g.T, &g.run, g.scr);
    double gmax = 0;
    for (size_t i = 0; i < g.RD; i++) gmax = fmax(gmax, fabs(g.dx[i]));
    for (int i = 0; i < g.P.n; i++)
        if (!(g.P.specs[i].flags & MEGA_P_BUFFER))
            for (size_t j = 0; j < g.P.specs[i].numel; j++) gmax = fmax(gmax, fabs(g.P.grad[g.P.specs[i].offset + j]));
    const double floor_ = 1e-3 * gmax;

    double cworst = 0;
    char cwhere[160] = "";
    /* d/dx, every element */
    double *fd = calloc(g.RD, sizeof(double));
    for (size_t i = 0; i < g.RD; i++) fd[i] = fd_at(&g, &g.x[i]);
    double e = tensor_err(g.dx, fd, g.RD, floor_);
    if (e > cworst) cworst = e, snprintf(cwhere, sizeof cwhere, "x");
    note(&g_block_worst, e, "%s: %s", name, "x");
    if (ci == 0) {
        /* canary: the comparison flags a gradient wrong by 1e-5 of the largest one */
        g.dx[5] += 1e-5 * gmax;
        TL_CHECK(tensor_err(g.dx, fd, g.RD, floor_) > 5 * TOL, "canary: a gradient off by 1e-5 is flagged");
        g.dx[5] -= 1e-5 * gmax;
    }
    free(fd);
    /* d/dW, every element of every trainable tensor */
    int ntensors = 0;
    size_t nelem = 0;
    for (int i = 0; i < g.P.n; i++) {
        const mega_pspec *s = &g.P.specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        double *fw = calloc(s->numel, sizeof(double));
        for (size_t j = 0; j < s->numel; j++) fw[j] = fd_at(&g, &g.P.data[s->offset + j]);
        e = tensor_err(g.P.grad + s->offset, fw, s->numel, floor_);
        if (e > cworst) cworst = e, snprintf(cwhere, sizeof cwhere, "%s", s->name);
        note(&g_block_worst, e, "%s: %s", name, s->name);
        ntensors++, nelem += s->numel;
        free(fw);
    }
    TL_CHECK(cworst < TOL && gmax > 0, "block FD %s: %d tensors (%zu elements) + x: worst rel err %.2e (%s)", name,
             ntensors, nelem, cworst, cwhere);

    /* random directional derivatives: over all trainable parameters (3), over x (1) */
    {
        double *v = calloc(g.P.total, sizeof(double));
        double dworst = 0;
        for (int rep = 0; rep < 4; rep++) {
            int onx = rep == 3;
            size_t n = onx ? g.RD : g.P.total;
            double *base = onx ? g.x : g.P.data, *grad = onx ? g.dx : g.P.grad;
            double nv = 0, ng = 0, dot = 0;
            for (size_t i = 0; i < n; i++) v[i] = 0;
            if (onx) {
                for (size_t i = 0; i < n; i++) v[i] = tl_randn(&g_seed);
            } else {
                for (int t = 0; t < g.P.n; t++)
                    if (!(g.P.specs[t].flags & MEGA_P_BUFFER))
                        for (size_t j = 0; j < g.P.specs[t].numel; j++) v[g.P.specs[t].offset + j] = tl_randn(&g_seed);
            }
            for (size_t i = 0; i < n; i++) nv += v[i] * v[i], ng += grad[i] * grad[i] * (v[i] != 0), dot += grad[i] * v[i];
            nv = sqrt(nv), ng = sqrt(ng);
            double *save = malloc(n * sizeof(double));
            memcpy(save, base, n * sizeof(double));
            double Ls[4] = {0, 0, 0, 0};
            for (int i = 0; i < 4; i++) {
                if (!g_four && (KS[i] == 2 || KS[i] == -2)) continue;
                shift(base, save, v, n, KS[i] * H / nv);
                Ls[i] = block_loss(&g);
            }
            double fdd = fd_combine(Ls);
            memcpy(base, save, n * sizeof(double));
            free(save);
            double ed = fabs(fdd - dot / nv) / fmax(ng, 1e-300);
            dworst = fmax(dworst, ed);
        }
        note(&g_block_dir, dworst, "%s%s", name, "");
        TL_CHECK(dworst < TOL, "block FD %s: directional derivatives (3 over W, 1 over x): worst %.2e", name, dworst);
        free(v);
    }
    {
        /* update_stats = 0: the many forwards left every tensor (batchnorm buffers included)
         * exactly as they were */
        TL_CHECK(!memcmp(w_start, g.P.data, g.P.total * sizeof(double)), "%s: parameters and buffers unchanged", name);
    }
    free(w_start);
done:
    free(g.acts), free(g.scr), free(g.x), free(g.Rw), free(g.out), free(g.dx), free(g.pad);
    mega_params_free(&g.P);
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

static double ema_loss(ectx *g) {
    const size_t RD = (size_t)g->c->B * g->c->T * g->c->D;
    mega_ema_layer_forward(&g->e, g->P.data, g->coef, g->mpre, g->m, g->x, g->pm, g->c->B, g->c->T, mega_get_threads());
    double s = 0;
    for (size_t i = 0; i < RD; i++) s += g->m[i] * g->Rw[i];
    return s;
}
static double ema_fd_at(ectx *g, double *p) {
    const double v = *p;
    double L[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        if (!g_four && (KS[i] == 2 || KS[i] == -2)) continue;
        *p = v + KS[i] * H;
        L[i] = ema_loss(g);
    }
    *p = v;
    return fd_combine(L);
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
        return;
    }
    double *W = g.P.data;
    const mega_ema *e = &g.e;
    const int Dp = (c->bidir ? 2 : 1) * c->D, N = c->N;
    /* decay regimes: 0 moderate, 1 q near 1 (p*a ~ 1e-6), 2 q near 0 (p*a ~ 0.995), 3 mixed */
    for (int r = 0; r < Dp; r++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)r * N + n;
            int rg = c->regime == 3 ? (r + 2 * n) % 3 : c->regime;
            double base = rg == 0 ? 0 : rg == 1 ? -7 : 7, sd = rg == 0 ? 1.0 : 0.3;
            W[e->delta + i] = base + sd * tl_randn(&g_seed);
            W[e->alpha + i] = base + sd * tl_randn(&g_seed);
            W[e->beta + i] = ((n % 2) ? -1 : 1) + 0.05 * tl_randn(&g_seed);
            W[e->gamma + i] = tl_randn(&g_seed);
        }
    for (int d = 0; d < c->D; d++) W[e->omega + d] = tl_randn(&g_seed);
    const size_t R = (size_t)c->B * c->T, RD = R * c->D;
    const int nt = mega_get_threads();
    g.x = malloc(RD * sizeof(double)), g.Rw = malloc(RD * sizeof(double));
    g.mpre = malloc(RD * sizeof(double)), g.m = malloc(RD * sizeof(double));
    g.coef = calloc(mega_ema_coef_size(e), sizeof(double));
    double *dx = calloc(RD, sizeof(double)), *gg = malloc(RD * sizeof(double));
    double *scr = calloc(mega_ema_layer_scratch(e, c->T, nt), sizeof(double));
    uint8_t *pad = calloc(R, 1);
    for (size_t i = 0; i < RD; i++) g.x[i] = tl_randn(&g_seed), g.Rw[i] = tl_randn(&g_seed);
    if (c->padmode == 1)
        for (int b = 0; b < c->B; b++)
            for (int t = c->T - 1 - 3 * b; t < c->T; t++) pad[(size_t)b * c->T + t] = 1;
    if (c->padmode == 2)
        for (size_t i = 0; i < R; i++) pad[i] = tl_rand01(&g_seed) < 0.25;
    g.pm = c->padmode ? pad : NULL;

    ema_loss(&g);
    for (size_t i = 0; i < RD; i++) gg[i] = g.Rw[i] * mega_silu_grad(g.mpre[i]);
    mega_params_zero_grad(&g.P);
    mega_ema_layer_backward(e, W, g.P.grad, g.coef, dx, gg, g.x, g.pm, c->B, c->T, scr, nt);
    double gmax = 0;
    for (size_t i = 0; i < RD; i++) gmax = fmax(gmax, fabs(dx[i]));
    for (size_t i = 0; i < g.P.total; i++) gmax = fmax(gmax, fabs(g.P.grad[i]));
    const double floor_ = 1e-3 * gmax;
    double cworst = 0;
    char cwhere[160] = "";
    for (int i = 0; i < g.P.n; i++) {
        const mega_pspec *s = &g.P.specs[i];
        double *fw = calloc(s->numel, sizeof(double));
        for (size_t j = 0; j < s->numel; j++) fw[j] = ema_fd_at(&g, &W[s->offset + j]);
        double er = tensor_err(g.P.grad + s->offset, fw, s->numel, floor_);
        if (er > cworst) cworst = er, snprintf(cwhere, sizeof cwhere, "%s", s->name);
        note(&g_ema_worst, er, "%s: %s", name, s->name);
        free(fw);
    }
    /* x: every element when small, else 400 random elements (plus a directional derivative) */
    {
        size_t nchk = RD <= 600 ? RD : 400;
        double *fx = malloc(nchk * sizeof(double)), *gx = malloc(nchk * sizeof(double));
        for (size_t k = 0; k < nchk; k++) {
            size_t i = RD <= 600 ? k : (size_t)(tl_rand01(&g_seed) * (double)RD);
            fx[k] = ema_fd_at(&g, &g.x[i]);
            gx[k] = dx[i];
        }
        double er = tensor_err(gx, fx, nchk, floor_);
        if (er > cworst) cworst = er, snprintf(cwhere, sizeof cwhere, "x");
        note(&g_ema_worst, er, "%s: %s", name, "x");
        free(fx), free(gx);
    }
    TL_CHECK(cworst < TOL && gmax > 0, "%s: worst rel err %.2e (%s)", name, cworst, cwhere);
    /* directional derivatives over all parameters and over all of x */
    {
        double dworst = 0;
        for (int rep = 0; rep < 2; rep++) {
            size_t n = rep ? RD : g.P.total;
            double *base = rep ? g.x : W, *grad = rep ? dx : g.P.grad;
            double *v = malloc(n * sizeof(double)), *save = malloc(n * sizeof(double));
            double nv = 0, ng = 0, dot = 0;
            for (size_t i = 0; i < n; i++) v[i] = tl_randn(&g_seed);
            for (size_t i = 0; i < n; i++) nv += v[i] * v[i], ng += grad[i] * grad[i], dot += grad[i] * v[i];
            nv = sqrt(nv), ng = sqrt(ng);
            memcpy(save, base, n * sizeof(double));
            double Ls[4] = {0, 0, 0, 0};
            for (int i = 0; i < 4; i++) {
                if (!g_four && (KS[i] == 2 || KS[i] == -2)) continue;
                shift(base, save, v, n, KS[i] * H / nv);
                Ls[i] = ema_loss(&g);
            }
            double fdd = fd_combine(Ls);
            memcpy(base, save, n * sizeof(double));
            dworst = fmax(dworst, fabs(fdd - dot / nv) / ng);
            free(v), free(save);
        }
        note(&g_ema_dir, dworst, "%s%s", name, "");
        TL_CHECK(dworst < TOL, "%s: directional derivatives: %.2e", name, dworst);
    }
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
    set_stencil(1);
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) run_ema(&E[i]);
    printf("NOTE t64_grad: block worst per-tensor FD rel err %.2e (%s)\n", g_block_worst.worst, g_block_worst.where);
    printf("NOTE t64_grad: block worst directional FD rel err %.2e (%s)\n", g_block_dir.worst, g_block_dir.where);
    printf("NOTE t64_grad: EMA worst per-tensor FD rel err %.2e (%s)\n", g_ema_worst.worst, g_ema_worst.where);
    printf("NOTE t64_grad: EMA worst directional FD rel err %.2e (%s)\n", g_ema_dir.worst, g_ema_dir.where);
    printf("NOTE t64_grad: %.1f s CPU\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
    return tl_finish();
}
