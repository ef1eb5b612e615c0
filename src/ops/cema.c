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
/* a unit walks one block's channels down the time axis (rows D reals apart), which the hardware
 * prefetchers do not follow across pages: once x no longer fits in L2 (B = 4, D = 256, L = 1024
 * in float) the forward ran 10x slower per token than from cache. Prefetching the row PF steps
 * ahead hides that latency. */
#define PF 8
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif
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

/* Per-block workspaces keep each component's rows together ([n][row][CB]): with separate
 * [N][CB] planes, every plane of N = 64 floats x 16 lanes is 4 KiB long, so the rows of one
 * component all fell in the same L1 sets (4 KiB aliasing) and the backward ran 25x slower than
 * the forward. CS is the stride between components in reals. */
enum { C_P, C_QR, C_QI, C_GR, C_GI, C_NROW }; /* coefficient rows */
enum { W_HR, W_HI, W_UR, W_UI, W_DR, W_DI, W_SR, W_SI, W_PR, W_PI, W_ZR, W_ZI, W_NROW }; /* backward rows */

typedef struct {
    real r[NMAX][C_NROW][CB]; /* zero-padded past w, so padded lanes stay 0 */
    real om[CB];
} blk_coef;

static void coef_in(blk_coef *c, const mega_cema_k *k, int d0, int w) {
    const int N = k->N, D = k->D;
    memset(c, 0, sizeof *c);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < w; j++) {
            const size_t o = (size_t)n * D + d0 + j;
            c->r[n][C_P][j] = k->p[o], c->r[n][C_QR][j] = k->qr[o], c->r[n][C_QI][j] = k->qi[o];
            c->r[n][C_GR][j] = k->gr[o], c->r[n][C_GI][j] = k->gi[o];
        }
    for (int j = 0; j < w; j++) c->om[j] = k->omega[d0 + j];
}

/* load/store rows (re at hr + n*cs, im at hi + n*cs) of block d0 from/to a [2][N][D] state */
static void state_in(real *hr, real *hi, size_t cs, const real *st, int N, int D, int d0, int w) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < CB; j++) {
            const int in = st && j < w;
            hr[n * cs + j] = in ? st[(size_t)n * D + d0 + j] : 0;
            hi[n * cs + j] = in ? st[((size_t)N + n) * D + d0 + j] : 0;
        }
}
static void state_out(const real *hr, const real *hi, size_t cs, real *st, int N, int D, int d0, int w) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < w; j++) {
            st[(size_t)n * D + d0 + j] = hr[n * cs + j];
            st[((size_t)N + n) * D + d0 + j] = hi[n * cs + j];
        }
}

/* one step of one component's CB lanes: h = q h + p x; acc += Re(g h) */
static inline void fwd_step(const real *restrict cr, const real *restrict xb, real *restrict h,
                            real *restrict acc) {
    const real *p = cr + C_P * CB, *qr = cr + C_QR * CB, *qi = cr + C_QI * CB, *gr = cr + C_GR * CB,
               *gi = cr + C_GI * CB;
    real *r = h, *m = h + CB;
    for (int j = 0; j < CB; j++) {
        const real nr = qr[j] * r[j] - qi[j] * m[j] + p[j] * xb[j];
        const real ni = qr[j] * m[j] + qi[j] * r[j];
        r[j] = nr, m[j] = ni;
        acc[j] += gr[j] * nr - gi[j] * ni;
    }
}

/* forward of batch element b, block d0 (w channels) */
static void fwd_unit(const mega_cema_k *k, real *y, const real *x, int b, int T, int d0, int w, const real *h0,
                     real *hT) {
    const int N = k->N, D = k->D;
    blk_coef c;
    real h[NMAX][2][CB], xb[CB], acc[CB];
    coef_in(&c, k, d0, w);
    const size_t so = (size_t)b * 2 * N * D;
    state_in(h[0][0], h[0][1], 2 * CB, h0 ? h0 + so : NULL, N, D, d0, w);
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)b * T + t) * D + d0;
        if (t + PF < T) PREFETCH(x + row + (size_t)PF * D), PREFETCH(y + row + (size_t)PF * D);
        for (int j = 0; j < CB; j++) xb[j] = j < w ? x[row + j] : 0, acc[j] = 0;
        for (int n = 0; n < N; n++) fwd_step(c.r[n][0], xb, h[n][0], acc);
        for (int j = 0; j < w; j++) y[row + j] = acc[j] + c.om[j] * xb[j];
    }
    if (hT) state_out(h[0][0], h[0][1], 2 * CB, hT + so, N, D, d0, w);
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

