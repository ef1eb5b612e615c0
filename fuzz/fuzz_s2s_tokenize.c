/* One source sentence as the translation model's input (mega_s2s_tokenize, `mega translate` on
 * stdin lines): the first byte is max_len (0 = no limit, else 2..128), the rest the line.
 * Invariants: a success gives the line's bytes (one final "\n" or "\r\n" dropped) then </s>; a
 * failure leaves *len = 0. */
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
    free(s);
    free(tok);
    return 0;
}
