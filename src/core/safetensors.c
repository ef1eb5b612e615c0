/*
 * safetensors (https://github.com/huggingface/safetensors) reader, validator and writer.
 *
 * Layout: u64 little-endian header length N, N bytes of UTF-8 JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * (optionally padded with trailing spaces), then the data section; offsets are relative to the
 * start of the data section, tensors are row-major little-endian.
 *
 * The reader keeps the whole file image in one 64-byte aligned buffer and validates everything
 * up front (header size cap, UTF-8, JSON, dtypes, shapes, offsets in bounds, sizes consistent
 * with dtype x shape, no duplicate names, tensors tiling the data section exactly with no overlap
 * and no hole, as the reference parser requires), so that mega_st_tensor.data can be trusted
 * afterwards. Every failure returns MEGA_ERR_FORMAT (MEGA_ERR_IO for open/read errors) with a
 * one-line message naming the file.
 */
#include "core/internal.h"
#include "core/limits.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000ull /* 100 MB, the reference implementation's cap */
#define ST_METADATA_KEY "__metadata__"

/* ---------------------------------------------------------------------------------------------
 * dtypes */
static const char *const k_dtype_names[] = {"F32", "F64", "F16", "BF16", "I64",
                                            "I32", "I16", "I8",  "U8",   "BOOL"};
static const size_t k_dtype_sizes[] = {4, 8, 2, 2, 8, 4, 2, 1, 1, 1};
#define ST_NDTYPES ((int)(sizeof k_dtype_sizes / sizeof k_dtype_sizes[0]))

size_t mega_dtype_size(mega_dtype dt) {
    if ((int)dt < 0 || (int)dt >= ST_NDTYPES) return 0;
    return k_dtype_sizes[dt];
}

const char *mega_dtype_name(mega_dtype dt) {
    if ((int)dt < 0 || (int)dt >= ST_NDTYPES) return "?";
    return k_dtype_names[dt];
}

static int dtype_from_name(const char *s, mega_dtype *out) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (strcmp(s, k_dtype_names[i]) == 0) {
            *out = (mega_dtype)i;
            return 1;
        }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * small helpers */
static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t load_le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* format a shape as "[2,3]" into buf */
static const char *fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = 0;
    int w = snprintf(buf, cap, "[");
    if (w > 0) o = (size_t)w;
    for (int i = 0; i < ndim && o < cap; i++) {
        w = snprintf(buf + o, cap - o, "%s%" PRId64, i ? "," : "", shape[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* numel of a shape; 0 if any dim is 0; returns 0 on overflow of numel*elsize (sets *ovf) */
static size_t shape_numel(int ndim, const int64_t *shape, size_t elsize, int *ovf) {
    *ovf = 0;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return 0;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (n > UINT64_MAX / d) {
            *ovf = 1;
            return 0;
        }
        n *= d;
    }
    if (elsize && n > (uint64_t)SIZE_MAX / elsize) {
        *ovf = 1;
        return 0;
    }
    return (size_t)n;
}

/* ---------------------------------------------------------------------------------------------
 * reader */
struct mega_st_file {
    unsigned char *image; /* whole file, 64-byte aligned */
    size_t len;
    int n;
    mega_st_tensor *t;  /* in header order */
    int *by_name;       /* tensor indexes sorted by name, for lookups */
    int nmeta;
    char **mkeys, **mvals;
};

void mega_st_close(mega_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    free(f->by_name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->mkeys[i]);
        free(f->mvals[i]);
    }
    free(f->mkeys);
    free(f->mvals);
    mega__free(f->image);
    free(f);
}

int mega_st_count(const mega_st_file *f) { return f ? f->n : 0; }

const mega_st_tensor *mega_st_at(const mega_st_file *f, int i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->t[i];
}

/* (name, index) pairs sorted by name: duplicate detection and binary-search lookup */
typedef struct {
    const char *name;
    int idx;
} name_ref;
static int cmp_name_ref(const void *a, const void *b) {
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

const mega_st_tensor *mega_st_get(const mega_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const mega_st_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *mega_st_meta(const mega_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->mkeys[i], key) == 0) return f->mvals[i];
    return NULL;
}
int mega_st_meta_count(const mega_st_file *f) { return f ? f->nmeta : 0; }
const char *mega_st_meta_key(const mega_st_file *f, int i) {
    if (!f || i < 0 || i >= f->nmeta) return NULL;
    return f->mkeys[i];
}

/* a JSON number that is an integer in [0, 2^63) */
static int json_uint(const cJSON *j, int64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0.0) || !(v < 9223372036854775808.0)) return 0; /* also rejects NaN */
    if (v != floor(v)) return 0;
    *out = (int64_t)v;
    return 1;
}

