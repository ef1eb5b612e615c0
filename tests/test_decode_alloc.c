/*
 * The streaming decode path (issue 6): no allocation per token, and the decode-specific kernels
 * compute what the plain ones do.
 *
 * (1) No allocation per token. This executable defines malloc, calloc, realloc, free,
 * posix_memalign, memalign, aligned_alloc, valloc and pvalloc itself and forwards them to glibc's
 * __libc_* entry points, so every allocation of the process goes through a counter: the
 * library's, libgomp's (it allocates a team descriptor for a parallel region of one thread),
 * LLVM libomp's (its worksharing-loop setup) and OpenBLAS's (its threaded GEMM mallocs a job
 * table per call). The dynamic linker binds the shared libraries' calls to the executable's
 * definitions, because the executable exports every symbol a shared library on its link line
 * references. For the lm-decode bench model (4 layers, D 256, Z 64, E 512, F 512, N 16, vocab
 * 257; chunk 64 instead of 256 to keep the test short: the step takes the same paths) at batch 1
 * and 8, with 1 and 2 threads: after a warm-up of 72 generated tokens (past the first chunk
 * border, where the attention cache is cleared), greedy generation of 16 (on the calling thread
 * alone) and then 64 more tokens (on the step team; across another border) through
 * mega_lm_stream_feed (one token per call, logits requested) must make no allocation at all. The counts per window are printed (NOTE lines), so a failure
 * says how many allocations a token costs. Skipped with a NOTE where the interposition cannot
 * work: C libraries other than glibc (no __libc_malloc) and sanitizer builds (SAN=1: ASan owns
 * malloc).
 * (2) At the bench shapes, streaming (a prompt in one call, then one token per call, B = 3)
 * equals the full forward to 1e-4 of max |logit|, and gives the same bits with 1 and 2 threads.
 * (3) A stream's steps run on the thread team or on the calling thread alone, whichever its tuner
 * measures faster (ops/stepteam.c): 300 tokens always on the team, always alone and chosen by the
 * tuner (which must have timed both ways: windows of 20 ms) give the same bits, at B = 1 and 8,
 * 2 threads.
 * (4) The step's products (mega_linear_step, mega_gemm_step: output columns in pieces, over the
 * threads) give the same bits with 1 and 2 threads on the decode shapes and agree with
 * mega_linear_forward / mega_gemm to rounding; up to 16 rows, each row has the bits of its one-row
 * product. (The step's attention query is checked against a double-precision reference in
 * t64_attn.)
 */
#include "mega_data.h"
#include "model/lm.h"
#include "ops/ops.h"
#include "ops/vec.h" /* MEGA_VEC: the vector step kernels are built */
#include "testlib.h"
#define MEGA_S2S_EOS_ID MEGA_S2S_EOS
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define NO_INTERPOSE "sanitizer build"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define NO_INTERPOSE "sanitizer build"
#endif
#endif
#if !defined(NO_INTERPOSE) && !defined(__GLIBC__)
#define NO_INTERPOSE "not glibc (no __libc_malloc to forward to)"
#endif

/* the lm-decode bench model (tools/bench.c lm_bench_config) with chunk 64 */
static void bench_config(mega_lm_config *c) {
    mega_lm_config_default(c);
    c->vocab_size = 257, c->padding_idx = 256;
    c->layers = 4, c->block.embed_dim = 256, c->block.z_dim = 64, c->block.hidden_dim = 512, c->block.ffn_dim = 512, c->block.n_dim = 16;
    c->block.chunk_size = 64, c->block.truncation = 0, c->block.max_positions = 1024;
    c->block.attention_activation = MEGA_ATTN_SOFTMAX, c->block.norm_type = MEGA_NORM_LAYER, c->block.prenorm = 1;
    c->block.rel_pos_bias = MEGA_RELPOS_SIMPLE, c->block.activation = MEGA_ACT_SILU, c->scale_embedding = 1, c->tie_embeddings = 0;
    c->block.dropout = c->block.attention_dropout = c->block.hidden_dropout = c->block.activation_dropout = 0;
}

/* ---- the allocation counter ------------------------------------------------------------ */

