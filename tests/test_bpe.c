/* Byte-level BPE (include/mega_data.h, src/data/bpe.c): a hand-checked corpus (the merges, their
 * order, min_count, the encoding of a text); the incremental learner against a naive one that
 * recounts every pair at every merge (exact merge lists on random corpora, including ties);
 * encoding against a naive application of the merges; encode/decode round trips on random bytes
 * (spaces, NUL, invalid UTF-8); the text form both ways and every malformed form refused; the
 * order of the texts does not matter; parallel text loaded in subword units (token counts, the
 * limits counted in subwords, the text decoded back) and mega_s2s_tokenize_bpe; the learner's
 * bounds (4 MB without a space, tokens of whole characters). */
#include "mega_data.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* ---------------------------------------------------------------------------------------------
 * the naive references: units cut before every space; every merge recounts every pair */

typedef struct {
    int32_t *t;
    int n;
} unit;

static int cut_units(const uint8_t *const *tx, const size_t *ln, size_t nt, unit **out) {
    int cap = 16, n = 0;
    unit *u = malloc((size_t)cap * sizeof *u);
    for (size_t k = 0; k < nt; k++)
        for (size_t i = 0; i < ln[k];) {
            size_t j = i + 1;
            while (j < ln[k] && tx[k][j] != ' ') j++;
            if (n == cap) u = realloc(u, (size_t)(cap *= 2) * sizeof *u);
            u[n].n = (int)(j - i);
            u[n].t = malloc((j - i) * sizeof(int32_t));
            for (size_t q = i; q < j; q++) u[n].t[q - i] = tx[k][q];
            n++;
            i = j;
        }
    *out = u;
    return n;
}

static void merge_all(int32_t *t, int *n, int32_t x, int32_t y, int32_t z) {
    int w = 0;
    for (int i = 0; i < *n; i++) {
        if (i + 1 < *n && t[i] == x && t[i + 1] == y) t[w++] = z, i++;
        else t[w++] = t[i];
    }
    *n = w;
}

/* naive learning: the most frequent pair (ties: smaller left, then right), counted afresh */
static int naive_learn(const uint8_t *const *tx, const size_t *ln, size_t nt, int merges, int min_count, int32_t *pair) {
    unit *u;
    const int nu = cut_units(tx, ln, nt, &u);
    int m = 0;
    for (; m < merges; m++) {
        /* count pairs: a small open table is enough for test corpora */
        enum { H = 1 << 16 };
        static int64_t key[H], cnt[H];
        for (int i = 0; i < H; i++) key[i] = -1, cnt[i] = 0;
        for (int k = 0; k < nu; k++)
            for (int i = 0; i + 1 < u[k].n; i++) {
                const int64_t kk = ((int64_t)u[k].t[i] << 32) | u[k].t[i + 1];
                size_t h = (size_t)((uint64_t)kk * 0x9E3779B97F4A7C15ULL >> 48);
                while (key[h] != -1 && key[h] != kk) h = (h + 1) % H;
                key[h] = kk, cnt[h]++;
            }
        int64_t best = -1, bc = 0;
        for (int i = 0; i < H; i++)
            if (key[i] != -1 && (cnt[i] > bc || (cnt[i] == bc && key[i] < best))) best = key[i], bc = cnt[i];
        if (best < 0 || bc < min_count) break;
        const int32_t x = (int32_t)(best >> 32), y = (int32_t)(best & 0xffffffff), z = MEGA_S2S_VOCAB + m;
        pair[2 * m] = x, pair[2 * m + 1] = y;
        for (int k = 0; k < nu; k++) merge_all(u[k].t, &u[k].n, x, y, z);
    }
    for (int k = 0; k < nu; k++) free(u[k].t);
    free(u);
    return m;
}

/* the merges of b as a pair list (through its text form) */
static int merges_of(const mega_bpe *b, int32_t *pair) {
    size_t len;
    char *s = mega_bpe_to_string(b, &len);
    int n = 0;
    const char *p = strchr(s, '\n') + 1;
    while (*p) {
        int x, y;
        if (sscanf(p, "%d %d", &x, &y) != 2) break;
        pair[2 * n] = x, pair[2 * n + 1] = y, n++;
        p = strchr(p, '\n') + 1;
    }
    free(s);
    return n;
}

