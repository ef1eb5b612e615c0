/*
 * The AFT family and gMLP mixers (SPEC §5, §6) against their definitions and in streaming:
 *
 * 1. Direct definition: the mixer core (mixer.h forward) equals a naive O(L^2) evaluation
 *    written here from SPEC §5.2/§5.3/§6.1 in double precision: per (t, c) the softmax over the
 *    visible non-pad keys u of K[u,c] + b(t,u,c) with b = w[t,u] (full), the band of w (local,
 *    0 outside the band), 0 (simple), -w_h |t-u| + log beta_h(u) (time-weighted AFT: the scan
 *    against its O(L^2) definition), then gamma(t) sigmoid(Q) (.) and the output projection;
 *    gMLP: gelu, LayerNorm, the (masked) spatial projection, the gate. Causal and
 *    bidirectional, right pads, a sequence of pads, left pads, T = 13 (one block of the pair
 *    kernel) and T = 150 (three blocks).
 * 2. Streaming: for every causal mixer inside a block (norm + residual, with and without the
 *    FFN, pre- and post-norm), mega_block_step equals the eval-mode full forward (a) token by
 *    token, (b) in multi-token pieces of several sizes (also the whole sequence at once);
 *    mega_block_state_reset then re-streaming is bit-identical.
 * 3. Limits: streaming past max-len fails with a clear MEGA_ERR_INVALID and does not touch the
 *    state for the mixers with absolute-position tables (aft-full, aft-local, gmlp); aft-simple
 *    and aft-tw (its beta/gamma clamped past max-len, SPEC §4.1 (c)) stream past any length;
 *    a bidirectional block refuses mega_block_state_init.
 * Tolerances: 2e-5 (definition) and 1e-5 (streaming) of max |out| in float; 1e-12 in double
 * (tests/t64_mixer_aft_stream.c).
 */
#include "layers/block.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEGA_F64
#define STOL 1e-12
#define DTOL 1e-12
#else
#define STOL 1e-5
#define DTOL 2e-5
#endif

typedef mega_real rl;
static double g_worst_def, g_worst_stream;

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}
static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        rl *w = P->data + s->offset;
        const char *nm = s->name;
        const size_t n = s->numel;
#define FILL(expr)                                                                            \
    for (size_t j = 0; j < n; j++) w[j] = (rl)(expr)
        if (ends_with(nm, "pos_bias")) FILL(0.7 * tl_randn(seed));
        else if (ends_with(nm, "time_decay")) FILL(log(0.05 + 1.2 * tl_rand01(seed)));
        else if (ends_with(nm, "time_beta")) FILL(0.4 * tl_randn(seed));
        else if (ends_with(nm, "time_gamma")) FILL(1 + 0.3 * tl_randn(seed));
        else if (ends_with(nm, "spatial.weight")) FILL(0.4 * tl_randn(seed));
        else if (ends_with(nm, "spatial.bias")) FILL(1 + 0.3 * tl_randn(seed));
        else if (ends_with(nm, "norm.weight")) FILL(1 + 0.2 * tl_randn(seed));
        else if (ends_with(nm, "norm.bias")) FILL(0.1 * tl_randn(seed));
        else if (ends_with(nm, "norm.scalar")) FILL(1 + 0.15 * tl_randn(seed));
        else if (ends_with(nm, ".weight") && s->ndim == 2) FILL(tl_randn(seed) / sqrt((double)s->shape[1]));
        else if (ends_with(nm, ".bias")) FILL(0.2 * tl_randn(seed));
        else TL_CHECK(0, "perturb: no rule for %s", nm);
