/* FreeDict bilingual dictionaries in dictd format (X.dict.dz + X.index) and the rule that makes
 * one (source phrase, first translation) pair of an entry; `mega freedict` (tools/freedict.c)
 * writes the pairs as train/valid/test TSV. The format and the rule are documented in
 * include/mega_data.h and docs/freedict.md.
 *
 * The whole .dict is decompressed into memory (dictzip is gzip with an index of its chunks in
 * the header's extra field, so zlib reads it as plain gzip; 100 MB for the largest FreeDict
 * database, deu-eng). Every input is untrusted: index offsets are checked against the text, the
 * text of an entry must be valid UTF-8, and the bracket matching of the cleaning rule looks at
 * most FD_SPAN bytes ahead, so no line costs more than linear time. */
#include "data/data.h"

#include <errno.h>
#include <zlib.h>

/* where fd_clean_span removed something (a control byte, which the copy never keeps) */
#define FD_GAP '\x01'
/* a bracket that does not close within this many bytes is text */
#define FD_SPAN 4096
/* the largest uncompressed .dict read (dictd's offsets are 32-bit in practice) */
#define FD_MAX_DICT ((size_t)1 << 34)

typedef struct {
    const char *hw;
    uint64_t off, len;
    int line;
} fd_ent;

struct mega_dictd {
    char *text; /* the uncompressed .dict (+ a NUL byte) */
    size_t n;
    char *index; /* the index file, headwords NUL-terminated in place */
    fd_ent *ent;
    size_t count;
    char *index_path;
};

/* ---------------------------------------------------------------------------------------------
 * the files */

static int fd_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int mega_dictd_b64(const char *s, size_t n, uint64_t *v) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n < 1 || n > 10) return -1; /* 10 digits = 60 bits */
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = s[i] ? memchr(digits, s[i], 64) : NULL;
        if (!p) return -1;
        x = (x << 6) | (uint64_t)(p - digits);
    }
    *v = x;
    return 0;
}

int mega_dictd_is_meta(const char *hw) { return !strncmp(hw, "00-database", 11) || !strncmp(hw, "00database", 10); }

/* the whole (dictzip, gzip or plain) file (mega_data.h) */
mega_status mega_read_gzip(const char *path, const char *what, mega_bytes *bytes) {
    memset(bytes, 0, sizeof *bytes);
    FILE *f;
    MEGA_TRY(mega__data_open(path, what, &f)); /* the messages for missing / directory */
    fclose(f);
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        if (errno == ENOMEM || !errno) MEGA_FAIL(MEGA_ERR_OOM, "%s file '%s': out of memory", what, path);
        MEGA_FAIL(MEGA_ERR_IO, "%s file '%s': %s", what, path, strerror(errno));
    }
    gzbuffer(gz, 1 << 17);
    size_t cap = (size_t)1 << 22, len = 0;
    char *b = malloc(cap + 1);
    mega_status st = MEGA_OK;
    while (b) {
        if (len == cap) {
            char *nb = cap < FD_MAX_DICT ? realloc(b, cap * 2 + 1) : NULL;
            if (!nb) {
                if (cap >= FD_MAX_DICT) st = mega__error(MEGA_ERR_FORMAT, "%s file '%s': larger than %zu bytes uncompressed", what, path, FD_MAX_DICT);
                free(b);
                b = NULL;
                break;
            }
            b = nb, cap *= 2;
        }
        size_t want = MEGA_MIN(cap - len, (size_t)1 << 30);
        int r = gzread(gz, b + len, (unsigned)want);
        if (r <= 0) break;
        len += (size_t)r;
    }
    if (!b) {
        gzclose(gz);
        if (st == MEGA_OK) st = mega__error(MEGA_ERR_OOM, "%s file '%s': out of memory", what, path);
        return st;
    }
    int errnum = Z_OK;
    const char *msg = gzerror(gz, &errnum);
    int direct = gzdirect(gz);
    size_t pl = strlen(path); /* zlib's message starts with the path */
    if (msg && !strncmp(msg, path, pl) && msg[pl] == ':' && msg[pl + 1] == ' ') msg += pl + 2;
    if (errnum != Z_OK) {
        if (errnum == Z_MEM_ERROR) st = mega__error(MEGA_ERR_OOM, "%s file '%s': out of memory", what, path);
        else if (errnum == Z_ERRNO) st = mega__error(MEGA_ERR_IO, "%s file '%s': read error: %s", what, path, strerror(errno));
        else st = mega__error(MEGA_ERR_FORMAT, "%s file '%s': corrupt compressed data (%s)", what, path, msg ? msg : "zlib error");
    } else if (direct && (fd_ends_with(path, ".dz") || fd_ends_with(path, ".gz")))
        st = mega__error(MEGA_ERR_FORMAT, "%s file '%s' is not gzip (dictzip) data", what, path);
    else if (len == 0)
        st = mega__error(MEGA_ERR_FORMAT, "%s file '%s' is empty", what, path);
    gzclose(gz);
    if (st != MEGA_OK) {
        free(b);
        return st;
    }
    b[len] = 0;
    bytes->data = (uint8_t *)b, bytes->n = len;
    return MEGA_OK;
}

