/* fairseq dictionaries: the vocabulary of a model converted from an official checkpoint
 * (include/mega_data.h, docs/interop.md). The text-to-ids rules are those of fairseq-preprocess in
 * the official repository: fairseq/binarizer.py reads the file line by line in text mode, and
 * fairseq/data/dictionary.py Dictionary.encode_line maps each line's whitespace-separated tokens
 * (fairseq/tokenizer.py tokenize_line) to ids, <unk> for unknown ones, and appends </s>. */
#include "data/data.h"

#include <cjson/cJSON.h>

struct mega_fdict {
    mega_fdict_unit unit;
    int n;                 /* ids */
    char **tok;            /* [n] token strings */
    mega_fdict_specials sp;
    int32_t byte_id[256];  /* byte unit: the id of each byte */
    int32_t *slot;         /* open-addressing table of ids keyed by token string, -1 = empty */
    size_t nslot;          /* a power of two, at least 2n */
};

static uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = MEGA__FNV_BASIS;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * MEGA__FNV_PRIME;
    return h;
}

/* the id of token s[0..n), -1 when absent */
static int32_t lookup(const mega_fdict *d, const char *s, size_t n) {
    for (size_t k = (size_t)tok_hash(s, n) & (d->nslot - 1);; k = (k + 1) & (d->nslot - 1)) {
        int32_t id = d->slot[k];
        if (id < 0) return -1;
        if (strlen(d->tok[id]) == n && !memcmp(d->tok[id], s, n)) return id;
    }
}

/* a later entry with the same string takes its place: fairseq's Dictionary.add_symbol with
 * overwrite (`#fairseq:overwrite` in dict.txt) points the symbol at the new id */
static void insert(mega_fdict *d, int32_t id) {
    const char *s = d->tok[id];
    size_t n = strlen(s);
    for (size_t k = (size_t)tok_hash(s, n) & (d->nslot - 1);; k = (k + 1) & (d->nslot - 1)) {
        int32_t o = d->slot[k];
        if (o < 0 || !strcmp(d->tok[o], s)) {
            d->slot[k] = id;
            return;
        }
    }
}

void mega_fdict_free(mega_fdict *d) {
    if (!d) return;
    for (int i = 0; d->tok && i < d->n; i++) free(d->tok[i]);
    free(d->tok), free(d->slot), free(d);
}

/* an integer member of o in [0, n), else -1 */
static int special(const cJSON *o, const char *key, int n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < n && v->valuedouble == (double)v->valueint ? v->valueint : -1;
}

/* the byte a token stands for in the byte unit: its decimal value 0..255, else -1 */
static int byte_value(const char *s) {
    int v = 0, k = 0;
    for (; s[k] >= '0' && s[k] <= '9' && k < 3; k++) v = v * 10 + (s[k] - '0');
    return k > 0 && !s[k] && v < 256 && (k == 1 || s[0] != '0') ? v : -1;
}

