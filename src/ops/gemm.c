/* GEMM: OpenBLAS when available (MEGA_USE_BLAS), else a portable blocked kernel. */
#include "ops/ops.h"
#include "ops/vec.h"
#include "ops/q8.h"
#include <stdatomic.h>
#ifdef MEGA_USE_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* portable fallback: C = alpha op(A) op(B) + beta C. Loop orders keep the innermost loop
 * contiguous for each transpose case so the compiler vectorises it. */
static void gemm_portable(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A,
                          size_t lda, const real *B, size_t ldb, real beta, real *C, size_t ldc) {
    for (size_t i = 0; i < M; i++) {
        real *c = C + i * ldc;
        if (beta == 0)
            for (size_t j = 0; j < N; j++) c[j] = 0;
        else if (beta != 1)
            for (size_t j = 0; j < N; j++) c[j] *= beta;
    }
    if (!tb) {
        /* C[i,:] += alpha * a(i,k) * B[k,:] */
        for (size_t i = 0; i < M; i++) {
            real *c = C + i * ldc;
            for (size_t k = 0; k < K; k++) {
                real a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
                if (a == 0) continue;
                const real *b = B + k * ldb;
                for (size_t j = 0; j < N; j++) c[j] += a * b[j];
            }
        }
    } else {
        /* C[i,j] += alpha * dot(a(i,:), B[j,:]) */
        for (size_t i = 0; i < M; i++) {
            real *c = C + i * ldc;
            if (!ta) {
                const real *a = A + i * lda;
                for (size_t j = 0; j < N; j++) {
                    const real *b = B + j * ldb;
                    real s = 0;
                    for (size_t k = 0; k < K; k++) s += a[k] * b[k];
                    c[j] += alpha * s;
                }
            } else {
                for (size_t j = 0; j < N; j++) {
                    const real *b = B + j * ldb;
                    real s = 0;
                    for (size_t k = 0; k < K; k++) s += A[k * lda + i] * b[k];
                    c[j] += alpha * s;
                }
            }
        }
    }
}

#ifdef MEGA_USE_BLAS
int openblas_get_parallel(void); /* OpenBLAS: 0 sequential, 1 pthreads, 2 OpenMP build */
void openblas_set_num_threads(int);
#endif

/* One product as one BLAS call (or the portable kernel), always on the calling thread (the
 * grid below explains why). The OpenMP build of OpenBLAS threads a call made outside a parallel
 * region over omp_get_max_threads() threads, so the calling thread's OpenMP thread count is 1
 * for the call; the pthread build follows openblas_set_num_threads, set to 1 once. */
