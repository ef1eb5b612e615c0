/* Shared by the model kinds: config JSON through the field tables, and model.safetensors
 * save/open. */
#ifndef MEGA_MODELIO_H
#define MEGA_MODELIO_H
#include "core/json.h"
#include "core/params.h"
#include "model/kinds.h"
#include "model/stack.h"

/* JSON of a model config: {"model": kind, <the model's fields>, <the block's fields>}; the block
 * config is at block_off inside cfg. Caller frees. */
char *mega__config_to_json(const char *kind, const mega_field *mf, int nmf, const void *cfg, size_t block_off);

/* Read a model config written by mega__config_to_json (keys = field names; "model", when
 * present, must be the kind's name), or, when the JSON has the kind's first official key
 * (mega_model_ops.official_keys), one with the official fairseq argument names of the kind's and
 * the block's tables; cfg holds the defaults. */
mega_status mega__config_from_json(const char *json, mega_model_kind kind, const mega_field *mf, int nmf, void *cfg,
                                   size_t block_off);
/* a copy of the official arguments of o under our field names: the kind-level names `model`
 * (NULL-terminated), then, when `block`, the block's with `side` for %s (the training settings
 * only when `training`); choice aliases (sparse, mp, swish) become our names. Caller deletes. */
cJSON *mega__official_translate(const cJSON *o, const mega_official_name *model, const char *side, int block,
                                int training);

/* write params with __metadata__ {config, format, kv...} atomically */
mega_status mega__model_save(const mega_params *P, const char *path, const char *config_json, const char *const *kv);
/* open and return the config JSON string stored in __metadata__["config"] (owned by f) */
mega_status mega__model_open(const char *path, mega_st_file **f, const char **config_json);
/* mega_st_open of the model file path names: the file, or a run directory's model.safetensors
 * (mega_model_file, modelfile.c) */
mega_status mega__model_st_open(const char *path, mega_st_file **f);

/* ---- validate before allocating (docs/library.md) ----
 * A model is built in two steps: declare (the config checked and resolved, the parameter table
 * declared: names, shapes, offsets; nothing large allocated), then allocate. Loads compare the
 * declared table with the file in between. */
mega_status mega__lm_declare(const mega_lm_config *c, mega_lm **out);   /* lm.c */
mega_status mega__cls_declare(const mega_cls_config *c, mega_cls **out); /* cls.c */
mega_status mega__s2s_declare(const mega_s2s_config *c, mega_s2s **out); /* s2s.c */
/* the declared parameters from f: mega_params_check (names, shapes, dtypes, extra tensors not in
 * `ignore`), then the allocation (gradients unless o->inference), then the values */
mega_status mega__model_fill(mega_params *P, const mega_st_file *f, const char *const *ignore, const mega_load_opts *o);
/* q8_0 weights (quant.c): whether f holds any (a "<name>.q8_0" tensor or the metadata
 * "quantization"); the pairs of f checked and read into P (blocks registered for the products,
 * values dequantized into P->data), after mega_params_read */
int mega__q8_in_file(const mega_st_file *f);
mega_status mega__q8_load(mega_params *P, const mega_st_file *f);
/* the bytes mega_stack_reserve allocates for a batch B x T (its activations, hidden states,
 * final-norm output, scratch and gradient buffers), computed as it computes them */
size_t mega__stack_bytes(const mega_stack *s, int B, int T);
/* out from a declared table: parameters, gradients and AdamW moments when training, buffers */
void mega__memory_fill(mega_memory *out, const mega_params *P, int training, size_t buffers);
/* "3 class names but the head has 2 outputs": the __metadata__ "classes" list of a classifier
 * file (written by mega train) must not name more classes than the head has outputs */
mega_status mega__check_class_names(const mega_st_file *f, int classes);
#endif
