/* AdamW (decoupled weight decay, Loshchilov & Hutter), in the order of torch.optim.AdamW:
 * m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2, w = w (1 - lr wd) - lr/c1 * m / (sqrt(v)/sqrt(c2) + eps)
 * with the bias corrections c1 = 1 - b1^t, c2 = 1 - b2^t. */
#include "train/optim.h"

static const mega_optim_field FIELDS[] = {
    MEGA__OPTF_WD,
    {"beta1", MEGA_OPTF_DOUBLE, offsetof(mega_optim_hp, beta1), 0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", MEGA_OPTF_DOUBLE, offsetof(mega_optim_hp, beta2), 0, 0.999999999, NULL, "AdamW beta2"},
    {"eps", MEGA_OPTF_DOUBLE, offsetof(mega_optim_hp, eps), 1e-30, 1, NULL, "AdamW epsilon"},
};
static const char *const STATE[] = {"exp_avg", "exp_avg_sq"};

static void adamw_step(struct mega_optim *o, mega_params *P, const mega_optim_hp *hp, double lr) {
    const double b1 = hp->beta1, b2 = hp->beta2;
    const double c1 = 1.0 - pow(b1, (double)o->t), c2 = 1.0 - pow(b2, (double)o->t);
    const real lr_c = (real)(lr / c1), ic2 = (real)(1.0 / sqrt(c2)), eps = (real)hp->eps;
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        const real wd = mega__optim_decays(s, hp) ? (real)(1.0 - lr * hp->weight_decay) : (real)1;
        real *w = P->data + s->offset, *m = o->s[0] + s->offset, *v = o->s[1] + s->offset;
        const real *g = P->grad + s->offset;
        const real rb1 = (real)b1, rb2 = (real)b2;
#pragma omp parallel for schedule(static) if (s->numel > MEGA_PAR_MIN)
        for (size_t j = 0; j < s->numel; j++) {
            real gj = g[j];
            m[j] = rb1 * m[j] + (1 - rb1) * gj;
            v[j] = rb2 * v[j] + (1 - rb2) * gj * gj;
            /* decoupled decay, then the bias-corrected Adam step (torch.optim.AdamW order) */
            w[j] = w[j] * wd - lr_c * m[j] / (R_SQRT(v[j]) * ic2 + eps);
        }
    }
}

const mega__optim_impl mega__optim_adamw = {FIELDS, sizeof FIELDS / sizeof *FIELDS, STATE, 2u, adamw_step};
