/* The optimizer table (MEGA_OPTIM_LIST): the generic handle, its state buffers and their
 * tensors in a training-state file. Each kind's fields and update are in src/train/<name>.c. */
#include "train/optim.h"

static const struct {
    const char *name, *desc;
    int state, legacy;
    const mega__optim_impl *impl;
} KINDS[] = {
#define ROW_(id, sym, nm, st, leg, d) {nm, d, st, leg, &mega__optim_##sym},
    MEGA_OPTIM_LIST(ROW_)
#undef ROW_
};

int mega_optim_count(void) { return MEGA_OPTIM_COUNT; }
static int valid(mega_optim_kind k) { return (int)k >= 0 && k < MEGA_OPTIM_COUNT; }
const char *mega_optim_name(mega_optim_kind k) { return valid(k) ? KINDS[k].name : NULL; }
const char *mega_optim_describe(mega_optim_kind k) { return valid(k) ? KINDS[k].desc : NULL; }
int mega_optim_state_reals(mega_optim_kind k) { return valid(k) ? KINDS[k].state : 0; }

mega_optim_kind mega_optim_legacy(void) {
    int k = 0;
    while (k < MEGA_OPTIM_COUNT - 1 && !KINDS[k].legacy) k++;
    return (mega_optim_kind)k;
}

int mega_optim_find(const char *name) {
    for (int k = 0; name && k < MEGA_OPTIM_COUNT; k++)
        if (!strcmp(KINDS[k].name, name)) return k;
    return -1;
}

const mega_optim_field *mega_optim_fields(mega_optim_kind k, int *count) {
    *count = valid(k) ? KINDS[k].impl->nfields : 0;
    return valid(k) ? KINDS[k].impl->fields : NULL;
}

void mega_optim_hp_default(mega_optim_hp *hp) {
    memset(hp, 0, sizeof *hp);
    hp->weight_decay = 0.01;
    hp->beta1 = 0.9, hp->beta2 = 0.98, hp->eps = 1e-8;
    hp->apollo_beta = 0.9, hp->apollo_eps = 1e-4;
    hp->apollo_rebound = MEGA_APOLLO_CONSTANT, hp->weight_decay_type = MEGA_WD_AUTO;
}

mega_status mega_optim_hp_check(mega_optim_kind k, const mega_optim_hp *hp) {
    if (!valid(k)) MEGA_FAIL(MEGA_ERR_INVALID, "no optimizer kind %d", (int)k);
    const mega__optim_impl *im = KINDS[k].impl;
    for (int i = 0; i < im->nfields; i++) {
        const mega_optim_field *f = &im->fields[i];
        if (f->type != MEGA_OPTF_DOUBLE) continue;
        const double v = *(const double *)((const char *)hp + f->offset);
        if (!(v >= f->lo && v <= f->hi)) MEGA_FAIL(MEGA_ERR_INVALID, "--%s %g is outside [%g, %g]", f->name, v, f->lo, f->hi);
    }
    return MEGA_OK;
}

void mega_optim_free(mega_optim *o) {
    if (!o) return;
    for (int i = 0; i < 4; i++) mega__free(o->s[i]);
    free(o);
}

mega_status mega_optim_new(mega_optim_kind k, size_t total, mega_optim **out) {
    *out = NULL;
    if (!valid(k)) MEGA_FAIL(MEGA_ERR_INVALID, "no optimizer kind %d", (int)k);
    mega_optim *o = calloc(1, sizeof *o);
    if (!o) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    o->kind = k, o->n = total;
    for (int i = 0; i < KINDS[k].state; i++)
        if (!(o->s[i] = mega__calloc(total, sizeof(real)))) {
            mega_optim_free(o);
            MEGA_FAIL(MEGA_ERR_OOM, "out of memory allocating optimizer state");
        }
    *out = o;
    return MEGA_OK;
}

mega_optim_kind mega_optim_kind_of(const mega_optim *o) { return o->kind; }
int64_t *mega_optim_t(mega_optim *o) { return &o->t; }
mega_real *mega_optim_state(mega_optim *o, int i) { return i >= 0 && i < KINDS[o->kind].state ? o->s[i] : NULL; }

