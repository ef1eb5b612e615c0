/* Vocabularies and class lists, and their JSON form in checkpoint metadata. The maps are
 * documented in include/mega_data.h. */
#include "data/data.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>

const char *mega__data_show(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0, lim = cap > 8 ? cap - 8 : 0;
    for (size_t i = 0; i < n && o < lim; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[o++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (n > 0 && o < n && o == lim) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o] = 0;
    return buf;
}

int mega__data_number(const char *s, double *x) {
    if (!*s || isspace((unsigned char)*s)) return 0;
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (*e || errno || !isfinite(v)) return 0;
    *x = v;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * vocabularies */
static const char *const lo_tokens[MEGA_LISTOPS_VOCAB] = {"<pad>", "<unk>", "0", "1", "2", "3", "4",
                                                          "5", "6", "7", "8", "9", "[MIN", "[MAX",
                                                          "[MED", "[SM", "]", "(", ")", "[FIRST", "[LAST"};

const char *mega_listops_token(int id) { return id >= 0 && id < MEGA_LISTOPS_VOCAB ? lo_tokens[id] : NULL; }

int mega_listops_id(const char *t, size_t n) {
    if (n == 1) {
        if (*t >= '0' && *t <= '9') return MEGA_LISTOPS_DIGIT0 + (*t - '0');
        if (*t == ']') return MEGA_LISTOPS_END;
        if (*t == '(') return MEGA_LISTOPS_LPAREN;
        if (*t == ')') return MEGA_LISTOPS_RPAREN;
        return MEGA_LISTOPS_UNK;
    }
    for (int i = MEGA_LISTOPS_MIN; i < MEGA_LISTOPS_VOCAB; i++) {
        size_t l = strlen(lo_tokens[i]);
        if (l == n && !memcmp(lo_tokens[i], t, n)) return i;
    }
    return MEGA_LISTOPS_UNK;
}

int mega__listops_next(const char **s, const char *e, int keep_parens) {
    for (;;) {
        while (*s < e && isspace((unsigned char)**s)) (*s)++;
        if (*s >= e) return -1;
        const char *w = *s;
        while (*s < e && !isspace((unsigned char)**s)) (*s)++;
        const int id = mega_listops_id(w, (size_t)(*s - w));
        if (keep_parens || (id != MEGA_LISTOPS_LPAREN && id != MEGA_LISTOPS_RPAREN)) return id;
    }
}

mega_status mega_vocab_encode(const mega_vocab *v, const char *text, size_t n, int32_t *ids, size_t cap, size_t *count) {
    *count = 0;
    if (v->kind == MEGA_VOCAB_BYTES) { /* each byte is its id (mega_dataset_load_text) */
        for (size_t i = 0; ids && i < n && i < cap; i++) ids[i] = (unsigned char)text[i];
        *count = n;
        return MEGA_OK;
    }
    if (v->kind != MEGA_VOCAB_LISTOPS)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_vocab_encode: a %s vocabulary reads pixel values, not text",
                  v->real ? "real-valued pixel" : "pixel");
    const char *s = text, *e = text + n;
    for (int id; (id = mega__listops_next(&s, e, v->keep_parens)) >= 0; (*count)++)
        if (ids && *count < cap) ids[*count] = id;
    return MEGA_OK;
}

mega_vocab mega_vocab_listops(int keep_parens) {
    mega_vocab v = {MEGA_VOCAB_LISTOPS, MEGA_LISTOPS_VOCAB, MEGA_LISTOPS_PAD, MEGA_LISTOPS_UNK, keep_parens ? 1 : 0, 0, 0, 0};
    return v;
}
mega_vocab mega_vocab_bytes(void) {
    mega_vocab v = {MEGA_VOCAB_BYTES, 257, 256, -1, 0, 0, 0, 0};
    return v;
}
mega_vocab mega_vocab_pixels(int reals, double mean, double std) {
    mega_vocab v = {MEGA_VOCAB_PIXELS, 257, 256, -1, 0, reals ? 1 : 0, mean, std};
    return v;
}

char *mega_vocab_to_json(const mega_vocab *v) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    /* real-valued sequences (the real and speech formats): no ids at all */
    const char *kind = v->kind == MEGA_VOCAB_LISTOPS ? "listops" : v->kind == MEGA_VOCAB_BYTES ? (v->real ? "real" : "bytes") : "pixels";
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddNumberToObject(o, "size", v->size);
    cJSON_AddNumberToObject(o, "pad", v->pad);
    if (v->kind == MEGA_VOCAB_LISTOPS) {
        cJSON_AddNumberToObject(o, "unk", v->unk);
        cJSON_AddBoolToObject(o, "keep_parens", v->keep_parens);
        cJSON *t = cJSON_AddArrayToObject(o, "tokens");
        for (int i = 0; t && i < MEGA_LISTOPS_VOCAB; i++) cJSON_AddItemToArray(t, cJSON_CreateString(lo_tokens[i]));
    }
    if (v->kind == MEGA_VOCAB_PIXELS) {
        cJSON_AddBoolToObject(o, "real", v->real);
        cJSON_AddNumberToObject(o, "mean", v->mean);
        cJSON_AddNumberToObject(o, "std", v->std);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* the kind-specific part of mega_vocab_from_json */
static mega_status vocab_kind_from_json(const cJSON *o, const char *kind, mega_vocab *v) {
    if (!strcmp(kind, "listops")) {
        const cJSON *kp = cJSON_GetObjectItemCaseSensitive(o, "keep_parens"), *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        *v = mega_vocab_listops(cJSON_IsTrue(kp));
        int ok = cJSON_IsArray(t) && cJSON_GetArraySize(t) == MEGA_LISTOPS_VOCAB;
        for (int i = 0; ok && i < MEGA_LISTOPS_VOCAB; i++) {
            const cJSON *e = cJSON_GetArrayItem(t, i);
            ok = cJSON_IsString(e) && !strcmp(e->valuestring, lo_tokens[i]);
        }
        if (!ok) MEGA_FAIL(MEGA_ERR_FORMAT, "the ListOps vocabulary in the metadata differs from this build's token map");
    } else if (!strcmp(kind, "bytes")) {
        *v = mega_vocab_bytes();
    } else if (!strcmp(kind, "real")) { /* as the real-valued loaders set it */
        memset(v, 0, sizeof *v);
        v->kind = MEGA_VOCAB_BYTES, v->pad = v->unk = -1, v->real = 1, v->std = 1;
    } else if (!strcmp(kind, "pixels")) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "real"), *m = cJSON_GetObjectItemCaseSensitive(o, "mean"),
                    *s = cJSON_GetObjectItemCaseSensitive(o, "std");
        *v = mega_vocab_pixels(cJSON_IsTrue(r), cJSON_IsNumber(m) ? m->valuedouble : 0.5, cJSON_IsNumber(s) ? s->valuedouble : 0.5);
        if (v->real && !(v->std > 0 && isfinite(v->mean) && isfinite(v->std)))
            MEGA_FAIL(MEGA_ERR_FORMAT, "vocabulary metadata: bad pixel mean/std");
    } else {
        MEGA_FAIL(MEGA_ERR_FORMAT, "vocabulary metadata: unknown kind '%s' (expected listops, bytes, pixels or real)", kind);
    }
    return MEGA_OK;
}

