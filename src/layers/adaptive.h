/*
 * Adaptive input and adaptive softmax: a vocabulary cut into frequency bands, the rarer bands
 * given fewer dimensions.
 *
 * Adaptive input (Baevski & Auli 2019, "Adaptive Input Representations for Neural Language
 * Modeling" §3; official fairseq/modules/adaptive_input.py, AdaptiveInput): band i holds the
 * tokens [cut_i, cut_{i+1}) (cut_0 = 0, the last band ends at the vocabulary size) and maps a
 * token to E_i[t - cut_i] (dim_i = floor(d / factor^i)) then to d with P_i (Linear(dim_i, d), no
 * bias). Names "<prefix>embeddings.<i>.0.weight" [size_i, dim_i], "embeddings.<i>.1.weight"
 * [d, dim_i]; only band 0 has a padding row (nn.Embedding padding_idx).
 *
 * Adaptive softmax (Grave et al. 2017, "Efficient softmax approximation for GPUs" §4; official
 * fairseq/modules/adaptive_softmax.py, AdaptiveSoftmax.get_log_prob): a head scores the words of
 * band 0 and one class per tail; tail i scores the words of band i+1 through a projection to
 * dim_i = floor(d / factor^(i+1)):
 *   log p(w) = lsm(head(x))[w]                                  (w < cut_1)
 *   log p(w) = lsm(head(x))[cut_1 + i] + lsm(tail_i(x))[w - cut_{i+1}]   (w in band i+1)
 * with tail_i(x) = O_i dropout(Q_i dropout(x)). Names "<prefix>head.weight" [cut_1 + tails, d],
 * "tail.<i>.0.weight" (Q_i, [dim_i, d]), "tail.<i>.2.weight" (O_i, [size, dim_i]). Tied to an
 * adaptive input (--tie-adaptive-weights; TiedHeadModule, TiedLinear): the head's word rows are
 * the input's band-0 embedding and "head.class_proj.weight" [tails, d] holds the classes, O_i is
 * the input's embeddings.<i+1>.0.weight; with --tie-adaptive-proj Q_i is the input's
 * embeddings.<i+1>.1.weight [d, dim_i] used transposed. Tied matrices are stored once, under the
 * input's names (the official state dict repeats them).
 */
#ifndef MEGA_ADAPTIVE_H
#define MEGA_ADAPTIVE_H
#include "core/params.h"
#include "core/rng.h"

#define MEGA_BANDS_MAX (MEGA_INTS_MAX + 1)

typedef struct {
    int nb, D, padding_idx;
    int64_t cut[MEGA_BANDS_MAX + 1]; /* band b: tokens [cut[b], cut[b+1]) */
    int dim[MEGA_BANDS_MAX];
    size_t emb[MEGA_BANDS_MAX], proj[MEGA_BANDS_MAX];
} mega_adaptive_input;

typedef struct {
    int nt, D, hs;                   /* tails, input width, head outputs (words of band 0 + nt) */
    int64_t cut[MEGA_BANDS_MAX + 1]; /* cut[0] = 0; band b: [cut[b], cut[b+1]); tail i = band i+1 */
    int dim[MEGA_BANDS_MAX];         /* tail i's projection width: dim[i] */
    int tied, tie_proj;
    size_t head;                     /* untied: head.weight [hs, D]; tied: class_proj [nt, D] */
    size_t word;                     /* tied: the input's band-0 embedding [cut[1], D] */
    size_t tproj[MEGA_BANDS_MAX], tout[MEGA_BANDS_MAX];
    double dropout;
} mega_adaptive_softmax;

/* the bands of a cutoff list (0-ended) over V tokens: fills cut[0..nb] and returns nb, or -1
 * (with the error set) when the list is empty, not increasing or past V */
int mega_adaptive_bands(const int *cutoffs, int64_t V, int64_t *cut, const char *what);
/* floor(d / factor^i), as the official int(d // factor ** i) */
int mega_adaptive_dim(int d, double factor, int i);

mega_status mega_adaptive_input_declare(mega_adaptive_input *a, mega_params *P, const char *prefix, int64_t V, int D,
                                        int padding_idx, double factor, const int *cutoffs);
/* official init_weights: embeddings N(0, dim^-1/2) with row padding_idx of EVERY band zeroed (the
 * official closure zeroes weight[padding_idx] in each band), projections Xavier-uniform */
void mega_adaptive_input_init(const mega_adaptive_input *a, real *W, mega_rng *rng);
/* scratch reals for R rows (and R int32 of order) */
size_t mega_adaptive_input_scratch(const mega_adaptive_input *a, size_t R);
/* x[R, D] = scale * P_b E_b[tok - cut_b]; pad rows 0. order: R int32 of scratch space */
void mega_adaptive_input_forward(const mega_adaptive_input *a, const real *W, real *x, const int32_t *tok,
                                 const uint8_t *pad, size_t R, real scale, real *scratch, int32_t *order);
/* dW += the gradients of the embeddings and projections from dx[R, D] (the padding token's row
 * gets none, as nn.Embedding(padding_idx); officially the padding token is in band 0) */
void mega_adaptive_input_backward(const mega_adaptive_input *a, const real *W, real *dW, const real *dx,
                                  const int32_t *tok, const uint8_t *pad, size_t R, real scale, real *scratch,
                                  int32_t *order);

/* inp: the adaptive input to tie to (NULL: own weights) */
mega_status mega_adaptive_softmax_declare(mega_adaptive_softmax *s, mega_params *P, const char *prefix, int64_t V,
                                          int D, double factor, const int *cutoffs, double dropout,
                                          const mega_adaptive_input *inp, int tie_proj);
/* official init: Xavier-uniform for the untied matrices */
void mega_adaptive_softmax_init(const mega_adaptive_softmax *s, real *W, mega_rng *rng);
/* saved for the backward: the dropped-out input (when dropout) and the tails' projections, the
 * head's class log-probabilities; reals for R rows */
size_t mega_adaptive_softmax_acts(const mega_adaptive_softmax *s, size_t R);
/* logp[R, V] = the log-probabilities of every word (get_log_prob); acts: the saved activations
 * (mega_adaptive_softmax_acts reals); training applies the dropout drawn from key */
void mega_adaptive_softmax_forward(const mega_adaptive_softmax *s, const real *W, real *logp, const real *x,
                                   size_t R, int training, uint64_t key, real *acts);
/* dx[R, D] (set) and dW (+=) of g * sum over counted rows of -logp[r, tgt[r]] (tgt < 0: not
 * counted), from the forward's logp (overwritten) and acts */
void mega_adaptive_softmax_backward(const mega_adaptive_softmax *s, const real *W, real *dW, real *dx, real *logp,
                                    const real *x, const int32_t *tgt, size_t R, real g, int training, uint64_t key,
                                    real *acts);
#endif
