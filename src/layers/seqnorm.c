/* SequenceNorm kinds (official sequence_norm.py, scale_norm.py,
 * root_mean_square_norm.py, torch LayerNorm / BatchNorm1d; docs/mega.md §7). */
#include "layers/seqnorm.h"
#include "ops/ops.h"

mega_status mega_seqnorm_declare(mega_seqnorm *n, mega_params *P, const char *prefix, mega_norm_type type,
                                 int D, int affine) {
    memset(n, 0, sizeof *n);
    n->type = type;
    n->D = D;
    n->affine = affine;
    if (type == MEGA_NORM_BATCH) {
        if (affine) {
            MEGA_TRY(MEGA_PADD(P, prefix, "weight", 0, &n->w, D));
            MEGA_TRY(MEGA_PADD(P, prefix, "bias", 0, &n->b, D));
        }
        MEGA_TRY(MEGA_PADD(P, prefix, "running_mean", MEGA_P_BUFFER, &n->rmean, D));
        MEGA_TRY(MEGA_PADD(P, prefix, "running_var", MEGA_P_BUFFER, &n->rvar, D));
        MEGA_TRY(mega_params_add(P, prefix, "num_batches_tracked", 0, NULL, MEGA_P_BUFFER | MEGA_P_I64, &n->nbt));
        return MEGA_OK;
    }
    if (!affine) return MEGA_OK;
    switch (type) {
    case MEGA_NORM_LAYER:
        MEGA_TRY(MEGA_PADD(P, prefix, "weight", 0, &n->w, D));
        MEGA_TRY(MEGA_PADD(P, prefix, "bias", 0, &n->b, D));
        break;
    case MEGA_NORM_SCALE: MEGA_TRY(MEGA_PADD(P, prefix, "scalar", 0, &n->scalar, 1)); break;
    case MEGA_NORM_RMS: MEGA_TRY(MEGA_PADD(P, prefix, "weight", 0, &n->w, D)); break;
    default: break;
    }
    return MEGA_OK;
}

void mega_seqnorm_init(const mega_seqnorm *n, real *W) {
    size_t D = (size_t)n->D;
    if (n->type == MEGA_NORM_BATCH) {
        if (n->affine) {
            mega_fill_const(W + n->w, D, 1);
            mega_fill_const(W + n->b, D, 0);
        }
        mega_fill_const(W + n->rmean, D, 0);
        mega_fill_const(W + n->rvar, D, 1);
        W[n->nbt] = 0;
        return;
    }
    if (!n->affine) return;
    if (n->type == MEGA_NORM_LAYER) {
        mega_fill_const(W + n->w, D, 1);
        mega_fill_const(W + n->b, D, 0);
    } else if (n->type == MEGA_NORM_SCALE) {
        W[n->scalar] = 1;
    } else {
        mega_fill_const(W + n->w, D, 1);
    }
}

size_t mega_seqnorm_stat_size(const mega_seqnorm *n, size_t R) {
    return n->type == MEGA_NORM_BATCH ? 2 * (size_t)n->D : 2 * R;
}

/* rows [r0, r1) of the batch norm with given statistics */
static void batch_rows(real *y, const real *x, const real *mean, const real *rstd, const real *w, const real *b,
                       size_t D, size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; r++) {
        const real *xr = x + r * D;
        real *yr = y + r * D;
        for (size_t d = 0; d < D; d++) {
            real v = (xr[d] - mean[d]) * rstd[d];
            yr[d] = w ? v * w[d] + b[d] : v;
        }
    }
}

/* the statistics of rows [r0, r1) of the per-token norms (layer, scale, rms): [mean, 1/rms] per
 * row (scalenorm / rmsnorm: x * rsqrt(mean(x^2) + eps), eps inside the root; mean 0) */
