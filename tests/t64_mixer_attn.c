/*
 * The softmax-attention mixers mha, local and mhatw (src/layers/mha.c, mhatw.c, ops/mhattn.c,
 * ops/posenc.c; SPEC §3, §4.2, §8) in double precision (libmega64).
 *
 * 1. Finite differences through the whole block (mixer norm -> mixer -> residual -> NFFN), on
 *    tiny shapes (B = 2, T = 9, D = 8 or 6, heads 2-4), training mode: every element of dL/dx and
 *    of every trainable tensor (fourth-order central differences, h = 1e-4), plus three random
 *    directional derivatives over all parameters and one over x. 36 configurations cover every
 *    mixer x every positional scheme (none, rope, alibi, kerple-power, kerple-log, sandwich,
 *    xpos) x causal / bidirectional, right-padding masks (with rows that see no valid key),
 *    windows (local's window and mha/mhatw's attn_window), log-n scaling, mhatw with
 *    max_len < T (the clamping length policy on both sides), pre/post norm, with and without
 *    the FFN, and attention + residual dropout (p = 0.1, fixed key).
 *    Loss = sum(out * R) for a fixed random R. Error: per tensor max |analytic - FD| /
 *    max(max |analytic|, max |FD|, 1e-3 x the configuration's largest gradient); tolerance 1e-6.
 * 2. Long sequences (T = 150 > the kernel's 64-row blocks): directional derivatives only (four
 *    per configuration), windows, XPOS re-centring across blocks, bidirectional bands.
 * 3. The kernel (mega_mhattn_forward) against a naive per-row double computation, with every
 *    term on (distance table, key bias, window, log-n, pads, XPOS un-centred), T = 150.
 * 4. SPEC §11 item 4: ALiBi slopes for H = 1, 6, 8, 12, 16 (the H = 12 list of §8.2 written
 *    out); the KERPLE gradient at distance 0 (exactly 0 and finite, both variants, also through
 *    a whole T = 1 block); XPOS at 100k positions: the re-centred kernel (window 16) equals the
 *    un-centred formula in fp64 (which does not overflow there in double) on sampled rows.
 * 5. Semantics: local(window w) == mha(attn_window w); a window >= T changes nothing; log-n with
 *    train_len >= T is the identity (the max(1, .) variant); MHATW with log f = -m_h delta
 *    (ALiBi slopes), beta = gamma = 1 equals mha + alibi (SPEC §4.2); Sandwich table values;
 *    the KERPLE forward clamps its parameter data in place (official); invalid combinations
 *    (SPEC §8.8) are rejected with MEGA_ERR_INVALID; thread count does not change results.
 */
#include "layers/block.h"
#include "ops/mhattn.h"
#include "ops/posenc.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-6
static const double H_FD = 1e-4;
static unsigned long long g_seed = 0xa77e5eedull;

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

/* parameter perturbation: the rules of tests/ref/gen_fixtures.py for the shared tensors, and
 * for the attention mixers' own (kept inside the KERPLE clamp range, away from its edges) */
static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        double *w = P->data + s->offset;
        const char *nm = s->name, *leaf = strrchr(nm, '.') ? strrchr(nm, '.') + 1 : nm;
        size_t n = s->numel;
#define FILL(expr)                                                                            \
    for (size_t j = 0; j < n; j++) w[j] = (expr)
        if (strstr(nm, "norm.norm.")) {
            if (!strcmp(leaf, "weight")) FILL(1 + 0.2 * tl_randn(seed));
            else if (!strcmp(leaf, "bias")) FILL(0.1 * tl_randn(seed));
            else if (!strcmp(leaf, "scalar")) FILL(1 + 0.15 * tl_randn(seed));
            else if (!strcmp(leaf, "running_mean")) FILL(0.2 * tl_randn(seed));
            else if (!strcmp(leaf, "running_var")) FILL(0.5 + tl_rand01(seed));
            else if (!strcmp(leaf, "num_batches_tracked")) FILL(5);
        } else if (ends_with(nm, "kerple.bias_p")) {
            FILL(0.3 + 1.4 * tl_rand01(seed));
        } else if (ends_with(nm, "kerple.bias_a")) {
            FILL(0.2 + 0.7 * tl_rand01(seed));
        } else if (ends_with(nm, "time_logw")) {
            FILL(w[j] + 0.3 * tl_randn(seed));
        } else if (ends_with(nm, "time_logbeta")) {
            FILL(0.3 * tl_randn(seed));
        } else if (ends_with(nm, "time_gamma")) {
            FILL(1 + 0.2 * tl_randn(seed));
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

static double tensor_err(const double *g, const double *fd, size_t n, double floor_) {
    double d = 0, m = floor_;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(g[i] - fd[i]);
        if (!(e <= d)) d = e;
        m = fmax(m, fmax(fabs(g[i]), fabs(fd[i])));
    }
    return m > 0 ? d / m : d;
}
static double rel_diff(const double *a, const double *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (!(e <= d)) d = e;
        m = fmax(m, fabs(b[i]));
    }
    return m > 0 ? d / m : d;
}

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

