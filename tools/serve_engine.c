/*
 * mega serve: the generation slots of a language model. Continuous batching: one thread decodes
 * the --parallel N slots as the rows of one stream (mega_lm_stream_row_add ...: each row at its
 * own position); a queued request joins at the next step (its prompt fed to its row alone, in
 * chunk-sized blocks as `mega generate` feeds it, a block per step between the others' tokens:
 * batch_prefill), then every running request takes one token per step together (one product per
 * layer for all of them, each weight read once), each with its own sampler and seed
 * (mega_sampler_next); a finished request frees its row for the next. A row's
 * logits are the bits it has alone (the library's rows), so a request's tokens depend only on its
 * prompt and sampling fields, never on what else runs. Models whose mixer has no rows (not Mega
 * or Megalodon)
 * or whose cache is the whole stream (no chunks: a row would hold --ctx positions) get the older
 * way: N worker threads, each decoding one request at a time through a stream of its own of the
 * one shared model (the streams of a model may be fed from several threads at once, each by one
 * thread: docs/library.md, "Threads"). The queue is bounded (--max-queue); a client that leaves,
 * the request's deadline (--timeout) or the server's stop end a request at its next token.
 * The decoding thread also builds a streamed request's events (job_events: the text as JSON, no
 * cJSON object per token) into the request's buffer and wakes its handler only when that buffer
 * was empty; the handler writes all that is pending at once. It never waits on a socket.
 */
#include "serve.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *serve_finish_name(serve_finish f) {
    static const char *const n[] = {"length", "stop", "timeout", "cancelled", "error"};
    return (unsigned)f < sizeof n / sizeof *n ? n[f] : "error";
}

int serve_tokenize(const loaded_model *m, const char *text, size_t n, int32_t **ids, size_t *np, char *err, size_t en) {
    *ids = NULL, *np = n;
    if (m->dict && mega_fdict_encode(m->dict, (const uint8_t *)text, n, 0, NULL, np, NULL) != MEGA_OK)
        return snprintf(err, en, "%s", mega_last_error()), -1;
    if (!(*ids = malloc((*np ? *np : 1) * sizeof(int32_t)))) return snprintf(err, en, "out of memory"), -1;
    if (m->dict) mega_fdict_encode(m->dict, (const uint8_t *)text, n, 0, *ids, np, NULL); /* counted above */
    else
        for (size_t i = 0; i < n; i++) (*ids)[i] = (uint8_t)text[i];
    return 0;
}

char *serve_detokenize(const loaded_model *m, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = 64, o = 0;
    char *s = malloc(cap);
    int line_start = 1;
    for (size_t i = 0; s && i < n; i++) {
        char piece[1024];
        size_t k = 1;
        if (m->dict) k = mega_fdict_decode(m->dict, ids[i], &line_start, piece, sizeof piece);
        else piece[0] = (char)ids[i];
        if (o + k + 1 > cap) {
            char *ns = realloc(s, cap = 2 * (o + k + 1));
            if (!ns) free(s);
            s = ns;
        }
        if (s) memcpy(s + o, piece, k), o += k;
    }
    if (s) s[o] = 0;
    *len = o;
    return s;
}

serve_job *serve_job_new(serve_engine *e, gen_req *r, double timeout, int ctx, char *err, size_t en) {
    serve_job *j = calloc(1, sizeof *j);
    if (!j) return snprintf(err, en, "out of memory"), NULL;
    j->rq = *r;
    memset(r, 0, sizeof *r);
    if (serve_tokenize(e->model, j->rq.prompt, j->rq.prompt_len, &j->ids, &j->np, err, en)) return serve_job_free(j), NULL;
    if (j->np == 0) return snprintf(err, en, "prompt: it has no token (a word model needs a word or a newline)"), serve_job_free(j), NULL;
    if (j->np + (size_t)j->rq.max_tokens > (size_t)ctx)
        return snprintf(err, en, "prompt: %zu tokens and max_tokens %d exceed the server's context of %d tokens (--ctx)", j->np,
                        j->rq.max_tokens, ctx), serve_job_free(j), NULL;
    if (!j->rq.seed_given) { /* a new seed per request, as `mega generate --seed -1` draws one */
        pthread_mutex_lock(&e->mu);
        uint64_t z = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)getpid() << 20) ^ ++e->seed_counter * 0xBF58476D1CE4E5B9ull;
        pthread_mutex_unlock(&e->mu);
        j->rq.sp.seed = z >> 12;
    }
    for (int i = 0; i < j->rq.nstop; i++) { /* the bytes a stop string may still take back */
        const size_t L = strlen(j->rq.stop[i]);
        j->hold = L - 1 > j->hold ? L - 1 : j->hold;
    }
    pthread_cond_init(&j->cv, NULL);
    j->t_enq = now_sec();
    j->deadline = timeout > 0 ? j->t_enq + timeout : 0;
    return j;
}

