/*
 * Byte-level byte-pair encoding (BPE) for parallel text (docs/translation.md, "Subword units").
 *
 * Sennrich, Haddow & Birch 2016 (arXiv:1508.07909), on bytes as GPT-2 does it (Radford et al.
 * 2019): the vocabulary starts as the 256 bytes and the byte vocabulary's <pad> (256) and </s>
 * (257); merge i joins two existing tokens into token 258 + i. Text is first cut into units
 * before every space (" workers" is one unit, its space included), and merges never cross a unit.
 * Encoding a unit applies the merges in the order they were learned: while some adjacent pair of
 * tokens is a merge, the one learned first replaces every occurrence, left to right. Decoding is
 * the concatenation of the tokens' bytes, so encode then decode gives the text back exactly.
 *
 * Learning (mega_bpe_learn) is subword-nmt's learn_bpe.py without its end-of-word marker: count
 * the units of the text, then repeatedly merge the most frequent adjacent pair (ties: the smaller
 * pair of ids), updating the pair counts of the units that contain it only (an index from each
 * pair to the units where it occurs, and a heap of counts with stale entries skipped). Units
 * longer than MEGA_BPE_MAX_UNIT bytes are learned from in pieces and at most MEGA_BPE_LEARN_BYTES
 * bytes of distinct units are learned from (mega_data.h): a text of 4 MB without a space would
 * otherwise be one unit whose every merge rescans it, and whose tokens grow to megabytes.
 */
#include "data/data.h"

#include <limits.h>

/* ---------------------------------------------------------------------------------------------
 * the model: merges, token bytes, and a hash from pair to merge */

struct mega_bpe {
    int n;            /* merges */
    int32_t *pair;    /* [2n] merge i joins pair[2i], pair[2i+1] */
    uint32_t *off;    /* [V + 1] bytes of token v: bytes[off[v] .. off[v+1]) */
    uint8_t *bytes;
    size_t longest;   /* bytes of the longest token */
    uint64_t *hkey;   /* open addressing: pair key + 1 (0 = empty) -> merge index */
    int32_t *hval;
    size_t hcap;
};

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static size_t mix64(uint64_t k) {
    k ^= k >> 33, k *= 0xff51afd7ed558ccdULL, k ^= k >> 33, k *= 0xc4ceb9fe1a85ec53ULL, k ^= k >> 33;
    return (size_t)k;
}

/* the merge that joins (a, b), or -1 */
static int merge_of(const mega_bpe *b, int32_t x, int32_t y) {
    const uint64_t k = pair_key(x, y) + 1;
    for (size_t i = mix64(k) & (b->hcap - 1);; i = (i + 1) & (b->hcap - 1)) {
        if (b->hkey[i] == k) return b->hval[i];
        if (!b->hkey[i]) return -1;
    }
}

void mega_bpe_free(mega_bpe *b) {
    if (!b) return;
    free(b->pair), free(b->off), free(b->bytes), free(b->hkey), free(b->hval);
    free(b);
}