typedef struct {
    uint64_t begin, end;
    int idx;
} span;
static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parse one tensor entry; on success fills *t (name not set) and *sp. */
static mega_status parse_entry(const char *src, const char *name, const cJSON *e, uint64_t dsize,
                               mega_st_tensor *t, span *sp) {
    if (!cJSON_IsObject(e))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", src, name);
    const cJSON *jd = NULL, *js = NULL, *jo = NULL;
    for (const cJSON *c = e->child; c; c = c->next) {
        const cJSON **slot = NULL;
        if (!c->string) continue;
        if (strcmp(c->string, "dtype") == 0) slot = &jd;
        else if (strcmp(c->string, "shape") == 0) slot = &js;
        else if (strcmp(c->string, "data_offsets") == 0) slot = &jo;
        else continue; /* unknown fields are ignored, as the reference parser does */
        if (*slot)
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' has a duplicate field '%s'", src, name,
                      c->string);
        *slot = c;
    }
    if (!jd) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' has no dtype", src, name);
    if (!js) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' has no shape", src, name);
    if (!jo) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' has no data_offsets", src, name);

    if (!cJSON_IsString(jd) || !jd->valuestring)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' dtype is not a string", src, name);
    if (!dtype_from_name(jd->valuestring, &t->dtype))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' has unsupported dtype '%.32s'", src, name,
                  jd->valuestring);

    if (!cJSON_IsArray(js))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' shape is not an array", src, name);
    int nd = 0;
    for (const cJSON *c = js->child; c; c = c->next) {
        if (nd >= MEGA_ST_MAX_DIMS)
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' has more than %d dimensions", src, name,
                      MEGA_ST_MAX_DIMS);
        if (!json_uint(c, &t->shape[nd]))
            MEGA_FAIL(MEGA_ERR_FORMAT,
                      "%s: tensor '%s' shape[%d] is not a non-negative integer", src, name, nd);
        nd++;
    }
    t->ndim = nd;

    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' data_offsets is not an array of 2 integers",
                  src, name);
    int64_t b, en;
    if (!json_uint(jo->child, &b) || !json_uint(jo->child->next, &en))
        MEGA_FAIL(MEGA_ERR_FORMAT,
                  "%s: tensor '%s' data_offsets are not non-negative integers", src, name);
    if (b > en)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' data_offsets [%" PRId64 ", %" PRId64
                  "] have begin > end", src, name, b, en);
    if ((uint64_t)en > dsize)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' data_offsets [%" PRId64 ", %" PRId64
                  "] exceed the data section (%" PRIu64 " bytes)", src, name, b, en, dsize);

    char sb[192];
    size_t es = mega_dtype_size(t->dtype);
    int ovf;
    size_t numel = shape_numel(nd, t->shape, es, &ovf);
    if (ovf)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' shape %s overflows the size computation",
                  src, name, fmt_shape(sb, sizeof sb, nd, t->shape));
    if ((uint64_t)(en - b) != (uint64_t)numel * es)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: tensor '%s' data_offsets [%" PRId64 ", %" PRId64
                  "] do not match dtype %s x shape %s (%zu bytes)", src, name, b, en,
                  k_dtype_names[t->dtype], fmt_shape(sb, sizeof sb, nd, t->shape), numel * es);
    t->numel = numel;
    t->nbytes = numel * es;
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)en;
    return MEGA_OK;
}