int serve_job_events(serve_job *j, const char *ev_pre, const char *ev_post) {
    const size_t a = strlen(ev_pre), b = strlen(ev_post);
    if (!(j->ev_pre = malloc(a + b + 2))) return -1;
    memcpy(j->ev_pre, ev_pre, a + 1), memcpy(j->ev_post = j->ev_pre + a + 1, ev_post, b + 1);
    j->ev_pre_len = a, j->ev_post_len = b;
    return 0;
}

void serve_job_free(serve_job *j) {
    if (!j) return;
    gen_req_free(&j->rq);
    free(j->ids), free(j->text), free(j->ev_pre), free(j->out);
    pthread_cond_destroy(&j->cv);
    free(j);
}

int serve_submit(serve_engine *e, serve_job *j) {
    pthread_mutex_lock(&e->mu);
    /* a request an idle slot takes at once does not count against --max-queue */
    if (e->stopping || e->queued >= e->max_queue + (e->parallel - e->running)) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    j->state = JOB_QUEUED;
    if (e->tail) e->tail->next = j;
    else e->head = j;
    e->tail = j;
    e->queued++, e->attached++;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* under the mutex: a streamed job's text [evsent, ready) as one event appended to out (ready: the
 * whole text when final, else what no stop string and no UTF-8 sequence may still change); 1 when
 * out was empty before (its handler is to be woken: else it has not taken the last ones yet). The
 * buffer grows to the most a handler lets pile up, then is reused: no allocation per token. */
static int job_events(serve_job *j, int final) {
    const size_t ready = final ? j->len : j->len > j->hold ? serve_utf8_ready(j->text, j->len - j->hold, 0) : 0;
    if (!j->ev_pre || ready <= j->evsent) return 0;
    const size_t n = ready - j->evsent, need = j->out_len + j->ev_pre_len + 6 * n + j->ev_post_len + 1;
    if (need > j->out_cap) {
        char *no = realloc(j->out, 2 * need + 256);
        if (!no) return j->cancel = 1, 0; /* out of memory: the request ends at its next token */
        j->out = no, j->out_cap = 2 * need + 256;
    }
    const int was_empty = j->out_len == 0;
    char *o = j->out + j->out_len;
    memcpy(o, j->ev_pre, j->ev_pre_len), o += j->ev_pre_len;
    o += serve_json_text(j->text + j->evsent, n, o);
    memcpy(o, j->ev_post, j->ev_post_len + 1), o += j->ev_post_len;
    j->out_len = (size_t)(o - j->out), j->evsent = ready;
    return was_empty;
}

/* under the mutex: end j (queued or running); the rest of its text in a last event */
static void job_end(serve_job *j, serve_finish f) {
    j->state = JOB_DONE, j->finish = f, j->t_end = now_sec();
    job_events(j, 1);
    pthread_cond_broadcast(&j->cv);
}

/* under the mutex: take j out of the queue */
static void unqueue(serve_engine *e, serve_job *j) {
    serve_job **p = &e->head, *prev = NULL;
    while (*p && *p != j) prev = *p, p = &(*p)->next;
    if (!*p) return;
    *p = j->next;
    if (e->tail == j) e->tail = prev;
    j->next = NULL;
    e->queued--;
}

