/* Files and text data: whole-file reads with clear messages, the FNV-1a fingerprint, the
 * data-order sampler and the language model's random byte windows. */
#include "data/data.h"

#include "core/rng.h"

#include <errno.h>
#include <sys/stat.h>

mega_status mega__data_given(const char *path, const char *what) {
    if (!path || !*path) MEGA_FAIL(MEGA_ERR_INVALID, "%s: no file given", what);
    return MEGA_OK;
}

mega_status mega__data_open(const char *path, const char *what, FILE **f) {
    struct stat st;
    *f = NULL;
    if (stat(path, &st) != 0)
        MEGA_FAIL(errno == ENOENT ? MEGA_ERR_NOT_FOUND : MEGA_ERR_IO, "%s file '%s': %s", what, path, strerror(errno));
    if (S_ISDIR(st.st_mode)) MEGA_FAIL(MEGA_ERR_IO, "%s file '%s' is a directory", what, path);
    *f = fopen(path, "rb");
    if (!*f) MEGA_FAIL(MEGA_ERR_IO, "%s file '%s': %s", what, path, strerror(errno));
    return MEGA_OK;
}

mega_status mega__data_read_all(const char *path, const char *what, uint8_t **buf, size_t *n) {
    *buf = NULL, *n = 0;
    FILE *f;
    MEGA_TRY(mega__data_open(path, what, &f));
    /* the size from fstat is a hint only (the file may grow or shrink while we read) */
    struct stat st;
    size_t cap = 1 << 16, len = 0;
    if (fstat(fileno(f), &st) == 0 && st.st_size > 0) cap = (size_t)st.st_size + 1;
    uint8_t *b = malloc(cap + 1);
    for (;;) {
        if (!b) {
            fclose(f);
            MEGA_FAIL(MEGA_ERR_OOM, "%s file '%s': out of memory", what, path);
        }
        len += fread(b + len, 1, cap - len, f);
        if (len < cap) break;
        uint8_t *nb = cap < ((size_t)1 << 40) ? realloc(b, cap * 2 + 1) : NULL;
        if (!nb) free(b);
        b = nb, cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        MEGA_FAIL(MEGA_ERR_IO, "%s file '%s': read error", what, path);
    }
    b[len] = 0;
    *buf = b, *n = len;
    return MEGA_OK;
}

mega_status mega_read_file(const char *path, const char *what, mega_bytes *out) {
    out->data = NULL, out->n = 0;
    MEGA_TRY(mega__data_read_all(path, what, &out->data, &out->n));
    if (out->n == 0) {
        mega_bytes_free(out);
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s' is empty", what, path);
    }
    return MEGA_OK;
}

void mega_bytes_free(mega_bytes *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL, b->n = 0;
}

uint64_t mega_fnv1a64(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = MEGA__FNV_BASIS;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * MEGA__FNV_PRIME;
    return h;
}

uint64_t mega_data_rng_seed(uint64_t seed) { return seed * 0xD1B54A32D192ED03ull + 77; }

/* the library's splitmix64 stream (core/rng.h) with its state in the caller's uint64 */
uint64_t mega_data_rng_below(uint64_t *state, uint64_t n) {
    mega_rng r = {*state};
    uint64_t x = mega_rng_below(&r, n);
    *state = r.s;
    return x;
}

mega_status mega_text_windows(const uint8_t *text, size_t n, int B, int T, uint64_t *state, int32_t *tokens,
                              int32_t *targets) {
    if (B < 1 || T < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_text_windows: bad shape B=%d T=%d", B, T);
    if (n < (size_t)T + 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_text_windows: %zu bytes of text, fewer than T + 1 = %d", n, T + 1);
    for (int b = 0; b < B; b++) {
        size_t s0 = (size_t)mega_data_rng_below(state, (uint64_t)(n - (size_t)T));
        int32_t *tk = tokens + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int i = 0; i < T; i++) tk[i] = text[s0 + (size_t)i], tg[i] = text[s0 + (size_t)i + 1];
    }
    return MEGA_OK;
}
