/*
 * mega serve: the request bodies' JSON fields, read and checked. Everything here comes from the
 * network: every field's type and range is checked before it is used, a bad one is a message
 * that names it (the server answers 400), and nothing is allocated by the size a client claims.
 * Field names follow OpenAI's completions API and llama.cpp's server (its /completion, /tokenize,
 * /detokenize); the fields this server does not use (model, user, logprobs, ...) are ignored.
 */
#include "serve.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t en, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(char *err, size_t en, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, en, fmt, ap);
    va_end(ap);
    return -1;
}

/* What cJSON lets through and a request must not hold, checked before parsing: nesting deeper
 * than MAX_DEPTH (cJSON parses recursively, up to 1000 levels, and the server's request threads
 * have small stacks), and inside strings a control character (JSON requires them escaped; a raw
 * NUL would silently cut the string) or the escape \u0000 (cut there too). 0, or -1 with the
 * message. */
#define MAX_DEPTH 16
static int json_precheck(const char *s, size_t n, char *err, size_t en) {
    int d = 0, str = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (str) {
            if (c < 0x20) return fail(err, en, "body: a control character (0x%02x) inside a string at byte %zu", c, i);
            if (c == '\\' && i + 5 < n && !memcmp(s + i + 1, "u0000", 5))
                return fail(err, en, "body: \\u0000 inside a string at byte %zu", i);
            if (c == '\\') i++;
            else if (c == '"') str = 0;
        } else if (c == '"') str = 1;
        else if ((c == '[' || c == '{') && ++d > MAX_DEPTH) return fail(err, en, "body: nested deeper than %d levels", MAX_DEPTH);
        else if (c == ']' || c == '}') d--;
    }
    return 0;
}

/* the body as a JSON object (NULL with the message: not JSON, or not an object, or text after it) */
static cJSON *parse_object(const char *body, size_t n, char *err, size_t en) {
    const char *end = NULL;
    if (n == 0) return fail(err, en, "body: empty (expected a JSON object)"), NULL;
    if (json_precheck(body, n, err, en)) return NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    if (!j) {
        size_t at = end && end >= body && end <= body + n ? (size_t)(end - body) : 0;
        return fail(err, en, "body: not valid JSON (near byte %zu)", at), NULL;
    }
    for (; end && end < body + n; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            cJSON_Delete(j);
            return fail(err, en, "body: text after the JSON value (byte %zu)", (size_t)(end - body)), NULL;
        }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return fail(err, en, "body: expected a JSON object"), NULL;
    }
    return j;
}

/* the field `name` of o (NULL when absent or null: the default applies) */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

/* a number in [lo, hi] (integer: a whole number) into *out when present; -1 with the message */
static int num_field(const cJSON *o, const char *name, double lo, double hi, int integer, double *out, char *err, size_t en) {
    const cJSON *f = field(o, name);
    if (!f) return 0;
    if (!cJSON_IsNumber(f)) return fail(err, en, "%s: expected a number", name);
    const double v = f->valuedouble;
    if (!isfinite(v) || v < lo || v > hi) return fail(err, en, "%s: %g is out of range [%g, %g]", name, v, lo, hi);
    if (integer && v != floor(v)) return fail(err, en, "%s: expected an integer, got %g", name, v);
    *out = v;
    return 0;
}

static int bool_field(const cJSON *o, const char *name, int *out, char *err, size_t en) {
    const cJSON *f = field(o, name);
    if (!f) return 0;
    if (!cJSON_IsBool(f)) return fail(err, en, "%s: expected true or false", name);
    *out = cJSON_IsTrue(f);
    return 0;
}

/* a copy of a JSON string that must be valid UTF-8 (cJSON decodes \u escapes into UTF-8 but
 * passes raw bytes through unchecked) */
static int str_copy(const cJSON *s, const char *name, char **out, size_t *len, char *err, size_t en) {
    const size_t n = strlen(s->valuestring); /* no NUL inside: json_precheck */
    size_t bad = mega_utf8_check(s->valuestring, n);
    if (bad != n) return fail(err, en, "%s: not valid UTF-8 (byte %zu)", name, bad);
    if (!(*out = malloc(n + 1))) return fail(err, en, "%s: out of memory", name);
    memcpy(*out, s->valuestring, n + 1);
    if (len) *len = n;
    return 0;
}

