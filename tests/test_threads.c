/*
 * What a program may share between its own threads (the statement at the top of mega.h and in
 * docs/library.md), checked:
 *  (1) several streams created from ONE model, fed at the same time from different threads
 *      (each stream by its own thread), give exactly the logits (every bit) of the same feeds run
 *      one thread after another: a Mega model with chunked attention (the decode step team,
 *      chunk borders), one with full attention, and an attention mixer (MHA, RoPE); a prompt in
 *      one call, then one token per call, then a block; B = 2 per stream; 3 threads; repeated;
 *  (2) two models trained at the same time in two threads (forward + backward) get exactly the
 *      gradients they get one after the other (objects that share nothing are independent);
 *  (3) mega_last_error is per thread: an error in one thread leaves another's message alone;
 *  (4) mega_set_threads is per thread (OpenMP's rule): a new thread does not inherit the
 *      caller's count, and its own setting does not change the caller's.
 * The threads keep OpenMP's default count (every core), so concurrent steps also run concurrent
 * step teams; the reference runs each thread's work in a thread of its own too, alone, so both
 * runs have the same thread settings. Runs under the sanitizer builds as well (make asan).
 */
#include "testlib.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 3, B = 2, PROMPT = 37, DECODE = 40, TAIL = 21, TOTAL = PROMPT + DECODE + TAIL };

static void small_config(mega_lm_config *c, int chunk, mega_mixer_kind mixer) {
    mega_lm_config_default(c);
    c->layers = 2, c->block.embed_dim = 32, c->block.z_dim = 16, c->block.hidden_dim = 64, c->block.n_dim = 4, c->block.ffn_dim = 64;
    c->block.chunk_size = chunk;
    c->block.max_positions = 256;
    c->block.mixer = mixer;
    if (mixer == MEGA_MIXER_MHA) c->block.heads = 4, c->block.pos = MEGA_POS_ROPE, c->block.max_len = 256;
}

/* ---- (1) streams of one model ----------------------------------------------------------- */

typedef struct {
    mega_lm *m;   /* shared by every thread */
    int id;       /* the thread's token sequence */
    mega_real *out; /* [TOTAL, B, V]: the logits of every call, in order */
    int ok;
    char err[256];
} feed_job;

static void *feed_thread(void *arg) {
    feed_job *j = arg;
    const int V = mega_lm_get_config(j->m)->vocab_size;
    mega_lm_stream *s = NULL;
    int32_t *tok = malloc((size_t)B * TOTAL * sizeof *tok), *blk = malloc((size_t)B * TOTAL * sizeof *blk);
    mega_real *lg = malloc((size_t)B * TOTAL * V * sizeof *lg);
    j->ok = 0;
    if (!tok || !blk || !lg || mega_lm_stream_new(j->m, B, TOTAL + 1, &s) != MEGA_OK) goto done;
    /* this thread's sequences: a fixed pseudo-random byte stream per (thread, row) */
    unsigned long long seed = 0x7157ull + 977ull * (unsigned long long)j->id;
    for (size_t i = 0; i < (size_t)B * TOTAL; i++) tok[i] = (int32_t)(tl_rand01(&seed) * 256);
    /* feeds of PROMPT, then DECODE single tokens, then TAIL tokens; rows [b][t] of each call */
    int t0 = 0;
    while (t0 < TOTAL) {
        const int T = t0 < PROMPT ? PROMPT : t0 < PROMPT + DECODE ? 1 : TAIL;
        for (int b = 0; b < B; b++) memcpy(blk + (size_t)b * T, tok + (size_t)b * TOTAL + t0, (size_t)T * sizeof *blk);
        if (mega_lm_stream_feed(s, blk, T, lg) != MEGA_OK) goto done;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                memcpy(j->out + ((size_t)(t0 + t) * B + b) * V, lg + ((size_t)b * T + t) * V, (size_t)V * sizeof *lg);
        t0 += T;
    }
    j->ok = mega_lm_stream_pos(s) == TOTAL;
done:
    if (!j->ok) snprintf(j->err, sizeof j->err, "%s", mega_last_error());
    free(tok), free(blk), free(lg);
    mega_lm_stream_free(s);
    return NULL;
}

