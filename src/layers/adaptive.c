/*
 * Adaptive input and adaptive softmax (adaptive.h; official fairseq/modules/adaptive_input.py
 * and adaptive_softmax.py).
 *
 * The input groups the rows by band (a counting sort into `order`) so that each band's
 * projection is one GEMM over its rows. The softmax computes every word's log-probability
 * (get_log_prob with no target: all tails on all rows), which is what evaluation, generation and
 * mega_lm_logits need; its backward uses the dense tails too (rows whose target is not in a tail
 * get a zero gradient there).
 */
#include "layers/adaptive.h"
#include "ops/ops.h"

int mega_adaptive_dim(int d, double factor, int i) { return (int)floor((double)d / pow(factor, i)); }

int mega_adaptive_bands(const int *cutoffs, int64_t V, int64_t *cut, const char *what) {
    int n = 0;
    cut[0] = 0;
    while (n < MEGA_INTS_MAX && cutoffs[n]) {
        if (cutoffs[n] <= cut[n] || cutoffs[n] > V) {
            mega__error(MEGA_ERR_INVALID, "%s must be increasing positive token ids up to the vocabulary size %lld (got %d)",
                        what, (long long)V, cutoffs[n]);
            return -1;
        }
        cut[n + 1] = cutoffs[n];
        n++;
    }
    if (!n) {
        mega__error(MEGA_ERR_INVALID, "%s is empty", what);
        return -1;
    }
    if (cut[n] < V) cut[++n] = V; /* the official `cutoff + [vocab_size]` */
    return n;
}

/* ---- adaptive input ------------------------------------------------------------------------ */

mega_status mega_adaptive_input_declare(mega_adaptive_input *a, mega_params *P, const char *prefix, int64_t V, int D,
                                        int padding_idx, double factor, const int *cutoffs) {
    memset(a, 0, sizeof *a);
    a->D = D, a->padding_idx = padding_idx;
    a->nb = mega_adaptive_bands(cutoffs, V, a->cut, "adaptive-input-cutoff");
    if (a->nb < 0) return MEGA_ERR_INVALID;
    for (int b = 0; b < a->nb; b++) {
        a->dim[b] = mega_adaptive_dim(D, factor, b);
        if (a->dim[b] < 1)
            MEGA_FAIL(MEGA_ERR_INVALID, "adaptive input band %d has no dimension left (%d / %g^%d)", b, D, factor, b);
        char name[64];
        snprintf(name, sizeof name, "embeddings.%d.0.weight", b);
        MEGA_TRY(MEGA_PADD(P, prefix, name, MEGA_P_DECAY, &a->emb[b], a->cut[b + 1] - a->cut[b], a->dim[b]));
        snprintf(name, sizeof name, "embeddings.%d.1.weight", b);
        MEGA_TRY(MEGA_PADD(P, prefix, name, MEGA_P_DECAY, &a->proj[b], D, a->dim[b]));
    }
    return MEGA_OK;
}

void mega_adaptive_input_init(const mega_adaptive_input *a, real *W, mega_rng *rng) {
    for (int b = 0; b < a->nb; b++) {
        const size_t n = (size_t)(a->cut[b + 1] - a->cut[b]), d = (size_t)a->dim[b];
        mega_fill_normal(W + a->emb[b], n * d, 0, 1.0 / sqrt((double)d), rng);
        if (a->padding_idx >= 0 && (size_t)a->padding_idx < n) memset(W + a->emb[b] + (size_t)a->padding_idx * d, 0, d * sizeof(real));
        mega_fill_xavier(W + a->proj[b], (size_t)a->D, d, 1.0, rng);
    }
}

size_t mega_adaptive_input_scratch(const mega_adaptive_input *a, size_t R) {
    return R * ((size_t)a->dim[0] + (size_t)a->D);
}

static int band_of(const int64_t *cut, int nb, int64_t t) {
    int b = 0;
    while (b + 1 < nb && t >= cut[b + 1]) b++;
    return b;
}