/* parse the index in place: one entry per non-empty line "headword<TAB>offset<TAB>length" (the
 * last two TABs delimit the numbers; a "\r" before the "\n" is ignored) */
static mega_status fd_parse_index(mega_dictd *d, size_t n) {
    const char *path = d->index_path;
    size_t lines = 0;
    for (size_t i = 0; i < n; i++) lines += d->index[i] == '\n';
    d->ent = malloc((lines + 1) * sizeof *d->ent);
    if (!d->ent) MEGA_FAIL(MEGA_ERR_OOM, "index file '%s': out of memory", path);
    char *s = d->index, *end = d->index + n;
    int line = 0;
    while (s < end) {
        char *e = memchr(s, '\n', (size_t)(end - s));
        if (!e) e = end;
        line++;
        char *le = e;
        if (le > s && le[-1] == '\r') le--;
        if (le > s) {
            char ex[64];
            char *t2 = NULL, *t1 = NULL;
            for (char *q = le; q > s; q--)
                if (q[-1] == '\t') {
                    if (!t2) t2 = q - 1;
                    else {
                        t1 = q - 1;
                        break;
                    }
                }
            if (!t1)
                MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: expected headword<TAB>offset<TAB>length, got '%s'", path, line,
                          mega__data_show(s, (size_t)(le - s), ex, sizeof ex));
            fd_ent *en = &d->ent[d->count];
            if (mega_dictd_b64(t1 + 1, (size_t)(t2 - t1 - 1), &en->off) || mega_dictd_b64(t2 + 1, (size_t)(le - t2 - 1), &en->len))
                MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: bad base64 offset or length '%s'", path, line,
                          mega__data_show(t1 + 1, (size_t)(le - t1 - 1), ex, sizeof ex));
            *t1 = 0;
            en->hw = s, en->line = line;
            d->count++;
        }
        s = e + 1;
    }
    if (!d->count) MEGA_FAIL(MEGA_ERR_FORMAT, "index file '%s' has no entries", path);
    return MEGA_OK;
}

