#include "testlib.h"
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tl_passed, tl_failed;
int tl_verbose;

void tl_check(int ok, const char *fmt, ...) {
    va_list ap;
    if (ok) {
        tl_passed++;
        if (!tl_verbose) return;
        printf("PASS ");
    } else {
        tl_failed++;
        printf("FAIL ");
    }
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

int tl_finish(void) {
    printf("%d passed, %d failed\n", tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}

tl_err tl_compare(const double *got, const double *ref, size_t n) {
    tl_err e = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (!(d <= e.max_abs)) { e.max_abs = d; e.argmax = i; }  /* NaN propagates */
        if (fabs(ref[i]) > e.ref_max) e.ref_max = fabs(ref[i]);
    }
    e.rel = e.ref_max > 0 ? e.max_abs / e.ref_max : e.max_abs;
    return e;
}

static unsigned long long tl_next(unsigned long long *s) {
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
double tl_rand01(unsigned long long *s) { return (tl_next(s) >> 11) * (1.0 / 9007199254740992.0); }
double tl_randn(unsigned long long *s) {
    double u1 = tl_rand01(s), u2 = tl_rand01(s);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

unsigned char *tl_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n > 0 ? n : 0] = 0;
    if (len) *len = (size_t)(n > 0 ? n : 0);
    return b;
}

int tl_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const size_t w = n ? fwrite(p, 1, n, f) : 0;
    const int rc = fclose(f);
    return w == n && rc == 0 ? 0 : -1;
}

int tl_mkdtemp(char *buf, size_t cap, const char *prefix) {
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, cap, "%s/%sXXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    if (mkdtemp(buf)) return 0;
    tl_check(0, "mkdtemp %s: %s", buf, strerror(errno));
    return -1;
}

void tl_rm_rf(const char *p) {
    struct stat sb;
    if (lstat(p, &sb) != 0) return;
    if (!S_ISDIR(sb.st_mode)) {
        unlink(p);
        return;
    }
    DIR *d = opendir(p);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", p, e->d_name);
            tl_rm_rf(sub);
        }
        closedir(d);
    }
    rmdir(p);
}

int tl_count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (part ? strstr(e->d_name, part) != NULL : strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

const char *tl_path(const char *dir, const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}
