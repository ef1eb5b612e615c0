/*
 * The ABC mixers (SPEC §7; src/layers/abc.c, src/ops/abc.c) in double precision (libmega64).
 *
 * 1. Finite differences of the whole block (ABC core inside the residual sublayer, optional
 *    NFFN), training mode: every element of every trainable tensor and of x, fourth-order
 *    central differences (h = 1e-4), loss = sum(out * R). Configurations: abc-window (masked and
 *    literal empty slots, n < T and n > T), abc-linformer and abc-mlp, causal and bidirectional,
 *    interior / trailing / leading pads, a bidirectional row made only of pads, heads 1 and 2,
 *    memory 1..10, pre/post norm, with and without the FFN, attention + sublayer dropout, and a
 *    causal length 70 > 2 x MEGA_ABC_SEG (several checkpoint segments in the reverse scan).
 *    Error: per tensor max |g - fd| / max(max|g|, max|fd|, 1e-3 x the largest gradient); 1e-6.
 * 2. Equivalences, mixer alone, against naive forms computed here from the parameters:
 *    - abc-window with masked empty slots == sliding-window softmax attention of width n
 *      (keys t-n < u <= t, pad keys masked); the literal form == softmax with one logit-0 entry
 *      per empty slot;
 *    - causal ABC-MLP (the logaddexp recurrence) == the naive memory materialised for every t:
 *      K~_t[j] = sum_{i<=t} softmax_{i<=t}(l_{.j})_i k_i; bidirectional likewise over all valid i;
 *    - Linformer: causal K~_t = sum_{i<=t} E[:, i] k_i^T, bidirectional E[:, :L] K (pads zeroed);
 *    also with logits of size ~100 (W_phi scaled by 300): the recurrence stays exact and
 *    finite, and its backward is finite. Tolerance 1e-12 of max |y|.
 * 3. Errors: Linformer with T > max-len (MEGA_ERR_INVALID), bidirectional abc-window
 *    (MEGA_ERR_UNSUPPORTED), heads not dividing D, memory 0, positional schemes.
 * 4. Parameter counts at the reference width of docs/mixers_abc.md.
 */
#include "layers/block.h"
#include "ops/abc.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-6
#define EQ_TOL 1e-12
static const double H_ = 1e-4;
static unsigned long long g_seed = 0xabc5eedull;

enum { WIN = MEGA_MIXER_ABC_WINDOW, LIN = MEGA_MIXER_ABC_LINFORMER, MLP = MEGA_MIXER_ABC_MLP };
enum { P_NONE, P_RIGHT, P_MID, P_LEAD, P_ALL }; /* pad pattern of sequence 1 (sequence 0 never padded, except P_ALL: sequence 1 is all pads) */

static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        double *w = P->data + s->offset;
        const char *nm = s->name, *leaf = strrchr(nm, '.') ? strrchr(nm, '.') + 1 : nm;
        if (strstr(nm, "norm.norm.")) {
            for (size_t j = 0; j < s->numel; j++)
                w[j] = !strcmp(leaf, "weight") ? 1 + 0.2 * tl_randn(seed)
                       : !strcmp(leaf, "scalar") ? 1 + 0.15 * tl_randn(seed)
                                                 : 0.1 * tl_randn(seed);
        } else if (!strcmp(leaf, "weight") && s->ndim == 2) {
            const double sd = 1.0 / sqrt((double)s->shape[1]);
            for (size_t j = 0; j < s->numel; j++) w[j] = sd * tl_randn(seed);
        } else {
            for (size_t j = 0; j < s->numel; j++) w[j] = 0.1 * tl_randn(seed);
        }
    }
}

