/* Parallel text (include/mega_data.h, src/data/pairs.c): the "source<TAB>target" loader (every
 * bad-line reason counted with its first line, strict mode's "file:LINE: reason", CRLF, BOM,
 * blank lines, a last line without newline, missing / directory / empty files, max_examples),
 * UTF-8 validation edge cases, single-source encoding, the exact tokens of a filled batch
 * (src / prev / tgt / pads), length batching (max_tokens and max_sentences respected, every
 * example exactly once, sorted without shuffle, deterministic from (seed, epoch)), and a
 * no-crash pass over random bytes. */
#include "mega_data.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char tmpdir[256];

static const char *tpath(const char *name) { return tl_path(tmpdir, name); }

static const char *put(const char *name, const char *s, size_t n) {
    const char *p = tpath(name);
    if (tl_write_file(p, s, n)) tl_check(0, "write %s", p);
    return p;
}
static const char *puts_(const char *name, const char *s) { return put(name, s, strlen(s)); }

/* rc is an error whose message contains needle */
static void expect_fail(mega_status rc, mega_status want, const char *what, const char *needle) {
    const char *m = mega_last_error();
    TL_CHECK(rc == want && (!needle || strstr(m, needle)), "%s: status %d (want %d), message contains '%s' (got: %s)", what, rc,
             want, needle ? needle : "", m);
}

/* the tokens of example i equal the bytes of src / tgt followed by </s> */
static int same_tokens(const mega_s2s_data *d, int i, const char *src, const char *tgt) {
    int sl = (int)strlen(src), tl = (int)strlen(tgt);
    if (d->src_len[i] != sl + 1 || d->tgt_len[i] != tl + 1) return 0;
    const uint16_t *s = mega_s2s_data_src(d, i), *t = mega_s2s_data_tgt(d, i);
    for (int k = 0; k < sl; k++)
        if (s[k] != (unsigned char)src[k]) return 0;
    for (int k = 0; k < tl; k++)
        if (t[k] != (unsigned char)tgt[k]) return 0;
    return s[sl] == MEGA_S2S_EOS && t[tl] == MEGA_S2S_EOS;
}

/* ---------------------------------------------------------------------------------------------
 * UTF-8 */
