/* safetensors reader/writer and atomic file writes: round trips of every dtype, a hand-built
 * file read back value by value, a catalogue of corrupt inputs (each must be rejected with
 * MEGA_ERR_FORMAT and a message), every truncation of a valid file, a deterministic byte-flip
 * fuzz loop, and atomic-write failure modes. */
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static void path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

/* image = u64 LE header length (hlen, or strlen(json) if hlen == UINT64_MAX) + json + data */
static unsigned char *mk_image(const char *json, size_t jlen, uint64_t hlen, const void *data,
                               size_t dlen, size_t *outlen) {
    unsigned char *b = malloc(8 + jlen + dlen + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, json, jlen);
    if (dlen) memcpy(b + 8 + jlen, data, dlen);
    *outlen = 8 + jlen + dlen;
    return b;
}

static mega_status open_json(const char *json, const void *data, size_t dlen) {
    size_t len;
    size_t jl = strlen(json);
    unsigned char *img = mk_image(json, jl, jl, data, dlen, &len);
    mega_st_file *f = (mega_st_file *)(uintptr_t)1;
    mega_clear_error();
    mega_status st = mega_st_open_mem(img, len, &f);
    free(img);
    if (st == MEGA_OK) mega_st_close(f);
    else if (f != NULL) return (mega_status)99; /* *out must be NULL on failure */
    return st;
}

/* a corrupt header must be rejected with MEGA_ERR_FORMAT and a message containing `needle` */
static void expect_bad(const char *label, const char *json, const void *data, size_t dlen,
                       const char *needle) {
    mega_status st = open_json(json, data, dlen);
    const char *msg = mega_last_error();
    TL_CHECK(st == MEGA_ERR_FORMAT && msg[0] && strstr(msg, "<memory>") &&
                 (!needle || strstr(msg, needle)),
             "corrupt '%s' rejected: status %d (%s), message \"%s\" (want \"%s\")", label,
             (int)st, mega_status_str(st), msg, needle ? needle : "");
    if (tl_verbose) printf("  %-28s -> %s\n", label, msg);
}

static void expect_good(const char *label, const char *json, const void *data, size_t dlen) {
    mega_status st = open_json(json, data, dlen);
    TL_CHECK(st == MEGA_OK, "valid '%s' accepted: status %d, message \"%s\"", label, (int)st,
             mega_last_error());
}

/* ---------------------------------------------------------------------------------------------*/
static void test_dtypes(void) {
    static const struct { mega_dtype dt; const char *name; size_t size; } tab[] = {
        {MEGA_DT_F32, "F32", 4}, {MEGA_DT_F64, "F64", 8},  {MEGA_DT_F16, "F16", 2},
        {MEGA_DT_BF16, "BF16", 2}, {MEGA_DT_I64, "I64", 8}, {MEGA_DT_I32, "I32", 4},
        {MEGA_DT_I16, "I16", 2}, {MEGA_DT_I8, "I8", 1},    {MEGA_DT_U8, "U8", 1},
        {MEGA_DT_BOOL, "BOOL", 1}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        TL_CHECK(mega_dtype_size(tab[i].dt) == tab[i].size, "dtype %s size", tab[i].name);
        TL_CHECK(strcmp(mega_dtype_name(tab[i].dt), tab[i].name) == 0, "dtype %s name",
                 tab[i].name);
    }
    TL_CHECK(mega_dtype_size((mega_dtype)42) == 0, "invalid dtype has size 0");
}

/* ---------------------------------------------------------------------------------------------*/
typedef struct {
    const char *name;
    mega_dtype dt;
    int ndim;
    int64_t shape[MEGA_ST_MAX_DIMS];
    const void *data;
    size_t numel;
} rt_item;

/* the writer refuses bad additions, each with MEGA_ERR_INVALID */
static void rt_invalid_adds(mega_st_writer *w, const float *f32, const int32_t *i32) {
    int64_t sh2[2] = {2, 3}, neg[1] = {-1}, sh9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    TL_CHECK(mega_st_writer_add(w, "i32", MEGA_DT_I32, 1, sh2, i32) == MEGA_ERR_INVALID &&
                 mega_last_error()[0],
             "writer rejects duplicate name");
    TL_CHECK(mega_st_writer_add(w, "", MEGA_DT_F32, 2, sh2, f32) == MEGA_ERR_INVALID,
             "writer rejects empty name");
    TL_CHECK(mega_st_writer_add(w, NULL, MEGA_DT_F32, 2, sh2, f32) == MEGA_ERR_INVALID,
             "writer rejects NULL name");
    TL_CHECK(mega_st_writer_add(w, "__metadata__", MEGA_DT_F32, 2, sh2, f32) ==
                 MEGA_ERR_INVALID,
             "writer rejects the name __metadata__");
    TL_CHECK(mega_st_writer_add(w, "neg", MEGA_DT_F32, 1, neg, f32) == MEGA_ERR_INVALID,
             "writer rejects a negative dim");
    TL_CHECK(mega_st_writer_add(w, "deep", MEGA_DT_F32, 9, sh9, f32) == MEGA_ERR_INVALID,
             "writer rejects > MEGA_ST_MAX_DIMS dims");
    TL_CHECK(mega_st_writer_add(w, "bad_dt", (mega_dtype)77, 2, sh2, f32) == MEGA_ERR_INVALID,
             "writer rejects an invalid dtype");
    TL_CHECK(mega_st_writer_add(w, "nodata", MEGA_DT_F32, 2, sh2, NULL) == MEGA_ERR_INVALID,
             "writer rejects NULL data for a non-empty tensor");
    TL_CHECK(mega_st_writer_add(w, "bad\xff", MEGA_DT_F32, 2, sh2, f32) == MEGA_ERR_INVALID,
             "writer rejects a non-UTF-8 name");
}

