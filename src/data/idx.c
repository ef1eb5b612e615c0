/* The IDX loader (MNIST-style images + labels files): validated headers, every size checked
 * against the file before anything is allocated from it. */
#include "data/data.h"

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* the magic number of a file that is not the expected one: what it probably is instead */
static const char *magic_hint(uint32_t magic) {
    if (magic == 0x00000801u || magic == 0x00000803u) return " (are --images and --labels swapped?)";
    if ((magic >> 16) == 0 && ((magic >> 8) & 0xff) >= 0x08)
        return " (an IDX file of another element type or rank: only unsigned bytes are supported)";
    return " (not an IDX file)";
}

/* check the header of an IDX file of unsigned bytes with ndim dimensions (-> dims) and that its
 * size is exactly header + data */
static mega_status idx_header(const char *what, const char *path, const uint8_t *b, size_t n, uint32_t want, int ndim,
                              uint64_t *dims) {
    if (n < 4) MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s' is truncated: %zu bytes, shorter than the 4-byte IDX magic", what, path, n);
    uint32_t magic = be32(b);
    if (magic != want)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s': magic 0x%08x, expected 0x%08x (IDX unsigned bytes, %d dimension%s)%s", what, path,
                  magic, want, ndim, ndim > 1 ? "s" : "", magic_hint(magic));
    size_t hl = 4 + 4 * (size_t)ndim;
    if (n < hl)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s' is truncated: %zu bytes, shorter than its %zu-byte header", what, path, n, hl);
    uint64_t tot = 1, prod = 1;
    for (int i = 0; i < ndim; i++) {
        dims[i] = be32(b + 4 + 4 * i);
        tot *= dims[i] ? dims[i] : 1;
        if (tot > ((uint64_t)1 << 40)) MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s': dimensions too large", what, path);
    }
    for (int i = 0; i < ndim; i++) prod *= dims[i];
    uint64_t need = hl + prod;
    if ((uint64_t)n < need) {
        if (ndim == 3)
            MEGA_FAIL(MEGA_ERR_FORMAT,
                      "%s file '%s' is truncated: the header announces %llu images of %llux%llu (%llu bytes) "
                      "but the file has %zu bytes",
                      what, path, (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)dims[2],
                      (unsigned long long)need, n);
        MEGA_FAIL(MEGA_ERR_FORMAT,
                  "%s file '%s' is truncated: the header announces %llu labels (%llu bytes) but the file has %zu bytes", what, path,
                  (unsigned long long)dims[0], (unsigned long long)need, n);
    }
    if ((uint64_t)n > need)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s': %llu bytes of trailing data after the %llu announced by the header", what, path,
                  (unsigned long long)(n - need), (unsigned long long)need);
    return MEGA_OK;
}

/* read and check one IDX file (mapped when large, as the text data is); a gzip-compressed file
 * (the published MNIST / Fashion-MNIST files, e.g. Debian's dataset-fashion-mnist) is
 * decompressed whole; *f is freed on failure */
static mega_status idx_read(const char *what, const char *path, uint32_t magic, int ndim, uint64_t *dims, mega_bytes *f) {
    MEGA_TRY(mega__data_given(path, what));
    MEGA_TRY(mega__data_load(path, what, 0, 1, f));
    if (f->n >= 2 && f->data[0] == 0x1f && f->data[1] == 0x8b) {
        mega_bytes_free(f);
        MEGA_TRY(mega_read_gzip(path, what, f));
    }
    mega_status st = idx_header(what, path, f->data, f->n, magic, ndim, dims);
    if (st != MEGA_OK) mega_bytes_free(f);
    return st;
}

/* the two files describe the same images, and an image fits an int-indexed sequence */
static mega_status idx_agree(const char *images, const char *labels, const uint64_t *idim, const uint64_t *ldim) {
    if (idim[0] != ldim[0])
        MEGA_FAIL(MEGA_ERR_FORMAT, "images file '%s' has %llu images but labels file '%s' has %llu labels", images,
                  (unsigned long long)idim[0], labels, (unsigned long long)ldim[0]);
    if (idim[0] == 0) MEGA_FAIL(MEGA_ERR_FORMAT, "images file '%s': no images", images);
    if (idim[1] == 0 || idim[2] == 0 || idim[1] * idim[2] > 0x7fffffffu)
        MEGA_FAIL(MEGA_ERR_FORMAT, "images file '%s': bad image size %llux%llu", images, (unsigned long long)idim[1],
                  (unsigned long long)idim[2]);
    if (idim[0] > 0x3fffffff) MEGA_FAIL(MEGA_ERR_FORMAT, "images file '%s': too many images", images);
    return MEGA_OK;
}

/* the examples: image i's pixels (row-major) with the decimal string of label byte i */
static mega_status idx_fill(mega__builder *b, const uint8_t *ib, const uint8_t *lb, const uint64_t *idim) {
    mega_dataset *d = b->d;
    const mega_data_opts *o = b->o;
    d->rows = (int)idim[1], d->cols = (int)idim[2];
    int N = (int)idim[0];
    if (o->max_examples > 0 && N > o->max_examples) N = o->max_examples;
    size_t px = (size_t)idim[1] * (size_t)idim[2];
    size_t keep = o->max_len > 0 && px > (size_t)o->max_len ? (size_t)o->max_len : px;
    MEGA_TRY(mega__builder_reserve(b, keep * (size_t)N));
    for (int i = 0; i < N; i++) {
        MEGA_TRY(mega__builder_grow(b, 0));
        char lab[16];
        int li;
        snprintf(lab, sizeof lab, "%d", lb[8 + i]);
        MEGA_TRY(mega__builder_label(b, lab, strlen(lab), i + 1, &li));
        MEGA_TRY(mega__builder_put_bytes(b, (const char *)ib + 16 + (size_t)i * px, px, &b->off[d->n], &d->len[d->n]));
        d->line[d->n] = i + 1, b->ex_lab[d->n] = li;
        d->n++;
    }
    return mega__builder_finish(b, NULL);
}

mega_status mega_dataset_load_idx(const char *images, const char *labels, const mega_data_opts *o, mega_dataset *d) {
    mega_data_opts def;
    if (!o) memset(&def, 0, sizeof def), o = &def;
    memset(d, 0, sizeof *d);
    double mean = o->mean, std = o->std;
    if (mean == 0 && std == 0) mean = 0.5, std = 0.5;
    if (o->real && !(std > 0 && isfinite(std) && isfinite(mean)))
        MEGA_FAIL(MEGA_ERR_INVALID, "pixel normalisation: std must be > 0 (got mean %g, std %g)", mean, std);
    mega_bytes ib = {0}, lb = {0};
    uint64_t idim[3] = {0, 0, 0}, ldim[1] = {0};
    MEGA_TRY(idx_read("images", images, 0x00000803u, 3, idim, &ib));
    mega_status st = idx_read("labels", labels, 0x00000801u, 1, ldim, &lb);
    if (st == MEGA_OK) st = idx_agree(images, labels, idim, ldim);
    mega__builder b;
    memset(&b, 0, sizeof b);
    if (st == MEGA_OK) st = mega__builder_init(&b, images, o, d);
    if (st == MEGA_OK) {
        d->vocab = mega_vocab_pixels(o->real, mean, std);
        b.line_note = " (line = image number)"; /* in an unknown-label message */
        st = idx_fill(&b, ib.data, lb.data, idim);
    }
    mega_bytes_free(&ib), mega_bytes_free(&lb);
    mega__builder_free(&b);
    if (st != MEGA_OK) mega_dataset_free(d);
    return st;
}