mega_status mega_dictd_open(const char *dict_path, const char *index_path, mega_dictd **out) {
    *out = NULL;
    MEGA_TRY(mega__data_given(dict_path, "dictionary"));
    FILE *f; /* a missing dictionary is named before its index */
    MEGA_TRY(mega__data_open(dict_path, "dictionary", &f));
    fclose(f);
    mega_dictd *d = calloc(1, sizeof *d);
    if (!d) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    if (index_path && *index_path) d->index_path = strdup(index_path);
    else {
        size_t n = strlen(dict_path), k = fd_ends_with(dict_path, ".dict.dz") ? 8 : fd_ends_with(dict_path, ".dict") ? 5 : 0;
        if (!k) {
            free(d);
            MEGA_FAIL(MEGA_ERR_INVALID, "dictionary '%s': expected a .dict.dz or .dict file (its index is the .index next to it)", dict_path);
        }
        d->index_path = malloc(n - k + 7);
        if (d->index_path) memcpy(d->index_path, dict_path, n - k), memcpy(d->index_path + n - k, ".index", 7);
    }
    if (!d->index_path) {
        free(d);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    /* the index before the (slow) decompression */
    uint8_t *ib = NULL;
    size_t in = 0;
    mega_status st = mega__data_read_all(d->index_path, "index", &ib, &in);
    d->index = (char *)ib;
    if (st == MEGA_OK) st = fd_parse_index(d, in);
    mega_bytes text;
    if (st == MEGA_OK) st = mega_read_gzip(dict_path, "dictionary", &text);
    if (st == MEGA_OK) d->text = (char *)text.data, d->n = text.n;
    if (st != MEGA_OK) {
        mega_dictd_free(d);
        return st;
    }
    *out = d;
    return MEGA_OK;
}

void mega_dictd_free(mega_dictd *d) {
    if (!d) return;
    free(d->text);
    free(d->index);
    free(d->ent);
    free(d->index_path);
    free(d);
}

size_t mega_dictd_count(const mega_dictd *d) { return d->count; }
size_t mega_dictd_size(const mega_dictd *d) { return d->n; }

static int fd_in_range(const mega_dictd *d, const fd_ent *en) { return en->off <= d->n && en->len <= d->n - en->off; }

mega_status mega_dictd_get(const mega_dictd *d, size_t i, mega_dictd_entry *e) {
    memset(e, 0, sizeof *e);
    if (i >= d->count) MEGA_FAIL(MEGA_ERR_INVALID, "mega_dictd_get: entry %zu of %zu", i, d->count);
    const fd_ent *en = &d->ent[i];
    e->headword = en->hw, e->offset = en->off, e->line = en->line;
    if (!fd_in_range(d, en))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: entry at offset %llu, length %llu lies outside the dictionary (%zu bytes)",
                  d->index_path, en->line, (unsigned long long)en->off, (unsigned long long)en->len, d->n);
    e->text = d->text + en->off, e->len = (size_t)en->len;
    return MEGA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * the cleaning rule */

/* what may follow a label or a pronunciation: the end, a space or a separator */
static int fd_after(const char *s, size_t j, size_t n) { return j >= n || s[j] == ' ' || s[j] == ',' || s[j] == ';'; }

/* just past the bracket closing the one at s[i] (nesting counted), or 0 when it does not close
 * within the line and FD_SPAN bytes */
static size_t fd_close(const char *s, size_t i, size_t n) {
    const char open = s[i], close = open == '<' ? '>' : open == '[' ? ']' : open == '{' ? '}' : ')';
    const size_t lim = n - i > FD_SPAN ? i + FD_SPAN : n;
    int depth = 0;
    for (size_t j = i; j < lim; j++) {
        if (s[j] == open) depth++;
        else if (s[j] == close && --depth == 0) return j + 1;
    }
    return 0;
}

/* A pronunciation "/.../" starting at s[i]: '/' at the start or after a space, then no space,
 * up to the next '/', which follows no space and is followed by the end, a space, ',' or ';'.
 * Just past it, or 0. ("and/or", "a / b" and "Niveau/Würde" are text.) */
static size_t fd_pron(const char *s, size_t i, size_t n) {
    if (s[i] != '/' || (i > 0 && s[i - 1] != ' ') || i + 1 >= n || s[i + 1] == ' ' || s[i + 1] == '/') return 0;
    const size_t lim = n - i > FD_SPAN ? i + FD_SPAN : n;
    const char *e = memchr(s + i + 1, '/', lim - i - 1);
    if (!e) return 0;
    size_t j = (size_t)(e - s);
    return s[j - 1] != ' ' && fd_after(s, j + 1, n) ? j + 1 : 0;
}

/* Copy s[0..n) to out without labels: grammar "<...>", "[...]", "{...}", a "(...)" that stands
 * alone (after the start or a space, before the end, a space, ',' or ';') and pronunciations
 * "/.../", each replaced by a space, which is dropped before , ; . ! ? or : ("Chill (out), man!"
 * -> "Chill, man!"); control bytes become spaces, runs of spaces one space, and spaces, ',' and
 * ';' are trimmed at both ends. With glue (a translation), text glued to the end
 * of a grammar tag ("dollar sign <n>$": an abbreviation or symbol the dictionary prints after
 * the translation) ends the copy there and sets *glue. Returns the length; out is NUL-terminated
 * and needs n + 1 bytes. */
static size_t fd_clean_span(const char *s, size_t n, char *out, int *glue) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const char c = s[i];
        size_t k = 0;
        if (c == '<' || c == '[' || c == '{') k = fd_close(s, i, n);
        else if (c == '(' && (i == 0 || s[i - 1] == ' ')) {
            k = fd_close(s, i, n);
            if (k && !fd_after(s, k, n)) k = 0;
        } else if (c == '/')
            k = fd_pron(s, i, n);
        if (k) {
            out[o++] = FD_GAP;
            if (c == '<' && glue && !fd_after(s, k, n)) {
                *glue = 1;
                break;
            }
            i = k;
            continue;
        }
        out[o++] = ((unsigned char)c < 0x20 || c == 0x7f) ? ' ' : c;
        i++;
    }
    /* collapse (a gap before punctuation goes) and trim */
    size_t w = 0;
    for (size_t r = 0; r < o; r++) {
        if (out[r] == FD_GAP) {
            size_t q = r + 1;
            while (q < o && (out[q] == ' ' || out[q] == FD_GAP)) q++;
            if (q < o && strchr(",;.!?:", out[q])) { /* with the space before it */
                if (w && out[w - 1] == ' ') w--;
                r = q - 1;
                continue;
            }
            out[r] = ' ';
        }
        if (out[r] == ' ' && (w == 0 || out[w - 1] == ' ')) continue;
        out[w++] = out[r];
    }
    size_t b = 0;
    while (b < w && (out[b] == ' ' || out[b] == ',' || out[b] == ';')) b++;
    while (w > b && (out[w - 1] == ' ' || out[w - 1] == ',' || out[w - 1] == ';')) w--;
    if (b) memmove(out, out + b, w - b);
    out[w - b] = 0;
    return w - b;
}

