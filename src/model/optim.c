/* AdamW and gradient utilities over the flat parameter table. */
#include "model/lm.h"

struct mega_adamw {
    size_t n;
    real *m, *v;
    int64_t t;
};

mega_status mega_adamw_new(size_t total, mega_adamw **out) {
    *out = NULL;
    mega_adamw *o = calloc(1, sizeof *o);
    if (!o) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    o->n = total;
    o->m = mega__calloc(total, sizeof(real));
    o->v = mega__calloc(total, sizeof(real));
    if (!o->m || !o->v) {
        mega_adamw_free(o);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory allocating optimizer state");
    }
    *out = o;
    return MEGA_OK;
}

void mega_adamw_free(mega_adamw *o) {
    if (!o) return;
    mega__free(o->m);
    mega__free(o->v);
    free(o);
}

mega_real *mega_adamw_m(mega_adamw *o) { return o->m; }
mega_real *mega_adamw_v(mega_adamw *o) { return o->v; }
int64_t *mega_adamw_t(mega_adamw *o) { return &o->t; }

mega_paramset *mega_lm_paramset(mega_lm *m) { return (mega_paramset *)&m->P; }
mega_real *mega_ps_data(mega_paramset *p) { return ((mega_params *)p)->data; }
mega_real *mega_ps_grad(mega_paramset *p) { return ((mega_params *)p)->grad; }
size_t mega_ps_total(const mega_paramset *p) { return ((const mega_params *)p)->total; }
size_t mega_ps_trainable(const mega_paramset *p) { return mega_params_count_trainable((const mega_params *)p); }
int mega_ps_count(const mega_paramset *p) { return ((const mega_params *)p)->n; }
const char *mega_ps_info(const mega_paramset *p, int i, size_t *offset, size_t *numel, unsigned *flags) {
    return mega_params_info((const mega_params *)p, i, offset, numel, flags);
}
void mega_ps_zero_grad(mega_paramset *p) { mega_params_zero_grad((mega_params *)p); }

void mega_adamw_step_lm(mega_adamw *o, mega_lm *m, const mega_adamw_hp *hp, double lr) {
    mega_adamw_step(o, mega_lm_paramset(m), hp, lr);
}

void mega_adamw_step(mega_adamw *o, mega_paramset *ps, const mega_adamw_hp *hp, double lr) {
    mega_params *P = (mega_params *)ps;
    if (!P->grad) return; /* an inference model (mega_load_opts.inference) has no gradients */
    o->t++;
    const double b1 = hp->beta1, b2 = hp->beta2;
    const double c1 = 1.0 - pow(b1, (double)o->t), c2 = 1.0 - pow(b2, (double)o->t);
    const real lr_c = (real)(lr / c1), ic2 = (real)(1.0 / sqrt(c2)), eps = (real)hp->eps;
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        const int decay = hp->weight_decay > 0 && (hp->decay_all || (s->flags & MEGA_P_DECAY));
        const real wd = decay ? (real)(1.0 - lr * hp->weight_decay) : (real)1;
        real *w = P->data + s->offset, *m = o->m + s->offset, *v = o->v + s->offset;
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

double mega_lm_grad_norm(const mega_lm *lm) { return mega_ps_grad_norm((const mega_paramset *)&lm->P); }
void mega_lm_scale_grads(mega_lm *lm, double sc) { mega_ps_scale_grad((mega_paramset *)&lm->P, sc); }

double mega_ps_grad_norm(const mega_paramset *ps) {
    const mega_params *P = (const mega_params *)ps;
    double s = 0;
    if (!P->grad) return 0;
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *sp = &P->specs[i];
        if (sp->flags & MEGA_P_BUFFER) continue;
        const real *g = P->grad + sp->offset;
        double t = 0;
        for (size_t j = 0; j < sp->numel; j++) t += (double)g[j] * g[j];
        s += t;
    }
    return sqrt(s);
}

void mega_ps_scale_grad(mega_paramset *ps, double sc) {
    mega_params *P = (mega_params *)ps;
    real f = (real)sc;
    if (!P->grad) return;
    for (size_t i = 0; i < P->total; i++) P->grad[i] *= f;
}
