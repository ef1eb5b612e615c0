/*
 * Relative-position bias of Mega (b_rel of Mega eq. (11); official relative_positional_bias.py;
 * docs/mega.md §4).
 * Both kinds depend only on the distance j - i, so both are evaluated as a Toeplitz table
 * btab[Mc-1 + (j-i)], j-i in (-Mc, Mc), which the attention kernel indexes.
 *  - simple: the learned vector `rel_pos_bias` (2M'-1) IS the table (Mc = M'); lengths beyond M'
 *    are an error, as in the official code.
 *  - rotary: Bias[i,j] = rot(alpha, i) . rot(beta, j) (half-split pairs, theta_l = 10000^(-l/h))
 *            = sum_l P_l cos((j-i) theta_l) - Q_l sin((j-i) theta_l),
 *    P_l = a_l b_l + a_{l+h} b_{l+h}, Q_l = a_l b_{l+h} - a_{l+h} b_l; no length limit.
 *    Angles are computed in double precision (project choice; the official code uses float32).
 */
#ifndef MEGA_RELPOS_H
#define MEGA_RELPOS_H
#include "core/params.h"
#include "core/rng.h"

typedef struct {
    int rotary;
    int Mp; /* M' (simple: table half-length) */
    int Z;
    size_t w, alpha, beta;
} mega_relpos;

mega_status mega_relpos_declare(mega_relpos *rp, mega_params *P, const char *prefix, int rotary, int Mp, int Z);
void mega_relpos_init(const mega_relpos *rp, real *W, mega_rng *rng);
/* table for chunks of up to n positions: writes btab (2*Mc-1 reals) and *Mc.
 * Returns MEGA_ERR_INVALID when a simple bias is asked for n > M'. */
mega_status mega_relpos_table(const mega_relpos *rp, const real *W, int n, real *btab, int *Mc);
/* scatter the table gradient back to the parameters (accumulates) */
void mega_relpos_backward(const mega_relpos *rp, const real *W, real *dW, const real *dbtab, int Mc);
/* reals needed for a table covering n positions */
static inline size_t mega_relpos_table_size(const mega_relpos *rp, int n) {
    return rp->rotary ? 2 * (size_t)n - 1 : 2 * (size_t)rp->Mp - 1;
}
#endif