#ifndef NO_INTERPOSE
static unsigned long g_allocs; /* updated atomically: BLAS and OpenMP threads allocate too */
static int g_counting;

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static void count_one(void) {
    if (__atomic_load_n(&g_counting, __ATOMIC_RELAXED)) __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
}
void *malloc(size_t n) {
    count_one();
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t s) {
    count_one();
    return __libc_calloc(n, s);
}
void *realloc(void *p, size_t n) {
    count_one();
    return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }
void *memalign(size_t al, size_t n) {
    count_one();
    return __libc_memalign(al, n);
}
void *aligned_alloc(size_t al, size_t n) {
    count_one();
    return __libc_memalign(al, n);
}
int posix_memalign(void **out, size_t al, size_t n) {
    count_one();
    if (al < sizeof(void *) || (al & (al - 1))) return EINVAL;
    void *p = __libc_memalign(al, n);
    if (!p && n) return ENOMEM;
    *out = p;
    return 0;
}
void *valloc(size_t n) {
    count_one();
    return __libc_valloc(n);
}
void *pvalloc(size_t n) {
    count_one();
    return __libc_pvalloc(n);
}

static void counting(int on) { __atomic_store_n(&g_counting, on, __ATOMIC_SEQ_CST); }
static unsigned long allocs(void) { return __atomic_load_n(&g_allocs, __ATOMIC_SEQ_CST); }

/* ---- decode ---------------------------------------------------------------------------- */

/* greedy generation of n tokens, one per call (the bench's decode loop) */
static int generate(mega_lm_stream *s, int B, int V, int32_t *tok, mega_real *logits, int n) {
    for (int t = 0; t < n; t++) {
        if (mega_lm_stream_feed(s, tok, 1, logits) != MEGA_OK) return -1;
        for (int b = 0; b < B; b++) {
            const mega_real *l = logits + (size_t)b * V;
            int best = 0;
            for (int v = 1; v < 256; v++)
                if (l[v] > l[best]) best = v;
            tok[b] = best;
        }
    }
    return 0;
}

static void check_decode(mega_lm *m, int B, int threads) {
    const int V = mega_lm_get_config(m)->vocab_size;
    mega_set_threads(threads);
    mega_lm_stream *s = NULL;
    mega_real *logits = malloc((size_t)B * V * sizeof *logits);
    int32_t *tok = malloc((size_t)B * sizeof *tok);
    if (mega_lm_stream_new(m, B, 1024, &s) != MEGA_OK || !logits || !tok) {
        TL_CHECK(0, "decode B=%d threads=%d: setup: %s", B, threads, mega_last_error());
        free(logits), free(tok), mega_lm_stream_free(s);
        return;
    }
    for (int b = 0; b < B; b++) tok[b] = 'A' + b;
    int rc = generate(s, B, V, tok, logits, 72); /* warm-up: thread pool, BLAS buffers, a chunk border */
    static const int win[2] = {16, 64};
    unsigned long got[2] = {0, 0};
    for (int w = 0; w < 2 && !rc; w++) {
        /* the first window on the calling thread alone, the second on the team (the tuner's two
         * ways, both taken during the warm-up) */
        s->tune.force = 1 + w;
        unsigned long a0 = allocs();
        counting(1);
        rc = generate(s, B, V, tok, logits, win[w]);
        counting(0);
        got[w] = allocs() - a0;
    }
    TL_CHECK(!rc, "decode B=%d threads=%d: feed failed: %s", B, threads, mega_last_error());
    printf("NOTE decode B=%d threads=%d: %lu allocations over %d tokens, %lu over %d (%.2f per token)\n", B,
           threads, got[0], win[0], got[1], win[1], (double)got[1] / win[1]);
    TL_CHECK(got[0] == 0 && got[1] == 0, "decode B=%d threads=%d allocates in steady state: %lu over %d tokens, %lu over %d",
             B, threads, got[0], win[0], got[1], win[1]);
    free(logits), free(tok);
    mega_lm_stream_free(s);
}
/* The encoder-decoder's decoding (mega_s2s_stream_step with gated cross-attention and a chunked
 * Mega decoder; beam-style reorders between steps): no allocation per generated token either */
