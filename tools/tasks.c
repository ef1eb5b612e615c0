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

/* the pretrained model of --init-from (a classifier or masked-LM encoder), loaded for inference */
static int init_from_read(const char *from, mega_cls **src) {
    char p[4096];
    mega_model_kind k;
    *src = NULL;
    if (!model_path(from, p, sizeof p)) return cli_error("--init-from: %s", mega_last_error());
    if (model_open(from, p, sizeof p, &k)) return 1;
    if (k != MEGA_MODEL_CLS)
        return cli_error("--init-from '%s' is a %s, not an encoder (mega train --task mlm or classify)", from, model_kind_noun(k));
    if (mega_cls_load_ex(p, &MODEL_INFERENCE, src) != MEGA_OK) return cli_error("--init-from '%s': %s", from, mega_last_error());
    return 0;
}

/* the dropouts and the recorded training length change no weight: neither checked nor adopted */
static int init_from_free_field(const mega_field *f) { return strstr(f->name, "dropout") || !strcmp(f->name, "train-len"); }

static int init_from_check(const char *from, const mega_block_config *mine, int layers, const mega_cls *src) {
    const mega_cls_config *s = mega_cls_get_config(src);
    char x[64], y[64];
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    if (layers != s->layers)
        return cli_error("--init-from '%s': --layers %d differs from the pretrained encoder's %d", from, layers, s->layers);
    for (int i = 0; i < nb; i++) {
        if (init_from_free_field(&bf[i]) || !mega_field_applies(&bf[i], s->block.mixer)) continue;
        mega_field_format(&bf[i], mine, x, sizeof x);
        mega_field_format(&bf[i], &s->block, y, sizeof y);
        if (strcmp(x, y))
            return cli_error("--init-from '%s': --%s %s differs from the pretrained encoder's %s (see 'mega info --model %s')",
                             from, bf[i].name, x, y, from);
    }
    return 0;
}

int init_from_open(const char *from, const mega_block_config *mine, int layers, mega_cls **src) {
    if (init_from_read(from, src)) return 1;
    if (!mine) return 0;
    const int bad = init_from_check(from, mine, layers, *src);
    if (bad) mega_cls_free(*src), *src = NULL;
    return bad;
}

void init_from_adopt(const cli_flag *fl, const mega_cls *src, mega_block_config *block, int *layers) {
    const mega_cls_config *s = mega_cls_get_config(src);
    char v[64];
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    if (!cli_seen(fl, "layers")) *layers = s->layers;
    for (int i = 0; i < nb; i++) {
        if (init_from_free_field(&bf[i]) || (bf[i].flags & MEGA_FIELD_NOFLAG) || cli_seen(fl, bf[i].name)) continue;
        mega_field_format(&bf[i], &s->block, v, sizeof v);
        (void)mega_field_parse(&bf[i], block, v); /* a value of the same table: it parses */
    }
}

int init_from_verify(const char *from, const mega_block_config *mine, int layers, mega_cls **src) {
    const int bad = init_from_check(from, mine, layers, *src);
    if (bad) mega_cls_free(*src), *src = NULL;
    return bad;
}

int init_from_load(const char *from, mega_paramset *dst, mega_paramset *src, const char *const *map) {
    const int n = mega_ps_count(dst);
    uint8_t *got = calloc((size_t)n > 0 ? (size_t)n : 1, 1);
    if (!got) return cli_error("out of memory");
    const int k = mega_ps_copy_renamed(dst, src, map, got);
    size_t vals = 0, fresh_vals = 0, numel;
    for (int i = 0; i < n; i++) {
        mega_ps_info(dst, i, NULL, &numel, NULL);
        *(got[i] ? &vals : &fresh_vals) += numel;
    }
    /* printed even with --quiet: what a fine-tuned run started from belongs in its log */
    printf("init-from %s: loaded %d of %d tensors (%zu values); initialised fresh %d (%zu values):", from, k, n, vals, n - k, fresh_vals);
    for (int i = 0; i < n; i++)
        if (!got[i]) printf(" %s", mega_ps_info(dst, i, NULL, NULL, NULL));
    printf("\n");
    free(got);
    return 0;
}

int task_text_split(const train_args *a, mega_bytes *data, mega_bytes *valid, const uint8_t **train, size_t *ntrain,
                    const uint8_t **val, size_t *nval, char *valid_from) {
    if (mega_read_file(a->data, "--data", data) != MEGA_OK) return cli_error("%s", mega_last_error());
    *train = data->data, *ntrain = data->n, *val = NULL, *nval = 0, valid_from[0] = 0;
    if (a->valid) {
        if (mega_fbin_prefix(a->valid, NULL, 0))
            return cli_error("--valid '%s' is a fairseq binarized dataset, but --data is text: the model reads bytes", a->valid);
        if (mega_read_file(a->valid, "--valid", valid) != MEGA_OK) return cli_error("%s", mega_last_error());
        *val = valid->data, *nval = valid->n;
        snprintf(valid_from, 24, "--valid");
    } else if (a->valid_fraction > 0) {
        *nval = (size_t)((double)data->n * a->valid_fraction);
        *ntrain = data->n - *nval;
        *val = data->data + *ntrain;
        snprintf(valid_from, 24, "held-out tail");
    }
    if (*val && *nval < 2) *val = NULL, *nval = 0, valid_from[0] = 0;
    return 0;
}

int task_positions_fit(const mega_block_config *b, int longest, const char *who, const char *whose, const char *what,
                       const char *fix) {
    mega_block_context x;
    mega_block_context_of(b, longest, &x);
    if (x.positions <= 0 || longest <= x.positions) return 0;
    return cli_error("%s: max-positions %d (%s) is shorter than %s: %s", who, x.positions, whose, what, fix);
}