static void fill_pad(uint8_t *pad, int pat, int T) {
    memset(pad, 0, 2 * (size_t)T);
    uint8_t *p1 = pad + T;
    switch (pat) {
    case P_RIGHT:
        for (int t = T * 4 / 7; t < T; t++) p1[t] = 1;
        break;
    case P_MID:
        p1[2] = 1, p1[T - 1] = 1, p1[T - 2] = 1;
        if (T > 20) p1[T / 2] = p1[T / 2 + 1] = 1;
        break;
    case P_LEAD:
        p1[0] = p1[1] = 1, p1[T - 1] = 1;
        break;
    case P_ALL:
        memset(p1, 1, (size_t)T);
        break;
    }
}

typedef struct {
    int kind, bidir, pad, pre, norm, F, drop, H, n, T, Nmax, mask;
} acfg;

static const acfg CFGS[] = {
    /* kind bidir pad pre norm F drop H n T Nmax mask */
    {WIN, 0, P_MID, 1, MEGA_NORM_LAYER, 6, 0, 2, 3, 7, 0, 1},
    {WIN, 0, P_RIGHT, 0, MEGA_NORM_RMS, 0, 0, 1, 3, 7, 0, 0},
    {WIN, 0, P_LEAD, 1, MEGA_NORM_SCALE, 6, 1, 2, 10, 7, 0, 1},
    {WIN, 0, P_MID, 0, MEGA_NORM_LAYER, 6, 1, 2, 2, 7, 0, 0},
    {LIN, 0, P_MID, 1, MEGA_NORM_LAYER, 6, 0, 2, 3, 7, 9, 1},
    {LIN, 0, P_LEAD, 0, MEGA_NORM_RMS, 0, 1, 1, 4, 7, 7, 1},
    {LIN, 1, P_RIGHT, 1, MEGA_NORM_SCALE, 6, 0, 2, 3, 7, 12, 1},
    {LIN, 1, P_ALL, 0, MEGA_NORM_LAYER, 6, 1, 2, 2, 7, 7, 1},
    {MLP, 0, P_MID, 1, MEGA_NORM_LAYER, 6, 0, 2, 3, 7, 0, 1},
    {MLP, 0, P_LEAD, 0, MEGA_NORM_SCALE, 0, 0, 1, 1, 7, 0, 1},
    {MLP, 0, P_RIGHT, 1, MEGA_NORM_RMS, 6, 1, 2, 4, 7, 0, 1},
    {MLP, 0, P_MID, 1, MEGA_NORM_LAYER, 0, 0, 1, 2, 70, 0, 1},
    {LIN, 0, P_MID, 0, MEGA_NORM_RMS, 0, 0, 1, 2, 70, 80, 1},
    {MLP, 1, P_RIGHT, 1, MEGA_NORM_LAYER, 6, 0, 2, 3, 7, 0, 1},
    {MLP, 1, P_ALL, 0, MEGA_NORM_RMS, 0, 1, 2, 2, 7, 0, 1},
    {MLP, 1, P_NONE, 1, MEGA_NORM_SCALE, 6, 0, 1, 5, 7, 0, 1},
};
#define NCFG ((int)(sizeof CFGS / sizeof CFGS[0]))

static void cfg_name(const acfg *a, char *buf, size_t n) {
    static const char *pn[] = {"nopad", "rightpad", "midpad", "leadpad", "allpad"};
    static const char *nn[] = {"LN", "SN", "RN", "BN"};
    snprintf(buf, n, "%s/%s/%s/%s/%s/F%d%s/H%d/n%d/T%d%s", mega_mixer_name((mega_mixer_kind)a->kind),
             a->bidir ? "bidir" : "causal", pn[a->pad], a->pre ? "pre" : "post", nn[a->norm], a->F,
             a->drop ? "/dropout" : "", a->H, a->n, a->T, a->kind == WIN && !a->mask ? "/literal" : "");
}