/* a model from n checked merges (pair takes ownership) */
static mega_status bpe_build(int32_t *pair, int n, mega_bpe **out) {
    *out = NULL;
    mega_bpe *b = calloc(1, sizeof *b);
    if (!b) return free(pair), mega__error(MEGA_ERR_OOM, "bpe: out of memory");
    b->n = n, b->pair = pair, b->longest = 1;
    const size_t V = (size_t)MEGA_S2S_VOCAB + (size_t)n;
    b->off = malloc((V + 1) * sizeof *b->off);
    size_t total = 256;
    for (b->hcap = 32; b->hcap < 2 * (size_t)n + 2; b->hcap *= 2) { /* at most half full */
    }
    b->hkey = calloc(b->hcap, sizeof *b->hkey), b->hval = malloc(b->hcap * sizeof *b->hval);
    if (!b->off || !b->hkey || !b->hval) goto oom;
    /* token lengths first (a merge's tokens are earlier ones), then the bytes */
    for (int v = 0; v < 256; v++) b->off[v] = (uint32_t)v;
    b->off[256] = b->off[257] = 256;
    uint32_t *len = malloc(V * sizeof *len);
    if (!len) goto oom;
    for (size_t v = 0; v < V; v++) len[v] = v < 256 ? 1 : 0;
    for (int i = 0; i < n; i++) {
        const uint64_t l = (uint64_t)len[pair[2 * i]] + len[pair[2 * i + 1]];
        if (l > (1u << 20)) {
            free(len);
            mega_bpe_free(b);
            return mega__error(MEGA_ERR_FORMAT, "bpe: merge %d makes a token of %llu bytes", i + 1, (unsigned long long)l);
        }
        len[MEGA_S2S_VOCAB + i] = (uint32_t)l, total += l;
        if (l > b->longest) b->longest = (size_t)l;
    }
    if (total > UINT32_MAX) {
        free(len);
        mega_bpe_free(b);
        return mega__error(MEGA_ERR_FORMAT, "bpe: the tokens hold more than 4 GB");
    }
    b->bytes = malloc(total);
    if (!b->bytes) {
        free(len);
        goto oom;
    }
    for (int v = 0; v < 256; v++) b->bytes[v] = (uint8_t)v;
    uint32_t o = 256;
    for (int i = 0; i < n; i++) {
        const size_t v = (size_t)MEGA_S2S_VOCAB + (size_t)i;
        const int32_t x = pair[2 * i], y = pair[2 * i + 1];
        b->off[v] = o;
        memcpy(b->bytes + o, b->bytes + b->off[x], len[x]);
        memcpy(b->bytes + o + len[x], b->bytes + b->off[y], len[y]);
        o += len[v];
    }
    b->off[V] = o;
    free(len);
    for (int i = 0; i < n; i++) {
        const uint64_t k = pair_key(pair[2 * i], pair[2 * i + 1]) + 1;
        size_t h = mix64(k) & (b->hcap - 1);
        while (b->hkey[h] && b->hkey[h] != k) h = (h + 1) & (b->hcap - 1);
        if (b->hkey[h]) {
            const mega_status st = mega__error(MEGA_ERR_FORMAT, "bpe: merge %d repeats an earlier merge (%d %d)", i + 1,
                                               pair[2 * i], pair[2 * i + 1]);
            mega_bpe_free(b); /* frees pair: the message is written first */
            return st;
        }
        b->hkey[h] = k, b->hval[h] = i;
    }
    *out = b;
    return MEGA_OK;
oom:
    mega_bpe_free(b);
    return mega__error(MEGA_ERR_OOM, "bpe: out of memory for %d merges", n);
}

int mega_bpe_merges(const mega_bpe *b) { return b ? b->n : 0; }
size_t mega_bpe_longest(const mega_bpe *b) { return b ? b->longest : 1; }
int mega_bpe_vocab_size(const mega_bpe *b) { return MEGA_S2S_VOCAB + (b ? b->n : 0); }

const uint8_t *mega_bpe_token(const mega_bpe *b, int id, size_t *len) {
    if (!b || id < 0 || id >= mega_bpe_vocab_size(b)) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = b->off[id + 1] - b->off[id];
    return b->bytes + b->off[id];
}

/* ---------------------------------------------------------------------------------------------
 * encoding */

/* every (x, y) in t[0..n), left to right, replaced by z in place; returns the new length */
static size_t merge_pair(int32_t *t, size_t n, int32_t x, int32_t y, int32_t z) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && t[i] == x && t[i + 1] == y) t[w++] = z, i++;
        else t[w++] = t[i];
    }
    return w;
}

/* apply the merges to t[0..n) in place; returns the new length */
static size_t encode_unit(const mega_bpe *b, int32_t *t, size_t n) {
    while (n > 1) {
        int best = INT_MAX;
        for (size_t i = 0; i + 1 < n; i++) {
            const int r = merge_of(b, t[i], t[i + 1]);
            if (r >= 0 && r < best) best = r;
        }
        if (best == INT_MAX) break;
        n = merge_pair(t, n, b->pair[2 * best], b->pair[2 * best + 1], MEGA_S2S_VOCAB + best);
    }
    return n;
}

/* the end of the unit that starts at s[i]: units start at the text's start and before every space */
static size_t unit_end(const uint8_t *s, size_t n, size_t i) {
    size_t j = i + 1;
    while (j < n && s[j] != ' ') j++;
    return j;
}

size_t mega_bpe_encode(const mega_bpe *b, const uint8_t *s, size_t n, int32_t *ids) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t e = unit_end(s, n, i);
        for (size_t k = i; k < e; k++) ids[o + k - i] = s[k];
        o += b ? encode_unit(b, ids + o, e - i) : e - i;
        i = e;
    }
    return o;
}

