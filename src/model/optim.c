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

/* the moments of trainable tensor s of P, under their checkpoint names */
static void moment_names(const mega_pspec *s, char *m, char *v, size_t n) {
    snprintf(m, n, "exp_avg.%s", s->name);
    snprintf(v, n, "exp_avg_sq.%s", s->name);
}

mega_status mega_adamw_save_moments(const mega_adamw *o, const mega_paramset *ps, mega_st_writer *w) {
    const mega_params *P = (const mega_params *)ps;
#ifdef MEGA_F64
    const mega_dtype dt = MEGA_DT_F64;
#else
    const mega_dtype dt = MEGA_DT_F32;
#endif
    char nm[2][2 * MEGA_NAME_MAX];
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        const int64_t shape[1] = {(int64_t)s->numel};
        moment_names(s, nm[0], nm[1], sizeof nm[0]);
        MEGA_TRY(mega_st_writer_add(w, nm[0], dt, 1, shape, o->m + s->offset));
        MEGA_TRY(mega_st_writer_add(w, nm[1], dt, 1, shape, o->v + s->offset));
    }
    return MEGA_OK;
}

mega_status mega_adamw_load_moments(mega_adamw *o, const mega_paramset *ps, const mega_st_file *f) {
    const mega_params *P = (const mega_params *)ps;
    if (o->n != P->total) MEGA_FAIL(MEGA_ERR_INVALID, "mega_adamw_load_moments: the optimizer is not of this parameter set");
    char nm[2][2 * MEGA_NAME_MAX];
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        moment_names(s, nm[0], nm[1], sizeof nm[0]);
        for (int k = 0; k < 2; k++) {
            const mega_st_tensor *t = mega_st_get(f, nm[k]);
            if (!t) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "optimizer state for '%s' is missing (no tensor '%s')", s->name, nm[k]);
            /* the moments are a copy of their parameter's layout: a flat float tensor of its size
             * (another dtype or shape is not a state this parameter had) */
            if (!mega_params_is_float(t->dtype))
                MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has dtype %s; optimizer moments are floating point (F32, F64, F16 or BF16)",
                          nm[k], mega_dtype_name(t->dtype));
            if (t->ndim != 1 || t->shape[0] != (int64_t)s->numel) {
                char sh[96];
                mega_params_fmt_shape(sh, sizeof sh, t->ndim, t->shape);
                MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has shape %s, but the moments of '%s' (%zu values) are stored flat: [%zu]",
                          nm[k], sh, s->name, s->numel, s->numel);
            }
            real *dst = (k ? o->v : o->m) + s->offset;
            MEGA_TRY(mega_st_read_real(t, dst, s->numel));
            /* a NaN or an infinity would only show later as a non-finite loss; a negative second
             * moment as the NaN of its square root */
            for (size_t j = 0; j < s->numel; j++) {
                if (!isfinite((double)dst[j]))
                    MEGA_FAIL(MEGA_ERR_NUMERIC, "tensor '%s' holds non-finite values (the optimizer state is damaged)", nm[k]);
                if (k && dst[j] < 0)
                    MEGA_FAIL(MEGA_ERR_NUMERIC, "tensor '%s' holds negative values (a second moment is a mean of squares)", nm[k]);
            }
        }
    }
    return MEGA_OK;
}

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
