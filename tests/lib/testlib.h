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
#endif