static mega_status parse_metadata(const char *src, const cJSON *m, mega_st_file *f) {
    if (!cJSON_IsObject(m))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: __metadata__ is not a JSON object", src);
    int n = cJSON_GetArraySize(m);
    if (n == 0) return MEGA_OK;
    f->mkeys = calloc((size_t)n, sizeof *f->mkeys);
    f->mvals = calloc((size_t)n, sizeof *f->mvals);
    name_ref *refs = calloc((size_t)n, sizeof *refs);
    if (!f->mkeys || !f->mvals || !refs) {
        free(refs);
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory reading __metadata__", src);
    }
    int i = 0;
    for (const cJSON *c = m->child; c && i < n; c = c->next, i++) {
        if (!c->string) {
            free(refs);
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s: __metadata__ entry without a key", src);
        }
        if (!cJSON_IsString(c) || !c->valuestring) {
            free(refs);
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s: __metadata__ value for '%s' is not a string", src,
                      c->string);
        }
        f->mkeys[i] = dup_str(c->string);
        f->mvals[i] = dup_str(c->valuestring);
        f->nmeta = i + 1;
        if (!f->mkeys[i] || !f->mvals[i]) {
            free(refs);
            MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory reading __metadata__", src);
        }
        refs[i].name = f->mkeys[i];
        refs[i].idx = i;
    }
    qsort(refs, (size_t)f->nmeta, sizeof *refs, cmp_name_ref);
    for (int k = 1; k < f->nmeta; k++)
        if (strcmp(refs[k - 1].name, refs[k].name) == 0) {
            mega_status st = mega__error(MEGA_ERR_FORMAT,
                                         "%s: duplicate __metadata__ key '%s'", src, refs[k].name);
            free(refs);
            return st;
        }
    free(refs);
    return MEGA_OK;
}

/* The header length, its bounds, UTF-8, no NUL, an opening brace; *hlen on success. */
static mega_status st_check_header(const unsigned char *img, size_t len, const char *src, size_t *hlen) {
    if (len < 8)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: file too short for a safetensors header (%zu bytes)", src, len);
    uint64_t hn = load_le64(img);
    if (hn == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header length is 0", src);
    if (hn > ST_MAX_HEADER)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the %llu-byte cap", src, hn,
                  (unsigned long long)ST_MAX_HEADER);
    if (hn > (uint64_t)(len - 8))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the file size (%zu bytes)", src, hn, len);
    const char *hdr = (const char *)img + 8;
    *hlen = (size_t)hn;
    size_t bad = mega_utf8_check(hdr, *hlen);
    if (bad != *hlen) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu)", src, bad);
    if (memchr(hdr, 0, *hlen)) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header contains a NUL byte", src);
    if (hdr[0] != '{') MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header does not start with '{'", src);
    return MEGA_OK;
}

/* The header's JSON object; only whitespace may follow it (the format pads with spaces). */
static mega_status st_parse_json(const char *hdr, size_t hlen, const char *src, cJSON **out) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t at = (ep && ep >= hdr && ep <= hdr + hlen) ? (size_t)(ep - hdr) : 0;
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header is not valid JSON (near byte %zu)", src, at);
    }
    if (!end || end < hdr || end > hdr + hlen) end = hdr + hlen;
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s: unexpected data after the JSON header (byte %zu)", src, (size_t)(p - hdr));
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header is not a JSON object", src);
    }
    *out = root;
    return MEGA_OK;
}

