/* Language-model config JSON and model.safetensors save/load. */
#include "model/lm.h"

#include <cjson/cJSON.h>

char *mega_lm_config_to_json(const mega_lm_config *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "model", "mega_lm");
    cJSON_AddNumberToObject(o, "vocab-size", c->vocab_size);
    cJSON_AddNumberToObject(o, "padding-idx", c->padding_idx);
    cJSON_AddNumberToObject(o, "layers", c->layers);
    cJSON_AddNumberToObject(o, "embed-dim", c->embed_dim);
    cJSON_AddNumberToObject(o, "z-dim", c->z_dim);
    cJSON_AddNumberToObject(o, "hidden-dim", c->hidden_dim);
    cJSON_AddNumberToObject(o, "n-dim", c->n_dim);
    cJSON_AddNumberToObject(o, "ffn-dim", c->ffn_dim);
    cJSON_AddNumberToObject(o, "chunk-size", c->chunk_size);
    cJSON_AddNumberToObject(o, "truncation", c->truncation);
    cJSON_AddNumberToObject(o, "max-positions", c->max_positions);
    cJSON_AddStringToObject(o, "attention-activation", mega_attn_fn_name(c->attention_activation));
    cJSON_AddStringToObject(o, "rel-pos-bias", c->rotary ? "rotary" : "simple");
    cJSON_AddStringToObject(o, "norm-type", mega_norm_name(c->norm_type));
    cJSON_AddBoolToObject(o, "prenorm", c->prenorm);
    cJSON_AddBoolToObject(o, "norm-affine", c->norm_affine);
    cJSON_AddBoolToObject(o, "final-norm-affine", c->final_norm_affine);
    cJSON_AddStringToObject(o, "activation", mega_act_name(c->activation));
    cJSON_AddBoolToObject(o, "scale-embedding", c->scale_embedding);
    cJSON_AddBoolToObject(o, "tie-embeddings", c->tie_embeddings);
    cJSON_AddNumberToObject(o, "dropout", c->dropout);
    cJSON_AddNumberToObject(o, "attention-dropout", c->attention_dropout);
    cJSON_AddNumberToObject(o, "hidden-dropout", c->hidden_dropout);
    cJSON_AddNumberToObject(o, "activation-dropout", c->activation_dropout);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

typedef struct {
    const cJSON *o;
    mega_status st;
} jr;

static const cJSON *jget(jr *r, const char *k) { return cJSON_GetObjectItemCaseSensitive(r->o, k); }

static void jint(jr *r, const char *k, int *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' must be an integer", k);
        return;
    }
    *dst = (int)v->valuedouble;
}
static void jflt(jr *r, const char *k, float *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsNumber(v)) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' must be a number", k);
        return;
    }
    *dst = (float)v->valuedouble;
}
static void jbool(jr *r, const char *k, int *dst, int invert) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsBool(v)) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' must be true or false", k);
        return;
    }
    *dst = cJSON_IsTrue(v) ? !invert : invert;
}
static void jenum(jr *r, const char *k, int (*parse)(const char *, void *), void *dst) {
    const cJSON *v = jget(r, k);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsString(v) || parse(v->valuestring, dst)) {
        if (!r->st) r->st = mega__error(MEGA_ERR_FORMAT, "config key '%s' has an unknown value", k);
    }
}
static int p_attn(const char *s, void *d) { return mega_attn_fn_parse(s, (mega_attn_fn *)d); }
static int p_norm(const char *s, void *d) { return mega_norm_parse(s, (mega_norm_type *)d); }
static int p_act(const char *s, void *d) { return mega_act_parse(s, (mega_act *)d); }
static int p_rel(const char *s, void *d) {
    if (!strcmp(s, "simple")) *(int *)d = 0;
    else if (!strcmp(s, "rotary")) *(int *)d = 1;
    else return -1;
    return 0;
}

