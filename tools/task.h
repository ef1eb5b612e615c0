/*
 * A training task for `mega train`: the language model (task "lm"), the classifier (task
 * "classify") or the encoder-decoder (task "translate"). The generic loop in train.c owns the optimizer, the schedule, checkpoints, resume,
 * logging and progress; a task owns its model, data, batches and validation metric.
 */
#ifndef MEGA_TASK_H
#define MEGA_TASK_H
#include "common.h"
#include "models.h"

typedef struct train_args {
    /* task and data */
    const char *task, *data, *valid, *out, *preset;
    const char *format, *images, *labels, *valid_images, *valid_labels;
    double valid_fraction, pixel_mean, pixel_std;
    int keep_parens;
    const char *words; /* classify, speech data: sc10 or all (the 35 words) */
    int pad_short;     /* classify, speech data: zero-pad clips shorter than a second */
    /* the model: the model flags write straight into the config of the task's kind */
    mega_lm_config lm;   /* task lm */
    mega_cls_config cls; /* task classify */
    mega_s2s_config s2s; /* task translate (the block flags set the encoder; the decoder copies it) */
    int max_tokens;      /* translate: tokens per batch (fairseq --max-tokens) */
    int bpe_merges;      /* translate: byte-pair merges learned from the training pairs (0 = bytes; a
                            resumed run keeps its checkpoint's) */
    const char *bpe_sides; /* translate: the sides in subword units: both (one vocabulary), source, target */
    double label_smoothing;
    int classes;         /* classify: --classes (0 = from the training labels) */
    const char *init_from; /* classify: --init-from RUN (a pretrained encoder: mega train --task mlm) */
    /* training */
    int64_t steps, warmup, seed, eval_every, save_every, log_every, eval_tokens, stop_after;
    double time_limit; /* seconds of this invocation (0 = none) */
    /* --time-budget: seconds of training (validation and checkpoint saves excluded) over which the
     * learning rate decays and after which the run ends (0 = none: the schedule follows --steps);
     * trained_seconds / evaled_seconds: the run's training and validation+save seconds before this
     * invocation (restored by --resume) */
    double time_budget, trained_seconds, evaled_seconds;
    int batch, seq_len, threads, resume, quiet;
    int grad_accum;      /* micro-batches per step and rank (--grad-accum) */
    int recompute;       /* --recompute: a mega_recompute (not stored: it changes no bit of the run) */
    double dist_timeout; /* seconds a rank waits for the others (--dist-timeout) */
    int force, reschedule, keep; /* the run directory: --force, --reschedule, --keep */
    /* a --reschedule at step sched_from (0 = never): from there the learning rate decays from
     * sched_lr (the rate the schedule had reached) to min_lr by step `steps` */
    int64_t sched_from;
    double sched_lr;
    const cli_flag *flags; /* the command's flag table (what a checkpoint stores of the training setup) */
    int model_flags_seen; /* some model flag was given explicitly (checked against a resumed checkpoint) */
    double lr, min_lr, clip;
    const char *schedule;  /* --schedule / --lr-scheduler: a name of MEGA_SCHED_LIST */
    double warmup_init_lr, end_lr; /* the fairseq schedules' --warmup-init-lr, --end-learning-rate */
    const char *optimizer; /* --optimizer: a name of MEGA_OPTIM_LIST */
    mega_optim_hp opt;     /* its hyper-parameters (flags from the table's fields) */
    const char *best_metric; /* --best-metric: the validation figure best.safetensors keeps the best of (loss, or the task's metric) */
    int64_t patience;        /* --patience: stop after N validations without improvement (<= 0: never) */
} train_args;

