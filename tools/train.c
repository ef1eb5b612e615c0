/*
 * mega train: train a byte-level Mega language model.
 *
 * Checkpoint directory (--out DIR):
 *   model.safetensors        weights by official name; __metadata__: config (JSON), step
 *   train_state.safetensors  AdamW moments (exp_avg.<name>, exp_avg_sq.<name>), step, RNG
 *                            states, data fingerprint; __metadata__: train (JSON), step
 *   log.jsonl                the training curve, one JSON object per line
 * Every file is replaced atomically. A save renames the previous train_state to
 * train_state.prev.safetensors first, so after a crash at any point one of the two state files
 * matches model.safetensors' step, and --resume picks that one.
 */
#include "common.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

typedef struct {
    /* data */
    const char *data, *valid, *out;
    double valid_fraction;
    /* model (strings for enums) */
    int layers, embed_dim, z_dim, hidden_dim, n_dim, ffn_dim, chunk_size, truncation, max_positions;
    const char *attn, *relpos, *norm, *activation;
    int prenorm, tie, no_scale, no_affine_final;
    double dropout, attention_dropout, hidden_dropout, activation_dropout;
    /* training */
    int64_t steps;
    int batch, seq_len;
    double lr, min_lr, weight_decay, clip, beta1, beta2, eps;
    int64_t warmup;
    const char *schedule;
    int64_t seed;
    int threads;
    int64_t eval_every, save_every, log_every, eval_tokens;
    int64_t stop_after;
    int resume, decay_all, quiet;
} train_args;

static uint64_t dropout_key(uint64_t seed, int64_t step) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)step + 0x1234567ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* sequential splitmix64 for data sampling: one uint64 of state, saved in checkpoints */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t rng_below(uint64_t *s, uint64_t n) {
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, x;
    do x = rng_next(s);
    while (x >= lim);
    return x % n;
}

static double lr_at(const train_args *a, int64_t step) {
    /* step is 0-based: linear warm-up to lr, then linear or cosine decay to min_lr */
    if (a->warmup > 0 && step < a->warmup) return a->lr * (double)(step + 1) / (double)a->warmup;
    int64_t span = a->steps - a->warmup;
    double p = span > 0 ? (double)(step - a->warmup) / (double)span : 1.0;
    if (p > 1) p = 1;
    if (!strcmp(a->schedule, "constant")) return a->lr;
    if (!strcmp(a->schedule, "cosine")) return a->min_lr + 0.5 * (a->lr - a->min_lr) * (1 + cos(M_PI * p));
    return a->lr + (a->min_lr - a->lr) * p;
}

static cJSON *train_json(const train_args *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "steps", (double)a->steps);
    cJSON_AddNumberToObject(o, "batch", a->batch);
    cJSON_AddNumberToObject(o, "seq-len", a->seq_len);
    cJSON_AddNumberToObject(o, "lr", a->lr);
    cJSON_AddNumberToObject(o, "min-lr", a->min_lr);
    cJSON_AddNumberToObject(o, "warmup", (double)a->warmup);
    cJSON_AddStringToObject(o, "schedule", a->schedule);
    cJSON_AddNumberToObject(o, "weight-decay", a->weight_decay);
    cJSON_AddBoolToObject(o, "decay-all", a->decay_all);
    cJSON_AddNumberToObject(o, "clip", a->clip);
    cJSON_AddNumberToObject(o, "beta1", a->beta1);
    cJSON_AddNumberToObject(o, "beta2", a->beta2);
    cJSON_AddNumberToObject(o, "eps", a->eps);
    cJSON_AddNumberToObject(o, "seed", (double)a->seed);
    cJSON_AddNumberToObject(o, "valid-fraction", a->valid_fraction);
    return o;
}

/* ---- checkpoint ------------------------------------------------------------------------- */

typedef struct {
    int64_t step;
    uint64_t data_rng;
    uint64_t data_hash;
    uint64_t data_size;
} train_pos;