/* whether s[0..j) ends a sentence: '.', '!', '?' or '…' (U+2026) */
static int fd_sentence_end(const char *s, size_t j) {
    if (j >= 1 && (s[j - 1] == '.' || s[j - 1] == '!' || s[j - 1] == '?')) return 1;
    return j >= 3 && !memcmp(s + j - 3, "\xe2\x80\xa6", 3);
}

/* whether the alternative ending at s[e] (e < n, at its separator) is followed by a
 * pronunciation: then it ends in an abbreviation ("patternFAP,  /fæp/", "please turn overPTO,
 * /.../ p.t.o.,  /.../") */
static int fd_pron_follows(const char *s, size_t e, size_t n) {
    size_t j = e + 1;
    while (j < n && s[j] == ' ') j++;
    return j < n && fd_pron(s, j, n);
}

/* The end of the alternative starting at s[i]: the next ", " or "; " outside brackets, or n. With
 * sentence set (the source is a sentence), only a separator that follows the end of a sentence
 * or a grammar tag or label, or precedes a bare pronunciation, counts: "I think, therefore I
 * am." is one translation; "Hello! <int>, Hi! <int>" and "made redundant [Br.] , laid off" are
 * two. */
static size_t fd_alt_end(const char *s, size_t i, size_t n, int sentence) {
    size_t last = i; /* just past the last byte of text, outside brackets */
    int label = 0;   /* a tag or label came after it */
    for (size_t j = i; j < n; j++) {
        const char c = s[j];
        if (c == '<' || c == '[' || c == '{' || c == '(') {
            size_t k = fd_close(s, j, n);
            if (k) {
                if (c == '(') last = k, label = 0;
                else label = 1;
                j = k - 1;
                continue;
            }
        }
        if ((c == ',' || c == ';') && j + 1 < n && s[j + 1] == ' ' &&
            (!sentence || label || fd_sentence_end(s, last) || fd_pron_follows(s, j, n)))
            return j;
        if (c != ' ') last = j + 1, label = 0;
    }
    return n;
}

/* The first translation on one body line s[0..n): an optional sense number "N." is skipped, the
 * line is cut into alternatives (fd_alt_end), and the first that is not empty once cleaned is
 * the translation. When the alternative after it is a bare pronunciation, an abbreviation ends
 * it: the translation is what precedes its first grammar tag or label ("vehicle registration
 * number <n> [Br.] VRN,  /.../"), or, with none to separate them ("patternFAP,  /fæp/"),
 * MEGA_FREEDICT_GLUED. No alternative left: MEGA_FREEDICT_NO_TARGET (the caller tries the next
 * line). */
static mega_freedict_reason fd_target_line(const char *s, size_t n, int sentence, char *out) {
    size_t i = 0;
    while (i < n && s[i] == ' ') i++;
    size_t d = i;
    while (d < n && s[d] >= '0' && s[d] <= '9') d++;
    if (d > i && d < n && s[d] == '.' && (d + 1 == n || s[d + 1] == ' ')) i = d + 1;
    while (i <= n) {
        size_t e = fd_alt_end(s, i, n, sentence);
        int glue = 0;
        if (fd_clean_span(s + i, e - i, out, &glue)) {
            if (glue || e == n || !fd_pron_follows(s, e, n)) return MEGA_FREEDICT_KEPT;
            for (size_t j = i; j < e; j++) /* the first tag or label */
                if ((s[j] == '<' || s[j] == '[') && fd_close(s, j, e)) {
                    if (fd_clean_span(s + i, j - i, out, NULL)) return MEGA_FREEDICT_KEPT;
                    break;
                }
            return MEGA_FREEDICT_GLUED;
        }
        i = e + 2;
    }
    out[0] = 0;
    return MEGA_FREEDICT_NO_TARGET;
}

