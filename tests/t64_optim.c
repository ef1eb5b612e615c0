/*
 * The optimizers and schedules of src/train against the official code, in double precision:
 * tests/fixtures/optim/optim.safetensors, written by tests/ref/ref_apollo.py from class Apollo of
 * the official fairseq/optim/apollo.py (every rebound and weight-decay mode), torch.optim.AdamW,
 * and the official fairseq schedulers linear_decay, inverse_sqrt and cosine (step_update of
 * each update). Also: the optimizer state's save/load round trip (same bits) and the refusal of
 * another kind's state; the mega schedules against the formula tools/train.c applied before the
 * table (warm-up, decay, --time-budget, --reschedule); the dropout and shard keys.
 */
#include "core/params.h"
#include "testlib.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TOL_W 1e-12     /* |ours - official| / max(1, |official|), weights and state after each step */
#define TOL_LR 1e-15    /* relative, schedule rates */

static double g_worst_w, g_worst_lr;

static const double *tensor(const mega_st_file *f, const char *fmt, ...) {
    char nm[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nm, sizeof nm, fmt, ap);
    va_end(ap);
    const mega_st_tensor *t = mega_st_get(f, nm);
    TL_CHECK(t && t->dtype == MEGA_DT_F64, "fixture tensor '%s' present (F64)", nm);
    return t && t->dtype == MEGA_DT_F64 ? (const double *)t->data : NULL;
}

static double cmp(const double *ours, const double *ref, size_t n) {
    double worst = 0;
    for (size_t j = 0; ref && j < n; j++) {
        const double e = fabs(ours[j] - ref[j]) / fmax(1.0, fabs(ref[j]));
        if (!(e <= worst)) worst = e; /* NaN counts */
    }
    return ref ? worst : INFINITY;
}

