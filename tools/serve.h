/*
 * mega serve (docs/serving.md): an HTTP server for a model of this project. Three parts:
 *  - serve_api.c: the requests' JSON fields read and checked (each bad field is a message that
 *    names it), independent of the HTTP library;
 *  - serve_engine.c: the generation slots of a language model, fed by one bounded queue: --parallel
 *    rows of one stream decoded together by one thread (continuous batching, a Mega model with
 *    chunks), else --parallel worker threads, each decoding one request at a time through its own
 *    stream of the one shared model (docs/library.md "Threads");
 *  - serve.c: the HTTP side (civetweb): routes, keys, limits, server-sent events, metrics, the page
 *    (serve_page.c).
 */
#ifndef MEGA_TOOLS_SERVE_H
#define MEGA_TOOLS_SERVE_H
#include "models.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOP 4     /* stop strings per request (OpenAI's limit) */
#define SERVE_STOP_BYTES 256 /* bytes per stop string */

/* what a request may ask for, from the flags */
typedef struct {
    int max_tokens; /* the largest max_tokens / n_predict */
    int ctx;        /* prompt tokens + max_tokens at most */
} serve_limits;

/* A completion request (POST /v1/completions, or /completion in llama.cpp's names) */
typedef struct {
    char *prompt; /* owned, NUL-terminated, valid UTF-8 */
    size_t prompt_len;
    int max_tokens;
    mega_sample_params sp;
    int seed_given;
    char *stop[SERVE_MAX_STOP];
    int nstop;
    int stream, echo;
} gen_req;

/* Reads the body of a completion request into r (llama: llama.cpp's field names: n_predict, and
 * "content" accepted for the prompt). 0, or -1 with a message naming the field in err (every such
 * case is a 400). r is to be freed with gen_req_free in both cases. */
int serve_parse_completion(const char *body, size_t n, int llama, const serve_limits *lim, gen_req *r, char *err,
                           size_t en);
void gen_req_free(gen_req *r);
/* A translation request (POST /v1/translate): "source" (a string or a list of up to
 * SERVE_MAX_SOURCES), "beam" and "lenpen" (mega translate's --beam and --lenpen) */
#define SERVE_MAX_SOURCES 64
typedef struct {
    char **src; /* owned, valid UTF-8 */
    size_t *len;
    int n;
    mega_s2s_search sp;
} tr_req;
int serve_parse_translate(const char *body, size_t n, tr_req *r, char *err, size_t en);
void tr_req_free(tr_req *r);
/* A classification request (POST /v1/classify): "text" (or "input"), a string or a list of up to
 * SERVE_MAX_SOURCES non-empty strings; "top_k", the labels answered per text (0 or absent: all).
 * "text2" is refused: two-text classifiers are not served. */
typedef struct {
    char **text; /* owned, valid UTF-8 */
    size_t *len;
    int n, top_k;
} cls_req;
int serve_parse_classify(const char *body, size_t n, cls_req *r, char *err, size_t en);
void cls_req_free(cls_req *r);
/* the text of POST /tokenize ("content") or the ids of POST /detokenize ("tokens", each in
 * [0, vocab)): 0 or -1 with the message in err */
int serve_parse_tokenize(const char *body, size_t n, char **text, size_t *len, char *err, size_t en);
int serve_parse_detokenize(const char *body, size_t n, int vocab, int32_t **ids, size_t *count, char *err, size_t en);
/* the bytes of s[0..n) that can be sent as complete UTF-8 now: the whole when final, else up to
 * the start of a sequence that the next bytes may still complete */
size_t serve_utf8_ready(const char *s, size_t n, int final);
/* s[0..n) as valid UTF-8 into out (3n + 1 bytes): each byte of an invalid sequence becomes
 * U+FFFD. Returns the length. */
size_t serve_utf8_fix(const char *s, size_t n, char *out);
/* s[0..n) made valid UTF-8 (as serve_utf8_fix) and escaped as the inside of a JSON string (as
 * cJSON escapes it) into out (6n + 1 bytes): the length. Streamed events are built with it, with
 * no cJSON object per token. */
size_t serve_json_text(const char *s, size_t n, char *out);

/* ---- the engine ---- */

