/*
 * mega serve: an HTTP server for a language model (docs/serving.md), with the API clients already
 * speak: OpenAI's POST /v1/completions and GET /v1/models, llama.cpp's POST /completion,
 * /tokenize, /detokenize and GET /health, /props, /metrics (Prometheus text), and a page at /;
 * for an encoder-decoder POST /v1/translate, for a classifier POST /v1/classify.
 * Built on civetweb (Debian libcivetweb-dev) when make finds it; otherwise the command says in one
 * line that this build has no HTTP server. Every request body is hostile: its size is bounded
 * before it is read (413), every field is checked (400 naming it; serve_api.c), a full queue is a
 * 503, and no input gives a 500.
 */
#include "serve.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- metrics (the slots update them, also in a build without the server) ------------------ */

#define NBUCKET 12
typedef struct {
    const double *le; /* upper bounds, NBUCKET - 1 of them (+Inf last) */
    uint64_t count[NBUCKET], n;
    double sum;
} hist;

struct serve_metrics {
    pthread_mutex_t mu;
    uint64_t requests, errors, prompt_tokens, predicted_tokens;
    hist latency, ttft, itl;
};

static void hist_add(hist *h, double v) {
    int i = 0;
    while (i < NBUCKET - 1 && v > h->le[i]) i++;
    h->count[i]++, h->n++, h->sum += v;
}
void serve_metrics_token(serve_metrics *mt, double since_last) {
    pthread_mutex_lock(&mt->mu);
    hist_add(&mt->itl, since_last);
    mt->predicted_tokens++;
    pthread_mutex_unlock(&mt->mu);
}
void serve_metrics_first(serve_metrics *mt, double ttft) {
    pthread_mutex_lock(&mt->mu);
    hist_add(&mt->ttft, ttft);
    mt->predicted_tokens++;
    pthread_mutex_unlock(&mt->mu);
}

#ifndef MEGA_USE_CIVETWEB
int cmd_serve(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_error("this build of mega has no HTTP server (civetweb was not found at build time: "
                     "apt-get install libcivetweb-dev, then rebuild)"), 2;
}
#else
#include <civetweb.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netdb.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

/* the histograms' bounds (seconds): request durations and first tokens; the time between tokens */
static const double LAT_LE[NBUCKET - 1] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double ITL_LE[NBUCKET - 1] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1};

/* ---- the server ------------------------------------------------------------------------- */

typedef struct {
    loaded_model model;
    serve_engine eng;
    serve_metrics mt;
    serve_limits lim;
    const char *key; /* NULL: no key */
    char name[256];  /* the model's name in /v1/models and /props */
    size_t params;
    int64_t max_body;
    double timeout;
    int parallel, max_queue;
    time_t created;
    pthread_mutex_t model_mu; /* an encoder-decoder is used by one request at a time */
    int threads;              /* the library's threads for an encoder-decoder's request */
} server;

static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { (void)sig, g_stop = 1; }

/* the reason phrase of the statuses this server sends */
static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
    }
}

/* a whole response with a body. civetweb runs the handlers on threads with small stacks (100 KiB,
 * most of it its own): the handlers keep their buffers on the heap and write with mg_write, whose
 * frames are small (mg_printf formats into an 8 KiB buffer on the stack). */
static void respond(struct mg_connection *c, int status, const char *type, const char *body, size_t n, const char *extra) {
    char hdr[512];
    int k = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\n%sConnection: close\r\n\r\n",
                     status, reason(status), type, n, extra ? extra : "");
    mg_write(c, hdr, k > 0 && (size_t)k < sizeof hdr ? (size_t)k : 0);
    mg_write(c, body, n);
}

static int write_str(struct mg_connection *c, const char *s) { return mg_write(c, s, strlen(s)); }

/* a JSON response (j is deleted) */
static int send_json(struct mg_connection *c, int status, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) return respond(c, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}", 37, NULL), 500;
    respond(c, status, "application/json", s, strlen(s), NULL);
    free(s);
    return status;
}

/* {"error": {"message", "type", "code"}}, as OpenAI's API answers */
static int send_error(struct mg_connection *c, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int send_error(struct mg_connection *c, int status, const char *fmt, ...) {
    enum { MSG = 1024 };
    char *msg = malloc(MSG), *fixed = malloc(3 * MSG + 1); /* a message may quote what the client sent */
    if (!msg || !fixed) {
        free(msg), free(fixed);
        respond(c, 503, "application/json", "{}", 2, NULL);
        return 503;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, MSG, fmt, ap);
    va_end(ap);
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status == 503 || status == 429 ? "unavailable_error" : status >= 500 ? "server_error"
                                                                                           : "invalid_request_error";
    serve_utf8_fix(msg, strlen(msg), fixed);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", fixed);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "code", status);
    free(msg), free(fixed);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    respond(c, status, "application/json", s ? s : "{}", s ? strlen(s) : 2,
            status == 401 ? "WWW-Authenticate: Bearer\r\n" : status == 503 ? "Retry-After: 1\r\n" : NULL);
    free(s);
    return status;
}

/* the body, at most max bytes: 0, or the status of the error sent (413; 400 when it ends early) */
static int read_body(struct mg_connection *c, int64_t max, char **body, size_t *n) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    *body = NULL, *n = 0;
    if (ri->content_length > max)
        return send_error(c, 413, "body: %lld bytes, more than the limit of %lld (--max-body)", ri->content_length, (long long)max);
    /* a declared length is read to its end; a chunked body up to one byte past the limit */
    const size_t want = ri->content_length >= 0 ? (size_t)ri->content_length : (size_t)max + 1;
    size_t cap = want < 65536 ? want + 1 : 65536, got = 0;
    char *b = malloc(cap);
    if (!b) return send_error(c, 503, "out of memory");
    for (;;) {
        if (got + 1 >= cap && cap < want + 1) {
            size_t nc = 2 * cap < want + 1 ? 2 * cap : want + 1;
            char *nb = realloc(b, nc);
            if (!nb) return free(b), send_error(c, 503, "out of memory");
            b = nb, cap = nc;
        }
        if (got >= want) break;
        int r = mg_read(c, b + got, cap - 1 - got < want - got ? cap - 1 - got : want - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got > (size_t)max) return free(b), send_error(c, 413, "body: more than the limit of %lld bytes (--max-body)", (long long)max);
    if (ri->content_length >= 0 && got < want)
        return free(b), send_error(c, 400, "body: %zu of the %lld bytes announced arrived", got, ri->content_length);
    b[got] = 0;
    *body = b, *n = got;
    return 0;
}

/* the API key of the request ("Authorization: Bearer KEY") against ours, in time that depends
 * only on the lengths */
static int key_ok(const server *s, struct mg_connection *c) {
    if (!s->key) return 1;
    const char *h = mg_get_header(c, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    h += 7;
    const size_t a = strlen(h), b = strlen(s->key);
    volatile unsigned char d = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++) d |= (unsigned char)(s->key[i] ^ (i < a ? h[i] : 0));
    return d == 0;
}

#define SERVE_COALESCE_MS 2

static double ms(double a, double b) { return b > a ? (b - a) * 1000 : 0; }

/* ---- completions ------------------------------------------------------------------------- */

/* a completion response or stream event (OpenAI): text is n bytes (made valid UTF-8); finish NULL
 * while streaming; j given: the usage */
static cJSON *oai_object(const server *s, const char *id, const char *text, size_t n, const char *finish, const serve_job *j) {
    char *t = malloc(3 * n + 1);
    cJSON *o = cJSON_CreateObject(), *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    if (!t || !o || !ch || !c) return free(t), cJSON_Delete(o), cJSON_Delete(c), NULL;
    serve_utf8_fix(text, n, t);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", s->name);
    cJSON_AddStringToObject(c, "text", t);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(ch, c);
    if (j) {
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->np);
        cJSON_AddNumberToObject(u, "completion_tokens", j->ntok);
        cJSON_AddNumberToObject(u, "total_tokens", (double)j->np + j->ntok);
    }
    free(t);
    return o;
}