/* The entries: __metadata__ (once) and the tensors, with their byte spans in spans[]. */
static mega_status st_parse_entries(mega_st_file *f, const cJSON *root, const unsigned char *data, uint64_t dsize,
                                    int nent, span *spans, const char *src) {
    int seen_meta = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!c->string) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: header entry without a name", src);
        if (strcmp(c->string, ST_METADATA_KEY) == 0) {
            if (seen_meta++) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: duplicate __metadata__", src);
            MEGA_TRY(parse_metadata(src, c, f));
            continue;
        }
        if (f->n >= nent) break; /* cannot happen: nent counts every child */
        mega_st_tensor *t = &f->t[f->n];
        span *sp = &spans[f->n];
        MEGA_TRY(parse_entry(src, c->string, c, dsize, t, sp));
        t->name = dup_str(c->string);
        if (!t->name) MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory reading the header", src);
        t->data = data + sp->begin;
        sp->idx = f->n;
        f->n++;
    }
    return MEGA_OK;
}

/* The name index (sorted), rejecting duplicate names. */
static mega_status st_index_names(mega_st_file *f, const char *src) {
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    name_ref *refs = malloc(((size_t)f->n + 1) * sizeof *refs);
    if (!f->by_name || !refs) {
        free(refs);
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory reading the header", src);
    }
    for (int i = 0; i < f->n; i++) {
        refs[i].name = f->t[i].name;
        refs[i].idx = i;
    }
    qsort(refs, (size_t)f->n, sizeof *refs, cmp_name_ref);
    mega_status st = MEGA_OK;
    for (int i = 0; i < f->n && !st; i++) {
        if (i && strcmp(refs[i - 1].name, refs[i].name) == 0)
            st = mega__error(MEGA_ERR_FORMAT, "%s: duplicate tensor name '%s'", src, refs[i].name);
        f->by_name[i] = refs[i].idx;
    }
    free(refs);
    return st;
}

/* The tensors must tile the data section: sorted by offsets, each begins where the previous one
 * ends, and the last one ends at the end of the file. */
static mega_status st_check_tiling(const mega_st_file *f, span *spans, uint64_t dsize, const char *src) {
    qsort(spans, (size_t)f->n, sizeof *spans, cmp_span);
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        const span *sp = &spans[i];
        if (sp->begin < pos) {
            const span *pv = &spans[i - 1];
            MEGA_FAIL(MEGA_ERR_FORMAT,
                      "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 "] and '%s' [%" PRIu64 ", %" PRIu64 "] overlap", src,
                      f->t[pv->idx].name, pv->begin, pv->end, f->t[sp->idx].name, sp->begin, sp->end);
        }
        if (sp->begin > pos)
            MEGA_FAIL(MEGA_ERR_FORMAT,
                      "%s: gap in the data section: bytes [%" PRIu64 ", %" PRIu64 ") before tensor '%s' belong to no tensor",
                      src, pos, sp->begin, f->t[sp->idx].name);
        pos = sp->end;
    }
    if (pos != dsize)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: data section has %" PRIu64 " bytes but the tensors cover only %" PRIu64, src,
                  dsize, pos);
    return MEGA_OK;
}

/* Validate the image already stored in f->image / f->len and build the tensor table. */
static mega_status st_parse(mega_st_file *f, const char *src) {
    const unsigned char *img = f->image;
    const size_t len = f->len;
    size_t hlen = 0;
    MEGA_TRY(st_check_header(img, len, src, &hlen));
    cJSON *root = NULL;
    MEGA_TRY(st_parse_json((const char *)img + 8, hlen, src, &root));
    const uint64_t dsize = (uint64_t)(len - 8 - hlen);
    int nent = cJSON_GetArraySize(root);
    if (nent < 0) nent = 0;
    f->t = calloc((size_t)nent + 1, sizeof *f->t);
    span *spans = calloc((size_t)nent + 1, sizeof *spans);
    mega_status st = (!f->t || !spans) ? mega__error(MEGA_ERR_OOM, "%s: out of memory reading the header", src) : MEGA_OK;
    if (!st) st = st_parse_entries(f, root, img + 8 + hlen, dsize, nent, spans, src);
    if (!st) st = st_index_names(f, src);
    if (!st) st = st_check_tiling(f, spans, dsize, src);
    free(spans);
    cJSON_Delete(root);
    return st;
}

