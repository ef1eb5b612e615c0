/* `mega train` task "lm": byte-level causal language model on random contiguous windows. */
#include "dist.h"
#include "task.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    mega_lm *m;
    mega_bytes data, valid;
    const uint8_t *train_txt, *val_txt;
    size_t ntrain, nval;
    int32_t *tok, *tgt;
    run_memory mem; /* what the run needs (printed by describe) */
    char how[64];
} lm_task;

static int lm_step(task *t, const train_args *a, uint64_t *rng, uint64_t key, int shard, int nshards, double *loss,
                   double *metric, int64_t *units) {
    lm_task *L = t->impl;
    if (mega_text_windows(L->train_txt, L->ntrain, a->batch, a->seq_len, rng, L->tok, L->tgt) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    int r0, r1;
    task_shard_rows(a->batch, shard, nshards, &r0, &r1);
    *loss = *metric = 0, *units = 0;
    if (r1 == r0) return 0;
    int64_t cnt;
    mega_lm_run run = {1, key};
    const size_t o = (size_t)r0 * a->seq_len;
    if (mega_lm_forward(L->m, L->tok + o, L->tgt + o, r1 - r0, a->seq_len, &run, loss, &cnt) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    if (!isfinite(*loss)) return 0; /* the loop reports it */
    /* every window counts seq_len targets: the shard's share of the batch's targets */
    const double part = (double)(r1 - r0) / (double)a->batch;
    mega_lm_backward(L->m, part);
    *loss *= part;
    *metric = *loss / M_LN2;
    *units = cnt;
    return 0;
}

static int lm_validate(task *t, const train_args *a, int64_t max_units, double *loss, double *metric, int64_t *count) {
    lm_task *L = t->impl;
    if (!L->val_txt) return 1;
    const mega_tokens val = {L->val_txt, NULL, L->nval};
    if (mega_lm_eval_windows(L->m, &val, a->batch, a->seq_len, (size_t)max_units, loss, count) != MEGA_OK)
        return cli_error("%s", mega_last_error()), -1;
    *metric = *loss / M_LN2;
    return 0;
}

static mega_status lm_save(task *t, const char *path, const char *const *kv) {
    return mega_lm_save_ex(((lm_task *)t->impl)->m, path, kv);
}

static void lm_describe(task *t, const train_args *a, FILE *f) {
    lm_task *L = t->impl;
    fprintf(f, "  task      language model (bytes)\n");
    fprintf(f, "  model     %zu parameters\n", mega_lm_num_params(L->m));
    print_lm_config(f, mega_lm_get_config(L->m), "            ");
    fprintf(f, "  data      %s: %zu training bytes, %zu validation bytes%s\n", a->data, L->ntrain, L->nval,
            a->valid ? " (--valid)" : L->val_txt ? " (held-out tail)" : "");
    char mb[512];
    fmt_run_memory(mb, sizeof mb, &L->mem, L->how);
    fprintf(f, "  memory    %s\n", mb);
}

/* the run's memory from the model's config (before its buffers are reserved and the data read):
 * mega_lm_memory (weights, gradients, AdamW moments, the forward/backward buffers of a batch,
 * computed as mega_lm_reserve sizes them), the text files and the batch's token arrays.
 * resident: bytes of it already allocated (a resumed model's weights and gradients). */
static int lm_memory(lm_task *L, const train_args *a, const mega_lm_config *c, uint64_t resident) {
    mega_memory mm;
    if (mega_lm_memory(c, 1, a->batch, a->seq_len, &mm) != MEGA_OK) return cli_error("%s", mega_last_error());
    const uint64_t data = file_size(a->data) + (a->valid ? file_size(a->valid) : 0) +
                          2ull * (uint64_t)a->batch * a->seq_len * sizeof(int32_t); /* the batch's tokens */
    snprintf(L->how, sizeof L->how, "batch %d x %d", a->batch, a->seq_len);
    return memory_guard("this training run", L->how, "lower --batch, --seq-len or the model's size, or ", &mm, data,
                        resident, tool_max_memory, &L->mem);
}

static void lm_destroy(task *t) {
    lm_task *L = t->impl;
    mega_lm_free(L->m);
    mega_bytes_free(&L->data), mega_bytes_free(&L->valid), free(L->tok), free(L->tgt);
    free(L);
    free(t);
}

/* the lm task's own flags: the config flags that also have another name (its
 * row in tasks.c) */
int lm_task_flags(train_args *a, cli_flag *fl, int n) {
    const cli_flag lf[] = {
        {"postnorm", F_CLEAR, &a->lm.block.prenorm, "normalize after each sublayer (= --prenorm=false)", NULL, 1, 0, 0},
        {"no-scale-embedding", F_CLEAR, &a->lm.scale_embedding, "= --scale-embedding=false", NULL, 1, 0, 0},
        {"no-affine-final-norm", F_CLEAR, &a->lm.final_norm_affine, "= --final-norm-affine=false", NULL, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof lf / sizeof *lf; i++) fl[n++] = lf[i];
    return n;
}

int lm_task_new(train_args *a, const char *model_path, task **out) {
    *out = NULL;
    static const task LM = {.metric = "bpb", .unit = "tok/s", .step = lm_step, .validate = lm_validate,
                            .save = lm_save, .describe = lm_describe, .destroy = lm_destroy};
    task *t = task_create(&LM, sizeof(lm_task));
    if (!t) return 1;
    lm_task *L = t->impl;
    if (model_path) {
        /* the file is checked against its config before anything large is allocated */
        if (mega_lm_load(model_path, &L->m) != MEGA_OK) goto fail_msg;
        /* model flags given with --resume must describe the checkpoint */
        if (a->model_flags_seen) {
            int n;
            const mega_field *f = mega_lm_config_fields(&n);
            mega_lm_config_resolve(&a->lm); /* as the model did */
            if (resume_config_differs(a, f, n, &a->lm, mega_lm_get_config(L->m), offsetof(mega_lm_config, block))) goto fail;
        }
        const size_t w = mega_lm_param_total(L->m) * sizeof(mega_real);
        if (lm_memory(L, a, mega_lm_get_config(L->m), 2 * (uint64_t)w)) goto fail;
    } else {
        /* refuse a configuration that does not fit before allocating it */
        if (lm_memory(L, a, &a->lm, 0)) goto fail;
        const mega_load_opts o = {0, 1}; /* gradients; drawn once below, with the run's seed */
        if (mega_lm_create_ex(&a->lm, &o, &L->m) != MEGA_OK) goto fail_msg;
        mega_lm_init_params(L->m, (uint64_t)a->seed);
    }
    if (mega_read_file(a->data, "--data", &L->data) != MEGA_OK) goto fail_msg;
    L->train_txt = L->data.data, L->ntrain = L->data.n;
    if (a->valid) {
        if (mega_read_file(a->valid, "--valid", &L->valid) != MEGA_OK) goto fail_msg;
        L->val_txt = L->valid.data, L->nval = L->valid.n;
    } else if (a->valid_fraction > 0) {
        L->nval = (size_t)((double)L->data.n * a->valid_fraction);
        L->ntrain = L->data.n - L->nval;
        L->val_txt = L->data.data + L->ntrain;
    }
    if (L->val_txt && L->nval < 2) L->val_txt = NULL, L->nval = 0;
    if (L->ntrain < (size_t)a->seq_len + 1) {
        cli_error("training text has %zu bytes, fewer than --seq-len + 1 = %d (use a shorter --seq-len)", L->ntrain, a->seq_len + 1);
        goto fail;
    }
    t->data_hash = mega_fnv1a64(L->data.data, L->data.n), t->data_size = L->data.n;
    L->tok = malloc((size_t)a->batch * a->seq_len * sizeof(int32_t));
    L->tgt = malloc((size_t)a->batch * a->seq_len * sizeof(int32_t));
    if (!L->tok || !L->tgt) {
        cli_error("out of memory");
        goto fail;
    }
    if (mega_lm_reserve(L->m, a->batch, a->seq_len) != MEGA_OK) goto fail_msg;
    t->ps = mega_lm_paramset(L->m);
    t->batchnorm = mega_lm_get_config(L->m)->block.norm_type == MEGA_NORM_BATCH;
    /* batchnorm: the statistics of the whole batch, over the ranks' shards */
    if (dist_size() > 1) mega_lm_set_batch_sync(L->m, dist_sum_cb, NULL);
    *out = t;
    return 0;
fail_msg:
    cli_error("%s", mega_last_error());
fail:
    lm_destroy(t);
    return 1;
}
