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
    MEGA_TRY(mega__model_st_open(path, f));
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

void mega_common_to_json(cJSON *o, const mega_common_fields *f) {
    cJSON_AddNumberToObject(o, "layers", *f->layers);
    cJSON_AddNumberToObject(o, "embed-dim", *f->D);
    cJSON_AddNumberToObject(o, "z-dim", *f->Z);
    cJSON_AddNumberToObject(o, "hidden-dim", *f->E);
    cJSON_AddNumberToObject(o, "n-dim", *f->N);
    cJSON_AddNumberToObject(o, "ffn-dim", *f->F);
    cJSON_AddNumberToObject(o, "chunk-size", *f->chunk);
    cJSON_AddNumberToObject(o, "truncation", *f->trunc);
    cJSON_AddNumberToObject(o, "max-positions", *f->maxpos);
    cJSON_AddStringToObject(o, "attention-activation", mega_attn_fn_name(*f->attn));
    cJSON_AddStringToObject(o, "rel-pos-bias", *f->rotary ? "rotary" : "simple");
    cJSON_AddStringToObject(o, "norm-type", mega_norm_name(*f->norm));
    cJSON_AddBoolToObject(o, "prenorm", *f->prenorm);
    cJSON_AddBoolToObject(o, "norm-affine", *f->norm_affine);
    cJSON_AddBoolToObject(o, "final-norm-affine", *f->final_affine);
    cJSON_AddStringToObject(o, "activation", mega_act_name(*f->act));
    cJSON_AddNumberToObject(o, "dropout", *f->dropout);
    cJSON_AddNumberToObject(o, "attention-dropout", *f->adrop);
    cJSON_AddNumberToObject(o, "hidden-dropout", *f->hdrop);
    cJSON_AddNumberToObject(o, "activation-dropout", *f->actdrop);
    mega_mixer_config_to_json(o, f->mix);
}

void mega_common_from_json(mega_json_reader *r, const mega_common_fields *f) {
    mega_json_int(r, "layers", f->layers);
    mega_json_int(r, "embed-dim", f->D);
    mega_json_int(r, "z-dim", f->Z);
    mega_json_int(r, "hidden-dim", f->E);
    mega_json_int(r, "n-dim", f->N);
    mega_json_int(r, "ffn-dim", f->F);
    mega_json_int(r, "chunk-size", f->chunk);
    mega_json_int(r, "truncation", f->trunc);
    mega_json_int(r, "max-positions", f->maxpos);
    mega_json_enum(r, "attention-activation", mega_json_parse_attn, f->attn);
    mega_json_enum(r, "rel-pos-bias", mega_json_parse_relpos, f->rotary);
    mega_json_enum(r, "norm-type", mega_json_parse_norm, f->norm);
    mega_json_bool(r, "prenorm", f->prenorm, 0);
    mega_json_bool(r, "norm-affine", f->norm_affine, 0);
    mega_json_bool(r, "final-norm-affine", f->final_affine, 0);
    mega_json_enum(r, "activation", mega_json_parse_act, f->act);
    mega_json_flt(r, "dropout", f->dropout);
    mega_json_flt(r, "attention-dropout", f->adrop);
    mega_json_flt(r, "hidden-dropout", f->hdrop);
    mega_json_flt(r, "activation-dropout", f->actdrop);
    mega_mixer_config_from_json(r, f->mix);
}

void mega_common_block_cfg(const mega_common_fields *f, mega_block_cfg *b, int bidir) {
    memset(b, 0, sizeof *b);
    b->D = *f->D, b->Z = *f->Z, b->E = *f->E, b->N = *f->N, b->F = *f->F;
    b->chunk = *f->chunk, b->trunc = *f->trunc, b->max_positions = *f->maxpos;
    b->attn_fn = *f->attn, b->rotary = *f->rotary, b->bidir = bidir;
    b->prenorm = *f->prenorm, b->norm_affine = *f->norm_affine, b->norm = *f->norm, b->act = *f->act;
    b->dropout = *f->dropout, b->attn_dropout = *f->adrop, b->hidden_dropout = *f->hdrop, b->act_dropout = *f->actdrop;
    mega_mixer_config_apply(f->mix, b);
}