/* Takes ownership of image (mega__calloc'ed). */
static mega_status st_finish_open(unsigned char *image, size_t len, const char *src,
                                  mega_st_file **out) {
    mega_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        mega__free(image);
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory", src);
    }
    f->image = image;
    f->len = len;
    mega_status st = st_parse(f, src);
    if (st != MEGA_OK) {
        mega_st_close(f);
        return st;
    }
    *out = f;
    return MEGA_OK;
}

mega_status mega_st_open_mem(const void *buf, size_t len, mega_st_file **out) {
    if (!out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_open_mem: out is NULL");
    *out = NULL;
    if (!buf && len) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_open_mem: buffer is NULL");
    unsigned char *img = mega__calloc(len ? len : 1, 1);
    if (!img) MEGA_FAIL(MEGA_ERR_OOM, "<memory>: out of memory copying %zu bytes", len);
    if (len) memcpy(img, buf, len);
    return st_finish_open(img, len, "<memory>", out);
}

/* Only regular files are read (open without blocking, then fstat: a FIFO named like a model
 * fails at once instead of waiting for a writer), and only when they fit the memory available. */
mega_status mega_st_open(const char *path, mega_st_file **out) {
    if (!out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_open: out is NULL");
    *out = NULL;
    if (!path || !*path) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_open: empty path");
    int fd;
    struct stat sb;
    int e = mega__open_nonblock(path, &fd, &sb);
    if (e) MEGA_FAIL(MEGA_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        MEGA_FAIL(MEGA_ERR_IO, "'%s' is not a regular file (%s)", path, mega__file_kind(sb.st_mode));
    }
    const uint64_t cap = mega__read_cap();
    if (sb.st_size < 0 || (uint64_t)sb.st_size > (uint64_t)SIZE_MAX - 64 || (uint64_t)sb.st_size > cap) {
        char a[32], b[32];
        close(fd);
        MEGA_FAIL(MEGA_ERR_IO, "%s: the file is %s, more than the %s of memory available to read it", path,
                  mega_fmt_bytes(a, sizeof a, (uint64_t)sb.st_size), mega_fmt_bytes(b, sizeof b, cap));
    }
    size_t len = (size_t)sb.st_size;
    unsigned char *img = mega__calloc(len ? len : 1, 1);
    if (!img) {
        close(fd);
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory reading %zu bytes", path, len);
    }
    size_t got = 0;
    int rd_err = 0;
    while (got < len) {
        ssize_t k = read(fd, img + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rd_err = errno ? errno : EIO;
        if (k <= 0) break;
        got += (size_t)k;
    }
    /* the file must not have grown or shrunk while reading */
    unsigned char extra;
    ssize_t more = 0;
    if (!rd_err && got == len) {
        do more = read(fd, &extra, 1);
        while (more < 0 && errno == EINTR);
    }
    close(fd);
    if (rd_err) {
        mega__free(img);
        MEGA_FAIL(MEGA_ERR_IO, "%s: read error: %s", path, strerror(rd_err));
    }
    if (got != len || more > 0) {
        mega__free(img);
        MEGA_FAIL(MEGA_ERR_IO, "%s: file changed size while reading (%zu of %zu bytes)", path,
                  got, len);
    }
    return st_finish_open(img, len, path, out);
}

/* ---------------------------------------------------------------------------------------------
 * conversions */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FFu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13); /* inf / nan */
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static mega_status check_read(const mega_st_tensor *t, const void *dst, size_t n,
                              const char *fn) {
    if (!t) MEGA_FAIL(MEGA_ERR_INVALID, "%s: tensor is NULL", fn);
    if (t->numel != n)
        MEGA_FAIL(MEGA_ERR_SHAPE, "%s: tensor '%s' has %zu elements, expected %zu", fn,
                  t->name ? t->name : "?", t->numel, n);
    if (n && (!dst || !t->data))
        MEGA_FAIL(MEGA_ERR_INVALID, "%s: NULL buffer for tensor '%s'", fn,
                  t->name ? t->name : "?");
    if ((int)t->dtype < 0 || (int)t->dtype >= ST_NDTYPES)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s: tensor '%s' has an invalid dtype", fn,
                  t->name ? t->name : "?");
    return MEGA_OK;
}

mega_status mega_st_read_real(const mega_st_tensor *t, mega_real *dst, size_t n) {
    MEGA_TRY(check_read(t, dst, n, "mega_st_read_real"));
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case MEGA_DT_F32:
        for (size_t i = 0; i < n; i++) dst[i] = (real)bits_to_float(load_le32(p + 4 * i));
        break;
    case MEGA_DT_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t u = load_le64(p + 8 * i);
            double d;
            memcpy(&d, &u, sizeof d);
            dst[i] = (real)d;
        }
        break;
    case MEGA_DT_F16:
        for (size_t i = 0; i < n; i++) dst[i] = (real)half_to_float(load_le16(p + 2 * i));
        break;
    case MEGA_DT_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = (real)bits_to_float((uint32_t)load_le16(p + 2 * i) << 16);
        break;
    case MEGA_DT_I64:
        for (size_t i = 0; i < n; i++) dst[i] = (real)(int64_t)load_le64(p + 8 * i);
        break;
    case MEGA_DT_I32:
        for (size_t i = 0; i < n; i++) dst[i] = (real)(int32_t)load_le32(p + 4 * i);
        break;
    case MEGA_DT_I16:
        for (size_t i = 0; i < n; i++) dst[i] = (real)(int16_t)load_le16(p + 2 * i);
        break;
    case MEGA_DT_I8:
        for (size_t i = 0; i < n; i++) dst[i] = (real)(int8_t)p[i];
        break;
    case MEGA_DT_U8:
        for (size_t i = 0; i < n; i++) dst[i] = (real)p[i];
        break;
    case MEGA_DT_BOOL:
        for (size_t i = 0; i < n; i++) dst[i] = p[i] ? (real)1 : (real)0;
        break;
    }
    return MEGA_OK;
}

