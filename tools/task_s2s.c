/* `mega train --task translate`: the Mega encoder–decoder on parallel text (source<TAB>target). */
#include "task.h"
#include "dist.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define MAXI(a, b) ((a) > (b) ? (a) : (b))

typedef struct {
    mega_s2s *m;
    mega_s2s_data train, valid;
    int n_total, valid_from_train; /* valid = the last examples of --data (train.n cut to the rest) */
    int *vidx, n_valid;
    mega_s2s_plan plan;
    int64_t plan_epoch;
    uint64_t base; /* the data position: *rng - base batches have been drawn */
    int32_t *src, *prev, *tgt;
    size_t cap;
    run_memory mem; /* what the run needs (printed by describe) */
    char how[96];
    mega_bpe *src_bpe, *tgt_bpe; /* subword units of each side (NULL: bytes; one object when shared) */
    char *src_text, *tgt_text;   /* their merge lists, as saved */
    char bpe_how[512];           /* how they were made (printed by describe) */
} s2s_task;

/* the byte vocabulary of the checkpoint's metadata */
#define S2S_VOCAB_JSON "{\"kind\":\"bytes\",\"size\":258,\"pad\":256,\"eos\":257}"
/* ... and the subword ones (merge lists under "src-bpe" and "tgt-bpe"; a side without one is bytes) */
#define S2S_BPE_JSON "{\"kind\":\"bpe\",\"src-size\":%d,\"tgt-size\":%d,\"pad\":256,\"eos\":257}"

static int ensure_cap(s2s_task *C, size_t n) {
    if (n <= C->cap) return 0;
    free(C->src), free(C->prev), free(C->tgt);
    C->src = malloc(n * sizeof(int32_t)), C->prev = malloc(n * sizeof(int32_t)), C->tgt = malloc(n * sizeof(int32_t));
    C->cap = n;
    if (!C->src || !C->prev || !C->tgt) {
        C->cap = 0;
        return cli_error("out of memory for a batch of %zu tokens", n);
    }
    return 0;
}

/* examples idx[0..B) of d through the model; *acc = correct argmax predictions of the counted
 * targets (teacher forcing) */
static int s2s_run_batch(mega_s2s *m, s2s_task *C, const mega_s2s_data *d, const int *idx, int B, const mega_lm_run *run,
                         double eps, double *loss, double *nll, int64_t *count, int64_t *correct, int64_t *units) {
    int S, L;
    if (mega_s2s_batch_shape(d, idx, B, &S, &L) != MEGA_OK) return cli_error("%s", mega_last_error());
    if (ensure_cap(C, (size_t)B * (size_t)MAXI(S, L))) return 1;
    if (mega_s2s_fill(d, idx, B, C->src, S, C->prev, C->tgt, L, NULL, NULL) != MEGA_OK) return cli_error("%s", mega_last_error());
    if (mega_s2s_forward(m, C->src, S, C->prev, C->tgt, L, B, run, eps, loss, nll, count) != MEGA_OK)
        return cli_error("%s", mega_last_error());
    if (correct) {
        const int V = mega_s2s_get_config(m)->tgt_vocab_size;
        const mega_real *lg = mega_s2s_logits(m);
        int64_t ok = 0;
        for (size_t r = 0; r < (size_t)B * L; r++) {
            if (C->tgt[r] == MEGA_S2S_PAD) continue;
            int am = 0;
            for (int v = 1; v < V; v++)
                if (lg[r * V + v] > lg[r * V + am]) am = v;
            ok += am == C->tgt[r];
        }
        *correct = ok;
    }
    if (units) {
        *units = 0;
        for (int i = 0; i < B; i++) *units += d->src_len[idx[i]] + d->tgt_len[idx[i]];
    }
    return 0;
}

