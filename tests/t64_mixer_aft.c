/*
 * Finite-difference checks (double precision, libmega64) of the AFT family and gMLP mixers
 * (SPEC §5, §6): the mixer core alone (mixer.h forward/backward, the block's norm/residual are
 * not involved), loss = sum(core(x) * R) for a fixed random R.
 *
 * Configurations: aft-full, aft-local (window 3, 5, 70 > block, 200 > T), aft-simple, aft-tw
 * (1-4 heads; max-len 0 = pure RNN, and max-len > 0 with the time_beta / time_gamma position
 * factors, also T > max-len where they are clamped to the last learned position), gmlp (1 and 3 heads); causal and bidirectional; no pads, right pads, a sequence
 * made only of pads, left pads (causal queries with no visible key); short sequences (one
 * block of the pair kernel) and T = 150 (three blocks: block borders, the prefix / suffix
 * aggregates of aft-local, bands that span blocks).
 * Checked: dL/dx and every trainable tensor of the mixer, every element (x and tensors above
 * 600 elements: 250 random elements), fourth-order central differences h = 1e-4, plus three random
 * directional derivatives over all parameters and one over x. Error measure as in t64_grad.c:
 * max |analytic - FD| / max(max |analytic|, max |FD|, 1e-3 x the configuration's largest
 * gradient); tolerance 1e-6.
 * Also: the parameters are untouched by forward/backward, the results do not depend on the
 * thread count (1 thread vs all, bit-identical), an over-long sequence is refused with a clear
 * MEGA_ERR_INVALID by the mixers with absolute-position tables (aft-full, aft-local, gmlp), and the pair kernel's exact fallback (scaled denominators that underflow,
 * logits spread over +-1000) agrees with the exact softmax definition and with finite
 * differences, and actually runs (flags set).
 */
#include "layers/block.h"
#include "ops/aft.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-6
#define SAMPLE_ABOVE 600 /* tensors (and x) larger than this: SAMPLES random elements */
#define SAMPLES 250
#include <time.h>
static double omp_like_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static const double H = 1e-4;
static unsigned long long g_seed = 0xaf7aef7ull;

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

/* move every mixer parameter away from its trivial initial value */
static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        double *w = P->data + s->offset;
        const char *nm = s->name;
        const size_t n = s->numel;
#define FILL(expr)                                                                            \
    for (size_t j = 0; j < n; j++) w[j] = (expr)
        if (!strstr(nm, "mixer.")) continue; /* the block's norm: not used by the core */
        if (ends_with(nm, "pos_bias")) FILL(0.7 * tl_randn(seed));
        else if (ends_with(nm, "time_decay")) FILL(log(0.05 + 1.2 * tl_rand01(seed)));
        else if (ends_with(nm, "time_beta")) FILL(0.4 * tl_randn(seed));
        else if (ends_with(nm, "time_gamma")) FILL(1 + 0.3 * tl_randn(seed));
        else if (ends_with(nm, "spatial.weight")) FILL(0.4 * tl_randn(seed));
        else if (ends_with(nm, "spatial.bias")) FILL(1 + 0.3 * tl_randn(seed));
        else if (ends_with(nm, "sgu_norm.weight")) FILL(1 + 0.2 * tl_randn(seed));
        else if (ends_with(nm, "sgu_norm.bias")) FILL(0.1 * tl_randn(seed));
        else if (ends_with(nm, ".weight") && s->ndim == 2) FILL(tl_randn(seed) / sqrt((double)s->shape[1]));
        else if (ends_with(nm, ".bias")) FILL(0.2 * tl_randn(seed));
        else TL_CHECK(0, "perturb: no rule for %s", nm);
#undef FILL
    }
}

typedef struct {
    mega_mixer_kind kind;
    int bidir, pad, T, D, heads, window, max_len, E;
} fcfg;