/* the written file's header: its length padded to 8, a JSON object, padded with spaces */
static void rt_header_checks(const char *path) {
    size_t flen = 0;
    unsigned char *raw = tl_read_file(path, &flen);
    TL_CHECK(raw && flen >= 8, "written file readable");
    if (raw && flen >= 8) {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = (hl << 8) | raw[i];
        TL_CHECK(hl % 8 == 0 && 8 + hl <= flen, "header length %" PRIu64 " padded to 8", hl);
        TL_CHECK(hl > 0 && raw[8] == '{', "header starts with '{'");
        size_t jend = 8 + (size_t)hl;
        while (jend > 8 && raw[jend - 1] == ' ') jend--;
        TL_CHECK(jend > 8 && raw[jend - 1] == '}', "header is padded only with spaces");
    }
    free(raw);
}

/* the tensors read back in insertion order, contiguous and aligned, and the metadata */
static void rt_tensors_and_meta(const mega_st_file *f, const rt_item *items, int n, const float *f32) {
    TL_CHECK(mega_st_count(f) == n, "count %d == %d", mega_st_count(f), n);
    size_t expect_off = 0;
    const unsigned char *base = NULL;
    for (int i = 0; i < n && i < mega_st_count(f); i++) {
        const mega_st_tensor *t = mega_st_at(f, i);
        const rt_item *it = &items[i];
        size_t es = mega_dtype_size(it->dt);
        int shape_ok = t->ndim == it->ndim;
        for (int k = 0; shape_ok && k < it->ndim; k++) shape_ok = t->shape[k] == it->shape[k];
        TL_CHECK(strcmp(t->name, it->name) == 0, "tensor %d name '%s' in insertion order", i,
                 t->name);
        TL_CHECK(t->dtype == it->dt && shape_ok && t->numel == it->numel &&
                     t->nbytes == it->numel * es,
                 "tensor '%s' dtype/shape/numel/nbytes", it->name);
        TL_CHECK(mega_st_get(f, it->name) == t, "get('%s')", it->name);
        if (i == 0) base = t->data;
        TL_CHECK(base && (const unsigned char *)t->data == base + expect_off,
                 "tensor '%s' offsets contiguous in insertion order", it->name);
        expect_off += t->nbytes;
        const void *want = i == 0 ? (const void *)f32 : it->data;
        TL_CHECK(t->nbytes == 0 || memcmp(t->data, want, t->nbytes) == 0,
                 "tensor '%s' bytes round-trip", it->name);
    }
    TL_CHECK(base && ((uintptr_t)base % 8) == 0, "data section 8-byte aligned in memory");
    TL_CHECK(mega_st_get(f, "nope") == NULL && mega_st_get(f, "") == NULL,
             "get of absent names is NULL");
    TL_CHECK(mega_st_at(f, -1) == NULL && mega_st_at(f, n) == NULL, "at out of range is NULL");
    TL_CHECK(mega_st_meta_count(f) == 3, "meta count %d == 3", mega_st_meta_count(f));
    const char *m1 = mega_st_meta(f, "format"), *m2 = mega_st_meta(f, "note"),
               *m3 = mega_st_meta(f, "");
    TL_CHECK(m1 && strcmp(m1, "pt") == 0, "meta format");
    TL_CHECK(m2 && strcmp(m2, "caf\xc3\xa9 \"x\"\n\\") == 0, "meta note (escaped, replaced)");
    TL_CHECK(m3 && strcmp(m3, "empty key") == 0, "meta empty key");
    TL_CHECK(mega_st_meta(f, "absent") == NULL, "absent meta is NULL");
    int keys_ok = 1;
    for (int i = 0; i < mega_st_meta_count(f); i++)
        keys_ok &= mega_st_meta(f, mega_st_meta_key(f, i)) != NULL;
    TL_CHECK(keys_ok && mega_st_meta_key(f, 3) == NULL, "meta_key enumerates keys");
}

