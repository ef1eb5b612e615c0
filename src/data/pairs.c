/* Parallel text for sequence-to-sequence models (translation): "source<TAB>target" lines in the
 * byte-level vocabulary both sides share (bytes, <pad>, </s>), the checks that decide which lines
 * are usable (skipped and counted, or an error in strict mode), batching by length as fairseq's
 * --max-tokens does with a batch order reproducible from (seed, epoch), and padded batches with
 * the decoder's shifted input (fairseq's prev_output_tokens). */
#include "data/data.h"

#include <limits.h>

/* the longest sentence stored, in bytes (token counts stay far from INT_MAX) */
#define S2S_MAX_BYTES 0x3ffffffe

/* ---------------------------------------------------------------------------------------------
 * reasons */

/* short names (logs, JSON) and the phrases of the skip summary, index = mega_s2s_bad */
static const char *const bad_names[MEGA_S2S_BAD_N] = {"no-tab",   "extra-tab",       "empty-source",   "empty-target",
                                                      "bad-utf8", "source-too-long", "target-too-long"};
static const char *const bad_phrases[MEGA_S2S_BAD_N] = {"without a tab",
                                                        "with more than one tab",
                                                        "with an empty source",
                                                        "with an empty target",
                                                        "with invalid UTF-8",
                                                        "with a source longer than", /* + the limit */
                                                        "with a target longer than"};

const char *mega_s2s_bad_name(int reason) {
    return reason >= 0 && reason < MEGA_S2S_BAD_N ? bad_names[reason] : "?";
}

int mega_s2s_skip_summary(const mega_s2s_data *d, char *buf, size_t cap) {
    size_t o = 0;
    int total = 0;
    if (cap) buf[0] = 0;
    for (int r = 0; r < MEGA_S2S_BAD_N; r++) {
        if (!d->n_bad[r]) continue;
        total += d->n_bad[r];
        if (o < cap) {
            /* a length limit is named as the caller's user sets it, with its value */
            const int side = r == MEGA_S2S_BAD_TGT_LONG;
            char lim[80] = "";
            if (r == MEGA_S2S_BAD_SRC_LONG || side)
                snprintf(lim, sizeof lim, " %s %d", d->limit[side], side ? d->max_tgt_len : d->max_src_len);
            int k = snprintf(buf + o, cap - o, "%s%d %s%s (%s line %d)", o ? ", " : "", d->n_bad[r], bad_phrases[r], lim,
                             d->n_bad[r] > 1 ? "first at" : "at", d->first_bad[r]);
            if (k > 0) o = MEGA_MIN(cap, o + (size_t)k);
        }
    }
    return total;
}

/* ---------------------------------------------------------------------------------------------
 * loading */

/* storage for up to nex examples and ntok tokens */
static mega_status s2s_alloc(mega_s2s_data *d, size_t nex, size_t ntok) {
    nex = MEGA_MAX(nex, 1), ntok = MEGA_MAX(ntok, 1);
    d->off = malloc(nex * sizeof *d->off);
    d->src_len = malloc(nex * sizeof *d->src_len);
    d->tgt_len = malloc(nex * sizeof *d->tgt_len);
    d->line = malloc(nex * sizeof *d->line);
    d->pool = ntok <= SIZE_MAX / sizeof *d->pool ? malloc(ntok * sizeof *d->pool) : NULL;
    if (!d->off || !d->src_len || !d->tgt_len || !d->line || !d->pool)
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory (%zu lines, %zu tokens)", d->path, nex, ntok);
    return MEGA_OK;
}

/* One line s[0..n) (no "\n", no final "\r", not empty); col0 = bytes cut from its start (a BOM)
 * for the columns in messages. A bad line is counted, or an error when strict. */
