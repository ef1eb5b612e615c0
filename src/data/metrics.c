/* Translation metrics: corpus BLEU, chrF and exact match, computed as sacreBLEU 2.6.0 computes
 * them (mjpost/sacrebleu, tag v2.6.0, commit 2277caccfc7b956671a6a09f1646f62250034157). The
 * Python each piece ports is quoted in the comments: sacrebleu/tokenizers/tokenizer_13a.py and
 * tokenizer_re.py (the "13a" tokenizer), sacrebleu/metrics/bleu.py (BLEU.compute_bleu,
 * _compute_segment_statistics, _get_closest_ref_len), sacrebleu/metrics/chrf.py (CHRF), the
 * n-gram helpers of sacrebleu/metrics/helpers.py, and utils.my_log. The API and its semantics
 * are documented in include/mega_data.h and docs/metrics.md.
 *
 * Strings are bytes; where Python works on code points this file decodes UTF-8 strictly and
 * maps every byte of an invalid sequence to one character (U+DC80..U+DCFF, what Python's
 * errors="surrogateescape" decoding gives), so nothing here fails on bad input. The 13a regular
 * expressions are run on bytes: every character they test is ASCII, and an ASCII byte is always
 * a whole character, so the byte-level passes give the code-point results (see tok_13a).
 *
 * N-gram counting: the symbols of a sentence and its references (word ids or code points) get
 * dense ids; an n-gram's id is then the id of the pair (id of its (n-1)-gram prefix, its last
 * symbol), so each order is one pass of hash look-ups and the counts are arrays indexed by id.
 * All scratch memory lives in the accumulator and is reused from one sentence to the next. */
#include "data/data.h"

#include <limits.h>

#define SACREBLEU_VERSION MEGA_METRICS_SACREBLEU_VERSION
#define N_ORD MEGA_METRICS_MAX_ORDER

/* ---------------------------------------------------------------------------------------------
 * characters */

int mega__py_isspace(uint32_t c) {
    if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int mega__py_split(const char *s, size_t n, mega__word_fn out, void *ctx) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, start = 0;
    int in_word = 0;
    while (i < n) {
        size_t at = i;
        uint32_t c = mega__utf8_next(u, n, &i, MEGA__UTF8_ESCAPE);
        if (mega__py_isspace(c)) {
            if (in_word && out(ctx, start, at - start)) return -1;
            in_word = 0;
        } else if (!in_word) {
            in_word = 1, start = at;
        }
    }
    if (in_word && out(ctx, start, n - start)) return -1;
    return 0;
}

/* length of s[0..n) after str.rstrip() */
static size_t py_rstrip_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, end = 0;
    while (i < n) {
        uint32_t c = mega__utf8_next(u, n, &i, MEGA__UTF8_ESCAPE);
        if (!mega__py_isspace(c)) end = i;
    }
    return end;
}

/* ---------------------------------------------------------------------------------------------
 * growable buffers */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

/* p with room for need elements of elem bytes (capacity *cap, doubling); on failure p itself,
 * unchanged, and *fail = 1. Use through GROW, which assigns the result back. */
static void *grow_to(void *p, size_t *cap, size_t need, size_t elem, int *fail) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) {
            *fail = 1;
            return p;
        }
        c *= 2;
    }
    void *q = realloc(p, c * elem);
    if (!q) {
        *fail = 1;
        return p;
    }
    *cap = c;
    return q;
}
#define GROW(p, cap, need, fail) ((p) = grow_to((p), &(cap), (need), sizeof *(p), &(fail)))