static void make_cfg(const acfg *a, mega_block_cfg *c) {
    memset(c, 0, sizeof *c);
    c->mixer = (mega_mixer_kind)a->kind;
    c->D = 4, c->Z = 1, c->E = 1, c->N = 0, c->F = a->F;
    c->chunk = -1, c->max_positions = 16;
    c->bidir = a->bidir, c->prenorm = a->pre, c->norm_affine = 1, c->norm = (mega_norm_type)a->norm;
    c->act = MEGA_ACT_SILU;
    c->heads = a->H, c->memory = a->n, c->max_len = a->Nmax;
    if (a->drop) c->dropout = c->attn_dropout = c->hidden_dropout = c->act_dropout = 0.1;
}

/* ---------------------------------------------------------------------------------------------
 * 1. finite differences of the block */
typedef struct {
    mega_block bl;
    mega_params P;
    mega_block_acts A;
    double *acts, *scr, *x, *Rw, *out, *dx;
    uint8_t *pad;
    int B, T;
    mega_run run;
    size_t RD;
} gctx;

static double block_loss(gctx *g) {
    if (mega_block_forward(&g->bl, g->P.data, &g->A, g->out, g->x, g->pad, g->B, g->T, &g->run, g->scr) != MEGA_OK)
        return NAN;
    double s = 0;
    for (size_t i = 0; i < g->RD; i++) s += g->out[i] * g->Rw[i];
    return s;
}
static double fd_at(gctx *g, double *p) {
    const double v = *p;
    double L[4];
    static const int ks[4] = {-2, -1, 1, 2};
    for (int i = 0; i < 4; i++) {
        *p = v + ks[i] * H_;
        L[i] = block_loss(g);
    }
    *p = v;
    return (8 * (L[2] - L[1]) - (L[3] - L[0])) / (12 * H_);
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

static double g_fd_worst;
static char g_fd_where[256];

static void run_fd(int ci) {
    const acfg *a = &CFGS[ci];
    char name[200];
    cfg_name(a, name, sizeof name);
    mega_block_cfg c;
    make_cfg(a, &c);
    gctx g;
    memset(&g, 0, sizeof g);
    g.B = 2, g.T = a->T;
    const int nt = mega_get_threads();
    g.run = (mega_run){1, 0, 0xfeedbeef12345ull + (uint64_t)ci, nt};
    mega_params_init(&g.P);
    if (mega_block_declare(&g.bl, &g.P, "layers.1.", &c) || mega_params_alloc(&g.P, 1)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        mega_params_free(&g.P);
        return;
    }
    if (a->kind == WIN) mega_abc_set_mask_empty(&g.bl.mix, a->mask);
    mega_rng rng;
    mega_rng_seed(&rng, 77 + (uint64_t)ci);
    mega_block_init(&g.bl, g.P.data, &rng);
    perturb(&g.P, &g_seed);
    g.RD = (size_t)g.B * g.T * c.D;
    g.acts = calloc(mega_block_acts_size(&g.bl, g.B, g.T), sizeof(double));
    g.scr = calloc(mega_block_scratch_size(&g.bl, g.B, g.T, nt), sizeof(double));
    mega_block_acts_point(&g.bl, &g.A, g.acts, g.B, g.T);
    g.x = calloc(g.RD, sizeof(double)), g.Rw = calloc(g.RD, sizeof(double));
    g.out = calloc(g.RD, sizeof(double)), g.dx = calloc(g.RD, sizeof(double));
    g.pad = calloc((size_t)g.B * g.T, 1);
    fill_pad(g.pad, a->pad, g.T);
    for (size_t i = 0; i < g.RD; i++) g.x[i] = tl_randn(&g_seed), g.Rw[i] = tl_randn(&g_seed);
    double L0 = block_loss(&g);
    TL_CHECK(isfinite(L0), "%s: forward runs (%s)", name, mega_last_error());
    double *w0 = malloc(g.P.total * sizeof(double));
    memcpy(w0, g.P.data, g.P.total * sizeof(double));
    if (a->drop) {
        uint64_t k0 = g.run.key;
        g.run.key = k0 ^ 0x99;
        double L1 = block_loss(&g);
        g.run.key = k0;
        TL_CHECK(fabs(L1 - L0) > 1e-6 * fabs(L0) && block_loss(&g) == L0,
                 "%s: dropout live and deterministic (L %.6f, other key %.6f)", name, L0, L1);
    }
    mega_params_zero_grad(&g.P);
    block_loss(&g);
    mega_block_backward(&g.bl, g.P.data, g.P.grad, &g.A, g.dx, g.Rw, g.x, g.pad, g.B, g.T, &g.run, g.scr);
    double gmax = 0;
    for (size_t i = 0; i < g.RD; i++) gmax = fmax(gmax, fabs(g.dx[i]));
    for (size_t i = 0; i < g.P.total; i++) gmax = fmax(gmax, fabs(g.P.grad[i]));
    const double floor_ = 1e-3 * gmax;
    double worst = 0;
    char where[160] = "";
    double *fd = calloc(g.RD, sizeof(double));
    for (size_t i = 0; i < g.RD; i++) fd[i] = fd_at(&g, &g.x[i]);
    double e = tensor_err(g.dx, fd, g.RD, floor_);
    if (e > worst) worst = e, snprintf(where, sizeof where, "x");
    if (ci == 0) { /* canary: an error of 1e-5 of the largest gradient is caught */
        g.dx[3] += 1e-5 * gmax;
        TL_CHECK(tensor_err(g.dx, fd, g.RD, floor_) > 5 * TOL, "canary: a gradient off by 1e-5 is flagged");
        g.dx[3] -= 1e-5 * gmax;
    }
    free(fd);
    int ntens = 0, nzero = 0;
    for (int i = 0; i < g.P.n; i++) {
        const mega_pspec *s = &g.P.specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        double *fw = calloc(s->numel, sizeof(double));
        double gm = 0;
        for (size_t j = 0; j < s->numel; j++) {
            fw[j] = fd_at(&g, &g.P.data[s->offset + j]);
            gm = fmax(gm, fabs(g.P.grad[s->offset + j]));
        }
        e = tensor_err(g.P.grad + s->offset, fw, s->numel, floor_);
        if (e > worst) worst = e, snprintf(where, sizeof where, "%s", s->name);
        /* n = 1: the slot softmax is constant, so q, k and the key control get no gradient */
        const int dead = a->n == 1 && (strstr(s->name, "q_proj") || strstr(s->name, "k_proj") ||
                                       strstr(s->name, "phi_k") || strstr(s->name, "compress_k"));
        if (strstr(s->name, "mixer.") && (gm == 0) != dead) nzero++;
        ntens++;
        free(fw);
    }
    TL_CHECK(worst < TOL && gmax > 0, "FD %s: %d tensors + x, worst rel err %.2e (%s)", name, ntens, worst, where);
    TL_CHECK(nzero == 0, "FD %s: every mixer tensor has a non-zero gradient, except q, k, phi_k when n = 1 (%d wrong)", name, nzero);
    if (worst > g_fd_worst) g_fd_worst = worst, snprintf(g_fd_where, sizeof g_fd_where, "%s: %s", name, where);
    TL_CHECK(!memcmp(w0, g.P.data, g.P.total * sizeof(double)), "%s: parameters unchanged by the forwards", name);
    free(w0);
    free(g.acts), free(g.scr), free(g.x), free(g.Rw), free(g.out), free(g.dx), free(g.pad);
    mega_params_free(&g.P);
}

/* ---------------------------------------------------------------------------------------------
 * 2. naive forms */
static void proj(double *y, const double *x, const double *W, const double *b, int R, int In, int O) {
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < In; i++) s += x[(size_t)r * In + i] * W[(size_t)o * In + i];
            y[(size_t)r * O + o] = s;
        }
}
static const double *param(const mega_params *P, const char *name) {
    const mega_pspec *s = mega_params_find(P, name);
    if (!s) {
        TL_CHECK(0, "parameter %s declared", name);
        return NULL;
    }
    return P->data + s->offset;
}

