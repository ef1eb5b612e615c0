/* fairseq dictionaries (src/data/fdict.c): the text-to-ids rules of fairseq-preprocess for the
 * byte unit (enwik8) and the word unit (WikiText-103), generation's decoding, and bad metadata.
 * The expected ids follow fairseq's Dictionary.encode_line(line, append_eos=True) over the lines
 * Python's text mode reads; each case says why. */
#include "mega_data.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static mega_fdict *make(const char *json) {
    mega_fdict *d = NULL;
    mega_status st = mega_fdict_from_json(json, &d);
    TL_CHECK(st == MEGA_OK, "parse %.60s: %s", json, st ? mega_last_error() : "ok");
    return d;
}

/* encode and compare with want[nw] */
static void expect(const mega_fdict *d, const char *what, const char *text, size_t n, int final_eos, const int32_t *want,
                   size_t nw, size_t want_unk) {
    size_t cnt = 0, cnt2 = 0, unk = 0;
    int32_t ids[64];
    mega_status st = mega_fdict_encode(d, (const uint8_t *)text, n, final_eos, NULL, &cnt, NULL);
    if (st == MEGA_OK && cnt <= 64) st = mega_fdict_encode(d, (const uint8_t *)text, n, final_eos, ids, &cnt2, &unk);
    int ok = st == MEGA_OK && cnt == nw && cnt2 == nw && unk == want_unk && !memcmp(ids, want, nw * sizeof *ids);
    TL_CHECK(ok, "%s: %zu ids (%zu <unk>), want %zu (%zu)", what, cnt, unk, nw, want_unk);
    if (!ok && st == MEGA_OK && cnt2 <= 64) {
        for (size_t i = 0; i < cnt2; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
}

#define N(a) (sizeof(a) / sizeof *(a))

static void byte_unit(void) {
    /* 0 <s> 1 <pad> 2 </s> 3 <unk> 4 "104" (h) 5 "105" (i) 6 "32" (space) 7 madeupword0000 */
    mega_fdict *d = make("{\"kind\":\"fairseq\",\"unit\":\"byte\",\"tokens\":[\"<s>\",\"<pad>\",\"</s>\",\"<unk>\",\"104\","
                         "\"105\",\"32\",\"madeupword0000\"],\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":3}");
    if (!d) return;
    TL_CHECK(mega_fdict_size(d) == 8 && mega_fdict_get_unit(d) == MEGA_FDICT_BYTE, "byte: size and unit");
    /* every byte is a token; the newline is the line's </s>; x has no token: <unk>; the last
     * line gets its </s> although the text does not end with a newline */
    static const int32_t a[] = {4, 5, 6, 4, 5, 2, 3, 2};
    expect(d, "byte: two lines, no final newline", "hi hi\nx", 7, 1, a, N(a), 1);
    /* a prompt: no </s> added at the end */
    expect(d, "byte: prompt", "hi hi\nx", 7, 0, a, N(a) - 1, 1);
    /* an empty line is a lone </s>; a final newline adds nothing more */
    static const int32_t b[] = {2, 4, 2};
    expect(d, "byte: empty line, final newline", "\nh\n", 3, 1, b, N(b), 0);
    /* bytes >= 0x80 are bytes too (no UTF-8 rule in the byte unit) */
    static const int32_t c[] = {3, 3, 2};
    expect(d, "byte: high bytes", "\xff\xc3", 2, 1, c, N(c), 2);
    TL_CHECK(mega_fdict_generable(d, 2) && mega_fdict_generable(d, 4) && !mega_fdict_generable(d, 0) &&
                 !mega_fdict_generable(d, 1) && !mega_fdict_generable(d, 3) && !mega_fdict_generable(d, 7),
             "byte: generable = </s> and the byte tokens");
    char out[8];
    int ls = 1;
    size_t k = mega_fdict_decode(d, 4, &ls, out, sizeof out);
    k += mega_fdict_decode(d, 6, &ls, out + k, sizeof out - k);
    k += mega_fdict_decode(d, 2, &ls, out + k, sizeof out - k);
    k += mega_fdict_decode(d, 7, &ls, out + k, sizeof out - k);
    TL_CHECK(k == 3 && !memcmp(out, "h \n", 3), "byte: decode h, space, </s> (newline), filler (nothing)");
    mega_fdict_free(d);
}

static void word_unit(void) {
    /* 4 the 5 cat 6 sat 7 mat 8 x 9 x (a second "x": overwrite, the later id wins) */
    mega_fdict *d = make("{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"<s>\",\"<pad>\",\"</s>\",\"<unk>\",\"the\","
                         "\"cat\",\"sat\",\"mat\",\"x\",\"x\"],\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":3}");
    if (!d) return;
    /* universal newlines: \r\n and \r end lines; runs of spaces and tabs separate words; "on" is
     * unknown; the last line gets </s> */
    static const int32_t a[] = {4, 5, 2, 6, 3, 2, 7, 2};
    expect(d, "word: \\r\\n, \\r, spaces", "the cat\r\n sat \t on\rmat", 22, 1, a, N(a), 1);
    /* Python's str.split() also splits at U+00A0 and U+3000; \x1c is whitespace too */
    static const int32_t b[] = {4, 5, 6, 7, 2};
    expect(d, "word: Unicode whitespace", "the\xc2\xa0" "cat\xe3\x80\x80sat\x1cmat", 18, 1, b, N(b), 0);
    /* "<unk>" and "</s>" in the text are those tokens (Dictionary.index) */
    static const int32_t c[] = {3, 2, 2};
    expect(d, "word: special strings", "<unk> </s>", 10, 1, c, N(c), 1);
    static const int32_t e[] = {9, 2};
    expect(d, "word: overwritten duplicate maps to the later id", "x", 1, 1, e, N(e), 0);
    /* a prompt ending with a newline ends with </s> */
    static const int32_t f[] = {4, 2};
    expect(d, "word: prompt with newline", "the\n", 4, 0, f, N(f), 0);
    size_t cnt;
    mega_status st = mega_fdict_encode(d, (const uint8_t *)"the \xc3(", 6, 1, NULL, &cnt, NULL);
    TL_CHECK(st == MEGA_ERR_FORMAT && strstr(mega_last_error(), "UTF-8") && strstr(mega_last_error(), "offset 4"),
             "word: invalid UTF-8 refused: %s", mega_last_error());
    char out[32];
    int ls = 1;
    size_t k = mega_fdict_decode(d, 4, &ls, out, sizeof out);
    k += mega_fdict_decode(d, 5, &ls, out + k, sizeof out - k);
    k += mega_fdict_decode(d, 2, &ls, out + k, sizeof out - k);
    k += mega_fdict_decode(d, 3, &ls, out + k, sizeof out - k);
    k += mega_fdict_decode(d, 0, &ls, out + k, sizeof out - k);
    TL_CHECK(k == 13 && !memcmp(out, "the cat\n<unk>", 13), "word: decode spacing (%.*s)", (int)k, out);
    mega_fdict_free(d);
}

static void bad_metadata(void) {
    static const char *bad[] = {
        "[1,2]",
        "{\"kind\":\"bytes\"}",
        "{\"kind\":\"fairseq\",\"unit\":\"char\",\"tokens\":[\"a\",\"b\",\"c\",\"d\"],\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":3}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"a\",\"b\",\"c\"],\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":3}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"a\",\"b\",\"c\",\"d\"],\"bos\":0,\"pad\":1,\"eos\":1,\"unk\":3}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"a\",\"b\",\"c\",\"d\"],\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":4}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"a\",\"b\",7,\"d\"],\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":3}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"a\",\"\",\"c\",\"d\"],\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":3}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"a\",\"b\",\"c\",\"d\"],\"bos\":0.5,\"pad\":1,\"eos\":2,\"unk\":3}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\",\"tokens\":[\"a\",\"b\",\"c\",\"d\"],\"pad\":1,\"eos\":2,\"unk\":3}",
        "{\"kind\":\"fairseq\",\"unit\":\"word\"",
    };
    for (size_t i = 0; i < N(bad); i++) {
        mega_fdict *d = (mega_fdict *)1;
        mega_status st = mega_fdict_from_json(bad[i], &d);
        TL_CHECK(st == MEGA_ERR_FORMAT && d == NULL && strlen(mega_last_error()) > 10, "bad metadata %zu refused: %s", i,
                 mega_last_error());
    }
    mega_fdict *d = NULL;
    TL_CHECK(mega_fdict_from_json(NULL, &d) == MEGA_ERR_FORMAT && !d, "NULL metadata refused");
}

int main(void) {
    byte_unit();
    word_unit();
    bad_metadata();
    return tl_finish();
}