size_t mega_bpe_decode(const mega_bpe *b, const int32_t *ids, size_t n, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (!b) { /* the plain byte vocabulary */
            if (ids[i] >= 0 && ids[i] < 256) out[o++] = (uint8_t)ids[i];
            continue;
        }
        size_t l;
        const uint8_t *p = mega_bpe_token(b, ids[i], &l);
        if (p) memcpy(out + o, p, l), o += l;
    }
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * text form: "mega-bpe 1 <n>\n" then one line "<left> <right>\n" per merge (decimal ids) */

#define BPE_MAGIC "mega-bpe 1 "

char *mega_bpe_to_string(const mega_bpe *b, size_t *len) {
    const int n = b ? b->n : 0;
    const size_t cap = 32 + (size_t)n * 24;
    char *s = malloc(cap);
    if (!s) {
        mega__error(MEGA_ERR_OOM, "bpe: out of memory");
        return NULL;
    }
    size_t o = (size_t)snprintf(s, cap, BPE_MAGIC "%d\n", n);
    for (int i = 0; i < n; i++) o += (size_t)snprintf(s + o, cap - o, "%d %d\n", b->pair[2 * i], b->pair[2 * i + 1]);
    if (len) *len = o;
    return s;
}

/* a decimal number of at most 9 digits at s[*i], written as to_string writes it (no sign, no
 * leading zero), then the expected separator c */
static int read_num(const char *s, size_t n, size_t *i, char c, int *v) {
    size_t k = *i;
    long x = 0;
    while (k < n && k - *i < 10 && s[k] >= '0' && s[k] <= '9') x = x * 10 + (s[k++] - '0');
    if (k == *i || k - *i > 9 || k >= n || s[k] != c || (k - *i > 1 && s[*i] == '0')) return -1;
    *v = (int)x, *i = k + 1;
    return 0;
}

mega_status mega_bpe_from_string(const char *s, size_t n, mega_bpe **out) {
    *out = NULL;
    if (!s) MEGA_FAIL(MEGA_ERR_INVALID, "bpe: no text");
    const size_t ml = sizeof BPE_MAGIC - 1;
    if (n < ml || memcmp(s, BPE_MAGIC, ml)) MEGA_FAIL(MEGA_ERR_FORMAT, "bpe: not a mega-bpe 1 merge list");
    size_t i = ml;
    int cnt = 0;
    if (read_num(s, n, &i, '\n', &cnt)) MEGA_FAIL(MEGA_ERR_FORMAT, "bpe: bad merge count on the first line");
    if (cnt > MEGA_BPE_MAX_MERGES)
        MEGA_FAIL(MEGA_ERR_FORMAT, "bpe: %d merges, more than the %d a token id of 16 bits allows", cnt, MEGA_BPE_MAX_MERGES);
    int32_t *pair = malloc((size_t)(cnt > 0 ? cnt : 1) * 2 * sizeof *pair);
    if (!pair) MEGA_FAIL(MEGA_ERR_OOM, "bpe: out of memory");
    for (int k = 0; k < cnt; k++) {
        int x, y;
        if (read_num(s, n, &i, ' ', &x) || read_num(s, n, &i, '\n', &y)) {
            free(pair);
            MEGA_FAIL(MEGA_ERR_FORMAT, "bpe: merge %d of %d is not \"<id> <id>\" (the list is cut or corrupt)", k + 1, cnt);
        }
        /* a merge joins tokens that exist before it, never <pad> or </s> */
        const int lim = MEGA_S2S_VOCAB + k;
        if (x >= lim || y >= lim || x == MEGA_S2S_PAD || x == MEGA_S2S_EOS || y == MEGA_S2S_PAD || y == MEGA_S2S_EOS) {
            free(pair);
            MEGA_FAIL(MEGA_ERR_FORMAT, "bpe: merge %d (%d %d) uses a token that is not a byte or an earlier merge", k + 1, x, y);
        }
        pair[2 * k] = x, pair[2 * k + 1] = y;
    }
    if (i != n) {
        free(pair);
        MEGA_FAIL(MEGA_ERR_FORMAT, "bpe: %zu bytes after the %d merges", n - i, cnt);
    }
    return bpe_build(pair, cnt, out);
}

/* ---------------------------------------------------------------------------------------------
 * learning */