/* order[] = the non-pad rows grouped by band, start[b] .. start[b+1] */
static void group_rows(const mega_adaptive_input *a, const int32_t *tok, const uint8_t *pad, size_t R, int32_t *order,
                       size_t *start) {
    size_t cnt[MEGA_BANDS_MAX + 1] = {0};
    for (size_t r = 0; r < R; r++)
        if (!(pad && pad[r])) cnt[band_of(a->cut, a->nb, tok[r]) + 1]++;
    start[0] = 0;
    for (int b = 0; b < a->nb; b++) start[b + 1] = start[b] + cnt[b + 1];
    size_t fill[MEGA_BANDS_MAX];
    memcpy(fill, start, sizeof fill);
    for (size_t r = 0; r < R; r++)
        if (!(pad && pad[r])) order[fill[band_of(a->cut, a->nb, tok[r])]++] = (int32_t)r;
}

void mega_adaptive_input_forward(const mega_adaptive_input *a, const real *W, real *x, const int32_t *tok,
                                 const uint8_t *pad, size_t R, real scale, real *scratch, int32_t *order) {
    const size_t D = (size_t)a->D;
    size_t start[MEGA_BANDS_MAX + 1];
    group_rows(a, tok, pad, R, order, start);
    if (pad)
        for (size_t r = 0; r < R; r++)
            if (pad[r]) memset(x + r * D, 0, D * sizeof(real));
    real *E = scratch, *Y = scratch + R * (size_t)a->dim[0];
    for (int b = 0; b < a->nb; b++) {
        const size_t n = start[b + 1] - start[b], d = (size_t)a->dim[b];
        if (!n) continue;
        const int32_t *rows = order + start[b];
        for (size_t i = 0; i < n; i++)
            memcpy(E + i * d, W + a->emb[b] + (size_t)(tok[rows[i]] - a->cut[b]) * d, d * sizeof(real));
        mega_linear_forward(Y, E, W + a->proj[b], NULL, n, d, D);
        for (size_t i = 0; i < n; i++) {
            real *xr = x + (size_t)rows[i] * D;
            const real *yr = Y + i * D;
            for (size_t j = 0; j < D; j++) xr[j] = scale * yr[j];
        }
    }
}

void mega_adaptive_input_backward(const mega_adaptive_input *a, const real *W, real *dW, const real *dx,
                                  const int32_t *tok, const uint8_t *pad, size_t R, real scale, real *scratch,
                                  int32_t *order) {
    const size_t D = (size_t)a->D;
    size_t start[MEGA_BANDS_MAX + 1];
    group_rows(a, tok, pad, R, order, start);
    real *E = scratch, *dY = scratch + R * (size_t)a->dim[0];
    for (int b = 0; b < a->nb; b++) {
        const size_t n = start[b + 1] - start[b], d = (size_t)a->dim[b];
        if (!n) continue;
        const int32_t *rows = order + start[b];
        for (size_t i = 0; i < n; i++) {
            memcpy(E + i * d, W + a->emb[b] + (size_t)(tok[rows[i]] - a->cut[b]) * d, d * sizeof(real));
            const real *g = dx + (size_t)rows[i] * D;
            for (size_t j = 0; j < D; j++) dY[i * D + j] = scale * g[j];
        }
        /* dP_b += dY^T E; dE = dY P_b (into E, whose values are no longer needed) */
        mega_gemm(1, 0, D, d, n, 1, dY, D, E, d, 1, dW + a->proj[b], d);
        mega_gemm(0, 0, n, d, D, 1, dY, D, W + a->proj[b], d, 0, E, d);
        /* scatter into the band's rows, serially (deterministic); band 0's padding row is frozen */
        for (size_t i = 0; i < n; i++) {
            const int64_t t = tok[rows[i]];
            if (t == a->padding_idx) continue;
            real *g = dW + a->emb[b] + (size_t)(t - a->cut[b]) * d;
            for (size_t j = 0; j < d; j++) g[j] += E[i * d + j];
        }
    }
}