static void check_s2s_decode(int B, int threads) {
    mega_set_threads(threads);
    mega_s2s_config c;
    mega_s2s_config_default(&c);
    c.encoder.chunk_size = 16;
    c.decoder = c.encoder;
    c.decoder.bidirectional = 0;
    mega_s2s *m = NULL;
    mega_s2s_stream *s = NULL;
    const int S = 24, V = c.tgt_vocab_size, K = 2;
    int32_t *src = malloc((size_t)B * S * sizeof(int32_t)), *tok = malloc((size_t)B * K * sizeof(int32_t));
    int *idx = malloc((size_t)B * K * sizeof(int));
    mega_real *logits = malloc((size_t)B * K * V * sizeof *logits);
    for (int i = 0; i < B * S; i++) src[i] = i % S == S - 1 ? MEGA_S2S_EOS_ID : 'a' + i % 26;
    if (mega_s2s_create(&c, &m) != MEGA_OK || mega_s2s_stream_new(m, B * K, S, 200, &s) != MEGA_OK ||
        mega_s2s_stream_start(s, src, S, K) != MEGA_OK) {
        TL_CHECK(0, "s2s decode B=%d threads=%d: setup: %s", B, threads, mega_last_error());
    } else {
        for (int r = 0; r < B * K; r++) tok[r] = MEGA_S2S_EOS_ID, idx[r] = (r / K) * K + (K - 1 - r % K);
        int rc = 0;
        unsigned long got = 0;
        for (int t = 0; t < 100 && !rc; t++) {
            unsigned long a0 = allocs();
            if (t >= 40) counting(1); /* after a warm-up past two chunk borders */
            rc = mega_s2s_stream_step(s, tok, logits) || mega_s2s_stream_reorder(s, idx);
            counting(0);
            if (t >= 40) got += allocs() - a0;
            for (int r = 0; r < B * K; r++) tok[r] = 'a' + (t + r) % 26;
        }
        TL_CHECK(!rc, "s2s decode B=%d threads=%d: step failed: %s", B, threads, mega_last_error());
        printf("NOTE s2s decode B=%d (x beam %d) threads=%d: %lu allocations over 60 steps\n", B, K, threads, got);
        TL_CHECK(got == 0, "s2s decode B=%d threads=%d allocates in steady state: %lu over 60 steps", B, threads, got);
    }
    mega_s2s_stream_free(s);
    mega_s2s_free(m);
    free(src), free(tok), free(idx), free(logits);
}
#endif /* !NO_INTERPOSE */

/* ---- the step products ---------------------------------------------------------------- */