/* the mixer output computed naively: y [B,T,D] */
static void naive(const mega_block_cfg *c, int mask, const mega_params *P, const double *x, const uint8_t *pad, int B,
                  int T, double *y) {
    const int D = c->D, H = c->heads, n = c->memory, d = D / H, R = B * T, Hn = H * n;
    double *q = malloc(sizeof(double) * R * D), *k = malloc(sizeof(double) * R * D), *v = malloc(sizeof(double) * R * D);
    double *o = calloc((size_t)R * D, sizeof(double));
    double *lk = malloc(sizeof(double) * R * Hn), *lv = malloc(sizeof(double) * R * Hn);
    proj(q, x, param(P, "mixer.q_proj.weight"), param(P, "mixer.q_proj.bias"), R, D, D);
    proj(k, x, param(P, "mixer.k_proj.weight"), param(P, "mixer.k_proj.bias"), R, D, D);
    proj(v, x, param(P, "mixer.v_proj.weight"), param(P, "mixer.v_proj.bias"), R, D, D);
    if ((int)c->mixer == MLP) {
        proj(lk, x, param(P, "mixer.phi_k.weight"), NULL, R, D, Hn);
        proj(lv, x, param(P, "mixer.phi_v.weight"), NULL, R, D, Hn);
    }
    const double *E = (int)c->mixer == LIN ? param(P, "mixer.compress_k.weight") : NULL;
    const double *F = (int)c->mixer == LIN ? param(P, "mixer.compress_v.weight") : NULL;
    const double sc = 1 / sqrt((double)d);
    double *Km = malloc(sizeof(double) * n * d), *Vm = malloc(sizeof(double) * n * d), *s = malloc(sizeof(double) * (T + n + 1));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const size_t r = (size_t)b * T + t;
                const double *qt = q + r * D + h * d;
                double *ot = o + r * D + h * d;
                if ((int)c->mixer == WIN) { /* sliding-window softmax attention over u in (t-n, t] */
                    double mx = -INFINITY;
                    int nempty = 0;
                    for (int u = t - n + 1; u <= t; u++) {
                        int i = u - (t - n + 1);
                        if (u < 0 || (pad && pad[(size_t)b * T + u])) {
                            s[i] = NAN, nempty++;
                            continue;
                        }
                        double z = 0;
                        for (int e = 0; e < d; e++) z += qt[e] * k[((size_t)b * T + u) * D + h * d + e];
                        s[i] = z * sc, mx = fmax(mx, s[i]);
                    }
                    if (!mask && nempty) mx = fmax(mx, 0);
                    double den = mask ? 0 : nempty * exp(-mx);
                    for (int i = 0; i < n; i++)
                        if (!isnan(s[i])) den += exp(s[i] - mx);
                    for (int i = 0; i < n; i++) {
                        if (isnan(s[i])) continue;
                        const int u = t - n + 1 + i;
                        for (int e = 0; e < d; e++) ot[e] += exp(s[i] - mx) / den * v[((size_t)b * T + u) * D + h * d + e];
                    }
                    continue;
                }
                /* the memory K~_t, V~_t materialised for this t */
                const int last = c->bidir ? T - 1 : t;
                for (int mem = 0; mem < 2; mem++) {
                    double *M = mem ? Vm : Km;
                    const double *src = mem ? v : k;
                    memset(M, 0, sizeof(double) * n * d);
                    for (int j = 0; j < n; j++) {
                        double lse = -INFINITY;
                        if ((int)c->mixer == MLP) { /* log sum_i exp(l_ij) over the scope */
                            const double *l = mem ? lv : lk;
                            double mx = -INFINITY;
                            for (int i = 0; i <= last; i++)
                                if (!pad || !pad[(size_t)b * T + i]) mx = fmax(mx, l[((size_t)b * T + i) * Hn + h * n + j]);
                            if (mx == -INFINITY) continue;
                            double z = 0;
                            for (int i = 0; i <= last; i++)
                                if (!pad || !pad[(size_t)b * T + i]) z += exp(l[((size_t)b * T + i) * Hn + h * n + j] - mx);
                            lse = mx + log(z);
                        }
                        for (int i = 0; i <= last; i++) {
                            const size_t ri = (size_t)b * T + i;
                            if (pad && pad[ri]) continue;
                            double phi;
                            if ((int)c->mixer == MLP)
                                phi = exp((mem ? lv : lk)[ri * Hn + h * n + j] - lse);
                            else
                                phi = (mem ? F : E)[(size_t)j * c->max_len + i];
                            for (int e = 0; e < d; e++) M[j * d + e] += phi * src[ri * D + h * d + e];
                        }
                    }
                }
                double mx = -INFINITY;
                for (int j = 0; j < n; j++) {
                    double z = 0;
                    for (int e = 0; e < d; e++) z += qt[e] * Km[j * d + e];
                    s[j] = z * sc, mx = fmax(mx, s[j]);
                }
                double den = 0;
                for (int j = 0; j < n; j++) den += exp(s[j] - mx);
                for (int j = 0; j < n; j++)
                    for (int e = 0; e < d; e++) ot[e] += exp(s[j] - mx) / den * Vm[j * d + e];
            }
    proj(y, o, param(P, "mixer.out_proj.weight"), param(P, "mixer.out_proj.bias"), R, D, D);
    free(q), free(k), free(v), free(o), free(lk), free(lv), free(Km), free(Vm), free(s);
}