/* llama.cpp's /completion object: {"content", "stop"} while streaming; the final one also has
 * the counts, why it stopped, the settings and the timings */
static cJSON *llama_object(const server *s, const char *text, size_t n, const serve_job *j) {
    char *t = malloc(3 * n + 1);
    cJSON *o = cJSON_CreateObject();
    if (!t || !o) return free(t), cJSON_Delete(o), NULL;
    serve_utf8_fix(text, n, t);
    cJSON_AddStringToObject(o, "content", t);
    free(t);
    cJSON_AddBoolToObject(o, "stop", j != NULL);
    if (!j) return o;
    cJSON_AddStringToObject(o, "model", s->name);
    cJSON_AddNumberToObject(o, "tokens_predicted", j->ntok);
    cJSON_AddNumberToObject(o, "tokens_evaluated", (double)j->np);
    cJSON_AddStringToObject(o, "stop_type", j->finish == FIN_STOP ? "word" : j->finish == FIN_LENGTH ? "limit" : serve_finish_name(j->finish));
    cJSON_AddBoolToObject(o, "stopped_limit", j->finish == FIN_LENGTH);
    cJSON_AddBoolToObject(o, "stopped_word", j->finish == FIN_STOP);
    cJSON *g = cJSON_AddObjectToObject(o, "generation_settings");
    cJSON_AddNumberToObject(g, "n_predict", j->rq.max_tokens);
    cJSON_AddNumberToObject(g, "temperature", j->rq.sp.temperature);
    cJSON_AddNumberToObject(g, "top_k", j->rq.sp.top_k);
    cJSON_AddNumberToObject(g, "top_p", j->rq.sp.top_p);
    cJSON_AddNumberToObject(g, "seed", (double)j->rq.sp.seed);
    cJSON *tm = cJSON_AddObjectToObject(o, "timings");
    const double t1 = j->t_first > 0 ? j->t_first : j->t_end, pm = ms(j->t_start, t1), gm = ms(t1, j->t_end);
    cJSON_AddNumberToObject(tm, "prompt_n", (double)j->np);
    cJSON_AddNumberToObject(tm, "prompt_ms", pm);
    cJSON_AddNumberToObject(tm, "predicted_n", j->ntok);
    cJSON_AddNumberToObject(tm, "predicted_ms", gm);
    cJSON_AddNumberToObject(tm, "predicted_per_second", gm > 0 ? (j->ntok - 1) * 1000.0 / gm : 0);
    return o;
}

/* OpenAI's finish_reason: a request cut by its deadline or by the server's stop reads "length" */
static const char *oai_finish(const serve_job *j) { return j->finish == FIN_STOP ? "stop" : "length"; }

/* one server-sent event with o (deleted); 0, or -1 when the client is gone */
static int sse(struct mg_connection *c, cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    const size_t n = s ? strlen(s) : 0;
    char *ev = s ? malloc(n + 9) : NULL;
    if (!ev) return free(s), -1;
    /* one write per event: one send and one segment, where three small ones cost a busy server
     * three system calls per token */
    memcpy(ev, "data: ", 6), memcpy(ev + 6, s, n), memcpy(ev + 6 + n, "\n\n", 3);
    free(s);
    const int ok = mg_write(c, ev, n + 8) > 0;
    free(ev);
    return ok ? 0 : -1;
}

/* Waits until j has events to send or ends, then takes all of them: j's buffer and the handler's
 * *buf (taken before, written, so empty now) swap places, both reused. The bytes taken, *done,
 * and *crowd: other requests decode beside it. A request still queued at its deadline ends there
 * (FIN_TIMEOUT). */
static size_t take_events(server *s, serve_job *j, char **buf, size_t *cap, int *done, int *crowd) {
    serve_engine *e = &s->eng;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        *done = j->state == JOB_DONE;
        if (*done || j->out_len) break;
        if (j->state == JOB_QUEUED && j->deadline > 0 && now_sec() > j->deadline) {
            pthread_mutex_unlock(&e->mu);
            serve_cancel(e, j, FIN_TIMEOUT);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &e->mu, &ts);
    }
    char *b = j->out;
    const size_t n = j->out_len, c = j->out_cap;
    j->out = *buf, j->out_cap = *cap, j->out_len = 0;
    *buf = b, *cap = c;
    *crowd = e->batched && e->running > 1;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* a request that ended before its first token, for another reason than its length: the status */
static int failed_early(struct mg_connection *c, const serve_job *j) {
    if (j->ntok > 0 || j->finish == FIN_LENGTH || j->finish == FIN_STOP) return 0;
    if (j->finish == FIN_TIMEOUT) return send_error(c, 503, "timeout: the request waited longer than --timeout in the queue");
    if (j->finish == FIN_CANCELLED) return send_error(c, 503, "the server is stopping");
    return send_error(c, 500, "generation failed: %s", j->err);
}

static void completion_id(char *id, size_t n, const serve_job *j) {
    snprintf(id, n, "cmpl-%016llx", (unsigned long long)(j->rq.sp.seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)(j->t_enq * 1e6)));
}

/* a streamed request's events around their text (serve_job_events), the objects oai_object and
 * llama_object print while streaming; "created" is the request's time (OpenAI's chunks of one
 * completion share it) */
