/* Damped EMA, route A (SPEC §1.3): forward recurrence and reverse-time adjoint. See ema.h. */
#include "ops/ema.h"
#include "ops/ops.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define DB MEGA_EMA_DB
#define SEG MEGA_EMA_SEG

void mega_ema_coef(real *coef, const real *delta, const real *alpha, const real *beta, const real *gamma,
                   int Dp, int N, int K) {
    const size_t S = (size_t)Dp * N;
    real *pb = coef, *q = coef + S, *gs = coef + 2 * S, *qK = coef + 3 * S;
    const double scale = sqrt(1.0 / N);
    for (int r = 0; r < Dp; r++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)r * N + n; /* parameter layout [D', N] */
            size_t o = (size_t)n * Dp + r; /* kernel layout [N, D'] */
            double p = 1.0 / (1.0 + exp(-(double)delta[i]));
            double a = 1.0 / (1.0 + exp(-(double)alpha[i]));
            double qq = 1.0 - p * a; /* (official: q = 1 - p*alpha) */
            pb[o] = (real)(p * beta[i]);
            q[o] = (real)qq;
            gs[o] = (real)(gamma[i] * scale);
            qK[o] = K > 0 ? (real)pow(qq, K) : 0;
        }
}

/* time index of scan step i in direction dir */
static inline int tix(int dir, int T, int i) { return dir > 0 ? i : T - 1 - i; }

/* One direction of the scan for batch b, channels [d0, d0+nd): adds (or sets) e into out.
 * h: N*DB state (in: initial, out: final). */
static void scan_fwd(const mega_ema_k *k, int dir, int rowoff, int b, int d0, int nd, const real *x,
                     const uint8_t *pad, int T, real *out, int set, real *h, real *ck) {
    const int D = k->D, N = k->N, Dp = k->bidir ? 2 * D : D;
    const int trunc = k->K > 0 && k->K < T;
    const int K = k->K;
    const size_t ND = (size_t)N * DB;
    for (int i = 0; i < T; i++) {
        if (ck && i % SEG == 0) memcpy(ck + (size_t)(i / SEG) * ND, h, ND * sizeof(real));
        int t = tix(dir, T, i);
        const real *xt = x + ((size_t)b * T + t) * D + d0;
        real v = (pad && pad[(size_t)b * T + t]) ? 0 : 1;
        real xv[DB], xk[DB], e[DB];
        for (int j = 0; j < nd; j++) xv[j] = xt[j] * v, e[j] = 0;
        int tk = -1;
        if (trunc && i >= K) {
            tk = tix(dir, T, i - K);
            const real *xo = x + ((size_t)b * T + tk) * D + d0;
            real vk = (pad && pad[(size_t)b * T + tk]) ? 0 : 1;
            for (int j = 0; j < nd; j++) xk[j] = xo[j] * vk;
        }
        for (int n = 0; n < N; n++) {
            const size_t o = (size_t)n * Dp + rowoff + d0;
            const real *q = k->q + o, *pb = k->pb + o, *gs = k->gs + o;
            real *hn = h + (size_t)n * DB;
            if (tk >= 0) {
                const real *qK = k->qK + o;
                for (int j = 0; j < nd; j++) {
                    hn[j] = q[j] * hn[j] + pb[j] * (xv[j] - qK[j] * xk[j]);
                    e[j] += gs[j] * hn[j];
                }
            } else {
                for (int j = 0; j < nd; j++) {
                    hn[j] = q[j] * hn[j] + pb[j] * xv[j];
                    e[j] += gs[j] * hn[j];
                }
            }
        }
        real *ot = out + ((size_t)b * T + t) * D + d0;
        if (set)
            for (int j = 0; j < nd; j++) ot[j] = e[j];
        else
            for (int j = 0; j < nd; j++) ot[j] += e[j];
    }
}

static size_t ck_per(const mega_ema_k *k, int T) { return (size_t)((T + SEG - 1) / SEG) * k->N * DB; }

size_t mega_ema_ckpt_size(const mega_ema_k *k, int B, int T) {
    return (size_t)B * ((k->D + DB - 1) / DB) * (k->bidir ? 2 : 1) * ck_per(k, T);
}

/* checkpoints of (b, channel block, direction) */
static real *ck_at(const mega_ema_k *k, const real *ck, int B, int T, int b, int blk, int dir) {
    (void)B;
    if (!ck) return NULL;
    const int nblk = (k->D + DB - 1) / DB, ndir = k->bidir ? 2 : 1;
    return (real *)ck + (((size_t)b * nblk + blk) * ndir + dir) * ck_per(k, T);
}

