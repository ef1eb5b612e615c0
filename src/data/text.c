/* Files and text data: whole-file reads with clear messages, the FNV-1a fingerprint, the
 * data-order sampler and the language model's random byte windows. */
#include "data/data.h"

#include "core/limits.h"
#include "core/rng.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

mega_status mega__data_given(const char *path, const char *what) {
    if (!path || !*path) MEGA_FAIL(MEGA_ERR_INVALID, "%s: no file given", what);
    return MEGA_OK;
}

/* "<what> file 'x' is 60.0 GiB, more than the 7.50 GiB of memory available" */
static mega_status too_large(const char *path, const char *what, uint64_t n, uint64_t cap) {
    char a[32], b[32];
    MEGA_FAIL(MEGA_ERR_IO, "%s file '%s' is %s, more than the %s of memory available to read it", what, path,
              mega_fmt_bytes(a, sizeof a, n), mega_fmt_bytes(b, sizeof b, cap));
}

/* Only regular files are opened: the open does not block (a FIFO without a writer fails at once,
 * as does /dev/zero), and fstat says what the path is; what will be read (the file, or its first
 * max bytes when max > 0) must fit the memory available. 0 with *fd and *size, or the error. */
static mega_status data_open_fd(const char *path, const char *what, uint64_t max, int *fd, uint64_t *size) {
    struct stat st;
    int e = mega__open_nonblock(path, fd, &st);
    if (e) MEGA_FAIL(e == ENOENT ? MEGA_ERR_NOT_FOUND : MEGA_ERR_IO, "%s file '%s': %s", what, path, strerror(e));
    if (!S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        if (S_ISDIR(st.st_mode)) MEGA_FAIL(MEGA_ERR_IO, "%s file '%s' is a directory", what, path);
        MEGA_FAIL(MEGA_ERR_IO, "%s file '%s' is not a regular file (%s)", what, path, mega__file_kind(st.st_mode));
    }
    *size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    const uint64_t want = max ? MEGA_MIN(*size, max) : *size, cap = mega__read_cap();
    if (want > cap || want >= (uint64_t)SIZE_MAX / 2) {
        close(*fd);
        *fd = -1;
        return too_large(path, what, want, cap);
    }
    return MEGA_OK;
}

mega_status mega__data_open(const char *path, const char *what, FILE **f) {
    *f = NULL;
    int fd;
    uint64_t size = 0;
    MEGA_TRY(data_open_fd(path, what, 0, &fd, &size));
    *f = fdopen(fd, "rb");
    if (!*f) {
        int e = errno;
        close(fd);
        MEGA_FAIL(MEGA_ERR_OOM, "%s file '%s': %s", what, path, strerror(e));
    }
    return MEGA_OK;
}

/* read (at most max bytes, 0 = all) from fd, opened by data_open_fd with its size, and close it */
static mega_status data_read_fd(int fd, uint64_t size, const char *path, const char *what, uint64_t max, uint8_t **buf,
                                size_t *n) {
    *buf = NULL, *n = 0;
    /* the size from fstat is a hint only (the file may grow or shrink while we read); the cap
     * bounds what is read whatever happens */
    const uint64_t cap = mega__read_cap(), want = max ? MEGA_MIN(size, max) : size;
    /* never read more than `limit` bytes: max, or one past the cap (which proves the file too large) */
    const uint64_t limit = max ? max : cap + 1;
    size_t cap_b = (size_t)MEGA_MIN(want + 1, limit), len = 0; /* size + 1: EOF is seen without growing */
    if (cap_b < 1) cap_b = 1;
    uint8_t *b = malloc(cap_b + 1);
    mega_status st = MEGA_OK;
    for (;;) {
        if (!b) {
            st = mega__error(MEGA_ERR_OOM, "%s file '%s': out of memory", what, path);
            break;
        }
        ssize_t k = len < cap_b ? read(fd, b + len, cap_b - len) : 0;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            st = mega__error(MEGA_ERR_IO, "%s file '%s': read error: %s", what, path, strerror(errno));
            break;
        }
        if (k == 0 && len < cap_b) break; /* end of file */
        len += (size_t)k;
        if (len < cap_b) continue;
        if (len >= limit) {
            if (!max) st = too_large(path, what, len, cap);
            break; /* max: the bounded read is complete */
        }
        size_t nc = (size_t)MEGA_MIN((uint64_t)cap_b * 2, limit);
        uint8_t *nb = realloc(b, nc + 1);
        if (!nb) free(b);
        b = nb, cap_b = nc;
    }
    close(fd);
    if (st) {
        free(b);
        return st;
    }
    b[len] = 0;
    *buf = b, *n = len;
    return MEGA_OK;
}

