/*
 * mega train: the training loop shared by every task (language model, classifier, translation).
 *
 * Checkpoint directory (--out DIR; the protocol is in ckpt.h and docs/checkpoints.md):
 *   step-<N>.model.safetensors   weights by official name; __metadata__: config (JSON), step, and
 *                                the task's data description (classifier vocabulary and classes)
 *   step-<N>.state.safetensors   the optimizer's state (AdamW: exp_avg.<name>, exp_avg_sq.<name>;
 *                                mega_optim_save), step, RNG and data fingerprint; __metadata__:
 *                                train (JSON, with "optimizer"), step
 *   step-<N>.manifest.json       written last: both files' sizes and checksums
 *   model.safetensors, train_state.safetensors   copies of the newest complete generation
 *   log.jsonl                    the training curve, one JSON object per line
 *   checkpoint.json              {"step", "task", "model", "state", "manifest"}
 *   best.safetensors             the model at the best validation figure so far (--best-metric),
 *                                rewritten atomically whenever validation improves; __metadata__:
 *                                step, task, best-metric, best-value
 *   train.lock                   held by the one mega train writing the directory
 * --resume continues from the newest complete generation. SIGINT / SIGTERM save a checkpoint at
 * the end of the current step and exit 130 / 143; a second signal ends the process at once.
 */
#include "ckpt.h"
#include "dist.h"
#include "task.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* the schedule's inputs from the flags (an unknown name is refused before: by the flag parser, or
 * by new_task for a checkpoint's) */
static mega_sched_inputs sched_of(const train_args *a) {
    mega_sched_inputs s;
    memset(&s, 0, sizeof s);
    const int k = mega_sched_find(a->schedule);
    s.kind = k < 0 ? MEGA_SCHED_COSINE : (mega_sched_kind)k;
    s.lr = a->lr, s.min_lr = a->min_lr, s.warmup = a->warmup, s.steps = a->steps;
    s.warmup_init_lr = a->warmup_init_lr, s.end_lr = a->end_lr;
    s.time_budget = a->time_budget, s.sched_from = a->sched_from, s.sched_lr = a->sched_lr;
    return s;
}

/* the learning rate of 0-based step `step` (mega_lr_at) */
static double lr_at(const train_args *a, int64_t step, double trained) {
    const mega_sched_inputs s = sched_of(a);
    return mega_lr_at(&s, step, trained);
}

/* the rate the schedule ends at (--end-learning-rate or --min-lr) */
static double final_lr(const train_args *a) {
    const mega_sched_inputs s = sched_of(a);
    return mega_sched_final_lr(&s);
}

/* The training hyper-parameters stored in a checkpoint and restored by --resume: these flags of
 * the command's table (their JSON keys are the flag names). */
static const char *const STORED[] = {"task", "steps", "batch", "seq-len", "lr", "min-lr", "warmup", "schedule",
                                     "weight-decay", "decay-all", "clip", "beta1", "beta2", "eps", "seed", "valid-fraction",
                                     "max-tokens", "label-smoothing", "time-budget", "optimizer"};
#define NSTORED (sizeof STORED / sizeof *STORED)

/* where a run stands: the step, the data position, and the run's training seconds and its
 * seconds of validation and checkpoint saves up to this step (stored with a --time-budget) */
typedef struct {
    int64_t step;
    uint64_t data_rng, data_hash, data_size;
    double train_seconds, eval_seconds;
    /* the best validation figure so far, its step (0 = none yet: no best.safetensors), and the
     * validations since it (the --patience count); stored with the state, restored by --resume */
    double best_value;
    int64_t best_step, bad_evals;
} train_pos;

/* flag f's value into the stored setup o */
static void json_add_flag(cJSON *o, const cli_flag *f) {
    switch (f->kind) {
    case F_INT: cJSON_AddNumberToObject(o, f->name, *(const int *)f->dst); break;
    case F_I64: cJSON_AddNumberToObject(o, f->name, (double)*(const int64_t *)f->dst); break;
    case F_DBL: cJSON_AddNumberToObject(o, f->name, *(const double *)f->dst); break;
    case F_SET: cJSON_AddBoolToObject(o, f->name, *(const int *)f->dst); break;
    case F_ENUM: cJSON_AddStringToObject(o, f->name, *(const char *const *)f->dst); break;
    case F_CHOICE: { /* the name of the choice, as on the command line */
        const char *c = f->choices;
        for (int v = *(const int *)f->dst; v > 0 && c; v--) c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL;
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", c ? (int)strcspn(c, "|") : 0, c ? c : "");
        cJSON_AddStringToObject(o, f->name, buf);
        break;
    }
    default: break;
    }
}

/* the stored setup's flags beyond STORED: the optimizer's own hyper-parameters (kind k; -1 =
 * every kind's) and the fairseq schedules' (sched: with a fairseq schedule; a run of another
 * optimizer or schedule stores none of them, as before they existed) */
static int extra_stored(const char *name, int k, int sched) {
    for (size_t i = 0; i < NSTORED; i++)
        if (!strcmp(STORED[i], name)) return 0;
    if (sched && (!strcmp(name, "warmup-init-lr") || !strcmp(name, "end-learning-rate"))) return 1;
    for (int j = 0; j < mega_optim_count(); j++) {
        int nf;
        const mega_optim_field *of = mega_optim_fields((mega_optim_kind)j, &nf);
        for (int i = 0; (k < 0 || k == j) && i < nf; i++)
            if (!strcmp(of[i].name, name)) return 1;
    }
    return 0;
}

/* the stored training setup; pos: where the run stands (NULL: the setup alone) */
static char *train_json(const train_args *a, const train_pos *pos) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < NSTORED; i++) {
        const cli_flag *f = cli_flag_named(a->flags, STORED[i]);
        if (!f) continue;
        if (f->dst == &a->time_budget && a->time_budget <= 0) continue; /* older runs' files stay as they were */
        json_add_flag(o, f);
    }
    const int sched = mega_sched_is_fairseq((mega_sched_kind)mega_sched_find(a->schedule));
    for (const cli_flag *f = a->flags; o && f->name; f++)
        if (extra_stored(f->name, mega_optim_find(a->optimizer), sched)) json_add_flag(o, f);
    if (o && a->sched_from > 0) { /* only after a --reschedule: older runs' files stay as they were */
        cJSON_AddNumberToObject(o, "schedule-from", (double)a->sched_from);
        cJSON_AddNumberToObject(o, "schedule-from-lr", a->sched_lr);
    }
    if (o && a->time_budget > 0 && pos) { /* where the time-based schedule stands: --resume continues it */
        cJSON_AddNumberToObject(o, "train-seconds", pos->train_seconds);
        cJSON_AddNumberToObject(o, "eval-seconds", pos->eval_seconds);
    }
    if (o) cJSON_AddNumberToObject(o, "patience", (double)(a->patience > 0 ? a->patience : 0));
    if (o && pos && pos->best_step > 0) { /* the best so far and the patience count: --resume continues them */
        cJSON_AddStringToObject(o, "best-metric", a->best_metric);
        cJSON_AddNumberToObject(o, "best-value", pos->best_value);
        cJSON_AddNumberToObject(o, "best-step", (double)pos->best_step);
        cJSON_AddNumberToObject(o, "bad-evals", (double)pos->bad_evals);
    }
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* the stored values into the flags' variables ("task" is decided by the checkpoint's model) */
static void restore_train_json(train_args *a, const cJSON *tj) {
    static char strs[NSTORED][32]; /* string values outlive the JSON */
    for (const cli_flag *f = a->flags; f->name; f++) {
        size_t i = 0;
        while (i < NSTORED && strcmp(STORED[i], f->name)) i++;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tj, f->name);
        if (!v || !strcmp(f->name, "task") || (i == NSTORED && !extra_stored(f->name, -1, 1))) continue;
        if (f->kind == F_INT && cJSON_IsNumber(v)) *(int *)f->dst = (int)v->valuedouble;
        else if (f->kind == F_I64 && cJSON_IsNumber(v)) *(int64_t *)f->dst = (int64_t)v->valuedouble;
        else if (f->kind == F_DBL && cJSON_IsNumber(v)) *(double *)f->dst = v->valuedouble;
        else if (f->kind == F_SET) *(int *)f->dst = cJSON_IsTrue(v);
        else if (f->kind == F_ENUM && cJSON_IsString(v) && i < NSTORED) {
            snprintf(strs[i], sizeof strs[i], "%s", v->valuestring);
            *(const char **)f->dst = strs[i];
        } else if (f->kind == F_CHOICE && cJSON_IsString(v)) {
            int k = 0;
            for (const char *c = f->choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL, k++)
                if (strlen(v->valuestring) == strcspn(c, "|") && !strncmp(c, v->valuestring, strcspn(c, "|"))) *(int *)f->dst = k;
        }
    }
    /* a run saved before the optimizer table trained with AdamW */
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(tj, "optimizer"))) a->optimizer = mega_optim_name(mega_optim_legacy());
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(tj, "schedule-from");
    const cJSON *from_lr = cJSON_GetObjectItemCaseSensitive(tj, "schedule-from-lr");
    a->sched_from = cJSON_IsNumber(from) && cJSON_IsNumber(from_lr) ? (int64_t)from->valuedouble : 0;
    a->sched_lr = a->sched_from > 0 ? from_lr->valuedouble : 0;
    /* a run without a stored budget follows its steps, whatever this invocation's flag says */
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tj, "time-budget"))) a->time_budget = 0;
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(tj, "train-seconds");
    const cJSON *es = cJSON_GetObjectItemCaseSensitive(tj, "eval-seconds");
    a->trained_seconds = a->time_budget > 0 && cJSON_IsNumber(ts) && ts->valuedouble > 0 ? ts->valuedouble : 0;
    a->evaled_seconds = a->time_budget > 0 && cJSON_IsNumber(es) && es->valuedouble > 0 ? es->valuedouble : 0;
}