void serve_detach(serve_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->attached--;
    pthread_mutex_unlock(&e->mu);
}

void serve_wait_detached(serve_engine *e, double seconds) {
    const double end = now_sec() + seconds;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        const int n = e->attached;
        pthread_mutex_unlock(&e->mu);
        if (n <= 0 || now_sec() > end) return;
        usleep(2000);
    }
}

void serve_cancel(serve_engine *e, serve_job *j, serve_finish why) {
    pthread_mutex_lock(&e->mu);
    j->cancel = 1;
    if (j->state == JOB_QUEUED) unqueue(e, j), job_end(j, why);
    pthread_mutex_unlock(&e->mu);
}

/* under the mutex: append a token's text, then look for a stop string in what it may complete
 * (a match starts at most the longest stop string minus one byte before the old end); 1 when found */
static int append_text(serve_job *j, const char *s, size_t k) {
    if (j->len + k + 1 > j->cap) {
        size_t nc = 2 * (j->len + k + 1) + 64;
        char *nt = realloc(j->text, nc);
        if (!nt) return snprintf(j->err, sizeof j->err, "out of memory"), -1;
        j->text = nt, j->cap = nc;
    }
    const size_t old = j->len;
    memcpy(j->text + j->len, s, k);
    j->len += k;
    j->text[j->len] = 0;
    for (int i = 0; i < j->rq.nstop; i++) {
        const size_t L = strlen(j->rq.stop[i]);
        const size_t from = old + 1 > L ? old + 1 - L : 0;
        for (size_t p = from; p + L <= j->len; p++)
            if (!memcmp(j->text + p, j->rq.stop[i], L)) {
                j->len = p, j->text[p] = 0;
                return 1;
            }
    }
    return 0;
}

/* under the mutex: a token's text (k bytes) to j: appended, counted and timed, its event built;
 * 1 at a stop string (-1: out of memory), *wake when j's handler is to be woken */
static int job_token(serve_engine *e, serve_job *j, const char *piece, size_t k, double t, int *wake) {
    const int hit = append_text(j, piece, k);
    j->ntok++;
    if (e->metrics) {
        if (j->ntok == 1) serve_metrics_first(e->metrics, t - j->t_enq);
        else serve_metrics_token(e->metrics, t - j->t_last);
    }
    if (j->ntok == 1) j->t_first = t;
    j->t_last = t;
    *wake = !hit && job_events(j, 0); /* at a hit the request ends now: job_end sends the rest */
    return hit;
}

typedef struct {
    mega_lm_stream *s;
    mega_sampler *smp;
    mega_real *lg, *lgp;
} gen_state;

static void gen_state_free(gen_state *g) {
    mega_lm_stream_free(g->s);
    mega_sampler_free(g->smp);
    free(g->lg), free(g->lgp);
}

/* the prompt's logits (fed in chunk-sized blocks, as mega generate does): 0, or 1 with j->err */
static int feed_prompt(serve_engine *e, serve_job *j, gen_state *g) {
    const mega_lm_config *c = mega_lm_get_config(e->model->lm);
    const int V = c->vocab_size;
    const size_t blk = (size_t)(c->block.chunk_size > 0 ? c->block.chunk_size : 256);
    if (mega_lm_stream_new(e->model->lm, 1, (int)(j->np + (size_t)j->rq.max_tokens + 1), &g->s) != MEGA_OK ||
        mega_sampler_new(V, &j->rq.sp, &g->smp) != MEGA_OK)
        return snprintf(j->err, sizeof j->err, "%s", mega_last_error()), 1;
    g->lg = malloc((size_t)V * sizeof(mega_real));
    g->lgp = malloc(blk * (size_t)V * sizeof(mega_real));
    if (!g->lg || !g->lgp) return snprintf(j->err, sizeof j->err, "out of memory"), 1;
    for (size_t p = 0; p < j->np; p += blk) {
        const int T = (int)((j->np - p) < blk ? (j->np - p) : blk);
        if (mega_lm_stream_feed(g->s, j->ids + p, T, g->lgp) != MEGA_OK)
            return snprintf(j->err, sizeof j->err, "%s", mega_last_error()), 1;
        memcpy(g->lg, g->lgp + (size_t)(T - 1) * V, (size_t)V * sizeof(mega_real));
        if (j->cancel || e->stopping) break; /* read without the lock: a late look costs one block */
    }
    return 0;
}

