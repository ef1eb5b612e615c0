/* `mega train --task classify`: long-sequence classification (LRA style). */
#include "dist.h"
#include "task.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- presets: the paper's Table 8 architectures with the official training scripts'
 * defaults (examples/mega/README.lra.md, fairseq/models/lra/model.py mega_lra_* archs) ---- */
typedef struct {
    const char *name, *format;
    mega_attn_fn attn;
    mega_norm_type norm;
    mega_embed_kind embedding;
    int layers, D, E, Z, F, chunk, prenorm, head;
    double lr, wd, dropout;
    int batch, seq_len;
    int64_t steps, warmup;
    double pmean, pstd;
    int truncation; /* the EMA's truncation (0: 1024) */
} preset;

static const preset PRESETS[] = {
    /* ListOps: layernorm (the script; the arch default is scalenorm), post-norm, full attention */
    {"lra-listops", "listops", MEGA_ATTN_SOFTMAX, MEGA_NORM_LAYER, MEGA_EMBED_TOKEN, 6, 80, 160, 64, 160, -1, 0, 160, 1e-3, 0.01, 0.1, 64, 2000, 90000, 3000, 0.5, 0.5, 1024},
    {"lra-text", "text", MEGA_ATTN_SOFTMAX, MEGA_NORM_SCALE, MEGA_EMBED_TOKEN, 4, 128, 256, 64, 256, -1, 0, 256, 4e-3, 0.01, 0.1, 50, 4000, 25000, 10000, 0.5, 0.5, 1024},
    {"lra-retrieval", "pairs", MEGA_ATTN_SOFTMAX, MEGA_NORM_SCALE, MEGA_EMBED_TOKEN, 6, 128, 256, 64, 256, -1, 0, 256, 3e-3, 0.04, 0.1, 64, 4000, 91960, 10000, 0.5, 0.5, 1024},
    /* images: laplace, batchnorm, pre-norm, chunk 1024, real-valued pixels (CIFAR normalisation) */
    {"lra-image", "idx", MEGA_ATTN_LAPLACE, MEGA_NORM_BATCH, MEGA_EMBED_REAL, 8, 160, 320, 96, 320, 1024, 1, 320, 1e-2, 0.02, 0.0, 50, 1024, 180000, 9000, 0.48, 0.24, 1024},
    /* Pathfinder (mega_lra_pf32) and Path-X (mega_lra_pf128: 128 x 128 = 16,384 pixels, one chunk,
     * truncation 4096; the script's batch 2 x update-freq 8 on 8 GPUs is 128 per update), both
     * read from a directory in the release's layout (mega pathfinder; docs/vision.md) */
    {"lra-pathfinder", "pathfinder", MEGA_ATTN_LAPLACE, MEGA_NORM_BATCH, MEGA_EMBED_REAL, 6, 128, 256, 64, 256, 1024, 1, 256, 1e-2, 0.01, 0.0, 128, 1024, 250000, 50000, 0.5, 0.5, 1024},
    {"lra-pathx", "pathfinder", MEGA_ATTN_LAPLACE, MEGA_NORM_BATCH, MEGA_EMBED_REAL, 4, 64, 128, 32, 128, 16384, 1, 128, 1e-2, 0.01, 0.0, 128, 16384, 125000, 25000, 0.5, 0.5, 4096},
    /* raw speech (fairseq/models/speech_commands/model.py mega_sc_raw_base / _big, examples/mega/
     * README.sc.md): 16,000 samples a clip, chunk 1000, EMA truncation 1000; FFN = hidden */
    {"sc-raw", "speech", MEGA_ATTN_LAPLACE, MEGA_NORM_BATCH, MEGA_EMBED_REAL, 6, 60, 120, 30, 120, 1000, 1, 120, 1e-2, 0.01, 0.0, 20, 16000, 250000, 10000, 0.5, 0.5, 1000},
    {"sc-raw-big", "speech", MEGA_ATTN_LAPLACE, MEGA_NORM_BATCH, MEGA_EMBED_REAL, 6, 72, 144, 36, 144, 1000, 1, 144, 8e-3, 0.01, 0.0, 20, 16000, 250000, 10000, 0.5, 0.5, 1000},
};

/* the classify task's own flags: its data, and
 * the config flags that also have another name (its row in tasks.c) */
