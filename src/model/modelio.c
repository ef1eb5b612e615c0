/* Config JSON, the official names of the config fields, and model create / load / save shared by
 * the model kinds (driven by their tables, model/kinds.h). */
#include "model/modelio.h"

char *mega__config_to_json(const char *kind, const mega_field *mf, int nmf, const void *cfg, size_t block_off) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "model", kind);
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    mega__fields_to_json(o, mf, nmf, cfg);
    mega__fields_to_json(o, bf, nb, (const char *)cfg + block_off);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* The official names of the block fields (mega_block_official_names). max-positions has a
 * fairseq name per kind (max_target_positions, max_positions), in the kinds' tables. */
const mega_official_name mega__block_official[] = {
    {"embed-dim", "%s_embed_dim", "hidden_size", 0},
    {"z-dim", "%s_z_dim", "shared_representation_size", 0},
    {"hidden-dim", "%s_hidden_dim", "intermediate_size", 0},
    {"n-dim", "%s_n_dim", "ema_projection_size", 0},
    {"ffn-dim", "%s_ffn_embed_dim", "nffn_hidden_size", 0},
    {"chunk-size", "%s_chunk_size", "chunk_size", 0},
    {"truncation", "truncation_length", "truncation", 0},
    {"max-positions", NULL, "max_positions", 0},
    {"attention-activation", "attention_activation_fn", "attention_activation", 0},
    {"rel-pos-bias", "rel_pos_bias", "relative_positional_bias", 0},
    {"norm-type", "normalization_type", "normalization_type", 0},
    {"prenorm", "normalize_before", "normalize_before_mega", 0},
    {"norm-affine", NULL, "norm_affine", 0},
    {"activation", "activation_fn", "activation", 0},
    {"dropout", "dropout", "dropout_prob", MEGA_OFFICIAL_TRAINING},
    {"attention-dropout", "attention_dropout", "attention_probs_dropout_prob", MEGA_OFFICIAL_TRAINING},
    {"hidden-dropout", "hidden_dropout", "hidden_dropout_prob", MEGA_OFFICIAL_TRAINING},
    {"activation-dropout", "activation_dropout", "nffn_activation_dropout_prob", MEGA_OFFICIAL_TRAINING},
    {"bidirectional", NULL, "bidirectional", 0},
    {NULL, NULL, NULL, 0},
};

static int names_count(const mega_official_name *n) {
    int c = 0;
    while (n && n[c].field) c++;
    return c;
}

const mega_official_name *mega_block_official_names(int *count) {
    *count = names_count(mega__block_official);
    return mega__block_official;
}

const mega_official_name *mega_model_official_names(mega_model_kind k, int *count) {
    const mega_model_ops *ops = mega__kind(k);
    *count = ops ? names_count(ops->official) : 0;
    return ops ? ops->official : NULL;
}

const char *mega_model_official_side(mega_model_kind k) {
    const mega_model_ops *ops = mega__kind(k);
    return ops ? ops->official_side : NULL;
}

const char *mega_official_hf_name(mega_model_kind k, const char *field) {
    const mega_model_ops *ops = mega__kind(k);
    const mega_official_name *tables[2] = {ops ? ops->official : NULL, mega__block_official};
    for (int t = 0; t < 2; t++)
        for (const mega_official_name *n = tables[t]; n && n->field; n++)
            if (n->hf && !strcmp(n->field, field)) return n->hf;
    return NULL;
}

/* the official names of a few choices (fairseq LRA arguments) */
static const char *const ALIASES[][3] = {
    {"embedding", "sparse", "token"}, {"embedding", "linear", "real"}, {"pool", "mp", "mean"},
    {"activation", "swish", "silu"},  {"classifier-activation", "swish", "silu"}};

/* the fairseq argument of one official name, with the side in place of %s (NULL: none) */
static const char *official_arg(const mega_official_name *n, const char *side, char *buf, size_t cap) {
    if (!n->fairseq) return NULL;
    if (!strstr(n->fairseq, "%s")) return n->fairseq;
    snprintf(buf, cap, n->fairseq, side ? side : "");
    return buf;
}