/* prompt: a string, or (OpenAI) a list holding one string */
static int prompt_field(const cJSON *o, int llama, gen_req *r, char *err, size_t en) {
    const char *name = "prompt";
    const cJSON *p = field(o, name);
    if (!p && llama && field(o, "content")) p = field(o, name = "content");
    if (!p) return fail(err, en, "prompt: required");
    if (cJSON_IsArray(p)) {
        if (cJSON_GetArraySize(p) != 1) return fail(err, en, "%s: a list must hold exactly one string (n=1)", name);
        p = cJSON_GetArrayItem(p, 0);
    }
    if (!cJSON_IsString(p)) return fail(err, en, "%s: expected a string", name);
    if (str_copy(p, name, &r->prompt, &r->prompt_len, err, en)) return -1;
    if (r->prompt_len == 0) return fail(err, en, "%s: must not be empty (the model has no start token; use e.g. \"\\n\")", name);
    return 0;
}

/* stop: a string or a list of up to SERVE_MAX_STOP non-empty strings */
static int stop_field(const cJSON *o, gen_req *r, char *err, size_t en) {
    const cJSON *s = field(o, "stop");
    if (!s) return 0;
    const int list = cJSON_IsArray(s);
    const int n = list ? cJSON_GetArraySize(s) : 1;
    if (!list && !cJSON_IsString(s)) return fail(err, en, "stop: expected a string or a list of strings");
    if (n > SERVE_MAX_STOP) return fail(err, en, "stop: %d strings, more than %d", n, SERVE_MAX_STOP);
    for (int i = 0; i < n; i++) {
        const cJSON *e = list ? cJSON_GetArrayItem(s, i) : s;
        if (!cJSON_IsString(e)) return fail(err, en, "stop: expected a string or a list of strings");
        size_t len = 0;
        if (str_copy(e, "stop", &r->stop[r->nstop], &len, err, en)) return -1;
        r->nstop++;
        if (len == 0 || len > SERVE_STOP_BYTES)
            return fail(err, en, "stop: each string must have 1 to %d bytes (got %zu)", SERVE_STOP_BYTES, len);
    }
    return 0;
}

/* the sampling fields: those of `mega generate` (temperature, top_k, top_p, seed) */
static int sampling_fields(const cJSON *o, gen_req *r, char *err, size_t en) {
    double t = r->sp.temperature, k = r->sp.top_k, p = r->sp.top_p, seed = -1;
    if (num_field(o, "temperature", 0, 100, 0, &t, err, en) || num_field(o, "top_k", 0, 1 << 20, 1, &k, err, en) ||
        num_field(o, "top_p", 0, 1, 0, &p, err, en) || num_field(o, "seed", -1, 9007199254740992.0, 1, &seed, err, en))
        return -1;
    if (p <= 0) return fail(err, en, "top_p: must be in (0, 1] (1 = off; for greedy decoding use temperature 0)");
    r->sp.temperature = t, r->sp.top_k = (int)k, r->sp.top_p = p;
    if (seed >= 0) r->sp.seed = (uint64_t)seed, r->seed_given = 1;
    return 0;
}

int serve_parse_completion(const char *body, size_t n, int llama, const serve_limits *lim, gen_req *r, char *err,
                           size_t en) {
    memset(r, 0, sizeof *r);
    mega_sample_params_default(&r->sp);
    cJSON *o = parse_object(body, n, err, en);
    if (!o) return -1;
    /* OpenAI's default is 16 tokens; llama.cpp's n_predict -1 means "as many as allowed" */
    double mt = llama ? -1 : 16, nn = 1;
    int rc = prompt_field(o, llama, r, err, en);
    if (!rc) rc = num_field(o, llama ? "n_predict" : "max_tokens", llama ? -1 : 0, lim->max_tokens, 1, &mt, err, en);
    if (!rc && llama && !field(o, "n_predict")) rc = num_field(o, "max_tokens", 0, lim->max_tokens, 1, &mt, err, en);
    if (!rc) rc = num_field(o, "n", 1, 1, 1, &nn, err, en) ? fail(err, en, "n: only 1 completion per request is supported") : 0;
    if (!rc) rc = sampling_fields(o, r, err, en);
    if (!rc) rc = stop_field(o, r, err, en);
    if (!rc) rc = bool_field(o, "stream", &r->stream, err, en);
    if (!rc) rc = bool_field(o, "echo", &r->echo, err, en);
    r->max_tokens = mt < 0 ? lim->max_tokens : (int)mt;
    cJSON_Delete(o);
    return rc;
}

