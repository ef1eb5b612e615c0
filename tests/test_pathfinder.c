/* PNG images and the Pathfinder task (include/mega_data.h; docs/vision.md): PNG round trips,
 * grayscale conversions and hostile files (not a PNG, truncated, colour, huge dimensions caught
 * before allocating); the snakes2 generator's statistics (label balance, ink, the hard set
 * carrying more paddles than the easy one, markers where the generator says, determinism); the
 * release-layout reader (detection, pixels and labels as written, every malformed directory
 * rejected with one line). Skips, saying so, in a build without libpng. */
#include "mega_data.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static char tmp[256];

/* ---- a PNG written by hand (any colour type and depth), to test what the encoder never makes */
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = (uint8_t)v; }
static size_t chunk(uint8_t *o, const char *type, const uint8_t *d, uint32_t n) {
    put32(o, n), memcpy(o + 4, type, 4);
    if (n) memcpy(o + 8, d, n);
    put32(o + 8 + n, (uint32_t)crc32(0, o + 4, 4 + n));
    return 12 + n;
}
/* raw: rows of rowbytes (filter byte 0 prepended here); the header announces w x h, the data
 * has min(h, 4) rows (enough for the small images, and a huge announced size stays cheap) */
static uint8_t *hand_png(uint32_t w, uint32_t h, int depth, int ctype, const uint8_t *raw, size_t rowbytes, size_t *len) {
    const uint32_t nr = h < 4 ? h : 4;
    size_t fl = (rowbytes + 1) * nr;
    uint8_t *f = calloc(fl ? fl : 1, 1);
    for (uint32_t r = 0; r < nr; r++) memcpy(f + r * (rowbytes + 1) + 1, raw + r * rowbytes, rowbytes);
    uLongf zl = compressBound(fl);
    uint8_t *z = malloc(zl), *o = malloc(zl + 128);
    compress(z, &zl, f, fl);
    static const uint8_t sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
    uint8_t ih[13] = {0};
    put32(ih, w), put32(ih + 4, h), ih[8] = (uint8_t)depth, ih[9] = (uint8_t)ctype;
    size_t n = 8;
    memcpy(o, sig, 8);
    n += chunk(o + n, "IHDR", ih, 13);
    n += chunk(o + n, "IDAT", z, (uint32_t)zl);
    n += chunk(o + n, "IEND", NULL, 0);
    free(f), free(z);
    *len = n;
    return o;
}

static int has(const char *needle) { return strstr(mega_last_error(), needle) != NULL; }

