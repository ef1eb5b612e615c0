/*
 * Normalized feed-forward network (official normalized_feedforward_network.py,
 * NormalizedFeedForwardNetwork):
 *   prenorm:  y = x + dropout(fc2(activation_dropout(act(fc1(norm(x))))))
 *   postnorm: y = norm(x + dropout(fc2(activation_dropout(act(fc1(x))))))
 * Parameters "<prefix>nffn.fc1.*", "nffn.fc2.*", "nffn.norm.norm.*".
 */
#ifndef MEGA_NFFN_H
#define MEGA_NFFN_H
#include "layers/mixer.h"
#include "layers/seqnorm.h"

typedef struct {
    const mega_block_config *cfg;
    mega_seqnorm norm;
    size_t fc1_w, fc1_b, fc2_w, fc2_b;
} mega_nffn;

/* saved activations: the input norm's statistics (prenorm), fc1's output, the output before the
 * post-norm and its statistics; the normalised input and the hidden activation are recomputed by
 * the backward */
typedef struct {
    real *nstat, *fpre, *ypre, *ystat;
} mega_nffn_acts;

mega_status mega_nffn_declare(mega_nffn *f, mega_params *P, const char *prefix, const mega_block_config *c);
void mega_nffn_init(const mega_nffn *f, real *W, mega_rng *rng);
/* point A into base (NULL: count); returns reals */
size_t mega_nffn_acts_point(const mega_nffn *f, mega_nffn_acts *A, real *base, int B, int T);
/* scratch reals of the forward and the backward */
size_t mega_nffn_scratch(const mega_nffn *f, int B, int T);
void mega_nffn_forward(const mega_nffn *f, real *W, mega_nffn_acts *A, real *out, const real *x, size_t R,
                       const mega_run *run, real *scratch);
void mega_nffn_backward(const mega_nffn *f, const real *W, real *dW, const mega_nffn_acts *A, real *dx,
                        const real *dout, const real *x, size_t R, const mega_run *run, real *scratch);
/* eval-mode FFN for streaming (no saved activations); scratch: mega_nffn_step_scratch reals */
size_t mega_nffn_step_scratch(const mega_nffn *f, size_t R);
void mega_nffn_step(const mega_nffn *f, const real *W, real *out, const real *x, size_t R, real *scratch);
#endif