/* the conversions of read_real and read_i32 */
static void rt_conversions(const mega_st_file *f, const float *f32, const double *f64, const int32_t *i32) {
    mega_status st;
    mega_real r[8];
    const mega_st_tensor *t;
    t = mega_st_get(f, "layer.0/weight");
    st = mega_st_read_real(t, r, 6);
    int ok = st == MEGA_OK;
    for (int i = 0; i < 6; i++) ok &= r[i] == (mega_real)f32[i];
    TL_CHECK(ok, "read_real F32");
    TL_CHECK(mega_st_read_real(t, r, 5) == MEGA_ERR_SHAPE && mega_last_error()[0],
             "read_real with wrong n -> MEGA_ERR_SHAPE");
    t = mega_st_get(f, "f64");
    ok = mega_st_read_real(t, r, 4) == MEGA_OK;
    for (int i = 0; i < 4; i++) ok &= r[i] == (mega_real)f64[i];
    TL_CHECK(ok, "read_real F64");
    t = mega_st_get(f, "half");
    ok = mega_st_read_real(t, r, 3) == MEGA_OK;
    ok &= r[0] == (mega_real)1 && r[1] == (mega_real)-2 && r[2] == (mega_real)ldexp(1.0, -24);
    TL_CHECK(ok, "read_real F16 incl. subnormal");
    t = mega_st_get(f, "bhalf");
    ok = mega_st_read_real(t, r, 2) == MEGA_OK && r[0] == (mega_real)1 && r[1] == (mega_real)-5;
    TL_CHECK(ok, "read_real BF16");
    t = mega_st_get(f, "i64");
    ok = mega_st_read_real(t, r, 4) == MEGA_OK && r[0] == (mega_real)-3 &&
         r[1] == (mega_real)1099511627776.0 && r[2] == 0 && r[3] == (mega_real)INT64_MIN;
    TL_CHECK(ok, "read_real I64");
    t = mega_st_get(f, "scalar");
    TL_CHECK(t && t->ndim == 0 && t->numel == 1 && mega_st_read_real(t, r, 1) == MEGA_OK &&
                 r[0] == (mega_real)3.5,
             "scalar shape [] reads as one element");
    t = mega_st_get(f, "empty");
    TL_CHECK(t && t->numel == 0 && t->nbytes == 0 && mega_st_read_real(t, NULL, 0) == MEGA_OK,
             "zero-element tensor");

    int32_t iv[8];
    t = mega_st_get(f, "i32");
    ok = mega_st_read_i32(t, iv, 5) == MEGA_OK;
    for (int i = 0; i < 5; i++) ok &= iv[i] == i32[i];
    TL_CHECK(ok, "read_i32 I32");
    t = mega_st_get(f, "i16");
    ok = mega_st_read_i32(t, iv, 2) == MEGA_OK && iv[0] == -32768 && iv[1] == 1234;
    TL_CHECK(ok, "read_i32 I16");
    t = mega_st_get(f, "i8");
    ok = mega_st_read_i32(t, iv, 3) == MEGA_OK && iv[0] == -128 && iv[1] == 0 && iv[2] == 127;
    TL_CHECK(ok, "read_i32 I8");
    t = mega_st_get(f, "u8");
    ok = mega_st_read_i32(t, iv, 4) == MEGA_OK && iv[2] == 200 && iv[3] == 255;
    TL_CHECK(ok, "read_i32 U8");
    t = mega_st_get(f, "mask");
    ok = mega_st_read_i32(t, iv, 3) == MEGA_OK && iv[0] == 1 && iv[1] == 0 && iv[2] == 1;
    ok &= mega_st_read_real(t, r, 3) == MEGA_OK && r[0] == 1 && r[1] == 0;
    TL_CHECK(ok, "read_i32 / read_real BOOL");
    t = mega_st_get(f, "i64");
    TL_CHECK(mega_st_read_i32(t, iv, 4) == MEGA_ERR_SHAPE && strstr(mega_last_error(), "int32"),
             "read_i32 I64 out of int32 range -> MEGA_ERR_SHAPE (%s)", mega_last_error());
    t = mega_st_get(f, "layer.0/weight");
    TL_CHECK(mega_st_read_i32(t, iv, 6) == MEGA_ERR_SHAPE, "read_i32 of F32 -> MEGA_ERR_SHAPE");
    t = mega_st_get(f, "empty_i32");
    TL_CHECK(t && mega_st_read_i32(t, iv, 0) == MEGA_OK, "read_i32 zero-element");
}

/* a writer with nothing added: "{}" header, valid file with no tensors */
static void rt_empty_writer(void) {
    char path[512];
    mega_st_file *f = NULL;
    mega_st_writer *w = mega_st_writer_new();
    path_in(path, sizeof path, "empty.safetensors");
    TL_CHECK(mega_st_writer_write(w, path) == MEGA_OK, "write empty file");
    mega_st_writer_free(w);
    TL_CHECK(mega_st_open(path, &f) == MEGA_OK && mega_st_count(f) == 0 &&
                 mega_st_meta_count(f) == 0,
             "empty file reads back with 0 tensors");
    mega_st_close(f);
}

static void test_round_trip(void) {
    float f32[6] = {1.5f, -2.25f, 0.0f, 3.0e-8f, -1.0e30f, 42.0f};
    double f64[4] = {0.1, -1e300, 3.141592653589793, -0.0};
    uint16_t f16[3] = {0x3C00, 0xC000, 0x0001}; /* 1, -2, 2^-24 */
    uint16_t bf16[2] = {0x3F80, 0xC0A0};        /* 1, -5 */
    int64_t i64[4] = {-3, 1ll << 40, 0, INT64_MIN};
    int32_t i32[5] = {-1, 2, INT32_MAX, INT32_MIN, 7};
    int16_t i16[2] = {-32768, 1234};
    int8_t i8[3] = {-128, 0, 127};
    uint8_t u8[4] = {0, 1, 200, 255};
    uint8_t bl[3] = {1, 0, 1};
    float scalar = 3.5f;
    float f32src[6];
    memcpy(f32src, f32, sizeof f32);
    const rt_item items[] = {
        {"layer.0/weight", MEGA_DT_F32, 2, {2, 3}, f32src, 6},
        {"f64", MEGA_DT_F64, 1, {4}, f64, 4},
        {"half", MEGA_DT_F16, 1, {3}, f16, 3},
        {"bhalf", MEGA_DT_BF16, 3, {1, 2, 1}, bf16, 2},
        {"i64", MEGA_DT_I64, 2, {2, 2}, i64, 4},
        {"i32", MEGA_DT_I32, 1, {5}, i32, 5},
        {"i16", MEGA_DT_I16, 1, {2}, i16, 2},
        {"i8", MEGA_DT_I8, 1, {3}, i8, 3},
        {"u8", MEGA_DT_U8, 2, {2, 2}, u8, 4},
        {"mask", MEGA_DT_BOOL, 1, {3}, bl, 3},
        {"scalar", MEGA_DT_F32, 0, {0}, &scalar, 1},
        {"empty", MEGA_DT_F32, 2, {0, 4}, NULL, 0},
        {"empty_i32", MEGA_DT_I32, 3, {3, 0, 2}, NULL, 0},
        {"n\xc3\xa4me \"quoted\" \\ back", MEGA_DT_U8, 1, {1}, u8 + 3, 1},
    };
    const int n = (int)(sizeof items / sizeof items[0]);

    mega_st_writer *w = mega_st_writer_new();
    TL_CHECK(w != NULL, "writer_new");
    if (!w) return;
    int add_ok = 1;
    for (int i = 0; i < n; i++)
        add_ok &= mega_st_writer_add(w, items[i].name, items[i].dt, items[i].ndim,
                                     items[i].shape, items[i].data) == MEGA_OK;
    TL_CHECK(add_ok, "writer_add of %d tensors: %s", n, mega_last_error());
    TL_CHECK(mega_st_writer_meta(w, "format", "pt") == MEGA_OK, "writer_meta format");
    TL_CHECK(mega_st_writer_meta(w, "note", "first") == MEGA_OK, "writer_meta note");
    TL_CHECK(mega_st_writer_meta(w, "note", "caf\xc3\xa9 \"x\"\n\\") == MEGA_OK,
             "writer_meta replaces a key");
    TL_CHECK(mega_st_writer_meta(w, "", "empty key") == MEGA_OK, "writer_meta empty key");

    rt_invalid_adds(w, f32, i32);

    /* the data is copied by writer_add: clobbering the source must not change the file */
    for (int i = 0; i < 6; i++) f32src[i] = -999.0f;

    char path[512];
    path_in(path, sizeof path, "rt.safetensors");
    mega_status st = mega_st_writer_write(w, path);
    TL_CHECK(st == MEGA_OK, "writer_write: %s", mega_last_error());
    mega_st_writer_free(w);
    TL_CHECK(tl_count_entries(g_dir, ".tmp.") == 0, "no temporary file left after a write");

    rt_header_checks(path);

    mega_st_file *f = NULL;
    st = mega_st_open(path, &f);
    TL_CHECK(st == MEGA_OK && f, "open written file: %s", mega_last_error());
    if (!f) return;
    rt_tensors_and_meta(f, items, n, f32);
    rt_conversions(f, f32, f64, i32);
    mega_st_close(f);
    mega_st_close(NULL);
    TL_CHECK(mega_st_count(NULL) == 0 && mega_st_get(NULL, "x") == NULL, "NULL file accessors");
    rt_empty_writer();
}

