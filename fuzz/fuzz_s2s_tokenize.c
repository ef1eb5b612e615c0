/* One source sentence as the translation model's input (mega_s2s_tokenize, `mega translate` on
 * stdin lines), in bytes and in subword units (mega_s2s_tokenize_bpe with a fixed merge list):
 * the first byte is max_len (0 = no limit, else 2..128), the rest the line. Invariants: a success
 * gives the line's bytes (one final "\n" or "\r\n" dropped) then </s>, or subword tokens that
 * decode to those bytes; both accept and refuse the same lines but for the length; a failure
 * leaves *len = 0. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const unsigned b0 = fz_byte(&in);
    const int max_len = b0 % 128 ? 1 + (int)(b0 % 128) : 0;
    int32_t *tok = malloc((in.n + 1) * sizeof *tok);
    FZ_CHECK(tok);
    int len = -1;
    /* a copy of exactly in.n bytes, so reading past the line is an ASan report */
    char *s = malloc(in.n ? in.n : 1);
    FZ_CHECK(s);
    if (in.n) memcpy(s, in.p, in.n);
    mega_status st = mega_s2s_tokenize(s, in.n, max_len, tok, &len);
    if (st == MEGA_OK) {
        size_t m = in.n;
        if (m && s[m - 1] == '\n') m--;
        if (m && s[m - 1] == '\r') m--;
        FZ_CHECK(len == (int)m + 1 && tok[m] == MEGA_S2S_EOS);
        if (max_len) FZ_CHECK(len <= max_len);
        for (size_t i = 0; i < m; i++) FZ_CHECK(tok[i] == (unsigned char)s[i]);
        FZ_CHECK(mega_utf8_check(s, m) == m);
    } else {
        FZ_CHECK(len == 0);
        FZ_CHECK(st == MEGA_ERR_FORMAT || st == MEGA_ERR_INVALID);
    }
    /* the same line in subword units: "th", "the", " the", "er", "en", " d", "ie", " der" */
    static mega_bpe *bpe;
    if (!bpe) {
        static const char merges[] = "mega-bpe 1 8\n116 104\n258 101\n32 259\n101 114\n101 110\n32 100\n105 101\n263 261\n";
        FZ_CHECK(mega_bpe_from_string(merges, sizeof merges - 1, &bpe) == MEGA_OK);
    }
    int blen = -1;
    mega_status sb = mega_s2s_tokenize_bpe(bpe, s, in.n, max_len, tok, &blen);
    if (sb == MEGA_OK) {
        size_t m = in.n;
        if (m && s[m - 1] == '\n') m--;
        if (m && s[m - 1] == '\r') m--;
        FZ_CHECK(blen >= 1 && (size_t)blen <= m + 1 && tok[blen - 1] == MEGA_S2S_EOS);
        if (max_len) FZ_CHECK(blen <= max_len);
        uint8_t *out = malloc(m * 4 + 1);
        FZ_CHECK(out);
        FZ_CHECK(mega_bpe_decode(bpe, tok, (size_t)blen, out) == m && !memcmp(out, s, m));
        free(out);
        if (!max_len) FZ_CHECK(st == MEGA_OK); /* no length limit: the same lines pass */
    } else {
        FZ_CHECK(blen == 0 && (sb == MEGA_ERR_FORMAT || sb == MEGA_ERR_INVALID));
        FZ_CHECK(st != MEGA_OK); /* fewer tokens than bytes: what bytes accept, subwords accept */
    }
    free(s);
    free(tok);
    return 0;
}
