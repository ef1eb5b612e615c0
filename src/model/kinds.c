/* The model kinds of MEGA_MODEL_LIST and the generic model API over their tables: the one place
 * that lists the kinds (each kind's table is in its own file). */
#include "model/modelio.h"

#define KIND_OPS_(ID, id, name, help) &mega__kind_##id,
#define KIND_NAME_(ID, id, name, help) name,
#define KIND_HELP_(ID, id, name, help) help,
static const mega_model_ops *const KINDS[] = {MEGA_MODEL_LIST(KIND_OPS_)};
static const char *const NAMES[] = {MEGA_MODEL_LIST(KIND_NAME_)};
static const char *const SUMMARIES[] = {MEGA_MODEL_LIST(KIND_HELP_)};

static int kind_ok(mega_model_kind k) { return (int)k >= 0 && (int)k < MEGA_MODEL_COUNT; }

const mega_model_ops *mega__kind(mega_model_kind k) { return kind_ok(k) ? KINDS[k] : NULL; }
const char *mega_model_kind_name(mega_model_kind k) { return kind_ok(k) ? NAMES[k] : "?"; }
const char *mega_model_kind_summary(mega_model_kind k) { return kind_ok(k) ? SUMMARIES[k] : "?"; }

int mega_model_kind_from_name(const char *s, mega_model_kind *k) {
    for (int i = 0; s && i < MEGA_MODEL_COUNT; i++)
        if (!strcmp(s, NAMES[i])) return *k = (mega_model_kind)i, 0;
    return -1;
}

/* the kind whose official keys are all in o, the one with the most keys when several match
 * (an encoder-decoder has both encoder_layers and decoder_layers); -1 for none */
static int official_kind(const cJSON *o) {
    int best = -1, best_n = 0;
    for (int i = 0; i < MEGA_MODEL_COUNT; i++) {
        int n = 0;
        const char *const *key = KINDS[i]->official_keys;
        for (; n < 3 && key[n]; n++)
            if (!cJSON_GetObjectItemCaseSensitive(o, key[n])) break;
        if (n > best_n && (n == 3 || !key[n])) best = i, best_n = n;
    }
    return best;
}

mega_status mega_model_kind_of_json(const char *json, mega_model_kind *k) {
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "model config is not a JSON object");
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    mega_status st = MEGA_OK;
    if (m) {
        if (mega_model_kind_from_name(cJSON_IsString(m) ? m->valuestring : NULL, k)) {
            char known[256] = "";
            for (int i = 0; i < MEGA_MODEL_COUNT; i++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", NAMES[i]);
            st = mega__error(MEGA_ERR_FORMAT, "unknown model kind '%s' in the config (this library reads %s)",
                             cJSON_IsString(m) ? m->valuestring : "(not a string)", known);
        }
    } else {
        const int off = official_kind(o);
        *k = off >= 0 ? (mega_model_kind)off : MEGA_MODEL_LM;
    }
    cJSON_Delete(o);
    return st;
}

/* ---- configs ---------------------------------------------------------------------------------- */

size_t mega_model_config_size(mega_model_kind k) { return kind_ok(k) ? KINDS[k]->config_size : 0; }

void mega_model_config_default(mega_model_kind k, void *cfg) {
    if (kind_ok(k)) KINDS[k]->config_default(cfg);
}

mega_status mega_model_config_check(mega_model_kind k, const void *cfg) {
    if (!kind_ok(k)) MEGA_FAIL(MEGA_ERR_INVALID, "model kind %d is not one of the %d kinds", (int)k, MEGA_MODEL_COUNT);
    return KINDS[k]->config_check(cfg);
}

char *mega_model_config_to_json(mega_model_kind k, const void *cfg) {
    return kind_ok(k) ? KINDS[k]->config_to_json(cfg) : NULL;
}

mega_status mega_model_config_from_json(mega_model_kind k, const char *json, void *cfg) {
    if (!kind_ok(k)) MEGA_FAIL(MEGA_ERR_INVALID, "model kind %d is not one of the %d kinds", (int)k, MEGA_MODEL_COUNT);
    return KINDS[k]->config_from_json(json, cfg);
}

const mega_field *mega_model_config_fields(mega_model_kind k, int *count) {
    if (!kind_ok(k)) return *count = 0, NULL;
    return KINDS[k]->config_fields(count);
}

/* ---- models ----------------------------------------------------------------------------------- */

mega_status mega_model_create(mega_model_kind k, const void *cfg, mega_model **out) {
    return mega__model_create(k, cfg, NULL, out);
}

mega_status mega_model_create_ex(mega_model_kind k, const void *cfg, const mega_load_opts *o, mega_model **out) {
    return mega__model_create(k, cfg, o, out);
}

mega_status mega_model_load(const char *path, mega_model **out) { return mega__model_load(path, NULL, NULL, out); }

mega_status mega_model_load_ex(const char *path, const mega_load_opts *o, mega_model **out) {
    return mega__model_load(path, NULL, o, out);
}

mega_status mega_model_save(const mega_model *m, const char *path) { return mega__model_save_kind(m, path, NULL); }

mega_status mega_model_save_ex(const mega_model *m, const char *path, const char *const *kv) {
    return mega__model_save_kind(m, path, kv);
}

void mega_model_free(mega_model *m) {
    if (m) KINDS[m->kind]->free(m);
}

mega_model_kind mega_model_kind_of(const mega_model *m) { return m->kind; }
const void *mega_model_config(const mega_model *m) { return KINDS[m->kind]->config(m); }
char *mega_model_config_json(const mega_model *m) { return KINDS[m->kind]->config_to_json(mega_model_config(m)); }
mega_paramset *mega_model_paramset(mega_model *m) { return (mega_paramset *)KINDS[m->kind]->params(m); }
void mega_model_init_params(mega_model *m, uint64_t seed) { KINDS[m->kind]->init_params(m, seed); }

mega_status mega_model_memory(mega_model_kind k, const void *cfg, int training, int B, int T, mega_memory *out) {
    if (!kind_ok(k)) MEGA_FAIL(MEGA_ERR_INVALID, "model kind %d is not one of the %d kinds", (int)k, MEGA_MODEL_COUNT);
    return KINDS[k]->memory(cfg, training, B, T, out);
}

/* typed <-> generic: the typed struct starts with its mega_model header */
#define KIND_TYPED_(ID, id, name, help)                                                            \
    mega_##id *mega_model_##id(mega_model *m) { return m && m->kind == MEGA_MODEL_##ID ? (mega_##id *)m : NULL; } \
    mega_model *mega_##id##_model(mega_##id *m) { return (mega_model *)m; }
MEGA_MODEL_LIST(KIND_TYPED_)