static mega_status s2s_line(mega_s2s_data *d, const mega_s2s_opts *o, const char *s, size_t n, int lineno, size_t col0) {
    char why[200];
    int reason = -1;
    const char *tab = memchr(s, '\t', n);
    size_t sl = tab ? (size_t)(tab - s) : n, tl = tab ? n - sl - 1 : 0, k;
    const char *t = tab ? tab + 1 : s + n;
    if (!tab)
        reason = MEGA_S2S_BAD_NO_TAB, snprintf(why, sizeof why, "no tab (expected source<TAB>target)");
    else if (memchr(t, '\t', tl))
        reason = MEGA_S2S_BAD_EXTRA_TAB, snprintf(why, sizeof why, "more than one tab (expected source<TAB>target)");
    else if (sl == 0)
        reason = MEGA_S2S_BAD_EMPTY_SRC, snprintf(why, sizeof why, "empty source");
    else if (tl == 0)
        reason = MEGA_S2S_BAD_EMPTY_TGT, snprintf(why, sizeof why, "empty target");
    else if ((k = mega_utf8_check(s, sl)) < sl)
        reason = MEGA_S2S_BAD_UTF8, snprintf(why, sizeof why, "invalid UTF-8 in the source at column %zu (byte 0x%02x)",
                                             col0 + k + 1, (unsigned char)s[k]);
    else if ((k = mega_utf8_check(t, tl)) < tl)
        reason = MEGA_S2S_BAD_UTF8, snprintf(why, sizeof why, "invalid UTF-8 in the target at column %zu (byte 0x%02x)",
                                             col0 + sl + 1 + k + 1, (unsigned char)t[k]);
    /* the tokens, written where the example will be stored: the pool has room for every line's
     * bytes + 1 (a line of n bytes gives at most n + 1 tokens) */
    uint16_t *p = d->pool + d->pool_n;
    size_t sn = sl, tn = tl; /* tokens before </s> */
    if (reason < 0 && (sl > S2S_MAX_BYTES || tl > S2S_MAX_BYTES))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: a sentence longer than %d bytes", d->path, lineno, S2S_MAX_BYTES);
    /* a subword side too long for the limit even in its longest subwords is not encoded:
     * encoding a unit rescans it once per merge it takes part in, minutes for megabytes without
     * a space (a byte side, cheap to encode, is checked exactly below, the source first) */
    const size_t ls = mega_bpe_longest(o->src_bpe), lt = mega_bpe_longest(o->tgt_bpe);
    const int src_over = o->src_bpe && o->max_src_len > 0 && sl > (size_t)(o->max_src_len - 1) * ls;
    const int tgt_over = o->tgt_bpe && o->max_tgt_len > 0 && tl > (size_t)(o->max_tgt_len - 1) * lt;
    const int src_bytes_over = !o->src_bpe && o->max_src_len > 0 && sl + 1 > (size_t)o->max_src_len;
    if (reason < 0 && (src_over || (tgt_over && !src_bytes_over))) {
        const int side = !src_over;
        reason = side ? MEGA_S2S_BAD_TGT_LONG : MEGA_S2S_BAD_SRC_LONG;
        snprintf(why, sizeof why, "%s of %zu bytes is longer than %s %d (it cannot fit in subwords of at most %zu bytes)",
                 side ? "target" : "source", side ? tl : sl, d->limit[side], side ? o->max_tgt_len : o->max_src_len,
                 side ? lt : ls);
    }
    if (reason < 0 && !src_bytes_over) {
        int32_t small[256], *ids = sl + tl <= 256 ? small : malloc((sl > tl ? sl : tl) * sizeof *ids);
        if (!ids) MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory", d->path);
        sn = mega_bpe_encode(o->src_bpe, (const uint8_t *)s, sl, ids);
        for (size_t i = 0; i < sn; i++) p[i] = (uint16_t)ids[i];
        tn = mega_bpe_encode(o->tgt_bpe, (const uint8_t *)t, tl, ids);
        for (size_t i = 0; i < tn; i++) p[sn + 1 + i] = (uint16_t)ids[i];
        if (ids != small) free(ids);
    }
    if (reason < 0 && o->max_src_len > 0 && sn + 1 > (size_t)o->max_src_len)
        reason = MEGA_S2S_BAD_SRC_LONG, snprintf(why, sizeof why, "source of %zu tokens (%zu %s + </s>) is longer than %s %d",
                                                 sn + 1, sn, o->src_bpe ? "subwords" : "bytes", d->limit[0], o->max_src_len);
    else if (reason < 0 && o->max_tgt_len > 0 && tn + 1 > (size_t)o->max_tgt_len)
        reason = MEGA_S2S_BAD_TGT_LONG, snprintf(why, sizeof why, "target of %zu tokens (%zu %s + </s>) is longer than %s %d",
                                                 tn + 1, tn, o->tgt_bpe ? "subwords" : "bytes", d->limit[1], o->max_tgt_len);
    if (reason >= 0) {
        if (o->strict) MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: %s", d->path, lineno, why);
        if (!d->n_bad[reason]++) d->first_bad[reason] = lineno;
        d->n_skipped++;
        return MEGA_OK;
    }
    p[sn] = MEGA_S2S_EOS;
    p[sn + 1 + tn] = MEGA_S2S_EOS;
    int i = d->n++;
    d->off[i] = d->pool_n, d->src_len[i] = (int)sn + 1, d->tgt_len[i] = (int)tn + 1, d->line[i] = lineno;
    d->pool_n += sn + tn + 2;
    d->n_src_tokens += (int64_t)sn + 1, d->n_tgt_tokens += (int64_t)tn + 1;
    d->n_src_bytes += (int64_t)sl, d->n_tgt_bytes += (int64_t)tl;
    d->src_max = MEGA_MAX(d->src_max, (int)sn + 1), d->tgt_max = MEGA_MAX(d->tgt_max, (int)tn + 1);
    return MEGA_OK;
}