/* a growable int32 vector */
typedef struct {
    int32_t *v;
    int n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        int nc = a->cap ? 2 * a->cap : 4;
        int32_t *p = realloc(a->v, (size_t)nc * sizeof *p);
        if (!p) return -1;
        a->v = p, a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

/* the learner's state */
typedef struct {
    /* distinct units: their tokens at sym[uoff[u] .. uoff[u] + ulen[u]) (shrinking in place) */
    int32_t *sym;
    size_t *uoff;
    int *ulen;
    int64_t *freq;
    int nu;
    /* pairs: key -> index p; count[p], the units where p occurs (with repeats and stale ones) */
    uint64_t *pkey; /* key + 1, 0 = empty */
    int32_t *pidx;
    size_t pcap, np;
    uint64_t *key_of; /* [np] */
    int64_t *count;
    ivec *units;
    int *last; /* the last unit appended to units[p] (appends come unit by unit) */
    int *dirty;
    int64_t *pushed; /* the count last pushed into the heap (an entry with it is still there) */
    ivec touched;
    size_t pn_cap;
    /* max-heap of (count, key) */
    struct hent {
        int64_t c;
        uint64_t k;
    } *heap;
    size_t hn, hcap;
} learner;

static int hent_above(const struct hent *a, const struct hent *b) { return a->c > b->c || (a->c == b->c && a->k < b->k); }

static int heap_push(learner *L, int64_t c, uint64_t k) {
    if (L->hn == L->hcap) {
        size_t nc = L->hcap ? 2 * L->hcap : 1024;
        struct hent *h = realloc(L->heap, nc * sizeof *h);
        if (!h) return -1;
        L->heap = h, L->hcap = nc;
    }
    size_t i = L->hn++;
    L->heap[i] = (struct hent){c, k};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hent_above(&L->heap[i], &L->heap[p])) break;
        struct hent t = L->heap[i];
        L->heap[i] = L->heap[p], L->heap[p] = t, i = p;
    }
    return 0;
}

static struct hent heap_pop(learner *L) {
    struct hent top = L->heap[0];
    L->heap[0] = L->heap[--L->hn];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < L->hn && hent_above(&L->heap[l], &L->heap[m])) m = l;
        if (r < L->hn && hent_above(&L->heap[r], &L->heap[m])) m = r;
        if (m == i) break;
        struct hent t = L->heap[i];
        L->heap[i] = L->heap[m], L->heap[m] = t, i = m;
    }
    return top;
}

/* the index of pair key k, created when missing (-1: out of memory) */
static int64_t pair_index(learner *L, uint64_t k) {
    if (2 * (L->np + 1) > L->pcap) {
        size_t nc = L->pcap ? 2 * L->pcap : 1 << 16;
        uint64_t *nk = calloc(nc, sizeof *nk);
        int32_t *ni = malloc(nc * sizeof *ni);
        if (!nk || !ni) return free(nk), free(ni), -1;
        for (size_t i = 0; i < L->pcap; i++) {
            if (!L->pkey[i]) continue;
            size_t h = mix64(L->pkey[i]) & (nc - 1);
            while (nk[h]) h = (h + 1) & (nc - 1);
            nk[h] = L->pkey[i], ni[h] = L->pidx[i];
        }
        free(L->pkey), free(L->pidx);
        L->pkey = nk, L->pidx = ni, L->pcap = nc;
    }
    size_t h = mix64(k + 1) & (L->pcap - 1);
    while (L->pkey[h] && L->pkey[h] != k + 1) h = (h + 1) & (L->pcap - 1);
    if (L->pkey[h]) return L->pidx[h];
    if (L->np == L->pn_cap) {
        size_t nc = L->pn_cap ? 2 * L->pn_cap : 1 << 15;
        uint64_t *a = realloc(L->key_of, nc * sizeof *a);
        if (a) L->key_of = a;
        int64_t *c = realloc(L->count, nc * sizeof *c);
        if (c) L->count = c;
        ivec *u = realloc(L->units, nc * sizeof *u);
        if (u) L->units = u;
        int *la = realloc(L->last, nc * sizeof *la);
        if (la) L->last = la;
        int *d = realloc(L->dirty, nc * sizeof *d);
        if (d) L->dirty = d;
        int64_t *pu = realloc(L->pushed, nc * sizeof *pu);
        if (pu) L->pushed = pu;
        if (!a || !c || !u || !la || !d || !pu) return -1;
        L->pn_cap = nc;
    }
    const size_t p = L->np++;
    L->pkey[h] = k + 1, L->pidx[h] = (int32_t)p;
    L->key_of[p] = k, L->count[p] = 0, L->units[p] = (ivec){0}, L->last[p] = -1, L->dirty[p] = 0, L->pushed[p] = 0;
    return (int64_t)p;
}

