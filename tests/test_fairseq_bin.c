/* fairseq binarized datasets (src/data/fairseq_bin.c): the fixtures of tests/fixtures/fairseq-bin/,
 * written by the official builders (tests/ref/gen_fairseq_bin.py), read back sequence by sequence
 * against the ids the official Binarizer produced (ids.txt); the dict.txt reader against the same
 * ids (the library's encoder on text.txt); the official LRA data layout (lra/: src-bin, label-bin)
 * as a classification dataset; and malformed files, each refused with a message. */
#include "mega_data.h"
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FX "tests/fixtures/fairseq-bin/"

static char tmp[512];

/* the expected sequences: ids.txt, one line per sequence */
typedef struct {
    int n;
    int32_t *ids;
    size_t *start; /* [n + 1] */
} expected;

static int load_expected(expected *e) {
    size_t len;
    unsigned char *t = tl_read_file(FX "ids.txt", &len);
    if (!t) return -1;
    e->n = 0;
    for (size_t i = 0; i < len; i++) e->n += t[i] == '\n';
    e->ids = malloc(len * sizeof *e->ids), e->start = malloc((e->n + 1) * sizeof *e->start);
    size_t k = 0;
    int s = 0;
    char *p = (char *)t;
    e->start[0] = 0;
    while (*p) {
        if (*p == '\n') e->start[++s] = k, p++;
        else if (*p == ' ') p++;
        else e->ids[k++] = (int32_t)strtol(p, &p, 10);
    }
    free(t);
    return 0;
}

static void read_case(const char *name, const char *path, const expected *e, const char *desc) {
    mega_fbin *d = NULL;
    mega_status st = mega_fbin_open(path, &d);
    TL_CHECK(st == MEGA_OK, "%s: open '%s': %s", name, path, st ? mega_last_error() : "ok");
    if (st) return;
    TL_CHECK((int)mega_fbin_count(d) == e->n, "%s: %zu sequences, want %d", name, mega_fbin_count(d), e->n);
    TL_CHECK(!strcmp(mega_fbin_describe(d), desc), "%s: described as '%s', want '%s'", name, mega_fbin_describe(d), desc);
    TL_CHECK(mega_fbin_tokens(d) == e->start[e->n], "%s: %llu tokens, want %zu", name, (unsigned long long)mega_fbin_tokens(d),
             e->start[e->n]);
    int same = (int)mega_fbin_count(d) == e->n;
    int32_t buf[64];
    for (int i = 0; same && i < e->n; i++) {
        size_t n = mega_fbin_length(d, (size_t)i);
        same = n == e->start[i + 1] - e->start[i] && n <= 64 && mega_fbin_read(d, (size_t)i, 0, buf) == MEGA_OK &&
               !memcmp(buf, e->ids + e->start[i], n * sizeof *buf);
    }
    TL_CHECK(same, "%s: every sequence equals the official Binarizer's ids", name);
    /* an id at or above the limit is an error naming it */
    int bad = 0;
    for (int i = 0; i < e->n && !bad; i++)
        if (mega_fbin_read(d, (size_t)i, 5, buf) != MEGA_OK) bad = 1;
    TL_CHECK(bad && strstr(mega_last_error(), "outside the dictionary's 5 ids"), "%s: ids checked against a limit: %s", name,
             mega_last_error());
    TL_CHECK(mega_fbin_read(d, (size_t)e->n, 0, buf) == MEGA_ERR_INVALID, "%s: sequence out of range refused", name);
    mega_fbin_close(d);
}