static void gemm_call(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A, size_t lda,
                      const real *B, size_t ldb, real beta, real *C, size_t ldc) {
#ifdef MEGA_USE_BLAS
    /* OpenBLAS's threading: 0 none, 1 its own pthreads, 2 OpenMP (read once; -1 not yet) */
    static atomic_int blas_mode = -1;
    int mode = atomic_load_explicit(&blas_mode, memory_order_acquire);
    if (mode < 0) {
        mode = openblas_get_parallel();
        if (mode == 1) openblas_set_num_threads(1);
        atomic_store_explicit(&blas_mode, mode, memory_order_release);
    }
#ifdef _OPENMP
    const int outer = mode == 2 && !omp_in_parallel() ? omp_get_max_threads() : 0;
    if (outer > 1) omp_set_num_threads(1);
#endif
#ifdef MEGA_F64
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#else
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#endif
#ifdef _OPENMP
    if (outer > 1) omp_set_num_threads(outer);
#endif
#else
    gemm_portable(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

/* ---- the product grid ----------------------------------------------------------------------
 * A product is cut into rectangular pieces of C by a rule that depends on its shape only, and
 * each piece is one single-threaded BLAS call; threads take whole pieces (dynamic schedule).
 * Why not let OpenBLAS thread the call: its result then depends on the thread count. OpenBLAS
 * 0.3.21's Haswell kernels (every AVX2 machine, and AVX-512 CPUs it does not know, such as AMD
 * Zen 4/5) round an element of C differently depending on where it falls in the call's
 * partition (measured: a 1152x258x64 product differs in 8,565 of its elements between 1 and 2
 * threads; a single-threaded call cut into 64-row pieces differs from the whole call too), so
 * the library's rule "the same bits for any number of threads" (docs/architecture.md) did not
 * hold there. A piece grid fixed by the shape gives the same bits whatever the thread count and
 * whichever thread runs which piece, on every BLAS. It is also faster for this library's
 * shapes: for [1024..8192 tokens] x [128..512] products on 2 threads it measured 1.2-1.6x
 * OpenBLAS's own threading (whose per-call partition and barriers cost more than the repacking
 * of the pieces), 0.85-0.95x on 2048-cubed products that this library does not run; and a
 * dynamic schedule lets a thread that a busy neighbour slows take fewer pieces. */

/* No grid below this many multiply-adds: such a product takes well under 0.2 ms on a core. */
#define GRID_PIECE ((size_t)1 << 24)
/* A large product is cut into about this many pieces, not into GRID_PIECE ones: enough for a
 * dynamic schedule to balance 2-4 threads (and a thread slowed by a busy neighbour), and half
 * the repacking of GRID_PIECE pieces (lm-train's 8192 x 512 x 256 products: 512 x 512 pieces
 * instead of 256 x 256; 2-4% faster on 2 threads, measured in the whole workload). */
#define GRID_BIG_PIECES 16
/* pieces are cut at multiples of 16 rows or columns and not below GRID_MIN_DIM of either, so
 * that each piece still reuses its packed panels (a piece repacks (rows + cols) x K values) */
#define GRID_MIN_DIM 64
#define GRID_MAX_PIECES 64

static size_t half16(size_t x) { return ((x + 1) / 2 + 15) / 16 * 16; }

/* Piece rows *rm and columns *rn of an M x N x K product: halve the longer side of the piece
 * while the piece has more than max(GRID_PIECE, MNK / GRID_BIG_PIECES) multiply-adds, that side
 * is at least 2 GRID_MIN_DIM and there are fewer than GRID_MAX_PIECES pieces. Depends on
 * (M, N, K) only. */
static void gemm_grid(size_t M, size_t N, size_t K, size_t *rm, size_t *rn) {
    size_t r = M, c = N;
    const size_t piece = MEGA_MAX(GRID_PIECE, M * N * K / GRID_BIG_PIECES);
    while (r * c * K > piece && ((M + r - 1) / r) * ((N + c - 1) / c) < GRID_MAX_PIECES) {
        if (r >= c && r >= 2 * GRID_MIN_DIM)
            r = half16(r);
        else if (c >= 2 * GRID_MIN_DIM)
            c = half16(c);
        else if (r >= 2 * GRID_MIN_DIM)
            r = half16(r);
        else
            break;
    }
    *rm = r, *rn = c;
}

/* ---- long reductions: the K dimension is cut instead of C ----------------------------------
 * A training step's weight gradients dW = dY^T X reduce over every token of the batch
 * (K = batch x tokens: 8192 in lm-train) into a small C (128..1088 x 128..512). Cut by the grid
 * above, C became 64 x 64 tiles, and every tile re-read its own K-long panels of A and B
 * (200 MB per 512 x 256 x 8192 product, against 25 MB for the operands): such products ran at
 * 109-138 GFLOP/s on 2 threads while the same step's other products ran at 170-185. Here K is
 * cut instead: slice s (KSPLIT_LEN of K) computes the whole C, slice 0 into C itself (with beta),
 * the others into a workspace, and the slices are then added to C in slice order. The slices
 * and that order depend on the shape only, so the bits still do not depend on the thread count.
 * (The measurements before and after: docs/performance.md, fourth round.) */
#define KSPLIT_MIN_K 4096
#define KSPLIT_LEN 2048
#define KSPLIT_MAX_SLICES 8
/* C small enough that (slices - 1) copies of it stay cheap: 1M elements (4 MB) */
#define KSPLIT_MAX_C ((size_t)1 << 20)

static size_t ksplit_slices(size_t M, size_t N, size_t K) {
    if (K < KSPLIT_MIN_K || M * N > KSPLIT_MAX_C || K < 4 * MEGA_MAX(M, N) || M * N * K <= GRID_PIECE) return 1;
    return MEGA_MIN(K / KSPLIT_LEN, (size_t)KSPLIT_MAX_SLICES);
}

/* The slices' workspaces: a few buffers kept for reuse (a training loop takes the same one back
 * every step, so after the first step nothing is allocated); a thread that finds none free
 * allocates its own. Lock-free, so concurrent products on several threads each get a buffer. */
typedef struct {
    size_t cap; /* elements */
    real *v;
} ksplit_ws;
#define KSPLIT_POOL 8
static _Atomic(ksplit_ws *) ksplit_pool[KSPLIT_POOL];

static void ksplit_drop(ksplit_ws *w) {
    if (!w) return;
    mega__free(w->v);
    free(w);
}

static ksplit_ws *ksplit_take(size_t n) {
    for (int i = 0; i < KSPLIT_POOL; i++) {
        ksplit_ws *w = atomic_exchange_explicit(&ksplit_pool[i], NULL, memory_order_acq_rel);
        if (!w) continue;
        if (w->cap >= n) return w;
        ksplit_drop(w);
        break;
    }
    ksplit_ws *w = malloc(sizeof *w);
    if (!w) return NULL;
    w->cap = n;
    w->v = mega__calloc(n, sizeof(real));
    if (!w->v) {
        free(w);
        return NULL;
    }
    return w;
}

static void ksplit_give(ksplit_ws *w) {
    for (int i = 0; i < KSPLIT_POOL; i++) {
        ksplit_ws *none = NULL;
        if (atomic_compare_exchange_strong_explicit(&ksplit_pool[i], &none, w, memory_order_acq_rel,
                                                    memory_order_acquire))
            return;
    }
    ksplit_drop(w);
}

typedef struct {
    int ta, tb;
    size_t M, N, K, rm, rn, pn, tiles, kl;
    real alpha, beta;
    const real *A, *B;
    size_t lda, ldb, ldc;
    real *C;
    real *ws; /* slices 1.. of a split K: (slices - 1) x M x N */
} grid_args;

/* piece p: tile p % tiles of C over K slice p / tiles */
static void grid_piece(const grid_args *g, size_t p) {
    const size_t t = p % g->tiles, s = p / g->tiles;
    const size_t i0 = (t / g->pn) * g->rm, j0 = (t % g->pn) * g->rn, k0 = s * g->kl;
    const size_t m = MEGA_MIN(g->rm, g->M - i0), n = MEGA_MIN(g->rn, g->N - j0), k = MEGA_MIN(g->kl, g->K - k0);
    const real *A = g->ta ? g->A + k0 * g->lda + i0 : g->A + i0 * g->lda + k0;
    const real *B = g->tb ? g->B + j0 * g->ldb + k0 : g->B + k0 * g->ldb + j0;
    if (s == 0)
        gemm_call(g->ta, g->tb, m, n, k, g->alpha, A, g->lda, B, g->ldb, g->beta, g->C + i0 * g->ldc + j0, g->ldc);
    else
        gemm_call(g->ta, g->tb, m, n, k, g->alpha, A, g->lda, B, g->ldb, 0, g->ws + (s - 1) * g->M * g->N + i0 * g->N + j0,
                  g->N);
}

/* row i of C += the other slices' rows, in slice order */
static void ksplit_add_row(const grid_args *g, size_t slices, size_t i) {
    real *c = g->C + i * g->ldc;
    for (size_t s = 1; s < slices; s++) {
        const real *w = g->ws + (s - 1) * g->M * g->N + i * g->N;
        for (size_t j = 0; j < g->N; j++) c[j] += w[j];
    }
}

static void gemm_run(int parallel, int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A,
                     size_t lda, const real *B, size_t ldb, real beta, real *C, size_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        gemm_portable(ta, tb, M, N, 0, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    grid_args g = {ta, tb, M, N, K, M, N, 1, 1, K, alpha, beta, A, B, lda, ldb, ldc, C, NULL};
    size_t slices = ksplit_slices(M, N, K);
    ksplit_ws *w = NULL;
    if (slices > 1) {
        /* without a workspace (out of memory) the product runs on the grid instead: other bits,
         * but a result */
        w = ksplit_take((slices - 1) * M * N);
        if (w) {
            g.ws = w->v;
            g.kl = ((K + slices - 1) / slices + 15) / 16 * 16;
        } else {
            slices = 1;
        }
    }
    if (slices == 1) {
        gemm_grid(M, N, K, &g.rm, &g.rn);
        g.pn = (N + g.rn - 1) / g.rn;
        g.tiles = ((M + g.rm - 1) / g.rm) * g.pn;
    }
    const size_t n = g.tiles * slices;
    if (n == 1) {
        gemm_call(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int nt = parallel ? mega_get_threads() : 1;
#ifdef _OPENMP
    if (omp_in_parallel()) nt = 1;
#endif
    if (nt > (int)n) nt = (int)n;
    if (nt <= 1) {
        for (size_t p = 0; p < n; p++) grid_piece(&g, p);
        for (size_t i = 0; slices > 1 && i < M; i++) ksplit_add_row(&g, slices, i);
    } else {
#pragma omp parallel num_threads(nt)
        {
#pragma omp for schedule(dynamic, 1)
            for (size_t p = 0; p < n; p++) grid_piece(&g, p);
            if (slices > 1) {
#pragma omp for schedule(static)
                for (size_t i = 0; i < M; i++) ksplit_add_row(&g, slices, i);
            }
        }
    }
    if (w) ksplit_give(w);
}

/* a product on a quantized matrix (q8.h: a model loaded from a q8_0 file) runs on its int8 blocks */
static int q8_product(const real *X, size_t ldx, const real *W, size_t R, size_t In, size_t O, const real *b,
                      real beta, real *Y, size_t ldy, int split) {
    size_t r0;
    const mega_q8_mat *q = mega_q8_find(W, In, O, &r0);
    return q && ldx == In && (beta == 0 || beta == 1) && mega_q8_linear(q, r0, O, X, R, b, beta, Y, ldy, split);
}

void mega_gemm(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A, size_t lda,
               const real *B, size_t ldb, real beta, real *C, size_t ldc) {
    /* A B^T on a quantized B (the adaptive softmax's clusters) */
    if (!ta && tb && alpha == 1 && ldb == K && q8_product(A, lda, B, M, K, N, NULL, beta, C, ldc, 1)) return;
    gemm_run(1, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mega_gemm_serial(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A,
                      size_t lda, const real *B, size_t ldb, real beta, real *C, size_t ldc) {
    /* the same pieces as mega_gemm (so the same bits), on the calling thread */
    gemm_run(0, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mega_linear_forward(real *Y, const real *X, const real *W, const real *b, size_t R, size_t In, size_t O) {
    if (q8_product(X, In, W, R, In, O, b, 0, Y, O, 1)) return;
    if (b) {
        for (size_t r = 0; r < R; r++) memcpy(Y + r * O, b, O * sizeof(real));
        mega_gemm(0, 1, R, O, In, 1, X, In, W, In, 1, Y, O);
    } else {
        mega_gemm(0, 1, R, O, In, 1, X, In, W, In, 0, Y, O);
    }
}

/* threads take blocks of 64 columns; each column is still summed in row order, so the bits are
 * those of one thread (one pass over dY: 35 MB for lm-train's widest projection) */
void mega_colsum_acc(real *db, const real *dY, size_t R, size_t O) {
    const size_t nb = (O + 63) / 64;
#pragma omp parallel for schedule(static) if (R * O > MEGA_PAR_MIN && nb > 1)
    for (size_t b = 0; b < nb; b++) {
        const size_t o0 = b * 64, o1 = MEGA_MIN(O, o0 + 64);
        for (size_t r = 0; r < R; r++) {
            const real *d = dY + r * O;
            for (size_t o = o0; o < o1; o++) db[o] += d[o];
        }
    }
}

void mega_linear_backward(real *dX, real *dW, real *db, const real *dY, const real *X, const real *W,
                          size_t R, size_t In, size_t O, int acc) {
    if (dX) mega_gemm(0, 0, R, In, O, 1, dY, O, W, In, acc ? 1 : 0, dX, In);
    if (dW) mega_gemm(1, 0, O, In, R, 1, dY, O, X, In, 1, dW, In);
    if (db) mega_colsum_acc(db, dY, R, O);
}

/* ---- the streaming step's products --------------------------------------------------------
 * A decode step multiplies a few rows (batch x tokens) by every weight matrix, so its time is
 * the weights streaming through the cores (13 MB per token for the lm-decode model). A plain
 * mega_gemm runs such a product on the calling thread (OpenBLAS's small-matrix kernel, M = 1) or
 * through OpenBLAS's threaded path (M = 8), which packs (copies) the whole weight matrix for a
 * few rows and mallocs a job table per call. The step forms instead
 *  - cut the output columns (the rows of W) into pieces; up to STEP_DOT_ROWS rows (decoding a
 *    batch) a piece is dot products along K (step_dot, step_dots: no copy of the weights, which
 *    OpenBLAS's packing paths make for every call), more rows (a prompt) one OpenBLAS call whose
 *    width its direct small-matrix kernels accept where it has them (step_piece);
 *  - run the pieces through mega_step_parallel: over the step team while a token is decoded
 *    (stepteam.c), else over one OpenMP region. Each piece runs on one thread (the OpenMP build
 *    of OpenBLAS runs a call made inside a parallel region on its thread), so every core streams
 *    weights and nothing is allocated.
 * The piece grid depends on the shape only, so a product gives the same bits with any number of
 * threads and any assignment of pieces to threads; up to STEP_DOT_ROWS rows, a row also gets the
 * same bits whatever the other rows (tests/test_decode_alloc.c checks both). */

/* No split below this many multiply-adds: handing pieces to other threads costs about a
 * microsecond as an OpenMP region (less in the step team), while 16K MACs of streamed weights
 * take a few microseconds on one core. */
#define STEP_SPLIT_MIN 16384
/* piece widths are multiples of 16 outputs (whole cache lines of C) and at most STEP_WIDTH, so
 * a decode product has several pieces per thread to balance */
#define STEP_ALIGN 16
#define STEP_WIDTH 128
/* Outputs per GEMM call for M rows and inner dimension K (0: no width suits the direct kernel).
 * OpenBLAS (0.3.21, x86-64 AVX-512 kernels) takes a row-major C[M,N] = A B^T -- a TN product
 * of N x M x K in its column-major terms -- through its direct kernel when N*M <= 1200 and
 * N*M*K <= 1e6 (kernel/x86_64/sgemm_small_kernel_permit_skylakex.c); elsewhere pieces cost one
 * more call each and nothing else. */
static size_t step_piece(size_t M, size_t K) {
#ifdef MEGA_USE_BLAS
    const size_t MK = MEGA_MAX(M * K, (size_t)1);
    const size_t p = MEGA_MIN(1200 / M, (size_t)1000000 / MK);
    return p / STEP_ALIGN * STEP_ALIGN;
#else
    (void)M, (void)K;
    return STEP_WIDTH; /* the portable GEMM computes dot products whatever the shape */
#endif
}

typedef struct {
    size_t M, N, K, width;
    const real *A, *B, *bias;
    size_t lda, ldb, ldc;
    real beta;
    real *C;
} step_args;

#ifdef MEGA_VEC
/* Few rows (a decoded token: M = batch) by a slice of weights, without OpenBLAS: its direct
 * small-matrix kernels exist only among its AVX-512 (SkylakeX) kernels; elsewhere (AVX2
 * machines, or OPENBLAS_CORETYPE=Haswell) every call packs (copies) its slice of the weights
 * first. Measured on a Zen 5 core with the Haswell kernels, 1 thread, 256 x 1088 weights: one row
 * 99 us (11 GB/s of weights) against 21 us for cblas_sgemv; 8 rows 116 us, half of it copying
 * (perf of lm-decode-b8: sgemm_incopy 24%, its kernel 24%). Dot products along K instead: each
 * weight row is read once from memory per call, the rows of A stay in L1.
 *  - one row (dot_row): VL outputs at a time, VL accumulators;
 *  - a few rows (dot_tile): TILE_ROWS = VL / 4 rows by 4 outputs, VL accumulators, each weight
 *    vector used for every row of the tile (32 vector registers with AVX-512: 16 accumulators,
 *    4 + 1 operands; 16 with AVX2: 8 + 4 + 1); with AVX2, rows in fours go through dot_tile3
 *    (4 rows by 3 outputs: 12 + 3 + 1 registers).
 * Every output is summed the same way: VL-wide partial sums along K, the lanes added as a tree
 * (vsum), then the K % VL tail. That order depends on K alone, so the bits depend neither on the
 * piece grid's assignment to threads nor on how many rows are multiplied together. */
#define TILE_ROWS (VL / 4)
/* an empty statement the compiler must assume changes v in its register: keeps a loaded vector in
 * a register instead of folding the load into every instruction that uses it (x86 only) */
#if defined(__x86_64__) || defined(__i386__)
#define KEEP_IN_REG(v) __asm__("" : "+v"(v))
#else
#define KEEP_IN_REG(v) (void)0
#endif

/* whether the tile's step at k prefetches: once per 64-byte line of each weight row. With AVX-512
 * a step is a line; with AVX2 it is half a line, and a prefetch at every step put 4 prefetches
 * next to the 6 loads of each 8 multiply-adds on the two load ports (perf annotate of
 * lm-decode-b8, AVX2 build: the prefetches took a third of the tile's samples). */
#if VL * 4 >= 64
#define TILE_PREFETCH(k) 1
#else
#define TILE_PREFETCH(k) ((k) % (64 / sizeof(float)) == 0)
#endif

/* the lanes' sum as a tree (halves added, log2 VL deep): a fixed order, and shuffles instead of a
 * chain of VL dependent additions */
INLINE float vsum(vf v) {
    float t[VL];
    memcpy(t, &v, sizeof t);
    for (int w = VL / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) t[l] += t[l + w];
    return t[0];
}

/* where vsum_all wants the vector whose sum goes to lane L */
#define VSUM_SRC(L) ((L) % 4 * (VL / 4) + (L) / 4)

/* VL lane sums at once: r[L] = vsum(a[VSUM_SRC(L)]), the very same tree of additions (at each
 * level lane l gets t[l] + t[l + w]) with the VL vectors reduced side by side: VL - 1 vector
 * additions and twice as many shuffles instead of VL scalar trees. At K = 256 a tile does only
 * K / VL steps of multiply-adds per output, so VL scalar trees cost about as much as the
 * products themselves. */
INLINE void vsum_all(const vf a[VL], float r[VL]) {
#if VL == 16
    __m512 s[8], u[4], v[2];
    for (int p = 0; p < 8; p++) { /* w = 8: lanes 0-7 of a[2p], then of a[2p + 1] */
        const __m512 x = (__m512)a[2 * p], y = (__m512)a[2 * p + 1];
        s[p] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
    for (int p = 0; p < 4; p++) /* w = 4: quad q of u[p] belongs to a[4p + q] */
        u[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0x88),
                             _mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0xDD));
    for (int p = 0; p < 2; p++) /* w = 2: quad q of v[p] = a[8p + q] (lanes 0-1), a[8p + 4 + q] (2-3) */
        v[p] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * p], u[2 * p + 1], 0x44),
                             _mm512_shuffle_ps(u[2 * p], u[2 * p + 1], 0xEE));
    /* w = 1: lane 4q + m = a[4m + q] */
    _mm512_storeu_ps(r, _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD)));
#elif VL == 8 && defined(__AVX2__)
    __m256 s[4], u[2];
    for (int p = 0; p < 4; p++) { /* w = 4: lanes 0-3 of a[2p], then of a[2p + 1] */
        const __m256 x = (__m256)a[2 * p], y = (__m256)a[2 * p + 1];
        s[p] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
    }
    for (int p = 0; p < 2; p++) /* w = 2: half h of u[p] = a[4p + h] (lanes 0-1), a[4p + 2 + h] (2-3) */
        u[p] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * p], s[2 * p + 1], 0x44),
                             _mm256_shuffle_ps(s[2 * p], s[2 * p + 1], 0xEE));
    /* w = 1: lane 4h + m = a[2m + h] */
    _mm256_storeu_ps(r, _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x88), _mm256_shuffle_ps(u[0], u[1], 0xDD)));