#undef FILL
    }
}
static double rel_diff(const rl *a, const rl *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

typedef struct {
    mega_mixer_kind kind;
    int bidir, T, D, heads, window, max_len, E;
    int pre, F;
    mega_norm_type norm;
} scfg;

static int build(mega_block *bl, mega_params *P, const scfg *sc, unsigned long long seed) {
    mega_block_cfg c;
    memset(&c, 0, sizeof c);
    c.mixer = sc->kind, c.D = sc->D, c.Z = 4, c.E = sc->E, c.N = 2, c.F = sc->F, c.chunk = -1, c.max_positions = 16;
    c.bidir = sc->bidir, c.prenorm = sc->pre, c.norm_affine = 1, c.norm = sc->norm, c.act = MEGA_ACT_SILU;
    c.heads = sc->heads, c.window = sc->window, c.max_len = sc->max_len;
    mega_params_init(P);
    if (mega_block_declare(bl, P, "layers.1.", &c) || mega_params_alloc(P, 0)) return -1;
    mega_rng rng;
    mega_rng_seed(&rng, seed);
    mega_block_init(bl, P->data, &rng);
    perturb(P, &seed);
    return 0;
}
static void name_of(const scfg *c, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s/T%d/D%d/H%d/win%d/maxlen%d/E%d/%s/F%d", mega_mixer_name(c->kind), c->bidir ? "bidir" : "causal",
             c->T, c->D, c->heads, c->window, c->max_len, c->E, c->pre ? "pre" : "post", c->F);
}
static rl *param(const mega_params *P, const char *name) {
    char full[200];
    snprintf(full, sizeof full, "layers.1.mixer.%s", name);
    const mega_pspec *s = mega_params_find(P, full);
    return s ? P->data + s->offset : NULL;
}

/* ---- 1. the definitions, naively in double ---------------------------------------------- */
static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

/* y[b,t,:] = x W^T + b */
static void lin(double *y, const rl *x, const rl *W, const rl *b, size_t R, int In, int O) {
    for (size_t r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < In; i++) s += (double)x[r * In + i] * W[(size_t)o * In + i];
            y[r * O + o] = s;
        }
}

static void naive_aft(const scfg *sc, const mega_params *P, double *y, const rl *x, const uint8_t *pad, int B) {
    const int T = sc->T, D = sc->D, bid = sc->bidir;
    const size_t R = (size_t)B * T;
    double *qkv = malloc(R * 3 * D * sizeof(double)), *o = malloc(R * D * sizeof(double));
    lin(qkv, x, param(P, "qkv.weight"), param(P, "qkv.bias"), R, D, 3 * D);
    const rl *w = param(P, "pos_bias"), *dec = param(P, "time_decay"), *lb = param(P, "time_beta"), *gm = param(P, "time_gamma");
    const int hd = D / (sc->kind == MEGA_MIXER_AFT_TW ? sc->heads : 1), s = sc->window, Tm = sc->max_len;
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
                    if (sc->kind == MEGA_MIXER_AFT_FULL) bias = w[(size_t)t * Tm + u];
                    if (sc->kind == MEGA_MIXER_AFT_LOCAL && d < s && (bid ? d > -s : d >= 0))
                        bias = w[(size_t)t * (bid ? 2 * s - 1 : s) + (s - 1 - d)];
                    if (sc->kind == MEGA_MIXER_AFT_TW) {
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
    rl *of = malloc(R * D * sizeof(rl));
    for (size_t i = 0; i < R * D; i++) of[i] = (rl)o[i]; /* (the projection's input rounded as the library's) */
    lin(y, of, param(P, "out.weight"), param(P, "out.bias"), R, D, D);
    free(qkv), free(o), free(of), free(lg);
}

static void naive_gmlp(const scfg *sc, const mega_params *P, double *y, const rl *x, const uint8_t *pad, int B) {
    const int T = sc->T, D = sc->D, F2 = sc->E / 2, H = sc->heads, hd = F2 / H, n = sc->max_len;
    const size_t R = (size_t)B * T;
    double *z = malloc(R * 2 * F2 * sizeof(double)), *n2 = malloc(R * F2 * sizeof(double));
    rl *s = malloc(R * F2 * sizeof(rl));
    lin(z, x, param(P, "proj_in.weight"), param(P, "proj_in.bias"), R, D, 2 * F2);
    const rl *lw = param(P, "sgu_norm.weight"), *lbias = param(P, "sgu_norm.bias"), *Wsp = param(P, "spatial.weight"),
             *bsp = param(P, "spatial.bias");
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
                for (int u = 0; u < (sc->bidir ? T : t + 1); u++)
                    g += Wsp[((size_t)h * n + t) * n + u] * n2[((size_t)b * T + u) * F2 + c];
                const size_t r = (size_t)b * T + t;
                s[r * F2 + c] = (rl)(z[r * 2 * F2 + c] * g);
            }
    lin(y, s, param(P, "proj_out.weight"), param(P, "proj_out.bias"), R, F2, D);
    free(z), free(n2), free(s);
}