/* --resume: the best so far, the patience count and --best-metric / --patience from the stored
 * setup (a run saved before they existed has none: its best starts at its next validation, and
 * it never stops early, as before); an explicit --patience replaces the stored one */
static void restore_best(train_args *a, const cJSON *tj, train_pos *pos) {
    static char metric[32];
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(tj, "best-metric"), *v = cJSON_GetObjectItemCaseSensitive(tj, "best-value");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(tj, "best-step"), *b = cJSON_GetObjectItemCaseSensitive(tj, "bad-evals");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(tj, "patience");
    if (!cli_seen(a->flags, "patience")) a->patience = cJSON_IsNumber(pt) ? (int64_t)pt->valuedouble : 0;
    if (!cJSON_IsString(m) || !cJSON_IsNumber(v) || !cJSON_IsNumber(s) || !cJSON_IsNumber(b)) return;
    if (cli_seen(a->flags, "best-metric") && strcmp(a->best_metric, m->valuestring))
        fprintf(stderr, "mega: note: --resume keeps the run's --best-metric %s; the flag is ignored\n", m->valuestring);
    snprintf(metric, sizeof metric, "%s", m->valuestring);
    a->best_metric = metric;
    pos->best_value = v->valuedouble, pos->best_step = (int64_t)s->valuedouble, pos->bad_evals = (int64_t)b->valuedouble;
}

/* ---- checkpoint ------------------------------------------------------------------------- */

/* one checkpoint generation (ckpt.h): the model, the optimizer state, then the commit */
static int save_checkpoint(const train_args *a, task *t, mega_optim *opt, const train_pos *pos) {
    char mp[4096], sp[4096], stepstr[32];
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)pos->step);
    ckpt_paths(a->out, pos->step, mp, sp, sizeof mp);
    /* 1. the model, with its step in the metadata */
    const char *kv[] = {"step", stepstr, "task", t->kind, NULL};
    if (t->save(t, mp, kv) != MEGA_OK) return cli_error("saving the model: %s", mega_last_error());
    /* 2. the optimizer state */
    mega_st_writer *w = mega_st_writer_new();
    if (!w) return cli_error("out of memory");
    mega_status st = mega_optim_save(opt, t->ps, w);
    int64_t scal[5] = {pos->step, *mega_optim_t(opt), (int64_t)pos->data_rng, (int64_t)pos->data_hash, (int64_t)pos->data_size};
    const char *sn[5] = {"step", "adam_step", "data_rng", "data_hash", "data_size"};
    for (int i = 0; i < 5 && !st; i++) st = mega_st_writer_add(w, sn[i], MEGA_DT_I64, 0, NULL, &scal[i]);
    char *tjs = train_json(a, pos);
    if (!st) st = mega_st_writer_meta(w, "train", tjs ? tjs : "{}");
    if (!st) st = mega_st_writer_meta(w, "step", stepstr);
    if (!st) st = mega_st_writer_meta(w, "data", a->data ? a->data : a->images ? a->images : "");
    if (!st) st = mega_st_writer_write(w, sp);
    mega_st_writer_free(w);
    if (st) {
        free(tjs);
        return cli_error("saving the optimizer state: %s", mega_last_error());
    }
    /* 3. the manifest, the stable copies, and the older generations beyond --keep */
    int rc = ckpt_commit(a->out, pos->step, t->kind, tjs, a->keep);
    free(tjs);
    return rc;
}

/* best.safetensors: the model at this step, whose validation figure is the best so far */
static int save_best(const train_args *a, task *t, const train_pos *pos) {
    char path[4096], stepstr[32], value[64];
    path_join(path, sizeof path, a->out, "best.safetensors");
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)pos->step);
    snprintf(value, sizeof value, "%.17g", pos->best_value);
    const char *kv[] = {"step", stepstr, "task", t->kind, "best-metric", a->best_metric, "best-value", value, NULL};
    if (t->save(t, path, kv) != MEGA_OK) return cli_error("saving the best model: %s", mega_last_error());
    return 0;
}

static int64_t st_i64(const mega_st_file *f, const char *name, int *ok) {
    const mega_st_tensor *t = mega_st_get(f, name);
    if (!t || t->dtype != MEGA_DT_I64 || t->numel != 1) {
        *ok = 0;
        return 0;
    }
    int64_t v;
    memcpy(&v, t->data, 8);
    return v;
}

static int load_state_file(const char *path, mega_paramset *ps, mega_optim *opt, train_pos *pos) {
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return cli_error("%s", mega_last_error());
    int ok = 1;
    pos->step = st_i64(f, "step", &ok);
    *mega_optim_t(opt) = st_i64(f, "adam_step", &ok);
    pos->data_rng = (uint64_t)st_i64(f, "data_rng", &ok);
    pos->data_hash = (uint64_t)st_i64(f, "data_hash", &ok);
    pos->data_size = (uint64_t)st_i64(f, "data_size", &ok);
    if (!ok) {
        mega_st_close(f);
        return cli_error("%s: missing step/RNG records (not a mega train_state file)", path);
    }
    if (mega_optim_load(opt, ps, f) != MEGA_OK) {
        mega_st_close(f);
        return cli_error("%s: %s", path, mega_last_error());
    }
    mega_st_close(f);
    return 0;
}

/* the step recorded in model.safetensors' metadata (-1 if absent) and its task (as recorded, else
 * the task of its model's kind; the first task when unreadable) */
static int64_t model_step(const char *path, char *task_out, size_t n) {
    mega_st_file *f;
    int64_t s = -1;
    if (task_out) snprintf(task_out, n, "%s", TASKS[0].name);
    if (mega_st_open(path, &f) == MEGA_OK) {
        const char *ss = mega_st_meta(f, "step");
        if (ss) s = atoll(ss);
        const char *tk = mega_st_meta(f, "task");
        mega_model_kind k;
        const task_def *td = mega_model_kind_of_json(mega_st_meta(f, "config"), &k) == MEGA_OK ? task_of_kind(k) : NULL;
        if (task_out && tk) snprintf(task_out, n, "%s", tk);
        else if (task_out && td) snprintf(task_out, n, "%s", td->name);
        mega_st_close(f);
    }
    return s;
}

/* the log as a stream, opened without following a link (NULL: errno ELOOP after the error, or
 * another errno unreported) */
static FILE *log_stream(const char *path, int mode) {
    const int fd = run_open(path, O_WRONLY | O_CREAT | mode);
    FILE *f = fd >= 0 ? fdopen(fd, mode == O_APPEND ? "a" : "w") : NULL;
    if (fd >= 0 && !f) close(fd);
    return f;
}

/* the log, opened for appending (NULL after the error) */
static FILE *open_log(const train_args *a, int64_t keep_upto) {
    char p[4096];
    path_join(p, sizeof p, a->out, "log.jsonl");
    FILE *f = NULL;
    struct stat ls;
    if (lstat(p, &ls) == 0 && S_ISLNK(ls.st_mode)) /* not even read: the cut-back rewrite would replace the link */
        return run_link_error(p), NULL;
    if (a->resume && file_exists(p)) {
        /* drop entries written after the checkpoint we resume from, so the curve stays one line */
        mega_bytes b = {NULL, 0, 0};
        struct stat sb;
        if (stat(p, &sb) == 0 && sb.st_size == 0) {
            /* an empty log: nothing to drop */
        } else if (mega_read_file(p, "log", &b) != MEGA_OK) {
            return cli_error("%s", mega_last_error()), NULL;
        } else {
            size_t o = 0, keep = 0;
            while (o < b.n) {
                size_t e = o;
                while (e < b.n && b.data[e] != '\n') e++;
                const char *s = strstr((const char *)b.data + o, "\"step\":");
                long long st = s && (size_t)(s - (const char *)b.data) < e ? atoll(s + 7) : 0;
                if (st > keep_upto) break;
                keep = e < b.n ? e + 1 : e;
                o = e + 1;
            }
            mega_status st = keep < b.n ? mega_write_file_atomic(p, b.data, keep) : MEGA_OK;
            mega_bytes_free(&b);
            if (st) return cli_error("%s", mega_last_error()), NULL;
        }
        f = log_stream(p, O_APPEND);
    } else {
        f = log_stream(p, O_TRUNC);
    }
    if (!f && errno != ELOOP) cli_error("cannot write the log '%s'", p);
    return f;
}

/* ---- the command: flags ------------------------------------------------------------------ */

#define MAX_FLAGS 128