typedef struct task task;
struct task {
    const char *kind;        /* the name of its task (its row in TASKS, set by train.c) */
    const char *metric;      /* "bpb" or "acc" */
    const char *unit;        /* throughput unit: "tok/s" */
    const char *valid_unit;  /* what its validation count counts, when not its row's valid_unit (NULL) */
    mega_paramset *ps;
    uint64_t data_hash, data_size; /* fingerprint of the training data (resume check) */
    int batchnorm;                 /* the model normalises with batch statistics (per shard) */
    /* One shard of one training batch (docs/distributed.md): the task draws the WHOLE batch with
     * *rng (so every rank and micro-batch advances it alike) and runs forward/backward on rows
     * [shard*B/nshards, (shard+1)*B/nshards) of its B rows (task_shard_rows) only. Gradients are
     * accumulated (the caller zeroes them) scaled so that their sum over the nshards shards is
     * the gradient of the mean loss of the whole batch; *loss and *metric are likewise this
     * shard's parts of the batch's mean (their sum over the shards is the batch's value),
     * *units its tokens. nshards = 1: the whole batch, exactly as a single process. */
    int (*step)(task *t, const train_args *a, uint64_t *rng, uint64_t key, int shard, int nshards, double *loss,
                double *metric, int64_t *units);
    /* validation loss and metric (bits per byte, accuracy); max_units caps the work (0 = all) */
    int (*validate)(task *t, const train_args *a, int64_t max_units, double *loss, double *metric, int64_t *count);
    mega_status (*save)(task *t, const char *path, const char *const *kv);
    void (*describe)(task *t, const train_args *a, FILE *f);
    void (*destroy)(task *t);
    void *impl;
};

/* the rows [*r0, *r1) of shard `shard` of `nshards` in a batch of B rows (empty when B < nshards
 * leaves it none) */
static inline void task_shard_rows(int B, int shard, int nshards, int *r0, int *r1) {
    *r0 = (int)((int64_t)B * shard / nshards);
    *r1 = (int)((int64_t)B * (shard + 1) / nshards);
}

/* The most sequences one forward holds, which sizes the buffers and the memory estimate
 * (docs/performance.md, "Training memory"): a training step forwards one of the dist_size() x
 * --grad-accum shards of --batch at a time, and with --grad-accum N > 1 validation goes through
 * batches of ceil(batch / N) (not split over the ranks), so a run's memory follows the
 * micro-batch; without, validation forwards whole batches, as before. */
int task_forward_batch(const train_args *a);

/* the examples held out for validation from the end of n training examples without --valid
 * (--valid-fraction; at least one) */
static inline int task_valid_count(int n, double fraction) {
    const int nv = (int)(n * fraction);
    return nv < 1 ? 1 : nv;
}

/* a task from its template with a zeroed implementation struct of impl_size bytes (NULL after
 * printing the error when out of memory) */
task *task_create(const task *proto, size_t impl_size);
/* --resume with model flags: 1 (after printing the error naming the flag) when a field the user
 * set (mine: the config from the flags, resolved) differs from the checkpoint's (ck); every field
 * that applies to the mixer is compared when a --preset was given */
int resume_config_differs(const train_args *a, const mega_field *mf, int nmf, const void *mine, const void *ck,
                          size_t block_off);
/* a note for each block flag the user set that the mixer has no use for (--heads with the mega
 * mixer): the flag is ignored, as the other ignored flags are, with a word */
void note_unused_block_flags(const train_args *a, const mega_block_config *mine, mega_mixer_kind mixer);

/* --init-from FROM (docs/pretraining.md): its model, a classifier's or masked-LM encoder, after
 * checking that its encoder is this run's (mine: the resolved block; layers): the layers and every
 * block field that applies to its mixer, the dropouts and the training length excepted; 1 after
 * one error line naming the first field that differs. init_from_load: the tensors of src whose
 * names (renamed by map, as mega_ps_copy_renamed; NULL: the same names) and shapes are dst's,
 * with a line saying what was loaded and what was initialised fresh. */
int init_from_open(const char *from, const mega_block_config *mine, int layers, mega_cls **src);  /* mine NULL: no check */
/* init_from_adopt: the block fields (dropouts and training length aside) and --layers not given on
 * the command line (fl) take the pretrained encoder's values, so `--init-from RUN` alone fine-tunes
 * RUN's architecture; init_from_verify: the check of init_from_open on an opened src (freed and
 * NULL after the error line) */
void init_from_adopt(const cli_flag *fl, const mega_cls *src, mega_block_config *block, int *layers);
int init_from_verify(const char *from, const mega_block_config *mine, int layers, mega_cls **src);
int init_from_load(const char *from, mega_paramset *dst, mega_paramset *src, const char *const *map);

