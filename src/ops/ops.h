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
 * mega_gemm cuts a large product into pieces fixed by its shape and runs them over the threads
 * (one single-threaded BLAS call each), so its result does not depend on the thread count;
 * mega_gemm_serial computes the same pieces on the calling thread (it never spawns threads). */
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
/* The streaming step's forms (decode: few rows, every weight matrix streamed once per token):
 * mega_linear_forward and mega_gemm(0, 1, ..., alpha 1) with the output columns cut into pieces
 * that run through mega_step_parallel when the product is large enough. The pieces' grid depends
 * on the shape only, so the results do not depend on the thread count. They agree with the plain forms to rounding (OpenBLAS may pick another kernel
 * for a piece) and never allocate. */
void mega_linear_step(real *Y, const real *X, const real *W, const real *b, size_t R, size_t In, size_t O);
/* C[M,N] = A[M,K] B[N,K]^T + beta C */
void mega_gemm_step(size_t M, size_t N, size_t K, const real *A, size_t lda, const real *B, size_t ldb, real beta,
                    real *C, size_t ldc);

/* ---- the streaming step's thread team (stepteam.c) ------------------------------------------
 * mega_step_team_run(tu, rows, body, arg) runs body(arg) on the calling thread inside ONE OpenMP
 * region whose other threads serve the mega_step_parallel calls body makes (a decoded token:
 * about 25 of them), instead of a region per call; see stepteam.c. Inside body, any other OpenMP
 * region would be nested (one thread, and libgomp allocates its team), so body must only
 * parallelise through mega_step_parallel. Outside a team (or nested in one) it is body(arg); when
 * the tuner finds the calling thread alone faster (a busy neighbour), body(arg) with every
 * mega_step_parallel inside it on the calling thread.
 * mega_step_parallel(n, fn, arg, split) runs fn(arg, i) for i in [0, n), each i exactly once, on
 * any thread: over the team when called inside one, else over an OpenMP region, and on the
 * calling thread when split is 0, n is 1 or there is one thread. Never allocates. */
typedef void (*mega_step_fn)(void *arg, int i);
/* Whether a stream's calls run on the team or on the calling thread alone (the faster way, timed
 * per row fed, see stepteam.c). Zero-initialised = measure; force 1 = always alone, 2 = always
 * the team (tests). The rest is the tuner's own state. */
typedef struct {
    int force, way, left;
    unsigned windows;
    double seconds, rows, per_row[2];
} mega_step_tuner;
/* tu may be NULL (always the team); rows: the rows this call feeds (the tuner's unit) */
mega_status mega_step_team_run(mega_step_tuner *tu, size_t rows, mega_status (*body)(void *arg), void *arg);
void mega_step_parallel(int n, mega_step_fn fn, void *arg, int split);
/* threads a mega_step_parallel call would use here (1 inside a foreign parallel region) */
int mega_step_threads(void);
/* 1 when step code may open an OpenMP region of several threads here: not inside a step team
 * or another region, and more than one thread */
int mega_step_may_fork(void);

/* ---- activations (act.c) */
/* mega_act, mega_act_name, mega_act_parse are public (mega.h) */
/* y = f(x) (y may alias x) */
void mega_act_forward(mega_act a, real *y, const real *x, size_t n);
/* the same on the calling thread, never entering a parallel region (for row loops that are
 * parallel themselves) */
void mega_act_forward_serial(mega_act a, real *y, const real *x, size_t n);
/* R rows of n: each row alone (its vector lanes and scalar tail the same whatever rows come
 * before it: a decoded sequence's step gives the bits it has alone, model/lm.c rows) */
void mega_act_rows(mega_act a, real *y, const real *x, size_t R, size_t n);
/* dx = dy * f'(x)  (dx may alias dy) */
void mega_act_backward(mega_act a, real *dx, const real *dy, const real *x, size_t n);
/* s[j] = exp(s[j] - m) for j < n (mega_exp's values: exactly 0 for -inf or below the float range),
 * vectorised with FMAs where the build allows; returns the sum of the results when want_sum
 * (else 0). Every build, every head width. */
