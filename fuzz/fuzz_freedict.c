/* The FreeDict (dictd) reader: mega_dictd_open on an index and a dictionary written from the
 * input, every entry (mega_dictd_get, mega_freedict_clean), all pairs (mega_freedict_pairs_from)
 * and the split. Byte 0 holds the options:
 *   bits 0-1: the dictionary file: 0 X.dict (plain), 1 X.dict.dz compressed here with gzip,
 *             2 X.dict.dz holding the bytes as they are (not gzip, or corrupt gzip), 3 X.dict.gz
 *             holding them too, opened with an explicit index path
 *   bit 2: drop identical pairs      bits 3-7: max_len / 4 (0 = no limit)
 * then the index text up to the first NUL byte, then the dictionary text. Invariants: an entry is
 * inside the dictionary or reported out of it; a cleaned pair is valid UTF-8 without control
 * bytes; the pairs are sorted, distinct and within max_len; the split places every pair once. */
#include "fuzz_common.h"

#include <zlib.h>

static void gzip_mem(const uint8_t *p, size_t n, uint8_t **out, size_t *nout) {
    z_stream z;
    memset(&z, 0, sizeof z);
    FZ_CHECK(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    *out = malloc(cap);
    FZ_CHECK(*out);
    z.next_in = (Bytef *)(uintptr_t)p, z.avail_in = (uInt)n;
    z.next_out = *out, z.avail_out = (uInt)cap;
    FZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
    *nout = cap - z.avail_out;
    deflateEnd(&z);
}

static int has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const unsigned b0 = fz_byte(&in);
    const uint8_t *nul = memchr(in.p, 0, in.n);
    const size_t ni = nul ? (size_t)(nul - in.p) : in.n;
    const uint8_t *text = nul ? nul + 1 : in.p + in.n;
    const size_t nt = nul ? in.n - ni - 1 : 0;
    const char *index = fz_write("fz.index", in.p, ni), *dict;
    const int kind = (int)(b0 & 3);
    if (kind == 1) {
        uint8_t *gz;
        size_t ng;
        gzip_mem(text, nt, &gz, &ng);
        dict = fz_write("fz.dict.dz", gz, ng);
        free(gz);
    } else {
        dict = fz_write(kind == 0 ? "fz.dict" : kind == 2 ? "fz.dict.dz" : "fz.dict.gz", text, nt);
    }
    mega_freedict_opts o = {(int)(b0 >> 3) * 4, (int)((b0 >> 2) & 1)};
    mega_dictd *d = NULL;
    if (mega_dictd_open(dict, kind == 3 ? index : NULL, &d) != MEGA_OK) {
        FZ_CHECK(d == NULL && mega_last_error()[0] != 0);
        return 0;
    }
    const size_t n = mega_dictd_count(d), size_d = mega_dictd_size(d);
    FZ_CHECK(n >= 1 && size_d >= 1);
    if (kind == 1) FZ_CHECK(size_d == nt); /* (a plain .dict starting like gzip is decompressed) */
    for (size_t i = 0; i < n; i++) {
        mega_dictd_entry e;
        mega_status st = mega_dictd_get(d, i, &e);
        FZ_CHECK(e.headword != NULL && e.line >= 1);
        if (st != MEGA_OK) {
            FZ_CHECK(st == MEGA_ERR_FORMAT && e.text == NULL && e.len == 0);
            continue;
        }
        FZ_CHECK(e.offset <= size_d && e.len <= size_d - e.offset);
        /* exact-size buffers: writing past len + 1 bytes is an ASan report */
        char *src = malloc(e.len + 1), *tgt = malloc(e.len + 1);
        FZ_CHECK(src && tgt);
        mega_freedict_reason r = mega_freedict_clean(e.text, e.len, src, tgt);
        FZ_CHECK(r >= MEGA_FREEDICT_KEPT && r <= MEGA_FREEDICT_GLUED);
        FZ_CHECK(strlen(src) <= e.len && strlen(tgt) <= e.len);
        if (r == MEGA_FREEDICT_KEPT) {
            FZ_CHECK(*src && *tgt && !has_control(src) && !has_control(tgt));
            FZ_CHECK(mega_utf8_check(src, strlen(src)) == strlen(src) && mega_utf8_check(tgt, strlen(tgt)) == strlen(tgt));
            FZ_CHECK(src[0] != ' ' && src[strlen(src) - 1] != ' ' && !strstr(src, "  ") && !strstr(tgt, "  "));
        }
        free(src);
        free(tgt);
    }
    FZ_CHECK(mega_dictd_get(d, n, &(mega_dictd_entry){0}) == MEGA_ERR_INVALID);
    mega_freedict_pairs p;
    mega_freedict_stats s;
    if (mega_freedict_pairs_from(d, &o, &p, &s) == MEGA_OK) {
        FZ_CHECK(p.n >= 1 && s.kept == p.n && s.index_lines == n);
        size_t dropped = 0;
        for (int r = 0; r < MEGA_FREEDICT_NREASONS; r++) dropped += s.dropped[r];
        FZ_CHECK(s.kept + dropped == s.entries && s.dropped[MEGA_FREEDICT_KEPT] == 0);
        for (size_t i = 0; i < p.n; i++) {
            if (o.max_len) FZ_CHECK(strlen(p.src[i]) <= (size_t)o.max_len && strlen(p.tgt[i]) <= (size_t)o.max_len);
            if (o.drop_identical) FZ_CHECK(strcmp(p.src[i], p.tgt[i]) != 0);
            if (i) {
                int c = strcmp(p.src[i - 1], p.src[i]);
                FZ_CHECK(c < 0 || (c == 0 && strcmp(p.tgt[i - 1], p.tgt[i]) < 0));
            }
        }
        size_t *order = malloc(p.n * sizeof *order), count[3], groups[3];
        char *seen = calloc(p.n, 1);
        FZ_CHECK(order && seen);
        FZ_CHECK(mega_freedict_split(&p, b0, 0.1, 0.2, order, count, groups) == MEGA_OK);
        FZ_CHECK(count[0] + count[1] + count[2] == p.n);
        for (size_t i = 0; i < p.n; i++) {
            FZ_CHECK(order[i] < p.n && !seen[order[i]]);
            seen[order[i]] = 1;
        }
        free(order);
        free(seen);
        mega_freedict_pairs_free(&p);
    } else {
        FZ_CHECK(p.n == 0 && p.pool == NULL);
    }
    mega_dictd_free(d);
    return 0;
}
