/* The generic model API over every kind of MEGA_MODEL_LIST: a tiny model of each kind created,
 * saved and loaded back through mega_model_load (the kind read from the file), with the same
 * config JSON and the same parameter bits; kind names; an unknown kind in a file; the official
 * fixtures and a committed run loaded without naming their kind; scripts/official_names.json is
 * what the library's tables of official names give (`build/test_models --write-official FILE`
 * writes it: the converter scripts/convert_fairseq.py reads the names there). */
#include "testlib.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* the widths of a tiny model, applied to every object of the config JSON (an encoder-decoder
 * has its block fields under "encoder" and "decoder") */
static const struct {
    const char *key;
    int value;
} TINY[] = {{"layers", 1},       {"encoder-layers", 1}, {"decoder-layers", 1}, {"embed-dim", 16}, {"z-dim", 8},
            {"hidden-dim", 16},  {"n-dim", 2},          {"ffn-dim", 16},       {"chunk-size", 8}, {"classifier-dim", 8},
            {"vocab-size", 40},  {"src-vocab-size", 40}, {"tgt-vocab-size", 41}, {"padding-idx", 1}, {"eos-idx", 2}, {"max-len", 32},
            {"train-len", 32}};

static void shrink(cJSON *o) {
    for (cJSON *it = o ? o->child : NULL; it; it = it->next) {
        if (cJSON_IsObject(it)) shrink(it);
        for (size_t i = 0; i < sizeof TINY / sizeof *TINY; i++)
            if (it->string && !strcmp(it->string, TINY[i].key) && cJSON_IsNumber(it)) cJSON_SetNumberValue(it, TINY[i].value);
    }
}

/* the kind's defaults with the tiny widths, into cfg (mega_model_config_size bytes) */
static int tiny_config(mega_model_kind k, void *cfg) {
    mega_model_config_default(k, cfg);
    char *js = mega_model_config_to_json(k, cfg);
    cJSON *o = js ? cJSON_Parse(js) : NULL;
    free(js);
    shrink(o);
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    int ok = t && mega_model_config_from_json(k, t, cfg) == MEGA_OK;
    if (!ok) printf("  %s: %s\n", mega_model_kind_name(k), mega_last_error());
    free(t);
    return ok;
}

static int same_params(mega_model *a, mega_model *b) {
    mega_paramset *pa = mega_model_paramset(a), *pb = mega_model_paramset(b);
    if (mega_ps_total(pa) != mega_ps_total(pb) || mega_ps_count(pa) != mega_ps_count(pb)) return 0;
    return !memcmp(mega_ps_data(pa), mega_ps_data(pb), mega_ps_total(pa) * sizeof(mega_real));
}

static void round_trip(mega_model_kind k, const char *dir) {
    const char *name = mega_model_kind_name(k);
    void *cfg = calloc(1, mega_model_config_size(k));
    TL_CHECK(cfg && mega_model_config_size(k) > 0, "%s: config size %zu", name, mega_model_config_size(k));
    if (!cfg || !tiny_config(k, cfg)) {
        TL_CHECK(0, "%s: a tiny config", name);
        free(cfg);
        return;
    }
    mega_model *m = NULL, *back = NULL;
    TL_CHECK(mega_model_create(k, cfg, &m) == MEGA_OK && m, "%s: mega_model_create", name);
    if (!m) {
        free(cfg);
        return;
    }
    TL_CHECK(mega_model_kind_of(m) == k, "%s: mega_model_kind_of", name);
    /* the typed handle only for its own kind */
    TL_CHECK((mega_model_lm(m) != NULL) == (k == MEGA_MODEL_LM) && (mega_model_cls(m) != NULL) == (k == MEGA_MODEL_CLS) &&
                 (mega_model_s2s(m) != NULL) == (k == MEGA_MODEL_S2S),
             "%s: mega_model_lm / _cls / _s2s give the typed model of this kind only", name);
    mega_model_init_params(m, 7);
    char path[600];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    const char *kv[] = {"note", "kinds", NULL};
    TL_CHECK(mega_model_save_ex(m, path, kv) == MEGA_OK, "%s: mega_model_save_ex (%s)", name, mega_last_error());
    TL_CHECK(mega_model_load(path, &back) == MEGA_OK && back, "%s: mega_model_load (%s)", name, back ? "" : mega_last_error());
    if (back) {
        TL_CHECK(mega_model_kind_of(back) == k, "%s: the kind is read from the file", name);
        char *j1 = mega_model_config_json(m), *j2 = mega_model_config_json(back);
        TL_CHECK(j1 && j2 && !strcmp(j1, j2), "%s: the same config JSON after the round trip", name);
        TL_CHECK(j1 && strstr(j1, name), "%s: the config JSON names the kind", name);
        free(j1), free(j2);
        TL_CHECK(same_params(m, back), "%s: the same parameters, bit for bit", name);
        mega_model_free(back);
    }
    mega_memory mem;
    TL_CHECK(mega_model_memory(k, cfg, 1, 2, 16, &mem) == MEGA_OK && mem.params > 0 && mem.buffers > 0 &&
                 mem.total > mem.params,
             "%s: mega_model_memory (params %zu, buffers %zu)", name, mem.params, mem.buffers);
    /* an inference load has no gradients */
    const mega_load_opts inference = {1, 0};
    TL_CHECK(mega_model_load_ex(path, &inference, &back) == MEGA_OK && !mega_ps_grad(mega_model_paramset(back)),
             "%s: mega_model_load_ex for inference", name);
    mega_model_free(back);
    mega_model_free(m);
    free(cfg);
}