/* one official argument of o, if present and not null, copied into t under its field name */
static void translate_one(cJSON *t, const cJSON *o, const mega_official_name *n, const char *arg) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, arg);
    if (!v || cJSON_IsNull(v) || cJSON_GetObjectItemCaseSensitive(t, n->field)) return; /* the kind's name first */
    cJSON *c = (n->flags & MEGA_OFFICIAL_INVERT) && cJSON_IsBool(v) ? cJSON_CreateBool(!cJSON_IsTrue(v))
                                                                  : cJSON_Duplicate(v, 1);
    if (c && cJSON_IsString(c))
        for (size_t k = 0; k < sizeof ALIASES / sizeof *ALIASES; k++)
            if (!strcmp(n->field, ALIASES[k][0]) && !strcmp(c->valuestring, ALIASES[k][1]))
                cJSON_SetValuestring(c, ALIASES[k][2]);
    cJSON_AddItemToObject(t, n->field, c);
}

cJSON *mega__official_translate(const cJSON *o, const mega_official_name *model, const char *side, int block,
                                int training) {
    cJSON *t = cJSON_CreateObject();
    char buf[96];
    for (int b = 0; t && b < 2; b++) {
        const mega_official_name *names = b ? (block ? mega__block_official : NULL) : model;
        for (const mega_official_name *n = names; n && n->field; n++) {
            const char *arg = official_arg(n, side, buf, sizeof buf);
            if (arg && (training || !(n->flags & MEGA_OFFICIAL_TRAINING))) translate_one(t, o, n, arg);
        }
    }
    return t;
}

mega_status mega__config_from_json(const char *json, mega_model_kind kind, const mega_field *mf, int nmf, void *cfg,
                                   size_t block_off) {
    const mega_model_ops *ops = mega__kind(kind);
    const char *name = mega_model_kind_name(kind);
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "model config is not a JSON object");
    }
    if (cJSON_GetObjectItemCaseSensitive(o, ops->official_keys[0])) {
        cJSON *t = mega__official_translate(o, ops->official, ops->official_side, 1, ops->official_training);
        cJSON_Delete(o);
        if (!t) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        o = t;
    } else {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
        if (m && (!cJSON_IsString(m) || strcmp(m->valuestring, name))) {
            /* the message reads m, which cJSON_Delete(o) frees: format it first */
            mega_status st = mega__error(MEGA_ERR_FORMAT, "config describes a '%s' model, not a %s (%s)",
                                         cJSON_IsString(m) ? m->valuestring : "?", ops->what, name);
            cJSON_Delete(o);
            return st;
        }
    }
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    mega_json_reader r = {o, MEGA_OK};
    mega__fields_from_json(&r, mf, nmf, cfg);
    mega__fields_from_json(&r, bf, nb, (char *)cfg + block_off);
    cJSON_Delete(o);
    return r.st;
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

mega_status mega__model_fill(mega_params *P, const mega_st_file *f, const char *const *ignore, const mega_load_opts *o) {
    /* q8_0 weights (quant.c) are for inference: a training load would train the rounded values */
    const int q8 = mega__q8_in_file(f);
    if (q8 && !(o && o->inference))
        MEGA_FAIL(MEGA_ERR_INVALID, "the model is quantized (q8_0): train its float32 model (the file mega quantize read)");
    P->q8_ok = q8;
    MEGA_TRY(mega_params_check(P, f, "", ignore, 0));
    MEGA_TRY(mega_params_alloc(P, !(o && o->inference)));
    MEGA_TRY(mega_params_read(P, P->data, f, ""));
    return q8 ? mega__q8_load(P, f) : MEGA_OK;
}

size_t mega__stack_bytes(const mega_stack *s, int B, int T) {
    /* the sizes of mega_stack_reserve (stack.c, mega_stack_sizes): acts per block x L (x 1 with
     * recomputation), H [(L+1)][R][D], xf and the final-norm statistics, scratch, dx and dy, the
     * activation views */
    const size_t R = (size_t)B * T, D = (size_t)s->cfg->embed_dim, L = (size_t)s->L;
    size_t per, scr, xf;
    mega_stack_sizes(s, B, T, &per, &scr, &xf);
    const size_t reals = per * (s->recompute ? 1 : L) + R * D * (L + 1) + xf + scr + 2 * R * D;
    return (reals + mega_stack_tf_reals(s, R)) * sizeof(real) + L * sizeof(mega_block_acts);
}

