/* `mega train --task mlm`: masked-language-model pretraining of a bidirectional encoder over bytes
 * (fairseq's masked_lm task with RoBERTa's head; docs/pretraining.md). The model is a classifier's
 * encoder (mega_cls) with mlm = 1: the same names for the embedding and the blocks, so that
 * `mega train --task classify --init-from RUN` starts from them. Vocabulary: the 256 bytes, the
 * padding 256 and the mask 257. */
#include "dist.h"
#include "task.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { MLM_VOCAB = 258, MLM_PAD = 256, MLM_MASK = 257 };
/* the validation masks: one fixed stream, so every validation scores the same corruption */
#define MLM_VALID_SEED 0x6d6c6du

typedef struct {
    mega_cls *m;
    mega_bytes data, valid;
    const uint8_t *train_txt, *val_txt;
    size_t ntrain, nval;
    int32_t *tok, *tgt, *len, *scratch;
    char valid_from[24];
    run_memory mem;
    char how[64];
} mlm_task;

static int mlm_step(task *t, const train_args *a, uint64_t *rng, uint64_t key, int shard, int nshards, double *loss,
                    double *metric, int64_t *units) {
    mlm_task *L = t->impl;
    const int B = a->batch, T = a->seq_len;
    /* the whole batch is drawn with *rng (windows, then each row's masks: dynamic masking) */
    if (mega_text_windows(L->train_txt, L->ntrain, B, T, rng, L->tok, L->scratch) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    int64_t total = 0, mine = 0;
    int r0, r1;
    task_shard_rows(B, shard, nshards, &r0, &r1);
    for (int b = 0; b < B; b++) {
        const int k = mega_mlm_mask(L->tok + (size_t)b * T, L->tgt + (size_t)b * T, T, 0.15, MLM_MASK, 256, rng);
        total += k, mine += b >= r0 && b < r1 ? k : 0;
        L->len[b] = T;
    }
    *loss = *metric = 0, *units = 0;
    if (r1 == r0 || mine == 0) return 0;
    const mega_cls_input in = {L->tok + (size_t)r0 * T, NULL, L->len + r0, T};
    mega_lm_run run = {1, key};
    int64_t ok, cnt;
    if (mega_cls_mlm_forward(L->m, &in, r1 - r0, L->tgt + (size_t)r0 * T, &run, loss, &ok, &cnt) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    if (!isfinite(*loss)) return 0;
    /* the loss is a mean over the batch's masked positions: this shard's share of them */
    const double part = (double)mine / (double)total;
    mega_cls_backward(L->m, part);
    *loss *= part;
    *metric = (double)ok / (double)total;
    *units = (int64_t)(r1 - r0) * T;
    return 0;
}

static int mlm_validate(task *t, const train_args *a, int64_t max_units, double *loss, double *metric, int64_t *count) {
    mlm_task *L = t->impl;
    if (!L->val_txt) return 1;
    int64_t ok, cnt;
    if (mega_mlm_evaluate(L->m, L->val_txt, L->nval, a->batch, a->seq_len, MLM_VALID_SEED, (size_t)(max_units > 0 ? max_units : 0),
                          NULL, NULL, loss, &ok, &cnt) != MEGA_OK)
        return cli_error("%s", mega_last_error()), -1;
    *metric = cnt ? (double)ok / (double)cnt : 0;
    *count = cnt;
    return 0;
}

static mega_status mlm_save(task *t, const char *path, const char *const *kv) {
    mlm_task *L = t->impl;
    /* the byte vocabulary (what mega info reads of a classifier's file) */
    const mega_vocab v = mega_vocab_bytes();
    char *vj = mega_vocab_to_json(&v);
    if (!vj) return MEGA_ERR_OOM;
    const char *all[16];
    int k = 0;
    for (; kv && kv[k] && k < 10; k++) all[k] = kv[k];
    all[k++] = "vocab", all[k++] = vj;
    all[k++] = "data-format", all[k++] = "text";
    all[k] = NULL;
    const mega_status st = mega_cls_save_ex(L->m, path, all);
    free(vj);
    return st;
}

static void mlm_describe(task *t, const train_args *a, FILE *f) {
    mlm_task *L = t->impl;
    fprintf(f, "  task      masked-LM pretraining (bytes; 15%% of positions predicted: 80%% masked, 10%% random, 10%% kept)\n");
    fprintf(f, "  model     %zu parameters\n", mega_ps_trainable(t->ps));
    print_cls_config(f, mega_cls_get_config(L->m), "            ");
    fprintf(f, "  data      %s: %zu training bytes, %zu validation bytes%s%s%s\n", a->data, L->ntrain, L->nval,
            L->valid_from[0] ? " (" : "", L->valid_from, L->valid_from[0] ? ")" : "");
    char mb[512];
    fmt_run_memory(mb, sizeof mb, &L->mem, L->how);
    fprintf(f, "  memory    %s\n", mb);
}

static void mlm_destroy(task *t) {
    mlm_task *L = t->impl;
    mega_cls_free(L->m);
    mega_bytes_free(&L->data), mega_bytes_free(&L->valid);
    free(L->tok), free(L->tgt), free(L->len), free(L->scratch);
    free(L);
    free(t);
}

/* the text of --data and --valid (the held-out tail of --data without --valid) */
static int mlm_load(mlm_task *L, const train_args *a) {
    if (mega_fbin_prefix(a->data, NULL, 0))
        return cli_error("--data '%s' is a fairseq binarized dataset: --task mlm reads text (bytes)", a->data);
    if (task_text_split(a, &L->data, &L->valid, &L->train_txt, &L->ntrain, &L->val_txt, &L->nval, L->valid_from)) return 1;
    if (L->ntrain < (size_t)a->seq_len + 1)
        return cli_error("training text has %zu bytes, fewer than --seq-len + 1 = %d (use a shorter --seq-len)", L->ntrain,
                         a->seq_len + 1);
    return 0;
}

static int mlm_memory(mlm_task *L, const train_args *a, const mega_cls_config *c, uint64_t resident) {
    mega_memory mm;
    if (mega_cls_memory(c, 1, a->batch, a->seq_len, &mm) != MEGA_OK) return cli_error("%s", mega_last_error());
    const uint64_t data = (uint64_t)L->data.n + L->valid.n + 4ull * (uint64_t)a->batch * a->seq_len * sizeof(int32_t);
    snprintf(L->how, sizeof L->how, "batch %d x %d", a->batch, a->seq_len);
    return memory_guard("this training run", L->how, "lower --batch, --seq-len or the model's size, or ", &mm, data,
                        resident + data, tool_max_memory, &L->mem);
}

int mlm_task_flags(train_args *a, cli_flag *fl, int n) {
    const cli_flag mf[] = {
        {"postnorm", F_CLEAR, &a->cls.block.prenorm, "normalize after each sublayer (= --prenorm=false)", NULL, 1, 0, 0},
        {"no-affine-final-norm", F_CLEAR, &a->cls.final_norm_affine, "= --final-norm-affine=false", NULL, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof mf / sizeof *mf; i++) fl[n++] = mf[i];
    return n;
}

/* classify's defaults, with fairseq masked_lm's tokens_per_sample 512 and the language model's
 * 65,536 validation bytes */
void mlm_apply_defaults(train_args *a) {
    cls_apply_classify_defaults(a);
    a->seq_len = 512, a->eval_tokens = 65536;
}

int mlm_task_new(train_args *a, const char *model_path, task **out) {
    *out = NULL;
    static const task MLM = {.metric = "acc", .unit = "tok/s", .valid_unit = "masked bytes", .step = mlm_step,
                             .validate = mlm_validate, .save = mlm_save, .describe = mlm_describe, .destroy = mlm_destroy};
    task *t = task_create(&MLM, sizeof(mlm_task));
    if (!t) return 1;
    mlm_task *L = t->impl;
    if (mlm_load(L, a)) goto fail;
    mega_cls_config *c = &a->cls;
    c->embedding = MEGA_EMBED_TOKEN, c->vocab_size = MLM_VOCAB, c->padding_idx = MLM_PAD, c->mlm = 1;
    c->two_tower = 0, c->patch = 0, c->input_norm = 0;
    if (c->block.max_positions < a->seq_len) c->block.max_positions = a->seq_len;
    if (model_path) {
        if (mega_cls_load(model_path, &L->m) != MEGA_OK) goto fail_msg;
        if (!mega_cls_get_config(L->m)->mlm) {
            cli_error("--resume: '%s' is a classifier, not a masked-LM model", model_path);
            goto fail;
        }
        if (a->model_flags_seen) {
            int n;
            const mega_field *f = mega_cls_config_fields(&n);
            mega_cls_config_resolve(c);
            if (resume_config_differs(a, f, n, c, mega_cls_get_config(L->m), offsetof(mega_cls_config, block))) goto fail;
        }
        if (mlm_memory(L, a, mega_cls_get_config(L->m), 2 * (uint64_t)mega_ps_total(mega_cls_paramset(L->m)) * sizeof(mega_real)))
            goto fail;
    } else {
        if (mlm_memory(L, a, c, 0)) goto fail;
        const mega_load_opts lo = {0, 1};
        if (mega_cls_create_ex(c, &lo, &L->m) != MEGA_OK) goto fail_msg;
        mega_cls_init_params(L->m, (uint64_t)a->seed);
    }
    const size_t n = (size_t)a->batch * a->seq_len;
    L->tok = malloc(n * sizeof(int32_t)), L->tgt = malloc(n * sizeof(int32_t)), L->scratch = malloc(n * sizeof(int32_t));
    L->len = malloc((size_t)a->batch * sizeof(int32_t));
    if (!L->tok || !L->tgt || !L->scratch || !L->len) {
        cli_error("out of memory");
        goto fail;
    }
    t->data_hash = mega_fnv1a64(L->data.data, L->data.n), t->data_size = L->data.n;
    t->ps = mega_cls_paramset(L->m);
    t->batchnorm = mega_cls_get_config(L->m)->block.norm_type == MEGA_NORM_BATCH;
    if (dist_size() > 1) mega_cls_set_batch_sync(L->m, dist_sum_cb, NULL);
    *out = t;
    return 0;
fail_msg:
    cli_error("%s", mega_last_error());
fail:
    mlm_destroy(t);
    return 1;
}

/* ---- mega eval of a masked-LM model ---------------------------------------------------------- */

int mlm_model_file(const char *path) {
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return 0;
    mega_cls_config c;
    const char *js = mega_st_meta(f, "config");
    const int yes = js && mega_cls_config_from_json(js, &c) == MEGA_OK && c.mlm;
    mega_st_close(f);
    return yes;
}

int mlm_eval(const char *model, const char *data, int seq_len, int batch, int64_t max_bytes, int quiet) {
    char p[4096];
    if (!model_path(model, p, sizeof p)) return cli_error("%s", mega_last_error()), 2;
    mega_cls *m;
    const mega_load_opts lo = {1, 0};
    if (mega_cls_load_ex(p, &lo, &m) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    mega_bytes b = {NULL, 0, 0};
    if (mega_read_file(data, "--data", &b) != MEGA_OK) return mega_cls_free(m), cli_error("%s", mega_last_error()), 2;
    const int T = seq_len > 0 ? seq_len : 512;
    double loss = 0;
    int64_t ok = 0, cnt = 0;
    const double t0 = now_sec();
    (void)quiet;
    const mega_status st = mega_mlm_evaluate(m, b.data, b.n, batch, T, MLM_VALID_SEED, (size_t)max_bytes, NULL, NULL, &loss, &ok, &cnt);
    if (st == MEGA_OK)
        printf("masked accuracy %.4f (%lld/%lld) | loss %.4f | bits %.4f per masked byte | %zu bytes in windows of %d, %.1f s\n",
               cnt ? (double)ok / (double)cnt : 0, (long long)ok, (long long)cnt, loss, loss / M_LN2,
               max_bytes > 0 && (size_t)max_bytes < b.n ? (size_t)max_bytes : b.n, T, now_sec() - t0);
    else
        cli_error("%s", mega_last_error());
    mega_bytes_free(&b);
    mega_cls_free(m);
    return st == MEGA_OK ? 0 : 2;
}