void mega_ema_forward(const mega_ema_k *k, real *mpre, real *m, const real *x, const uint8_t *pad, int B,
                      int T, real *state, real *ckpt) {
    const int D = k->D, N = k->N;
    const int nblk = (D + DB - 1) / DB;
    const long units = (long)B * nblk;
#pragma omp parallel for schedule(static) if ((size_t)B * T * D * N > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        int b = (int)(u / nblk), d0 = (int)(u % nblk) * DB, nd = MEGA_MIN(DB, D - d0);
        real h[64 * DB]; /* N <= 64 checked by the layer */
        /* forward direction (carried state: layout [B, N, D]) */
        for (int n = 0; n < N; n++)
            for (int j = 0; j < nd; j++)
                h[n * DB + j] = state ? state[((size_t)b * N + n) * D + d0 + j] : 0;
        scan_fwd(k, +1, 0, b, d0, nd, x, pad, T, mpre, 1, h, ck_at(k, ckpt, B, T, b, d0 / DB, 0));
        if (state)
            for (int n = 0; n < N; n++)
                for (int j = 0; j < nd; j++) state[((size_t)b * N + n) * D + d0 + j] = h[n * DB + j];
        if (k->bidir) {
            for (int n = 0; n < N; n++)
                for (int j = 0; j < nd; j++) h[n * DB + j] = 0;
            scan_fwd(k, -1, D, b, d0, nd, x, pad, T, mpre, 0, h, ck_at(k, ckpt, B, T, b, d0 / DB, 1));
        }
        /* mpre = e + omega * x (omega skip uses the un-zeroed input), m = silu(mpre) */
        for (int t = 0; t < T; t++) {
            size_t o = ((size_t)b * T + t) * D + d0;
            for (int j = 0; j < nd; j++) {
                real z = mpre[o + j] + k->omega[d0 + j] * x[o + j];
                mpre[o + j] = z;
                if (m) m[o + j] = mega_silu(z);
            }
        }
    }
}

size_t mega_ema_bwd_scratch(const mega_ema_k *k, int T, int nthreads) {
    size_t nseg = ((size_t)T + SEG - 1) / SEG;
    size_t per = (nseg + SEG + 6) * (size_t)k->N * DB + (size_t)T * DB + 64;
    return per * (size_t)(nthreads > 0 ? nthreads : 1);
}

/* Reverse-time adjoint of one direction for batch b and channel block [d0, d0+nd).
 * acc: 4 arrays of N*DB (d pb, d q, d gs, d qK) accumulated. */