static void fixtures(const expected *e) {
    read_case("mmap uint16", FX "mmap", e, "mmap uint16");
    read_case("mmap uint16 via .idx", FX "mmap.idx", e, "mmap uint16");
    read_case("mmap uint16 via .bin", FX "mmap.bin", e, "mmap uint16");
    read_case("mmap int32", FX "mmap_i32", e, "mmap int32");
    read_case("mmap int64", FX "mmap_i64", e, "mmap int64");
    read_case("mmap uint8", FX "mmap_u8", e, "mmap uint8");
    read_case("cached (TNTIDX, ids + 1)", FX "cached", e, "cached int32");
    char p[256];
    TL_CHECK(mega_fbin_prefix(FX "mmap", p, sizeof p) && !strcmp(p, FX "mmap"), "prefix: a bare prefix");
    TL_CHECK(mega_fbin_prefix(FX "mmap.idx", p, sizeof p) && !strcmp(p, FX "mmap"), "prefix: the .idx file");
    TL_CHECK(mega_fbin_prefix(FX "cached.bin", NULL, 0), "prefix: the .bin file");
    TL_CHECK(!mega_fbin_prefix(FX "text.txt", p, sizeof p) && !mega_fbin_prefix(FX "none", p, sizeof p) &&
                 !mega_fbin_prefix(FX "dict.txt.idx", p, sizeof p),
             "prefix: a text file, a missing prefix, a lone file are not datasets");
    mega_fbin *d;
    TL_CHECK(mega_fbin_open(FX "none", &d) == MEGA_ERR_NOT_FOUND && d == NULL, "missing files: MEGA_ERR_NOT_FOUND (%s)",
             mega_last_error());
}

/* dict.txt as Dictionary.load reads it; the library's encoder on the text gives the Binarizer's ids */
static void dictionary(const expected *e) {
    mega_fdict *d = NULL, *b = NULL;
    mega_status st = mega_fdict_load_txt(FX "dict.txt", MEGA_FDICT_WORD, &d);
    TL_CHECK(st == MEGA_OK, "dict.txt: %s", st ? mega_last_error() : "ok");
    if (st) return;
    TL_CHECK(mega_fdict_size(d) == 56 && !strcmp(mega_fdict_token(d, 2), "</s>") && !strcmp(mega_fdict_token(d, 4), "the") &&
                 !strcmp(mega_fdict_token(d, 55), "madeupword0004"),
             "dict.txt: 4 specials, the words by count, the fillers (size %d)", mega_fdict_size(d));
    size_t len, cnt = 0;
    unsigned char *t = tl_read_file(FX "text.txt", &len);
    int32_t *ids = malloc((e->start[e->n] + 1) * sizeof *ids);
    st = t ? mega_fdict_encode(d, t, len, 1, NULL, &cnt, NULL) : MEGA_ERR_IO;
    if (st == MEGA_OK && cnt == e->start[e->n]) st = mega_fdict_encode(d, t, len, 1, ids, &cnt, NULL);
    TL_CHECK(st == MEGA_OK && cnt == e->start[e->n] && !memcmp(ids, e->ids, cnt * sizeof *ids),
             "dict.txt: encoding text.txt gives the official Binarizer's ids (%zu of %zu)", cnt, e->start[e->n]);
    free(ids), free(t);
    TL_CHECK(mega_fdict_check_same(d, d, "x") == MEGA_OK, "check_same: a dictionary is itself");
    st = mega_fdict_load_txt(FX "byte_lm/dict.txt", MEGA_FDICT_BYTE, &b);
    TL_CHECK(st == MEGA_OK && mega_fdict_size(b) == 49, "byte_lm dict.txt: %s", st ? mega_last_error() : "ok");
    if (b) {
        TL_CHECK(mega_fdict_check_same(d, b, "data dict") == MEGA_ERR_FORMAT && strstr(mega_last_error(), "id 4 is"),
                 "check_same: another dictionary refused: %s", mega_last_error());
        TL_CHECK(mega_fdict_detect_unit(b) == MEGA_FDICT_BYTE, "detect_unit: the byte dictionary is bytes");
    }
    /* the word dictionary ends in madeupword fillers, which say nothing of the unit */
    TL_CHECK(mega_fdict_detect_unit(d) == MEGA_FDICT_WORD, "detect_unit: the word dictionary is words");
    char *js = mega_fdict_to_json(d);
    mega_fdict *r = NULL;
    TL_CHECK(js && mega_fdict_from_json(js, &r) == MEGA_OK && mega_fdict_size(r) == 56 && mega_fdict_check_same(d, r, "r") == MEGA_OK &&
                 mega_fdict_get_unit(r) == MEGA_FDICT_WORD,
             "to_json: read back as the same dictionary");
    free(js), mega_fdict_free(r);
    /* the draws of mega_text_windows, over ids */
    const uint8_t txt[] = {3, 9, 4, 7, 1, 0, 5, 8, 2, 6, 11, 10};
    int32_t wid[12], a[6], at[6], c[6], ct[6];
    for (int i = 0; i < 12; i++) wid[i] = txt[i];
    uint64_t s1 = 42, s2 = 42;
    TL_CHECK(mega_text_windows(txt, 12, 2, 3, &s1, a, at) == MEGA_OK && mega_id_windows(wid, 12, 2, 3, &s2, c, ct) == MEGA_OK &&
                 s1 == s2 && !memcmp(a, c, sizeof a) && !memcmp(at, ct, sizeof at) && ct[0] == c[1],
             "id_windows: the windows of text_windows, targets shifted by one");
    TL_CHECK(mega_id_windows(wid, 3, 1, 3, &s2, c, ct) == MEGA_ERR_INVALID, "id_windows: too short a stream refused");
    mega_fdict_free(b), mega_fdict_free(d);
}