/* "a|b|c" of a table's names */
static const char *table_choices(char *buf, size_t size, int n, const char *(*name)(int)) {
    size_t o = 0;
    for (int k = 0; k < n && o < size; k++) o += (size_t)snprintf(buf + o, size - o, "%s%s", k ? "|" : "", name(k));
    return buf;
}
static const char *optim_name_(int k) { return mega_optim_name((mega_optim_kind)k); }
static const char *sched_name_(int k) { return mega_sched_name((mega_sched_kind)k); }
static const char *optim_choices(void) {
    static char buf[256];
    return table_choices(buf, sizeof buf, mega_optim_count(), optim_name_);
}
static const char *sched_choices(void) {
    static char buf[256];
    return table_choices(buf, sizeof buf, mega_sched_count(), sched_name_);
}

/* the hyper-parameter flags of every optimizer (from their field tables; a field several kinds
 * share once), into a->opt; n: the flags so far; the new count, or -1 when they do not fit */
static int add_optim_flags(cli_flag *fl, int n, train_args *a) {
    static const flag_kind kinds[] = {F_DBL, F_SET, F_CHOICE};
    for (int k = 0; n >= 0 && k < mega_optim_count(); k++) {
        int nf;
        const mega_optim_field *of = mega_optim_fields((mega_optim_kind)k, &nf);
        for (int i = 0; i < nf; i++) {
            int dup = 0;
            for (int j = 0; j < n; j++) dup |= !strcmp(fl[j].name, of[i].name);
            if (dup) continue;
            if (n + 1 >= MAX_FLAGS) return -1;
            cli_flag g = {of[i].name, kinds[of[i].type], (char *)&a->opt + of[i].offset, of[i].help, of[i].choices,
                          of[i].lo, of[i].hi, 0};
            if (of[i].type != MEGA_OPTF_DOUBLE) g.lo = 1, g.hi = 0;
            fl[n++] = g;
        }
    }
    return n;
}

/* the defaults of the training flags (the model's are its config's defaults) */
static void set_defaults(train_args *a) {
    memset(a, 0, sizeof *a);
    a->task = TASKS[0].name, a->format = "auto";
    a->valid_fraction = 0.05, a->pixel_mean = 0.5, a->pixel_std = 0.5;
    mega_lm_config_default(&a->lm);
    mega_cls_config_default(&a->cls);
    mega_s2s_config_default(&a->s2s);
    a->max_tokens = 4096, a->label_smoothing = 0.1, a->bpe_sides = "both";
    a->steps = 1000, a->batch = 16, a->seq_len = 256;
    a->lr = 2e-3, a->min_lr = 1e-4, a->warmup = 100, a->schedule = "cosine";
    a->warmup_init_lr = -1, a->end_lr = 0;
    a->optimizer = "adamw";
    mega_optim_hp_default(&a->opt);
    a->clip = 1.0;
    a->seed = 1, a->threads = 0;
    a->eval_every = 200, a->save_every = 500, a->log_every = 0, a->eval_tokens = 65536;
    a->keep = 2;
    a->grad_accum = 1, a->dist_timeout = 300;
    a->best_metric = "loss", a->patience = 0;
}

static const cli_flag DATA_FLAGS[] = {
    {"task", F_ENUM, NULL, "what to train", NULL, 1, 0, 0}, /* the choices: task_choices() */
    {"preset", F_ENUM, NULL, "classify: the paper's LRA configuration (Table 8) or raw speech (sc-raw) and training defaults; explicit flags override",
     "lra-listops|lra-text|lra-retrieval|lra-image|lra-pathfinder|lra-pathx|sc-raw|sc-raw-big", 1, 0, 0},
    {"data", F_STR, NULL, "training data: text, or a fairseq binarized dataset with its dict.txt (data-bin/X/train: "
     "its valid split validates) (lm); a TSV (classify: ListOps, label<TAB>text, label<TAB>text1<TAB>text2; or the official "
     "LRA binarized directory with src-bin/ and label-bin/, DIR or DIR/SPLIT; or the official LRA image layout with input/ and label/, DIR or DIR/SPLIT; or a Pathfinder or Speech Commands directory; "
     "translate: source<TAB>target)", NULL, 1, 0, 0},
    {"valid", F_STR, NULL, "validation data (default: the last --valid-fraction of --data)", NULL, 1, 0, 0},
    {"valid-fraction", F_DBL, NULL, "fraction of --data held out when --valid is not given", NULL, 0, 0.9, 0},
    {"out", F_STR, NULL, "checkpoint directory", NULL, 1, 0, 0},
    {"resume", F_SET, NULL, "continue the run in --out exactly where it stopped (from its newest complete checkpoint)", NULL, 1, 0, 0},
    {"force", F_SET, NULL, "replace the run in --out (its checkpoints and log) instead of refusing", NULL, 1, 0, 0},
    {"keep", F_INT, NULL, "checkpoint generations kept in --out (the newest N)", NULL, 1, 1000000, 0},
    {"reschedule", F_SET, NULL, "with --resume: accept a new --steps (and --min-lr, --schedule); the learning rate decays from "
     "its current value to --min-lr over the new length", NULL, 1, 0, 0},
};

/* the command's flags for the task: data, model (straight into the task's config), training */
static int build_flags(cli_flag *fl, train_args *a, const task_def *td) {
    int n = 0;
    void *const data_dst[] = {&a->task,   &a->preset, &a->data, &a->valid,     &a->valid_fraction,
                              &a->out,    &a->resume, &a->force, &a->keep, &a->reschedule};
    for (size_t i = 0; i < sizeof DATA_FLAGS / sizeof *DATA_FLAGS; i++) {
        fl[n] = DATA_FLAGS[i];
        fl[n++].dst = data_dst[i];
    }
    fl[0].choices = task_choices(); /* --task */
    n = td->add_flags(a, fl, n);
    /* the model: one flag per config field */
    int nm, nb;
    const mega_field *mf = td->fields(&nm);
    const mega_field *bf = mega_block_config_fields(&nb);
    void *mc = (char *)a + td->config_off, *bc = (char *)a + td->block_off;
    n = cli_add_fields(fl, n, MAX_FLAGS, mf, nm, mc);
    if (n >= 0) n = cli_add_fields(fl, n, MAX_FLAGS, bf, nb, bc);
    const cli_flag tf[] = {
        {"steps", F_I64, &a->steps, "optimizer steps (total, including resumed ones; with --time-budget only an upper bound, and by default none)", NULL, 1, 1e12, 0},
        {"batch", F_INT, &a->batch, "sequences per step (translate: at most, with --max-tokens)", NULL, 1, 1 << 20, 0},
        {"seq-len", F_INT, &a->seq_len, "lm: bytes (tokens of a binarized dataset) per sequence; classify: maximum length (longer inputs are truncated); "
         "translate: longest source/target in tokens (longer pairs are skipped and counted)", NULL, 2, 1 << 24, 0},
        {"lr", F_DBL, &a->lr, "peak learning rate", NULL, 0, 10, 0},
        {"min-lr", F_DBL, &a->min_lr, "final learning rate", NULL, 0, 10, 0},
        {"warmup", F_I64, &a->warmup, "linear warm-up steps", NULL, 0, 1e12, 0},
        {"schedule", F_ENUM, &a->schedule, "the learning-rate schedule (= --lr-scheduler)", sched_choices(), 1, 0, 0},
        {"lr-scheduler", F_ENUM, &a->schedule, "the learning-rate schedule: cosine, linear, constant (linear warm-up to --lr, "
         "then decay to --min-lr); the fairseq schedulers linear_decay, inverse_sqrt, cosine_fairseq (docs/training.md)",
         sched_choices(), 1, 0, 0},
        {"warmup-init-lr", F_DBL, &a->warmup_init_lr, "fairseq schedules: the rate the warm-up starts from (< 0: the "
         "scheduler's default)", NULL, -1, 10, 0},
        {"end-learning-rate", F_DBL, &a->end_lr, "linear_decay: the final rate", NULL, 0, 10, 0},
        {"clip", F_DBL, &a->clip, "clip the global gradient norm (0 = off)", NULL, 0, 1e9, 0},
        {"optimizer", F_ENUM, &a->optimizer, "the optimizer (its flags follow)", optim_choices(), 1, 0, 0},
        {"seed", F_I64, &a->seed, "seed (initialisation, data sampling, dropout)", NULL, 0, 9e15, 0},
        {"threads", F_INT, &a->threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        {"recompute", F_CHOICE, &a->recompute, "activation recomputation: none keeps every block's activations for the "
         "backward; blocks keeps each block's input only and runs its forward again just before its backward (less memory, "
         "about one more forward per step; the same trained weights, bit for bit; any value with --resume; docs/training.md)",
         "none|blocks", 1, 0, 0},
        {"max-memory", F_SIZE, &tool_max_memory, "refuse a run whose expected memory (printed at the start: weights, gradients, optimizer state, buffers, data, checkpoint saves) exceeds this: bytes, or with K/M/G/T (0 = the memory available)", NULL, 1, 0, 0},
        {"eval-every", F_I64, &a->eval_every, "validate every N steps (0 = only at the end)", NULL, 0, 1e12, 0},
        {"eval-tokens", F_I64, &a->eval_tokens, "lm: validation bytes per evaluation; classify: examples (0 = the whole split)", NULL, 0, 1e15, 0},
        {"best-metric", F_ENUM, &a->best_metric, "the validation figure whose best model --out keeps as best.safetensors "
         "(and --patience watches): loss, or the task's metric (lm: bpb, lower is better; classify, translate: acc, "
         "higher is better; default: translate acc, else loss)", "loss|bpb|acc", 1, 0, 0},
        {"patience", F_I64, &a->patience, "stop (with a checkpoint) after N validations in a row without a better "
         "--best-metric (0 = never; default: translate 10, else 0)", NULL, -1, 1e12, 0},
        {"save-every", F_I64, &a->save_every, "checkpoint every N steps (0 = only at the end)", NULL, 0, 1e12, 0},
        {"log-every", F_I64, &a->log_every, "print a progress line every N steps (0 = about 50 lines)", NULL, 0, 1e12, 0},
        {"stop-after", F_I64, &a->stop_after, "stop (with a checkpoint) after N steps of this invocation; the schedule still targets --steps", NULL, 0, 1e12, 0},
        {"time-limit", F_DBL, &a->time_limit, "stop (with a checkpoint and a final validation) once this invocation has trained for S seconds; the schedule still targets --steps", NULL, 0, 1e9, 0},
        {"time-budget", F_DBL, &a->time_budget, "train for X seconds (validation and checkpoint saves not counted, "
         "--resume continues the count): after --warmup steps the learning rate decays by elapsed time / X, and the run "
         "ends, with a checkpoint and a final validation, when X is reached; --steps stays an upper bound (0 = none: the schedule follows --steps)",
         NULL, 0, 1e9, 0},
        {"quiet", F_SET, &a->quiet, "no live progress bar", NULL, 1, 0, 0},
        {"grad-accum", F_INT, &a->grad_accum, "split each rank's part of the batch into N micro-batches accumulated before "
         "the update (the same update as N ranks; docs/distributed.md)", NULL, 1, 1 << 20, 0},
        {"dist-timeout", F_DBL, &a->dist_timeout, "under mpirun: seconds a rank waits for the others in a collective before "
         "the job is aborted (a rank died or hangs; 0 = forever)", NULL, 0, 1e9, 0},
    };
    for (size_t i = 0; n >= 0 && i < sizeof tf / sizeof *tf; i++) {
        if (n + 1 >= MAX_FLAGS) return -1;
        fl[n++] = tf[i];
        if (tf[i].dst == &a->optimizer) n = add_optim_flags(fl, n, a);
    }
    if (n >= 0) memset(&fl[n], 0, sizeof fl[n]);
    return n;
}

/* the task of this invocation, known before the flags are parsed: --task, a --preset (the task
 * with presets), or with --resume the checkpoint's; the first task by default (an unknown --task
 * is left to the flag's check) */
static const task_def *task_of(int argc, char **argv) {
    const char *t = cli_find(argc, argv, 2, "task");
    if (t) return task_find(t) ? task_find(t) : &TASKS[0];
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--resume") || !strncmp(argv[i], "--resume=t", 10) || !strcmp(argv[i], "--resume=1")) {
            const char *out = cli_find(argc, argv, 2, "out");
            char p[4096];
            struct stat sb;
            /* the newest complete generation's model (mega_model_file) */
            if (out && stat(out, &sb) == 0 && S_ISDIR(sb.st_mode) && mega_model_file(out, p, sizeof p) == MEGA_OK) {
                char buf[32];
                model_step(p, buf, sizeof buf);
                return task_find(buf) ? task_find(buf) : &TASKS[0];
            }
        }
    return cli_find(argc, argv, 2, "preset") && task_with_presets() ? task_with_presets() : &TASKS[0];
}

