/* Token embedding lookup and its gradient (shared by the language model and the classifier). */
#include "ops/ops.h"

void mega_embedding_forward(real *x, const real *E, const int32_t *tok, const uint8_t *pad, size_t R, size_t D,
                            real scale) {
    for (size_t r = 0; r < R; r++) {
        const real *e = E + (size_t)tok[r] * D;
        real s = (pad && pad[r]) ? 0 : scale;
        for (size_t d = 0; d < D; d++) x[r * D + d] = s * e[d];
    }
}

void mega_embedding_backward(real *dE, const real *dx, const int32_t *tok, const uint8_t *pad, size_t R, size_t D,
                             real scale, int padding_idx) {
    for (size_t r = 0; r < R; r++) {
        if ((pad && pad[r]) || tok[r] == padding_idx) continue;
        real *d = dE + (size_t)tok[r] * D;
        const real *s = dx + r * D;
        for (size_t j = 0; j < D; j++) d[j] += scale * s[j];
    }
}