void mega__memory_fill(mega_memory *out, const mega_params *P, int training, size_t buffers) {
    memset(out, 0, sizeof *out);
    out->params = ((P->total + 15) & ~(size_t)15) * sizeof(real); /* as mega_params_alloc rounds */
    out->grads = training ? out->params : 0;
    out->optimizer = training ? 2 * out->params : 0;
    out->buffers = buffers;
    out->total = out->params + out->grads + out->optimizer + out->buffers;
}

mega_status mega__check_class_names(const mega_st_file *f, int classes) {
    const char *cj = mega_st_meta(f, "classes");
    if (!cj) return MEGA_OK; /* not written by mega train: nothing to compare */
    cJSON *a = cJSON_Parse(cj);
    const int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    cJSON_Delete(a);
    if (n < 0) MEGA_FAIL(MEGA_ERR_FORMAT, "the class list in the metadata ('classes') is not a JSON array");
    if (n > classes)
        MEGA_FAIL(MEGA_ERR_FORMAT, "%d class names but the head has %d outputs (the metadata 'classes' does not match "
                  "the config's classes)", n, classes);
    return MEGA_OK;
}

/* ---- every kind through its table (model/kinds.h) --------------------------------------------- */

mega_status mega__model_create(mega_model_kind k, const void *cfg, const mega_load_opts *o, mega_model **out) {
    *out = NULL;
    const mega_model_ops *ops = mega__kind(k);
    if (!ops) MEGA_FAIL(MEGA_ERR_INVALID, "model kind %d is not one of the %d kinds", (int)k, MEGA_MODEL_COUNT);
    mega_model *m;
    MEGA_TRY(ops->declare(cfg, &m));
    mega_status st = mega_params_alloc(ops->params(m), !(o && o->inference));
    if (st) {
        ops->free(m);
        return st;
    }
    if (!(o && o->no_init)) ops->init_params(m, 0);
    *out = m;
    return MEGA_OK;
}

/* the config of the file, the parameter table declared from it and compared with the file's
 * tensors, and only then the memory (docs/library.md) */
static mega_status load_from(const mega_model_ops *ops, const mega_st_file *f, const char *cfgs,
                             const mega_load_opts *o, mega_model **out) {
    void *c = calloc(1, ops->config_size);
    if (!c) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    mega_model *m = NULL;
    mega_status st = ops->config_from_json(cfgs, c);
    if (!st && ops->check_file) st = ops->check_file(f, c);
    if (!st) st = ops->declare(c, &m);
    free(c);
    mega_ignore_list g;
    if (!st) st = mega__model_fill(ops->params(m), f, ops->ignore(m, &g), o);
    if (st && m) ops->free(m);
    *out = st ? NULL : m;
    return st;
}

mega_status mega__model_load(const char *path, const mega_model_kind *k, const mega_load_opts *o, mega_model **out) {
    *out = NULL;
    mega_st_file *f;
    const char *cfgs;
    MEGA_TRY(mega__model_open(path, &f, &cfgs));
    mega_model_kind kind = k ? *k : MEGA_MODEL_LM;
    mega_status st = k ? MEGA_OK : mega_model_kind_of_json(cfgs, &kind);
    const mega_model_ops *ops = mega__kind(kind);
    if (!st && !ops) st = mega__error(MEGA_ERR_INVALID, "model kind %d is not one of the %d kinds", (int)kind, MEGA_MODEL_COUNT);
    if (!st) st = load_from(ops, f, cfgs, o, out);
    mega_st_close(f);
    if (st) return mega__error_prefix(st, path);
    return MEGA_OK;
}

mega_status mega__model_save_kind(const mega_model *m, const char *path, const char *const *kv) {
    const mega_model_ops *ops = mega__kind(m->kind);
    char *cfg = ops->config_to_json(ops->config(m));
    if (!cfg) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    mega_status st = mega__model_save(ops->params((mega_model *)m), path, cfg, kv);
    free(cfg);
    return st;
}
