/*
 * Streaming (incremental) decoding of causal Mega blocks (SPEC §2.8, §1.6) against the
 * eval-mode full forward (mega_run training = 0) over the whole sequence:
 *   (a) mega_block_step token by token;
 *   (b) mega_block_step with multi-token calls: a first call that ends exactly at a chunk
 *       border, then calls of other sizes (3, 5, the rest), and a second split that crosses
 *       the chunk borders anywhere (the step attends token by token, clearing the cache at
 *       every chunk border, so any split must work);
 *   (c) truncation: the step is untruncated (official incremental semantics), so it equals the
 *       full forward when truncation >= T (here T + 5), and it must DIFFER when truncation < T;
 * plus: mega_block_state_reset then re-streaming gives bit-identical outputs; a bidirectional
 * block refuses mega_block_state_init (MEGA_ERR_UNSUPPORTED); streaming past the capacity of a
 * full-attention cache fails with MEGA_ERR_INVALID without touching the state or the memory
 * around it; a capacity below the chunk size is refused; the step stays inside the scratch size
 * it asks for (batchnorm statistics with B*T = 1 and a wide FFN, guard zone checked).
 * Configurations: chunk 4 with T = 13 (cache cleared at chunk borders, ragged last chunk),
 * chunk 5, chunk = T, full attention; softmax / relu2 / laplace; simple / rotary; pre / post
 * norm; every norm, batchnorm with non-trivial running statistics (eval mode); with and
 * without the FFN; silu / gelu / relu; B = 2; D = 8, and D = 20 and 36 (a partial last EMA
 * channel block after one or more full ones).
 * Tolerance: 1e-5 of max |out| (float build), 1e-12 (double build, tests/t64_stream.c).
 */
#include "layers/block.h"
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
static unsigned long long g_seed = 0x57ea3eedull;
static double g_worst;

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}
/* the perturbation rules of tests/ref/gen_fixtures.py perturb() (incl. batchnorm buffers) */
static void perturb(mega_params *P, unsigned long long *seed) {
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        rl *w = P->data + s->offset;
        const char *nm = s->name, *leaf = strrchr(nm, '.') ? strrchr(nm, '.') + 1 : nm;
        size_t n = s->numel;
#define FILL(expr)                                                                            \
    for (size_t j = 0; j < n; j++) w[j] = (rl)(expr)
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
    int B, T, cap;
    rl *x, *full;
    char name[160];
} sctx;

