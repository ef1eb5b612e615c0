/*
 * Streaming step of the causal ABC mixers (SPEC §7.5) against the eval-mode full causal forward
 * of the same block (mega_run training = 0, no pads):
 *   (a) mega_block_step token by token;
 *   (b) multi-token calls in several splits (2+5+6+1+..., the whole sequence at once,
 *       1+7+2+2+1+..., n+1 then 3): pieces that straddle the wrap-around of the window's ring
 *       buffer and the point where its empty slots fill up;
 *   (c) reset then re-stream: bit-identical.
 * Mixers: abc-window (masked and literal empty slots, n < T, n = 1, n > T), abc-linformer
 * (max-len = T and > T), abc-mlp (n = 1, several n), heads 1/2/4, pre/post norm, layernorm /
 * rmsnorm / scalenorm, with and without the FFN, B = 2, T = 37.
 * Also: the state size does not depend on the capacity (bounded memory: 2 n D (+ 2 H n));
 * Linformer refuses to stream past max-len (MEGA_ERR_INVALID) without touching the state, and
 * the remaining positions still match; the step stays inside mega_block_step_scratch and the
 * state memory (guard zones).
 * Tolerance: 1e-5 of max |out| (float build), 1e-12 (double build, tests/t64_mixer_abc_stream.c).
 */
#include "layers/block.h"
#include "ops/abc.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEGA_F64
#define STOL 1e-12
#else
#define STOL 1e-5
#endif

typedef mega_real rl;
static unsigned long long g_seed = 0xabc57eedull;
static double g_worst;

static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        rl *w = P->data + s->offset;
        const char *nm = s->name, *leaf = strrchr(nm, '.') ? strrchr(nm, '.') + 1 : nm;
        for (size_t j = 0; j < s->numel; j++) {
            double z = tl_randn(seed);
            if (strstr(nm, "norm.norm."))
                w[j] = (rl)(!strcmp(leaf, "weight") ? 1 + 0.2 * z : !strcmp(leaf, "scalar") ? 1 + 0.15 * z : 0.1 * z);
            else if (!strcmp(leaf, "weight") && s->ndim == 2)
                w[j] = (rl)(z / sqrt((double)s->shape[1]));
            else
                w[j] = (rl)(0.1 * z);
        }
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
    mega_block bl;
    mega_params P;
    mega_block_cfg c;
    int B, T;
    rl *x, *full;
    char name[160];
} sctx;

static int setup(sctx *s, const mega_block_cfg *c, int mask, int B, int T, unsigned long long seed) {
    memset(s, 0, sizeof *s);
    s->c = *c, s->B = B, s->T = T;
    static const char *nn[] = {"LN", "SN", "RN", "BN"};
    snprintf(s->name, sizeof s->name, "%s/H%d/n%d/%s/%s/F%d%s%s", mega_mixer_name(c->mixer), c->heads, c->memory,
             c->prenorm ? "pre" : "post", nn[c->norm], c->F, c->mixer == MEGA_MIXER_ABC_WINDOW && !mask ? "/literal" : "",
             c->mixer == MEGA_MIXER_ABC_LINFORMER ? (c->max_len == T ? "/maxlen=T" : "/maxlen>T") : "");
    mega_params_init(&s->P);
    if (mega_block_declare(&s->bl, &s->P, "layers.0.", c) || mega_params_alloc(&s->P, 0)) {
        TL_CHECK(0, "%s: declare: %s", s->name, mega_last_error());
        mega_params_free(&s->P);
        return -1;
    }
    if (c->mixer == MEGA_MIXER_ABC_WINDOW) mega_abc_set_mask_empty(&s->bl.mix, mask);
    mega_rng rng;
    mega_rng_seed(&rng, seed);
    mega_block_init(&s->bl, s->P.data, &rng);
    unsigned long long ps = seed * 7919u + 1;
    perturb(&s->P, &ps);
    const size_t RD = (size_t)B * T * c->D;
    s->x = malloc(RD * sizeof(rl));
    s->full = malloc(RD * sizeof(rl));
    for (size_t i = 0; i < RD; i++) s->x[i] = (rl)tl_randn(&g_seed);
    return 0;
}
static void teardown(sctx *s) {
    free(s->x), free(s->full);
    mega_params_free(&s->P);
}

