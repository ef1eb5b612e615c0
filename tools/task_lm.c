/* `mega train` task "lm": causal language model on random contiguous windows of bytes, or of the
 * ids of a fairseq binarized dataset (data-bin/X/train, numbered by its dict.txt; docs/interop.md). */
#include "dist.h"
#include "task.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    mega_lm *m;
    mega_bytes data, valid;
    const uint8_t *train_txt, *val_txt;
    size_t ntrain, nval;
    /* a fairseq binarized dataset: its dictionary (the model's vocabulary, stored as "vocab"), the
     * training and validation ids (each a stream that starts with </s>, as `mega eval` reads one) */
    mega_fdict *dict;
    char *vocab_json;
    int32_t *ids, *vids;
    size_t nids; /* ids of --data (training ids and the held-out tail) */
    const int32_t *train_ids, *val_ids;
    char valid_from[24]; /* where the validation ids come from ("valid split", ...) */
    int32_t *tok, *tgt;
    run_memory mem; /* what the run needs (printed by describe) */
    char how[64];
} lm_task;

static int lm_step(task *t, const train_args *a, uint64_t *rng, uint64_t key, int shard, int nshards, double *loss,
                   double *metric, int64_t *units) {
    lm_task *L = t->impl;
    if ((L->train_ids ? mega_id_windows(L->train_ids, L->ntrain, a->batch, a->seq_len, rng, L->tok, L->tgt)
                      : mega_text_windows(L->train_txt, L->ntrain, a->batch, a->seq_len, rng, L->tok, L->tgt)) != MEGA_OK)
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
    if (!L->val_txt && !L->val_ids) return 1;
    const mega_tokens val = {L->val_ids ? NULL : L->val_txt, L->val_ids, L->nval};
    if (mega_lm_eval_windows(L->m, &val, task_forward_batch(a), a->seq_len, (size_t)max_units, loss, count) != MEGA_OK)
        return cli_error("%s", mega_last_error()), -1;
    *metric = *loss / M_LN2;
    return 0;
}

static mega_status lm_save(task *t, const char *path, const char *const *kv) {
    lm_task *L = t->impl;
    if (!L->vocab_json) return mega_lm_save_ex(L->m, path, kv);
    const char *all[16];
    int k = 0;
    for (; kv && kv[k] && k < 12; k++) all[k] = kv[k];
    all[k++] = "vocab", all[k++] = L->vocab_json; /* read back by eval, generate, info and --resume */
    all[k] = NULL;
    return mega_lm_save_ex(L->m, path, all);
}

static void lm_describe(task *t, const train_args *a, FILE *f) {
    lm_task *L = t->impl;
    if (L->dict)
        fprintf(f, "  task      language model (fairseq dictionary: %d tokens, %s unit)\n", mega_fdict_size(L->dict),
                mega_fdict_get_unit(L->dict) == MEGA_FDICT_BYTE ? "byte" : "word");
    else
        fprintf(f, "  task      language model (bytes)\n");
    fprintf(f, "  model     %zu parameters\n", mega_lm_num_params(L->m));
    print_lm_config(f, mega_lm_get_config(L->m), "            ");
    const char *u = L->dict ? "tokens" : "bytes";
    fprintf(f, "  data      %s: %zu training %s, %zu validation %s%s%s%s\n", a->data, L->ntrain, u, L->nval, u,
            L->valid_from[0] ? " (" : "", L->valid_from, L->valid_from[0] ? ")" : "");
    char mb[512];
    fmt_run_memory(mb, sizeof mb, &L->mem, L->how);
    fprintf(f, "  memory    %s\n", mb);
}

/* ---- fairseq binarized data (docs/interop.md) ---- */

/* the dict.txt beside a binarized dataset's prefix (data-bin/X/train: data-bin/X/dict.txt) */
static void dict_beside(const char *prefix, char *out, size_t cap) {
    const char *slash = strrchr(prefix, '/');
    snprintf(out, cap, "%.*sdict.txt", slash ? (int)(slash - prefix + 1) : 0, prefix);
}