static int s2s_step(task *t, const train_args *a, uint64_t *rng, uint64_t key, int shard, int nshards, double *loss,
                    double *metric, int64_t *units) {
    s2s_task *C = t->impl;
    const uint64_t pos = *rng - C->base;
    const int64_t epoch = (int64_t)(pos / (uint64_t)C->plan.n);
    if (epoch != C->plan_epoch) {
        mega_s2s_plan_free(&C->plan);
        if (mega_s2s_batches(&C->train, a->max_tokens, a->batch, (uint64_t)a->seed, epoch, 1, &C->plan) != MEGA_OK)
            return cli_error("%s", mega_last_error());
        C->plan_epoch = epoch;
    }
    const int b = (int)(pos % (uint64_t)C->plan.n);
    const int *idx = C->plan.idx + C->plan.off[b];
    const int B = C->plan.count[b];
    *rng += 1;
    *loss = *metric = 0, *units = 0;
    int r0, r1;
    task_shard_rows(B, shard, nshards, &r0, &r1);
    if (r1 == r0) return 0; /* a token-bucketed batch may have fewer sentences than shards */
    /* the loss is a mean over the batch's target tokens (</s> included): the whole batch's count
     * is known from the lengths, so each shard scales its own mean by its share of the tokens */
    int64_t total = 0;
    for (int i = 0; i < B; i++) total += C->train.tgt_len[idx[i]];
    mega_lm_run run = {1, key};
    double nll = 0;
    int64_t cnt = 0, ok = 0;
    if (s2s_run_batch(C->m, C, &C->train, idx + r0, r1 - r0, &run, a->label_smoothing, loss, &nll, &cnt, &ok, units)) return 1;
    if (!isfinite(*loss)) return 0;
    const double part = nshards == 1 ? 1.0 : (double)cnt / (double)total;
    if (mega_s2s_backward(C->m, part) != MEGA_OK) return cli_error("%s", mega_last_error());
    *loss *= part;
    *metric = total ? (double)ok / (double)total : 0;
    return 0;
}

static const mega_s2s_data *vset(const s2s_task *C) { return C->valid_from_train ? &C->train : &C->valid; }


static int s2s_validate(task *t, const train_args *a, int64_t max_units, double *loss, double *metric, int64_t *count) {
    s2s_task *C = t->impl;
    if (C->n_valid == 0) return 1;
    int n = C->n_valid;
    if (max_units > 0 && max_units < n) n = (int)max_units;
    /* a held-out tail lies beyond train.n (the batches' range): visible for the evaluation only */
    if (C->valid_from_train) C->train.n = C->n_total;
    int rc = mega_s2s_evaluate(C->m, vset(C), C->vidx, n, a->max_tokens, loss, metric, count) != MEGA_OK;
    if (rc) cli_error("%s", mega_last_error());
    if (C->valid_from_train) C->train.n = C->n_total - C->n_valid;
    return rc ? -1 : 0;
}

static mega_status s2s_save(task *t, const char *path, const char *const *kv) {
    s2s_task *C = t->impl;
    const char *all[16];
    int k = 0;
    for (; kv && kv[k] && k < 12; k++) all[k] = kv[k];
    char vj[128];
    snprintf(vj, sizeof vj, S2S_BPE_JSON, mega_bpe_vocab_size(C->src_bpe), mega_bpe_vocab_size(C->tgt_bpe));
    all[k++] = "vocab", all[k++] = C->src_bpe || C->tgt_bpe ? vj : S2S_VOCAB_JSON;
    if (C->src_bpe) all[k++] = "src-bpe", all[k++] = C->src_text;
    if (C->tgt_bpe) all[k++] = "tgt-bpe", all[k++] = C->tgt_text;
    all[k] = NULL;
    return mega_s2s_save_ex(C->m, path, all);
}

void print_s2s_config(FILE *f, const mega_s2s_config *c, const char *indent) {
    int n;
    const mega_field *mf = mega_s2s_config_fields(&n);
    print_config(f, mf, n, c, &c->encoder, indent);
    const mega_block_config *e = &c->encoder, *d = &c->decoder;
    if (d->z_dim != e->z_dim || d->hidden_dim != e->hidden_dim || d->n_dim != e->n_dim || d->ffn_dim != e->ffn_dim ||
        d->chunk_size != e->chunk_size || d->max_positions != e->max_positions)
        fprintf(f, "%sdecoder: z-dim %d hidden-dim %d n-dim %d ffn-dim %d chunk-size %d max-positions %d\n", indent,
                d->z_dim, d->hidden_dim, d->n_dim, d->ffn_dim, d->chunk_size, d->max_positions);
}