void mega_cema_step(const mega_cema_k *k, real *y, const real *x, int B, real *h) {
    const int N = k->N, D = k->D;
    const real *restrict om = k->omega;
    for (int b = 0; b < B; b++) {
        real *restrict yb = y + (size_t)b * D;
        const real *restrict xb = x + (size_t)b * D;
        real *hb = h + (size_t)b * 2 * N * D;
        for (int d = 0; d < D; d++) yb[d] = 0;
        for (int n = 0; n < N; n++) { /* fwd_step's arithmetic on the D channels of component n */
            const size_t o = (size_t)n * D;
            const real *restrict p = k->p + o, *restrict qr = k->qr + o, *restrict qi = k->qi + o;
            const real *restrict gr = k->gr + o, *restrict gi = k->gi + o;
            real *restrict r = hb + o, *restrict m = hb + (size_t)(N + n) * D;
            for (int d = 0; d < D; d++) {
                const real nr = qr[d] * r[d] - qi[d] * m[d] + p[d] * xb[d];
                const real ni = qr[d] * m[d] + qi[d] * r[d];
                r[d] = nr, m[d] = ni;
                yb[d] += gr[d] * nr - gi[d] * ni;
            }
        }
        for (int d = 0; d < D; d++) yb[d] = yb[d] + om[d] * xb[d];
    }
}

/* backward workspace of a block: per component, the forward-mode state h, u, h' and the
 * accumulators S = sum gy h, P = sum gy u, Z = sum gy h' (complex: re, im rows) */
typedef struct {
    real r[NMAX][W_NROW][CB];
} bwd_ws;

/* one forward-mode step of one component */
static inline void fm_step(const real *restrict cr, const real *restrict xb, const real *restrict gb,
                           real *restrict s) {
    const real *p = cr + C_P * CB, *qr = cr + C_QR * CB, *qi = cr + C_QI * CB;
    real *hr = s + W_HR * CB, *hi = s + W_HI * CB, *ur = s + W_UR * CB, *ui = s + W_UI * CB, *dr = s + W_DR * CB,
         *di = s + W_DI * CB, *Sr = s + W_SR * CB, *Si = s + W_SI * CB, *Pr = s + W_PR * CB, *Pi = s + W_PI * CB,
         *Zr = s + W_ZR * CB, *Zi = s + W_ZI * CB;
    for (int j = 0; j < CB; j++) {
        const real a = qr[j], b = qi[j], h0 = hr[j], h1 = hi[j];
        /* h'_t = q h'_{t-1} + h_{t-1} (derivative of h_t in q) */
        const real d0 = a * dr[j] - b * di[j] + h0, d1 = a * di[j] + b * dr[j] + h1;
        const real n0 = a * h0 - b * h1 + p[j] * xb[j], n1 = a * h1 + b * h0;     /* h_t = q h_{t-1} + p x_t */
        const real u0 = a * ur[j] - b * ui[j] + xb[j], u1 = a * ui[j] + b * ur[j]; /* u_t = q u_{t-1} + x_t */
        dr[j] = d0, di[j] = d1, hr[j] = n0, hi[j] = n1, ur[j] = u0, ui[j] = u1;
        Sr[j] += gb[j] * n0, Si[j] += gb[j] * n1;
        Pr[j] += gb[j] * u0, Pi[j] += gb[j] * u1;
        Zr[j] += gb[j] * d0, Zi[j] += gb[j] * d1;
    }
}

static void bwd_forward_mode(const blk_coef *c, bwd_ws *s, int N, const real *gy, const real *x, int T, int D,
                             size_t base, int w) {
    real xb[CB], gb[CB];
    for (int t = 0; t < T; t++) {
        const size_t row = base + (size_t)t * D;
        if (t + PF < T) PREFETCH(x + row + (size_t)PF * D), PREFETCH(gy + row + (size_t)PF * D);
        for (int j = 0; j < CB; j++) xb[j] = j < w ? x[row + j] : 0, gb[j] = j < w ? gy[row + j] : 0;
        for (int n = 0; n < N; n++) fm_step(c->r[n][0], xb, gb, s->r[n][0]);
    }
}

/* one reverse step of one component: mu = gy + q mu (mu's rows at m, m + CB), acc += p Re(g mu) */
static inline void rev_step(const real *restrict cr, const real *restrict gb, real *restrict m,
                            real *restrict acc) {
    const real *p = cr + C_P * CB, *qr = cr + C_QR * CB, *qi = cr + C_QI * CB, *gr = cr + C_GR * CB,
               *gi = cr + C_GI * CB;
    real *mr = m, *mi = m + CB;
    for (int j = 0; j < CB; j++) {
        const real nr = qr[j] * mr[j] - qi[j] * mi[j] + gb[j], ni = qr[j] * mi[j] + qi[j] * mr[j];
        mr[j] = nr, mi[j] = ni;
        acc[j] += p[j] * (gr[j] * nr - gi[j] * ni);
    }
}

