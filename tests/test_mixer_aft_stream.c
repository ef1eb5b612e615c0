/*
 * The AFT family and gMLP mixers (AFT: Zhai et al., arXiv 2105.14103; time-weighted AFT: PENG
 * Bo's article, RWKV-v1 RWKV_TimeMix; gMLP: Liu et al., arXiv 2105.08050 §2.1; docs/mixers.md
 * "AFT family and gMLP token mixers") against their definitions and in streaming:
 *
 * 1. Direct definition: the mixer core (bt_opts.core) equals a naive O(L^2) evaluation written
 *    here in double precision: per (t, c) the softmax over the visible non-pad keys u of
 *    K[u,c] + b(t,u,c) with b = w[t,u] (full), the band of w (local, 0 outside the band), 0
 *    (simple), -w_h |t-u| + log beta_h(u) (time-weighted AFT: the scan against its O(L^2)
 *    definition), then gamma(t) sigmoid(Q) (.) and the output projection; gMLP: gelu,
 *    LayerNorm, the (masked) spatial projection, the gate. Causal and bidirectional, right
 *    pads, a sequence of pads, left pads, T = 13 (one block of the pair kernel) and T = 150
 *    (three blocks).
 * 2. Streaming: for every causal mixer inside a block (norm + residual, with and without the
 *    FFN, pre- and post-norm), the shared driver bt_stream_check: mega_block_step equals the
 *    eval-mode full forward token by token and in the standard multi-token splits (also the
 *    whole sequence at once); reset then re-streaming is bit-identical; the step stays inside
 *    its scratch and state.
 * 3. Limits: streaming past max-len fails with a clear MEGA_ERR_INVALID and does not touch the
 *    state for the mixers with absolute-position tables (aft-full, aft-local, gmlp); aft-simple
 *    and aft-tw (its beta/gamma clamped past max-len, a project extension: docs/mixers.md
 *    "MHATW length policy") stream past any length; a bidirectional block refuses
 *    mega_block_state_init.
 * Tolerances: 2e-5 (definition) and 1e-5 (streaming, BT_STOL) of max |out| in float; 1e-12 in
 * double (build/t64_mixer_aft_stream, the same source).
 */
#include "blocktest.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEGA_F64
#define DTOL 1e-12
#else
#define DTOL 2e-5
#endif

static bt_worst g_worst_def, g_worst_stream;

typedef struct {
    mega_mixer_kind kind;
    int bidir, T, D, heads, window, max_len, E;
    int pre, F;
    mega_norm_type norm;
} scfg;

static void fill_cfg(mega_block_config *c, const scfg *s) {
    mega_block_config_default(c);
    c->mixer = s->kind, c->embed_dim = s->D, c->hidden_dim = s->E, c->ffn_dim = s->F, c->chunk_size = -1;
    c->bidirectional = s->bidir, c->prenorm = s->pre, c->norm_type = s->norm;
    c->heads = s->heads, c->window = s->window, c->max_len = s->max_len;
}

static int open_cfg(bt_ctx *c, const scfg *s, int B, int pad, int core, uint64_t seed) {
    mega_block_config cfg;
    fill_cfg(&cfg, s);
    const bt_opts o = {.B = B, .T = s->T, .pad = pad, .seed = seed, .core = core, .prefix = "layers.1."};
    return bt_open(c, &cfg, &o);
}

/* ---- 1. the definitions, naively in double ---------------------------------------------- */
static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