static int save_checkpoint(const train_args *a, mega_lm *m, mega_adamw *opt, const train_pos *pos) {
    char p[4096], q[4096], stepstr[32];
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)pos->step);
    /* 1. keep the previous optimizer state until the new pair is complete */
    path_join(p, sizeof p, a->out, "train_state.safetensors");
    path_join(q, sizeof q, a->out, "train_state.prev.safetensors");
    if (file_exists(p) && rename(p, q) != 0) return cli_error("cannot rotate '%s'", p);
    /* 2. the optimizer state */
    mega_st_writer *w = mega_st_writer_new();
    if (!w) return cli_error("out of memory");
    mega_status st = MEGA_OK;
    const mega_real *mm = mega_adamw_m(opt), *vv = mega_adamw_v(opt);
    for (int i = 0; i < mega_lm_tensor_count(m) && !st; i++) {
        size_t off, n;
        unsigned fl;
        const char *name = mega_lm_tensor_info(m, i, &off, &n, &fl);
        if (fl & 2) continue;
        char nm[512];
        int64_t shape[1] = {(int64_t)n};
        snprintf(nm, sizeof nm, "exp_avg.%s", name);
        st = mega_st_writer_add(w, nm, MEGA_DT_F32, 1, shape, mm + off);
        snprintf(nm, sizeof nm, "exp_avg_sq.%s", name);
        if (!st) st = mega_st_writer_add(w, nm, MEGA_DT_F32, 1, shape, vv + off);
    }
    int64_t scal[5] = {pos->step, *mega_adamw_t(opt), (int64_t)pos->data_rng, (int64_t)pos->data_hash,
                       (int64_t)pos->data_size};
    const char *sn[5] = {"step", "adam_step", "data_rng", "data_hash", "data_size"};
    for (int i = 0; i < 5 && !st; i++) st = mega_st_writer_add(w, sn[i], MEGA_DT_I64, 0, NULL, &scal[i]);
    cJSON *tj = train_json(a);
    char *tjs = cJSON_PrintUnformatted(tj);
    cJSON_Delete(tj);
    if (!st) st = mega_st_writer_meta(w, "train", tjs);
    if (!st) st = mega_st_writer_meta(w, "step", stepstr);
    if (!st) st = mega_st_writer_meta(w, "data", a->data);
    free(tjs);
    if (!st) st = mega_st_writer_write(w, p);
    mega_st_writer_free(w);
    if (st) return cli_error("saving optimizer state: %s", mega_last_error());
    /* 3. the model, with its step in the metadata */
    path_join(p, sizeof p, a->out, "model.safetensors");
    const char *kv[] = {"step", stepstr, NULL};
    if (mega_lm_save_ex(m, p, kv) != MEGA_OK) return cli_error("saving model: %s", mega_last_error());
    /* config.json sidecar (what the model is, readable without safetensors) + the step */
    char *cj = mega_lm_config_to_json(mega_lm_get_config(m));
    char side[8192];
    int len = snprintf(side, sizeof side, "{\"step\": %lld, \"config\": %s}\n", (long long)pos->step, cj ? cj : "null");
    free(cj);
    path_join(p, sizeof p, a->out, "checkpoint.json");
    if (mega_write_file_atomic(p, side, (size_t)len) != MEGA_OK) return cli_error("%s", mega_last_error());
    return 0;
}

static int64_t st_i64(const mega_st_file *f, const char *name, int *ok) {
    const mega_st_tensor *t = mega_st_get(f, name);
    if (!t || t->dtype != MEGA_DT_I64 || t->numel != 1) {
        *ok = 0;
        return 0;
    }
    int64_t v;
    memcpy(&v, t->data, 8);
    return v;
}

