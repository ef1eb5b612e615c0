/* The dataset builder shared by the loaders (distinct labels -> classes, one token pool, or one
 * pool of values for real-valued sequences), the data fingerprint, and padded batches. The
 * formats themselves, their detection and the "load any format" entry point: formats.c. */
#include "data/data.h"

/* ---------------------------------------------------------------------------------------------
 * builder */
void mega__builder_free(mega__builder *b) {
    free(b->off), free(b->off2), free(b->lab_line), free(b->hidx), free(b->ex_lab);
    for (int i = 0; i < b->nlab; i++) free(b->lab[i]);
    free(b->lab);
    memset(b, 0, sizeof *b);
}

mega_status mega__builder_init(mega__builder *b, const char *path, const mega_data_opts *o, mega_dataset *d) {
    memset(b, 0, sizeof *b);
    memset(d, 0, sizeof *d);
    b->path = path, b->o = o, b->d = d;
    d->path = strdup(path ? path : ""); /* NULL: the loader says "no file given" */
    b->hcap = 64;
    b->hidx = malloc((size_t)b->hcap * sizeof *b->hidx);
    if (!d->path || !b->hidx) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    for (int i = 0; i < b->hcap; i++) b->hidx[i] = -1;
    if (o->max_len < 0) MEGA_FAIL(MEGA_ERR_INVALID, "%s: negative maximum length %d", path, o->max_len);
    return MEGA_OK;
}

/* slot of label hash h in a table of cap (a power of two) entries */
static int label_slot(uint64_t h, int cap) { return (int)(h & (uint64_t)(cap - 1)); }

/* double the hash index once it is half full */
static mega_status label_rehash(mega__builder *b) {
    int nc = b->hcap * 2;
    int *nh = malloc((size_t)nc * sizeof *nh);
    if (!nh) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    for (int j = 0; j < nc; j++) nh[j] = -1;
    for (int j = 0; j < b->nlab; j++) {
        int q = label_slot(mega_fnv1a64(b->lab[j], strlen(b->lab[j])), nc);
        while (nh[q] >= 0) q = (q + 1) & (nc - 1);
        nh[q] = j;
    }
    free(b->hidx);
    b->hidx = nh, b->hcap = nc;
    return MEGA_OK;
}

/* append label s[0..n) (first seen at line) to the distinct labels, indexed at hash slot i */
static mega_status label_add(mega__builder *b, const char *s, size_t n, int line, int i) {
    if (b->nlab >= MEGA_DATA_MAX_CLASSES)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: more than %d distinct labels: is the line in label<TAB>text order?", b->path, line,
                  MEGA_DATA_MAX_CLASSES);
    if (b->nlab == b->labcap) {
        int nc = b->labcap ? b->labcap * 2 : 16;
        char **a = realloc(b->lab, (size_t)nc * sizeof *a);
        if (!a) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        b->lab = a;
        int *l = realloc(b->lab_line, (size_t)nc * sizeof *l);
        if (!l) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        b->lab_line = l, b->labcap = nc;
    }
    char *c = malloc(n + 1);
    if (!c) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    memcpy(c, s, n), c[n] = 0;
    b->lab[b->nlab] = c, b->lab_line[b->nlab] = line;
    b->hidx[i] = b->nlab++;
    return b->nlab * 2 > b->hcap ? label_rehash(b) : MEGA_OK;
}

mega_status mega__builder_label(mega__builder *b, const char *s, size_t n, int line, int *index) {
    char buf[64];
    if (n == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: empty label", b->path, line);
    if (n > MEGA_DATA_MAX_LABEL)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: the label is %zu bytes long (at most %d): is the line in label<TAB>text order?", b->path,
                  line, n, MEGA_DATA_MAX_LABEL);
    if (memchr(s, 0, n))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: the label '%s' contains a NUL byte", b->path, line, mega__data_show(s, n, buf, sizeof buf));
    /* the class names are stored as JSON text in the model: an invalid one would fail only at the
     * first save, after the training */
    const size_t k = mega_utf8_check(s, n);
    if (k < n)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: the label '%s' is not valid UTF-8 (byte 0x%02x at column %zu)", b->path, line,
                  mega__data_show(s, n, buf, sizeof buf), (unsigned char)s[k], k + 1);
    int i = label_slot(mega_fnv1a64(s, n), b->hcap);
    while (b->hidx[i] >= 0) {
        const char *t = b->lab[b->hidx[i]];
        if (strlen(t) == n && !memcmp(t, s, n)) return *index = b->hidx[i], MEGA_OK;
        i = (i + 1) & (b->hcap - 1);
    }
    *index = b->nlab;
    return label_add(b, s, n, line, i);
}