static void row_stats(const mega_seqnorm *n, real *stats, const real *x, size_t r0, size_t r1) {
    const size_t D = (size_t)n->D;
    const real eps = (real)MEGA_NORM_EPS;
    for (size_t r = r0; r < r1; r++) {
        const real *xr = x + r * D;
        if (n->type == MEGA_NORM_LAYER) {
            /* in vector lanes (softmax.c): a plain loop is one serial chain of additions */
            const real mu = mega_row_sum(xr, D) / (real)D;
            const real var = mega_row_sqdev(xr, mu, D) / (real)D;
            stats[2 * r] = mu;
            stats[2 * r + 1] = (real)1 / R_SQRT(var + eps);
        } else {
            const real ms = mega_row_dot(xr, xr, D) / (real)D;
            stats[2 * r] = 0;
            stats[2 * r + 1] = (real)1 / R_SQRT(ms + eps);
        }
    }
}

/* rows [r0, r1) of the per-token norms given their statistics: the forward's output (after
 * row_stats) and the backward's recomputation of it (mega_seqnorm_apply) are this one code */
static void apply_rows(const mega_seqnorm *n, real *y, const real *stats, const real *x, const real *w, const real *b,
                       real gs, size_t r0, size_t r1) {
    const size_t D = (size_t)n->D;
    for (size_t r = r0; r < r1; r++) {
        const real *xr = x + r * D;
        real *yr = y + r * D;
        if (n->type == MEGA_NORM_LAYER) {
            const real mu = stats[2 * r], rs = stats[2 * r + 1];
            for (size_t d = 0; d < D; d++) {
                real v = (xr[d] - mu) * rs;
                yr[d] = w ? v * w[d] + b[d] : v;
            }
        } else {
            const real rho = stats[2 * r + 1];
            if (n->type == MEGA_NORM_RMS && w)
                for (size_t d = 0; d < D; d++) yr[d] = w[d] * xr[d] * rho;
            else
                for (size_t d = 0; d < D; d++) yr[d] = gs * xr[d] * rho;
        }
    }
}

/* rows [r0, r1) of a norm: per-token norms first compute their statistics into stats_out when
 * given (the forward, stats_out == stats), then apply stats; batchnorm's are the columns'
 * [mean D, rstd D], given in stats. */
static void rows_range(const mega_seqnorm *n, real *y, real *stats_out, const real *stats, const real *x,
                       const real *w, const real *b, real gs, size_t r0, size_t r1) {
    const size_t D = (size_t)n->D;
    if (n->type == MEGA_NORM_BATCH) {
        batch_rows(y, x, stats, stats + D, w, b, D, r0, r1);
        return;
    }
    if (stats_out) row_stats(n, stats_out, x, r0, r1);
    apply_rows(n, y, stats, x, w, b, gs, r0, r1);
}

/* every row of a norm. A few rows (the streaming step: one per sequence) run on the calling
 * thread without entering a parallel region at all, because libgomp allocates a team descriptor
 * for every region of one thread (an if() clause that is false included): that would be an
 * allocation per token and norm. */
static void for_rows(const mega_seqnorm *n, const real *W, real *y, real *stats_out, const real *stats, const real *x,
                     size_t R) {
    const real *w = (n->affine && n->type != MEGA_NORM_SCALE) ? W + n->w : NULL;
    const real *b = (n->affine && (n->type == MEGA_NORM_LAYER || n->type == MEGA_NORM_BATCH)) ? W + n->b : NULL;
    const real gs = (n->type == MEGA_NORM_SCALE && n->affine) ? W[n->scalar] : (real)1;
    if (R * (size_t)n->D <= MEGA_PAR_MIN) {
        rows_range(n, y, stats_out, stats, x, w, b, gs, 0, R);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < R; r++) rows_range(n, y, stats_out, stats, x, w, b, gs, r, r + 1);
}