static void naive_aft(const mega_block_config *cf, const mega_params *P, double *y, const mega_real *x, const uint8_t *pad,
                      int B, int T) {
    const int D = cf->embed_dim, bid = cf->bidirectional;
    const size_t R = (size_t)B * T;
    double *qkv = malloc(R * 3 * D * sizeof(double)), *o = malloc(R * D * sizeof(double));
    bt_linear(qkv, x, bt_param(P, "mixer.qkv.weight"), bt_param(P, "mixer.qkv.bias"), R, D, 3 * D);
    const mega_real *w = bt_param(P, "mixer.pos_bias"), *dec = bt_param(P, "mixer.time_decay"), *lb = bt_param(P, "mixer.time_beta"), *gm = bt_param(P, "mixer.time_gamma");
    const int hd = D / (cf->mixer == MEGA_MIXER_AFT_TW ? cf->heads : 1), s = cf->window, Tm = cf->max_len;
    double *lg = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < D; c++) {
                int n = 0;
                double m = -INFINITY, num = 0, den = 0;
                for (int u = 0; u < (bid ? T : t + 1); u++) {
                    double bias = 0;
                    const int d = t - u;
                    if (pad && pad[(size_t)b * T + u]) continue;
                    if (cf->mixer == MEGA_MIXER_AFT_FULL) bias = w[(size_t)t * Tm + u];
                    if (cf->mixer == MEGA_MIXER_AFT_LOCAL && d < s && (bid ? d > -s : d >= 0))
                        bias = w[(size_t)t * (bid ? 2 * s - 1 : s) + (s - 1 - d)];
                    if (cf->mixer == MEGA_MIXER_AFT_TW) {
                        bias = -exp((double)dec[c / hd]) * fabs((double)d); /* f_h(d) = exp(-w_h |d|) */
                        if (lb) bias += lb[(size_t)(c / hd) * Tm + (u < Tm ? u : Tm - 1)]; /* beta_h(u), clamped */
                    }
                    lg[n] = qkv[((size_t)b * T + u) * 3 * D + D + c] + bias;
                    m = fmax(m, lg[n++]);
                }
                n = 0;
                for (int u = 0; u < (bid ? T : t + 1); u++) {
                    if (pad && pad[(size_t)b * T + u]) continue;
                    double e = exp(lg[n++] - m);
                    num += e * qkv[((size_t)b * T + u) * 3 * D + 2 * D + c], den += e;
                }
                const size_t r = (size_t)b * T + t;
                o[r * D + c] = (gm ? gm[t < Tm ? t : Tm - 1] : 1) * sigm(qkv[r * 3 * D + c]) * (n ? num / den : 0);
            }
    mega_real *of = malloc(R * D * sizeof(mega_real));
    for (size_t i = 0; i < R * D; i++) of[i] = (mega_real)o[i]; /* (the projection's input rounded as the library's) */
    bt_linear(y, of, bt_param(P, "mixer.out.weight"), bt_param(P, "mixer.out.bias"), R, D, D);
    free(qkv), free(o), free(of), free(lg);
}

static void naive_gmlp(const mega_block_config *cf, const mega_params *P, double *y, const mega_real *x, const uint8_t *pad,
                      int B, int T) {
    const int D = cf->embed_dim, F2 = cf->hidden_dim / 2, H = cf->heads, hd = F2 / H, n = cf->max_len;
    const size_t R = (size_t)B * T;
    double *z = malloc(R * 2 * F2 * sizeof(double)), *n2 = malloc(R * F2 * sizeof(double));
    mega_real *s = malloc(R * F2 * sizeof(mega_real));
    bt_linear(z, x, bt_param(P, "mixer.proj_in.weight"), bt_param(P, "mixer.proj_in.bias"), R, D, 2 * F2);
    const mega_real *lw = bt_param(P, "mixer.sgu_norm.weight"), *lbias = bt_param(P, "mixer.sgu_norm.bias"), *Wsp = bt_param(P, "mixer.spatial.weight"),
             *bsp = bt_param(P, "mixer.spatial.bias");
    for (size_t r = 0; r < R; r++) {
        double mu = 0, var = 0;
        for (int c = 0; c < 2 * F2; c++) z[r * 2 * F2 + c] = gelu(z[r * 2 * F2 + c]);
        for (int c = 0; c < F2; c++) mu += z[r * 2 * F2 + F2 + c] / F2;
        for (int c = 0; c < F2; c++) var += pow(z[r * 2 * F2 + F2 + c] - mu, 2) / F2;
        for (int c = 0; c < F2; c++)
            n2[r * F2 + c] = (pad && pad[r]) ? 0 : (z[r * 2 * F2 + F2 + c] - mu) / sqrt(var + 1e-5) * lw[c] + lbias[c];
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < F2; c++) {
                const int h = c / hd;
                double g = bsp[(size_t)h * n + t];
                for (int u = 0; u < (cf->bidirectional ? T : t + 1); u++)
                    g += Wsp[((size_t)h * n + t) * n + u] * n2[((size_t)b * T + u) * F2 + c];
                const size_t r = (size_t)b * T + t;
                s[r * F2 + c] = (mega_real)(z[r * 2 * F2 + c] * g);
            }
    bt_linear(y, s, bt_param(P, "mixer.proj_out.weight"), bt_param(P, "mixer.proj_out.bias"), R, F2, D);
    free(z), free(n2), free(s);
}


