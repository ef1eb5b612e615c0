/*
 * mega_train.h: the training layer of libmega (included by mega.h): optimizers and
 * learning-rate schedules, each kind one row of a table, and the random keys of a training step.
 *
 * Optimizers (MEGA_OPTIM_LIST): a generic handle over a model's parameter set. Each kind keeps
 * `state` reals per parameter in the layout of the parameter buffer, saved in a training-state
 * safetensors file as one flat tensor per trainable parameter and state buffer
 * (<state name>.<parameter name>), and an update counter. Its hyper-parameters are described by
 * a field table (name, default, range, help) from which `mega train` builds its flags.
 *
 * Schedules (MEGA_SCHED_LIST): the learning rate of each update from a mega_sched_inputs.
 */
#ifndef MEGA_TRAIN_H
#define MEGA_TRAIN_H
#include "mega.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Optimizers. X(ID, symbol (src/train/<symbol>.c), name, state reals per parameter, legacy (1 for
 * the one optimizer of the runs from before the choice existed: a run that names none used it),
 * one-line description). A new optimizer: one row here and one file in src/train (its fields and
 * its step; docs/design.md). */
#define MEGA_OPTIM_LIST(X)                                                                                               \
    X(ADAMW, adamw, "adamw", 2, 1, "AdamW: Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW)")           \
    X(APOLLO, apollo, "apollo", 3, 0, "Apollo: quasi-Newton with a diagonal Hessian (Ma 2020; the Mega recipes' optimizer, fairseq apollo.py)")

typedef enum {
#define MEGA_OPTIM_ENUM_(id, sym, name, state, legacy, desc) MEGA_OPTIM_##id,
    MEGA_OPTIM_LIST(MEGA_OPTIM_ENUM_)
#undef MEGA_OPTIM_ENUM_
    MEGA_OPTIM_COUNT
} mega_optim_kind;

/* Apollo's rectified bound of the diagonal Hessian and its weight-decay modes (fairseq
 * --apollo-rebound, --weight-decay-type; auto = fairseq's None: L2 with constant, decoupled with
 * belief) */
enum { MEGA_APOLLO_CONSTANT = 0, MEGA_APOLLO_BELIEF };
enum { MEGA_WD_AUTO = 0, MEGA_WD_L2, MEGA_WD_DECOUPLED, MEGA_WD_STABLE };

/* The hyper-parameters of every optimizer (each uses its own fields; weight_decay and decay_all
 * are shared). Weight decay applies to the tensors flagged "decay" (matrices and embeddings)
 * unless decay_all is set; never to non-trainable buffers. */
typedef struct {
    double weight_decay;
    int decay_all;
    double beta1, beta2, eps;          /* AdamW */
    double apollo_beta, apollo_eps;    /* Apollo */
    int apollo_rebound, weight_decay_type;
} mega_optim_hp;
/* the defaults of `mega train`: weight decay 0.01; AdamW 0.9, 0.98, 1e-8; Apollo as fairseq's
 * (beta 0.9, eps 1e-4, rebound constant, weight-decay type auto) */
MEGA_API void mega_optim_hp_default(mega_optim_hp *hp);

/* a hyper-parameter of the table: a double, an on/off switch, or one of `choices` ("a|b", stored
 * as the index in an int) */
typedef enum { MEGA_OPTF_DOUBLE = 0, MEGA_OPTF_SET, MEGA_OPTF_CHOICE } mega_optim_field_type;
typedef struct {
    const char *name; /* flag and training-metadata key */
    mega_optim_field_type type;
    size_t offset;    /* in mega_optim_hp */
    double lo, hi;    /* DOUBLE: valid range */
    const char *choices;
    const char *help;
} mega_optim_field;

MEGA_API int mega_optim_count(void);
MEGA_API const char *mega_optim_name(mega_optim_kind k);        /* NULL when k is not a kind */
MEGA_API const char *mega_optim_describe(mega_optim_kind k);
MEGA_API int mega_optim_find(const char *name);                 /* the kind, or -1 */
MEGA_API int mega_optim_state_reals(mega_optim_kind k);         /* optimizer state per parameter, in reals */
/* the optimizer of the runs from before the choice existed (the row marked legacy): a run whose
 * metadata names no optimizer used it, and `mega train` names the optimizer only when it is another */
