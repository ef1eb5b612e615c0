/* Classification data: vocabularies, class lists, loaders (ListOps TSV, text TSV, pairs TSV, IDX)
 * and padded batches. See cls_data.h for the formats and the vocabulary map. */
#include "cls_data.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>

static char cls_err[1024];

const char *cls_last_error(void) { return cls_err; }

int cls_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cls_err, sizeof cls_err, fmt, ap);
    va_end(ap);
    return -1;
}

/* a short printable excerpt of untrusted bytes for error messages */
static const char *cls_show(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0, lim = cap > 8 ? cap - 8 : 0;
    for (size_t i = 0; i < n && o < lim; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[o++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (n > 0 && o < n && o == lim) buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o] = 0;
    return buf;
}

/* ---------------------------------------------------------------------------------------------
 * vocabularies */
static const char *const cls_lo_tokens[CLS_LO_VOCAB] = {"<pad>", "<unk>", "0", "1", "2", "3", "4",
                                                        "5", "6", "7", "8", "9", "[MIN", "[MAX",
                                                        "[MED", "[SM", "]", "(", ")", "[FIRST", "[LAST"};

const char *cls_listops_token(int id) { return id >= 0 && id < CLS_LO_VOCAB ? cls_lo_tokens[id] : NULL; }

int cls_listops_id(const char *t, size_t n) {
    if (n == 1) {
        if (*t >= '0' && *t <= '9') return CLS_LO_DIGIT0 + (*t - '0');
        if (*t == ']') return CLS_LO_END;
        if (*t == '(') return CLS_LO_LPAREN;
        if (*t == ')') return CLS_LO_RPAREN;
        return CLS_LO_UNK;
    }
    for (int i = CLS_LO_MIN; i < CLS_LO_VOCAB; i++) {
        size_t l = strlen(cls_lo_tokens[i]);
        if (l == n && !memcmp(cls_lo_tokens[i], t, n)) return i;
    }
    return CLS_LO_UNK;
}

cls_vocab cls_vocab_listops(int keep_parens) {
    cls_vocab v = {CLS_VOCAB_LISTOPS, CLS_LO_VOCAB, CLS_LO_PAD, CLS_LO_UNK, keep_parens ? 1 : 0, 0, 0, 0};
    return v;
}
cls_vocab cls_vocab_bytes(void) {
    cls_vocab v = {CLS_VOCAB_BYTES, 257, 256, -1, 0, 0, 0, 0};
    return v;
}
cls_vocab cls_vocab_pixels(int real, double mean, double std) {
    cls_vocab v = {CLS_VOCAB_PIXELS, 257, 256, -1, 0, real ? 1 : 0, mean, std};
    return v;
}

char *cls_vocab_to_json(const cls_vocab *v) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const char *kind = v->kind == CLS_VOCAB_LISTOPS ? "listops" : v->kind == CLS_VOCAB_BYTES ? "bytes" : "pixels";
    cJSON_AddStringToObject(o, "kind", kind);
    cJSON_AddNumberToObject(o, "size", v->size);
    cJSON_AddNumberToObject(o, "pad", v->pad);
    if (v->kind == CLS_VOCAB_LISTOPS) {
        cJSON_AddNumberToObject(o, "unk", v->unk);
        cJSON_AddBoolToObject(o, "keep_parens", v->keep_parens);
        cJSON *t = cJSON_AddArrayToObject(o, "tokens");
        for (int i = 0; t && i < CLS_LO_VOCAB; i++) cJSON_AddItemToArray(t, cJSON_CreateString(cls_lo_tokens[i]));
    }
    if (v->kind == CLS_VOCAB_PIXELS) {
        cJSON_AddBoolToObject(o, "real", v->real);
        cJSON_AddNumberToObject(o, "mean", v->mean);
        cJSON_AddNumberToObject(o, "std", v->std);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

int cls_vocab_from_json(const char *json, cls_vocab *v) {
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return cls_fail("vocabulary metadata is not a JSON object");
    }
    int rc = 0;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kind");
    const char *kind = cJSON_IsString(k) ? k->valuestring : "";
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(o, "size"), *pd = cJSON_GetObjectItemCaseSensitive(o, "pad");
    if (!strcmp(kind, "listops")) {
        const cJSON *kp = cJSON_GetObjectItemCaseSensitive(o, "keep_parens"), *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        *v = cls_vocab_listops(cJSON_IsTrue(kp));
        int ok = cJSON_IsArray(t) && cJSON_GetArraySize(t) == CLS_LO_VOCAB;
        for (int i = 0; ok && i < CLS_LO_VOCAB; i++) {
            const cJSON *e = cJSON_GetArrayItem(t, i);
            ok = cJSON_IsString(e) && !strcmp(e->valuestring, cls_lo_tokens[i]);
        }
        if (!ok) rc = cls_fail("the ListOps vocabulary in the metadata differs from this build's token map");
    } else if (!strcmp(kind, "bytes")) {
        *v = cls_vocab_bytes();
    } else if (!strcmp(kind, "pixels")) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "real"), *m = cJSON_GetObjectItemCaseSensitive(o, "mean"),
                    *s = cJSON_GetObjectItemCaseSensitive(o, "std");
        *v = cls_vocab_pixels(cJSON_IsTrue(r), cJSON_IsNumber(m) ? m->valuedouble : 0.5, cJSON_IsNumber(s) ? s->valuedouble : 0.5);
        if (v->real && !(v->std > 0 && isfinite(v->mean) && isfinite(v->std))) rc = cls_fail("vocabulary metadata: bad pixel mean/std");
    } else {
        rc = cls_fail("vocabulary metadata: unknown kind '%s' (expected listops, bytes or pixels)", kind);
    }
    if (!rc && ((cJSON_IsNumber(sz) && sz->valueint != v->size) || (cJSON_IsNumber(pd) && pd->valueint != v->pad)))
        rc = cls_fail("vocabulary metadata: size/pad (%d/%d) differ from the %s map (%d/%d)", cJSON_IsNumber(sz) ? sz->valueint : -1,
                      cJSON_IsNumber(pd) ? pd->valueint : -1, kind, v->size, v->pad);
    cJSON_Delete(o);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * class lists */