mega_status mega_lm_config_from_json(const char *json, mega_lm_config *c) {
    mega_lm_config_default(c);
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "model config is not a JSON object");
    }
    jr r = {o, MEGA_OK};
    if (jget(&r, "decoder_layers")) {
        /* official fairseq argument names (as in the reference fixtures) */
        jint(&r, "vocab_size", &c->vocab_size);
        c->padding_idx = -1;
        jint(&r, "padding_idx", &c->padding_idx);
        jint(&r, "decoder_layers", &c->layers);
        jint(&r, "decoder_embed_dim", &c->embed_dim);
        jint(&r, "decoder_z_dim", &c->z_dim);
        jint(&r, "decoder_hidden_dim", &c->hidden_dim);
        jint(&r, "decoder_n_dim", &c->n_dim);
        jint(&r, "decoder_ffn_embed_dim", &c->ffn_dim);
        jint(&r, "decoder_chunk_size", &c->chunk_size);
        c->truncation = 0;
        jint(&r, "truncation_length", &c->truncation);
        jint(&r, "max_target_positions", &c->max_positions);
        jenum(&r, "attention_activation_fn", p_attn, &c->attention_activation);
        jenum(&r, "rel_pos_bias", p_rel, &c->rotary);
        jenum(&r, "normalization_type", p_norm, &c->norm_type);
        c->prenorm = 0;
        jbool(&r, "normalize_before", &c->prenorm, 0);
        jbool(&r, "no_affine_final_norm", &c->final_norm_affine, 1);
        jenum(&r, "activation_fn", p_act, &c->activation);
        jbool(&r, "no_scale_embedding", &c->scale_embedding, 1);
        c->tie_embeddings = 0;
        jbool(&r, "share_decoder_input_output_embed", &c->tie_embeddings, 0);
    } else {
        const cJSON *mdl = jget(&r, "model");
        if (mdl && (!cJSON_IsString(mdl) || strcmp(mdl->valuestring, "mega_lm"))) {
            cJSON_Delete(o);
            MEGA_FAIL(MEGA_ERR_FORMAT, "config describes a '%s' model, not a language model (mega_lm)",
                      cJSON_IsString(mdl) ? mdl->valuestring : "?");
        }
        jint(&r, "vocab-size", &c->vocab_size);
        jint(&r, "padding-idx", &c->padding_idx);
        jint(&r, "layers", &c->layers);
        jint(&r, "embed-dim", &c->embed_dim);
        jint(&r, "z-dim", &c->z_dim);
        jint(&r, "hidden-dim", &c->hidden_dim);
        jint(&r, "n-dim", &c->n_dim);
        jint(&r, "ffn-dim", &c->ffn_dim);
        jint(&r, "chunk-size", &c->chunk_size);
        jint(&r, "truncation", &c->truncation);
        jint(&r, "max-positions", &c->max_positions);
        jenum(&r, "attention-activation", p_attn, &c->attention_activation);
        jenum(&r, "rel-pos-bias", p_rel, &c->rotary);
        jenum(&r, "norm-type", p_norm, &c->norm_type);
        jbool(&r, "prenorm", &c->prenorm, 0);
        jbool(&r, "norm-affine", &c->norm_affine, 0);
        jbool(&r, "final-norm-affine", &c->final_norm_affine, 0);
        jenum(&r, "activation", p_act, &c->activation);
        jbool(&r, "scale-embedding", &c->scale_embedding, 0);
        jbool(&r, "tie-embeddings", &c->tie_embeddings, 0);
        jflt(&r, "dropout", &c->dropout);
        jflt(&r, "attention-dropout", &c->attention_dropout);
        jflt(&r, "hidden-dropout", &c->hidden_dropout);
        jflt(&r, "activation-dropout", &c->activation_dropout);
    }
    cJSON_Delete(o);
    if (r.st) return r.st;
    return mega_lm_config_check(c);
}

mega_status mega_lm_save(const mega_lm *m, const char *path) { return mega_lm_save_ex(m, path, NULL); }

mega_status mega_lm_save_ex(const mega_lm *m, const char *path, const char *const *kv) {
    mega_st_writer *w = mega_st_writer_new();
    if (!w) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    char *cfg = mega_lm_config_to_json(&m->cfg);
    mega_status st = cfg ? MEGA_OK : mega__error(MEGA_ERR_OOM, "out of memory");
    if (!st) st = mega_st_writer_meta(w, "config", cfg);
    if (!st) st = mega_st_writer_meta(w, "format", "mega " MEGA_VERSION);
    for (const char *const *p = kv; p && p[0] && p[1] && !st; p += 2) st = mega_st_writer_meta(w, p[0], p[1]);
    if (!st) st = mega_params_save(&m->P, m->P.data, w, "");
    if (!st) st = mega_st_writer_write(w, path);
    free(cfg);
    mega_st_writer_free(w);
    return st;
}

static const char *const LM_IGNORE[] = {"_float_tensor", "decoder.version", NULL};

static mega_status load_into(mega_lm *m, const mega_st_file *f) {
    /* official state dicts of tied models also list output_projection.weight (same tensor) */
    static const char *const tied_ignore[] = {"_float_tensor", "decoder.version", "decoder.output_projection.weight", NULL};
    return mega_params_load(&m->P, m->P.data, f, "", m->cfg.tie_embeddings ? tied_ignore : LM_IGNORE, 0);
}

mega_status mega_lm_load_weights(mega_lm *m, const char *path) {
    mega_st_file *f;
    MEGA_TRY(mega_st_open(path, &f));
    mega_status st = load_into(m, f);
    mega_st_close(f);
    if (st) return mega__error_prefix(st, path);
    return MEGA_OK;
}

mega_status mega_lm_load(const char *path, mega_lm **out) {
    *out = NULL;
    mega_st_file *f;
    MEGA_TRY(mega_st_open(path, &f));
    const char *cfgs = mega_st_meta(f, "config");
    mega_lm_config c;
    mega_status st;
    if (!cfgs) {
        st = mega__error(MEGA_ERR_FORMAT, "%s: no model config in the file's __metadata__ (key 'config')", path);
    } else if ((st = mega_lm_config_from_json(cfgs, &c))) {
        st = mega__error_prefix(st, path);
    } else if (!(st = mega_lm_create(&c, out))) {
        st = load_into(*out, f);
        if (st) {
            st = mega__error_prefix(st, path);
            mega_lm_free(*out);
            *out = NULL;
        }
    }
    mega_st_close(f);
    return st;
}