static mega_status fdict_fill(mega_fdict *d, const cJSON *o) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "unit"), *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    if (!cJSON_IsString(u) || (strcmp(u->valuestring, "byte") && strcmp(u->valuestring, "word")))
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq vocabulary: \"unit\" must be \"byte\" or \"word\"");
    d->unit = strcmp(u->valuestring, "byte") ? MEGA_FDICT_WORD : MEGA_FDICT_BYTE;
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) < 4 || cJSON_GetArraySize(t) > (1 << 24))
        MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq vocabulary: \"tokens\" must be an array of 4 to 2^24 strings");
    d->n = cJSON_GetArraySize(t);
    d->sp.bos = special(o, "bos", d->n), d->sp.pad = special(o, "pad", d->n);
    d->sp.eos = special(o, "eos", d->n), d->sp.unk = special(o, "unk", d->n);
    const int *s = &d->sp.bos;
    for (int i = 0; i < 4; i++) {
        if (s[i] < 0) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq vocabulary: bos, pad, eos and unk must be ids below %d", d->n);
        for (int j = 0; j < i; j++)
            if (s[i] == s[j]) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq vocabulary: two special tokens share the id %d", s[i]);
    }
    d->nslot = 16;
    while (d->nslot < 2 * (size_t)d->n) d->nslot *= 2;
    d->tok = calloc((size_t)d->n, sizeof *d->tok);
    d->slot = malloc(d->nslot * sizeof *d->slot);
    if (!d->tok || !d->slot) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    memset(d->slot, 0xff, d->nslot * sizeof *d->slot);
    for (int i = 0; i < d->n; i++) {
        const cJSON *e = cJSON_GetArrayItem(t, i);
        if (!cJSON_IsString(e) || !*e->valuestring) MEGA_FAIL(MEGA_ERR_FORMAT, "fairseq vocabulary: token %d is not a non-empty string", i);
        if (!(d->tok[i] = strdup(e->valuestring))) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        insert(d, i);
    }
    /* byte unit: every byte by its decimal token; a newline ends a line (fairseq-preprocess turned
     * the line breaks of the released enwik8 data into </s>), a byte without a token is <unk> */
    for (int b = 0; b < 256; b++) {
        char num[4];
        snprintf(num, sizeof num, "%d", b);
        int32_t id = lookup(d, num, strlen(num));
        d->byte_id[b] = b == '\n' ? d->sp.eos : id >= 0 ? id : d->sp.unk;
    }
    return MEGA_OK;
}

mega_status mega_fdict_from_json(const char *json, mega_fdict **out) {
    *out = NULL;
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    const cJSON *k = o ? cJSON_GetObjectItemCaseSensitive(o, "kind") : NULL;
    if (!cJSON_IsObject(o) || !cJSON_IsString(k) || strcmp(k->valuestring, "fairseq")) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "vocabulary metadata is not a fairseq dictionary ({\"kind\": \"fairseq\", ...})");
    }
    mega_fdict *d = calloc(1, sizeof *d);
    mega_status st = d ? fdict_fill(d, o) : mega__error(MEGA_ERR_OOM, "out of memory");
    cJSON_Delete(o);
    if (st != MEGA_OK) {
        mega_fdict_free(d);
        return st;
    }
    *out = d;
    return MEGA_OK;
}

int mega_fdict_size(const mega_fdict *d) { return d->n; }
mega_fdict_unit mega_fdict_get_unit(const mega_fdict *d) { return d->unit; }
mega_fdict_specials mega_fdict_get_specials(const mega_fdict *d) { return d->sp; }
const char *mega_fdict_token(const mega_fdict *d, int id) { return id >= 0 && id < d->n ? d->tok[id] : NULL; }

int mega_fdict_generable(const mega_fdict *d, int id) {
    if (id < 0 || id >= d->n || id == d->sp.bos || id == d->sp.pad) return 0;
    /* the fillers fairseq's Dictionary.pad_to_multiple_ adds never occur in data */
    if (!strncmp(d->tok[id], "madeupword", 10)) return 0;
    if (d->unit == MEGA_FDICT_BYTE) return id == d->sp.eos || byte_value(d->tok[id]) >= 0;
    return 1;
}

char *mega_fdict_to_json(const mega_fdict *d) {
    cJSON *o = cJSON_CreateObject(), *t = cJSON_CreateArray();
    char *json = NULL;
    int ok = o && t;
    for (int i = 0; ok && i < d->n; i++) {
        cJSON *s = cJSON_CreateString(d->tok[i]);
        ok = s && cJSON_AddItemToArray(t, s);
    }
    if (ok) {
        cJSON_AddStringToObject(o, "kind", "fairseq");
        cJSON_AddStringToObject(o, "unit", d->unit == MEGA_FDICT_BYTE ? "byte" : "word");
        cJSON_AddItemToObject(o, "tokens", t), t = NULL;
        cJSON_AddNumberToObject(o, "bos", d->sp.bos), cJSON_AddNumberToObject(o, "pad", d->sp.pad);
        cJSON_AddNumberToObject(o, "eos", d->sp.eos), cJSON_AddNumberToObject(o, "unk", d->sp.unk);
        json = cJSON_PrintUnformatted(o);
    }
    cJSON_Delete(o), cJSON_Delete(t);
    return json;
}