#else
    for (int L = 0; L < VL; L++) r[L] = vsum(a[VSUM_SRC(L)]);
#endif
}

/* n sums to c[0:n] with the bias (or beta c) when there is no K % VL tail; in vector-friendly
 * loops (the branch hoisted) */
INLINE void sums_store(const float *sum, size_t n, const float *bias, float beta, float *c) {
    if (bias)
        for (size_t j = 0; j < n; j++) c[j] = sum[j] + bias[j];
    else if (beta != 0)
        for (size_t j = 0; j < n; j++) c[j] = sum[j] + beta * c[j];
    else
        for (size_t j = 0; j < n; j++) c[j] = sum[j];
}

/* the K % VL tail of one dot product, then the bias (or beta C) */
INLINE void dot_finish(float sum, size_t k, size_t K, const float *a, const float *b, const float *bias, float beta,
                       float *c) {
    for (size_t t = k; t < K; t++) sum += a[t] * b[t];
    sums_store(&sum, 1, bias, beta, c);
}

/* c[0:VL] = a B[0:VL]^T (+ bias or beta c) for one row a: one accumulator per output */
static void dot_row(size_t K, const float *a, const float *B, size_t ldb, const float *bias, float beta, float *c) {
    vf acc[VL]; /* output j in acc[VSUM_SRC(j)], so that vsum_all puts it in lane j */
#pragma GCC unroll 16 /* unrolled before GCC turns the loop into a memset of the (stack) array */
    for (int j = 0; j < VL; j++) acc[j] = vbc(0);
    size_t k = 0;
    for (; k + VL <= K; k += VL) {
        const vf x = vld(a + k);
        for (int j = 0; j < VL; j++) acc[VSUM_SRC(j)] = vfma(x, vld(B + (size_t)j * ldb + k), acc[VSUM_SRC(j)]);
    }
    float sum[VL];
    vsum_all(acc, sum);
    if (k == K) {
        sums_store(sum, VL, bias, beta, c);
        return;
    }
    for (int j = 0; j < VL; j++) dot_finish(sum[j], k, K, a, B + (size_t)j * ldb, bias ? bias + j : NULL, beta, c + j);
}