typedef enum { FIN_LENGTH, FIN_STOP, FIN_TIMEOUT, FIN_CANCELLED, FIN_ERROR } serve_finish;
const char *serve_finish_name(serve_finish f);

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct serve_job {
    gen_req rq;
    int32_t *ids; /* the prompt's tokens */
    size_t np;
    double deadline; /* now_sec() time at which it ends (0 = none) */
    double t_enq, t_start, t_first, t_last, t_end;
    /* guarded by the engine's mutex */
    job_state state;
    char *text; /* the generated text (decoded bytes), up to a stop string */
    size_t len, cap;
    int ntok;
    serve_finish finish;
    int cancel;
    char err[256];
    /* a streamed request's events, built by the decoding thread (the handler never waits on the
     * model, the decoding thread never on a socket): each text that may be sent (held back: the
     * start of a stop string, hold bytes, and an incomplete UTF-8 sequence) becomes ev_pre + the
     * text as JSON + ev_post, appended to out; evsent: the text's bytes in events so far. The
     * handler takes all of out at once (events pile up while it writes) in one write. ev_pre
     * NULL: not streamed. */
    char *ev_pre, *ev_post;
    size_t ev_pre_len, ev_post_len, hold, evsent;
    char *out;
    size_t out_len, out_cap;
    pthread_cond_t cv; /* signalled when out becomes non-empty, and at the end */
    struct serve_job *next;
} serve_job;

typedef struct serve_metrics serve_metrics;

/* a row of the batch (serve_engine.c): its request, sampler and progress */
typedef struct {
    serve_job *j;
    mega_sampler *smp;
    int line_start, ntok, done, wake;
    serve_finish fin;
    size_t fed;     /* prompt tokens fed so far (its prompt is fed a block per step) */
    uint64_t order; /* joins in this order (between prompts with as many tokens left to feed) */
} serve_row;

typedef struct {
    loaded_model *model;
    int parallel, max_queue, threads_per_slot;
    pthread_mutex_t mu;
    pthread_cond_t work;
    serve_job *head, *tail;
    int queued, running, stopping;
    int attached; /* submitted jobs whose handler has not yet answered (serve_detach) */
    pthread_t *workers;
    int nworkers;
    serve_metrics *metrics; /* may be NULL */
    uint64_t seed_counter;
    /* continuous batching (one thread, workers[0]): the rows of one stream, their logits
     * [parallel, V], a prompt block's [chunk, V], the tokens of a step; batched 0: a worker
     * thread per slot */
    int batched, threads_all;
    mega_lm_stream *rows;
    serve_row *row;
    mega_real *lg, *lgp;
    int32_t *tok;
    /* rows 0 .. ndec-1 decode; the rows after them are still being fed their prompts, a
     * chunk-sized block per step (chunked prefill: a long prompt does not stall the others) */
    int ndec;
    uint64_t joins;
} serve_engine;

/* start the `parallel` slots for the language model in m (threads_all threads in all: the batch's
 * thread takes them all, a slot's thread threads_per_slot); 0, or 1 after the error */
int serve_engine_start(serve_engine *e, loaded_model *m, int parallel, int max_queue, int threads_per_slot,
                       int threads_all, serve_metrics *mt);
/* stop: queued requests end (FIN_CANCELLED), running ones stop at their next token; joins the
 * slots. The mutex stays for the handlers still answering; serve_engine_free after them. */
void serve_engine_stop(serve_engine *e);
void serve_engine_free(serve_engine *e);
/* tokens of a text (bytes, or a converted model's dictionary): 0, or -1 with the reason in err */
int serve_tokenize(const loaded_model *m, const char *text, size_t n, int32_t **ids, size_t *np, char *err, size_t en);
/* the text of tokens (ids checked by the caller), malloc'd and NUL-terminated, length in *len */
char *serve_detokenize(const loaded_model *m, const int32_t *ids, size_t n, size_t *len);
/* a new job for r (taken over: r is zeroed) with its tokens; NULL with the reason in err (400) */
serve_job *serve_job_new(serve_engine *e, gen_req *r, double timeout, int ctx, char *err, size_t en);
/* a streamed job's events are ev_pre + text + ev_post (copied; before serve_submit): 0, or -1 */
int serve_job_events(serve_job *j, const char *ev_pre, const char *ev_post);
/* queue it: 0, or -1 when the queue is full or the server stops (the job is not queued) */
int serve_submit(serve_engine *e, serve_job *j);
/* cancel (the client left: FIN_CANCELLED; its deadline passed: FIN_TIMEOUT): a queued job ends
 * now with that reason, a running one at its next token; call with the mutex not held */
void serve_cancel(serve_engine *e, serve_job *j, serve_finish why);
void serve_job_free(serve_job *j);
/* a handler is done with its submitted job (its answer written); serve_wait_detached: until every
 * handler is, or `seconds` pass (a stop lets them write their last events: civetweb refuses
 * writes once mg_stop has begun) */
void serve_detach(serve_engine *e);
void serve_wait_detached(serve_engine *e, double seconds);

/* ---- metrics (serve.c), called by the slots under the engine's mutex ---- */
void serve_metrics_token(serve_metrics *mt, double since_last);
void serve_metrics_first(serve_metrics *mt, double ttft);

/* the page served at / (serve_page.c) */
extern const char SERVE_PAGE[];
#endif
