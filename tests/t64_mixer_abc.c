/*
 * The ABC mixers (Peng et al., "ABC: Attention with Bounded-memory Control", arXiv 2110.02488;
 * src/layers/abc.c, src/ops/abc.c; docs/mixers.md "ABC mixers") in double precision (libmega64).
 *
 * 1. Finite differences of the whole block (ABC core inside the residual sublayer, optional
 *    NFFN) with the shared driver bt_fd_check, training mode: every element of every trainable
 *    tensor and of x (one check per tensor), fourth-order central differences (h = 1e-4), plus
 *    random directional derivatives; loss = sum(out * R). Configurations: abc-window (masked and
 *    literal empty slots, n < T and n > T), abc-linformer and abc-mlp, causal and
 *    bidirectional, interior / trailing / leading pads, a bidirectional row made only of pads,
 *    heads 1 and 2, memory 1..10, pre/post norm, with and without the FFN, attention + sublayer
 *    dropout, and a causal length 70 > 2 x MEGA_ABC_SEG (several checkpoint segments in the
 *    reverse scan). Error (fd.h): per tensor max |g - fd| / max(max|g|, max|fd|, 1e-3 x the
 *    largest gradient); 1e-6. Also: every mixer tensor has a non-zero gradient (except q, k and
 *    the key control when n = 1, where the slot softmax is constant).
 * 2. Equivalences, mixer alone, against naive forms computed here from the parameters:
 *    - abc-window with masked empty slots == sliding-window softmax attention of width n
 *      (keys t-n < u <= t, pad keys masked); the literal form == softmax with one logit-0 entry
 *      per empty slot;
 *    - causal ABC-MLP (the logaddexp recurrence) == the naive memory materialised for every t:
 *      K~_t[j] = sum_{i<=t} softmax_{i<=t}(l_{.j})_i k_i; bidirectional likewise over all valid i
 *      (the normalised cumulative form of fla-org/flash-linear-attention fla/ops/abc/naive.py);
 *    - Linformer: causal K~_t = sum_{i<=t} E[:, i] k_i^T, bidirectional E[:, :L] K (pads zeroed);
 *    also with logits of size ~100 (W_phi scaled by 300): the recurrence stays exact and
 *    finite, and its backward is finite. Tolerance 1e-12 of max |y|.
 * 3. Defaults and errors: heads 0, memory-size 0 and Linformer's max-len 0 take the mixer
 *    defaults (mega_block_config_resolve); Linformer with T > max-len (MEGA_ERR_INVALID),
 *    bidirectional abc-window (MEGA_ERR_UNSUPPORTED), heads not dividing D, a negative memory
 *    size or max-len, positional schemes.
 * 4. Parameter counts at the reference width of docs/mixers.md (ABC).
 */
#include "blocktest.h"
#include "ops/abc.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EQ_TOL 1e-12

enum { WIN = MEGA_MIXER_ABC_WINDOW, LIN = MEGA_MIXER_ABC_LINFORMER, MLP = MEGA_MIXER_ABC_MLP };
enum { P_NONE = BT_PAD_NONE, P_RIGHT = BT_PAD_RIGHT, P_MID = BT_PAD_MID, P_LEAD = BT_PAD_LEFT, P_ALL = BT_PAD_ALL };

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

static void make_cfg(const acfg *a, mega_block_config *c) {
    mega_block_config_default(c);
    c->mixer = (mega_mixer_kind)a->kind;
    c->embed_dim = 4, c->ffn_dim = a->F, c->chunk_size = -1;
    c->bidirectional = a->bidir, c->prenorm = a->pre, c->norm_type = (mega_norm_type)a->norm;
    c->heads = a->H, c->memory_size = a->n, c->max_len = a->Nmax;
    if (a->drop) c->dropout = c->attention_dropout = c->hidden_dropout = c->activation_dropout = 0.1f;
}

/* the block of a configuration: abc-window's empty slots masked or literal (a mixer setting,
 * not a configuration field) */
static int open_abc(bt_ctx *c, const acfg *a, const mega_block_config *cfg, int core, uint64_t seed) {
    const bt_opts o = {.T = a->T, .pad = a->pad, .seed = seed, .core = core, .prefix = "layers.1.",
                       .tag = a->kind == WIN && !a->mask ? " literal" : "", .setup = mega_abc_set_mask_empty,
                       .setup_arg = a->mask};
    return bt_open(c, cfg, &o);
}

/* ---------------------------------------------------------------------------------------------
 * 1. finite differences of the block */
static bt_worst g_fd_worst;

