/*
 * q8_0: weights in blocks of 32 int8 values with one scale (the Q8_0 type of llama.cpp's ggml:
 * d = max|x| / 127, q = round(x / d), x ~ q d), and the products of a few rows of activations
 * by such a matrix with int8 dot products (docs/quantization.md).
 *
 * A quantized matrix keeps, for rows x K weights, nb = ceil(K / 32) blocks per row: qs (rows x
 * nb*32 int8, a row's last block padded with zeros when K is not a multiple of 32) and d (rows x
 * nb float scales, fp16 values in a file). The activations of a product are quantized the same way
 * per row and per block (a float scale, not rounded to fp16), so that each block's dot product
 * is exact in int32 and only the sum over blocks is in float.
 *
 * The arithmetic every build computes (and mega_q8_dot_ref spells out): for a row w and a row x,
 *   p[b][l] = sum of the 4 products w_i x_i, i = 32b + 4l .. 32b + 4l + 3 (l = 0..7; int32, exact)
 *   acc[g][l] = acc[g][l] + (dw[b] * dx[b]) * (float)p[b][l]   for b = 0, 1, ..., g = b mod 2
 *                                                       (no fused multiply-add)
 *   e[l] = acc[0][l] + acc[1][l];  dot = ((e0 + e4) + (e2 + e6)) + ((e1 + e5) + (e3 + e7))
 * The lane split is the one of an AVX2 / VNNI 8 x int32 vector per block, the two groups those of
 * a 512-bit vector holding two blocks (or two 256-bit chains); the same bits on every path
 * (AVX-512 VNNI, AVX-VNNI, AVX2, portable C), so tests compare them exactly.
 */
#ifndef MEGA_OPS_Q8_H
#define MEGA_OPS_Q8_H
#include "core/internal.h"
#include <stdint.h>

#define MEGA_Q8_BLOCK 32

typedef struct {
    const real *w;   /* the float copy's address: products on w (or rows of it) are looked up by it */
    size_t rows, K;  /* the matrix's shape: rows x K, products Y = X w^T */
    size_t nb;       /* blocks per row, ceil(K / 32) */
    int8_t *qs;      /* rows x nb*32 values in [-127, 127], zero padded (64-byte aligned) */
    float *d;        /* rows x nb scales */
} mega_q8_mat;

/* blocks of a row of K values */
static inline size_t mega_q8_blocks(size_t K) { return (K + MEGA_Q8_BLOCK - 1) / MEGA_Q8_BLOCK; }

/* one row of K values into nb blocks (qs: nb*32 values, the tail zeros; d: nb scales), ggml's rule:
 * d = max|x| / 127, q = round(x * (1/d)) (0 where d = 0). half_scales: each d rounded to fp16 (as
 * a file stores it; the values q were computed with the unrounded d, as ggml does). A block with a
 * non-finite value gets d = NaN (the products then give NaN). */
void mega_q8_quantize_row(const real *x, size_t K, int8_t *qs, float *d, int half_scales);
void mega_q8_dequantize_row(const int8_t *qs, const float *d, size_t K, real *x);
/* fp16 <-> float (round to nearest even; overflow to infinity) */
uint16_t mega_q8_f2h(float f);
float mega_q8_h2f(uint16_t h);

/* the dot product of two quantized rows of nb blocks: the build's kernel, and the scalar reference */
float mega_q8_dot(const int8_t *wq, const float *wd, const int8_t *xq, const float *xd, size_t nb);
float mega_q8_dot_ref(const int8_t *wq, const float *wd, const int8_t *xq, const float *xd, size_t nb);
/* the kernel this build uses: "avx512-vnni", "avx-vnni", "avx2" or "portable" */
const char *mega_q8_kernel(void);

/* Y[R x O] (rows ldy) = X[R x K] . (rows r0 .. r0+O of m)^T + bias (or + beta Y; beta 0 or 1).
 * The rows of X quantized first (into a per-thread buffer that grows once; when it cannot, 0 is
 * returned and nothing is written, so the caller takes its float path). Output rows in pieces
 * through mega_step_parallel when `split`. Each output is one mega_q8_dot: its bits depend on
 * neither the thread count nor the other rows. */
int mega_q8_linear(const mega_q8_mat *m, size_t r0, size_t O, const real *X, size_t R, const real *bias, real beta,
                   real *Y, size_t ldy, int split);

/* The registry the products consult: matrices registered by a model that holds quantized weights
 * (mega__q8_load), looked up by the address of the float copy. Register and unregister happen
 * while a model is loaded or freed, never during another model's products. */
mega_status mega_q8_register(const mega_q8_mat *m);
void mega_q8_unregister(const mega_q8_mat *m);
/* the matrix whose rows r0 .. r0+O are the K-wide rows at W, or NULL (also when none is registered) */
const mega_q8_mat *mega_q8_find(const real *W, size_t K, size_t O, size_t *r0);
#endif