static mega_status s2s_parse(mega_s2s_data *d, const mega_s2s_opts *o, const uint8_t *buf, size_t n) {
    d->fingerprint = mega_fnv1a64(buf, n);
    size_t lines = 0;
    for (const uint8_t *q = buf, *e = buf + n; (q = memchr(q, '\n', (size_t)(e - q))); q++) lines++;
    if (n && buf[n - 1] != '\n') lines++;
    if (lines >= INT_MAX) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: more than %d lines", d->path, INT_MAX - 1);
    size_t nex = o->max_examples > 0 ? MEGA_MIN(lines, (size_t)o->max_examples) : lines;
    MEGA_TRY(s2s_alloc(d, nex, n + lines));
    size_t pos = 0;
    int lineno = 0;
    while (pos < n && !(o->max_examples > 0 && d->n >= o->max_examples)) {
        const char *s = (const char *)buf + pos;
        const char *nl = memchr(s, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - s) : n - pos, col0 = 0;
        pos += len + (nl != NULL);
        d->n_lines = ++lineno;
        if (len && s[len - 1] == '\r') len--, d->n_crlf++;
        if (lineno == 1 && len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3, len -= 3, col0 = 3;
        if (len == 0) {
            d->n_blank++;
            continue;
        }
        MEGA_TRY(s2s_line(d, o, s, len, lineno, col0));
    }
    if (d->n == 0) {
        char sum[400];
        mega_s2s_skip_summary(d, sum, sizeof sum);
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: no usable source<TAB>target line (%d line%s: %s%s%d blank)", d->path, d->n_lines,
                  d->n_lines == 1 ? "" : "s", sum, *sum ? ", " : "", d->n_blank);
    }
    /* give back the unused part of the pool (fails only to shrink: keep the larger block) */
    uint16_t *p = realloc(d->pool, d->pool_n * sizeof *p);
    if (p) d->pool = p;
    return MEGA_OK;
}

mega_status mega_s2s_data_load(const char *path, const mega_s2s_opts *o, mega_s2s_data *d) {
    static const mega_s2s_opts def;
    if (!o) o = &def;
    memset(d, 0, sizeof *d);
    d->max_src_len = o->max_src_len, d->max_tgt_len = o->max_tgt_len;
    snprintf(d->limit[0], sizeof d->limit[0], "%s", o->limit ? o->limit : "max_src_len");
    snprintf(d->limit[1], sizeof d->limit[1], "%s", o->limit ? o->limit : "max_tgt_len");
    const char *what = o->what ? o->what : "parallel text";
    MEGA_TRY(mega__data_given(path, what));
    if (o->max_src_len < 0 || o->max_tgt_len < 0 || o->max_examples < 0)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s: negative option (max_src_len %d, max_tgt_len %d, max_examples %d)", path, o->max_src_len,
                  o->max_tgt_len, o->max_examples);
    if (o->max_src_len == 1 || o->max_tgt_len == 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s: a length limit of 1 token leaves no room (a sentence is at least 1 byte + </s>)", path);
    mega_bytes f;
    MEGA_TRY(mega_read_file(path, what, &f));
    mega_status st = MEGA_OK;
    if (!(d->path = strdup(path))) st = mega__error(MEGA_ERR_OOM, "out of memory");
    if (st == MEGA_OK) st = s2s_parse(d, o, f.data, f.n);
    mega_bytes_free(&f);
    if (st != MEGA_OK) mega_s2s_data_free(d);
    return st;
}