/* C[0:TILE_ROWS, 0:4] = A B[0:4]^T (+ bias or beta C): each weight vector used for every row */
static void dot_tile(size_t K, const float *A, size_t lda, const float *B, size_t ldb, const float *bias, float beta,
                     float *C, size_t ldc) {
    vf acc[VL]; /* row i, output j in acc[j * TILE_ROWS + i] = VSUM_SRC(4i + j): lanes 4i..4i+3 */
#pragma GCC unroll 16 /* as in dot_row */
    for (int f = 0; f < VL; f++) acc[f] = vbc(0);
    size_t k = 0;
    for (; k + VL <= K; k += VL) {
        vf b[4];
        for (int j = 0; j < 4; j++) {
            /* the rows two tiles on, a line per row per step: the tile walks 4 rows side by side,
             * which the hardware prefetchers follow late (8 rows x 256 x 1088 products over 27 MB
             * of weights, 2 threads: 36 us each without, 25 with) */
            if (TILE_PREFETCH(k)) __builtin_prefetch(B + (size_t)(j + 8) * ldb + k);
            b[j] = vld(B + (size_t)j * ldb + k);
            /* keep it in a register: GCC otherwise folds the load into each multiply-add that uses
             * it (one load per multiply-add, the load ports then bound the tile) */
            KEEP_IN_REG(b[j]);
        }
        for (int i = 0; i < TILE_ROWS; i++) {
            vf x = vld(A + (size_t)i * lda + k);
            KEEP_IN_REG(x); /* the same for the row */
            for (int j = 0; j < 4; j++) acc[j * TILE_ROWS + i] = vfma(x, b[j], acc[j * TILE_ROWS + i]);
        }
    }
    float sum[VL];
    vsum_all(acc, sum);
    if (k == K) {
        for (int i = 0; i < TILE_ROWS; i++) sums_store(sum + 4 * i, 4, bias, beta, C + (size_t)i * ldc);
        return;
    }
    for (int i = 0; i < TILE_ROWS; i++)
        for (int j = 0; j < 4; j++)
            dot_finish(sum[4 * i + j], k, K, A + (size_t)i * lda, B + (size_t)j * ldb, bias ? bias + j : NULL, beta,
                       C + (size_t)i * ldc + j);
}