/* some model flag was set explicitly (with --resume the checkpoint must agree with them): the
 * flags whose values go into the model configs, and --preset / --classes */
static int model_flags_seen(const train_args *a, const cli_flag *fl) {
    for (const cli_flag *f = fl; f->name; f++) {
        const char *d = f->dst;
        const int in_lm = d >= (const char *)&a->lm && d < (const char *)(&a->lm + 1);
        const int in_cls = d >= (const char *)&a->cls && d < (const char *)(&a->cls + 1);
        const int in_s2s = d >= (const char *)&a->s2s && d < (const char *)(&a->s2s + 1);
        if (f->seen && (in_lm || in_cls || in_s2s || f->dst == &a->preset || f->dst == &a->classes)) return 1;
    }
    return 0;
}

/* parse into a; 0 ok, 1 help printed, 2 error */
/* --time-budget without --steps: the budget alone ends the run (its --steps is this bound) */
#define BUDGET_STEPS 1000000000LL

/* "/N" after a step number, or nothing when the budget alone decides the length */
static const char *of_steps(const train_args *a) {
    static _Thread_local char buf[32];
    if (a->time_budget > 0 && a->steps >= BUDGET_STEPS) return "";
    snprintf(buf, sizeof buf, "/%lld", (long long)a->steps);
    return buf;
}

static int parse_args(int argc, char **argv, train_args *a, cli_flag *fl) {
    set_defaults(a);
    const task_def *td = task_of(argc, argv);
    if (build_flags(fl, a, td) < 0) return cli_error("internal: too many flags for 'mega train'"), 2;
    if (td->defaults) td->defaults(a);
    char usage[320];
    snprintf(usage, sizeof usage, "[--task %s] --data FILE [--valid FILE | --valid-fraction F] --out DIR [options]",
             task_choices());
    int r = cli_parse("train", usage, fl, argc, argv, 2);
    if (r) return r;
    a->flags = fl;
    a->model_flags_seen = model_flags_seen(a, fl);
    cli_flag_named(fl, "schedule")->seen |= cli_seen(fl, "lr-scheduler"); /* one flag, two names */
    const task_def *pt = task_with_presets();
    if (a->preset && pt && task_find(a->task) != pt) {
        if (cli_seen(fl, "task")) return cli_error("--preset is for --task %s", pt->name), 2;
        a->task = pt->name;
    }
    if (td->preset && td->preset(a, fl)) return 2;
    /* a budget decides the length unless --steps is given: its schedule decays over the budget, and
     * the task's default step count would end the run before the budget (and before the decay) */
    if (a->time_budget > 0 && !cli_seen(fl, "steps") && !a->resume) a->steps = BUDGET_STEPS;
    if (!a->out) return cli_error("--out DIR is required (see 'mega train --help')"), 2;
    if (a->force && a->resume) return cli_error("--force replaces the run in --out and --resume continues it: give one of them"), 2;
    if (a->reschedule && !a->resume) return cli_error("--reschedule changes the schedule of a resumed run: it needs --resume"), 2;
    const char *const train_flags[3] = {"data", data_file_flag("", 0), data_file_flag("", 1)},
                      *const valid_flags[3] = {"valid", data_file_flag("valid-", 0), data_file_flag("valid-", 1)};
    if (data_flags_check(train_flags, a->data, a->images, a->labels) ||
        data_flags_check(valid_flags, a->valid, a->valid_images, a->valid_labels))
        return 2;
    if (!a->data && !a->images) return cli_error("--data FILE is required (see 'mega train --help')"), 2;
    if (a->min_lr > a->lr) return cli_error("--min-lr (%g) is larger than --lr (%g)", a->min_lr, a->lr), 2;
    /* the training length: log-n scaling, and the default context of absolute positions */
    a->lm.block.train_len = a->cls.block.train_len = a->s2s.encoder.train_len = a->seq_len;
    const mega_block_config *blk = (const void *)((const char *)a + td->block_off);
    if (!a->resume) note_unused_block_flags(a, blk, blk->mixer); /* resumed: the checkpoint's mixer (resume_config_differs) */
    if (td->finish) td->finish(a);
    return 0;
}

/* ---- the command: starting and resuming ----------------------------------------------------- */