/* ---------------------------------------------------------------------------------------------
 * a file built byte by byte (unaligned data offsets, LE encodings written out explicitly) */
static void test_handmade(void) {
    const unsigned char data[] = {
        /* a: F16 [5] @0..10: 1, -2, 65504, 2^-24, -inf */
        0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00, 0x00, 0xFC,
        /* b: F32 [2] @10..18: 1.5, -0.25 */
        0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x80, 0xBE,
        /* c: BF16 [2] @18..22: 1, -5 */
        0x80, 0x3F, 0xA0, 0xC0,
        /* d: I64 [2] @22..38: -3, 2^40 */
        0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
        0x00,
        /* e: F64 [1] @38..46: 0.1 */
        0x9A, 0x99, 0x99, 0x99, 0x99, 0x99, 0xB9, 0x3F,
        /* g: I32 [1,1] @46..50: -1 */
        0xFF, 0xFF, 0xFF, 0xFF,
        /* h: I16 [1] @50..52: -32768 */
        0x00, 0x80,
        /* i: I8 [1] @52..53: -128 */
        0x80,
        /* j: U8 [1] @53..54: 255 */
        0xFF};
    /* keys deliberately not in offset order; trailing space padding; odd header length */
    const char *json =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"e\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[38,46]},"
        "\"a\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[0,10]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[10,18]},"
        "\"c\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[18,22]},"
        "\"d\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[22,38]},"
        "\"g\":{\"dtype\":\"I32\",\"shape\":[1,1],\"data_offsets\":[46,50]},"
        "\"h\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[50,52]},"
        "\"i\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[52,53]},"
        "\"j\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[53,54]},"
        "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[54,54]}}   ";
    size_t jl = strlen(json);
    if (jl % 2 == 0) jl--; /* keep the data section at an odd address (drops one pad space) */
    size_t len;
    unsigned char *img = mk_image(json, jl, jl, data, sizeof data, &len);
    char path[512];
    path_in(path, sizeof path, "handmade.safetensors");
    TL_CHECK(tl_write_file(path, img, len) == 0, "write handmade file");
    free(img);

    mega_st_file *f = NULL;
    mega_status st = mega_st_open(path, &f);
    TL_CHECK(st == MEGA_OK, "open handmade file: %s", mega_last_error());
    if (!f) return;
    TL_CHECK(mega_st_count(f) == 10, "handmade count %d", mega_st_count(f));
    TL_CHECK(strcmp(mega_st_at(f, 0)->name, "e") == 0, "tensors kept in header order");
    const char *fmt = mega_st_meta(f, "format");
    TL_CHECK(fmt && strcmp(fmt, "pt") == 0, "handmade metadata");
    mega_real r[5];
    const mega_st_tensor *t = mega_st_get(f, "a");
    TL_CHECK(t && ((uintptr_t)t->data % 2) == 1, "F16 data is at an odd address");
    int ok = t && mega_st_read_real(t, r, 5) == MEGA_OK && r[0] == 1 && r[1] == -2 &&
             r[2] == 65504 && r[3] == (mega_real)ldexp(1.0, -24) && isinf(r[4]) && r[4] < 0;
    TL_CHECK(ok, "handmade F16 values (1, -2, 65504, 2^-24, -inf)");
    t = mega_st_get(f, "b");
    TL_CHECK(t && mega_st_read_real(t, r, 2) == MEGA_OK && r[0] == (mega_real)1.5 &&
                 r[1] == (mega_real)-0.25,
             "handmade F32 values (unaligned)");
    t = mega_st_get(f, "c");
    TL_CHECK(t && mega_st_read_real(t, r, 2) == MEGA_OK && r[0] == 1 && r[1] == -5,
             "handmade BF16 values");
    t = mega_st_get(f, "d");
    TL_CHECK(t && mega_st_read_real(t, r, 2) == MEGA_OK && r[0] == -3 &&
                 r[1] == (mega_real)1099511627776.0,
             "handmade I64 values (unaligned)");
    int32_t iv[2];
    TL_CHECK(t && mega_st_read_i32(t, iv, 2) == MEGA_ERR_SHAPE, "I64 2^40 does not fit int32");
    t = mega_st_get(f, "e");
    TL_CHECK(t && mega_st_read_real(t, r, 1) == MEGA_OK && r[0] == (mega_real)0.1,
             "handmade F64 value 0.1");
    t = mega_st_get(f, "g");
    TL_CHECK(t && t->ndim == 2 && mega_st_read_i32(t, iv, 1) == MEGA_OK && iv[0] == -1,
             "handmade I32");
    t = mega_st_get(f, "h");
    TL_CHECK(t && mega_st_read_i32(t, iv, 1) == MEGA_OK && iv[0] == -32768, "handmade I16");
    t = mega_st_get(f, "i");
    TL_CHECK(t && mega_st_read_real(t, r, 1) == MEGA_OK && r[0] == -128, "handmade I8");
    t = mega_st_get(f, "j");
    TL_CHECK(t && mega_st_read_real(t, r, 1) == MEGA_OK && r[0] == 255, "handmade U8");
    t = mega_st_get(f, "z");
    TL_CHECK(t && t->numel == 0, "handmade zero-element tensor sharing an offset");
    mega_st_close(f);
}