typedef struct {
    int kind, bidir, pad, H, n, T, Nmax, mask;
    double phi_scale;
} ecfg;

static void run_equiv(const ecfg *a) {
    acfg ac = {a->kind, a->bidir, a->pad, 1, MEGA_NORM_LAYER, 0, 0, a->H, a->n, a->T, a->Nmax, a->mask};
    char name[200];
    cfg_name(&ac, name, sizeof name);
    if (a->phi_scale != 1) snprintf(name + strlen(name), sizeof name - strlen(name), "/W_phi x%g", a->phi_scale);
    mega_block_cfg c;
    make_cfg(&ac, &c);
    c.D = 8;
    mega_params P;
    mega_params_init(&P);
    mega_block bl;
    if (mega_block_declare(&bl, &P, "", &c) || mega_params_alloc(&P, 1)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        mega_params_free(&P);
        return;
    }
    if (a->kind == WIN) mega_abc_set_mask_empty(&bl.mix, a->mask);
    mega_rng rng;
    mega_rng_seed(&rng, 5);
    mega_block_init(&bl, P.data, &rng);
    perturb(&P, &g_seed);
    for (int i = 0; i < P.n; i++)
        if (strstr(P.specs[i].name, "mixer.phi_"))
            for (size_t j = 0; j < P.specs[i].numel; j++) P.data[P.specs[i].offset + j] *= a->phi_scale;
    const int B = 2, T = a->T, nt = mega_get_threads();
    const size_t RD = (size_t)B * T * c.D;
    const mega_mixer *mx = &bl.mix;
    mega_mixer_acts A;
    double *acts = calloc(mx->ops->acts(mx, &A, NULL, B, T), sizeof(double));
    mx->ops->acts(mx, &A, acts, B, T);
    double *scr = calloc(mx->ops->scratch(mx, B, T, nt), sizeof(double));
    double *x = malloc(RD * sizeof(double)), *y = malloc(RD * sizeof(double)), *yr = malloc(RD * sizeof(double));
    double *dy = malloc(RD * sizeof(double)), *dx = malloc(RD * sizeof(double));
    uint8_t *pad = malloc((size_t)B * T);
    fill_pad(pad, a->pad, T);
    for (size_t i = 0; i < RD; i++) x[i] = tl_randn(&g_seed), dy[i] = tl_randn(&g_seed);
    mega_run run = {1, 0, 1, nt};
    mega_status st = mx->ops->forward(mx, P.data, &A, y, x, a->pad ? pad : NULL, B, T, &run, scr);
    naive(&c, a->mask, &P, x, a->pad ? pad : NULL, B, T, yr);
    tl_err e = tl_compare(y, yr, RD);
    TL_CHECK(st == MEGA_OK && e.rel < EQ_TOL, "equivalence %s: mixer == naive form, rel err %.2e", name, e.rel);
    if (a->phi_scale != 1) {
        mega_params_zero_grad(&P);
        mx->ops->backward(mx, P.data, P.grad, &A, dx, dy, x, a->pad ? pad : NULL, B, T, &run, scr);
        int finite = 1;
        for (size_t i = 0; i < RD; i++) finite &= isfinite(dx[i]);
        for (size_t i = 0; i < P.total; i++) finite &= isfinite(P.grad[i]);
        TL_CHECK(finite, "%s: backward finite with large logits", name);
    }
    free(acts), free(scr), free(x), free(y), free(yr), free(dy), free(dx), free(pad);
    mega_params_free(&P);
}

