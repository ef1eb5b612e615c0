/* Language-model config JSON and model.safetensors save/load. */
#include "model/lm.h"
#include "model/modelio.h"

#include <stddef.h>

char *mega_lm_config_to_json(const mega_lm_config *c) {
    int n;
    const mega_field *f = mega_lm_config_fields(&n);
    return mega__config_to_json("mega_lm", f, n, c, offsetof(mega_lm_config, block));
}

/* the official fairseq mega_lm arguments (as in the reference fixtures) */
static const mega_official_arg OFFICIAL[] = {
    {"vocab_size", "vocab-size", 0},
    {"padding_idx", "padding-idx", 0},
    {"decoder_layers", "layers", 0},
    {"decoder_embed_dim", "embed-dim", 0},
    {"decoder_z_dim", "z-dim", 0},
    {"decoder_hidden_dim", "hidden-dim", 0},
    {"decoder_n_dim", "n-dim", 0},
    {"decoder_ffn_embed_dim", "ffn-dim", 0},
    {"decoder_chunk_size", "chunk-size", 0},
    {"truncation_length", "truncation", 0},
    {"max_target_positions", "max-positions", 0},
    {"attention_activation_fn", "attention-activation", 0},
    {"rel_pos_bias", "rel-pos-bias", 0},
    {"normalization_type", "norm-type", 0},
    {"normalize_before", "prenorm", 0},
    {"no_affine_final_norm", "final-norm-affine", MEGA_OFFICIAL_INVERT},
    {"activation_fn", "activation", 0},
    {"no_scale_embedding", "scale-embedding", MEGA_OFFICIAL_INVERT},
    {"share_decoder_input_output_embed", "tie-embeddings", 0},
    {NULL, NULL, 0},
};

mega_status mega_lm_config_from_json(const char *json, mega_lm_config *c) {
    mega_lm_config_default(c);
    if (strstr(json, "\"decoder_layers\"")) {
        /* the official defaults where they differ from ours */
        c->padding_idx = -1, c->block.prenorm = 0, c->tie_embeddings = 0;
    }
    int n;
    const mega_field *f = mega_lm_config_fields(&n);
    MEGA_TRY(mega__config_from_json(json, "mega_lm", "language model", f, n, c, offsetof(mega_lm_config, block),
                                    "decoder_layers", OFFICIAL));
    c->block.bidirectional = 0;
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