int cls_task_flags(train_args *a, cli_flag *fl, int n) {
    const cli_flag cf[] = {
        /* from the table of data formats (mega_data_formats) */
        {"format", F_ENUM, &a->format, data_format_help(), data_format_choices(), 1, 0, 0},
        {data_file_flag("", 0), F_STR, &a->images, data_file_help("", 0), NULL, 1, 0, 0},
        {data_file_flag("", 1), F_STR, &a->labels, data_file_help("", 1), NULL, 1, 0, 0},
        {data_file_flag("valid-", 0), F_STR, &a->valid_images, data_file_help("valid-", 0), NULL, 1, 0, 0},
        {data_file_flag("valid-", 1), F_STR, &a->valid_labels, data_file_help("valid-", 1), NULL, 1, 0, 0},
        {"pixel-mean", F_DBL, &a->pixel_mean, "pixel normalisation (x/255 - mean)/std for --embedding real", NULL, -10, 10, 0},
        {"pixel-std", F_DBL, &a->pixel_std, "pixel normalisation std", NULL, 1e-6, 10, 0},
        {"keep-parens", F_SET, &a->keep_parens, "keep ListOps parentheses as tokens", NULL, 1, 0, 0},
        {"words", F_ENUM, &a->words, "speech data: the ten words of SC10 or all 35", "sc10|all", 1, 0, 0},
        {"pad-short", F_SET, &a->pad_short, "speech data: zero-pad clips shorter than a second (default: drop them)", NULL, 1, 0, 0},
        {"classes", F_INT, &a->classes, "number of classes (0 = from the training labels)", NULL, 0, 1 << 20, 0},
        {"init-from", F_STR, &a->init_from, "start from the weights of a run (mega train --task mlm, or a classifier) whose names and shapes match; model flags not given take the run's values, those given must agree with it (docs/pretraining.md)", NULL, 1, 0, 0},
        {"postnorm", F_CLEAR, &a->cls.block.prenorm, "normalize after each sublayer (= --prenorm=false)", NULL, 1, 0, 0},
        {"no-affine-final-norm", F_CLEAR, &a->cls.final_norm_affine, "= --final-norm-affine=false", NULL, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cf / sizeof *cf; i++) fl[n++] = cf[i];
    return n;
}

void cls_apply_classify_defaults(train_args *a) {
    a->seq_len = 4096, a->schedule = "linear", a->min_lr = 0, a->eval_tokens = 0;
    a->cls.block.truncation = 1024;
}

int cls_apply_preset(train_args *a, const cli_flag *fl) {
    if (!a->preset) return 0;
    const preset *p = NULL;
    for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++)
        if (!strcmp(PRESETS[i].name, a->preset)) p = &PRESETS[i];
    if (!p) return cli_error("unknown --preset '%s'", a->preset);
    mega_cls_config *c = &a->cls;
    mega_block_config *b = &c->block;
#define SET(flag, field, val) if (!cli_seen(fl, flag)) field = (val)
    SET("format", a->format, p->format);
    /* lra-image with --data, not --images: the official image layout (input/, label/), not IDX */
    if (!cli_seen(fl, "format") && !strcmp(p->format, "idx") && a->data && !a->images) a->format = "lra-image";
    SET("attention-activation", b->attention_activation, p->attn);
    SET("norm-type", b->norm_type, p->norm);
    SET("embedding", c->embedding, p->embedding);
    SET("layers", c->layers, p->layers);
    SET("embed-dim", b->embed_dim, p->D);
    SET("hidden-dim", b->hidden_dim, p->E);
    SET("z-dim", b->z_dim, p->Z);
    SET("ffn-dim", b->ffn_dim, p->F);
    SET("n-dim", b->n_dim, 16);
    SET("chunk-size", b->chunk_size, p->chunk);
    if (!cli_seen(fl, "prenorm") && !cli_seen(fl, "postnorm")) b->prenorm = p->prenorm;
    SET("classifier-layers", c->classifier_layers, 1);
    SET("classifier-dim", c->classifier_dim, p->head);
    SET("classifier-activation", c->classifier_activation, MEGA_ACT_GELU);
    SET("pool", c->pool, MEGA_POOL_MEAN);
    SET("rel-pos-bias", b->rel_pos_bias, MEGA_RELPOS_SIMPLE);
    SET("activation", b->activation, MEGA_ACT_SILU);
    SET("truncation", b->truncation, p->truncation ? p->truncation : 1024);
    SET("lr", a->lr, p->lr);
    SET("weight-decay", a->opt.weight_decay, p->wd);
    SET("dropout", b->dropout, (float)p->dropout);
    SET("attention-dropout", b->attention_dropout, 0.0f);
    SET("batch", a->batch, p->batch);
    SET("seq-len", a->seq_len, p->seq_len);
    SET("steps", a->steps, p->steps);
    SET("warmup", a->warmup, p->warmup);
    SET("beta1", a->opt.beta1, 0.9);
    SET("beta2", a->opt.beta2, 0.98);
    SET("clip", a->clip, 1.0);
    SET("pixel-mean", a->pixel_mean, p->pmean);
    SET("pixel-std", a->pixel_std, p->pstd);
#undef SET
    return 0;
}

/* ---- data ------------------------------------------------------------------------------- */

typedef struct {
    mega_cls *m;
    mega_dataset train, valid;
    int n_train, valid_from_train; /* valid = the last examples of --data */
    int *vidx;                     /* validation example indices (into train or valid) */
    int n_valid;
    mega_batch batch;
    size_t cap, cap2; /* batch buffer capacities (elements) */
    int capB;
    int *idx;
    char *vocab_json, *classes_json;
    const char *format;
    run_memory mem; /* what the run needs (printed by describe) */
    char how[64];
} cls_task;