/* ---- malformed files ---- */

static char *tpath(const char *name) {
    static char p[4][640];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmp, name);
    return p[k];
}

static void put64(unsigned char *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(x >> 8 * i);
}

/* the dataset tmp/bad from idx[ni] and bin[nb] must be refused with a message containing want */
static void refused(const char *what, const void *idx, size_t ni, const void *bin, size_t nb, const char *want) {
    tl_write_file(tpath("bad.idx"), idx, ni);
    tl_write_file(tpath("bad.bin"), bin, nb);
    mega_fbin *d = (mega_fbin *)1;
    mega_status st = mega_fbin_open(tpath("bad"), &d);
    TL_CHECK(st == MEGA_ERR_FORMAT && d == NULL && strstr(mega_last_error(), want), "%s: refused (%s)", what,
             st ? mega_last_error() : "accepted");
    if (st == MEGA_OK) mega_fbin_close(d);
}

static void malformed_mmap(void) {
    size_t ni, nb;
    unsigned char *idx = tl_read_file(FX "mmap.idx", &ni), *bin = tl_read_file(FX "mmap.bin", &nb);
    if (!idx || !bin) {
        TL_CHECK(0, "read mmap fixture");
        return;
    }
    unsigned char *c = malloc(ni + 64);
    const uint64_t n = (ni - 26) / 12;
    refused("truncated .idx (10 bytes)", idx, 10, bin, nb, "truncated");
    refused("truncated .idx (header only)", idx, 26, bin, nb, "truncated");
    refused("truncated .idx (one byte short)", idx, ni - 1, bin, nb, "truncated");
    memcpy(c, idx, ni), c[0] = 'X';
    refused("wrong magic", c, ni, bin, nb, "not a fairseq index");
    memcpy(c, idx, ni), c[9] = 2;
    refused("version 2", c, ni, bin, nb, "version 2");
    memcpy(c, idx, ni), c[17] = 6;
    refused("float dtype", c, ni, bin, nb, "float64");
    memcpy(c, idx, ni), c[17] = 9;
    refused("unknown dtype", c, ni, bin, nb, "unknown dtype code 9");
    memcpy(c, idx, ni), c[17] = 0;
    refused("dtype 0", c, ni, bin, nb, "unknown dtype code 0");
    memcpy(c, idx, ni), put64(c + 18, (uint64_t)1 << 62);
    refused("huge count", c, ni, bin, nb, "truncated");
    memcpy(c, idx, ni), put64(c + 18, UINT64_MAX);
    refused("count 2^64-1", c, ni, bin, nb, "truncated");
    memcpy(c, idx, ni), put64(c + 26 + 4 * n + 8 * (n - 1), nb);
    refused("pointer past the end", c, ni, bin, nb, "past the end");
    memcpy(c, idx, ni), put64(c + 26 + 4 * n, UINT64_MAX - 3);
    refused("pointer near 2^64 (no wrap-around)", c, ni, bin, nb, "past the end");
    memcpy(c, idx, ni), c[26] = c[27] = c[28] = 0xff, c[29] = 0x7f;
    refused("size 2^31-1", c, ni, bin, nb, "past the end");
    memcpy(c, idx, ni), c[26] = c[27] = c[28] = c[29] = 0xff;
    refused("negative size", c, ni, bin, nb, "negative size");
    memcpy(c, idx, ni), memset(c + ni, 0, 3);
    refused("trailing bytes", c, ni + 3, bin, nb, "trailing data");
    refused("empty .bin", idx, ni, bin, 0, "past the end");
    refused("empty .idx", idx, 0, bin, nb, "not a fairseq index");
    /* Megatron-LM's layout: a document count after n, the document starts after the pointers */
    memcpy(c, idx, 26), put64(c + 26, 2), memcpy(c + 34, idx + 26, ni - 26);
    put64(c + 34 + (ni - 26), 0), put64(c + 42 + (ni - 26), n);
    tl_write_file(tpath("meg.idx"), c, ni + 24);
    tl_write_file(tpath("meg.bin"), bin, nb);
    mega_fbin *d, *ref;
    mega_status st = mega_fbin_open(tpath("meg"), &d);
    TL_CHECK(st == MEGA_OK, "Megatron-LM index with document starts: %s", st ? mega_last_error() : "ok");
    if (st == MEGA_OK && mega_fbin_open(FX "mmap", &ref) == MEGA_OK) {
        int32_t a[64], b[64];
        int same = mega_fbin_count(d) == mega_fbin_count(ref);
        for (size_t i = 0; same && i < mega_fbin_count(d); i++)
            same = mega_fbin_read(d, i, 0, a) == MEGA_OK && mega_fbin_read(ref, i, 0, b) == MEGA_OK &&
                   !memcmp(a, b, mega_fbin_length(d, i) * sizeof *a);
        TL_CHECK(same, "Megatron-LM index: the same sequences");
        mega_fbin_close(ref);
    }
    mega_fbin_close(d);
    put64(c + 42 + (ni - 26), n + 1);
    refused("Megatron-LM document start past the sequences", c, ni + 24, bin, nb, "document index");
    free(c), free(idx), free(bin);
}

