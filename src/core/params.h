/*
 * The parameter table: every tensor of a model, by official name, in ONE contiguous buffer.
 *
 * Layers declare their tensors while the model is being built (mega_params_add returns the
 * offset of the tensor in the buffer); after mega_params_alloc the model owns one buffer for the
 * values and one with the same layout for the gradients (and the optimizer adds its moments in
 * the same layout). Layers keep only offsets (size_t), so the same layer struct addresses the
 * values, the gradients or the Adam moments: `W + L->off_x`.
 *
 * Non-trainable buffers (batchnorm running statistics) live in the same buffer but are flagged
 * MEGA_P_BUFFER: they get no gradient, no optimizer update and no weight decay.
 */
#ifndef MEGA_PARAMS_H
#define MEGA_PARAMS_H

#include "core/internal.h"

enum {
    MEGA_P_DECAY = 1u << 0,  /* subject to weight decay (matrices and embeddings) */
    MEGA_P_BUFFER = 1u << 1, /* non-trainable state (no grad) */
    MEGA_P_I64 = 1u << 2,    /* stored as int64 in checkpoints (num_batches_tracked) */
    MEGA_P_EMA = 1u << 3     /* EMA parameter (informational: never decayed by default) */
};

#define MEGA_NAME_MAX 128
/* A matrix stored in q8_0 blocks (model/quant.c) is two tensors of a file instead of its own:
 * "<name>.q8_0" (I8) and "<name>.q8_0_scale" (F16); mega_params_check and mega_params_read leave
 * such a matrix to mega__q8_load. */
#define MEGA_Q8_SUFFIX ".q8_0"
#define MEGA_Q8_SCALE_SUFFIX ".q8_0_scale"

typedef struct {
    char name[MEGA_NAME_MAX];
    int ndim;
    int64_t shape[4];
    size_t numel;
    size_t offset; /* in reals, into the buffer */
    unsigned flags;
} mega_pspec;

typedef struct {
    mega_pspec *specs;
    int n, cap;
    size_t total; /* reals */
    real *data;   /* values */
    real *grad;   /* gradients, same layout */
    /* matrices also held in q8_0 blocks (model/quant.c), freed by quant_free; NULL for a float model */
    void *quant;
    void (*quant_free)(void *quant);
    int q8_ok; /* set by mega__model_fill for an inference load: q8_0 pairs stand for their tensors */
} mega_params;

void mega_params_init(mega_params *P);
void mega_params_free(mega_params *P);
/* Declare a tensor "<prefix><name>" with the given shape; returns its offset via *off.
 * Offsets are 16-real aligned so that each tensor starts on a 64-byte boundary. */
mega_status mega_params_add(mega_params *P, const char *prefix, const char *name, int ndim,
                            const int64_t *shape, unsigned flags, size_t *off);
/* Allocate (zeroed) data and grad buffers for everything declared. */
mega_status mega_params_alloc(mega_params *P, int with_grad);
const mega_pspec *mega_params_find(const mega_params *P, const char *name);
void mega_params_zero_grad(mega_params *P);
size_t mega_params_count_trainable(const mega_params *P);

/* convenience to declare: MEGA_PADD(P, prefix, "name", flags, &off, d0, d1, ...) */
#define MEGA_PADD(P, prefix, name, flags, off, ...)                                           \
    mega_params_add((P), (prefix), (name), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                    (int64_t[]){__VA_ARGS__}, (flags), (off))

/* Compare the declared tensors with a safetensors file before anything is allocated: every
 * declared tensor is in the file (prefix + name) with the declared shape (a 1-element tensor
 * matches [] and [1]) and a dtype that reads without a silent conversion (floating point for
 * weights; an integer type for MEGA_P_I64 buffers); tensors of the file that are not declared are
 * an error unless listed in `ignore` (NULL-terminated; full names or name suffixes) or allow_extra
 * is set. The file's reader has already checked that every tensor lies within the file, so after
 * this the values need at most twice the file's size (F16/BF16 read as F32). */
mega_status mega_params_check(const mega_params *P, const mega_st_file *f, const char *prefix,
                              const char *const *ignore, int allow_extra);
/* Read every declared tensor into dst (checked by mega_params_check); non-finite values fail. */
mega_status mega_params_read(const mega_params *P, real *dst, const mega_st_file *f, const char *prefix);
/* mega_params_check, then mega_params_read into dst (P->data or a buffer of the same layout). */
mega_status mega_params_load(mega_params *P, real *dst, const mega_st_file *f, const char *prefix,
                             const char *const *ignore, int allow_extra);
/* Add every tensor (values, or gradients when `use_grad`) to a writer, under prefix + name;
 * MEGA_P_I64 tensors are written as I64, the rest as F32. */
mega_status mega_params_save(const mega_params *P, const real *src, mega_st_writer *w, const char *prefix);
/* name, offset, numel and public flags (1 decay, 2 non-trainable buffer) of tensor i; NULL if out of range */
const char *mega_params_info(const mega_params *P, int i, size_t *offset, size_t *numel, unsigned *flags);
/* "[257, 16]" into buf; whether a dtype is floating point (F32, F64, F16, BF16): the rules the
 * loaders of weights and of optimizer moments share */
void mega_params_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape);
int mega_params_is_float(mega_dtype t);

#endif