/* reverse adjoint mu_t = gy_t + q mu_{t+1}: dx += Re(sum g p mu) + omega gy; mu_0 is left in the
 * (W_UR, W_UI) rows of s */
static void bwd_reverse(const blk_coef *c, bwd_ws *s, int N, real *dx, const real *gy, int T, int D, size_t base,
                        int w) {
    real gb[CB], acc[CB];
    for (int n = 0; n < N; n++) memset(s->r[n][W_UR], 0, 2 * CB * sizeof(real));
    for (int t = T - 1; t >= 0; t--) {
        const size_t row = base + (size_t)t * D;
        if (t >= PF) PREFETCH(gy + row - (size_t)PF * D), PREFETCH(dx + row - (size_t)PF * D);
        for (int j = 0; j < CB; j++) gb[j] = j < w ? gy[row + j] : 0, acc[j] = 0;
        for (int n = 0; n < N; n++) rev_step(c->r[n][0], gb, s->r[n][W_UR], acc);
        for (int j = 0; j < w; j++) dx[row + j] += acc[j] + c->om[j] * gb[j];
    }
}

static void bwd_block(const mega_cema_k *k, int d0, real *dx, real *dcoef, real *domega, const real *gy,
                      const real *x, int B, int T, const real *h0, real *dh0) {
    const int N = k->N, D = k->D, w = MEGA_MIN(CB, D - d0);
    const size_t S = (size_t)D * N, cs = W_NROW * CB;
    blk_coef c;
    bwd_ws s;
    coef_in(&c, k, d0, w);
    memset(&s, 0, sizeof s);
    for (int b = 0; b < B; b++) {
        const size_t base = (size_t)b * T * D + d0, so = (size_t)b * 2 * N * D;
        state_in(s.r[0][W_HR], s.r[0][W_HI], cs, h0 ? h0 + so : NULL, N, D, d0, w);
        for (int n = 0; n < N; n++) memset(s.r[n][W_UR], 0, 4 * CB * sizeof(real)); /* u, h' rows */
        bwd_forward_mode(&c, &s, N, gy, x, T, D, base, w);
        bwd_reverse(&c, &s, N, dx, gy, T, D, base, w);
        if (h0 && dh0) { /* dh0 = (Re, -Im) of g q mu_0, through the (W_DR, W_DI) rows */
            for (int n = 0; n < N; n++)
                for (int j = 0; j < CB; j++) {
                    const real *cr = c.r[n][0];
                    const real mr = s.r[n][W_UR][j], mi = s.r[n][W_UI][j];
                    const real qmr = cr[C_QR * CB + j] * mr - cr[C_QI * CB + j] * mi;
                    const real qmi = cr[C_QR * CB + j] * mi + cr[C_QI * CB + j] * mr;
                    s.r[n][W_DR][j] = cr[C_GR * CB + j] * qmr - cr[C_GI * CB + j] * qmi;
                    s.r[n][W_DI][j] = -(cr[C_GR * CB + j] * qmi + cr[C_GI * CB + j] * qmr);
                }
            state_out(s.r[0][W_DR], s.r[0][W_DI], cs, dh0 + so, N, D, d0, w);
        }
        for (int t = 0; t < T; t++)
            for (int j = 0; j < w; j++) domega[d0 + j] += gy[base + (size_t)t * D + j] * x[base + (size_t)t * D + j];
    }
    real *dp = dcoef, *dqr = dcoef + S, *dqi = dcoef + 2 * S, *dgr = dcoef + 3 * S, *dgi = dcoef + 4 * S;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < w; j++) {
            const size_t o = (size_t)n * D + d0 + j;
            const real gr = c.r[n][C_GR][j], gi = c.r[n][C_GI][j];
            const real Sr = s.r[n][W_SR][j], Si = s.r[n][W_SI][j], Pr = s.r[n][W_PR][j], Pi = s.r[n][W_PI][j];
            const real Zr = s.r[n][W_ZR][j], Zi = s.r[n][W_ZI][j];
            dgr[o] += Sr, dgi[o] += -Si;        /* L = Re(g S) */
            dp[o] += gr * Pr - gi * Pi;         /* L = Re(g p P) */
            dqr[o] += gr * Zr - gi * Zi;        /* L = Re(g Z(q)), holomorphic in q */
            dqi[o] += -(gr * Zi + gi * Zr);
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
