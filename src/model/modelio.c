/* Config JSON readers and model file save/open shared by the model kinds. */
#include "model/modelio.h"
#include "layers/block.h"


static const cJSON *jget(mega_json_reader *r, const char *k) { return cJSON_GetObjectItemCaseSensitive(r->o, k); }

void mega_json_int(mega_json_reader *r, const char *k, int *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2147483647.0) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' must be an integer", k);
        return;
    }
    *dst = (int)v->valuedouble;
}
void mega_json_flt(mega_json_reader *r, const char *k, float *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsNumber(v)) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' must be a number", k);
        return;
    }
    *dst = (float)v->valuedouble;
}
void mega_json_bool(mega_json_reader *r, const char *k, int *dst, int invert) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsBool(v)) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' must be true or false", k);
        return;
    }
    *dst = cJSON_IsTrue(v) ? !invert : invert;
}
void mega_json_enum(mega_json_reader *r, const char *k, int (*parse)(const char *, void *), void *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsString(v) || parse(v->valuestring, dst)) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' has an unknown value", k);
    }
}
int mega_json_parse_attn(const char *s, void *d) { return mega_attn_fn_parse(s, (mega_attn_fn *)d); }
int mega_json_parse_norm(const char *s, void *d) { return mega_norm_parse(s, (mega_norm_type *)d); }
int mega_json_parse_act(const char *s, void *d) { return mega_act_parse(s, (mega_act *)d); }
int mega_json_parse_relpos(const char *s, void *d) {
    if (!strcmp(s, "simple")) *(int *)d = 0;
    else if (!strcmp(s, "rotary")) *(int *)d = 1;
    else return -1;
    return 0;
}


mega_status mega__model_save(const mega_params *P, const char *path, const char *config_json, const char *const *kv) {
    mega_st_writer *w = mega_st_writer_new();
    if (!w) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    mega_status st = mega_st_writer_meta(w, "config", config_json);
    if (!st) st = mega_st_writer_meta(w, "format", "mega " MEGA_VERSION);
    for (const char *const *p = kv; p && p[0] && p[1] && !st; p += 2) st = mega_st_writer_meta(w, p[0], p[1]);
    if (!st) st = mega_params_save(P, P->data, w, "");
    if (!st) st = mega_st_writer_write(w, path);
    mega_st_writer_free(w);
    return st;
}

mega_status mega__model_open(const char *path, mega_st_file **f, const char **config_json) {
    MEGA_TRY(mega_st_open(path, f));
    *config_json = mega_st_meta(*f, "config");
    if (!*config_json) {
        mega_st_close(*f);
        *f = NULL;
        MEGA_FAIL(MEGA_ERR_FORMAT, "%s: no model config in the file's __metadata__ (key 'config')", path);
    }
    return MEGA_OK;
}

static int p_mixer(const char *s, void *d) { return mega_mixer_parse(s, (mega_mixer_kind *)d); }
static int p_pos(const char *s, void *d) { return mega_pos_parse(s, (mega_pos_kind *)d); }

void mega_mixer_config_default(mega_mixer_config *m) {
    memset(m, 0, sizeof *m);
    m->mixer = MEGA_MIXER_MEGA;
    m->heads = 8;
    m->max_len = 1024;
    m->pos = MEGA_POS_NONE;
}

void mega_mixer_config_to_json(cJSON *o, const mega_mixer_config *m) {
    cJSON_AddStringToObject(o, "mixer", mega_mixer_name(m->mixer));
    cJSON_AddNumberToObject(o, "heads", m->heads);
    cJSON_AddNumberToObject(o, "window", m->window);
    cJSON_AddNumberToObject(o, "memory-size", m->memory);
    cJSON_AddNumberToObject(o, "max-len", m->max_len);
    cJSON_AddStringToObject(o, "pos", mega_pos_name(m->pos));
    cJSON_AddNumberToObject(o, "attn-window", m->attn_window);
    cJSON_AddBoolToObject(o, "log-n-scaling", m->log_n);
    cJSON_AddNumberToObject(o, "train-len", m->train_len);
}

void mega_mixer_config_from_json(mega_json_reader *r, mega_mixer_config *m) {
    mega_json_enum(r, "mixer", p_mixer, &m->mixer);
    mega_json_int(r, "heads", &m->heads);
    mega_json_int(r, "window", &m->window);
    mega_json_int(r, "memory-size", &m->memory);
    mega_json_int(r, "max-len", &m->max_len);
    mega_json_enum(r, "pos", p_pos, &m->pos);
    mega_json_int(r, "attn-window", &m->attn_window);
    mega_json_bool(r, "log-n-scaling", &m->log_n, 0);
    mega_json_int(r, "train-len", &m->train_len);
}

void mega_mixer_config_apply(const mega_mixer_config *m, mega_block_cfg *b) {
    b->mixer = m->mixer, b->heads = m->heads, b->window = m->window, b->memory = m->memory;
    b->max_len = m->max_len, b->pos = m->pos, b->attn_window = m->attn_window, b->log_n = m->log_n;
    b->train_len = m->train_len;
}
