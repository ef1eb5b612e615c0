/* `mega pathfinder`: writes the Pathfinder task of the Long Range Arena with the library's
 * generator (src/data/pathfinder.c), in the layout of the published release, so that the same
 * reader (the "pathfinder" data format) loads both:
 *   OUT/<curv_baseline | curv_contour_length_9 | curv_contour_length_14>/imgs/<k>/sample_<i>.png
 *   OUT/<same>/metadata/<k>.npy
 * where batch k holds up to 1000 images and its metadata file (text despite the name, as in the
 * release) has one line per image: "imgs/<k> sample_<i>.png <i> <label> <continuity>
 * <contour_length> <distractor_length> <paddle_length> <paddle_thickness> <margin> <contrasts>".
 * A batch's metadata is written (atomically) after its images, so an interrupted run leaves
 * complete batches only; images without a metadata line are never read. */
#include "common.h"
#include "mega_data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PF_BATCH 1000

typedef struct {
    int64_t n, ones, ink, px, distractors, dpaddles, attempts, marker_bright;
} pf_stats;

/* ensure_dir for each component of path (mkdir -p) */
static int ensure_dirs(const char *path) {
    char b[4400];
    snprintf(b, sizeof b, "%s", path);
    for (char *q = b + 1; *q; q++)
        if (*q == '/') {
            *q = 0;
            if (ensure_dir(b)) return 2;
            *q = '/';
        }
    return ensure_dir(b) ? 2 : 0;
}

/* one image file, written whole (its metadata line comes later) */
static int write_png(const char *path, const uint8_t *img, int S) {
    mega_bytes b;
    if (mega_png_encode_gray(img, S, S, &b) != MEGA_OK) return cli_error("%s", mega_last_error());
    FILE *f = fopen(path, "wb");
    int rc = 0;
    if (!f) rc = cli_error("cannot create '%s': %s", path, strerror(errno));
    else {
        if (fwrite(b.data, 1, b.n, f) != b.n) rc = cli_error("write error on '%s': %s", path, strerror(errno));
        if (fclose(f) != 0 && !rc) rc = cli_error("close '%s': %s", path, strerror(errno));
    }
    mega_bytes_free(&b);
    return rc;
}

static void add_stats(pf_stats *st, const uint8_t *img, int S, const mega_pathfinder_info *in) {
    st->n++, st->ones += in->label, st->distractors += in->distractors, st->dpaddles += in->distractor_paddles;
    st->attempts += in->pair_attempts, st->px += (int64_t)S * S;
    for (int i = 0; i < S * S; i++) st->ink += img[i] > 0;
    for (int k = 0; k < 2; k++) st->marker_bright += img[in->marker[k][0] * S + in->marker[k][1]] > 0;
}

/* a grid of the first images (figure: 4 x 4, a 2-pixel gap), enlarged (nearest pixel) to about
 * 512 pixels across */
static int write_grid(const char *path, const uint8_t *imgs, int count, int S) {
    const int G = 4, Z = S >= 128 ? 1 : 512 / (4 * S), gap = 2, W = G * S * Z + (G + 1) * gap;
    uint8_t *g = malloc((size_t)W * W);
    if (!g) return cli_error("out of memory");
    memset(g, 128, (size_t)W * W);
    for (int k = 0; k < count && k < G * G; k++)
        for (int y = 0; y < S * Z; y++)
            for (int x = 0; x < S * Z; x++)
                g[(size_t)(gap + (k / G) * (S * Z + gap) + y) * W + gap + (k % G) * (S * Z + gap) + x] =
                    imgs[(size_t)k * S * S + (size_t)(y / Z) * S + x / Z];
    mega_bytes b;
    int rc = 0;
    if (mega_png_encode_gray(g, W, W, &b) != MEGA_OK) rc = cli_error("%s", mega_last_error());
    else {
        if (mega_write_file_atomic(path, b.data, b.n) != MEGA_OK) rc = cli_error("%s", mega_last_error());
        mega_bytes_free(&b);
    }
    free(g);
    return rc;
}

/* batch k: its images, then its metadata; 0 or 2 */
static int pf_batch(mega_pathfinder_gen *g, const mega_pathfinder_params *p, const char *dir, int k, int count, uint8_t *img,
                    uint8_t *keep, int *kept, pf_stats *st) {
    char sub[4200], path[4400], line[512];
    snprintf(sub, sizeof sub, "%s/imgs/%d", dir, k);
    if (ensure_dirs(sub)) return 2;
    size_t cap = (size_t)count * 160 + 1, len = 0;
    char *meta = malloc(cap);
    if (!meta) return cli_error("out of memory"), 2;
    for (int i = 0; i < count; i++) {
        mega_pathfinder_info in;
        if (mega_pathfinder_gen_next(g, img, &in) != MEGA_OK) return free(meta), cli_error("%s", mega_last_error()), 2;
        snprintf(path, sizeof path, "%s/sample_%d.png", sub, i);
        if (write_png(path, img, p->size)) return free(meta), 2;
        add_stats(st, img, p->size, &in);
        if (*kept < 16) memcpy(keep + (size_t)(*kept)++ * p->size * p->size, img, (size_t)p->size * p->size);
        /* the fields of snakes2's accumulate_meta, as Python prints them */
        int n = snprintf(line, sizeof line, "imgs/%d sample_%d.png %d %d %g %d %d %d %g %d 1\n", k, i, i, in.label, p->continuity,
                         p->contour_length, p->distractor_length, p->paddle_length, p->paddle_thickness, in.margin);
        if (n > 0 && len + (size_t)n < cap) memcpy(meta + len, line, (size_t)n), len += (size_t)n;
    }
    snprintf(sub, sizeof sub, "%s/metadata", dir);
    snprintf(path, sizeof path, "%s/%d.npy", sub, k);
    int rc = ensure_dir(sub) ? 2 : mega_write_file_atomic(path, meta, len) != MEGA_OK ? (cli_error("%s", mega_last_error()), 2) : 0;
    free(meta);
    return rc;
}