static const ecfg ECFGS[] = {
    /* kind bidir pad H n T Nmax mask phi_scale */
    {WIN, 0, P_NONE, 2, 4, 13, 0, 1, 1},    {WIN, 0, P_MID, 2, 5, 40, 0, 1, 1},
    {WIN, 0, P_MID, 1, 3, 13, 0, 0, 1},     {WIN, 0, P_LEAD, 4, 16, 13, 0, 0, 1},
    {WIN, 0, P_RIGHT, 2, 1, 13, 0, 1, 1},   {MLP, 0, P_NONE, 2, 4, 13, 0, 1, 1},
    {MLP, 0, P_MID, 2, 3, 75, 0, 1, 1},     {MLP, 0, P_LEAD, 1, 6, 13, 0, 1, 1},
    {MLP, 0, P_MID, 2, 3, 40, 0, 1, 300},   {MLP, 1, P_RIGHT, 2, 4, 13, 0, 1, 1},
    {MLP, 1, P_ALL, 2, 3, 13, 0, 1, 1},     {MLP, 1, P_MID, 1, 2, 13, 0, 1, 300},
    {LIN, 0, P_NONE, 2, 4, 13, 13, 1, 1},   {LIN, 0, P_MID, 2, 3, 75, 90, 1, 1},
    {LIN, 1, P_RIGHT, 2, 4, 13, 20, 1, 1},  {LIN, 1, P_ALL, 1, 3, 13, 13, 1, 1},
};