/* decode j to its end; the mutex is not held */
static void run_job(serve_engine *e, serve_job *j) {
    const mega_lm_config *c = mega_lm_get_config(e->model->lm);
    const int V = c->vocab_size;
    gen_state g = {0};
    serve_finish fin = FIN_LENGTH;
    if (feed_prompt(e, j, &g)) fin = FIN_ERROR;
    int line_start = j->rq.prompt_len == 0 || j->rq.prompt[j->rq.prompt_len - 1] == '\n';
    for (int i = 0; fin == FIN_LENGTH && i < j->rq.max_tokens; i++) {
        if (e->model->dict) /* as mega generate: never <s>, <pad>, the fillers */
            for (int v = 0; v < V; v++)
                if (!mega_fdict_generable(e->model->dict, v)) g.lg[v] = -INFINITY;
        const int32_t b = mega_sampler_next(g.smp, g.lg, c->padding_idx);
        if (b < 0) {
            snprintf(j->err, sizeof j->err, "%s", mega_last_error());
            fin = FIN_ERROR;
            break;
        }
        char piece[1024];
        size_t k = 1;
        if (e->model->dict) k = mega_fdict_decode(e->model->dict, b, &line_start, piece, sizeof piece);
        else piece[0] = (char)b;
        const double t = now_sec();
        int wake;
        pthread_mutex_lock(&e->mu);
        const int hit = job_token(e, j, piece, k, t, &wake);
        const int cancel = j->cancel || e->stopping;
        pthread_mutex_unlock(&e->mu);
        if (wake) pthread_cond_signal(&j->cv);
        if (hit) fin = hit > 0 ? FIN_STOP : FIN_ERROR;
        else if (cancel) fin = FIN_CANCELLED;
        else if (j->deadline > 0 && t > j->deadline) fin = FIN_TIMEOUT;
        else if (i + 1 < j->rq.max_tokens && mega_lm_stream_feed(g.s, &b, 1, g.lg) != MEGA_OK) {
            snprintf(j->err, sizeof j->err, "%s", mega_last_error());
            fin = FIN_ERROR;
        }
    }
    gen_state_free(&g);
    pthread_mutex_lock(&e->mu);
    job_end(j, fin);
    pthread_mutex_unlock(&e->mu);
}

/* ---- continuous batching ----------------------------------------------------------------- */

/* rows a and b exchange places: the library's rows, their requests, logits and tokens */
static void batch_swap(serve_engine *e, int a, int b) {
    if (a == b) return;
    const size_t V = (size_t)mega_lm_get_config(e->model->lm)->vocab_size;
    mega_lm_stream_row_swap(e->rows, a, b); /* two rows in use of a model with rows: cannot fail */
    const serve_row q = e->row[a];
    const int32_t t = e->tok[a];
    e->row[a] = e->row[b], e->row[b] = q;
    e->tok[a] = e->tok[b], e->tok[b] = t;
    memcpy(e->lgp, e->lg + (size_t)a * V, V * sizeof(mega_real));
    memcpy(e->lg + (size_t)a * V, e->lg + (size_t)b * V, V * sizeof(mega_real));
    memcpy(e->lg + (size_t)b * V, e->lgp, V * sizeof(mega_real));
}

/* end row r's request (its fields already set) and free the row. A decoding row's place is taken
 * by the last decoding row, so that the rows still fed their prompts stay after the decoding ones
 * (a step covers rows 0 .. ndec-1); the last row then moves into the freed place. */
