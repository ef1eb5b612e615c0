/* Apollo (Ma, "Apollo: An Adaptive Parameter-wise Diagonal Quasi-Newton Method for Nonconvex
 * Stochastic Optimization", 2020) exactly as the Mega recipes run it: class Apollo of the official
 * fairseq/optim/apollo.py (facebookresearch/mega). Per tensor, at update t with beta, eps and
 * learning rate lr (no warm-up inside the optimizer: the schedule's warm-up applies):
 *   g' = g + wd w                                   (weight-decay type L2 only)
 *   alpha = (1 - beta) / (1 - beta^t);  dg = g' - m;  m += alpha dg
 *   rebound: belief r = max|dg|; constant r = 0.01 and eps := eps / 0.01
 *   dn = ||d||_4 + eps;  d := d / dn;  delta = -alpha sum(dg/dn * d) - sum(B d^2);  B += d^2 delta
 *   denom = max(|B|, r) + eps/alpha (belief) or max(|B|, r) (constant);  d := m / denom
 *   d += wd' w  (types decoupled: wd' = wd; stable: wd' = wd / mean(denom))
 *   w -= lr d
 * m (exp_avg_grad), B (approx_hessian) and d (update) are the state. The tensor's reductions are
 * summed in double in one fixed order (no threads), so a run resumes with the same bits on any
 * thread count. */
#include "train/optim.h"

static const mega_optim_field FIELDS[] = {
    MEGA__OPTF_WD,
    {"apollo-beta", MEGA_OPTF_DOUBLE, offsetof(mega_optim_hp, apollo_beta), 0, 0.999999, NULL,
     "Apollo: beta of the running averages (fairseq --apollo-beta)"},
    {"apollo-eps", MEGA_OPTF_DOUBLE, offsetof(mega_optim_hp, apollo_eps), 0, 1, NULL, "Apollo: epsilon (fairseq --apollo-eps)"},
    {"apollo-rebound", MEGA_OPTF_CHOICE, offsetof(mega_optim_hp, apollo_rebound), 0, 0, "constant|belief",
     "Apollo: rectified bound of the diagonal Hessian (fairseq --apollo-rebound)"},
    {"weight-decay-type", MEGA_OPTF_CHOICE, offsetof(mega_optim_hp, weight_decay_type), 0, 0, "auto|L2|decoupled|stable",
     "Apollo: weight decay as an L2 term of the gradient, decoupled, or stable (fairseq --weight-decay-type; auto: L2 "
     "with --apollo-rebound constant, decoupled with belief)"},
};
static const char *const STATE[] = {"exp_avg_grad", "approx_hessian", "update"};

/* one tensor: w, g and the state m, B, d of n values; wd: its weight decay (0 = none) */
static void apollo_tensor(real *w, const real *g, real *m, real *B, real *d, size_t n, const mega_optim_hp *hp, int type,
                          double wd, double alpha, double lr) {
    const int belief = hp->apollo_rebound == MEGA_APOLLO_BELIEF;
    const double eps = belief ? hp->apollo_eps : hp->apollo_eps / 0.01;
    double s4 = 0;
    for (size_t j = 0; j < n; j++) s4 += (double)d[j] * d[j] * d[j] * d[j];
    const real dn = (real)(pow(s4, 0.25) + eps), l2 = (real)(type == MEGA_WD_L2 ? wd : 0), ra = (real)alpha;
    double rb = belief ? 0 : 0.01, sum_dg = 0, sum_b = 0;
    for (size_t j = 0; j < n; j++) {
        const real gj = l2 != 0 ? g[j] + l2 * w[j] : g[j];
        const real dg = gj - m[j];
        if (belief && fabs((double)dg) > rb) rb = fabs((double)dg);
        m[j] += ra * dg;
        d[j] /= dn;
        sum_dg += (double)(dg / dn * d[j]);
        sum_b += (double)(B[j] * (d[j] * d[j]));
    }
    const real delta = (real)(sum_dg * -alpha - sum_b), rrb = (real)rb, ea = (real)(eps / alpha);
    double sum_den = 0;
    for (size_t j = 0; j < n; j++) {
        B[j] += d[j] * d[j] * delta;
        real den = R_FABS(B[j]);
        if (den < rrb) den = rrb;
        if (belief) den += ea;
        sum_den += (double)den;
        d[j] = m[j] / den;
    }
    const double wdd = wd != 0 && type != MEGA_WD_L2 ? (type == MEGA_WD_STABLE ? wd / (sum_den / (double)n) : wd) : 0;
    const real rw = (real)wdd, rlr = (real)lr;
    for (size_t j = 0; j < n; j++) {
        if (wdd != 0) d[j] += rw * w[j];
        w[j] -= rlr * d[j];
    }
}

static void apollo_step(struct mega_optim *o, mega_params *P, const mega_optim_hp *hp, double lr) {
    int type = hp->weight_decay_type;
    if (type == MEGA_WD_AUTO) type = hp->apollo_rebound == MEGA_APOLLO_CONSTANT ? MEGA_WD_L2 : MEGA_WD_DECOUPLED;
    const double alpha = (1 - hp->apollo_beta) / (1 - pow(hp->apollo_beta, (double)o->t));
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        const size_t off = s->offset;
        apollo_tensor(P->data + off, P->grad + off, o->s[0] + off, o->s[1] + off, o->s[2] + off, s->numel, hp, type,
                      mega__optim_decays(s, hp) ? hp->weight_decay : 0, alpha, lr);
    }
}

const mega__optim_impl mega__optim_apollo = {FIELDS, sizeof FIELDS / sizeof *FIELDS, STATE, 0u, apollo_step};
