/* Damped EMA as a sequential recurrence: forward and reverse-time adjoint. See ema.h.
 *
 * How the work is laid out (forward and backward alike):
 *  - a channel block of DB channels is one vector `vreal` (one AVX-512 register of floats);
 *  - a call works on ranges of up to GMAX consecutive channel blocks, walking time in chunks of
 *    TC steps: each chunk's rows x[b, t, range] (and g, dx, mpre, m) are read and written as
 *    contiguous row segments, all blocks of the range at once, and gathered into [block][TC][DB]
 *    buffers (pad mask applied there). Walking one block's channels down the time axis instead
 *    (stride D) was memory-latency bound: hardware prefetchers do not follow it, and it ran at
 *    about half the speed of the same work on contiguous rows;
 *  - per block, components n are processed in groups of NG whose recurrence state, coefficients
 *    and gradient accumulators stay in registers for the whole chunk (the group kernels have
 *    compile-time trip counts and private pointers); the per-step sum over n (e_t, or the dx
 *    contribution) goes through the chunk buffer;
 *  - a partial last block (D not a multiple of DB) runs the same kernels on zero-padded
 *    coefficients and inputs: its padded lanes stay 0 and are never written out.
 * The backward needs no forward state at all (see the derivation before bwd_group).
 *
 * The vector type is the GNU vector extension (gcc and clang); other compilers, or
 * -DMEGA_EMA_PORTABLE, get a struct of DB reals with the same operations as plain loops. No
 * intrinsics. Multiply-adds are written a*b + c and left to the compiler's contraction setting
 * (off for gcc in ISO C mode): on Zen 4 separate multiplies and adds issue on separate pipes, so
 * fusing measured no faster, and the forward stays bit-identical to the plain per-element loop.
 */
#include "ops/ema.h"
#include "ops/ops.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define DB MEGA_EMA_DB
#define TC 16   /* time steps per chunk */
#define GMAX 16 /* channel blocks per range: 1 KiB row segments of floats with AVX-512 */
/* components per register group: with 32 vector registers (AVX-512) the backward's group of 4
 * holds 4 x (q, c, mu, mu', A1, A2) + g, x, sum = 27 registers */
#if MEGA_EMA_VBYTES >= 64
#define NG 4
#else
#define NG 2
#endif
#define NGT (NG > 2 ? NG / 2 : NG) /* truncated backward: 9 vectors per component */
#define NMAX 64                      /* N <= 64 (checked by the layer) */
#define FWD_WS 16384                 /* reals of the forward's workspace (on the stack) */
_Static_assert((3 * TC + 5 * NMAX) * DB <= FWD_WS, "the forward workspace holds at least one block");

