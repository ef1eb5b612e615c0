/* AdamW and gradient utilities over the flat parameter table. */
#include "model/lm.h"

/* mega_adamw is the AdamW row of the optimizer table (src/train): the same handle */
static mega_optim *O(mega_adamw *o) { return (mega_optim *)o; }

mega_status mega_adamw_new(size_t total, mega_adamw **out) {
    return mega_optim_new(MEGA_OPTIM_ADAMW, total, (mega_optim **)out);
}
void mega_adamw_free(mega_adamw *o) { mega_optim_free(O(o)); }
mega_real *mega_adamw_m(mega_adamw *o) { return mega_optim_state(O(o), 0); }
mega_real *mega_adamw_v(mega_adamw *o) { return mega_optim_state(O(o), 1); }
int64_t *mega_adamw_t(mega_adamw *o) { return mega_optim_t(O(o)); }

mega_status mega_adamw_save_moments(const mega_adamw *o, const mega_paramset *ps, mega_st_writer *w) {
    return mega_optim_save((const mega_optim *)o, ps, w);
}
mega_status mega_adamw_load_moments(mega_adamw *o, const mega_paramset *ps, const mega_st_file *f) {
    return mega_optim_load(O(o), ps, f);
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

/* the name src's tensor s would have in dst under map (pairs of prefixes; the first that matches) */
static void renamed(const char *s, const char *const *map, char *out, size_t cap) {
    for (int i = 0; map && map[i] && map[i + 1]; i += 2)
        if (!strncmp(s, map[i], strlen(map[i]))) {
            snprintf(out, cap, "%s%s", map[i + 1], s + strlen(map[i]));
            return;
        }
    snprintf(out, cap, "%s", s);
}

int mega_ps_copy_renamed(mega_paramset *dst, const mega_paramset *src, const char *const *map, uint8_t *copied) {
    mega_params *D = (mega_params *)dst;
    const mega_params *S = (const mega_params *)src;
    int n = 0;
    for (int i = 0; i < D->n; i++) copied[i] = 0;
    for (int j = 0; j < S->n; j++) {
        const mega_pspec *s = &S->specs[j];
        char name[2 * MEGA_NAME_MAX];
        renamed(s->name, map, name, sizeof name);
        for (int i = 0; i < D->n; i++) {
            const mega_pspec *d = &D->specs[i];
            if (copied[i] || strcmp(d->name, name) || d->ndim != s->ndim ||
                memcmp(d->shape, s->shape, (size_t)d->ndim * sizeof *d->shape))
                continue;
            memcpy(D->data + d->offset, S->data + s->offset, d->numel * sizeof(real));
            copied[i] = 1, n++;
            break;
        }
    }
    return n;
}

int mega_ps_copy_matching(mega_paramset *dst, const mega_paramset *src, uint8_t *copied) {
    return mega_ps_copy_renamed(dst, src, NULL, copied);
}

void mega_adamw_step_lm(mega_adamw *o, mega_lm *m, const mega_adamw_hp *hp, double lr) {
    mega_adamw_step(o, mega_lm_paramset(m), hp, lr);
}

void mega_adamw_step(mega_adamw *o, mega_paramset *ps, const mega_adamw_hp *hp, double lr) {
    mega_optim_hp h;
    mega_optim_hp_default(&h);
    h.beta1 = hp->beta1, h.beta2 = hp->beta2, h.eps = hp->eps, h.weight_decay = hp->weight_decay, h.decay_all = hp->decay_all;
    mega_optim_step(O(o), ps, &h, lr);
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