void mega_s2s_data_free(mega_s2s_data *d) {
    if (!d) return;
    free(d->off), free(d->src_len), free(d->tgt_len), free(d->line), free(d->pool), free(d->path);
    memset(d, 0, sizeof *d);
}

mega_status mega_s2s_tokenize(const char *s, size_t n, int max_len, int32_t *tok, int *len) {
    return mega_s2s_tokenize_bpe(NULL, s, n, max_len, tok, len);
}

mega_status mega_s2s_tokenize_bpe(const mega_bpe *b, const char *s, size_t n, int max_len, int32_t *tok, int *len) {
    if (len) *len = 0;
    if (!s || !tok || !len) MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_tokenize: NULL argument");
    if (max_len < 0) MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_tokenize: negative max_len %d", max_len);
    size_t m = n;
    if (m && s[m - 1] == '\n') m--;
    if (m && s[m - 1] == '\r') m--;
    if (m == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "source: empty");
    size_t k = mega_utf8_check(s, m);
    if (k < m) MEGA_FAIL(MEGA_ERR_FORMAT, "source: invalid UTF-8 at column %zu (byte 0x%02x)", k + 1, (unsigned char)s[k]);
    if (m > S2S_MAX_BYTES) MEGA_FAIL(MEGA_ERR_INVALID, "source: %zu bytes, more than %d", m, S2S_MAX_BYTES);
    if (b && max_len > 0 && m > (size_t)(max_len - 1) * mega_bpe_longest(b)) /* not encoded: see s2s_line */
        MEGA_FAIL(MEGA_ERR_INVALID, "source: %zu bytes, more than the limit of %d tokens holds in subwords of at most %zu bytes",
                  m, max_len, mega_bpe_longest(b));
    const size_t k2 = mega_bpe_encode(b, (const uint8_t *)s, m, tok);
    if (max_len > 0 && k2 + 1 > (size_t)max_len) {
        if (b)
            MEGA_FAIL(MEGA_ERR_INVALID, "source: %zu tokens (%zu subwords of %zu bytes + </s>), more than the limit of %d",
                      k2 + 1, k2, m, max_len);
        MEGA_FAIL(MEGA_ERR_INVALID, "source: %zu tokens (%zu bytes + </s>), more than the limit of %d", m + 1, m, max_len);
    }
    tok[k2] = MEGA_S2S_EOS;
    *len = (int)k2 + 1;
    return MEGA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * batching by length */

typedef struct {
    int s, t, i;
} s2s_key;

static int key_cmp(const void *a, const void *b) {
    const s2s_key *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

void mega_s2s_plan_free(mega_s2s_plan *p) {
    if (!p) return;
    free(p->idx), free(p->off), free(p->count);
    memset(p, 0, sizeof *p);
}

mega_status mega_s2s_batches(const mega_s2s_data *d, int max_tokens, int max_sentences, uint64_t seed, int64_t epoch,
                             int shuffle, mega_s2s_plan *p) {
    memset(p, 0, sizeof *p);
    if (!d || d->n < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_batches: no examples");
    if (max_tokens < 0 || max_sentences < 0 || (max_tokens == 0 && max_sentences == 0))
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_batches: max_tokens %d, max_sentences %d (at least one must be positive)",
                  max_tokens, max_sentences);
    int n = d->n;
    s2s_key *key = malloc((size_t)n * sizeof *key);
    p->idx = malloc((size_t)n * sizeof *p->idx);
    p->off = malloc((size_t)n * sizeof *p->off);
    p->count = malloc((size_t)n * sizeof *p->count);
    if (!key || !p->idx || !p->off || !p->count) {
        free(key);
        mega_s2s_plan_free(p);
        MEGA_FAIL(MEGA_ERR_OOM, "mega_s2s_batches: out of memory (%d examples)", n);
    }
    for (int i = 0; i < n; i++) key[i] = (s2s_key){d->src_len[i], d->tgt_len[i], i};
    qsort(key, (size_t)n, sizeof *key, key_cmp); /* a total order: the result is unique */
    p->n_idx = n;
    /* greedy cut in sorted order: a batch grows while B * max(longest source, longest target)
     * stays within max_tokens and B within max_sentences */
    int cnt = 0, ms = 0, mt = 0;
    for (int k = 0; k < n; k++) {
        p->idx[k] = key[k].i;
        int ns = MEGA_MAX(ms, key[k].s), nt = MEGA_MAX(mt, key[k].t);
        int64_t w = MEGA_MAX(ns, nt);
        if (cnt > 0 && ((max_tokens > 0 && (int64_t)(cnt + 1) * w > max_tokens) || (max_sentences > 0 && cnt + 1 > max_sentences))) {
            p->n++;
            cnt = 0, ns = key[k].s, nt = key[k].t;
        }
        if (cnt == 0) p->off[p->n] = k;
        p->count[p->n] = ++cnt;
        ms = ns, mt = nt;
    }
    p->n++;
    free(key);
    for (int b = 0; b < p->n; b++) {
        p->max_count = MEGA_MAX(p->max_count, p->count[b]);
        if (p->count[b] == 1 && max_tokens > 0) {
            int e = p->idx[p->off[b]];
            if (MEGA_MAX(d->src_len[e], d->tgt_len[e]) > max_tokens) p->n_oversize++;
        }
    }
    if (shuffle) {
        /* Fisher-Yates over the batch order; the examples of a batch stay together and sorted */
        uint64_t st = mega_data_rng_seed(seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)epoch));
        for (int i = p->n - 1; i > 0; i--) {
            int j = (int)mega_data_rng_below(&st, (uint64_t)i + 1);
            int to = p->off[i], tc = p->count[i];
            p->off[i] = p->off[j], p->count[i] = p->count[j];
            p->off[j] = to, p->count[j] = tc;
        }
    }
    return MEGA_OK;
}