void mega_seqnorm_forward(const mega_seqnorm *n, real *W, real *y, real *stats, const real *x, size_t R,
                          int training, int update_stats, const mega_bnsync *sync) {
    const size_t D = (size_t)n->D;
    const real eps = (real)MEGA_NORM_EPS;
    if (n->type == MEGA_NORM_BATCH) {
        real *mean = stats, *rstd = stats + D;
        if (training) {
            /* batch statistics over all R = B*T rows, pads included (official BatchNorm1d);
             * accumulated in double, 64 columns at a time (no allocation). With sync, the rows
             * of every process: the column sums and the row count are summed over the
             * processes, then the centred squares (the same two passes, so the same numbers as
             * one process with every row, up to the order of the additions) */
            const int sync_on = sync && sync->fn;
            double Rn = (double)R;
            for (size_t d0 = 0; d0 < D; d0 += 64) {
                size_t nd = MEGA_MIN((size_t)64, D - d0);
                double s1[65] = {0}, s2[64] = {0};
                for (size_t r = 0; r < R; r++)
                    for (size_t j = 0; j < nd; j++) s1[j] += x[r * D + d0 + j];
                if (sync_on) {
                    s1[nd] = (double)R;
                    sync->fn(s1, nd + 1, sync->ctx);
                    Rn = s1[nd];
                }
                for (size_t j = 0; j < nd; j++) mean[d0 + j] = (real)(s1[j] / Rn);
                for (size_t r = 0; r < R; r++)
                    for (size_t j = 0; j < nd; j++) {
                        double c = (double)x[r * D + d0 + j] - (double)mean[d0 + j];
                        s2[j] += c * c;
                    }
                if (sync_on) sync->fn(s2, nd, sync->ctx);
                for (size_t j = 0; j < nd; j++) rstd[d0 + j] = (real)s2[j];
            }
            for (size_t d = 0; d < D; d++) {
                real var = rstd[d] / (real)Rn; /* biased, for normalising */
                if (update_stats) {
                    real unb = Rn > 1 ? rstd[d] / (real)(Rn - 1) : var;
                    W[n->rmean + d] = (real)0.9 * W[n->rmean + d] + (real)0.1 * mean[d];
                    W[n->rvar + d] = (real)0.9 * W[n->rvar + d] + (real)0.1 * unb;
                }
                rstd[d] = (real)1 / R_SQRT(var + eps);
            }
            if (update_stats) W[n->nbt] += 1;
        } else {
            for (size_t d = 0; d < D; d++) {
                mean[d] = W[n->rmean + d];
                rstd[d] = (real)1 / R_SQRT(W[n->rvar + d] + eps);
            }
        }
    }
    for_rows(n, W, y, stats, stats, x, R);
}

void mega_seqnorm_apply(const mega_seqnorm *n, const real *W, real *y, const real *stats, const real *x, size_t R) {
    for_rows(n, W, y, NULL, stats, x, R);
}

