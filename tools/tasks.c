/*
 * The training tasks of `mega train` (task.h): the table of tasks, and what train.c and the tasks
 * share (a task's allocation, the checks of a resumed run's model flags).
 */
#include "task.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

const task_def TASKS[] = {
    {"lm", MEGA_MODEL_LM, "bytes in windows", "bits per byte", 0, offsetof(train_args, lm), offsetof(train_args, lm.block),
     mega_lm_config_fields, lm_task_flags, NULL, NULL, NULL, lm_task_new, 0},
    {"classify", MEGA_MODEL_CLS, "examples", "accuracy", 0, offsetof(train_args, cls), offsetof(train_args, cls.block),
     mega_cls_config_fields, cls_task_flags, cls_apply_classify_defaults, cls_apply_preset, NULL, cls_task_new, 1},
    /* translate's batches are bucketed by tokens: their sentence counts vary */
    {"translate", MEGA_MODEL_S2S, "target tokens", "token accuracy (teacher forcing)", 1, offsetof(train_args, s2s),
     offsetof(train_args, s2s.encoder), mega_s2s_config_fields, s2s_task_flags, s2s_apply_translate_defaults, NULL, s2s_finish_flags,
     s2s_task_new, 1},
    /* masked-LM pretraining of a classifier's encoder (docs/pretraining.md) */
    {"mlm", MEGA_MODEL_CLS, "masked bytes", "masked-byte accuracy", 0, offsetof(train_args, cls), offsetof(train_args, cls.block),
     mega_cls_config_fields, mlm_task_flags, mlm_apply_defaults, NULL, NULL, mlm_task_new, 1},
};
const int N_TASKS = (int)(sizeof TASKS / sizeof *TASKS);

const task_def *task_find(const char *name) {
    for (int i = 0; name && i < N_TASKS; i++)
        if (!strcmp(TASKS[i].name, name)) return &TASKS[i];
    return NULL;
}

const task_def *task_of_kind(mega_model_kind k) {
    for (int i = 0; i < N_TASKS; i++)
        if (TASKS[i].kind == k) return &TASKS[i];
    return NULL;
}

const task_def *task_with_presets(void) {
    for (int i = 0; i < N_TASKS; i++)
        if (TASKS[i].preset) return &TASKS[i];
    return NULL;
}

const char *task_choices(void) {
    static char buf[256];
    if (!buf[0])
        for (int i = 0; i < N_TASKS; i++) {
            const size_t n = strlen(buf);
            snprintf(buf + n, sizeof buf - n, "%s%s", i ? "|" : "", TASKS[i].name);
        }
    return buf;
}

task *task_create(const task *proto, size_t impl_size) {
    task *t = malloc(sizeof *t);
    void *impl = calloc(1, impl_size);
    if (!t || !impl) return free(t), free(impl), cli_error("out of memory"), NULL;
    *t = *proto;
    t->impl = impl;
    return t;
}

/* the fields of one table that the user set, compared with the checkpoint's */
static int field_differs(const train_args *a, const mega_field *f, int n, const void *mine, const void *ck,
                         mega_mixer_kind mixer, int all) {
    for (int i = 0; i < n; i++) {
        if ((f[i].flags & MEGA_FIELD_NOFLAG) || !mega_field_applies(&f[i], mixer)) continue;
        const void *addr = (const char *)mine + f[i].offset;
        int seen = all;
        for (const cli_flag *g = a->flags; g->name && !seen; g++) seen = g->seen && g->dst == addr;
        if (!seen) continue;
        char x[64], y[64];
        mega_field_format(&f[i], mine, x, sizeof x);
        mega_field_format(&f[i], ck, y, sizeof y);
        if (strcmp(x, y)) {
            cli_error("--resume: --%s %s differs from the checkpoint's %s (see 'mega info --model %s')", f[i].name, x, y,
                      a->out);
            return 1;
        }
    }
    return 0;
}

void note_unused_block_flags(const train_args *a, const mega_block_config *mine, mega_mixer_kind mixer) {
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    for (int i = 0; i < nb; i++) {
        if ((bf[i].flags & MEGA_FIELD_NOFLAG) || mega_field_applies(&bf[i], mixer)) continue;
        const void *addr = (const char *)mine + bf[i].offset;
        for (const cli_flag *g = a->flags; g->name; g++)
            if (g->seen && g->dst == addr)
                fprintf(stderr, "mega: note: --%s does not apply to --mixer %s; the flag is ignored\n", g->name,
                        mega_mixer_name(mixer));
    }
}

int resume_config_differs(const train_args *a, const mega_field *mf, int nmf, const void *mine, const void *ck,
                          size_t block_off) {
    const mega_block_config *bm = (const void *)((const char *)mine + block_off), *bc = (const void *)((const char *)ck + block_off);
    note_unused_block_flags(a, bm, bc->mixer); /* the checkpoint's mixer decides */
    const int all = a->preset != NULL; /* a preset sets many fields at once: all of them must agree */
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    return field_differs(a, mf, nmf, mine, ck, bc->mixer, all) || field_differs(a, bf, nb, bm, bc, bc->mixer, all);
}