static void scan_bwd(const mega_ema_k *k, int dir, int rowoff, int b, int d0, int nd, real *dx, const real *g,
                     const real *x, const uint8_t *pad, int T, const real *saved, real *ws, real *acc) {
    const int D = k->D, N = k->N, Dp = k->bidir ? 2 * D : D;
    const int trunc = k->K > 0 && k->K < T;
    const int K = k->K;
    const size_t ND = (size_t)N * DB;
    const int nseg = (T + SEG - 1) / SEG;
    /* workspace: [nseg*ND checkpoints (unused when saved) | SEG*ND segment states | ND lambda | T*DB u] */
    real *ck = saved ? (real *)saved : ws; /* state before each segment */
    real *hs = ws + (size_t)nseg * ND;     /* states inside the current segment */
    real *lam = hs + (size_t)SEG * ND;  /* ND */
    real *u = lam + ND;                 /* T * DB: sum_n qK*pb*lambda_i (truncation) */
    real *dpb = acc, *dq = acc + ND, *dgs = acc + 2 * ND, *dqK = acc + 3 * ND;

    /* pass 1: forward recurrence, keep the state at every segment start (skipped when the
     * forward saved the checkpoints) */
    real *h = lam; /* reuse as running state */
    for (size_t i = 0; i < ND; i++) h[i] = 0;
    for (int i = 0; i < (saved ? 0 : T); i++) {
        if (i % SEG == 0) memcpy(ck + (size_t)(i / SEG) * ND, h, ND * sizeof(real));
        int t = tix(dir, T, i);
        const real *xt = x + ((size_t)b * T + t) * D + d0;
        real v = (pad && pad[(size_t)b * T + t]) ? 0 : 1;
        real xv[DB], xk[DB];
        for (int j = 0; j < nd; j++) xv[j] = xt[j] * v, xk[j] = 0;
        if (trunc && i >= K) {
            int tk = tix(dir, T, i - K);
            real vk = (pad && pad[(size_t)b * T + tk]) ? 0 : 1;
            const real *xo = x + ((size_t)b * T + tk) * D + d0;
            for (int j = 0; j < nd; j++) xk[j] = xo[j] * vk;
        }
        for (int n = 0; n < N; n++) {
            const size_t o = (size_t)n * Dp + rowoff + d0;
            const real *q = k->q + o, *pb = k->pb + o, *qK = k->qK + o;
            real *hn = h + (size_t)n * DB;
            if (trunc)
                for (int j = 0; j < nd; j++) hn[j] = q[j] * hn[j] + pb[j] * (xv[j] - qK[j] * xk[j]);
            else
                for (int j = 0; j < nd; j++) hn[j] = q[j] * hn[j] + pb[j] * xv[j];
        }
    }
    /* pass 2: segments in reverse; recompute their states, then run the adjoint
     *   lambda_i = gs*g_i + q*lambda_{i+1} */
    for (size_t i = 0; i < ND; i++) lam[i] = 0;
    for (int c = nseg - 1; c >= 0; c--) {
        int i0 = c * SEG, i1 = MEGA_MIN(T, i0 + SEG);
        /* recompute h_i for i in [i0, i1) into hs[i - i0] */
        const real *hp = ck + (size_t)c * ND;
        for (int i = i0; i < i1; i++) {
            int t = tix(dir, T, i);
            const real *xt = x + ((size_t)b * T + t) * D + d0;
            real v = (pad && pad[(size_t)b * T + t]) ? 0 : 1;
            real xv[DB], xk[DB];
            for (int j = 0; j < nd; j++) xv[j] = xt[j] * v, xk[j] = 0;
            if (trunc && i >= K) {
                int tk = tix(dir, T, i - K);
                real vk = (pad && pad[(size_t)b * T + tk]) ? 0 : 1;
                const real *xo = x + ((size_t)b * T + tk) * D + d0;
                for (int j = 0; j < nd; j++) xk[j] = xo[j] * vk;
            }
            real *hc = hs + (size_t)(i - i0) * ND;
            for (int n = 0; n < N; n++) {
                const size_t o = (size_t)n * Dp + rowoff + d0;
                const real *q = k->q + o, *pb = k->pb + o, *qK = k->qK + o;
                const real *hpn = hp + (size_t)n * DB;
                real *hn = hc + (size_t)n * DB;
                if (trunc)
                    for (int j = 0; j < nd; j++) hn[j] = q[j] * hpn[j] + pb[j] * (xv[j] - qK[j] * xk[j]);
                else
                    for (int j = 0; j < nd; j++) hn[j] = q[j] * hpn[j] + pb[j] * xv[j];
            }
            hp = hc;
        }
        for (int i = i1 - 1; i >= i0; i--) {
            int t = tix(dir, T, i);
            size_t off = ((size_t)b * T + t) * D + d0;
            const real *gt = g + off;
            const real *xt = x + off;
            real v = (pad && pad[(size_t)b * T + t]) ? 0 : 1;
            real xv[DB], xk[DB], sdx[DB], su[DB];
            for (int j = 0; j < nd; j++) xv[j] = xt[j] * v, xk[j] = 0, sdx[j] = 0, su[j] = 0;
            int has_k = trunc && i >= K;
            if (has_k) {
                int tk = tix(dir, T, i - K);
                real vk = (pad && pad[(size_t)b * T + tk]) ? 0 : 1;
                const real *xo = x + ((size_t)b * T + tk) * D + d0;
                for (int j = 0; j < nd; j++) xk[j] = xo[j] * vk;
            }
            const real *hcur = hs + (size_t)(i - i0) * ND;
            const real *hprev = (i > i0) ? hs + (size_t)(i - 1 - i0) * ND : ck + (size_t)c * ND;
            for (int n = 0; n < N; n++) {
                const size_t o = (size_t)n * Dp + rowoff + d0;
                const real *q = k->q + o, *pb = k->pb + o, *gs = k->gs + o, *qK = k->qK + o;
                real *ln = lam + (size_t)n * DB;
                const real *hc = hcur + (size_t)n * DB, *hq = hprev + (size_t)n * DB;
                real *a_pb = dpb + (size_t)n * DB, *a_q = dq + (size_t)n * DB, *a_gs = dgs + (size_t)n * DB,
                     *a_qK = dqK + (size_t)n * DB;
                for (int j = 0; j < nd; j++) {
                    real l = gs[j] * gt[j] + q[j] * ln[j];
                    ln[j] = l;
                    a_gs[j] += gt[j] * hc[j];
                    a_q[j] += l * hq[j];
                    a_pb[j] += l * xv[j];
                    sdx[j] += pb[j] * l;
                }
                if (trunc) {
                    for (int j = 0; j < nd; j++) {
                        su[j] += qK[j] * pb[j] * ln[j];
                        if (has_k) {
                            a_pb[j] -= ln[j] * qK[j] * xk[j];
                            a_qK[j] -= pb[j] * ln[j] * xk[j];
                        }
                    }
                }
            }
            if (trunc) {
                real *ui = u + (size_t)i * DB;
                for (int j = 0; j < nd; j++) ui[j] = su[j];
                if (i + K < T) {
                    const real *uk = u + (size_t)(i + K) * DB;
                    for (int j = 0; j < nd; j++) sdx[j] -= uk[j];
                }
            }
            real *dxt = dx + off;
            for (int j = 0; j < nd; j++) dxt[j] += v * sdx[j];
        }
    }
}