/* ---- one channel block as a value: GNU vector extension (gcc, clang), portable fallback ---- */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(MEGA_EMA_PORTABLE)
typedef real vreal __attribute__((vector_size(MEGA_EMA_VBYTES)));
/* the same vector at any real-aligned address, allowed to alias real arrays */
typedef real vreal_u __attribute__((vector_size(MEGA_EMA_VBYTES), aligned(sizeof(real)), may_alias));
#define VLD(p) (*(const vreal_u *)(const void *)(p))
#define VST(p, v) (*(vreal_u *)(void *)(p) = (v))
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VMUL(a, b) ((a) * (b))
#define VSUB(a, b) ((a) - (b))
#define VADD(a, b) ((a) + (b))
#define VSET1(s) ((vreal){0} + (real)(s)) /* every lane = s */
#define KERNEL static inline __attribute__((always_inline))
#else
typedef struct {
    real v[DB];
} vreal;
static inline vreal vld_(const real *p) {
    vreal r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static inline vreal vfma_(vreal a, vreal b, vreal c) {
    for (int j = 0; j < DB; j++) c.v[j] = a.v[j] * b.v[j] + c.v[j];
    return c;
}
static inline vreal vmul_(vreal a, vreal b) {
    for (int j = 0; j < DB; j++) a.v[j] *= b.v[j];
    return a;
}
static inline vreal vsub_(vreal a, vreal b) {
    for (int j = 0; j < DB; j++) a.v[j] -= b.v[j];
    return a;
}
static inline vreal vadd_(vreal a, vreal b) {
    for (int j = 0; j < DB; j++) a.v[j] += b.v[j];
    return a;
}
static inline vreal vset1_(real s) {
    vreal r;
    for (int j = 0; j < DB; j++) r.v[j] = s;
    return r;
}
#define VLD(p) vld_(p)
#define VST(p, x) memcpy((p), (x).v, sizeof(x).v)
#define VFMA(a, b, c) vfma_(a, b, c)
#define VMUL(a, b) vmul_(a, b)
#define VSUB(a, b) vsub_(a, b)
#define VADD(a, b) vadd_(a, b)
#define VSET1(s) vset1_(s)
#define KERNEL static inline
#endif

/* a row of one block: the vector statement when the block is full, else the scalar statement for
 * j < w (a plain 16-step loop is fully unrolled by gcc before vectorisation and, with several
 * pointers that may alias, left as scalar code) */
#define ROWV(w, vstmt, sstmt)                                                                               \
    do {                                                                                                    \
        if ((w) == DB) {                                                                                    \
            vstmt;                                                                                          \
        } else {                                                                                            \
            for (int j = 0; j < (w); j++) { sstmt; }                                                        \
        }                                                                                                   \
    } while (0)

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

/* time index of scan step i in direction dir (0: forward, 1: the backward direction of a
 * bidirectional EMA, which scans from the end) */
static inline int tix(int dir, int T, int i) { return dir == 0 ? i : T - 1 - i; }

/* ranges: nr nearly equal runs of consecutive channel blocks; range r = [rlo(r), rlo(r+1)) */
static inline int rlo(int nblk, int nr, int r) { return (int)((long)nblk * r / nr); }

/* ------------------------------------------------------------------------------------------
 * Forward: one chunk of len steps for the ng components whose first state and coefficient rows
 * are h, q, pb, gs, qK, component k's rows k*hs (state) and k*cs (coefficients) further on:
 *     h = q*h + pb*(x~_i - qK*x~_{i-K})        e_i += gs*h
 * (the damped EMA of the Mega paper §3.1, in the official exponential_moving_average.py
 * parametrisation; the qK term is the truncated kernel's window, see ema.h).
 * xb, xkb, eb: [len][DB] (x~_i, x~_{i-K}, e_i). ng and trunc are constants at every call; the
 * strides are read only when the group's registers are loaded and stored, once per chunk.
 * Per element these are the operations of the plain loop, in the same order (e summed over n in
 * order from 0), so the blocking does not change the forward's results. */
KERNEL void fwd_group(const int ng, const int trunc, const int len, const real *xb, const real *xkb, real *eb,
                      const real *q, const real *pb, const real *gs, const real *qK, size_t cs, real *h,
                      size_t hs) {
    vreal vq[NG], vpb[NG], vgs[NG], vqK[NG], vh[NG];
    for (int k = 0; k < ng; k++) {
        const size_t r = (size_t)k * cs;
        vq[k] = VLD(q + r), vpb[k] = VLD(pb + r), vgs[k] = VLD(gs + r), vh[k] = VLD(h + (size_t)k * hs);
        if (trunc)
            vqK[k] = VLD(qK + r);
        else /* unused; set so that no compiler sees it uninitialised */
            vqK[k] = vq[k];
    }
    for (int i = 0; i < len; i++) {
        vreal x = VLD(xb + (size_t)i * DB), e = VLD(eb + (size_t)i * DB);
        if (trunc) {
            vreal xk = VLD(xkb + (size_t)i * DB);
            for (int k = 0; k < ng; k++) {
                vh[k] = VFMA(vq[k], vh[k], VMUL(vpb[k], VSUB(x, VMUL(vqK[k], xk))));
                e = VFMA(vgs[k], vh[k], e);
            }
        } else {
            for (int k = 0; k < ng; k++) {
                vh[k] = VFMA(vq[k], vh[k], VMUL(vpb[k], x));
                e = VFMA(vgs[k], vh[k], e);
            }
        }
        VST(eb + (size_t)i * DB, e);
    }
    for (int k = 0; k < ng; k++) VST(h + (size_t)k * hs, vh[k]);
}

/* where the kernels find one block's state and coefficient rows [n][.] and the rows' strides:
 * the compact copy in the workspace (stride DB), or the caller's arrays read in place (the
 * [B, N, D] state: stride D; the [n][D'] coefficients: stride D') */
typedef struct {
    real *h;
    const real *q, *pb, *gs, *qK;
    size_t hs, cs;
    int h_ws; /* the state is the workspace copy (to be written back to a carried state) */
} fwd_blk;

/* one chunk of nb blocks (chunk rows xb, xkb, eb of block bi at bi*TC*DB), all N components:
 * per block, groups of NG in order of n, then the rest one at a time. Either block by block (a
 * block's chunk rows stay in L1 over its groups), or, when the blocks' state and coefficients are
 * read in place (across), group by group over the blocks, so that successive loads walk each row
 * of the [n][D'] arrays through adjacent blocks, contiguous memory the prefetchers follow, instead
 * of jumping D' reals from row to row (measured: twice as slow at decode's B = 8). Each block's e
 * is summed over n in the same order either way. */
static void fwd_chunk(int N, int trunc, int len, int nb, int across, const real *xb, const real *xkb, real *eb,
                      const fwd_blk *fb) {
    const size_t CB = (size_t)TC * DB;
#define FWD_GROUP(NGC, TR)                                                                                  \
    fwd_group(NGC, TR, len, xb + bi * CB, xkb + bi * CB, eb + bi * CB, fb[bi].q + n * fb[bi].cs,               \
              fb[bi].pb + n * fb[bi].cs, fb[bi].gs + n * fb[bi].cs, fb[bi].qK + n * fb[bi].cs, fb[bi].cs,       \
              fb[bi].h + n * fb[bi].hs, fb[bi].hs)
#define FWD_ALL(TR)                                                                                         \
    do {                                                                                                    \
        if (across) {                                                                                       \
            int n = 0;                                                                                      \
            for (; n + NG <= N; n += NG)                                                                    \
                for (int bi = 0; bi < nb; bi++) FWD_GROUP(NG, TR);                                          \
            for (; n < N; n++)                                                                              \
                for (int bi = 0; bi < nb; bi++) FWD_GROUP(1, TR);                                           \
        } else {                                                                                            \
            for (int bi = 0; bi < nb; bi++) {                                                               \
                int n = 0;                                                                                  \
                for (; n + NG <= N; n += NG) FWD_GROUP(NG, TR);                                             \
                for (; n < N; n++) FWD_GROUP(1, TR);                                                        \
            }                                                                                               \
        }                                                                                                   \
    } while (0)
    if (trunc)
        FWD_ALL(1);
    else
        FWD_ALL(0);
#undef FWD_ALL
#undef FWD_GROUP
}

/* forward workspace reals of a range of nb blocks: x~, x~_{-K} and e chunks, and per block the
 * state and the coefficients q, pb, gs, qK */
static size_t fwd_ws(int N, int nb) { return (size_t)nb * (3 * TC + 5 * N) * DB; }

/* blocks per range whose workspace fits FWD_WS */
static int fwd_gmax(int N) {
    int G = 1;
    while (G < GMAX && fwd_ws(N, G + 1) <= FWD_WS) G++;
    return G;
}

/* forward of batch element b over channel blocks [blo, bhi) (at most fwd_gmax blocks), every
 * direction; the omega skip and silu are applied as the last direction's rows are written.
 * ws: fwd_ws reals. */
static void fwd_range(const mega_ema_k *k, int b, int blo, int bhi, real *mpre, real *m, const real *x,
                      const uint8_t *pad, int T, real *state, real *ws) {
    const int D = k->D, N = k->N, Dp = k->bidir ? 2 * D : D, ndir = k->bidir ? 2 : 1;
    const int nb = bhi - blo, c0 = blo * DB, nl = MEGA_MIN(D, bhi * DB) - (bhi - 1) * DB;
    const int cw = (nb - 1) * DB + nl; /* channels in the range */
    const int trunc = k->K > 0 && k->K < T, K = k->K;
    const size_t CB = (size_t)TC * DB, NB = (size_t)N * DB;
    /* Where the kernels read a block's state and coefficients. Over several chunks, a compact
     * copy per block, hb + bi*5*NB: state, then q, pb, gs, qK [N][DB] (the rows of the [n][D']
     * arrays are D' apart, and N of them in one cache-set group would evict each other between
     * chunks). Within one chunk (T <= TC: the streaming step, decode's T = 1) each state and
     * coefficient element is read once, so a copy would only add passes over them (at T = 1,
     * D 256, N 16 the step measured 8 times slower with the copy): a full block then reads them
     * in place. A partial block (D not a multiple of DB) always takes the copy, whose padded
     * lanes are zero. */
    const int inplace = T <= TC;
    fwd_blk fb[GMAX];
    real *xb = ws, *xkb = xb + nb * CB, *eb = xkb + nb * CB, *hb = eb + nb * CB;
    if (nl < DB) { /* the partial block's padded lanes stay 0 (in the rows this call uses) */
        const size_t rows = (size_t)MEGA_MIN(T, TC) * DB;
        memset(xb + (nb - 1) * CB, 0, rows * sizeof(real));
        memset(xkb + (nb - 1) * CB, 0, rows * sizeof(real));
    }
    for (int dir = 0; dir < ndir; dir++) {
        const int rowoff = dir ? D : 0, last = dir == ndir - 1;
        const real *src[4] = {k->q, k->pb, k->gs, k->qK};
        for (int bi = 0; bi < nb; bi++) {
            const int w = bi == nb - 1 ? nl : DB, direct = inplace && w == DB;
            real *hw = hb + bi * 5 * NB;
            fwd_blk *f = &fb[bi];
            /* state: the carried [B, N, D] rows (direction 0) or zero */
            real *st = (dir == 0 && state) ? state + (size_t)b * N * D + c0 + bi * DB : NULL;
            if (st && direct) {
                f->h = st, f->hs = (size_t)D, f->h_ws = 0;
            } else {
                for (int n = 0; n < N; n++)
                    for (int j = 0; j < DB; j++) hw[n * DB + j] = st && j < w ? st[(size_t)n * D + j] : 0;
                f->h = hw, f->hs = DB, f->h_ws = 1;
            }
            if (direct) {
                const size_t o = (size_t)rowoff + c0 + bi * DB;
                f->q = k->q + o, f->pb = k->pb + o, f->gs = k->gs + o, f->qK = k->qK + o, f->cs = (size_t)Dp;
            } else {
                for (int a = 0; a < 4; a++)
                    for (int n = 0; n < N; n++) {
                        const real *cs = src[a] + (size_t)n * Dp + rowoff + c0 + bi * DB;
                        real *cd = hw + (1 + a) * NB + n * DB;
                        for (int j = 0; j < DB; j++) cd[j] = j < w ? cs[j] : 0;
                    }
                f->q = hw + NB, f->pb = hw + 2 * NB, f->gs = hw + 3 * NB, f->qK = hw + 4 * NB, f->cs = DB;
            }
        }
        for (int i0 = 0; i0 < T; i0 += TC) {
            const int len = MEGA_MIN(TC, T - i0);
            for (int ii = 0; ii < len; ii++) {
                const int i = i0 + ii, t = tix(dir, T, i);
                const real *xt = x + ((size_t)b * T + t) * D + c0;
                const real v = (pad && pad[(size_t)b * T + t]) ? 0 : 1;
                const real *xo = NULL;
                real vk = 0;
                if (trunc && i >= K) {
                    const int tk = tix(dir, T, i - K);
                    xo = x + ((size_t)b * T + tk) * D + c0;
                    vk = (pad && pad[(size_t)b * T + tk]) ? 0 : 1;
                }
                for (int bi = 0; bi < nb; bi++) {
                    const int w = bi == nb - 1 ? nl : DB;
                    real *xr = xb + bi * CB + ii * DB, *er = eb + bi * CB + ii * DB;
                    const real *xs = xt + bi * DB;
                    ROWV(w, VST(xr, VMUL(VLD(xs), VSET1(v))), xr[j] = xs[j] * v);
                    for (int j = 0; j < DB; j++) er[j] = 0;
                    if (trunc) {
                        real *xkr = xkb + bi * CB + ii * DB;
                        if (xo) {
                            const real *xks = xo + bi * DB;
                            ROWV(w, VST(xkr, VMUL(VLD(xks), VSET1(vk))), xkr[j] = xks[j] * vk);
                        } else {
                            ROWV(w, VST(xkr, VSET1(0)), xkr[j] = 0);
                        }
                    }
                }
            }
            fwd_chunk(N, trunc, len, nb, inplace, xb, xkb, eb, fb);
            /* bidirectional: e^f first, then mpre = (e^f + e^b) + omega*x; causal: e + omega*x
             * (the omega skip uses the un-zeroed input); m = silu(mpre) */
            for (int ii = 0; ii < len; ii++) {
                const int t = tix(dir, T, i0 + ii);
                const size_t o = ((size_t)b * T + t) * D + c0;
                for (int bi = 0; bi < nb; bi++) {
                    const int w = bi == nb - 1 ? nl : DB;
                    const real *er = eb + bi * CB + ii * DB, *xt = x + o + bi * DB, *om = k->omega + c0 + bi * DB;
                    real *mp = mpre + o + bi * DB;
                    if (!last)
                        ROWV(w, VST(mp, VLD(er)), mp[j] = er[j]);
                    else if (dir)
                        ROWV(w, VST(mp, VADD(VADD(VLD(mp), VLD(er)), VMUL(VLD(om), VLD(xt)))), mp[j] = (mp[j] + er[j]) + om[j] * xt[j]);
                    else
                        ROWV(w, VST(mp, VADD(VLD(er), VMUL(VLD(om), VLD(xt)))), mp[j] = er[j] + om[j] * xt[j]);
                }
                /* one loop over the row segment (a fixed 16-step loop per block is unrolled into
                 * scalar code by gcc because of mega_exp's rounding) */
                if (last && m) {
                    const real *mp = mpre + o;
                    real *mr = m + o;
                    mega_act_forward_serial(MEGA_ACT_SILU, mr, mp, (size_t)cw); /* vectorised */
                }
            }
        }
        if (dir == 0 && state) /* the blocks whose state ran in the workspace copy */
            for (int bi = 0; bi < nb; bi++) {
                if (!fb[bi].h_ws) continue;
                const int w = bi == nb - 1 ? nl : DB;
                real *st = state + (size_t)b * N * D + c0 + bi * DB;
                for (int n = 0; n < N; n++)
                    for (int j = 0; j < w; j++) st[(size_t)n * D + j] = fb[bi].h[n * DB + j];
            }
    }
}

void mega_ema_forward_blocks(const mega_ema_k *k, int b, int blo, int bhi, real *mpre, real *m, const real *x,
                             const uint8_t *pad, int T, real *state) {
    MEGA_ASSERT(k->N >= 1 && k->N <= NMAX && !(state && k->bidir));
    MEGA_ASSERT(0 <= blo && blo < bhi && bhi <= (k->D + DB - 1) / DB);
    /* on the stack: the streaming step calls this once per token and piece, and must not
     * allocate (tests/test_decode_alloc.c) */
    _Alignas(64) real ws[FWD_WS];
    const int G = fwd_gmax(k->N);
    /* a block's results do not depend on the range it runs in, so splitting a long range into
     * workspace-sized ones changes nothing (mega_ema_forward's ranges fit: one call) */
    for (int lo = blo; lo < bhi; lo += G) fwd_range(k, b, lo, MEGA_MIN(bhi, lo + G), mpre, m, x, pad, T, state, ws);
}

/* unit u of mega_ema_forward: batch element u / nr, range u % nr of the nblk blocks */
static void fwd_unit(const mega_ema_k *k, long u, int nr, int nblk, real *mpre, real *m, const real *x,
                     const uint8_t *pad, int T, real *state) {
    const int b = (int)(u / nr), r = (int)(u % nr);
    mega_ema_forward_blocks(k, b, rlo(nblk, nr, r), rlo(nblk, nr, r + 1), mpre, m, x, pad, T, state);
}

void mega_ema_forward(const mega_ema_k *k, real *mpre, real *m, const real *x, const uint8_t *pad, int B,
                      int T, real *state) {
    MEGA_ASSERT(k->N >= 1 && k->N <= NMAX && !(state && k->bidir));
    const int nblk = (k->D + DB - 1) / DB, G = fwd_gmax(k->N); /* blocks per range that fit the workspace */
    int nr = (nblk + G - 1) / G, nth = 1;
#ifdef _OPENMP
    nth = omp_get_max_threads();
#endif
    const int par = nth > 1 && (size_t)B * T * k->D * k->N > MEGA_PAR_MIN;
    if (par && (long)B * nr < nth) nr = MEGA_MIN(nblk, (nth + B - 1) / B); /* enough units for the threads */
    const long units = (long)B * nr;
    /* small calls (streaming steps) run serially without entering a parallel region at all:
     * libgomp allocates a team even for a region whose if() clause is false */
    if (!par || units == 1) {
        for (long u = 0; u < units; u++) fwd_unit(k, u, nr, nblk, mpre, m, x, pad, T, state);
        return;
    }
#ifdef _OPENMP /* (guarded: no unknown-pragma warning without OpenMP) */
#pragma omp parallel for schedule(static)
#endif
    for (long u = 0; u < units; u++) fwd_unit(k, u, nr, nblk, mpre, m, x, pad, T, state);
}

/* ------------------------------------------------------------------------------------------
 * Backward. For one row (channel, direction) and component n, write the recurrence as
 * h_i = pb*s_i with s_i = q*s_{i-1} + x^_i, x^_i = x~_i - qK*x~_{i-K} (e_i = sum_n gs*pb*s_i),
 * and let mu be the reverse-time EMA of the incoming gradient g_i = dL/de_i, mu' its derivative
 * in q:
 *     mu_i  = q*mu_{i+1} + g_i                    (= sum_{u>=i} q^(u-i) g_u)
 *     mu'_i = q*mu'_{i+1} + mu_{i+1}              (= sum_{u>i} (u-i) q^(u-i-1) g_u = d mu_i/dq)
 * Then dL/ds_i = gs*pb*mu_i (the plain adjoint lambda_i = dL/dh_i is gs*mu_i), and since s_i is the
 * sum of the x^_u, u <= i, with weights q^(i-u), exchanging the order of the double sums gives
 * every coefficient gradient from the reverse pass alone, without the forward states:
 *     A1 = sum_i mu_i x^_i,  A2 = sum_i mu'_i x^_i,  A3 = sum_{i>=K} mu_i x~_{i-K}
 *     d gs = pb*A1 (= sum_i g_i h_i),  d pb = gs*A1,  d q = gs*pb*A2 (= sum_i lambda_i h_{i-1}),
 *     d qK = -gs*pb*A3 (truncated),
 * and the input gradient is the same EMA run backwards, windowed when truncated:
 *     dL/dx~_i = sum_n gs*pb*w_i,   w_i = q*w_{i+1} + g_i - qK*g_{i+K}  (= mu_i - qK*mu_{i+K};
 *                                                                       untruncated: w = mu)
 * This replaces the plain adjoint's checkpointed recomputation and per-segment stored states:
 * one pass, 5 multiply-adds per (step, component, channel) untruncated, nothing stored. The sums
 * run in another order than the plain adjoint's, so the results agree to rounding. */

/* one chunk of len steps, walked backwards, for ng components; coefficient / state /
 * accumulator rows at stride DB. gb, gkb, xb, xkb: g_i, g_{i+K}, x~_i, x~_{i-K};
 * sb_i += sum_n c*w_i with c = gs*pb. */
KERNEL void bwd_group(const int ng, const int trunc, const int len, const real *gb, const real *gkb,
                      const real *xb, const real *xkb, real *sb, const real *q, const real *c, const real *qK,
                      real *mu, real *mup, real *wv, real *a1, real *a2, real *a3) {
    vreal vq[NG], vc[NG], vqK[NG], vm[NG], vp[NG], vw[NG], va1[NG], va2[NG], va3[NG];
    for (int k = 0; k < ng; k++) {
        const int r = k * DB;
        vq[k] = VLD(q + r), vc[k] = VLD(c + r), vm[k] = VLD(mu + r), vp[k] = VLD(mup + r);
        va1[k] = VLD(a1 + r), va2[k] = VLD(a2 + r);
        if (trunc)
            vqK[k] = VLD(qK + r), vw[k] = VLD(wv + r), va3[k] = VLD(a3 + r);
        else /* unused; set so that no compiler sees them uninitialised */
            vqK[k] = vw[k] = va3[k] = vq[k];
    }
    for (int i = len - 1; i >= 0; i--) {
        const size_t r = (size_t)i * DB;
        const vreal gv = VLD(gb + r), xv = VLD(xb + r);
        vreal s = VLD(sb + r);
        if (trunc) {
            const vreal gk = VLD(gkb + r), xk = VLD(xkb + r);
            for (int k = 0; k < ng; k++) {
                vp[k] = VFMA(vq[k], vp[k], vm[k]); /* mu'_i from mu_{i+1} */
                vm[k] = VFMA(vq[k], vm[k], gv);
                vw[k] = VFMA(vq[k], vw[k], VSUB(gv, VMUL(vqK[k], gk)));
                const vreal xin = VSUB(xv, VMUL(vqK[k], xk));
                va1[k] = VFMA(xin, vm[k], va1[k]);
                va2[k] = VFMA(xin, vp[k], va2[k]);
                va3[k] = VFMA(xk, vm[k], va3[k]);
                s = VFMA(vc[k], vw[k], s);
            }
        } else {
            for (int k = 0; k < ng; k++) {
                vp[k] = VFMA(vq[k], vp[k], vm[k]); /* mu'_i from mu_{i+1} */
                vm[k] = VFMA(vq[k], vm[k], gv);
                va1[k] = VFMA(xv, vm[k], va1[k]);
                va2[k] = VFMA(xv, vp[k], va2[k]);
                s = VFMA(vc[k], vm[k], s);
            }
        }
        VST(sb + r, s);
    }
    for (int k = 0; k < ng; k++) {
        const int r = k * DB;
        VST(mu + r, vm[k]), VST(mup + r, vp[k]), VST(a1 + r, va1[k]), VST(a2 + r, va2[k]);
        if (trunc) VST(wv + r, vw[k]), VST(a3 + r, va3[k]);
    }
}

/* per-block backward arrays [N][DB]: q, c = gs*pb, qK, mu, mu', w, A1, A2, A3 */
enum { BQ, BC, BQK, BMU, BMUP, BW, BA1, BA2, BA3, BARR };

static void bwd_chunk(int N, int trunc, int len, const real *gb, const real *gkb, const real *xb, const real *xkb,
                      real *sb, real *ba) {
    const size_t NB = (size_t)N * DB;
    real *q = ba + BQ * NB, *c = ba + BC * NB, *qK = ba + BQK * NB, *mu = ba + BMU * NB, *mup = ba + BMUP * NB;
    real *wv = ba + BW * NB, *a1 = ba + BA1 * NB, *a2 = ba + BA2 * NB, *a3 = ba + BA3 * NB;
    int n = 0;
#define BWD_GROUP(NGC, TR)                                                                                  \
    bwd_group(NGC, TR, len, gb, gkb, xb, xkb, sb, q + n * DB, c + n * DB, qK + n * DB, mu + n * DB,         \
              mup + n * DB, wv + n * DB, a1 + n * DB, a2 + n * DB, a3 + n * DB)
    if (trunc) {
        for (; n + NGT <= N; n += NGT) BWD_GROUP(NGT, 1);
        for (; n < N; n++) BWD_GROUP(1, 1);
    } else {
        for (; n + NG <= N; n += NG) BWD_GROUP(NG, 0);
        for (; n < N; n++) BWD_GROUP(1, 0);
    }
#undef BWD_GROUP
}

/* reals of one thread's backward workspace: GMAX blocks' arrays, 5 chunk buffers and the
 * domega sums per block, plus the slack that aligns it to 64 bytes */
static size_t bwd_per(int N) {
    return (size_t)GMAX * ((size_t)BARR * N * DB + 5 * TC * DB + DB) + 64 / sizeof(real);
}

size_t mega_ema_bwd_scratch(const mega_ema_k *k, int T, int nthreads) {
    (void)T;
    return bwd_per(k->N) * (size_t)(nthreads > 0 ? nthreads : 1);
}

/* backward of channel blocks [blo, bhi): every batch element and direction, their parameter
 * gradients; the blocks' results do not depend on how blocks are grouped into ranges */
static void bwd_range(const mega_ema_k *k, int blo, int bhi, real *dx, real *dcoef, real *domega, const real *g,
                      const real *x, const uint8_t *pad, int B, int T, real *ws) {
    const int D = k->D, N = k->N, Dp = k->bidir ? 2 * D : D, ndir = k->bidir ? 2 : 1;
    const int nb = bhi - blo, c0 = blo * DB, nl = MEGA_MIN(D, bhi * DB) - (bhi - 1) * DB;
    const int trunc = k->K > 0 && k->K < T, K = k->K;
    const size_t S = (size_t)Dp * N, NB = (size_t)N * DB, CB = (size_t)TC * DB, BA = BARR * NB;
    real *gb = ws + nb * BA, *gkb = gb + nb * CB, *xb = gkb + nb * CB, *xkb = xb + nb * CB, *sb = xkb + nb * CB;
    real *sw = sb + nb * CB; /* domega = sum g*x over the raw input, per channel */
    memset(sw, 0, (size_t)nb * DB * sizeof(real));
    if (nl < DB) /* the partial block's padded lanes stay 0 */
        for (int a = 0; a < 4; a++) memset(gb + (size_t)a * nb * CB + (nb - 1) * CB, 0, CB * sizeof(real));
    const int nch = (T + TC - 1) / TC;
    for (int dir = 0; dir < ndir; dir++) {
        const int rowoff = dir ? D : 0, last = dir == ndir - 1;
        for (int bi = 0; bi < nb; bi++) {
            real *ba = ws + bi * BA;
            const int w = bi == nb - 1 ? nl : DB;
            for (int n = 0; n < N; n++)
                for (int j = 0; j < DB; j++) {
                    const size_t o = (size_t)n * Dp + rowoff + c0 + bi * DB + j;
                    const int in = j < w;
                    ba[BQ * NB + n * DB + j] = in ? k->q[o] : 0;
                    ba[BC * NB + n * DB + j] = in ? k->gs[o] * k->pb[o] : 0;
                    ba[BQK * NB + n * DB + j] = in && trunc ? k->qK[o] : 0;
                }
            memset(ba + BA1 * NB, 0, 3 * NB * sizeof(real));
        }
        for (int b = 0; b < B; b++) {
            for (int bi = 0; bi < nb; bi++) memset(ws + bi * BA + BMU * NB, 0, 3 * NB * sizeof(real));
            for (int ch = nch - 1; ch >= 0; ch--) {
                const int i0 = ch * TC, len = MEGA_MIN(TC, T - i0);
                for (int ii = 0; ii < len; ii++) {
                    const int i = i0 + ii, t = tix(dir, T, i);
                    const size_t o = ((size_t)b * T + t) * D + c0;
                    const real v = (pad && pad[(size_t)b * T + t]) ? 0 : 1;
                    const real *gt = g + o, *xt = x + o, *xo = NULL, *go = NULL;
                    real vk = 0;
                    if (trunc && i >= K) {
                        const int tk = tix(dir, T, i - K);
                        xo = x + ((size_t)b * T + tk) * D + c0;
                        vk = (pad && pad[(size_t)b * T + tk]) ? 0 : 1;
                    }
                    if (trunc && i + K < T) go = g + ((size_t)b * T + tix(dir, T, i + K)) * D + c0;
                    for (int bi = 0; bi < nb; bi++) {
                        const int w = bi == nb - 1 ? nl : DB;
                        const size_t r = bi * CB + ii * DB;
                        const real *gs_ = gt + bi * DB, *xs = xt + bi * DB;
                        real *gr = gb + r, *xr = xb + r, *sr = sb + r, *swr = sw + bi * DB;
                        ROWV(w, VST(gr, VLD(gs_)), gr[j] = gs_[j]);
                        ROWV(w, VST(xr, VMUL(VLD(xs), VSET1(v))), xr[j] = xs[j] * v);
                        for (int j = 0; j < DB; j++) sr[j] = 0;
                        if (last) ROWV(w, VST(swr, VADD(VLD(swr), VMUL(VLD(gs_), VLD(xs)))), swr[j] += gs_[j] * xs[j]);
                        if (trunc) {
                            real *xkr = xkb + r, *gkr = gkb + r;
                            if (xo) {
                                const real *xks = xo + bi * DB;
                                ROWV(w, VST(xkr, VMUL(VLD(xks), VSET1(vk))), xkr[j] = xks[j] * vk);
                            } else {
                                ROWV(w, VST(xkr, VSET1(0)), xkr[j] = 0);
                            }
                            if (go) {
                                const real *gks = go + bi * DB;
                                ROWV(w, VST(gkr, VLD(gks)), gkr[j] = gks[j]);
                            } else {
                                ROWV(w, VST(gkr, VSET1(0)), gkr[j] = 0);
                            }
                        }
                    }
                }
                for (int bi = 0; bi < nb; bi++)
                    bwd_chunk(N, trunc, len, gb + bi * CB, gkb + bi * CB, xb + bi * CB, xkb + bi * CB, sb + bi * CB,
                              ws + bi * BA);
                /* dx += v*dL/dx~ (then + omega*g, once, after the last direction) */
                for (int ii = 0; ii < len; ii++) {
                    const int t = tix(dir, T, i0 + ii);
                    const size_t o = ((size_t)b * T + t) * D + c0;
                    const real v = (pad && pad[(size_t)b * T + t]) ? 0 : 1;
                    for (int bi = 0; bi < nb; bi++) {
                        const int w = bi == nb - 1 ? nl : DB;
                        const real *sr = sb + bi * CB + ii * DB, *gt = g + o + bi * DB, *om = k->omega + c0 + bi * DB;
                        real *dxt = dx + o + bi * DB;
                        ROWV(w, VST(dxt, VADD(VLD(dxt), VMUL(VSET1(v), VLD(sr)))), dxt[j] += v * sr[j]);
                        if (last) ROWV(w, VST(dxt, VADD(VLD(dxt), VMUL(VLD(om), VLD(gt)))), dxt[j] += om[j] * gt[j]);
                    }
                }
            }
        }
        /* the blocks' coefficient gradients (formulas above), summed over the batch */
        for (int bi = 0; bi < nb; bi++) {
            const real *ba = ws + bi * BA;
            const int w = bi == nb - 1 ? nl : DB;
            for (int n = 0; n < N; n++)
                for (int j = 0; j < w; j++) {
                    const size_t o = (size_t)n * Dp + rowoff + c0 + bi * DB + j, r = (size_t)n * DB + j;
                    const real c = ba[BC * NB + r], A1 = ba[BA1 * NB + r];
                    dcoef[o] += k->gs[o] * A1;
                    dcoef[S + o] += c * ba[BA2 * NB + r];
                    dcoef[2 * S + o] += k->pb[o] * A1;
                    if (trunc) dcoef[3 * S + o] -= c * ba[BA3 * NB + r];
                }
        }
    }
    for (int bi = 0; bi < nb; bi++) {
        const int w = bi == nb - 1 ? nl : DB;
        for (int j = 0; j < w; j++) domega[c0 + bi * DB + j] += sw[bi * DB + j];
    }
}

void mega_ema_backward(const mega_ema_k *k, real *dx, real *dcoef, real *domega, const real *g, const real *x,
                       const uint8_t *pad, int B, int T, real *scratch, int nthreads) {
    MEGA_ASSERT(k->N >= 1 && k->N <= NMAX);
    const int nblk = (k->D + DB - 1) / DB;
    const size_t per = bwd_per(k->N);
    if (nthreads < 1) nthreads = 1;
    /* ranges of whole channel blocks, at least one per thread: each thread owns its channels'
     * parameter gradients, so nothing is summed across threads */
    const int nr = MEGA_MAX(MEGA_MIN(nthreads, nblk), (nblk + GMAX - 1) / GMAX);
    /* each thread's slice, aligned to 64 bytes (bwd_per has the slack) */
#define SLICE(tid) ((real *)(((uintptr_t)(scratch + per * (size_t)(tid)) + 63) & ~(uintptr_t)63))
    if (nthreads == 1 || nr == 1 || (size_t)B * T * k->D * k->N <= MEGA_PAR_MIN) {
        for (int r = 0; r < nr; r++)
            bwd_range(k, rlo(nblk, nr, r), rlo(nblk, nr, r + 1), dx, dcoef, domega, g, x, pad, B, T, SLICE(0));
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
    for (int r = 0; r < nr; r++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        bwd_range(k, rlo(nblk, nr, r), rlo(nblk, nr, r + 1), dx, dcoef, domega, g, x, pad, B, T, SLICE(tid));
    }
#undef SLICE
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
            /* pb = p*beta, q = 1 - p*a, gs = gamma*scale (mega_ema_coef) */
            double dp = d_pb * beta[i] - d_q * a;
            double da = -d_q * p;
            dbeta[i] += (real)(d_pb * p);
            ddelta[i] += (real)(dp * p * (1 - p));
            dalpha[i] += (real)(da * a * (1 - a));
            dgamma[i] += (real)(d_gs * scale);
        }
}