/* pad: 0 none, 1 right pads (1 and T/3), 2 sequence 1 entirely pads, 3 left pads in seq 1 + interior pad in seq 0 */
static const fcfg CFGS[] = {
    {MEGA_MIXER_AFT_FULL, 0, 0, 9, 4, 1, 0, 12, 8},     {MEGA_MIXER_AFT_FULL, 1, 1, 9, 4, 1, 0, 9, 8},
    {MEGA_MIXER_AFT_FULL, 0, 3, 9, 3, 1, 0, 10, 8},     {MEGA_MIXER_AFT_FULL, 0, 1, 150, 3, 1, 0, 150, 8},
    {MEGA_MIXER_AFT_FULL, 1, 1, 150, 3, 1, 0, 160, 8},  {MEGA_MIXER_AFT_FULL, 1, 2, 70, 2, 1, 0, 70, 8},
    {MEGA_MIXER_AFT_LOCAL, 0, 1, 9, 4, 1, 3, 10, 8},    {MEGA_MIXER_AFT_LOCAL, 1, 1, 9, 4, 1, 3, 9, 8},
    {MEGA_MIXER_AFT_LOCAL, 0, 3, 9, 3, 1, 2, 9, 8},     {MEGA_MIXER_AFT_LOCAL, 0, 1, 150, 3, 1, 5, 150, 8},
    {MEGA_MIXER_AFT_LOCAL, 1, 1, 150, 3, 1, 5, 150, 8}, {MEGA_MIXER_AFT_LOCAL, 0, 0, 150, 2, 1, 70, 150, 8},
    {MEGA_MIXER_AFT_LOCAL, 1, 1, 150, 2, 1, 70, 152, 8},{MEGA_MIXER_AFT_LOCAL, 1, 2, 40, 3, 1, 200, 40, 8},
    {MEGA_MIXER_AFT_LOCAL, 0, 1, 130, 2, 1, 1, 130, 8}, {MEGA_MIXER_AFT_SIMPLE, 0, 1, 9, 4, 1, 0, 0, 8},
    {MEGA_MIXER_AFT_SIMPLE, 1, 1, 9, 4, 1, 0, 0, 8},    {MEGA_MIXER_AFT_SIMPLE, 0, 3, 9, 3, 1, 0, 0, 8},
    {MEGA_MIXER_AFT_SIMPLE, 1, 2, 150, 3, 1, 0, 0, 8},  {MEGA_MIXER_AFT_TW, 0, 1, 9, 4, 2, 0, 0, 8},
    {MEGA_MIXER_AFT_TW, 1, 1, 9, 4, 2, 0, 0, 8},        {MEGA_MIXER_AFT_TW, 0, 1, 9, 4, 2, 0, 10, 8},
    {MEGA_MIXER_AFT_TW, 1, 1, 9, 4, 1, 0, 12, 8},       {MEGA_MIXER_AFT_TW, 0, 3, 9, 4, 4, 0, 9, 8},
    {MEGA_MIXER_AFT_TW, 1, 2, 40, 3, 3, 0, 40, 8},      {MEGA_MIXER_AFT_TW, 0, 0, 100, 4, 4, 0, 0, 8},
    {MEGA_MIXER_AFT_TW, 1, 1, 100, 2, 2, 0, 100, 8},    {MEGA_MIXER_AFT_TW, 0, 1, 9, 4, 2, 0, 6, 8},
    {MEGA_MIXER_AFT_TW, 1, 3, 9, 4, 1, 0, 5, 8},    {MEGA_MIXER_GMLP, 0, 1, 9, 4, 1, 0, 10, 6},
    {MEGA_MIXER_GMLP, 1, 1, 9, 4, 1, 0, 9, 6},          {MEGA_MIXER_GMLP, 0, 0, 9, 3, 3, 0, 9, 6},
    {MEGA_MIXER_GMLP, 1, 2, 9, 3, 3, 0, 11, 6},         {MEGA_MIXER_GMLP, 0, 3, 9, 4, 2, 0, 9, 8},
};
#define NCFG ((int)(sizeof CFGS / sizeof CFGS[0]))