static void run_fd(int ci) {
    const acfg *a = &CFGS[ci];
    mega_block_config cfg;
    make_cfg(a, &cfg);
    bt_ctx c;
    if (open_abc(&c, a, &cfg, 0, 6000 + (uint64_t)ci)) return;
    const bt_fd_opts fo = {.entries = 1, .directional = 1, .canary = ci == 0, .worst = &g_fd_worst};
    bt_fd_check(&c, &fo);
    /* n = 1: the slot softmax is constant, so q, k and the key control get no gradient */
    int wrong = 0;
    for (int i = 0; i < c.P.n; i++) {
        const mega_pspec *s = &c.P.specs[i];
        double gm = 0;
        for (size_t j = 0; j < s->numel; j++) gm = fmax(gm, fabs(c.P.grad[s->offset + j]));
        const int dead = a->n == 1 && (strstr(s->name, "q_proj") || strstr(s->name, "k_proj") ||
                                       strstr(s->name, "phi_k") || strstr(s->name, "compress_k"));
        if (strstr(s->name, "mixer.") && (gm == 0) != dead) wrong++;
    }
    TL_CHECK(wrong == 0, "FD %s: every mixer tensor has a non-zero gradient, except q, k, phi_k when n = 1 (%d wrong)", c.name,
             wrong);
    bt_close(&c);
}

/* ---------------------------------------------------------------------------------------------
 * 2. naive forms */

/* the mixer output computed naively: y [B,T,D] */
static void naive(const mega_block_config *c, int mask, const mega_params *P, const double *x, const uint8_t *pad, int B,
                  int T, double *y) {
    const int D = c->embed_dim, H = c->heads, n = c->memory_size, d = D / H, R = B * T, Hn = H * n;
    double *q = malloc(sizeof(double) * R * D), *k = malloc(sizeof(double) * R * D), *v = malloc(sizeof(double) * R * D);
    double *o = calloc((size_t)R * D, sizeof(double));
    double *lk = malloc(sizeof(double) * R * Hn), *lv = malloc(sizeof(double) * R * Hn);
    bt_linear(q, x, bt_param(P, "mixer.q_proj.weight"), bt_param(P, "mixer.q_proj.bias"), R, D, D);
    bt_linear(k, x, bt_param(P, "mixer.k_proj.weight"), bt_param(P, "mixer.k_proj.bias"), R, D, D);
    bt_linear(v, x, bt_param(P, "mixer.v_proj.weight"), bt_param(P, "mixer.v_proj.bias"), R, D, D);
    if ((int)c->mixer == MLP) {
        bt_linear(lk, x, bt_param(P, "mixer.phi_k.weight"), NULL, R, D, Hn);
        bt_linear(lv, x, bt_param(P, "mixer.phi_v.weight"), NULL, R, D, Hn);
    }
    const double *E = (int)c->mixer == LIN ? bt_param(P, "mixer.compress_k.weight") : NULL;
    const double *F = (int)c->mixer == LIN ? bt_param(P, "mixer.compress_v.weight") : NULL;
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
                const int last = c->bidirectional ? T - 1 : t;
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
    bt_linear(y, o, bt_param(P, "mixer.out_proj.weight"), bt_param(P, "mixer.out_proj.bias"), R, D, D);
    free(q), free(k), free(v), free(o), free(lk), free(lv), free(Km), free(Vm), free(s);
}

typedef struct {
    int kind, bidir, pad, H, n, T, Nmax, mask;
    double phi_scale;
} ecfg;