static void definition(const scfg *sc, int pad, uint64_t seed) {
    bt_ctx c;
    if (open_cfg(&c, sc, 2, pad, 1, seed)) return;
    double *ref = malloc(c.RD * sizeof(double));
    const mega_status st = bt_forward(&c);
    if (sc->kind == MEGA_MIXER_GMLP)
        naive_gmlp(&c.cfg, &c.P, ref, c.x, c.pm, c.B, c.T);
    else
        naive_aft(&c.cfg, &c.P, ref, c.x, c.pm, c.B, c.T);
    double d = 0, m = 0;
    for (size_t i = 0; i < c.RD; i++) d = fmax(d, fabs((double)c.out[i] - ref[i])), m = fmax(m, fabs(ref[i]));
    d = m > 0 ? d / m : d;
    bt_note(&g_worst_def, d, "%s", c.name);
    TL_CHECK(st == MEGA_OK && d < DTOL, "definition %s: mixer vs direct O(L^2) evaluation: rel err %.2e", c.name, d);
    free(ref);
    bt_close(&c);
}

/* ---- 2./3. streaming --------------------------------------------------------------------- */

/* past max-len (= T): refused for the absolute-position mixers, the state untouched */
static void past_max_len(bt_ctx *c) {
    const int T = c->T;
    bt_stream s;
    const mega_status st = bt_stream_start(c, &s, T, T, &(bt_split){{T}, 0}, T);
    mega_real *snap = malloc(s.nmem * sizeof(mega_real));
    memcpy(snap, s.mem, s.nmem * sizeof(mega_real));
    const int64_t pos = s.S.pos;
    const mega_status s2 = st == MEGA_OK ? mega_block_step(&c->bl, c->P.data, &s.S, s.ot, c->x, 1, s.scr) : st;
    char want[120];
    snprintf(want, sizeof want, "sequence length %d exceeds the mixer's max-len %d", T + 1, T);
    TL_CHECK(st == MEGA_OK && s2 == MEGA_ERR_INVALID && strstr(mega_last_error(), want) && s.S.pos == pos &&
                 !memcmp(snap, s.mem, s.nmem * sizeof(mega_real)),
             "%s: token %d past max-len %d refused (\"%s\"), state untouched", c->name, T + 1, T, mega_last_error());
    free(snap);
    bt_stream_close(&s);
}

static void streaming(const scfg *sc, uint64_t seed) {
    bt_ctx c;
    if (open_cfg(&c, sc, 2, BT_PAD_NONE, 0, seed)) return;
    const bt_stream_opts so = {.worst = &g_worst_stream};
    bt_stream_check(&c, &so);
    if (sc->max_len == sc->T && sc->kind != MEGA_MIXER_AFT_SIMPLE && sc->kind != MEGA_MIXER_AFT_TW) past_max_len(&c);
    bt_close(&c);
}

/* aft-simple and aft-tw stream as long as wanted (3 D reals of state; aft-tw's beta/gamma clamped
 * past max-len): 2000 tokens through a state built for capacity 1, compared with the full
 * forward over the same 2000 */