static void test_png(void) {
    enum { W = 37, H = 23 };
    uint8_t px[W * H];
    for (int i = 0; i < W * H; i++) px[i] = (uint8_t)(i * 7 + i / W);
    mega_bytes b;
    TL_CHECK(mega_png_encode_gray(px, W, H, &b) == MEGA_OK, "encode %dx%d", W, H);
    uint8_t *q;
    int w, h;
    TL_CHECK(mega_png_decode_gray(b.data, b.n, "t", 64, &q, &w, &h) == MEGA_OK && w == W && h == H && !memcmp(q, px, sizeof px),
             "decode gives the pixels back");
    free(q);
    TL_CHECK(mega_png_decode_gray(b.data, b.n, "t", 30, &q, &w, &h) == MEGA_ERR_FORMAT && has("larger than") && !q,
             "an image wider than max_side is refused: %s", mega_last_error());
    TL_CHECK(mega_png_decode_gray(b.data, b.n / 2, "t", 64, &q, &w, &h) == MEGA_ERR_FORMAT && has("truncated"),
             "a truncated PNG: %s", mega_last_error());
    TL_CHECK(mega_png_decode_gray((const uint8_t *)"GIF89a..........", 16, "t", 64, &q, &w, &h) == MEGA_ERR_FORMAT &&
                 has("not a PNG"), "not a PNG: %s", mega_last_error());
    mega_bytes_free(&b);
    /* huge announced dimensions: refused from the header, nothing allocated for them */
    size_t n;
    uint8_t one = 0;
    uint8_t *p = hand_png(1u << 30, 1u << 30, 8, 0, &one, 0, &n);
    TL_CHECK(mega_png_decode_gray(p, n, "t", 1024, &q, &w, &h) == MEGA_ERR_FORMAT && !q, "2^30 x 2^30 refused: %s", mega_last_error());
    free(p);
    uint8_t rgb[4 * 3 * 2];
    memset(rgb, 9, sizeof rgb);
    p = hand_png(4, 2, 8, 2, rgb, 12, &n);
    TL_CHECK(mega_png_decode_gray(p, n, "t", 64, &q, &w, &h) == MEGA_ERR_FORMAT && has("RGB"), "RGB refused: %s", mega_last_error());
    free(p);
    /* 16-bit grayscale keeps the high byte; 1-bit grayscale becomes 0 / 255 */
    uint8_t g16[4] = {0x12, 0x34, 0xab, 0xcd};
    p = hand_png(2, 1, 16, 0, g16, 4, &n);
    TL_CHECK(mega_png_decode_gray(p, n, "t", 64, &q, &w, &h) == MEGA_OK && q[0] == 0x12 && q[1] == 0xab, "16-bit gray -> 8");
    free(q), free(p);
    uint8_t g1 = 0xa0; /* 1 0 1 0 */
    p = hand_png(4, 1, 1, 0, &g1, 1, &n);
    TL_CHECK(mega_png_decode_gray(p, n, "t", 64, &q, &w, &h) == MEGA_OK && q[0] == 255 && q[1] == 0 && q[2] == 255 && q[3] == 0,
             "1-bit gray -> 8");
    free(q), free(p);
}

/* ---- the generator ---------------------------------------------------------------------- */
typedef struct {
    double ones, ink, distractors, marker_full;
    int n;
} gstats;

static gstats gen_stats(int size, int difficulty, int count, uint64_t seed, uint8_t *first) {
    gstats s = {0};
    mega_pathfinder_params p;
    mega_pathfinder_gen *g;
    if (mega_pathfinder_defaults(size, difficulty, &p) != MEGA_OK) return s;
    p.seed = seed;
    if (mega_pathfinder_gen_new(&p, &g) != MEGA_OK) return s;
    uint8_t *img = malloc((size_t)size * size);
    for (int i = 0; i < count; i++) {
        mega_pathfinder_info in;
        if (mega_pathfinder_gen_next(g, img, &in) != MEGA_OK) break;
        if (i == 0 && first) memcpy(first, img, (size_t)size * size);
        int ink = 0, mx = 0;
        for (int k = 0; k < size * size; k++) ink += img[k] > 0, mx = img[k] > mx ? img[k] : mx;
        s.ones += in.label, s.ink += (double)ink / (size * size), s.distractors += in.distractors;
        /* a marker covers its centre pixel fully: at least the markers' share of the maximum */
        const int floor_v = (int)(255.0 / (p.snake_contrast > 1 ? p.snake_contrast : 1) * 0.9);
        for (int k = 0; k < 2; k++) s.marker_full += img[in.marker[k][0] * size + in.marker[k][1]] >= floor_v;
        s.n += mx == 255;
    }
    free(img);
    mega_pathfinder_gen_free(g);
    s.ones /= count, s.ink /= count, s.distractors /= count, s.marker_full /= 2.0 * count;
    return s;
}