static int setup(sctx *s, const mega_block_cfg *c, int B, int T, unsigned long long seed) {
    memset(s, 0, sizeof *s);
    s->c = *c, s->B = B, s->T = T;
    s->cap = c->chunk > 0 ? c->chunk : T;
    static const char *nn[] = {"LN", "SN", "RN", "BN"};
    snprintf(s->name, sizeof s->name, "%s/%s/%s/%s/%s/chunk%d/trunc%d/F%d/D%d/N%d", mega_attn_fn_name(c->attn_fn),
             c->rotary ? "rotary" : "simple", c->prenorm ? "pre" : "post", nn[c->norm], mega_act_name(c->act),
             c->chunk, c->trunc, c->F, c->D, c->N);
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

/* eval-mode forward over the whole sequence into out */
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

/* stream the sequence in calls of the given sizes (0-terminated; 1-token calls after the list
 * is exhausted), into out; returns the first failing status */
static mega_status stream(sctx *s, mega_block_state *S, rl *scr, const int *sizes, rl *out) {
    const int B = s->B, T = s->T, D = s->c.D;
    rl *xt = malloc((size_t)B * T * D * sizeof(rl)), *ot = malloc((size_t)B * T * D * sizeof(rl));
    mega_status st = MEGA_OK;
    int a = 0, k = 0;
    while (a < T) {
        int L = sizes && sizes[k] ? sizes[k++] : 1;
        if (L > T - a) L = T - a;
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

static void run_config(const mega_block_cfg *c, unsigned long long seed) {
    sctx s;
    const int B = 2, T = 13;
    if (setup(&s, c, B, T, seed)) return;
    const size_t RD = (size_t)B * T * c->D;
    if (full_forward(&s, s.full)) {
        teardown(&s);
        return;
    }
    mega_block_state S;
    rl *mem = calloc(mega_block_state_size(&s.bl, B, s.cap), sizeof(rl));
    rl *scr = calloc(mega_block_step_scratch(&s.bl, B, T, s.cap), sizeof(rl));
    rl *o1 = calloc(RD, sizeof(rl)), *o2 = calloc(RD, sizeof(rl));
    mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, s.cap);
    TL_CHECK(st == MEGA_OK, "%s: state init (%s)", s.name, mega_last_error());
    if (st != MEGA_OK) goto done;

    /* (a) token by token */
    st = stream(&s, &S, scr, NULL, o1);
    double e = rel_diff(o1, s.full, RD);
    g_worst = fmax(g_worst, e);
    TL_CHECK(st == MEGA_OK && e < STOL, "%s: token-by-token step == full forward: rel err %.2e", s.name, e);

    /* reset then re-stream: bit-identical */
    mega_block_state_reset(&s.bl, &S);
    st = stream(&s, &S, scr, NULL, o2);
    TL_CHECK(st == MEGA_OK && !memcmp(o1, o2, RD * sizeof(rl)), "%s: reset + re-stream gives identical outputs", s.name);

    /* (b) multi-token calls: first call ends at a chunk border (chunk, or 4 without chunking) */
    {
        int first = c->chunk > 0 && c->chunk < T ? c->chunk : 4;
        int sz1[] = {first, 3, 5, T, 0};
        int sz2[] = {2, 5, 6, 0};      /* crosses the borders of chunk 4 and 5 anywhere */
        int sz3[] = {T, 0};            /* the whole sequence at once */
        int sz4[] = {1, 7, 2, 2, 1, 0};
        const int *all[] = {sz1, sz2, sz3, sz4};
        for (int k = 0; k < 4; k++) {
            mega_block_state_reset(&s.bl, &S);
            memset(o2, 0, RD * sizeof(rl));
            st = stream(&s, &S, scr, all[k], o2);
            e = rel_diff(o2, s.full, RD);
            g_worst = fmax(g_worst, e);
            TL_CHECK(st == MEGA_OK && e < STOL, "%s: multi-token split #%d == full forward: rel err %.2e (%s)", s.name, k,
                     e, st == MEGA_OK ? "ok" : mega_last_error());
        }
    }
done:
    free(mem), free(scr), free(o1), free(o2);
    teardown(&s);
}

/* (c) truncation: >= T equal, < T must differ */
static void run_truncation(const mega_block_cfg *base, unsigned long long seed) {
    const int B = 2, T = 13;
    for (int k = 0; k < 2; k++) {
        mega_block_cfg c = *base;
        c.trunc = k == 0 ? T + 5 : 3;
        sctx s;
        if (setup(&s, &c, B, T, seed)) return;
        const size_t RD = (size_t)B * T * c.D;
        if (full_forward(&s, s.full) == 0) {
            mega_block_state S;
            rl *mem = calloc(mega_block_state_size(&s.bl, B, s.cap), sizeof(rl));
            rl *scr = calloc(mega_block_step_scratch(&s.bl, B, T, s.cap), sizeof(rl));
            rl *o = calloc(RD, sizeof(rl));
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, s.cap);
            if (st == MEGA_OK) st = stream(&s, &S, scr, NULL, o);
            double e = rel_diff(o, s.full, RD);
            if (k == 0) {
                g_worst = fmax(g_worst, e);
                TL_CHECK(st == MEGA_OK && e < STOL, "%s: truncation T+5 >= T: step == full forward: rel err %.2e", s.name, e);
            } else {
                /* the first K positions agree (the kernel is not cut there), later ones differ */
                double early = rel_diff(o, s.full, (size_t)c.trunc * c.D);
                TL_CHECK(st == MEGA_OK && e > 1e3 * STOL && early < STOL,
                         "%s: truncation 3 < T: the untruncated step differs from the truncated forward (rel diff %.2e, "
                         "first 3 positions %.2e)", s.name, e, early);
            }
            free(mem), free(scr), free(o);
        }
        teardown(&s);
    }
}

static void run_errors(void) {
    mega_block_cfg c;
    memset(&c, 0, sizeof c);
    c.D = 8, c.Z = 6, c.E = 10, c.N = 3, c.F = 12, c.chunk = -1, c.max_positions = 16;
    c.attn_fn = MEGA_ATTN_SOFTMAX, c.prenorm = 1, c.norm_affine = 1, c.norm = MEGA_NORM_LAYER, c.act = MEGA_ACT_SILU;

    /* bidirectional: no streaming state */
    {
        mega_block_cfg cb = c;
        cb.bidir = 1;
        sctx s;
        if (!setup(&s, &cb, 2, 13, 77)) {
            rl *mem = calloc(mega_block_state_size(&s.bl, 2, 13), sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, 2, 13);
            TL_CHECK(st == MEGA_ERR_UNSUPPORTED, "bidirectional block: state init refused with MEGA_ERR_UNSUPPORTED (got %d)",
                     (int)st);
            free(mem);
            teardown(&s);
        }
    }
    /* capacity: full attention with a cache of 5 positions */
    {
        sctx s;
        const int B = 2, T = 13, cap = 5, GUARD = 64;
        if (setup(&s, &c, B, T, 78)) return;
        const size_t D = (size_t)c.D, RD = (size_t)B * T * D;
        if (full_forward(&s, s.full) == 0) {
            size_t ssz = mega_block_state_size(&s.bl, B, cap);
            rl *mem = calloc(ssz + GUARD, sizeof(rl));
            for (int i = 0; i < GUARD; i++) mem[ssz + i] = (rl)12345;
            rl *scr = calloc(mega_block_step_scratch(&s.bl, B, 2, cap), sizeof(rl));
            rl *xt = calloc((size_t)B * 2 * D, sizeof(rl)), *ot = calloc((size_t)B * 2 * D, sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, cap);
            TL_CHECK(st == MEGA_OK, "capacity: state init (%s)", mega_last_error());
            double worst = 0;
            int ok = 1;
            for (int t = 0; t < 4 && st == MEGA_OK; t++) { /* 4 tokens: len 4 of 5 */
                for (int b = 0; b < B; b++) memcpy(xt + b * D, s.x + ((size_t)b * T + t) * D, D * sizeof(rl));
                st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 1, scr);
                for (int b = 0; b < B; b++) worst = fmax(worst, rel_diff(ot + b * D, s.full + ((size_t)b * T + t) * D, D));
            }
            ok &= st == MEGA_OK;
            /* 2 more tokens would overflow: refused, nothing changed */
            for (int b = 0; b < B; b++)
                memcpy(xt + b * 2 * D, s.x + ((size_t)b * T + 4) * D, 2 * D * sizeof(rl));
            st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 2, scr);
            TL_CHECK(st == MEGA_ERR_INVALID && S.len == 4,
                     "capacity: a 2-token call at length 4 of 5 fails with MEGA_ERR_INVALID (got %d, len %d)", (int)st, S.len);
            /* the 5th token still works and is still right (EMA state untouched by the failure) */
            for (int b = 0; b < B; b++) memcpy(xt + b * D, s.x + ((size_t)b * T + 4) * D, D * sizeof(rl));
            st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 1, scr);
            ok &= st == MEGA_OK;
            for (int b = 0; b < B; b++) worst = fmax(worst, rel_diff(ot + b * D, s.full + ((size_t)b * T + 4) * D, D));
            TL_CHECK(ok && worst < STOL, "capacity: 5 tokens into a cache of 5 match the full forward (%.2e)", worst);
            /* the 6th token: refused */
            for (int b = 0; b < B; b++) memcpy(xt + b * D, s.x + ((size_t)b * T + 5) * D, D * sizeof(rl));
            st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 1, scr);
            TL_CHECK(st == MEGA_ERR_INVALID, "capacity: the 6th token into a full cache of 5 fails with MEGA_ERR_INVALID (got %d)",
                     (int)st);
            int guard_ok = 1;
            for (int i = 0; i < GUARD; i++) guard_ok &= mem[ssz + i] == (rl)12345;
            TL_CHECK(guard_ok, "capacity: nothing written past the state memory");
            /* after a reset the same state streams again */
            mega_block_state_reset(&s.bl, &S);
            for (int b = 0; b < B; b++) memcpy(xt + b * D, s.x + ((size_t)b * T) * D, D * sizeof(rl));
            st = mega_block_step(&s.bl, s.P.data, &S, ot, xt, 1, scr);
            TL_CHECK(st == MEGA_OK && rel_diff(ot, s.full, D) < STOL, "capacity: usable again after a reset");
            free(mem), free(scr), free(xt), free(ot);
        }
        (void)RD;
        teardown(&s);
    }
    /* a cache smaller than the chunk is refused */
    {
        mega_block_cfg cc = c;
        cc.chunk = 4;
        sctx s;
        if (!setup(&s, &cc, 1, 13, 79)) {
            rl *mem = calloc(mega_block_state_size(&s.bl, 1, 4), sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, 1, 3);
            TL_CHECK(st == MEGA_ERR_INVALID, "state init with capacity 3 < chunk 4 refused (got %d)", (int)st);
            free(mem);
            teardown(&s);
        }
    }
    /* full attention with a simple bias: a cache longer than max_positions is refused */
    {
        sctx s;
        if (!setup(&s, &c, 1, 13, 80)) {
            rl *mem = calloc(mega_block_state_size(&s.bl, 1, 20), sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, 1, 20);
            TL_CHECK(st == MEGA_ERR_INVALID, "state init with capacity 20 > max_positions 16 (simple bias) refused (got %d)",
                     (int)st);
            free(mem);
            teardown(&s);
        }
    }
}