mega_status mega_st_read_i32(const mega_st_tensor *t, int32_t *dst, size_t n) {
    MEGA_TRY(check_read(t, dst, n, "mega_st_read_i32"));
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case MEGA_DT_F32:
    case MEGA_DT_F64:
    case MEGA_DT_F16:
    case MEGA_DT_BF16:
        MEGA_FAIL(MEGA_ERR_SHAPE, "mega_st_read_i32: tensor '%s' has float dtype %s", t->name,
                  k_dtype_names[t->dtype]);
    case MEGA_DT_I64:
        for (size_t i = 0; i < n; i++) {
            int64_t v = (int64_t)load_le64(p + 8 * i);
            if (v < INT32_MIN || v > INT32_MAX)
                MEGA_FAIL(MEGA_ERR_SHAPE,
                          "mega_st_read_i32: tensor '%s' element %zu = %" PRId64
                          " does not fit in int32", t->name, i, v);
            dst[i] = (int32_t)v;
        }
        break;
    case MEGA_DT_I32:
        for (size_t i = 0; i < n; i++) dst[i] = (int32_t)load_le32(p + 4 * i);
        break;
    case MEGA_DT_I16:
        for (size_t i = 0; i < n; i++) dst[i] = (int16_t)load_le16(p + 2 * i);
        break;
    case MEGA_DT_I8:
        for (size_t i = 0; i < n; i++) dst[i] = (int8_t)p[i];
        break;
    case MEGA_DT_U8:
        for (size_t i = 0; i < n; i++) dst[i] = p[i];
        break;
    case MEGA_DT_BOOL:
        for (size_t i = 0; i < n; i++) dst[i] = p[i] ? 1 : 0;
        break;
    }
    return MEGA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * writer */
typedef struct {
    char *name;
    mega_dtype dtype;
    int ndim;
    int64_t shape[MEGA_ST_MAX_DIMS];
    size_t nbytes;
    unsigned char *data; /* private little-endian copy */
} wr_tensor;