/* fn(job i) for the n jobs of `size` bytes each, each in a thread of its own: one thread at a
 * time (concurrent = 0) or all at once */
static int run_jobs(void *jobs, size_t size, int n, void *(*fn)(void *), int concurrent) {
    pthread_t th[NT];
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&th[i], NULL, fn, (char *)jobs + (size_t)i * size) != 0) return -1;
        if (!concurrent) rc |= pthread_join(th[i], NULL);
    }
    if (concurrent)
        for (int i = 0; i < n; i++) rc |= pthread_join(th[i], NULL);
    return rc;
}

static void check_streams(const char *name, int chunk, mega_mixer_kind mixer) {
    mega_lm_config c;
    small_config(&c, chunk, mixer);
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK) {
        TL_CHECK(0, "%s: create: %s", name, mega_last_error());
        return;
    }
    mega_lm_init_params(m, 11);
    const size_t n = (size_t)TOTAL * B * c.vocab_size;
    feed_job ref[NT], par[NT];
    for (int i = 0; i < NT; i++) {
        ref[i] = (feed_job){m, i, calloc(n, sizeof(mega_real)), 0, ""};
        par[i] = (feed_job){m, i, calloc(n, sizeof(mega_real)), 0, ""};
    }
    int ok = run_jobs(ref, sizeof *ref, NT, feed_thread, 0) == 0;
    for (int i = 0; i < NT; i++) TL_CHECK(ok && ref[i].ok, "%s: sequential feeds of thread %d: %s", name, i, ref[i].err);
    for (int round = 0; round < 3 && ok; round++) {
        for (int i = 0; i < NT; i++) memset(par[i].out, 0, n * sizeof(mega_real));
        int rok = run_jobs(par, sizeof *par, NT, feed_thread, 1) == 0;
        int same = rok;
        for (int i = 0; i < NT; i++) same = same && par[i].ok && !memcmp(par[i].out, ref[i].out, n * sizeof(mega_real));
        TL_CHECK(same, "%s, round %d: %d threads feeding their own streams of one model give the logits of the same feeds run one after another",
                 name, round, NT);
    }
    /* the sequences differ between threads: the check above could not pass by accident */
    TL_CHECK(memcmp(ref[0].out, ref[1].out, n * sizeof(mega_real)) != 0, "%s: the threads' logits differ from each other", name);
    for (int i = 0; i < NT; i++) free(ref[i].out), free(par[i].out);
    mega_lm_free(m);
}

/* ---- (2) independent models ------------------------------------------------------------- */

typedef struct {
    mega_lm *m;
    double loss;
    int ok;
} train_job;

static void *train_thread(void *arg) {
    train_job *j = arg;
    enum { TB = 4, TT = 64 };
    int32_t tok[TB * (TT + 1)];
    unsigned long long seed = 99;
    for (int i = 0; i < TB * (TT + 1); i++) tok[i] = (int32_t)(tl_rand01(&seed) * 256);
    int32_t in[TB * TT], tg[TB * TT];
    for (int b = 0; b < TB; b++)
        for (int t = 0; t < TT; t++) in[b * TT + t] = tok[b * (TT + 1) + t], tg[b * TT + t] = tok[b * (TT + 1) + t + 1];
    mega_lm_run run = {1, 5};
    int64_t cnt;
    mega_lm_zero_grad(j->m);
    j->ok = mega_lm_forward(j->m, in, tg, TB, TT, &run, &j->loss, &cnt) == MEGA_OK && mega_lm_backward(j->m, 1) == MEGA_OK;
    return NULL;
}