/* naive encoding of one text: per unit, the earliest merge present replaces all of its occurrences */
static size_t naive_encode(const int32_t *pair, int nm, const uint8_t *s, size_t n, int32_t *ids) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && s[j] != ' ') j++;
        int len = (int)(j - i);
        int32_t *t = ids + o;
        for (int q = 0; q < len; q++) t[q] = s[i + (size_t)q];
        for (;;) {
            int best = -1;
            for (int r = 0; r < nm && best < 0; r++)
                for (int q = 0; q + 1 < len; q++)
                    if (t[q] == pair[2 * r] && t[q + 1] == pair[2 * r + 1]) {
                        best = r;
                        break;
                    }
            if (best < 0) break;
            merge_all(t, &len, pair[2 * best], pair[2 * best + 1], MEGA_S2S_VOCAB + best);
        }
        o += (size_t)len;
        i = j;
    }
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * by hand */

static void test_hand(void) {
    /* units "abab" (1), " ab" (1), "ab" (1): (a,b) occurs 4 times -> 258; then (' ', 258) and
     * (258, 258) once each: the tie goes to the smaller left id (32) -> 259, then 260 */
    const uint8_t *tx[] = {(const uint8_t *)"abab ab", (const uint8_t *)"ab"};
    const size_t ln[] = {7, 2};
    mega_bpe *b = NULL;
    mega_status st = mega_bpe_learn(tx, ln, 2, 10, 1, &b);
    int32_t p[20];
    int n = st == MEGA_OK ? merges_of(b, p) : -1;
    TL_CHECK(n == 3 && p[0] == 'a' && p[1] == 'b' && p[2] == ' ' && p[3] == 258 && p[4] == 258 && p[5] == 258,
             "hand: merges (a b), (' ' 258), (258 258) (got %d)", n);
    TL_CHECK(mega_bpe_vocab_size(b) == 261 && mega_bpe_merges(b) == 3, "hand: 261 tokens");
    size_t l;
    const uint8_t *t = mega_bpe_token(b, 260, &l);
    TL_CHECK(t && l == 4 && !memcmp(t, "abab", 4), "hand: token 260 is 'abab'");
    t = mega_bpe_token(b, 259, &l);
    TL_CHECK(t && l == 3 && !memcmp(t, " ab", 3), "hand: token 259 is ' ab'");
    TL_CHECK(mega_bpe_token(b, MEGA_S2S_EOS, &l) && l == 0 && !mega_bpe_token(b, 261, &l) && !mega_bpe_token(b, -1, NULL),
             "hand: </s> has no bytes; ids outside the vocabulary have no token");
    int32_t ids[16];
    size_t k = mega_bpe_encode(b, (const uint8_t *)"abab ab", 7, ids);
    TL_CHECK(k == 2 && ids[0] == 260 && ids[1] == 259, "hand: 'abab ab' encodes as [260, 259] (got %zu tokens)", k);
    /* "ba" has no merge: bytes; "aab" takes (a b) at its end */
    k = mega_bpe_encode(b, (const uint8_t *)"ba aab", 6, ids);
    TL_CHECK(k == 5 && ids[0] == 'b' && ids[1] == 'a' && ids[2] == ' ' && ids[3] == 'a' && ids[4] == 258,
             "hand: 'ba aab' -> b a ' ' a 258 (merges never cross the space before 'aab')");
    uint8_t out[32];
    const int32_t seq[] = {260, MEGA_S2S_EOS, 259, MEGA_S2S_PAD};
    TL_CHECK(mega_bpe_decode(b, seq, 4, out) == 7 && !memcmp(out, "abab ab", 7), "hand: decode skips </s> and <pad>");
    mega_bpe_free(b);
    /* min_count 2 stops after the first merge; 0 merges is the byte vocabulary */
    st = mega_bpe_learn(tx, ln, 2, 10, 2, &b);
    TL_CHECK(st == MEGA_OK && mega_bpe_merges(b) == 1, "hand: min_count 2 keeps the one pair seen twice");
    mega_bpe_free(b);
    st = mega_bpe_learn(tx, ln, 2, 0, 1, &b);
    k = st == MEGA_OK ? mega_bpe_encode(b, (const uint8_t *)"ab", 2, ids) : 0;
    TL_CHECK(st == MEGA_OK && mega_bpe_vocab_size(b) == 258 && k == 2 && ids[0] == 'a', "hand: 0 merges = bytes");
    mega_bpe_free(b);
    TL_CHECK(mega_bpe_learn(tx, ln, 2, -1, 1, &b) == MEGA_ERR_INVALID && !b &&
                 mega_bpe_learn(tx, ln, 2, MEGA_BPE_MAX_MERGES + 1, 1, &b) == MEGA_ERR_INVALID,
             "hand: a merge count outside [0, %d] is refused", MEGA_BPE_MAX_MERGES);
    TL_CHECK(mega_bpe_encode(NULL, (const uint8_t *)"xy", 2, ids) == 2 && ids[1] == 'y', "hand: no BPE = bytes");
}

