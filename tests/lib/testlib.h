/* Minimal test harness: every check is counted; a binary ends with "N passed, M failed" and
 * exits non-zero when anything failed. tests/run.sh sums the binaries' lines. */
#ifndef MEGA_TESTLIB_H
#define MEGA_TESTLIB_H
#include "mega.h"
#include <stdio.h>

extern int tl_passed, tl_failed;
extern int tl_verbose;

/* record one named check */
void tl_check(int ok, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
#define TL_CHECK(cond, ...) tl_check(!!(cond), __VA_ARGS__)
/* print the summary line and return the process exit code */
int tl_finish(void);

/* max |a-b| and max |b| over n doubles */
typedef struct { double max_abs; double ref_max; double rel; size_t argmax; } tl_err;
tl_err tl_compare(const double *got, const double *ref, size_t n);
/* simple deterministic RNG for tests */
double tl_randn(unsigned long long *state);
double tl_rand01(unsigned long long *state);

/* files: a whole file, NUL-terminated (NULL on failure; *len its size, may be NULL); write n
 * bytes (0 on success) */
unsigned char *tl_read_file(const char *path, size_t *len);
int tl_write_file(const char *path, const void *p, size_t n);
/* a new directory $TMPDIR/<prefix>XXXXXX (or under /tmp) into buf; 0 on success (else a failed
 * check is recorded) */
int tl_mkdtemp(char *buf, size_t cap, const char *prefix);
/* dir/name in one of 8 rotating static buffers (so a call can take a few paths at once) */
const char *tl_path(const char *dir, const char *name);
/* remove a file or a directory tree */
void tl_rm_rf(const char *path);
/* entries of dir whose name contains `part` (NULL: every entry but . and ..); -1 if unreadable */
int tl_count_entries(const char *dir, const char *part);
#endif
