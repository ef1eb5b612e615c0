/* The learning-rate schedules (MEGA_SCHED_LIST) and the random keys of a training step. */
#include "core/internal.h"

static const struct {
    const char *name, *desc;
    int decays, end_lr;
} KINDS[] = {
#define ROW_(id, nm, dec, end, d) {nm, d, dec, end},
    MEGA_SCHED_LIST(ROW_)
#undef ROW_
};

int mega_sched_count(void) { return MEGA_SCHED_COUNT; }
static int valid(mega_sched_kind k) { return (int)k >= 0 && k < MEGA_SCHED_COUNT; }
const char *mega_sched_name(mega_sched_kind k) { return valid(k) ? KINDS[k].name : NULL; }
const char *mega_sched_describe(mega_sched_kind k) { return valid(k) ? KINDS[k].desc : NULL; }
int mega_sched_is_fairseq(mega_sched_kind k) { return k >= MEGA_SCHED_LINEAR_DECAY && k < MEGA_SCHED_COUNT; }
int mega_sched_decays(mega_sched_kind k) { return valid(k) && KINDS[k].decays; }
double mega_sched_final_lr(const mega_sched_inputs *s) { return valid(s->kind) && KINDS[s->kind].end_lr ? s->end_lr : s->min_lr; }

int mega_sched_find(const char *name) {
    for (int k = 0; name && k < MEGA_SCHED_COUNT; k++)
        if (!strcmp(KINDS[k].name, name)) return k;
    return -1;
}

/* the decay of a mega schedule at progress p (clamped to [0, 1]): from `from` to `to`, cosine or
 * linear; constant stays at `from` */
static double decay(mega_sched_kind k, double from, double to, double p) {
    if (p > 1) p = 1;
    if (p < 0) p = 0;
    if (k == MEGA_SCHED_CONSTANT) return from;
    if (k == MEGA_SCHED_COSINE) return to + 0.5 * (from - to) * (1 + cos(M_PI * p));
    return from + (to - from) * p;
}

/* step is 0-based: linear warm-up to lr, then cosine / linear decay to min_lr, or constant;
 * after a --reschedule at sched_from, the decay restarts there from the rate reached then. With
 * --time-budget the decay's progress is the run's training seconds (`trained`, those of rank 0
 * under MPI) over the budget instead of the step over --steps: a run then reaches min_lr when
 * its time is up, however fast the machine is; the warm-up stays in steps. */
static double mega_rate(const mega_sched_inputs *a, int64_t step, double trained) {
    if (a->time_budget > 0 && !(a->warmup > 0 && step < a->warmup))
        return decay(a->kind, a->lr, a->min_lr, trained / a->time_budget);
    if (a->sched_from > 0 && step >= a->sched_from && a->kind != MEGA_SCHED_CONSTANT) {
        int64_t span = a->steps - a->sched_from;
        return decay(a->kind, a->sched_lr, a->min_lr, span > 0 ? (double)(step - a->sched_from) / (double)span : 1.0);
    }
    if (a->warmup > 0 && step < a->warmup) return a->lr * (double)(step + 1) / (double)a->warmup;
    int64_t span = a->steps - a->warmup;
    return decay(a->kind, a->lr, a->min_lr, span > 0 ? (double)(step - a->warmup) / (double)span : 1.0);
}

/* fairseq's --warmup-init-lr after the scheduler's defaulting */
static double init_lr(const mega_sched_inputs *a) {
    if (a->warmup_init_lr >= 0 && !(a->kind == MEGA_SCHED_LINEAR_DECAY && a->warmup == 0)) return a->warmup_init_lr;
    if (a->kind == MEGA_SCHED_COSINE_FAIRSEQ) return a->min_lr > 0 ? a->min_lr : 0.0;
    return a->warmup > 0 ? 0.0 : a->lr;
}

/* fairseq/optim/lr_scheduler/<name>.py, step_update(num_updates) with n = num_updates, in the same
 * operations (--warmup-power 1, --t-mult 1, --lr-period-updates = steps - warmup, --lr-shrink 0.1,
 * --total-num-update = steps) */