static int load_state_file(const char *path, mega_lm *m, mega_adamw *opt, train_pos *pos, cJSON **train) {
    mega_st_file *f;
    if (mega_st_open(path, &f) != MEGA_OK) return cli_error("%s", mega_last_error());
    int ok = 1;
    pos->step = st_i64(f, "step", &ok);
    *mega_adamw_t(opt) = st_i64(f, "adam_step", &ok);
    pos->data_rng = (uint64_t)st_i64(f, "data_rng", &ok);
    pos->data_hash = (uint64_t)st_i64(f, "data_hash", &ok);
    pos->data_size = (uint64_t)st_i64(f, "data_size", &ok);
    if (!ok) {
        mega_st_close(f);
        return cli_error("%s: missing step/RNG records (not a mega train_state file)", path);
    }
    mega_real *mm = mega_adamw_m(opt), *vv = mega_adamw_v(opt);
    for (int i = 0; i < mega_lm_tensor_count(m); i++) {
        size_t off, n;
        unsigned fl;
        const char *name = mega_lm_tensor_info(m, i, &off, &n, &fl);
        if (fl & 2) continue;
        char nm[512];
        for (int k = 0; k < 2; k++) {
            snprintf(nm, sizeof nm, "%s.%s", k ? "exp_avg_sq" : "exp_avg", name);
            const mega_st_tensor *t = mega_st_get(f, nm);
            if (!t || mega_st_read_real(t, (k ? vv : mm) + off, n) != MEGA_OK) {
                mega_st_close(f);
                return cli_error("%s: optimizer state for '%s' is missing or has the wrong size", path, name);
            }
        }
    }
    const char *tj = mega_st_meta(f, "train");
    *train = tj ? cJSON_Parse(tj) : NULL;
    mega_st_close(f);
    if (!*train) return cli_error("%s: no training configuration in the metadata", path);
    return 0;
}

/* ---- the command ------------------------------------------------------------------------ */

static int bad_model_flags(const train_args *a, mega_lm_config *c) {
    mega_lm_config_default(c);
    c->layers = a->layers, c->embed_dim = a->embed_dim, c->z_dim = a->z_dim, c->hidden_dim = a->hidden_dim;
    c->n_dim = a->n_dim, c->ffn_dim = a->ffn_dim, c->chunk_size = a->chunk_size, c->truncation = a->truncation;
    c->max_positions = a->max_positions;
    mega_attn_fn_parse(a->attn, &c->attention_activation);
    c->rotary = !strcmp(a->relpos, "rotary");
    mega_norm_parse(a->norm, &c->norm_type);
    mega_act_parse(a->activation, &c->activation);
    c->prenorm = a->prenorm, c->tie_embeddings = a->tie, c->scale_embedding = !a->no_scale;
    c->final_norm_affine = !a->no_affine_final;
    c->dropout = (float)a->dropout, c->attention_dropout = (float)a->attention_dropout;
    c->hidden_dropout = (float)a->hidden_dropout, c->activation_dropout = (float)a->activation_dropout;
    if (mega_lm_config_check(c) != MEGA_OK) return cli_error("%s", mega_last_error());
    return 0;
}

static FILE *open_log(const train_args *a, int64_t keep_upto) {
    char p[4096];
    path_join(p, sizeof p, a->out, "log.jsonl");
    if (a->resume && file_exists(p)) {
        /* drop entries written after the checkpoint we resume from, so the curve stays one line */
        bytes_t b;
        if (read_bytes(p, &b, "log") == 0) {
            size_t o = 0, keep = 0;
            while (o < b.n) {
                size_t e = o;
                while (e < b.n && b.buf[e] != '\n') e++;
                const char *s = strstr((const char *)b.buf + o, "\"step\":");
                long long st = s && (size_t)(s - (const char *)b.buf) < e ? atoll(s + 7) : 0;
                if (st > keep_upto) break;
                keep = e < b.n ? e + 1 : e;
                o = e + 1;
            }
            mega_write_file_atomic(p, b.buf, keep);
            free(b.buf);
        }
        return fopen(p, "a");
    }
    return fopen(p, "w");
}