/* madeupword then at least 4 digits: a filler of fairseq's Dictionary.pad_to_multiple_ */
static int is_filler(const char *s) {
    if (strncmp(s, "madeupword", 10)) return 0;
    size_t k = strspn(s + 10, "0123456789");
    return k >= 4 && !s[10 + k];
}

mega_fdict_unit mega_fdict_detect_unit(const mega_fdict *d) {
    int ordinary = 0;
    for (int i = 0; i < d->n; i++) {
        const char *s = d->tok[i];
        if (i == d->sp.bos || i == d->sp.pad || i == d->sp.eos || i == d->sp.unk || is_filler(s) ||
            !strcmp(s, "<s>") || !strcmp(s, "<pad>") || !strcmp(s, "</s>") || !strcmp(s, "<unk>"))
            continue;
        if (byte_value(s) < 0) return MEGA_FDICT_WORD;
        ordinary++;
    }
    return ordinary ? MEGA_FDICT_BYTE : MEGA_FDICT_WORD;
}

/* the encoder's output: ids[count++] = id, or only counted when ids is NULL */
typedef struct {
    const mega_fdict *d;
    const char *base;
    int32_t *ids;
    size_t count, unknown;
} enc;

static void emit(enc *e, int32_t id) {
    if (e->ids) e->ids[e->count] = id;
    e->count++;
    e->unknown += id == e->d->sp.unk;
}

static int on_word(void *ctx, size_t off, size_t len) {
    enc *e = ctx;
    int32_t id = lookup(e->d, e->base + off, len);
    emit(e, id >= 0 ? id : e->d->sp.unk);
    return 0;
}

mega_status mega_fdict_encode(const mega_fdict *d, const uint8_t *text, size_t n, int final_eos, int32_t *ids,
                              size_t *count, size_t *unknown) {
    enc e = {d, (const char *)text, ids, 0, 0};
    if (d->unit == MEGA_FDICT_BYTE) {
        for (size_t i = 0; i < n; i++) emit(&e, d->byte_id[text[i]]);
        if (final_eos && n > 0 && text[n - 1] != '\n') emit(&e, d->sp.eos);
    } else {
        size_t bad = mega_utf8_check(text, n);
        if (bad < n) MEGA_FAIL(MEGA_ERR_FORMAT, "the text is not valid UTF-8 (byte 0x%02x at offset %zu)", text[bad], bad);
        /* lines as Python's text mode reads them (universal newlines: \n, \r\n and \r) */
        for (size_t i = 0; i < n;) {
            size_t j = i;
            while (j < n && text[j] != '\n' && text[j] != '\r') j++;
            e.base = (const char *)text + i;
            mega__py_split(e.base, j - i, on_word, &e);
            if (j < n || final_eos) emit(&e, d->sp.eos);
            i = j + (j < n && text[j] == '\r' && j + 1 < n && text[j + 1] == '\n' ? 2 : 1);
        }
    }
    *count = e.count;
    if (unknown) *unknown = e.unknown;
    return MEGA_OK;
}

size_t mega_fdict_decode(const mega_fdict *d, int id, int *line_start, char *buf, size_t cap) {
    size_t k = 0;
    if (id == d->sp.eos) {
        if (cap > 0) buf[k++] = '\n';
        *line_start = 1;
        return k;
    }
    if (!mega_fdict_generable(d, id)) return 0;
    if (d->unit == MEGA_FDICT_BYTE) {
        if (cap > 0) buf[k++] = (char)byte_value(d->tok[id]);
        *line_start = 0;
        return k;
    }
    const char *t = d->tok[id];
    size_t n = strlen(t);
    if (!*line_start && k < cap) buf[k++] = ' ';
    if (n > cap - k) n = cap - k;
    memcpy(buf + k, t, n);
    *line_start = 0;
    return k + n;
}