/* ---------------------------------------------------------------------------------------------
 * random corpora: the learner and the encoder against the naive ones; round trips */

static void random_corpus(uint64_t *r, int nt, int maxlen, const char *alpha, uint8_t **buf, const uint8_t **tx, size_t *ln) {
    const size_t na = strlen(alpha);
    *buf = malloc((size_t)nt * (size_t)maxlen + 1);
    size_t o = 0;
    for (int k = 0; k < nt; k++) {
        const size_t len = 1 + rng_next(r) % (uint64_t)maxlen;
        tx[k] = *buf + o, ln[k] = len;
        for (size_t i = 0; i < len; i++) (*buf)[o++] = (uint8_t)alpha[rng_next(r) % na];
    }
}

static void test_random(void) {
    uint64_t r = 12345;
    int same = 0, enc_ok = 0, trips = 0, shuffled = 0;
    const int trials = 24;
    for (int trial = 0; trial < trials; trial++) {
        const uint8_t *tx[64];
        size_t ln[64];
        uint8_t *buf;
        const int nt = 8 + trial % 40;
        random_corpus(&r, nt, 30, trial % 2 ? "ab c" : "abcd  e", &buf, tx, ln);
        const int merges = 5 + trial * 3, minc = 1 + trial % 3;
        mega_bpe *b = NULL;
        if (mega_bpe_learn(tx, ln, (size_t)nt, merges, minc, &b) != MEGA_OK) {
            tl_check(0, "random: learn failed: %s", mega_last_error());
            free(buf);
            continue;
        }
        int32_t want[2 * 200], got[2 * 200];
        const int nw = naive_learn(tx, ln, (size_t)nt, merges, minc, want), ng = merges_of(b, got);
        same += nw == ng && !memcmp(want, got, (size_t)nw * 2 * sizeof(int32_t));
        /* the same texts in reverse order learn the same merges */
        const uint8_t *rtx[64];
        size_t rln[64];
        for (int k = 0; k < nt; k++) rtx[k] = tx[nt - 1 - k], rln[k] = ln[nt - 1 - k];
        mega_bpe *b2 = NULL;
        int32_t got2[2 * 200];
        if (mega_bpe_learn(rtx, rln, (size_t)nt, merges, minc, &b2) == MEGA_OK)
            shuffled += merges_of(b2, got2) == ng && !memcmp(got, got2, (size_t)ng * 2 * sizeof(int32_t));
        mega_bpe_free(b2);
        /* encoding: the learner's texts and new ones against the naive application */
        int ok = 1;
        for (int k = 0; k < nt && ok; k++) {
            int32_t a[64], e[64];
            const size_t na = mega_bpe_encode(b, tx[k], ln[k], a), ne = naive_encode(got, ng, tx[k], ln[k], e);
            ok = na == ne && !memcmp(a, e, na * sizeof(int32_t));
        }
        enc_ok += ok;
        free(buf);
        /* round trips on arbitrary bytes (NUL, invalid UTF-8, runs of spaces) */
        int rt = 1;
        for (int k = 0; k < 20 && rt; k++) {
            uint8_t s[80], d[80 * 8];
            int32_t ids[80];
            const size_t n = rng_next(&r) % 80;
            for (size_t i = 0; i < n; i++) s[i] = (uint8_t)(rng_next(&r) % 4 == 0 ? ' ' : rng_next(&r) % 256);
            const size_t m = mega_bpe_encode(b, s, n, ids);
            rt = m <= n && mega_bpe_decode(b, ids, m, d) == n && !memcmp(s, d, n);
        }
        trips += rt;
        mega_bpe_free(b);
    }
    TL_CHECK(same == trials, "random: the learner's merges = the naive recount's on %d/%d corpora", same, trials);
    TL_CHECK(shuffled == trials, "random: the texts' order does not change the merges (%d/%d)", shuffled, trials);
    TL_CHECK(enc_ok == trials, "random: encoding = the naive application of the merges (%d/%d)", enc_ok, trials);
    TL_CHECK(trips == trials, "random: decode(encode(bytes)) = bytes, never more tokens than bytes (%d/%d)", trips, trials);
}

