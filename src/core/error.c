/* Status strings, the thread-local last-error message, logging hook, aligned allocation. */
#include "core/internal.h"

#include <stdarg.h>

/* long enough for the data loaders' messages (a path, a line number, an excerpt and a class list) */
static _Thread_local char g_err[1024];

const char *mega_status_str(mega_status s) {
    switch (s) {
    case MEGA_OK: return "ok";
    case MEGA_ERR_INVALID: return "invalid argument";
    case MEGA_ERR_IO: return "I/O error";
    case MEGA_ERR_FORMAT: return "malformed file";
    case MEGA_ERR_SHAPE: return "shape mismatch";
    case MEGA_ERR_OOM: return "out of memory";
    case MEGA_ERR_NOT_FOUND: return "not found";
    case MEGA_ERR_UNSUPPORTED: return "unsupported";
    case MEGA_ERR_NUMERIC: return "non-finite values";
    }
    return "unknown status";
}

const char *mega_last_error(void) { return g_err; }
void mega_clear_error(void) { g_err[0] = 0; }

mega_status mega__error(mega_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return st;
}

mega_status mega__error_prefix(mega_status st, const char *prefix) {
    char tmp[sizeof g_err];
    memcpy(tmp, g_err, sizeof tmp);
    size_t n = strlen(prefix);
    if (n > sizeof g_err / 2) n = sizeof g_err / 2;
    memcpy(g_err, prefix, n);
    g_err[n] = ':', g_err[n + 1] = ' ';
    size_t rest = sizeof g_err - n - 3;
    size_t m = strnlen(tmp, rest);
    memcpy(g_err + n + 2, tmp, m);
    g_err[n + 2 + m] = 0;
    return st;
}

void mega__assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "mega: internal assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

static mega_log_fn g_log_fn;
static void *g_log_user;
void mega_set_log(mega_log_fn fn, void *user) {
    g_log_fn = fn;
    g_log_user = user;
}
void mega__log(int level, const char *fmt, ...) {
    if (!g_log_fn) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_log_fn(level, buf, g_log_user);
}

void *mega__calloc(size_t n, size_t size) {
    if (n == 0 || size == 0) n = size = 1;
    if (size && n > (SIZE_MAX - 64) / size) return NULL;
    size_t bytes = n * size;
    bytes = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}
void mega__free(void *p) { free(p); }

void *mega__grow(void *arr, int *cap, int n, size_t elem, int first) {
    if (arr && n < *cap) return arr;
    const int nc = *cap ? *cap * 2 : first;
    void *p = realloc(arr, (size_t)nc * elem);
    if (p) *cap = nc;
    return p;
}