static int full_forward(sctx *s, rl *out) {
    const int nt = mega_get_threads();
    rl *acts = calloc(mega_block_acts_size(&s->bl, s->B, s->T), sizeof(rl));
    rl *scr = calloc(mega_block_scratch_size(&s->bl, s->B, s->T, nt), sizeof(rl));
    mega_block_acts A;
    mega_block_acts_point(&s->bl, &A, acts, s->B, s->T);
    mega_run run = {0, 0, 0, nt};
    mega_status st = mega_block_forward(&s->bl, s->P.data, &A, out, s->x, NULL, s->B, s->T, &run, scr);
    free(acts), free(scr);
    TL_CHECK(st == MEGA_OK, "%s: eval forward (%s)", s->name, mega_last_error());
    return st == MEGA_OK ? 0 : -1;
}

/* stream positions [a0, a1) in calls of the given sizes (0-terminated; then 1-token calls) */
static mega_status stream_range(sctx *s, mega_block_state *S, rl *scr, const int *sizes, rl *out, int a0, int a1) {
    const int B = s->B, T = s->T, D = s->c.D;
    rl *xt = malloc((size_t)B * T * D * sizeof(rl)), *ot = malloc((size_t)B * T * D * sizeof(rl));
    mega_status st = MEGA_OK;
    int a = a0, k = 0;
    while (a < a1) {
        int L = sizes && sizes[k] ? sizes[k++] : 1;
        if (L > a1 - a) L = a1 - a;
        for (int b = 0; b < B; b++)
            memcpy(xt + (size_t)b * L * D, s->x + ((size_t)b * T + a) * D, (size_t)L * D * sizeof(rl));
        st = mega_block_step(&s->bl, s->P.data, S, ot, xt, L, scr);
        if (st != MEGA_OK) break;
        for (int b = 0; b < B; b++)
            memcpy(out + ((size_t)b * T + a) * D, ot + (size_t)b * L * D, (size_t)L * D * sizeof(rl));
        a += L;
    }
    free(xt), free(ot);
    return st;
}
static mega_status stream_from(sctx *s, mega_block_state *S, rl *scr, const int *sizes, rl *out, int a0) {
    return stream_range(s, S, scr, sizes, out, a0, s->T);
}

typedef struct {
    int kind, H, n, pre, norm, F, mask, nmax_extra;
} scfg;

