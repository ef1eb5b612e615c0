/*
 * Stateless kernels shared by the layers (src/ops/). Shapes in comments are row-major, PyTorch
 * order. Backward kernels ACCUMULATE (+=) into parameter gradients; into input gradients they
 * accumulate as well unless the name says _set.
 */
#ifndef MEGA_OPS_H
#define MEGA_OPS_H
#include "core/internal.h"

/* ---- GEMM (gemm.c): C[M,N] = alpha * op(A) op(B) + beta * C, row-major.
 * op(A) is A[M,K] (ta=0) or A[K,M]^T (ta=1); op(B) is B[K,N] (tb=0) or B[N,K]^T (tb=1).
 * mega_gemm may use BLAS threads; mega_gemm_serial is for calls made inside an OpenMP
 * parallel region (it never spawns threads). */
void mega_gemm(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A, size_t lda,
               const real *B, size_t ldb, real beta, real *C, size_t ldc);
void mega_gemm_serial(int ta, int tb, size_t M, size_t N, size_t K, real alpha, const real *A,
                      size_t lda, const real *B, size_t ldb, real beta, real *C, size_t ldc);

/* Linear layer, torch layout W[O,I], b[O] (b may be NULL): Y[R,O] = X[R,I] W^T + b */
void mega_linear_forward(real *Y, const real *X, const real *W, const real *b, size_t R, size_t In, size_t O);
/* dX[R,I] (+)= dY W (accumulates when acc, else overwrites; dX may be NULL);
 * dW[O,I] += dY^T X; db[O] += colsum(dY) (dW/db may be NULL) */
void mega_linear_backward(real *dX, real *dW, real *db, const real *dY, const real *X, const real *W,
                          size_t R, size_t In, size_t O, int acc);
/* db[O] += sum over rows of dY[R,O] */
void mega_colsum_acc(real *db, const real *dY, size_t R, size_t O);

/* ---- activations (act.c) */
/* mega_act, mega_act_name, mega_act_parse are public (mega.h) */
/* y = f(x) (y may alias x) */
void mega_act_forward(mega_act a, real *y, const real *x, size_t n);
/* dx = dy * f'(x)  (dx may alias dy) */
void mega_act_backward(mega_act a, real *dx, const real *dy, const real *x, size_t n);
static inline real mega_sigmoid(real x) { return (real)1 / ((real)1 + mega_exp(-x)); }
static inline real mega_silu(real x) { return x / ((real)1 + mega_exp(-x)); }
static inline real mega_silu_grad(real x) {
    real s = mega_sigmoid(x);
    return s * ((real)1 + x * ((real)1 - s));
}

/* ---- dropout by counter-based hash (dropout.c): y = x * keep / (1-p), keep ~ Bernoulli(1-p)
 * drawn from (key, index). y may alias x. Backward is the same call on the gradient. */
void mega_dropout(real *y, const real *x, size_t n, double p, uint64_t key);
/* ---- row softmax (softmax.c), shared by every softmax-normalised mixer.
 * In place over n entries; entries equal to -INFINITY are masked (weight 0). A row with no
 * finite entry becomes all zeros (a query with no visible key outputs 0, no NaN).
 * Returns the row's log-sum-exp (+INFINITY for an empty row). */
real mega_softmax_row(real *s, size_t n);
/* given p = softmax row and dp = dL/dp, writes ds = p * (dp - sum(dp * p)) into ds (may alias dp) */
void mega_softmax_row_backward(real *ds, const real *dp, const real *p, size_t n);

/* ---- rotary position embedding (rope.c; SPEC §3.2): rotate the first r dims of x [d] at
 * position pos; half-split pairs (x_i, x_{i+r/2}) or interleaved (x_{2i}, x_{2i+1});
 * theta_i = base^(-2i/r); angles computed in double and reduced mod 2 pi. inverse = 1 rotates by
 * -pos (the backward). */
void mega_rope(real *x, int d, int r, int64_t pos, double base, int interleaved, int inverse);
/* the same in two steps, to share the angles of one position among heads and q/k:
 * cs [r] receives cos (first r/2) and sin (last r/2) of the pair angles */
void mega_rope_angles(real *cs, int r, int64_t pos, double base, int inverse);
void mega_rope_apply(real *x, const real *cs, int r, int interleaved);

/* ---- embeddings (embed.c): rows of E[V,D] scaled into x[R,D]; pad rows (pad[r] != 0) get 0 */
void mega_embedding_forward(real *x, const real *E, const int32_t *tok, const uint8_t *pad, size_t R, size_t D,
                            real scale);
/* dE[tok[r]] += scale * dx[r] for non-pad rows whose token is not padding_idx (nn.Embedding
 * gives the padding row no gradient); serial over rows, so deterministic */
void mega_embedding_backward(real *dE, const real *dx, const int32_t *tok, const uint8_t *pad, size_t R, size_t D,
                             real scale, int padding_idx);
#endif