/* ---- adaptive softmax ---------------------------------------------------------------------- */

mega_status mega_adaptive_softmax_declare(mega_adaptive_softmax *s, mega_params *P, const char *prefix, int64_t V,
                                          int D, double factor, const int *cutoffs, double dropout,
                                          const mega_adaptive_input *inp, int tie_proj) {
    memset(s, 0, sizeof *s);
    s->D = D, s->dropout = dropout, s->tied = inp != NULL, s->tie_proj = inp && tie_proj;
    const int nb = mega_adaptive_bands(cutoffs, V, s->cut, "adaptive-softmax-cutoff");
    if (nb < 0) return MEGA_ERR_INVALID;
    s->nt = nb - 1;
    s->hs = (int)s->cut[1] + s->nt;
    if (inp) {
        /* the official model asserts equal cutoffs and factors when tied */
        if (inp->nb != nb || memcmp(inp->cut, s->cut, (size_t)(nb + 1) * sizeof *s->cut))
            MEGA_FAIL(MEGA_ERR_INVALID, "tie-adaptive-weights needs adaptive-softmax-cutoff equal to adaptive-input-cutoff");
        if (inp->dim[0] != D) MEGA_FAIL(MEGA_ERR_INVALID, "tie-adaptive-weights needs the first input band at the model width");
        s->word = inp->emb[0];
        MEGA_TRY(MEGA_PADD(P, prefix, "head.class_proj.weight", MEGA_P_DECAY, &s->head, s->nt, D));
    } else {
        MEGA_TRY(MEGA_PADD(P, prefix, "head.weight", MEGA_P_DECAY, &s->head, s->hs, D));
    }
    for (int i = 0; i < s->nt; i++) {
        s->dim[i] = mega_adaptive_dim(D, factor, i + 1);
        if (inp && inp->dim[i + 1] != s->dim[i])
            MEGA_FAIL(MEGA_ERR_INVALID, "tie-adaptive-weights needs adaptive-softmax-factor equal to adaptive-input-factor");
        if (s->dim[i] < 1) MEGA_FAIL(MEGA_ERR_INVALID, "adaptive softmax tail %d has no dimension left (%d / %g^%d)", i, D, factor, i + 1);
        char name[64];
        if (s->tie_proj) {
            s->tproj[i] = inp->proj[i + 1];
        } else {
            snprintf(name, sizeof name, "tail.%d.0.weight", i);
            MEGA_TRY(MEGA_PADD(P, prefix, name, MEGA_P_DECAY, &s->tproj[i], s->dim[i], D));
        }
        if (inp) {
            s->tout[i] = inp->emb[i + 1];
        } else {
            snprintf(name, sizeof name, "tail.%d.2.weight", i);
            MEGA_TRY(MEGA_PADD(P, prefix, name, MEGA_P_DECAY, &s->tout[i], s->cut[i + 2] - s->cut[i + 1], s->dim[i]));
        }
    }
    return MEGA_OK;
}

void mega_adaptive_softmax_init(const mega_adaptive_softmax *s, real *W, mega_rng *rng) {
    const size_t D = (size_t)s->D;
    mega_fill_xavier(W + s->head, s->tied ? (size_t)s->nt : (size_t)s->hs, D, 1.0, rng);
    for (int i = 0; i < s->nt; i++) {
        if (!s->tie_proj) mega_fill_xavier(W + s->tproj[i], (size_t)s->dim[i], D, 1.0, rng);
        if (!s->tied) mega_fill_xavier(W + s->tout[i], (size_t)(s->cut[i + 2] - s->cut[i + 1]), (size_t)s->dim[i], 1.0, rng);
    }
}

static size_t tails_width(const mega_adaptive_softmax *s) {
    size_t w = 0;
    for (int i = 0; i < s->nt; i++) w += (size_t)s->dim[i];
    return w;
}