static void unlimited(mega_mixer_kind kind, int max_len) {
    const scfg sc = {kind, 0, 2000, 4, 2, 0, max_len, 8, 1, 0, MEGA_NORM_LAYER};
    bt_ctx c;
    if (open_cfg(&c, &sc, 1, BT_PAD_NONE, 0, 77)) return;
    bt_stream s;
    const mega_status st = bt_stream_start(&c, &s, 1, 1, NULL, c.T);
    const double e = bt_stream_err(&c, &s, 0, c.T);
    TL_CHECK(st == MEGA_OK && e < BT_STOL && s.nmem <= 3 * (size_t)sc.D + 16,
             "%s: 2000 tokens streamed with a %zu-real state == full forward: rel err %.2e", c.name, s.nmem, e);
    bt_stream_close(&s);
    bt_close(&c);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
#define FU MEGA_MIXER_AFT_FULL
#define LO MEGA_MIXER_AFT_LOCAL
#define SI MEGA_MIXER_AFT_SIMPLE
#define TW MEGA_MIXER_AFT_TW
#define GM MEGA_MIXER_GMLP
#define LN MEGA_NORM_LAYER
#define RN MEGA_NORM_RMS
#define SN MEGA_NORM_SCALE
    /* kind bidir T D heads window max_len E pre F norm (aft-tw max-len -1: the pure recurrence) */
    const scfg defs[] = {
        {FU, 0, 13, 4, 1, 0, 16, 8, 1, 0, LN},  {FU, 1, 13, 4, 1, 0, 13, 8, 1, 0, LN},  {FU, 0, 150, 5, 1, 0, 150, 8, 1, 0, LN},
        {FU, 1, 150, 5, 1, 0, 160, 8, 1, 0, LN}, {LO, 0, 13, 4, 1, 3, 13, 8, 1, 0, LN}, {LO, 1, 13, 4, 1, 3, 16, 8, 1, 0, LN},
        {LO, 0, 150, 5, 1, 5, 150, 8, 1, 0, LN}, {LO, 1, 150, 5, 1, 5, 150, 8, 1, 0, LN}, {LO, 0, 150, 3, 1, 70, 150, 8, 1, 0, LN},
        {LO, 1, 150, 3, 1, 70, 150, 8, 1, 0, LN}, {LO, 1, 150, 3, 1, 1, 150, 8, 1, 0, LN}, {SI, 0, 13, 4, 1, 0, 0, 8, 1, 0, LN},
        {SI, 1, 150, 4, 1, 0, 0, 8, 1, 0, LN},  {TW, 0, 13, 4, 2, 0, -1, 8, 1, 0, LN},  {TW, 1, 13, 4, 4, 0, 13, 8, 1, 0, LN},
        {TW, 0, 150, 6, 3, 0, 150, 8, 1, 0, LN}, {TW, 1, 150, 6, 2, 0, -1, 8, 1, 0, LN}, {TW, 0, 150, 6, 3, 0, 100, 8, 1, 0, LN},
        {TW, 1, 13, 4, 4, 0, 8, 8, 1, 0, LN},   {GM, 0, 13, 4, 1, 0, 13, 8, 1, 0, LN},
        {GM, 1, 13, 4, 2, 0, 16, 8, 1, 0, LN},  {GM, 0, 70, 3, 3, 0, 80, 12, 1, 0, LN},
    };
    static const int pads[4] = {BT_PAD_NONE, BT_PAD_RIGHT, BT_PAD_ALL, BT_PAD_LEFT};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        for (int pm = 0; pm < 4; pm++) definition(&defs[i], pads[pm], 500 + 4 * i + (uint64_t)pm);
    printf("NOTE aft/gmlp: worst mixer vs direct O(L^2) definition %.2e (%s)\n", g_worst_def.v, g_worst_def.where);
    /* streaming: causal blocks (norm + residual, FFN or not, pre/post-norm) */
    const scfg strs[] = {
        {FU, 0, 13, 4, 1, 0, 13, 8, 1, 6, LN},   {FU, 0, 80, 4, 1, 0, 100, 8, 0, 0, RN}, {LO, 0, 13, 4, 1, 3, 13, 8, 1, 0, SN},
        {LO, 0, 80, 4, 1, 5, 80, 8, 0, 6, LN},  {LO, 0, 80, 3, 1, 70, 90, 8, 1, 6, LN}, {LO, 0, 13, 4, 1, 1, 13, 8, 1, 0, LN},
        {SI, 0, 13, 4, 1, 0, 0, 8, 1, 6, LN},   {SI, 0, 80, 4, 1, 0, 0, 8, 0, 0, RN},   {TW, 0, 13, 4, 2, 0, -1, 8, 1, 6, LN},
        {TW, 0, 13, 4, 4, 0, 13, 8, 0, 6, SN},  {TW, 0, 80, 6, 3, 0, 100, 8, 1, 0, LN}, {TW, 0, 80, 6, 3, 0, 30, 8, 0, 6, LN},
        {GM, 0, 13, 4, 1, 0, 13, 8, 1, 6, LN},  {GM, 0, 13, 4, 2, 0, 20, 8, 0, 0, RN},  {GM, 0, 80, 3, 3, 0, 80, 12, 1, 6, LN},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) streaming(&strs[i], 900 + i);
    printf("NOTE aft/gmlp: worst streaming vs full forward %.2e (%s)\n", g_worst_stream.v, g_worst_stream.where);
    unlimited(SI, 0);
    unlimited(TW, -1);
    unlimited(TW, 50);
    /* bidirectional blocks have no streaming form */
    const mega_mixer_kind ks[] = {FU, LO, SI, TW, GM};
    for (int i = 0; i < 5; i++) {
        const scfg sc = {ks[i], 1, 8, 4, 2, 3, 8, 8, 1, 0, LN};
        bt_ctx c;
        if (open_cfg(&c, &sc, 1, BT_PAD_NONE, 0, 3)) continue;
        bt_stream s;
        const mega_status st = bt_stream_start(&c, &s, 8, 1, NULL, 0);
        TL_CHECK(st == MEGA_ERR_UNSUPPORTED, "bidirectional %s refuses streaming (%s)", mega_mixer_name(ks[i]), mega_last_error());
        bt_stream_close(&s);
        bt_close(&c);
    }
    return tl_finish();
}