mega_status mega__data_read_all(const char *path, const char *what, uint8_t **buf, size_t *n) {
    *buf = NULL, *n = 0;
    int fd;
    uint64_t size = 0;
    MEGA_TRY(data_open_fd(path, what, 0, &fd, &size));
    return data_read_fd(fd, size, path, what, 0, buf, n);
}

/* Map the whole regular file fd of `size` bytes, with a NUL after it: an anonymous zeroed region
 * of size + 1 bytes rounded up to pages is reserved first and the file mapped over its start
 * (MAP_FIXED), so the byte after the file is either the zero fill of the file's last page (POSIX:
 * the rest of a partial page reads as zeros) or the first byte of the anonymous page after it.
 * Private and writable: writes are copy-on-write. 0 when mapped, -1 (nothing mapped) otherwise. */
static int data_map(int fd, uint64_t size, mega_bytes *out) {
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || size >= (uint64_t)SIZE_MAX / 2) return -1;
    const size_t total = (size_t)((size + 1 + (uint64_t)pg - 1) / (uint64_t)pg * (uint64_t)pg);
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return -1;
    void *f = mmap(base, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (f == MAP_FAILED) {
        munmap(base, total);
        return -1;
    }
    out->data = base, out->n = (size_t)size, out->mapped = total;
    return 0;
}

mega_status mega__data_load(const char *path, const char *what, uint64_t max, int allow_empty, mega_bytes *out) {
    out->data = NULL, out->n = 0, out->mapped = 0;
    int fd;
    uint64_t size = 0;
    MEGA_TRY(data_open_fd(path, what, max, &fd, &size));
    /* the whole of a large file: mapped (see mega_data.h); small files and prefixes are read,
     * from the same descriptor */
    if ((max == 0 || max >= size) && size >= MEGA_MAP_MIN && data_map(fd, size, out) == 0) {
        close(fd);
        return MEGA_OK;
    }
    MEGA_TRY(data_read_fd(fd, size, path, what, max, &out->data, &out->n));
    if (out->n == 0 && !allow_empty) {
        mega_bytes_free(out);
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s file '%s' is empty", what, path);
    }
    return MEGA_OK;
}

mega_status mega_read_file_max(const char *path, const char *what, uint64_t max, mega_bytes *out) {
    return mega__data_load(path, what, max, 0, out);
}

mega_status mega_read_file(const char *path, const char *what, mega_bytes *out) {
    return mega_read_file_max(path, what, 0, out);
}

void mega_bytes_free(mega_bytes *b) {
    if (!b) return;
    if (b->mapped)
        munmap(b->data, b->mapped);
    else
        free(b->data);
    b->data = NULL, b->n = 0, b->mapped = 0;
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

mega_status mega_id_windows(const int32_t *ids, size_t n, int B, int T, uint64_t *state, int32_t *tokens,
                            int32_t *targets) {
    if (B < 1 || T < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_id_windows: bad shape B=%d T=%d", B, T);
    if (n < (size_t)T + 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_id_windows: %zu tokens, fewer than T + 1 = %d", n, T + 1);
    for (int b = 0; b < B; b++) { /* the draws of mega_text_windows */
        size_t s0 = (size_t)mega_data_rng_below(state, (uint64_t)(n - (size_t)T));
        memcpy(tokens + (size_t)b * T, ids + s0, (size_t)T * sizeof *ids);
        memcpy(targets + (size_t)b * T, ids + s0 + 1, (size_t)T * sizeof *ids);
    }
    return MEGA_OK;
}

/* a uniform double in [0, 1) from 53 bits of the stream */
static double rng_u01(uint64_t *state) { return (double)mega_data_rng_below(state, 1ull << 53) / 9007199254740992.0; }

int mega_mlm_mask(int32_t *tokens, int32_t *targets, int n, double p, int32_t mask_id, int32_t n_random, uint64_t *state) {
    if (n <= 0) return 0;
    int want = (int)(p * n + rng_u01(state)); /* fairseq: int(mask_prob * sz + np.random.rand()) */
    if (want > n) want = n;
    const int chosen = want;
    for (int i = 0; i < n; i++) {
        /* selection sampling (Knuth, TAOCP 3.4.2 Algorithm S): exactly `want` of the n, uniformly */
        const int pick = want > 0 && mega_data_rng_below(state, (uint64_t)(n - i)) < (uint64_t)want;
        targets[i] = pick ? tokens[i] : -1;
        if (!pick) continue;
        want--;
        const double r = rng_u01(state);
        if (r < 0.8) tokens[i] = mask_id;
        else if (r < 0.9) tokens[i] = (int32_t)mega_data_rng_below(state, (uint64_t)(n_random > 0 ? n_random : 1));
    }
    return chosen;
}