static void test_utf8(void) {
    struct {
        const char *s;
        size_t n;
        size_t want; /* mega_utf8_check */
        const char *what;
    } c[] = {
        {"", 0, 0, "empty"},
        {"hello", 5, 5, "ASCII"},
        {"caf\xc3\xa9", 5, 5, "2-byte e-acute"},
        {"\xe2\x82\xac", 3, 3, "3-byte euro sign"},
        {"\xf0\x9f\x98\x80", 4, 4, "4-byte emoji U+1F600"},
        {"\xf4\x8f\xbf\xbf", 4, 4, "U+10FFFF (the last code point)"},
        {"\xed\x9f\xbf", 3, 3, "U+D7FF (just below the surrogates)"},
        {"\xee\x80\x80", 3, 3, "U+E000 (just above the surrogates)"},
        {"\xc2\x80", 2, 2, "U+0080 (smallest 2-byte)"},
        {"\xe0\xa0\x80", 3, 3, "U+0800 (smallest 3-byte)"},
        {"\xf0\x90\x80\x80", 4, 4, "U+10000 (smallest 4-byte)"},
        {"a\0b", 3, 3, "NUL is U+0000"},
        {"\xc0\xaf", 2, 0, "overlong '/' (C0 AF)"},
        {"\xc1\xbf", 2, 0, "overlong (C1)"},
        {"ab\xe0\x80\xaf", 5, 2, "overlong 3-byte '/' (E0 80 AF)"},
        {"\xf0\x80\x80\xaf", 4, 0, "overlong 4-byte '/' (F0 80 80 AF)"},
        {"x\xed\xa0\x80", 4, 1, "surrogate U+D800"},
        {"\xed\xbf\xbf", 3, 0, "surrogate U+DFFF"},
        {"\xf4\x90\x80\x80", 4, 0, "U+110000 (above the range)"},
        {"\xf5\x80\x80\x80", 4, 0, "F5 lead byte"},
        {"\xff", 1, 0, "FF"},
        {"abc\x80", 4, 3, "lone continuation byte"},
        {"\xc3", 1, 0, "truncated 2-byte at the end"},
        {"ok\xe2\x82", 4, 2, "truncated 3-byte at the end"},
        {"\xf0\x9f\x98", 3, 0, "truncated emoji at the end"},
        {"\xf0\x9f\x98z", 4, 0, "emoji cut by an ASCII byte"},
        {"\xe2\x82z\xe2\x82\xac", 6, 0, "3-byte cut by an ASCII byte"},
        {"\xc3\xa9\xc3", 3, 2, "valid then truncated"},
        {"\xc3\xa9", 1, 0, "n cuts a 2-byte character (its next byte is not read)"},
        {"a\xf0\x9f\x98\x80", 4, 1, "n cuts an emoji (its last byte is not read)"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        size_t got = mega_utf8_check(c[i].s, c[i].n);
        TL_CHECK(got == c[i].want, "utf8: %s -> %zu (want %zu)", c[i].what, got, c[i].want);
    }
}

/* ---------------------------------------------------------------------------------------------
 * loading */
static void test_good(void) {
    /* BOM, CRLF, a blank line, "\r" alone, an emoji, a last line without newline */
    const char text[] = "\xef\xbb\xbfhello\tbonjour\r\n"
                        "\n"
                        "a\tb\n"
                        "\r\n"
                        "\xf0\x9f\x98\x80 ok\tcaf\xc3\xa9\r\n"
                        "x y z\tlast";
    const char *p = put("good.tsv", text, sizeof text - 1);
    mega_s2s_data d;
    mega_status rc = mega_s2s_data_load(p, NULL, &d);
    TL_CHECK(rc == MEGA_OK, "good file loads (%s)", rc ? mega_last_error() : "");
    if (rc) return;
    TL_CHECK(d.n == 4, "4 examples (got %d)", d.n);
    TL_CHECK(d.n_lines == 6 && d.n_blank == 2 && d.n_crlf == 3 && d.n_skipped == 0, "lines %d blank %d crlf %d skipped %d",
             d.n_lines, d.n_blank, d.n_crlf, d.n_skipped);
    TL_CHECK(d.n >= 4 && d.line[0] == 1 && d.line[1] == 3 && d.line[2] == 5 && d.line[3] == 6, "1-based line numbers 1 3 5 6");
    TL_CHECK(d.n >= 4 && same_tokens(&d, 0, "hello", "bonjour"), "line 1: BOM and CR stripped, bytes + </s>");
    TL_CHECK(d.n >= 4 && same_tokens(&d, 1, "a", "b"), "line 3: a / b");
    TL_CHECK(d.n >= 4 && same_tokens(&d, 2, "\xf0\x9f\x98\x80 ok", "caf\xc3\xa9"), "line 5: emoji and e-acute as bytes");
    TL_CHECK(d.n >= 4 && same_tokens(&d, 3, "x y z", "last"), "line 6 without a final newline");
    TL_CHECK(d.src_max == 8 && d.tgt_max == 8, "longest source %d target %d tokens (8, 8)", d.src_max, d.tgt_max);
    TL_CHECK(d.n_src_tokens == 6 + 2 + 8 + 6 && d.n_tgt_tokens == 8 + 2 + 6 + 5, "token totals %lld %lld",
             (long long)d.n_src_tokens, (long long)d.n_tgt_tokens);
    TL_CHECK(d.pool_n == (size_t)(d.n_src_tokens + d.n_tgt_tokens), "pool holds exactly the tokens");
    TL_CHECK(d.fingerprint == mega_fnv1a64(text, sizeof text - 1), "fingerprint = FNV-1a of the file bytes");
    char sum[64];
    TL_CHECK(mega_s2s_skip_summary(&d, sum, sizeof sum) == 0 && sum[0] == 0, "nothing skipped: empty summary");
    mega_s2s_data_free(&d);
    TL_CHECK(d.n == 0 && d.pool == NULL, "free empties");
    mega_s2s_data_free(&d);
    mega_s2s_data_free(NULL);

    /* a changed byte changes the fingerprint */
    mega_s2s_data d2;
    char t2[sizeof text];
    memcpy(t2, text, sizeof text);
    t2[sizeof text - 2] = 'T';
    if (mega_s2s_data_load(put("good2.tsv", t2, sizeof text - 1), NULL, &d2) == MEGA_OK) {
        TL_CHECK(d2.fingerprint != mega_fnv1a64(text, sizeof text - 1), "a changed byte changes the fingerprint");
        mega_s2s_data_free(&d2);
    } else
        tl_check(0, "good2 loads: %s", mega_last_error());

    /* max_examples: stop after 2 usable lines */
    mega_s2s_opts o = {0};
    o.max_examples = 2;
    if (mega_s2s_data_load(p, &o, &d) == MEGA_OK) {
        TL_CHECK(d.n == 2 && d.n_lines == 3 && same_tokens(&d, 1, "a", "b"), "max_examples 2: 2 examples, 3 lines read (n %d lines %d)",
                 d.n, d.n_lines);
        mega_s2s_data_free(&d);
    } else
        tl_check(0, "max_examples load: %s", mega_last_error());
}

/* every reason: lenient counts and first lines, then strict's message per single-line file */
static void test_bad(void) {
    const char *text = "ok\tfine\n"                     /* 1 */
                       "no tab here\n"                  /* 2 NO_TAB */
                       "a\tb\tc\n"                      /* 3 EXTRA_TAB */
                       "\ttarget only\n"                /* 4 EMPTY_SRC */
                       "source only\t\n"                /* 5 EMPTY_TGT */
                       "bad \xc0\xaf\tx\n"              /* 6 BAD_UTF8 (source, overlong) */
                       "x\tsurrogate \xed\xa0\x80\n"    /* 7 BAD_UTF8 (target) */
                       "0123456789\tshort\n"            /* 8 SRC_LONG with max_src_len 8 */
                       "short\t0123456789\n"            /* 9 TGT_LONG with max_tgt_len 8 */
                       "second no tab\r\n"              /* 10 NO_TAB */
                       "\t\n"                           /* 11 EMPTY_SRC (first reason wins) */
                       "trunc\t\xf0\x9f\x98\n"          /* 12 BAD_UTF8 (truncated emoji) */
                       "1234567\t1234567\n"             /* 13 exactly 8 tokens each: fine */
                       "emoji\t\xf0\x9f\x98\x80\n";     /* 14 fine */
    const char *p = puts_("bad.tsv", text);
    mega_s2s_opts o = {0};
    o.max_src_len = 8, o.max_tgt_len = 8;
    mega_s2s_data d;
    mega_status rc = mega_s2s_data_load(p, &o, &d);
    TL_CHECK(rc == MEGA_OK, "lenient load skips bad lines (%s)", rc ? mega_last_error() : "");
    if (rc) return;
    TL_CHECK(d.n == 3 && d.line[0] == 1 && d.line[1] == 13 && d.line[2] == 14, "3 usable lines: 1, 13, 14 (n %d)", d.n);
    int want_n[MEGA_S2S_BAD_N] = {2, 1, 2, 1, 3, 1, 1};
    int want_first[MEGA_S2S_BAD_N] = {2, 3, 4, 5, 6, 8, 9};
    for (int r = 0; r < MEGA_S2S_BAD_N; r++)
        TL_CHECK(d.n_bad[r] == want_n[r] && d.first_bad[r] == want_first[r], "reason %s: %d lines (want %d), first %d (want %d)",
                 mega_s2s_bad_name(r), d.n_bad[r], want_n[r], d.first_bad[r], want_first[r]);
    TL_CHECK(d.n_skipped == 11 && d.n_lines == 14 && d.n_crlf == 1, "11 skipped of 14 lines, 1 CRLF (skipped %d)", d.n_skipped);
    TL_CHECK(d.n == 3 && same_tokens(&d, 1, "1234567", "1234567"), "a line at exactly the limits is kept");
    char sum[512];
    int k = mega_s2s_skip_summary(&d, sum, sizeof sum);
    TL_CHECK(k == 11 && strstr(sum, "2 without a tab (first at line 2)") && strstr(sum, "1 with more than one tab (at line 3)") &&
                 strstr(sum, "3 with invalid UTF-8 (first at line 6)") && strstr(sum, "longer than max_tgt_len 8 (at line 9)"),
             "skip summary: %s", sum);
    char small[20];
    mega_s2s_skip_summary(&d, small, sizeof small);
    TL_CHECK(strlen(small) == sizeof small - 1, "summary cut to fit a small buffer");
    TL_CHECK(!strcmp(mega_s2s_bad_name(MEGA_S2S_BAD_UTF8), "bad-utf8") && !strcmp(mega_s2s_bad_name(99), "?"), "reason names");
    mega_s2s_data_free(&d);

    /* strict: the whole file fails at line 2 */
    o.strict = 1;
    rc = mega_s2s_data_load(p, &o, &d);
    char want[600];
    snprintf(want, sizeof want, "%s:2: no tab", p);
    expect_fail(rc, MEGA_ERR_FORMAT, "strict: first bad line", want);
    TL_CHECK(d.n == 0 && d.pool == NULL, "failed load leaves *d empty");
    mega_s2s_data_free(&d);

    /* strict: each reason alone, on line 2 of its file */
    struct {
        const char *line, *msg;
    } c[] = {
        {"no tab here\n", "no tab (expected source<TAB>target)"},
        {"a\tb\tc\n", "more than one tab"},
        {"\ttarget\n", "empty source"},
        {"source\t\r\n", "empty target"},
        {"ab\xc0\xaf\tx\n", "invalid UTF-8 in the source at column 3 (byte 0xc0)"},
        {"ab\tcd\xed\xa0\x80\n", "invalid UTF-8 in the target at column 6 (byte 0xed)"},
        {"x\t\xf0\x9f\x98", "invalid UTF-8 in the target at column 3 (byte 0xf0)"},
        {"\xff\tx\n", "invalid UTF-8 in the source at column 1 (byte 0xff)"},
        {"0123456789\tx\n", "source of 11 tokens (10 bytes + </s>) is longer than max_src_len 8"},
        {"x\t0123456789\n", "target of 11 tokens (10 bytes + </s>) is longer than max_tgt_len 8"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char body[128], name[32];
        snprintf(body, sizeof body, "fine\tline\n%s", c[i].line);
        snprintf(name, sizeof name, "strict%zu.tsv", i);
        const char *q = puts_(name, body);
        rc = mega_s2s_data_load(q, &o, &d);
        snprintf(want, sizeof want, "%s:2: %s", q, c[i].msg);
        expect_fail(rc, MEGA_ERR_FORMAT, c[i].msg, want);
        mega_s2s_data_free(&d);
        o.strict = 0; /* lenient: the same file loads with one example */
        rc = mega_s2s_data_load(q, &o, &d);
        TL_CHECK(rc == MEGA_OK && d.n == 1 && d.n_skipped == 1, "lenient: %s skipped", c[i].msg);
        mega_s2s_data_free(&d);
        o.strict = 1;
    }
    /* strict accepts blank lines, CRLF and a BOM */
    rc = mega_s2s_data_load(puts_("strict_ok.tsv", "\xef\xbb\xbf" "a\tb\r\n\r\n\nc\td"), &o, &d);
    TL_CHECK(rc == MEGA_OK && d.n == 2 && d.line[1] == 4, "strict: blank lines, CRLF, BOM are fine (%s)", rc ? mega_last_error() : "");
    mega_s2s_data_free(&d);
    /* the column after a BOM counts the BOM's bytes */
    rc = mega_s2s_data_load(puts_("strict_bom.tsv", "\xef\xbb\xbf\x80\tb\n"), &o, &d);
    snprintf(want, sizeof want, "%s:1: invalid UTF-8 in the source at column 4", tpath("strict_bom.tsv"));
    expect_fail(rc, MEGA_ERR_FORMAT, "BOM then a bad byte", want);
    mega_s2s_data_free(&d);
}

static void test_files(void) {
    mega_s2s_data d;
    mega_s2s_opts o = {0};
    mega_status rc = mega_s2s_data_load(tpath("missing.tsv"), NULL, &d);
    expect_fail(rc, MEGA_ERR_NOT_FOUND, "missing file", "missing.tsv");
    TL_CHECK(!strchr(mega_last_error(), '\n'), "one-line message");
    rc = mega_s2s_data_load(tmpdir, NULL, &d);
    expect_fail(rc, MEGA_ERR_IO, "a directory", "is a directory");
    rc = mega_s2s_data_load(puts_("empty.tsv", ""), NULL, &d);
    expect_fail(rc, MEGA_ERR_FORMAT, "empty file", "is empty");
    o.what = "--train";
    rc = mega_s2s_data_load(puts_("empty.tsv", ""), &o, &d);
    expect_fail(rc, MEGA_ERR_FORMAT, "empty file, named by the flag", "--train file");
    rc = mega_s2s_data_load(puts_("blank.tsv", "\n\r\n\n"), NULL, &d);
    expect_fail(rc, MEGA_ERR_FORMAT, "blank lines only", "no usable source<TAB>target line (3 lines: 3 blank)");
    rc = mega_s2s_data_load(puts_("allbad.tsv", "one\ntwo\nthree\tx\ty\n\n"), NULL, &d);
    expect_fail(rc, MEGA_ERR_FORMAT, "no usable line",
                "no usable source<TAB>target line (4 lines: 2 without a tab (first at line 1), 1 with more than one tab (at line 3), 1 blank)");
    TL_CHECK(d.n == 0 && d.pool == NULL && d.path == NULL, "failed load leaves *d empty");
    o.what = NULL;
    o.max_src_len = 2; /* 1 byte + </s> */
    rc = mega_s2s_data_load(puts_("toolong.tsv", "ab\tc\n"), &o, &d);
    expect_fail(rc, MEGA_ERR_FORMAT, "every line too long", "1 with a source longer than max_src_len 2 (at line 1)");
    rc = mega_s2s_data_load(NULL, NULL, &d);
    expect_fail(rc, MEGA_ERR_INVALID, "NULL path", "no file given");
    o.max_src_len = -1;
    rc = mega_s2s_data_load(tpath("good.tsv"), &o, &d);
    expect_fail(rc, MEGA_ERR_INVALID, "negative max_src_len", "negative");
    o.max_src_len = 0, o.max_tgt_len = 1;
    rc = mega_s2s_data_load(tpath("good.tsv"), &o, &d);
    expect_fail(rc, MEGA_ERR_INVALID, "max_tgt_len 1", "no room");
    mega_s2s_data_free(&d);
}

/* ---------------------------------------------------------------------------------------------
 * single sources */
static void test_tokenize(void) {
    int32_t tok[32];
    int len = -1;
    mega_status rc = mega_s2s_tokenize("hi \xf0\x9f\x98\x80\r\n", 9, 0, tok, &len);
    int ok = rc == MEGA_OK && len == 8 && tok[0] == 'h' && tok[1] == 'i' && tok[2] == ' ' && tok[3] == 0xf0 && tok[4] == 0x9f &&
             tok[5] == 0x98 && tok[6] == 0x80 && tok[7] == MEGA_S2S_EOS;
    TL_CHECK(ok, "tokenize: bytes + </s>, CRLF dropped (rc %d len %d)", rc, len);
    rc = mega_s2s_tokenize("abc", 3, 4, tok, &len);
    TL_CHECK(rc == MEGA_OK && len == 4 && tok[3] == MEGA_S2S_EOS, "tokenize: exactly at the limit");
    rc = mega_s2s_tokenize("abcd\n", 5, 4, tok, &len);
    expect_fail(rc, MEGA_ERR_INVALID, "tokenize: too long", "source: 5 tokens (4 bytes + </s>), more than the limit of 4");
    TL_CHECK(len == 0, "tokenize: len 0 on failure");
    rc = mega_s2s_tokenize("\n", 1, 0, tok, &len);
    expect_fail(rc, MEGA_ERR_FORMAT, "tokenize: empty line", "source: empty");
    rc = mega_s2s_tokenize("", 0, 0, tok, &len);
    expect_fail(rc, MEGA_ERR_FORMAT, "tokenize: empty", "source: empty");
    rc = mega_s2s_tokenize("ab\xed\xa0\x80", 5, 0, tok, &len);
    expect_fail(rc, MEGA_ERR_FORMAT, "tokenize: surrogate", "source: invalid UTF-8 at column 3 (byte 0xed)");
    rc = mega_s2s_tokenize("\xe0\x80\xaf", 3, 0, tok, &len);
    expect_fail(rc, MEGA_ERR_FORMAT, "tokenize: overlong", "invalid UTF-8 at column 1");
    rc = mega_s2s_tokenize("ok\xc3", 3, 0, tok, &len);
    expect_fail(rc, MEGA_ERR_FORMAT, "tokenize: truncated", "invalid UTF-8 at column 3 (byte 0xc3)");
    rc = mega_s2s_tokenize(NULL, 0, 0, tok, &len);
    expect_fail(rc, MEGA_ERR_INVALID, "tokenize: NULL", "NULL");
}

/* ---------------------------------------------------------------------------------------------
 * batches */
static void test_fill(void) {
    const char *p = puts_("fill.tsv", "abc\tXY\nd\tPQRS\n");
    mega_s2s_data d;
    if (mega_s2s_data_load(p, NULL, &d) != MEGA_OK) {
        tl_check(0, "fill file loads: %s", mega_last_error());
        return;
    }
    int idx[2] = {1, 0}, S = 0, L = 0;
    mega_status rc = mega_s2s_batch_shape(&d, idx, 2, &S, &L);
    TL_CHECK(rc == MEGA_OK && S == 4 && L == 5, "batch shape S %d L %d (want 4, 5)", S, L);
    int32_t src[8], prev[10], tgt[10], sl[2], tl[2];
    rc = mega_s2s_fill(&d, idx, 2, src, 4, prev, tgt, 5, sl, tl);
    const int P = MEGA_S2S_PAD, E = MEGA_S2S_EOS;
    const int32_t want_src[8] = {'d', E, P, P, 'a', 'b', 'c', E};
    const int32_t want_tgt[10] = {'P', 'Q', 'R', 'S', E, 'X', 'Y', E, P, P};
    const int32_t want_prev[10] = {E, 'P', 'Q', 'R', 'S', E, 'X', 'Y', P, P};
    TL_CHECK(rc == MEGA_OK && !memcmp(src, want_src, sizeof src), "src rows: bytes, </s>, right padding");
    TL_CHECK(rc == MEGA_OK && !memcmp(tgt, want_tgt, sizeof tgt), "tgt rows: bytes, </s>, right padding");
    TL_CHECK(rc == MEGA_OK && !memcmp(prev, want_prev, sizeof prev), "prev rows: </s> then tgt shifted right, padded where tgt is");
    TL_CHECK(rc == MEGA_OK && sl[0] == 2 && sl[1] == 4 && tl[0] == 5 && tl[1] == 3, "row lengths src 2 4, tgt 5 3");
    /* a wider batch pads further; NULL outputs are skipped */
    int32_t src6[12];
    rc = mega_s2s_fill(&d, idx, 2, src6, 6, NULL, NULL, 5, NULL, NULL);
    TL_CHECK(rc == MEGA_OK && src6[2] == P && src6[5] == P && src6[9] == E && src6[10] == P && src6[11] == P, "S wider than needed");
    rc = mega_s2s_fill(&d, idx, 2, src, 3, prev, tgt, 5, NULL, NULL);
    expect_fail(rc, MEGA_ERR_INVALID, "fill: S too small", "more than S=3");
    int bad[1] = {2};
    rc = mega_s2s_fill(&d, bad, 1, src, 4, prev, tgt, 5, NULL, NULL);
    expect_fail(rc, MEGA_ERR_INVALID, "fill: index out of range", "out of range");
    rc = mega_s2s_batch_shape(&d, bad, 1, &S, &L);
    expect_fail(rc, MEGA_ERR_INVALID, "shape: index out of range", "out of range");
    mega_s2s_data_free(&d);
}

/* every example exactly once, each batch within the limits; returns 1 when all hold */
static int plan_ok(const mega_s2s_data *d, const mega_s2s_plan *p, int max_tokens, int max_sent, const char *what) {
    int *seen = calloc((size_t)d->n, sizeof *seen), ok = p->n_idx == d->n, total = 0, oversize = 0;
    if (!seen) return 0;
    for (int b = 0; b < p->n && ok; b++) {
        const int *ix = p->idx + p->off[b];
        int c = p->count[b], S, L;
        if (c < 1 || p->off[b] < 0 || p->off[b] + c > p->n_idx || mega_s2s_batch_shape(d, ix, c, &S, &L)) {
            ok = 0;
            break;
        }
        int w = S > L ? S : L;
        if (max_tokens && (long)c * w > max_tokens) {
            if (c == 1) oversize++;
            else ok = 0;
        }
        if (max_sent && c > max_sent) ok = 0;
        for (int k = 0; k < c; k++) seen[ix[k]]++;
        total += c;
    }
    for (int i = 0; i < d->n && ok; i++) ok = seen[i] == 1;
    ok = ok && total == d->n && oversize == p->n_oversize;
    free(seen);
    TL_CHECK(ok, "%s: %d batches within max_tokens %d / max_sentences %d, every example once", what, p->n, max_tokens, max_sent);
    return ok;
}

static int same_order(const mega_s2s_plan *a, const mega_s2s_plan *b) {
    if (a->n != b->n || a->n_idx != b->n_idx) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->off[i] != b->off[i] || a->count[i] != b->count[i]) return 0;
    return !memcmp(a->idx, b->idx, (size_t)a->n_idx * sizeof *a->idx);
}

/* 300 lines of random lengths 1..60 bytes per side, loaded; 0 after a failed check */
enum { N_MANY = 300 };
static int many_pairs(mega_s2s_data *d) {
    enum { N = N_MANY };
    size_t cap = (size_t)N * 130, n = 0;
    char *text = malloc(cap);
    unsigned long long rs = 12345;
    for (int i = 0; i < N; i++) {
        int a = 1 + (int)(tl_rand01(&rs) * 60), b = 1 + (int)(tl_rand01(&rs) * 60);
        for (int k = 0; k < a; k++) text[n++] = (char)('a' + (i + k) % 26);
        text[n++] = '\t';
        for (int k = 0; k < b; k++) text[n++] = (char)('A' + (i * 7 + k) % 26);
        text[n++] = '\n';
    }
    const char *p = put("many.tsv", text, n);
    free(text);
    if (mega_s2s_data_load(p, NULL, d) != MEGA_OK || d->n != N) {
        tl_check(0, "many.tsv loads with %d examples: %s", N, mega_last_error());
        mega_s2s_data_free(d);
        return 0;
    }
    return 1;
}

/* a plan without shuffle is sorted, consecutive and greedy */
static void check_sorted_plan(const mega_s2s_data *d, const mega_s2s_plan *a) {
    /* no shuffle: sorted by (source, target, index), batches consecutive */
    plan_ok(d, a, 256, 0, "max_tokens 256, sorted");
    int sorted = 1, consecutive = 1;
    for (int k = 1; k < a->n_idx; k++) {
        int i = a->idx[k - 1], j = a->idx[k];
        int lt = d->src_len[i] < d->src_len[j] ||
                 (d->src_len[i] == d->src_len[j] && (d->tgt_len[i] < d->tgt_len[j] || (d->tgt_len[i] == d->tgt_len[j] && i < j)));
        sorted &= lt;
    }
    for (int k = 0; k < a->n; k++) consecutive &= a->off[k] == (k ? a->off[k - 1] + a->count[k - 1] : 0);
    TL_CHECK(sorted, "no shuffle: examples sorted by (source length, target length, index)");
    TL_CHECK(consecutive, "no shuffle: batches in sorted order");
    /* greedy: adding the next example to a batch would break the limit */
    int greedy = 1;
    for (int k = 0; k + 1 < a->n; k++) {
        int S, L;
        mega_s2s_batch_shape(d, a->idx + a->off[k], a->count[k] + 1, &S, &L);
        greedy &= (long)(a->count[k] + 1) * (S > L ? S : L) > 256;
    }
    TL_CHECK(greedy, "every batch is as large as the limit allows");
    TL_CHECK(a->n_oversize == 0 && a->max_count >= 4, "no oversize batch, largest %d", a->max_count);
}

/* shuffle: same (seed, epoch) -> same order; other epoch or seed -> another order; same batches */
static void check_shuffled_plan(const mega_s2s_data *d, const mega_s2s_plan *a, mega_s2s_plan *b) {
    mega_s2s_plan c;
    mega_s2s_batches(d, 256, 0, 7, 3, 1, b);
    mega_s2s_batches(d, 256, 0, 7, 3, 1, &c);
    TL_CHECK(same_order(b, &c), "shuffle is deterministic for (seed 7, epoch 3)");
    plan_ok(d, b, 256, 0, "shuffled");
    TL_CHECK(!memcmp(a->idx, b->idx, sizeof(int) * N_MANY), "shuffle keeps the example order inside the index array");
    int moved = 0;
    for (int k = 0; k < b->n; k++) moved += b->off[k] != a->off[k];
    TL_CHECK(moved > b->n / 2, "shuffle moves most batches (%d of %d)", moved, b->n);
    mega_s2s_plan_free(&c);
    mega_s2s_batches(d, 256, 0, 7, 4, 1, &c);
    TL_CHECK(!same_order(b, &c), "epoch 4 gives another order than epoch 3");
    mega_s2s_plan_free(&c);
    mega_s2s_batches(d, 256, 0, 8, 3, 1, &c);
    TL_CHECK(!same_order(b, &c), "seed 8 gives another order than seed 7");
    /* the documented recipe reproduces the order */
    {
        uint64_t st = mega_data_rng_seed(7 ^ (0x9E3779B97F4A7C15ull * 3));
        int *o = malloc((size_t)a->n * sizeof *o), *cn = malloc((size_t)a->n * sizeof *cn), same = 1;
        memcpy(o, a->off, (size_t)a->n * sizeof *o), memcpy(cn, a->count, (size_t)a->n * sizeof *cn);
        for (int i = a->n - 1; i > 0; i--) {
            int j = (int)mega_data_rng_below(&st, (uint64_t)i + 1), t = o[i], u = cn[i];
            o[i] = o[j], cn[i] = cn[j], o[j] = t, cn[j] = u;
        }
        for (int i = 0; i < a->n; i++) same &= o[i] == b->off[i] && cn[i] == b->count[i];
        TL_CHECK(same, "the documented Fisher-Yates recipe gives the same order");
        free(o), free(cn);
    }
    mega_s2s_plan_free(&c);

}

/* the limits: sentences, both, below the longest example, one huge batch, bad arguments */
static void check_plan_limits(const mega_s2s_data *d) {
    enum { N = N_MANY };
    mega_s2s_plan c, e;
    mega_status rc;
    /* max_sentences caps the count; both limits; sentences only */
    mega_s2s_batches(d, 0, 16, 1, 1, 1, &c);
    plan_ok(d, &c, 0, 16, "max_sentences 16 only");
    TL_CHECK(c.n == (N + 15) / 16 && c.max_count == 16, "sentences only: %d batches of up to 16", c.n);
    mega_s2s_plan_free(&c);
    mega_s2s_batches(d, 1000, 5, 1, 1, 0, &c);
    plan_ok(d, &c, 1000, 5, "max_tokens 1000 and max_sentences 5");
    TL_CHECK(c.max_count == 5, "max_sentences caps at 5");
    mega_s2s_plan_free(&c);
    /* a limit below the longest example: those become batches of one, counted */
    mega_s2s_batches(d, 40, 0, 1, 1, 0, &c);
    plan_ok(d, &c, 40, 0, "max_tokens 40 (some examples longer)");
    TL_CHECK(c.n_oversize > 0, "examples over max_tokens are alone (%d)", c.n_oversize);
    mega_s2s_plan_free(&c);
    /* one huge batch */
    mega_s2s_batches(d, 1 << 30, 0, 1, 1, 1, &c);
    TL_CHECK(c.n == 1 && c.count[0] == N && c.off[0] == 0, "a large max_tokens gives one batch");
    mega_s2s_plan_free(&c);

    rc = mega_s2s_batches(d, 0, 0, 1, 1, 0, &e);
    expect_fail(rc, MEGA_ERR_INVALID, "batches: no limit", "at least one");
    TL_CHECK(e.n == 0 && e.idx == NULL, "failed plan is empty");
    rc = mega_s2s_batches(d, -5, 0, 1, 1, 0, &e);
    expect_fail(rc, MEGA_ERR_INVALID, "batches: negative", "max_tokens -5");
    mega_s2s_plan_free(&e);
    mega_s2s_plan_free(NULL);
}

/* fill a whole shuffled epoch: every row's tokens match the stored example */
static void check_epoch_fill(const mega_s2s_data *d, const mega_s2s_plan *b) {
    int ok = 1;
    for (int k = 0; k < b->n && ok; k++) {
        const int *ix = b->idx + b->off[k];
        int B = b->count[k], S, L;
        mega_s2s_batch_shape(d, ix, B, &S, &L);
        int32_t *src = malloc(sizeof(int32_t) * (size_t)B * S), *prev = malloc(sizeof(int32_t) * (size_t)B * L),
                *tgt = malloc(sizeof(int32_t) * (size_t)B * L), *sl = malloc(sizeof(int32_t) * B);
        ok = mega_s2s_fill(d, ix, B, src, S, prev, tgt, L, sl, NULL) == MEGA_OK;
        for (int r = 0; r < B && ok; r++) {
            const uint16_t *ps = mega_s2s_data_src(d, ix[r]), *pt = mega_s2s_data_tgt(d, ix[r]);
            for (int t = 0; t < S; t++) ok &= src[(size_t)r * S + t] == (t < sl[r] ? ps[t] : MEGA_S2S_PAD);
            for (int t = 0; t < L; t++) {
                int tl = d->tgt_len[ix[r]];
                ok &= tgt[(size_t)r * L + t] == (t < tl ? pt[t] : MEGA_S2S_PAD);
                ok &= prev[(size_t)r * L + t] == (t >= tl ? MEGA_S2S_PAD : t ? pt[t - 1] : MEGA_S2S_EOS);
            }
        }
        free(src), free(prev), free(tgt), free(sl);
    }
    TL_CHECK(ok, "every batch of a shuffled epoch fills with the stored tokens");
}

static void test_batches(void) {
    mega_s2s_data d;
    if (!many_pairs(&d)) return;
    mega_s2s_plan a, b;
    /* no shuffle: sorted by (source, target, index), batches consecutive */
    mega_status rc = mega_s2s_batches(&d, 256, 0, 1, 1, 0, &a);
    TL_CHECK(rc == MEGA_OK, "batches (%s)", rc ? mega_last_error() : "");
    if (rc) return;
    check_sorted_plan(&d, &a);
    check_shuffled_plan(&d, &a, &b);
    check_plan_limits(&d);
    check_epoch_fill(&d, &b);
    mega_s2s_plan_free(&a), mega_s2s_plan_free(&b);
    mega_s2s_data_free(&d);
    mega_s2s_plan e;
    mega_s2s_data z;
    memset(&z, 0, sizeof z);
    rc = mega_s2s_batches(&z, 100, 0, 1, 1, 0, &e);
    expect_fail(rc, MEGA_ERR_INVALID, "batches: empty dataset", "no examples");
}

/* random bytes (tabs, newlines, CRs, high bytes) never crash the loader, lenient or strict */
static void test_fuzz(void) {
    unsigned long long rs = 99;
    const char alphabet[] = "ab\t\t\n\r\xc3\xa9\xf0\x9f\x98\x80\xed\xa0\xff\x80 ";
    int loaded = 0, failed = 0, consistent = 1;
    for (int it = 0; it < 300; it++) {
        char buf[200];
        size_t n = (size_t)(tl_rand01(&rs) * sizeof buf);
        for (size_t i = 0; i < n; i++) buf[i] = alphabet[(int)(tl_rand01(&rs) * (sizeof alphabet - 1))];
        const char *p = put("fuzz.tsv", buf, n);
        mega_s2s_opts o = {0};
        o.strict = it & 1;
        o.max_src_len = it % 3 ? 0 : 6;
        mega_s2s_data d;
        if (mega_s2s_data_load(p, &o, &d) == MEGA_OK) {
            loaded++;
            int s = 0;
            for (int r = 0; r < MEGA_S2S_BAD_N; r++) s += d.n_bad[r];
            consistent &= s == d.n_skipped && d.n + d.n_skipped + d.n_blank == d.n_lines;
            for (int i = 0; i < d.n; i++)
                consistent &= mega_s2s_data_src(&d, i)[d.src_len[i] - 1] == MEGA_S2S_EOS && mega_s2s_data_tgt(&d, i)[d.tgt_len[i] - 1] == MEGA_S2S_EOS;
        } else
            failed++;
        mega_s2s_data_free(&d);
    }
    TL_CHECK(consistent, "fuzz: counts add up, every sentence ends in </s> (%d loaded, %d rejected)", loaded, failed);
}

int main(void) {
    if (tl_mkdtemp(tmpdir, sizeof tmpdir, "mega_pairs_")) return tl_finish();
    test_utf8();
    test_good();
    test_bad();
    test_files();
    test_tokenize();
    test_fill();
    test_batches();
    test_fuzz();
    tl_rm_rf(tmpdir);
    return tl_finish();
}