typedef struct {
    mega_block bl;
    mega_params P;
    mega_mixer_acts A;
    double *acts, *scr, *x, *Rw, *y, *dx;
    uint8_t *pad;
    const uint8_t *pm;
    int B, T;
    size_t RD;
    mega_run run;
} ctx;

static double loss(ctx *g) {
    const mega_mixer *mx = &g->bl.mix;
    if (mx->ops->forward(mx, g->P.data, &g->A, g->y, g->x, g->pm, g->B, g->T, &g->run, g->scr) != MEGA_OK) return NAN;
    double s = 0;
    for (size_t i = 0; i < g->RD; i++) s += g->y[i] * g->Rw[i];
    return s;
}
static double fd_at(ctx *g, double *p) {
    const double v = *p;
    double L[4];
    const int ks[4] = {-2, -1, 1, 2};
    for (int i = 0; i < 4; i++) *p = v + ks[i] * H, L[i] = loss(g);
    *p = v;
    return (8 * (L[2] - L[1]) - (L[3] - L[0])) / (12 * H);
}
/* err over the checked indices idx (all when idx NULL) */
static double err_of(const double *a, const double *fd, const size_t *idx, size_t n, double floor_) {
    double d = 0, m = floor_;
    for (size_t q = 0; q < n; q++) {
        size_t i = idx ? idx[q] : q;
        double e = fabs(a[i] - fd[q]);
        if (!(e <= d)) d = e;
        m = fmax(m, fmax(fabs(a[i]), fabs(fd[q])));
    }
    return m > 0 ? d / m : d;
}

static double g_worst = 0;
static char g_where[200];

static void cfg_name(const fcfg *c, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s/pad%d/T%d/D%d/H%d/win%d/maxlen%d/E%d", mega_mixer_name(c->kind), c->bidir ? "bidir" : "causal",
             c->pad, c->T, c->D, c->heads, c->window, c->max_len, c->E);
}

static int setup(ctx *g, const fcfg *fc, int nthreads) {
    mega_block_cfg c;
    memset(&c, 0, sizeof c);
    c.mixer = fc->kind, c.D = fc->D, c.Z = 4, c.E = fc->E, c.N = 2, c.F = 0, c.chunk = -1, c.max_positions = 16;
    c.bidir = fc->bidir, c.prenorm = 1, c.norm_affine = 1, c.norm = MEGA_NORM_LAYER, c.act = MEGA_ACT_SILU;
    c.heads = fc->heads, c.window = fc->window, c.max_len = fc->max_len;
    memset(g, 0, sizeof *g);
    g->B = 2, g->T = fc->T;
    mega_params_init(&g->P);
    if (mega_block_declare(&g->bl, &g->P, "layers.0.", &c) || mega_params_alloc(&g->P, 1)) return -1;
    mega_rng rng;
    mega_rng_seed(&rng, 77);
    mega_block_init(&g->bl, g->P.data, &rng);
    unsigned long long ps = 0x1234 + (unsigned long long)fc->T * 31 + (unsigned long long)fc->kind;
    perturb(&g->P, &ps);
    const mega_mixer *mx = &g->bl.mix;
    g->RD = (size_t)g->B * g->T * c.D;
    g->acts = calloc(mx->ops->acts(mx, NULL, NULL, g->B, g->T) + 16, sizeof(double));
    mx->ops->acts(mx, &g->A, g->acts, g->B, g->T);
    g->scr = calloc(mx->ops->scratch(mx, g->B, g->T, nthreads), sizeof(double));
    g->x = calloc(g->RD, sizeof(double)), g->Rw = calloc(g->RD, sizeof(double));
    g->y = calloc(g->RD, sizeof(double)), g->dx = calloc(g->RD, sizeof(double));
    g->pad = calloc((size_t)g->B * g->T, 1);
    const int T = g->T;
    if (fc->pad == 1) {
        g->pad[T - 1] = 1;
        for (int t = T - T / 3; t < T; t++) g->pad[T + t] = 1;
    } else if (fc->pad == 2) {
        g->pad[T - 2] = g->pad[T - 1] = 1;
        for (int t = 0; t < T; t++) g->pad[T + t] = 1;
    } else if (fc->pad == 3) {
        g->pad[T / 2] = 1;
        for (int t = 0; t < 3; t++) g->pad[T + t] = 1;
    }
    g->pm = fc->pad ? g->pad : NULL;
    g->run = (mega_run){1, 0, 0, nthreads};
    unsigned long long xs = 0x5eed5eedull + (unsigned long long)fc->T;
    for (size_t i = 0; i < g->RD; i++) g->x[i] = tl_randn(&xs), g->Rw[i] = tl_randn(&xs);
    return 0;
}
static void teardown(ctx *g) {
    free(g->acts), free(g->scr), free(g->x), free(g->Rw), free(g->y), free(g->dx), free(g->pad);
    mega_params_free(&g->P);
}