void cls_classes_free(cls_classes *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->names[i]);
    free(c->names);
    c->names = NULL, c->n = 0;
}

int cls_classes_copy(cls_classes *dst, const cls_classes *src) {
    dst->n = 0;
    dst->names = calloc(src->n ? (size_t)src->n : 1, sizeof *dst->names);
    if (!dst->names) return cls_fail("out of memory");
    for (int i = 0; i < src->n; i++) {
        dst->names[i] = strdup(src->names[i]);
        if (!dst->names[i]) {
            cls_classes_free(dst);
            return cls_fail("out of memory");
        }
        dst->n = i + 1;
    }
    return 0;
}

/* strict number: the whole string parses, finite */
static int cls_number(const char *s, double *x) {
    if (!*s || isspace((unsigned char)*s)) return 0;
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (*e || errno || !isfinite(v)) return 0;
    *x = v;
    return 1;
}

int cls_classes_find(const cls_classes *c, const char *label) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], label)) return i;
    double x, y;
    if (cls_number(label, &x))
        for (int i = 0; i < c->n; i++)
            if (cls_number(c->names[i], &y) && x == y) return i;
    return -1;
}

char *cls_classes_to_json(const cls_classes *c) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    for (int i = 0; i < c->n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(c->names[i]));
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}

int cls_classes_from_json(const char *json, cls_classes *c) {
    c->n = 0, c->names = NULL;
    cJSON *a = json ? cJSON_Parse(json) : NULL;
    if (!a || !cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1) {
        cJSON_Delete(a);
        return cls_fail("class list metadata is not a non-empty JSON array of strings");
    }
    int n = cJSON_GetArraySize(a);
    c->names = calloc((size_t)n, sizeof *c->names);
    if (!c->names) {
        cJSON_Delete(a);
        return cls_fail("out of memory");
    }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsString(e)) {
            cJSON_Delete(a);
            cls_classes_free(c);
            return cls_fail("class list metadata: item %d is not a string", i);
        }
        c->names[i] = strdup(e->valuestring);
        if (!c->names[i]) {
            cJSON_Delete(a);
            cls_classes_free(c);
            return cls_fail("out of memory");
        }
        c->n = i + 1;
    }
    cJSON_Delete(a);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(c->names[i], c->names[j])) {
                char b[64];
                cls_fail("class list metadata: '%s' appears twice", cls_show(c->names[i], strlen(c->names[i]), b, sizeof b));
                cls_classes_free(c);
                return -1;
            }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * dataset builder shared by the loaders */
#define CLS_MAX_LABEL 256
#define CLS_MAX_CLASSES 65536

typedef struct {
    const char *path;
    const cls_load_opts *o;
    cls_dataset *d;
    size_t cap;
    size_t *off, *off2;
    /* distinct labels as read: strings, first line, hash index */
    char **lab;
    int *lab_line;
    int nlab, labcap;
    int *hidx; /* open addressing over lab, -1 empty */
    int hcap;
    int *ex_lab; /* per example: index into lab */
    size_t pool_cap;
} cls_builder;

static uint64_t cls_strhash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void cls_builder_free(cls_builder *b) {
    free(b->off), free(b->off2), free(b->lab_line), free(b->hidx), free(b->ex_lab);
    for (int i = 0; i < b->nlab; i++) free(b->lab[i]);
    free(b->lab);
    memset(b, 0, sizeof *b);
}

