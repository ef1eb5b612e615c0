/* Encoder–decoder config JSON (ours and the official MegaModel arguments) and model file I/O. */
#include "model/modelio.h"
#include "model/s2s.h"

#include <stddef.h>

char *mega_s2s_config_to_json(const mega_s2s_config *c) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject(), *d = cJSON_CreateObject();
    if (!o || !e || !d) {
        cJSON_Delete(o), cJSON_Delete(e), cJSON_Delete(d);
        return NULL;
    }
    int n, nb;
    const mega_field *f = mega_s2s_config_fields(&n), *bf = mega_block_config_fields(&nb);
    cJSON_AddStringToObject(o, "model", mega_model_kind_name(MEGA_MODEL_S2S));
    mega__fields_to_json(o, f, n, c);
    mega__fields_to_json(e, bf, nb, &c->encoder);
    mega__fields_to_json(d, bf, nb, &c->decoder);
    cJSON_AddItemToObject(o, "encoder", e);
    cJSON_AddItemToObject(o, "decoder", d);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* the official names of the encoder-decoder's fields (fairseq mega translation arguments, as in
 * the reference fixtures); the block's, per side, are in modelio.c */
static const mega_official_name OFFICIAL[] = {
    {"encoder-layers", "encoder_layers", NULL, 0},
    {"decoder-layers", "decoder_layers", NULL, 0},
    {"normalize-embedding", "normalize_embedding", NULL, 0},
    {"scale-embedding", "no_scale_embedding", NULL, MEGA_OFFICIAL_INVERT},
    {"tie-embeddings", "share_decoder_input_output_embed", NULL, 0},
    {"share-all-embeddings", "share_all_embeddings", NULL, 0},
    {"src-vocab-size", "src_vocab_size", NULL, 0},
    {"tgt-vocab-size", "tgt_vocab_size", NULL, 0},
    {"padding-idx", "padding_idx", NULL, 0},
    {"eos-idx", "eos_idx", NULL, 0},
    {NULL, NULL, NULL, 0},
};

/* the official arguments of one side (prefix "encoder_" or "decoder_") and the shared ones, and
 * the side's max_*_positions */
static void official_side(mega_json_reader *r, const char *side, const char *maxpos, mega_block_config *b) {
    cJSON *t = mega__official_translate(r->o, NULL, side, 1, 1);
    if (!t) {
        if (!r->st) r->st = mega__error(MEGA_ERR_OOM, "out of memory");
        return;
    }
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    mega_json_reader rs = {t, MEGA_OK};
    mega__fields_from_json(&rs, bf, nb, b);
    cJSON_Delete(t);
    if (!r->st) r->st = rs.st;
    mega_json_int(r, maxpos, &b->max_positions);
}

static mega_status from_official(const cJSON *o, mega_s2s_config *c) {
    mega_json_reader r = {o, MEGA_OK};
    /* the official defaults (base_architecture) where they differ from ours */
    c->encoder.prenorm = c->decoder.prenorm = 0;
    c->encoder.truncation = c->decoder.truncation = 1024;
    c->encoder.max_positions = c->decoder.max_positions = 1024;
    c->encoder.chunk_size = -1;
    c->tie_embeddings = 0, c->share_all_embeddings = 0;
    c->padding_idx = 1, c->eos_idx = 2; /* fairseq dictionary: <s> <pad> </s> <unk> */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "truncation_length");
    if (t && cJSON_IsNull(t)) c->encoder.truncation = c->decoder.truncation = 0; /* null = none */
    cJSON *m = mega__official_translate(o, OFFICIAL, NULL, 0, 0);
    if (!m) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    int n;
    const mega_field *f = mega_s2s_config_fields(&n);
    mega_json_reader rm = {m, MEGA_OK};
    mega__fields_from_json(&rm, f, n, c);
    cJSON_Delete(m);
    MEGA_TRY(rm.st);
    const int enc_maxpos = c->encoder.max_positions;
    official_side(&r, "encoder", "max_source_positions", &c->encoder);
    /* decoder dimensions default to the encoder's (base_architecture) */
    mega_block_config enc = c->encoder;
    c->decoder = enc;
    c->decoder.bidirectional = 0;
    c->decoder.max_positions = enc_maxpos;
    if (!cJSON_GetObjectItemCaseSensitive(o, "decoder_chunk_size")) c->decoder.chunk_size = enc.chunk_size;
    official_side(&r, "decoder", "max_target_positions", &c->decoder);
    return r.st;
}