static void run_cfg(const fcfg *fc) {
    char name[160];
    cfg_name(fc, name, sizeof name);
    const int nt = mega_get_threads();
    ctx g; /* finite differences single-threaded (thousands of forwards); the thread count is
            * checked separately below */
    if (setup(&g, fc, 1)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        mega_params_free(&g.P);
        return;
    }
    const mega_mixer *mx = &g.bl.mix;
    double L0 = loss(&g);
    TL_CHECK(isfinite(L0), "%s: forward runs (%s)", name, mega_last_error());
    if (!isfinite(L0)) {
        teardown(&g);
        return;
    }
    double *w0 = malloc(g.P.total * sizeof(double));
    memcpy(w0, g.P.data, g.P.total * sizeof(double));
    mega_params_zero_grad(&g.P);
    loss(&g);
    mx->ops->backward(mx, g.P.data, g.P.grad, &g.A, g.dx, g.Rw, g.x, g.pm, g.B, g.T, &g.run, g.scr);
    double gmax = 0;
    for (size_t i = 0; i < g.RD; i++) gmax = fmax(gmax, fabs(g.dx[i]));
    for (int i = 0; i < g.P.n; i++)
        for (size_t j = 0; j < g.P.specs[i].numel; j++) gmax = fmax(gmax, fabs(g.P.grad[g.P.specs[i].offset + j]));
    const double floor_ = 1e-3 * gmax;
    double cworst = 0;
    char cwhere[160] = "x";
    int allfinite = 1;
    for (size_t i = 0; i < g.RD; i++) allfinite &= isfinite(g.dx[i]);
    {
        const size_t m = g.RD > SAMPLE_ABOVE ? SAMPLES : g.RD;
        size_t *idx = malloc(m * sizeof(size_t));
        double *fd = malloc(m * sizeof(double));
        unsigned long long is = 98;
        for (size_t q = 0; q < m; q++) idx[q] = g.RD > SAMPLE_ABOVE ? (size_t)(tl_rand01(&is) * (double)g.RD) % g.RD : q;
        for (size_t q = 0; q < m; q++) fd[q] = fd_at(&g, &g.x[idx[q]]);
        cworst = err_of(g.dx, fd, idx, m, floor_);
        free(idx), free(fd);
    }
    int ntens = 0;
    for (int i = 0; i < g.P.n; i++) {
        const mega_pspec *s = &g.P.specs[i];
        if (!strstr(s->name, "mixer.")) continue;
        const size_t n = s->numel, m = n > SAMPLE_ABOVE ? SAMPLES : n;
        size_t *idx = malloc(m * sizeof(size_t));
        double *fd = malloc(m * sizeof(double));
        unsigned long long is = 99 + (unsigned long long)i;
        for (size_t q = 0; q < m; q++) idx[q] = n > SAMPLE_ABOVE ? (size_t)(tl_rand01(&is) * (double)n) % n : q;
        for (size_t q = 0; q < m; q++) fd[q] = fd_at(&g, &g.P.data[s->offset + idx[q]]);
        for (size_t q = 0; q < n; q++) allfinite &= isfinite(g.P.grad[s->offset + q]);
        double e = err_of(g.P.grad + s->offset, fd, idx, m, floor_);
        if (e > cworst) cworst = e, snprintf(cwhere, sizeof cwhere, "%s", s->name);
        ntens++;
        free(idx), free(fd);
    }
    /* directional derivatives: 3 over all mixer parameters, 1 over x */
    double dworst = 0;
    {
        const size_t nmax = MEGA_MAX(g.P.total, g.RD);
        double *v = calloc(nmax, sizeof(double)), *save = malloc(nmax * sizeof(double));
        for (int rep = 0; rep < 4; rep++) {
            const int onx = rep == 3;
            const size_t n = onx ? g.RD : g.P.total;
            double *base = onx ? g.x : g.P.data, *grad = onx ? g.dx : g.P.grad;
            memset(v, 0, nmax * sizeof(double));
            if (onx)
                for (size_t i = 0; i < n; i++) v[i] = tl_randn(&g_seed);
            else
                for (int t = 0; t < g.P.n; t++)
                    if (strstr(g.P.specs[t].name, "mixer."))
                        for (size_t j = 0; j < g.P.specs[t].numel; j++) v[g.P.specs[t].offset + j] = tl_randn(&g_seed);
            double nv = 0, ng = 0, dot = 0;
            for (size_t i = 0; i < n; i++) nv += v[i] * v[i], ng += grad[i] * grad[i] * (v[i] != 0), dot += grad[i] * v[i];
            nv = sqrt(nv), ng = sqrt(ng);
            memcpy(save, base, n * sizeof(double));
            double Ls[4];
            const int ks[4] = {-2, -1, 1, 2};
            for (int i = 0; i < 4; i++) {
                for (size_t j = 0; j < n; j++) base[j] = save[j] + ks[i] * H / nv * v[j];
                Ls[i] = loss(&g);
            }
            memcpy(base, save, n * sizeof(double));
            double fdd = (8 * (Ls[2] - Ls[1]) - (Ls[3] - Ls[0])) / (12 * H);
            dworst = fmax(dworst, fabs(fdd - dot / nv) / fmax(ng, 1e-300));
        }
        free(v), free(save);
    }
    if (cworst > g_worst) g_worst = cworst, snprintf(g_where, sizeof g_where, "%s: %s", name, cwhere);
    TL_CHECK(cworst < TOL && dworst < TOL && allfinite && gmax > 0,
             "FD %s: x + %d tensors: worst rel err %.2e (%s), directional %.2e", name, ntens, cworst, cwhere, dworst);
    TL_CHECK(!memcmp(w0, g.P.data, g.P.total * sizeof(double)), "%s: parameters unchanged by forward/backward", name);
    /* thread-count independence: one thread gives bit-identical outputs and gradients */
    if (nt > 1) {
        double *y1 = malloc(g.RD * sizeof(double)), *dx1 = malloc(g.RD * sizeof(double)), *gr1 = malloc(g.P.total * sizeof(double));
        memcpy(y1, g.y, g.RD * sizeof(double));
        loss(&g);
        memcpy(y1, g.y, g.RD * sizeof(double));
        memcpy(dx1, g.dx, g.RD * sizeof(double));
        memcpy(gr1, g.P.grad, g.P.total * sizeof(double));
        ctx g1;
        setup(&g1, fc, nt);
        mega_params_zero_grad(&g1.P);
        loss(&g1);
        g1.bl.mix.ops->backward(&g1.bl.mix, g1.P.data, g1.P.grad, &g1.A, g1.dx, g1.Rw, g1.x, g1.pm, g1.B, g1.T, &g1.run, g1.scr);
        double d1 = 0, d2 = 0, d3 = 0; /* g: 1 thread, g1: nt threads */
        for (size_t i = 0; i < g.RD; i++) d1 = fmax(d1, fabs(y1[i] - g1.y[i])), d2 = fmax(d2, fabs(dx1[i] - g1.dx[i]));
        for (size_t i = 0; i < g.P.total; i++) d3 = fmax(d3, fabs(gr1[i] - g1.P.grad[i]));
        TL_CHECK(d1 == 0 && d2 == 0 && d3 == 0, "%s: 1 thread and %d threads give bit-identical results (%.1e %.1e %.1e)", name,
                 nt, d1, d2, d3);
        teardown(&g1);
        free(y1), free(dx1), free(gr1);
    }
    /* absolute-position parameters: a longer sequence is refused, nothing read out of bounds */
    if (fc->max_len > 0 && fc->max_len < 1000) {
        ctx gl;
        fcfg lc = *fc;
        lc.T = fc->max_len + 1, lc.pad = 0;
        /* aft-tw clamps beta/gamma beyond max-len (SPEC §4.1 (c)); aft-full/local and gmlp refuse */
        int limited = fc->kind != MEGA_MIXER_AFT_SIMPLE && fc->kind != MEGA_MIXER_AFT_TW;
        setup(&gl, &lc, nt);
        mega_status st = gl.bl.mix.ops->forward(&gl.bl.mix, gl.P.data, &gl.A, gl.y, gl.x, NULL, gl.B, gl.T, &gl.run, gl.scr);
        char want[160];
        snprintf(want, sizeof want, "sequence length %d exceeds the mixer's max-len %d", lc.T, fc->max_len);
        TL_CHECK(limited ? st == MEGA_ERR_INVALID && strstr(mega_last_error(), want) : st == MEGA_OK,
                 "%s: length %d vs max-len %d: %s", name, lc.T, fc->max_len, st ? mega_last_error() : "accepted");
        teardown(&gl);
    }
    free(w0);
    teardown(&g);
}