static void cfg_name(const acfg *g, int T, char *buf, size_t n) {
    static const char *nn[] = {"LN", "SN", "RN"};
    char tm[16] = "";
    if (g->mixer == TW) snprintf(tm, sizeof tm, "/Tm%d", g->Tm ? g->Tm : T);
    snprintf(buf, n, "%s/%s/%s/pad%d/win%d/logn%d/%s/%s/F%d/H%d/D%d%s/T%d%s", mega_mixer_name((mega_mixer_kind)g->mixer),
             mega_pos_name((mega_pos_kind)g->pos), g->bidir ? "bidir" : "causal", g->pad, g->win, g->logn,
             g->pre ? "pre" : "post", nn[g->norm], g->F, g->H, g->D, tm, T, g->drop ? "/dropout" : "");
}

static void fill_cfg(mega_block_cfg *c, const acfg *g, int T) {
    memset(c, 0, sizeof *c);
    c->mixer = (mega_mixer_kind)g->mixer;
    c->D = g->D, c->Z = 4, c->E = 4, c->N = 2, c->F = g->F;
    c->chunk = -1, c->max_positions = 16;
    c->bidir = g->bidir, c->prenorm = g->pre, c->norm_affine = 1, c->norm = (mega_norm_type)g->norm;
    c->act = MEGA_ACT_SILU;
    c->heads = g->H;
    c->pos = (mega_pos_kind)g->pos;
    if (g->mixer == LOC) c->window = g->win;
    else c->attn_window = g->win;
    c->log_n = g->logn > 0, c->train_len = g->logn;
    c->max_len = g->mixer == TW ? (g->Tm ? g->Tm : T) : 0;
    if (g->drop) c->dropout = c->attn_dropout = 0.1;
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
    static const int KS[4] = {-2, -1, 1, 2};
    const double v = *p;
    double L[4];
    for (int i = 0; i < 4; i++) {
        *p = v + KS[i] * H_FD;
        L[i] = block_loss(g);
    }
    *p = v;
    return (8 * (L[2] - L[1]) - (L[3] - L[0])) / (12 * H_FD);
}

/* build, init, perturb; pads: sequence 0 one trailing pad, sequence 1 three (scaled with T) */
static int ctx_open(gctx *g, const mega_block_cfg *c, int B, int T, int pad, uint64_t seed) {
    memset(g, 0, sizeof *g);
    g->B = B, g->T = T;
    const int nt = mega_get_threads();
    g->run = (mega_run){1, 0, 0x1234567890abcdefull ^ seed, nt};
    mega_params_init(&g->P);
    if (mega_block_declare(&g->bl, &g->P, "", c) || mega_params_alloc(&g->P, 1)) {
        mega_params_free(&g->P);
        return -1;
    }
    mega_rng rng;
    mega_rng_seed(&rng, seed);
    mega_block_init(&g->bl, g->P.data, &rng);
    perturb(&g->P, &g_seed);
    g->RD = (size_t)B * T * c->D;
    g->acts = calloc(mega_block_acts_size(&g->bl, B, T), sizeof(double));
    g->scr = calloc(mega_block_scratch_size(&g->bl, B, T, nt), sizeof(double));
    mega_block_acts_point(&g->bl, &g->A, g->acts, B, T);
    g->x = calloc(g->RD, sizeof(double)), g->Rw = calloc(g->RD, sizeof(double));
    g->out = calloc(g->RD, sizeof(double)), g->dx = calloc(g->RD, sizeof(double));
    g->pad = calloc((size_t)B * T, 1);
    if (pad) {
        g->pad[T - 1] = 1;
        if (B > 1)
            for (int t = T - 1 - MEGA_MAX(2, T / 3); t < T; t++) g->pad[T + t] = 1;
        g->pm = g->pad;
    }
    /* x and R from their own stream, so configurations with other tensors see the same data */
    unsigned long long xs = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < g->RD; i++) g->Rw[i] = tl_randn(&xs), g->x[i] = tl_randn(&xs);
    return 0;
}
static void ctx_close(gctx *g) {
    free(g->acts), free(g->scr), free(g->x), free(g->Rw), free(g->out), free(g->dx), free(g->pad);
    mega_params_free(&g->P);
}
static void analytic(gctx *g) {
    mega_params_zero_grad(&g->P);
    mega_block_forward(&g->bl, g->P.data, &g->A, g->out, g->x, g->pm, g->B, g->T, &g->run, g->scr);
    mega_block_backward(&g->bl, g->P.data, g->P.grad, &g->A, g->dx, g->Rw, g->x, g->pm, g->B, g->T, &g->run, g->scr);
}

