/* Masked row softmax and its backward (shared by the softmax-normalised mixers), and the
 * cross-entropy of the models' output rows. */
#include "ops/ops.h"
#include "ops/vec.h"

/* Row sums and dot products in LANES independent partial results, combined pairwise at the end
 * (the row maximum uses vector maxima where the build has them, see mega_row_max). A plain
 * `for (j) sum += x[j]` must add in order under IEEE rules (no -ffast-math here), so the compiler
 * keeps one serial chain of additions, one element per add latency (4 cycles): on a 4096-key
 * attention row that chain, not the exponentials, was the softmax's cost. Lanes make the loop a
 * vector accumulation; the order is still fixed by n alone, so the result does not depend on
 * threads or timing. */
enum { LANES = 16 };

static inline real combine(real *a) {
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) a[l] += a[l + w];
    return a[0];
}

real mega_row_max(const real *x, size_t n) {
    size_t j = 0;
    real m = -INFINITY;
#ifdef MEGA_VEC
    /* vmax, not the lane loop below: compilers do not turn `x > a ? x : a` into vector maxima */
    vf a0 = vbc(-INFINITY), a1 = a0;
    for (; j + 2 * VL <= n; j += 2 * VL) a0 = vmax(vld(x + j), a0), a1 = vmax(vld(x + j + VL), a1);
    a0 = vmax(a0, a1);
    for (int l = 0; l < VL; l++) m = a0[l] > m ? a0[l] : m;
#endif
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

real mega_row_sum(const real *x, size_t n) {
    real a[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) a[l] += x[j + l];
    for (int l = 0; j < n; j++, l++) a[l] += x[j];
    return combine(a);
}

real mega_row_dot(const real *x, const real *y, size_t n) {
    real a[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) a[l] += x[j + l] * y[j + l];
    for (int l = 0; j < n; j++, l++) a[l] += x[j] * y[j];
    return combine(a);
}

real mega_row_sqdev(const real *x, real mu, size_t n) {
    real a[LANES] = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) a[l] += (x[j + l] - mu) * (x[j + l] - mu);
    for (int l = 0; j < n; j++, l++) a[l] += (x[j] - mu) * (x[j] - mu);
    return combine(a);
}

void mega_row_norm_sums(const real *g, const real *w, const real *x, real mu, size_t n, real *sg, real *sgx) {
    real a[LANES] = {0}, b[LANES] = {0};
    size_t j = 0;
    if (w) {
        for (; j + LANES <= n; j += LANES)
            for (int l = 0; l < LANES; l++) {
                const real gw = g[j + l] * w[j + l];
                a[l] += gw, b[l] += gw * (x[j + l] - mu);
            }
        for (int l = 0; j < n; j++, l++) a[l] += g[j] * w[j], b[l] += g[j] * w[j] * (x[j] - mu);
    } else {
        for (; j + LANES <= n; j += LANES)
            for (int l = 0; l < LANES; l++) a[l] += g[j + l], b[l] += g[j + l] * (x[j + l] - mu);
        for (int l = 0; j < n; j++, l++) a[l] += g[j], b[l] += g[j] * (x[j] - mu);
    }
    *sg = combine(a), *sgx = combine(b);
}

real mega_exp_sub(real *s, size_t n, real m, int want_sum) {
    size_t j = 0;
    real sum = 0;
#ifdef MEGA_VEXP
    /* two vectors per step: independent chains for the out-of-order core */
    const vf mv = vbc(m), z = vbc(0);
    vf a0 = z, a1 = z;
    for (; j + 2 * VL <= n; j += 2 * VL) {
        const vf y0 = vexp(vld(s + j) - mv), y1 = vexp(vld(s + j + VL) - mv);
        vst(s + j, y0), vst(s + j + VL, y1);
        a0 += y0, a1 += y1;
    }
    a0 += a1;
    for (int l = 0; l < VL; l++) sum += a0[l];
#endif
    for (; j < n; j++) {
        s[j] = mega_exp(s[j] - m);
        sum += s[j];
    }
    return want_sum ? sum : 0;
}

real mega_softmax_row(real *s, size_t n) {
    const real mx = mega_row_max(s, n);
    if (mx == -INFINITY) { /* nothing visible: output 0 with no gradient */
        for (size_t j = 0; j < n; j++) s[j] = 0;
        return INFINITY;
    }
    const real sum = mega_exp_sub(s, n, mx, 1);
    real inv = (real)1 / sum;
    for (size_t j = 0; j < n; j++) s[j] *= inv;
    return mx + R_LOG(sum);
}

void mega_softmax_row_backward(real *ds, const real *dp, const real *p, size_t n) {
    const real dot = mega_row_dot(dp, p, n);
    for (size_t j = 0; j < n; j++) ds[j] = p[j] * (dp[j] - dot);
}

/* Rows are summed in a fixed number of contiguous blocks, each in row order, and the blocks in
 * block order: the sums do not depend on the number of threads (docs/distributed.md). */
enum { XENT_BLOCKS = 64, XENT_PIECE = 512 };

void mega_xent_rows(const real *logits, const int32_t *tgt, real *lse, size_t R, size_t V, double eps, double *tot,
                    double *nll, int64_t *cnt) {
    /* fairseq label_smoothed_nll_loss: eps_i = eps / (V - 1) on every other class */
    const double eps_i = V > 1 ? eps / (double)(V - 1) : 0;
    double bt[XENT_BLOCKS], bn[XENT_BLOCKS];
    int64_t bc[XENT_BLOCKS];
    const size_t nb = R < XENT_BLOCKS ? R : XENT_BLOCKS;
#pragma omp parallel for schedule(static) if (R * V > MEGA_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        double t = 0, n = 0;
        int64_t c = 0;
        for (size_t r = R * b / nb; r < R * (b + 1) / nb; r++) {
            const real *lg = logits + r * V;
            const real mx = mega_row_max(lg, V);
            /* the sum of e^(logit - max) in vector lanes (mega_exp_sub) on copies of the row, in
             * pieces of XENT_PIECE, the pieces added in double */
            double s = 0, sl = 0;
            for (size_t v0 = 0; v0 < V; v0 += XENT_PIECE) {
                real e[XENT_PIECE];
                const size_t k = V - v0 < XENT_PIECE ? V - v0 : XENT_PIECE;
                memcpy(e, lg + v0, k * sizeof(real));
                s += (double)mega_exp_sub(e, k, mx, 1);
                if (eps > 0) sl += (double)mega_row_sum(lg + v0, k);
            }
            const double l = (double)mx + log(s);
            lse[r] = (real)l;
            const int32_t y = tgt[r];
            if (y < 0) continue;
            const double nl = l - (double)lg[y];
            t += eps > 0 ? (1.0 - eps - eps_i) * nl + eps_i * ((double)V * l - sl) : nl;
            n += nl;
            c++;
        }
        bt[b] = t, bn[b] = n, bc[b] = c;
    }
    double t = 0, n = 0;
    int64_t c = 0;
    for (size_t b = 0; b < nb; b++) t += bt[b], n += bn[b], c += bc[b];
    *tot = t, *nll = n, *cnt = c;
}