static void s2s_describe(task *t, const train_args *a, FILE *f) {
    s2s_task *C = t->impl;
    const mega_s2s_config *c = mega_s2s_get_config(C->m);
    char xa[64];
    fprintf(f, "  task      translation (encoder-decoder, %s cross-attention)\n", mega_s2s_cross_attention_name(c, xa, sizeof xa));
    fprintf(f, "  model     %zu parameters\n", mega_ps_trainable(t->ps));
    print_s2s_config(f, c, "            ");
    char sk[512];
    fprintf(f, "  data      %s: %d training pairs (longest source %d, target %d tokens), %d validation pairs%s\n",
            C->train.path, C->train.n, C->train.src_max, C->train.tgt_max, C->n_valid,
            C->valid_from_train ? " (held-out tail)" : "");
    if (mega_s2s_skip_summary(&C->train, sk, sizeof sk)) fprintf(f, "            skipped in %s: %s\n", C->train.path, sk);
    if (!C->valid_from_train && C->n_valid && mega_s2s_skip_summary(&C->valid, sk, sizeof sk))
        fprintf(f, "            skipped in %s: %s\n", C->valid.path, sk);
    if (C->src_bpe || C->tgt_bpe) fprintf(f, "  subwords  %s\n", C->bpe_how);
    else if (C->bpe_how[0]) fprintf(f, "  vocab     %s\n", C->bpe_how); /* the data-size default chose bytes */
    fprintf(f, "  batches   up to %d tokens and %d sentences each (%d batches per epoch), label smoothing %g\n",
            a->max_tokens, a->batch, C->plan.n, a->label_smoothing);
    char mb[512];
    fmt_run_memory(mb, sizeof mb, &C->mem, C->how);
    fprintf(f, "  memory    %s\n", mb);
}

/* bytes a parallel dataset holds: its token pool and the per-pair arrays */
static uint64_t pairs_bytes(const mega_s2s_data *d) {
    return (uint64_t)d->pool_n * sizeof(uint16_t) + (uint64_t)d->n * (sizeof(size_t) + 2 * sizeof(int));
}

/* the run's memory from the model's config (the data is read: it sizes the batches): mega_s2s_memory
 * (weights, gradients, AdamW moments, the buffers of the largest batch: --max-tokens over the longest
 * pair, at most --batch pairs, computed as the reserve functions size them) and the pairs.
 * resident: bytes already allocated (the data, a resumed model's weights and gradients). */
static int s2s_memory(s2s_task *C, const train_args *a, const mega_s2s_config *c, uint64_t resident) {
    int S = C->train.src_max, L = C->train.tgt_max;
    if (C->valid.n) S = S > C->valid.src_max ? S : C->valid.src_max, L = L > C->valid.tgt_max ? L : C->valid.tgt_max;
    S = S > 0 ? S : 1, L = L > 0 ? L : 1;
    int B = a->max_tokens / (S > L ? S : L);
    B = B < 1 ? 1 : B > a->batch ? a->batch : B;
    mega_memory mm;
    if (mega_s2s_memory(c, 1, B, S, L, &mm) != MEGA_OK) return cli_error("%s", mega_last_error());
    const uint64_t data = pairs_bytes(&C->train) + pairs_bytes(&C->valid);
    snprintf(C->how, sizeof C->how, "%d pairs of %d -> %d tokens", B, S, L);
    return memory_guard("this training run", C->how, "lower --max-tokens, --batch or the model's size, or ", &mm, data,
                        resident + data, tool_max_memory, &C->mem);
}

/* a resumed model's positions against the longest source (the encoder's) and target (the
 * decoder's), before training: a run whose decoder kept max-positions 1024 under a longer --seq-len
 * would otherwise stop at the first batch holding a longer pair */
static int s2s_positions_fit(const s2s_task *C) {
    const mega_s2s_config *c = mega_s2s_get_config(C->m);
    const int S = MAXI(C->train.src_max, C->valid.src_max), L = MAXI(C->train.tgt_max, C->valid.tgt_max);
    const char *fix = "the run cannot train on these pairs (--resume keeps its --seq-len): start a new run";
    char what[64];
    snprintf(what, sizeof what, "the data's longest source, %d tokens", S);
    if (task_positions_fit(&c->encoder, S, "--resume", "the checkpoint's encoder's", what, fix)) return 1;
    snprintf(what, sizeof what, "the data's longest target, %d tokens", L);
    return task_positions_fit(&c->decoder, L, "--resume", "the checkpoint's decoder's", what, fix);
}

static void s2s_destroy(task *t) {
    s2s_task *C = t->impl;
    mega_s2s_free(C->m);
    if (C->valid_from_train) C->train.n = C->n_total; /* the arrays hold every example */
    mega_s2s_data_free(&C->train);
    mega_s2s_data_free(&C->valid);
    mega_s2s_plan_free(&C->plan);
    free(C->vidx), free(C->src), free(C->prev), free(C->tgt);
    if (C->tgt_bpe != C->src_bpe) mega_bpe_free(C->tgt_bpe);
    mega_bpe_free(C->src_bpe), free(C->src_text), free(C->tgt_text);
    free(C);
    free(t);
}