int cmd_train(int argc, char **argv) {
    train_args a;
    memset(&a, 0, sizeof a);
    mega_lm_config d;
    mega_lm_config_default(&d);
    a.valid_fraction = 0.05;
    a.layers = d.layers, a.embed_dim = d.embed_dim, a.z_dim = d.z_dim, a.hidden_dim = d.hidden_dim;
    a.n_dim = d.n_dim, a.ffn_dim = d.ffn_dim, a.chunk_size = d.chunk_size, a.truncation = 0;
    a.max_positions = d.max_positions;
    a.attn = "softmax", a.relpos = "simple", a.norm = "layernorm", a.activation = "silu";
    a.prenorm = 1;
    a.steps = 1000, a.batch = 16, a.seq_len = 256;
    a.lr = 2e-3, a.min_lr = 1e-4, a.warmup = 100, a.schedule = "cosine";
    a.weight_decay = 0.01, a.clip = 1.0, a.beta1 = 0.9, a.beta2 = 0.98, a.eps = 1e-8;
    a.seed = 1, a.threads = 0;
    a.eval_every = 200, a.save_every = 500, a.log_every = 0, a.eval_tokens = 65536;
    int postnorm = 0;
    cli_flag fl[] = {
        {"data", F_STR, &a.data, "training text (bytes)", NULL, 1, 0, 0},
        {"valid", F_STR, &a.valid, "validation text (default: the last --valid-fraction of --data)", NULL, 1, 0, 0},
        {"valid-fraction", F_DBL, &a.valid_fraction, "fraction of --data held out when --valid is not given", NULL, 0, 0.9, 0},
        {"out", F_STR, &a.out, "checkpoint directory", NULL, 1, 0, 0},
        {"resume", F_SET, &a.resume, "continue the run in --out exactly where it stopped", NULL, 1, 0, 0},
        {"layers", F_INT, &a.layers, "number of Mega blocks", NULL, 1, 1024, 0},
        {"embed-dim", F_INT, &a.embed_dim, "model width D", NULL, 1, 65536, 0},
        {"z-dim", F_INT, &a.z_dim, "shared query/key width Z", NULL, 1, 65536, 0},
        {"hidden-dim", F_INT, &a.hidden_dim, "value/hidden width E", NULL, 1, 262144, 0},
        {"n-dim", F_INT, &a.n_dim, "EMA expansion dimension N", NULL, 1, 64, 0},
        {"ffn-dim", F_INT, &a.ffn_dim, "normalized FFN width (0 = no FFN)", NULL, 0, 262144, 0},
        {"chunk-size", F_INT, &a.chunk_size, "attention chunk (-1 = full attention)", NULL, -1, 1 << 20, 0},
        {"truncation", F_INT, &a.truncation, "EMA kernel truncation (0 = none)", NULL, 0, 1 << 30, 0},
        {"max-positions", F_INT, &a.max_positions, "simple-bias length for full attention", NULL, 1, 1 << 20, 0},
        {"attention-activation", F_ENUM, &a.attn, "attention function", "softmax|relu2|laplace", 1, 0, 0},
        {"rel-pos-bias", F_ENUM, &a.relpos, "relative position bias", "simple|rotary", 1, 0, 0},
        {"norm-type", F_ENUM, &a.norm, "normalization", "layernorm|scalenorm|rmsnorm|batchnorm", 1, 0, 0},
        {"activation", F_ENUM, &a.activation, "activation of v, h and the FFN", "silu|gelu|relu|linear", 1, 0, 0},
        {"prenorm", F_SET, &a.prenorm, "normalize before each block (default)", NULL, 1, 0, 0},
        {"postnorm", F_SET, &postnorm, "normalize after each block", NULL, 1, 0, 0},
        {"tie-embeddings", F_SET, &a.tie, "share the input embedding and the output projection", NULL, 1, 0, 0},
        {"no-scale-embedding", F_SET, &a.no_scale, "do not multiply embeddings by sqrt(embed-dim)", NULL, 1, 0, 0},
        {"no-affine-final-norm", F_SET, &a.no_affine_final, "final norm without parameters", NULL, 1, 0, 0},
        {"dropout", F_DBL, &a.dropout, "dropout (embedding, EMA output, h, FFN output)", NULL, 0, 0.99, 0},
        {"attention-dropout", F_DBL, &a.attention_dropout, "dropout on the attention weights", NULL, 0, 0.99, 0},
        {"hidden-dropout", F_DBL, &a.hidden_dropout, "dropout on the attention values", NULL, 0, 0.99, 0},
        {"activation-dropout", F_DBL, &a.activation_dropout, "dropout inside the FFN", NULL, 0, 0.99, 0},
        {"steps", F_I64, &a.steps, "optimizer steps (total, including resumed ones)", NULL, 1, 1e12, 0},
        {"batch", F_INT, &a.batch, "sequences per step", NULL, 1, 1 << 20, 0},
        {"seq-len", F_INT, &a.seq_len, "bytes per sequence", NULL, 2, 1 << 24, 0},
        {"lr", F_DBL, &a.lr, "peak learning rate", NULL, 0, 10, 0},
        {"min-lr", F_DBL, &a.min_lr, "final learning rate", NULL, 0, 10, 0},
        {"warmup", F_I64, &a.warmup, "linear warm-up steps", NULL, 0, 1e12, 0},
        {"schedule", F_ENUM, &a.schedule, "decay after warm-up", "cosine|linear|constant", 1, 0, 0},
        {"weight-decay", F_DBL, &a.weight_decay, "AdamW decoupled weight decay (matrices and embeddings)", NULL, 0, 10, 0},
        {"decay-all", F_SET, &a.decay_all, "also decay norms, biases, EMA and bias parameters", NULL, 1, 0, 0},
        {"clip", F_DBL, &a.clip, "clip the global gradient norm (0 = off)", NULL, 0, 1e9, 0},
        {"beta1", F_DBL, &a.beta1, "AdamW beta1", NULL, 0, 0.999999, 0},
        {"beta2", F_DBL, &a.beta2, "AdamW beta2", NULL, 0, 0.999999999, 0},
        {"eps", F_DBL, &a.eps, "AdamW epsilon", NULL, 1e-30, 1, 0},
        {"seed", F_I64, &a.seed, "seed (initialisation, data windows, dropout)", NULL, 0, 9e15, 0},
        {"threads", F_INT, &a.threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        {"eval-every", F_I64, &a.eval_every, "validate every N steps (0 = only at the end)", NULL, 0, 1e12, 0},
        {"eval-tokens", F_I64, &a.eval_tokens, "validation bytes per evaluation (0 = the whole split)", NULL, 0, 1e15, 0},
        {"save-every", F_I64, &a.save_every, "checkpoint every N steps (0 = only at the end)", NULL, 0, 1e12, 0},
        {"log-every", F_I64, &a.log_every, "print a progress line every N steps (0 = about 50 lines)", NULL, 0, 1e12, 0},
        {"stop-after", F_I64, &a.stop_after, "stop (with a checkpoint) after N steps of this invocation; the schedule still targets --steps (0 = run to the end)", NULL, 0, 1e12, 0},
        {"quiet", F_SET, &a.quiet, "no live progress bar", NULL, 1, 0, 0},
        FL_END};
    const char *usage = "--data FILE [--valid FILE | --valid-fraction F] --out DIR [options]";
    int r = cli_parse("train", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (postnorm) a.prenorm = 0;
    if (!a.data) return cli_error("--data FILE is required (see 'mega train --help')"), 2;
    if (!a.out) return cli_error("--out DIR is required (see 'mega train --help')"), 2;
    if (a.min_lr > a.lr) return cli_error("--min-lr (%g) is larger than --lr (%g)", a.min_lr, a.lr), 2;
    mega_set_threads(a.threads);

    char path[4096];
    mega_lm *m = NULL;
    mega_adamw *opt = NULL;
    train_pos pos = {0, 0, 0, 0};
    int64_t start = 0;
    mega_lm_config cfg;
    if (a.resume) {
        path_join(path, sizeof path, a.out, "model.safetensors");
        if (!file_exists(path)) return cli_error("--resume: no checkpoint in '%s' (%s is missing)", a.out, path), 2;
        if (mega_lm_load(path, &m) != MEGA_OK) return cli_error("--resume: %s", mega_last_error()), 2;
        cfg = *mega_lm_get_config(m);
        /* model flags given on the command line must agree with the checkpoint */
        mega_lm_config want;
        if (bad_model_flags(&a, &want)) {
            mega_lm_free(m);
            return 2;
        }
        const char *mf[] = {"layers", "embed-dim", "z-dim", "hidden-dim", "n-dim", "ffn-dim", "chunk-size", "truncation",
                            "attention-activation", "rel-pos-bias", "norm-type", "prenorm", "postnorm", "tie-embeddings"};
        for (size_t i = 0; i < sizeof mf / sizeof *mf; i++)
            if (cli_seen(fl, mf[i])) {
                char *x = mega_lm_config_to_json(&want), *y = mega_lm_config_to_json(&cfg);
                int same = x && y && !strcmp(x, y);
                free(x), free(y);
                if (!same) {
                    mega_lm_free(m);
                    return cli_error("--resume: --%s differs from the checkpoint's model config (see 'mega info --model %s')", mf[i], a.out), 2;
                }
            }
        if (mega_adamw_new(mega_lm_param_total(m), &opt) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
        /* pick the state file whose step matches the model (see the header comment) */
        int64_t mstep = -1;
        {
            mega_st_file *mf0;
            path_join(path, sizeof path, a.out, "model.safetensors");
            if (mega_st_open(path, &mf0) == MEGA_OK) {
                const char *ss = mega_st_meta(mf0, "step");
                if (ss) mstep = atoll(ss);
                mega_st_close(mf0);
            }
        }
        cJSON *tj = NULL;
        int found = 0;
        const char *cands[] = {"train_state.safetensors", "train_state.prev.safetensors"};
        for (int i = 0; i < 2 && !found; i++) {
            path_join(path, sizeof path, a.out, cands[i]);
            if (!file_exists(path)) continue;
            cJSON_Delete(tj);
            tj = NULL;
            if (load_state_file(path, m, opt, &pos, &tj)) {
                mega_lm_free(m);
                mega_adamw_free(opt);
                return 2;
            }
            if (mstep < 0 || pos.step == mstep) found = 1;
        }
        if (!found) {
            cJSON_Delete(tj);
            mega_lm_free(m);
            mega_adamw_free(opt);
            return cli_error("--resume: no optimizer state in '%s' matches the model's step %lld", a.out, (long long)mstep), 2;
        }
        /* training hyper-parameters come from the checkpoint; --steps may extend the run */
        int64_t steps_cli = a.steps;
        const cJSON *v;
#define TJ_NUM(key, dst) if ((v = cJSON_GetObjectItemCaseSensitive(tj, key)) && cJSON_IsNumber(v)) dst = v->valuedouble
        double tmp;
        TJ_NUM("batch", tmp), a.batch = (int)tmp;
        TJ_NUM("seq-len", tmp), a.seq_len = (int)tmp;
        TJ_NUM("lr", a.lr);
        TJ_NUM("min-lr", a.min_lr);
        TJ_NUM("warmup", tmp), a.warmup = (int64_t)tmp;
        TJ_NUM("weight-decay", a.weight_decay);
        TJ_NUM("clip", a.clip);
        TJ_NUM("beta1", a.beta1);
        TJ_NUM("beta2", a.beta2);
        TJ_NUM("eps", a.eps);
        TJ_NUM("seed", tmp), a.seed = (int64_t)tmp;
        TJ_NUM("valid-fraction", a.valid_fraction);
        TJ_NUM("steps", tmp), a.steps = (int64_t)tmp;
#undef TJ_NUM
        if ((v = cJSON_GetObjectItemCaseSensitive(tj, "decay-all"))) a.decay_all = cJSON_IsTrue(v);
        static char sched[32];
        if ((v = cJSON_GetObjectItemCaseSensitive(tj, "schedule")) && cJSON_IsString(v))
            snprintf(sched, sizeof sched, "%s", v->valuestring), a.schedule = sched;
        cJSON_Delete(tj);
        if (cli_seen(fl, "steps")) a.steps = steps_cli;
        const char *tf[] = {"batch", "seq-len", "lr", "min-lr", "warmup", "weight-decay", "clip", "seed", "schedule"};
        for (size_t i = 0; i < sizeof tf / sizeof *tf; i++)
            if (cli_seen(fl, tf[i]))
                fprintf(stderr, "mega: note: --resume keeps the checkpoint's --%s; the flag is ignored\n", tf[i]);
        start = pos.step;
        if (start >= a.steps) {
            printf("checkpoint in %s is already at step %lld of %lld; pass a larger --steps to continue\n", a.out,
                   (long long)start, (long long)a.steps);
            mega_lm_free(m);
            mega_adamw_free(opt);
            return 0;
        }
    } else {
        if (bad_model_flags(&a, &cfg)) return 2;
    }

    /* data */
    bytes_t data, valid = {0, 0};
    if (read_bytes(a.data, &data, "--data")) {
        mega_lm_free(m);
        mega_adamw_free(opt);
        return 2;
    }
    const uint8_t *train_txt = data.buf;
    size_t ntrain = data.n;
    const uint8_t *val_txt = NULL;
    size_t nval = 0;
    if (a.valid) {
        if (read_bytes(a.valid, &valid, "--valid")) return 2;
        val_txt = valid.buf, nval = valid.n;
    } else if (a.valid_fraction > 0) {
        nval = (size_t)((double)data.n * a.valid_fraction);
        ntrain = data.n - nval;
        val_txt = data.buf + ntrain;
    }
    if (ntrain < (size_t)a.seq_len + 1)
        return cli_error("training text has %zu bytes, fewer than --seq-len + 1 = %d (use a shorter --seq-len)", ntrain, a.seq_len + 1), 2;
    if (val_txt && nval < 2) val_txt = NULL;
    uint64_t dhash = fnv1a64(data.buf, data.n);
    if (a.resume && (pos.data_hash != dhash || pos.data_size != data.n))
        return cli_error("--resume: '%s' is not the data this run was trained on (size or checksum differ)", a.data), 2;
    if (!a.resume) {
        if (ensure_dir(a.out)) return 2;
        if (mega_lm_create(&cfg, &m) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
        mega_lm_init_params(m, (uint64_t)a.seed);
        if (mega_adamw_new(mega_lm_param_total(m), &opt) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
        pos.data_rng = (uint64_t)a.seed * 0xD1B54A32D192ED03ull + 77;
        pos.data_hash = dhash, pos.data_size = data.n;
    }
    if (mega_lm_reserve(m, a.batch, a.seq_len) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
    if (a.log_every <= 0) a.log_every = a.steps >= 50 ? a.steps / 50 : 1;

    printf("mega train: %s\n", mega_build_info());
    printf("  model     %zu parameters\n", mega_lm_num_params(m));
    print_config(stdout, mega_lm_get_config(m), "            ");
    printf("  data      %s: %zu training bytes, %zu validation bytes%s\n", a.data, ntrain, nval,
           a.valid ? " (--valid)" : val_txt ? " (held-out tail)" : "");
    printf("  training  steps %lld, batch %d x seq-len %d = %d tokens/step, lr %g -> %g (%s, warmup %lld), "
           "weight-decay %g, clip %g, seed %lld, threads %d\n",
           (long long)a.steps, a.batch, a.seq_len, a.batch * a.seq_len, a.lr, a.min_lr, a.schedule, (long long)a.warmup,
           a.weight_decay, a.clip, (long long)a.seed, mega_get_threads());
    if (a.resume) printf("  resuming  from step %lld in %s\n", (long long)start, a.out);
    printf("  output    %s\n", a.out);
    fflush(stdout);

    FILE *log = open_log(&a, start);
    if (!log) return cli_error("cannot write the log in '%s'", a.out), 2;
    int32_t *tok = malloc((size_t)a.batch * a.seq_len * sizeof(int32_t));
    int32_t *tgt = malloc((size_t)a.batch * a.seq_len * sizeof(int32_t));
    if (!tok || !tgt) return cli_error("out of memory"), 2;
    mega_adamw_hp hp = {a.beta1, a.beta2, a.eps, a.weight_decay, a.decay_all};
    const int tty = is_tty(stdout) && !a.quiet;
    double t_start = now_sec(), t_last = t_start, loss_acc = 0;
    int64_t tok_acc = 0, n_acc = 0;
    int rc = 0;
    for (int64_t step = start; step < a.steps; step++) {
        /* random contiguous windows of seq-len + 1 bytes */
        for (int b = 0; b < a.batch; b++) {
            size_t s0 = (size_t)rng_below(&pos.data_rng, (uint64_t)(ntrain - (size_t)a.seq_len));
            for (int t = 0; t < a.seq_len; t++) {
                tok[(size_t)b * a.seq_len + t] = train_txt[s0 + (size_t)t];
                tgt[(size_t)b * a.seq_len + t] = train_txt[s0 + (size_t)t + 1];
            }
        }
        double lr = lr_at(&a, step), loss;
        int64_t cnt;
        mega_lm_run run = {1, dropout_key((uint64_t)a.seed, step)};
        if (mega_lm_forward(m, tok, tgt, a.batch, a.seq_len, &run, &loss, &cnt) != MEGA_OK) {
            rc = cli_error("step %lld: %s", (long long)step + 1, mega_last_error());
            break;
        }
        if (!isfinite(loss)) {
            rc = cli_error("step %lld: the loss is not finite (%g); lower --lr or raise --warmup", (long long)step + 1, loss);
            break;
        }
        mega_lm_zero_grad(m);
        mega_lm_backward(m, 1.0);
        double gn = mega_lm_grad_norm(m);
        if (a.clip > 0 && gn > a.clip) mega_lm_scale_grads(m, a.clip / (gn + 1e-12));
        mega_adamw_step_lm(opt, m, &hp, lr);
        pos.step = step + 1;
        loss_acc += loss, n_acc++, tok_acc += (int64_t)a.batch * a.seq_len;
        double now = now_sec();
        if (tty) {
            int w = 30, f = (int)((double)w * (double)pos.step / (double)a.steps);
            char bar[64];
            for (int i = 0; i < w; i++) bar[i] = i < f ? '#' : '.';
            bar[w] = 0;
            printf("\r[%s] %lld/%lld loss %.4f   ", bar, (long long)pos.step, (long long)a.steps, loss);
            fflush(stdout);
        }
        int do_log = pos.step % a.log_every == 0 || pos.step == a.steps;
        if (do_log) {
            double dt = now - t_last, el = now - t_start;
            double rate = tok_acc / (dt > 0 ? dt : 1e-9);
            double eta = (double)(a.steps - pos.step) * (el / (double)(pos.step - start));
            double ml = loss_acc / (double)n_acc;
            char rs[32], es[32], els[32];
            fmt_rate(rs, sizeof rs, rate);
            fmt_duration(es, sizeof es, eta);
            fmt_duration(els, sizeof els, el);
            printf("%sstep %6lld/%lld | loss %.4f | bpb %.4f | lr %.2e | gnorm %.2f | %s tok/s | %s elapsed | ETA %s\n",
                   tty ? "\r" : "", (long long)pos.step, (long long)a.steps, ml, ml / M_LN2, lr, gn, rs, els, es);
            fprintf(log, "{\"step\": %lld, \"loss\": %.6f, \"bpb\": %.6f, \"lr\": %.6g, \"grad_norm\": %.4f, \"tok_s\": %.1f, \"time\": %.2f}\n",
                    (long long)pos.step, ml, ml / M_LN2, lr, gn, rate, el);
            fflush(log);
            fflush(stdout);
            loss_acc = 0, n_acc = 0, tok_acc = 0, t_last = now;
        }
        int stop = a.stop_after > 0 && pos.step - start >= a.stop_after && pos.step < a.steps;
        int last = pos.step == a.steps;
        if (val_txt && ((a.eval_every > 0 && pos.step % a.eval_every == 0) || last)) {
            double vl;
            int64_t vc;
            double te = now_sec();
            if (eval_windows(m, val_txt, nval, a.batch, a.seq_len, (size_t)a.eval_tokens, &vl, &vc)) {
                rc = 2;
                break;
            }
            printf("%svalid step %6lld | loss %.4f | bpb %.4f | %lld bytes in windows of %d (%.1fs)\n", tty ? "\r" : "",
                   (long long)pos.step, vl, vl / M_LN2, (long long)vc, a.seq_len, now_sec() - te);
            fprintf(log, "{\"step\": %lld, \"valid_loss\": %.6f, \"valid_bpb\": %.6f, \"valid_tokens\": %lld}\n",
                    (long long)pos.step, vl, vl / M_LN2, (long long)vc);
            fflush(log);
            t_last += now_sec() - te; /* evaluation time is not training throughput */
        }
        if ((a.save_every > 0 && pos.step % a.save_every == 0) || last || stop) {
            if (save_checkpoint(&a, m, opt, &pos)) {
                rc = 2;
                break;
            }
            if (!last) printf("%ssaved checkpoint at step %lld\n", tty ? "\r" : "", (long long)pos.step);
        }
        if (stop) {
            printf("stopped after %lld steps (--stop-after); continue with: mega train --data %s --out %s --resume\n",
                   (long long)(pos.step - start), a.data, a.out);
            break;
        }
    }
    fclose(log);
    if (!rc) {
        double el = now_sec() - t_start;
        char els[32];
        fmt_duration(els, sizeof els, el);
        printf("done: %lld steps in %s; checkpoint in %s\n", (long long)(pos.step - start), els, a.out);
    }
    free(tok), free(tgt), free(data.buf), free(valid.buf);
    mega_lm_free(m);
    mega_adamw_free(opt);
    return rc ? 2 : 0;
}