mega_status mega_s2s_config_from_json(const char *json, mega_s2s_config *c) {
    mega_s2s_config_default(c);
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "model config is not a JSON object");
    }
    mega_status st = MEGA_OK;
    if (cJSON_GetObjectItemCaseSensitive(o, "encoder_layers")) {
        st = from_official(o, c);
    } else {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
        if (m && (!cJSON_IsString(m) || strcmp(m->valuestring, mega_model_kind_name(MEGA_MODEL_S2S)))) {
            st = mega__error(MEGA_ERR_FORMAT, "config describes a '%s' model, not an encoder-decoder (mega_s2s)",
                             cJSON_IsString(m) ? m->valuestring : "?");
        } else {
            int n, nb;
            const mega_field *f = mega_s2s_config_fields(&n), *bf = mega_block_config_fields(&nb);
            mega_json_reader r = {o, MEGA_OK};
            mega__fields_from_json(&r, f, n, c);
            const char *side[2] = {"encoder", "decoder"};
            mega_block_config *b[2] = {&c->encoder, &c->decoder};
            for (int i = 0; i < 2 && !r.st; i++) {
                const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, side[i]);
                if (!cJSON_IsObject(s)) {
                    r.st = mega__error(MEGA_ERR_FORMAT, "encoder-decoder config has no '%s' object", side[i]);
                    break;
                }
                mega_json_reader rs = {s, MEGA_OK};
                mega__fields_from_json(&rs, bf, nb, b[i]);
                r.st = rs.st;
            }
            st = r.st;
        }
    }
    cJSON_Delete(o);
    MEGA_TRY(st);
    c->encoder.bidirectional = 1, c->decoder.bidirectional = 0;
    if (c->share_all_embeddings) c->tie_embeddings = 1; /* official build_model */
    return mega_s2s_config_check(c);
}

mega_status mega_s2s_save_ex(const mega_s2s *m, const char *path, const char *const *kv) {
    return mega__model_save_kind(&m->hdr, path, kv);
}

/* official state dicts also list the shared matrices under their other names */
static const char *const *s2s_ignore(const mega_s2s *m) {
    static const char *const ignore[] = {"_float_tensor", "encoder.version", "decoder.version", NULL};
    static const char *const tied[] = {"_float_tensor", "encoder.version", "decoder.version",
                                       "decoder.output_projection.weight", NULL};
    static const char *const all[] = {"_float_tensor", "encoder.version", "decoder.version",
                                      "decoder.output_projection.weight", "decoder.embed_tokens.weight", NULL};
    return m->cfg.share_all_embeddings ? all : m->cfg.tie_embeddings ? tied : ignore;
}

mega_status mega_s2s_load_ex(const char *path, const mega_load_opts *o, mega_s2s **out) {
    const mega_model_kind k = MEGA_MODEL_S2S;
    mega_model *m;
    mega_status st = mega__model_load(path, &k, o, &m);
    *out = (mega_s2s *)m;
    return st;
}

mega_status mega_s2s_load(const char *path, mega_s2s **out) { return mega_s2s_load_ex(path, NULL, out); }

/* ---- the kind's table (model/kinds.h) ---------------------------------------------------------- */

MEGA__KIND_ADAPTERS(s2s)
static const char *const *ignore(const mega_model *m, mega_ignore_list *g) {
    (void)g;
    return s2s_ignore((const mega_s2s *)m);
}
/* T source and T target tokens */
static mega_status memory(const void *c, int training, int B, int T, mega_memory *out) {
    return mega_s2s_memory(c, training, B, T, T, out);
}

const mega_model_ops mega__kind_s2s = {
    MEGA__KIND_ADAPTED(s2s),
    .what = "encoder-decoder",
    .official_keys = {"encoder_layers", "decoder_layers"},
    .official = OFFICIAL,
    .official_side = NULL,
    .official_training = 1,
    .ignore = ignore,
    .memory = memory,
};