static void definition(const scfg *sc, int padmode) {
    char name[200];
    name_of(sc, name, sizeof name);
    mega_block bl;
    mega_params P;
    if (build(&bl, &P, sc, 500 + (unsigned long long)sc->T * 7 + (unsigned long long)sc->kind)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        mega_params_free(&P);
        return;
    }
    const int B = 2, T = sc->T, nt = mega_get_threads();
    const size_t RD = (size_t)B * T * sc->D;
    const mega_mixer *mx = &bl.mix;
    mega_mixer_acts A;
    rl *acts = calloc(mx->ops->acts(mx, NULL, NULL, B, T) + 16, sizeof(rl));
    mx->ops->acts(mx, &A, acts, B, T);
    rl *scr = calloc(mx->ops->scratch(mx, B, T, nt), sizeof(rl));
    rl *x = malloc(RD * sizeof(rl)), *y = malloc(RD * sizeof(rl));
    double *ref = malloc(RD * sizeof(double));
    uint8_t *pad = calloc((size_t)B * T, 1);
    unsigned long long xs = 31337 + (unsigned long long)T;
    for (size_t i = 0; i < RD; i++) x[i] = (rl)tl_randn(&xs);
    if (padmode == 1) {
        pad[T - 1] = 1;
        for (int t = T - T / 3; t < T; t++) pad[T + t] = 1;
    } else if (padmode == 2) {
        for (int t = 0; t < T; t++) pad[T + t] = 1;
    } else if (padmode == 3) {
        pad[T / 2] = 1;
        pad[T] = pad[T + 1] = 1;
    }
    const uint8_t *pm = padmode ? pad : NULL;
    mega_run run = {1, 0, 0, nt};
    mega_status st = mx->ops->forward(mx, P.data, &A, y, x, pm, B, T, &run, scr);
    if (sc->kind == MEGA_MIXER_GMLP)
        naive_gmlp(sc, &P, ref, x, pm, B);
    else
        naive_aft(sc, &P, ref, x, pm, B);
    double d = 0, m = 0;
    for (size_t i = 0; i < RD; i++) d = fmax(d, fabs((double)y[i] - ref[i])), m = fmax(m, fabs(ref[i]));
    d = m > 0 ? d / m : d;
    g_worst_def = fmax(g_worst_def, d);
    TL_CHECK(st == MEGA_OK && d < DTOL, "definition %s pad%d: mixer vs direct O(L^2) evaluation: rel err %.2e", name, padmode, d);
    free(acts), free(scr), free(x), free(y), free(ref), free(pad);
    mega_params_free(&P);
}

/* ---- 2./3. streaming --------------------------------------------------------------------- */
static mega_status stream(const mega_block *bl, const rl *W, mega_block_state *S, rl *scr, const rl *x, int B, int T,
                          int D, const int *sizes, rl *out) {
    rl *xt = malloc((size_t)B * T * D * sizeof(rl)), *ot = malloc((size_t)B * T * D * sizeof(rl));
    mega_status st = MEGA_OK;
    int a = 0, k = 0;
    while (a < T) {
        int L = sizes && sizes[k] ? sizes[k++] : 1;
        if (L > T - a) L = T - a;
        for (int b = 0; b < B; b++) memcpy(xt + (size_t)b * L * D, x + ((size_t)b * T + a) * D, (size_t)L * D * sizeof(rl));
        st = mega_block_step(bl, W, S, ot, xt, L, scr);
        if (st != MEGA_OK) break;
        for (int b = 0; b < B; b++) memcpy(out + ((size_t)b * T + a) * D, ot + (size_t)b * L * D, (size_t)L * D * sizeof(rl));
        a += L;
    }
    free(xt), free(ot);
    return st;
}