static void names(void) {
    for (int i = 0; i < MEGA_MODEL_COUNT; i++) {
        mega_model_kind k = MEGA_MODEL_COUNT;
        const char *n = mega_model_kind_name((mega_model_kind)i);
        TL_CHECK(!mega_model_kind_from_name(n, &k) && k == (mega_model_kind)i, "kind name %s parses back", n);
        TL_CHECK(strcmp(mega_model_kind_summary((mega_model_kind)i), "?"), "%s has a summary", n);
    }
    mega_model_kind k;
    TL_CHECK(mega_model_kind_from_name("mega_foo", &k) == -1, "an unknown kind name is refused");
    TL_CHECK(!strcmp(mega_model_kind_name(MEGA_MODEL_COUNT), "?"), "an out-of-range kind is named ?");
    TL_CHECK(!strcmp(mega_model_kind_name(MEGA_MODEL_LM), "mega_lm") && !strcmp(mega_model_kind_name(MEGA_MODEL_CLS), "mega_cls") &&
                 !strcmp(mega_model_kind_name(MEGA_MODEL_S2S), "mega_s2s"),
             "the checkpoint kind names of the existing files");
    /* official argument names mark the kind */
    TL_CHECK(!mega_model_kind_of_json("{\"decoder_layers\": 2}", &k) && k == MEGA_MODEL_LM, "official decoder_layers: mega_lm");
    TL_CHECK(!mega_model_kind_of_json("{\"encoder_layers\": 2}", &k) && k == MEGA_MODEL_CLS, "official encoder_layers: mega_cls");
    TL_CHECK(!mega_model_kind_of_json("{\"encoder_layers\": 2, \"decoder_layers\": 2}", &k) && k == MEGA_MODEL_S2S,
             "official encoder_layers and decoder_layers: mega_s2s");
    TL_CHECK(!mega_model_kind_of_json("{\"model\": \"mega_cls\", \"decoder_layers\": 2}", &k) && k == MEGA_MODEL_CLS,
             "\"model\" wins over the official keys");
}

/* a file whose config names a kind this library does not have */
static void unknown_kind(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/unknown.safetensors", dir);
    mega_st_writer *w = mega_st_writer_new();
    const float x[2] = {1, 2};
    const int64_t shape[1] = {2};
    mega_st_writer_meta(w, "config", "{\"model\": \"mega_vision\", \"layers\": 1}");
    mega_st_writer_add(w, "w", MEGA_DT_F32, 1, shape, x);
    TL_CHECK(mega_st_writer_write(w, path) == MEGA_OK, "write a file of an unknown kind");
    mega_st_writer_free(w);
    mega_model *m = NULL;
    mega_status st = mega_model_load(path, &m);
    const char *e = mega_last_error();
    TL_CHECK(st == MEGA_ERR_FORMAT && !m && strstr(e, "unknown model kind 'mega_vision'") && strstr(e, "mega_lm") &&
                 strstr(e, path),
             "an unknown kind fails clearly: %s", e);
    mega_lm *lm = NULL;
    TL_CHECK(mega_lm_load(path, &lm) != MEGA_OK && !lm && strstr(mega_last_error(), "mega_vision"),
             "the typed load names the kind too: %s", mega_last_error());
}