struct mega_st_writer {
    int n, cap;
    wr_tensor *t;
    int nmeta, mcap;
    char **mkeys, **mvals;
};

mega_st_writer *mega_st_writer_new(void) { return calloc(1, sizeof(mega_st_writer)); }

void mega_st_writer_free(mega_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->mkeys[i]);
        free(w->mvals[i]);
    }
    free(w->mkeys);
    free(w->mvals);
    free(w);
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

mega_status mega_st_writer_add(mega_st_writer *w, const char *name, mega_dtype dtype, int ndim,
                               const int64_t *shape, const void *data) {
    if (!w) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: writer is NULL");
    if (!name || !*name) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: empty tensor name");
    if (strcmp(name, ST_METADATA_KEY) == 0)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: '%s' is reserved", ST_METADATA_KEY);
    size_t nl = strlen(name);
    if (mega_utf8_check(name, nl) != nl)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: tensor name is not valid UTF-8");
    if ((int)dtype < 0 || (int)dtype >= ST_NDTYPES)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: tensor '%s' has invalid dtype %d", name,
                  (int)dtype);
    if (ndim < 0 || ndim > MEGA_ST_MAX_DIMS)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: tensor '%s' has %d dimensions (max %d)",
                  name, ndim, MEGA_ST_MAX_DIMS);
    if (ndim > 0 && !shape)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: tensor '%s' shape is NULL", name);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: tensor '%s' shape[%d] = %" PRId64
                      " is negative", name, i, shape[i]);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: duplicate tensor name '%s'", name);
    size_t es = k_dtype_sizes[dtype];
    int ovf;
    size_t numel = shape_numel(ndim, shape, es, &ovf);
    if (ovf)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: tensor '%s' is too large", name);
    size_t nbytes = numel * es;
    if (nbytes && !data)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_add: tensor '%s' data is NULL", name);

    wr_tensor *grown = mega__grow(w->t, &w->cap, w->n, sizeof *w->t, 16);
    if (!grown) MEGA_FAIL(MEGA_ERR_OOM, "mega_st_writer_add: out of memory");
    w->t = grown;
    wr_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = dup_str(name);
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        MEGA_FAIL(MEGA_ERR_OOM, "mega_st_writer_add: out of memory copying tensor '%s'", name);
    }
    if (nbytes) memcpy(t->data, data, nbytes);
    if (es > 1 && !host_is_little_endian()) /* store little-endian */
        for (size_t i = 0; i < numel; i++)
            for (size_t a = 0, b = es - 1; a < b; a++, b--) {
                unsigned char tmp = t->data[i * es + a];
                t->data[i * es + a] = t->data[i * es + b];
                t->data[i * es + b] = tmp;
            }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->nbytes = nbytes;
    w->n++;
    return MEGA_OK;
}

mega_status mega_st_writer_meta(mega_st_writer *w, const char *key, const char *value) {
    if (!w) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_meta: writer is NULL");
    if (!key || !value) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_meta: NULL key or value");
    size_t kl = strlen(key), vl = strlen(value);
    if (mega_utf8_check(key, kl) != kl ||
        mega_utf8_check(value, vl) != vl)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_meta: key or value is not valid UTF-8");
    char *v = dup_str(value);
    if (!v) MEGA_FAIL(MEGA_ERR_OOM, "mega_st_writer_meta: out of memory");
    for (int i = 0; i < w->nmeta; i++)
        if (strcmp(w->mkeys[i], key) == 0) { /* setting a key again replaces its value */
            free(w->mvals[i]);
            w->mvals[i] = v;
            return MEGA_OK;
        }
    int kcap = w->mcap;
    char **nk = mega__grow(w->mkeys, &kcap, w->nmeta, sizeof *w->mkeys, 8);
    if (nk) w->mkeys = nk;
    char **nv = nk ? mega__grow(w->mvals, &w->mcap, w->nmeta, sizeof *w->mvals, 8) : NULL;
    if (nv) w->mvals = nv;
    if (!nv) {
        free(v);
        MEGA_FAIL(MEGA_ERR_OOM, "mega_st_writer_meta: out of memory");
    }
    char *k = dup_str(key);
    if (!k) {
        free(v);
        MEGA_FAIL(MEGA_ERR_OOM, "mega_st_writer_meta: out of memory");
    }
    w->mkeys[w->nmeta] = k;
    w->mvals[w->nmeta] = v;
    w->nmeta++;
    return MEGA_OK;
}

