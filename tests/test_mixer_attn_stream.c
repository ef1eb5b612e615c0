/*
 * Streaming (incremental) decoding of the attention mixers mha, local and mhatw (SPEC §3.5,
 * §8.6, §4.1) against the eval-mode full causal forward of the same block (mixer norm ->
 * mixer -> residual -> NFFN) over the whole sequence (B = 2, T = 70, so the forward runs more
 * than one 64-row block):
 *   (a) mega_block_step token by token;
 *   (b) multi-token calls: {4, 3, 5, rest}, {2, 5, 6, ...}, the whole sequence at once,
 *       {1, 7, 2, 2, 1, ...};
 *   (c) reset, then re-streaming gives bit-identical outputs.
 * Configurations: mha with every causal positional scheme (none, rope, alibi, kerple-power,
 * kerple-log, sandwich, xpos), mha with a local mask (attn_window: the ring-buffer cache of
 * `window` slots, shorter than the stream) and with log-n scaling, local (window 5) with rope /
 * alibi / xpos, mhatw with max_len = T and max_len < T (distances, positions and gamma past the
 * learned range use the clamped values in both paths), pre/post norm, with and without the FFN.
 * Also: a bidirectional attention block refuses a streaming state; a full cache of capacity
 * cap fails cleanly (MEGA_ERR_INVALID, state unchanged) when a call would pass it; a windowed
 * mixer streams far past the capacity it was given (ring buffer); the step stays inside its
 * scratch and state sizes (guard zones).
 * XPOS at long lengths: mha + xpos + attn_window 16 over 100k positions, streamed in pieces,
 * equals the full forward and is finite, although the un-centred XPOS key factor overflows
 * float there (checked: zeta_0^(-1e5/512) is +inf in float; SPEC §8.5).
 * Tolerance: 1e-5 of max |out| (float build); 1e-12 in the double build
 * (tests/t64_mixer_attn_stream.c includes this file).
 */
#include "layers/block.h"
#include "ops/posenc.h"
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
static unsigned long long g_seed = 0x57ea7eedull;
static double g_worst;

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}
static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        rl *w = P->data + s->offset;
        const char *nm = s->name, *leaf = strrchr(nm, '.') ? strrchr(nm, '.') + 1 : nm;
        size_t n = s->numel;
#define FILL(expr)                                                                            \
    for (size_t j = 0; j < n; j++) w[j] = (rl)(expr)
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
            FILL(tl_randn(seed) / sqrt((double)s->shape[1]));
        } else if (!strcmp(leaf, "bias")) {
            FILL(0.1 * tl_randn(seed));
        } else {
            TL_CHECK(0, "perturb: no rule for %s", nm);
        }
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
    mega_block bl;
    mega_params P;
    mega_block_cfg c;
    int B, T;
    rl *x, *full;
    char name[200];
} sctx;

enum { MHA = MEGA_MIXER_MHA, LOC = MEGA_MIXER_LOCAL, TW = MEGA_MIXER_MHATW };

/* mixer, pos, window (local) / attn_window (others), log-n train_len, mhatw max_len, pre, F */
typedef struct {
    int mixer, pos, win, logn, Tm, pre, F, H;
} scfg;

static void fill_cfg(mega_block_cfg *c, const scfg *g) {
    memset(c, 0, sizeof *c);
    c->mixer = (mega_mixer_kind)g->mixer;
    c->D = 8, c->Z = 4, c->E = 4, c->N = 2, c->F = g->F, c->chunk = -1, c->max_positions = 16;
    c->prenorm = g->pre, c->norm_affine = 1, c->norm = g->pre ? MEGA_NORM_LAYER : MEGA_NORM_RMS, c->act = MEGA_ACT_SILU;
    c->heads = g->H, c->pos = (mega_pos_kind)g->pos;
    if (g->mixer == LOC) c->window = g->win;
    else c->attn_window = g->win;
    c->log_n = g->logn > 0, c->train_len = g->logn, c->max_len = g->Tm;
}