static const mega_dataset *vset(const cls_task *C) { return C->valid_from_train ? &C->train : &C->valid; }

/* run examples idx[0..n) through the model (forward only or with targets); the batch is shaped
 * n x (longest example, at least minL / minL2, at most maxlen) inside buffers kept at their
 * largest capacity */
static int run_batch(cls_task *C, const mega_dataset *d, const int *idx, int n, int maxlen, int minL, int minL2,
                     const mega_lm_run *run, double *loss, int64_t *correct, int64_t *units) {
    int L = mega_batch_max_len(d, idx, n, 0), L2 = d->pairs ? mega_batch_max_len(d, idx, n, 1) : 0;
    if (L < minL) L = minL;
    if (L2 < minL2) L2 = minL2;
    if (L > maxlen) L = maxlen;
    if (L2 > maxlen) L2 = maxlen;
    if (L < 1) L = 1;
    if (d->pairs && L2 < 1) L2 = 1;
    if ((size_t)n * L > C->cap || (size_t)n * L2 > C->cap2 || n > C->capB) {
        size_t nc = (size_t)n * L > C->cap ? (size_t)n * L : C->cap, nc2 = (size_t)n * L2 > C->cap2 ? (size_t)n * L2 : C->cap2;
        int nb = n > C->capB ? n : C->capB;
        mega_batch_free(&C->batch);
        /* allocate nb rows x (capacity / nb) columns, rounded up */
        int L2cap = d->pairs ? (int)((nc2 + nb - 1) / nb) : 0;
        if (mega_batch_init(&C->batch, nb, (int)((nc + nb - 1) / nb), L2cap, d->vocab.real) != MEGA_OK)
            return cli_error("%s", mega_last_error());
        C->capB = nb, C->cap = (size_t)nb * C->batch.L, C->cap2 = (size_t)nb * C->batch.L2;
    }
    mega_batch *b = &C->batch;
    b->B = n, b->L = L, b->L2 = L2;
    if (mega_batch_fill(b, d, idx, n) != MEGA_OK) return cli_error("%s", mega_last_error());
    mega_cls_input in = {b->tok, b->val, b->len, L};
    mega_cls_input in2 = {b->tok2, NULL, b->len2, L2};
    if (mega_cls_forward(C->m, &in, d->pairs ? &in2 : NULL, n, b->label, run, loss, correct) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    if (units) {
        *units = 0;
        for (int i = 0; i < n; i++) *units += b->len[i] + (d->pairs ? b->len2[i] : 0);
    }
    return 0;
}

static int cls_step(task *t, const train_args *a, uint64_t *rng, uint64_t key, int shard, int nshards, double *loss,
                    double *metric, int64_t *units) {
    cls_task *C = t->impl;
    int B = a->batch < C->n_train ? a->batch : C->n_train;
    for (int i = 0; i < B; i++) C->idx[i] = (int)mega_data_rng_below(rng, (uint64_t)C->n_train);
    int r0, r1;
    task_shard_rows(B, shard, nshards, &r0, &r1);
    *loss = *metric = 0, *units = 0;
    if (r1 == r0) return 0;
    /* batchnorm's statistics include the pads (official BatchNorm1d): a shard is then padded to
     * the whole batch's length, so that the synchronized statistics are the batch's */
    const mega_dataset *d = &C->train;
    const int minL = t->batchnorm && nshards > 1 ? mega_batch_max_len(d, C->idx, B, 0) : 0;
    const int minL2 = t->batchnorm && nshards > 1 && d->pairs ? mega_batch_max_len(d, C->idx, B, 1) : 0;
    int64_t ok;
    mega_lm_run run = {1, key};
    if (run_batch(C, d, C->idx + r0, r1 - r0, a->seq_len, minL, minL2, &run, loss, &ok, units)) return 1;
    if (!isfinite(*loss)) return 0;
    const double part = (double)(r1 - r0) / (double)B; /* the loss is a mean over examples */
    mega_cls_backward(C->m, part);
    *loss *= part;
    *metric = (double)ok / B;
    return 0;
}

static int cls_validate(task *t, const train_args *a, int64_t max_units, double *loss, double *metric, int64_t *count) {
    cls_task *C = t->impl;
    if (C->n_valid == 0) return 1;
    int n = C->n_valid;
    if (max_units > 0 && max_units < n) n = (int)max_units;
    int64_t ok;
    if (mega_cls_evaluate(C->m, vset(C), C->vidx, n, task_forward_batch(a), a->seq_len, NULL, NULL, loss, &ok, NULL) != MEGA_OK)
        return cli_error("%s", mega_last_error()), -1;
    *metric = (double)ok / n;
    *count = n;
    return 0;
}

static mega_status cls_save(task *t, const char *path, const char *const *kv) {
    cls_task *C = t->impl;
    const char *all[16];
    int k = 0;
    for (; kv && kv[k] && k < 10; k++) all[k] = kv[k];
    all[k++] = "vocab", all[k++] = C->vocab_json;
    all[k++] = "classes", all[k++] = C->classes_json;
    all[k++] = "data-format", all[k++] = C->format;
    all[k] = NULL;
    return mega_cls_save_ex(C->m, path, all);
}

static void cls_describe(task *t, const train_args *a, FILE *f) {
    cls_task *C = t->impl;
    fprintf(f, "  task      classification%s%s%s\n", a->preset ? " (preset " : "", a->preset ? a->preset : "", a->preset ? ")" : "");
    fprintf(f, "  model     %zu parameters\n", mega_ps_trainable(t->ps));
    print_cls_config(f, mega_cls_get_config(C->m), "            ");
    fprintf(f, "  data      %s (%s): %d training examples (longest %d, %d truncated to %d), %d validation examples%s\n",
            C->train.path, C->format, C->n_train, C->train.max_len, C->train.n_truncated, a->seq_len, C->n_valid,
            C->valid_from_train ? " (held-out tail)" : "");
    char mb[512];
    fmt_run_memory(mb, sizeof mb, &C->mem, C->how);
    fprintf(f, "  memory    %s\n", mb);
}

static int imax(int a, int b) { return a > b ? a : b; }

/* the longest sequence a batch holds: the data's longest (training and validation), cut at --seq-len */
static int cls_longest(const cls_task *C, const train_args *a) {
    int T = imax(C->train.max_len, C->train.max_len2);
    if (C->valid.n) T = imax(T, imax(C->valid.max_len, C->valid.max_len2));
    return T < a->seq_len ? T : a->seq_len;
}

/* the model's positions against the longest sequence, before training: a pretrained encoder
 * (--init-from) or a checkpoint (--resume) keeps its max-positions, and a longer sequence would
 * otherwise stop the run at the first batch that holds it (a new model's is --seq-len at least) */
static int cls_positions_fit(const cls_task *C, const train_args *a, const mega_cls_config *c, const char *model_path) {
    const int T = cls_longest(C, a), P = c->patch > 0 ? T / (c->patch * c->patch) : T; /* positions: patches */
    char who[4200], what[96], fix[160];
    mega_block_context x;
    mega_block_context_of(&c->block, P, &x);
    snprintf(who, sizeof who, model_path ? "--resume" : "--init-from '%s'", a->init_from);
    snprintf(what, sizeof what, "the data's longest sequence, %d %s%s", P, c->patch > 0 ? "patches" : "tokens",
             T == a->seq_len ? " (at --seq-len)" : "");
    if (c->patch > 0) /* images are never cut */
        snprintf(fix, sizeof fix, "the images need a model with --max-positions %d or more", P);
    else if (model_path)
        snprintf(fix, sizeof fix, "the run cannot train on this data (--resume keeps its --seq-len): start a new run");
    else
        snprintf(fix, sizeof fix, "pretrain with --max-positions %d or more, or cut the longer sequences with --seq-len %d", P,
                 x.positions);
    return task_positions_fit(&c->block, P, who, model_path ? "the checkpoint's" : "the pretrained encoder's", what, fix);
}

/* bytes a dataset holds: its token pool and the per-example arrays */
static uint64_t dataset_bytes(const mega_dataset *d) {
    return (uint64_t)d->n_tokens * sizeof(uint16_t) + (uint64_t)d->n * (2 * sizeof(void *) + 4 * sizeof(int));
}

/* the run's memory from the model's config (the data is read: it sizes the batches): mega_cls_memory
 * (weights, gradients, AdamW moments, the forward/backward buffers of the longest batch, computed as
 * the reserve functions size them) and the datasets. resident: bytes already allocated (the data, a
 * resumed model's weights and gradients). */
static int cls_memory(cls_task *C, const train_args *a, const mega_cls_config *c, uint64_t resident) {
    const int T = cls_longest(C, a);
    mega_memory mm;
    const int B = task_forward_batch(a);
    if (mega_cls_memory(c, 1, B, T > 0 ? T : 1, &mm) != MEGA_OK) return cli_error("%s", mega_last_error());
    const uint64_t data = dataset_bytes(&C->train) + dataset_bytes(&C->valid);
    snprintf(C->how, sizeof C->how, "%s %d x %d", B < a->batch ? "micro-batch" : "batch", B, T);
    return memory_guard("this training run", C->how, "lower --batch, --seq-len or the model's size, or ", &mm, data,
                        resident + data, tool_max_memory, &C->mem);
}

static void cls_destroy(task *t) {
    cls_task *C = t->impl;
    mega_cls_free(C->m);
    mega_dataset_free(&C->train);
    mega_dataset_free(&C->valid);
    mega_batch_free(&C->batch);
    free(C->vidx), free(C->idx), free(C->vocab_json), free(C->classes_json);
    free(C);
    free(t);
}

/* ---- the official LRA text data (fairseq binarized: DIR/src-bin, DIR/label-bin; docs/interop.md) ---- */

/* whether path names the layout: DIR (with src-bin/; split `dflt`) or DIR/SPLIT, into dir and split */
static int lra_layout(const char *path, const char *dflt, char *dir, char *split, size_t cap) {
    char probe[8320];
    struct stat sb;
    if (!path || strlen(path) >= cap) return 0;
    snprintf(dir, cap, "%s", path);
    snprintf(split, cap, "%s", dflt);
    snprintf(probe, sizeof probe, "%s/src-bin", dir);
    if (stat(probe, &sb) == 0 && S_ISDIR(sb.st_mode)) return 1;
    char *slash = strrchr(dir, '/');
    if (!slash || !slash[1]) return 0;
    snprintf(split, cap, "%s", slash + 1);
    *slash = 0;
    snprintf(probe, sizeof probe, "%s/src-bin", dir);
    return stat(probe, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* a new model's dictionary: src-bin/dict.txt with the <CLS> the lra-text task appends
 * (LRATextTask.setup_task), stored as a converted LRA classifier stores it (with "cls") */
static int lra_new_dict(const char *dir, mega_fdict **d, char **json) {
    char path[4200];
    snprintf(path, sizeof path, "%s/src-bin/dict.txt", dir);
    mega_fdict *dd;
    if (mega_fdict_load_txt(path, MEGA_FDICT_WORD, &dd) != MEGA_OK) return cli_error("%s", mega_last_error());
    char *js = mega_fdict_to_json(dd);
    const int n = mega_fdict_size(dd);
    mega_fdict_free(dd);
    cJSON *o = js ? cJSON_Parse(js) : NULL;
    free(js);
    cJSON *t = o ? cJSON_GetObjectItemCaseSensitive(o, "tokens") : NULL;
    if (t) cJSON_AddItemToArray(t, cJSON_CreateString("<CLS>")), cJSON_AddNumberToObject(o, "cls", n);
    *json = t ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!*json) return cli_error("out of memory");
    if (mega_fdict_from_json(*json, d) != MEGA_OK) return cli_error("%s: %s", path, mega_last_error());
    return 0;
}

/* ---- raw speech ------------------------------------------------------------------------- */

/* the loader's options for a Speech Commands directory (the other formats ignore them); clips are
 * never cut (a clip longer than --seq-len is an error) */
static void speech_opts(const train_args *a, mega_data_opts *o) {
    o->all_words = a->words && !strcmp(a->words, "all");
    o->pad_short = a->pad_short;
    struct stat sb;
    if (a->data && !stat(a->data, &sb) && S_ISDIR(sb.st_mode)) o->max_len = 0;
}

static int speech_has_valid(const char *dir) {
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/validation_list.txt", dir);
    return !stat(p, &sb) && S_ISREG(sb.st_mode);
}

static int image_has_valid(const char *dir) {
    char p[4200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/input/valid.src", dir);
    return !stat(p, &sb) && S_ISREG(sb.st_mode);
}

/* The official speech data is normalised per sample index with the training split's statistics
 * (fairseq/data/audio/speech_commands_dataset.py normalise_data: (x - mean) / (std + 1e-5), the
 * unbiased std over the training clips at that index); the model stores them (input-norm) so that
 * a saved model reads raw clips. The first n_train examples are the training ones. */
static int set_input_stats(mega_cls *m, const mega_dataset *d, int n_train) {
    const int T = mega_cls_get_config(m)->input_norm;
    if (n_train < 2) return cli_error("%s: %d training clip(s): the input statistics need at least 2", d->path, n_train);
    double *s1 = calloc((size_t)T, sizeof *s1), *s2 = calloc((size_t)T, sizeof *s2);
    float *mean = malloc((size_t)T * sizeof *mean), *sd = malloc((size_t)T * sizeof *sd);
    int rc = !s1 || !s2 || !mean || !sd ? cli_error("out of memory") : 0;
    for (int i = 0; !rc && i < n_train; i++)
        for (int t = 0; t < d->len[i] && t < T; t++) s1[t] += d->val[i][t];
    for (int t = 0; !rc && t < T; t++) s1[t] /= n_train;
    for (int i = 0; !rc && i < n_train; i++)
        for (int t = 0; t < T; t++) {
            const double v = (t < d->len[i] ? d->val[i][t] : 0) - s1[t];
            s2[t] += v * v;
        }
    for (int t = 0; !rc && t < T; t++) mean[t] = (float)s1[t], sd[t] = (float)(sqrt(s2[t] / (n_train - 1)) + 1e-5);
    if (!rc && mega_cls_set_input_norm(m, mean, sd, T) != MEGA_OK) rc = cli_error("%s", mega_last_error());
    free(s1), free(s2), free(mean), free(sd);
    return rc;
}

/* the fields of the config that come from the data (the rest come straight from the flags) */
static void config_from_data(train_args *a, const mega_dataset *d, int nclasses) {
    mega_cls_config *c = &a->cls;
    if (c->block.max_positions < a->seq_len) c->block.max_positions = a->seq_len;
    c->embedding = d->vocab.real ? MEGA_EMBED_REAL : MEGA_EMBED_TOKEN;
    if (!d->val) c->vocab_size = d->vocab.size, c->padding_idx = d->vocab.pad; /* real values: no ids */
    c->classes = nclasses;
    c->two_tower = d->pairs;
    if (c->patch > 0) c->image_width = d->cols;
    c->input_norm = d->audio_rate ? d->max_len : 0; /* speech: per-index statistics (set_input_stats) */
}

/* --data (and --valid, else the valid split beside it) in the LRA layout, through dict: the
 * model's dictionary (a resumed run's) or a new one from src-bin/dict.txt */
static int lra_load(cls_task *C, const train_args *a, const char *dir, const char *split, mega_fdict **dict, int pool_cls) {
    if (!*dict && lra_new_dict(dir, dict, &C->vocab_json)) return 1;
    mega_data_opts o;
    memset(&o, 0, sizeof o);
    o.max_len = a->seq_len;
    if (mega_dataset_load_lra_bin(dir, split, *dict, pool_cls, &o, &C->train) != MEGA_OK) return cli_error("%s", mega_last_error());
    char vdir[4096], vsplit[4096], probe[8400];
    int have = 0;
    if (a->valid) {
        if (!lra_layout(a->valid, "valid", vdir, vsplit, sizeof vdir))
            return cli_error("--valid '%s': --data is LRA binarized data, so --valid must be too (DIR with src-bin/ and "
                             "label-bin/, split valid, or DIR/SPLIT)", a->valid);
        have = 1;
    } else if (strcmp(split, "valid")) {
        snprintf(probe, sizeof probe, "%s/label-bin/valid.idx", dir);
        struct stat sb;
        have = stat(probe, &sb) == 0;
        snprintf(vdir, sizeof vdir, "%s", dir), snprintf(vsplit, sizeof vsplit, "valid");
    }
    if (have && mega_dataset_load_lra_bin(vdir, vsplit, *dict, pool_cls, &o, &C->valid) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    if (have && (C->valid.classes.n != C->train.classes.n || C->valid.pairs != C->train.pairs))
        return cli_error("--valid '%s/%s': other labels or another number of texts than --data", vdir, vsplit);
    C->format = "text"; /* not read back: the fairseq vocabulary says how to read the model's data */
    return 0;
}

/* the classes of a resumed run must be the label dictionary's, in order (more outputs: --classes) */
static int lra_same_classes(const mega_classes *prev, const mega_classes *now, const char *data) {
    int same = prev->n >= now->n;
    for (int i = 0; same && i < now->n; i++) same = !strcmp(prev->names[i], now->names[i]);
    return same ? 0 : cli_error("--data '%s': label-bin/dict.txt's labels are not the run's classes in order", data);
}

/* a resumed run's classes and vocabulary: bytes/ListOps (pv), or the fairseq dictionary of a run
 * on the LRA layout (dict, and its JSON kept as the model's "vocab"); the data must be of its kind */
static int resume_meta(cls_task *C, const train_args *a, const char *model_path, int lra, mega_classes *prev, mega_vocab *pv,
                       mega_fdict **dict) {
    mega_st_file *f;
    if (mega_st_open(model_path, &f) != MEGA_OK) return cli_error("%s", mega_last_error());
    const char *cj = mega_st_meta(f, "classes"), *vj = mega_st_meta(f, "vocab");
    const int fs = vj && strstr(vj, "\"fairseq\"");
    int bad = !cj || !vj || mega_classes_from_json(cj, prev) != MEGA_OK ||
              (fs ? mega_fdict_from_json(vj, dict) : mega_vocab_from_json(vj, pv)) != MEGA_OK;
    if (!bad && fs && !(C->vocab_json = strdup(vj))) bad = 1;
    mega_st_close(f);
    if (bad) return cli_error("%s: no readable vocabulary/classes in the metadata (not a classifier checkpoint)", model_path);
    if (fs != lra)
        return cli_error(fs ? "--data '%s': the run's model reads LRA binarized data (a directory with src-bin/ and label-bin/)"
                            : "--data '%s' is LRA binarized data, but the run's model reads text", a->data);
    return 0;
}

/* the training data against the flags: clips and images are never cut, real-valued embeddings
 * and patches need real-valued pixels (a resumed run's patches are the model's) */
static int data_fits(const train_args *a, const mega_dataset *d, int have_prev) {
    if ((d->audio_rate || d->pixel_lines) && d->max_len > a->seq_len)
        return cli_error("%s: %s of %d %s are longer than the model's length (--seq-len %d)", a->data, d->audio_rate ? "clips" : "images",
                         d->max_len, d->audio_rate ? "samples" : "pixels", a->seq_len);
    if (a->cls.embedding == MEGA_EMBED_REAL && !d->vocab.real)
        return cli_error("--embedding real needs real-valued inputs (IDX images, --format real or speech)");
    if (!have_prev && a->cls.patch > 0 && (!d->rows || !d->vocab.real))
        return cli_error("--patch %d: patches are made of images read as real-valued pixels (IDX or pathfinder data, --embedding real)",
                         a->cls.patch);
    if (!have_prev && a->cls.patch > 0 && (d->rows % a->cls.patch || d->cols % a->cls.patch))
        return cli_error("--patch %d does not divide the %dx%d images", a->cls.patch, d->rows, d->cols);
    return 0;
}

/* ---- --init-from: fine-tuning a pretrained encoder (docs/pretraining.md) ------------------------- */

/* the pretrained model of --init-from, checked against this run's encoder (init_from_open); byte
 * data adopts its vocabulary (the mask row stays unused) */
static int init_source(train_args *a, mega_cls **src) {
    if (init_from_open(a->init_from, NULL, 0, src)) return 1;
    /* a preset sets its fields without flags: they stand, and are checked */
    if (!a->preset) init_from_adopt(a->flags, *src, &a->cls.block, &a->cls.layers);
    mega_cls_config mine = a->cls;
    mega_cls_config_resolve(&mine);
    if (init_from_verify(a->init_from, &mine.block, mine.layers, src)) return 1;
    const mega_cls_config *s = mega_cls_get_config(*src);
    if (a->cls.embedding == MEGA_EMBED_TOKEN && s->embedding == MEGA_EMBED_TOKEN && s->padding_idx == a->cls.padding_idx &&
        s->vocab_size > a->cls.vocab_size)
        a->cls.vocab_size = s->vocab_size;
    return 0;
}

/* a new run's model: checked against the memory, drawn with the run's seed, then (--init-from)
 * the pretrained weights; the speech statistics (0, or 1 after the error) */
static int new_model(cls_task *C, train_args *a) {
    mega_cls *src = NULL; /* --init-from: the pretrained model */
    if (a->init_from && init_source(a, &src)) return 1;
    mega_cls_config mine = a->cls;
    mega_cls_config_resolve(&mine);
    if (src && cls_positions_fit(C, a, &mine, NULL)) return mega_cls_free(src), 1;
    /* refuse a configuration that does not fit before allocating it */
    if (cls_memory(C, a, &a->cls, 0)) return mega_cls_free(src), 1;
    const mega_load_opts lo = {0, 1}; /* gradients; drawn once below, with the run's seed */
    if (mega_cls_create_ex(&a->cls, &lo, &C->m) != MEGA_OK) return mega_cls_free(src), cli_error("%s", mega_last_error());
    mega_cls_init_params(C->m, (uint64_t)a->seed);
    const int bad = src && init_from_load(a->init_from, mega_cls_paramset(C->m), mega_cls_paramset(src), NULL);
    mega_cls_free(src);
    if (bad) return 1;
    return C->train.audio_rate && set_input_stats(C->m, &C->train, C->n_train);
}

int cls_task_new(train_args *a, const char *model_path, task **out) {
    *out = NULL;
    static const task CLS = {.metric = "acc", .unit = "tok/s", .step = cls_step,
                             .validate = cls_validate, .save = cls_save, .describe = cls_describe, .destroy = cls_destroy};
    task *t = task_create(&CLS, sizeof(cls_task));
    if (!t) return 1;
    cls_task *C = t->impl;
    mega_classes prev = {0, NULL};
    mega_vocab pv;
    int have_prev = 0;
    char ldir[4096], lsplit[4096];
    const int lra = lra_layout(a->data, "train", ldir, lsplit, sizeof ldir);
    mega_fdict *dict = NULL; /* LRA binarized data: the model's fairseq dictionary */
    if (model_path) {
        /* resume: the vocabulary and the classes come from the checkpoint */
        if (resume_meta(C, a, model_path, lra, &prev, &pv, &dict)) goto fail;
        have_prev = 1;
        if (mega_cls_load(model_path, &C->m) != MEGA_OK) goto fail_msg;
    }
    mega_data_opts o;
    memset(&o, 0, sizeof o);
    o.max_len = a->seq_len;
    o.keep_parens = have_prev ? pv.keep_parens : a->keep_parens;
    o.real = have_prev ? pv.real : a->cls.embedding == MEGA_EMBED_REAL;
    o.mean = have_prev ? pv.mean : a->pixel_mean;
    o.std = have_prev ? pv.std : a->pixel_std;
    o.classes = have_prev ? &prev : NULL;
    mega_data_format fmt = MEGA_DATA_AUTO;
    mega_data_format_parse(a->format, &fmt); /* the flag table allows only the known names */
    speech_opts(a, &o);
    if (lra) {
        if (lra_load(C, a, ldir, lsplit, &dict, (C->m ? mega_cls_get_config(C->m)->pool : a->cls.pool) == MEGA_POOL_CLS)) goto fail;
        if (have_prev && lra_same_classes(&prev, &C->train.classes, a->data)) goto fail;
    } else if (mega_dataset_load(fmt, a->data, a->images, a->labels, &o, &C->train) != MEGA_OK) goto fail_msg;
    if (!lra) C->format = mega_data_format_name(mega_dataset_format(&C->train));
    if (data_fits(a, &C->train, have_prev)) goto fail;
    /* validation: --valid / --valid-images, else the last --valid-fraction of the examples */
    mega_data_opts vo = o;
    vo.classes = &C->train.classes;
    C->n_train = C->train.n;
    /* a Speech Commands directory: its own validation clips (validation_list.txt) */
    /* the LRA image layout: its valid split (DIR/input/valid.src) when --data is the directory */
    const int speech_valid = !lra && !a->valid && !a->valid_images &&
                             ((C->train.audio_rate && speech_has_valid(a->data)) || (C->train.pixel_lines && image_has_valid(a->data)));
    /* --valid naming a Speech Commands directory: its validation_list.txt clips (split 1), as the
     * corpus's layout splits it, not the clips its lists leave to training */
    struct stat vsb;
    vo.split = speech_valid || (C->train.audio_rate && a->valid && !stat(a->valid, &vsb) && S_ISDIR(vsb.st_mode));
    if (lra ? C->valid.n > 0 : a->valid || a->valid_images || speech_valid) {
        if (!lra && mega_dataset_load(fmt, speech_valid ? a->data : a->valid, a->valid_images, a->valid_labels, &vo, &C->valid) != MEGA_OK)
            goto fail_msg;
        C->n_valid = C->valid.n;
        C->vidx = malloc((size_t)C->n_valid * sizeof(int));
        for (int i = 0; C->vidx && i < C->n_valid; i++) C->vidx[i] = i;
    } else if (a->valid_fraction > 0 && C->train.n >= 2) {
        const int nv = task_valid_count(C->train.n, a->valid_fraction);
        C->n_train = C->train.n - nv, C->n_valid = nv, C->valid_from_train = 1;
        C->vidx = malloc((size_t)nv * sizeof(int));
        for (int i = 0; C->vidx && i < nv; i++) C->vidx[i] = C->n_train + i;
    }
    if (C->n_valid && !C->vidx) {
        cli_error("out of memory");
        goto fail;
    }
    int nclasses = C->train.classes.n;
    if (a->classes > 0) {
        if (a->classes < nclasses) {
            cli_error("--classes %d, but the training labels have %d classes", a->classes, nclasses);
            goto fail;
        }
        nclasses = a->classes;
    }
    if (nclasses < 2) {
        cli_error("the training data has a single class; classification needs at least 2");
        goto fail;
    }
    config_from_data(a, &C->train, nclasses);
    if (!C->m) {
        if (new_model(C, a)) goto fail;
    } else if (cls_memory(C, a, mega_cls_get_config(C->m), 2 * (uint64_t)mega_ps_total(mega_cls_paramset(C->m)) * sizeof(mega_real))) {
        goto fail;
    }
    if (have_prev && a->model_flags_seen) {
        int n;
        const mega_field *f = mega_cls_config_fields(&n);
        mega_cls_config_resolve(&a->cls); /* as the model did */
        if (resume_config_differs(a, f, n, &a->cls, mega_cls_get_config(C->m), offsetof(mega_cls_config, block))) goto fail;
    }
    if (model_path && cls_positions_fit(C, a, mega_cls_get_config(C->m), model_path)) goto fail;
    if (!C->vocab_json) C->vocab_json = mega_vocab_to_json(&C->train.vocab);
    C->classes_json = mega_classes_to_json(&C->train.classes);
    C->idx = malloc((size_t)(a->batch > 0 ? a->batch : 1) * sizeof(int));
    if (!C->vocab_json || !C->classes_json || !C->idx) {
        cli_error("out of memory");
        goto fail;
    }
    t->data_hash = mega_dataset_fingerprint(&C->train), t->data_size = (uint64_t)C->train.n;
    t->ps = mega_cls_paramset(C->m);
    t->batchnorm = mega_cls_get_config(C->m)->block.norm_type == MEGA_NORM_BATCH;
    /* batchnorm: the statistics of the whole batch, over the ranks' shards */
    if (dist_size() > 1) mega_cls_set_batch_sync(C->m, dist_sum_cb, NULL);
    mega_classes_free(&prev), mega_fdict_free(dict);
    *out = t;
    return 0;
fail_msg:
    cli_error("%s", mega_last_error());
fail:
    mega_classes_free(&prev), mega_fdict_free(dict);
    cls_destroy(t);
    return 1;
}

