/* Complex EMA as a sequential recurrence: forward, forward-mode parameter gradients and the
 * reverse-time adjoint. See cema.h for the equations.
 *
 * Layout of the work (the real EMA's, ops/ema.c, without its register blocking): channels in
 * blocks of CB; a block's state and accumulators live in [N][CB] planes on the stack and time is
 * walked with the row segments x[b, t, block] read contiguously; the innermost loops run over the
 * block's channels (vectorised by the compiler). Forward units are (batch element, block);
 * backward units are blocks, each owning its channels' parameter gradients (so the result does
 * not depend on the thread count). */
#include "ops/cema.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define CB 16   /* channels per block */
#define NMAX 64 /* N <= 64 (checked by the layer) */

void mega_cema_coef(real *coef, const real *alpha, const real *delta, const real *theta, const real *gamma, int D,
                    int N) {
    const size_t S = (size_t)D * N;
    real *p = coef, *qr = coef + S, *qi = coef + 2 * S, *gr = coef + 3 * S, *gi = coef + 4 * S;
    const double scale = sqrt(1.0 / N), two_pi = 2.0 * 3.14159265358979323846;
    for (int d = 0; d < D; d++) {
        /* official _calc_coeffs: theta = sigmoid(theta) * 2 pi / N, times the wavelets 1..N */
        const double th = 1.0 / (1.0 + exp(-(double)theta[d])) * two_pi / N;
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)d * N + n, o = (size_t)n * D + d;
            const double a = 1.0 / (1.0 + exp(-(double)alpha[i])), dl = 1.0 / (1.0 + exp(-(double)delta[i]));
            const double r = 1.0 - a * dl, phi = (n + 1) * th; /* q = polar(1 - alpha*delta, theta) */
            p[o] = (real)a;
            qr[o] = (real)(r * cos(phi)), qi[o] = (real)(r * sin(phi));
            gr[o] = (real)(gamma[2 * i] * scale), gi[o] = (real)(gamma[2 * i + 1] * scale);
        }
    }
}

mega_cema_k mega_cema_kernel(const real *coef, const real *omega, int D, int N) {
    const size_t S = (size_t)D * N;
    mega_cema_k k = {D, N, coef, coef + S, coef + 2 * S, coef + 3 * S, coef + 4 * S, omega};
    return k;
}

/* load/store the [N][w] planes (re, im) of block d0 from/to a [2][N][D] state (or zeros) */
static void state_in(real *hr, real *hi, const real *st, int N, int D, int d0, int w) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < CB; j++) {
            const int in = st && j < w;
            hr[n * CB + j] = in ? st[(size_t)n * D + d0 + j] : 0;
            hi[n * CB + j] = in ? st[((size_t)N + n) * D + d0 + j] : 0;
        }
}
static void state_out(const real *hr, const real *hi, real *st, int N, int D, int d0, int w) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < w; j++) {
            st[(size_t)n * D + d0 + j] = hr[n * CB + j];
            st[((size_t)N + n) * D + d0 + j] = hi[n * CB + j];
        }
}

/* the block's coefficients as [N][CB] planes (zero-padded past w, so padded lanes stay 0) */
typedef struct {
    real p[NMAX * CB], qr[NMAX * CB], qi[NMAX * CB], gr[NMAX * CB], gi[NMAX * CB], om[CB];
} blk_coef;

static void coef_in(blk_coef *c, const mega_cema_k *k, int d0, int w) {
    const int N = k->N, D = k->D;
    memset(c, 0, sizeof *c);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < w; j++) {
            const size_t o = (size_t)n * D + d0 + j;
            c->p[n * CB + j] = k->p[o], c->qr[n * CB + j] = k->qr[o], c->qi[n * CB + j] = k->qi[o];
            c->gr[n * CB + j] = k->gr[o], c->gi[n * CB + j] = k->gi[o];
        }
    for (int j = 0; j < w; j++) c->om[j] = k->omega[d0 + j];
}

/* forward of batch element b, block d0 (w channels) */
static void fwd_unit(const mega_cema_k *k, real *y, const real *x, int b, int T, int d0, int w, const real *h0,
                     real *hT) {
    const int N = k->N, D = k->D;
    blk_coef c;
    real hr[NMAX * CB], hi[NMAX * CB], xb[CB], acc[CB];
    coef_in(&c, k, d0, w);
    const size_t so = (size_t)b * 2 * N * D;
    state_in(hr, hi, h0 ? h0 + so : NULL, N, D, d0, w);
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)b * T + t) * D + d0;
        for (int j = 0; j < CB; j++) xb[j] = j < w ? x[row + j] : 0, acc[j] = 0;
        for (int n = 0; n < N; n++) {
            real *r = hr + n * CB, *m = hi + n * CB;
            const real *p = c.p + n * CB, *qr = c.qr + n * CB, *qi = c.qi + n * CB, *gr = c.gr + n * CB,
                       *gi = c.gi + n * CB;
            for (int j = 0; j < CB; j++) { /* h = q h + p x;  acc += Re(g h) */
                const real nr = qr[j] * r[j] - qi[j] * m[j] + p[j] * xb[j];
                const real ni = qr[j] * m[j] + qi[j] * r[j];
                r[j] = nr, m[j] = ni;
                acc[j] += gr[j] * nr - gi[j] * ni;
            }
        }
        for (int j = 0; j < w; j++) y[row + j] = acc[j] + c.om[j] * xb[j];
    }
    if (hT) state_out(hr, hi, hT + so, N, D, d0, w);
}