static void check_models(void) {
    mega_lm_config c;
    small_config(&c, 32, MEGA_MIXER_MEGA);
    /* wide enough that OpenBLAS threads its products (the two threads' GEMMs run at once) */
    c.block.embed_dim = 64, c.block.hidden_dim = 128, c.block.ffn_dim = 128, c.block.dropout = 0.1f;
    mega_lm *m[4] = {NULL, NULL, NULL, NULL};
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        ok = ok && mega_lm_create(&c, &m[i]) == MEGA_OK;
        if (ok) mega_lm_init_params(m[i], 3);
    }
    if (!ok) {
        TL_CHECK(0, "models: create: %s", mega_last_error());
        for (int i = 0; i < 4; i++) mega_lm_free(m[i]);
        return;
    }
    /* m[0], m[1] one after the other; m[2], m[3] at the same time */
    train_job j[4] = {{m[0], 0, 0}, {m[1], 0, 0}, {m[2], 0, 0}, {m[3], 0, 0}};
    ok = run_jobs(j, sizeof *j, 2, train_thread, 0) == 0 && run_jobs(j + 2, sizeof *j, 2, train_thread, 1) == 0;
    const size_t n = mega_lm_param_total(m[0]);
    int same = ok && j[0].ok && j[1].ok && j[2].ok && j[3].ok;
    for (int i = 1; i < 4 && same; i++)
        same = j[i].loss == j[0].loss && !memcmp(mega_lm_grads(m[i]), mega_lm_grads(m[0]), n * sizeof(mega_real));
    TL_CHECK(same, "two models trained at the same time in two threads get the loss and gradients of sequential runs");
    for (int i = 0; i < 4; i++) mega_lm_free(m[i]);
}

/* ---- (3) errors, (4) thread counts ------------------------------------------------------ */

typedef struct {
    mega_lm *m;
    int set;      /* mega_set_threads(set) in the thread when > 0 */
    char err[256];
    int threads_before, threads_after;
} misc_job;

static void *misc_thread(void *arg) {
    misc_job *j = arg;
    j->threads_before = mega_get_threads();
    if (j->set > 0) mega_set_threads(j->set);
    j->threads_after = mega_get_threads();
    mega_lm_stream *s = NULL;
    int32_t bad[B] = {999, 999};
    if (mega_lm_stream_new(j->m, B, 8, &s) == MEGA_OK) (void)mega_lm_stream_feed(s, bad, 1, NULL);
    snprintf(j->err, sizeof j->err, "%s", mega_last_error());
    mega_lm_stream_free(s);
    return NULL;
}

static int run_misc(misc_job *j) {
    pthread_t th;
    return pthread_create(&th, NULL, misc_thread, j) == 0 && pthread_join(th, NULL) == 0;
}

static void check_misc(void) {
    mega_lm_config c;
    small_config(&c, 16, MEGA_MIXER_MEGA);
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK) {
        TL_CHECK(0, "misc: create: %s", mega_last_error());
        return;
    }
    /* (4) the count a new thread starts with (OpenMP's default), then a different one here */
    misc_job fresh = {m, 0, "", 0, 0};
    int ok = run_misc(&fresh);
    const int dflt = fresh.threads_before, mine_n = dflt == 1 ? 2 : 1;
    mega_set_threads(mine_n);
    /* (3) an error in this thread */
    mega_lm *none;
    (void)mega_lm_load("/nonexistent/run", &none);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", mega_last_error());
    misc_job j = {m, 3, "", 0, 0};
    ok = ok && run_misc(&j);
    TL_CHECK(ok && strstr(j.err, "outside the vocabulary"), "the error of a thread is its own: '%s'", j.err);
    TL_CHECK(!strcmp(mega_last_error(), mine) && strstr(mine, "/nonexistent/run"),
             "another thread's error leaves this thread's message alone: '%s'", mega_last_error());
#ifdef _OPENMP
    TL_CHECK(j.threads_before == dflt && mega_get_threads() == mine_n,
             "a new thread starts with OpenMP's default (%d), not the caller's mega_set_threads(%d) (got %d)", dflt, mine_n,
             j.threads_before);
    TL_CHECK(j.threads_after == 3 && mega_get_threads() == mine_n,
             "mega_set_threads in a thread sets that thread's count only (thread %d, caller still %d)", j.threads_after,
             mega_get_threads());
#else
    printf("NOTE test_threads: no OpenMP: one thread everywhere, the thread-count checks are skipped\n");
#endif
    mega_lm_free(m);
}

int main(void) {
    check_streams("mega, chunk 16", 16, MEGA_MIXER_MEGA);
    check_streams("mega, full attention", -1, MEGA_MIXER_MEGA);
    check_streams("mha + rope", -1, MEGA_MIXER_MHA);
    check_models();
    check_misc();
    return tl_finish();
}