/* ---------------------------------------------------------------------------------------------*/
#define T4(name, dt, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"

/* the baseline of the cases below is valid; header sizes */
static void corrupt_sizes(void) {
    unsigned char d16[16] = {0}, d8[8] = {0};
    size_t len;
    /* sanity: the baseline of the cases below is valid */
    expect_good("baseline", "{" T4("a", "F32", "[2,2]", "0", "16") "}", d16, 16);
    expect_good("empty header {}", "{}", NULL, 0);
    expect_good("padded header", "{}        ", NULL, 0);
    expect_good("unknown entry field ignored",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8],\"x\":[1]}}", d8,
                8);
    expect_good("zero-size tensors", "{" T4("a", "F32", "[0]", "0", "0") "," T4(
                    "b", "U8", "[8]", "0", "8") "," T4("c", "I64", "[2,0]", "8", "8") "}",
                d8, 8);
    expect_good("empty metadata", "{\"__metadata__\":{}}", NULL, 0);

    /* sizes */
    mega_st_file *f = (mega_st_file *)(uintptr_t)1;
    mega_clear_error();
    TL_CHECK(mega_st_open_mem(d8, 0, &f) == MEGA_ERR_FORMAT && f == NULL &&
                 mega_last_error()[0],
             "empty buffer rejected");
    mega_clear_error();
    TL_CHECK(mega_st_open_mem(d8, 7, &f) == MEGA_ERR_FORMAT && strstr(mega_last_error(), "short"),
             "7-byte buffer rejected: %s", mega_last_error());
    {
        const char *js = "{}";
        unsigned char *img = mk_image(js, 2, 3, NULL, 0, &len); /* N larger than file */
        mega_clear_error();
        TL_CHECK(mega_st_open_mem(img, len, &f) == MEGA_ERR_FORMAT &&
                     strstr(mega_last_error(), "exceeds the file size"),
                 "header length > file size rejected: %s", mega_last_error());
        free(img);
        img = mk_image(js, 2, 100000001ull, NULL, 0, &len);
        mega_clear_error();
        TL_CHECK(mega_st_open_mem(img, len, &f) == MEGA_ERR_FORMAT &&
                     strstr(mega_last_error(), "cap"),
                 "header length > 100 MB cap rejected: %s", mega_last_error());
        free(img);
        img = mk_image(js, 2, UINT64_MAX, NULL, 0, &len);
        mega_clear_error();
        TL_CHECK(mega_st_open_mem(img, len, &f) == MEGA_ERR_FORMAT && mega_last_error()[0],
                 "header length 2^64-1 rejected");
        free(img);
        img = mk_image(js, 2, 0, NULL, 0, &len);
        mega_clear_error();
        TL_CHECK(mega_st_open_mem(img, len, &f) == MEGA_ERR_FORMAT &&
                     strstr(mega_last_error(), "is 0"),
                 "header length 0 rejected: %s", mega_last_error());
        free(img);
        /* NUL inside the header */
        img = mk_image("{}\0 ", 4, 4, NULL, 0, &len);
        mega_clear_error();
        TL_CHECK(mega_st_open_mem(img, len, &f) == MEGA_ERR_FORMAT && mega_last_error()[0],
                 "NUL byte in header rejected: %s", mega_last_error());
        free(img);
    }
}

/* bad JSON and bad dtypes */
static void corrupt_json_dtype(void) {
    unsigned char d8[8] = {0};
    /* JSON */
    expect_bad("truncated JSON", "{\"a\":", NULL, 0, "JSON");
    expect_bad("not JSON", "{hello}", NULL, 0, "JSON");
    expect_bad("array top level", "[1,2]", NULL, 0, "'{'");
    expect_bad("leading space", " {}", NULL, 0, "'{'");
    expect_bad("string top level", "\"{}\"", NULL, 0, "'{'");
    expect_bad("trailing garbage", "{} x", NULL, 0, "after the JSON");
    expect_bad("two objects", "{}{}", NULL, 0, "after the JSON");
    expect_bad("invalid UTF-8", "{\"\xff\":1}", NULL, 0, "UTF-8");
    expect_bad("overlong UTF-8", "{\"\xc0\xaf\":1}", NULL, 0, "UTF-8");
    expect_bad("entry not an object", "{\"a\":1}", NULL, 0, "not a JSON object");
    expect_bad("entry is an array", "{\"a\":[0,1]}", NULL, 0, "not a JSON object");

    /* dtype */
    expect_bad("unknown dtype F8", "{" T4("a", "F8_E4M3", "[4]", "0", "4") "}", d8, 4,
               "dtype");
    expect_bad("lower-case dtype", "{" T4("a", "f32", "[1]", "0", "4") "}", d8, 4, "dtype");
    expect_bad("dtype not a string",
               "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", d8, 4, "dtype");
    expect_bad("missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", d8, 4,
               "no dtype");
    expect_bad("duplicate field",
               "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
               d8, 1, "duplicate field");
}

