/*
 * The models the commands open: the kind of a model file (one small table of the kinds' names),
 * and one loader that opens a run directory or a model file and loads whichever model it holds.
 */
#ifndef MEGA_TOOLS_MODELS_H
#define MEGA_TOOLS_MODELS_H
#include "common.h"

/* the kind of the model file at path (the library's rule, mega_model_kind_of_json): 0, -1 when it
 * cannot be read, -2 when its config names a kind this library does not know (mega_last_error set) */
int model_file_kind(const char *path, mega_model_kind *k);


/* --model accepts a checkpoint directory or a .safetensors file (the library's rule,
 * mega_model_file_which with tool_which); NULL with mega_last_error() set when it names no model file */
const char *model_path(const char *arg, char *buf, size_t n);
/* --which: of a run directory, the model of its best validation figure ("best", the default:
 * best.safetensors when the run kept one) or its newest checkpoint ("last") */
extern const char *tool_which;
#define WHICH_FLAG                                                                                                     \
    {"which", F_ENUM, &tool_which, "of a run directory: best (the model of the best validation figure, when the run kept one; "\
     "else the newest) or last (the newest checkpoint); a .safetensors file is used as given", "best|last", 1, 0, 0}
/* the model file arg names (into path) and its kind: 0, or 1 after the error */
int model_open(const char *arg, char *path, size_t n, mega_model_kind *k);
/* what the models these commands load are for: inference (no gradient buffer) */
extern const mega_load_opts MODEL_INFERENCE;
/* what a kind's model is called in messages ("language model", "classifier", ...) */
const char *model_kind_noun(mega_model_kind k);

/* ---- language models ---- */

/* the language model arg names; chunk_override != 0 rebuilds it with another attention chunk
 * (rotary models), attn_window >= 0 with that local attention mask. 0, or 1 after the error. */
int load_model_ex(const char *arg, int chunk_override, int attn_window, mega_lm **out);
int load_model(const char *arg, int chunk_override, mega_lm **out);
/* The vocabulary of the language model at (resolved) path: *d = NULL for the byte models this
 * project trains, a fairseq dictionary for models converted from official checkpoints
 * (docs/interop.md), with the fairseq --tokens-per-sample of its training in *tps (0 = none). */
int lm_vocab(const char *path, const mega_lm_config *c, mega_fdict **d, size_t *tps);
/* the same from an open file f (path names it in messages): the checks of that metadata */
int lm_meta(const mega_st_file *f, const char *path, int vocab_size, mega_fdict **d, size_t *tps);

/* ---- classifiers ---- */

typedef struct {
    mega_cls *m;
    mega_classes classes;
    mega_vocab vocab;
    mega_data_format format;
    int fairseq; /* converted from an official LRA checkpoint: a fairseq dictionary (docs/interop.md) */
    mega_fdict *dict; /* that dictionary (NULL for an LRA image model) */
    int named;        /* the classes are named in the file (else by their ids) */
} cls_model;
/* the classifier arg names with its classes and vocabulary (free it with free_cls_model, also
 * after an error); 0, or 1 after the error */
int load_cls_model(const char *arg, cls_model *cm);
void free_cls_model(cls_model *cm);

/* ---- encoder-decoders ---- */

/* The source and target fairseq dictionaries of a model converted from an official translation
 * checkpoint (metadata "vocab" and "tgt-vocab", docs/interop.md), or NULL for the byte models
 * this project trains. */
typedef struct {
    mega_fdict *src, *tgt;
    /* subword units of a model trained with --bpe, per side (NULL: bytes or dictionaries; one
     * object when shared) and their longest token in bytes (1 for bytes) */
    mega_bpe *src_bpe, *tgt_bpe;
    size_t src_longest, tgt_longest;
} s2s_dicts;
void s2s_dicts_free(s2s_dicts *d);
/* the model at arg with its vocabulary: bytes, subword units (--bpe) or, with allow_fdict, the
 * fairseq dictionaries of a converted official model (mega eval reads the other two only) */
int load_s2s(const char *arg, mega_s2s **m, s2s_dicts *dicts, int allow_fdict);
/* the longest source in tokens (with its </s>) the model accepts (translate.c) */
int s2s_max_source(const mega_s2s *m);

/* ---- any kind ---- */

/* A model a command opened: whichever kind its file holds, with its vocabulary */
typedef struct {
    mega_model_kind kind;
    char path[4096];  /* the model file */
    mega_lm *lm;      /* MEGA_MODEL_LM, with its fairseq dictionary (NULL: bytes) and tokens-per-sample */
    mega_fdict *dict;
    size_t tps;
    cls_model cls;    /* MEGA_MODEL_CLS */
    mega_s2s *s2s;    /* MEGA_MODEL_S2S, with the subword units of its sides (NULL: bytes) */
    mega_bpe *src_bpe, *tgt_bpe;
} loaded_model;
/* open the model arg names and load it whatever its kind (a file whose kind cannot be read is
 * loaded as a language model, whose loader says why); 0, or 1 after the error (m is then still
 * for loaded_model_free) */
int model_load(const char *arg, loaded_model *m);
void loaded_model_free(loaded_model *m);

#endif