/* ---------------------------------------------------------------------------------------------
 * padded batches */

mega_status mega_s2s_batch_shape(const mega_s2s_data *d, const int *idx, int B, int *S, int *L) {
    int s = 0, l = 0;
    if (S) *S = 0;
    if (L) *L = 0;
    if (!d || !idx || B < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_batch_shape: empty batch (B = %d)", B);
    for (int b = 0; b < B; b++) {
        if (idx[b] < 0 || idx[b] >= d->n)
            MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_batch_shape: example %d out of range [0, %d)", idx[b], d->n);
        s = MEGA_MAX(s, d->src_len[idx[b]]), l = MEGA_MAX(l, d->tgt_len[idx[b]]);
    }
    if (S) *S = s;
    if (L) *L = l;
    return MEGA_OK;
}

mega_status mega_s2s_fill(const mega_s2s_data *d, const int *idx, int B, int32_t *src, int S, int32_t *prev, int32_t *tgt,
                          int L, int32_t *src_len, int32_t *tgt_len) {
    if (!d || !idx || B < 1 || S < 1 || L < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_fill: bad shape B=%d S=%d L=%d", B, S, L);
    for (int b = 0; b < B; b++) {
        int e = idx[b];
        if (e < 0 || e >= d->n) MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_fill: example %d out of range [0, %d)", e, d->n);
        if (d->src_len[e] > S || d->tgt_len[e] > L)
            MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_fill: example %d (line %d) has %d source / %d target tokens, more than S=%d / L=%d", e,
                      d->line[e], d->src_len[e], d->tgt_len[e], S, L);
    }
    for (int b = 0; b < B; b++) {
        int e = idx[b], sl = d->src_len[e], tl = d->tgt_len[e];
        const uint16_t *ps = mega_s2s_data_src(d, e), *pt = mega_s2s_data_tgt(d, e);
        if (src) {
            int32_t *r = src + (size_t)b * S;
            for (int t = 0; t < S; t++) r[t] = t < sl ? ps[t] : MEGA_S2S_PAD;
        }
        if (tgt) {
            int32_t *r = tgt + (size_t)b * L;
            for (int t = 0; t < L; t++) r[t] = t < tl ? pt[t] : MEGA_S2S_PAD;
        }
        if (prev) {
            /* fairseq prev_output_tokens: </s> then the target shifted right by one */
            int32_t *r = prev + (size_t)b * L;
            for (int t = 0; t < L; t++) r[t] = t >= tl ? MEGA_S2S_PAD : t == 0 ? MEGA_S2S_EOS : pt[t - 1];
        }
        if (src_len) src_len[b] = sl;
        if (tgt_len) tgt_len[b] = tl;
    }
    return MEGA_OK;
}
