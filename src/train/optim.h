/* The optimizer table's internals: each kind's file (src/train/<name>.c) defines its
 * hyper-parameter fields and its update; optim.c holds the generic handle, state and files. */
#ifndef MEGA_TRAIN_OPTIM_H
#define MEGA_TRAIN_OPTIM_H
#include "core/params.h"
#include <stddef.h>

struct mega_optim {
    mega_optim_kind kind;
    size_t n;     /* reals per state buffer (the parameter set's total) */
    int64_t t;    /* updates done */
    real *s[4];   /* the kind's state buffers, n reals each */
};

/* per kind: its fields, its state buffers' names in checkpoints (and which must be >= 0), and
 * its update of the trainable tensors of P (which has gradients) */
typedef struct {
    const mega_optim_field *fields;
    int nfields;
    const char *const *state_names;
    unsigned nonneg; /* bit i: state buffer i is a mean of squares */
    void (*step)(struct mega_optim *o, mega_params *P, const mega_optim_hp *hp, double lr);
} mega__optim_impl;

extern const mega__optim_impl mega__optim_adamw, mega__optim_apollo;

/* the fields every kind shares */
#define MEGA__OPTF_WD                                                                                           \
    {"weight-decay", MEGA_OPTF_DOUBLE, offsetof(mega_optim_hp, weight_decay), 0, 10, NULL,                    \
     "weight decay (AdamW: decoupled; Apollo: --weight-decay-type) of matrices and embeddings"},               \
    {"decay-all", MEGA_OPTF_SET, offsetof(mega_optim_hp, decay_all), 0, 0, NULL,                              \
     "also decay norms, biases, EMA and bias parameters"}

/* whether spec s is decayed under hp */
static inline int mega__optim_decays(const mega_pspec *s, const mega_optim_hp *hp) {
    return hp->weight_decay > 0 && (hp->decay_all || (s->flags & MEGA_P_DECAY));
}
#endif
