/* Language-model config JSON and model.safetensors save/load. */
#include "model/lm.h"
#include "model/modelio.h"

#include <cjson/cJSON.h>

char *mega_lm_config_to_json(const mega_lm_config *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "model", "mega_lm");
    cJSON_AddNumberToObject(o, "vocab-size", c->vocab_size);
    cJSON_AddNumberToObject(o, "padding-idx", c->padding_idx);
    mega_lm_config *cc = (mega_lm_config *)c;
    const mega_common_fields f = MEGA_COMMON_FIELDS(cc);
    mega_common_to_json(o, &f);
    cJSON_AddBoolToObject(o, "scale-embedding", c->scale_embedding);
    cJSON_AddBoolToObject(o, "tie-embeddings", c->tie_embeddings);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

mega_status mega_lm_config_from_json(const char *json, mega_lm_config *c) {
    mega_lm_config_default(c);
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "model config is not a JSON object");
    }
    mega_json_reader r = {o, MEGA_OK};
    if (cJSON_GetObjectItemCaseSensitive(o, "decoder_layers")) {
        /* official fairseq argument names (as in the reference fixtures) */
        mega_json_int(&r, "vocab_size", &c->vocab_size);
        c->padding_idx = -1;
        mega_json_int(&r, "padding_idx", &c->padding_idx);
        mega_json_int(&r, "decoder_layers", &c->layers);
        mega_json_int(&r, "decoder_embed_dim", &c->embed_dim);
        mega_json_int(&r, "decoder_z_dim", &c->z_dim);
        mega_json_int(&r, "decoder_hidden_dim", &c->hidden_dim);
        mega_json_int(&r, "decoder_n_dim", &c->n_dim);
        mega_json_int(&r, "decoder_ffn_embed_dim", &c->ffn_dim);
        mega_json_int(&r, "decoder_chunk_size", &c->chunk_size);
        c->truncation = 0;
        mega_json_int(&r, "truncation_length", &c->truncation);
        mega_json_int(&r, "max_target_positions", &c->max_positions);
        mega_json_enum(&r, "attention_activation_fn", mega_json_parse_attn, &c->attention_activation);
        mega_json_enum(&r, "rel_pos_bias", mega_json_parse_relpos, &c->rotary);
        mega_json_enum(&r, "normalization_type", mega_json_parse_norm, &c->norm_type);
        c->prenorm = 0;
        mega_json_bool(&r, "normalize_before", &c->prenorm, 0);
        mega_json_bool(&r, "no_affine_final_norm", &c->final_norm_affine, 1);
        mega_json_enum(&r, "activation_fn", mega_json_parse_act, &c->activation);
        mega_json_bool(&r, "no_scale_embedding", &c->scale_embedding, 1);
        c->tie_embeddings = 0;
        mega_json_bool(&r, "share_decoder_input_output_embed", &c->tie_embeddings, 0);
    } else {
        const cJSON *mdl = cJSON_GetObjectItemCaseSensitive(o, "model");
        if (mdl && (!cJSON_IsString(mdl) || strcmp(mdl->valuestring, "mega_lm"))) {
            /* the message reads mdl, which cJSON_Delete(o) frees: format it first */
            mega_status st = mega__error(MEGA_ERR_FORMAT, "config describes a '%s' model, not a language model (mega_lm)",
                                         cJSON_IsString(mdl) ? mdl->valuestring : "?");
            cJSON_Delete(o);
            return st;
        }
        mega_json_int(&r, "vocab-size", &c->vocab_size);
        mega_json_int(&r, "padding-idx", &c->padding_idx);
        const mega_common_fields f = MEGA_COMMON_FIELDS(c);
        mega_common_from_json(&r, &f);
        mega_json_bool(&r, "scale-embedding", &c->scale_embedding, 0);
        mega_json_bool(&r, "tie-embeddings", &c->tie_embeddings, 0);
    }
    cJSON_Delete(o);
    if (r.st) return r.st;
    return mega_lm_config_check(c);
}

mega_status mega_lm_save(const mega_lm *m, const char *path) { return mega_lm_save_ex(m, path, NULL); }

mega_status mega_lm_save_ex(const mega_lm *m, const char *path, const char *const *kv) {
    char *cfg = mega_lm_config_to_json(&m->cfg);
    if (!cfg) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    mega_status st = mega__model_save(&m->P, path, cfg, kv);
    free(cfg);
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
    MEGA_TRY(mega__model_st_open(path, &f));
    mega_status st = load_into(m, f);
    mega_st_close(f);
    if (st) return mega__error_prefix(st, path);
    return MEGA_OK;
}

mega_status mega_lm_load(const char *path, mega_lm **out) {
    *out = NULL;
    mega_st_file *f;
    const char *cfgs;
    MEGA_TRY(mega__model_open(path, &f, &cfgs));
    mega_lm_config c;
    mega_status st = mega_lm_config_from_json(cfgs, &c);
    if (st) st = mega__error_prefix(st, path);
    else if (!(st = mega_lm_create(&c, out))) {
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