static int setup(sctx *s, const mega_block_cfg *c, int B, int T, unsigned long long seed) {
    memset(s, 0, sizeof *s);
    s->c = *c, s->B = B, s->T = T;
    snprintf(s->name, sizeof s->name, "%s/%s/win%d/attn-win%d/logn%d/Tm%d/%s/F%d/T%d", mega_mixer_name(c->mixer),
             mega_pos_name(c->pos), c->window, c->attn_window, c->train_len, c->max_len, c->prenorm ? "pre" : "post",
             c->F, T);
    mega_params_init(&s->P);
    if (mega_block_declare(&s->bl, &s->P, "decoder.layers.0.", c) || mega_params_alloc(&s->P, 0)) {
        TL_CHECK(0, "%s: declare: %s", s->name, mega_last_error());
        mega_params_free(&s->P);
        return -1;
    }
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

/* stream in calls of the given sizes (0-terminated; then calls of `rest` tokens) */
static mega_status stream(sctx *s, mega_block_state *S, rl *scr, const int *sizes, int rest, rl *out) {
    const int B = s->B, T = s->T, D = s->c.D;
    const int maxL = 1024;
    rl *xt = malloc((size_t)B * maxL * D * sizeof(rl)), *ot = malloc((size_t)B * maxL * D * sizeof(rl));
    mega_status st = MEGA_OK;
    int a = 0, k = 0;
    while (a < T) {
        int L = sizes && sizes[k] ? sizes[k++] : rest;
        if (L > T - a) L = T - a;
        if (L > maxL) L = maxL;
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

static void run_config(const scfg *g, unsigned long long seed) {
    mega_block_cfg c;
    fill_cfg(&c, g);
    const int B = 2, T = 70;
    if (g->mixer == TW && c.max_len == 0) c.max_len = T;
    sctx s;
    if (setup(&s, &c, B, T, seed)) return;
    const size_t RD = (size_t)B * T * c.D;
    if (full_forward(&s, s.full)) {
        teardown(&s);
        return;
    }
    /* capacity T (a windowed mixer keeps only its window whatever the capacity); guard zones */
    const int GUARD = 64, cap = T;
    const size_t ssz = mega_block_state_size(&s.bl, B, cap), csz = mega_block_step_scratch(&s.bl, B, T, cap);
    rl *mem = calloc(ssz + GUARD, sizeof(rl)), *scr = calloc(csz + GUARD, sizeof(rl));
    for (int i = 0; i < GUARD; i++) mem[ssz + i] = scr[csz + i] = (rl)777;
    rl *o1 = calloc(RD, sizeof(rl)), *o2 = calloc(RD, sizeof(rl));
    mega_block_state S;
    mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, cap);
    TL_CHECK(st == MEGA_OK, "%s: state init (%s)", s.name, mega_last_error());
    if (st == MEGA_OK) {
        st = stream(&s, &S, scr, NULL, 1, o1);
        double e = rel_diff(o1, s.full, RD);
        g_worst = fmax(g_worst, e);
        TL_CHECK(st == MEGA_OK && e < STOL, "%s: token-by-token step == full forward: rel err %.2e", s.name, e);
        mega_block_state_reset(&s.bl, &S);
        st = stream(&s, &S, scr, NULL, 1, o2);
        TL_CHECK(st == MEGA_OK && !memcmp(o1, o2, RD * sizeof(rl)), "%s: reset + re-stream gives identical outputs", s.name);
        int sz1[] = {4, 3, 5, 0}, sz2[] = {2, 5, 6, 0}, sz3[] = {T, 0}, sz4[] = {1, 7, 2, 2, 1, 0};
        const int *all[] = {sz1, sz2, sz3, sz4}, rest[] = {T, 6, T, 9};
        for (int k = 0; k < 4; k++) {
            mega_block_state_reset(&s.bl, &S);
            memset(o2, 0, RD * sizeof(rl));
            st = stream(&s, &S, scr, all[k], rest[k], o2);
            e = rel_diff(o2, s.full, RD);
            g_worst = fmax(g_worst, e);
            TL_CHECK(st == MEGA_OK && e < STOL, "%s: multi-token split #%d == full forward: rel err %.2e (%s)", s.name, k, e,
                     st == MEGA_OK ? "ok" : mega_last_error());
        }
    }
    int guard_ok = 1;
    for (int i = 0; i < GUARD; i++) guard_ok &= mem[ssz + i] == (rl)777 && scr[csz + i] == (rl)777;
    TL_CHECK(guard_ok, "%s: the step stays inside its state and scratch sizes", s.name);
    free(mem), free(scr), free(o1), free(o2);
    teardown(&s);
}

static void run_errors(void) {
    /* bidirectional: no streaming state */
    {
        scfg g = {MHA, MEGA_POS_ROPE, 0, 0, 0, 1, 16, 2};
        mega_block_cfg c;
        fill_cfg(&c, &g);
        c.bidir = 1;
        sctx s;
        if (!setup(&s, &c, 2, 9, 71)) {
            rl *mem = calloc(mega_block_state_size(&s.bl, 2, 9) + 1, sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, 2, 9);
            TL_CHECK(st == MEGA_ERR_UNSUPPORTED, "bidirectional mha: state init refused (got %d)", (int)st);
            free(mem);
            teardown(&s);
        }
    }
    /* a full cache of 5: 4 tokens, then a 2-token call is refused with the state unchanged */
    {
        scfg g = {TW, MEGA_POS_ALIBI, 0, 0, 9, 1, 16, 2};
        mega_block_cfg c;
        fill_cfg(&c, &g);
        sctx s;
        const int B = 2, T = 9, cap = 5;
        if (!setup(&s, &c, B, T, 72) && !full_forward(&s, s.full)) {
            const size_t D = (size_t)c.D;
            rl *mem = calloc(mega_block_state_size(&s.bl, B, cap), sizeof(rl));
            rl *scr = calloc(mega_block_step_scratch(&s.bl, B, 2, cap), sizeof(rl));
            rl *xt = calloc((size_t)B * 2 * D, sizeof(rl)), *ot = calloc((size_t)B * 2 * D, sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, cap);
            double worst = 0;
            for (int t = 0; t < 4 && st == MEGA_OK; t++) {
                for (int b = 0; b < B; b++) memcpy(xt + b * D, s.x + ((size_t)b * T + t) * D, D * sizeof(rl));
                st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 1, scr);
                for (int b = 0; b < B; b++) worst = fmax(worst, rel_diff(ot + b * D, s.full + ((size_t)b * T + t) * D, D));
            }
            for (int b = 0; b < B; b++) memcpy(xt + b * 2 * D, s.x + ((size_t)b * T + 4) * D, 2 * D * sizeof(rl));
            mega_status st2 = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 2, scr);
            TL_CHECK(st == MEGA_OK && st2 == MEGA_ERR_INVALID && S.pos == 4 && S.len == 4,
                     "capacity: a 2-token call at 4 of 5 fails with MEGA_ERR_INVALID, state unchanged (got %d, pos %lld) (%s)",
                     (int)st2, (long long)S.pos, mega_last_error());
            for (int b = 0; b < B; b++) memcpy(xt + b * D, s.x + ((size_t)b * T + 4) * D, D * sizeof(rl));
            st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 1, scr);
            for (int b = 0; b < B; b++) worst = fmax(worst, rel_diff(ot + b * D, s.full + ((size_t)b * T + 4) * D, D));
            TL_CHECK(st == MEGA_OK && worst < STOL, "capacity: 5 tokens into a cache of 5 match the full forward (%.2e)", worst);
            free(mem), free(scr), free(xt), free(ot);
        }
        teardown(&s);
    }
    /* a windowed mixer streams far past its capacity argument: ring buffer of `window` slots */
    {
        scfg g = {LOC, MEGA_POS_XPOS, 5, 3, 0, 1, 16, 2};
        mega_block_cfg c;
        fill_cfg(&c, &g);
        sctx s;
        const int B = 2, T = 70, cap = 3;
        if (!setup(&s, &c, B, T, 73) && !full_forward(&s, s.full)) {
            const size_t RD = (size_t)B * T * c.D;
            rl *mem = calloc(mega_block_state_size(&s.bl, B, cap), sizeof(rl));
            rl *scr = calloc(mega_block_step_scratch(&s.bl, B, 4, cap), sizeof(rl)), *o = calloc(RD, sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, cap);
            int sz[] = {0};
            if (st == MEGA_OK) st = stream(&s, &S, scr, sz, 4, o);
            const double e = rel_diff(o, s.full, RD);
            g_worst = fmax(g_worst, e);
            TL_CHECK(st == MEGA_OK && e < STOL && S.len == 5,
                     "local window 5 with capacity 3: streams %d tokens (ring of %d slots) == full forward: rel err %.2e", T,
                     S.len, e);
            free(mem), free(scr), free(o);
        }
        teardown(&s);
    }
}

