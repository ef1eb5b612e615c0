/*
 * SequenceNorm (official fairseq/modules/sequence_norm.py): layernorm, scalenorm, rmsnorm,
 * batchnorm, all with eps = 1e-5 (docs/mega.md §7). Parameters, by official name under `prefix`
 * (e.g. "mega_layer.norm.norm."): weight/bias (layernorm, batchnorm), weight (rmsnorm),
 * scalar (scalenorm); batchnorm buffers running_mean, running_var, num_batches_tracked.
 */
#ifndef MEGA_SEQNORM_H
#define MEGA_SEQNORM_H
#include "core/params.h"
#include "core/rng.h"


/* synchronized batch statistics (mega_lm_set_batch_sync): fn == NULL = this process's rows */
typedef struct {
    mega_sum_fn fn;
    void *ctx;
} mega_bnsync;

typedef struct {
    mega_norm_type type;
    int D, affine;
    size_t w, b, scalar, rmean, rvar, nbt; /* offsets (valid when present) */
} mega_seqnorm;

#define MEGA_NORM_EPS 1e-5

mega_status mega_seqnorm_declare(mega_seqnorm *n, mega_params *P, const char *prefix, mega_norm_type type,
                                 int D, int affine);
void mega_seqnorm_init(const mega_seqnorm *n, real *W);
/* reals of saved statistics for R rows */
size_t mega_seqnorm_stat_size(const mega_seqnorm *n, size_t R);
/* y[R,D] = norm(x). training: batchnorm uses batch statistics and (if update_stats) updates the
 * running buffers in W; otherwise running statistics. stats receives what backward needs. sync
 * (NULL = none): batchnorm's statistics over the rows of every process (training only). */
void mega_seqnorm_forward(const mega_seqnorm *n, real *W, real *y, real *stats, const real *x, size_t R,
                          int training, int update_stats, const mega_bnsync *sync);
/* y[R,D] = norm(x) again from the statistics a forward saved (the same numbers as that forward's
 * y): the backward's recomputation of a normalised input it did not keep */
void mega_seqnorm_apply(const mega_seqnorm *n, const real *W, real *y, const real *stats, const real *x, size_t R);
/* dx[R,D] = (acc ? dx : 0) + d norm / dx; dW accumulates (this process's rows). Requires the
 * forward's stats and x; sync as in the forward. */
void mega_seqnorm_backward(const mega_seqnorm *n, const real *W, real *dW, real *dx, const real *dy,
                           const real *x, const real *stats, size_t R, int training, int acc, const mega_bnsync *sync);
#endif