int cmd_pathfinder(int argc, char **argv) {
    const char *out = NULL, *difficulty = "hard", *figure = NULL;
    int size = 32, quiet = 0;
    int64_t count = 1000, seed = 0;
    cli_flag fl[] = {
        {"out", F_STR, &out, "output directory (the release's pathfinderN): writes <difficulty dir>/imgs and /metadata", NULL, 1, 0, 0},
        {"size", F_INT, &size, "image side: 32, 64 or 128", NULL, 32, 128, 0},
        {"difficulty", F_STR, &difficulty, "easy (6 paddles per path), medium (9) or hard (14)", NULL, 1, 0, 0},
        {"count", F_I64, &count, "images", NULL, 1, 1e8, 0},
        {"seed", F_I64, &seed, "seed", NULL, 0, 9007199254740991.0, 0},
        {"figure", F_STR, &figure, "also write a PNG of the first 16 images in a 4 x 4 grid", NULL, 1, 0, 0},
        {"quiet", F_SET, &quiet, "no summary", NULL, 1, 0, 0},
        FL_END};
    const char *usage = "--out DIR [--size 32|64|128 --difficulty easy|medium|hard --count N --seed S --figure FILE.png]\n\n"
                        "Writes the Pathfinder task of the Long Range Arena (the snakes2 generator of Linsley et al.\n"
                        "2018 with the release's per-size settings) as PNG images and metadata in the layout of the\n"
                        "published release; read it with mega train --task classify --data DIR --format pathfinder.";
    int r = cli_parse("pathfinder", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!out || !*out) return cli_error("--out DIR is required (see 'mega pathfinder --help')"), 2;
    if (strlen(out) > 3000) return cli_error("--out: path too long"), 2;
    if (!mega_png_available()) return cli_error("mega pathfinder writes PNG images: this build has no libpng (install libpng-dev and rebuild)"), 2;
    const int d = !strcmp(difficulty, "easy") ? 0 : !strcmp(difficulty, "medium") ? 1 : !strcmp(difficulty, "hard") ? 2 : -1;
    if (d < 0) return cli_error("--difficulty must be easy, medium or hard (got '%s')", difficulty), 2;
    if (size != 32 && size != 64 && size != 128) return cli_error("--size must be 32, 64 or 128 (got %d)", size), 2;
    mega_pathfinder_params p;
    mega_pathfinder_gen *g;
    if (mega_pathfinder_defaults(size, d, &p) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    p.seed = (uint64_t)seed;
    if (mega_pathfinder_gen_new(&p, &g) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    char dir[3200];
    snprintf(dir, sizeof dir, "%s/%s", out, mega_pathfinder_subdir(p.contour_length));
    uint8_t *img = malloc((size_t)size * size), *keep = malloc((size_t)16 * size * size);
    int rc = !img || !keep ? (cli_error("out of memory"), 2) : ensure_dirs(dir);
    pf_stats st;
    memset(&st, 0, sizeof st);
    int kept = 0;
    const double t0 = now_sec();
    for (int64_t k = 0; !rc && k * PF_BATCH < count; k++) {
        const int64_t left = count - k * PF_BATCH;
        rc = pf_batch(g, &p, dir, (int)k, left < PF_BATCH ? (int)left : PF_BATCH, img, keep, &kept, &st);
    }
    if (!rc && figure) rc = write_grid(figure, keep, kept, size) ? 2 : 0;
    if (!rc && !quiet) {
        printf("wrote %s: %lld images of %dx%d, %d paddles per path, in %.1fs (seed %lld)\n", dir, (long long)st.n, size, size,
               p.contour_length, now_sec() - t0, (long long)seed);
        printf("label 1: %.1f%%; ink (pixels > 0): %.1f%%; distractors %.2f of %d (%.1f paddles); pair attempts %.2f; "
               "markers on ink %.1f%%\n",
               100.0 * (double)st.ones / (double)st.n, 100.0 * (double)st.ink / (double)st.px, (double)st.distractors / (double)st.n,
               p.n_distractors, (double)st.dpaddles / (double)st.n, (double)st.attempts / (double)st.n,
               50.0 * (double)st.marker_bright / (double)st.n);
    }
    free(img), free(keep);
    mega_pathfinder_gen_free(g);
    return rc;
}