void mega_cema_forward(const mega_cema_k *k, real *y, const real *x, int B, int T, const real *h0, real *hT) {
    MEGA_ASSERT(k->N >= 1 && k->N <= NMAX);
    const int nblk = (k->D + CB - 1) / CB;
    const long units = (long)B * nblk;
    const int par = (size_t)B * T * k->D * k->N > MEGA_PAR_MIN && units > 1;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (par)
#endif
    for (long u = 0; u < units; u++) {
        const int b = (int)(u / nblk), d0 = (int)(u % nblk) * CB;
        fwd_unit(k, y, x, b, T, d0, MEGA_MIN(CB, k->D - d0), h0, hT);
    }
    (void)par;
}

/* forward-mode pass of batch element b over block d0: accumulates S = sum gy h, P = sum gy u,
 * Z = sum gy dh/dq (complex, planes [N][CB]) */
typedef struct {
    real hr[NMAX * CB], hi[NMAX * CB], ur[NMAX * CB], ui[NMAX * CB], dr[NMAX * CB], di[NMAX * CB];
    real Sr[NMAX * CB], Si[NMAX * CB], Pr[NMAX * CB], Pi[NMAX * CB], Zr[NMAX * CB], Zi[NMAX * CB];
} bwd_ws;

static void bwd_forward_mode(const blk_coef *c, bwd_ws *s, int N, const real *gy, const real *x, int T, int D,
                             size_t base, int w) {
    real xb[CB], gb[CB];
    for (int t = 0; t < T; t++) {
        const size_t row = base + (size_t)t * D;
        for (int j = 0; j < CB; j++) xb[j] = j < w ? x[row + j] : 0, gb[j] = j < w ? gy[row + j] : 0;
        for (int n = 0; n < N; n++) {
            const int o = n * CB;
            for (int j = 0; j < CB; j++) {
                const real qr = c->qr[o + j], qi = c->qi[o + j], hr = s->hr[o + j], hi = s->hi[o + j];
                /* h'_t = q h'_{t-1} + h_{t-1} (derivative of h_t in q) */
                const real dr = qr * s->dr[o + j] - qi * s->di[o + j] + hr;
                const real di = qr * s->di[o + j] + qi * s->dr[o + j] + hi;
                const real nr = qr * hr - qi * hi + c->p[o + j] * xb[j], ni = qr * hi + qi * hr;
                const real ur = qr * s->ur[o + j] - qi * s->ui[o + j] + xb[j];
                const real ui = qr * s->ui[o + j] + qi * s->ur[o + j];
                s->dr[o + j] = dr, s->di[o + j] = di, s->hr[o + j] = nr, s->hi[o + j] = ni;
                s->ur[o + j] = ur, s->ui[o + j] = ui;
                s->Sr[o + j] += gb[j] * nr, s->Si[o + j] += gb[j] * ni;
                s->Pr[o + j] += gb[j] * ur, s->Pi[o + j] += gb[j] * ui;
                s->Zr[o + j] += gb[j] * dr, s->Zi[o + j] += gb[j] * di;
            }
        }
    }
}

/* reverse adjoint mu_t = gy_t + q mu_{t+1}: dx += Re(sum g p mu) + omega gy; returns mu_0 in mr, mi */
static void bwd_reverse(const blk_coef *c, int N, real *dx, const real *gy, int T, int D, size_t base, int w,
                        real *mr, real *mi) {
    real gb[CB], acc[CB];
    for (int i = 0; i < N * CB; i++) mr[i] = mi[i] = 0;
    for (int t = T - 1; t >= 0; t--) {
        const size_t row = base + (size_t)t * D;
        for (int j = 0; j < CB; j++) gb[j] = j < w ? gy[row + j] : 0, acc[j] = 0;
        for (int n = 0; n < N; n++) {
            const int o = n * CB;
            for (int j = 0; j < CB; j++) {
                const real qr = c->qr[o + j], qi = c->qi[o + j];
                const real nr = qr * mr[o + j] - qi * mi[o + j] + gb[j], ni = qr * mi[o + j] + qi * mr[o + j];
                mr[o + j] = nr, mi[o + j] = ni;
                acc[j] += c->p[o + j] * (c->gr[o + j] * nr - c->gi[o + j] * ni);
            }
        }
        for (int j = 0; j < w; j++) dx[row + j] += acc[j] + c->om[j] * gb[j];
    }
}