static int cls_builder_init(cls_builder *b, const char *path, const cls_load_opts *o, cls_dataset *d) {
    memset(b, 0, sizeof *b);
    memset(d, 0, sizeof *d);
    b->path = path, b->o = o, b->d = d;
    d->path = strdup(path);
    b->hcap = 64;
    b->hidx = malloc((size_t)b->hcap * sizeof *b->hidx);
    if (!d->path || !b->hidx) return cls_fail("out of memory");
    for (int i = 0; i < b->hcap; i++) b->hidx[i] = -1;
    if (o->max_len < 0) return cls_fail("%s: negative maximum length %d", path, o->max_len);
    return 0;
}

/* index of a label string (added when new) */
static int cls_builder_label(cls_builder *b, const char *s, size_t n, int line) {
    char buf[64];
    if (n == 0) return cls_fail("%s:%d: empty label", b->path, line);
    if (n > CLS_MAX_LABEL)
        return cls_fail("%s:%d: the label is %zu bytes long (at most %d): is the line in label<TAB>text order?", b->path, line, n,
                        CLS_MAX_LABEL);
    if (memchr(s, 0, n)) return cls_fail("%s:%d: the label '%s' contains a NUL byte", b->path, line, cls_show(s, n, buf, sizeof buf));
    uint64_t h = cls_strhash(s, n);
    int m = b->hcap - 1, i = (int)(h & (uint64_t)m);
    while (b->hidx[i] >= 0) {
        const char *t = b->lab[b->hidx[i]];
        if (strlen(t) == n && !memcmp(t, s, n)) return b->hidx[i];
        i = (i + 1) & m;
    }
    if (b->nlab >= CLS_MAX_CLASSES)
        return cls_fail("%s:%d: more than %d distinct labels: is the line in label<TAB>text order?", b->path, line, CLS_MAX_CLASSES);
    if (b->nlab == b->labcap) {
        int nc = b->labcap ? b->labcap * 2 : 16;
        char **a = realloc(b->lab, (size_t)nc * sizeof *a);
        if (!a) return cls_fail("out of memory");
        b->lab = a;
        int *l = realloc(b->lab_line, (size_t)nc * sizeof *l);
        if (!l) return cls_fail("out of memory");
        b->lab_line = l, b->labcap = nc;
    }
    char *c = malloc(n + 1);
    if (!c) return cls_fail("out of memory");
    memcpy(c, s, n), c[n] = 0;
    b->lab[b->nlab] = c, b->lab_line[b->nlab] = line;
    b->hidx[i] = b->nlab++;
    if (b->nlab * 2 > b->hcap) { /* rehash */
        int nc = b->hcap * 2;
        int *nh = malloc((size_t)nc * sizeof *nh);
        if (!nh) return cls_fail("out of memory");
        for (int j = 0; j < nc; j++) nh[j] = -1;
        for (int j = 0; j < b->nlab; j++) {
            int q = (int)(cls_strhash(b->lab[j], strlen(b->lab[j])) & (uint64_t)(nc - 1));
            while (nh[q] >= 0) q = (q + 1) & (nc - 1);
            nh[q] = j;
        }
        free(b->hidx);
        b->hidx = nh, b->hcap = nc;
    }
    return b->nlab - 1;
}

/* room for one more example */
static int cls_builder_grow(cls_builder *b, int pairs) {
    cls_dataset *d = b->d;
    if ((size_t)d->n < b->cap) return 0;
    if (d->n >= 0x3fffffff) return cls_fail("%s: too many examples", b->path);
    size_t nc = b->cap ? b->cap * 2 : 1024;
#define CLS_GROW(p)                                           \
    do {                                                      \
        void *q_ = realloc((p), nc * sizeof *(p));            \
        if (!q_) return cls_fail("out of memory");            \
        (p) = q_;                                             \
    } while (0)
    CLS_GROW(b->off);
    CLS_GROW(d->len);
    CLS_GROW(d->label);
    CLS_GROW(d->line);
    CLS_GROW(b->ex_lab);
    if (pairs) {
        CLS_GROW(b->off2);
        CLS_GROW(d->len2);
    }
#undef CLS_GROW
    b->cap = nc;
    return 0;
}

static int cls_pool_reserve(cls_builder *b, size_t more) {
    cls_dataset *d = b->d;
    if (d->pool_n + more <= b->pool_cap) return 0;
    size_t nc = b->pool_cap ? b->pool_cap : 1 << 16;
    while (nc < d->pool_n + more) {
        if (nc > ((size_t)1 << 40)) return cls_fail("%s: out of memory", b->path);
        nc *= 2;
    }
    uint16_t *p = realloc(d->pool, nc * sizeof *p);
    if (!p) return cls_fail("%s: out of memory (%zu tokens)", b->path, nc);
    d->pool = p, b->pool_cap = nc;
    return 0;
}

