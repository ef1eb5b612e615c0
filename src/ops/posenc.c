/* Positional schemes of the attention mixers: ALiBi, KERPLE, Sandwich, XPOS tables and MHATW's
 * time weighting (sources per scheme in posenc.h; docs/mixers.md). See posenc.h for the table
 * geometry. */
#include "ops/posenc.h"

/* |d| of entry idx of a table centred at tc */
static inline int dist_of(int idx, int tc) { return idx >= tc ? idx - tc : tc - idx; }

/* ---- ALiBi (Press et al., arXiv 2108.12409) -------------------------------------------- */
/* slope of head h: the P = 2^floor(log2 H) power-of-two slopes 2^(-8(h+1)/P) (start 2^(-8/P),
 * the same ratio), then the entries j = 0, 2, 4, ... of the 2P list 2^(-8(j+1)/(2P)) */
static double alibi_slope(int h, int H) {
    int P = 1;
    while (P * 2 <= H) P *= 2;
    if (h < P) return exp2(-8.0 * (h + 1) / P);
    return exp2(-4.0 * (2 * (h - P) + 1) / P);
}

void mega_alibi_slopes(double *m, int H) {
    for (int h = 0; h < H; h++) m[h] = alibi_slope(h, H);
}

void mega_alibi_table(real *tab, int H, int tc, int tl) {
    for (int h = 0; h < H; h++) {
        const double m = alibi_slope(h, H);
        for (int i = 0; i < tl; i++) tab[(size_t)h * tl + i] += (real)(-m * dist_of(i, tc));
    }
}

/* ---- KERPLE (Chi et al. 2022, arXiv 2205.09921) ---------------------------------------- */
static inline double clampd(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* (r1, r2) of head h from the clamped parameter values */
static void kerple_r(int power, const real *bp, const real *ba, int h, double *r1, double *r2) {
    double p = (double)bp[h], a = (double)ba[h];
    if (power) {
        *r1 = clampd(a, MEGA_KERPLE_EPS, INFINITY);
        *r2 = clampd(p, MEGA_KERPLE_EPS, 2.0);
    } else {
        *r1 = clampd(p, MEGA_KERPLE_EPS, INFINITY);
        *r2 = clampd(a, MEGA_KERPLE_EPS, INFINITY);
    }
}

void mega_kerple_clamp(int power, real *bias_p, real *bias_a, int H) {
    for (int h = 0; h < H; h++) {
        bias_p[h] = (real)clampd((double)bias_p[h], MEGA_KERPLE_EPS, power ? 2.0 : INFINITY);
        bias_a[h] = (real)clampd((double)bias_a[h], MEGA_KERPLE_EPS, INFINITY);
    }
}

void mega_kerple_table(int power, real *tab, int H, int tc, int tl, const real *bias_p, const real *bias_a) {
    for (int h = 0; h < H; h++) {
        double r1, r2;
        kerple_r(power, bias_p, bias_a, h, &r1, &r2);
        real *t = tab + (size_t)h * tl;
        for (int i = 0; i < tl; i++) {
            double d = dist_of(i, tc);
            t[i] += (real)(power ? (d > 0 ? -r1 * pow(d, r2) : 0.0) : -r1 * log1p(r2 * d));
        }
    }
}

void mega_kerple_backward(int power, const real *dtab, int H, int tc, int tl, const real *bias_p, const real *bias_a,
                          real *dbias_p, real *dbias_a) {
    for (int h = 0; h < H; h++) {
        double r1, r2, g1 = 0, g2 = 0;
        kerple_r(power, bias_p, bias_a, h, &r1, &r2);
        const real *g = dtab + (size_t)h * tl;
        for (int i = 0; i < tl; i++) {
            double d = dist_of(i, tc), gi = (double)g[i];
            if (gi == 0) continue;
            if (power) {
                if (d == 0) continue; /* b(0) = 0 for every r1, r2: both derivatives are 0 */
                double pw = pow(d, r2);
                g1 -= gi * pw;
                g2 -= gi * r1 * pw * log(d);
            } else {
                g1 -= gi * log1p(r2 * d);
                g2 -= gi * r1 * d / (1 + r2 * d);
            }
        }
        /* the official parameters: power (r1, r2) = (bias_a, bias_p); log (bias_p, bias_a) */
        if (power) {
            dbias_a[h] += (real)g1;
            dbias_p[h] += (real)g2;
        } else {
            dbias_p[h] += (real)g1;
            dbias_a[h] += (real)g2;
        }
    }
}

/* ---- Sandwich (Chi et al. 2023, arXiv 2212.10356) -------------------------------------- */
void mega_sandwich_table(real *tab, int H, int tc, int tl, int dbar) {
    const int n = dbar / 2;
    const double twopi = 6.283185307179586476925;
    double om[64]; /* the frequencies, hoisted for the usual head widths (dbar <= 128) */
    for (int f = 1; f <= n && f <= 64; f++) om[f - 1] = pow(10000.0, -2.0 * f / dbar);
    for (int i = 0; i < tl; i++) {
        const double d = dist_of(i, tc);
        double s = 0;
        for (int f = 1; f <= n; f++) s += cos(fmod(d * (f <= 64 ? om[f - 1] : pow(10000.0, -2.0 * f / dbar)), twopi));
        s -= n;
        for (int h = 0; h < H; h++) tab[(size_t)h * tl + i] += (real)(s * H / (8.0 * (h + 1)));
    }
}

/* ---- XPOS (Sun et al. 2022, arXiv 2212.10554) ------------------------------------------ */
double mega_xpos_zeta(int i, int dh) { return (2.0 * i + 0.4 * dh) / (1.4 * dh); }

void mega_xpos_table(real *tab, int dh, int dmin, int dmax) {
    const int hp = dh / 2;
    for (int i = 0; i < hp; i++) {
        const double lz = log(mega_xpos_zeta(i, dh)) / MEGA_XPOS_BASE;
        for (int d = dmin; d < dmax; d++) tab[(size_t)(d - dmin) * hp + i] = (real)exp(d * lz);
    }
}

/* ---- MHATW time weighting (PENG Bo's article; RWKV-v1 RWKV_TimeMix) -------------------- */
/* index into logw of table entry idx (d = idx - tc = u - t, delta = -d), clamped (length policy) */
static inline int tw_index(int idx, int tc, int Lw, int Tm) {
    int j = Tm - 1 + (idx - tc);
    return j < 0 ? 0 : (j >= Lw ? Lw - 1 : j);
}

void mega_tw_table(real *tab, int H, int tc, int tl, const real *logw, int Lw, int Tm) {
    for (int h = 0; h < H; h++)
        for (int i = 0; i < tl; i++) tab[(size_t)h * tl + i] += logw[(size_t)h * Lw + tw_index(i, tc, Lw, Tm)];
}

void mega_tw_table_backward(const real *dtab, int H, int tc, int tl, real *dlogw, int Lw, int Tm) {
    for (int h = 0; h < H; h++)
        for (int i = 0; i < tl; i++) dlogw[(size_t)h * Lw + tw_index(i, tc, Lw, Tm)] += dtab[(size_t)h * tl + i];
}

void mega_tw_init_logw(real *logw, int H, int Lw, int Tm) {
    for (int h = 0; h < H; h++) {
        const double lam = h < H - 1 ? pow((double)Tm, -(double)(h + 1) / (H - 1)) : 0.0;
        for (int j = 0; j < Lw; j++) {
            const int delta = Tm - 1 - j; /* negative on the two-sided table's second half */
            logw[(size_t)h * Lw + j] = (real)(-(delta < 0 ? -delta : delta) * lam);
        }
    }
}