static int stream_events(const server *s, serve_job *j, int llama) {
    if (llama) return serve_job_events(j, "data: {\"content\":\"", "\",\"stop\":false}\n\n");
    char id[64], *name = malloc(6 * sizeof s->name + 1), *post = malloc(6 * sizeof s->name + 256);
    int rc = -1;
    if (name && post) { /* the members in oai_object's order */
        completion_id(id, sizeof id, j);
        serve_json_text(s->name, strlen(s->name), name);
        snprintf(post, 6 * sizeof s->name + 256, "\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}],\"id\":\"%s\","
                 "\"object\":\"text_completion\",\"created\":%lld,\"model\":\"%s\"}\n\n", id, (long long)time(NULL), name);
        rc = serve_job_events(j, "data: {\"choices\":[{\"text\":\"", post);
    }
    free(name), free(post);
    return rc;
}

/* the streamed answer: the events the decoding thread built, all those pending in one write;
 * OpenAI's end with "data: [DONE]" */
static int stream_job(server *s, struct mg_connection *c, serve_job *j, int llama) {
    char id[64], *buf = NULL;
    size_t cap = 0;
    int done = 0, gone = 0, crowd = 0;
    completion_id(id, sizeof id, j);
    /* the status waits for the first text: a request that never started is an error status */
    size_t k = take_events(s, j, &buf, &cap, &done, &crowd);
    int st = done ? failed_early(c, j) : 0;
    if (st) return free(buf), st;
    write_str(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 "X-Accel-Buffering: no\r\nConnection: close\r\n\r\n");
    if (j->rq.echo && !llama) gone = sse(c, oai_object(s, id, j->rq.prompt, j->rq.prompt_len, NULL, NULL));
    for (int first = 1; !gone && (first || !done); first = 0) {
        if (!first) k = take_events(s, j, &buf, &cap, &done, &crowd);
        if (k) gone = mg_write(c, buf, k) <= 0;
        /* while other requests decode beside it, the next write waits SERVE_COALESCE_MS: the
         * events of a few steps go in one send (each send over loopback costs the sender the
         * receiver's side too; perf: a third of a token's CPU at 16 rows, one send per token) */
        if (!gone && !done && crowd) usleep(SERVE_COALESCE_MS * 1000);
    }
    if (gone) { /* the client left: stop generating for it, and wait for the slot to let go */
        serve_cancel(&s->eng, j, FIN_CANCELLED);
        while (!done) take_events(s, j, &buf, &cap, &done, &crowd);
    } else if (llama) {
        sse(c, llama_object(s, "", 0, j));
    } else {
        sse(c, oai_object(s, id, "", 0, oai_finish(j), j));
        write_str(c, "data: [DONE]\n\n");
    }
    free(buf);
    return 200;
}

/* the whole answer at the end */
static int whole_job(server *s, struct mg_connection *c, serve_job *j, int llama) {
    char id[64], *buf = NULL;
    size_t cap = 0;
    int done = 0, crowd;
    while (!done) take_events(s, j, &buf, &cap, &done, &crowd); /* no events: woken at the end */
    free(buf);
    int st = failed_early(c, j);
    if (st) return st;
    completion_id(id, sizeof id, j);
    /* the text is the job's own (complete now); echo puts the prompt before it */
    const size_t P = j->rq.echo && !llama ? j->rq.prompt_len : 0;
    char *all = malloc(P + j->len + 1);
    if (!all) return send_error(c, 503, "out of memory");
    memcpy(all, j->rq.prompt, P);
    memcpy(all + P, j->text ? j->text : "", j->len);
    cJSON *o = llama ? llama_object(s, all, P + j->len, j) : oai_object(s, id, all, P + j->len, oai_finish(j), j);
    free(all);
    return send_json(c, 200, o);
}

static int h_completion(server *s, struct mg_connection *c, int llama) {
    char *body, err[512];
    size_t n;
    int st = read_body(c, s->max_body, &body, &n);
    if (st) return st;
    gen_req r;
    int bad = serve_parse_completion(body, n, llama, &s->lim, &r, err, sizeof err);
    free(body);
    if (bad) return gen_req_free(&r), send_error(c, 400, "%s", err);
    serve_job *j = serve_job_new(&s->eng, &r, s->timeout, s->lim.ctx, err, sizeof err);
    gen_req_free(&r);
    if (!j) return send_error(c, 400, "%s", err);
    if (j->rq.stream && stream_events(s, j, llama)) return serve_job_free(j), send_error(c, 503, "out of memory");
    if (serve_submit(&s->eng, j)) {
        serve_job_free(j);
        return g_stop ? send_error(c, 503, "the server is stopping")
                      : send_error(c, 503, "the queue is full (%d requests waiting, --max-queue): try again later", s->max_queue);
    }
    pthread_mutex_lock(&s->mt.mu);
    s->mt.prompt_tokens += j->np;
    pthread_mutex_unlock(&s->mt.mu);
    st = j->rq.stream ? stream_job(s, c, j, llama) : whole_job(s, c, j, llama);
    serve_detach(&s->eng);
    serve_job_free(j);
    return st;
}

/* ---- the other endpoints ------------------------------------------------------------------ */

static int h_tokenize(server *s, struct mg_connection *c) {
    char *body, *text, err[512];
    size_t n, len, np;
    int st = read_body(c, s->max_body, &body, &n);
    if (st) return st;
    int bad = serve_parse_tokenize(body, n, &text, &len, err, sizeof err);
    free(body);
    int32_t *ids = NULL;
    if (!bad && serve_tokenize(&s->model, text, len, &ids, &np, err, sizeof err)) bad = 1;
    free(text);
    if (bad) return send_error(c, 400, "%s", err);
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < np; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    return send_json(c, 200, o);
}

static int h_detokenize(server *s, struct mg_connection *c) {
    char *body, err[512];
    size_t n, k, len;
    int32_t *ids;
    int st = read_body(c, s->max_body, &body, &n);
    if (st) return st;
    int bad = serve_parse_detokenize(body, n, mega_lm_get_config(s->model.lm)->vocab_size, &ids, &k, err, sizeof err);
    free(body);
    if (bad) return free(ids), send_error(c, 400, "%s", err);
    char *t = serve_detokenize(&s->model, ids, k, &len), *fixed = t ? malloc(3 * len + 1) : NULL;
    free(ids);
    if (!fixed) return free(t), send_error(c, 503, "out of memory");
    serve_utf8_fix(t, len, fixed);
    free(t);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", fixed);
    free(fixed);
    return send_json(c, 200, o);
}

/* the sources of r as rows of tokens (right-padded, width *S) and the length each search limit
 * counts; 0, or the status of the error sent */