void mega_seqnorm_backward(const mega_seqnorm *n, const real *W, real *dW, real *dx, const real *dy,
                           const real *x, const real *stats, size_t R, int training, int acc, const mega_bnsync *sync) {
    const size_t D = (size_t)n->D;
    const real *w = (n->affine && n->type != MEGA_NORM_SCALE) ? W + n->w : NULL;
    if (n->type == MEGA_NORM_BATCH) {
        const real *mean = stats, *rstd = stats + D;
        real *dw = (n->affine && dW) ? dW + n->w : NULL, *db = (n->affine && dW) ? dW + n->b : NULL;
        /* column means of dy and dy*xhat over all rows, kept in stats-sized locals per block;
         * with sync (training), over the rows of every process: the weight and bias gradients
         * stay this process's (the caller sums gradients over the processes) */
        const int sync_on = training && sync && sync->fn;
        for (size_t d0 = 0; d0 < D; d0 += 64) {
            size_t nd = MEGA_MIN((size_t)64, D - d0);
            double s0[64] = {0}, s1[64] = {0}, Rn = (double)R;
            for (size_t r = 0; r < R; r++)
                for (size_t j = 0; j < nd; j++) {
                    size_t d = d0 + j;
                    double g = dy[r * D + d];
                    s0[j] += g;
                    s1[j] += g * (double)((x[r * D + d] - mean[d]) * rstd[d]);
                }
            if (dw)
                for (size_t j = 0; j < nd; j++) dw[d0 + j] += (real)s1[j], db[d0 + j] += (real)s0[j];
            if (sync_on) {
                double sb[2 * 64 + 1];
                for (size_t j = 0; j < nd; j++) sb[j] = s0[j], sb[nd + j] = s1[j];
                sb[2 * nd] = (double)R;
                sync->fn(sb, 2 * nd + 1, sync->ctx);
                for (size_t j = 0; j < nd; j++) s0[j] = sb[j], s1[j] = sb[nd + j];
                Rn = sb[2 * nd];
            }
            for (size_t j = 0; j < nd; j++) {
                real m0 = (real)(s0[j] / Rn), m1 = (real)(s1[j] / Rn);
                size_t d = d0 + j;
                real wd = w ? w[d] : (real)1;
                for (size_t r = 0; r < R; r++) {
                    real g;
                    if (training) {
                        real xh = (x[r * D + d] - mean[d]) * rstd[d];
                        g = wd * rstd[d] * (dy[r * D + d] - m0 - xh * m1);
                    } else {
                        g = wd * rstd[d] * dy[r * D + d];
                    }
                    dx[r * D + d] = acc ? dx[r * D + d] + g : g;
                }
            }
        }
        return;
    }
    const real gs = (n->type == MEGA_NORM_SCALE && n->affine) ? W[n->scalar] : (real)1;
#pragma omp parallel for schedule(static) if (R * D > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        const real *xr = x + r * D, *gr = dy + r * D;
        real *dxr = dx + r * D;
        real mu = stats[2 * r], rs = stats[2 * r + 1];
        if (n->type == MEGA_NORM_LAYER) {
            /* dx = rs * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w */
            real mg, mgx;
            mega_row_norm_sums(gr, w, xr, mu, D, &mg, &mgx);
            mg /= (real)D;
            mgx = mgx * rs / (real)D;
            for (size_t d = 0; d < D; d++) {
                real g = w ? gr[d] * w[d] : gr[d];
                real v = rs * (g - mg - (xr[d] - mu) * rs * mgx);
                dxr[d] = acc ? dxr[d] + v : v;
            }
        } else {
            /* y = s * x * rho: dx = rho * G - rho^3 * x * mean(G * x), G = dy * s */
            real sg, mgx;
            mega_row_norm_sums(gr, (n->type == MEGA_NORM_RMS && w) ? w : NULL, xr, 0, D, &sg, &mgx);
            (void)sg;
            mgx = (n->type == MEGA_NORM_RMS && w ? mgx : mgx * gs) / (real)D;
            real rs3 = rs * rs * rs;
            for (size_t d = 0; d < D; d++) {
                real G = (n->type == MEGA_NORM_RMS && w) ? gr[d] * w[d] : gr[d] * gs;
                real v = rs * G - rs3 * xr[d] * mgx;
                dxr[d] = acc ? dxr[d] + v : v;
            }
        }
    }
    if (!n->affine || !dW) return;
    /* parameter gradients: serial over rows (deterministic), vectorised over D */
    if (n->type == MEGA_NORM_LAYER) {
        real *dw = dW + n->w, *db = dW + n->b;
        for (size_t r = 0; r < R; r++) {
            real mu = stats[2 * r], rs = stats[2 * r + 1];
            for (size_t d = 0; d < D; d++) {
                dw[d] += dy[r * D + d] * (x[r * D + d] - mu) * rs;
                db[d] += dy[r * D + d];
            }
        }
    } else if (n->type == MEGA_NORM_RMS) {
        real *dw = dW + n->w;
        for (size_t r = 0; r < R; r++) {
            real rs = stats[2 * r + 1];
            for (size_t d = 0; d < D; d++) dw[d] += dy[r * D + d] * x[r * D + d] * rs;
        }
    } else {
        double s = 0;
        for (size_t r = 0; r < R; r++) {
            real rs = stats[2 * r + 1], t = 0;
            for (size_t d = 0; d < D; d++) t += dy[r * D + d] * x[r * D + d];
            s += (double)(t * rs);
        }
        dW[n->scalar] += (real)s;
    }
}