MEGA_API mega_optim_kind mega_optim_legacy(void);
/* the hyper-parameters kind k reads (shared ones appear in each kind's table) */
MEGA_API const mega_optim_field *mega_optim_fields(mega_optim_kind k, int *count);
/* one-line error naming the flag for a value out of range */
MEGA_API mega_status mega_optim_hp_check(mega_optim_kind k, const mega_optim_hp *hp);

typedef struct mega_optim mega_optim;
/* an optimizer of kind k for a parameter set of `total` reals (mega_ps_total), state zero */
MEGA_API mega_status mega_optim_new(mega_optim_kind k, size_t total, mega_optim **out);
MEGA_API void mega_optim_free(mega_optim *o);
MEGA_API mega_optim_kind mega_optim_kind_of(const mega_optim *o);
/* one update of the trainable tensors of ps from their gradients with learning rate lr (nothing
 * for a parameter set without gradients) */
MEGA_API void mega_optim_step(mega_optim *o, mega_paramset *ps, const mega_optim_hp *hp, double lr);
/* the updates done (saved as "adam_step" by mega train whatever the kind) */
MEGA_API int64_t *mega_optim_t(mega_optim *o);
/* state buffer i (0 <= i < state reals), `total` reals in the parameter layout */
MEGA_API mega_real *mega_optim_state(mega_optim *o, int i);
/* The state in a training-state file: <state name>.<tensor> per trainable tensor of ps, flat
 * ([numel]; F32, or F64 in a MEGA_F64 build): AdamW exp_avg / exp_avg_sq (the names of
 * torch.optim.AdamW), Apollo exp_avg_grad / approx_hessian / update (the official state keys).
 * Loading checks each one against its parameter (present, floating point, of shape [numel],
 * finite, second moments >= 0) and fails naming the tensor. */
MEGA_API mega_status mega_optim_save(const mega_optim *o, const mega_paramset *ps, mega_st_writer *w);
MEGA_API mega_status mega_optim_load(mega_optim *o, const mega_paramset *ps, const mega_st_file *f);

/* ---------------------------------------------------------------------------------------------
 * Learning-rate schedules. X(ID, name, decays (the rate changes after the warm-up), ends at
 * end_lr (its final rate is --end-learning-rate, not --min-lr), description). mega (cosine, linear, constant): linear
 * warm-up from lr/warmup to lr over `warmup` updates, then the decay to min_lr at `steps` (with
 * --time-budget by training time, and restarted by --reschedule). fairseq (linear_decay,
 * inverse_sqrt, cosine_fairseq): the Mega recipes' schedulers as fairseq defines them. */
#define MEGA_SCHED_LIST(X)                                                                                        \
    X(COSINE, "cosine", 1, 0, "linear warm-up, then cosine decay to --min-lr at --steps")                      \
    X(LINEAR, "linear", 1, 0, "linear warm-up, then linear decay to --min-lr at --steps")                      \
    X(CONSTANT, "constant", 0, 0, "linear warm-up, then --lr")                                                  \
    X(LINEAR_DECAY, "linear_decay", 1, 1, "fairseq linear_decay: warm-up from --warmup-init-lr, linear to --end-learning-rate at --steps") \
    X(INVERSE_SQRT, "inverse_sqrt", 1, 0, "fairseq inverse_sqrt: warm-up from --warmup-init-lr, then lr*sqrt(warmup/update)") \
    X(COSINE_FAIRSEQ, "cosine_fairseq", 1, 0, "fairseq cosine: warm-up from --warmup-init-lr (default --min-lr), cosine to --min-lr")

typedef enum {
#define MEGA_SCHED_ENUM_(id, name, decays, end_lr, desc) MEGA_SCHED_##id,
    MEGA_SCHED_LIST(MEGA_SCHED_ENUM_)
#undef MEGA_SCHED_ENUM_
    MEGA_SCHED_COUNT
} mega_sched_kind;