static void streaming(const scfg *sc) {
    char name[200];
    name_of(sc, name, sizeof name);
    mega_block bl;
    mega_params P;
    if (build(&bl, &P, sc, 900 + (unsigned long long)sc->T + (unsigned long long)sc->kind * 3)) {
        TL_CHECK(0, "%s: declare: %s", name, mega_last_error());
        mega_params_free(&P);
        return;
    }
    const int B = 2, T = sc->T, D = sc->D, nt = mega_get_threads(), cap = T;
    const size_t RD = (size_t)B * T * D;
    rl *x = malloc(RD * sizeof(rl)), *full = malloc(RD * sizeof(rl)), *o1 = malloc(RD * sizeof(rl)), *o2 = malloc(RD * sizeof(rl));
    unsigned long long xs = 4711 + (unsigned long long)T;
    for (size_t i = 0; i < RD; i++) x[i] = (rl)tl_randn(&xs);
    {
        mega_block_acts A;
        rl *acts = calloc(mega_block_acts_size(&bl, B, T), sizeof(rl));
        rl *scr = calloc(mega_block_scratch_size(&bl, B, T, nt), sizeof(rl));
        mega_block_acts_point(&bl, &A, acts, B, T);
        mega_run run = {0, 0, 0, nt};
        mega_status st = mega_block_forward(&bl, P.data, &A, full, x, NULL, B, T, &run, scr);
        TL_CHECK(st == MEGA_OK, "%s: eval forward (%s)", name, mega_last_error());
        free(acts), free(scr);
    }
    mega_block_state S;
    /* the step's scratch followed by a guard zone: the step must stay inside what it asks for */
    const size_t ssz = mega_block_step_scratch(&bl, B, T, cap);
    rl *mem = calloc(mega_block_state_size(&bl, B, cap), sizeof(rl)), *scr = calloc(ssz + 256, sizeof(rl));
    for (int i = 0; i < 256; i++) scr[ssz + i] = (rl)12345;
    mega_status st = mega_block_state_init(&bl, P.data, &S, mem, B, cap);
    TL_CHECK(st == MEGA_OK, "%s: state init (%s)", name, mega_last_error());
    if (st == MEGA_OK) {
        st = stream(&bl, P.data, &S, scr, x, B, T, D, NULL, o1);
        double e = rel_diff(o1, full, RD);
        g_worst_stream = fmax(g_worst_stream, e);
        TL_CHECK(st == MEGA_OK && e < STOL, "%s: token-by-token step == full forward: rel err %.2e", name, e);
        mega_block_state_reset(&bl, &S);
        st = stream(&bl, P.data, &S, scr, x, B, T, D, NULL, o2);
        TL_CHECK(st == MEGA_OK && !memcmp(o1, o2, RD * sizeof(rl)), "%s: reset + re-stream gives identical outputs", name);
        const int sz1[] = {4, 3, 5, 1000, 0}, sz2[] = {2, 5, 6, 0}, sz3[] = {1000, 0}, sz4[] = {1, 7, 2, 2, 1, 64, 0};
        const int *all[] = {sz1, sz2, sz3, sz4};
        double ew = 0;
        for (int k = 0; k < 4; k++) {
            mega_block_state_reset(&bl, &S);
            st = stream(&bl, P.data, &S, scr, x, B, T, D, all[k], o2);
            double e2 = st == MEGA_OK ? rel_diff(o2, full, RD) : INFINITY;
            ew = fmax(ew, e2);
        }
        g_worst_stream = fmax(g_worst_stream, ew);
        TL_CHECK(ew < STOL, "%s: multi-token steps (4 splits incl. the whole sequence) == full forward: worst %.2e", name, ew);
        int guard = 1;
        for (int i = 0; i < 256; i++) guard &= scr[ssz + i] == (rl)12345;
        TL_CHECK(guard, "%s: the step stays inside its scratch", name);
        /* past max-len: refused (absolute positions), the state untouched; the next token works */
        if (sc->max_len > 0 && sc->max_len == T && sc->kind != MEGA_MIXER_AFT_SIMPLE && sc->kind != MEGA_MIXER_AFT_TW) {
            rl *snap = malloc(mega_block_state_size(&bl, B, cap) * sizeof(rl)), *xo = malloc((size_t)B * D * sizeof(rl));
            memcpy(snap, mem, mega_block_state_size(&bl, B, cap) * sizeof(rl));
            int64_t pos = S.pos;
            mega_status s2 = mega_block_step(&bl, P.data, &S, xo, x, 1, scr);
            char want[120];
            snprintf(want, sizeof want, "sequence length %d exceeds the mixer's max-len %d", T + 1, T);
            TL_CHECK(s2 == MEGA_ERR_INVALID && strstr(mega_last_error(), want) && S.pos == pos &&
                         !memcmp(snap, mem, mega_block_state_size(&bl, B, cap) * sizeof(rl)),
                     "%s: token %d past max-len %d refused (\"%s\"), state untouched", name, T + 1, T, mega_last_error());
            free(snap), free(xo);
        }
    }
    free(mem), free(scr), free(x), free(full), free(o1), free(o2);
    mega_params_free(&P);
}