/* acts: [R, nt] class log-probs, [R, sum dim] tail projections, [R, D] dropped-out input */
size_t mega_adaptive_softmax_acts(const mega_adaptive_softmax *s, size_t R) {
    return R * ((size_t)s->nt + tails_width(s) + (s->dropout > 0 ? (size_t)s->D : 0));
}

enum { SITE_IN = 2000, SITE_TAIL = 2001 };

/* log-sum-exp of n values, the sum in double */
static double row_lse(const real *x, size_t n) {
    const real m = mega_row_max(x, n);
    double sum = 0;
    for (size_t j = 0; j < n; j++) sum += (double)mega_exp(x[j] - m);
    return (double)m + log(sum);
}

void mega_adaptive_softmax_forward(const mega_adaptive_softmax *s, const real *W, real *logp, const real *x,
                                   size_t R, int training, uint64_t key, real *acts) {
    const size_t D = (size_t)s->D, V = (size_t)s->cut[s->nt + 1], nt = (size_t)s->nt, c0 = (size_t)s->cut[1];
    real *cls = acts, *h = acts + R * nt, *xd = h + R * tails_width(s);
    const int drop = training && s->dropout > 0;
    if (drop) {
        mega_dropout(xd, x, R * D, s->dropout, mega__subkey(key, SITE_IN));
        x = xd;
    }
    /* head: the words of band 0 straight into logp, the classes into cls */
    const real *Ww = W + (s->tied ? s->word : s->head), *Wc = W + s->head + (s->tied ? 0 : c0 * D);
    mega_gemm(0, 1, R, c0, D, 1, x, D, Ww, D, 0, logp, V);
    if (nt) mega_gemm(0, 1, R, nt, D, 1, x, D, Wc, D, 0, cls, nt);
    /* tails: h_i = dropout(Q_i x), then O_i h_i into the band's columns */
    real *hi = h;
    for (size_t i = 0; i < nt; i++) {
        const size_t d = (size_t)s->dim[i], n = (size_t)(s->cut[i + 2] - s->cut[i + 1]);
        if (s->tie_proj) mega_gemm(0, 0, R, d, D, 1, x, D, W + s->tproj[i], d, 0, hi, d);
        else mega_gemm(0, 1, R, d, D, 1, x, D, W + s->tproj[i], D, 0, hi, d);
        if (drop) mega_dropout(hi, hi, R * d, s->dropout, mega__subkey(key, SITE_TAIL + i));
        mega_gemm(0, 1, R, n, d, 1, hi, d, W + s->tout[i], d, 0, logp + s->cut[i + 1], V);
        hi += R * d;
    }
    /* the log-softmaxes: the head over its words and classes, each tail plus its class */
#pragma omp parallel for schedule(static) if (R * V > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        real *lp = logp + r * V, *cr = cls + r * nt;
        const real m = MEGA_MAX(mega_row_max(lp, c0), nt ? mega_row_max(cr, nt) : -INFINITY);
        double sum = 0;
        for (size_t j = 0; j < c0; j++) sum += (double)mega_exp(lp[j] - m);
        for (size_t j = 0; j < nt; j++) sum += (double)mega_exp(cr[j] - m);
        const real lse = (real)((double)m + log(sum));
        for (size_t j = 0; j < c0; j++) lp[j] -= lse;
        for (size_t j = 0; j < nt; j++) cr[j] -= lse;
        for (size_t i = 0; i < nt; i++) {
            real *t = lp + s->cut[i + 1];
            const size_t n = (size_t)(s->cut[i + 2] - s->cut[i + 1]);
            const real sh = cr[i] - (real)row_lse(t, n);
            for (size_t j = 0; j < n; j++) t[j] += sh;
        }
    }
}