/* bad shapes and data offsets */
static void corrupt_shape_offsets(void) {
    unsigned char d16[16] = {0}, d12[12] = {0}, d8[8] = {0};
    /* shape */
    expect_bad("negative dim", "{" T4("a", "F32", "[-1]", "0", "4") "}", d8, 4, "shape[0]");
    expect_bad("float dim", "{" T4("a", "F32", "[1.5]", "0", "6") "}", d8, 6, "shape[0]");
    expect_bad("string dim", "{" T4("a", "F32", "[\"1\"]", "0", "4") "}", d8, 4, "shape[0]");
    expect_bad("huge dim", "{" T4("a", "F32", "[1e300]", "0", "4") "}", d8, 4, "shape[0]");
    expect_bad("shape not array", "{" T4("a", "F32", "4", "0", "16") "}", d16, 16, "shape");
    expect_bad("missing shape", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", d8, 1,
               "no shape");
    expect_bad("9 dims", "{" T4("a", "U8", "[1,1,1,1,1,1,1,1,1]", "0", "1") "}", d8, 1,
               "dimensions");
    expect_bad("numel overflow", "{" T4("a", "F32", "[4294967296,4294967296,4294967296]", "0", "0")
               "}", NULL, 0, "overflow");
    expect_bad("bytes overflow", "{" T4("a", "F64", "[4611686018427387904]", "0", "0") "}", NULL,
               0, "overflow");

    /* offsets */
    expect_bad("offsets out of bounds", "{" T4("a", "F32", "[25]", "0", "100") "}", d16, 16,
               "exceed");
    expect_bad("begin > end", "{" T4("a", "F32", "[1]", "8", "4") "}", d8, 8, "begin > end");
    expect_bad("negative offset", "{" T4("a", "F32", "[1]", "-4", "0") "}", d8, 8,
               "data_offsets");
    expect_bad("float offset", "{" T4("a", "U8", "[1]", "0.5", "1.5") "}", d8, 8, "data_offsets");
    expect_bad("one offset", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", d8,
               1, "data_offsets");
    expect_bad("three offsets",
               "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", d8, 1,
               "data_offsets");
    expect_bad("offsets not array",
               "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":\"0,1\"}}", d8, 1,
               "data_offsets");
    expect_bad("missing offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", d8, 1,
               "no data_offsets");
    expect_bad("size mismatch", "{" T4("a", "F32", "[2,2]", "0", "12") "}", d12, 12,
               "do not match dtype F32 x shape [2,2] (16 bytes)");
    expect_bad("overlap", "{" T4("a", "F32", "[2]", "0", "8") "," T4("b", "F32", "[2]", "4", "12")
               "}", d12, 12, "overlap");
    expect_bad("identical ranges", "{" T4("a", "F32", "[2]", "0", "8") "," T4("b", "F32", "[2]",
               "0", "8") "}", d8, 8, "overlap");
    expect_bad("gap", "{" T4("a", "F32", "[1]", "0", "4") "," T4("b", "F32", "[1]", "8", "12")
               "}", d12, 12, "gap");
    expect_bad("gap at start", "{" T4("a", "F32", "[1]", "4", "8") "}", d8, 8, "gap");
    expect_bad("trailing bytes", "{" T4("a", "F32", "[1]", "0", "4") "}", d8, 8, "cover");
    expect_bad("data without tensors", "{}", d8, 8, "cover");
}

/* duplicate names and bad metadata */
static void corrupt_names_meta(void) {
    unsigned char d8[8] = {0};
    /* names */
    expect_bad("duplicate names", "{" T4("a", "F32", "[1]", "0", "4") "," T4("a", "F32", "[1]",
               "4", "8") "}", d8, 8, "duplicate tensor name 'a'");

    /* metadata */
    expect_bad("metadata non-string value", "{\"__metadata__\":{\"k\":1}}", NULL, 0,
               "not a string");
    expect_bad("metadata null value", "{\"__metadata__\":{\"k\":null}}", NULL, 0,
               "not a string");
    expect_bad("metadata nested object", "{\"__metadata__\":{\"k\":{}}}", NULL, 0,
               "not a string");
    expect_bad("metadata not object", "{\"__metadata__\":\"x\"}", NULL, 0, "__metadata__");
    expect_bad("metadata duplicate key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", NULL,
               0, "duplicate __metadata__ key");
    expect_bad("metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", NULL, 0,
               "duplicate __metadata__");
}

/* missing, directory and corrupt files on disk */
static void corrupt_files(void) {
    char path[512];
    path_in(path, sizeof path, "does-not-exist.safetensors");
    mega_st_file *f = (mega_st_file *)(uintptr_t)1;
    mega_clear_error();
    TL_CHECK(mega_st_open(path, &f) == MEGA_ERR_IO && f == NULL &&
                 strstr(mega_last_error(), "does-not-exist.safetensors"),
             "missing file -> MEGA_ERR_IO naming the path: %s", mega_last_error());
    mega_clear_error();
    TL_CHECK(mega_st_open(g_dir, &f) == MEGA_ERR_IO && mega_last_error()[0],
             "directory -> MEGA_ERR_IO: %s", mega_last_error());
    /* a corrupt file on disk names the path */
    path_in(path, sizeof path, "corrupt.safetensors");
    tl_write_file(path, "\x02\0\0\0\0\0\0\0{x", 10);
    mega_clear_error();
    TL_CHECK(mega_st_open(path, &f) == MEGA_ERR_FORMAT &&
                 strstr(mega_last_error(), "corrupt.safetensors"),
             "corrupt file -> MEGA_ERR_FORMAT naming the path: %s", mega_last_error());
}