/* committed files of every kind, loaded without naming their kind; the typed load has the same bits */
static void old_files(void) {
    static const struct {
        const char *path;
        mega_model_kind kind;
    } FILES[] = {
        {"tests/fixtures/runs/lm_v010", MEGA_MODEL_LM},
        {"tests/fixtures/official/lm_softmax_simple_layernorm_pre_c8_L32/weights.safetensors", MEGA_MODEL_LM},
        {"tests/fixtures/official/cls_sparse_pad_mp_head1_layernorm_pre_c8_L36/weights.safetensors", MEGA_MODEL_CLS},
        {"tests/fixtures/s2s/s2s_softmax_simple_layernorm_pre_encc8_ragged_sep/weights.safetensors", MEGA_MODEL_S2S},
    };
    for (size_t i = 0; i < sizeof FILES / sizeof *FILES; i++) {
        mega_model *m = NULL, *typed = NULL;
        mega_status st = mega_model_load(FILES[i].path, &m);
        TL_CHECK(!st && m && mega_model_kind_of(m) == FILES[i].kind, "%s loads as %s (%s)", FILES[i].path,
                 mega_model_kind_name(FILES[i].kind), st ? mega_last_error() : "");
        if (!m) continue;
        switch (FILES[i].kind) {
        case MEGA_MODEL_LM: {
            mega_lm *t = NULL;
            st = mega_lm_load(FILES[i].path, &t);
            typed = mega_lm_model(t);
        } break;
        case MEGA_MODEL_CLS: {
            mega_cls *t = NULL;
            st = mega_cls_load(FILES[i].path, &t);
            typed = mega_cls_model(t);
        } break;
        default: {
            mega_s2s *t = NULL;
            st = mega_s2s_load(FILES[i].path, &t);
            typed = mega_s2s_model(t);
        } break;
        }
        TL_CHECK(!st && typed && same_params(m, typed), "%s: the typed load has the same parameters", FILES[i].path);
        mega_model_free(typed);
        mega_model_free(m);
    }
}

static cJSON *names_json(const mega_official_name *n, int count) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < count; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "field", n[i].field);
        if (n[i].fairseq) cJSON_AddStringToObject(e, "fairseq", n[i].fairseq);
        else cJSON_AddNullToObject(e, "fairseq");
        if (n[i].hf) cJSON_AddStringToObject(e, "hf", n[i].hf);
        else cJSON_AddNullToObject(e, "hf");
        cJSON_AddBoolToObject(e, "invert", (n[i].flags & MEGA_OFFICIAL_INVERT) != 0);
        cJSON_AddBoolToObject(e, "training", (n[i].flags & MEGA_OFFICIAL_TRAINING) != 0);
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

/* the official names of every kind and of the block, as scripts/official_names.json holds them */
static char *official_json(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "about", "the official names of the config fields (include/mega.h mega_official_name); "
                                        "generated by build/test_models --write-official, do not edit");
    int n;
    const mega_official_name *b = mega_block_official_names(&n);
    cJSON_AddItemToObject(o, "block", names_json(b, n));
    cJSON *kinds = cJSON_AddObjectToObject(o, "kinds");
    for (int k = 0; k < MEGA_MODEL_COUNT; k++) {
        cJSON *e = cJSON_AddObjectToObject(kinds, mega_model_kind_name((mega_model_kind)k));
        const char *side = mega_model_official_side((mega_model_kind)k);
        if (side) cJSON_AddStringToObject(e, "side", side);
        else cJSON_AddNullToObject(e, "side");
        const mega_official_name *m = mega_model_official_names((mega_model_kind)k, &n);
        cJSON_AddItemToObject(e, "names", names_json(m, n));
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    size_t len = s ? strlen(s) : 0;
    char *t = s ? realloc(s, len + 2) : NULL;
    if (t) t[len] = '\n', t[len + 1] = 0;
    return t ? t : s;
}