/* ---------------------------------------------------------------------------------------------
 * 3. errors, 4. parameter counts */
static mega_status try_declare(mega_block_cfg *c, size_t *count) {
    mega_params P;
    mega_params_init(&P);
    mega_block bl;
    mega_status st = mega_block_declare(&bl, &P, "", c);
    if (count) *count = 0;
    if (st == MEGA_OK && count) {
        size_t s = 0;
        for (int i = 0; i < P.n; i++) s += P.specs[i].numel;
        *count = s;
    }
    mega_params_free(&P);
    return st;
}

static void run_errors(void) {
    acfg base = {LIN, 0, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 2, 3, 9, 8, 1};
    mega_block_cfg c;
    make_cfg(&base, &c);
    /* Linformer beyond max-len */
    mega_params P;
    mega_params_init(&P);
    mega_block bl;
    TL_CHECK(mega_block_declare(&bl, &P, "", &c) == MEGA_OK && mega_params_alloc(&P, 0) == MEGA_OK, "linformer declares");
    const int B = 1, T = 9, nt = 1;
    double *acts = calloc(mega_block_acts_size(&bl, B, T), sizeof(double));
    double *scr = calloc(mega_block_scratch_size(&bl, B, T, nt), sizeof(double));
    double *x = calloc((size_t)B * T * c.D, sizeof(double)), *y = calloc((size_t)B * T * c.D, sizeof(double));
    mega_block_acts A;
    mega_block_acts_point(&bl, &A, acts, B, T);
    mega_run run = {0, 0, 0, nt};
    mega_status st = mega_block_forward(&bl, P.data, &A, y, x, NULL, B, T, &run, scr);
    TL_CHECK(st == MEGA_ERR_INVALID && strstr(mega_last_error(), "max-len"),
             "linformer: T = 9 > max-len 8 is MEGA_ERR_INVALID (%s)", mega_last_error());
    st = mega_block_forward(&bl, P.data, &A, y, x, NULL, B, 8, &run, scr);
    TL_CHECK(st == MEGA_OK, "linformer: T = max-len runs");
    free(acts), free(scr), free(x), free(y);
    mega_params_free(&P);

    acfg w = {WIN, 1, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 2, 3, 9, 0, 1};
    make_cfg(&w, &c);
    st = try_declare(&c, NULL);
    TL_CHECK(st == MEGA_ERR_UNSUPPORTED && strstr(mega_last_error(), "bidirectional"),
             "bidirectional abc-window refused: %s", mega_last_error());
    acfg m = {MLP, 0, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 3, 3, 9, 0, 1};
    make_cfg(&m, &c);
    TL_CHECK(try_declare(&c, NULL) == MEGA_ERR_INVALID, "heads 3 not dividing D 4 refused: %s", mega_last_error());
    m.H = 2, m.n = 0;
    make_cfg(&m, &c);
    TL_CHECK(try_declare(&c, NULL) == MEGA_ERR_INVALID, "memory 0 refused: %s", mega_last_error());
    m.n = 2;
    make_cfg(&m, &c);
    c.pos = MEGA_POS_ROPE;
    TL_CHECK(try_declare(&c, NULL) == MEGA_ERR_UNSUPPORTED, "positional scheme refused: %s", mega_last_error());
    acfg l0 = {LIN, 0, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 2, 3, 9, 0, 1};
    make_cfg(&l0, &c);
    TL_CHECK(try_declare(&c, NULL) == MEGA_ERR_INVALID, "linformer without max-len refused: %s", mega_last_error());
}