/* ---------------------------------------------------------------------------------------------
 * the text form */

static void test_text_form(void) {
    const uint8_t *tx[] = {(const uint8_t *)"the theme then there the", (const uint8_t *)"other thermal"};
    const size_t ln[] = {24, 13};
    mega_bpe *b = NULL, *c = NULL;
    mega_bpe_learn(tx, ln, 2, 20, 1, &b);
    size_t len;
    char *s = mega_bpe_to_string(b, &len);
    mega_status st = mega_bpe_from_string(s, len, &c);
    int same = st == MEGA_OK && mega_bpe_merges(c) == mega_bpe_merges(b);
    for (int v = 0; same && v < mega_bpe_vocab_size(b); v++) {
        size_t l1, l2;
        const uint8_t *t1 = mega_bpe_token(b, v, &l1), *t2 = mega_bpe_token(c, v, &l2);
        same = l1 == l2 && !memcmp(t1, t2, l1);
    }
    TL_CHECK(same, "text form: to_string then from_string gives the same tokens (%d merges)", mega_bpe_merges(b));
    mega_bpe_free(c);
    free(s);
    mega_bpe_free(b);
    struct {
        const char *s, *why;
    } bad[] = {
        {"", "not a mega-bpe"},
        {"mega-bpe 2 0\n", "not a mega-bpe"},
        {"mega-bpe 1 x\n", "merge count"},
        {"mega-bpe 1 1\n", "merge 1 of 1"},
        {"mega-bpe 1 1\n97 98", "merge 1 of 1"},
        {"mega-bpe 1 1\n97 98\nextra", "bytes after"},
        {"mega-bpe 1 1\n97 256\n", "not a byte or an earlier merge"},
        {"mega-bpe 1 1\n257 98\n", "not a byte or an earlier merge"},
        {"mega-bpe 1 1\n258 98\n", "not a byte or an earlier merge"},
        {"mega-bpe 1 2\n97 98\n97 98\n", "repeats"},
        {"mega-bpe 1 2\n97 98\n-1 98\n", "merge 2 of 2"},
        {"mega-bpe 1 1\n97  98\n", "merge 1 of 1"},
        {"mega-bpe 1 99999999\n", "more than"},
        {"mega-bpe 1 1\n0000000000097 98\n", "merge 1 of 1"},
        {"mega-bpe 1 1\n097 98\n", "merge 1 of 1"},
        {"mega-bpe 1 01\n97 98\n", "merge count"},
    };
    int ok = 0;
    const int nb = (int)(sizeof bad / sizeof *bad);
    for (int i = 0; i < nb; i++) {
        mega_bpe *x = (mega_bpe *)&ok; /* must come back NULL */
        st = mega_bpe_from_string(bad[i].s, strlen(bad[i].s), &x);
        const int good = st == MEGA_ERR_FORMAT && !x && strstr(mega_last_error(), bad[i].why);
        if (!good) tl_check(0, "text form: '%s' refused with '%s' (got %d: %s)", bad[i].s, bad[i].why, st, mega_last_error());
        ok += good;
    }
    TL_CHECK(ok == nb, "text form: %d/%d malformed merge lists refused with their reason", ok, nb);
    mega_bpe *z = NULL;
    TL_CHECK(mega_bpe_from_string("mega-bpe 1 0\n", 13, &z) == MEGA_OK && mega_bpe_merges(z) == 0, "text form: 0 merges");
    mega_bpe_free(z);
}

