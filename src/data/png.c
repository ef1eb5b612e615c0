/* PNG images through libpng (optional: a build without it has the same functions, which fail
 * with MEGA_ERR_UNSUPPORTED naming what is missing). Only 8-bit grayscale pixels leave or enter
 * the library: a grayscale PNG of 1, 2, 4 or 16 bits is converted to 8 bits (16-bit samples keep
 * their high byte); a colour or palette PNG is refused, as a Pathfinder image is one channel
 * (the Long Range Arena decodes it with one channel). Files are hostile: the header is read and
 * its dimensions checked against the caller's limit before any pixel buffer is allocated, and a
 * truncated or corrupt stream ends in libpng's error handler, which returns here. */
#include "data/data.h"

#include <setjmp.h>

#ifdef MEGA_USE_PNG
#include <png.h>

int mega_png_available(void) { return 1; }

/* libpng reports errors through a callback that must not return: it longjmps back */
typedef struct {
    jmp_buf jb;
    char msg[160];
    const uint8_t *src;
    size_t n, at;
    uint8_t *out;
    size_t on, ocap;
    int oom;
} png_io;

static void on_error(png_structp p, png_const_charp msg) {
    png_io *io = png_get_error_ptr(p);
    snprintf(io->msg, sizeof io->msg, "%s", msg ? msg : "error");
    longjmp(io->jb, 1);
}
static void on_warning(png_structp p, png_const_charp msg) { (void)p, (void)msg; }

static void on_read(png_structp p, png_bytep dst, size_t n) {
    png_io *io = png_get_io_ptr(p);
    if (n > io->n - io->at) png_error(p, "truncated file");
    memcpy(dst, io->src + io->at, n);
    io->at += n;
}

static void on_write(png_structp p, png_bytep src, size_t n) {
    png_io *io = png_get_io_ptr(p);
    if (n > io->ocap - io->on) {
        size_t cap = io->ocap ? io->ocap : 4096;
        while (cap - io->on < n) cap *= 2;
        uint8_t *o = realloc(io->out, cap);
        if (!o) io->oom = 1, png_error(p, "out of memory");
        io->out = o, io->ocap = cap;
    }
    memcpy(io->out + io->on, src, n);
    io->on += n;
}
static void on_flush(png_structp p) { (void)p; }

static const char *colour_name(int ct) {
    switch (ct) {
    case PNG_COLOR_TYPE_RGB: return "RGB";
    case PNG_COLOR_TYPE_RGB_ALPHA: return "RGBA";
    case PNG_COLOR_TYPE_PALETTE: return "palette";
    case PNG_COLOR_TYPE_GRAY_ALPHA: return "grayscale with alpha";
    default: return "unknown";
    }
}

/* the decoding proper; pixels malloc'd into *px once the header has been checked */
static mega_status png_decode(png_structp p, png_infop info, png_io *io, const char *what, int max_side, uint8_t **px,
                              int *w, int *h) {
    /* volatile: assigned between setjmp and a longjmp that returns here */
    uint8_t *volatile buf = NULL;
    png_bytep *volatile rows = NULL;
    if (setjmp(io->jb)) {
        free(buf), free(rows);
        MEGA_FAIL(io->oom ? MEGA_ERR_OOM : MEGA_ERR_FORMAT, "%s: not a readable PNG (%s)", what, io->msg);
    }
    png_set_read_fn(p, io, on_read);
    png_set_user_limits(p, 0x7fffffff, 0x7fffffff);
    png_read_info(p, info);
    png_uint_32 W = png_get_image_width(p, info), H = png_get_image_height(p, info);
    int depth = png_get_bit_depth(p, info), ct = png_get_color_type(p, info);
    if (ct != PNG_COLOR_TYPE_GRAY)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: a %s PNG, expected 8-bit grayscale (one channel)", what, colour_name(ct));
    if (png_get_interlace_type(p, info) != PNG_INTERLACE_NONE)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: an interlaced PNG (not supported; re-save it without interlacing)", what);
    if (W == 0 || H == 0 || W > (png_uint_32)max_side || H > (png_uint_32)max_side)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: a %lux%lu PNG, larger than the %dx%d allowed", what, (unsigned long)W, (unsigned long)H,
                  max_side, max_side);
    if (depth < 8) png_set_expand_gray_1_2_4_to_8(p);
    if (depth == 16) png_set_strip_16(p);
    png_read_update_info(p, info);
    if (png_get_rowbytes(p, info) != W) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: unexpected PNG row size", what);
    buf = malloc((size_t)W * H);
    rows = malloc(sizeof(png_bytep) * H);
    if (!buf || !rows) {
        free(buf), free(rows);
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory for a %lux%lu image", what, (unsigned long)W, (unsigned long)H);
    }
    for (png_uint_32 r = 0; r < H; r++) rows[r] = buf + (size_t)r * W;
    png_read_image(p, rows);
    png_read_end(p, NULL);
    free(rows);
    *px = buf, *w = (int)W, *h = (int)H;
    return MEGA_OK;
}