/* the bytes of memory the ids of --data take (4 per id; at most 4 per byte of a .bin), or the text */
static uint64_t data_bytes(const char *path) {
    char p[4096 + 8];
    if (!path) return 0;
    if (!mega_fbin_prefix(path, p, sizeof p - 8)) return file_size(path);
    strcat(p, ".bin");
    return 4 * file_size(p);
}

/* the vocabulary of the binarized dataset `data` for a new model: its dict.txt, in the unit its
 * tokens suggest (as scripts/convert_fairseq.py --unit auto) */
static int data_dict(const char *data, mega_fdict **out) {
    char prefix[4096], dpath[4200];
    *out = NULL;
    mega_fbin_prefix(data, prefix, sizeof prefix);
    dict_beside(prefix, dpath, sizeof dpath);
    if (access(dpath, F_OK) != 0)
        return cli_error("--data '%s' is a fairseq binarized dataset but there is no '%s' beside it to number its tokens "
                         "(fairseq-preprocess writes it)", data, dpath);
    mega_fdict *d;
    if (mega_fdict_load_txt(dpath, MEGA_FDICT_WORD, &d) != MEGA_OK) return cli_error("%s", mega_last_error());
    if (mega_fdict_detect_unit(d) == MEGA_FDICT_BYTE) {
        mega_fdict_free(d);
        if (mega_fdict_load_txt(dpath, MEGA_FDICT_BYTE, &d) != MEGA_OK) return cli_error("%s", mega_last_error());
    }
    *out = d;
    return 0;
}

/* the ids of a binarized dataset: its sequences in order after a first </s> (as `mega eval` reads
 * one), each id below the dictionary's size, and a dict.txt beside it numbering tokens as dict */
static int fbin_ids(const char *flag, const char *path, const mega_fdict *dict, int32_t **ids, size_t *n) {
    char prefix[4096], dpath[4200];
    mega_fbin *d;
    if (mega_fbin_open(path, &d) != MEGA_OK) return cli_error("--%s: %s", flag, mega_last_error());
    mega_fbin_prefix(path, prefix, sizeof prefix);
    dict_beside(prefix, dpath, sizeof dpath);
    if (access(dpath, F_OK) == 0) {
        mega_fdict *dd;
        mega_status st = mega_fdict_load_txt(dpath, mega_fdict_get_unit(dict), &dd);
        if (st == MEGA_OK) st = mega_fdict_check_same(dict, dd, dpath), mega_fdict_free(dd);
        if (st != MEGA_OK) return mega_fbin_close(d), cli_error("--%s '%s': not the model's dictionary: %s", flag, path, mega_last_error());
    }
    const uint64_t nt = mega_fbin_tokens(d);
    *ids = nt && nt < SIZE_MAX / sizeof **ids - 1 ? malloc(((size_t)nt + 1) * sizeof **ids) : NULL;
    if (!*ids) return mega_fbin_close(d), cli_error("--%s '%s': %s", flag, path, nt ? "out of memory" : "no tokens");
    (*ids)[0] = mega_fdict_get_specials(dict).eos;
    size_t k = 1;
    for (size_t i = 0; i < mega_fbin_count(d); k += mega_fbin_length(d, i), i++)
        if (mega_fbin_read(d, i, mega_fdict_size(dict), *ids + k) != MEGA_OK) {
            free(*ids), *ids = NULL, mega_fbin_close(d);
            return cli_error("--%s: %s", flag, mega_last_error());
        }
    mega_fbin_close(d);
    *n = (size_t)nt + 1;
    return 0;
}

/* the ids of --data/--valid for a model with a fairseq dictionary: a binarized dataset, or text
 * encoded as fairseq-preprocess would (each line's tokens then </s>), after a first </s> */
static int path_ids(const char *flag, const char *path, const mega_fdict *dict, int32_t **ids, size_t *n) {
    if (mega_fbin_prefix(path, NULL, 0)) return fbin_ids(flag, path, dict, ids, n);
    mega_bytes txt;
    size_t cnt;
    char what[16];
    snprintf(what, sizeof what, "--%s", flag);
    if (mega_read_file(path, what, &txt) != MEGA_OK) return cli_error("%s", mega_last_error());
    const char *why = NULL;
    if (mega_fdict_encode(dict, txt.data, txt.n, 1, NULL, &cnt, NULL) != MEGA_OK) why = mega_last_error();
    else if (!(*ids = malloc((cnt + 1) * sizeof **ids))) why = "out of memory";
    else mega_fdict_encode(dict, txt.data, txt.n, 1, *ids + 1, &cnt, NULL);
    mega_bytes_free(&txt);
    if (why) return cli_error("--%s '%s': %s", flag, path, why);
    (*ids)[0] = mega_fdict_get_specials(dict).eos;
    *n = cnt + 1;
    return 0;
}