/* four random directional derivatives (3 over all trainable parameters, 1 over x); returns
 * the worst |<g,v> - FD| / (|g| |v|) */
static double directional(gctx *g) {
    double *v = calloc(g->P.total > g->RD ? g->P.total : g->RD, sizeof(double));
    double worst = 0;
    for (int rep = 0; rep < 4; rep++) {
        const int onx = rep == 3;
        const size_t n = onx ? g->RD : g->P.total;
        double *base = onx ? g->x : g->P.data, *grad = onx ? g->dx : g->P.grad;
        memset(v, 0, n * sizeof(double));
        if (onx)
            for (size_t i = 0; i < n; i++) v[i] = tl_randn(&g_seed);
        else
            for (int t = 0; t < g->P.n; t++)
                if (!(g->P.specs[t].flags & MEGA_P_BUFFER))
                    for (size_t j = 0; j < g->P.specs[t].numel; j++) v[g->P.specs[t].offset + j] = tl_randn(&g_seed);
        double nv = 0, ng = 0, dot = 0;
        for (size_t i = 0; i < n; i++) nv += v[i] * v[i], ng += grad[i] * grad[i] * (v[i] != 0), dot += grad[i] * v[i];
        nv = sqrt(nv), ng = sqrt(ng);
        double *save = malloc(n * sizeof(double));
        memcpy(save, base, n * sizeof(double));
        static const int KS[4] = {-2, -1, 1, 2};
        double L[4];
        for (int i = 0; i < 4; i++) {
            for (size_t j = 0; j < n; j++) base[j] = save[j] + KS[i] * H_FD / nv * v[j];
            L[i] = block_loss(g);
        }
        memcpy(base, save, n * sizeof(double));
        free(save);
        const double fdd = (8 * (L[2] - L[1]) - (L[3] - L[0])) / (12 * H_FD);
        worst = fmax(worst, fabs(fdd - dot / nv) / fmax(ng, 1e-300));
    }
    free(v);
    return worst;
}

static double g_fd_worst, g_dir_worst;
static char g_fd_where[300];