/* XPOS at 100k positions in pieces of 1000 (window 16) */
static void run_xpos_long(void) {
    const double z0 = mega_xpos_zeta(0, 4);
    TL_CHECK(isinf((float)pow(z0, -100000.0 / MEGA_XPOS_BASE)),
             "the un-centred XPOS key factor zeta_0^(-1e5/512) overflows float (%.3g): re-centring is needed",
             pow(z0, -100000.0 / MEGA_XPOS_BASE));
    scfg g = {MHA, MEGA_POS_XPOS, 16, 0, 0, 1, 0, 2};
    mega_block_cfg c;
    fill_cfg(&c, &g);
    const int B = 1, T = 100000;
    sctx s;
    if (setup(&s, &c, B, T, 74) || full_forward(&s, s.full)) {
        teardown(&s);
        return;
    }
    const size_t RD = (size_t)B * T * c.D;
    rl *mem = calloc(mega_block_state_size(&s.bl, B, T), sizeof(rl));
    rl *scr = calloc(mega_block_step_scratch(&s.bl, B, 1000, T), sizeof(rl)), *o = calloc(RD, sizeof(rl));
    mega_block_state S;
    mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, T);
    int sz[] = {0};
    if (st == MEGA_OK) st = stream(&s, &S, scr, sz, 1000, o);
    int finite = 1;
    for (size_t i = 0; i < RD; i++) finite &= isfinite((double)s.full[i]) && isfinite((double)o[i]);
    const double e = rel_diff(o, s.full, RD);
    g_worst = fmax(g_worst, e);
    TL_CHECK(st == MEGA_OK && finite && e < STOL,
             "XPOS + attn-window 16 over %d positions: forward and stream finite, stream == forward: rel err %.2e", T, e);
    free(mem), free(scr), free(o);
    teardown(&s);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    enum { PN = MEGA_POS_NONE, PR = MEGA_POS_ROPE, PA = MEGA_POS_ALIBI, PKP = MEGA_POS_KERPLE_POWER,
           PKL = MEGA_POS_KERPLE_LOG, PS = MEGA_POS_SANDWICH, PX = MEGA_POS_XPOS };
    /* mixer pos win logn Tm pre F H */
    static const scfg CF[] = {
        {MHA, PN, 0, 0, 0, 1, 16, 2},  {MHA, PR, 0, 0, 0, 0, 16, 2}, {MHA, PA, 0, 0, 0, 1, 0, 4},
        {MHA, PKP, 0, 0, 0, 1, 16, 2}, {MHA, PKL, 0, 0, 0, 0, 16, 2}, {MHA, PS, 0, 0, 0, 1, 16, 2},
        {MHA, PX, 0, 0, 0, 1, 16, 2},  {MHA, PR, 6, 0, 0, 1, 16, 2}, {MHA, PX, 9, 20, 0, 0, 16, 2},
        {MHA, PA, 0, 10, 0, 1, 16, 2}, {LOC, PR, 5, 0, 0, 1, 16, 2}, {LOC, PA, 5, 4, 0, 0, 0, 2},
        {LOC, PX, 5, 0, 0, 1, 16, 2},  {TW, PN, 0, 0, 0, 1, 16, 2},  {TW, PN, 0, 0, 25, 0, 16, 2},
        {TW, PR, 0, 30, 40, 1, 16, 2}, {TW, PKL, 8, 0, 12, 1, 16, 2}, {TW, PX, 0, 0, 33, 1, 0, 4},
    };
    for (size_t i = 0; i < sizeof CF / sizeof CF[0]; i++) run_config(&CF[i], 500 + i);
    run_errors();
    run_xpos_long();
    printf("NOTE worst streaming rel err %.2e\n", g_worst);
    return tl_finish();
}
