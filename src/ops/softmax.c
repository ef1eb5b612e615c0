/* Masked row softmax and its backward (shared by the softmax-normalised mixers). */
#include "ops/ops.h"

real mega_softmax_row(real *s, size_t n) {
    real mx = -INFINITY;
    for (size_t j = 0; j < n; j++)
        if (s[j] > mx) mx = s[j];
    if (mx == -INFINITY) { /* nothing visible: output 0 with no gradient */
        for (size_t j = 0; j < n; j++) s[j] = 0;
        return INFINITY;
    }
    real sum = 0;
    for (size_t j = 0; j < n; j++) sum += (s[j] = mega_exp(s[j] - mx));
    real inv = (real)1 / sum;
    for (size_t j = 0; j < n; j++) s[j] *= inv;
    return mx + R_LOG(sum);
}

void mega_softmax_row_backward(real *ds, const real *dp, const real *p, size_t n) {
    real dot = 0;
    for (size_t j = 0; j < n; j++) dot += dp[j] * p[j];
    for (size_t j = 0; j < n; j++) ds[j] = p[j] * (dp[j] - dot);
}