static int tr_sources(server *s, struct mg_connection *c, const tr_req *r, int32_t **src, int *S, int *limn) {
    const mega_s2s *m = s->model.s2s;
    const int maxS = s2s_max_source(m), B = r->n;
    const int pad = mega_s2s_get_config(m)->padding_idx, bytes_limit = s->model.src_bpe && !s->model.tgt_bpe;
    size_t w = 1;
    for (int i = 0; i < B; i++) w = r->len[i] + 1 > w ? r->len[i] + 1 : w;
    int32_t *rows = malloc((size_t)B * w * sizeof(int32_t));
    int *slen = malloc((size_t)B * sizeof(int));
    if (!rows || !slen) return free(rows), free(slen), send_error(c, 503, "out of memory");
    *S = 0;
    for (int i = 0; i < B; i++) {
        if (mega_s2s_tokenize_bpe(s->model.src_bpe, r->src[i], r->len[i], maxS, rows + (size_t)i * w, &slen[i]) != MEGA_OK) {
            free(rows), free(slen);
            return send_error(c, 400, "source[%d]: %s", i, mega_last_error());
        }
        size_t mb = r->len[i]; /* as mega translate: the line's bytes without its end */
        if (mb && r->src[i][mb - 1] == '\n') mb--;
        if (mb && r->src[i][mb - 1] == '\r') mb--;
        limn[i] = bytes_limit ? (int)mb + 1 : slen[i];
        *S = slen[i] > *S ? slen[i] : *S;
    }
    for (int i = 0; i < B; i++) { /* compact to width S */
        memmove(rows + (size_t)i * *S, rows + (size_t)i * w, (size_t)slen[i] * sizeof(int32_t));
        for (int t = slen[i]; t < *S; t++) rows[(size_t)i * *S + t] = pad;
    }
    free(slen);
    *src = rows;
    return 0;
}

/* the translations (each best hypothesis's text, valid UTF-8, and its score) as the answer */
static int tr_answer(server *s, struct mg_connection *c, const tr_req *r, const int32_t *out, const int *olen, int cap,
                     const double *score) {
    const size_t longest = mega_bpe_longest(s->model.tgt_bpe);
    char *raw = malloc(longest * (size_t)cap + 1), *fixed = malloc(3 * longest * (size_t)cap + 1);
    if (!raw || !fixed) return free(raw), free(fixed), send_error(c, 503, "out of memory");
    cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "model", s->name);
    cJSON_AddNumberToObject(o, "beam", r->sp.beam);
    cJSON_AddNumberToObject(o, "lenpen", r->sp.lenpen);
    cJSON_AddItemToObject(o, "translations", a);
    for (int i = 0; i < r->n; i++) {
        const size_t k = mega_bpe_decode(s->model.tgt_bpe, out + (size_t)i * cap, (size_t)olen[i], (uint8_t *)raw);
        serve_utf8_fix(raw, k, fixed);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "translation", fixed);
        cJSON_AddNumberToObject(t, "tokens", olen[i]);
        cJSON_AddNumberToObject(t, "score", score[i]);
        cJSON_AddItemToArray(a, t);
    }
    free(raw), free(fixed);
    return send_json(c, 200, o);
}

/* The search runs on a thread of its own: civetweb's handler threads have 100 KiB stacks, too
 * small to promise to the library, and the library's thread count is per thread (--threads) */
typedef struct {
    server *s;
    const int32_t *src;
    int B, S;
    const mega_s2s_search *sp;
    int32_t *out;
    int *olen, cap;
    double *score;
    mega_status st;
    char err[256];
} tr_call;
static void *tr_run(void *arg) {
    tr_call *k = arg;
    mega_set_threads(k->s->threads);
    k->st = mega_s2s_translate(k->s->model.s2s, k->src, k->B, k->S, k->sp, k->out, k->olen, k->cap, k->score);
    if (k->st != MEGA_OK) snprintf(k->err, sizeof k->err, "%s", mega_last_error()); /* thread-local */
    return NULL;
}

/* POST /v1/translate: the sources translated together by one search (mega_s2s_translate, as
 * mega translate does for a batch of lines), with the request's beam and lenpen */
static int h_translate(server *s, struct mg_connection *c) {
    char *body, err[512];
    size_t n;
    int st = read_body(c, s->max_body, &body, &n);
    if (st) return st;
    tr_req r;
    int bad = serve_parse_translate(body, n, &r, err, sizeof err);
    free(body);
    if (bad) return tr_req_free(&r), send_error(c, 400, "%s", err);
    int32_t *src = NULL, *out = NULL;
    int S = 0, *limn = malloc((size_t)r.n * sizeof(int)), *olen = malloc((size_t)r.n * sizeof(int));
    double *score = malloc((size_t)r.n * sizeof(double));
    size_t bytes = 0;
    if (!limn || !olen || !score) st = send_error(c, 503, "out of memory");
    if (!st) st = tr_sources(s, c, &r, &src, &S, limn);
    int SL = 0;
    for (int i = 0; !st && i < r.n; i++) SL = limn[i] > SL ? limn[i] : SL;
    r.sp.limit_src_len = limn;
    const int cap = (int)(r.sp.max_len_a * SL + r.sp.max_len_b) + 2;
    if (!st && (mega_s2s_search_memory(mega_s2s_get_config(s->model.s2s), r.n, S, &r.sp, &bytes) != MEGA_OK || bytes > (1u << 30)))
        st = send_error(c, 400, "source: %d sources of up to %d tokens with beam %d need more memory than this server gives "
                                "one request (1 GiB): send fewer or shorter sources, or a smaller beam", r.n, S, r.sp.beam);
    if (!st && !(out = malloc((size_t)r.n * cap * sizeof(int32_t)))) st = send_error(c, 503, "out of memory");
    if (!st) {
        tr_call k = {s, src, r.n, S, &r.sp, out, olen, cap, score, MEGA_ERR_INVALID, ""};
        pthread_t t;
        pthread_mutex_lock(&s->model_mu);
        if (pthread_create(&t, NULL, tr_run, &k)) snprintf(k.err, sizeof k.err, "cannot start a thread");
        else pthread_join(t, NULL);
        pthread_mutex_unlock(&s->model_mu);
        st = k.st != MEGA_OK ? send_error(c, 500, "translation failed: %s", k.err) : tr_answer(s, c, &r, out, olen, cap, score);
    }
    free(src), free(out), free(limn), free(olen), free(score);
    tr_req_free(&r);
    return st;
}

/* ---- classification ----------------------------------------------------------------------- */

/* The texts' tokens as the classifier's training data was read (mega_vocab_encode: bytes, or
 * ListOps tokens), each cut at --ctx tokens as `mega predict --seq-len` cuts; 0, or the status of
 * the error sent. A classifier that does not read text is refused here. */