static void run_fd(int ci) {
    const acfg *gc = &CFGS[ci];
    const int T = 9;
    char name[200];
    cfg_name(gc, T, name, sizeof name);
    mega_block_cfg c;
    fill_cfg(&c, gc, T);
    gctx g;
    if (ctx_open(&g, &c, 2, T, gc->pad, 3000 + (uint64_t)ci)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        return;
    }
    double L0 = block_loss(&g);
    TL_CHECK(isfinite(L0), "%s: forward runs (%s)", name, mega_last_error());
    if (!isfinite(L0)) {
        ctx_close(&g);
        return;
    }
    double *w_start = malloc(g.P.total * sizeof(double));
    memcpy(w_start, g.P.data, g.P.total * sizeof(double));
    if (gc->drop) {
        uint64_t k0 = g.run.key;
        g.run.key = k0 ^ 0x55;
        double L1 = block_loss(&g);
        g.run.key = k0;
        TL_CHECK(fabs(L1 - L0) > 1e-6 * fabs(L0) && block_loss(&g) == L0,
                 "%s: dropout active and deterministic for a fixed key", name);
    }
    analytic(&g);
    double gmax = 0;
    for (size_t i = 0; i < g.RD; i++) gmax = fmax(gmax, fabs(g.dx[i]));
    for (int i = 0; i < g.P.n; i++)
        if (!(g.P.specs[i].flags & MEGA_P_BUFFER))
            for (size_t j = 0; j < g.P.specs[i].numel; j++) gmax = fmax(gmax, fabs(g.P.grad[g.P.specs[i].offset + j]));
    const double floor_ = 1e-3 * gmax;
    double cworst = 0;
    char cwhere[160] = "x";
    double *fd = calloc(g.RD, sizeof(double));
    for (size_t i = 0; i < g.RD; i++) fd[i] = fd_at(&g, &g.x[i]);
    cworst = tensor_err(g.dx, fd, g.RD, floor_);
    if (ci == 0) {
        /* canary: a gradient off by 1e-5 of the largest one is flagged */
        g.dx[3] += 1e-5 * gmax;
        TL_CHECK(tensor_err(g.dx, fd, g.RD, floor_) > 5 * TOL, "canary: a gradient off by 1e-5 is flagged");
        g.dx[3] -= 1e-5 * gmax;
    }
    free(fd);
    int ntensors = 0;
    size_t nelem = 0;
    for (int i = 0; i < g.P.n; i++) {
        const mega_pspec *s = &g.P.specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        double *fw = calloc(s->numel, sizeof(double));
        for (size_t j = 0; j < s->numel; j++) fw[j] = fd_at(&g, &g.P.data[s->offset + j]);
        double e = tensor_err(g.P.grad + s->offset, fw, s->numel, floor_);
        if (e > cworst) cworst = e, snprintf(cwhere, sizeof cwhere, "%s", s->name);
        ntensors++, nelem += s->numel;
        free(fw);
    }
    if (cworst > g_fd_worst) g_fd_worst = cworst, snprintf(g_fd_where, sizeof g_fd_where, "%s: %s", name, cwhere);
    TL_CHECK(cworst < TOL && gmax > 0, "FD %s: %d tensors (%zu elements) + x: worst rel err %.2e (%s)", name, ntensors,
             nelem, cworst, cwhere);
    double dw = directional(&g);
    g_dir_worst = fmax(g_dir_worst, dw);
    TL_CHECK(dw < TOL, "FD %s: directional derivatives: worst %.2e", name, dw);
    TL_CHECK(!memcmp(w_start, g.P.data, g.P.total * sizeof(double)), "%s: parameters unchanged by the forwards", name);
    free(w_start);
    ctx_close(&g);
}

/* long sequences: several 64-row blocks, directional derivatives only */
static void run_long(const acfg *gc, int T) {
    char name[200];
    cfg_name(gc, T, name, sizeof name);
    mega_block_cfg c;
    fill_cfg(&c, gc, T);
    gctx g;
    if (ctx_open(&g, &c, 2, T, gc->pad, 4000 + (uint64_t)T)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        return;
    }
    analytic(&g);
    double dw = directional(&g);
    g_dir_worst = fmax(g_dir_worst, dw);
    TL_CHECK(dw < TOL, "long FD %s: directional derivatives (3 over W, 1 over x): worst %.2e", name, dw);
    ctx_close(&g);
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
    double e = rel_diff(O, On, R * Da);
    TL_CHECK(e < 1e-12, "kernel vs naive (T=%d %s window %d log-n %d xpos %d pad %d; distance table + key bias): rel %.2e", T,
             causal ? "causal" : "bidir", window, logn, xpos, pad, e);
    free(q), free(k), free(v), free(O), free(On), free(lse), free(bt), free(kb), free(xt), free(pm), free(scr);
}

/* ---------------------------------------------------------------------------------------------
 * SPEC §11 item 4 */