/* store bytes s[0..n) as tokens; returns the stored length */
static int cls_put_bytes(cls_builder *b, const char *s, size_t n, size_t *off) {
    cls_dataset *d = b->d;
    if (b->o->max_len > 0 && n > (size_t)b->o->max_len) n = (size_t)b->o->max_len, d->n_truncated++;
    if (cls_pool_reserve(b, n)) return -1;
    *off = d->pool_n;
    for (size_t i = 0; i < n; i++) d->pool[d->pool_n + i] = (unsigned char)s[i];
    d->pool_n += n;
    d->n_tokens += (int64_t)n;
    return (int)n;
}

/* numeric order when every label is a number, else bytewise */
static int cls_sort_numeric;
static char **cls_sort_names;
static int cls_cmp_label(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    const char *x = cls_sort_names[a], *y = cls_sort_names[b];
    if (cls_sort_numeric) {
        double u = 0, v = 0;
        cls_number(x, &u), cls_number(y, &v);
        if (u < v) return -1;
        if (u > v) return 1;
    }
    return strcmp(x, y);
}

/* map the distinct labels to classes and finish the dataset */
static int cls_builder_finish(cls_builder *b, const cls_classes *fixed_default) {
    cls_dataset *d = b->d;
    if (d->n == 0) return cls_fail("%s: no examples", b->path);
    int *map = malloc((size_t)(b->nlab ? b->nlab : 1) * sizeof *map);
    if (!map) return cls_fail("out of memory");
    const cls_classes *given = b->o->classes ? b->o->classes : fixed_default;
    int rc = 0;
    if (given) {
        if (given->n < 1) rc = cls_fail("%s: the given class list is empty", b->path);
        for (int i = 0; i < b->nlab && !rc; i++) {
            map[i] = cls_classes_find(given, b->lab[i]);
            if (map[i] < 0) {
                char buf[64], *cl = cls_classes_to_json(given);
                rc = cls_fail("%s:%d: unknown label '%s' (the classes are %.400s)", b->path, b->lab_line[i],
                              cls_show(b->lab[i], strlen(b->lab[i]), buf, sizeof buf), cl ? cl : "?");
                free(cl);
            }
        }
        if (!rc) rc = cls_classes_copy(&d->classes, given);
    } else {
        int *ord = malloc((size_t)b->nlab * sizeof *ord);
        if (!ord) rc = cls_fail("out of memory");
        else {
            cls_sort_numeric = 1;
            for (int i = 0; i < b->nlab; i++) {
                double x;
                ord[i] = i;
                if (!cls_number(b->lab[i], &x)) cls_sort_numeric = 0;
            }
            cls_sort_names = b->lab;
            qsort(ord, (size_t)b->nlab, sizeof *ord, cls_cmp_label);
            d->classes.names = malloc((size_t)b->nlab * sizeof *d->classes.names);
            if (!d->classes.names) rc = cls_fail("out of memory");
            for (int i = 0; i < b->nlab && !rc; i++) {
                map[ord[i]] = i;
                d->classes.names[i] = b->lab[ord[i]];
                b->lab[ord[i]] = NULL; /* moved */
            }
            if (!rc) d->classes.n = b->nlab;
            free(ord);
        }
    }
    if (!rc)
        for (int i = 0; i < d->n; i++) d->label[i] = map[b->ex_lab[i]];
    free(map);
    if (rc) return rc;
    /* pointers into the pool */
    d->tok = malloc((size_t)d->n * sizeof *d->tok);
    if (!d->tok) return cls_fail("out of memory");
    if (d->pairs) {
        d->tok2 = malloc((size_t)d->n * sizeof *d->tok2);
        if (!d->tok2) return cls_fail("out of memory");
    }
    for (int i = 0; i < d->n; i++) {
        d->tok[i] = d->pool + b->off[i];
        if (d->len[i] > d->max_len) d->max_len = d->len[i];
        if (d->pairs) {
            d->tok2[i] = d->pool + b->off2[i];
            if (d->len2[i] > d->max_len2) d->max_len2 = d->len2[i];
        }
    }
    return 0;
}

void cls_dataset_free(cls_dataset *d) {
    if (!d) return;
    free(d->tok), free(d->len), free(d->tok2), free(d->len2), free(d->label), free(d->line), free(d->pool), free(d->path);
    cls_classes_free(&d->classes);
    memset(d, 0, sizeof *d);
}

/* open a text file for line reading, with a clear error */
static FILE *cls_open(const char *path, const char *what) {
    struct stat st;
    if (!path || !*path) return cls_fail("%s: no file given", what), NULL;
    if (stat(path, &st) != 0) return cls_fail("%s file '%s': %s", what, path, strerror(errno)), NULL;
    if (S_ISDIR(st.st_mode)) return cls_fail("%s file '%s' is a directory", what, path), NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return cls_fail("%s file '%s': %s", what, path, strerror(errno)), NULL;
    return f;
}