static void batch_leave(serve_engine *e, int r) {
    serve_row *q = &e->row[r];
    const size_t V = (size_t)mega_lm_get_config(e->model->lm)->vocab_size;
    mega_sampler_free(q->smp);
    pthread_mutex_lock(&e->mu);
    job_end(q->j, q->fin); /* its handler may free it now: not touched after */
    e->running--;
    pthread_mutex_unlock(&e->mu);
    if (r < e->ndec) {
        if (e->ndec < mega_lm_stream_rows(e->rows)) batch_swap(e, r, e->ndec - 1), r = e->ndec - 1;
        e->ndec--;
    }
    const int last = mega_lm_stream_rows(e->rows) - 1;
    mega_lm_stream_row_remove(e->rows, r); /* a row in use: cannot fail */
    if (r != last) {
        e->row[r] = e->row[last];
        memcpy(e->lg + (size_t)r * V, e->lg + (size_t)last * V, V * sizeof(mega_real));
        e->tok[r] = e->tok[last];
    }
}

/* j joins: a row after the others and its sampler; its prompt is fed by batch_prefill. A failure
 * ends it at once. */
static void batch_join(serve_engine *e, serve_job *j) {
    const int V = mega_lm_get_config(e->model->lm)->vocab_size;
    int r = -1;
    if (mega_lm_stream_row_add(e->rows, &r) != MEGA_OK) { /* rows are taken only while one is free */
        pthread_mutex_lock(&e->mu);
        snprintf(j->err, sizeof j->err, "%s", mega_last_error());
        job_end(j, FIN_ERROR), e->running--;
        pthread_mutex_unlock(&e->mu);
        return;
    }
    serve_row *q = &e->row[r];
    memset(q, 0, sizeof *q);
    q->j = j, q->fin = FIN_LENGTH, q->order = e->joins++;
    q->line_start = j->rq.prompt_len == 0 || j->rq.prompt[j->rq.prompt_len - 1] == '\n';
    if (j->rq.max_tokens == 0) q->done = 1; /* nothing to generate: nothing to feed */
    else if (mega_sampler_new(V, &j->rq.sp, &q->smp) != MEGA_OK) {
        snprintf(j->err, sizeof j->err, "%s", mega_last_error());
        q->done = 1, q->fin = FIN_ERROR;
    }
    if (q->done) batch_leave(e, r);
}

/* Chunked prefill: the rows after ndec are fed their prompts in chunk-sized blocks (the blocks
 * `mega generate` feeds, so the same bits), the prompt with the fewest tokens left first (a short
 * prompt does not wait behind a long one; then the earliest), until a chunk's worth of tokens
 * went in during this step; then the decoding rows take their step. A long prompt so
 * delays the others' next token by a block, not by the whole prompt. With no row decoding, no one
 * waits: the prompts go in whole. A prompt fed to its end joins the decoding rows (row ndec), its
 * last logits in its row of e->lg. A cancel is seen after each block. */
static void batch_prefill(serve_engine *e) {
    const mega_lm_config *c = mega_lm_get_config(e->model->lm);
    const size_t V = (size_t)c->vocab_size, blk = (size_t)c->block.chunk_size;
    size_t spent = 0;
    while (e->ndec < mega_lm_stream_rows(e->rows) && (e->ndec == 0 || spent < blk)) {
        int r = e->ndec;
        for (int i = r + 1; i < mega_lm_stream_rows(e->rows); i++) {
            const size_t a = e->row[i].j->np - e->row[i].fed, b = e->row[r].j->np - e->row[r].fed;
            if (a < b || (a == b && e->row[i].order < e->row[r].order)) r = i;
        }
        serve_row *q = &e->row[r];
        serve_job *j = q->j;
        const int T = (int)((j->np - q->fed) < blk ? (j->np - q->fed) : blk);
        if (mega_lm_stream_row_feed(e->rows, r, j->ids + q->fed, T, e->lgp) != MEGA_OK) {
            snprintf(j->err, sizeof j->err, "%s", mega_last_error());
            q->done = 1, q->fin = FIN_ERROR;
        } else {
            q->fed += (size_t)T, spent += (size_t)T;
            if (q->fed == j->np) memcpy(e->lg + (size_t)r * V, e->lgp + (size_t)(T - 1) * V, V * sizeof(mega_real));
        }
        if (!q->done && (j->cancel || e->stopping)) q->done = 1, q->fin = FIN_CANCELLED; /* read without the lock: a block late */
        if (q->done) batch_leave(e, r);
        else if (q->fed == j->np) batch_swap(e, r, e->ndec), e->ndec++;
    }
}