static void alibi_slopes(void) {
    static const int Hs[5] = {1, 6, 8, 12, 16};
    for (int k = 0; k < 5; k++) {
        const int H = Hs[k];
        double m[16], ref[16];
        mega_alibi_slopes(m, H);
        if (H == 12) {
            /* SPEC §8.2: 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 */
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
        TL_CHECK(e < 1e-15, "ALiBi slopes H=%d match SPEC §8.2 (worst rel %.1e; first %.6g, last %.6g)", H, e, m[0],
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
        acfg a = {MHA, power ? PKP : PKL, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0};
        mega_block_cfg c;
        fill_cfg(&c, &a, 1);
        gctx g;
        if (ctx_open(&g, &c, 2, 1, 0, 77)) {
            TL_CHECK(0, "KERPLE T=1 block: %s", mega_last_error());
            continue;
        }
        analytic(&g);
        const mega_pspec *sp = mega_params_find(&g.P, "mixer.kerple.bias_p");
        const mega_pspec *sa = mega_params_find(&g.P, "mixer.kerple.bias_a");
        int ok = sp && sa;
        for (int h = 0; ok && h < 2; h++) ok &= g.P.grad[sp->offset + h] == 0 && g.P.grad[sa->offset + h] == 0;
        TL_CHECK(ok, "KERPLE-%s block with T = 1: bias_p / bias_a gradients exactly 0 and finite", power ? "power" : "log");
        ctx_close(&g);
    }
    /* the official forward clamps the parameter data in place: >= 0.01, power exponent <= 2 */
    {
        acfg a = {MHA, PKP, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0};
        mega_block_cfg c;
        fill_cfg(&c, &a, 5);
        gctx g;
        if (!ctx_open(&g, &c, 2, 5, 0, 78)) {
            const mega_pspec *sp = mega_params_find(&g.P, "mixer.kerple.bias_p");
            const mega_pspec *sa = mega_params_find(&g.P, "mixer.kerple.bias_a");
            g.P.data[sp->offset] = 3.0, g.P.data[sp->offset + 1] = -1.0, g.P.data[sa->offset] = 0.001;
            block_loss(&g);
            TL_CHECK(g.P.data[sp->offset] == 2.0 && g.P.data[sp->offset + 1] == 0.01 && g.P.data[sa->offset] == 0.01,
                     "KERPLE-power forward clamps bias_p to [0.01, 2] and bias_a to >= 0.01 in place (%g %g %g)",
                     g.P.data[sp->offset], g.P.data[sp->offset + 1], g.P.data[sa->offset]);
            ctx_close(&g);
        }
    }
}

/* XPOS at long lengths: 100k positions with a local window (so the run is O(T w)); the
 * re-centred kernel against the un-centred formula on sampled rows */
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
     * u ~ 36k, SPEC §8.5), so here both forms exist and must agree to round-off */
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

/* eval-mode block output for a config on fixed x (params from the same seed) */
static int block_out(const mega_block_cfg *c, int T, int pad, uint64_t seed, double *out, double *Wcopy,
                     const double *Wsrc) {
    gctx g;
    unsigned long long keep = g_seed;
    g_seed = 0x5eed0000ull + seed;
    if (ctx_open(&g, c, 2, T, pad, seed)) {
        g_seed = keep;
        return -1;
    }
    if (Wsrc) memcpy(g.P.data, Wsrc, g.P.total * sizeof(double));
    if (Wcopy) memcpy(Wcopy, g.P.data, g.P.total * sizeof(double));
    g.run.training = 0;
    block_loss(&g);
    memcpy(out, g.out, g.RD * sizeof(double));
    ctx_close(&g);
    g_seed = keep;
    return 0;
}

static void semantics(void) {
    const int T = 11;
    double *a = malloc(2 * T * 8 * sizeof(double)), *b = malloc(2 * T * 8 * sizeof(double));
    double *W = malloc(20000 * sizeof(double));
    for (int bidir = 0; bidir <= 1; bidir++) {
        /* local(window 3) == mha(attn_window 3), same parameters */
        acfg l = {LOC, PR, bidir, 1, 3, 0, 1, LN, 16, 0, 2, 8, 0}, m = l;
        if (bidir) l.pos = m.pos = PA;
        m.mixer = MHA;
        mega_block_cfg cl, cm;
        fill_cfg(&cl, &l, T), fill_cfg(&cm, &m, T);
        if (!block_out(&cl, T, 1, 11, a, W, NULL) && !block_out(&cm, T, 1, 11, b, NULL, W))
            TL_CHECK(!memcmp(a, b, 2 * T * 8 * sizeof(double)), "%s: local(window 3) == mha(attn-window 3) bitwise",
                     bidir ? "bidir" : "causal");
        /* a window covering the whole sequence changes nothing */
        m.win = bidir ? T - 1 : T;
        fill_cfg(&cm, &m, T);
        block_out(&cm, T, 1, 11, a, NULL, W);
        m.win = 0;
        fill_cfg(&cm, &m, T);
        block_out(&cm, T, 1, 11, b, NULL, W);
        TL_CHECK(rel_diff(a, b, 2 * T * 8) == 0, "%s: attn-window >= T is the identity", bidir ? "bidir" : "causal");
        /* log-n with train_len >= T: max(1, log n / log L) = 1 */
        m.logn = T;
        fill_cfg(&cm, &m, T);
        block_out(&cm, T, 1, 11, a, NULL, W);
        TL_CHECK(rel_diff(a, b, 2 * T * 8) == 0, "%s: log-n scaling with train_len >= T is the identity",
                 bidir ? "bidir" : "causal");
        m.logn = 3;
        fill_cfg(&cm, &m, T);
        block_out(&cm, T, 1, 11, a, NULL, W);
        TL_CHECK(rel_diff(a, b, 2 * T * 8) > 1e-6, "%s: log-n scaling with train_len 3 < T changes the output",
                 bidir ? "bidir" : "causal");
    }
    /* MHATW with log f_h(delta) = -m_h |delta| (ALiBi slopes), beta = gamma = 1 == mha + alibi */
    for (int bidir = 0; bidir <= 1; bidir++) {
        acfg t = {TW, PN, bidir, 1, 0, 0, 1, LN, 16, 0, 3, 6, 0}, m = t;
        m.mixer = MHA, m.pos = PA;
        mega_block_cfg ct, cm;
        fill_cfg(&ct, &t, T), fill_cfg(&cm, &m, T);
        mega_block bl;
        /* parameters of the mha model, then the same for mhatw with the ALiBi time weights */
        if (block_out(&cm, T, 1, 12, b, W, NULL)) continue;
        mega_params Pt;
        mega_params_init(&Pt);
        if (mega_block_declare(&bl, &Pt, "", &ct) || mega_params_alloc(&Pt, 0)) {
            TL_CHECK(0, "mhatw declare: %s", mega_last_error());
            mega_params_free(&Pt);
            continue;
        }
        mega_params Pm;
        mega_params_init(&Pm);
        mega_block bm;
        mega_block_declare(&bm, &Pm, "", &cm);
        mega_params_alloc(&Pm, 0);
        memcpy(Pm.data, W, Pm.total * sizeof(double));
        for (int i = 0; i < Pm.n; i++) {
            const mega_pspec *s = mega_params_find(&Pt, Pm.specs[i].name);
            if (s) memcpy(Pt.data + s->offset, Pm.data + Pm.specs[i].offset, s->numel * sizeof(double));
        }
        double m3[3];
        mega_alibi_slopes(m3, 3);
        const mega_pspec *lw = mega_params_find(&Pt, "mixer.time_logw"), *lb = mega_params_find(&Pt, "mixer.time_logbeta"),
                         *gm = mega_params_find(&Pt, "mixer.time_gamma");
        const int Lw = (int)lw->shape[1];
        for (int h = 0; h < 3; h++)
            for (int j = 0; j < Lw; j++) Pt.data[lw->offset + (size_t)h * Lw + j] = -m3[h] * abs(T - 1 - j);
        for (size_t j = 0; j < lb->numel; j++) Pt.data[lb->offset + j] = 0;
        for (size_t j = 0; j < gm->numel; j++) Pt.data[gm->offset + j] = 1;
        block_out(&ct, T, 1, 12, a, NULL, Pt.data);
        TL_CHECK(rel_diff(a, b, 2 * T * 6) < 1e-14, "%s: MHATW with f = exp(-m_h delta), beta = gamma = 1 equals mha + ALiBi (rel %.1e)",
                 bidir ? "bidir" : "causal", rel_diff(a, b, 2 * T * 6));
        mega_params_free(&Pt), mega_params_free(&Pm);
    }
    /* Sandwich: b(0) = 0, b(d) <= 0, the NeMo formula with i = 1..dbar/2 */
    {
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
    /* thread count: the same results with 1 thread */
    {
        acfg g1 = {TW, PKP, 1, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0};
        mega_block_cfg c;
        fill_cfg(&c, &g1, 150);
        gctx g;
        if (!ctx_open(&g, &c, 2, 150, 1, 99)) {
            analytic(&g);
            double *d1 = malloc(g.P.total * sizeof(double)), *x1 = malloc(g.RD * sizeof(double));
            memcpy(d1, g.P.grad, g.P.total * sizeof(double));
            memcpy(x1, g.dx, g.RD * sizeof(double));
            g.run.nthreads = 1;
            analytic(&g);
            const double e = fmax(rel_diff(g.P.grad, d1, g.P.total), rel_diff(g.dx, x1, g.RD));
            TL_CHECK(e == 0, "1 thread vs %d threads: bit-identical gradients (rel %.1e)", mega_get_threads(), e);
            free(d1), free(x1);
            ctx_close(&g);
        }
    }
    free(a), free(b), free(W);
}

static void invalid(void) {
    struct {
        acfg a;
        const char *what;
    } bad[] = {
        {{MHA, PX, 1, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0}, "xpos bidirectional"},
        {{MHA, PN, 0, 0, 0, 0, 1, LN, 16, 0, 3, 8, 0}, "embed-dim not divisible by heads"},
        {{MHA, PR, 0, 0, 0, 0, 1, LN, 16, 0, 8, 8, 0}, "rope with an odd head width"},
        {{MHA, PX, 0, 0, 0, 0, 1, LN, 16, 0, 8, 8, 0}, "xpos with an odd head width"},
        {{LOC, PN, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, 0}, "local without a window"},
        {{TW, PN, 0, 0, 0, 0, 1, LN, 16, 0, 2, 8, -1}, "mhatw without max-len"},
        {{MHA, PN, 0, 0, 0, 1, 1, LN, 16, 0, 2, 8, 0}, "log-n with train_len 1"},
        {{MHA, PN, 0, 0, -1, 0, 1, LN, 16, 0, 2, 8, 0}, "negative attn-window"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mega_block_cfg c;
        fill_cfg(&c, &bad[i].a, 9);
        if (bad[i].a.Tm < 0) c.max_len = 0;
        mega_params P;
        mega_params_init(&P);
        mega_block bl;
        mega_status st = mega_block_declare(&bl, &P, "", &c);
        TL_CHECK(st == MEGA_ERR_INVALID && strlen(mega_last_error()) > 10, "rejected: %s (\"%s\")", bad[i].what,
                 mega_last_error());
        mega_params_free(&P);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int i = 0; i < NCFG; i++) run_fd(i);
    printf("NOTE worst FD error over %d configurations: %.2e (%s); worst directional %.2e\n", NCFG, g_fd_worst, g_fd_where,
           g_dir_worst);
    /* long: multi-block paths */
    static const acfg LONG[] = {
        {MHA, PX, 0, 1, 0, 0, 1, LN, 16, 0, 2, 8, 0},  {MHA, PX, 0, 1, 40, 20, 1, LN, 16, 0, 2, 8, 0},
        {LOC, PKP, 1, 1, 30, 0, 0, LN, 16, 0, 2, 8, 0}, {TW, PR, 0, 1, 0, 50, 1, RN, 16, 0, 2, 8, 100},
        {TW, PS, 1, 1, 70, 0, 1, LN, 16, 1, 2, 8, 120}, {MHA, PKL, 1, 0, 0, 0, 1, LN, 16, 0, 4, 8, 0},
    };
    for (size_t i = 0; i < sizeof LONG / sizeof LONG[0]; i++) run_long(&LONG[i], 150);
    for (int causal = 0; causal <= 1; causal++)
        for (int win = 0; win <= 1; win++) {
            kernel_vs_naive(causal, win ? 37 : 0, win, 0, 1, 150);
            if (causal) kernel_vs_naive(causal, win ? 37 : 0, !win, 1, win, 150);
        }
    alibi_slopes();
    kerple_zero();
    xpos_long();
    semantics();
    invalid();
    return tl_finish();
}
