/* The official LRA image data as it ships (the lra-image task of the official
 * fairseq/tasks/long_range_arena.py, LRAImageTask.load_dataset): DIR/input/SPLIT.src, one image
 * per line as whitespace-separated pixel integers 0..255 (fairseq/data/pixel_sequence_dataset.py
 * PixelSequenceDataset), and DIR/label/SPLIT.label, one integer class per line (RawLabelDataset).
 * Both files are mapped and checked whole (every pixel, every label, the line counts, one width
 * for every image) before the one allocation of the pool: include/mega_data.h
 * mega_dataset_load_lra_image. */
#include "data/data.h"

#include <sys/stat.h>

/* the longest image line accepted: Path-X, the largest LRA image, has 16,384 pixels */
#define LRA_IMAGE_MAX_PIXELS (1 << 20)

static int is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

int mega__lra_image_dir(const char *dir) {
    char p[4200];
    if (!dir || strlen(dir) >= 4000 || !is_dir(dir)) return 0;
    snprintf(p, sizeof p, "%s/input", dir);
    if (!is_dir(p)) return 0;
    snprintf(p, sizeof p, "%s/label", dir);
    return is_dir(p);
}

int mega__lra_image_split(const char *path) {
    char dir[4096], p[4400];
    struct stat st;
    if (!path || strlen(path) >= sizeof dir) return 0;
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || !slash[1]) return 0;
    *slash = 0;
    snprintf(p, sizeof p, "%s/input/%s.src", dir, slash + 1);
    return mega__lra_image_dir(dir) && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* path as DIR (the layout; split from opts->split) or DIR/SPLIT, into the two file names */
static mega_status lra_image_paths(const char *path, int split, char *src, char *lab, size_t cap) {
    static const char *const splits[3] = {"train", "valid", "test"};
    char dir[4096], name[256];
    if (!path || !*path) MEGA_FAIL(MEGA_ERR_INVALID, "LRA image data: no directory given");
    if (strlen(path) >= sizeof dir) MEGA_FAIL(MEGA_ERR_INVALID, "LRA image data: the path is too long");
    snprintf(dir, sizeof dir, "%s", path);
    if (mega__lra_image_dir(dir)) {
        snprintf(name, sizeof name, "%s", splits[split >= 0 && split < 3 ? split : 0]);
    } else { /* DIR/SPLIT */
        char *slash = strrchr(dir, '/');
        const char *s = slash ? slash + 1 : dir;
        if (!*s || strlen(s) >= sizeof name)
            MEGA_FAIL(MEGA_ERR_INVALID, "LRA image data '%s': not a directory with input/ and label/, nor DIR/SPLIT", path);
        snprintf(name, sizeof name, "%s", s);
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
        if (!mega__lra_image_dir(dir))
            MEGA_FAIL(MEGA_ERR_INVALID, "LRA image data '%s': not a directory with input/ and label/, nor DIR/SPLIT", path);
    }
    snprintf(src, cap, "%s/input/%s.src", dir, name);
    snprintf(lab, cap, "%s/label/%s.label", dir, name);
    return MEGA_OK;
}

/* the next line of b from *pos: [*s, *s + *n) without its newline (and a '\r' before it) */
static int next_line(const mega_bytes *b, size_t *pos, const char **s, size_t *n) {
    if (*pos >= b->n) return 0;
    const char *p = (const char *)b->data + *pos, *e = memchr(p, '\n', b->n - *pos);
    size_t k = e ? (size_t)(e - p) : b->n - *pos;
    *pos += k + (e != NULL);
    if (k && p[k - 1] == '\r') k--;
    *s = p, *n = k;
    return 1;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* the pixels of one line (out: NULL to count only): every word an integer 0..255, as int(w) of
 * PixelSequenceDataset.encode_line reads a pixel; *count */
static mega_status line_pixels(const char *path, int line, const char *s, size_t n, uint16_t *out, size_t *count) {
    size_t k = 0, i = 0;
    while (i < n) {
        while (i < n && is_ws(s[i])) i++;
        if (i == n) break;
        size_t j = i;
        unsigned v = 0;
        while (j < n && !is_ws(s[j])) j++;
        for (size_t t = i; t < j; t++) {
            if (s[t] < '0' || s[t] > '9' || j - i > 3 || (v = v * 10 + (unsigned)(s[t] - '0')) > 255) {
                char sh[48];
                MEGA_FAIL(MEGA_ERR_FORMAT, "%s line %d: pixel %zu is '%s', not an integer 0..255", path, line, k + 1,
                          mega__data_show(s + i, j - i, sh, sizeof sh));
            }
        }
        if (++k > LRA_IMAGE_MAX_PIXELS)
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s line %d: more than %d pixels", path, line, LRA_IMAGE_MAX_PIXELS);
        if (out) out[k - 1] = (uint16_t)v;
        i = j;
    }
    *count = k;
    return MEGA_OK;
}

/* one label line: an integer 0..65535 (RawLabelDataset: int(line.strip())), as its decimal string */
static mega_status line_label(const char *path, int line, const char *s, size_t n, char *buf, size_t cap) {
    while (n && is_ws(*s)) s++, n--;
    while (n && is_ws(s[n - 1])) n--;
    unsigned long v = 0;
    int ok = n > 0 && n <= 5;
    for (size_t t = 0; t < n && ok; t++) ok = s[t] >= '0' && s[t] <= '9', v = v * 10 + (unsigned long)(s[t] - '0');
    if (!ok || v >= MEGA_DATA_MAX_CLASSES) {
        char sh[48];
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s line %d: label '%s' is not an integer 0..%d", path, line,
                  mega__data_show(s, n, sh, sizeof sh), MEGA_DATA_MAX_CLASSES - 1);
    }
    snprintf(buf, cap, "%lu", v);
    return MEGA_OK;
}

