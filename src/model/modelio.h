/* Shared by the model kinds: config JSON through the field tables, and model.safetensors
 * save/open. */
#ifndef MEGA_MODELIO_H
#define MEGA_MODELIO_H
#include "core/json.h"
#include "core/params.h"

/* JSON of a model config: {"model": kind, <the model's fields>, <the block's fields>}; the block
 * config is at block_off inside cfg. Caller frees. */
char *mega__config_to_json(const char *kind, const mega_field *mf, int nmf, const void *cfg, size_t block_off);

/* One official fairseq argument and the field it sets (flags: MEGA_OFFICIAL_INVERT for
 * negated booleans such as no_scale_embedding). */
enum { MEGA_OFFICIAL_INVERT = 1 };
typedef struct {
    const char *arg, *field;
    unsigned flags;
} mega_official_arg;

/* Read a model config written by mega__config_to_json (keys = field names; "model", when
 * present, must be `kind`), or, when the JSON has the key `official_marker`, one with the official
 * fairseq argument names listed in `official` (NULL-terminated); cfg holds the defaults. `what`
 * names the kind in messages ("language model"). */
mega_status mega__config_from_json(const char *json, const char *kind, const char *what, const mega_field *mf, int nmf,
                                   void *cfg, size_t block_off, const char *official_marker,
                                   const mega_official_arg *official);

/* write params with __metadata__ {config, format, kv...} atomically */
mega_status mega__model_save(const mega_params *P, const char *path, const char *config_json, const char *const *kv);
/* open and return the config JSON string stored in __metadata__["config"] (owned by f) */
mega_status mega__model_open(const char *path, mega_st_file **f, const char **config_json);
/* mega_st_open of the model file path names: the file, or a run directory's model.safetensors
 * (mega_model_file, modelfile.c) */
mega_status mega__model_st_open(const char *path, mega_st_file **f);
#endif