void gen_req_free(gen_req *r) {
    free(r->prompt);
    for (int i = 0; i < r->nstop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

int serve_parse_tokenize(const char *body, size_t n, char **text, size_t *len, char *err, size_t en) {
    *text = NULL, *len = 0;
    cJSON *o = parse_object(body, n, err, en);
    if (!o) return -1;
    const cJSON *c = field(o, "content");
    int rc = !c ? fail(err, en, "content: required") : !cJSON_IsString(c) ? fail(err, en, "content: expected a string")
                                                                          : str_copy(c, "content", text, len, err, en);
    cJSON_Delete(o);
    return rc;
}

int serve_parse_detokenize(const char *body, size_t n, int vocab, int32_t **ids, size_t *count, char *err, size_t en) {
    *ids = NULL, *count = 0;
    cJSON *o = parse_object(body, n, err, en);
    if (!o) return -1;
    const cJSON *t = field(o, "tokens");
    int rc = 0;
    if (!t || !cJSON_IsArray(t)) rc = fail(err, en, "tokens: %s", t ? "expected a list of token ids" : "required");
    const int k = rc ? 0 : cJSON_GetArraySize(t);
    if (!rc && !(*ids = malloc((size_t)(k > 0 ? k : 1) * sizeof(int32_t)))) rc = fail(err, en, "tokens: out of memory");
    int i = 0;
    for (const cJSON *e = rc ? NULL : t->child; e && !rc; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
            rc = fail(err, en, "tokens: item %d is not an integer", i);
        else if (e->valuedouble < 0 || e->valuedouble >= vocab)
            rc = fail(err, en, "tokens: item %d (%g) is not a token id in [0, %d)", i, e->valuedouble, vocab);
        else (*ids)[i] = (int32_t)e->valuedouble;
    }
    *count = rc ? 0 : (size_t)i;
    cJSON_Delete(o);
    return rc;
}

size_t serve_utf8_ready(const char *s, size_t n, int final) {
    if (final || n == 0) return n;
    /* back up over at most 3 continuation bytes to the last lead byte: hold it back when the
     * sequence it starts is not complete yet */
    size_t i = n, k = 0;
    while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, k++;
    if (i == 0) return n;
    const unsigned char c = (unsigned char)s[i - 1];
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > k + 1 && need > 1 ? i - 1 : n;
}

size_t serve_utf8_fix(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t ok = mega_utf8_check(s + i, n - i);
        memcpy(out + o, s + i, ok);
        o += ok, i += ok;
        if (i < n) out[o++] = (char)0xEF, out[o++] = (char)0xBF, out[o++] = (char)0xBD, i++;
    }
    out[o] = 0;
    return o;
}

/* cJSON's escapes (print_string_ptr): the two that must be, the five short ones, \u00XX for the
 * other control characters; every other byte as it is */
size_t serve_json_text(const char *s, size_t n, char *out) {
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t ok = mega_utf8_check(s + i, n - i);
        for (size_t e = i + ok; i < e; i++) {
            const unsigned char c = (unsigned char)s[i];
            const char *sh = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : c == '\n' ? "\\n"
                             : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (sh) out[o++] = sh[0], out[o++] = sh[1];
            else if (c < 0x20) memcpy(out + o, "\\u00", 4), out[o + 4] = hex[c >> 4], out[o + 5] = hex[c & 15], o += 6;
            else out[o++] = (char)c;
        }
        if (i < n) out[o++] = (char)0xEF, out[o++] = (char)0xBF, out[o++] = (char)0xBD, i++;
    }
    out[o] = 0;
    return o;
}