/* Without --bpe and --bpe-sides, the default learns source subwords only when the training set
 * has at least S2S_BPE_MIN_PAIRS pairs AND the run's budget is long enough for them to pay: at least
 * S2S_BPE_MIN_TOKENS batch tokens (--steps x --max-tokens) and, under --time-budget, at least
 * S2S_BPE_MIN_SECONDS; otherwise bytes on both sides with one shared table (docs/translation.md,
 * "Vocabularies from the data size and the budget"). With few pairs most words are seen once or
 * never, and a byte decoder that attends to the source's bytes can copy and respell them, where
 * source subwords hand it words whose spelling it must have memorised. With many pairs (FreeDict
 * deu-eng, 488,486) subwords lost at 300 s of one core (2,498 steps x 1,024 tokens = 2.6 M batch
 * tokens: chrF2 15.68 against 20.12 in bytes) and won at 600 s (10,218 steps, 10.5 M batch tokens:
 * 29.36 against 24.77 at 9,623 steps): the two budget thresholds are round numbers between those
 * measurements, where the crossing itself was not measured. */
#define S2S_BPE_MIN_PAIRS 100000
#define S2S_BPE_MIN_TOKENS 5000000
#define S2S_BPE_MIN_SECONDS 450

/* whether the default learns subword units for n training pairs and the run's budget (--steps x
 * --max-tokens, --time-budget); why: the one-line reason */
static int s2s_default_subwords(const train_args *a, int n, char *why, size_t cap) {
    const int by_steps = !(a->time_budget > 0 && !cli_seen(a->flags, "steps")); /* a budget alone ends the run */
    const double tokens = (double)a->steps * a->max_tokens;
    char budget[160] = "";
    if (by_steps)
        snprintf(budget, sizeof budget, "--steps %lld x --max-tokens %d = %.3g M batch tokens", (long long)a->steps, a->max_tokens,
                 tokens / 1e6);
    if (a->time_budget > 0)
        snprintf(budget + strlen(budget), sizeof budget - strlen(budget), "%s--time-budget %g s", by_steps ? " and " : "",
                 a->time_budget);
    if (n < S2S_BPE_MIN_PAIRS) {
        snprintf(why, cap, "%d training pairs, fewer than the %d from which the default learns --bpe %d source merges "
                 "(docs/translation.md)", n, S2S_BPE_MIN_PAIRS, a->bpe_merges);
        return 0;
    }
    if ((by_steps && tokens < S2S_BPE_MIN_TOKENS) || (a->time_budget > 0 && a->time_budget < S2S_BPE_MIN_SECONDS)) {
        snprintf(why, cap, "%d training pairs, but a budget of %s, short of the %.3g M batch tokens (and %d s under "
                 "--time-budget) from which the default learns --bpe %d source merges (docs/translation.md)", n, budget,
                 S2S_BPE_MIN_TOKENS / 1e6, S2S_BPE_MIN_SECONDS, a->bpe_merges);
        return 0;
    }
    snprintf(why, cap, "the default for %d training pairs and a budget of %s (docs/translation.md)", n, budget);
    return 1;
}

/* Subword units for a new run: --bpe merges learned from the pairs of --data that are trained on
 * (without --valid, the held-out tail is cut by line number here: *tail_line receives the line
 * where it starts, 0 when there is none), from the sides --bpe-sides names: both (one vocabulary,
 * the two sides one text collection), or one side (the other stays bytes). Returns 0, 1 after an
 * error, or 2 (nothing learned) when the vocabularies were left at their defaults and the
 * default keeps bytes (s2s_default_subwords). */