static void malformed_cached(void) {
    size_t ni, nb;
    unsigned char *idx = tl_read_file(FX "cached.idx", &ni), *bin = tl_read_file(FX "cached.bin", &nb);
    if (!idx || !bin) {
        TL_CHECK(0, "read cached fixture");
        return;
    }
    unsigned char *c = malloc((ni > nb ? ni : nb) + 16);
    const uint64_t n = 40; /* sequences (text.txt's lines) */
    const size_t dim = 48, dat = 48 + 8 * (n + 1), sz = dat + 8 * (n + 1);
    refused("TNTIDX truncated header", idx, 40, bin, nb, "truncated");
    refused("TNTIDX one byte short", idx, ni - 1, bin, nb, "not the size");
    memcpy(c, idx, ni), put64(c + 24, 2);
    refused("TNTIDX element size", c, ni, bin, nb, "element size 2");
    memcpy(c, idx, ni), put64(c + 16, 7);
    refused("TNTIDX float dtype", c, ni, bin, nb, "float64");
    memcpy(c, idx, ni), put64(c + 16, (uint64_t)1 << 40);
    refused("TNTIDX huge dtype code", c, ni, bin, nb, "unknown dtype code");
    memcpy(c, idx, ni), put64(c + 32, (uint64_t)1 << 61);
    refused("TNTIDX huge count", c, ni, bin, nb, "not the size");
    memcpy(c, idx, ni), put64(c + 40, UINT64_MAX);
    refused("TNTIDX huge dimension count", c, ni, bin, nb, "not the size");
    memcpy(c, idx, ni), put64(c + dim + 8, 2), put64(c + dim + 16, 3);
    refused("TNTIDX two dimensions", c, ni, bin, nb, "dimensions");
    memcpy(c, idx, ni), put64(c + dat + 8 * n, nb); /* the last data offset past the end (and disagreeing) */
    refused("TNTIDX data offset past the end", c, ni, bin, nb, "disagree");
    memcpy(c, idx, ni), put64(c + sz + 8 * (n - 1), (uint64_t)1 << 40);
    refused("TNTIDX huge size", c, ni, bin, nb, "disagree");
    memcpy(c, idx, ni), put64(c + dat, 5);
    refused("TNTIDX data offsets not from 0", c, ni, bin, nb, "start at 0");
    refused("TNTIDX .bin shorter than the offsets", idx, ni, bin, nb - 4, "past the end");
    /* a stored 0 is id -1 after the Lua shift: refused when read */
    memcpy(c, bin, nb), memset(c, 0, 4);
    tl_write_file(tpath("z.idx"), idx, ni);
    tl_write_file(tpath("z.bin"), c, nb);
    mega_fbin *d;
    int32_t buf[64];
    mega_status st = mega_fbin_open(tpath("z"), &d);
    TL_CHECK(st == MEGA_OK && mega_fbin_read(d, 0, 0, buf) == MEGA_ERR_FORMAT && strstr(mega_last_error(), "id -1 is negative"),
             "TNTIDX stored 0: id -1 refused when read (%s)", mega_last_error());
    if (st == MEGA_OK) mega_fbin_close(d);
    free(c), free(idx), free(bin);
}