int serve_parse_translate(const char *body, size_t n, tr_req *r, char *err, size_t en) {
    memset(r, 0, sizeof *r);
    mega_s2s_search_default(&r->sp);
    cJSON *o = parse_object(body, n, err, en);
    if (!o) return -1;
    const cJSON *s = field(o, "source");
    int rc = 0;
    double beam = r->sp.beam, lenpen = r->sp.lenpen;
    const int list = s && cJSON_IsArray(s);
    const int k = !s ? 0 : list ? cJSON_GetArraySize(s) : 1;
    if (!s) rc = fail(err, en, "source: required");
    else if (!list && !cJSON_IsString(s)) rc = fail(err, en, "source: expected a string or a list of strings");
    else if (k < 1 || k > SERVE_MAX_SOURCES) rc = fail(err, en, "source: a list of 1 to %d strings (got %d)", SERVE_MAX_SOURCES, k);
    else if (!(r->src = calloc((size_t)k, sizeof *r->src)) || !(r->len = calloc((size_t)k, sizeof *r->len)))
        rc = fail(err, en, "source: out of memory");
    for (int i = 0; !rc && i < k; i++) {
        const cJSON *e = list ? cJSON_GetArrayItem(s, i) : s;
        if (!cJSON_IsString(e)) rc = fail(err, en, "source: item %d is not a string", i);
        else if (!(rc = str_copy(e, "source", &r->src[i], &r->len[i], err, en))) r->n++;
    }
    if (!rc) rc = num_field(o, "beam", 1, 64, 1, &beam, err, en);
    if (!rc) rc = num_field(o, "lenpen", 0, 100, 0, &lenpen, err, en);
    r->sp.beam = (int)beam, r->sp.lenpen = lenpen;
    cJSON_Delete(o);
    return rc;
}

void tr_req_free(tr_req *r) {
    for (int i = 0; i < r->n; i++) free(r->src[i]);
    free(r->src), free(r->len);
    memset(r, 0, sizeof *r);
}

/* one string or a list of 1 to SERVE_MAX_SOURCES non-empty strings, as a list of copies */
static int texts_field(const cJSON *t, const char *name, char ***out, size_t **len, int *count, char *err, size_t en) {
    const int list = cJSON_IsArray(t), k = list ? cJSON_GetArraySize(t) : 1;
    if (!list && !cJSON_IsString(t)) return fail(err, en, "%s: expected a string or a list of strings", name);
    if (k < 1 || k > SERVE_MAX_SOURCES) return fail(err, en, "%s: a list of 1 to %d strings (got %d)", name, SERVE_MAX_SOURCES, k);
    if (!(*out = calloc((size_t)k, sizeof **out)) || !(*len = calloc((size_t)k, sizeof **len)))
        return fail(err, en, "%s: out of memory", name);
    for (int i = 0; i < k; i++) {
        const cJSON *e = list ? cJSON_GetArrayItem(t, i) : t;
        if (!cJSON_IsString(e)) return fail(err, en, "%s: item %d is not a string", name, i);
        if (str_copy(e, name, &(*out)[i], &(*len)[i], err, en)) return -1;
        *count = i + 1;
        if ((*len)[i] == 0) return fail(err, en, "%s: item %d is empty", name, i);
    }
    return 0;
}

int serve_parse_classify(const char *body, size_t n, cls_req *r, char *err, size_t en) {
    memset(r, 0, sizeof *r);
    cJSON *o = parse_object(body, n, err, en);
    if (!o) return -1;
    const char *name = field(o, "text") || !field(o, "input") ? "text" : "input";
    const cJSON *t = field(o, name);
    double k = 0;
    int rc = !t ? fail(err, en, "text: required (a string or a list of strings)")
                : texts_field(t, name, &r->text, &r->len, &r->n, err, en);
    if (!rc && field(o, "text2")) rc = fail(err, en, "text2: two-text (two-tower) classifiers are not served; this field is not read");
    if (!rc) rc = num_field(o, "top_k", 0, 1 << 20, 1, &k, err, en);
    r->top_k = (int)k;
    cJSON_Delete(o);
    return rc;
}

void cls_req_free(cls_req *r) {
    for (int i = 0; i < r->n; i++) free(r->text[i]);
    free(r->text), free(r->len);
    memset(r, 0, sizeof *r);
}