/* the training and validation ids (L->dict set): --valid, else the "valid" split beside a
 * data-bin/X/train (fairseq's layout), else the held-out tail of --data */
static int lm_load_ids(lm_task *L, const train_args *a) {
    size_t n;
    if (path_ids("data", a->data, L->dict, &L->ids, &n)) return 1;
    L->train_ids = L->ids, L->ntrain = L->nids = n;
    char prefix[4096], sib[4200];
    const char *slash;
    int split = 0;
    if (!a->valid && mega_fbin_prefix(a->data, prefix, sizeof prefix) &&
        !strcmp((slash = strrchr(prefix, '/')) ? slash + 1 : prefix, "train")) {
        snprintf(sib, sizeof sib, "%.*svalid", slash ? (int)(slash - prefix + 1) : 0, prefix);
        split = mega_fbin_prefix(sib, NULL, 0);
    }
    if (a->valid || split) {
        if (path_ids("valid", a->valid ? a->valid : sib, L->dict, &L->vids, &L->nval)) return 1;
        L->val_ids = L->vids;
        snprintf(L->valid_from, sizeof L->valid_from, "%s", a->valid ? "--valid" : "the valid split");
    } else if (a->valid_fraction > 0) {
        L->nval = (size_t)((double)n * a->valid_fraction);
        L->ntrain = n - L->nval;
        L->val_ids = L->ids + L->ntrain;
        snprintf(L->valid_from, sizeof L->valid_from, "held-out tail");
    }
    if (L->val_ids && L->nval < 2) L->val_ids = NULL, L->nval = 0, L->valid_from[0] = 0;
    return 0;
}

/* the byte text of --data and --valid (the held-out tail of --data without --valid) */
static int lm_load_bytes(lm_task *L, const train_args *a) {
    return task_text_split(a, &L->data, &L->valid, &L->train_txt, &L->ntrain, &L->val_txt, &L->nval, L->valid_from);
}

/* the run's memory from the model's config (before its buffers are reserved and the data read):
 * mega_lm_memory (weights, gradients, AdamW moments, the forward/backward buffers of a batch,
 * computed as mega_lm_reserve sizes them), the text files and the batch's token arrays.
 * resident: bytes of it already allocated (a resumed model's weights and gradients). */
static int lm_memory(lm_task *L, const train_args *a, const mega_lm_config *c, uint64_t resident) {
    mega_memory mm;
    const int B = task_forward_batch(a);
    if (mega_lm_memory(c, 1, B, a->seq_len, &mm) != MEGA_OK) return cli_error("%s", mega_last_error());
    const uint64_t data = data_bytes(a->data) + data_bytes(a->valid) +
                          2ull * (uint64_t)a->batch * a->seq_len * sizeof(int32_t); /* the batch's tokens */
    snprintf(L->how, sizeof L->how, "%s %d x %d", B < a->batch ? "micro-batch" : "batch", B, a->seq_len);
    return memory_guard("this training run", L->how, "lower --batch, --seq-len or the model's size, or ", &mm, data,
                        resident, tool_max_memory, &L->mem);
}

static void lm_destroy(task *t) {
    lm_task *L = t->impl;
    mega_lm_free(L->m);
    mega_bytes_free(&L->data), mega_bytes_free(&L->valid), free(L->tok), free(L->tgt);
    mega_fdict_free(L->dict), free(L->vocab_json), free(L->ids), free(L->vids);
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
    /* --arch: the mixer under the name of the architecture it makes (--arch megalodon) */
    static char arch[512];
    if (!arch[0])
        for (int k = 0; k < MEGA_MIXER_COUNT; k++)
            snprintf(arch + strlen(arch), sizeof arch - strlen(arch), "%s%s", k ? "|" : "", mega_mixer_name((mega_mixer_kind)k));
    const cli_flag af = {"arch", F_CHOICE, &a->lm.block.mixer,
                         "= --mixer (--arch megalodon: the Megalodon model, docs/megalodon.md)", arch, 1, 0, 0};
    fl[n++] = af;
    return n;
}