/* next line without its "\n" / "\r\n"; returns the length or -1 at the end (-2 on error) */
static long cls_getline(FILE *f, char **line, size_t *cap, const char *path) {
    errno = 0;
    ssize_t n = getline(line, cap, f);
    if (n < 0) {
        if (ferror(f)) return cls_fail("%s: read error: %s", path, strerror(errno ? errno : EIO)), -2;
        return -1;
    }
    if (n > 0x7ffffff0) return cls_fail("%s: a line is longer than 2 GB", path), -2;
    if (n && (*line)[n - 1] == '\n') n--;
    if (n && (*line)[n - 1] == '\r') n--;
    return (long)n;
}

/* split on TABs: up to maxf fields; returns the count (may exceed maxf: the rest is not stored) */
static int cls_split(char *s, size_t n, char **f, size_t *fl, int maxf) {
    int k = 0;
    size_t st = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || s[i] == '\t') {
            if (k < maxf) f[k] = s + st, fl[k] = i - st;
            k++;
            st = i + 1;
        }
    return k;
}

static void cls_trim(char **s, size_t *n) {
    while (*n && ((*s)[0] == ' ' || (*s)[0] == '\t')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
}

int cls_load_listops(const char *path, const cls_load_opts *o, cls_dataset *d) {
    cls_load_opts def;
    if (!o) memset(&def, 0, sizeof def), o = &def;
    cls_builder b;
    if (cls_builder_init(&b, path, o, d)) {
        cls_builder_free(&b);
        cls_dataset_free(d);
        return -1;
    }
    d->vocab = cls_vocab_listops(o->keep_parens);
    FILE *f = cls_open(path, "ListOps");
    if (!f) {
        cls_builder_free(&b);
        cls_dataset_free(d);
        return -1;
    }
    char *line = NULL, buf[64];
    size_t lcap = 0;
    int lineno = 0, rc = 0, header = 0;
    long n;
    while ((n = cls_getline(f, &line, &lcap, path)) >= 0) {
        lineno++;
        if (!header) {
            if (n != 13 || memcmp(line, "Source\tTarget", 13)) {
                rc = cls_fail("%s:%d: expected the header line 'Source<TAB>Target', found '%s'", path, lineno,
                              cls_show(line, (size_t)n, buf, 40));
                break;
            }
            header = 1;
            continue;
        }
        if (n == 0) continue;
        if (o->max_examples > 0 && d->n >= o->max_examples) break;
        char *fld[2];
        size_t fl[2];
        int nf = cls_split(line, (size_t)n, fld, fl, 2);
        if (nf != 2) {
            rc = cls_fail("%s:%d: expected 2 tab-separated fields (Source, Target), found %d", path, lineno, nf);
            break;
        }
        char *t = fld[1];
        size_t tl = fl[1];
        cls_trim(&t, &tl);
        if (!(tl == 1 && *t >= '0' && *t <= '9')) {
            rc = cls_fail("%s:%d: the Target must be a digit 0-9, found '%s'", path, lineno, cls_show(t, tl, buf, 40));
            break;
        }
        if ((rc = cls_builder_grow(&b, 0))) break;
        int li = cls_builder_label(&b, t, tl, lineno);
        if (li < 0) {
            rc = -1;
            break;
        }
        /* tokens */
        const char *s = fld[0], *e = fld[0] + fl[0];
        size_t off = d->pool_n;
        int len = 0, cut = 0;
        while (s < e) {
            while (s < e && isspace((unsigned char)*s)) s++;
            if (s >= e) break;
            const char *w = s;
            while (s < e && !isspace((unsigned char)*s)) s++;
            int id = cls_listops_id(w, (size_t)(s - w));
            if (!o->keep_parens && (id == CLS_LO_LPAREN || id == CLS_LO_RPAREN)) continue;
            if (o->max_len > 0 && len >= o->max_len) {
                cut = 1;
                continue;
            }
            if (id == CLS_LO_UNK) d->n_unk++;
            if ((rc = cls_pool_reserve(&b, 1))) break;
            d->pool[d->pool_n++] = (uint16_t)id;
            len++;
        }
        if (rc) break;
        if (len == 0) {
            rc = cls_fail("%s:%d: empty Source", path, lineno);
            break;
        }
        d->n_truncated += cut;
        d->n_tokens += len;
        b.off[d->n] = off, d->len[d->n] = len, d->line[d->n] = lineno, b.ex_lab[d->n] = li;
        d->n++;
    }
    if (n == -2) rc = -1;
    if (!rc && !header) rc = cls_fail("%s: empty file (expected the header line 'Source<TAB>Target')", path);
    free(line);
    fclose(f);
    if (!rc) {
        static char *digits[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
        cls_classes ten = {10, digits};
        rc = cls_builder_finish(&b, &ten);
    }
    cls_builder_free(&b);
    if (rc) cls_dataset_free(d);
    return rc ? -1 : 0;
}

static int cls_is_header(const char *s, size_t n) {
    return n >= 5 && !strncasecmp(s, "label", 5) && (n == 5 || s[5] == '\t');
}

static int cls_load_tsv(const char *path, const cls_load_opts *o, cls_dataset *d, int pairs) {
    cls_load_opts def;
    if (!o) memset(&def, 0, sizeof def), o = &def;
    cls_builder b;
    if (cls_builder_init(&b, path, o, d)) {
        cls_builder_free(&b);
        cls_dataset_free(d);
        return -1;
    }
    d->vocab = cls_vocab_bytes();
    d->pairs = pairs;
    FILE *f = cls_open(path, pairs ? "pairs" : "text");
    if (!f) {
        cls_builder_free(&b);
        cls_dataset_free(d);
        return -1;
    }
    char *line = NULL;
    size_t lcap = 0;
    int lineno = 0, rc = 0;
    long n;
    while ((n = cls_getline(f, &line, &lcap, path)) >= 0) {
        lineno++;
        if (n == 0) continue;
        if (lineno == 1 && cls_is_header(line, (size_t)n)) continue;
        if (o->max_examples > 0 && d->n >= o->max_examples) break;
        char *fld[5];
        size_t fl[5];
        int nf = cls_split(line, (size_t)n, fld, fl, 5);
        if (!pairs && nf != 2) {
            rc = cls_fail("%s:%d: expected 2 tab-separated fields (label, text), found %d", path, lineno, nf);
            break;
        }
        if (pairs && nf != 3 && nf != 5) {
            rc = cls_fail("%s:%d: expected 3 tab-separated fields (label, text1, text2) or 5 (label, id1, id2, text1, text2), found %d",
                          path, lineno, nf);
            break;
        }
        int t1 = 1, t2 = nf == 5 ? 4 : 2;
        if (pairs && nf == 5) t1 = 3;
        char *lab = fld[0];
        size_t ll = fl[0];
        cls_trim(&lab, &ll);
        if (fl[t1] == 0) {
            rc = cls_fail("%s:%d: empty text%s", path, lineno, pairs ? "1" : "");
            break;
        }
        if (pairs && fl[t2] == 0) {
            rc = cls_fail("%s:%d: empty text2", path, lineno);
            break;
        }
        if ((rc = cls_builder_grow(&b, pairs))) break;
        int li = cls_builder_label(&b, lab, ll, lineno);
        if (li < 0) {
            rc = -1;
            break;
        }
        int len = cls_put_bytes(&b, fld[t1], fl[t1], &b.off[d->n]);
        if (len < 0) {
            rc = -1;
            break;
        }
        d->len[d->n] = len;
        if (pairs) {
            int len2 = cls_put_bytes(&b, fld[t2], fl[t2], &b.off2[d->n]);
            if (len2 < 0) {
                rc = -1;
                break;
            }
            d->len2[d->n] = len2;
        }
        d->line[d->n] = lineno, b.ex_lab[d->n] = li;
        d->n++;
    }
    if (n == -2) rc = -1;
    free(line);
    fclose(f);
    if (!rc) rc = cls_builder_finish(&b, NULL);
    cls_builder_free(&b);
    if (rc) cls_dataset_free(d);
    return rc ? -1 : 0;
}

int cls_load_text(const char *path, const cls_load_opts *o, cls_dataset *d) { return cls_load_tsv(path, o, d, 0); }
int cls_load_pairs(const char *path, const cls_load_opts *o, cls_dataset *d) { return cls_load_tsv(path, o, d, 1); }

/* ---------------------------------------------------------------------------------------------
 * IDX */
static int cls_read_all(const char *path, const char *what, uint8_t **buf, size_t *n) {
    *buf = NULL, *n = 0;
    FILE *f = cls_open(path, what);
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && st.st_size > 0) cap = (size_t)st.st_size + 1;
    uint8_t *b = malloc(cap);
    if (!b) {
        fclose(f);
        return cls_fail("%s file '%s': out of memory", what, path);
    }
    for (;;) {
        size_t r = fread(b + len, 1, cap - len, f);
        len += r;
        if (len < cap) break;
        uint8_t *nb = cap < ((size_t)1 << 40) ? realloc(b, cap * 2) : NULL;
        if (!nb) {
            free(b);
            fclose(f);
            return cls_fail("%s file '%s': out of memory", what, path);
        }
        b = nb, cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        return cls_fail("%s file '%s': read error", what, path);
    }
    *buf = b, *n = len;
    return 0;
}

static uint32_t cls_be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static int cls_idx_header(const char *what, const char *path, const uint8_t *b, size_t n, uint32_t want, int ndim,
                          uint64_t *dims) {
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return cls_fail("%s file '%s' is gzip-compressed: gunzip it first", what, path);
    if (n < 4) return cls_fail("%s file '%s' is truncated: %zu bytes, shorter than the 4-byte IDX magic", what, path, n);
    uint32_t magic = cls_be32(b);
    if (magic != want) {
        const char *hint = "";
        if (magic == 0x00000801u || magic == 0x00000803u) hint = " (are --images and --labels swapped?)";
        else if ((magic >> 16) == 0 && ((magic >> 8) & 0xff) >= 0x08)
            hint = " (an IDX file of another element type or rank: only unsigned bytes are supported)";
        else hint = " (not an IDX file)";
        return cls_fail("%s file '%s': magic 0x%08x, expected 0x%08x (IDX unsigned bytes, %d dimension%s)%s", what, path, magic, want,
                        ndim, ndim > 1 ? "s" : "", hint);
    }
    size_t hl = 4 + 4 * (size_t)ndim;
    if (n < hl) return cls_fail("%s file '%s' is truncated: %zu bytes, shorter than its %zu-byte header", what, path, n, hl);
    uint64_t tot = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = cls_be32(b + 4 + 4 * i);
        tot *= dims[i] ? dims[i] : 1;
        if (tot > ((uint64_t)1 << 40)) return cls_fail("%s file '%s': dimensions too large", what, path);
    }
    uint64_t need = hl;
    uint64_t prod = 1;
    for (int i = 0; i < ndim; i++) prod *= dims[i];
    need += prod;
    if ((uint64_t)n < need) {
        if (ndim == 3)
            return cls_fail("%s file '%s' is truncated: the header announces %llu images of %llux%llu (%llu bytes) but the file has %zu bytes",
                            what, path, (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)dims[2],
                            (unsigned long long)need, n);
        return cls_fail("%s file '%s' is truncated: the header announces %llu labels (%llu bytes) but the file has %zu bytes", what, path,
                        (unsigned long long)dims[0], (unsigned long long)need, n);
    }
    if ((uint64_t)n > need)
        return cls_fail("%s file '%s': %llu bytes of trailing data after the %llu announced by the header", what, path,
                        (unsigned long long)(n - need), (unsigned long long)need);
    return 0;
}