/* every decoding row samples its next token from its logits (its own sampler), then, under the
 * lock once for all, the tokens' text is appended and their events built; the handlers whose
 * events were all taken are woken. A row is done at a stop string, a cancel, its deadline or its
 * length. */
static void batch_sample(serve_engine *e, int n) {
    const mega_lm_config *c = mega_lm_get_config(e->model->lm);
    const int V = c->vocab_size;
    char piece[1024];
    for (int r = 0; r < n; r++) {
        serve_row *q = &e->row[r];
        mega_real *lg = e->lg + (size_t)r * V;
        if (e->model->dict) /* as mega generate: never <s>, <pad>, the fillers */
            for (int v = 0; v < V; v++)
                if (!mega_fdict_generable(e->model->dict, v)) lg[v] = -INFINITY;
        e->tok[r] = mega_sampler_next(q->smp, lg, c->padding_idx);
        if (e->tok[r] < 0) snprintf(q->j->err, sizeof q->j->err, "%s", mega_last_error()), q->done = 1, q->fin = FIN_ERROR;
    }
    const double t = now_sec();
    pthread_mutex_lock(&e->mu);
    for (int r = 0; r < n; r++) {
        serve_row *q = &e->row[r];
        serve_job *j = q->j;
        q->wake = 0;
        if (q->done) continue;
        size_t k = 1;
        if (e->model->dict) k = mega_fdict_decode(e->model->dict, e->tok[r], &q->line_start, piece, sizeof piece);
        else piece[0] = (char)e->tok[r];
        const int hit = job_token(e, j, piece, k, t, &q->wake);
        q->ntok++;
        q->done = 1;
        if (hit) q->fin = hit > 0 ? FIN_STOP : FIN_ERROR;
        else if (j->cancel || e->stopping) q->fin = FIN_CANCELLED;
        else if (j->deadline > 0 && t > j->deadline) q->fin = FIN_TIMEOUT;
        else q->done = q->ntok >= j->rq.max_tokens; /* FIN_LENGTH */
    }
    pthread_mutex_unlock(&e->mu);
    /* woken once the lock is free (woken under it, each would run only to wait for it again); a
     * running job is ended by this thread alone, so every j here is still alive */
    for (int r = 0; r < n; r++)
        if (e->row[r].wake) pthread_cond_signal(&e->row[r].j->cv);
}

/* one step: a block of the prompts being fed, then one token of every decoding request: sample,
 * let the finished leave, feed the others together (the rows still fed a prompt wait) */
static void batch_tick(serve_engine *e) {
    batch_prefill(e);
    const int n = e->ndec;
    if (n == 0) return;
    batch_sample(e, n);
    for (int r = n - 1; r >= 0; r--) /* from the last: the row moved into r is one already seen */
        if (e->row[r].done) batch_leave(e, r);
    if (e->ndec == 0 || mega_lm_stream_rows_step_n(e->rows, e->ndec, e->tok, e->lg) == MEGA_OK) return;
    for (int r = e->ndec - 1; r >= 0; r--) {
        snprintf(e->row[r].j->err, sizeof e->row[r].j->err, "%s", mega_last_error());
        e->row[r].fin = FIN_ERROR;
        batch_leave(e, r);
    }
}