/* an indented "Word:" line (Note:, Synonym:, Synonyms:, see:, ...): not a translation */
static int fd_meta_line(const char *s, size_t n) {
    size_t i = 0;
    while (i < n && s[i] == ' ') i++;
    if (i == 0) return 0;
    size_t j = i;
    while (j < n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z'))) j++;
    return j > i && j < n && s[j] == ':';
}

mega_freedict_reason mega_freedict_clean(const char *text, size_t len, char *src, char *tgt) {
    src[0] = tgt[0] = 0;
    if (mega_utf8_check(text, len) < len) return MEGA_FREEDICT_BAD_UTF8;
    const char *p = text, *end = text + len;
    /* the headword line: the first that is not blank */
    const char *h = NULL, *he = NULL;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        const char *q = p;
        while (q < e && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        p = e < end ? e + 1 : end;
        if (q < e) {
            h = q, he = e;
            break;
        }
    }
    if (!h) return MEGA_FREEDICT_NO_SOURCE;
    /* the source: what precedes the first pronunciation (all of the line if it has none) */
    size_t hn = (size_t)(he - h), cut = hn;
    for (size_t i = 0; i < hn; i++)
        if (h[i] == '/' && fd_pron(h, i, hn)) {
            cut = i;
            break;
        }
    size_t sn = fd_clean_span(h, cut, src, NULL);
    if (!sn) return MEGA_FREEDICT_NO_SOURCE;
    /* a sentence: several words, not starting with a lower-case ASCII letter, ending in . ! or ?
     * ("Stern …", "… zwar …" are fragments) */
    const int sentence = strchr(src, ' ') && !(src[0] >= 'a' && src[0] <= 'z') && strchr(".!?", src[sn - 1]);
    /* the target: the first body line that gives a translation */
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        const char *line = p;
        size_t n = (size_t)(e - p);
        p = e < end ? e + 1 : end;
        size_t i = 0;
        while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) i++;
        /* blank, an (indented) example, a note */
        if (i == n || (i > 0 && line[i] == '"') || fd_meta_line(line, n)) continue;
        mega_freedict_reason r = fd_target_line(line, n, sentence, tgt);
        if (r != MEGA_FREEDICT_NO_TARGET) return r;
    }
    return MEGA_FREEDICT_NO_TARGET;
}

const char *mega_freedict_reason_name(int r) {
    static const char *const names[MEGA_FREEDICT_NREASONS] = {"kept",      "bad-utf8",  "no-source", "no-target", "glued-abbreviation",
                                                             "bad-offset", "too-long", "identical", "duplicate"};
    return r >= 0 && r < MEGA_FREEDICT_NREASONS ? names[r] : "?";
}

/* ---------------------------------------------------------------------------------------------
 * all pairs of a dictionary */