mega_status mega_vocab_from_json(const char *json, mega_vocab *v) {
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "vocabulary metadata is not a JSON object");
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kind");
    const char *kind = cJSON_IsString(k) ? k->valuestring : "";
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(o, "size"), *pd = cJSON_GetObjectItemCaseSensitive(o, "pad");
    mega_status st = vocab_kind_from_json(o, kind, v);
    if (st == MEGA_OK && ((cJSON_IsNumber(sz) && sz->valueint != v->size) || (cJSON_IsNumber(pd) && pd->valueint != v->pad)))
        st = mega__error(MEGA_ERR_FORMAT, "vocabulary metadata: size/pad (%d/%d) differ from the %s map (%d/%d)",
                         cJSON_IsNumber(sz) ? sz->valueint : -1, cJSON_IsNumber(pd) ? pd->valueint : -1, kind, v->size, v->pad);
    cJSON_Delete(o);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * class lists */
void mega_classes_free(mega_classes *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->names[i]);
    free(c->names);
    c->names = NULL, c->n = 0;
}

mega_status mega_classes_copy(mega_classes *dst, const mega_classes *src) {
    dst->n = 0;
    dst->names = calloc(src->n ? (size_t)src->n : 1, sizeof *dst->names);
    if (!dst->names) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    for (int i = 0; i < src->n; i++) {
        dst->names[i] = strdup(src->names[i]);
        if (!dst->names[i]) {
            mega_classes_free(dst);
            MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        }
        dst->n = i + 1;
    }
    return MEGA_OK;
}

int mega_classes_find(const mega_classes *c, const char *label) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], label)) return i;
    double x, y;
    if (mega__data_number(label, &x))
        for (int i = 0; i < c->n; i++)
            if (mega__data_number(c->names[i], &y) && x == y) return i;
    return -1;
}

char *mega_classes_to_json(const mega_classes *c) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    for (int i = 0; i < c->n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(c->names[i]));
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}

/* the names of a JSON array into c (c->n counts the names stored so far) */
static mega_status classes_fill(const cJSON *a, int n, mega_classes *c) {
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsString(e)) MEGA_FAIL(MEGA_ERR_FORMAT, "class list metadata: item %d is not a string", i);
        c->names[i] = strdup(e->valuestring);
        if (!c->names[i]) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        c->n = i + 1;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(c->names[i], c->names[j])) {
                char b[64];
                MEGA_FAIL(MEGA_ERR_FORMAT, "class list metadata: '%s' appears twice",
                          mega__data_show(c->names[i], strlen(c->names[i]), b, sizeof b));
            }
    return MEGA_OK;
}

mega_status mega_classes_from_json(const char *json, mega_classes *c) {
    c->n = 0, c->names = NULL;
    cJSON *a = json ? cJSON_Parse(json) : NULL;
    if (!a || !cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1) {
        cJSON_Delete(a);
        MEGA_FAIL(MEGA_ERR_FORMAT, "class list metadata is not a non-empty JSON array of strings");
    }
    int n = cJSON_GetArraySize(a);
    c->names = calloc((size_t)n, sizeof *c->names);
    mega_status st = c->names ? classes_fill(a, n, c) : mega__error(MEGA_ERR_OOM, "out of memory");
    cJSON_Delete(a);
    if (st != MEGA_OK) mega_classes_free(c);
    return st;
}