/* configs with the official fairseq argument names, read through the tables of official names */
static void official_configs(void) {
    mega_lm_config lc;
    mega_status st = mega_model_config_from_json(
        MEGA_MODEL_LM, "{\"decoder_layers\": 1, \"decoder_embed_dim\": 16, \"decoder_z_dim\": 8, \"activation_fn\": \"linear\", "
                       "\"dropout\": 0.25, \"max_target_positions\": 77, \"no_scale_embedding\": true, \"vocab_size\": 10}",
        &lc);
    TL_CHECK(!st && lc.layers == 1 && lc.block.embed_dim == 16 && lc.block.z_dim == 8 && lc.block.activation == MEGA_ACT_LINEAR &&
                 lc.block.max_positions == 77 && !lc.scale_embedding && lc.block.dropout == 0,
             "official LM arguments (linear activation; dropout is not read) %s", st ? mega_last_error() : "");
    mega_cls_config cc;
    st = mega_model_config_from_json(MEGA_MODEL_CLS,
                                     "{\"encoder_layers\": 1, \"encoder_embed_dim\": 16, \"activation_fn\": \"swish\", "
                                     "\"embedding_type\": \"sparse\", \"sen_rep_type\": \"mp\", \"vocab_size\": 10, "
                                     "\"padding_idx\": 1, \"sentence_class_num\": 3, \"max_positions\": 50}",
                                     &cc);
    TL_CHECK(!st && cc.layers == 1 && cc.block.embed_dim == 16 && cc.block.activation == MEGA_ACT_SILU &&
                 cc.embedding == MEGA_EMBED_TOKEN && cc.pool == MEGA_POOL_MEAN && cc.classes == 3 && cc.block.max_positions == 50,
             "official LRA arguments (swish, sparse, mp) %s", st ? mega_last_error() : "");
    mega_s2s_config sc;
    st = mega_model_config_from_json(MEGA_MODEL_S2S,
                                     "{\"encoder_layers\": 1, \"decoder_layers\": 2, \"encoder_embed_dim\": 16, "
                                     "\"encoder_z_dim\": 8, \"decoder_hidden_dim\": 24, \"dropout\": 0.25, "
                                     "\"src_vocab_size\": 10, \"tgt_vocab_size\": 12, \"max_source_positions\": 99}",
                                     &sc);
    TL_CHECK(!st && sc.encoder_layers == 1 && sc.decoder_layers == 2 && sc.encoder.embed_dim == 16 && sc.decoder.embed_dim == 16 &&
                 sc.decoder.z_dim == 8 && sc.decoder.hidden_dim == 24 && sc.encoder.hidden_dim != 24 &&
                 sc.encoder.dropout == 0.25f && sc.decoder.dropout == 0.25f && sc.encoder.max_positions == 99 &&
                 sc.decoder.max_positions == 1024 && sc.tgt_vocab_size == 12,
             "official translation arguments (the decoder's default to the encoder's; dropout read) %s",
             st ? mega_last_error() : "");
}

static void official_names(void) {
    char *want = official_json();
    unsigned char *have = tl_read_file("scripts/official_names.json", NULL);
    TL_CHECK(want && have && !strcmp(want, (const char *)have),
             "scripts/official_names.json is what the library's tables give (else: build/test_models "
             "--write-official scripts/official_names.json)");
    /* the Hugging Face names the converters use */
    TL_CHECK(!strcmp(mega_official_hf_name(MEGA_MODEL_LM, "embed-dim"), "hidden_size") &&
                 !strcmp(mega_official_hf_name(MEGA_MODEL_CLS, "layers"), "num_hidden_layers") &&
                 mega_official_hf_name(MEGA_MODEL_LM, "no-such-field") == NULL,
             "mega_official_hf_name");
    free(want);
    free(have);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-official")) {
        char *s = official_json();
        int rc = !s || tl_write_file(argv[2], s, strlen(s));
        free(s);
        return rc;
    }
    official_names();
    official_configs();
    char dir[512];
    if (tl_mkdtemp(dir, sizeof dir, "mega_models_")) return tl_finish();
    names();
    for (int k = 0; k < MEGA_MODEL_COUNT; k++) round_trip((mega_model_kind)k, dir);
    unknown_kind(dir);
    old_files();
    tl_rm_rf(dir);
    return tl_finish();
}