static double fairseq_rate(const mega_sched_inputs *a, int64_t step) {
    const double n = (double)step, w = (double)a->warmup, init = init_lr(a);
    switch (a->kind) {
    case MEGA_SCHED_LINEAR_DECAY: {
        const double wf = a->warmup > 0 ? (a->lr - init) / pow(w, 1) : 0;
        const double lf = (a->lr - a->end_lr) / (double)(a->steps - a->warmup);
        if (step <= a->warmup) return init + pow(n, 1) * wf;
        if (step >= a->steps) return a->end_lr;
        return lf * (double)(a->steps - step) + a->end_lr;
    }
    case MEGA_SCHED_INVERSE_SQRT:
        if (step < a->warmup) return init + n * ((a->lr - init) / w);
        return a->lr * pow(w, 0.5) * pow(n, -0.5);
    default: {
        const double lo = a->min_lr > 0 ? a->min_lr : 0.0, hi = a->lr;
        if (step < a->warmup) return init + n * (a->warmup > 0 ? (hi - init) / w : 1);
        const int64_t period = a->steps - a->warmup, cur = step - a->warmup;
        const int64_t i = (int64_t)floor((double)cur / (double)period), tc = cur - period * i;
        const double shrink = pow(0.1, (double)i), mn = lo * shrink, mx = hi * shrink;
        return mn + 0.5 * (mx - mn) * (1 + cos(M_PI * (double)tc / (double)period));
    }
    }
}

mega_status mega_sched_check(const mega_sched_inputs *a) {
    if (!valid(a->kind)) MEGA_FAIL(MEGA_ERR_INVALID, "no schedule kind %d", (int)a->kind);
    const char *nm = KINDS[a->kind].name;
    switch (a->kind) {
    case MEGA_SCHED_LINEAR_DECAY:
        if (a->warmup == 0 && a->warmup_init_lr >= 0)
            MEGA_FAIL(MEGA_ERR_INVALID, "--lr-scheduler %s: --warmup-init-lr needs --warmup > 0", nm);
        if (a->warmup > 0 && !(init_lr(a) < a->lr))
            MEGA_FAIL(MEGA_ERR_INVALID, "--lr-scheduler %s: --warmup-init-lr %g must be below --lr %g", nm, init_lr(a), a->lr);
        if (a->steps <= a->warmup) MEGA_FAIL(MEGA_ERR_INVALID, "--lr-scheduler %s: --steps must exceed --warmup", nm);
        break;
    case MEGA_SCHED_INVERSE_SQRT:
        if (a->warmup <= 0) MEGA_FAIL(MEGA_ERR_INVALID, "--lr-scheduler %s needs --warmup > 0 (its decay is lr*sqrt(warmup/update))", nm);
        break;
    case MEGA_SCHED_COSINE_FAIRSEQ:
        if (!(a->lr > (a->min_lr > 0 ? a->min_lr : 0)))
            MEGA_FAIL(MEGA_ERR_INVALID, "--lr-scheduler %s: --lr must exceed --min-lr", nm);
        if (a->steps <= a->warmup) MEGA_FAIL(MEGA_ERR_INVALID, "--lr-scheduler %s: --steps must exceed --warmup", nm);
        break;
    default: break;
    }
    if (mega_sched_is_fairseq(a->kind) && (a->time_budget > 0 || a->sched_from > 0))
        MEGA_FAIL(MEGA_ERR_INVALID, "--lr-scheduler %s follows the update count: --time-budget and --reschedule are for "
                  "cosine, linear and constant", nm);
    return MEGA_OK;
}

double mega_lr_at(const mega_sched_inputs *a, int64_t step, double trained) {
    return mega_sched_is_fairseq(a->kind) ? fairseq_rate(a, step) : mega_rate(a, step, trained);
}

uint64_t mega_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
uint64_t mega_dropout_key(uint64_t seed, int64_t step) { return mega_mix64(seed * 0x9E3779B97F4A7C15ull + (uint64_t)step + 0x1234567ull); }
uint64_t mega_shard_key(uint64_t key, int shard) {
    return shard ? mega_mix64(key ^ (0xD1B54A32D192ED03ull * (uint64_t)shard)) : key;
}