static int choice(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* the hyper-parameters of case c */
static mega_optim_hp case_hp(const cJSON *c, mega_optim_kind *kind) {
    mega_optim_hp hp;
    mega_optim_hp_default(&hp);
    const char *opt = cJSON_GetObjectItem(c, "optimizer")->valuestring;
    *kind = (mega_optim_kind)mega_optim_find(opt);
    hp.weight_decay = cJSON_GetObjectItem(c, "weight_decay")->valuedouble;
    if (*kind == MEGA_OPTIM_ADAMW) {
        hp.beta1 = cJSON_GetObjectItem(c, "beta1")->valuedouble, hp.beta2 = cJSON_GetObjectItem(c, "beta2")->valuedouble;
        hp.eps = cJSON_GetObjectItem(c, "eps")->valuedouble;
    } else {
        static const char *const rb[] = {"constant", "belief"}, *const wt[] = {"auto", "L2", "decoupled", "stable"};
        hp.apollo_beta = cJSON_GetObjectItem(c, "apollo_beta")->valuedouble;
        hp.apollo_eps = cJSON_GetObjectItem(c, "apollo_eps")->valuedouble;
        hp.apollo_rebound = choice(cJSON_GetObjectItem(c, "rebound")->valuestring, rb, 2);
        hp.weight_decay_type = choice(cJSON_GetObjectItem(c, "weight_decay_type")->valuestring, wt, 4);
    }
    return hp;
}

/* the state of o survives a save and a load with the same bits; another kind's state is refused */
static void roundtrip(mega_optim *o, mega_params *P) {
    char dir[256], path[300];
    if (tl_mkdtemp(dir, sizeof dir, "t64_optim")) return;
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    mega_st_writer *w = mega_st_writer_new();
    mega_status st = w ? mega_optim_save(o, (mega_paramset *)P, w) : MEGA_ERR_OOM;
    if (!st) st = mega_st_writer_write(w, path);
    mega_st_writer_free(w);
    mega_st_file *f = NULL;
    if (!st) st = mega_st_open(path, &f);
    const mega_optim_kind k = mega_optim_kind_of(o), other = k == MEGA_OPTIM_ADAMW ? MEGA_OPTIM_APOLLO : MEGA_OPTIM_ADAMW;
    mega_optim *o2 = NULL, *o3 = NULL;
    if (!st) st = mega_optim_new(k, P->total, &o2);
    if (!st) st = mega_optim_load(o2, (mega_paramset *)P, f);
    int same = !st;
    for (int i = 0; same && i < mega_optim_state_reals(k); i++)
        same = !memcmp(mega_optim_state(o, i), mega_optim_state(o2, i), P->total * sizeof(real));
    TL_CHECK(same, "%s: the state saved and loaded has the same bits (%s)", mega_optim_name(k), st ? mega_last_error() : "ok");
    mega_status ls = f && mega_optim_new(other, P->total, &o3) == MEGA_OK ? mega_optim_load(o3, (mega_paramset *)P, f) : MEGA_OK;
    TL_CHECK(ls == MEGA_ERR_NOT_FOUND, "%s: a %s state file is refused by %s (%s)", mega_optim_name(k), mega_optim_name(k),
             mega_optim_name(other), mega_last_error());
    mega_optim_free(o2), mega_optim_free(o3);
    if (f) mega_st_close(f);
    tl_rm_rf(dir);
}

static void run_optim_case(const mega_st_file *f, const cJSON *c, const int *sizes, const int *decay, int steps) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    mega_optim_kind kind;
    const mega_optim_hp hp = case_hp(c, &kind);
    const cJSON *lrs = cJSON_GetObjectItem(c, "lrs");
    mega_params P;
    mega_params_init(&P);
    size_t off[3];
    for (int i = 0; i < 3; i++) {
        char tn[8];
        snprintf(tn, sizeof tn, "t%d", i);
        const int64_t shape[1] = {sizes[i]};
        mega_params_add(&P, "", tn, 1, shape, decay[i] ? MEGA_P_DECAY : 0, &off[i]);
    }
    mega_optim *o = NULL;
    if (mega_params_alloc(&P, 1) != MEGA_OK || mega_optim_new(kind, P.total, &o) != MEGA_OK) {
        TL_CHECK(0, "%s: allocation (%s)", name, mega_last_error());
        mega_params_free(&P);
        return;
    }
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        const double *w0 = tensor(f, "%s.w0.%d", name, i);
        if (w0) memcpy(P.data + off[i], w0, (size_t)sizes[i] * sizeof(double));
    }
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < 3; i++) {
            const double *g = tensor(f, "%s.g.%d.%d", name, s, i);
            if (g) memcpy(P.grad + off[i], g, (size_t)sizes[i] * sizeof(double));
        }
        mega_optim_step(o, (mega_paramset *)&P, &hp, cJSON_GetArrayItem(lrs, s)->valuedouble);
        for (int i = 0; i < 3; i++) worst = fmax(worst, cmp(P.data + off[i], tensor(f, "%s.w.%d.%d", name, s, i), (size_t)sizes[i]));
    }
    static const char *const adam_st[] = {"exp_avg", "exp_avg_sq"}, *const apollo_st[] = {"exp_avg_grad", "approx_hessian", "update"};
    for (int k = 0; k < mega_optim_state_reals(kind); k++)
        for (int i = 0; i < 3; i++)
            worst = fmax(worst, cmp(mega_optim_state(o, k) + off[i],
                                    tensor(f, "%s.state.%s.%d", name, kind == MEGA_OPTIM_ADAMW ? adam_st[k] : apollo_st[k], i),
                                    (size_t)sizes[i]));
    TL_CHECK(worst <= TOL_W, "%s: %d steps against the official optimizer, worst rel err %.2e <= %.0e", name, steps, worst, TOL_W);
    if (worst > g_worst_w) g_worst_w = worst;
    roundtrip(o, &P);
    mega_optim_free(o);
    mega_params_free(&P);
}

static void run_sched_case(const mega_st_file *f, const cJSON *c) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    mega_sched_inputs s;
    memset(&s, 0, sizeof s);
    s.kind = (mega_sched_kind)mega_sched_find(cJSON_GetObjectItem(c, "kind")->valuestring);
    s.lr = cJSON_GetObjectItem(c, "lr")->valuedouble, s.min_lr = cJSON_GetObjectItem(c, "min_lr")->valuedouble;
    s.warmup = (int64_t)cJSON_GetObjectItem(c, "warmup")->valuedouble, s.steps = (int64_t)cJSON_GetObjectItem(c, "steps")->valuedouble;
    s.warmup_init_lr = cJSON_GetObjectItem(c, "warmup_init_lr")->valuedouble;
    s.end_lr = cJSON_GetObjectItem(c, "end_lr")->valuedouble;
    const int n = cJSON_GetObjectItem(c, "n")->valueint;
    TL_CHECK(mega_sched_check(&s) == MEGA_OK, "%s: the inputs are accepted (%s)", name, mega_last_error());
    const double *ref = tensor(f, "lr.%s", name);
    double worst = 0;
    for (int k = 0; ref && k < n; k++) {
        const double e = fabs(mega_lr_at(&s, k, 0) - ref[k]) / fmax(1e-300, fabs(ref[k]));
        if (!(e <= worst)) worst = e;
    }
    TL_CHECK(worst <= TOL_LR, "%s: %d rates against the official scheduler, worst rel err %.2e", name, n, worst);
    if (worst > g_worst_lr) g_worst_lr = worst;
}

