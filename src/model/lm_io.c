/* Language-model config JSON and model.safetensors save/load. */
#include "model/lm.h"
#include "model/modelio.h"

#include <stddef.h>

char *mega_lm_config_to_json(const mega_lm_config *c) {
    int n;
    const mega_field *f = mega_lm_config_fields(&n);
    return mega__config_to_json(mega_model_kind_name(MEGA_MODEL_LM), f, n, c, offsetof(mega_lm_config, block));
}

/* the official names of the language model's fields (fairseq mega_lm arguments, as in the
 * reference fixtures; transformers' MegaForCausalLM); the block's are in modelio.c */
static const mega_official_name OFFICIAL[] = {
    {"vocab-size", "vocab_size", "vocab_size", 0},
    {"padding-idx", "padding_idx", "pad_token_id", 0},
    {"layers", "%s_layers", "num_hidden_layers", 0},
    {"max-positions", "max_target_positions", NULL, 0},
    {"final-norm-affine", "no_affine_final_norm", NULL, MEGA_OFFICIAL_INVERT},
    {"scale-embedding", "no_scale_embedding", NULL, MEGA_OFFICIAL_INVERT},
    {"tie-embeddings", "share_decoder_input_output_embed", "tie_word_embeddings", 0},
    {"adaptive-input", "adaptive_input", NULL, 0},
    {"adaptive-input-factor", "adaptive_input_factor", NULL, 0},
    {"adaptive-input-cutoff", "adaptive_input_cutoff", NULL, 0},
    {"adaptive-softmax-cutoff", "adaptive_softmax_cutoff", NULL, 0},
    {"adaptive-softmax-factor", "adaptive_softmax_factor", NULL, 0},
    {"adaptive-softmax-dropout", "adaptive_softmax_dropout", NULL, 0},
    {"tie-adaptive-weights", "tie_adaptive_weights", NULL, 0},
    {"tie-adaptive-proj", "tie_adaptive_proj", NULL, 0},
    {NULL, NULL, NULL, 0},
};

mega_status mega_lm_config_from_json(const char *json, mega_lm_config *c) {
    mega_lm_config_default(c);
    if (strstr(json, "\"decoder_layers\"")) {
        /* the official defaults where they differ from ours */
        c->padding_idx = -1, c->block.prenorm = 0, c->tie_embeddings = 0;
    }
    int n;
    const mega_field *f = mega_lm_config_fields(&n);
    MEGA_TRY(mega__config_from_json(json, MEGA_MODEL_LM, f, n, c, offsetof(mega_lm_config, block)));
    c->block.bidirectional = 0;
    /* the official decoder builds no output projection when it has an adaptive softmax, whatever
     * share_decoder_input_output_embed says */
    if (strstr(json, "\"decoder_layers\"") && c->adaptive_softmax_cutoff[0]) c->tie_embeddings = 0;
    return mega_lm_config_check(c);
}

mega_status mega_lm_save(const mega_lm *m, const char *path) { return mega_lm_save_ex(m, path, NULL); }

mega_status mega_lm_save_ex(const mega_lm *m, const char *path, const char *const *kv) {
    return mega__model_save_kind(&m->hdr, path, kv);
}

/* What an official state dict holds besides the declared tensors: buffers, and the second names
 * of tied matrices (one storage, two keys): output_projection.weight of a tied model; the
 * adaptive softmax's head.word_proj and tail.<i>.2 (the input's embeddings) and, with
 * tie-adaptive-proj, tail.<i>.0 (the input's projections). */
static const char *const *lm_ignore(const mega_lm *m, mega_ignore_list *g) {
    int n = 0;
    g->list[n++] = "_float_tensor";
    g->list[n++] = "decoder.version";
    if (m->cfg.tie_embeddings && !m->has_as) g->list[n++] = "decoder.output_projection.weight";
    if (m->has_as) {
        g->list[n++] = "decoder.adaptive_softmax.version";
        if (m->as.tied) g->list[n++] = "decoder.adaptive_softmax.head.word_proj.weight";
        for (int i = 0; i < m->as.nt && m->as.tied; i++) {
            snprintf(g->name[2 * i], sizeof g->name[0], "decoder.adaptive_softmax.tail.%d.2.weight", i);
            g->list[n++] = g->name[2 * i];
            if (m->as.tie_proj) {
                snprintf(g->name[2 * i + 1], sizeof g->name[0], "decoder.adaptive_softmax.tail.%d.0.weight", i);
                g->list[n++] = g->name[2 * i + 1];
            }
        }
    }
    g->list[n] = NULL;
    return g->list;
}

mega_status mega_lm_load_weights(mega_lm *m, const char *path) {
    mega_st_file *f;
    MEGA_TRY(mega__model_st_open(path, &f));
    mega_ignore_list g;
    mega_status st = mega_params_check(&m->P, f, "", lm_ignore(m, &g), 0);
    if (!st) st = mega_params_read(&m->P, m->P.data, f, "");
    mega_st_close(f);
    if (st) return mega__error_prefix(st, path);
    return MEGA_OK;
}

mega_status mega_lm_load_ex(const char *path, const mega_load_opts *o, mega_lm **out) {
    const mega_model_kind k = MEGA_MODEL_LM;
    mega_model *m;
    mega_status st = mega__model_load(path, &k, o, &m);
    *out = (mega_lm *)m;
    return st;
}

mega_status mega_lm_load(const char *path, mega_lm **out) { return mega_lm_load_ex(path, NULL, out); }

/* ---- the kind's table (model/kinds.h) ---------------------------------------------------------- */

MEGA__KIND_ADAPTERS(lm)
static const char *const *ignore(const mega_model *m, mega_ignore_list *g) { return lm_ignore((const mega_lm *)m, g); }
static mega_status memory(const void *c, int training, int B, int T, mega_memory *out) {
    return mega_lm_memory(c, training, B, T, out);
}

const mega_model_ops mega__kind_lm = {
    MEGA__KIND_ADAPTED(lm),
    .what = "language model",
    .official_keys = {"decoder_layers"},
    .official = OFFICIAL,
    .official_side = "decoder",
    .ignore = ignore,
    .memory = memory,
};