mega_status mega_png_decode_gray(const uint8_t *data, size_t n, const char *what, int max_side, uint8_t **px, int *w, int *h) {
    *px = NULL, *w = *h = 0;
    if (!what) what = "PNG";
    if (max_side < 1) MEGA_FAIL(MEGA_ERR_INVALID, "%s: max_side must be >= 1", what);
    if (n < 8 || png_sig_cmp(data, 0, 8)) MEGA_FAIL(MEGA_ERR_FORMAT, "%s: not a PNG file (no PNG signature)", what);
    png_io io;
    memset(&io, 0, sizeof io);
    io.src = data, io.n = n;
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        MEGA_FAIL(MEGA_ERR_OOM, "%s: out of memory", what);
    }
    mega_status st = png_decode(p, info, &io, what, max_side, px, w, h);
    png_destroy_read_struct(&p, &info, NULL);
    return st;
}

static mega_status png_encode(png_structp p, png_infop info, png_io *io, const uint8_t *px, int w, int h) {
    if (setjmp(io->jb)) MEGA_FAIL(io->oom ? MEGA_ERR_OOM : MEGA_ERR_IO, "PNG encoding failed (%s)", io->msg);
    png_set_write_fn(p, io, on_write, on_flush);
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    for (int r = 0; r < h; r++) png_write_row(p, px + (size_t)r * w);
    png_write_end(p, NULL);
    return MEGA_OK;
}

mega_status mega_png_encode_gray(const uint8_t *px, int w, int h, mega_bytes *out) {
    memset(out, 0, sizeof *out);
    if (!px || w < 1 || h < 1 || w > (1 << 20) || h > (1 << 20)) MEGA_FAIL(MEGA_ERR_INVALID, "PNG: bad image size %dx%d", w, h);
    png_io io;
    memset(&io, 0, sizeof io);
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_write_struct(&p, NULL);
        MEGA_FAIL(MEGA_ERR_OOM, "PNG: out of memory");
    }
    mega_status st = png_encode(p, info, &io, px, w, h);
    png_destroy_write_struct(&p, &info);
    if (st != MEGA_OK) {
        free(io.out);
        return st;
    }
    out->data = io.out, out->n = io.on;
    return MEGA_OK;
}

#else /* no libpng */

int mega_png_available(void) { return 0; }

mega_status mega_png_decode_gray(const uint8_t *data, size_t n, const char *what, int max_side, uint8_t **px, int *w, int *h) {
    (void)data, (void)n, (void)max_side;
    *px = NULL, *w = *h = 0;
    MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s: this build has no PNG support (install libpng-dev and rebuild)", what ? what : "PNG");
}

mega_status mega_png_encode_gray(const uint8_t *px, int w, int h, mega_bytes *out) {
    (void)px, (void)w, (void)h;
    memset(out, 0, sizeof *out);
    MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "this build has no PNG support (install libpng-dev and rebuild)");
}
#endif

mega_status mega_png_read_gray(const char *path, const char *what, int max_side, uint8_t **px, int *w, int *h) {
    *px = NULL, *w = *h = 0;
    if (!mega_png_available())
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s file '%s': this build has no PNG support (install libpng-dev and rebuild)", what,
                  path);
    mega_bytes b;
    /* a PNG of max_side^2 pixels compresses to far less than 64 bytes per pixel plus headers */
    uint64_t cap = (uint64_t)max_side * (uint64_t)max_side * 64 + 65536;
    MEGA_TRY(mega__data_load(path, what, 0, 0, &b));
    if (b.n > cap) {
        size_t n = b.n;
        mega_bytes_free(&b);
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s': %zu bytes, too large for an image of at most %dx%d", what, path, n, max_side,
                  max_side);
    }
    char name[4200];
    snprintf(name, sizeof name, "%s file '%s'", what, path);
    mega_status st = mega_png_decode_gray(b.data, b.n, name, max_side, px, w, h);
    mega_bytes_free(&b);
    return st;
}