#if VL == 8
#define TILE3 1
/* C[0:4, 0:3] = A B[0:3]^T (+ bias or beta C), for 16 vector registers (AVX2): 4 rows by 3
 * outputs, 12 accumulators + 3 weight vectors + 1 row vector. dot_tile's 2 x 4 needs 6 loads
 * (4 weights, 2 rows) per 8 multiply-adds and reads each weight vector once per 2 rows; this
 * one 7 per 12, once per 4 rows. One thread, 4 rows by 12 products of 1088 x 256 (13 MB of
 * weights): 493 us with dot_tile, 452 with this (AVX-512's dot_tile is 4 x 4, 32 registers).
 * The same sums as dot_tile: each output's 8 lanes along K, then vsum_all's tree (the 12 sums
 * in two calls, the second padded with zeros that are not stored), then the K % VL tail. */
static void dot_tile3(size_t K, const float *A, size_t lda, const float *B, size_t ldb, const float *bias, float beta,
                      float *C, size_t ldc) {
    vf acc[12];
#pragma GCC unroll 16
    for (int f = 0; f < 12; f++) acc[f] = vbc(0);
    size_t k = 0;
    for (; k + VL <= K; k += VL) {
        vf b[3];
        for (int j = 0; j < 3; j++) {
            if (TILE_PREFETCH(k)) __builtin_prefetch(B + (size_t)(j + 6) * ldb + k);
            b[j] = vld(B + (size_t)j * ldb + k);
            KEEP_IN_REG(b[j]);
        }
        for (int i = 0; i < 4; i++) {
            vf x = vld(A + (size_t)i * lda + k);
            KEEP_IN_REG(x);
            for (int j = 0; j < 3; j++) acc[j * 4 + i] = vfma(x, b[j], acc[j * 4 + i]);
        }
    }
    vf g0[VL], g1[VL]; /* lane L of the sums: output L % 3 of row L / 3, then L + 8 */
    for (int L = 0; L < VL; L++) {
        g0[VSUM_SRC(L)] = acc[(L % 3) * 4 + L / 3];
        g1[VSUM_SRC(L)] = L < 4 ? acc[((L + 8) % 3) * 4 + (L + 8) / 3] : vbc(0);
    }
    float sum[2 * VL];
    vsum_all(g0, sum);
    vsum_all(g1, sum + VL);
    if (k == K) {
        for (int i = 0; i < 4; i++) sums_store(sum + 3 * i, 3, bias, beta, C + (size_t)i * ldc);
        return;
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            dot_finish(sum[3 * i + j], k, K, A + (size_t)i * lda, B + (size_t)j * ldb, bias ? bias + j : NULL, beta,
                       C + (size_t)i * ldc + j);
}
#endif

/* one output: c = a . b (+ bias or beta c) */
static void dot_one(size_t K, const float *a, const float *b, const float *bias, float beta, float *c) {
    vf acc = vbc(0);
    size_t k = 0;
    for (; k + VL <= K; k += VL) acc = vfma(vld(a + k), vld(b + k), acc);
    dot_finish(vsum(acc), k, K, a, b, bias, beta, c);
}

/* c[0:n] = a B[0:n]^T (+ bias or beta c) for one row a: VL outputs at a time, then one at a time */
static void step_dot(size_t n, size_t K, const float *a, const float *B, size_t ldb, const float *bias, float beta,
                     float *c) {
    size_t j = 0;
    for (; j + VL <= n; j += VL) dot_row(K, a, B + j * ldb, ldb, bias ? bias + j : NULL, beta, c + j);
    for (; j < n; j++) dot_one(K, a, B + j * ldb, bias ? bias + j : NULL, beta, c + j);
}

/* Rows at most this many go through step_dots instead of OpenBLAS */
#define STEP_DOT_ROWS 16

/* C[0:M, 0:n] = A B[0:n]^T (+ bias or beta C) for a few rows: for each 4 outputs, the rows of A in
 * tiles of TILE_ROWS, so the 4 weight rows are read from memory once and from L1 for the other
 * row tiles; the rows left over (M % TILE_ROWS) one at a time. */
static void step_dots(size_t M, size_t n, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                      const float *bias, float beta, float *C, size_t ldc) {
#ifdef TILE3
    if (M >= 4) { /* rows in fours, 3 outputs at a time; then the rows left over as below */
        const size_t M4 = M / 4 * 4;
        size_t j = 0;
        for (; j + 3 <= n; j += 3)
            for (size_t i = 0; i < M4; i += 4)
                dot_tile3(K, A + i * lda, lda, B + j * ldb, ldb, bias ? bias + j : NULL, beta, C + i * ldc + j, ldc);
        for (; j < n; j++)
            for (size_t i = 0; i < M4; i++)
                dot_one(K, A + i * lda, B + j * ldb, bias ? bias + j : NULL, beta, C + i * ldc + j);
        M -= M4, A += M4 * lda, C += M4 * ldc;
    }
#endif
    const size_t Mt = M / TILE_ROWS * TILE_ROWS;
    size_t j = 0;
    for (; j + 4 <= n; j += 4)
        for (size_t i = 0; i < Mt; i += TILE_ROWS)
            dot_tile(K, A + i * lda, lda, B + j * ldb, ldb, bias ? bias + j : NULL, beta, C + i * ldc + j, ldc);
    for (; j < n; j++)
        for (size_t i = 0; i < Mt; i++)
            dot_one(K, A + i * lda, B + j * ldb, bias ? bias + j : NULL, beta, C + i * ldc + j);
    for (size_t i = Mt; i < M; i++) step_dot(n, K, A + i * lda, B, ldb, bias, beta, C + i * ldc);
}
#endif

/* piece i: C[:, j0:j1] = A B[j0:j1]^T + (bias[j0:j1] on every row, or beta C) */
static void step_piece_run(void *arg, int i) {
    const step_args *a = arg;
    const size_t j0 = (size_t)i * a->width, j1 = MEGA_MIN(a->N, j0 + a->width);
#ifdef MEGA_VEC
    if (a->M <= STEP_DOT_ROWS) { /* one row too (batch-1 decoding): a row left over, through step_dot */
        step_dots(a->M, j1 - j0, a->K, a->A, a->lda, a->B + j0 * a->ldb, a->ldb, a->bias ? a->bias + j0 : NULL, a->beta,
                  a->C + j0, a->ldc);
        return;
    }
#endif
    if (a->bias) {
        /* the two calls of mega_linear_forward: bias rows, then accumulate */
        for (size_t r = 0; r < a->M; r++) memcpy(a->C + r * a->ldc + j0, a->bias + j0, (j1 - j0) * sizeof(real));
        mega_gemm_serial(0, 1, a->M, j1 - j0, a->K, 1, a->A, a->lda, a->B + j0 * a->ldb, a->ldb, 1, a->C + j0, a->ldc);
    } else {
        mega_gemm_serial(0, 1, a->M, j1 - j0, a->K, 1, a->A, a->lda, a->B + j0 * a->ldb, a->ldb, a->beta, a->C + j0,
                         a->ldc);
    }
}

static void step_product(size_t M, size_t N, size_t K, const real *A, size_t lda, const real *B, size_t ldb,
                         const real *bias, real beta, real *C, size_t ldc) {
    if (M == 0 || N == 0) return;
    step_args a = {M, N, K, 0, A, B, bias, lda, ldb, ldc, beta, C};
    const size_t p = step_piece(M, K);
    int split = M * N * K >= STEP_SPLIT_MIN;
    /* many rows (a prompt) suit no direct kernel: slices of STEP_WIDTH outputs, each packing the
     * rows once (a repack of M x K per M x STEP_WIDTH x K multiply-adds) */
    a.width = p ? MEGA_MIN(p, (size_t)STEP_WIDTH) : STEP_WIDTH;
#ifdef MEGA_VEC
    if (M <= STEP_DOT_ROWS) a.width = STEP_WIDTH / 2; /* step_dot(s): any width; more pieces to share */
#endif
    const size_t n = (N + a.width - 1) / a.width;
    mega_step_parallel((int)n, step_piece_run, &a, split);
}

void mega_gemm_step(size_t M, size_t N, size_t K, const real *A, size_t lda, const real *B, size_t ldb, real beta,
                    real *C, size_t ldc) {
    if (ldb == K && q8_product(A, lda, B, M, K, N, NULL, beta, C, ldc, 1)) return;
    step_product(M, N, K, A, lda, B, ldb, NULL, beta, C, ldc);
}

void mega_linear_step(real *Y, const real *X, const real *W, const real *b, size_t R, size_t In, size_t O) {
    if (q8_product(X, In, W, R, In, O, b, 0, Y, O, 1)) return;
    step_product(R, O, In, X, In, W, In, b, 0, Y, O);
}