static void dict_refused(const char *what, const char *text, const char *want) {
    tl_write_file(tpath("dict.txt"), text, strlen(text));
    mega_fdict *d = (mega_fdict *)1;
    mega_status st = mega_fdict_load_txt(tpath("dict.txt"), MEGA_FDICT_WORD, &d);
    TL_CHECK(st == MEGA_ERR_FORMAT && d == NULL && strstr(mega_last_error(), want), "dict.txt %s: refused (%s)", what,
             st ? mega_last_error() : "accepted");
    if (st == MEGA_OK) mega_fdict_free(d);
}

static void malformed_dict(void) {
    dict_refused("without a count", "a 1\nb\n", "dict.txt:2: expected 'token count'");
    dict_refused("with a bad count", "a 1\nb x1\n", ":2: the count 'x1' is not an integer");
    dict_refused("with a duplicate", "a 1\nb 2\na 3\n", ":3: duplicate token 'a'");
    dict_refused("with a special as a word", "a 1\n<unk> 2\n", ":2: duplicate token '<unk>'");
    dict_refused("empty", "", "is empty");
    dict_refused("of blank lines only", " \n", ":1: expected");
    dict_refused("with an empty line", "a 1\n\nb 2\n", ":2: expected");
    dict_refused("not UTF-8", "a 1\n\xff 2\n", "not UTF-8");
    mega_fdict *d = NULL;
    const char *ok = "a 1\r\nb 2  \n\xc3\xa9t\xc3\xa9 3\nb 0 #fairseq:overwrite\n";
    tl_write_file(tpath("dict.txt"), ok, strlen(ok));
    mega_status st = mega_fdict_load_txt(tpath("dict.txt"), MEGA_FDICT_WORD, &d);
    TL_CHECK(st == MEGA_OK && mega_fdict_size(d) == 8 && !strcmp(mega_fdict_token(d, 6), "\xc3\xa9t\xc3\xa9") &&
                 !strcmp(mega_fdict_token(d, 7), "b"),
             "dict.txt: CRLF, trailing spaces, UTF-8 and '#fairseq:overwrite' (a repeat with a new id): %s",
             st ? mega_last_error() : "ok");
    if (d) {
        size_t cnt;
        int32_t ids[4];
        mega_fdict_encode(d, (const uint8_t *)"b", 1, 1, ids, &cnt, NULL);
        TL_CHECK(cnt == 2 && ids[0] == 7, "dict.txt: the overwriting repeat takes the spelling (b -> %d)", ids[0]);
    }
    mega_fdict_free(d);
}

/* lra/ (the lra_cls fixture's five lines, binarized by the official Binarizer) through
 * mega_dataset_load_lra_bin with the converted model's dictionary (dict.txt's tokens, then <CLS>) */
/* ---- datasets written by the official fairseq-preprocess (tests/ref/gen_fairseq_preprocess.py) ---- */

/* PREFIX.ids: the ids the official MMapIndexedDataset read back, one line per sequence; compared
 * with ours. Returns the sequences matched, -1 on a difference. */