/* 1 after one error line when sequences of `longest` positions are longer than the relative-position
 * table of block b covers (mega_block_context.positions: Mega's simple bias under full attention,
 * max-positions), which forward would otherwise only find at the first such batch, mid-training.
 * The line: "<who>: max-positions N (<whose>) is shorter than <what>: <fix>". */
int task_positions_fit(const mega_block_config *b, int longest, const char *who, const char *whose, const char *what,
                       const char *fix);
/* The byte text of the lm and mlm tasks: --data read whole into *data, and the validation text:
 * --valid read into *valid, else the held-out tail of --data (--valid-fraction), else none (also
 * when it has fewer than 2 bytes). train, ntrain, val and nval point into them; valid_from
 * (24 bytes) says where the validation text comes from. 1 after one error line. */
int task_text_split(const train_args *a, mega_bytes *data, mega_bytes *valid, const uint8_t **train, size_t *ntrain,
                    const uint8_t **val, size_t *nval, char *valid_from);

/* One row per training task (tasks.c): everything `mega train` does differently per task. Adding
 * a task is one task_X.c with its row's functions, plus the row. */
typedef struct task_def {
    const char *name;         /* --task NAME, and the "task" a checkpoint records */
    mega_model_kind kind;          /* the model it trains */
    const char *valid_unit;   /* what its validation count counts ("examples") */
    const char *metric_title; /* mega plot: the title of its validation metric's axis */
    int uneven_shards;        /* its batches vary in rows: ranks and micro-batches get uneven shards */
    size_t config_off, block_off;        /* its model config, and that config's block, in train_args */
    const mega_field *(*fields)(int *n); /* its model config's fields (one flag each) */
    /* its own flags, appended to fl[n..]; returns the new count */
    int (*add_flags)(train_args *a, cli_flag *fl, int n);
    void (*defaults)(train_args *a); /* its defaults that differ from the first row's (before the flags); NULL: none */
    /* apply --preset to the flags the user did not set (NULL: the task has no presets); non-zero
     * on an unknown preset */
    int (*preset)(train_args *a, const cli_flag *fl);
    void (*finish)(train_args *a); /* after the flags are parsed (NULL: nothing) */
    /* build from flags, or (resume) from the checkpoint at model_path with its config; the data is
     * loaded in both cases. Print errors with cli_error and return non-zero on failure. */
    int (*create)(train_args *a, const char *model_path, task **out);
    int metric_higher_better; /* its validation metric improves upward (accuracy), else downward (bits per byte) */
} task_def;

/* the tasks, the first the default */
extern const task_def TASKS[];
extern const int N_TASKS;
/* the row of --task NAME (NULL if none); of the task that trains models of kind k (the first) */
const task_def *task_find(const char *name);
const task_def *task_of_kind(mega_model_kind k);
/* the row with presets (NULL if none) */
const task_def *task_with_presets(void);
/* "lm|classify|translate" */
const char *task_choices(void);

/* the rows' functions (task_lm.c, task_cls.c, task_s2s.c) */
int lm_task_new(train_args *a, const char *model_path, task **out);
int lm_task_flags(train_args *a, cli_flag *fl, int n);
int cls_task_new(train_args *a, const char *model_path, task **out);
int cls_task_flags(train_args *a, cli_flag *fl, int n);
void cls_apply_classify_defaults(train_args *a);
int cls_apply_preset(train_args *a, const cli_flag *fl);
int s2s_task_new(train_args *a, const char *model_path, task **out);
int s2s_task_flags(train_args *a, cli_flag *fl, int n);
void s2s_apply_translate_defaults(train_args *a);
void s2s_finish_flags(train_args *a);
int mlm_task_new(train_args *a, const char *model_path, task **out);
int mlm_task_flags(train_args *a, cli_flag *fl, int n);
void mlm_apply_defaults(train_args *a);
/* whether the checkpoint at path is a masked-LM model (mega_cls with mlm); mega eval of one:
 * masked-byte accuracy and bits (0, or 2 after the error) */
int mlm_model_file(const char *path);
int mlm_eval(const char *model, const char *data, int seq_len, int batch, int64_t max_bytes, int quiet);
#endif