static int s2s_learn_bpe(s2s_task *C, const train_args *a, int *tail_line) {
    const double t0 = now_sec();
    mega_s2s_opts o = {0, 0, 0, 0, "--data", "--seq-len", NULL, NULL};
    mega_s2s_data d;
    *tail_line = 0;
    if (mega_s2s_data_load(a->data, &o, &d) != MEGA_OK) return cli_error("%s", mega_last_error());
    int n = d.n;
    if (!a->valid && a->valid_fraction > 0 && d.n >= 2) {
        n = d.n - task_valid_count(d.n, a->valid_fraction);
        *tail_line = d.line[n];
    }
    char why[320] = "";
    const int dflt = !cli_seen(a->flags, "bpe") && !cli_seen(a->flags, "bpe-sides");
    if (dflt && !s2s_default_subwords(a, n, why, sizeof why)) {
        snprintf(C->bpe_how, sizeof C->bpe_how, "bytes on both sides, one shared table: %s", why);
        mega_s2s_data_free(&d);
        return 2;
    }
    const int both = !strcmp(a->bpe_sides, "both"), tgt_side = !strcmp(a->bpe_sides, "target");
    uint8_t *buf = malloc(d.pool_n ? d.pool_n : 1);
    const uint8_t **tx = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *tx);
    size_t *ln = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *ln), nt = 0, o2 = 0;
    int rc = !buf || !tx || !ln ? cli_error("out of memory learning the subword units") : 0;
    /* only the pairs training can keep: a side in bytes must fit --seq-len exactly, a side in
     * subwords even in learned tokens of the longest kind (MEGA_BPE_MAX_UNIT bytes); the pairs
     * beyond (one line of megabytes) would only cost time and skew the merges */
    int left_out = 0, first_out = 0;
    const size_t lim = a->seq_len > 1 ? (size_t)a->seq_len - 1 : SIZE_MAX;
    for (int i = 0; !rc && i < n; i++) {
        int over = 0;
        for (int side = 0; side < 2 && lim != SIZE_MAX; side++) {
            const size_t len = (size_t)(side ? d.tgt_len[i] : d.src_len[i]) - 1; /* bytes */
            over |= len > (both || side == tgt_side ? lim * MEGA_BPE_MAX_UNIT : lim);
        }
        if (over && !left_out++) first_out = d.line[i];
        if (over) continue;
        for (int side = 0; side < 2; side++) {
            if (!both && side != tgt_side) continue;
            const uint16_t *t = side ? mega_s2s_data_tgt(&d, i) : mega_s2s_data_src(&d, i);
            const int len = (side ? d.tgt_len[i] : d.src_len[i]) - 1; /* without </s> */
            tx[nt] = buf + o2, ln[nt++] = (size_t)len;
            for (int k = 0; k < len; k++) buf[o2++] = (uint8_t)t[k];
        }
    }
    mega_bpe *b = NULL;
    if (!rc && mega_bpe_learn(tx, ln, nt, a->bpe_merges, 2, &b) != MEGA_OK)
        rc = cli_error("%s: learning the subword units (--bpe %d): %s", a->data, a->bpe_merges, mega_last_error());
    char *text = !rc ? mega_bpe_to_string(b, NULL) : NULL;
    if (!rc && !text) rc = cli_error("%s", mega_last_error());
    if (!rc) {
        if (both || !tgt_side) C->src_bpe = b, C->src_text = text;
        if (both || tgt_side) C->tgt_bpe = b, C->tgt_text = both ? strdup(text) : text;
        if (both && !C->tgt_text) rc = cli_error("out of memory");
        int k = snprintf(C->bpe_how, sizeof C->bpe_how, "%d byte-pair merges (--bpe %d) learned from the %s of %d pairs in %.1f s: %d tokens%s",
                 mega_bpe_merges(b), a->bpe_merges, both ? "sources and targets" : tgt_side ? "targets" : "sources", n - left_out,
                 now_sec() - t0, mega_bpe_vocab_size(b),
                 both ? " for both sides" : tgt_side ? " on the target side (bytes on the source side)" : " on the source side (bytes on the target side)");
        if (left_out && k > 0 && (size_t)k < sizeof C->bpe_how)
            k += snprintf(C->bpe_how + k, sizeof C->bpe_how - (size_t)k, "; %d pair%s too long for --seq-len %d left out (the first at %s line %d)",
                          left_out, left_out > 1 ? "s" : "", a->seq_len, a->data, first_out);
        if (dflt && k > 0 && (size_t)k < sizeof C->bpe_how) snprintf(C->bpe_how + k, sizeof C->bpe_how - (size_t)k, "; %s", why);
    } else {
        mega_bpe_free(b), free(text);
    }
    free(buf), free(tx), free(ln);
    mega_s2s_data_free(&d);
    return rc;
}

/* the translate task's defaults (before the flags). The model shape, batch, learning rate and
 * vocabularies are those of the 20-minute FreeDict recipe (docs/translation.md, "How the recipe
 * was found"): at equal time a shallow encoder and a deeper decoder (1 + 3), small batches (more
 * updates) and subword units on the source side with bytes on the target side (4,000 merges)
 * each improved the held-out result. The two sides then have different vocabularies, so they do
 * not share an embedding table (--bpe 0 --share-all-embeddings gives the byte recipe of
 * 2026-11-26). They are set here, not in mega_s2s_config_default, whose values also fill the
 * fields an official or older config.json leaves out. */