static int new_task(train_args *a, const char *model_path, task **t, mega_optim **opt) {
    const task_def *td = task_find(a->task);
    if (!td) return cli_error("internal: no task '%s'", a->task), 2;
    /* a checkpoint's names (the flags' are checked by the parser) */
    if (mega_sched_find(a->schedule) < 0) return cli_error("the run's schedule '%s' is not one of %s", a->schedule, sched_choices()), 2;
    if (mega_optim_find(a->optimizer) < 0)
        return cli_error("the run's optimizer '%s' is not one of %s", a->optimizer, optim_choices()), 2;
    const mega_sched_inputs si = sched_of(a);
    if (mega_sched_check(&si) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    tool_optim = (mega_optim_kind)mega_optim_find(a->optimizer); /* the memory estimate counts its state */
    if (mega_optim_hp_check(tool_optim, &a->opt) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    if (td->create(a, model_path, t)) return 2;
    (*t)->kind = td->name;
    if (strcmp(a->best_metric, "loss") && strcmp(a->best_metric, (*t)->metric)) {
        cli_error("--best-metric %s: a %s run validates loss and %s", a->best_metric, td->name, (*t)->metric);
        (*t)->destroy(*t), *t = NULL;
        return 2;
    }
    if (mega_optim_new(tool_optim, mega_ps_total((*t)->ps), opt) != MEGA_OK) {
        (*t)->destroy(*t), *t = NULL;
        return cli_error("%s", mega_last_error()), 2;
    }
    return 0;
}

/* what a --reschedule did, for describe_run ("" = nothing) */
static char g_resched[320];

/* g_resched for a run resumed within its warm-up: the new schedule simply applies */
static void warmup_continues(const train_args *a) {
    snprintf(g_resched, sizeof g_resched, "the warm-up continues to step %lld, then a %s decay to %g by step %lld",
             (long long)a->warmup, a->schedule, a->min_lr, (long long)a->steps);
}

/* --resume with schedule flags: --steps may change only with --reschedule, and then --min-lr and
 * --schedule may too; the decay restarts at step `at` from the rate the old schedule had reached.
 * Two exceptions need no --reschedule: a constant schedule, and a run still in its warm-up (at <=
 * --warmup), whose rates up to the end of the warm-up do not depend on --steps: the new length
 * only shapes the decay after it, as if the run had been started with it. --steps below `at` is
 * an error (it counts the steps done). cli: the flags' values. */
static int resume_schedule(train_args *a, const train_args *cli, const cli_flag *fl, int64_t at) {
    const int steps = cli_seen(fl, "steps") && cli->steps != a->steps;
    const int minlr = a->reschedule && cli_seen(fl, "min-lr") && cli->min_lr != a->min_lr;
    const int sched = a->reschedule && cli_seen(fl, "schedule") && strcmp(cli->schedule, a->schedule);
    const int warming = at <= a->warmup;
    if (cli_seen(fl, "time-budget") && cli->time_budget != a->time_budget)
        return cli_error("--resume: --time-budget %g differs from the run's %g%s; leave it out", cli->time_budget,
                         a->time_budget, a->time_budget > 0 ? " (its learning rate decays over that many seconds)"
                                                            : " (none: its schedule follows --steps)");
    if (a->time_budget > 0) {
        /* the rates follow the training time: --steps only bounds the run and may change freely */
        if (a->reschedule)
            return cli_error("--resume: --reschedule restarts a decay over steps; this run's decays over its "
                             "--time-budget %g s", a->time_budget);
        if (steps && cli->steps < at)
            return cli_error("--resume: --steps %lld is below the step the run has reached (%lld)", (long long)cli->steps,
                             (long long)at);
        if (steps) a->steps = cli->steps;
        return 0;
    }
    if (steps && cli->steps < at)
        return cli_error("--resume: --steps %lld is below the step the run has reached (%lld): --steps counts every step of "
                         "the run, the ones done included; give a larger one, or leave it out",
                         (long long)cli->steps, (long long)at);
    if (steps && !a->reschedule && !warming && mega_sched_decays(sched_of(a).kind)) {
        train_args stretched = *a;
        stretched.steps = cli->steps;
        return cli_error("--resume: --steps %lld differs from the run's %lld, which would stretch its %s schedule (the learning "
                         "rate at step %lld would jump from %.3g to %.3g); add --reschedule to decay from the current rate "
                         "over the new length, or leave out --steps",
                         (long long)cli->steps, (long long)a->steps, a->schedule, (long long)at, lr_at(a, at, 0),
                         lr_at(&stretched, at, 0));
    }
    if (!steps && !minlr && !sched) return 0;
    if (!a->reschedule) { /* a constant schedule or a run in its warm-up: only the length changes */
        a->steps = cli->steps;
        if (mega_sched_decays(sched_of(a).kind)) warmup_continues(a);
        return 0;
    }
    const double lr0 = lr_at(a, at, 0); /* the rate reached, under the schedule so far */
    if (steps) a->steps = cli->steps;
    if (minlr) a->min_lr = cli->min_lr;
    if (sched) a->schedule = cli->schedule;
    if (a->min_lr > a->lr) return cli_error("--min-lr (%g) is larger than the run's --lr (%g)", a->min_lr, a->lr);
    if (at > a->warmup) {
        a->sched_from = at, a->sched_lr = lr0;
        snprintf(g_resched, sizeof g_resched, "from step %lld the learning rate goes from %.3g to %g by step %lld (%s)",
                 (long long)at, lr0, a->min_lr, (long long)a->steps, a->schedule);
    } else { /* still warming up: the new schedule simply applies */
        a->sched_from = 0, a->sched_lr = 0;
        warmup_continues(a);
    }
    return 0;
}

/* the checkpoint --resume continues from: the newest complete generation, or the files of a run
 * written by mega 0.1 (model.safetensors and the train_state file of the same step); 0, or 1
 * after the error */
static int find_checkpoint(const char *dir, ckpt_gen *g, int *is_gen) {
    int nman;
    *is_gen = ckpt_latest(dir, g, &nman) == 0;
    if (*is_gen) return 0;
    memset(g, 0, sizeof *g);
    path_join(g->model, sizeof g->model, dir, "model.safetensors");
    if (!file_exists(g->model))
        return cli_error("--resume: no %scheckpoint in '%s'%s", nman ? "complete " : "", dir,
                         nman ? "" : " (start the run without --resume)");
    g->step = model_step(g->model, NULL, 0);
    const char *cands[] = {"train_state.safetensors", "train_state.prev.safetensors"};
    for (int i = 0; i < 2; i++) {
        char sp[4096];
        path_join(sp, sizeof sp, dir, cands[i]);
        mega_st_file *f;
        if (!file_exists(sp) || mega_st_open(sp, &f) != MEGA_OK) continue;
        const char *ss = mega_st_meta(f, "step");
        const int match = ss && (g->step < 0 || atoll(ss) == g->step);
        mega_st_close(f);
        if (match) {
            snprintf(g->state, sizeof g->state, "%s", sp);
            return 0;
        }
    }
    return cli_error("--resume: no optimizer state in '%s' matches the model's step %lld", dir, (long long)g->step);
}

/* --resume: best.safetensors must be the best the checkpoint records. It is written before the
 * checkpoint of its step, so one of another step was written by the continuation a crash
 * abandoned: it is removed, and the resumed run, replaying those steps, writes it again when the
 * validation improves on the recorded best (a run without a recorded best keeps none). 0, or 1
 * after the error. */
static int resume_best_file(train_args *a, const train_pos *pos) {
    char p[4096];
    path_join(p, sizeof p, a->out, "best.safetensors");
    if (!file_exists(p) || (pos->best_step > 0 && model_step(p, NULL, 0) == pos->best_step)) return 0;
    fprintf(stderr, "mega: note: %s is not the best this checkpoint records (step %lld); it is removed\n", p,
            (long long)pos->best_step);
    if (remove(p) != 0) return cli_error("cannot remove '%s'", p);
    return 0;
}

/* --resume: the training hyper-parameters and the optimizer state of the newest complete
 * checkpoint; *done when it is already at --steps. lead: the process that writes the directory
 * (rank 0: the lock, the clean-up, the adoption of the generation); the other ranks only read
 * the checkpoint, after rank 0 has adopted it. */
static int open_resume(train_args *a, const cli_flag *fl, task **t, mega_optim **opt, train_pos *pos, int *done, int lead) {
    struct stat sb;
    if (stat(a->out, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return cli_error("--resume: no checkpoint in '%s' (start the run without --resume)", a->out), 2;
    /* the lock first: a run still training (and not yet saved) is "in use", not "empty" */
    if (lead && run_lock(a->out)) return 2;
    if (!run_has_checkpoint(a->out))
        return cli_error("--resume: no checkpoint in '%s' (start the run without --resume)", a->out), 2;
    if (lead) run_clean_temps(a->out);
    ckpt_gen g;
    int is_gen;
    if (find_checkpoint(a->out, &g, &is_gen)) return 2;
    char ck_task[32];
    model_step(g.model, ck_task, sizeof ck_task);
    if (cli_seen(fl, "task") && task_find(ck_task) != task_find(a->task))
        return cli_error("--resume: the checkpoint in '%s' is a '%s' run, not '%s'", a->out, ck_task, a->task), 2;
    a->task = task_find(ck_task) ? task_find(ck_task)->name : TASKS[0].name;
    /* the training setup stored with the state */
    mega_st_file *f;
    if (mega_st_open(g.state, &f) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    const char *tjs = mega_st_meta(f, "train"), *ss = mega_st_meta(f, "step");
    cJSON *tj = tjs ? cJSON_Parse(tjs) : NULL;
    const int64_t at = ss ? atoll(ss) : 0;
    mega_st_close(f);
    if (!tj) return cli_error("%s: no training configuration in the metadata", g.state), 2;
    const train_args cli = *a;
    restore_train_json(a, tj);
    restore_best(a, tj, pos);
    cJSON_Delete(tj);
    if (cli_seen(fl, "optimizer") && strcmp(cli.optimizer, a->optimizer))
        return cli_error("--resume: the run in '%s' trains with --optimizer %s, not %s (its state is %s's)", a->out, a->optimizer,
                         cli.optimizer, a->optimizer), 2;
    if (resume_schedule(a, &cli, fl, at)) return 2;
    a->lm.block.train_len = a->cls.block.train_len = a->s2s.encoder.train_len = a->s2s.decoder.train_len = a->seq_len;
    const char *tf[] = {"batch", "seq-len", "lr", "min-lr", "warmup", "weight-decay", "clip", "seed", "schedule"};
    for (size_t i = 0; lead && i < sizeof tf / sizeof *tf; i++)
        if (cli_seen(fl, tf[i]) && !(a->reschedule && (!strcmp(tf[i], "min-lr") || !strcmp(tf[i], "schedule"))))
            fprintf(stderr, "mega: note: --resume keeps the checkpoint's --%s; the flag is ignored\n", tf[i]);
    for (const cli_flag *h = fl; lead && h->name; h++) /* the optimizer's and the fairseq schedules' flags */
        if (h->seen && extra_stored(h->name, -1, 1) && strcmp(h->name, "weight-decay") && strcmp(h->name, "decay-all"))
            fprintf(stderr, "mega: note: --resume keeps the checkpoint's --%s; the flag is ignored\n", h->name);
    if (new_task(a, g.model, t, opt)) return 2;
    if (load_state_file(g.state, (*t)->ps, *opt, pos)) return 2;
    if (pos->data_hash != (*t)->data_hash || pos->data_size != (*t)->data_size)
        return cli_error("--resume: the data given is not the data this run was trained on (size or checksum differ)"), 2;
    /* the directory now follows this checkpoint: newer incomplete generations go, the stable
     * names are restored */
    if (lead && is_gen && ckpt_adopt(a->out, &g, a->keep)) return 2;
    if (lead && resume_best_file(a, pos)) return 2;
    if (a->time_budget > 0 && a->trained_seconds >= a->time_budget) {
        if (lead)
            printf("the run in %s has already trained %.1f s of its --time-budget %g s (step %lld); it is complete\n", a->out,
                   a->trained_seconds, a->time_budget, (long long)pos->step);
        *done = 1;
    } else if (a->patience > 0 && pos->bad_evals >= a->patience) {
        if (lead)
            printf("the run in %s stopped early at step %lld: %lld validations without improvement (--patience %lld); give "
                   "a larger --patience to continue it\n", a->out, (long long)pos->step, (long long)pos->bad_evals,
                   (long long)a->patience);
        *done = 1;
    } else if (pos->step >= a->steps) {
        if (lead)
            printf("checkpoint in %s is already at step %lld of %lld; pass a larger --steps with --reschedule to continue\n",
               a->out, (long long)pos->step, (long long)a->steps);
        *done = 1;
    }
    return 0;
}

/* a new run; lead: the process that writes the directory (rank 0), the other ranks only build the
 * task */
static int open_fresh(train_args *a, task **t, mega_optim **opt, train_pos *pos, int lead) {
    const char *exists = "'%s' already holds a training run; continue it with --resume, or replace it with --force";
    int locked = 0;
    if (lead && run_has_checkpoint(a->out)) { /* a run is there: is it running? */
        if (run_lock(a->out)) return 2;
        locked = 1;
        if (!a->force) return cli_error(exists, a->out), 2;
    }
    /* the model and the data first: a bad flag or file leaves no directory behind (and --force
     * destroys nothing) */
    if (new_task(a, NULL, t, opt)) return 2;
    pos->data_rng = mega_data_rng_seed((uint64_t)a->seed);
    pos->data_hash = (*t)->data_hash, pos->data_size = (*t)->data_size;
    if (!lead) return 0;
    if (ensure_dir(a->out)) return 2;
    if (!locked && run_lock(a->out)) return 2;
    if (!a->force && run_has_checkpoint(a->out)) return cli_error(exists, a->out), 2; /* made meanwhile */
    if (a->force && run_wipe(a->out)) return 2;
    run_clean_temps(a->out);
    return 0;
}

/* ---- signals ----------------------------------------------------------------------------------- */

/* SIGINT / SIGTERM: the first asks the loop to save at the end of the step and stop; the handler
 * restores the default action, so a second one ends the process at once (the checkpoint protocol
 * makes that safe at any point). */
static volatile sig_atomic_t g_signal;

static void on_stop_signal(int sig) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    g_signal = sig;
    static const char msg[] = "\nmega: stopping: a checkpoint is saved at the end of this step (signal again to quit now)\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
}

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- the command: the loop ------------------------------------------------------------------ */

typedef struct {
    FILE *log;
    progress_t bar; /* live on a terminal; a plain line every 30 s otherwise */
    double t_start, t_last, loss_acc, met_acc;
    double comm, comm_last; /* seconds in the allreduce since the start, at the last log line */
    double wait, wait_last; /* seconds waiting for the slowest rank, likewise */
    int64_t unit_acc, n_acc, start;
    /* the run's clock: the seconds of training before this invocation (--resume of a
     * --time-budget run), and those of validation and checkpoint saves, before it and in it
     * (excluded: not training); trained: the clock at the last step (rank 0's under MPI) */
    double train0, eval0, excluded, trained;
    double log_dt, next_log; /* --time-budget without --log-every: a line every log_dt seconds of training */
} train_progress;

/* this process's training seconds of the run: the time since the loop began, less validation
 * and checkpoint saves, plus the run's before this invocation */
static double train_clock(const train_progress *p) { return p->train0 + (now_sec() - p->t_start) - p->excluded; }

static void progress_step(train_progress *p, const train_args *a, const task *t, const train_pos *pos, double loss,
                          double met, int64_t units, double lr, double gn) {
    p->loss_acc += loss, p->met_acc += met, p->n_acc++, p->unit_acc += units;
    const double now = now_sec();
    /* with --time-budget a line at the end of the budget too, and without --log-every about 50
     * lines over it (the steps it takes are not known in advance) */
    const int spent = a->time_budget > 0 && p->trained >= a->time_budget;
    const int by_time = p->log_dt > 0 && p->trained >= p->next_log;
    const int log_now = pos->step % a->log_every == 0 || pos->step == a->steps || spent || by_time;
    if (by_time)
        while (p->next_log <= p->trained) p->next_log += p->log_dt;
    /* the share done: of the steps, or of the time budget when that comes first */
    double done = (double)pos->step / (double)a->steps;
    if (a->time_budget > 0 && p->trained / a->time_budget > done) done = p->trained / a->time_budget;
    if (done > 1) done = 1;
    if (!log_now && progress_due(&p->bar, 0)) {
        if (p->bar.tty) {
            int w = 30, f = (int)((double)w * done);
            char bar[64];
            for (int i = 0; i < w; i++) bar[i] = i < f ? '#' : '.';
            bar[w] = 0;
            progress_print(&p->bar, "[%s] %lld%s loss %.4f", bar, (long long)pos->step, of_steps(a), loss);
        } else {
            progress_print(&p->bar, "step %6lld%s | loss %.4f (%.0f s)", (long long)pos->step, of_steps(a), loss,
                           now - p->t_start);
        }
    }
    if (!log_now) return;
    progress_break(&p->bar);
    double dt = now - p->t_last, el = now - p->t_start;
    double rate = (double)p->unit_acc / (dt > 0 ? dt : 1e-9);
    double eta = (double)(a->steps - pos->step) * (el / (double)(pos->step - p->start));
    if (a->time_budget > 0 && a->time_budget - p->trained < eta) eta = a->time_budget - p->trained;
    if (eta < 0) eta = 0;
    const double ev = p->eval0 + p->excluded;
    double ml = p->loss_acc / (double)p->n_acc, mm = p->met_acc / (double)p->n_acc;
    char rs[32], es[32], els[32];
    fmt_rate(rs, sizeof rs, rate);
    fmt_duration(es, sizeof es, eta);
    fmt_duration(els, sizeof els, el);
    /* with several ranks: the share of the interval spent in the allreduce (waiting included) */
    char cs[64] = "", cj[80] = "";
    if (dist_size() > 1) {
        const double share = (p->comm - p->comm_last) / (dt > 0 ? dt : 1e-9), wait = (p->wait - p->wait_last) / (dt > 0 ? dt : 1e-9);
        snprintf(cs, sizeof cs, " | allreduce %.1f%% wait %.1f%%", 100 * share, 100 * wait);
        snprintf(cj, sizeof cj, ", \"allreduce_share\": %.4f, \"wait_share\": %.4f", share, wait);
        p->comm_last = p->comm, p->wait_last = p->wait;
    }
    printf("step %6lld%s | loss %.4f | %s %.4f | lr %.2e | gnorm %.2f | %s %s%s | %s elapsed (train %.1f s, eval %.1f s) | ETA %s\n",
           (long long)pos->step, of_steps(a), ml, t->metric, mm, lr, gn, rs, t->unit, cs, els, p->trained, ev, es);
    /* time: this invocation's wall clock; train_seconds / eval_seconds: the run's training and
     * validation+save seconds (with --time-budget counted across --resume) */
    fprintf(p->log, "{\"step\": %lld, \"loss\": %.6f, \"%s\": %.6f, \"lr\": %.6g, \"grad_norm\": %.4f, \"tok_s\": %.1f, \"time\": %.2f, "
                    "\"train_seconds\": %.2f, \"eval_seconds\": %.2f%s}\n",
            (long long)pos->step, ml, t->metric, mm, lr, gn, rate, el, p->trained, ev, cj);
    fflush(p->log);
    fflush(stdout);
    p->bar.next = now + (p->bar.tty ? 0.25 : p->bar.every); /* a log line counts as progress */
    p->loss_acc = p->met_acc = 0, p->n_acc = 0, p->unit_acc = 0, p->t_last = now;
}

/* the best so far after a validation of figures (vl, vm) at pos->step: best.safetensors rewritten
 * (by rank 0) when --best-metric improved, else one more validation without improvement; *stop
 * once there were --patience of them in a row. 0, or -1 after the error. */
static int track_best(const train_args *a, task *t, train_pos *pos, double vl, double vm, int *stop) {
    const int use_loss = !strcmp(a->best_metric, "loss");
    const int higher = !use_loss && task_find(t->kind)->metric_higher_better;
    const double v = use_loss ? vl : vm;
    if (!isfinite(v) || (pos->best_step > 0 && pos->best_step == pos->step)) return 0; /* validated twice at one step */
    if (pos->best_step > 0 && (higher ? !(v > pos->best_value) : !(v < pos->best_value))) {
        pos->bad_evals++;
        *stop = a->patience > 0 && pos->bad_evals >= a->patience;
        return 0;
    }
    pos->best_value = v, pos->best_step = pos->step, pos->bad_evals = 0;
    return dist_rank() == 0 && save_best(a, t, pos) ? -1 : 0;
}

/* validation at this step (and the best so far: track_best); -1 on error */
static int validate_now(train_progress *p, const train_args *a, task *t, train_pos *pos, int *pstop) {
    double vl, vm, te = now_sec();
    int64_t vc;
    int v = t->validate(t, a, a->eval_tokens, &vl, &vm, &vc);
    if (v < 0) return -1;
    if (v == 0 && p->log) { /* every rank validates (none waits for another); rank 0 reports */
        progress_break(&p->bar);
        printf("valid step %6lld | loss %.4f | %s %.4f | %lld %s (%.1fs)\n", (long long)pos->step, vl,
               t->metric, vm, (long long)vc,
               t->valid_unit ? t->valid_unit : task_find(t->kind)->valid_unit, now_sec() - te);
        fprintf(p->log, "{\"step\": %lld, \"valid_loss\": %.6f, \"valid_%s\": %.6f, \"valid_count\": %lld}\n",
                (long long)pos->step, vl, t->metric, vm, (long long)vc);
        fflush(p->log);
    }
    if (v == 0 && track_best(a, t, pos, vl, vm, pstop)) return -1;
    const double dur = now_sec() - te;
    p->t_last += dur;   /* evaluation time is not training throughput */
    p->excluded += dur; /* nor training time */
    return 0;
}

/* The model, the optimizer moments and the data position are the same on every rank: checked
 * (a hash, one small reduction) after the start and at each checkpoint, so a divergence, which
 * would make the checkpoint of rank 0 describe only one of the runs, stops the job at once. */
static int ranks_in_sync(const task *t, mega_optim *opt, const train_pos *pos) {
    if (dist_size() == 1) return 1;
    const size_t n = mega_ps_total(t->ps) * sizeof(mega_real);
    uint64_t h = mega_fnv1a64(mega_ps_data(t->ps), n);
    h = mega_mix64(h ^ mega_fnv1a64(mega_optim_state(opt, 0), n));
    h = mega_mix64(h ^ (uint64_t)pos->step ^ mega_mix64(pos->data_rng));
    if (dist_same_u64(h)) return 1;
    cli_error("rank %d: the ranks' models differ at step %lld (the reduction of the gradients was not the same on "
              "every rank)", dist_rank(), (long long)pos->step);
    return 0;
}

/* the stop requests of a step, as every rank sees them: [SIGINT, SIGTERM, --time-limit], and rank
 * 0's training clock, which sets every rank's learning rate under --time-budget */
enum { AG_LOSS, AG_METRIC, AG_UNITS, AG_SIGINT, AG_SIGTERM, AG_TIME, AG_CLOCK, AG_N };

static int train_loop(const train_args *a, task *t, mega_optim *opt, train_pos *pos, FILE *log) {
    const int K = dist_size(), rank = dist_rank(), lead = rank == 0;
    const int N = a->grad_accum, shards = K * N;
    mega_real *grad = mega_ps_grad(t->ps);
    const size_t ngrad = mega_ps_total(t->ps);
    train_progress p;
    memset(&p, 0, sizeof p);
    p.log = log, p.t_start = p.t_last = now_sec(), p.start = pos->step;
    p.train0 = p.trained = a->trained_seconds, p.eval0 = a->evaled_seconds;
    if (a->time_budget > 0 && !cli_seen(a->flags, "log-every")) {
        p.log_dt = a->time_budget / 50;
        p.next_log = (floor(p.train0 / p.log_dt) + 1) * p.log_dt;
    }
    progress_init(&p.bar, stdout, !lead, 30);
    if (a->quiet && p.bar.tty) p.bar.quiet = 1; /* --quiet: no live bar (log lines stay) */
    const double comm0 = dist_comm_seconds(), wait0 = dist_wait_seconds();
    for (int64_t step = pos->step; step < a->steps; step++) {
        double ag[AG_N] = {0};
        mega_ps_zero_grad(t->ps);
        /* this rank's shards of the global batch, one micro-batch at a time: each draws the
         * whole batch from the same data position, so the position after the step is the same
         * on every rank and for every --grad-accum */
        const uint64_t key = mega_dropout_key((uint64_t)a->seed, step), rng0 = pos->data_rng;
        for (int j = 0; j < N; j++) {
            uint64_t rng = rng0;
            double l = 0, m = 0;
            int64_t u = 0;
            const int shard = rank * N + j;
            if (t->step(t, a, &rng, mega_shard_key(key, shard), shard, shards, &l, &m, &u)) return 2;
            ag[AG_LOSS] += l, ag[AG_METRIC] += m, ag[AG_UNITS] += (double)u;
            pos->data_rng = rng;
        }
        if (K > 1) {
            /* the stop requests travel with the loss, so every rank stops at the same step */
            ag[AG_SIGINT] = g_signal == SIGINT, ag[AG_SIGTERM] = g_signal == SIGTERM;
            ag[AG_TIME] = lead && a->time_limit > 0 && now_sec() - p.t_start >= a->time_limit;
            ag[AG_CLOCK] = lead ? train_clock(&p) : 0;
            dist_sum_real(grad, ngrad);
            dist_sum_f64(ag, AG_N);
        }
        /* the clock after this step's gradients: rank 0's on every rank, so the rates agree */
        const double trained = K > 1 ? ag[AG_CLOCK] : train_clock(&p);
        const double lr = lr_at(a, step, trained);
        const double loss = ag[AG_LOSS], met = ag[AG_METRIC];
        const int64_t units = (int64_t)ag[AG_UNITS];
        if (!isfinite(loss))
            return cli_error("step %lld: the loss is not finite (%g); lower --lr or raise --warmup", (long long)step + 1, loss), 2;
        double gn = mega_ps_grad_norm(t->ps);
        if (a->clip > 0 && gn > a->clip) mega_ps_scale_grad(t->ps, a->clip / (gn + 1e-12));
        mega_optim_step(opt, t->ps, &a->opt, lr);
        pos->step = step + 1;
        p.trained = trained;
        if (lead) {
            p.comm = dist_comm_seconds() - comm0, p.wait = dist_wait_seconds() - wait0;
            progress_step(&p, a, t, pos, loss, met, units, lr, gn);
        }
        const int sig = K > 1 ? (ag[AG_SIGINT] > 0 ? SIGINT : ag[AG_SIGTERM] > 0 ? SIGTERM : 0) : g_signal;
        /* the end of the run: --steps, or the --time-budget spent (decided by the agreed clock) */
        const int budget_spent = a->time_budget > 0 && trained >= a->time_budget;
        const int last = pos->step == a->steps || budget_spent;
        const int out_of_time = (K > 1 ? ag[AG_TIME] > 0 : a->time_limit > 0 && now_sec() - p.t_start >= a->time_limit) && !last;
        int pstop = 0; /* --patience: validations in a row without improvement */
        if (out_of_time && !(a->eval_every > 0 && pos->step % a->eval_every == 0) && validate_now(&p, a, t, pos, &pstop)) return 2;
        if (((a->eval_every > 0 && pos->step % a->eval_every == 0) || last) && validate_now(&p, a, t, pos, &pstop)) return 2;
        pstop = pstop && !last;
        const int stop = (a->stop_after > 0 && pos->step - p.start >= a->stop_after && !last) || out_of_time || pstop;
        const int save = (a->save_every > 0 && pos->step % a->save_every == 0) || last || stop || (sig && !last);
        if (save) {
            const double ts = now_sec();
            pos->train_seconds = trained, pos->eval_seconds = p.eval0 + p.excluded;
            if (!ranks_in_sync(t, opt, pos)) return 2;
            if (lead && save_checkpoint(a, t, opt, pos)) return 2;
            progress_break(&p.bar);
            if (lead && !last && !sig) printf("saved checkpoint at step %lld\n", (long long)pos->step);
            p.excluded += now_sec() - ts; /* a save is not training time */
        }
        if (sig && !last) { /* SIGINT / SIGTERM: a checkpoint at this step, then stop */
            if (lead) {
                printf("stopped by %s at step %lld with a checkpoint; continue with: mega train ... --out %s --resume\n",
                       sig == SIGINT ? "SIGINT" : "SIGTERM", (long long)pos->step, a->out);
                fflush(stdout);
            }
            return 128 + sig;
        }
        if (pstop) {
            if (lead)
                printf("stopped early at step %lld: validation %s has not improved for %lld validations (--patience); the "
                       "best, %.6g at step %lld, is %s/best.safetensors\n",
                       (long long)pos->step, a->best_metric, (long long)pos->bad_evals, pos->best_value,
                       (long long)pos->best_step, a->out);
            break;
        }
        if (stop) {
            if (lead)
                printf("stopped after %lld steps (%s); continue with: mega train ... --out %s --resume\n",
                       (long long)(pos->step - p.start), out_of_time ? "--time-limit" : "--stop-after", a->out);
            break;
        }
        if (budget_spent) {
            if (lead)
                printf("the --time-budget of %g s is spent at step %lld (%.1f s of training)\n", a->time_budget,
                       (long long)pos->step, trained);
            break;
        }
    }
    if (lead) {
        char els[32];
        const double el = now_sec() - p.t_start;
        fmt_duration(els, sizeof els, el);
        printf("done: %lld steps in %s (training %.1f s, validation and saves %.1f s", (long long)(pos->step - p.start), els,
               p.trained - p.train0, p.excluded);
        if (p.train0 > 0) printf("; the run has trained %.1f s in all", p.trained);
        printf(")");
        if (K > 1)
            printf(" on %d ranks (allreduce %.1f%% of the time, waiting for the slowest rank %.1f%%)", K,
                   100 * (dist_comm_seconds() - comm0) / (el > 0 ? el : 1), 100 * (dist_wait_seconds() - wait0) / (el > 0 ? el : 1));
        printf("; checkpoint in %s\n", a->out);
    }
    return 0;
}

static void describe_run(const train_args *a, task *t, int64_t start) {
    printf("mega train: %s\n", mega_build_info());
    t->describe(t, a, stdout);
    printf("  training  steps %lld, batch %d, seq-len %d, lr %g -> %g (%s, warmup %lld), weight-decay %g, clip %g, "
           "seed %lld, threads %d\n",
           (long long)a->steps, a->batch, a->seq_len, a->lr, final_lr(a),
           a->schedule, (long long)a->warmup, a->opt.weight_decay,
           a->clip, (long long)a->seed, mega_get_threads());
    if (a->recompute != MEGA_RECOMPUTE_NONE) /* runs without it print as before */
        printf("  recompute %s (the backward runs each block's forward again from its input)\n",
               mega_recompute_name((mega_recompute)a->recompute));
    if (mega_optim_find(a->optimizer) != (int)mega_optim_legacy()) /* the legacy optimizer's runs print as before */
        printf("  optimizer %s (%s)\n", a->optimizer, mega_optim_describe((mega_optim_kind)mega_optim_find(a->optimizer)));
    if (dist_size() > 1 || a->grad_accum > 1)
        printf("  parallel  %d ranks x --grad-accum %d = %d shards of %d sequences per batch (%s)\n", dist_size(), a->grad_accum,
               dist_size() * a->grad_accum, a->batch / (dist_size() * a->grad_accum), dist_describe());
    if (a->time_budget > 0 && a->steps >= BUDGET_STEPS)
        printf("  budget    %g s of training (validation and saves not counted): the %s decay follows the training time, "
               "and the budget alone ends the run (no --steps)\n", a->time_budget, a->schedule);
    else if (a->time_budget > 0)
        printf("  budget    %g s of training (validation and saves not counted): the %s decay follows the training time; "
               "--steps %lld is only an upper bound\n", a->time_budget, a->schedule, (long long)a->steps);
    if (a->resume && a->time_budget > 0)
        printf("  resuming  from step %lld in %s, after %.1f s of training\n", (long long)start, a->out, a->trained_seconds);
    else if (a->resume) printf("  resuming  from step %lld in %s\n", (long long)start, a->out);
    if (g_resched[0]) printf("  reschedule %s\n", g_resched);
    printf("  output    %s\n", a->out);
    fflush(stdout);
}

/* the run's setup on every rank: rank 0 opens the run directory first (lock, clean-up, adoption of
 * the checkpoint), then the other ranks build the same task and read the same checkpoint; every
 * rank ends with the same status (0, or 2 after the ranks that failed printed why) */
static int open_run(train_args *a, const cli_flag *fl, task **t, mega_optim **opt, train_pos *pos, int *done) {
    const int lead = dist_rank() == 0;
    int rc = 0;
    if (lead) rc = a->resume ? open_resume(a, fl, t, opt, pos, done, 1) : open_fresh(a, t, opt, pos, 1);
    if (dist_size() == 1) return rc;
    if (dist_agree(rc)) return 2; /* rank 0 could not open the run: it said why */
    if (!lead) rc = a->resume ? open_resume(a, fl, t, opt, pos, done, 0) : open_fresh(a, t, opt, pos, 0);
    if (dist_agree(rc)) return 2;
    /* the same data on every rank: an MPMD launch (one --data per rank) would otherwise train on
     * a mix, the models staying in sync (same seed, summed gradients) */
    const uint64_t data[2] = {(*t)->data_hash, (*t)->data_size};
    if (!dist_same_u64(mega_fnv1a64(data, sizeof data))) {
        if (lead)
            cli_error("the ranks were given different training data (its size or checksum differs between the ranks): "
                      "every rank must read the same files");
        return 2;
    }
    return ranks_in_sync(*t, *opt, pos) ? 0 : 2;
}

int task_forward_batch(const train_args *a) {
    return a->grad_accum > 1 ? (int)(((int64_t)a->batch + a->grad_accum - 1) / a->grad_accum) : a->batch;
}

/* the ranks and micro-batches split each batch evenly (translate's token-bucketed batches have
 * varying sentence counts: their shards may differ by one sentence); 0, or 1 after the error
 * (printed by rank 0) */
static int check_shards(const train_args *a) {
    const int K = dist_size(), shards = K * a->grad_accum;
    if (task_find(a->task)->uneven_shards || a->batch % shards == 0) return 0;
    if (dist_rank() == 0)
        cli_error("--batch %d cannot be split into %d equal shards (%d rank%s x --grad-accum %d): give a multiple of %d",
                  a->batch, shards, K, K > 1 ? "s" : "", a->grad_accum, shards);
    return 1;
}

int cmd_train(int argc, char **argv) {
    static train_args a;
    cli_flag fl[MAX_FLAGS];
    if (dist_init(NULL, NULL)) return 2;
    int r = parse_args(argc, argv, &a, fl);
    if (r) {
        dist_finalize();
        return r == 1 ? 0 : 2;
    }
    dist_set_timeout(a.dist_timeout);
    const int K = dist_size(), lead = dist_rank() == 0;
    /* a new run's batch is the flag's (checked before the directory is touched); a resumed
     * run's is the checkpoint's (checked once it is read) */
    if (!a.resume && check_shards(&a)) {
        dist_finalize();
        return 2;
    }
    mega_set_threads(a.threads);
    mega_set_recompute((mega_recompute)a.recompute); /* before the model is made: it sizes its buffers */
    train_pos pos;
    memset(&pos, 0, sizeof pos);
    mega_optim *opt = NULL;
    task *t = NULL;
    int done = 0, in_loop = 0;
    int rc = open_run(&a, fl, &t, &opt, &pos, &done);
    if (!rc && !done && a.resume && check_shards(&a)) rc = 2;
    if (!rc && !done) {
        if (a.log_every <= 0) a.log_every = a.steps >= 50 ? a.steps / 50 : 1;
        if (lead && (!a.resume || g_resched[0]) && a.warmup > 0 && a.warmup >= a.steps)
            fprintf(stderr, "mega: warning: --warmup %lld >= --steps %lld: the learning rate only warms up (to %.3g at the last "
                            "step) and never decays\n",
                    (long long)a.warmup, (long long)a.steps, a.lr * (double)a.steps / (double)a.warmup);
        /* batchnorm: the ranks' shards share their statistics (lm, classify); micro-batches,
         * computed one after the other, cannot, nor can translate's uneven shards */
        const int per_shard = a.grad_accum > 1 || (K > 1 && task_find(a.task)->uneven_shards);
        if (lead && t->batchnorm && per_shard)
            fprintf(stderr, "mega: warning: batchnorm statistics are those of each %s%s%s, not of the whole batch\n",
                    a.grad_accum > 1 ? "micro-batch (--grad-accum)" : "rank's shard (", a.grad_accum > 1 ? "" : a.task,
                    a.grad_accum > 1 ? "" : ")");
        if (lead) describe_run(&a, t, pos.step);
        FILE *log = lead ? open_log(&a, pos.step) : NULL;
        if (lead && !log) rc = 2;
        if (K > 1 && dist_agree(rc)) rc = 2;
        if (!rc) {
            catch_stop_signals();
            rc = train_loop(&a, t, opt, &pos, log);
            in_loop = 1;
        }
        if (log) fclose(log);
    }
    if (t) t->destroy(t);
    mega_optim_free(opt);
    /* an error inside the loop may leave the other ranks in a collective: end the job */
    if (K > 1 && rc == 2 && in_loop) dist_abort(2);
    dist_finalize();
    return rc == 0 ? 0 : rc >= 128 ? rc : 2; /* 130 / 143: stopped by SIGINT / SIGTERM with a checkpoint */
}
