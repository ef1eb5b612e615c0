/* Config JSON readers and model file save/open shared by the model kinds. */
#include "model/modelio.h"


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