static int cl_tokens(server *s, struct mg_connection *c, const cls_req *r, int32_t **ids, size_t *off, int32_t *len,
                     int *cut) {
    const cls_model *cm = &s->model.cls;
    const mega_cls_config *cc = mega_cls_get_config(cm->m);
    if (cm->fairseq)
        return send_error(c, 400, "text: this classifier was converted from an official LRA checkpoint: the server does not read "
                                  "its fairseq dictionary (use mega predict on its binarized data)");
    if (cc->embedding == MEGA_EMBED_REAL || cm->vocab.kind == MEGA_VOCAB_PIXELS)
        return send_error(c, 400, "text: this classifier reads %s, not text (use mega predict --%s)",
                          cc->input_norm > 0 ? "audio" : "pixels", cc->input_norm > 0 ? "audio" : "images");
    if (cc->two_tower) return send_error(c, 400, "text: this classifier reads two texts (two-tower): the server does not serve those");
    size_t total = 0;
    for (int i = 0; i < r->n; i++) {
        size_t k = 0;
        if (mega_vocab_encode(&cm->vocab, r->text[i], r->len[i], NULL, 0, &k) != MEGA_OK)
            return send_error(c, 400, "text: %s", mega_last_error());
        if (k == 0) return send_error(c, 400, "text: item %d has no %s tokens", i, cm->vocab.kind == MEGA_VOCAB_LISTOPS ? "ListOps" : "");
        cut[i] = k > (size_t)s->lim.ctx;
        len[i] = (int32_t)(cut[i] ? (size_t)s->lim.ctx : k);
        off[i] = total, total += (size_t)len[i];
    }
    if (!(*ids = malloc(total * sizeof **ids))) return send_error(c, 503, "out of memory");
    for (int i = 0; i < r->n; i++) {
        size_t k;
        mega_vocab_encode(&cm->vocab, r->text[i], r->len[i], *ids + off[i], (size_t)len[i], &k);
    }
    return 0;
}

/* The forwards run on a thread of their own, as the translations do: one text at a time (batch 1,
 * no padding), each text's logits as probabilities p[i * C + k] (softmax in double) */
typedef struct {
    server *s;
    const int32_t *ids;
    const size_t *off;
    const int32_t *len;
    int n;
    double *p;
    mega_status st;
    char err[256];
} cl_call;
static void *cl_run(void *arg) {
    cl_call *k = arg;
    mega_cls *m = k->s->model.cls.m;
    const int C = mega_cls_get_config(m)->classes;
    const mega_lm_run ev = {0, 0};
    mega_set_threads(k->s->threads);
    for (int i = 0; i < k->n; i++) {
        const mega_cls_input in = {k->ids + k->off[i], NULL, &k->len[i], k->len[i]};
        if ((k->st = mega_cls_forward(m, &in, NULL, 1, NULL, &ev, NULL, NULL)) != MEGA_OK) {
            snprintf(k->err, sizeof k->err, "%s", mega_last_error());
            return NULL;
        }
        const mega_real *lg = mega_cls_logits(m);
        double mx = lg[0], sum = 0, *p = k->p + (size_t)i * C;
        for (int c = 1; c < C; c++) mx = lg[c] > mx ? lg[c] : mx;
        for (int c = 0; c < C; c++) sum += p[c] = exp((double)lg[c] - mx);
        for (int c = 0; c < C; c++) p[c] /= sum;
    }
    k->st = MEGA_OK;
    return NULL;
}

/* {"object": "classification", "model", "results": [{"index", "label", "probabilities": [{"label",
 * "p"}, ...] (top_k, most probable first), "tokens", "truncated"}], "usage": {"prompt_tokens"}} */
static int cl_answer(server *s, struct mg_connection *c, const cls_req *r, const double *p, const int32_t *len, const int *cut) {
    const mega_classes *cl = &s->model.cls.classes;
    const int C = mega_cls_get_config(s->model.cls.m)->classes, K = r->top_k > 0 && r->top_k < C ? r->top_k : C;
    int *order = malloc((size_t)C * sizeof *order);
    if (!order) return send_error(c, 503, "out of memory");
    cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "object", "classification");
    cJSON_AddStringToObject(o, "model", s->name);
    cJSON_AddItemToObject(o, "results", a);
    double used = 0;
    for (int i = 0; i < r->n; i++) {
        const double *pi = p + (size_t)i * C;
        for (int k = 0; k < C; k++) order[k] = k;
        for (int k = 1; k < C; k++) /* by probability, the lower class first among equals (argmax) */
            for (int j = k; j > 0 && pi[order[j]] > pi[order[j - 1]]; j--) {
                const int t = order[j];
                order[j] = order[j - 1], order[j - 1] = t;
            }
        cJSON *e = cJSON_CreateObject(), *ps = cJSON_CreateArray();
        cJSON_AddNumberToObject(e, "index", i);
        cJSON_AddStringToObject(e, "label", order[0] < cl->n ? cl->names[order[0]] : "?");
        for (int k = 0; k < K; k++) {
            cJSON *q = cJSON_CreateObject();
            cJSON_AddStringToObject(q, "label", order[k] < cl->n ? cl->names[order[k]] : "?");
            cJSON_AddNumberToObject(q, "p", pi[order[k]]);
            cJSON_AddItemToArray(ps, q);
        }
        cJSON_AddItemToObject(e, "probabilities", ps);
        cJSON_AddNumberToObject(e, "tokens", len[i]);
        cJSON_AddBoolToObject(e, "truncated", cut[i]);
        cJSON_AddItemToArray(a, e);
        used += len[i];
    }
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "usage"), "prompt_tokens", used);
    free(order);
    pthread_mutex_lock(&s->mt.mu);
    s->mt.prompt_tokens += (uint64_t)used;
    pthread_mutex_unlock(&s->mt.mu);
    return send_json(c, 200, o);
}

