/* The line loaders: ListOps ("Source<TAB>Target"), byte-level text ("label<TAB>text"), text
 * pairs ("label<TAB>text1<TAB>text2", or the AAN "label<TAB>id1<TAB>id2<TAB>text1<TAB>text2")
 * and real-valued sequences ("label, x1, x2, ...").
 * Every malformed line is an error naming the file and line. */
#include "data/data.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <strings.h>
#include <sys/types.h>

/* a TSV file being read line by line */
typedef struct {
    const char *path;
    FILE *f;
    char *line;
    size_t cap;
    int lineno;
} tsv_reader;

static mega_status tsv_open(tsv_reader *r, const char *path, const char *what) {
    memset(r, 0, sizeof *r);
    r->path = path;
    MEGA_TRY(mega__data_given(path, what));
    return mega__data_open(path, what, &r->f);
}

static void tsv_close(tsv_reader *r) {
    free(r->line);
    if (r->f) fclose(r->f);
    memset(r, 0, sizeof *r);
}

/* the next line without its "\n" / "\r\n" in r->line: MEGA_OK and *n = its length, *n = -1 at the
 * end of the file, or an error */
static mega_status tsv_next(tsv_reader *r, long *n) {
    errno = 0;
    ssize_t k = getline(&r->line, &r->cap, r->f);
    *n = -1;
    if (k < 0) {
        if (ferror(r->f)) MEGA_FAIL(MEGA_ERR_IO, "%s: read error: %s", r->path, strerror(errno ? errno : EIO));
        return MEGA_OK;
    }
    if (k > 0x7ffffff0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: a line is longer than 2 GB", r->path);
    if (k && r->line[k - 1] == '\n') k--;
    if (k && r->line[k - 1] == '\r') k--;
    r->lineno++;
    *n = (long)k;
    return MEGA_OK;
}

/* split on TABs: up to maxf fields; returns the count (may exceed maxf: the rest is not stored) */
static int tsv_split(char *s, size_t n, char **f, size_t *fl, int maxf) {
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

static void tsv_trim(char **s, size_t *n) {
    while (*n && ((*s)[0] == ' ' || (*s)[0] == '\t')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
}

/* ---------------------------------------------------------------------------------------------
 * ListOps */

/* the tokens of one Source field into the pool: parentheses dropped unless kept, cut at max_len */
static mega_status listops_tokens(mega__builder *b, const char *s, const char *e, int *len, int *cut) {
    mega_dataset *d = b->d;
    const mega_data_opts *o = b->o;
    *len = 0, *cut = 0;
    for (int id; (id = mega__listops_next(&s, e, o->keep_parens)) >= 0;) {
        if (o->max_len > 0 && *len >= o->max_len) {
            *cut = 1;
            continue;
        }
        if (id == MEGA_LISTOPS_UNK) d->n_unk++;
        MEGA_TRY(mega__builder_reserve(b, 1));
        d->pool[d->pool_n++] = (uint16_t)id;
        (*len)++;
    }
    return MEGA_OK;
}

/* one "<tokens><TAB><digit>" line (n bytes in r->line) as the next example */
static mega_status listops_line(mega__builder *b, const tsv_reader *r, long n) {
    mega_dataset *d = b->d;
    char *fld[2], buf[64];
    size_t fl[2];
    int nf = tsv_split(r->line, (size_t)n, fld, fl, 2);
    if (nf != 2)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: expected 2 tab-separated fields (Source, Target), found %d", r->path, r->lineno, nf);
    char *t = fld[1];
    size_t tl = fl[1];
    tsv_trim(&t, &tl);
    if (!(tl == 1 && *t >= '0' && *t <= '9'))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: the Target must be a digit 0-9, found '%s'", r->path, r->lineno,
                  mega__data_show(t, tl, buf, 40));
    MEGA_TRY(mega__builder_grow(b, 0));
    int li, len, cut;
    MEGA_TRY(mega__builder_label(b, t, tl, r->lineno, &li));
    size_t off = d->pool_n;
    MEGA_TRY(listops_tokens(b, fld[0], fld[0] + fl[0], &len, &cut));
    if (len == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: empty Source", r->path, r->lineno);
    d->n_truncated += cut;
    d->n_tokens += len;
    b->off[d->n] = off, d->len[d->n] = len, d->line[d->n] = r->lineno, b->ex_lab[d->n] = li;
    d->n++;
    return MEGA_OK;
}

static mega_status listops_read(mega__builder *b, tsv_reader *r) {
    char buf[64];
    long n;
    int header = 0;
    for (;;) {
        MEGA_TRY(tsv_next(r, &n));
        if (n < 0) break;
        if (!header) {
            if (n != 13 || memcmp(r->line, "Source\tTarget", 13))
                MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: expected the header line 'Source<TAB>Target', found '%s'", r->path, r->lineno,
                          mega__data_show(r->line, (size_t)n, buf, 40));
            header = 1;
            continue;
        }
        if (n == 0) continue;
        if (b->o->max_examples > 0 && b->d->n >= b->o->max_examples) break;
        MEGA_TRY(listops_line(b, r, n));
    }
    if (!header) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: empty file (expected the header line 'Source<TAB>Target')", r->path);
    static char *digits[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
    const mega_classes ten = {10, digits};
    return mega__builder_finish(b, &ten);
}

/* ---------------------------------------------------------------------------------------------
 * text and pairs */
static int is_header(const char *s, size_t n) { return n >= 5 && !strncasecmp(s, "label", 5) && (n == 5 || s[5] == '\t'); }

/* one "label<TAB>text" (pairs: "label<TAB>text1<TAB>text2" or the 5-field AAN layout) line */
static mega_status text_line(mega__builder *b, const tsv_reader *r, long n, int pairs) {
    mega_dataset *d = b->d;
    char *fld[5];
    size_t fl[5];
    int nf = tsv_split(r->line, (size_t)n, fld, fl, 5);
    if (!pairs && nf != 2)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: expected 2 tab-separated fields (label, text), found %d", r->path, r->lineno, nf);
    if (pairs && nf != 3 && nf != 5)
        MEGA_FAIL(MEGA_ERR_FORMAT,
                  "%s:%d: expected 3 tab-separated fields (label, text1, text2) or 5 (label, id1, id2, text1, text2), found %d",
                  r->path, r->lineno, nf);
    int t1 = pairs && nf == 5 ? 3 : 1, t2 = nf == 5 ? 4 : 2;
    char *lab = fld[0];
    size_t ll = fl[0];
    tsv_trim(&lab, &ll);
    if (fl[t1] == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: empty text%s", r->path, r->lineno, pairs ? "1" : "");
    if (pairs && fl[t2] == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: empty text2", r->path, r->lineno);
    MEGA_TRY(mega__builder_grow(b, pairs));
    int li;
    MEGA_TRY(mega__builder_label(b, lab, ll, r->lineno, &li));
    MEGA_TRY(mega__builder_put_bytes(b, fld[t1], fl[t1], &b->off[d->n], &d->len[d->n]));
    if (pairs) MEGA_TRY(mega__builder_put_bytes(b, fld[t2], fl[t2], &b->off2[d->n], &d->len2[d->n]));
    d->line[d->n] = r->lineno, b->ex_lab[d->n] = li;
    d->n++;
    return MEGA_OK;
}

static mega_status text_read(mega__builder *b, tsv_reader *r, int pairs) {
    long n;
    for (;;) {
        MEGA_TRY(tsv_next(r, &n));
        if (n < 0) break;
        if (n == 0) continue;
        if (r->lineno == 1 && is_header(r->line, (size_t)n)) continue;
        if (b->o->max_examples > 0 && b->d->n >= b->o->max_examples) break;
        MEGA_TRY(text_line(b, r, n, pairs));
    }
    return mega__builder_finish(b, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * real-valued sequences: "label, x1, x2, ..." (commas, spaces or TABs) */
static int real_sep(char c) { return c == ',' || c == ' ' || c == '\t'; }

/* the next field of s[*i..n) NUL-terminated in place (its start), NULL at the end */
static char *real_field(char *s, size_t n, size_t *i) {
    while (*i < n && real_sep(s[*i])) (*i)++;
    if (*i >= n) return NULL;
    char *f = s + *i;
    while (*i < n && !real_sep(s[*i])) (*i)++;
    if (*i < n) s[(*i)++] = 0;
    return f;
}

/* one value of a line: a whole finite number that fits a float */
static mega_status real_value(const tsv_reader *r, const char *f, size_t k, float *x) {
    char buf[40];
    char *end;
    errno = 0;
    const double v = strtod(f, &end);
    if (end == f || *end)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: value %zu '%s' is not a number", r->path, r->lineno, k,
                  mega__data_show(f, strlen(f), buf, sizeof buf));
    if (isnan(v) || (isinf(v) && errno != ERANGE)) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: value %zu '%s' is not finite", r->path, r->lineno, k, f);
    if (fabs(v) > FLT_MAX)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: value %zu '%s' is beyond the float range", r->path, r->lineno, k,
                  mega__data_show(f, strlen(f), buf, sizeof buf));
    *x = (float)v;
    return MEGA_OK;
}

/* one line: the label, then the values (as many as the first example's, *width; 0 before it) */
static mega_status real_line(mega__builder *b, tsv_reader *r, long n, float **x, size_t *cap, int *width, int *first) {
    mega_dataset *d = b->d;
    size_t i = 0, k = 0;
    r->line[n] = 0;
    const char *lab = real_field(r->line, (size_t)n, &i);
    if (!lab) return MEGA_OK; /* only separators: an empty line */
    if (r->lineno == 1 && !strcasecmp(lab, "label")) return MEGA_OK;
    for (const char *f; (f = real_field(r->line, (size_t)n, &i)); k++) {
        if (k == *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            float *p = nc < ((size_t)1 << 40) ? realloc(*x, nc * sizeof *p) : NULL;
            if (!p) MEGA_FAIL(MEGA_ERR_OOM, "%s:%d: out of memory", r->path, r->lineno);
            *x = p, *cap = nc;
        }
        MEGA_TRY(real_value(r, f, k + 1, *x + k));
    }
    if (k == 0)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: no values after the label (expected: label, then values separated by commas or spaces)",
                  r->path, r->lineno);
    if (k > 0x7fffffff) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: more than 2^31 values", r->path, r->lineno);
    if (*width && (int)k != *width)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: %zu values, but the first example (line %d) has %d: every example needs as many",
                  r->path, r->lineno, k, *first, *width);
    if (!*width) *width = (int)k, *first = r->lineno;
    MEGA_TRY(mega__builder_grow(b, 0));
    int li;
    MEGA_TRY(mega__builder_label(b, lab, strlen(lab), r->lineno, &li));
    MEGA_TRY(mega__builder_put_reals(b, *x, k, &b->off[d->n], &d->len[d->n]));
    d->line[d->n] = r->lineno, b->ex_lab[d->n] = li;
    d->n++;
    return MEGA_OK;
}

static mega_status real_read(mega__builder *b, tsv_reader *r) {
    float *x = NULL;
    size_t cap = 0;
    int width = 0, first = 0;
    mega_status st = MEGA_OK;
    for (long n; st == MEGA_OK;) {
        st = tsv_next(r, &n);
        if (st != MEGA_OK || n < 0) break;
        if (b->o->max_examples > 0 && b->d->n >= b->o->max_examples) break;
        st = real_line(b, r, n, &x, &cap, &width, &first);
    }
    free(x);
    return st != MEGA_OK ? st : mega__builder_finish(b, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * the loaders */
typedef enum { TSV_LISTOPS, TSV_TEXT, TSV_PAIRS, TSV_REAL } tsv_kind;

/* the shared frame: options, builder, reader, cleanup on failure */
static mega_status tsv_load(const char *path, const mega_data_opts *o, mega_dataset *d, tsv_kind kind) {
    static const char *const what[] = {"ListOps", "text", "pairs", "real-valued"};
    mega_data_opts def;
    if (!o) memset(&def, 0, sizeof def), o = &def;
    mega__builder b;
    tsv_reader r;
    memset(&r, 0, sizeof r);
    mega_status st = mega__builder_init(&b, path, o, d);
    if (st == MEGA_OK) {
        d->vocab = kind == TSV_LISTOPS ? mega_vocab_listops(o->keep_parens) : mega_vocab_bytes();
        if (kind == TSV_REAL) /* no ids: the values are the inputs */
            memset(&d->vocab, 0, sizeof d->vocab), d->vocab.kind = MEGA_VOCAB_BYTES, d->vocab.pad = d->vocab.unk = -1,
                d->vocab.real = 1, d->vocab.std = 1;
        d->pairs = kind == TSV_PAIRS;
        st = tsv_open(&r, path, what[kind]);
    }
    if (st == MEGA_OK)
        st = kind == TSV_LISTOPS ? listops_read(&b, &r) : kind == TSV_REAL ? real_read(&b, &r) : text_read(&b, &r, kind == TSV_PAIRS);
    tsv_close(&r);
    mega__builder_free(&b);
    if (st != MEGA_OK) mega_dataset_free(d);
    return st;
}

mega_status mega_dataset_load_listops(const char *path, const mega_data_opts *o, mega_dataset *d) {
    return tsv_load(path, o, d, TSV_LISTOPS);
}
mega_status mega_dataset_load_text(const char *path, const mega_data_opts *o, mega_dataset *d) {
    return tsv_load(path, o, d, TSV_TEXT);
}
mega_status mega_dataset_load_pairs(const char *path, const mega_data_opts *o, mega_dataset *d) {
    return tsv_load(path, o, d, TSV_PAIRS);
}
mega_status mega_dataset_load_real(const char *path, const mega_data_opts *o, mega_dataset *d) {
    return tsv_load(path, o, d, TSV_REAL);
}