static int sb_put(sbuf *b, const char *s, size_t n) {
    int fail = n > SIZE_MAX - b->n - 1;
    if (!fail) GROW(b->p, b->cap, b->n + n + 1, fail);
    if (fail) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* dst = src with every occurrence of pat replaced by rep (str.replace: left to right, no overlap) */
static int sb_replace(sbuf *dst, const sbuf *src, const char *pat, const char *rep) {
    size_t pn = strlen(pat), rn = strlen(rep), i = 0;
    dst->n = 0;
    if (sb_put(dst, "", 0)) return -1;
    while (i < src->n) {
        if (i + pn <= src->n && !memcmp(src->p + i, pat, pn)) {
            if (sb_put(dst, rep, rn)) return -1;
            i += pn;
        } else {
            if (sb_put(dst, src->p + i, 1)) return -1;
            i++;
        }
    }
    return 0;
}

static void sb_swap(sbuf *a, sbuf *b) {
    sbuf t = *a;
    *a = *b, *b = t;
}

/* ---------------------------------------------------------------------------------------------
 * the 13a tokenizer (tokenizer_13a.py + tokenizer_re.py) */

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* [\{-\~\[-\` -\&\(-\+\:-\@\/]: { | } ~  [ \ ] ^ _ `  space ! " # $ % &  ( ) * +  : ; < = > ? @  / */
static int re1_class(unsigned char c) {
    return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
           (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == '/';
}

/* the pair regexes of 13a: every non-overlapping match of two characters (c, d), left to
 * right, becomes "c d " (lead 0) or " c d" (lead 1); a into b, then swapped back into a */
static int nondigit_punct(unsigned char c, unsigned char d) { return !is_digit(c) && (d == '.' || d == ','); }
static int punct_nondigit(unsigned char c, unsigned char d) { return (c == '.' || c == ',') && !is_digit(d); }
static int digit_dash(unsigned char c, unsigned char d) { return is_digit(c) && d == '-'; }
static int sub_pairs(sbuf *a, sbuf *b, int (*match)(unsigned char, unsigned char), int lead) {
    b->n = 0;
    for (size_t i = 0; i < a->n;) {
        const unsigned char c = (unsigned char)a->p[i];
        if (i + 1 < a->n && match(c, (unsigned char)a->p[i + 1])) {
            const char t[5] = {' ', (char)c, ' ', a->p[i + 1], ' '};
            if (sb_put(b, t + !lead, 4)) return -1;
            i += 2;
        } else {
            if (sb_put(b, a->p + i, 1)) return -1;
            i++;
        }
    }
    sb_swap(a, b);
    return 0;
}

/* Tokenizer13a.__call__(line) up to, not including, the final ' '.join(line.split()): *a gets
 * the string whose words are the tokens (b is scratch). On bytes, which is exact: the patterns'
 * characters are all ASCII, an ASCII byte is always a whole character (also in invalid UTF-8 as
 * decoded here), and a non-ASCII character only ever plays [^0-9], whose match consumes one
 * character; doing that on its last byte (regex 2) or its first (regex 3) leaves the other bytes
 * of the character, none of which can start a match, so the output is the same. */
static int tok_13a(const char *line, size_t n, sbuf *a, sbuf *b) {
    a->n = 0;
    if (sb_put(a, line, n)) return -1;
    /* line = line.replace('<skipped>', '')
     * line = line.replace('-\n', '')
     * line = line.replace('\n', ' ') */
    if (sb_replace(b, a, "<skipped>", "")) return -1;
    if (sb_replace(a, b, "-\n", "")) return -1;
    if (sb_replace(b, a, "\n", " ")) return -1;
    sb_swap(a, b);
    /* if '&' in line: &quot; &amp; &lt; &gt; in this order (a no-op without '&') */
    static const char *const ent[4][2] = {{"&quot;", "\""}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}};
    if (memchr(a->p, '&', a->n)) {
        for (int e = 0; e < 4; e++) {
            if (sb_replace(b, a, ent[e][0], ent[e][1])) return -1;
            sb_swap(a, b);
        }
    }
    /* self._post_tokenizer(f' {line} ') */
    b->n = 0;
    if (sb_put(b, " ", 1) || sb_put(b, a->p, a->n) || sb_put(b, " ", 1)) return -1;
    sb_swap(a, b);
    /* (re.compile(r'([\{-\~\[-\` -\&\(-\+\:-\@\/])'), r' \1 ') */
    b->n = 0;
    for (size_t i = 0; i < a->n; i++) {
        unsigned char c = (unsigned char)a->p[i];
        char t[3] = {' ', (char)c, ' '};
        if (re1_class(c) ? sb_put(b, t, 3) : sb_put(b, t + 1, 1)) return -1;
    }
    sb_swap(a, b);
    /* tokenize period and comma unless preceded by a digit:
     * (re.compile(r'([^0-9])([\.,])'), r'\1 \2 ') */
    if (sub_pairs(a, b, nondigit_punct, 0)) return -1;
    /* tokenize period and comma unless followed by a digit:
     * (re.compile(r'([\.,])([^0-9])'), r' \1 \2') */
    if (sub_pairs(a, b, punct_nondigit, 1)) return -1;
    /* tokenize dash when preceded by a digit: (re.compile(r'([0-9])(-)'), r'\1 \2 ') */
    if (sub_pairs(a, b, digit_dash, 0)) return -1;
    return 0;
}

/* ' '.join(words): appends each word to the buffer, a space before all but the first */
static int join_word(void *ctx, size_t off, size_t len) {
    sbuf **j = ctx; /* j[0] the output, j[1] the source */
    return (j[0]->n && sb_put(j[0], " ", 1)) || sb_put(j[0], j[1]->p + off, len) ? -1 : 0;
}

size_t mega_tokenize_13a(const char *line, size_t n, char *out, size_t cap) {
    sbuf a = {0}, b = {0}, c = {0};
    size_t need = (size_t)-1;
    sbuf *j[2] = {&c, &a};
    /* return ' '.join(line.split()) of the regex passes' result */
    if (tok_13a(line ? line : "", line ? n : 0, &a, &b) == 0 && sb_put(&c, "", 0) == 0 &&
        mega__py_split(a.p, a.n, join_word, j) == 0)
        need = c.n;
    if (cap) {
        size_t k = need == (size_t)-1 ? 0 : (need < cap - 1 ? need : cap - 1);
        if (k) memcpy(out, c.p, k);
        out[k] = 0;
    }
    free(a.p), free(b.p), free(c.p);
    return need;
}

/* ---------------------------------------------------------------------------------------------
 * the accumulator */

typedef struct {
    size_t off, len; /* bytes of a word in the accumulator's text buffer */
} word;

struct mega_metrics {
    mega_metrics_options o;
    /* corpus sums */
    int64_t sentences, exact;
    int nrefs_min, nrefs_max;
    int64_t sys_len, ref_len;
    int64_t correct[N_ORD], total[N_ORD];
    int64_t chrf[3 * 2 * N_ORD]; /* [hyp, ref, match] per order: characters, then words */
    /* scratch, reused */
    sbuf t1, t2, text;           /* tokenizer passes; the words of the sentence being added */
    word *w;                     /* words of every sequence */
    size_t nw, wcap;
    uint32_t *cp;                /* code points of every sequence */
    size_t ncp, cpcap;
    size_t *seq_off, *seq_len;   /* sequence s (0 the hypothesis, then the references): */
    size_t offcap, lencap;       /*   symbols [seq_off[s], seq_off[s] + seq_len[s]) */
    int32_t *sym, *lvl;          /* level-1 ids, current level ids, per position */
    size_t symcap, lvlcap;
    int32_t *hc, *rc, *rm, *stamp; /* by id: hypothesis counts, reference counts, their maximum */
    size_t hccap, rccap, rmcap, stampcap;
    uint64_t *hk;                /* hash table: keys (UINT64_MAX = empty) and values */
    int32_t *hv;
    size_t hcap, hsize;          /* allocated, in use (a power of two) */
    int64_t *ref_stats;          /* chrF: statistics per reference */
    size_t rscap;
};

mega_metrics_options mega_metrics_defaults(void) {
    mega_metrics_options o;
    memset(&o, 0, sizeof o);
    o.tokenize = MEGA_BLEU_TOK_13A;
    o.smooth_method = MEGA_BLEU_SMOOTH_EXP;
    o.smooth_value = -1.0;
    o.max_ngram_order = 4;
    o.effective_order = 0;
    o.char_order = 6;
    o.word_order = 0;
    o.beta = 2;
    o.whitespace = 0;
    o.eps_smoothing = 0;
    return o;
}

static mega_status check_options(const mega_metrics_options *o) {
    if (o->tokenize != MEGA_BLEU_TOK_13A && o->tokenize != MEGA_BLEU_TOK_NONE)
        MEGA_FAIL(MEGA_ERR_INVALID, "metrics: unknown BLEU tokenizer %d", (int)o->tokenize);
    if (o->smooth_method < MEGA_BLEU_SMOOTH_EXP || o->smooth_method > MEGA_BLEU_SMOOTH_ADD_K)
        MEGA_FAIL(MEGA_ERR_INVALID, "metrics: unknown BLEU smoothing method %d", (int)o->smooth_method);
    if (!(o->smooth_value < 0) && !(o->smooth_value >= 0 && o->smooth_value <= 1e9))
        MEGA_FAIL(MEGA_ERR_INVALID, "metrics: BLEU smoothing value must be a finite number >= 0 (< 0: the default)");
    if (o->max_ngram_order < 1 || o->max_ngram_order > N_ORD)
        MEGA_FAIL(MEGA_ERR_INVALID, "metrics: BLEU max n-gram order %d is not in 1..%d", o->max_ngram_order, N_ORD);
    if (o->char_order < 0 || o->char_order > N_ORD || o->word_order < 0 || o->word_order > N_ORD ||
        o->char_order + o->word_order < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "metrics: chrF orders (characters %d, words %d) must be in 0..%d, not both 0",
                  o->char_order, o->word_order, N_ORD);
    if (o->beta < 0 || o->beta > 1000) MEGA_FAIL(MEGA_ERR_INVALID, "metrics: chrF beta %d is not in 0..1000", o->beta);
    return MEGA_OK;
}

mega_status mega_metrics_new(const mega_metrics_options *opt, mega_metrics **out) {
    if (!out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_new: NULL output");
    *out = NULL;
    mega_metrics_options o = opt ? *opt : mega_metrics_defaults();
    MEGA_TRY(check_options(&o));
    mega_metrics *m = calloc(1, sizeof *m);
    if (!m) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
    m->o = o;
    *out = m;
    return MEGA_OK;
}

void mega_metrics_free(mega_metrics *m) {
    if (!m) return;
    free(m->t1.p), free(m->t2.p), free(m->text.p);
    free(m->w), free(m->cp), free(m->seq_off), free(m->seq_len);
    free(m->sym), free(m->lvl), free(m->hc), free(m->rc), free(m->rm), free(m->stamp);
    free(m->hk), free(m->hv), free(m->ref_stats);
    free(m);
}

void mega_metrics_reset(mega_metrics *m) {
    if (!m) return;
    m->sentences = m->exact = 0;
    m->nrefs_min = m->nrefs_max = 0;
    m->sys_len = m->ref_len = 0;
    memset(m->correct, 0, sizeof m->correct);
    memset(m->total, 0, sizeof m->total);
    memset(m->chrf, 0, sizeof m->chrf);
}

const mega_metrics_options *mega_metrics_get_options(const mega_metrics *m) { return m ? &m->o : NULL; }

/* ---- hash table of uint64 keys -> dense ids ---- */

static int ht_reset(mega_metrics *m, size_t entries) {
    size_t need = 16;
    while (need < 2 * entries + 2) {
        if (need > SIZE_MAX / 4) return -1;
        need *= 2;
    }
    if (need > m->hcap) {
        uint64_t *k = realloc(m->hk, need * sizeof *k);
        if (!k) return -1;
        m->hk = k;
        int32_t *v = realloc(m->hv, need * sizeof *v);
        if (!v) return -1;
        m->hv = v;
        m->hcap = need;
    }
    m->hsize = need;
    memset(m->hk, 0xFF, need * sizeof *m->hk);
    return 0;
}

/* the id of key (a new id, *k, if the key is new) */
static int32_t ht_id(mega_metrics *m, uint64_t key, int32_t *k) {
    size_t mask = m->hsize - 1, h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask;
    while (m->hk[h] != UINT64_MAX) {
        if (m->hk[h] == key) return m->hv[h];
        h = (h + 1) & mask;
    }
    m->hk[h] = key;
    m->hv[h] = (*k)++;
    return m->hv[h];
}

/* ---- words ---- */

static int add_word(mega_metrics *m, const char *s, size_t len) {
    int fail = 0;
    GROW(m->w, m->wcap, m->nw + 1, fail);
    if (fail) return -1;
    m->w[m->nw].off = m->text.n;
    m->w[m->nw].len = len;
    if (sb_put(&m->text, s, len)) return -1;
    m->nw++;
    return 0;
}

typedef struct {
    mega_metrics *m;
    const char *s;
    int strip_punct; /* chrF's _remove_punctuation */
} word_ctx;

/* string.punctuation: !"#$%&'()*+,-./ :;<=>?@ [\]^_` {|}~ */
static int is_punct(unsigned char c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

static int on_word(void *ctx, size_t off, size_t len) {
    word_ctx *c = ctx;
    const char *w = c->s + off;
    if (!c->strip_punct) return add_word(c->m, w, len);
    /* CHRF._remove_punctuation: a word of one character stays; else a final character from
     * string.punctuation is split off, or else an initial one. Those characters are ASCII, so
     * "one character" is one byte here (a longer single character has no punctuation to split). */
    size_t i = 0;
    (void)mega__utf8_next((const unsigned char *)w, len, &i, MEGA__UTF8_ESCAPE);
    if (i == len) return add_word(c->m, w, len);
    if (is_punct((unsigned char)w[len - 1])) return add_word(c->m, w, len - 1) || add_word(c->m, w + len - 1, 1);
    if (is_punct((unsigned char)w[0])) return add_word(c->m, w, 1) || add_word(c->m, w + 1, len - 1);
    return add_word(c->m, w, len);
}

/* ---- sequences and n-gram levels ---- */

static int seq_room(mega_metrics *m, int nseq) {
    int fail = 0;
    GROW(m->seq_off, m->offcap, (size_t)nseq, fail);
    GROW(m->seq_len, m->lencap, (size_t)nseq, fail);
    return fail ? -1 : 0;
}

/* room for npos symbols and their ids, and a hash table for npos keys */
static int pos_room(mega_metrics *m, size_t npos) {
    int fail = 0;
    GROW(m->sym, m->symcap, npos ? npos : 1, fail);
    GROW(m->lvl, m->lvlcap, npos ? npos : 1, fail);
    return fail || ht_reset(m, npos) ? -1 : 0;
}

/* sym[i] = the dense id of word i by content (level 1); returns the number of ids, -1 on OOM */
static int64_t level1_words(mega_metrics *m, size_t npos) {
    if (pos_room(m, npos)) return -1;
    /* intern words by content: the table maps a hash to the first word with it; collisions of
     * the 64-bit hash between different words are resolved by probing on (hash, index). */
    int32_t k = 0;
    size_t mask = m->hsize - 1;
    for (size_t i = 0; i < npos; i++) {
        const char *s = m->text.p + m->w[i].off;
        size_t len = m->w[i].len;
        uint64_t h = MEGA__FNV_BASIS;
        for (size_t j = 0; j < len; j++) h = (h ^ (unsigned char)s[j]) * MEGA__FNV_PRIME;
        size_t at = (size_t)((h * 0x9E3779B97F4A7C15ull) >> 17) & mask;
        int32_t id = -1;
        /* hk holds the word index (< npos) of the slot's first word, UINT64_MAX when empty */
        while (m->hk[at] != UINT64_MAX) {
            const word *o = &m->w[m->hk[at]];
            if (o->len == len && !memcmp(m->text.p + o->off, s, len)) {
                id = m->hv[at];
                break;
            }
            at = (at + 1) & mask;
        }
        if (id < 0) {
            m->hk[at] = i;
            m->hv[at] = id = k++;
        }
        m->sym[i] = id;
    }
    return k;
}

/* sym[i] = the dense id of code point cp[i]; returns the number of ids, -1 on OOM */
static int64_t level1_chars(mega_metrics *m, size_t npos) {
    if (pos_room(m, npos)) return -1;
    int32_t k = 0;
    for (size_t i = 0; i < npos; i++) m->sym[i] = ht_id(m, m->cp[i], &k);
    return k;
}

/* Advance lvl from the (n-1)-gram ids to the n-gram ids (n >= 2; for n == 1 copy sym): lvl[p] is
 * the id of the n-gram starting at p when it fits in its sequence. Returns the number of ids. */
static int64_t next_level(mega_metrics *m, int n, int nseq, int64_t k1) {
    if (n == 1) {
        size_t npos = nseq ? m->seq_off[nseq - 1] + m->seq_len[nseq - 1] : 0;
        if (npos) memcpy(m->lvl, m->sym, npos * sizeof *m->lvl);
        return k1;
    }
    size_t entries = 0;
    for (int s = 0; s < nseq; s++)
        if (m->seq_len[s] >= (size_t)n) entries += m->seq_len[s] - (size_t)n + 1;
    if (ht_reset(m, entries)) return -1;
    int32_t k = 0;
    for (int s = 0; s < nseq; s++) {
        size_t o = m->seq_off[s], len = m->seq_len[s];
        if (len < (size_t)n) continue;
        for (size_t i = 0; i + (size_t)n <= len; i++) {
            uint64_t key = ((uint64_t)(uint32_t)m->lvl[o + i] << 32) | (uint32_t)m->sym[o + i + (size_t)n - 1];
            m->lvl[o + i] = ht_id(m, key, &k);
        }
    }
    return k;
}

static int count_room(mega_metrics *m, int64_t k) {
    size_t c = (size_t)(k > 0 ? k : 1);
    int fail = 0;
    GROW(m->hc, m->hccap, c, fail);
    GROW(m->rc, m->rccap, c, fail);
    GROW(m->rm, m->rmcap, c, fail);
    GROW(m->stamp, m->stampcap, c, fail);
    return fail ? -1 : 0;
}

/* counts of the n-grams of sequence s by id (cnt zeroed first over [0, k)) */
static void count_seq(const mega_metrics *m, int s, int n, int32_t *cnt, int64_t k) {
    memset(cnt, 0, (size_t)k * sizeof *cnt);
    size_t o = m->seq_off[s], len = m->seq_len[s];
    for (size_t i = 0; i + (size_t)n <= len; i++) cnt[m->lvl[o + i]]++;
}

/* sum over the distinct n-grams of the hypothesis (sequence 0) of min(hc[id], ref[id]) */
static int64_t clipped_matches(mega_metrics *m, int n, const int32_t *ref, int32_t mark) {
    int64_t match = 0;
    size_t len = m->seq_len[0];
    for (size_t i = 0; i + (size_t)n <= len; i++) {
        int32_t id = m->lvl[i];
        if (m->stamp[id] == mark) continue;
        m->stamp[id] = mark;
        match += MEGA_MIN(m->hc[id], ref[id]);
    }
    return match;
}

static size_t ngrams(size_t len, int n) { return len >= (size_t)n ? len - (size_t)n + 1 : 0; }

/* ---- BLEU statistics of one segment (BLEU._compute_segment_statistics) ---- */

static mega_status bleu_segment(mega_metrics *m, const char *hyp, size_t hyp_n, const char *const *refs,
                                const size_t *ref_n, int nrefs) {
    int nseq = nrefs + 1;
    if (seq_room(m, nseq)) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
    m->nw = 0;
    m->text.n = 0;
    for (int s = 0; s < nseq; s++) {
        const char *line = s ? refs[s - 1] : hyp;
        size_t n = s ? ref_n[s - 1] : hyp_n;
        /* BLEU._preprocess_segment: self.tokenizer(sent.rstrip()) */
        n = py_rstrip_len(line, n);
        const char *t = line;
        size_t tn = n;
        if (m->o.tokenize == MEGA_BLEU_TOK_13A) {
            if (tok_13a(line, n, &m->t1, &m->t2)) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
            t = m->t1.p, tn = m->t1.n;
        }
        /* extract_all_word_ngrams: tokens = line.split() */
        m->seq_off[s] = m->nw;
        word_ctx c = {m, t, 0};
        if (mega__py_split(t, tn, on_word, &c)) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
        m->seq_len[s] = m->nw - m->seq_off[s];
    }
    if (m->nw >= (size_t)INT32_MAX) MEGA_FAIL(MEGA_ERR_INVALID, "metrics: sentence too long (%zu words)", m->nw);
    int64_t k1 = level1_words(m, m->nw);
    if (k1 < 0) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");

    /* ref_len = self._get_closest_ref_len(hyp_len, ref_lens): the closest length, the shorter
     * one on a tie */
    int64_t hyp_len = (int64_t)m->seq_len[0], closest_diff = -1, closest_len = -1;
    for (int r = 1; r < nseq; r++) {
        int64_t rl = (int64_t)m->seq_len[r], diff = hyp_len > rl ? hyp_len - rl : rl - hyp_len;
        if (closest_diff == -1 || diff < closest_diff) closest_diff = diff, closest_len = rl;
        else if (diff == closest_diff && rl < closest_len) closest_len = rl;
    }

    int64_t correct[N_ORD], total[N_ORD];
    for (int n = 1; n <= m->o.max_ngram_order; n++) {
        int64_t k = next_level(m, n, nseq, k1);
        if (k < 0 || count_room(m, k)) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
        count_seq(m, 0, n, m->hc, k);
        /* reference n-gram counts: the maximum over the references */
        memset(m->rm, 0, (size_t)k * sizeof *m->rm);
        for (int r = 1; r < nseq; r++) {
            count_seq(m, r, n, m->rc, k);
            size_t o = m->seq_off[r];
            for (size_t i = 0; i + (size_t)n <= m->seq_len[r]; i++) {
                int32_t id = m->lvl[o + i];
                if (m->rc[id] > m->rm[id]) m->rm[id] = m->rc[id];
            }
        }
        memset(m->stamp, 0, (size_t)k * sizeof *m->stamp);
        total[n - 1] = (int64_t)ngrams(m->seq_len[0], n);
        correct[n - 1] = clipped_matches(m, n, m->rm, 1);
    }
    m->sys_len += hyp_len;
    m->ref_len += closest_len;
    for (int n = 0; n < m->o.max_ngram_order; n++) m->correct[n] += correct[n], m->total[n] += total[n];
    return MEGA_OK;
}

/* ---- chrF ---- */

/* CHRF._compute_f_score over `order` [hyp, ref, match] triples */
static double chrf_f_score(const int64_t *st, int order, int beta, int eps_smoothing) {
    const double eps = 1e-16;
    double score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
    int effective_order = 0;
    double factor = (double)beta * beta;
    for (int i = 0; i < order; i++) {
        int64_t n_hyp = st[3 * i], n_ref = st[3 * i + 1], n_match = st[3 * i + 2];
        /* chrF++.py style EPS smoothing (also used by Moses and NLTK) */
        double prec = n_hyp > 0 ? (double)n_match / (double)n_hyp : eps;
        double rec = n_ref > 0 ? (double)n_match / (double)n_ref : eps;
        double denom = factor * prec + rec;
        score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
        /* sacreBLEU <2.0.0 style effective order smoothing */
        if (n_hyp > 0 && n_ref > 0) {
            avg_prec += prec;
            avg_rec += rec;
            effective_order++;
        }
    }
    if (eps_smoothing) return 100 * score / order;
    if (effective_order == 0) {
        avg_prec = avg_rec = 0.0;
    } else {
        avg_prec /= effective_order;
        avg_rec /= effective_order;
    }
    if (avg_prec + avg_rec != 0) {
        score = (1 + factor) * avg_prec * avg_rec;
        score /= ((factor * avg_prec) + avg_rec);
        return 100 * score;
    }
    return 0.0;
}

/* [hyp, ref, match] of orders first..first+norder-1 of the current symbols, per reference, into
 * m->ref_stats[r * 3 * order_all + 3 * (base + n - 1)] (CHRF._get_match_statistics) */
static mega_status chrf_orders(mega_metrics *m, int nseq, int64_t k1, int norder, int base, int order_all) {
    for (int n = 1; n <= norder; n++) {
        int64_t k = next_level(m, n, nseq, k1);
        if (k < 0 || count_room(m, k)) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
        count_seq(m, 0, n, m->hc, k);
        memset(m->stamp, 0, (size_t)k * sizeof *m->stamp);
        int64_t hyp_count = (int64_t)ngrams(m->seq_len[0], n);
        for (int r = 1; r < nseq; r++) {
            count_seq(m, r, n, m->rc, k);
            int64_t ref_count = (int64_t)ngrams(m->seq_len[r], n);
            int64_t *st = m->ref_stats + (size_t)(r - 1) * 3 * (size_t)order_all + 3 * (size_t)(base + n - 1);
            /* Don't count hits if no reference exists for that n-gram */
            st[0] = ref_count ? hyp_count : 0;
            st[1] = ref_count;
            st[2] = clipped_matches(m, n, m->rc, r);
        }
    }
    return MEGA_OK;
}

static mega_status chrf_segment(mega_metrics *m, const char *hyp, size_t hyp_n, const char *const *refs,
                                const size_t *ref_n, int nrefs) {
    int nseq = nrefs + 1, C = m->o.char_order, W = m->o.word_order, order = C + W;
    int fail = seq_room(m, nseq);
    GROW(m->ref_stats, m->rscap, (size_t)nrefs * 3 * (size_t)order, fail);
    if (fail) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
    if (C > 0) {
        /* extract_all_char_ngrams: line = ''.join(line.split()) unless whitespace is kept */
        m->ncp = 0;
        for (int s = 0; s < nseq; s++) {
            const unsigned char *u = (const unsigned char *)(s ? refs[s - 1] : hyp);
            size_t n = s ? ref_n[s - 1] : hyp_n, i = 0;
            m->seq_off[s] = m->ncp;
            GROW(m->cp, m->cpcap, m->ncp + n + 1, fail);
            if (fail) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
            while (i < n) {
                uint32_t c = mega__utf8_next(u, n, &i, MEGA__UTF8_ESCAPE);
                if (m->o.whitespace || !mega__py_isspace(c)) m->cp[m->ncp++] = c;
            }
            m->seq_len[s] = m->ncp - m->seq_off[s];
        }
        if (m->ncp >= (size_t)INT32_MAX) MEGA_FAIL(MEGA_ERR_INVALID, "metrics: sentence too long (%zu characters)", m->ncp);
        int64_t k1 = level1_chars(m, m->ncp);
        if (k1 < 0) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
        MEGA_TRY(chrf_orders(m, nseq, k1, C, 0, order));
    }
    if (W > 0) {
        /* chrF++: word n-grams of self._remove_punctuation(sentence) */
        m->nw = 0;
        m->text.n = 0;
        for (int s = 0; s < nseq; s++) {
            const char *line = s ? refs[s - 1] : hyp;
            size_t n = s ? ref_n[s - 1] : hyp_n;
            m->seq_off[s] = m->nw;
            word_ctx c = {m, line, 1};
            if (mega__py_split(line, n, on_word, &c)) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
            m->seq_len[s] = m->nw - m->seq_off[s];
        }
        if (m->nw >= (size_t)INT32_MAX) MEGA_FAIL(MEGA_ERR_INVALID, "metrics: sentence too long (%zu words)", m->nw);
        int64_t k1 = level1_words(m, m->nw);
        if (k1 < 0) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
        MEGA_TRY(chrf_orders(m, nseq, k1, W, C, order));
    }
    /* the reference with the best F score (the first of equals) */
    double best_f = -1.0;
    const int64_t *best = NULL;
    for (int r = 0; r < nrefs; r++) {
        const int64_t *st = m->ref_stats + (size_t)r * 3 * (size_t)order;
        double f = chrf_f_score(st, order, m->o.beta, m->o.eps_smoothing);
        if (f > best_f) best_f = f, best = st;
    }
    for (int i = 0; i < 3 * order; i++) m->chrf[i] += best[i];
    return MEGA_OK;
}

/* ---- adding a segment ---- */

mega_status mega_metrics_add_n(mega_metrics *m, const char *hyp, size_t hyp_len, const char *const *refs,
                               const size_t *ref_lens, int nrefs) {
    if (!m) MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_add: NULL accumulator");
    if (!hyp || !refs || !ref_lens || nrefs < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_add: need a hypothesis and at least one reference");
    for (int r = 0; r < nrefs; r++)
        if (!refs[r]) MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_add: reference %d is NULL", r + 1);
    /* keep the corpus sums unchanged when a part fails */
    int64_t saved_sys = m->sys_len, saved_ref = m->ref_len, saved_c[N_ORD], saved_t[N_ORD];
    memcpy(saved_c, m->correct, sizeof saved_c);
    memcpy(saved_t, m->total, sizeof saved_t);
    mega_status st = bleu_segment(m, hyp, hyp_len, refs, ref_lens, nrefs);
    if (st == MEGA_OK) st = chrf_segment(m, hyp, hyp_len, refs, ref_lens, nrefs);
    if (st != MEGA_OK) {
        m->sys_len = saved_sys, m->ref_len = saved_ref;
        memcpy(m->correct, saved_c, sizeof saved_c);
        memcpy(m->total, saved_t, sizeof saved_t);
        return st;
    }
    int same = 0;
    for (int r = 0; r < nrefs && !same; r++) same = ref_lens[r] == hyp_len && !memcmp(refs[r], hyp, hyp_len);
    m->exact += same;
    if (m->sentences == 0 || nrefs < m->nrefs_min) m->nrefs_min = nrefs;
    if (m->sentences == 0 || nrefs > m->nrefs_max) m->nrefs_max = nrefs;
    m->sentences++;
    return MEGA_OK;
}

mega_status mega_metrics_add(mega_metrics *m, const char *hyp, const char *const *refs, int nrefs) {
    if (!hyp || !refs || nrefs < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_add: need a hypothesis and at least one reference");
    size_t small[16], *lens = nrefs <= 16 ? small : malloc((size_t)nrefs * sizeof *lens);
    if (!lens) MEGA_FAIL(MEGA_ERR_OOM, "metrics: out of memory");
    mega_status st = MEGA_OK;
    for (int r = 0; r < nrefs && st == MEGA_OK; r++) {
        if (!refs[r]) st = mega__error(MEGA_ERR_INVALID, "mega_metrics_add: reference %d is NULL", r + 1);
        else lens[r] = strlen(refs[r]);
    }
    if (st == MEGA_OK) st = mega_metrics_add_n(m, hyp, strlen(hyp), refs, lens, nrefs);
    if (lens != small) free(lens);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * scores */

/* utils.my_log: log(num) floored to a very low number */
static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

mega_status mega_bleu_compute(const int64_t *counts, const int64_t *totals, int64_t sys_len, int64_t ref_len,
                              const mega_metrics_options *opts, mega_bleu_score *out) {
    if (!counts || !totals || !out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_bleu_compute: NULL argument");
    mega_metrics_options d = mega_metrics_defaults();
    const mega_metrics_options *o = opts ? opts : &d;
    MEGA_TRY(check_options(o));
    memset(out, 0, sizeof *out);
    int N = o->max_ngram_order;
    double smooth_value = o->smooth_value;
    /* smooth_value = BLEU.SMOOTH_DEFAULTS[smooth_method] when None */
    if (smooth_value < 0) smooth_value = o->smooth_method == MEGA_BLEU_SMOOTH_ADD_K ? 1.0 : 0.1;
    out->order = N;
    out->sys_len = sys_len;
    out->ref_len = ref_len;
    /* self.ratio = self.sys_len / self.ref_len if self.ref_len else 0 */
    out->ratio = ref_len ? (double)sys_len / (double)ref_len : 0.0;
    for (int n = 0; n < N; n++) out->counts[n] = counts[n], out->totals[n] = totals[n];
    /* bp = 1.0
     * if sys_len < ref_len:
     *     bp = math.exp(1 - ref_len / sys_len) if sys_len > 0 else 0.0 */
    double bp = 1.0;
    if (sys_len < ref_len) bp = sys_len > 0 ? exp(1 - (double)ref_len / (double)sys_len) : 0.0;
    out->bp = bp;
    /* Early stop if there are no matches (#141) */
    int any = 0;
    for (int n = 0; n < N; n++) any |= counts[n] != 0;
    if (!any) return MEGA_OK;
    double correct[N_ORD], total[N_ORD];
    for (int n = 0; n < N; n++) correct[n] = (double)counts[n], total[n] = (double)totals[n];
    double smooth_mteval = 1.0;
    int eff_order = N;
    for (int n = 1; n <= N; n++) {
        if (o->smooth_method == MEGA_BLEU_SMOOTH_ADD_K && n > 1) {
            correct[n - 1] += smooth_value;
            total[n - 1] += smooth_value;
        }
        if (total[n - 1] == 0) break;
        if (o->effective_order) eff_order = n;
        if (correct[n - 1] == 0) {
            if (o->smooth_method == MEGA_BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2;
                out->precisions[n - 1] = 100. / (smooth_mteval * total[n - 1]);
            } else if (o->smooth_method == MEGA_BLEU_SMOOTH_FLOOR) {
                out->precisions[n - 1] = 100. * smooth_value / total[n - 1];
            }
        } else {
            out->precisions[n - 1] = 100. * correct[n - 1] / total[n - 1];
        }
    }
    /* score = bp * math.exp(sum([my_log(p) for p in precisions[:eff_order]]) / eff_order) */
    double sum = 0.0;
    for (int n = 0; n < eff_order; n++) sum += my_log(out->precisions[n]);
    out->score = bp * exp(sum / eff_order);
    return MEGA_OK;
}

mega_status mega_metrics_bleu(const mega_metrics *m, mega_bleu_score *out) {
    if (!m || !out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_bleu: NULL argument");
    return mega_bleu_compute(m->correct, m->total, m->sys_len, m->ref_len, &m->o, out);
}

mega_status mega_metrics_chrf(const mega_metrics *m, mega_chrf_score *out) {
    if (!m || !out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_chrf: NULL argument");
    memset(out, 0, sizeof *out);
    int order = m->o.char_order + m->o.word_order;
    out->char_order = m->o.char_order;
    out->word_order = m->o.word_order;
    out->beta = m->o.beta;
    for (int i = 0; i < order; i++) {
        out->hyp[i] = m->chrf[3 * i];
        out->ref[i] = m->chrf[3 * i + 1];
        out->match[i] = m->chrf[3 * i + 2];
    }
    out->score = chrf_f_score(m->chrf, order, m->o.beta, m->o.eps_smoothing);
    /* name = f'chrF{self.beta}' + '+' * self.word_order */
    int k = snprintf(out->name, sizeof out->name, "chrF%d", m->o.beta);
    for (int i = 0; i < m->o.word_order && k > 0 && (size_t)k + 1 < sizeof out->name; i++) out->name[k++] = '+';
    out->name[k] = 0;
    return MEGA_OK;
}

mega_status mega_metrics_exact_match(const mega_metrics *m, mega_exact_score *out) {
    if (!m || !out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_metrics_exact_match: NULL argument");
    out->sentences = m->sentences;
    out->matches = m->exact;
    out->score = m->sentences ? 100.0 * (double)m->exact / (double)m->sentences : 0.0;
    return MEGA_OK;
}

int64_t mega_metrics_sentences(const mega_metrics *m) { return m ? m->sentences : 0; }

/* the nrefs field of a signature: the count, "var" when it varied */
static void nrefs_str(const mega_metrics *m, char *buf, size_t cap) {
    if (m->nrefs_min != m->nrefs_max) snprintf(buf, cap, "var");
    else snprintf(buf, cap, "%d", m->nrefs_min);
}

int mega_metrics_bleu_signature(const mega_metrics *m, char *buf, size_t cap) {
    if (!m) return -1;
    char nr[16], smooth[48];
    nrefs_str(m, nr, sizeof nr);
    static const char *const names[] = {"exp", "none", "floor", "add-k"};
    const char *sm = names[m->o.smooth_method];
    if (m->o.smooth_method == MEGA_BLEU_SMOOTH_FLOOR || m->o.smooth_method == MEGA_BLEU_SMOOTH_ADD_K) {
        double v = m->o.smooth_value;
        if (v < 0) v = m->o.smooth_method == MEGA_BLEU_SMOOTH_ADD_K ? 1.0 : 0.1;
        snprintf(smooth, sizeof smooth, "%s[%.2f]", sm, v);
    } else {
        snprintf(smooth, sizeof smooth, "%s", sm);
    }
    return snprintf(buf, cap, "nrefs:%s|case:mixed|eff:%s|tok:%s|smooth:%s|version:%s", nr,
                    m->o.effective_order ? "yes" : "no", m->o.tokenize == MEGA_BLEU_TOK_13A ? "13a" : "none",
                    smooth, SACREBLEU_VERSION);
}

int mega_metrics_chrf_signature(const mega_metrics *m, char *buf, size_t cap) {
    if (!m) return -1;
    char nr[16];
    nrefs_str(m, nr, sizeof nr);
    return snprintf(buf, cap, "nrefs:%s|case:mixed|eff:%s|nc:%d|nw:%d|space:%s|version:%s", nr,
                    m->o.eps_smoothing ? "no" : "yes", m->o.char_order, m->o.word_order,
                    m->o.whitespace ? "yes" : "no", SACREBLEU_VERSION);
}