/* max |a - b| / max |b| */
static double rel_diff(const mega_real *a, const mega_real *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* Streaming at the bench shapes (the step team, the split products, the transposed key cache,
 * chunk borders) equals the full forward: B sequences, a 20-token prompt fed in one call, then
 * 100 tokens one at a time; the logits of every position against mega_lm_forward (eval mode)
 * over the whole input, within 1e-4 of max |logit| (test_lm's tolerance). The logits are kept
 * in *keep (B*T*V reals, caller frees) to compare thread counts. With 2 threads, B = 9 runs as
 * groups of sequences (lm.c, stream_groups: the prompt one group after the other, the tokens
 * side by side); with 1 thread the tokens run as one batch, so the two must give the same bits.
 * groups: the stream's groups (1 = none). A feed with a bad token in the last sequence fails,
 * names the token and feeds nothing (every group included). */
enum { SV_P = 20, SV_G = 100, SV_T = SV_P + SV_G }; /* prompt, generated, total */

static void check_stream_vs_forward(mega_lm *m, int B, int threads, mega_real **keep, int *groups) {
    enum { P = SV_P, T = SV_T };
    const int V = mega_lm_get_config(m)->vocab_size;
    mega_set_threads(threads);
    int32_t *in = malloc((size_t)B * T * sizeof *in), *prompt = malloc((size_t)B * P * sizeof *prompt);
    int32_t *tok = malloc((size_t)B * sizeof *tok);
    mega_real *ls = malloc((size_t)B * T * V * sizeof *ls), *step = malloc((size_t)B * P * V * sizeof *step);
    mega_lm_stream *s = NULL;
    *keep = NULL, *groups = 0;
    if (!in || !prompt || !tok || !ls || !step || mega_lm_stream_new(m, B, 1024, &s) != MEGA_OK) {
        TL_CHECK(0, "stream vs forward B=%d: setup: %s", B, mega_last_error());
        free(in), free(prompt), free(tok), free(ls), free(step), mega_lm_stream_free(s);
        return;
    }
    *groups = s->ngroups;
    unsigned long long seed = 0x5eed;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < P; t++) in[(size_t)b * T + t] = prompt[(size_t)b * P + t] = (int32_t)(tl_rand01(&seed) * 256);
    int ok = mega_lm_stream_feed(s, prompt, P, step) == MEGA_OK;
    for (int b = 0; b < B && ok; b++) memcpy(ls + (size_t)b * T * V, step + (size_t)b * P * V, (size_t)P * V * sizeof *ls);
    for (int t = P; t < T && ok; t++) {
        for (int b = 0; b < B; b++) { /* greedy from the previous position's logits */
            const mega_real *l = ls + ((size_t)b * T + t - 1) * V;
            int best = 0;
            for (int v = 1; v < 256; v++)
                if (l[v] > l[best]) best = v;
            tok[b] = in[(size_t)b * T + t] = best;
        }
        if (t == P + 7) { /* a bad token in the last sequence: an error, nothing fed */
            const int32_t keep_tok = tok[B - 1];
            tok[B - 1] = V + 3;
            const int64_t pos = mega_lm_stream_pos(s);
            const mega_status st = mega_lm_stream_feed(s, tok, 1, step);
            TL_CHECK(st == MEGA_ERR_INVALID && strstr(mega_last_error(), "token") && mega_lm_stream_pos(s) == pos,
                     "B=%d threads %d: a bad token fails the feed (%s) and feeds nothing", B, threads,
                     mega_last_error());
            tok[B - 1] = keep_tok;
        }
        ok = mega_lm_stream_feed(s, tok, 1, step) == MEGA_OK;
        for (int b = 0; b < B && ok; b++) memcpy(ls + ((size_t)b * T + t) * V, step + (size_t)b * V, (size_t)V * sizeof *ls);
    }
    mega_lm_run run = {0, 0};
    ok = ok && mega_lm_forward(m, in, NULL, B, T, &run, NULL, NULL) == MEGA_OK;
    TL_CHECK(ok, "stream vs forward (B=%d, threads %d): %s", B, threads, ok ? "" : mega_last_error());
    if (ok) {
        double e = rel_diff(ls, mega_lm_logits(m), (size_t)B * T * V);
        printf("NOTE stream vs full forward, bench shapes, B=%d, threads %d (%d groups): worst %.2e of max |logit|\n", B,
               threads, *groups, e);
        TL_CHECK(e < 1e-4, "stream == full forward at the bench shapes (B=%d, threads %d): %.2e", B, threads, e);
    }
    *keep = ls;
    free(in), free(prompt), free(tok), free(step);
    mega_lm_stream_free(s);
}

/* Decoding token by token, a sequence gets the same bits whatever batch it is in: B = 9 (groups
 * of sequences, lm.c stream_groups) and B = 3 (one batch) against each sequence decoded alone,
 * 80 greedy tokens from one start token (past a chunk border), 2 threads. */
static void check_batch_independent(mega_lm *m) {
    enum { N = 80 };
    const int V = mega_lm_get_config(m)->vocab_size;
    mega_set_threads(2);
    for (int B = 3; B <= 9; B += 6) {
        int32_t *seq = malloc((size_t)B * N * sizeof *seq), tok[9];
        mega_real *lb = malloc((size_t)B * N * V * sizeof *lb), *l1 = malloc((size_t)V * sizeof *l1);
        mega_lm_stream *s = NULL, *one = NULL;
        int ok = seq && lb && l1 && mega_lm_stream_new(m, B, 1024, &s) == MEGA_OK &&
                 mega_lm_stream_new(m, 1, 1024, &one) == MEGA_OK;
        const int G = ok ? s->ngroups : 0;
        for (int b = 0; b < B; b++) tok[b] = 'a' + 2 * b;
        for (int t = 0; t < N && ok; t++) {
            for (int b = 0; b < B; b++) seq[(size_t)b * N + t] = tok[b];
            ok = mega_lm_stream_feed(s, tok, 1, lb + (size_t)t * B * V) == MEGA_OK;
            for (int b = 0; b < B && ok; b++) {
                const mega_real *l = lb + ((size_t)t * B + b) * V;
                int best = 0;
                for (int v = 1; v < 256; v++)
                    if (l[v] > l[best]) best = v;
                tok[b] = best;
            }
        }
        int differ = 0;
        for (int b = 0; b < B && ok; b++) {
            mega_lm_stream_reset(one);
            for (int t = 0; t < N && ok; t++) {
                ok = mega_lm_stream_feed(one, seq + (size_t)b * N + t, 1, l1) == MEGA_OK;
                differ += ok && memcmp(l1, lb + ((size_t)t * B + b) * V, (size_t)V * sizeof *l1) != 0;
            }
        }
        TL_CHECK(ok, "batch independence B=%d: %s", B, ok ? "" : mega_last_error());
        TL_CHECK(ok && !differ, "B=%d (%d groups): each sequence decodes to the bits it has alone (%d of %d steps differ)",
                 B, G, differ, B * N);
        free(seq), free(lb), free(l1);
        mega_lm_stream_free(s), mega_lm_stream_free(one);
    }
    mega_set_threads(0);
}

/* mega_linear_step / mega_gemm_step (output columns split over the threads, in pieces) give the
 * same bits with 1 and 2 threads, and agree with mega_linear_forward / mega_gemm to rounding
 * (a different BLAS kernel may sum in another order). Up to 16 rows (batch decoding), each row
 * of the product has the bits of that row multiplied alone: a sequence decodes to the same
 * tokens whatever the batch it is in (gemm.c, step_dots: tiles of 4 rows, the rows left over one
 * at a time, every output the same tree of sums). */
static void check_step_products(void) {
    /* decode shapes: v_proj / fc1, mx_proj, h_proj / fc2, the output layer; odd sizes for the
     * slice and piece boundaries (K 300 and 33: a K % 16 tail); rows 1 (batch 1), 2-17 (the
     * few-row tiles and the rows left over; batch 8) and a prompt piece */
    static const size_t shapes[][2] = {{256, 512}, {256, 1088}, {512, 256}, {256, 257}, {300, 77}, {33, 1000}};
    static const size_t rows[] = {1, 2, 3, 4, 5, 8, 13, 16, 17, 64};
    unsigned long long seed = 0xdec0de;
    int differ = 0, checked = 0, row_differ = 0, row_checked = 0;
    double worst = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const size_t In = shapes[s][0], O = shapes[s][1], R = rows[ri];
            mega_real *X = malloc(R * In * sizeof *X), *W = malloc(O * In * sizeof *W), *b = malloc(O * sizeof *b);
            mega_real *Y[3];
            for (int i = 0; i < 3; i++) Y[i] = malloc(R * O * sizeof *Y[i]);
            if (!X || !W || !b || !Y[0] || !Y[1] || !Y[2]) {
                TL_CHECK(0, "out of memory");
                free(X), free(W), free(b), free(Y[0]), free(Y[1]), free(Y[2]);
                return;
            }
            for (size_t i = 0; i < R * In; i++) X[i] = (mega_real)tl_randn(&seed);
            for (size_t i = 0; i < O * In; i++) W[i] = (mega_real)(0.05 * tl_randn(&seed));
            for (size_t i = 0; i < O; i++) b[i] = (mega_real)tl_randn(&seed);
            for (int form = 0; form < 3; form++) { /* no bias, bias, accumulate (C = A B^T + C) */
                for (int v = 0; v < 3; v++) {
                    mega_set_threads(v == 2 ? 2 : 1);
                    if (form == 2)
                        for (size_t r = 0; r < R; r++) memcpy(Y[v] + r * O, b, O * sizeof *b);
                    if (form < 2 && v == 0) mega_linear_forward(Y[v], X, W, form ? b : NULL, R, In, O);
                    if (form < 2 && v > 0) mega_linear_step(Y[v], X, W, form ? b : NULL, R, In, O);
                    if (form == 2 && v == 0) mega_gemm(0, 1, R, O, In, 1, X, In, W, In, 1, Y[v], O);
                    if (form == 2 && v > 0) mega_gemm_step(R, O, In, X, In, W, In, 1, Y[v], O);
                }
                checked++;
                if (memcmp(Y[1], Y[2], R * O * sizeof *Y[1])) {
                    differ++;
                    printf("NOTE step product R=%zu In=%zu O=%zu form %d: 1 and 2 threads differ\n", R, In, O, form);
                }
                worst = fmax(worst, rel_diff(Y[2], Y[0], R * O));
                /* row r alone (2 threads), into Y[1]'s row: the same bits as in the R-row product */
                if (R > 1 && R <= 16)
                    for (size_t r = 0; r < R; r++) {
                        mega_real *y = Y[1] + r * O;
                        if (form == 2) memcpy(y, b, O * sizeof *b);
                        if (form < 2) mega_linear_step(y, X + r * In, W, form ? b : NULL, 1, In, O);
                        if (form == 2) mega_gemm_step(1, O, In, X + r * In, In, W, In, 1, y, O);
                        row_checked++;
                        if (memcmp(y, Y[2] + r * O, O * sizeof *y)) {
                            row_differ++;
                            printf("NOTE step product R=%zu In=%zu O=%zu form %d: row %zu alone differs\n", R, In, O,
                                   form, r);
                        }
                    }
            }
            free(X), free(W), free(b), free(Y[0]), free(Y[1]), free(Y[2]);
        }
    TL_CHECK(!differ, "step products: the same bits with 1 and 2 threads (%d of %d cases differ)", differ, checked);
#ifdef MEGA_VEC
    TL_CHECK(!row_differ, "step products of 2-16 rows: each row has the bits of its one-row product (%d of %d differ)",
             row_differ, row_checked);
#else
    printf("NOTE rows alone vs in a few-row product: %d of %d differ (no vector kernels in this build: not "
           "checked)\n", row_differ, row_checked);
#endif
    TL_CHECK(worst < 1e-5, "step products agree with mega_linear_forward / mega_gemm (worst %.2e relative)", worst);
    printf("NOTE step products vs mega_linear_forward / mega_gemm: worst %.2e relative\n", worst);
}