int cls_load_idx(const char *images, const char *labels, const cls_load_opts *o, cls_dataset *d) {
    cls_load_opts def;
    if (!o) memset(&def, 0, sizeof def), o = &def;
    memset(d, 0, sizeof *d);
    double mean = o->mean, std = o->std;
    if (mean == 0 && std == 0) mean = 0.5, std = 0.5;
    if (o->real && !(std > 0 && isfinite(std) && isfinite(mean)))
        return cls_fail("pixel normalisation: std must be > 0 (got mean %g, std %g)", mean, std);
    uint8_t *ib = NULL, *lb = NULL;
    size_t in = 0, ln = 0;
    uint64_t idim[3] = {0, 0, 0}, ldim[1] = {0};
    if (cls_read_all(images, "images", &ib, &in)) return -1;
    if (cls_idx_header("images", images, ib, in, 0x00000803u, 3, idim)) {
        free(ib);
        return -1;
    }
    if (cls_read_all(labels, "labels", &lb, &ln)) {
        free(ib);
        return -1;
    }
    int rc = 0;
    if (cls_idx_header("labels", labels, lb, ln, 0x00000801u, 1, ldim)) rc = -1;
    else if (idim[0] != ldim[0])
        rc = cls_fail("images file '%s' has %llu images but labels file '%s' has %llu labels", images, (unsigned long long)idim[0], labels,
                      (unsigned long long)ldim[0]);
    else if (idim[0] == 0) rc = cls_fail("images file '%s': no images", images);
    else if (idim[1] == 0 || idim[2] == 0 || idim[1] * idim[2] > 0x7fffffffu)
        rc = cls_fail("images file '%s': bad image size %llux%llu", images, (unsigned long long)idim[1], (unsigned long long)idim[2]);
    else if (idim[0] > 0x3fffffff) rc = cls_fail("images file '%s': too many images", images);
    if (rc) {
        free(ib), free(lb);
        return -1;
    }
    cls_builder b;
    if (cls_builder_init(&b, images, o, d)) rc = -1;
    d->vocab = cls_vocab_pixels(o->real, mean, std);
    d->rows = (int)idim[1], d->cols = (int)idim[2];
    int N = (int)idim[0];
    if (o->max_examples > 0 && N > o->max_examples) N = o->max_examples;
    size_t px = (size_t)idim[1] * (size_t)idim[2];
    size_t keep = o->max_len > 0 && px > (size_t)o->max_len ? (size_t)o->max_len : px;
    if (!rc) rc = cls_pool_reserve(&b, keep * (size_t)N);
    for (int i = 0; i < N && !rc; i++) {
        if ((rc = cls_builder_grow(&b, 0))) break;
        char lab[16];
        snprintf(lab, sizeof lab, "%d", lb[8 + i]);
        int li = cls_builder_label(&b, lab, strlen(lab), i + 1);
        if (li < 0) {
            rc = -1;
            break;
        }
        int len = cls_put_bytes(&b, (const char *)ib + 16 + (size_t)i * px, px, &b.off[d->n]);
        if (len < 0) {
            rc = -1;
            break;
        }
        d->len[d->n] = len, d->line[d->n] = i + 1, b.ex_lab[d->n] = li;
        d->n++;
    }
    free(ib), free(lb);
    if (!rc) rc = cls_builder_finish(&b, NULL);
    if (rc && o->classes && strstr(cls_err, "unknown label")) {
        /* the line number is an image index here: say so */
        size_t l = strlen(cls_err);
        const char *sfx = " (line = image number)";
        if (l + strlen(sfx) < sizeof cls_err) memcpy(cls_err + l, sfx, strlen(sfx) + 1);
    }
    cls_builder_free(&b);
    if (rc) cls_dataset_free(d);
    return rc ? -1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * batches */
int cls_batch_init(cls_batch *b, int B, int L, int L2, int real) {
    memset(b, 0, sizeof *b);
    if (B < 1 || L < 1 || L2 < 0) return cls_fail("cls_batch_init: bad shape B=%d L=%d L2=%d", B, L, L2);
    b->B = B, b->L = L, b->L2 = L2;
    size_t bl = (size_t)B * (size_t)L;
    if (real) b->val = malloc(bl * sizeof *b->val);
    else b->tok = malloc(bl * sizeof *b->tok);
    b->len = malloc((size_t)B * sizeof *b->len);
    b->label = malloc((size_t)B * sizeof *b->label);
    if (L2 > 0) {
        b->tok2 = malloc((size_t)B * (size_t)L2 * sizeof *b->tok2);
        b->len2 = malloc((size_t)B * sizeof *b->len2);
    }
    if ((real ? !b->val : !b->tok) || !b->len || !b->label || (L2 > 0 && (!b->tok2 || !b->len2))) {
        cls_batch_free(b);
        return cls_fail("out of memory for a batch of %d x %d", B, L);
    }
    return 0;
}

void cls_batch_free(cls_batch *b) {
    if (!b) return;
    free(b->tok), free(b->val), free(b->len), free(b->tok2), free(b->len2), free(b->label);
    memset(b, 0, sizeof *b);
}

int cls_batch_max_len(const cls_dataset *d, const int *idx, int n, int which) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= d->n) continue;
        int l = which ? (d->len2 ? d->len2[idx[i]] : 0) : d->len[idx[i]];
        m = l > m ? l : m;
    }
    return m;
}

