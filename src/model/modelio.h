/* Shared by the model kinds: typed reads of config JSON, and model.safetensors save/open. */
#ifndef MEGA_MODELIO_H
#define MEGA_MODELIO_H
#include "core/params.h"
#include <cjson/cJSON.h>

typedef struct {
    const cJSON *o;
    mega_status st; /* first error */
} mega_json_reader;

/* absent or null keys leave *dst unchanged; a wrongly typed value records an error */
void mega_json_int(mega_json_reader *r, const char *k, int *dst);
void mega_json_flt(mega_json_reader *r, const char *k, float *dst);
void mega_json_bool(mega_json_reader *r, const char *k, int *dst, int invert);
void mega_json_enum(mega_json_reader *r, const char *k, int (*parse)(const char *, void *), void *dst);
int mega_json_parse_attn(const char *s, void *d);
int mega_json_parse_norm(const char *s, void *d);
int mega_json_parse_act(const char *s, void *d);
int mega_json_parse_relpos(const char *s, void *d); /* simple -> 0, rotary -> 1 */

/* the mixer options <-> config JSON (keys: mixer, heads, window, memory-size, max-len, pos,
 * attn-window, log-n-scaling, train-len) and into a block config */
void mega_mixer_config_default(mega_mixer_config *m);
void mega_mixer_config_to_json(cJSON *o, const mega_mixer_config *m);
void mega_mixer_config_from_json(mega_json_reader *r, mega_mixer_config *m);
struct mega_block_cfg;
void mega_mixer_config_apply(const mega_mixer_config *m, struct mega_block_cfg *b);

/* The block fields both model configs share (same names in mega_lm_config and
 * mega_cls_config), by reference, so their JSON and block mapping are written once. */
typedef struct {
    int *layers, *D, *Z, *E, *N, *F, *chunk, *trunc, *maxpos, *rotary, *prenorm, *norm_affine, *final_affine;
    mega_attn_fn *attn;
    mega_norm_type *norm;
    mega_act *act;
    float *dropout, *adrop, *hdrop, *actdrop;
    mega_mixer_config *mix;
} mega_common_fields;
#define MEGA_COMMON_FIELDS(c)                                                                                  \
    {&(c)->layers, &(c)->embed_dim, &(c)->z_dim, &(c)->hidden_dim, &(c)->n_dim, &(c)->ffn_dim, &(c)->chunk_size,  \
     &(c)->truncation, &(c)->max_positions, &(c)->rotary, &(c)->prenorm, &(c)->norm_affine, &(c)->final_norm_affine, \
     &(c)->attention_activation, &(c)->norm_type, &(c)->activation, &(c)->dropout, &(c)->attention_dropout,         \
     &(c)->hidden_dropout, &(c)->activation_dropout, &(c)->mix}
/* CLI-named keys of the common fields */
void mega_common_to_json(cJSON *o, const mega_common_fields *f);
void mega_common_from_json(mega_json_reader *r, const mega_common_fields *f);
/* the block config of these fields */
void mega_common_block_cfg(const mega_common_fields *f, struct mega_block_cfg *b, int bidir);

/* write params with __metadata__ {config, format, kv...} atomically */
mega_status mega__model_save(const mega_params *P, const char *path, const char *config_json, const char *const *kv);
/* open and return the config JSON string stored in __metadata__["config"] (owned by f) */
mega_status mega__model_open(const char *path, mega_st_file **f, const char **config_json);
/* mega_st_open of the model file path names: the file, or a run directory's model.safetensors
 * (mega_model_file, modelfile.c) */
mega_status mega__model_st_open(const char *path, mega_st_file **f);
#endif