static void test_generator(void) {
    enum { N = 200 };
    uint8_t a[32 * 32], b[32 * 32], c[32 * 32];
    gstats h = gen_stats(32, 2, N, 7, a), e = gen_stats(32, 0, N, 7, NULL);
    printf("pathfinder-32 hard: label 1 %.3f, ink %.3f, distractors %.2f, full markers %.3f\n", h.ones, h.ink, h.distractors,
           h.marker_full);
    printf("pathfinder-32 easy: label 1 %.3f, ink %.3f, distractors %.2f, full markers %.3f\n", e.ones, e.ink, e.distractors,
           e.marker_full);
    TL_CHECK(h.n == N, "every hard image scaled to a maximum of 255 (%d of %d)", h.n, N);
    /* binomial(200, 0.5): sd 0.035; 0.40..0.60 is 2.8 sd */
    TL_CHECK(h.ones > 0.40 && h.ones < 0.60, "labels balanced (hard: %.3f)", h.ones);
    TL_CHECK(e.ones > 0.40 && e.ones < 0.60, "labels balanced (easy: %.3f)", e.ones);
    TL_CHECK(h.ink > 0.05 && h.ink < 0.35, "ink fraction of a sparse line drawing (%.3f)", h.ink);
    /* 2 x 14 target paddles + up to 5 x 4 against 2 x 6 + up to 10 x 2 */
    TL_CHECK(h.ink > e.ink * 1.1, "the hard set draws more paddles than the easy one (ink %.3f vs %.3f)", h.ink, e.ink);
    TL_CHECK(h.distractors > 2 && h.distractors <= 5, "distractors drawn (%.2f of 5)", h.distractors);
    TL_CHECK(h.marker_full > 0.95, "markers at the reported centres (%.3f)", h.marker_full);
    gen_stats(32, 2, 1, 7, b);
    gen_stats(32, 2, 1, 8, c);
    TL_CHECK(!memcmp(a, b, sizeof a) && memcmp(a, c, sizeof a), "same seed same image, another seed another");
    mega_pathfinder_params p;
    TL_CHECK(mega_pathfinder_defaults(48, 2, &p) == MEGA_ERR_INVALID, "size 48 refused");
    TL_CHECK(mega_pathfinder_defaults(128, 2, &p) == MEGA_OK && p.n_margins == 2 && p.n_distractors == 8 && p.distractor_length == 4,
             "128 hard: margins {2,3}, ceil(35 / (14/3)) = 8 distractors of 4 paddles");
    TL_CHECK(mega_pathfinder_defaults(32, 0, &p) == MEGA_OK && p.n_distractors == 10 && p.distractor_length == 2 && p.contour_length == 6,
             "32 easy: 20 // 2 = 10 distractors of 2 paddles, paths of 6");
}

/* ---- the reader ------------------------------------------------------------------------- */
static void write_png(const char *path, const uint8_t *px, int w, int h) {
    mega_bytes b;
    if (mega_png_encode_gray(px, w, h, &b) == MEGA_OK) tl_write_file(path, b.data, b.n), mega_bytes_free(&b);
}

static mega_status load(const char *dir, mega_dataset *d) {
    mega_data_opts o;
    memset(&o, 0, sizeof o);
    o.real = 1;
    return mega_dataset_load(MEGA_DATA_AUTO, dir, NULL, NULL, &o, d);
}