static void run_config(const scfg *k, unsigned long long seed) {
    const int B = 2, T = 37, GUARD = 64;
    mega_block_cfg c;
    memset(&c, 0, sizeof c);
    c.mixer = (mega_mixer_kind)k->kind;
    c.D = 8, c.Z = 1, c.E = 1, c.N = 0, c.F = k->F, c.chunk = -1, c.max_positions = 16;
    c.prenorm = k->pre, c.norm_affine = 1, c.norm = (mega_norm_type)k->norm, c.act = MEGA_ACT_SILU;
    c.heads = k->H, c.memory = k->n, c.max_len = T + k->nmax_extra;
    sctx s;
    if (setup(&s, &c, k->mask, B, T, seed)) return;
    const size_t RD = (size_t)B * T * c.D;
    if (full_forward(&s, s.full)) {
        teardown(&s);
        return;
    }
    /* bounded memory: the state size does not depend on the capacity */
    const size_t ssz = mega_block_state_size(&s.bl, B, T);
    const size_t want = 2 * (size_t)B * c.memory * c.D + (c.mixer == MEGA_MIXER_ABC_MLP ? 2 * (size_t)B * c.heads * c.memory : 0);
    TL_CHECK(ssz == mega_block_state_size(&s.bl, B, 1) && ssz == mega_block_state_size(&s.bl, B, 100000) && ssz >= want &&
                 ssz <= want + 64,
             "%s: state size %zu reals, independent of the capacity (2 n D B (+ 2 H n B) = %zu)", s.name, ssz, want);
    const size_t scsz = mega_block_step_scratch(&s.bl, B, T, T);
    rl *mem = calloc(ssz + GUARD, sizeof(rl)), *scr = calloc(scsz + GUARD, sizeof(rl));
    for (int i = 0; i < GUARD; i++) mem[ssz + i] = (rl)777, scr[scsz + i] = (rl)777;
    rl *o1 = calloc(RD, sizeof(rl)), *o2 = calloc(RD, sizeof(rl));
    mega_block_state S;
    mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, T);
    TL_CHECK(st == MEGA_OK, "%s: state init (%s)", s.name, mega_last_error());
    if (st == MEGA_OK) {
        st = stream_from(&s, &S, scr, NULL, o1, 0);
        double e = rel_diff(o1, s.full, RD);
        g_worst = fmax(g_worst, e);
        TL_CHECK(st == MEGA_OK && e < STOL, "%s: token-by-token step == full forward: rel err %.2e", s.name, e);
        mega_block_state_reset(&s.bl, &S);
        st = stream_from(&s, &S, scr, NULL, o2, 0);
        TL_CHECK(st == MEGA_OK && !memcmp(o1, o2, RD * sizeof(rl)), "%s: reset + re-stream is bit-identical", s.name);
        int sz1[] = {2, 5, 6, 0}, sz2[] = {T, 0}, sz3[] = {1, 7, 2, 2, 1, 0}, sz4[] = {k->n + 1, 3, 0};
        const int *all[] = {sz1, sz2, sz3, sz4};
        for (int i = 0; i < 4; i++) {
            mega_block_state_reset(&s.bl, &S);
            memset(o2, 0, RD * sizeof(rl));
            st = stream_from(&s, &S, scr, all[i], o2, 0);
            e = rel_diff(o2, s.full, RD);
            g_worst = fmax(g_worst, e);
            TL_CHECK(st == MEGA_OK && e < STOL, "%s: multi-token split #%d == full forward: rel err %.2e (%s)", s.name, i, e,
                     st == MEGA_OK ? "ok" : mega_last_error());
        }
        if (c.mixer == MEGA_MIXER_ABC_LINFORMER && k->nmax_extra == 0) {
            /* max-len = T: one more token is refused and changes nothing */
            rl *xt = calloc((size_t)B * 3 * c.D, sizeof(rl)), *ot = calloc((size_t)B * 3 * c.D, sizeof(rl));
            mega_block_state_reset(&s.bl, &S);
            st = stream_range(&s, &S, scr, (int[]){T - 2, 0}, o2, 0, T - 2); /* the first T-2 positions */
            mega_status st3 = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 3, scr); /* T-2+3 > max-len */
            TL_CHECK(st == MEGA_OK && st3 == MEGA_ERR_INVALID && strstr(mega_last_error(), "max-len") && S.pos == T - 2,
                     "%s: a step past max-len fails with MEGA_ERR_INVALID and leaves the position (%s)", s.name,
                     mega_last_error());
            st = stream_from(&s, &S, scr, NULL, o2, T - 2); /* the last two still fit and match */
            double el = 0;
            for (int b = 0; b < B; b++)
                el = fmax(el, rel_diff(o2 + ((size_t)b * T + T - 2) * c.D, s.full + ((size_t)b * T + T - 2) * c.D, 2 * (size_t)c.D));
            TL_CHECK(st == MEGA_OK && el < STOL, "%s: after the refusal the last positions still match (%.2e)", s.name, el);
            st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 1, scr);
            TL_CHECK(st == MEGA_ERR_INVALID, "%s: position max-len refused", s.name);
            free(xt), free(ot);
        }
        int gm = 1, gs = 1;
        for (int i = 0; i < GUARD; i++) gm &= mem[ssz + i] == (rl)777, gs &= scr[scsz + i] == (rl)777;
        TL_CHECK(gm && gs, "%s: nothing written past the state memory (%s) or the step scratch (%s)", s.name,
                 gm ? "ok" : "OVERWRITTEN", gs ? "ok" : "OVERWRITTEN");
    }
    free(mem), free(scr), free(o1), free(o2);
    teardown(&s);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    enum { WIN = MEGA_MIXER_ABC_WINDOW, LIN = MEGA_MIXER_ABC_LINFORMER, MLP = MEGA_MIXER_ABC_MLP };
    enum { LN = MEGA_NORM_LAYER, SN = MEGA_NORM_SCALE, RN = MEGA_NORM_RMS };
    static const scfg cfgs[] = {
        /* kind H n pre norm F mask nmax_extra */
        {WIN, 2, 5, 1, LN, 12, 1, 0}, {WIN, 1, 5, 0, RN, 0, 0, 0},  {WIN, 4, 1, 1, SN, 12, 1, 0},
        {WIN, 2, 50, 0, LN, 12, 0, 0}, {WIN, 2, 50, 1, LN, 0, 1, 0}, {LIN, 2, 4, 1, LN, 12, 1, 0},
        {LIN, 1, 3, 0, RN, 0, 1, 9},  {LIN, 4, 8, 1, SN, 12, 1, 3},  {MLP, 2, 4, 1, LN, 12, 1, 0},
        {MLP, 1, 1, 0, SN, 0, 1, 0},  {MLP, 4, 6, 0, RN, 12, 1, 0},  {MLP, 2, 3, 1, RN, 0, 1, 0},
    };
    const int ncfg = (int)(sizeof cfgs / sizeof cfgs[0]);
    for (int i = 0; i < ncfg; i++) run_config(&cfgs[i], 4100 + (unsigned long long)i);
    printf("NOTE abc streaming: %d configurations, worst rel err %.2e (tolerance %.0e)\n", ncfg, g_worst, STOL);
    return tl_finish();
}
