/*
 * Finite-difference checks (double precision, libmega64) of the AFT family and gMLP mixers
 * (AFT: Zhai et al., arXiv 2105.14103; time-weighted AFT: PENG Bo's article with the RWKV-v1
 * RWKV_TimeMix parameterisation; gMLP: Liu et al., arXiv 2105.08050 §2.1; docs/mixers.md "AFT
 * family and gMLP token mixers"): the mixer core alone (bt_opts.core: the block's norm and
 * residual are not involved), loss = sum(core(x) * R), through the shared driver bt_fd_check.
 *
 * Configurations: aft-full, aft-local (window 3, 5, 70 > block, 200 > T), aft-simple, aft-tw
 * (1-4 heads; max-len -1 = the pure recurrence, and max-len > 0 with the time_beta /
 * time_gamma position factors, also T > max-len where they are clamped to the last learned
 * position), gmlp (1 and 3 heads); causal and bidirectional; no pads, right pads, a sequence
 * made only of pads, left pads (causal queries with no visible key) with an interior pad;
 * short sequences (one block of the pair kernel) and T = 150 (three blocks: block borders, the
 * prefix / suffix aggregates of aft-local, bands that span blocks).
 * Checked: dL/dx and every trainable tensor of the mixer, one check per tensor, every element
 * (x and tensors above 600 elements: 250 random elements), fourth-order central differences
 * h = 1e-4, plus three random directional derivatives over the mixer's parameters and one over
 * x; tolerance 1e-6 (fd.h error measure).
 * Also: the parameters are untouched by forward/backward, the results do not depend on the
 * thread count (1 thread vs all, bit-identical), an over-long sequence is refused with a clear
 * MEGA_ERR_INVALID by the mixers with absolute-position tables (aft-full, aft-local, gmlp), and
 * the pair kernel's exact fallback (scaled denominators that underflow, logits spread over
 * +-1000; a project extension, docs/mixers.md) agrees with the exact softmax definition and
 * with finite differences, and actually runs (flags set).
 */
#include "blocktest.h"
#include "ops/aft.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mega_mixer_kind kind;
    int bidir, pad, T, D, heads, window, max_len, E;
} fcfg;

#define FU MEGA_MIXER_AFT_FULL
#define LO MEGA_MIXER_AFT_LOCAL
#define SI MEGA_MIXER_AFT_SIMPLE
#define TW MEGA_MIXER_AFT_TW
#define GM MEGA_MIXER_GMLP
enum { P0 = BT_PAD_NONE, PR = BT_PAD_RIGHT, PA = BT_PAD_ALL, PL = BT_PAD_LEFT };

/* kind bidir pad T D heads window max_len E */
static const fcfg CFGS[] = {
    {FU, 0, P0, 9, 4, 1, 0, 12, 8},     {FU, 1, PR, 9, 4, 1, 0, 9, 8},     {FU, 0, PL, 9, 3, 1, 0, 10, 8},
    {FU, 0, PR, 150, 3, 1, 0, 150, 8},  {FU, 1, PR, 150, 3, 1, 0, 160, 8}, {FU, 1, PA, 70, 2, 1, 0, 70, 8},
    {LO, 0, PR, 9, 4, 1, 3, 10, 8},     {LO, 1, PR, 9, 4, 1, 3, 9, 8},     {LO, 0, PL, 9, 3, 1, 2, 9, 8},
    {LO, 0, PR, 150, 3, 1, 5, 150, 8},  {LO, 1, PR, 150, 3, 1, 5, 150, 8}, {LO, 0, P0, 150, 2, 1, 70, 150, 8},
    {LO, 1, PR, 150, 2, 1, 70, 152, 8}, {LO, 1, PA, 40, 3, 1, 200, 40, 8}, {LO, 0, PR, 130, 2, 1, 1, 130, 8},
    {SI, 0, PR, 9, 4, 1, 0, 0, 8},      {SI, 1, PR, 9, 4, 1, 0, 0, 8},     {SI, 0, PL, 9, 3, 1, 0, 0, 8},
    {SI, 1, PA, 150, 3, 1, 0, 0, 8},    {TW, 0, PR, 9, 4, 2, 0, -1, 8},    {TW, 1, PR, 9, 4, 2, 0, -1, 8},
    {TW, 0, PR, 9, 4, 2, 0, 10, 8},     {TW, 1, PR, 9, 4, 1, 0, 12, 8},    {TW, 0, PL, 9, 4, 4, 0, 9, 8},
    {TW, 1, PA, 40, 3, 3, 0, 40, 8},    {TW, 0, P0, 100, 4, 4, 0, -1, 8},  {TW, 1, PR, 100, 2, 2, 0, 100, 8},
    {TW, 0, PR, 9, 4, 2, 0, 6, 8},      {TW, 1, PL, 9, 4, 1, 0, 5, 8},     {GM, 0, PR, 9, 4, 1, 0, 10, 6},
    {GM, 1, PR, 9, 4, 1, 0, 9, 6},      {GM, 0, P0, 9, 3, 3, 0, 9, 6},     {GM, 1, PA, 9, 3, 3, 0, 11, 6},
    {GM, 0, PL, 9, 4, 2, 0, 9, 8},
};
#define NCFG ((int)(sizeof CFGS / sizeof CFGS[0]))