static long match_ids(const char *prefix, const mega_fdict *dict) {
    char p[600]; /* the prefix (up to 511 bytes) and ".ids" */
    snprintf(p, sizeof p, "%s.ids", prefix);
    size_t len;
    char *txt = (char *)tl_read_file(p, &len);
    mega_fbin *d = NULL;
    long n = -1;
    if (txt && mega_fbin_open(prefix, &d) == MEGA_OK) {
        int32_t buf[256];
        char *q = txt;
        n = 0;
        for (size_t i = 0; i < mega_fbin_count(d) && n >= 0; i++, n++) {
            const size_t L = mega_fbin_length(d, i);
            if (L > 256 || mega_fbin_read(d, i, mega_fdict_size(dict), buf) != MEGA_OK) n = -2;
            for (size_t k = 0; k < L && n >= 0; k++) {
                char *e;
                long v = strtol(q, &e, 10);
                if (e == q || v != buf[k]) n = -2;
                q = e;
            }
            while (n >= 0 && *q == ' ') q++;
            if (n >= 0 && *q++ != '\n') n = -2;
        }
        if (n >= 0 && *q) n = -1; /* more sequences in the official read */
    }
    mega_fbin_close(d), free(txt);
    return n;
}

static void official_preprocess(void) {
    static const struct {
        const char *dict, *prefixes[3];
        mega_fdict_unit unit;
    } cases[] = {
        {"words/dict.txt", {"words/train", "words/valid", "words/test"}, MEGA_FDICT_WORD},
        {"bytes/dict.txt", {"bytes/train", "bytes/valid", NULL}, MEGA_FDICT_BYTE},
        {"mt/dict.de.txt", {"mt/train.de-en.de", "mt/valid.de-en.de", NULL}, MEGA_FDICT_WORD},
        {"mt/dict.en.txt", {"mt/train.de-en.en", "mt/valid.de-en.en", NULL}, MEGA_FDICT_WORD},
        {"lra/src-bin/dict.txt", {"lra/src-bin/train", "lra/src-bin/valid", NULL}, MEGA_FDICT_WORD},
        {"lra/label-bin/dict.txt", {"lra/label-bin/train", "lra/label-bin/valid", NULL}, MEGA_FDICT_WORD},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char p[512];
        snprintf(p, sizeof p, FX "preprocess/%s", cases[c].dict);
        mega_fdict *d = NULL;
        mega_status st = mega_fdict_load_txt(p, MEGA_FDICT_WORD, &d);
        TL_CHECK(st == MEGA_OK, "official %s: %s", cases[c].dict, st ? mega_last_error() : "read");
        if (st) continue;
        /* fairseq-preprocess pads to a multiple of 8 (--padding-factor 8) with madeupword fillers */
        TL_CHECK(mega_fdict_size(d) % 8 == 0 && !strncmp(mega_fdict_token(d, mega_fdict_size(d) - 1), "madeupword", 10),
                 "official %s: %d ids, a multiple of 8 ending in fillers", cases[c].dict, mega_fdict_size(d));
        /* the label dictionary (digits only) would read as bytes; labels are read as words */
        if (c < 5)
            TL_CHECK(mega_fdict_detect_unit(d) == cases[c].unit, "official %s: unit %s detected", cases[c].dict,
                     cases[c].unit == MEGA_FDICT_BYTE ? "byte" : "word");
        for (int k = 0; k < 3 && cases[c].prefixes[k]; k++) {
            snprintf(p, sizeof p, FX "preprocess/%s", cases[c].prefixes[k]);
            const long n = match_ids(p, d);
            TL_CHECK(n > 0, "official %s: our ids are the official reader's (%ld sequences)", cases[c].prefixes[k], n);
        }
        mega_fdict_free(d);
    }
}