/* the first pass: every line valid, one width, as many labels as images; *N, *W */
static mega_status lra_image_check(const char *src, const mega_bytes *sb, const char *lab, const mega_bytes *lb, int *N,
                                   size_t *W) {
    size_t ps = 0, pl = 0, n, m;
    const char *s, *l;
    int line = 0;
    char buf[16];
    while (next_line(sb, &ps, &s, &n)) {
        if (line == 0x3fffffff) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: too many lines", src);
        line++;
        size_t k;
        MEGA_TRY(line_pixels(src, line, s, n, NULL, &k));
        if (k == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s line %d: no pixels", src, line);
        if (line > 1 && k != *W)
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s line %d: %zu pixels but line 1 has %zu (every image of a split has one size)", src,
                      line, k, *W);
        *W = k;
        if (!next_line(lb, &pl, &l, &m))
            MEGA_FAIL(MEGA_ERR_FORMAT, "%s has fewer lines than %s: no label for image %d", lab, src, line);
        MEGA_TRY(line_label(lab, line, l, m, buf, sizeof buf));
    }
    if (next_line(lb, &pl, &l, &m))
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s has more lines than the %d images of %s", lab, line, src);
    if (line == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: no images", src);
    *N = line;
    return MEGA_OK;
}

/* the second pass into the pool (cut at opts->max_len, the task's TruncateDataset) */
static mega_status lra_image_fill(mega__builder *b, const mega_bytes *sb, const char *lab, const mega_bytes *lb, int N,
                                  size_t W) {
    mega_dataset *d = b->d;
    const mega_data_opts *o = b->o;
    if (o->max_examples > 0 && N > o->max_examples) N = o->max_examples;
    const size_t keep = o->max_len > 0 && W > (size_t)o->max_len ? (size_t)o->max_len : W;
    MEGA_TRY(mega__builder_reserve(b, W * (size_t)N)); /* W: the whole line is parsed in place */
    size_t ps = 0, pl = 0, n, m, k;
    const char *s, *l;
    char buf[16];
    for (int i = 0; i < N && next_line(sb, &ps, &s, &n) && next_line(lb, &pl, &l, &m); i++) {
        MEGA_TRY(mega__builder_grow(b, 0));
        MEGA_TRY(line_label(lab, i + 1, l, m, buf, sizeof buf));
        int li;
        MEGA_TRY(mega__builder_label(b, buf, strlen(buf), i + 1, &li));
        MEGA_TRY(line_pixels(b->path, i + 1, s, n, d->pool + d->pool_n, &k));
        b->off[d->n] = d->pool_n, d->len[d->n] = (int)keep;
        d->pool_n += keep, d->n_tokens += (int64_t)keep;
        d->n_truncated += keep < W;
        d->line[d->n] = i + 1, b->ex_lab[d->n] = li;
        d->n++;
    }
    return mega__builder_finish(b, NULL);
}

mega_status mega_dataset_load_lra_image(const char *path, const mega_data_opts *o, mega_dataset *d) {
    mega_data_opts def;
    if (!o) memset(&def, 0, sizeof def), o = &def;
    memset(d, 0, sizeof *d);
    double mean = o->mean, std = o->std;
    if (mean == 0 && std == 0) mean = 0.5, std = 0.5; /* LRAImageTask: (0.5, 0.5) without --pixel-normalization */
    if (o->real && !(std > 0 && isfinite(std) && isfinite(mean)))
        MEGA_FAIL(MEGA_ERR_INVALID, "pixel normalisation: std must be > 0 (got mean %g, std %g)", mean, std);
    char src[4400], lab[4400];
    MEGA_TRY(lra_image_paths(path, o->split, src, lab, sizeof src));
    mega_bytes sb = {0}, lb = {0};
    MEGA_TRY(mega__data_load(src, "LRA image input", 0, 1, &sb));
    mega_status st = mega__data_load(lab, "LRA image label", 0, 1, &lb);
    int N = 0;
    size_t W = 0;
    if (st == MEGA_OK) st = lra_image_check(src, &sb, lab, &lb, &N, &W);
    mega__builder b;
    memset(&b, 0, sizeof b);
    if (st == MEGA_OK) st = mega__builder_init(&b, src, o, d);
    if (st == MEGA_OK) {
        d->vocab = mega_vocab_pixels(o->real, mean, std);
        d->pixel_lines = 1;
        b.line_note = " (line = image number; the label is in the .label file)"; /* in an unknown-label message */
        st = lra_image_fill(&b, &sb, lab, &lb, N, W);
    }
    mega_bytes_free(&sb), mega_bytes_free(&lb);
    mega__builder_free(&b);
    if (st != MEGA_OK) mega_dataset_free(d);
    return st;
}