/* POST /v1/classify: each text's label and class probabilities, as mega predict labels a line */
static int h_classify(server *s, struct mg_connection *c) {
    char *body, err[512];
    size_t n;
    int st = read_body(c, s->max_body, &body, &n);
    if (st) return st;
    cls_req r;
    int bad = serve_parse_classify(body, n, &r, err, sizeof err);
    free(body);
    if (bad) return cls_req_free(&r), send_error(c, 400, "%s", err);
    const int C = mega_cls_get_config(s->model.cls.m)->classes;
    int32_t *ids = NULL, *len = malloc((size_t)r.n * sizeof *len);
    size_t *off = malloc((size_t)r.n * sizeof *off);
    int *cut = malloc((size_t)r.n * sizeof *cut);
    double *p = malloc((size_t)r.n * C * sizeof *p);
    if (!len || !off || !cut || !p) st = send_error(c, 503, "out of memory");
    if (!st) st = cl_tokens(s, c, &r, &ids, off, len, cut);
    if (!st) {
        cl_call k = {s, ids, off, len, r.n, p, MEGA_ERR_INVALID, ""};
        pthread_t t;
        pthread_mutex_lock(&s->model_mu);
        if (pthread_create(&t, NULL, cl_run, &k)) snprintf(k.err, sizeof k.err, "cannot start a thread");
        else pthread_join(t, NULL);
        pthread_mutex_unlock(&s->model_mu);
        st = k.st != MEGA_OK ? send_error(c, 500, "classification failed: %s", k.err) : cl_answer(s, c, &r, p, len, cut);
    }
    free(ids), free(len), free(off), free(cut), free(p);
    cls_req_free(&r);
    return st;
}

static int h_health(server *s, struct mg_connection *c) {
    (void)s;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    return send_json(c, 200, o);
}

static int h_models(server *s, struct mg_connection *c) {
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", s->name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "mega");
    cJSON_AddItemToArray(d, m);
    return send_json(c, 200, o);
}

static int h_props(server *s, struct mg_connection *c) {
    cJSON *o = cJSON_CreateObject(), *g = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", s->name);
    cJSON_AddStringToObject(o, "kind", mega_model_kind_name(s->model.kind));
    cJSON_AddNumberToObject(o, "parameters", (double)s->params);
    if (s->model.kind == MEGA_MODEL_CLS) { /* what POST /v1/classify answers with and reads */
        const cls_model *cm = &s->model.cls;
        cJSON *cl = cJSON_AddArrayToObject(o, "classes");
        for (int k = 0; k < cm->classes.n; k++) cJSON_AddItemToArray(cl, cJSON_CreateString(cm->classes.names[k]));
        cJSON_AddStringToObject(o, "vocabulary", cm->fairseq ? "fairseq dictionary" : cm->vocab.kind == MEGA_VOCAB_LISTOPS ? "listops"
                                                 : cm->vocab.kind == MEGA_VOCAB_BYTES ? "bytes" : "pixels");
        cJSON_AddNumberToObject(o, "max_input_tokens", s->lim.ctx);
        cJSON_Delete(g);
        return send_json(c, 200, o);
    }
    if (s->model.kind == MEGA_MODEL_S2S) {
        mega_s2s_search sp;
        mega_s2s_search_default(&sp);
        cJSON_AddStringToObject(o, "vocabulary", s->model.src_bpe || s->model.tgt_bpe ? "subword units" : "bytes");
        cJSON_AddNumberToObject(o, "max_source_tokens", s2s_max_source(s->model.s2s));
        cJSON_AddNumberToObject(g, "beam", sp.beam);
        cJSON_AddNumberToObject(g, "lenpen", sp.lenpen);
        cJSON_AddItemToObject(o, "default_generation_settings", g);
        return send_json(c, 200, o);
    }
    const mega_lm_config *lc = mega_lm_get_config(s->model.lm);
    cJSON_AddNumberToObject(o, "vocab_size", lc->vocab_size);
    cJSON_AddStringToObject(o, "vocabulary", s->model.dict ? "fairseq dictionary" : "bytes");
    cJSON_AddNumberToObject(o, "layers", lc->layers);
    cJSON_AddNumberToObject(o, "n_ctx", s->lim.ctx);
    cJSON_AddNumberToObject(o, "max_tokens", s->lim.max_tokens);
    cJSON_AddNumberToObject(o, "total_slots", s->parallel);
    cJSON_AddNumberToObject(o, "max_queue", s->max_queue);
    mega_sample_params sp;
    mega_sample_params_default(&sp);
    cJSON_AddNumberToObject(g, "temperature", sp.temperature);
    cJSON_AddNumberToObject(g, "top_k", sp.top_k);
    cJSON_AddNumberToObject(g, "top_p", sp.top_p);
    cJSON_AddItemToObject(o, "default_generation_settings", g);
    return send_json(c, 200, o);
}