static void bwd_block(const mega_cema_k *k, int d0, real *dx, real *dcoef, real *domega, const real *gy,
                      const real *x, int B, int T, const real *h0, real *dh0) {
    const int N = k->N, D = k->D, w = MEGA_MIN(CB, D - d0);
    const size_t S = (size_t)D * N;
    blk_coef c;
    bwd_ws s;
    coef_in(&c, k, d0, w);
    memset(&s, 0, sizeof s);
    for (int b = 0; b < B; b++) {
        const size_t base = (size_t)b * T * D + d0, so = (size_t)b * 2 * N * D;
        state_in(s.hr, s.hi, h0 ? h0 + so : NULL, N, D, d0, w);
        memset(s.ur, 0, sizeof s.ur), memset(s.ui, 0, sizeof s.ui);
        memset(s.dr, 0, sizeof s.dr), memset(s.di, 0, sizeof s.di);
        bwd_forward_mode(&c, &s, N, gy, x, T, D, base, w);
        /* mu_0 reuses the u planes (no longer needed for this b) */
        bwd_reverse(&c, N, dx, gy, T, D, base, w, s.ur, s.ui);
        if (h0 && dh0) { /* dh0 = (Re, -Im) of g q mu_0 */
            for (int i = 0; i < N * CB; i++) {
                const real qmr = c.qr[i] * s.ur[i] - c.qi[i] * s.ui[i], qmi = c.qr[i] * s.ui[i] + c.qi[i] * s.ur[i];
                s.dr[i] = c.gr[i] * qmr - c.gi[i] * qmi;
                s.di[i] = -(c.gr[i] * qmi + c.gi[i] * qmr);
            }
            state_out(s.dr, s.di, dh0 + so, N, D, d0, w);
        }
        for (int t = 0; t < T; t++)
            for (int j = 0; j < w; j++) domega[d0 + j] += gy[base + (size_t)t * D + j] * x[base + (size_t)t * D + j];
    }
    real *dp = dcoef, *dqr = dcoef + S, *dqi = dcoef + 2 * S, *dgr = dcoef + 3 * S, *dgi = dcoef + 4 * S;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < w; j++) {
            const int i = n * CB + j;
            const size_t o = (size_t)n * D + d0 + j;
            const real gr = c.gr[i], gi = c.gi[i];
            dgr[o] += s.Sr[i], dgi[o] += -s.Si[i];      /* L = Re(g S) */
            dp[o] += gr * s.Pr[i] - gi * s.Pi[i];       /* L = Re(g p P) */
            dqr[o] += gr * s.Zr[i] - gi * s.Zi[i];      /* L = Re(g Z(q)), holomorphic in q */
            dqi[o] += -(gr * s.Zi[i] + gi * s.Zr[i]);
        }
}

void mega_cema_backward(const mega_cema_k *k, real *dx, real *dcoef, real *domega, const real *gy, const real *x,
                        int B, int T, const real *h0, real *dh0) {
    MEGA_ASSERT(k->N >= 1 && k->N <= NMAX);
    const int nblk = (k->D + CB - 1) / CB;
    const int par = (size_t)B * T * k->D * k->N > MEGA_PAR_MIN && nblk > 1;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (par)
#endif
    for (int bi = 0; bi < nblk; bi++) bwd_block(k, bi * CB, dx, dcoef, domega, gy, x, B, T, h0, dh0);
    (void)par;
}

void mega_cema_coef_backward(const real *dcoef, const real *alpha, const real *delta, const real *theta,
                             real *dalpha, real *ddelta, real *dtheta, real *dgamma, int D, int N) {
    const size_t S = (size_t)D * N;
    const real *dp = dcoef, *dqr = dcoef + S, *dqi = dcoef + 2 * S, *dgr = dcoef + 3 * S, *dgi = dcoef + 4 * S;
    const double scale = sqrt(1.0 / N), two_pi = 2.0 * 3.14159265358979323846;
    for (int d = 0; d < D; d++) {
        const double s = 1.0 / (1.0 + exp(-(double)theta[d])), th = s * two_pi / N;
        double dth = 0;
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)d * N + n, o = (size_t)n * D + d;
            const double a = 1.0 / (1.0 + exp(-(double)alpha[i])), dl = 1.0 / (1.0 + exp(-(double)delta[i]));
            const double r = 1.0 - a * dl, phi = (n + 1) * th, cs = cos(phi), sn = sin(phi);
            /* q = r e^{i phi}: dr = dqr cos + dqi sin, dphi = r (dqi cos - dqr sin) */
            const double dr = dqr[o] * cs + dqi[o] * sn, dphi = r * (dqi[o] * cs - dqr[o] * sn);
            dalpha[i] += (real)((dp[o] - dr * dl) * a * (1 - a)); /* p = a, r = 1 - a dl */
            ddelta[i] += (real)(-dr * a * dl * (1 - dl));
            dth += dphi * (n + 1);
            dgamma[2 * i] += (real)(dgr[o] * scale), dgamma[2 * i + 1] += (real)(dgi[o] * scale);
        }
        dtheta[d] += (real)(dth * two_pi / N * s * (1 - s));
    }
}