static void fill_cfg(mega_block_config *c, const fcfg *f) {
    mega_block_config_default(c);
    c->mixer = f->kind, c->embed_dim = f->D, c->hidden_dim = f->E, c->ffn_dim = 0, c->chunk_size = -1;
    c->bidirectional = f->bidir, c->heads = f->heads, c->window = f->window, c->max_len = f->max_len;
}

static bt_worst g_worst, g_worst_dir;

/* absolute-position parameters: a sequence longer than max-len is refused, nothing read out of
 * bounds; aft-tw clamps beta / gamma past max-len (a project extension, docs/mixers.md "MHATW
 * length policy"), aft-simple has no positions */
static void over_long(const fcfg *f) {
    if (f->max_len <= 0 || f->max_len >= 1000) return;
    mega_block_config cfg;
    fill_cfg(&cfg, f);
    const int T = f->max_len + 1, limited = f->kind != SI && f->kind != TW;
    const bt_opts o = {.T = T, .seed = 5, .core = 1, .prefix = "layers.0."};
    bt_ctx c;
    if (bt_open(&c, &cfg, &o)) return;
    const mega_status st = bt_forward(&c);
    char want[160];
    snprintf(want, sizeof want, "sequence length %d exceeds the mixer's max-len %d", T, f->max_len);
    TL_CHECK(limited ? st == MEGA_ERR_INVALID && strstr(mega_last_error(), want) : st == MEGA_OK, "%s: length %d vs max-len %d: %s",
             c.name, T, f->max_len, st ? mega_last_error() : "accepted");
    bt_close(&c);
}

static void run_cfg(int ci) {
    const fcfg *f = &CFGS[ci];
    mega_block_config cfg;
    fill_cfg(&cfg, f);
    /* finite differences single-threaded (thousands of forwards); the thread count is checked
     * separately (bt_threads_check) */
    const bt_opts o = {.T = f->T, .pad = f->pad, .seed = 5000 + (uint64_t)ci, .nthreads = 1, .core = 1, .prefix = "layers.0."};
    bt_ctx c;
    if (bt_open(&c, &cfg, &o)) return;
    const bt_fd_opts fo = {.entries = 1, .directional = 1, .sample_above = 600, .samples = 250, .worst = &g_worst,
                           .worst_dir = &g_worst_dir};
    bt_fd_check(&c, &fo);
    bt_threads_check(&c);
    bt_close(&c);
    over_long(f);
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

/* the kernel's loss sum(ybar * Rw) for the finite differences */
typedef struct {
    const mega_aft_pair_k *k;
    double *yb, *ld, *K, *V, *Rw, *scr;
    uint8_t *flags;
    const uint8_t *pad;
    int B, T;
} pair_loss_t;
static double pair_loss(void *arg) {
    const pair_loss_t *p = arg;
    const size_t n = (size_t)p->B * p->T * p->k->Da;
    mega_aft_pair_forward(p->k, p->yb, p->ld, p->flags, p->K, p->V, p->k->Da, p->pad, p->B, p->T, p->scr, 1);
    double l = 0;
    for (size_t j = 0; j < n; j++) l += p->yb[j] * p->Rw[j];
    return l;
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
    /* gradients of sum(ybar * Rw) vs two-point differences (h = 1e-6) on 100 entries each of K,
     * V and w; the floor is the largest gradient: the error is absolute, relative to it */
    mega_aft_pair_backward(&k, dK, dV, Da, dw, Rw, yb, ld, flags, K, V, Da, pad, B, T, scr, nt);
    double gm = 0;
    for (size_t i = 0; i < R * Da; i++) gm = fmax(gm, fmax(fabs(dK[i]), fabs(dV[i])));
    for (size_t i = 0; i < (size_t)Tm * ncol; i++) gm = fmax(gm, fabs(dw[i]));
    pair_loss_t pl = {&k, yb, ld, K, V, Rw, scr, flags, pad, B, T};
    fd_opts f = {pair_loss, &pl, 1, 1e-6, 100, 100, 7};
    const char *arr[3] = {"K", "V", "w"};
    double *val[3] = {K, V, w};
    const double *grad[3] = {dK, dV, dw};
    const size_t n[3] = {R * Da, R * Da, (size_t)Tm * ncol};
    for (int a = 0; a < 3; a++) {
        const double err = fd_tensor_err(&f, val[a], grad[a], n[a], fmax(gm, 1e-12));
        TL_CHECK(err <= 1e-6, "pair fallback %s: gradient of %s vs FD (100 samples): abs err %.2e of the max grad %.2e", name,
                 arr[a], err, gm);
    }
    free(K), free(V), free(w), free(yb), free(ld), free(ref), free(Rw), free(dK), free(dV), free(dw), free(flags), free(pad), free(scr);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    for (int i = 0; i < NCFG; i++) run_cfg(i);
    printf("NOTE aft/gmlp FD: %d configurations, worst rel err %.2e (%s); worst directional %.2e\n", NCFG, g_worst.v,
           g_worst.where, g_worst_dir.v);
    fallback_case(0, 0);
    fallback_case(0, 1);
    fallback_case(5, 0);
    fallback_case(70, 1);
    return tl_finish();
}