mega_status mega__builder_grow(mega__builder *b, int pairs) {
    mega_dataset *d = b->d;
    if ((size_t)d->n < b->cap) return MEGA_OK;
    if (d->n >= 0x3fffffff) MEGA_FAIL(MEGA_ERR_INVALID, "%s: too many examples", b->path);
    size_t nc = b->cap ? b->cap * 2 : 1024;
#define GROW(p)                                                     \
    do {                                                            \
        void *q_ = realloc((p), nc * sizeof *(p));                  \
        if (!q_) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");          \
        (p) = q_;                                                   \
    } while (0)
    GROW(b->off);
    GROW(d->len);
    GROW(d->label);
    GROW(d->line);
    GROW(b->ex_lab);
    if (pairs) {
        GROW(b->off2);
        GROW(d->len2);
    }
#undef GROW
    b->cap = nc;
    return MEGA_OK;
}

mega_status mega__builder_reserve(mega__builder *b, size_t more) {
    mega_dataset *d = b->d;
    if (d->pool_n + more <= b->pool_cap) return MEGA_OK;
    size_t nc = b->pool_cap ? b->pool_cap : 1 << 16;
    while (nc < d->pool_n + more) {
        if (nc > ((size_t)1 << 40)) MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory", b->path);
        nc *= 2;
    }
    uint16_t *p = realloc(d->pool, nc * sizeof *p);
    if (!p) MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory (%zu tokens)", b->path, nc);
    d->pool = p, b->pool_cap = nc;
    return MEGA_OK;
}

mega_status mega__builder_put_reals(mega__builder *b, const float *x, size_t n, size_t *off, int *len) {
    mega_dataset *d = b->d;
    if (b->o->max_len > 0 && n > (size_t)b->o->max_len) n = (size_t)b->o->max_len, d->n_truncated++;
    if (d->pool_n + n > b->pool_cap) {
        size_t nc = b->pool_cap ? b->pool_cap : 1 << 14;
        while (nc < d->pool_n + n) {
            if (nc > ((size_t)1 << 38)) MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory", b->path);
            nc *= 2;
        }
        float *p = realloc(d->vpool, nc * sizeof *p);
        if (!p) MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory (%zu values)", b->path, nc);
        d->vpool = p, b->pool_cap = nc;
    }
    *off = d->pool_n;
    memcpy(d->vpool + d->pool_n, x, n * sizeof *x);
    d->pool_n += n;
    d->n_tokens += (int64_t)n;
    *len = (int)n;
    return MEGA_OK;
}

mega_status mega__builder_put_bytes(mega__builder *b, const char *s, size_t n, size_t *off, int *len) {
    mega_dataset *d = b->d;
    if (b->o->max_len > 0 && n > (size_t)b->o->max_len) n = (size_t)b->o->max_len, d->n_truncated++;
    MEGA_TRY(mega__builder_reserve(b, n));
    *off = d->pool_n;
    for (size_t i = 0; i < n; i++) d->pool[d->pool_n + i] = (unsigned char)s[i];
    d->pool_n += n;
    d->n_tokens += (int64_t)n;
    *len = (int)n;
    return MEGA_OK;
}

/* map[label index] = class id in the given list; d->classes = a copy of it */
static mega_status classes_given(mega__builder *b, const mega_classes *given, int *map) {
    if (given->n < 1) MEGA_FAIL(MEGA_ERR_INVALID, "%s: the given class list is empty", b->path);
    for (int i = 0; i < b->nlab; i++) {
        map[i] = mega_classes_find(given, b->lab[i]);
        if (map[i] < 0) {
            char buf[64], *cl = mega_classes_to_json(given);
            mega__error(MEGA_ERR_FORMAT, "%s:%d: unknown label '%s' (the classes are %.400s)%s", b->path, b->lab_line[i],
                        mega__data_show(b->lab[i], strlen(b->lab[i]), buf, sizeof buf), cl ? cl : "?",
                        b->line_note ? b->line_note : "");
            free(cl);
            return MEGA_ERR_FORMAT;
        }
    }
    return mega_classes_copy(&b->d->classes, given);
}

/* a label in the sort: numeric order when every label is a number (v), else bytewise (v = 0) */
typedef struct {
    const char *name;
    double v;
    int i;
} label_key;

static int label_key_cmp(const void *pa, const void *pb) {
    const label_key *a = pa, *b = pb;
    if (a->v < b->v) return -1;
    if (a->v > b->v) return 1;
    return strcmp(a->name, b->name);
}

/* the classes are the distinct labels in sorted order; they move from the builder to d */
static mega_status classes_sorted(mega__builder *b, int *map) {
    mega_dataset *d = b->d;
    label_key *k = malloc((size_t)b->nlab * sizeof *k);
    d->classes.names = malloc((size_t)b->nlab * sizeof *d->classes.names);
    if (!k || !d->classes.names) {
        free(k);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    int numeric = 1;
    for (int i = 0; i < b->nlab; i++) {
        k[i].name = b->lab[i], k[i].i = i, k[i].v = 0;
        if (!mega__data_number(b->lab[i], &k[i].v)) numeric = 0;
    }
    for (int i = 0; i < b->nlab && !numeric; i++) k[i].v = 0;
    qsort(k, (size_t)b->nlab, sizeof *k, label_key_cmp);
    for (int i = 0; i < b->nlab; i++) {
        map[k[i].i] = i;
        d->classes.names[i] = b->lab[k[i].i];
        b->lab[k[i].i] = NULL; /* moved */
    }
    d->classes.n = b->nlab;
    free(k);
    return MEGA_OK;
}

mega_status mega__builder_finish(mega__builder *b, const mega_classes *fixed_default) {
    mega_dataset *d = b->d;
    if (d->n == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: no examples", b->path);
    int *map = malloc((size_t)(b->nlab ? b->nlab : 1) * sizeof *map);
    if (!map) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    const mega_classes *given = b->o->classes ? b->o->classes : fixed_default;
    mega_status st = given ? classes_given(b, given, map) : classes_sorted(b, map);
    if (st == MEGA_OK)
        for (int i = 0; i < d->n; i++) d->label[i] = map[b->ex_lab[i]];
    free(map);
    if (st != MEGA_OK) return st;
    /* pointers into the pool */
    if (d->vpool) {
        d->val = malloc((size_t)d->n * sizeof *d->val);
        if (!d->val) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        for (int i = 0; i < d->n; i++) {
            d->val[i] = d->vpool + b->off[i];
            if (d->len[i] > d->max_len) d->max_len = d->len[i];
        }
        return MEGA_OK;
    }
    d->tok = malloc((size_t)d->n * sizeof *d->tok);
    if (!d->tok) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    if (d->pairs) {
        d->tok2 = malloc((size_t)d->n * sizeof *d->tok2);
        if (!d->tok2) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    for (int i = 0; i < d->n; i++) {
        d->tok[i] = d->pool + b->off[i];
        if (d->len[i] > d->max_len) d->max_len = d->len[i];
        if (d->pairs) {
            d->tok2[i] = d->pool + b->off2[i];
            if (d->len2[i] > d->max_len2) d->max_len2 = d->len2[i];
        }
    }
    return MEGA_OK;
}

void mega_dataset_free(mega_dataset *d) {
    if (!d) return;
    free(d->tok), free(d->len), free(d->tok2), free(d->len2), free(d->label), free(d->line), free(d->pool), free(d->path);
    free(d->val), free(d->vpool);
    mega_classes_free(&d->classes);
    memset(d, 0, sizeof *d);
}

uint64_t mega_dataset_fingerprint(const mega_dataset *d) {
    /* one FNV-1a step per 64-bit word: the hash of an example's tokens, then its label */
    uint64_t h = MEGA__FNV_BASIS;
    for (int i = 0; i < d->n; i++) {
        const void *x = d->val ? (const void *)d->val[i] : (const void *)d->tok[i];
        h = (h ^ mega_fnv1a64(x, (size_t)d->len[i] * (d->val ? sizeof(float) : sizeof(uint16_t)))) * MEGA__FNV_PRIME;
        h = (h ^ (uint64_t)d->label[i]) * MEGA__FNV_PRIME;
    }
    return h;
}

/* ---------------------------------------------------------------------------------------------
 * batches */
mega_status mega_batch_init(mega_batch *b, int B, int L, int L2, int reals) {
    memset(b, 0, sizeof *b);
    if (B < 1 || L < 1 || L2 < 0) MEGA_FAIL(MEGA_ERR_INVALID, "mega_batch_init: bad shape B=%d L=%d L2=%d", B, L, L2);
    b->B = B, b->L = L, b->L2 = L2;
    size_t bl = (size_t)B * (size_t)L;
    if (reals) b->val = malloc(bl * sizeof *b->val);
    else b->tok = malloc(bl * sizeof *b->tok);
    b->len = malloc((size_t)B * sizeof *b->len);
    b->label = malloc((size_t)B * sizeof *b->label);
    if (L2 > 0) {
        b->tok2 = malloc((size_t)B * (size_t)L2 * sizeof *b->tok2);
        b->len2 = malloc((size_t)B * sizeof *b->len2);
    }
    if ((reals ? !b->val : !b->tok) || !b->len || !b->label || (L2 > 0 && (!b->tok2 || !b->len2))) {
        mega_batch_free(b);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory for a batch of %d x %d", B, L);
    }
    return MEGA_OK;
}

void mega_batch_free(mega_batch *b) {
    if (!b) return;
    free(b->tok), free(b->val), free(b->len), free(b->tok2), free(b->len2), free(b->label);
    memset(b, 0, sizeof *b);
}

int mega_batch_max_len(const mega_dataset *d, const int *idx, int n, int which) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= d->n) continue;
        int l = which ? (d->len2 ? d->len2[idx[i]] : 0) : d->len[idx[i]];
        m = l > m ? l : m;
    }
    return m;
}

/* row r of the first sequence from example e (-1: an empty row) */
static void batch_row(mega_batch *b, const mega_dataset *d, int r, int e) {
    int l = e >= 0 ? (d->len[e] < b->L ? d->len[e] : b->L) : 0;
    size_t o = (size_t)r * (size_t)b->L;
    if (b->tok) {
        for (int t = 0; t < l; t++) b->tok[o + t] = d->tok[e][t];
        for (int t = l; t < b->L; t++) b->tok[o + t] = d->vocab.pad;
    } else if (d->val) {
        for (int t = 0; t < l; t++) b->val[o + t] = (mega_real)d->val[e][t];
        for (int t = l; t < b->L; t++) b->val[o + t] = 0;
    } else {
        for (int t = 0; t < l; t++) b->val[o + t] = (mega_real)mega_pixel_value(&d->vocab, d->tok[e][t]);
        for (int t = l; t < b->L; t++) b->val[o + t] = 0;
    }
    b->len[r] = l;
    b->label[r] = e >= 0 ? d->label[e] : -1;
    if (b->tok2) {
        int l2 = e >= 0 && d->pairs ? (d->len2[e] < b->L2 ? d->len2[e] : b->L2) : 0;
        size_t o2 = (size_t)r * (size_t)b->L2;
        for (int t = 0; t < l2; t++) b->tok2[o2 + t] = d->tok2[e][t];
        for (int t = l2; t < b->L2; t++) b->tok2[o2 + t] = d->vocab.pad;
        b->len2[r] = l2;
    }
}

mega_status mega_batch_fill(mega_batch *b, const mega_dataset *d, const int *idx, int n) {
    if (n < 0 || n > b->B) MEGA_FAIL(MEGA_ERR_INVALID, "mega_batch_fill: %d examples for a batch of %d rows", n, b->B);
    if (d->pairs && !b->tok2) MEGA_FAIL(MEGA_ERR_INVALID, "mega_batch_fill: a pairs dataset needs a batch with L2 > 0");
    if (b->val && !d->val && d->vocab.kind != MEGA_VOCAB_PIXELS)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_batch_fill: real-valued batches hold pixels or real values only");
    if (b->tok && d->val) MEGA_FAIL(MEGA_ERR_INVALID, "mega_batch_fill: real values need a real-valued batch");
    for (int r = 0; r < b->B; r++) {
        int e = r < n ? idx[r] : -1;
        if (r < n && (e < 0 || e >= d->n))
            MEGA_FAIL(MEGA_ERR_INVALID, "mega_batch_fill: example index %d out of range [0, %d)", e, d->n);
        batch_row(b, d, r, e);
    }
    b->n = n;
    return MEGA_OK;
}