/* ---- the pair kernel's exact fallback ---------------------------------------------------- */
static void naive_pair(const mega_aft_pair_k *k, double *yb, const double *K, const double *V, size_t ld, const uint8_t *pad,
                       int B, int T) {
    double *lg = malloc((size_t)(T + 1) * sizeof(double)), *val = malloc((size_t)(T + 1) * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < k->Da; c++) {
                int n = 0;
                for (int u = 0; u < (k->bidir ? T : t + 1); u++) {
                    if (pad && pad[(size_t)b * T + u]) continue;
                    double w = 0;
                    int d = t - u;
                    if (k->s <= 0) w = k->w[(size_t)t * k->Tmax + u];
                    else if (d < k->s && (k->bidir ? d > -k->s : d >= 0))
                        w = k->w[(size_t)t * mega_aft_local_cols(k->s, k->bidir) + (size_t)(k->s - 1 - d)];
                    lg[n] = K[((size_t)b * T + u) * ld + c] + w, val[n++] = V[((size_t)b * T + u) * ld + c];
                }
                double m = -INFINITY, s = 0, y = 0;
                for (int i = 0; i < n; i++) m = fmax(m, lg[i]);
                for (int i = 0; i < n; i++) s += exp(lg[i] - m), y += exp(lg[i] - m) * val[i];
                yb[((size_t)b * T + t) * k->Da + c] = n ? y / s : 0;
            }
    free(lg), free(val);
}