void mega_optim_step(mega_optim *o, mega_paramset *ps, const mega_optim_hp *hp, double lr) {
    mega_params *P = (mega_params *)ps;
    if (!P->grad) return; /* an inference model (mega_load_opts.inference) has no gradients */
    o->t++;
    KINDS[o->kind].impl->step(o, P, hp, lr);
}

/* state buffer k of trainable tensor s, under its checkpoint name */
static void state_name(const mega_optim *o, int k, const mega_pspec *s, char *buf, size_t n) {
    snprintf(buf, n, "%s.%s", KINDS[o->kind].impl->state_names[k], s->name);
}

mega_status mega_optim_save(const mega_optim *o, const mega_paramset *ps, mega_st_writer *w) {
    const mega_params *P = (const mega_params *)ps;
#ifdef MEGA_F64
    const mega_dtype dt = MEGA_DT_F64;
#else
    const mega_dtype dt = MEGA_DT_F32;
#endif
    char nm[2 * MEGA_NAME_MAX];
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        const int64_t shape[1] = {(int64_t)s->numel};
        for (int k = 0; k < KINDS[o->kind].state; k++) {
            state_name(o, k, s, nm, sizeof nm);
            MEGA_TRY(mega_st_writer_add(w, nm, dt, 1, shape, o->s[k] + s->offset));
        }
    }
    return MEGA_OK;
}

/* state buffer k of tensor s from f, checked against its parameter */
static mega_status load_one(mega_optim *o, int k, const mega_pspec *s, const mega_st_file *f) {
    char nm[2 * MEGA_NAME_MAX];
    state_name(o, k, s, nm, sizeof nm);
    const mega_st_tensor *t = mega_st_get(f, nm);
    if (!t) MEGA_FAIL(MEGA_ERR_NOT_FOUND, "optimizer state for '%s' is missing (no tensor '%s')", s->name, nm);
    /* the moments are a copy of their parameter's layout: a flat float tensor of its size
     * (another dtype or shape is not a state this parameter had) */
    if (!mega_params_is_float(t->dtype))
        MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has dtype %s; optimizer moments are floating point (F32, F64, F16 or BF16)", nm,
                  mega_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != (int64_t)s->numel) {
        char sh[96];
        mega_params_fmt_shape(sh, sizeof sh, t->ndim, t->shape);
        MEGA_FAIL(MEGA_ERR_SHAPE, "tensor '%s' has shape %s, but the moments of '%s' (%zu values) are stored flat: [%zu]", nm,
                  sh, s->name, s->numel, s->numel);
    }
    real *dst = o->s[k] + s->offset;
    MEGA_TRY(mega_st_read_real(t, dst, s->numel));
    /* a NaN or an infinity would only show later as a non-finite loss; a negative second
     * moment as the NaN of its square root */
    const int nonneg = (KINDS[o->kind].impl->nonneg >> k) & 1;
    for (size_t j = 0; j < s->numel; j++) {
        if (!isfinite((double)dst[j]))
            MEGA_FAIL(MEGA_ERR_NUMERIC, "tensor '%s' holds non-finite values (the optimizer state is damaged)", nm);
        if (nonneg && dst[j] < 0)
            MEGA_FAIL(MEGA_ERR_NUMERIC, "tensor '%s' holds negative values (a second moment is a mean of squares)", nm);
    }
    return MEGA_OK;
}

mega_status mega_optim_load(mega_optim *o, const mega_paramset *ps, const mega_st_file *f) {
    const mega_params *P = (const mega_params *)ps;
    if (o->n != P->total) MEGA_FAIL(MEGA_ERR_INVALID, "mega_optim_load: the optimizer is not of this parameter set");
    for (int i = 0; i < P->n; i++) {
        const mega_pspec *s = &P->specs[i];
        if (s->flags & MEGA_P_BUFFER) continue;
        for (int k = 0; k < KINDS[o->kind].state; k++) MEGA_TRY(load_one(o, k, s, f));
    }
    return MEGA_OK;
}