/* regression: batchnorm keeps 2*D statistics (not 2 per row): with B*T = 1 and a wide FFN the
 * step scratch (mega_block_step_scratch) used to be too small for them (heap overflow in
 * mega_nffn_step). The scratch is allocated exactly, followed by a guard zone. */
static void run_scratch_bounds(void) {
    for (int pre = 0; pre < 2; pre++) {
        mega_block_cfg c;
        memset(&c, 0, sizeof c);
        c.D = 64, c.Z = 8, c.E = 8, c.N = 2, c.F = 1024, c.chunk = 4, c.max_positions = 16;
        c.attn_fn = MEGA_ATTN_SOFTMAX, c.prenorm = pre, c.norm_affine = 1, c.norm = MEGA_NORM_BATCH, c.act = MEGA_ACT_SILU;
        sctx s;
        const int B = 1, T = 6, GUARD = 256;
        if (setup(&s, &c, B, T, 90 + (unsigned long long)pre)) return;
        if (full_forward(&s, s.full) == 0) {
            size_t ssz = mega_block_step_scratch(&s.bl, B, 1, s.cap);
            rl *scr = calloc(ssz + GUARD, sizeof(rl));
            for (int i = 0; i < GUARD; i++) scr[ssz + i] = (rl)4242;
            rl *mem = calloc(mega_block_state_size(&s.bl, B, s.cap), sizeof(rl));
            rl *o = calloc((size_t)B * T * c.D, sizeof(rl));
            mega_block_state S;
            mega_status st = mega_block_state_init(&s.bl, s.P.data, &S, mem, B, s.cap);
            if (st == MEGA_OK) st = stream(&s, &S, scr, NULL, o);
            int guard_ok = 1;
            for (int i = 0; i < GUARD; i++) guard_ok &= scr[ssz + i] == (rl)4242;
            double e = rel_diff(o, s.full, (size_t)B * T * c.D);
            g_worst = fmax(g_worst, e);
            TL_CHECK(st == MEGA_OK && guard_ok && e < STOL,
                     "%s B=1: step stays inside mega_block_step_scratch (%s) and matches the forward (%.2e)", s.name,
                     guard_ok ? "guard intact" : "GUARD OVERWRITTEN", e);
            free(scr), free(mem), free(o);
        }
        teardown(&s);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    enum { S_ = MEGA_ATTN_SOFTMAX, R_ = MEGA_ATTN_RELU2, L_ = MEGA_ATTN_LAPLACE };
    enum { LN = MEGA_NORM_LAYER, SN = MEGA_NORM_SCALE, RN = MEGA_NORM_RMS, BN = MEGA_NORM_BATCH };
    enum { SILU = MEGA_ACT_SILU, GELU = MEGA_ACT_GELU, RELU = MEGA_ACT_RELU };
    /* fn, rotary, prenorm, norm, act, chunk, F */
    static const int cfgs[][7] = {
        {S_, 0, 1, LN, SILU, 4, 12},  {R_, 1, 0, SN, GELU, 4, 0},   {L_, 0, 1, RN, SILU, -1, 12},
        {S_, 1, 0, BN, SILU, -1, 12}, {R_, 0, 1, BN, SILU, 4, 12},  {L_, 1, 0, LN, RELU, 5, 0},
        {S_, 0, 0, RN, GELU, 13, 12}, {R_, 1, 1, RN, SILU, -1, 0},  {L_, 0, 0, BN, GELU, 4, 12},
        {S_, 1, 1, SN, RELU, 5, 12},  {L_, 1, 1, BN, SILU, 4, 0},   {R_, 0, 0, LN, SILU, 20, 12},
        {S_, 0, 1, LN, SILU, 1, 12},
    };
    const int ncfg = (int)(sizeof cfgs / sizeof cfgs[0]);
    for (int i = 0; i < ncfg; i++) {
        mega_block_cfg c;
        memset(&c, 0, sizeof c);
        c.D = 8, c.Z = 6, c.E = 10, c.N = 3, c.F = cfgs[i][6], c.chunk = cfgs[i][5], c.max_positions = 16;
        c.attn_fn = (mega_attn_fn)cfgs[i][0], c.rotary = cfgs[i][1], c.prenorm = cfgs[i][2];
        c.norm = (mega_norm_type)cfgs[i][3], c.act = (mega_act)cfgs[i][4], c.norm_affine = 1;
        run_config(&c, 100 + (unsigned long long)i);
    }
    /* truncation: chunked and full attention */
    for (int k = 0; k < 2; k++) {
        mega_block_cfg c;
        memset(&c, 0, sizeof c);
        c.D = 8, c.Z = 6, c.E = 10, c.N = 3, c.F = 12, c.chunk = k ? -1 : 4, c.max_positions = 16;
        c.attn_fn = k ? MEGA_ATTN_LAPLACE : MEGA_ATTN_SOFTMAX, c.rotary = k, c.prenorm = !k;
        c.norm = k ? MEGA_NORM_BATCH : MEGA_NORM_LAYER, c.act = MEGA_ACT_SILU, c.norm_affine = 1;
        run_truncation(&c, 200 + (unsigned long long)k);
    }
    run_errors();
    run_scratch_bounds();
    /* widths that are not a multiple of the EMA's channel block (MEGA_EMA_DB: 16 or 8 floats, 8 or
     * 4 doubles): full blocks, read in place by the step, and a partial last block, which goes
     * through the zero-padded copy; N = 5 is a group of the EMA kernel plus a remainder. (Last, so
     * that the cases above keep their random inputs.) */
    for (int k = 0; k < 2; k++) {
        mega_block_cfg c;
        memset(&c, 0, sizeof c);
        c.D = k ? 36 : 20, c.Z = 6, c.E = 10, c.N = 5, c.F = 12, c.chunk = k ? -1 : 4, c.max_positions = 16;
        c.attn_fn = k ? MEGA_ATTN_RELU2 : MEGA_ATTN_SOFTMAX, c.rotary = k, c.prenorm = !k;
        c.norm = k ? MEGA_NORM_RMS : MEGA_NORM_LAYER, c.act = MEGA_ACT_SILU, c.norm_affine = 1;
        run_config(&c, 300 + (unsigned long long)k);
    }
    printf("NOTE %s: worst streaming rel err %.2e (tolerance %.0e)\n",
#ifdef MEGA_F64
           "t64_stream",
#else
           "test_stream",
#endif
           g_worst, STOL);
    return tl_finish();
}