static void fallback_case(int s, int bidir) {
    const int B = 2, T = 150, Da = 2, Tm = 150, nt = 1;
    const int ncol = s > 0 ? mega_aft_local_cols(s, bidir) : Tm;
    const size_t R = (size_t)B * T;
    double *K = malloc(R * Da * sizeof(double)), *V = malloc(R * Da * sizeof(double)), *w = malloc((size_t)Tm * ncol * sizeof(double));
    double *yb = malloc(R * Da * sizeof(double)), *ld = malloc(R * Da * sizeof(double)), *ref = malloc(R * Da * sizeof(double));
    double *Rw = malloc(R * Da * sizeof(double)), *dK = calloc(R * Da, sizeof(double)), *dV = calloc(R * Da, sizeof(double));
    double *dw = calloc((size_t)Tm * ncol, sizeof(double));
    uint8_t *flags = malloc(R * Da), *pad = calloc(R, 1);
    for (int t = 120; t < T; t++) pad[T + t] = 1;
    unsigned long long sd = 4242 + (unsigned long long)s;
    for (size_t i = 0; i < R * Da; i++) K[i] = 400 * tl_randn(&sd), V[i] = tl_randn(&sd), Rw[i] = tl_randn(&sd);
    for (size_t i = 0; i < (size_t)Tm * ncol; i++) w[i] = 400 * tl_randn(&sd);
    mega_aft_pair_k k = {Da, bidir, s, Tm, w};
    double *scr = calloc(mega_aft_pair_scratch(&k, B, T, nt), sizeof(double));
    mega_aft_pair_forward(&k, yb, ld, flags, K, V, Da, pad, B, T, scr, nt);
    naive_pair(&k, ref, K, V, Da, pad, B, T);
    size_t nflag = 0;
    double e = 0;
    for (size_t i = 0; i < R * Da; i++) nflag += flags[i], e = fmax(e, fabs(yb[i] - ref[i]));
    char name[64];
    snprintf(name, sizeof name, "%s %s (s %d)", s > 0 ? "aft-local" : "aft-full", bidir ? "bidir" : "causal", s);
    TL_CHECK(nflag > 0 && e < 1e-12, "pair fallback %s: %zu of %zu entries recomputed exactly, forward vs exact softmax %.2e",
             name, nflag, R * Da, e);
    /* gradients of sum(ybar * Rw) vs central differences on a sample of K, V, w */
    mega_aft_pair_backward(&k, dK, dV, Da, dw, Rw, yb, ld, flags, K, V, Da, pad, B, T, scr, nt);
    double worst = 0, gm = 0;
    unsigned long long is = 7;
    for (int rep = 0; rep < 3; rep++) {
        double *arr = rep == 0 ? K : rep == 1 ? V : w, *gr = rep == 0 ? dK : rep == 1 ? dV : dw;
        size_t n = rep == 2 ? (size_t)Tm * ncol : R * Da;
        for (size_t i = 0; i < n; i++) gm = fmax(gm, fabs(gr[i]));
        for (int q = 0; q < 100; q++) {
            size_t i = (size_t)(tl_rand01(&is) * (double)n) % n;
            double v0 = arr[i], Ls[2];
            for (int sg = 0; sg < 2; sg++) {
                arr[i] = v0 + (sg ? 1e-6 : -1e-6);
                mega_aft_pair_forward(&k, yb, ld, flags, K, V, Da, pad, B, T, scr, nt);
                double l = 0;
                for (size_t j = 0; j < R * Da; j++) l += yb[j] * Rw[j];
                Ls[sg] = l;
            }
            arr[i] = v0;
            worst = fmax(worst, fabs((Ls[1] - Ls[0]) / 2e-6 - gr[i]));
        }
    }
    TL_CHECK(worst <= 1e-6 * fmax(gm, 1e-12), "pair fallback %s: gradients vs FD (K, V, w samples): abs err %.2e (max grad %.2e)",
             name, worst, gm);
    free(K), free(V), free(w), free(yb), free(ld), free(ref), free(Rw), free(dK), free(dV), free(dw), free(flags), free(pad), free(scr);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int i = 0; i < NCFG; i++) {
        double t0 = omp_like_clock();
        run_cfg(&CFGS[i]);
        if (getenv("AFT_TIMING")) printf("NOTE config %d: %.2f s\n", i, omp_like_clock() - t0);
    }
    printf("NOTE aft/gmlp FD: %d configurations, worst rel err %.2e (%s)\n", NCFG, g_worst, g_where);
    fallback_case(0, 0);
    fallback_case(0, 1);
    fallback_case(5, 0);
    fallback_case(70, 1);
    return tl_finish();
}
