/* The "pathfinder" data format: a directory in the layout of the Long Range Arena's Pathfinder
 * release (and of `mega pathfinder`), read as pixel sequences like the IDX images:
 *   DIR/metadata/<k>.npy           text despite the name: "<subdir> <file> <i> <label> ..." per line
 *   DIR/<subdir>/<file>            an 8-bit grayscale PNG
 * DIR is a difficulty directory (curv_baseline, curv_contour_length_9, curv_contour_length_14) or
 * the directory above them (pathfinder32, ...), where the hard set is taken, as the official Mega
 * code does (examples/mega/lra/data_process.py, PathFinderDataset). Metadata files are read in
 * the numeric order of their names, lines in file order. An empty image file is skipped (the
 * release has one, which the official loader lists as blacklisted); a missing one is an error. */
#include "data/data.h"

#include <dirent.h>
#include <sys/stat.h>

#define PF_MAX_SIDE 1024
#define PF_MAX_META ((uint64_t)256 << 20)

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* the difficulty directory holding metadata/ (into root), else 0 */
static int pf_root(const char *dir, char *root, size_t cap) {
    static const char *const subs[] = {"", "curv_contour_length_14", "curv_contour_length_9", "curv_baseline"};
    char m[4400];
    for (int i = 0; i < 4; i++) {
        if (*subs[i]) snprintf(root, cap, "%s/%s", dir, subs[i]);
        else snprintf(root, cap, "%s", dir);
        snprintf(m, sizeof m, "%s/metadata", root);
        if (is_dir(m)) return 1;
    }
    return 0;
}

int mega__pathfinder_dir(const char *dir) {
    char r[4200];
    return dir && strlen(dir) < 4000 && is_dir(dir) && pf_root(dir, r, sizeof r);
}

/* the metadata files' numbers, sorted */
static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}
static mega_status pf_list(const char *mdir, int64_t **out, int *n) {
    *out = NULL, *n = 0;
    DIR *d = opendir(mdir);
    if (!d) MEGA_FAIL(MEGA_ERR_IO, "pathfinder data: cannot open '%s'", mdir);
    int cap = 0;
    int64_t *v = NULL;
    struct dirent *e;
    mega_status st = MEGA_OK;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        const size_t l = strlen(s);
        if (l < 5 || strcmp(s + l - 4, ".npy")) continue;
        int64_t k = 0;
        size_t i = 0;
        for (; i < l - 4 && s[i] >= '0' && s[i] <= '9' && k < ((int64_t)1 << 40); i++) k = k * 10 + (s[i] - '0');
        if (i != l - 4) {
            st = mega__error(MEGA_ERR_FORMAT, "pathfinder data: metadata file '%s/%s' is not named <number>.npy", mdir, s);
            break;
        }
        if (*n == cap) {
            int64_t *nv = realloc(v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 64));
            if (!nv) {
                st = mega__error(MEGA_ERR_OOM, "pathfinder data: out of memory");
                break;
            }
            v = nv;
        }
        v[(*n)++] = k;
    }
    closedir(d);
    if (st == MEGA_OK && *n == 0) st = mega__error(MEGA_ERR_FORMAT, "pathfinder data: no <number>.npy files in '%s'", mdir);
    if (st != MEGA_OK) {
        free(v), *n = 0;
        return st;
    }
    qsort(v, (size_t)*n, sizeof *v, cmp_i64);
    *out = v;
    return MEGA_OK;
}

/* split a line into up to 4 whitespace-separated fields (NUL-terminating them in place) */
static int fields4(char *s, char **f) {
    int n = 0;
    while (*s && n < 4) {
        while (*s == ' ' || *s == '\t' || *s == '\r') s++;
        if (!*s) break;
        f[n++] = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\r') s++;
        if (*s) *s++ = 0;
    }
    return n;
}

/* a relative path without ".." components */
static int safe_rel(const char *p) {
    if (!*p || *p == '/') return 0;
    for (const char *q = p; *q;) {
        const char *e = strchr(q, '/');
        const size_t l = e ? (size_t)(e - q) : strlen(q);
        if (l == 2 && q[0] == '.' && q[1] == '.') return 0;
        if (!e) break;
        q = e + 1;
    }
    return 1;
}