static void test_reader(void) {
    char root[512], sub[600], meta[700];
    snprintf(root, sizeof root, "%s/pathfinder8", tmp);
    snprintf(sub, sizeof sub, "%s/curv_contour_length_14", root);
    mkdir(root, 0755), mkdir(sub, 0755);
    mkdir(tl_path(sub, "metadata"), 0755), mkdir(tl_path(sub, "imgs"), 0755), mkdir(tl_path(sub, "imgs/0"), 0755);
    snprintf(meta, sizeof meta, "%s/metadata/0.npy", sub);
    uint8_t px[3][64];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 64; i++) px[k][i] = (uint8_t)(k * 50 + i);
        char name[64];
        snprintf(name, sizeof name, "imgs/0/sample_%d.png", k);
        write_png(tl_path(sub, name), px[k], 8, 8);
    }
    const char *good = "imgs/0 sample_0.png 0 1 1.0 14 4 2 0.5 1 1\nimgs/0 sample_1.png 1 0 1.0 14 4 2 0.5 1 1\n"
                       "imgs/0 sample_2.png 2 1 1.0 14 4 2 0.5 1 1\n";
    tl_write_file(meta, good, strlen(good));
    TL_CHECK(mega_data_detect(root) == MEGA_DATA_PATHFINDER, "a release directory is detected");
    mega_dataset d;
    mega_status st = load(root, &d);
    TL_CHECK(st == MEGA_OK && d.n == 3 && d.rows == 8 && d.cols == 8 && d.classes.n == 2, "3 images of 8x8, 2 classes (%s)",
             st ? mega_last_error() : "ok");
    if (st == MEGA_OK) {
        int same = 1;
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 64; i++) same &= d.tok[k][i] == px[k][i];
        TL_CHECK(same && d.label[0] == d.label[2] && d.label[0] != d.label[1], "pixels and labels as written");
        TL_CHECK(mega_dataset_format(&d) == MEGA_DATA_PATHFINDER && d.vocab.real, "format pathfinder, real-valued pixels");
        mega_dataset_free(&d);
    }
    /* the difficulty directory itself also loads */
    st = load(sub, &d);
    TL_CHECK(st == MEGA_OK && d.n == 3, "the difficulty directory loads too");
    mega_dataset_free(&d);
    /* an empty image file is skipped (the release has one) */
    tl_write_file(tl_path(sub, "imgs/0/sample_1.png"), "", 0);
    st = load(root, &d);
    TL_CHECK(st == MEGA_OK && d.n == 2, "an empty image file is skipped");
    mega_dataset_free(&d);
    write_png(tl_path(sub, "imgs/0/sample_1.png"), px[1], 8, 8);
    static const struct {
        const char *meta, *want;
    } bad[] = {
        {"imgs/0 sample_9.png 9 1\n", "does not exist"},
        {"imgs/0 sample_0.png 0\n", "at least 4 fields"},
        {"../x sample_0.png 0 1\n", "without '..'"},
        {"/etc sample_0.png 0 1\n", "relative"},
        {"imgs/0 sample_0.png 0 1\nimgs/0 big.png 1 0\n", "the first image was 8x8"},
        {"imgs/0 rgb.png 0 1\n", "RGB"},
        {"imgs/0 junk.png 0 1\n", "not a PNG"},
    };
    uint8_t big[100];
    memset(big, 3, sizeof big);
    write_png(tl_path(sub, "imgs/0/big.png"), big, 10, 10);
    size_t n;
    uint8_t rgb[12] = {0};
    uint8_t *p = hand_png(2, 2, 8, 2, rgb, 6, &n);
    tl_write_file(tl_path(sub, "imgs/0/rgb.png"), p, n);
    free(p);
    tl_write_file(tl_path(sub, "imgs/0/junk.png"), "hello", 5);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tl_write_file(meta, bad[i].meta, strlen(bad[i].meta));
        st = load(root, &d);
        TL_CHECK(st != MEGA_OK && has(bad[i].want) && !strchr(mega_last_error(), '\n') && d.n == 0, "bad metadata %zu: %s", i,
                 mega_last_error());
    }
    tl_write_file(tl_path(sub, "metadata/x.npy"), good, strlen(good));
    st = load(root, &d);
    TL_CHECK(st == MEGA_ERR_FORMAT && has("<number>.npy"), "a metadata file not named <number>.npy: %s", mega_last_error());
    st = mega_dataset_load(MEGA_DATA_PATHFINDER, tmp, NULL, NULL, NULL, &d);
    TL_CHECK(st == MEGA_ERR_FORMAT && has("no metadata/"), "a directory without metadata/: %s", mega_last_error());
}

int main(void) {
    if (!mega_png_available()) {
        uint8_t *q;
        int w, h;
        TL_CHECK(mega_png_decode_gray((const uint8_t *)"x", 1, "t", 8, &q, &w, &h) == MEGA_ERR_UNSUPPORTED && has("no PNG support"),
                 "without libpng: one line saying so");
        printf("NOTE skip: this build has no libpng (the PNG and Pathfinder tests need it)\n");
        return tl_finish();
    }
    if (tl_mkdtemp(tmp, sizeof tmp, "mega_pf_")) return tl_finish();
    test_png();
    test_generator();
    test_reader();
    tl_rm_rf(tmp);
    return tl_finish();
}