real mega_exp_sub(real *s, size_t n, real m, int want_sum);
/* sum (x[j] - mu)^2, in the lanes of mega_row_sum (the norms' variance) */
real mega_row_sqdev(const real *x, real mu, size_t n);
/* *sg = sum g w, *sgx = sum g w (x - mu) (w NULL: 1), in lanes (the norms' backward) */
void mega_row_norm_sums(const real *g, const real *w, const real *x, real mu, size_t n, real *sg, real *sgx);
/* s[j] = sigmoid(x[j]) on the calling thread, vectorised where the build has vector e^x (the
 * scalar form is one dependent chain of about twenty operations per element): the building block
 * of the element-wise passes that need silu, its gradient or a sigmoid gate inside their own row
 * loops. s may alias x. */
void mega_sigmoid_row(real *s, const real *x, size_t n);
/* out[r][j] = silu(rows[r * ld + j]) * O[r][j] for R rows of D (O and out packed, D apart): the
 * attention output gated by silu(r) of Mega's layer and of the gated cross-attention; rows split
 * over the threads */
void mega_silu_times(real *out, const real *rows, size_t ld, const real *O, size_t R, size_t D);
/* rows of at most this many entries go through a stack buffer of sigmoids */
#define MEGA_SIG_BLOCK 256
/* The backward of y = a silu(x) over one row of n, on the calling thread, from g = d(y):
 * da = g silu(x), dx = g a silu'(x); g may be da or dx (each g[i] is read before either is
 * written). Megalodon's output gate (attn * silu(r)) and its SwiGLU (silu(fc1) * fc3) take it. */
void mega_silu_times_backward_row(real *da, real *dx, const real *g, const real *a, const real *x, size_t n);
/* The update gate of Mega's layer and of the gated cross-attention (official mega_layer.py and
 * gated_cross_attention.py: out = torch.addcmul(x, u, h - x), u = sigmoid(u_pre)), over R rows of
 * D (u_pre rows ld apart, the others packed): out = x + u (h - x). out may alias x or h. */
void mega_gate_mix(real *out, const real *u_pre, size_t ld, const real *h, const real *x, size_t R, size_t D);
/* its backward from the output gradient g: dx = g (1 - u), dh = g u, du_pre = g (h - x) u (1 - u)
 * (du_pre rows ld apart, like u_pre; it may alias u_pre) */
void mega_gate_mix_backward(real *dx, real *dh, real *du_pre, size_t ld, const real *g, const real *u_pre, const real *h,
                            const real *x, size_t R, size_t D);
static inline real mega_sigmoid(real x) { return (real)1 / ((real)1 + mega_exp(-x)); }
static inline real mega_silu(real x) { return x / ((real)1 + mega_exp(-x)); }
/* silu'(x) given s = sigmoid(x) (from mega_sigmoid_row in the vectorised passes) */
static inline real mega_silu_grad_s(real x, real s) { return s * ((real)1 + x * ((real)1 - s)); }
static inline real mega_silu_grad(real x) { return mega_silu_grad_s(x, mega_sigmoid(x)); }

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
/* max, sum and dot product of a row, vectorised (softmax.c) (fixed-order lanes: deterministic) */
real mega_row_max(const real *x, size_t n);
real mega_row_sum(const real *x, size_t n);
real mega_row_dot(const real *x, const real *y, size_t n);
/* Cross-entropy of output rows: logits [R, V] against tgt [R] (negative = not counted), label
 * smoothing eps as fairseq's label_smoothed_nll_loss (0 = the plain cross-entropy). Writes each
 * row's log-sum-exp to lse (what the backward needs); sums over the counted rows: *tot the loss,
 * *nll the unsmoothed negative log-likelihood, *cnt their number. Independent of the thread count. */
void mega_xent_rows(const real *logits, const int32_t *tgt, real *lse, size_t R, size_t V, double eps, double *tot,
                    double *nll, int64_t *cnt);

/* ---- rotary position embedding (rope.c; RoFormer §3.2): rotate the first r dims of x [d] at
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