static void run_counts(void) {
    /* docs/mixers_abc.md: D = 256, heads 8, F = 512, memory 32, max-len 1024; layernorm */
    const size_t D = 256, H = 8, F = 512, n = 32, N = 1024;
    const size_t proj = 4 * (D * D + D), wrap = 2 * D, ffn = 2 * D + D * F + F + F * D + D;
    const size_t want[3] = {proj + wrap + ffn, proj + 2 * n * N + wrap + ffn, proj + 2 * H * n * D + wrap + ffn};
    static const int kinds[3] = {WIN, LIN, MLP};
    for (int i = 0; i < 3; i++) {
        acfg a = {kinds[i], 0, P_NONE, 1, MEGA_NORM_LAYER, 512, 0, 8, 32, 9, 1024, 1};
        mega_block_cfg c;
        make_cfg(&a, &c);
        c.D = 256;
        size_t got = 0;
        mega_status st = try_declare(&c, &got);
        TL_CHECK(st == MEGA_OK && got == want[i], "%s block parameters at D=256 H=8 F=512 n=32 N=1024: %zu (formula %zu)",
                 mega_mixer_name((mega_mixer_kind)kinds[i]), got, want[i]);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int i = 0; i < NCFG; i++) run_fd(i);
    printf("NOTE abc FD: %d configurations, worst rel err %.2e (%s)\n", NCFG, g_fd_worst, g_fd_where);
    for (size_t i = 0; i < sizeof ECFGS / sizeof ECFGS[0]; i++) run_equiv(&ECFGS[i]);
    run_errors();
    run_counts();
    return tl_finish();
}
