/* Config JSON and model file save/open shared by the model kinds. */
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

static const mega_field *find_field(const mega_field *f, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].name, name)) return &f[i];
    return NULL;
}

/* the official names of a few choices (fairseq LRA arguments) */
static const char *const ALIASES[][2] = {{"sparse", "token"}, {"linear", "real"}, {"mp", "mean"}, {"swish", "silu"}};

/* a copy of the official arguments under the field names */
static cJSON *translate_official(const cJSON *o, const mega_official_arg *off, const mega_field *mf, int nmf) {
    int nb;
    const mega_field *bf = mega_block_config_fields(&nb);
    cJSON *t = cJSON_CreateObject();
    for (const mega_official_arg *a = off; t && a->arg; a++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a->arg);
        if (!v || cJSON_IsNull(v)) continue;
        const mega_field *f = find_field(mf, nmf, a->field);
        if (!f) f = find_field(bf, nb, a->field);
        cJSON *c = (a->flags & MEGA_OFFICIAL_INVERT) && cJSON_IsBool(v) ? cJSON_CreateBool(!cJSON_IsTrue(v))
                                                                       : cJSON_Duplicate(v, 1);
        if (f && f->type == MEGA_FIELD_CHOICE && cJSON_IsString(c))
            for (size_t k = 0; k < sizeof ALIASES / sizeof *ALIASES; k++)
                if (!strcmp(c->valuestring, ALIASES[k][0])) cJSON_SetValuestring(c, ALIASES[k][1]);
        cJSON_AddItemToObject(t, a->field, c);
    }
    return t;
}

mega_status mega__config_from_json(const char *json, const char *kind, const char *what, const mega_field *mf, int nmf,
                                   void *cfg, size_t block_off, const char *official_marker,
                                   const mega_official_arg *official) {
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        MEGA_FAIL(MEGA_ERR_FORMAT, "model config is not a JSON object");
    }
    if (official_marker && cJSON_GetObjectItemCaseSensitive(o, official_marker)) {
        cJSON *t = translate_official(o, official, mf, nmf);
        cJSON_Delete(o);
        if (!t) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
        o = t;
    } else {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
        if (m && (!cJSON_IsString(m) || strcmp(m->valuestring, kind))) {
            /* the message reads m, which cJSON_Delete(o) frees: format it first */
            mega_status st = mega__error(MEGA_ERR_FORMAT, "config describes a '%s' model, not a %s (%s)",
                                         cJSON_IsString(m) ? m->valuestring : "?", what, kind);
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
    MEGA_TRY(mega_params_check(P, f, "", ignore, 0));
    MEGA_TRY(mega_params_alloc(P, !(o && o->inference)));
    return mega_params_read(P, P->data, f, "");
}

size_t mega__stack_bytes(const mega_stack *s, int B, int T) {
    /* the sizes of mega_stack_reserve (stack.c): acts per block x L, H [(L+1)][R][D], xf and the
     * final-norm statistics, scratch, dx and dy, the activation views */
    const size_t R = (size_t)B * T, D = (size_t)s->cfg->embed_dim, L = (size_t)s->L;
    const size_t per = mega_block_acts_size(&s->blocks[0], B, T);
    const size_t scr = mega_block_scratch_size(&s->blocks[0], B, T, s->nthreads);
    const size_t reals = per * L + R * D * (L + 1) + (R * D + 2 * R + 2 * D) + scr + 2 * R * D;
    return reals * sizeof(real) + L * sizeof(mega_block_acts);
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