static void *batcher(void *arg) {
    serve_engine *e = arg;
    mega_set_threads(e->threads_all); /* OpenMP keeps its count per thread (docs/library.md) */
    serve_job *take[256];
    for (;;) {
        int nt = 0;
        pthread_mutex_lock(&e->mu);
        while (!e->head && !e->stopping && mega_lm_stream_rows(e->rows) == 0) pthread_cond_wait(&e->work, &e->mu);
        const int stop = e->stopping;
        while (!stop && e->head && mega_lm_stream_rows(e->rows) + nt < e->parallel) {
            serve_job *j = take[nt++] = e->head;
            unqueue(e, j);
            j->state = JOB_RUNNING, j->t_start = now_sec();
            e->running++;
        }
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        for (int i = 0; i < nt; i++) batch_join(e, take[i]);
        batch_tick(e);
    }
    for (int r = mega_lm_stream_rows(e->rows) - 1; r >= 0; r--) e->row[r].fin = FIN_CANCELLED, batch_leave(e, r);
    return NULL;
}

/* continuous batching for this model: its mixer has rows and its cache is a chunk; 1 with the
 * stream and buffers made, 0 for the worker threads */
static int batch_setup(serve_engine *e) {
    mega_lm *lm = e->model->lm;
    const mega_lm_config *c = mega_lm_get_config(lm);
    const size_t V = (size_t)c->vocab_size, B = (size_t)e->parallel;
    int r;
    if (c->block.chunk_size <= 0 || B > 256 || mega_lm_stream_new(lm, e->parallel, c->block.chunk_size, &e->rows) != MEGA_OK)
        return 0;
    if (mega_lm_stream_row_add(e->rows, &r) != MEGA_OK) return mega_lm_stream_free(e->rows), e->rows = NULL, 0;
    mega_lm_stream_row_remove(e->rows, r);
    e->row = calloc(B, sizeof *e->row);
    e->lg = malloc(B * V * sizeof(mega_real));
    e->lgp = malloc((size_t)c->block.chunk_size * V * sizeof(mega_real));
    e->tok = calloc(B, sizeof(int32_t));
    return e->batched = e->row && e->lg && e->lgp && e->tok;
}

static void *worker(void *arg) {
    serve_engine *e = arg;
    mega_set_threads(e->threads_per_slot); /* OpenMP keeps its count per thread (docs/library.md) */
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stopping) pthread_cond_wait(&e->work, &e->mu);
        if (e->stopping) break;
        serve_job *j = e->head;
        unqueue(e, j);
        j->state = JOB_RUNNING, j->t_start = now_sec();
        e->running++;
        pthread_mutex_unlock(&e->mu);
        run_job(e, j); /* j may be freed by its handler as soon as it is done: not touched after */
        pthread_mutex_lock(&e->mu);
        e->running--;
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int serve_engine_start(serve_engine *e, loaded_model *m, int parallel, int max_queue, int threads_per_slot,
                       int threads_all, serve_metrics *mt) {
    memset(e, 0, sizeof *e);
    e->model = m, e->parallel = parallel, e->max_queue = max_queue, e->threads_per_slot = threads_per_slot;
    e->threads_all = threads_all, e->metrics = mt;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    if (!(e->workers = calloc((size_t)(parallel > 0 ? parallel : 1), sizeof(pthread_t)))) return cli_error("out of memory");
    const int batched = parallel > 0 && batch_setup(e), nthreads = batched ? 1 : parallel;
    if (parallel > 0 && e->rows && !batched) return serve_engine_free(e), cli_error("out of memory");
    for (; e->nworkers < nthreads; e->nworkers++)
        if (pthread_create(&e->workers[e->nworkers], NULL, batched ? batcher : worker, e)) {
            serve_engine_stop(e);
            serve_engine_free(e);
            return cli_error("cannot start %d threads", parallel);
        }
    return 0;
}

void serve_engine_stop(serve_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    while (e->head) {
        serve_job *j = e->head;
        unqueue(e, j);
        job_end(j, FIN_CANCELLED);
    }
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->nworkers; i++) pthread_join(e->workers[i], NULL);
    free(e->workers);
    e->workers = NULL, e->nworkers = 0;
}

void serve_engine_free(serve_engine *e) {
    mega_lm_stream_free(e->rows);
    free(e->row), free(e->lg), free(e->lgp), free(e->tok), free(e->workers);
    e->rows = NULL, e->row = NULL, e->lg = e->lgp = NULL, e->tok = NULL, e->workers = NULL;
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->mu);
}