/* add a raw JSON integer (exact for all int64, unlike cJSON's double formatting) */
static int json_add_int(cJSON *arr, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    cJSON *r = cJSON_CreateRaw(buf);
    if (!r) return 0;
    cJSON_AddItemToArray(arr, r);
    return 1;
}

/* Build the JSON header; returns a malloc'ed string or NULL (error recorded). */
static char *build_header(const mega_st_writer *w) {
    cJSON *root = cJSON_CreateObject();
    if (!root) goto oom;
    if (w->nmeta) {
        cJSON *m = cJSON_CreateObject();
        if (!m) goto oom;
        cJSON_AddItemToObject(root, ST_METADATA_KEY, m);
        for (int i = 0; i < w->nmeta; i++) {
            cJSON *s = cJSON_CreateString(w->mvals[i]);
            if (!s) goto oom;
            cJSON_AddItemToObject(m, w->mkeys[i], s);
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        const wr_tensor *t = &w->t[i];
        cJSON *e = cJSON_CreateObject();
        if (!e) goto oom;
        cJSON_AddItemToObject(root, t->name, e);
        cJSON *d = cJSON_CreateString(k_dtype_names[t->dtype]);
        if (!d) goto oom;
        cJSON_AddItemToObject(e, "dtype", d);
        cJSON *s = cJSON_CreateArray();
        if (!s) goto oom;
        cJSON_AddItemToObject(e, "shape", s);
        for (int k = 0; k < t->ndim; k++)
            if (!json_add_int(s, (uint64_t)t->shape[k])) goto oom;
        cJSON *o = cJSON_CreateArray();
        if (!o) goto oom;
        cJSON_AddItemToObject(e, "data_offsets", o);
        if (!json_add_int(o, off) || !json_add_int(o, off + t->nbytes)) goto oom;
        off += t->nbytes;
    }
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt) mega__error(MEGA_ERR_OOM, "mega_st_writer_write: out of memory building header");
    return txt;
oom:
    cJSON_Delete(root);
    mega__error(MEGA_ERR_OOM, "mega_st_writer_write: out of memory building header");
    return NULL;
}

mega_status mega_st_writer_write(mega_st_writer *w, const char *path) {
    if (!w) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_write: writer is NULL");
    if (!path || !*path) MEGA_FAIL(MEGA_ERR_INVALID, "mega_st_writer_write: empty path");
    char *hdr = build_header(w);
    if (!hdr) return MEGA_ERR_OOM;
    size_t hl = strlen(hdr);
    size_t hpad = (hl + 7) & ~(size_t)7; /* 8 + hpad is a multiple of 8: aligned data */
    size_t dsize = 0;
    for (int i = 0; i < w->n; i++) {
        if (w->t[i].nbytes > SIZE_MAX - 64 - hpad - dsize) {
            free(hdr);
            MEGA_FAIL(MEGA_ERR_INVALID, "%s: total tensor size overflows", path);
        }
        dsize += w->t[i].nbytes;
    }
    size_t total = 8 + hpad + dsize;
    unsigned char *buf = malloc(total);
    if (!buf) {
        free(hdr);
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory (%zu bytes)", path, total);
    }
    uint64_t hn = hpad;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hn >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, ' ', hpad - hl);
    free(hdr);
    size_t o = 8 + hpad;
    for (int i = 0; i < w->n; i++) {
        if (w->t[i].nbytes) memcpy(buf + o, w->t[i].data, w->t[i].nbytes);
        o += w->t[i].nbytes;
    }
    mega_status st = mega_write_file_atomic(path, buf, total);
    free(buf);
    return st;
}