static void hist_text(char **p, char *end, const char *name, const char *help, const hist *h) {
    if (*p >= end) return; /* (a full buffer: snprintf's count may have passed its end) */
    *p += snprintf(*p, (size_t)(end - *p), "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < NBUCKET && *p < end; i++) {
        cum += h->count[i];
        if (i < NBUCKET - 1) *p += snprintf(*p, (size_t)(end - *p), "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
        else *p += snprintf(*p, (size_t)(end - *p), "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    if (*p < end) *p += snprintf(*p, (size_t)(end - *p), "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

static int h_metrics(server *s, struct mg_connection *c) {
    char *buf = malloc(16384);
    if (!buf) return send_error(c, 503, "out of memory");
    pthread_mutex_lock(&s->eng.mu);
    const int queued = s->eng.queued, running = s->eng.running;
    pthread_mutex_unlock(&s->eng.mu);
    pthread_mutex_lock(&s->mt.mu);
    char *p = buf, *end = buf + 16384;
    p += snprintf(p, (size_t)(end - p),
                  "# HELP mega_requests_total HTTP requests answered.\n# TYPE mega_requests_total counter\nmega_requests_total %llu\n"
                  "# HELP mega_request_errors_total Requests answered with a 4xx or 5xx status.\n# TYPE mega_request_errors_total counter\n"
                  "mega_request_errors_total %llu\n"
                  "# HELP mega_prompt_tokens_total Prompt tokens of the completions queued and of the texts classified.\n# TYPE mega_prompt_tokens_total counter\n"
                  "mega_prompt_tokens_total %llu\n"
                  "# HELP mega_tokens_predicted_total Tokens generated.\n# TYPE mega_tokens_predicted_total counter\n"
                  "mega_tokens_predicted_total %llu\n"
                  "# HELP mega_requests_queued Completions waiting for a slot.\n# TYPE mega_requests_queued gauge\nmega_requests_queued %d\n"
                  "# HELP mega_requests_processing Completions being decoded.\n# TYPE mega_requests_processing gauge\nmega_requests_processing %d\n"
                  "# HELP mega_slots Slots (--parallel).\n# TYPE mega_slots gauge\nmega_slots %d\n",
                  (unsigned long long)s->mt.requests, (unsigned long long)s->mt.errors, (unsigned long long)s->mt.prompt_tokens,
                  (unsigned long long)s->mt.predicted_tokens, queued, running, s->parallel);
    hist_text(&p, end, "mega_request_duration_seconds", "Time from a request's arrival to its answer's end.", &s->mt.latency);
    hist_text(&p, end, "mega_time_to_first_token_seconds", "Time from a completion's queueing to its first token.", &s->mt.ttft);
    hist_text(&p, end, "mega_inter_token_seconds", "Time between two tokens of one completion.", &s->mt.itl);
    pthread_mutex_unlock(&s->mt.mu);
    const size_t n = p < end ? (size_t)(p - buf) : 16383;
    respond(c, 200, "text/plain; version=0.0.4", buf, n, NULL);
    free(buf);
    return 200;
}

static int h_page(server *s, struct mg_connection *c) {
    (void)s;
    respond(c, 200, "text/html; charset=utf-8", SERVE_PAGE, strlen(SERVE_PAGE),
            "Content-Security-Policy: default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'\r\n");
    return 200;
}

static int h_completions(server *s, struct mg_connection *c) { return h_completion(s, c, 0); }
static int h_llama(server *s, struct mg_connection *c) { return h_completion(s, c, 1); }

/* ---- routing ------------------------------------------------------------------------------ */

typedef struct {
    const char *path, *method;
    int (*fn)(server *, struct mg_connection *);
    int open; /* answered without the API key */
    int kind; /* the model kind it needs (-1: any) */
} route;

static const route ROUTES[] = {
    {"/", "GET", h_page, 1, -1},
    {"/health", "GET", h_health, 1, -1},
    {"/v1/models", "GET", h_models, 0, -1},
    {"/props", "GET", h_props, 0, -1},
    {"/metrics", "GET", h_metrics, 0, -1},
    {"/v1/completions", "POST", h_completions, 0, MEGA_MODEL_LM},
    {"/completion", "POST", h_llama, 0, MEGA_MODEL_LM},
    {"/tokenize", "POST", h_tokenize, 0, MEGA_MODEL_LM},
    {"/detokenize", "POST", h_detokenize, 0, MEGA_MODEL_LM},
    {"/v1/translate", "POST", h_translate, 0, MEGA_MODEL_S2S},
    {"/v1/classify", "POST", h_classify, 0, MEGA_MODEL_CLS},
};

static int on_request(struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    server *s = ri->user_data;
    const double t0 = now_sec();
    const route *r = NULL;
    for (size_t i = 0; i < sizeof ROUTES / sizeof *ROUTES && !r; i++)
        if (ri->local_uri && !strcmp(ri->local_uri, ROUTES[i].path)) r = &ROUTES[i];
    int st;
    if (!r) st = send_error(c, 404, "no such endpoint (see GET / and docs/serving.md)");
    else if (strcmp(ri->request_method, r->method)) {
        char allow[64];
        snprintf(allow, sizeof allow, "Allow: %s\r\n", r->method);
        const char *msg = "{\"error\":{\"message\":\"method not allowed for this endpoint\",\"type\":\"invalid_request_error\",\"code\":405}}";
        respond(c, 405, "application/json", msg, strlen(msg), allow);
        st = 405;
    } else if (!r->open && !key_ok(s, c))
        st = send_error(c, 401, "missing or wrong API key (send the header \"Authorization: Bearer KEY\")");
    else if (r->kind >= 0 && r->kind != (int)s->model.kind)
        st = send_error(c, 400, "this server's model is a %s; %s needs a %s", model_kind_noun(s->model.kind), r->path,
                        model_kind_noun((mega_model_kind)r->kind));
    else st = r->fn(s, c);
    pthread_mutex_lock(&s->mt.mu);
    s->mt.requests++;
    s->mt.errors += st >= 400;
    hist_add(&s->mt.latency, now_sec() - t0);
    pthread_mutex_unlock(&s->mt.mu);
    return st;
}

/* civetweb's own messages (a connection error, ...) go to stderr as one line each */
static int on_log(const struct mg_connection *c, const char *msg) {
    (void)c;
    fprintf(stderr, "mega serve: civetweb: %s\n", msg);
    return 1;
}

/* ---- mega serve --------------------------------------------------------------------------- */

/* the key of --api-key-file: its first line (a file of at most 4 KiB) */
static char *read_key_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_error("--api-key-file '%s': cannot open it", path), NULL;
    char buf[4097];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n == sizeof buf) return cli_error("--api-key-file '%s': more than 4 KiB (a key is one line)", path), NULL;
    buf[n] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    if (!*buf) return cli_error("--api-key-file '%s': its first line is empty", path), NULL;
    char *k = malloc(strlen(buf) + 1);
    if (k) strcpy(k, buf);
    return k;
}

/* the model's name: the last part of --model without a trailing slash or .safetensors */
static void model_name(const char *arg, char *out, size_t n) {
    size_t L = strlen(arg);
    while (L > 1 && arg[L - 1] == '/') L--;
    size_t b = L;
    while (b > 0 && arg[b - 1] != '/') b--;
    size_t k = L - b;
    if (k > 12 && !strncmp(arg + L - 12, ".safetensors", 12)) k -= 12;
    snprintf(out, n, "%.*s", (int)k, arg + b);
}

static int is_loopback(const char *h) { return !strncmp(h, "127.", 4) || !strcmp(h, "localhost") || !strcmp(h, "::1"); }

/* Waking civetweb's listener while mg_stop waits for it: the listener looks at the stop flag only
 * between two polls of its sockets, which wait up to a few seconds for a connection (civetweb.c,
 * master_thread_run: SOCKET_TIMEOUT_QUANTUM), so a stop took 1.5 s. A connection that opens and
 * closes at once ends the poll; one every 20 ms until mg_stop returns. */
typedef struct {
    char host[256], port[16];
    volatile int done;
} waker;

static void *wake_listener(void *arg) {
    waker *w = arg;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM, hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(w->host, w->port, &hints, &ai) || !ai) return NULL;
    while (!w->done) {
        const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0) connect(fd, ai->ai_addr, ai->ai_addrlen), close(fd);
        usleep(20000);
    }
    freeaddrinfo(ai);
    return NULL;
}

/* mg_stop, with the listener woken (the loopback address when it listens on every address) */
static void stop_http(struct mg_context *ctx, const char *host, int port) {
    waker w;
    memset(&w, 0, sizeof w);
    snprintf(w.host, sizeof w.host, "%s", !strcmp(host, "0.0.0.0") ? "127.0.0.1" : !strcmp(host, "::") ? "::1" : host);
    snprintf(w.port, sizeof w.port, "%d", port);
    pthread_t t;
    const int woken = pthread_create(&t, NULL, wake_listener, &w) == 0;
    mg_stop(ctx); /* waits for the handlers */
    w.done = 1;
    if (woken) pthread_join(t, NULL);
}