int cls_batch_fill(cls_batch *b, const cls_dataset *d, const int *idx, int n) {
    if (n < 0 || n > b->B) return cls_fail("cls_batch_fill: %d examples for a batch of %d rows", n, b->B);
    if (d->pairs && !b->tok2) return cls_fail("cls_batch_fill: a pairs dataset needs a batch with L2 > 0");
    if (b->val && d->vocab.kind != CLS_VOCAB_PIXELS) return cls_fail("cls_batch_fill: real-valued batches hold pixels only");
    const int pad = d->vocab.pad;
    const float zero = 0.0f;
    for (int r = 0; r < b->B; r++) {
        int e = r < n ? idx[r] : -1;
        if (r < n && (e < 0 || e >= d->n)) return cls_fail("cls_batch_fill: example index %d out of range [0, %d)", e, d->n);
        int l = e >= 0 ? (d->len[e] < b->L ? d->len[e] : b->L) : 0;
        size_t o = (size_t)r * (size_t)b->L;
        if (b->tok) {
            for (int t = 0; t < l; t++) b->tok[o + t] = d->tok[e][t];
            for (int t = l; t < b->L; t++) b->tok[o + t] = pad;
        } else {
            for (int t = 0; t < l; t++) b->val[o + t] = cls_pixel_value(&d->vocab, d->tok[e][t]);
            for (int t = l; t < b->L; t++) b->val[o + t] = zero;
        }
        b->len[r] = l;
        b->label[r] = e >= 0 ? d->label[e] : -1;
        if (b->tok2) {
            int l2 = e >= 0 && d->pairs ? (d->len2[e] < b->L2 ? d->len2[e] : b->L2) : 0;
            size_t o2 = (size_t)r * (size_t)b->L2;
            for (int t = 0; t < l2; t++) b->tok2[o2 + t] = d->tok2[e][t];
            for (int t = l2; t < b->L2; t++) b->tok2[o2 + t] = pad;
            b->len2[r] = l2;
        }
    }
    b->n = n;
    return 0;
}