static void lra_layout(void) {
    static const char *toks[] = {"]", "[MAX", "[MIN", "[SM", "[MED", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "(", ")"};
    char js[1024] = "{\"kind\":\"fairseq\",\"unit\":\"word\",\"bos\":0,\"pad\":1,\"eos\":2,\"unk\":3,"
                    "\"tokens\":[\"<s>\",\"<pad>\",\"</s>\",\"<unk>\"";
    for (size_t i = 0; i < sizeof toks / sizeof *toks; i++) snprintf(js + strlen(js), sizeof js - strlen(js), ",\"%s\"", toks[i]);
    strcat(js, ",\"<CLS>\"]}");
    mega_fdict *dict;
    mega_status st = mega_fdict_from_json(js, &dict);
    TL_CHECK(st == MEGA_OK && mega_fdict_size(dict) == 22, "LRA: the model's dictionary (%s)", st ? mega_last_error() : "ok");
    if (st) return;
    mega_dataset d;
    st = mega_dataset_load_lra_bin(FX "lra", "test", dict, 0, NULL, &d);
    TL_CHECK(st == MEGA_OK, "LRA layout: loaded (%s)", st ? mega_last_error() : "ok");
    if (!st) {
        static const int first[] = {5, 11, 18, 6, 13, 16, 4, 9, 4, 2}, labels[] = {4, 8, 9, 7, 7}, lens[] = {10, 9, 4, 12, 7};
        int same = d.n == 5 && !d.pairs && d.len[0] == 10;
        for (int t = 0; same && t < 10; t++) same = d.tok[0][t] == first[t];
        for (int i = 0; same && i < 5; i++) same = d.label[i] == labels[i] && d.len[i] == lens[i] && d.line[i] == i + 1;
        TL_CHECK(same, "LRA layout: the official ids, lengths and labels (label id - 4)");
        TL_CHECK(d.classes.n == 10 && !strcmp(d.classes.names[0], "3") && !strcmp(d.classes.names[9], "6") && d.vocab.pad == 1,
                 "LRA layout: the classes are label-bin/dict.txt's tokens in order, padding <pad>");
    }
    mega_dataset_free(&d);
    mega_data_opts o = {0};
    o.max_len = 4;
    st = mega_dataset_load_lra_bin(FX "lra", "test", dict, 1, &o, &d);
    TL_CHECK(st == MEGA_OK && d.tok[0][0] == 21 && d.tok[0][1] == 5 && d.len[0] == 4 && d.n_truncated == 5,
             "LRA layout: <CLS> first, cut at max_len (%s)", st ? mega_last_error() : "ok");
    mega_dataset_free(&d);
    /* the two-text layout: src1-bin beside src-bin (here the same texts) */
    char dir[600], p[700], cwd[400];
    snprintf(dir, sizeof dir, "%s/lra2", tmp);
    int made = getcwd(cwd, sizeof cwd) != NULL && mkdir(dir, 0755) == 0;
    if (made) {
        char target[800];
        const char *subs[3][2] = {{"src-bin", "src-bin"}, {"src-bin", "src1-bin"}, {"label-bin", "label-bin"}};
        for (int i = 0; made && i < 3; i++) {
            snprintf(target, sizeof target, "%s/" FX "lra/%s", cwd, subs[i][0]);
            snprintf(p, sizeof p, "%s/%s", dir, subs[i][1]);
            made = symlink(target, p) == 0;
        }
    }
    st = made ? mega_dataset_load_lra_bin(dir, "test", dict, 0, NULL, &d) : MEGA_ERR_IO;
    TL_CHECK(st == MEGA_OK && d.pairs && d.len2[3] == d.len[3] && d.tok2[3][0] == d.tok[3][0],
             "LRA layout: src1-bin makes pairs (%s)", st ? mega_last_error() : "ok");
    mega_dataset_free(&d);
    st = mega_dataset_load_lra_bin(FX "lra", "valid", dict, 0, NULL, &d);
    TL_CHECK(st == MEGA_ERR_NOT_FOUND && strstr(mega_last_error(), "src-bin/valid.idx"), "LRA layout: a missing split (%s)",
             mega_last_error());
    mega_fdict_free(dict);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    expected e = {0};
    const int rd = load_expected(&e);
    TL_CHECK(rd == 0 && e.n == 40, "read " FX "ids.txt (%d sequences)", e.n);
    if (e.n == 40) {
        fixtures(&e);
        dictionary(&e);
    }
    official_preprocess();
    if (tl_mkdtemp(tmp, sizeof tmp, "fsbin") == 0) {
        lra_layout();
        malformed_mmap();
        malformed_cached();
        malformed_dict();
        tl_rm_rf(tmp);
    }
    free(e.ids), free(e.start);
    return tl_finish();
}