/* listen, then wait for SIGINT/SIGTERM; 0, or 1 after the error */
static int serve_run(server *s, const char *host, int port) {
    char ports[300], threads[16];
    snprintf(ports, sizeof ports, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    /* a connection holds a civetweb thread while it waits: the slots, the queue, and a few for
     * /health, /metrics and the page */
    snprintf(threads, sizeof threads, "%d", s->parallel + s->max_queue + 4);
    /* tcp_nodelay: a stream's events go out when written, not held by Nagle's algorithm until the
     * client's delayed ACK (40 ms) when an earlier segment is still unacknowledged */
    const char *opts[] = {"listening_ports", ports, "num_threads", threads, "request_timeout_ms", "10000",
                          "enable_keep_alive", "no", "tcp_nodelay", "1", NULL};
    struct mg_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.begin_request = on_request;
    cb.log_message = on_log;
    mg_init_library(0);
    struct mg_context *ctx = mg_start(&cb, s, opts);
    if (!ctx) return mg_exit_library(), cli_error("cannot listen on %s (in use, or not an address of this machine)", ports);
    struct mg_server_port sp;
    memset(&sp, 0, sizeof sp);
    const int bound = mg_get_server_ports(ctx, 1, &sp) >= 1 ? sp.port : port;
    fprintf(stderr, "mega serve: %s (%s, %zu parameters), %d slot%s, listening on http://%s%s%s:%d/\n", s->name,
            mega_model_kind_name(s->model.kind), s->params, s->parallel, s->parallel > 1 ? "s" : "",
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", bound);
    if (!s->key && !is_loopback(host))
        fprintf(stderr, "mega: warning: listening on %s without an API key: anyone who reaches it can use the model "
                        "(--api-key-file)\n", host);
    while (!g_stop) usleep(20000);
    fprintf(stderr, "mega serve: stopping\n");
    serve_engine_stop(&s->eng); /* the running requests end at their next token */
    serve_wait_detached(&s->eng, 0.5); /* their handlers write their last events (a stalled client: not) */
    stop_http(ctx, host, bound);
    mg_exit_library();
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *key = NULL, *key_file = NULL;
    int port = 8080, parallel = 1, max_queue = 16, threads = 0;
    int64_t max_body = 1 << 20;
    double timeout = 600;
    server *s = calloc(1, sizeof *s);
    if (!s) return cli_error("out of memory"), 2;
    s->lim.max_tokens = 4096, s->lim.ctx = 8192;
    cli_flag fl[] = {
        {"model", F_STR, &model, "checkpoint directory of a language model, encoder-decoder or classifier (or its model.safetensors)", NULL, 1, 0, 0},
        WHICH_FLAG,
        {"host", F_STR, &host, "address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)", NULL, 1, 0, 0},
        {"port", F_INT, &port, "TCP port (0 = any free port, printed at the start)", NULL, 0, 65535, 0},
        {"parallel", F_INT, &parallel, "slots: requests decoded at the same time, as rows of one batch (docs/serving.md)", NULL, 1, 256, 0},
        {"api-key", F_STR, &key, "require \"Authorization: Bearer KEY\" (visible in the process list: prefer --api-key-file)", NULL, 1, 0, 0},
        {"api-key-file", F_STR, &key_file, "the key from the first line of this file", NULL, 1, 0, 0},
        {"timeout", F_DBL, &timeout, "seconds a request may take, queueing included (0 = no limit)", NULL, 0, 1e7, 0},
        {"max-queue", F_INT, &max_queue, "requests waiting for a slot beyond which new ones get 503", NULL, 0, 4096, 0},
        {"max-body", F_SIZE, &max_body, "largest request body (bytes; K, M suffixes); larger ones get 413", NULL, 64, 1 << 30, 0},
        {"max-tokens", F_INT, &s->lim.max_tokens, "largest max_tokens (n_predict) a request may ask for", NULL, 1, 1 << 20, 0},
        {"ctx", F_INT, &s->lim.ctx, "largest prompt tokens + max_tokens of a request; a classifier's texts are cut at this many tokens", NULL, 2, 1 << 24, 0},
        {"threads", F_INT, &threads, "threads in all (0 = all cores), shared by the slots", NULL, 0, 4096, 0},
        FL_END};
    int r = cli_parse("serve", "--model DIR [--host 127.0.0.1] [--port 8080] [--parallel N] [--api-key-file F]", fl, argc,
                      argv, 2);
    if (r) return free(s), r == 1 ? 0 : 2;
    if (!model) return free(s), cli_error("--model is required (see 'mega serve --help')"), 2;
    if (key && key_file) return free(s), cli_error("--api-key and --api-key-file: give one"), 2;
    char *kf = NULL;
    if (key && !*key) return free(s), cli_error("--api-key must not be empty"), 2;
    if (key_file && !(kf = read_key_file(key_file))) return free(s), 2;
    s->key = kf ? kf : key;
    s->max_body = max_body, s->timeout = timeout, s->parallel = parallel, s->max_queue = max_queue;
    s->created = time(NULL);
    model_name(model, s->name, sizeof s->name);
    int rc = 2;
    if (model_load(model, &s->model)) goto out;
    s->params = mega_ps_trainable(s->model.kind == MEGA_MODEL_S2S   ? mega_s2s_paramset(s->model.s2s)
                                  : s->model.kind == MEGA_MODEL_CLS ? mega_cls_paramset(s->model.cls.m)
                                                                    : mega_lm_paramset(s->model.lm));
    pthread_mutex_init(&s->model_mu, NULL);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int all = threads > 0 ? threads : cores > 0 ? (int)cores : 1;
    pthread_mutex_init(&s->mt.mu, NULL);
    s->mt.latency.le = LAT_LE, s->mt.ttft.le = LAT_LE, s->mt.itl.le = ITL_LE;
    s->threads = all;
    /* an encoder-decoder or a classifier has no slots: its requests run one at a time (model_mu) */
    if (serve_engine_start(&s->eng, &s->model, s->model.kind == MEGA_MODEL_LM ? parallel : 0, max_queue,
                           all / parallel > 0 ? all / parallel : 1, all, &s->mt) == 0) {
        signal(SIGPIPE, SIG_IGN);
        signal(SIGINT, on_stop);
        signal(SIGTERM, on_stop);
        rc = serve_run(s, host, port) ? 2 : 0;
        if (rc) serve_engine_stop(&s->eng);
        serve_engine_free(&s->eng);
    }
    pthread_mutex_destroy(&s->mt.mu);
    pthread_mutex_destroy(&s->model_mu);
out:
    loaded_model_free(&s->model);
    free(kf);
    free(s);
    return rc;
}
#endif /* MEGA_USE_CIVETWEB */