int lm_task_new(train_args *a, const char *model_path, task **out) {
    *out = NULL;
    static const task LM = {.metric = "bpb", .unit = "tok/s", .step = lm_step, .validate = lm_validate,
                            .save = lm_save, .describe = lm_describe, .destroy = lm_destroy};
    task *t = task_create(&LM, sizeof(lm_task));
    if (!t) return 1;
    lm_task *L = t->impl;
    const int binarized = a->data && mega_fbin_prefix(a->data, NULL, 0);
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
        size_t tps;
        if (lm_vocab(model_path, mega_lm_get_config(L->m), &L->dict, &tps)) goto fail;
        if (binarized && !L->dict) {
            cli_error("--data '%s' is a fairseq binarized dataset, but the run's model reads bytes (it was trained on text)", a->data);
            goto fail;
        }
        const size_t w = mega_lm_param_total(L->m) * sizeof(mega_real);
        if (lm_memory(L, a, mega_lm_get_config(L->m), 2 * (uint64_t)w)) goto fail;
    } else {
        /* a binarized dataset: the model's vocabulary is its dict.txt (fairseq's pad is the padding) */
        if (binarized) {
            if (data_dict(a->data, &L->dict)) goto fail;
            a->lm.vocab_size = mega_fdict_size(L->dict);
            a->lm.padding_idx = mega_fdict_get_specials(L->dict).pad;
        }
        /* windows of --seq-len need as many positions (Mega's simple bias under full attention):
         * raised as the other tasks do, or, when --max-positions was given, refused now rather
         * than at the first step */
        if (!cli_seen(a->flags, "max-positions") && a->lm.block.max_positions < a->seq_len) a->lm.block.max_positions = a->seq_len;
        mega_lm_config mine = a->lm;
        mega_lm_config_resolve(&mine);
        char what[48];
        snprintf(what, sizeof what, "the windows of --seq-len %d", a->seq_len);
        if (task_positions_fit(&mine.block, a->seq_len, "--task lm", "--max-positions", what,
                               "give --max-positions at least --seq-len, or a shorter --seq-len"))
            goto fail;
        /* refuse a configuration that does not fit before allocating it */
        if (lm_memory(L, a, &a->lm, 0)) goto fail;
        const mega_load_opts o = {0, 1}; /* gradients; drawn once below, with the run's seed */
        if (mega_lm_create_ex(&a->lm, &o, &L->m) != MEGA_OK) goto fail_msg;
        mega_lm_init_params(L->m, (uint64_t)a->seed);
    }
    if (L->dict) t->valid_unit = "tokens in windows";
    if (L->dict && !(L->vocab_json = mega_fdict_to_json(L->dict))) {
        cli_error("out of memory");
        goto fail;
    }
    if (L->dict ? lm_load_ids(L, a) : lm_load_bytes(L, a)) goto fail;
    if (L->ntrain < (size_t)a->seq_len + 1) {
        cli_error("training %s has %zu %s, fewer than --seq-len + 1 = %d (use a shorter --seq-len)", L->dict ? "data" : "text",
                  L->ntrain, L->dict ? "tokens" : "bytes", a->seq_len + 1);
        goto fail;
    }
    if (L->dict)
        t->data_hash = mega_fnv1a64(L->ids, L->nids * sizeof *L->ids), t->data_size = L->nids;
    else
        t->data_hash = mega_fnv1a64(L->data.data, L->data.n), t->data_size = L->data.n;
    L->tok = malloc((size_t)a->batch * a->seq_len * sizeof(int32_t));
    L->tgt = malloc((size_t)a->batch * a->seq_len * sizeof(int32_t));
    if (!L->tok || !L->tgt) {
        cli_error("out of memory");
        goto fail;
    }
    if (mega_lm_reserve(L->m, task_forward_batch(a), a->seq_len) != MEGA_OK) goto fail_msg;
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