static void test_corrupt(void) {
    corrupt_sizes();
    corrupt_json_dtype();
    corrupt_shape_offsets();
    corrupt_names_meta();
    corrupt_files();
}

/* a small valid image with metadata, several dtypes and a zero-element tensor */
static unsigned char *small_image(size_t *len) {
    float a[3] = {1, 2, 3};
    int64_t b[2] = {5, -6};
    uint16_t c[2] = {0x3C00, 0x4000};
    uint8_t d[1] = {1};
    int64_t sa[1] = {3}, sb[2] = {1, 2}, sc[1] = {2}, sd[1] = {1}, se[2] = {0, 3};
    mega_st_writer *w = mega_st_writer_new();
    mega_st_writer_add(w, "a", MEGA_DT_F32, 1, sa, a);
    mega_st_writer_add(w, "b", MEGA_DT_I64, 2, sb, b);
    mega_st_writer_add(w, "c", MEGA_DT_F16, 1, sc, c);
    mega_st_writer_add(w, "d", MEGA_DT_BOOL, 1, sd, d);
    mega_st_writer_add(w, "e", MEGA_DT_F32, 2, se, NULL);
    mega_st_writer_meta(w, "format", "pt");
    char path[512];
    path_in(path, sizeof path, "small.safetensors");
    mega_status st = mega_st_writer_write(w, path);
    mega_st_writer_free(w);
    if (st != MEGA_OK) return NULL;
    return tl_read_file(path, len);
}

static void test_truncation(void) {
    size_t len = 0;
    unsigned char *img = small_image(&len);
    TL_CHECK(img && len > 8, "small image written (%zu bytes)", len);
    if (!img) return;
    mega_st_file *f = NULL;
    TL_CHECK(mega_st_open_mem(img, len, &f) == MEGA_OK && mega_st_count(f) == 5,
             "small image opens");
    mega_st_close(f);
    int bad = 0;
    size_t first_bad = 0;
    for (size_t k = 0; k < len; k++) {
        /* each prefix goes into an exactly-sized heap copy so ASan sees any over-read */
        unsigned char *p = malloc(k ? k : 1);
        memcpy(p, img, k);
        f = (mega_st_file *)(uintptr_t)1;
        mega_clear_error();
        mega_status st = mega_st_open_mem(p, k, &f);
        if (st != MEGA_ERR_FORMAT || f != NULL || !mega_last_error()[0]) {
            if (!bad) first_bad = k;
            bad++;
            if (st == MEGA_OK) mega_st_close(f);
        }
        free(p);
    }
    TL_CHECK(bad == 0, "all %zu truncations rejected with MEGA_ERR_FORMAT (%d not, first at %zu)",
             len, bad, first_bad);
    /* a few truncations through the file path */
    char path[512];
    path_in(path, sizeof path, "trunc.safetensors");
    int fbad = 0;
    size_t cuts[] = {0, 4, 8, 9, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        tl_write_file(path, img, cuts[i]);
        f = NULL;
        mega_clear_error();
        if (mega_st_open(path, &f) != MEGA_ERR_FORMAT || f || !strstr(mega_last_error(), path))
            fbad++;
        mega_st_close(f);
    }
    TL_CHECK(fbad == 0, "truncated files on disk rejected naming the path (%d not)", fbad);
    free(img);
}