void s2s_apply_translate_defaults(train_args *a) {
    a->seq_len = 256, a->batch = 512, a->steps = 2000, a->warmup = 200, a->lr = 3e-3, a->min_lr = 1e-4;
    a->max_tokens = 1024;
    a->bpe_merges = 4000, a->bpe_sides = "source";
    a->s2s.encoder_layers = 1, a->s2s.decoder_layers = 3, a->s2s.share_all_embeddings = 0;
    a->eval_tokens = 1000; /* validation pairs per evaluation */
    a->patience = 10;      /* small corpora overfit: stop once validation stops improving (docs/translation.md) */
    /* the best model by token accuracy, not loss: on small corpora the teacher-forced loss turns up
     * (the model grows over-confident) long before the translations stop improving; on FreeDict
     * fra-eng the loss-best model (step 600) scored chrF 8.6 where the last (step 1855, accuracy
     * still rising) scored 16.8 (docs/translation.md) */
    a->best_metric = "acc";
}

/* the translate task's own flags: batches by tokens, subword units, and
 * the config flags that also have another name (its row in tasks.c) */
int s2s_task_flags(train_args *a, cli_flag *fl, int n) {
    const cli_flag sf[] = {
        {"max-tokens", F_INT, &a->max_tokens, "tokens per batch: sentences x their longest side (fairseq --max-tokens)", NULL, 2, 1 << 30, 0},
        {"label-smoothing", F_DBL, &a->label_smoothing, "label smoothing of the cross-entropy (fairseq; 0 = none)", NULL, 0, 0.99, 0},
        {"bpe", F_INT, &a->bpe_merges, "subword units: learn this many byte-pair merges from the training pairs (both sides, "
         "one vocabulary of 258 + N tokens, stored in the checkpoint; docs/translation.md); 0 = bytes on both sides. "
         "Without --bpe and --bpe-sides, a training set of fewer than 100000 pairs, or a budget of fewer than 5 M batch tokens "
         "(--steps x --max-tokens) or 450 s (--time-budget), stays in bytes on both sides with one shared table", NULL, 0,
         MEGA_BPE_MAX_MERGES, 0},
        {"bpe-sides", F_ENUM, &a->bpe_sides, "with --bpe: the sides in subword units (both: one vocabulary learned from "
         "both sides; source or target: learned from that side only, the other side stays bytes, separate embedding "
         "tables)", "both|source|target", 1, 0, 0},
        {"postnorm", F_CLEAR, &a->s2s.encoder.prenorm, "normalize after each sublayer (= --prenorm=false)", NULL, 1, 0, 0},
        {"init-from", F_STR, &a->init_from, "start the encoder from a run's (mega train --task mlm, or a classifier): its tensors whose names (encoder.encoder.* read as encoder.*) and shapes match; the encoder's block configuration must be the run's (docs/pretraining.md)", NULL, 1, 0, 0},
        {"no-scale-embedding", F_CLEAR, &a->s2s.scale_embedding, "= --scale-embedding=false", NULL, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof sf / sizeof *sf; i++) fl[n++] = sf[i];
    return n;
}

/* Defaults that generalise on small parallel corpora (docs/translation.md): a new run without
 * --dropout gets dropout 0.3 below S2S_SMALL_PAIRS training pairs and 0.1 from there (label
 * smoothing is 0.1 already); returns the training target tokens */
#define S2S_SMALL_PAIRS 20000
#define S2S_PARAMS_PER_TOKEN 50 /* more parameters per training target token: warn that it will overfit */
static int64_t s2s_default_dropout(const s2s_task *C, train_args *a) {
    int64_t tokens = 0;
    for (int i = 0; i < C->train.n; i++) tokens += C->train.tgt_len[i];
    if (!cli_seen(a->flags, "dropout"))
        a->s2s.encoder.dropout = a->s2s.decoder.dropout = C->train.n < S2S_SMALL_PAIRS ? 0.3f : 0.1f;
    return tokens;
}

/* after the flags: the block flags describe both sides; the decoder is causal */
void s2s_finish_flags(train_args *a) {
    a->s2s.decoder = a->s2s.encoder;
    a->s2s.encoder.bidirectional = 1, a->s2s.decoder.bidirectional = 0;
}

/* a new run's model: checked against the memory, drawn with the run's seed, then (--init-from)
 * a pretrained encoder's weights under the encoder's names (0, or 1 after the error) */
static int s2s_new_model(s2s_task *C, train_args *a) {
    mega_cls *src = NULL;
    if (a->init_from) {
        mega_s2s_config mine = a->s2s;
        mega_s2s_config_resolve(&mine);
        if (init_from_open(a->init_from, &mine.encoder, mine.encoder_layers, &src)) return 1;
    }
    /* refuse a configuration that does not fit before allocating it */
    if (s2s_memory(C, a, &a->s2s, 0)) return mega_cls_free(src), 1;
    const mega_load_opts lo = {0, 1}; /* gradients; drawn once below, with the run's seed */
    if (mega_s2s_create_ex(&a->s2s, &lo, &C->m) != MEGA_OK) return mega_cls_free(src), cli_error("%s", mega_last_error());
    mega_s2s_init_params(C->m, (uint64_t)a->seed);
    /* the classifier's encoder.encoder.* are the translation model's encoder.* (src/model/s2s.c) */
    static const char *const MAP[] = {"encoder.encoder.embed_tokens.embed.", "encoder.embed_tokens.", "encoder.encoder.", "encoder.", NULL};
    const int bad = src && init_from_load(a->init_from, mega_s2s_paramset(C->m), mega_cls_paramset(src), MAP);
    mega_cls_free(src);
    return bad;
}

int s2s_task_new(train_args *a, const char *model_path, task **out) {
    *out = NULL;
    static const task S2S = {.metric = "acc", .unit = "tok/s", .step = s2s_step,
                             .validate = s2s_validate, .save = s2s_save, .describe = s2s_describe, .destroy = s2s_destroy};
    task *t = task_create(&S2S, sizeof(s2s_task));
    if (!t) return 1;
    s2s_task *C = t->impl;
    C->plan_epoch = -1;
    if (model_path && mega_s2s_load(model_path, &C->m) != MEGA_OK) goto fail_msg;
    /* the vocabulary: a resumed run's own (bytes, or the subword units in its checkpoint), else
     * --bpe merges learned now */
    int tail_line = 0;
    const cli_flag *bf = cli_flag_named(a->flags, "bpe"), *bs = cli_flag_named(a->flags, "bpe-sides");
    if (model_path) {
        if (meta_bpe(model_path, mega_s2s_get_config(C->m), &C->src_bpe, &C->tgt_bpe)) goto fail;
        const int mine = mega_bpe_merges(C->src_bpe ? C->src_bpe : C->tgt_bpe);
        const char *sides = !C->src_bpe && !C->tgt_bpe ? "" : C->src_bpe == C->tgt_bpe ? "both" : C->src_bpe ? "source" : "target";
        if ((bf && bf->seen && a->bpe_merges != mine) || (bs && bs->seen && *sides && strcmp(a->bpe_sides, sides))) {
            cli_error("--resume: the run was trained with %s%s%s; --bpe and --bpe-sides cannot change it",
                      *sides ? "subword units on " : "bytes (--bpe 0)", sides, *sides ? (strcmp(sides, "both") ? " side" : " sides") : "");
            goto fail;
        }
        if ((C->src_bpe && !(C->src_text = mega_bpe_to_string(C->src_bpe, NULL))) ||
            (C->tgt_bpe && !(C->tgt_text = mega_bpe_to_string(C->tgt_bpe, NULL))))
            goto fail_msg;
        if (*sides)
            snprintf(C->bpe_how, sizeof C->bpe_how, "%d byte-pair merges on %s side%s (from the checkpoint)", mine,
                     !strcmp(sides, "both") ? "both" : sides, strcmp(sides, "both") ? "" : "s");
    } else if (a->bpe_merges > 0) {
        const int rc = s2s_learn_bpe(C, a, &tail_line);
        if (rc == 1) goto fail;
        if (rc == 2) { /* a small training set: bytes on both sides, one table (unless the flag says) */
            a->bpe_merges = 0, tail_line = 0; /* as --bpe 0 */
            if (!cli_seen(a->flags, "share-all-embeddings")) a->s2s.share_all_embeddings = 1;
        }
    }
    if (!model_path && a->bpe_merges > 0) {
        a->s2s.src_vocab_size = mega_bpe_vocab_size(C->src_bpe);
        a->s2s.tgt_vocab_size = mega_bpe_vocab_size(C->tgt_bpe);
        /* two vocabularies cannot share one table: the translate default turns sharing off */
        const cli_flag *sh = cli_flag_named(a->flags, "share-all-embeddings");
        if (C->src_bpe != C->tgt_bpe && a->s2s.share_all_embeddings && !(sh && sh->seen)) {
            a->s2s.share_all_embeddings = 0;
            if (dist_rank() == 0)
                fprintf(stderr, "mega: note: --bpe-sides %s gives the two sides different vocabularies: "
                                "--share-all-embeddings is off\n", a->bpe_sides);
        }
    }
    mega_s2s_opts o = {a->seq_len, a->seq_len, 0, 0, "--data", "--seq-len", C->src_bpe, C->tgt_bpe};
    if (mega_s2s_data_load(a->data, &o, &C->train) != MEGA_OK) goto fail_msg;
    C->n_total = C->train.n;
    if (a->valid) {
        o.what = "--valid";
        if (mega_s2s_data_load(a->valid, &o, &C->valid) != MEGA_OK) goto fail_msg;
        C->n_valid = C->valid.n;
        C->vidx = malloc((size_t)C->n_valid * sizeof(int));
        for (int i = 0; C->vidx && i < C->n_valid; i++) C->vidx[i] = i;
    } else if (a->valid_fraction > 0 && C->train.n >= 2) {
        int nv = task_valid_count(C->train.n, a->valid_fraction);
        if (tail_line > 0) { /* the tail the subword units were learned without */
            nv = 0;
            while (nv < C->train.n - 1 && C->train.line[C->train.n - 1 - nv] >= tail_line) nv++;
            if (nv < 1) nv = 1;
        }
        C->n_valid = nv, C->valid_from_train = 1;
        C->train.n -= nv; /* batches are drawn from the first examples only */
        C->vidx = malloc((size_t)nv * sizeof(int));
        for (int i = 0; C->vidx && i < nv; i++) C->vidx[i] = C->train.n + i;
    }
    if (C->n_valid && !C->vidx) {
        cli_error("out of memory");
        goto fail;
    }
    if (!C->m) {
        const int64_t tgt_tokens = s2s_default_dropout(C, a);
        mega_s2s_config *c = &a->s2s;
        if (c->encoder.max_positions < a->seq_len) c->encoder.max_positions = a->seq_len;
        if (c->decoder.max_positions < a->seq_len) c->decoder.max_positions = a->seq_len; /* targets need them as sources do */
        if (s2s_new_model(C, a)) goto fail;
        const double np = (double)mega_ps_total(mega_s2s_paramset(C->m));
        if (dist_rank() == 0 && np > S2S_PARAMS_PER_TOKEN * (double)tgt_tokens)
            fprintf(stderr, "mega: warning: %.3gM parameters for %lld training target tokens (more than %d per token): "
                            "expect overfitting; a smaller model or more data generalises better (docs/translation.md)\n",
                    np / 1e6, (long long)tgt_tokens, S2S_PARAMS_PER_TOKEN);
    } else if (s2s_memory(C, a, mega_s2s_get_config(C->m),
                          2 * (uint64_t)mega_ps_total(mega_s2s_paramset(C->m)) * sizeof(mega_real))) {
        goto fail;
    }
    if (model_path && a->model_flags_seen) {
        int n;
        const mega_field *f = mega_s2s_config_fields(&n);
        mega_s2s_config_resolve(&a->s2s);
        if (resume_config_differs(a, f, n, &a->s2s, mega_s2s_get_config(C->m), offsetof(mega_s2s_config, encoder))) goto fail;
    }
    /* the data must fit the model: its positions and its vocabularies (bytes or subwords, pad, eos) */
    if (model_path && s2s_positions_fit(C)) goto fail;
    const mega_s2s_config *mc = mega_s2s_get_config(C->m);
    const int Vs = mega_bpe_vocab_size(C->src_bpe), Vt = mega_bpe_vocab_size(C->tgt_bpe);
    if (mc->src_vocab_size != Vs || mc->tgt_vocab_size != Vt || mc->padding_idx != MEGA_S2S_PAD || mc->eos_idx != MEGA_S2S_EOS) {
        cli_error("the model's vocabulary (%d/%d, pad %d, eos %d) is not that of its parallel text (%d/%d, pad 256, eos 257)",
                  mc->src_vocab_size, mc->tgt_vocab_size, mc->padding_idx, mc->eos_idx, Vs, Vt);
        goto fail;
    }
    if (mega_s2s_batches(&C->train, a->max_tokens, a->batch, (uint64_t)a->seed, 0, 1, &C->plan) != MEGA_OK) goto fail_msg;
    C->plan_epoch = 0;
    C->base = mega_data_rng_seed((uint64_t)a->seed);
    t->data_hash = C->train.fingerprint, t->data_size = (uint64_t)C->n_total;
    t->ps = mega_s2s_paramset(C->m);
    t->batchnorm = mega_s2s_get_config(C->m)->encoder.norm_type == MEGA_NORM_BATCH ||
                   mega_s2s_get_config(C->m)->decoder.norm_type == MEGA_NORM_BATCH;
    *out = t;
    return 0;
fail_msg:
    cli_error("%s", mega_last_error());
fail:
    s2s_destroy(t);
    return 1;
}