/* one metadata line: its image into the dataset (or skipped when the file is empty) */
static mega_status pf_line(mega__builder *b, const char *root, const char *meta, int ln, char *s, int *skipped) {
    char *f[4];
    if (fields4(s, f) < 4)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: expected '<dir> <file> <index> <label> ...' (at least 4 fields)", meta, ln);
    if (!safe_rel(f[0]) || !safe_rel(f[1]) || strlen(f[0]) + strlen(f[1]) > 1000)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s:%d: image path '%s/%s' must be relative, without '..'", meta, ln, f[0], f[1]);
    char path[8400], what[8500];
    snprintf(path, sizeof path, "%s/%s/%s", root, f[0], f[1]);
    snprintf(what, sizeof what, "%s:%d: image", meta, ln);
    struct stat st;
    if (stat(path, &st) != 0) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "%s:%d: image '%s' does not exist", meta, ln, path);
    if (S_ISREG(st.st_mode) && st.st_size == 0) return ++*skipped, MEGA_OK;
    uint8_t *px;
    int w, h;
    MEGA_TRY(mega_png_read_gray(path, what, PF_MAX_SIDE, &px, &w, &h));
    mega_dataset *d = b->d;
    mega_status r = MEGA_OK;
    if (d->rows && (w != d->cols || h != d->rows))
        r = mega__error(MEGA_ERR_FORMAT, "%s:%d: image '%s' is %dx%d, the first image was %dx%d", meta, ln, path, w, h, d->cols, d->rows);
    int li = 0;
    if (r == MEGA_OK) d->rows = h, d->cols = w, r = mega__builder_grow(b, 0);
    if (r == MEGA_OK) r = mega__builder_label(b, f[3], strlen(f[3]), ln, &li);
    if (r == MEGA_OK) r = mega__builder_put_bytes(b, (const char *)px, (size_t)w * h, &b->off[d->n], &d->len[d->n]);
    if (r == MEGA_OK) d->line[d->n] = d->n + 1, b->ex_lab[d->n] = li, d->n++;
    free(px);
    return r;
}

/* the lines of metadata file k */
static mega_status pf_meta(mega__builder *b, const char *root, int64_t k, int *skipped) {
    char meta[4400];
    snprintf(meta, sizeof meta, "%s/metadata/%lld.npy", root, (long long)k);
    mega_bytes m;
    MEGA_TRY(mega__data_load(meta, "pathfinder metadata", PF_MAX_META, 1, &m));
    if (m.n >= PF_MAX_META) {
        mega_bytes_free(&m);
        MEGA_FAIL(MEGA_ERR_FORMAT, "pathfinder metadata file '%s' is larger than %llu bytes", meta, (unsigned long long)PF_MAX_META);
    }
    mega_status st = MEGA_OK;
    char *s = (char *)m.data, *end = s + m.n;
    for (int ln = 1; s < end && st == MEGA_OK; ln++) {
        if (b->o->max_examples > 0 && b->d->n >= b->o->max_examples) break;
        char *e = memchr(s, '\n', (size_t)(end - s));
        if (!e) e = end;
        *e = 0;
        if (memchr(s, 0, (size_t)(e - s))) st = mega__error(MEGA_ERR_FORMAT, "%s:%d: a NUL byte (not a text metadata file)", meta, ln);
        else if (*s && strspn(s, " \t\r") < strlen(s)) st = pf_line(b, root, meta, ln, s, skipped);
        s = e + 1;
    }
    mega_bytes_free(&m);
    return st;
}

mega_status mega_dataset_load_pathfinder(const char *dir, const mega_data_opts *o, mega_dataset *d) {
    mega_data_opts def;
    if (!o) memset(&def, 0, sizeof def), o = &def;
    memset(d, 0, sizeof *d);
    MEGA_TRY(mega__data_given(dir, "pathfinder data"));
    double mean = o->mean, std = o->std;
    if (mean == 0 && std == 0) mean = 0.5, std = 0.5;
    if (o->real && !(std > 0 && isfinite(std) && isfinite(mean)))
        MEGA_FAIL(MEGA_ERR_INVALID, "pixel normalisation: std must be > 0 (got mean %g, std %g)", mean, std);
    if (!mega_png_available())
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "pathfinder data '%s': this build has no PNG support (install libpng-dev and rebuild)", dir);
    char root[4200], mdir[4400];
    if (strlen(dir) > 4000 || !is_dir(dir)) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "pathfinder data: '%s' is not a directory", dir);
    if (!pf_root(dir, root, sizeof root))
        MEGA_FAIL(MEGA_ERR_FORMAT, "pathfinder data: '%s' has no metadata/ directory (nor curv_*/metadata/)", dir);
    snprintf(mdir, sizeof mdir, "%s/metadata", root);
    int64_t *ks;
    int nk, skipped = 0;
    MEGA_TRY(pf_list(mdir, &ks, &nk));
    mega__builder b;
    memset(&b, 0, sizeof b);
    mega_status st = mega__builder_init(&b, root, o, d);
    if (st == MEGA_OK) {
        d->vocab = mega_vocab_pixels(o->real, mean, std);
        b.line_note = " (line = image number)";
    }
    for (int i = 0; i < nk && st == MEGA_OK; i++) st = pf_meta(&b, root, ks[i], &skipped);
    if (st == MEGA_OK && d->n == 0) st = mega__error(MEGA_ERR_FORMAT, "pathfinder data '%s': no images listed", root);
    if (st == MEGA_OK) st = mega__builder_finish(&b, NULL);
    if (st == MEGA_OK) d->png_dir = 1;
    free(ks);
    mega__builder_free(&b);
    if (st != MEGA_OK) mega_dataset_free(d);
    return st;
}