/* the rates tools/train.c computed before the schedule table (its decay() and lr_at()) */
static double old_decay(const char *sc, double from, double to, double p) {
    if (p > 1) p = 1;
    if (p < 0) p = 0;
    if (!strcmp(sc, "constant")) return from;
    if (!strcmp(sc, "cosine")) return to + 0.5 * (from - to) * (1 + cos(M_PI * p));
    return from + (to - from) * p;
}
static double old_lr_at(const mega_sched_inputs *a, const char *sc, int64_t step, double trained) {
    if (a->time_budget > 0 && !(a->warmup > 0 && step < a->warmup)) return old_decay(sc, a->lr, a->min_lr, trained / a->time_budget);
    if (a->sched_from > 0 && step >= a->sched_from && strcmp(sc, "constant")) {
        int64_t span = a->steps - a->sched_from;
        return old_decay(sc, a->sched_lr, a->min_lr, span > 0 ? (double)(step - a->sched_from) / (double)span : 1.0);
    }
    if (a->warmup > 0 && step < a->warmup) return a->lr * (double)(step + 1) / (double)a->warmup;
    int64_t span = a->steps - a->warmup;
    return old_decay(sc, a->lr, a->min_lr, span > 0 ? (double)(step - a->warmup) / (double)span : 1.0);
}

static void test_mega_schedules(void) {
    int bad = 0, n = 0;
    for (int k = MEGA_SCHED_COSINE; k <= MEGA_SCHED_CONSTANT; k++)
        for (int v = 0; v < 4; v++) {
            mega_sched_inputs s;
            memset(&s, 0, sizeof s);
            s.kind = (mega_sched_kind)k, s.lr = 2e-3, s.min_lr = 1e-4, s.warmup = v == 1 ? 0 : 10, s.steps = 50;
            if (v == 2) s.time_budget = 30;
            if (v == 3) s.sched_from = 20, s.sched_lr = 1.3e-3, s.steps = 70;
            for (int64_t st = 0; st < 80; st++, n++) {
                const double tr = 0.5 * (double)st;
                bad += mega_lr_at(&s, st, tr) != old_lr_at(&s, mega_sched_name(s.kind), st, tr);
            }
        }
    TL_CHECK(!bad, "cosine, linear, constant: %d rates equal the formula of tools/train.c (%d differ)", n, bad);
}

static void test_keys(void) {
    /* the values of python/mega's _mix64 formula (seed 7, step 123; shard 3) */
    const uint64_t k = mega_dropout_key(7, 123);
    TL_CHECK(k == 0x5323f0d74c69e8dcull, "dropout key of (7, 123)");
    TL_CHECK(mega_shard_key(k, 0) == k && mega_shard_key(k, 3) == 0x752f231bcd6d8331ull, "shard keys of shard 0 and 3");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    const char *path = "tests/fixtures/optim/optim.safetensors";
    mega_st_file *f = NULL;
    if (mega_st_open(path, &f) != MEGA_OK) {
        TL_CHECK(0, "open %s (%s)", path, mega_last_error());
        return tl_finish();
    }
    cJSON *opt = cJSON_Parse(mega_st_meta(f, "optimizers")), *sch = cJSON_Parse(mega_st_meta(f, "schedules"));
    cJSON *sz = cJSON_Parse(mega_st_meta(f, "sizes")), *dc = cJSON_Parse(mega_st_meta(f, "decay"));
    const int steps = atoi(mega_st_meta(f, "steps"));
    int sizes[3], decay[3];
    for (int i = 0; i < 3; i++) sizes[i] = cJSON_GetArrayItem(sz, i)->valueint, decay[i] = cJSON_GetArrayItem(dc, i)->valueint;
    int nopt = 0, nsch = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, opt) run_optim_case(f, c, sizes, decay, steps), nopt++;
    cJSON_ArrayForEach(c, sch) run_sched_case(f, c), nsch++;
    test_mega_schedules();
    test_keys();
    printf("NOTE t64_optim: %d optimizer cases (worst rel err %.2e), %d fairseq schedule cases (worst %.2e)\n", nopt, g_worst_w,
           nsch, g_worst_lr);
    cJSON_Delete(opt), cJSON_Delete(sch), cJSON_Delete(sz), cJSON_Delete(dc);
    mega_st_close(f);
    return tl_finish();
}