/* (3): the logits of a prompt and N single tokens with the tuner forced to one way (force 1:
 * alone, 2: the team) or free (0); 1 when the free tuner timed both ways */
enum { TUNER_TOKENS = 300 };
static mega_real *tuned_run(mega_lm *m, int B, int force, int *both) {
    enum { P = 5, N = TUNER_TOKENS };
    const int V = m->cfg.vocab_size;
    mega_real *lg = malloc((size_t)B * (P + N) * V * sizeof *lg);
    int32_t *tok = malloc((size_t)B * P * sizeof *tok);
    mega_lm_stream *s = NULL;
    int ok = lg && tok && mega_lm_stream_new(m, B, 1024, &s) == MEGA_OK;
    if (ok) {
        s->tune.force = force;
        for (int i = 0; i < B * P; i++) tok[i] = (i * 37 + 11) % 256;
        ok = mega_lm_stream_feed(s, tok, P, lg) == MEGA_OK;
        for (int t = 0; ok && t < N; t++) {
            for (int b = 0; b < B; b++) tok[b] = (b * 13 + t * 7) % 256;
            ok = mega_lm_stream_feed(s, tok, 1, lg + (size_t)B * (P + t) * V) == MEGA_OK;
        }
        *both = s->tune.per_row[0] > 0 && s->tune.per_row[1] > 0;
    }
    TL_CHECK(ok, "tuner B=%d force %d: %s", B, force, ok ? "" : mega_last_error());
    free(tok), mega_lm_stream_free(s);
    if (!ok) free(lg);
    return ok ? lg : NULL;
}