/* the inputs of a schedule (the flags of mega train) */
typedef struct {
    mega_sched_kind kind;
    double lr, min_lr;       /* peak rate; final rate (mega schedules, cosine_fairseq) */
    int64_t warmup, steps;   /* warm-up updates; the run's updates */
    double warmup_init_lr;   /* fairseq --warmup-init-lr (< 0: the scheduler's default) */
    double end_lr;           /* fairseq --end-learning-rate (linear_decay) */
    double time_budget;      /* > 0: mega schedules decay by trained / time_budget (seconds) */
    int64_t sched_from;      /* > 0: a --reschedule at this step from sched_lr (mega schedules) */
    double sched_lr;
} mega_sched_inputs;

MEGA_API int mega_sched_count(void);
MEGA_API const char *mega_sched_name(mega_sched_kind k);  /* NULL when k is not a kind */
MEGA_API const char *mega_sched_describe(mega_sched_kind k);
MEGA_API int mega_sched_find(const char *name);           /* the kind, or -1 */
/* whether the kind is one of fairseq's (no --time-budget, no --reschedule) */
MEGA_API int mega_sched_is_fairseq(mega_sched_kind k);
/* whether the rate changes after the warm-up (0: constant; 0 for a bad kind) */
MEGA_API int mega_sched_decays(mega_sched_kind k);
/* the final rate of the schedule: s->end_lr (linear_decay) or s->min_lr */
MEGA_API double mega_sched_final_lr(const mega_sched_inputs *s);
/* one-line error for inputs the scheduler refuses (as fairseq's asserts do) */
MEGA_API mega_status mega_sched_check(const mega_sched_inputs *s);
/* the learning rate of 0-based update `step` (fairseq's num_updates before it); trained: the
 * run's training seconds (used with time_budget) */
MEGA_API double mega_lr_at(const mega_sched_inputs *s, int64_t step, double trained);

/* ---------------------------------------------------------------------------------------------
 * The random keys of a training step: splitmix64's finaliser; the dropout key of step `step` of
 * a run seeded `seed`; the key of shard s of a step's batch (shard 0 keeps the step's key, so a
 * single process draws as before; K ranks and --grad-accum K drop the same units). */
MEGA_API uint64_t mega_mix64(uint64_t z);
MEGA_API uint64_t mega_dropout_key(uint64_t seed, int64_t step);
MEGA_API uint64_t mega_shard_key(uint64_t key, int shard);

/* ---------------------------------------------------------------------------------------------
 * Activation recomputation (`mega train --recompute`; docs/training.md, docs/performance.md).
 * none: a training forward keeps every block's activations for the backward. blocks: it keeps
 * only each block's input (the hidden states it already keeps) and one block's activations; the
 * backward re-runs each block's forward from its input, with the same dropout key (the masks are
 * drawn again, not stored) and without touching the batchnorm running statistics, just before
 * that block's backward: one more forward of the blocks per step for L - 1 fewer activation sets.
 * The gradients, hence the trained weights, are bit for bit those of none. It applies to the
 * Mega stacks of the language model, the classifier and the encoder-decoder's encoder, and to
 * the encoder-decoder's decoder layers (cross-attention included). The
 * calling thread's setting (as mega_set_threads), read by a model when it is created or loaded
 * and by mega_*_memory; a model keeps the setting it was made with. */
typedef enum { MEGA_RECOMPUTE_NONE = 0, MEGA_RECOMPUTE_BLOCKS, MEGA_RECOMPUTE_COUNT } mega_recompute;
MEGA_API void mega_set_recompute(mega_recompute r); /* out of range: none */
MEGA_API mega_recompute mega_get_recompute(void);
MEGA_API const char *mega_recompute_name(mega_recompute r); /* "none", "blocks"; NULL out of range */

#ifdef __cplusplus
}
#endif
#endif /* MEGA_TRAIN_H */