static int fd_cmp_ent(const void *a, const void *b) {
    const fd_ent *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

typedef struct {
    const char *s, *t;
} fd_pair;

static int fd_cmp_pair(const void *a, const void *b) {
    const fd_pair *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : strcmp(x->t, y->t);
}

void mega_freedict_pairs_free(mega_freedict_pairs *p) {
    if (!p) return;
    free(p->src);
    free(p->tgt);
    free(p->pool);
    memset(p, 0, sizeof *p);
}

mega_status mega_freedict_pairs_from(const mega_dictd *d, const mega_freedict_opts *opts, mega_freedict_pairs *p,
                                     mega_freedict_stats *stats) {
    memset(p, 0, sizeof *p);
    mega_freedict_opts o = {0, 0};
    if (opts) o = *opts;
    if (o.max_len < 0) MEGA_FAIL(MEGA_ERR_INVALID, "freedict: max_len %d is negative", o.max_len);
    mega_freedict_stats st;
    memset(&st, 0, sizeof st);
    st.index_lines = d->count;
    /* the distinct entries, in text order (index lines pointing at one text count once) */
    fd_ent *ids = malloc((d->count + 1) * sizeof *ids);
    size_t ne = 0, maxlen = 0;
    if (!ids) MEGA_FAIL(MEGA_ERR_OOM, "freedict: out of memory");
    for (size_t i = 0; i < d->count; i++) {
        if (mega_dictd_is_meta(d->ent[i].hw)) st.meta++;
        else ids[ne++] = d->ent[i];
    }
    qsort(ids, ne, sizeof *ids, fd_cmp_ent);
    size_t u = 0;
    for (size_t i = 0; i < ne; i++) {
        const fd_ent *a = &ids[i];
        if (u && a->off == ids[u - 1].off && a->len == ids[u - 1].len) continue;
        ids[u++] = *a;
        if (fd_in_range(d, a) && a->len > maxlen) maxlen = (size_t)a->len;
    }
    ne = u;
    st.entries = ne;
    /* clean every entry; the pool holds "source\0target\0" per pair */
    char *src = malloc(maxlen + 1), *tgt = malloc(maxlen + 1), *pool = NULL;
    size_t *poff = NULL, npairs = 0, pcap = 0, pool_n = 0, pool_cap = 0;
    mega_status rc = MEGA_OK;
    if (!src || !tgt) rc = mega__error(MEGA_ERR_OOM, "freedict: out of memory");
    for (size_t i = 0; i < ne && rc == MEGA_OK; i++) {
        const fd_ent *a = &ids[i];
        if (!fd_in_range(d, a)) {
            st.dropped[MEGA_FREEDICT_BAD_OFFSET]++;
            continue;
        }
        mega_freedict_reason r = mega_freedict_clean(d->text + a->off, (size_t)a->len, src, tgt);
        size_t ls = strlen(src), lt = strlen(tgt);
        if (r == MEGA_FREEDICT_KEPT && o.max_len && (ls > (size_t)o.max_len || lt > (size_t)o.max_len)) r = MEGA_FREEDICT_TOO_LONG;
        if (r == MEGA_FREEDICT_KEPT && o.drop_identical && !strcmp(src, tgt)) r = MEGA_FREEDICT_IDENTICAL;
        if (r != MEGA_FREEDICT_KEPT) {
            st.dropped[r]++;
            continue;
        }
        if (npairs == pcap) {
            size_t nc = pcap ? pcap * 2 : 1024;
            size_t *g = realloc(poff, nc * sizeof *poff);
            if (!g) {
                rc = mega__error(MEGA_ERR_OOM, "freedict: out of memory");
                break;
            }
            poff = g, pcap = nc;
        }
        if (pool_n + ls + lt + 2 > pool_cap) {
            size_t nc = MEGA_MAX(pool_cap * 2, pool_n + ls + lt + 2 + ((size_t)1 << 20));
            char *g = realloc(pool, nc);
            if (!g) {
                rc = mega__error(MEGA_ERR_OOM, "freedict: out of memory");
                break;
            }
            pool = g, pool_cap = nc;
        }
        poff[npairs++] = pool_n;
        memcpy(pool + pool_n, src, ls + 1), pool_n += ls + 1;
        memcpy(pool + pool_n, tgt, lt + 1), pool_n += lt + 1;
    }
    free(ids);
    free(src);
    free(tgt);
    /* sort, drop exact duplicates */
    fd_pair *pr = rc == MEGA_OK ? malloc((npairs + 1) * sizeof *pr) : NULL;
    if (rc == MEGA_OK && !pr) rc = mega__error(MEGA_ERR_OOM, "freedict: out of memory");
    if (rc == MEGA_OK) {
        for (size_t i = 0; i < npairs; i++) pr[i].s = pool + poff[i], pr[i].t = pool + poff[i] + strlen(pool + poff[i]) + 1;
        qsort(pr, npairs, sizeof *pr, fd_cmp_pair);
        size_t w = 0;
        for (size_t i = 0; i < npairs; i++) {
            if (w && !fd_cmp_pair(&pr[w - 1], &pr[i])) {
                st.dropped[MEGA_FREEDICT_DUPLICATE]++;
                continue;
            }
            pr[w++] = pr[i];
        }
        npairs = w;
        p->src = malloc((npairs + 1) * sizeof *p->src);
        p->tgt = malloc((npairs + 1) * sizeof *p->tgt);
        if (!p->src || !p->tgt) rc = mega__error(MEGA_ERR_OOM, "freedict: out of memory");
    }
    free(poff);
    if (rc == MEGA_OK) {
        for (size_t i = 0; i < npairs; i++) {
            p->src[i] = pr[i].s, p->tgt[i] = pr[i].t;
            st.identical += !strcmp(pr[i].s, pr[i].t);
        }
        p->n = st.kept = npairs;
        p->pool = pool;
    }
    free(pr);
    if (rc == MEGA_OK && !npairs) {
        char why[256];
        size_t o2 = 0;
        for (int r = 1; r < MEGA_FREEDICT_NREASONS; r++)
            if (st.dropped[r] && o2 < sizeof why)
                o2 += (size_t)snprintf(why + o2, sizeof why - o2, "%s%zu %s", o2 ? ", " : "", st.dropped[r], mega_freedict_reason_name(r));
        rc = mega__error(MEGA_ERR_FORMAT, "%s: no usable entry (%zu entries%s%s)", d->index_path, st.entries, o2 ? ": " : "",
                         o2 ? why : "");
    }
    if (stats) *stats = st;
    if (rc != MEGA_OK) {
        if (!p->pool) free(pool);
        mega_freedict_pairs_free(p);
    }
    return rc;
}

mega_status mega_freedict_read(const char *dict_path, const char *index_path, const mega_freedict_opts *opts,
                               mega_freedict_pairs *p, mega_freedict_stats *st) {
    memset(p, 0, sizeof *p);
    if (st) memset(st, 0, sizeof *st);
    if (opts && opts->max_len < 0) MEGA_FAIL(MEGA_ERR_INVALID, "freedict: max_len %d is negative", opts->max_len);
    mega_dictd *d;
    MEGA_TRY(mega_dictd_open(dict_path, index_path, &d));
    mega_status rc = mega_freedict_pairs_from(d, opts, p, st);
    mega_dictd_free(d);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * the split */

mega_status mega_freedict_split(const mega_freedict_pairs *p, uint64_t seed, double valid_frac, double test_frac,
                                size_t *order, size_t count[3], size_t groups[3]) {
    if (!(valid_frac >= 0 && valid_frac < 1) || !(test_frac >= 0 && test_frac < 1) || !(valid_frac + test_frac < 1))
        MEGA_FAIL(MEGA_ERR_INVALID, "freedict split: fractions valid %g and test %g must be in [0, 1) with a sum below 1",
                  valid_frac, test_frac);
    const size_t n = p->n;
    size_t G = 0;
    for (size_t i = 0; i < n; i++) G += i == 0 || strcmp(p->src[i], p->src[i - 1]);
    size_t *start = malloc((G + 1) * sizeof *start), *perm = malloc((G + 1) * sizeof *perm);
    unsigned char *which = malloc(G + 1);
    if (!start || !perm || !which) {
        free(start), free(perm), free(which);
        MEGA_FAIL(MEGA_ERR_OOM, "freedict split: out of memory");
    }
    for (size_t i = 0, g = 0; i < n; i++)
        if (i == 0 || strcmp(p->src[i], p->src[i - 1])) start[g++] = i;
    start[G] = n;
    for (size_t g = 0; g < G; g++) perm[g] = g;
    uint64_t st = mega_data_rng_seed(seed);
    for (size_t i = G; i-- > 1;) {
        size_t j = (size_t)mega_data_rng_below(&st, (uint64_t)i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    const size_t want_test = (size_t)llround(test_frac * (double)n), want_valid = (size_t)llround(valid_frac * (double)n);
    size_t c[3] = {0, 0, 0}, gc[3] = {0, 0, 0};
    for (size_t k = 0; k < G; k++) {
        size_t g = perm[k], sz = start[g + 1] - start[g];
        int s = c[2] < want_test ? 2 : c[1] < want_valid ? 1 : 0;
        which[g] = (unsigned char)s;
        c[s] += sz, gc[s]++;
    }
    size_t o = 0;
    for (int s = 0; s < 3; s++)
        for (size_t k = 0; k < G; k++) {
            size_t g = perm[k];
            if (which[g] != s) continue;
            for (size_t i = start[g]; i < start[g + 1]; i++) order[o++] = i;
        }
    for (int s = 0; s < 3; s++) {
        count[s] = c[s];
        if (groups) groups[s] = gc[s];
    }
    free(start), free(perm), free(which);
    return MEGA_OK;
}