/* add d * freq(u) to the count of pair (a, b) of unit u; with index, record u under the pair */
static int add_pair(learner *L, int u, int32_t a, int32_t b, int64_t d, int index) {
    const int64_t p = pair_index(L, pair_key(a, b));
    if (p < 0) return -1;
    L->count[p] += d * L->freq[u];
    if (!L->dirty[p]) {
        L->dirty[p] = 1;
        if (ivec_push(&L->touched, (int32_t)p)) return -1;
    }
    if (index && L->last[p] != u) {
        if (ivec_push(&L->units[p], u)) return -1;
        L->last[p] = u;
    }
    return 0;
}

/* add d * freq(u) to every adjacent pair of unit u; with index, record u under each pair */
static int unit_pairs(learner *L, int u, int64_t d, int index) {
    const int32_t *t = L->sym + L->uoff[u];
    for (int i = 0; i + 1 < L->ulen[u]; i++)
        if (add_pair(L, u, t[i], t[i + 1], d, index)) return -1;
    return 0;
}

/* Merge (x, y) into z in unit u (every occurrence, left to right), updating only the counts of
 * the pairs that change: the old pairs touching an occurrence go, the pairs holding z come, and
 * the unit is recorded under the new pairs only (its other pairs were there before, so it is in
 * their lists already). The pairs away from the occurrences are the same before and after, so
 * the counts end as a recount would make them, at a cost of the unit's length plus a few table
 * look-ups per occurrence. 0, 1 when (x, y) no longer occurs in u, -1 when out of memory. */
static int merge_unit(learner *L, int u, int32_t x, int32_t y, int32_t z) {
    int32_t *t = L->sym + L->uoff[u];
    const int n = L->ulen[u];
    unsigned char in[MEGA_BPE_MAX_UNIT]; /* learned units are at most this long */
    int has = 0;
    memset(in, 0, (size_t)n);
    for (int i = 0; i + 1 < n; i++) /* the occurrences, as merge_pair finds them */
        if (t[i] == x && t[i + 1] == y) in[i] = in[i + 1] = 1, has = 1, i++;
    if (!has) return 1; /* merged already (a repeat in the list) or no longer adjacent */
    for (int i = 0; i + 1 < n; i++)
        if ((in[i] || in[i + 1]) && add_pair(L, u, t[i], t[i + 1], -1, 0)) return -1;
    const int m = L->ulen[u] = (int)merge_pair(t, (size_t)n, x, y, z);
    for (int i = 0; i + 1 < m; i++)
        if ((t[i] == z || t[i + 1] == z) && add_pair(L, u, t[i], t[i + 1], 1, 1)) return -1;
    return 0;
}

/* push the changed counts into the heap; when stale entries outnumber the pairs, the heap is
 * rebuilt from the counts (its size stays within a few times the pairs; the pops, which skip
 * stale entries and break ties by key, give the same merges either way) */
static int flush_dirty(learner *L) {
    for (int i = 0; i < L->touched.n; i++) {
        const int32_t p = L->touched.v[i];
        L->dirty[p] = 0;
        if (L->count[p] > 0 && L->count[p] != L->pushed[p]) {
            if (heap_push(L, L->count[p], L->key_of[p])) return -1;
            L->pushed[p] = L->count[p];
        }
    }
    L->touched.n = 0;
    if (L->hn > 2 * L->np + (1 << 16)) {
        L->hn = 0;
        for (size_t p = 0; p < L->np; p++) {
            L->pushed[p] = L->count[p] > 0 ? L->count[p] : 0;
            if (L->count[p] > 0 && heap_push(L, L->count[p], L->key_of[p])) return -1;
        }
    }
    return 0;
}

static void learner_free(learner *L) {
    free(L->sym), free(L->uoff), free(L->ulen), free(L->freq);
    free(L->pkey), free(L->pidx), free(L->key_of), free(L->count), free(L->last), free(L->dirty), free(L->pushed);
    for (size_t p = 0; L->units && p < L->np; p++) free(L->units[p].v);
    free(L->units), free(L->touched.v), free(L->heap);
}