/* the mixer alone (training mode without dropout) against the naive form */
static void run_equiv(const ecfg *a) {
    const acfg ac = {a->kind, a->bidir, a->pad, 1, MEGA_NORM_LAYER, 0, 0, a->H, a->n, a->T, a->Nmax, a->mask};
    mega_block_config cfg;
    make_cfg(&ac, &cfg);
    cfg.embed_dim = 8;
    bt_ctx c;
    if (open_abc(&c, &ac, &cfg, 1, 7000 + (uint64_t)a->T * 3 + (uint64_t)a->n)) return;
    for (int i = 0; i < c.P.n; i++)
        if (strstr(c.P.specs[i].name, "mixer.phi_"))
            for (size_t j = 0; j < c.P.specs[i].numel; j++) c.P.data[c.P.specs[i].offset + j] *= a->phi_scale;
    double *yr = malloc(c.RD * sizeof(double));
    const mega_status st = bt_forward(&c);
    naive(&c.cfg, a->mask, &c.P, c.x, c.pm, c.B, c.T, yr);
    const tl_err e = tl_compare(c.out, yr, c.RD);
    TL_CHECK(st == MEGA_OK && e.rel < EQ_TOL, "equivalence %s%s: mixer == naive form, rel err %.2e", c.name,
             a->phi_scale != 1 ? " W_phi x300" : "", e.rel);
    if (a->phi_scale != 1) {
        bt_backward(&c);
        int finite = 1;
        for (size_t i = 0; i < c.RD; i++) finite &= isfinite(c.dx[i]);
        for (size_t i = 0; i < c.P.total; i++) finite &= isfinite(c.P.grad[i]);
        TL_CHECK(finite, "%s: backward finite with large logits", c.name);
    }
    free(yr);
    bt_close(&c);
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
 * 3. defaults and errors, 4. parameter counts */
static void run_linformer_len(void) {
    const acfg a = {LIN, 0, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 2, 3, 9, 8, 1};
    mega_block_config c;
    make_cfg(&a, &c);
    for (int T = 9; T >= 8; T--) {
        const bt_opts o = {.B = 1, .T = T, .seed = 3};
        bt_ctx g;
        if (bt_open(&g, &c, &o)) return;
        g.run.training = 0;
        const mega_status st = bt_forward(&g);
        if (T == 9)
            TL_CHECK(st == MEGA_ERR_INVALID && strstr(mega_last_error(), "max-len"),
                     "linformer: T = 9 > max-len 8 is MEGA_ERR_INVALID (%s)", mega_last_error());
        else
            TL_CHECK(st == MEGA_OK, "linformer: T = max-len runs");
        bt_close(&g);
    }
}

static void run_errors(void) {
    run_linformer_len();
    mega_block_config c, r;
    const acfg w = {WIN, 1, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 2, 3, 9, 0, 1};
    make_cfg(&w, &c);
    mega_status st = bt_try_declare(&c, NULL, NULL);
    TL_CHECK(st == MEGA_ERR_UNSUPPORTED && strstr(mega_last_error(), "bidirectional"), "bidirectional abc-window refused: %s",
             mega_last_error());
    acfg m = {MLP, 0, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 3, 3, 9, 0, 1};
    make_cfg(&m, &c);
    TL_CHECK(bt_try_declare(&c, NULL, NULL) == MEGA_ERR_INVALID, "heads 3 not dividing D 4 refused: %s", mega_last_error());
    m.H = 0, m.n = 0;
    make_cfg(&m, &c);
    st = bt_try_declare(&c, &r, NULL);
    TL_CHECK(st == MEGA_OK && r.heads == 4 && r.memory_size == 32, "heads 0 and memory-size 0: the defaults 4 (D 4) and 32 (got %d, %d)",
             r.heads, r.memory_size);
    c.memory_size = -1;
    TL_CHECK(bt_try_declare(&c, NULL, NULL) == MEGA_ERR_INVALID, "memory-size -1 refused: %s", mega_last_error());
    m.H = 2, m.n = 2;
    make_cfg(&m, &c);
    c.pos = MEGA_POS_ROPE;
    TL_CHECK(bt_try_declare(&c, NULL, NULL) == MEGA_ERR_UNSUPPORTED, "positional scheme refused: %s", mega_last_error());
    const acfg l0 = {LIN, 0, P_NONE, 1, MEGA_NORM_LAYER, 0, 0, 2, 3, 9, 0, 1};
    make_cfg(&l0, &c);
    st = bt_try_declare(&c, &r, NULL);
    TL_CHECK(st == MEGA_OK && r.max_len == 1024, "linformer with max-len 0 and no training length: max-len 1024 (got %d)",
             r.max_len);
    c.train_len = 96;
    st = bt_try_declare(&c, &r, NULL);
    TL_CHECK(st == MEGA_OK && r.max_len == 96, "linformer with max-len 0: max-len = the training length 96 (got %d)", r.max_len);
    c.max_len = -1;
    TL_CHECK(bt_try_declare(&c, NULL, NULL) == MEGA_ERR_INVALID, "linformer with max-len -1 refused: %s", mega_last_error());
}

static void run_counts(void) {
    /* docs/mixers.md (ABC): D = 256, heads 8, F = 512, memory 32, max-len 1024; layernorm */
    const size_t D = 256, H = 8, F = 512, n = 32, N = 1024;
    const size_t proj = 4 * (D * D + D), wrap = 2 * D, ffn = 2 * D + D * F + F + F * D + D;
    const size_t want[3] = {proj + wrap + ffn, proj + 2 * n * N + wrap + ffn, proj + 2 * H * n * D + wrap + ffn};
    static const int kinds[3] = {WIN, LIN, MLP};
    for (int i = 0; i < 3; i++) {
        const acfg a = {kinds[i], 0, P_NONE, 1, MEGA_NORM_LAYER, 512, 0, 8, 32, 9, 1024, 1};
        mega_block_config c;
        make_cfg(&a, &c);
        c.embed_dim = 256;
        size_t got = 0;
        const mega_status st = bt_try_declare(&c, NULL, &got);
        TL_CHECK(st == MEGA_OK && got == want[i], "%s block parameters at D=256 H=8 F=512 n=32 N=1024: %zu (formula %zu)",
                 mega_mixer_name((mega_mixer_kind)kinds[i]), got, want[i]);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int i = 0; i < NCFG; i++) run_fd(i);
    printf("NOTE abc FD: %d configurations, worst rel err %.2e (%s)\n", NCFG, g_fd_worst.v, g_fd_worst.where);
    for (size_t i = 0; i < sizeof ECFGS / sizeof ECFGS[0]; i++) run_equiv(&ECFGS[i]);
    run_errors();
    run_counts();
    return tl_finish();
}