static void check_tuner_ways(mega_lm *m) {
    mega_set_threads(2);
    for (int B = 1; B <= 8; B += 7) {
        int both = 0, unused;
        mega_real *team = tuned_run(m, B, 2, &unused), *alone = tuned_run(m, B, 1, &unused), *free_ = tuned_run(m, B, 0, &both);
        const size_t n = (size_t)B * (5 + TUNER_TOKENS) * m->cfg.vocab_size * sizeof(mega_real);
        TL_CHECK(team && alone && !memcmp(team, alone, n), "B=%d: steps on the team and on the calling thread alone give the same bits", B);
        TL_CHECK(team && free_ && !memcmp(team, free_, n), "B=%d: steps chosen by the tuner give the same bits", B);
#ifdef _OPENMP
        TL_CHECK(both, "B=%d: the tuner timed both ways within %d tokens", B, TUNER_TOKENS);
#else
        (void)both; /* no OpenMP: no team, every step on the calling thread, nothing to time */
#endif
        free(team), free(alone), free(free_);
    }
    mega_set_threads(0);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    check_step_products();
    mega_lm_config c;
    bench_config(&c);
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK) {
        TL_CHECK(0, "create the bench model: %s", mega_last_error());
        return tl_finish();
    }
    mega_lm_init_params(m, 1);
    /* the pieces' grid does not depend on the thread count, nor which thread runs a piece; B 9
     * with 2 threads runs as groups of sequences, with 1 thread as one batch */
    for (int B = 3; B <= 9; B += 6) {
        mega_real *l2 = NULL, *l1 = NULL, *l3 = NULL;
        int g2 = 0, g1 = 0, g3 = 0;
        check_stream_vs_forward(m, B, 2, &l2, &g2);
        check_stream_vs_forward(m, B, 1, &l1, &g1);
        TL_CHECK(l1 && l2 && !memcmp(l1, l2, (size_t)B * SV_T * c.vocab_size * sizeof *l1),
                 "B=%d: streamed logits with 1 and 2 threads (%d and %d groups) are bit-identical", B, g1, g2);
        TL_CHECK(g1 == g2 && g2 == (B == 9 ? 2 : 1), "B=%d: groups %d with 1 thread, %d with 2", B, g1, g2);
        if (B == 9) { /* 3 threads, more than the groups: one batch, the products split over them */
            check_stream_vs_forward(m, B, 3, &l3, &g3);
            TL_CHECK(l1 && l3 && !memcmp(l1, l3, (size_t)B * SV_T * c.vocab_size * sizeof *l1),
                     "B=%d: streamed logits with 1 and 3 threads are bit-identical", B);
        }
        free(l1), free(l2), free(l3);
    }
    check_batch_independent(m);
    check_tuner_ways(m);
    /* Megalodon's step runs on the step team too (MEGA_MIXER_STEP_TEAM): the same checks on a
     * smaller model (2 layers, D 64, chunk 16: the 120 positions cross chunk borders) */
    mega_lm_config cg;
    bench_config(&cg);
    cg.layers = 2, cg.block.mixer = MEGA_MIXER_MEGALODON, cg.block.embed_dim = 64, cg.block.z_dim = 32;
    cg.block.hidden_dim = 128, cg.block.ffn_dim = 128, cg.block.n_dim = 4, cg.block.chunk_size = 16;
    cg.block.heads = 2, cg.block.norm_num_groups = 8, cg.block.swiglu = 1;
    mega_lm *mg = NULL;
    if (mega_lm_create(&cg, &mg) != MEGA_OK) {
        TL_CHECK(0, "create a Megalodon model: %s", mega_last_error());
    } else {
        mega_lm_init_params(mg, 2);
        mega_real *l2 = NULL, *l1 = NULL;
        int g2 = 0, g1 = 0;
        check_stream_vs_forward(mg, 9, 2, &l2, &g2);
        check_stream_vs_forward(mg, 9, 1, &l1, &g1);
        TL_CHECK(l1 && l2 && !memcmp(l1, l2, (size_t)9 * SV_T * cg.vocab_size * sizeof *l1),
                 "Megalodon B=9: streamed logits with 1 and 2 threads (%d and %d groups) are bit-identical", g1, g2);
        TL_CHECK(g1 == 2 && g2 == 2, "Megalodon B=9: groups %d with 1 thread, %d with 2", g1, g2);
        free(l1), free(l2);
        check_batch_independent(mg);
#ifndef NO_INTERPOSE
        for (int B = 1; B <= 8; B += 7) check_decode(mg, B, 2);
#endif
        mega_lm_free(mg);
    }
#ifdef NO_INTERPOSE
    printf("NOTE allocation counting skipped: %s\n", NO_INTERPOSE);
#else
    /* the counter itself: an allocation made while counting is seen */
    unsigned long a0 = allocs();
    counting(1);
    void *volatile p = malloc(64);
    counting(0);
    free(p);
    TL_CHECK(allocs() - a0 == 1, "the interposed malloc counts (%lu)", allocs() - a0);
    for (int B = 1; B <= 8; B += 7)
        for (int th = 2; th >= 1; th--) check_decode(m, B, th), check_s2s_decode(B, th);
#endif
    mega_lm_free(m);
    return tl_finish();
}