/* ---------------------------------------------------------------------------------------------
 * parallel text in subword units */

static void test_pairs(void) {
    char dir[256], path[300];
    if (tl_mkdtemp(dir, sizeof dir, "mega_bpe_")) return;
    snprintf(path, sizeof path, "%s/p.tsv", dir);
    const char *text = "Hafenarbeiter\tdock workers\nHafen\tharbour\nArbeiter\tworkers\nlong long long\tworkers workers\n";
    tl_write_file(path, text, strlen(text));
    const uint8_t *tx[] = {(const uint8_t *)"Hafenarbeiter", (const uint8_t *)"dock workers", (const uint8_t *)"Hafen",
                           (const uint8_t *)"harbour", (const uint8_t *)"Arbeiter", (const uint8_t *)"workers",
                           (const uint8_t *)"long long long"};
    const size_t ln[] = {13, 12, 5, 7, 8, 7, 14};
    mega_bpe *b = NULL;
    mega_bpe_learn(tx, ln, 7, 40, 1, &b);
    mega_s2s_opts o = {0, 0, 0, 0, NULL, "--seq-len", b, b};
    mega_s2s_data d;
    mega_status st = mega_s2s_data_load(path, &o, &d);
    int ok = st == MEGA_OK && d.n == 4;
    for (int i = 0; ok && i < d.n; i++) {
        /* each side decodes back to its text, </s> last */
        const char *line = text;
        for (int k = 0; k < i; k++) line = strchr(line, '\n') + 1;
        const char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        int32_t ids[64];
        uint8_t out[128];
        for (int side = 0; side < 2 && ok; side++) {
            const uint16_t *t = side ? mega_s2s_data_tgt(&d, i) : mega_s2s_data_src(&d, i);
            const int n = side ? d.tgt_len[i] : d.src_len[i];
            for (int k = 0; k < n; k++) ids[k] = t[k];
            const size_t m = mega_bpe_decode(b, ids, (size_t)n, out);
            const char *w = side ? tab + 1 : line;
            const size_t wl = side ? (size_t)(nl - tab - 1) : (size_t)(tab - line);
            ok = t[n - 1] == MEGA_S2S_EOS && m == wl && !memcmp(out, w, wl) && (size_t)n <= wl + 1;
        }
    }
    TL_CHECK(ok, "pairs: subword tokens decode to each side's text, </s> last");
    TL_CHECK(ok && d.n_tgt_bytes == 12 + 7 + 7 + 15 && d.n_tgt_tokens < d.n_tgt_bytes, "pairs: byte and token counts");
    /* the limits count subword tokens: "long long long" is 14 bytes but few tokens */
    int32_t w[64];
    const size_t lt = mega_bpe_encode(b, (const uint8_t *)"long long long", 14, w);
    mega_s2s_data_free(&d);
    mega_s2s_opts o2 = {(int)lt + 1, 0, 0, 0, NULL, "--seq-len", b, b};
    st = mega_s2s_data_load(path, &o2, &d);
    TL_CHECK(st == MEGA_OK && d.n == 4 && lt + 1 < 15, "pairs: a limit of %zu subword tokens keeps the 14-byte source", lt + 1);
    mega_s2s_data_free(&d);
    o2.max_src_len = (int)lt;
    st = mega_s2s_data_load(path, &o2, &d);
    char sum[256];
    mega_s2s_skip_summary(&d, sum, sizeof sum);
    TL_CHECK(st == MEGA_OK && d.n == 3 && d.n_bad[MEGA_S2S_BAD_SRC_LONG] == 1 && strstr(sum, "--seq-len"),
             "pairs: one token fewer skips it and counts it (%s)", sum);
    mega_s2s_data_free(&d);
    /* one source line */
    int32_t tok[64];
    int len = 0;
    st = mega_s2s_tokenize_bpe(b, "Hafenarbeiter\n", 14, 0, tok, &len);
    const size_t want = mega_bpe_encode(b, (const uint8_t *)"Hafenarbeiter", 13, w);
    TL_CHECK(st == MEGA_OK && len == (int)want + 1 && tok[len - 1] == MEGA_S2S_EOS && !memcmp(tok, w, want * 4),
             "tokenize: a source line in subwords + </s> (%d tokens)", len);
    st = mega_s2s_tokenize_bpe(b, "Hafenarbeiter", 13, (int)want, tok, &len);
    TL_CHECK(st == MEGA_ERR_INVALID && strstr(mega_last_error(), "subwords") && len == 0,
             "tokenize: over the limit in subwords is refused (%s)", mega_last_error());
    mega_bpe_free(b);
    tl_rm_rf(dir);
}