void mega_adaptive_softmax_backward(const mega_adaptive_softmax *s, const real *W, real *dW, real *dx, real *logp,
                                    const real *x, const int32_t *tgt, size_t R, real g, int training, uint64_t key,
                                    real *acts) {
    const size_t D = (size_t)s->D, V = (size_t)s->cut[s->nt + 1], nt = (size_t)s->nt, c0 = (size_t)s->cut[1];
    real *cls = acts, *h = acts + R * nt, *xd = h + R * tails_width(s);
    const int drop = training && s->dropout > 0;
    const real *xin = drop ? xd : x;
    /* d/d(scores) of -log p(y): softmax minus the one-hot, for the head (over words and classes)
     * and, for the tail holding y only, over the tail (p_tail = exp(logp - class log-prob)) */
#pragma omp parallel for schedule(static) if (R * V > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        real *lp = logp + r * V, *cr = cls + r * nt;
        const int32_t y = tgt[r];
        if (y < 0) {
            memset(lp, 0, V * sizeof(real));
            memset(cr, 0, nt * sizeof(real));
            continue;
        }
        const int yb = band_of(s->cut, (int)nt + 1, y); /* 0: a head word; i+1: tail i */
        for (size_t i = 0; i < nt; i++) {
            real *t = lp + s->cut[i + 1];
            const size_t n = (size_t)(s->cut[i + 2] - s->cut[i + 1]);
            if ((int)i + 1 == yb) {
                for (size_t j = 0; j < n; j++) t[j] = g * mega_exp(t[j] - cr[i]);
                t[y - s->cut[i + 1]] -= g;
            } else {
                memset(t, 0, n * sizeof(real));
            }
        }
        for (size_t j = 0; j < c0; j++) lp[j] = g * mega_exp(lp[j]);
        for (size_t j = 0; j < nt; j++) cr[j] = g * mega_exp(cr[j]);
        if (yb == 0) lp[y] -= g;
        else cr[yb - 1] -= g;
    }
    /* head: dx = dwords Ww + dcls Wc; dWw += dwords^T x; dWc += dcls^T x */
    const size_t wo = s->tied ? s->word : s->head, co = s->head + (s->tied ? 0 : c0 * D);
    mega_gemm(0, 0, R, D, c0, 1, logp, V, W + wo, D, 0, dx, D);
    mega_gemm(1, 0, c0, D, R, 1, logp, V, xin, D, 1, dW + wo, D);
    if (nt) {
        mega_gemm(0, 0, R, D, nt, 1, cls, nt, W + co, D, 1, dx, D);
        mega_gemm(1, 0, nt, D, R, 1, cls, nt, xin, D, 1, dW + co, D);
    }
    real *hi = h;
    for (size_t i = 0; i < nt; i++) {
        const size_t d = (size_t)s->dim[i], n = (size_t)(s->cut[i + 2] - s->cut[i + 1]);
        const real *dt = logp + s->cut[i + 1];
        /* dO_i += dt^T h_i; then dh_i = dt O_i in h_i's place; back through the tail's dropout */
        mega_gemm(1, 0, n, d, R, 1, dt, V, hi, d, 1, dW + s->tout[i], d);
        mega_gemm(0, 0, R, d, n, 1, dt, V, W + s->tout[i], d, 0, hi, d);
        if (drop) mega_dropout(hi, hi, R * d, s->dropout, mega__subkey(key, SITE_TAIL + i));
        if (s->tie_proj) { /* h = x Q, Q [D, d] */
            mega_gemm(1, 0, D, d, R, 1, xin, D, hi, d, 1, dW + s->tproj[i], d);
            mega_gemm(0, 1, R, D, d, 1, hi, d, W + s->tproj[i], d, 1, dx, D);
        } else { /* h = x Q^T, Q [d, D] */
            mega_gemm(1, 0, d, D, R, 1, hi, d, xin, D, 1, dW + s->tproj[i], D);
            mega_gemm(0, 0, R, D, d, 1, hi, d, W + s->tproj[i], D, 1, dx, D);
        }
        hi += R * d;
    }
    if (drop) mega_dropout(dx, dx, R * D, s->dropout, mega__subkey(key, SITE_IN));
}