/* the end of the piece of a unit that starts at s[i] as learning sees it: the unit, cut after at
 * most MEGA_BPE_MAX_UNIT bytes at the start of a character (a run of continuation bytes, which
 * UTF-8 holds to 3, is not followed further), so that no learned token is longer and a merge's
 * work on a unit is bounded */
static size_t piece_end(const uint8_t *s, size_t n, size_t i) {
    size_t e = unit_end(s, MEGA_MIN(n, i + MEGA_BPE_MAX_UNIT + 1), i); /* not the whole rest of a long unit */
    if (e - i <= MEGA_BPE_MAX_UNIT) return e;
    e = i + MEGA_BPE_MAX_UNIT;
    for (int k = 0; k < 3 && e - i > 1 && (s[e] & 0xC0) == 0x80; k++) e--;
    return e;
}

/* a unit as keep_frequent sorts them */
struct ukey {
    int64_t freq;
    const uint8_t *s;
    int len, u;
};

/* the more frequent first, then by bytes (so the choice does not depend on the texts' order) */
static int ukey_cmp(const void *pa, const void *pb) {
    const struct ukey *a = pa, *b = pb;
    if (a->freq != b->freq) return a->freq > b->freq ? -1 : 1;
    const int c = memcmp(a->s, b->s, (size_t)MEGA_MIN(a->len, b->len));
    return c ? c : a->len - b->len;
}

/* More distinct unit bytes than MEGA_BPE_LEARN_BYTES: keep the most frequent units that fit, in
 * that order (ustart, ulen, freq rewritten in place); returns the bytes kept, or SIZE_MAX when
 * out of memory */
static size_t keep_frequent(learner *L, const uint8_t **ustart) {
    struct ukey *k = malloc((size_t)L->nu * sizeof *k);
    if (!k) return SIZE_MAX;
    for (int u = 0; u < L->nu; u++) k[u] = (struct ukey){L->freq[u], ustart[u], L->ulen[u], u};
    qsort(k, (size_t)L->nu, sizeof *k, ukey_cmp);
    size_t bytes = 0;
    int n = 0;
    while (n < L->nu && bytes + (size_t)k[n].len <= MEGA_BPE_LEARN_BYTES) bytes += (size_t)k[n++].len;
    for (int u = 0; u < n; u++) ustart[u] = k[u].s, L->ulen[u] = k[u].len, L->freq[u] = k[u].freq;
    L->nu = n;
    free(k);
    return bytes;
}