/* the learner's bounds: 4 MB without a space (one unit) learns 4000 merges in pieces of at most
 * MEGA_BPE_MAX_UNIT bytes (it ran for minutes in gigabytes as one unit, its tokens growing to
 * megabytes); a long unit of 2- and 3-byte characters is cut at character starts only */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_bounds(void) {
    const size_t n = (size_t)4 << 20;
    uint8_t *buf = malloc(n);
    uint64_t r = 99;
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)('a' + rng_next(&r) % 26);
    const uint8_t *tx[1] = {buf};
    size_t ln[1] = {n}, longest = 0;
    mega_bpe *b = NULL;
    const double t0 = now_s();
    mega_status st = mega_bpe_learn(tx, ln, 1, 4000, 2, &b);
    const double dt = now_s() - t0;
    for (int v = 0; st == MEGA_OK && v < mega_bpe_vocab_size(b); v++) {
        size_t l;
        mega_bpe_token(b, v, &l);
        if (l > longest) longest = l;
    }
    TL_CHECK(st == MEGA_OK && mega_bpe_merges(b) == 4000 && longest <= MEGA_BPE_MAX_UNIT && dt < 30,
             "4 MB without a space: 4000 merges in %.1f s (under 30), tokens of at most %zu bytes (limit %d)", dt, longest,
             MEGA_BPE_MAX_UNIT);
    mega_bpe_free(b);
    /* "ä€" (2 + 3 bytes) repeated, one unit: learned from in pieces cut at character starts, so
     * the longest token (a whole piece) is whole characters (cut at 64 bytes it would end inside
     * one) */
    size_t o = 0;
    for (int k = 0; k < 4000; k++) memcpy(buf + o, k % 2 ? "\xE2\x82\xAC" : "\xC3\xA4", k % 2 ? 3 : 2), o += k % 2 ? 3 : 2;
    ln[0] = o;
    st = mega_bpe_learn(tx, ln, 1, 200, 1, &b);
    const uint8_t *lp = NULL;
    longest = 0;
    for (int v = 0; st == MEGA_OK && v < mega_bpe_vocab_size(b); v++) {
        size_t l;
        const uint8_t *q = mega_bpe_token(b, v, &l);
        if (l > longest) longest = l, lp = q;
    }
    TL_CHECK(lp && longest <= MEGA_BPE_MAX_UNIT && longest > MEGA_BPE_MAX_UNIT - 5 && mega_utf8_check(lp, longest) == longest,
             "a unit of 2- and 3-byte characters: the longest token, %zu bytes, is whole characters", longest);
    mega_bpe_free(b);
    free(buf);
}

int main(void) {
    test_hand();
    test_random();
    test_text_form();
    test_pairs();
    test_bounds();
    return tl_finish();
}
