/* The model kinds (MEGA_MODEL_LIST): what the generic model API (kinds.c) and the shared file
 * code (modelio.c) need of each kind. Each kind defines its table, mega__kind_<id>, in its own
 * file (lm_io.c, cls.c, s2s_io.c). */
#ifndef MEGA_KINDS_H
#define MEGA_KINDS_H
#include "core/params.h"
#include "layers/adaptive.h"

/* The first member of every typed model (struct mega_lm, mega_cls, mega_s2s): a pointer to the
 * typed model is a pointer to this header, so the generic handle is the typed one. */
struct mega_model {
    mega_model_kind kind;
};

/* Tensors an official state dict holds besides the declared ones (buffers, second names of tied
 * matrices): full names or suffixes for mega_params_check's `ignore`. */
#define MEGA_IGNORE_MAX (4 + 2 * MEGA_BANDS_MAX)
typedef struct {
    char name[MEGA_IGNORE_MAX][64];
    const char *list[MEGA_IGNORE_MAX + 1];
} mega_ignore_list;

typedef struct {
    const char *what;                   /* in messages: "language model" */
    size_t config_size;                 /* sizeof the kind's config struct */
    /* keys that, all present, mark a config with the official fairseq argument names */
    const char *official_keys[3];
    /* the official names of the model-level fields (mega_official_name, ended by a NULL field),
     * the side that stands for %s in the block's, and whether the reader takes the block's
     * training settings (MEGA_OFFICIAL_TRAINING) */
    const mega_official_name *official;
    const char *official_side;
    int official_training;
    const mega_field *(*config_fields)(int *count);
    void (*config_default)(void *c);
    mega_status (*config_check)(const void *c);
    char *(*config_to_json)(const void *c);
    mega_status (*config_from_json)(const char *json, void *c);
    /* the model with its parameter table declared, nothing large allocated (docs/library.md) */
    mega_status (*declare)(const void *c, mega_model **out);
    void (*init_params)(mega_model *m, uint64_t seed);
    void (*free)(mega_model *m);
    const void *(*config)(const mega_model *m);
    mega_params *(*params)(mega_model *m);
    /* what a file of this model may hold besides the declared tensors (the list in g or static) */
    const char *const *(*ignore)(const mega_model *m, mega_ignore_list *g);
    /* further checks of the file against the config before anything is allocated (NULL: none) */
    mega_status (*check_file)(const mega_st_file *f, const void *c);
    mega_status (*memory)(const void *c, int training, int B, int T, mega_memory *out);
} mega_model_ops;

/* The adapters from a kind's typed API to its table, the same for every kind (its
 * mega_<id>_config_* functions, mega__<id>_declare, mega_<id>_init_params / _free and the typed
 * model's cfg and P members): defined once in the kind's file by MEGA__KIND_ADAPTERS(id) and named
 * in its table by MEGA__KIND_ADAPTED(id). What differs between kinds (names, official keys, the
 * ignore list, the file check, the memory estimate) is written in the table itself. */
#define MEGA__KIND_ADAPTERS(id)                                                                                   \
    static void id##_cfg_default(void *c) { mega_##id##_config_default(c); }                                    \
    static mega_status id##_cfg_check(const void *c) { return mega_##id##_config_check(c); }                    \
    static char *id##_cfg_to_json(const void *c) { return mega_##id##_config_to_json(c); }                      \
    static mega_status id##_cfg_from_json(const char *json, void *c) { return mega_##id##_config_from_json(json, c); } \
    static mega_status id##_declare(const void *c, mega_model **out) {                                          \
        mega_##id *m;                                                                                           \
        MEGA_TRY(mega__##id##_declare(c, &m));                                                                  \
        *out = &m->hdr;                                                                                         \
        return MEGA_OK;                                                                                         \
    }                                                                                                           \
    static void id##_init_params(mega_model *m, uint64_t seed) { mega_##id##_init_params((mega_##id *)m, seed); } \
    static void id##_free(mega_model *m) { mega_##id##_free((mega_##id *)m); }                                  \
    static const void *id##_config(const mega_model *m) { return &((const mega_##id *)m)->cfg; }                \
    static mega_params *id##_params(mega_model *m) { return &((mega_##id *)m)->P; }
#define MEGA__KIND_ADAPTED(id)                                                                                    \
    .config_size = sizeof(mega_##id##_config), .config_fields = mega_##id##_config_fields,                      \
    .config_default = id##_cfg_default, .config_check = id##_cfg_check, .config_to_json = id##_cfg_to_json,    \
    .config_from_json = id##_cfg_from_json, .declare = id##_declare, .init_params = id##_init_params,          \
    .free = id##_free, .config = id##_config, .params = id##_params

#define MEGA_KIND_OPS_(ID, id, name, help) extern const mega_model_ops mega__kind_##id;
MEGA_MODEL_LIST(MEGA_KIND_OPS_)
#undef MEGA_KIND_OPS_

/* the official names of the block fields (ended by a NULL field; modelio.c) */
extern const mega_official_name mega__block_official[];

/* the kind's table (NULL out of range) */
const mega_model_ops *mega__kind(mega_model_kind k);

/* create (declare, allocate, initialise unless o->no_init), load (k NULL: the kind the file's
 * config names) and save a model through its kind's table */
mega_status mega__model_create(mega_model_kind k, const void *cfg, const mega_load_opts *o, mega_model **out);
mega_status mega__model_load(const char *path, const mega_model_kind *k, const mega_load_opts *o, mega_model **out);
mega_status mega__model_save_kind(const mega_model *m, const char *path, const char *const *kv);
#endif