/* the distinct units of the texts with their counts (a hash of the unit bytes, grown at half load) */
static mega_status count_units(learner *L, const uint8_t *const *texts, const size_t *lens, size_t nt) {
    size_t hcap = 1 << 16;
    /* table slot -> unit; a unit's bytes are found through its first occurrence */
    int32_t *slot = malloc(hcap * sizeof *slot);
    uint64_t *uhash = NULL;
    const uint8_t **ustart = NULL;
    size_t ucap = 0, nsym = 0;
    mega_status st = MEGA_OK;
    if (!slot) return mega__error(MEGA_ERR_OOM, "bpe: out of memory");
    memset(slot, 0xff, hcap * sizeof *slot);
    for (size_t t = 0; t < nt && st == MEGA_OK; t++) {
        const uint8_t *s = texts[t];
        if (!s && lens[t]) {
            st = mega__error(MEGA_ERR_INVALID, "bpe: text %zu is NULL", t + 1);
            break;
        }
        for (size_t i = 0; i < lens[t];) {
            const size_t e = piece_end(s, lens[t], i), l = e - i;
            const uint64_t hv = mix64(mega_fnv1a64(s + i, l));
            size_t h = hv & (hcap - 1);
            while (slot[h] >= 0 && !(uhash[slot[h]] == hv && (size_t)L->ulen[slot[h]] == l && !memcmp(ustart[slot[h]], s + i, l)))
                h = (h + 1) & (hcap - 1);
            if (slot[h] < 0) {
                if ((size_t)L->nu == ucap) {
                    size_t nc = ucap ? 2 * ucap : 1 << 14;
                    const uint8_t **a = realloc(ustart, nc * sizeof *a);
                    if (a) ustart = a;
                    int *b = realloc(L->ulen, nc * sizeof *b);
                    if (b) L->ulen = b;
                    int64_t *c = realloc(L->freq, nc * sizeof *c);
                    if (c) L->freq = c;
                    uint64_t *d = realloc(uhash, nc * sizeof *d);
                    if (d) uhash = d;
                    if (!a || !b || !c || !d) {
                        st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
                        break;
                    }
                    ucap = nc;
                }
                const int u = L->nu++;
                ustart[u] = s + i, L->ulen[u] = (int)l, L->freq[u] = 0, uhash[u] = hv;
                slot[h] = u, nsym += l;
                if (2 * (size_t)L->nu > hcap) { /* grow: rehash every unit */
                    const size_t nc = 2 * hcap;
                    int32_t *ns = malloc(nc * sizeof *ns);
                    if (!ns) {
                        st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
                        break;
                    }
                    memset(ns, 0xff, nc * sizeof *ns);
                    for (int k = 0; k < L->nu; k++) {
                        size_t g = uhash[k] & (nc - 1);
                        while (ns[g] >= 0) g = (g + 1) & (nc - 1);
                        ns[g] = k;
                    }
                    free(slot), slot = ns, hcap = nc;
                    for (h = uhash[u] & (hcap - 1); slot[h] != u; h = (h + 1) & (hcap - 1)) {
                    }
                }
            }
            L->freq[slot[h]]++;
            i = e;
        }
    }
    if (st == MEGA_OK && nsym > MEGA_BPE_LEARN_BYTES && (nsym = keep_frequent(L, ustart)) == SIZE_MAX)
        st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
    if (st == MEGA_OK) {
        L->sym = malloc((nsym ? nsym : 1) * sizeof *L->sym);
        L->uoff = malloc(((size_t)L->nu + 1) * sizeof *L->uoff);
        if (!L->sym || !L->uoff) st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
        size_t o = 0;
        for (int u = 0; st == MEGA_OK && u < L->nu; u++) {
            L->uoff[u] = o;
            for (int k = 0; k < L->ulen[u]; k++) L->sym[o + (size_t)k] = ustart[u][k];
            o += (size_t)L->ulen[u];
        }
    }
    free(slot), free(ustart), free(uhash);
    return st;
}

mega_status mega_bpe_learn(const uint8_t *const *texts, const size_t *lens, size_t nt, int merges, int min_count,
                           mega_bpe **out) {
    *out = NULL;
    if (!texts || !lens) MEGA_FAIL(MEGA_ERR_INVALID, "bpe: no text to learn from");
    if (merges < 0 || merges > MEGA_BPE_MAX_MERGES)
        MEGA_FAIL(MEGA_ERR_INVALID, "bpe: %d merges is outside [0, %d]", merges, MEGA_BPE_MAX_MERGES);
    if (min_count < 1) min_count = 1;
    learner L;
    memset(&L, 0, sizeof L);
    mega_status st = count_units(&L, texts, lens, nt);
    int32_t *pair = malloc((size_t)(merges > 0 ? merges : 1) * 2 * sizeof *pair);
    if (st == MEGA_OK && !pair) st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
    for (int u = 0; st == MEGA_OK && u < L.nu; u++)
        if (unit_pairs(&L, u, 1, 1)) st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
    if (st == MEGA_OK && flush_dirty(&L)) st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
    int n = 0;
    while (st == MEGA_OK && n < merges && L.hn > 0) {
        const struct hent top = heap_pop(&L);
        const int64_t p = pair_index(&L, top.k);
        if (p < 0) {
            st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
            break;
        }
        if (L.count[p] != top.c) continue; /* a stale entry: the count changed since */
        if (top.c < min_count) break;
        const int32_t x = (int32_t)(top.k >> 32), y = (int32_t)(uint32_t)top.k, z = MEGA_S2S_VOCAB + n;
        pair[2 * n] = x, pair[2 * n + 1] = y;
        n++;
        /* every unit where (x, y) occurred (the units list is taken first: the updates may grow
         * the pair arrays) */
        ivec us = L.units[p];
        L.units[p] = (ivec){0};
        L.last[p] = -1;
        for (int j = 0; j < us.n && st == MEGA_OK; j++)
            if (merge_unit(&L, us.v[j], x, y, z) < 0) st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
        free(us.v);
        if (st == MEGA_OK && flush_dirty(&L)) st = mega__error(MEGA_ERR_OOM, "bpe: out of memory");
    }
    learner_free(&L);
    if (st != MEGA_OK) {
        free(pair);
        return st;
    }
    return bpe_build(pair, n, out);
}