static void test_fuzz(void) {
    size_t len = 0;
    unsigned char *img = small_image(&len);
    if (!img) {
        TL_CHECK(0, "fuzz: small image");
        return;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | img[i];
    unsigned long long seed = 12345;
    int ok_count = 0, fail_count = 0, unclean = 0;
    unsigned char *p = malloc(len);
    for (int it = 0; it < 2000; it++) {
        memcpy(p, img, len);
        int flips = 1 + (int)(tl_rand01(&seed) * 3);
        for (int k = 0; k < flips; k++) {
            size_t pos;
            double u = tl_rand01(&seed);
            if (u < 0.1) pos = (size_t)(tl_rand01(&seed) * 8); /* length field */
            else if (u < 0.9) pos = 8 + (size_t)(tl_rand01(&seed) * (double)hl); /* header */
            else pos = (size_t)(tl_rand01(&seed) * (double)len);
            if (pos >= len) pos = len - 1;
            unsigned char v;
            double m = tl_rand01(&seed);
            if (m < 0.4) v = (unsigned char)(p[pos] ^ (1u << (int)(tl_rand01(&seed) * 8)));
            else if (m < 0.7) v = (unsigned char)"{}[],:\"0123456789-.e \\"[(int)(tl_rand01(&seed) * 22)];
            else v = (unsigned char)(tl_rand01(&seed) * 256);
            p[pos] = v;
        }
        mega_st_file *f = NULL;
        mega_clear_error();
        mega_status st = mega_st_open_mem(p, len, &f);
        if (st == MEGA_OK) {
            ok_count++;
            /* touch every byte of every tensor through the converters */
            for (int i = 0; i < mega_st_count(f); i++) {
                const mega_st_tensor *t = mega_st_at(f, i);
                mega_real *buf = malloc((t->numel ? t->numel : 1) * sizeof *buf);
                if (mega_st_read_real(t, buf, t->numel) != MEGA_OK) unclean++;
                free(buf);
                if (!mega_st_get(f, t->name)) unclean++;
            }
            mega_st_close(f);
        } else {
            fail_count++;
            if (st != MEGA_ERR_FORMAT || f != NULL || !mega_last_error()[0]) unclean++;
        }
    }
    free(p);
    free(img);
    TL_CHECK(unclean == 0, "fuzz: 2000 mutated files open or fail cleanly (%d ok, %d rejected)",
             ok_count, fail_count);
    TL_CHECK(fail_count > 1000, "fuzz: most header mutations are rejected (%d)", fail_count);
}

/* ---------------------------------------------------------------------------------------------*/
static void test_atomic(void) {
    char path[512], sub[512];
    float x[2] = {1, 2};
    int64_t sh[1] = {2};
    mega_st_writer *w = mega_st_writer_new();
    mega_st_writer_add(w, "x", MEGA_DT_F32, 1, sh, x);

    /* missing directory */
    path_in(path, sizeof path, "no/such/dir/out.safetensors");
    mega_clear_error();
    mega_status st = mega_st_writer_write(w, path);
    TL_CHECK(st == MEGA_ERR_IO && strstr(mega_last_error(), "out.safetensors") &&
                 strstr(mega_last_error(), strerror(ENOENT)),
             "write into a missing directory -> MEGA_ERR_IO: %s", mega_last_error());
    path_in(sub, sizeof sub, "no");
    struct stat sb;
    TL_CHECK(stat(sub, &sb) != 0 && tl_count_entries(g_dir, ".tmp.") == 0,
             "no stray files after a failed write");

    /* replacing a directory fails and leaves it (and its contents) alone */
    path_in(sub, sizeof sub, "adir");
    mkdir(sub, 0755);
    path_in(path, sizeof path, "adir/inner.bin");
    TL_CHECK(mega_write_file_atomic(path, "hello", 5) == MEGA_OK, "write_file_atomic");
    mega_clear_error();
    st = mega_st_writer_write(w, sub);
    TL_CHECK(st == MEGA_ERR_IO && strstr(mega_last_error(), "adir"),
             "writing over a directory -> MEGA_ERR_IO: %s", mega_last_error());
    size_t len = 0;
    unsigned char *b = tl_read_file(path, &len);
    TL_CHECK(stat(sub, &sb) == 0 && S_ISDIR(sb.st_mode) && b && len == 5 &&
                 memcmp(b, "hello", 5) == 0,
             "directory and its contents untouched");
    free(b);
    TL_CHECK(tl_count_entries(g_dir, ".tmp.") == 0 && tl_count_entries(sub, ".tmp.") == 0,
             "temporary file removed after the failed rename");

    /* an existing file survives a failed replacement */
    char keep[512], bad[600];
    path_in(keep, sizeof keep, "keep.safetensors");
    TL_CHECK(mega_st_writer_write(w, keep) == MEGA_OK, "write keep.safetensors");
    chmod(keep, 0640);
    size_t olen = 0;
    unsigned char *old = tl_read_file(keep, &olen);
    snprintf(bad, sizeof bad, "%s/", keep); /* "file/" cannot be created */
    mega_clear_error();
    TL_CHECK(mega_write_file_atomic(bad, "junk", 4) == MEGA_ERR_IO && mega_last_error()[0],
             "write to 'file/' fails: %s", mega_last_error());
    b = tl_read_file(keep, &len);
    TL_CHECK(old && b && len == olen && memcmp(b, old, len) == 0, "old file kept intact");
    free(b);

    /* a successful replacement swaps the content and keeps the permissions */
    float y[3] = {7, 8, 9};
    int64_t sh3[1] = {3};
    mega_st_writer *w2 = mega_st_writer_new();
    mega_st_writer_add(w2, "y", MEGA_DT_F32, 1, sh3, y);
    TL_CHECK(mega_st_writer_write(w2, keep) == MEGA_OK, "replace keep.safetensors");
    mega_st_writer_free(w2);
    mega_st_file *f = NULL;
    TL_CHECK(mega_st_open(keep, &f) == MEGA_OK && mega_st_get(f, "y") && !mega_st_get(f, "x"),
             "replacement content visible");
    mega_st_close(f);
    int st_rc = stat(keep, &sb);
    unsigned mode = st_rc == 0 ? (unsigned)(sb.st_mode & 0777) : 0u;
    TL_CHECK(st_rc == 0 && mode == 0640, "permissions of the replaced file kept (%o)", mode);
    TL_CHECK(tl_count_entries(g_dir, ".tmp.") == 0, "no temporary files after replacement");
    free(old);

    /* raw atomic writes, including an empty file */
    path_in(path, sizeof path, "raw.bin");
    TL_CHECK(mega_write_file_atomic(path, "abc", 3) == MEGA_OK, "raw atomic write");
    b = tl_read_file(path, &len);
    TL_CHECK(b && len == 3 && memcmp(b, "abc", 3) == 0, "raw atomic content");
    free(b);
    TL_CHECK(mega_write_file_atomic(path, NULL, 0) == MEGA_OK, "empty atomic write");
    b = tl_read_file(path, &len);
    TL_CHECK(b && len == 0, "empty atomic content");
    free(b);
    TL_CHECK(mega_write_file_atomic("", "x", 1) == MEGA_ERR_INVALID, "empty path rejected");
    mega_st_writer_free(w);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) tl_verbose = 1;
    if (tl_mkdtemp(g_dir, sizeof g_dir, "mega_st_")) return tl_finish();
    test_dtypes();
    test_round_trip();
    test_handmade();
    test_corrupt();
    test_truncation();
    test_fuzz();
    test_atomic();
    tl_rm_rf(g_dir);
    return tl_finish();
}
