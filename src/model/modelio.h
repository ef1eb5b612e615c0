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

/* write params with __metadata__ {config, format, kv...} atomically */
mega_status mega__model_save(const mega_params *P, const char *path, const char *config_json, const char *const *kv);
/* open and return the config JSON string stored in __metadata__["config"] (owned by f) */
mega_status mega__model_open(const char *path, mega_st_file **f, const char **config_json);
#endif