void mega_ema_backward(const mega_ema_k *k, real *dx, real *dcoef, real *domega, const real *g, const real *x,
                       const uint8_t *pad, int B, int T, const real *ckpt, real *scratch, int nthreads) {
    const int D = k->D, N = k->N, Dp = k->bidir ? 2 * D : D;
    const int nblk = (D + DB - 1) / DB;
    const size_t per = mega_ema_bwd_scratch(k, T, 1);
    const size_t ND = (size_t)N * DB;
    const size_t S = (size_t)Dp * N;
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel for schedule(static) num_threads(nthreads) if ((size_t)B * T * D * N > MEGA_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        real *ws = scratch + per * (size_t)tid;
        int d0 = blk * DB, nd = MEGA_MIN(DB, D - d0);
        real *acc = ws + (per - 4 * ND); /* last 4*ND reals of the thread's slice */
        for (int dir = 0; dir < (k->bidir ? 2 : 1); dir++) {
            for (size_t i = 0; i < 4 * ND; i++) acc[i] = 0;
            for (int b = 0; b < B; b++)
                scan_bwd(k, dir == 0 ? +1 : -1, dir == 0 ? 0 : D, b, d0, nd, dx, g, x, pad, T, ck_at(k, ckpt, B, T, b, blk, dir),
                         ws, acc);
            for (int n = 0; n < N; n++)
                for (int j = 0; j < nd; j++) {
                    size_t o = (size_t)n * Dp + (dir ? D : 0) + d0 + j;
                    dcoef[o] += acc[(size_t)n * DB + j];
                    dcoef[S + o] += acc[ND + (size_t)n * DB + j];
                    dcoef[2 * S + o] += acc[2 * ND + (size_t)n * DB + j];
                    dcoef[3 * S + o] += acc[3 * ND + (size_t)n * DB + j];
                }
        }
        /* omega skip: dx += omega*g, domega += sum g*x (raw x) */
        real s[DB] = {0};
        const real *om = k->omega + d0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t o = ((size_t)b * T + t) * D + d0;
                for (int j = 0; j < nd; j++) {
                    dx[o + j] += om[j] * g[o + j];
                    s[j] += g[o + j] * x[o + j];
                }
            }
        for (int j = 0; j < nd; j++) domega[d0 + j] += s[j];
    }
}

void mega_ema_coef_backward(const real *dcoef, const real *delta, const real *alpha, const real *beta,
                            const real *gamma, real *ddelta, real *dalpha, real *dbeta, real *dgamma, int Dp,
                            int N, int K) {
    const size_t S = (size_t)Dp * N;
    const double scale = sqrt(1.0 / N);
    for (int r = 0; r < Dp; r++)
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)r * N + n, o = (size_t)n * Dp + r;
            double p = 1.0 / (1.0 + exp(-(double)delta[i]));
            double a = 1.0 / (1.0 + exp(-(double)alpha[i]));
            double q = 1.0 - p * a;
            double d_pb = dcoef[o], d_q = dcoef[S + o], d_gs = dcoef[2 * S + o], d_qK = dcoef[3 * S + o];
            if (K > 0) d_q += d_qK * K * pow(q, K - 1); /* qK = q^K */
            /* pb = p*beta, q = 1 - p*a, gs = gamma*scale (SPEC §1.5, route A) */
            double dp = d_pb * beta[i] - d_q * a;
            double da = -d_q * p;
            dbeta[i] += (real)(d_pb * p);
            ddelta[i] += (real)(dp * p * (1 - p));
            dalpha[i] += (real)(da * a * (1 - a));
            dgamma[i] += (real)(d_gs * scale);
        }
}
