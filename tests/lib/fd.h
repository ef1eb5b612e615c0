/*
 * Central finite differences of a scalar loss, the one engine behind every gradient check
 * (the block driver in blocktest.c, the EMA layer and the AFT pair kernel tests). Meaningful in
 * the double-precision builds (tests/t64_*); it compiles in both.
 *
 * Stencils: fourth order (8 (L(w+h) - L(w-h)) - (L(w+2h) - L(w-2h))) / 12h with h = 1e-4 by
 * default: truncation O(h^4) is negligible and rounding is ten times below that of the two-point
 * formula with h = 1e-5. The two-point formula (L(w+h) - L(w-h)) / 2h (h = 1e-5 by default) is
 * for losses that are only C1 (relu2 attention), where its error at a kink is O(h).
 *
 * Error of a tensor: max |analytic - FD| / max(max |analytic|, max |FD|, floor) over the checked
 * entries, where the caller's floor (typically 1e-3 x the largest gradient of the
 * configuration) keeps tiny gradients from being judged by their relative error alone.
 */
#ifndef MEGA_TEST_FD_H
#define MEGA_TEST_FD_H
#include "mega.h"
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double (*loss)(void *arg); /* the scalar loss at the current values */
    void *arg;
    int two_point;       /* two-point stencil instead of the fourth-order one */
    double h;            /* step (0: 1e-4 four-point, 1e-5 two-point) */
    size_t sample_above; /* tensors with more entries are checked on `samples` random entries */
    size_t samples;      /* (sample_above 0: every entry of every tensor) */
    unsigned long long seed; /* sampled entries and random directions */
} fd_opts;

/* dL/dp at the current value of *p (restored afterwards) */
double fd_derivative(fd_opts *o, mega_real *p);
/* the error of grad against finite differences over val[0..n) (or a sample of it) */
double fd_tensor_err(fd_opts *o, mega_real *val, const mega_real *grad, size_t n, double floor_);
/* |<grad, v> - FD of L along v| / (|grad on v's support| |v|) for a random direction v over the
 * entries i with mask[i] != 0 (mask NULL: all n) */
double fd_directional(fd_opts *o, mega_real *val, const mega_real *grad, size_t n, const uint8_t *mask);
#endif