/* aft-simple and aft-tw stream as long as wanted (3 D floats of state; aft-tw's beta/gamma clamped
 * past max-len): 2000 tokens through a state built for capacity 1, compared with the full
 * forward over the same 2000 */
static void unlimited(mega_mixer_kind kind, int max_len) {
    scfg sc = {kind, 0, 2000, 4, 2, 0, max_len, 8, 1, 0, MEGA_NORM_LAYER};
    char name[200];
    name_of(&sc, name, sizeof name);
    mega_block bl;
    mega_params P;
    build(&bl, &P, &sc, 77);
    const int B = 1, T = sc.T, D = sc.D, nt = mega_get_threads();
    const size_t RD = (size_t)B * T * D;
    rl *x = malloc(RD * sizeof(rl)), *full = malloc(RD * sizeof(rl)), *o = malloc(RD * sizeof(rl));
    unsigned long long xs = 5;
    for (size_t i = 0; i < RD; i++) x[i] = (rl)tl_randn(&xs);
    mega_block_acts A;
    rl *acts = calloc(mega_block_acts_size(&bl, B, T), sizeof(rl)), *fs = calloc(mega_block_scratch_size(&bl, B, T, nt), sizeof(rl));
    mega_block_acts_point(&bl, &A, acts, B, T);
    mega_run run = {0, 0, 0, nt};
    mega_block_forward(&bl, P.data, &A, full, x, NULL, B, T, &run, fs);
    mega_block_state S;
    rl *mem = calloc(mega_block_state_size(&bl, B, 1), sizeof(rl)), *scr = calloc(mega_block_step_scratch(&bl, B, 1, 1), sizeof(rl));
    mega_status st = mega_block_state_init(&bl, P.data, &S, mem, B, 1);
    const int one[] = {1, 0};
    if (st == MEGA_OK) st = stream(&bl, P.data, &S, scr, x, B, T, D, one, o);
    double e = rel_diff(o, full, RD);
    TL_CHECK(st == MEGA_OK && e < STOL && mega_block_state_size(&bl, B, 1) <= 3 * (size_t)D + 16,
             "%s: 2000 tokens streamed with a %zu-real state == full forward: rel err %.2e", name,
             mega_block_state_size(&bl, B, 1), e);
    free(x), free(full), free(o), free(acts), free(fs), free(mem), free(scr);
    mega_params_free(&P);
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
    /* kind bidir T D heads window max_len E pre F norm */
    const scfg defs[] = {
        {FU, 0, 13, 4, 1, 0, 16, 8, 1, 0, LN},  {FU, 1, 13, 4, 1, 0, 13, 8, 1, 0, LN},  {FU, 0, 150, 5, 1, 0, 150, 8, 1, 0, LN},
        {FU, 1, 150, 5, 1, 0, 160, 8, 1, 0, LN}, {LO, 0, 13, 4, 1, 3, 13, 8, 1, 0, LN}, {LO, 1, 13, 4, 1, 3, 16, 8, 1, 0, LN},
        {LO, 0, 150, 5, 1, 5, 150, 8, 1, 0, LN}, {LO, 1, 150, 5, 1, 5, 150, 8, 1, 0, LN}, {LO, 0, 150, 3, 1, 70, 150, 8, 1, 0, LN},
        {LO, 1, 150, 3, 1, 70, 150, 8, 1, 0, LN}, {LO, 1, 150, 3, 1, 1, 150, 8, 1, 0, LN}, {SI, 0, 13, 4, 1, 0, 0, 8, 1, 0, LN},
        {SI, 1, 150, 4, 1, 0, 0, 8, 1, 0, LN},  {TW, 0, 13, 4, 2, 0, 0, 8, 1, 0, LN},   {TW, 1, 13, 4, 4, 0, 13, 8, 1, 0, LN},
        {TW, 0, 150, 6, 3, 0, 150, 8, 1, 0, LN}, {TW, 1, 150, 6, 2, 0, 0, 8, 1, 0, LN},  {TW, 0, 150, 6, 3, 0, 100, 8, 1, 0, LN},
        {TW, 1, 13, 4, 4, 0, 8, 8, 1, 0, LN},  {GM, 0, 13, 4, 1, 0, 13, 8, 1, 0, LN},
        {GM, 1, 13, 4, 2, 0, 16, 8, 1, 0, LN},  {GM, 0, 70, 3, 3, 0, 80, 12, 1, 0, LN},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        for (int pm = 0; pm < 4; pm++) definition(&defs[i], pm);
    printf("NOTE aft/gmlp: worst mixer vs direct O(L^2) definition %.2e\n", g_worst_def);
    /* streaming: causal blocks (norm + residual, FFN or not, pre/post-norm) */
    const scfg strs[] = {
        {FU, 0, 13, 4, 1, 0, 13, 8, 1, 6, LN},   {FU, 0, 80, 4, 1, 0, 100, 8, 0, 0, RN}, {LO, 0, 13, 4, 1, 3, 13, 8, 1, 0, SN},
        {LO, 0, 80, 4, 1, 5, 80, 8, 0, 6, LN},  {LO, 0, 80, 3, 1, 70, 90, 8, 1, 6, LN}, {LO, 0, 13, 4, 1, 1, 13, 8, 1, 0, LN},
        {SI, 0, 13, 4, 1, 0, 0, 8, 1, 6, LN},   {SI, 0, 80, 4, 1, 0, 0, 8, 0, 0, RN},   {TW, 0, 13, 4, 2, 0, 0, 8, 1, 6, LN},
        {TW, 0, 13, 4, 4, 0, 13, 8, 0, 6, SN},  {TW, 0, 80, 6, 3, 0, 100, 8, 1, 0, LN}, {TW, 0, 80, 6, 3, 0, 30, 8, 0, 6, LN}, {GM, 0, 13, 4, 1, 0, 13, 8, 1, 6, LN},
        {GM, 0, 13, 4, 2, 0, 20, 8, 0, 0, RN},  {GM, 0, 80, 3, 3, 0, 80, 12, 1, 6, LN},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) streaming(&strs[i]);
    printf("NOTE aft/gmlp: worst streaming vs full forward %.2e\n", g_worst_stream);
    unlimited(SI, 0);
    unlimited(TW, 0);
    unlimited(TW, 50);
    /* bidirectional blocks have no streaming form */
    const mega_mixer_kind ks[] = {FU, LO, SI, TW, GM};
    for (int i = 0; i < 5; i++) {
        scfg sc = {ks[i], 1, 8, 4, 2, 3, 8, 8, 1, 0, LN};
        mega_block bl;
        mega_params P;
        build(&bl, &P, &sc, 3);
        mega_block_state S;
        rl mem[4096];
        mega_status st = mega_block_state_init(&bl, P.data, &S, mem, 1, 8);
        TL_CHECK(st == MEGA_ERR_UNSUPPORTED, "bidirectional %s refuses streaming (%s)", mega_mixer_name(ks[i]), mega_last_error());
        mega_params_free(&P);
    }
    return tl_finish();
}
