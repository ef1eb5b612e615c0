/* mega eval / generate / info: using a trained language model. */
#include "common.h"
#include "models.h"
#include "task.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


/* the flags naming a classifier's data (data_flags_check; the IDX pair from the table of formats) */
#define DATA_FLAGS ((const char *const[3]){"data", data_file_flag("", 0), data_file_flag("", 1)})





/* ---- classifiers ---------------------------------------------------------------------- */



static int load_cls_data(const cls_model *cm, const char *data, const char *images, const char *labels, int seq_len,
                         mega_dataset *d) {
    mega_data_opts o;
    memset(&o, 0, sizeof o);
    o.max_len = seq_len;
    o.keep_parens = cm->vocab.keep_parens;
    o.real = cm->vocab.real, o.mean = cm->vocab.mean, o.std = cm->vocab.std;
    o.classes = &cm->classes;
    if (cm->format == MEGA_DATA_SPEECH) /* a Speech Commands directory: its test clips (testing_list.txt) */
        o.split = 2, o.all_words = cm->classes.n > 10, o.max_len = 0;
    if (cm->format == MEGA_DATA_LRA_IMAGE) o.split = 2, o.max_len = 0; /* DIR: its test split; the images whole */
    if (mega_dataset_load(cm->format, data, images, labels, &o, d) != MEGA_OK) return cli_error("%s", mega_last_error());
    /* an image longer than the model's positions or its training length is another image size,
     * not a text to cut */
    const mega_block_config *bc = &mega_cls_get_config(cm->m)->block;
    int lim = seq_len;
    const char *why = "--seq-len";
    if (bc->max_positions > 0 && bc->max_positions < lim) lim = bc->max_positions, why = "its max-positions";
    if (bc->train_len > 0 && bc->train_len < lim) lim = bc->train_len, why = "its training length";
    if (d->pixel_lines && d->max_len > lim)
        return cli_error("%s: images of %d pixels, but the model takes at most %d (%s)", d->path, d->max_len, lim, why);
    return 0;
}

/* The data of a classifier converted from an official LRA checkpoint: the lra-text task's
 * binarized directory as the official data ships (docs/interop.md), named DIR (split test) or
 * DIR/SPLIT; its classes must be the model's (a model converted without --label-dict then names
 * its classes by the label dictionary) */
static int load_lra_data(cls_model *cm, const char *model, const char *data, const char *images, int seq_len,
                         mega_dataset *d) {
    if (!cm->dict || images)
        return cli_error("'%s' was converted from an official LRA %s checkpoint: the tool reads the lra-text task's "
                         "binarized data (--data DIR with src-bin/ and label-bin/), %s", model, cm->dict ? "text" : "image",
                         cm->dict ? "not --images/--labels" : "not the pixels of an image task"), 1;
    char dir[4096], split[4096] = "test", probe[8320];
    struct stat sb;
    snprintf(dir, sizeof dir, "%s", data);
    snprintf(probe, sizeof probe, "%s/src-bin", dir);
    if (stat(probe, &sb) != 0 || !S_ISDIR(sb.st_mode)) { /* DIR/SPLIT */
        char *slash = strrchr(dir, '/');
        snprintf(split, sizeof split, "%s", slash ? slash + 1 : dir);
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
        snprintf(probe, sizeof probe, "%s/src-bin", dir); /* a split it lacks: the loader names the file */
        if (stat(probe, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return cli_error("'%s' was converted from an official LRA checkpoint: --data names the lra-text task's data "
                             "directory (with src-bin/ and label-bin/; split test) or DIR/SPLIT, not '%s'", model, data), 1;
    }
    mega_data_opts o;
    memset(&o, 0, sizeof o);
    const mega_cls_config *c = mega_cls_get_config(cm->m);
    /* the task cuts every input to --max-positions (TruncateDataset) */
    o.max_len = c->block.max_positions > 0 && c->block.max_positions < seq_len ? c->block.max_positions : seq_len;
    if (mega_dataset_load_lra_bin(dir, split, cm->dict, c->pool == MEGA_POOL_CLS, &o, d) != MEGA_OK)
        return cli_error("%s", mega_last_error()), 1;
    if (d->pairs != c->two_tower)
        return cli_error("%s: %s, but '%s' is a %s model", dir, d->pairs ? "two texts per example (src1-bin)" : "one text per example",
                         model, c->two_tower ? "two-text (two-tower)" : "one-text"), 1;
    if (d->classes.n > c->classes)
        return cli_error("%s/label-bin/dict.txt has %d labels but '%s' has %d classes", dir, d->classes.n, model, c->classes), 1;
    if (!cm->named) {
        mega_classes_free(&cm->classes);
        if (mega_classes_copy(&cm->classes, &d->classes) != MEGA_OK) return cli_error("%s", mega_last_error()), 1;
    }
    for (int k = 0; k < d->classes.n; k++)
        if (k >= cm->classes.n || strcmp(d->classes.names[k], cm->classes.names[k]))
            return cli_error("%s/label-bin/dict.txt: label %d is '%s' but the model's class %d is '%s' (another label "
                             "dictionary)", dir, k, d->classes.names[k], k, k < cm->classes.n ? cm->classes.names[k] : "?"), 1;
    return 0;
}

/* the progress line of a long evaluation (stderr) */
typedef struct {
    progress_t pr;
    double t0;
    const char *unit, *metric; /* streams: what is counted and the measure */
} eval_bar;

static void cls_progress(void *ctx, int64_t done, int64_t total, double acc) {
    eval_bar *e = ctx;
    if (progress_due(&e->pr, done >= total))
        progress_print(&e->pr, "  eval %d/%d examples, accuracy %.4f", (int)done, (int)total, acc);
}

static void stream_progress(void *ctx, int64_t done, int64_t total, double loss) {
    eval_bar *e = ctx;
    if (!progress_due(&e->pr, done >= total)) return;
    char eta[32], rate[32];
    double r = (double)done / (now_sec() - e->t0 + 1e-9);
    fmt_duration(eta, sizeof eta, (double)(total - done) / (r + 1e-9));
    fmt_rate(rate, sizeof rate, r);
    progress_print(&e->pr, "  eval %5.1f%%  %zu/%zu %s  %s %.4f  %s tok/s  ETA %s", 100.0 * (double)done / (double)total,
                   (size_t)done, (size_t)total, e->unit, e->metric, loss / log(2.0), rate, eta);
}

/* a classifier run over every example of its data: the predictions, loss and accuracy */
typedef struct {
    cls_model cm;
    mega_dataset d;
    int *pred;
    double loss, seconds;
    int64_t correct;
} cls_run;

static void cls_run_free(cls_run *r) {
    free(r->pred);
    mega_dataset_free(&r->d);
    free_cls_model(&r->cm);
}

/* 0, or 2 after the error (r is then still for cls_run_free) */
static int cls_run_all(cls_run *r, const char *model, const char *data, const char *images, const char *labels,
                       int seq_len, int batch, int verbose, int64_t max_memory) {
    memset(r, 0, sizeof *r);
    if (load_cls_model(model, &r->cm)) return 2;
    /* a classifier converted from an official LRA checkpoint reads the official binarized data */
    if (r->cm.fairseq && load_lra_data(&r->cm, model, data, images, seq_len, &r->d)) return 2;
    /* the kind of input the model was trained on (a model without a data-format reads either) */
    if (!r->cm.fairseq && r->cm.format == MEGA_DATA_IDX && data)
        return cli_error("'%s' is an image classifier: it reads --images and --labels (IDX), not --data text", model), 2;
    if (!r->cm.fairseq && r->cm.format != MEGA_DATA_IDX && r->cm.format != MEGA_DATA_AUTO && images)
        return cli_error("'%s' is %s classifier: it reads --data, not --images/--labels (IDX images)", model,
                         r->cm.format == MEGA_DATA_LRA_IMAGE ? "an LRA image-layout" : "a text"), 2;
    if (!r->cm.fairseq && load_cls_data(&r->cm, data, images, labels, seq_len, &r->d)) return 2;
    {
        /* the forward buffers of the longest batch, with the weights and the data already in memory */
        const int T = r->d.max_len > r->d.max_len2 ? r->d.max_len : r->d.max_len2, B = batch < r->d.n ? batch : r->d.n;
        mega_memory mm;
        run_memory rm;
        char how[64];
        snprintf(how, sizeof how, "batch %d x %d", B, T);
        const uint64_t data_b = (uint64_t)r->d.n_tokens * 2 + (uint64_t)r->d.n * 48;
        if (mega_cls_memory(mega_cls_get_config(r->cm.m), 0, B > 0 ? B : 1, T > 0 ? T : 1, &mm) != MEGA_OK)
            return cli_error("%s", mega_last_error()), 2;
        if (memory_guard("this evaluation", how, "lower --batch or --seq-len, or ", &mm, data_b, mm.params + data_b,
                         max_memory, &rm))
            return 2;
    }
    int *idx = malloc((size_t)r->d.n * sizeof(int));
    r->pred = malloc((size_t)r->d.n * sizeof(int));
    if (!idx || !r->pred) return free(idx), cli_error("out of memory"), 2;
    for (int i = 0; i < r->d.n; i++) idx[i] = i;
    const double t0 = now_sec();
    eval_bar bar = {.t0 = t0};
    progress_init(&bar.pr, stderr, !verbose, 10);
    int rc = mega_cls_evaluate(r->cm.m, &r->d, idx, r->d.n, batch, seq_len, cls_progress, &bar, &r->loss, &r->correct,
                               r->pred) != MEGA_OK;
    progress_break(&bar.pr);
    if (rc) cli_error("%s", mega_last_error());
    r->seconds = now_sec() - t0;
    free(idx);
    return rc ? 2 : 0;
}

static int eval_classifier(const char *model, const char *data, const char *images, const char *labels, int seq_len,
                           int batch, int confusion, int quiet, int64_t max_memory) {
    cls_run r;
    int rc = cls_run_all(&r, model, data, images, labels, seq_len, batch, !quiet, max_memory);
    if (!rc) {
        const int C = mega_cls_get_config(r.cm.m)->classes, n = r.d.n;
        const mega_classes *cl = &r.cm.classes;
        printf("accuracy %.4f (%lld/%d) | loss %.4f | %d examples, %d classes, %.1f s\n", (double)r.correct / n,
               (long long)r.correct, n, r.loss, n, C, r.seconds);
        int64_t *cm_ = confusion ? calloc((size_t)C * C, sizeof(int64_t)) : NULL;
        if (confusion && !cm_) rc = cli_error("out of memory");
        if (cm_) {
            for (int i = 0; i < n; i++) cm_[(size_t)r.d.label[i] * C + r.pred[i]]++;
            printf("confusion matrix (rows: true label, columns: predicted)\n%10s", "");
            for (int k = 0; k < C; k++) printf(" %8.8s", k < cl->n ? cl->names[k] : "?");
            printf("\n");
            for (int row = 0; row < C; row++) {
                printf("%10.10s", row < cl->n ? cl->names[row] : "?");
                for (int k = 0; k < C; k++) printf(" %8lld", (long long)cm_[(size_t)row * C + k]);
                printf("\n");
            }
            free(cm_);
        }
    }
    cls_run_free(&r);
    return rc ? 2 : 0;
}

/* one clip through a raw speech classifier: the word and its probability */
static int predict_clip(cls_model *cm, const char *path, float *clip, mega_real *vals, int L) {
    float *x;
    int64_t n;
    if (mega_audio_read(path, MEGA_SPEECH_RATE, L, &x, &n) != MEGA_OK) return cli_error("%s", mega_last_error());
    memcpy(clip, x, (size_t)n * sizeof *x);
    memset(clip + n, 0, (size_t)(L - n) * sizeof *clip); /* a short clip is zero-padded (--pad-short) */
    free(x);
    for (int t = 0; t < L; t++) vals[t] = clip[t];
    const int32_t len = L;
    const mega_cls_input in = {NULL, vals, &len, L};
    const mega_lm_run ev = {0, 0};
    if (mega_cls_forward(cm->m, &in, NULL, 1, NULL, &ev, NULL, NULL) != MEGA_OK) return cli_error("%s", mega_last_error());
    const mega_real *lg = mega_cls_logits(cm->m);
    const int C = mega_cls_get_config(cm->m)->classes;
    int am = 0;
    double s = 0;
    for (int k = 1; k < C; k++)
        if (lg[k] > lg[am]) am = k;
    for (int k = 0; k < C; k++) s += exp((double)lg[k] - lg[am]);
    printf("%s\t%s\t%.4f\n", path, am < cm->classes.n ? cm->classes.names[am] : "?", 1.0 / s);
    return 0;
}

/* `mega predict --audio FILE|DIR`: a raw speech classifier (trained on a Speech Commands
 * directory) on WAV files; its stored per-index statistics normalise them */
static int predict_audio(const char *model, const char *audio) {
    cls_model cm;
    if (load_cls_model(model, &cm)) return free_cls_model(&cm), 2;
    const mega_cls_config *c = mega_cls_get_config(cm.m);
    const int L = c->input_norm;
    if (c->embedding != MEGA_EMBED_REAL || L < 1)
        return free_cls_model(&cm), cli_error("'%s' is not a raw speech classifier (it was not trained on --format speech)", model), 2;
    float *clip = malloc((size_t)L * sizeof *clip);
    mega_real *vals = malloc((size_t)L * sizeof *vals);
    int rc = !clip || !vals ? cli_error("out of memory") : 0;
    struct stat sb;
    if (!rc && stat(audio, &sb) != 0) rc = cli_error("--audio '%s': %s", audio, strerror(errno));
    if (!rc && S_ISDIR(sb.st_mode)) {
        DIR *dp = opendir(audio);
        int found = 0;
        for (struct dirent *e; !rc && dp && (e = readdir(dp));) {
            const size_t k = strlen(e->d_name);
            if (k < 5 || strcasecmp(e->d_name + k - 4, ".wav")) continue;
            char p[4600];
            snprintf(p, sizeof p, "%s/%s", audio, e->d_name);
            found++;
            rc = predict_clip(&cm, p, clip, vals, L);
        }
        if (dp) closedir(dp);
        if (!rc && !found) rc = cli_error("--audio '%s': no .wav files in the directory", audio);
    } else if (!rc) {
        rc = predict_clip(&cm, audio, clip, vals, L);
    }
    free(clip), free(vals);
    free_cls_model(&cm);
    return rc ? 2 : 0;
}

int cmd_predict(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *images = NULL, *labels = NULL, *audio = NULL;
    int seq_len = 1 << 20, batch = 32, threads = 0;
    cli_flag fl[] = {
        {"model", F_STR, &model, "classifier checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
        WHICH_FLAG,
        {"data", F_STR, &data, "inputs in the training format (the label column is read but not used); a classifier converted from an official LRA checkpoint: its binarized data directory, DIR (split test) or DIR/SPLIT", NULL, 1, 0, 0},
        {data_file_flag("", 0), F_STR, &images, data_file_help("", 0), NULL, 1, 0, 0},
        {data_file_flag("", 1), F_STR, &labels, data_file_help("", 1), NULL, 1, 0, 0},
        {"seq-len", F_INT, &seq_len, "truncate inputs to this many tokens", NULL, 1, 1 << 24, 0},
        {"batch", F_INT, &batch, "examples per forward pass", NULL, 1, 1 << 16, 0},
        {"threads", F_INT, &threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        {"audio", F_STR, &audio, "a WAV clip or a directory of them (raw speech classifiers): prints path, word, probability", NULL, 1, 0, 0},
        FL_END};
    int r = cli_parse("predict", "--model DIR --data FILE   (prints one predicted label per input line)", fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (audio) {
        if (!model || data || images) return cli_error("--audio takes --model and no --data/--images"), 2;
        mega_set_threads(threads);
        return predict_audio(model, audio);
    }
    if (data_flags_check(DATA_FLAGS, data, images, labels)) return 2;
    if (!model || (!data && !images)) return cli_error("--model and --data are required (see 'mega predict --help')"), 2;
    mega_set_threads(threads);
    char p[4096];
    mega_model_kind kind;
    /* a file that cannot be read says why (as eval and info do); only a readable model of
     * another task is "not a classifier" */
    if (model_open(model, p, sizeof p, &kind)) return 2;
    if (kind != MEGA_MODEL_CLS)
        return cli_error("'%s' is not a %s (predict is for --task %s models)", model, model_kind_noun(MEGA_MODEL_CLS),
                         task_of_kind(MEGA_MODEL_CLS)->name), 2;
    cls_run run;
    int rc = cls_run_all(&run, model, data, images, labels, seq_len, batch, 0, 0);
    if (!rc) {
        const mega_classes *cl = &run.cm.classes;
        for (int i = 0; i < run.d.n && !out_failed(); i++) printf("%s\n", run.pred[i] < cl->n ? cl->names[run.pred[i]] : "?");
    }
    cls_run_free(&run);
    return rc;
}

/* --lengths: a comma-separated list of lengths in [2, 2^24] */
static int lengths_valid(const char *s) {
    for (const char *p = s; *p;) {
        char *end;
        long L = strtol(p, &end, 10);
        if (end == p || L < 2 || L > (1L << 24) || (*end && *end != ',')) return 0;
        p = *end ? end + 1 : end;
    }
    return *s != 0;
}

/* `mega eval --data` naming a fairseq binarized dataset (data-bin/x/test, or its .idx or .bin;
 * docs/interop.md): the ids of its sequences in order (each line's tokens and </s>, as
 * fairseq-preprocess stored them) after a first </s>, as the text path gives; every id within the
 * model's dictionary, and a dict.txt beside the dataset must be that dictionary */
static int read_fbin(const char *data, const mega_fdict *dict, int32_t **ids, size_t *ntok, size_t *unk) {
    char dir[4096], dpath[4200];
    if (!dict)
        return cli_error("--data '%s' is a fairseq binarized dataset, whose ids only a model converted from a fairseq "
                         "checkpoint (with its dictionary) reads", data);
    mega_fbin *d;
    if (mega_fbin_open(data, &d) != MEGA_OK) return cli_error("%s", mega_last_error());
    mega_fbin_prefix(data, dir, sizeof dir);
    char *slash = strrchr(dir, '/');
    snprintf(dpath, sizeof dpath, "%.*sdict.txt", slash ? (int)(slash - dir + 1) : 0, dir);
    if (access(dpath, F_OK) == 0) {
        mega_fdict *dd;
        mega_status st = mega_fdict_load_txt(dpath, mega_fdict_get_unit(dict), &dd);
        if (st == MEGA_OK) st = mega_fdict_check_same(dict, dd, dpath), mega_fdict_free(dd);
        if (st != MEGA_OK) return mega_fbin_close(d), cli_error("%s: not the model's dictionary: %s", data, mega_last_error());
    }
    const uint64_t n = mega_fbin_tokens(d);
    *ids = n && n < SIZE_MAX / sizeof **ids - 1 ? malloc(((size_t)n + 1) * sizeof **ids) : NULL;
    if (!*ids) return mega_fbin_close(d), cli_error("--data '%s': %s", data, n ? "out of memory" : "no tokens");
    (*ids)[0] = mega_fdict_get_specials(dict).eos;
    size_t k = 1;
    for (size_t i = 0; i < mega_fbin_count(d); k += mega_fbin_length(d, i), i++)
        if (mega_fbin_read(d, i, mega_fdict_size(dict), *ids + k) != MEGA_OK) {
            free(*ids), *ids = NULL, mega_fbin_close(d);
            return cli_error("%s", mega_last_error());
        }
    *ntok = (size_t)n, *unk = 0;
    for (size_t i = 1; i <= *ntok; i++) *unk += (*ids)[i] == mega_fdict_get_specials(dict).unk;
    mega_fbin_close(d);
    return 0;
}

/* `mega eval` of a language model: the streamed loss over the whole text, or the --lengths
 * table. Byte models score bytes; a converted fairseq model (dict) scores the ids fairseq-preprocess
 * would give the text, its first token predicted from </s> as fairseq's language-modeling task
 * does (fairseq/data/token_block_dataset.py, break mode "none"), restarting every tps tokens
 * (fairseq_cli/eval_mega_lm.py evaluates each --tokens-per-sample block with a fresh state). */
static int eval_lm(mega_lm *m, const mega_fdict *dict, const char *data, const char *lengths, int seq_len, size_t tps,
                   int64_t max_bytes, int64_t max_memory, int quiet) {
    const mega_lm_config *c = mega_lm_get_config(m);
    mega_block_context x;
    mega_block_context_of(&c->block, seq_len, &x);
    if (seq_len <= 0) /* Mega: the chunk (state carried) or 2048; other mixers: their trained context */
        seq_len = x.eval_len;
    {
        /* the memory: the weights (loaded), a forward of one segment (more than a stream holds) or
         * of the largest --lengths batch, and the text read (with its ids for a dictionary) */
        char bin[4096 + 8];
        const int fbin = mega_fbin_prefix(data, bin, sizeof bin - 8);
        if (fbin && max_bytes > 0) return cli_error("--max-bytes reads the start of a text, not of a binarized dataset ('%s')", data), 2;
        if (fbin) strcat(bin, ".bin"); /* at most 4 bytes of ids per byte of it (uint8 ids) */
        uint64_t text = file_size(fbin ? bin : data);
        if (max_bytes > 0 && (uint64_t)max_bytes < text) text = (uint64_t)max_bytes;
        int B = 1, T = seq_len;
        for (const char *q = lengths; q && *q;) {
            char *end;
            long L = strtol(q, &end, 10);
            if (end == q) break;
            if (L >= 2 && L <= (1L << 24) && (uint64_t)L + 1 <= text) { /* longer: no window is run */
                int b = (int)(65536 / L > 0 ? 65536 / L : 1);
                b = b > 16 ? 16 : b;
                if ((double)b * L > (double)B * T) B = b, T = (int)L;
            }
            q = *end ? end + 1 : end;
        }
        mega_memory mm;
        run_memory rm;
        char how[64];
        snprintf(how, sizeof how, "%s %d x %d", lengths ? "windows" : "segments", B, T);
        if (mega_lm_memory(c, 0, B, T, &mm) != MEGA_OK) return cli_error("%s", mega_last_error()), 2;
        const char *advice = lengths ? "use shorter --lengths or --max-bytes, or " : "use a shorter --seq-len or --max-bytes, or ";
        if (memory_guard("this evaluation", how, advice, &mm, dict ? 5 * text + 4 : text, mm.params, max_memory, &rm)) return 2;
    }
    mega_bytes txt = {0};
    int32_t *ids = NULL;
    size_t ntok = 0, unk = 0;
    const int binarized = mega_fbin_prefix(data, NULL, 0);
    if (binarized) {
        if (read_fbin(data, dict, &ids, &ntok, &unk)) return 2;
    }
    /* --max-bytes: only that much of the file is read */
    else if (mega_read_file_max(data, "--data", max_bytes > 0 ? (uint64_t)max_bytes : 0, &txt) != MEGA_OK)
        return cli_error("%s", mega_last_error()), 2;
    const size_t nbytes = txt.n;
    mega_tokens sq = ids ? (mega_tokens){NULL, ids, ntok + 1} : (mega_tokens){txt.data, NULL, txt.n};
    if (dict && !ids) {
        const char *why = NULL;
        if (mega_fdict_encode(dict, txt.data, txt.n, 1, NULL, &ntok, NULL) != MEGA_OK) why = mega_last_error();
        else if (!(ids = malloc((ntok + 1) * sizeof *ids))) why = "out of memory";
        else mega_fdict_encode(dict, txt.data, txt.n, 1, ids + 1, &ntok, &unk); /* checked by the count */
        if (why) {
            cli_error("--data '%s': %s", data, why);
            free(ids), mega_bytes_free(&txt);
            return 2;
        }
        ids[0] = mega_fdict_get_specials(dict).eos;
        mega_bytes_free(&txt);
        sq = (mega_tokens){NULL, ids, ntok + 1};
    }
    const char *per = dict ? (mega_fdict_get_unit(dict) == MEGA_FDICT_BYTE ? "bits per byte" : "bits per token") : "bits per byte";
    const char *units = dict ? "tokens" : "bytes";
    int rc = 0;
    if (lengths) {
        /* extrapolation table: one row per length */
        const char *p = lengths;
        printf("%-10s %-12s %-12s %s\n", "length", dict ? "bits/token" : "bpb", units, "note");
        while (*p) { /* a valid list (lengths_valid) */
            char *end;
            long L = strtol(p, &end, 10);
            p = *end ? end + 1 : end;
            double loss;
            int64_t cnt;
            if ((size_t)L + 1 > sq.n) {
                printf("%-10ld %-12s %-12s %s\n", L, "-", "-", "text shorter than one window");
                continue;
            }
            int B = (int)(65536 / L > 0 ? 65536 / L : 1);
            mega_clear_error();
            if (mega_lm_eval_windows(m, &sq, B > 16 ? 16 : B, (int)L, 0, &loss, &cnt) != MEGA_OK) {
                cli_error("%s", mega_last_error());
                printf("%-10ld %-12s %-12s %s\n", L, "n/a", "-", "(error above)");
                continue;
            }
            printf("%-10ld %-12.4f %-12lld\n", L, loss / M_LN2, (long long)cnt);
            fflush(stdout);
        }
    } else {
        double t0 = now_sec(), loss;
        int64_t cnt;
        if (!quiet) {
            if (binarized) fprintf(stderr, "mega eval: %s, fairseq binarized: %zu tokens (%zu <unk>)", data, ntok, unk);
            else fprintf(stderr, "mega eval: %s, %zu bytes", data, nbytes);
            if (dict && !binarized) fprintf(stderr, " = %zu tokens (%zu <unk>)", ntok, unk);
            fprintf(stderr, ", segments of %d, chunk %d (%s)", seq_len, c->block.chunk_size,
                    x.carry ? "state carried across segments" : "each segment restarts");
            if (tps) fprintf(stderr, ", restarting every %zu tokens", tps);
            fprintf(stderr, "\n");
        }
        eval_bar bar = {.t0 = t0, .unit = sq.bytes ? "bytes" : "tokens", .metric = sq.bytes ? "bpb" : "bits/token"};
        progress_init(&bar.pr, stderr, quiet, 10);
        rc = mega_lm_eval_stream(m, &sq, seq_len, tps, stream_progress, &bar, &loss, &cnt) != MEGA_OK;
        progress_break(&bar.pr);
        if (rc) cli_error("%s", mega_last_error());
        if (!rc) {
            double dt = now_sec() - t0;
            printf("loss %.6f nats/%s | %s %.6f", loss, dict ? "token" : "byte", per, loss / M_LN2);
            if (dict) printf(" | perplexity %.4f", exp(loss));
            printf(" | %lld %s scored | %.1f s (%.0f tok/s)\n", (long long)cnt, units, dt, (double)cnt / (dt > 0 ? dt : 1e-9));
        }
    }
    free(ids);
    if (!dict) mega_bytes_free(&txt);
    return rc ? 2 : 0;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *data = NULL;
    int seq_len = 0, chunk = 0, threads = 0, quiet = 0, confusion = 0, batch = 32, attn_window = -1;
    int64_t max_bytes = 0, max_memory = 0, tps_flag = -1;
    const char *task_name = "auto", *images = NULL, *labels = NULL, *lengths = NULL, *hyp_out = NULL;
    mega_s2s_search sp;
    mega_s2s_search_default(&sp);
    int64_t max_examples = 0;
    int no_group = 0, max_tokens = 4096;
    cli_flag fl[] = {
        {"lengths", F_STR, &lengths, "lm: bits per byte at several lengths in one call (e.g. 512,1024,2048,4096): full forward over non-overlapping windows of each length (train short, test long)", NULL, 1, 0, 0},
        {"attn-window", F_INT, &attn_window, "lm, attention mixers: apply a local attention mask of this width (-1 = as trained)", NULL, -1, 1 << 24, 0},
        {"task", F_ENUM, &task_name, "lm, classify or translate (auto: from the model)", NULL, 1, 0, 0}, /* choices: below */
        SEARCH_FLAGS("translate: ", &sp),
        {"max-examples", F_I64, &max_examples, "translate: the first N usable pairs only (0 = all)", NULL, 0, 1e12, 0},
        {"max-tokens", F_INT, &max_tokens, "translate: tokens per teacher-forced batch", NULL, 2, 1 << 30, 0},
        {"no-group", F_SET, &no_group, "translate: score every line as its own segment (default: lines with the same source are one segment with several references)", NULL, 1, 0, 0},
        {"hyp-out", F_STR, &hyp_out, "translate: write source<TAB>translation per segment to this file", NULL, 1, 0, 0},
        {data_file_flag("", 0), F_STR, &images, data_file_help("", 0), NULL, 1, 0, 0},
        {data_file_flag("", 1), F_STR, &labels, data_file_help("", 1), NULL, 1, 0, 0},
        {"confusion", F_SET, &confusion, "classify: print the confusion matrix", NULL, 1, 0, 0},
        {"batch", F_INT, &batch, "classify: examples per forward pass; translate: sentences per search", NULL, 1, 1 << 16, 0},
        {"model", F_STR, &model, "checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
        WHICH_FLAG,
        {"data", F_STR, &data, "text to score (bytes), or a fairseq binarized dataset (PREFIX, PREFIX.idx or PREFIX.bin) for a model converted from fairseq; a converted LRA classifier: its binarized data directory, DIR (split test) or DIR/SPLIT", NULL, 1, 0, 0},
        {"seq-len", F_INT, &seq_len, "segment length fed per call, state carried across segments (0 = the chunk size, or 2048 for full attention, where each segment restarts)", NULL, 0, 1 << 24, 0},
        {"chunk-size", F_INT, &chunk, "attention chunk at evaluation (0 = as trained; rotary models only)", NULL, -1, 1 << 20, 0},
        {"tokens-per-sample", F_I64, &tps_flag, "lm: restart the state every N tokens, as fairseq's evaluation of its --tokens-per-sample blocks (-1 = the converted checkpoint's value, else never; 0 = never)", NULL, -1, 1e15, 0},
        {"max-bytes", F_I64, &max_bytes, "score only the first N bytes, reading only those (0 = all)", NULL, 0, 1e15, 0},
        {"max-memory", F_SIZE, &max_memory, "refuse to run when the expected memory (weights, buffers, data) exceeds this (bytes, or with K/M/G/T; 0 = the memory available)", NULL, 1, 0, 0},
        {"threads", F_INT, &threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        {"quiet", F_SET, &quiet, "no progress output", NULL, 1, 0, 0},
        FL_END};
    char choices[300];
    snprintf(choices, sizeof choices, "auto|%s", task_choices());
    cli_flag_named(fl, "task")->choices = choices;
    int r = cli_parse("eval", "--model DIR --data FILE [--seq-len L] [--chunk-size C] [--task classify --confusion]", fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (data_flags_check(DATA_FLAGS, data, images, labels)) return 2;
    if (!model || (!data && !images)) return cli_error("--model and --data are required (see 'mega eval --help')"), 2;
    /* checked before anything is printed (the table's header) or loaded */
    if (lengths && !lengths_valid(lengths))
        return cli_error("--lengths expects a comma-separated list of lengths >= 2, got '%s'", lengths), 2;
    mega_set_threads(threads);
    {
        char p[4096];
        mega_model_kind k;
        if (model_open(model, p, sizeof p, &k)) return 2;
        /* --task: the model must be of the task's kind; a translation model reads its own data */
        const task_def *td = task_find(task_name); /* NULL: auto */
        if (td && td->kind != k && td->kind == MEGA_MODEL_S2S)
            return cli_error("'%s' is not a %s (mega train --task %s)", model, model_kind_noun(td->kind), td->name), 2;
        if (td && td->kind != k && k == MEGA_MODEL_S2S)
            return cli_error("'%s' is a %s (use --task %s)", model, model_kind_noun(k), task_of_kind(k)->name), 2;
        if (k != MEGA_MODEL_CLS && images)
            return cli_error("'%s' is a %s: it reads --data text, not --images/--labels (IDX images)", model,
                             model_kind_noun(k)), 2;
        if (k == MEGA_MODEL_S2S)
            return eval_translate(model, data, &sp, batch, max_examples, !no_group, max_tokens, hyp_out, quiet, max_memory);
        if (td && td->kind != k)
            return cli_error("'%s' is a %s, not a %s", model, model_kind_noun(k), model_kind_noun(td->kind)), 2;
        if (k == MEGA_MODEL_CLS && mlm_model_file(p)) /* mega train --task mlm */
            return images ? cli_error("'%s' is a masked-LM model: it reads --data text", model), 2
                          : mlm_eval(model, data, seq_len, batch, max_bytes, quiet);
        if (k == MEGA_MODEL_CLS)
            return eval_classifier(model, data, images, labels, seq_len > 0 ? seq_len : 1 << 20, batch, confusion, quiet,
                                   max_memory);
    }
    mega_lm *m;
    if (load_model_ex(model, chunk, attn_window, &m)) return 2;
    const mega_lm_config *c = mega_lm_get_config(m);
    mega_fdict *dict;
    size_t tps;
    {
        char p[4096];
        if (!model_path(model, p, sizeof p) || lm_vocab(p, c, &dict, &tps)) return mega_lm_free(m), 2;
    }
    if (tps_flag >= 0) tps = (size_t)tps_flag;
    int rc = eval_lm(m, dict, data, lengths, seq_len, tps, max_bytes, max_memory, quiet);
    mega_fdict_free(dict);
    mega_lm_free(m);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = "\n";
    int tokens = 256, topk = 0, threads = 0, quiet = 0;
    double temp = 0.8, topp = 0.95;
    int64_t seed = -1;
    cli_flag fl[] = {
        {"model", F_STR, &model, "checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
        WHICH_FLAG,
        {"prompt", F_STR, &prompt, "text to start from (bytes)", NULL, 1, 0, 0},
        {"tokens", F_INT, &tokens, "bytes to generate (tokens for a converted fairseq model)", NULL, 0, 1 << 30, 0},
        {"temperature", F_DBL, &temp, "sampling temperature (0 = greedy argmax)", NULL, 0, 100, 0},
        {"top-k", F_INT, &topk, "sample among the k most likely bytes (0 = all)", NULL, 0, 1 << 20, 0},
        {"top-p", F_DBL, &topp, "nucleus sampling: sample among the most likely bytes whose probabilities add up to P, in (0, 1] (1 = off; greedy is --temperature 0)", NULL, 1, 0, 0},
        {"seed", F_I64, &seed, "sampling seed (-1 = a new one each run, printed so the text can be drawn again)", NULL, -1, 9e15, 0},
        {"threads", F_INT, &threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        {"quiet", F_SET, &quiet, "print only the generated text (no prompt, no statistics)", NULL, 1, 0, 0},
        FL_END};
    int r = cli_parse("generate", "--model DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]", fl,
                      argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model) return cli_error("--model is required (see 'mega generate --help')"), 2;
    if (!*prompt) return cli_error("--prompt must not be empty (Mega has no start token; use e.g. a newline)"), 2;
    /* the table's ranges are closed: (0, 1] is checked here, so every value outside gets this one message */
    if (!(topp > 0 && topp <= 1))
        return cli_error("--top-p must be in (0, 1], got %g (1 = off; for greedy decoding use --temperature 0)", topp), 2;
    mega_set_threads(threads);
    mega_lm *m;
    if (load_model(model, 0, &m)) return 2;
    const mega_lm_config *c = mega_lm_get_config(m);
    const int V = c->vocab_size;
    const size_t nprompt = strlen(prompt);
    /* the prompt's ids: its bytes, or for a converted fairseq model its tokens (a newline is </s>) */
    mega_fdict *dict;
    size_t np = nprompt, tps;
    int32_t *pt = NULL;
    {
        char p[4096];
        if (!model_path(model, p, sizeof p) || lm_vocab(p, c, &dict, &tps)) return mega_lm_free(m), 2;
    }
    const char *why = NULL;
    if (dict && mega_fdict_encode(dict, (const uint8_t *)prompt, nprompt, 0, NULL, &np, NULL) != MEGA_OK) why = mega_last_error();
    else if (np == 0) why = "it has no token (a word model needs a word or a newline)";
    else if (!(pt = malloc(np * sizeof(int32_t)))) why = "out of memory";
    else if (dict) mega_fdict_encode(dict, (const uint8_t *)prompt, nprompt, 0, pt, &np, NULL); /* checked above */
    if (why) {
        cli_error("--prompt: %s", why);
        free(pt), mega_fdict_free(dict), mega_lm_free(m);
        return 2;
    }
    if (!dict)
        for (size_t i = 0; i < np; i++) pt[i] = (uint8_t)prompt[i];
    mega_lm_stream *s;
    if (mega_lm_stream_new(m, 1, (int)(np + (size_t)tokens + 1), &s) != MEGA_OK) {
        free(pt), mega_fdict_free(dict), mega_lm_free(m);
        return cli_error("%s", mega_last_error()), 2;
    }
    if (seed < 0) seed = (int64_t)(((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid()) >> 12);
    if (!quiet)
        fprintf(stderr, "[sampling: temperature %g%s, top-k %d%s, top-p %g%s, seed %lld]\n", temp, temp <= 0 ? " (greedy)" : "",
                topk, topk ? "" : " (all)", topp, topp >= 1 ? " (off)" : "", (long long)seed);
    mega_sample_params sp = {temp, topk, topp, (uint64_t)seed};
    mega_sampler *smp;
    if (mega_sampler_new(V, &sp, &smp) != MEGA_OK) {
        free(pt), mega_fdict_free(dict);
        mega_lm_stream_free(s);
        mega_lm_free(m);
        return cli_error("%s", mega_last_error()), 2;
    }
    mega_real *lg = malloc((size_t)V * sizeof(mega_real));
    mega_real *lgp = malloc((size_t)(c->block.chunk_size > 0 ? c->block.chunk_size : 256) * V * sizeof(mega_real));
    if (!quiet) fwrite(prompt, 1, nprompt, stdout);
    fflush(stdout);
    double t0 = now_sec();
    /* ingest the prompt in chunk-sized blocks (projections batched), keep the last logits */
    size_t blk = (size_t)(c->block.chunk_size > 0 ? c->block.chunk_size : 256);
    int rc = 0;
    for (size_t p = 0; p < np && !rc; p += blk) {
        int T = (int)((np - p) < blk ? (np - p) : blk);
        if (mega_lm_stream_feed(s, pt + p, T, lgp) != MEGA_OK) rc = cli_error("%s", mega_last_error());
        else memcpy(lg, lgp + (size_t)(T - 1) * V, (size_t)V * sizeof(mega_real));
    }
    double t1 = now_sec();
    /* a fairseq dictionary's words continue the prompt's last line */
    int line_start = nprompt == 0 || prompt[nprompt - 1] == '\n';
    for (int i = 0; i < tokens && !rc; i++) {
        if (dict) /* never <s>, <pad>, the fillers, or (byte models) a token that is not a byte */
            for (int v = 0; v < V; v++)
                if (!mega_fdict_generable(dict, v)) lg[v] = -INFINITY;
        int32_t b = mega_sampler_next(smp, lg, c->padding_idx);
        if (b < 0) {
            rc = cli_error("%s", mega_last_error());
            break;
        }
        char out[1024];
        size_t k = 1;
        if (dict) k = mega_fdict_decode(dict, b, &line_start, out, sizeof out);
        else out[0] = (char)b;
        fwrite(out, 1, k, stdout);
        fflush(stdout);
        if (out_failed()) { /* nobody reads the rest: stop generating */
            rc = 1;
            break;
        }
        if (i + 1 < tokens && mega_lm_stream_feed(s, &b, 1, lg) != MEGA_OK) rc = cli_error("%s", mega_last_error());
    }
    double t2 = now_sec();
    if (!quiet && !rc)
        fprintf(stderr, "\n[prompt %zu %s in %.2f s; %d %s generated in %.2f s (%.1f tok/s)]\n", np, dict ? "tokens" : "bytes",
                t1 - t0, tokens, dict ? "tokens" : "bytes", t2 - t1, tokens / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
    else if (!rc)
        printf("\n");
    free(pt), free(lg), free(lgp);
    mega_fdict_free(dict);
    mega_sampler_free(smp);
    mega_lm_stream_free(s);
    mega_lm_free(m);
    return rc ? 2 : 0;
}

static void info_s2s(const loaded_model *lm) {
    const mega_s2s_config *sc = mega_s2s_get_config(lm->s2s);
    char *js = mega_s2s_config_to_json(sc), xa[64];
    printf("model      %s\nkind       %s (encoder-decoder, %s mixer, %s cross-attention)\nparameters %zu\n", lm->path,
           mega_model_kind_name(lm->kind), mega_mixer_name(sc->encoder.mixer), mega_s2s_cross_attention_name(sc, xa, sizeof xa),
           mega_ps_trainable(mega_s2s_paramset(lm->s2s)));
    print_s2s_config(stdout, sc, "           ");
    const mega_bpe *sb = lm->src_bpe, *tb = lm->tgt_bpe;
    for (int side = 0; side < 2; side++) {
        const mega_bpe *b = side ? tb : sb;
        if (!b || (side && tb == sb)) continue;
        printf("vocabulary %s subword units: %d byte-pair merges, %d tokens (longest %zu bytes)\n",
               sb == tb ? "both sides:" : side ? "target:" : "source:", mega_bpe_merges(b), mega_bpe_vocab_size(b),
               mega_bpe_longest(b));
    }
    printf("config     %s\n", js ? js : "");
    free(js);
}

static void info_cls(const loaded_model *lm) {
    const mega_cls_config *cc = mega_cls_get_config(lm->cls.m);
    char *js = mega_cls_config_to_json(cc);
    if (cc->mlm)
        printf("model      %s\nkind       %s (masked-LM encoder, %s mixer; bytes, pad %d, mask %d)\nparameters %zu\n", lm->path,
               mega_model_kind_name(lm->kind), mega_mixer_name(cc->block.mixer), cc->padding_idx, cc->vocab_size - 1,
               mega_ps_trainable(mega_cls_paramset(lm->cls.m)));
    else
        printf("model      %s\nkind       %s (classifier, %s encoder)\nparameters %zu\nclasses    %d\n", lm->path,
               mega_model_kind_name(lm->kind), mega_mixer_name(cc->block.mixer), mega_ps_trainable(mega_cls_paramset(lm->cls.m)),
               lm->cls.classes.n);
    print_cls_config(stdout, cc, "           ");
    printf("config     %s\n", js ? js : "");
    free(js);
}

static void info_lm(const loaded_model *lm, int tensors) {
    mega_st_file *f = NULL;
    const char *step = NULL;
    if (mega_st_open(lm->path, &f) == MEGA_OK) step = mega_st_meta(f, "step");
    printf("model      %s\n", lm->path);
    const mega_lm_config *lc = mega_lm_get_config(lm->lm);
    const int bytes = lc->vocab_size == 257 && lc->padding_idx == 256;
    const mega_fdict *dict = lm->dict;
    char vocab[128];
    if (dict)
        snprintf(vocab, sizeof vocab, "fairseq dictionary of %d %s tokens", mega_fdict_size(dict),
                 mega_fdict_get_unit(dict) == MEGA_FDICT_BYTE ? "byte" : "word");
    else
        snprintf(vocab, sizeof vocab, "%s", bytes ? "byte-level: 256 bytes + pad" : "token vocabulary");
    printf("kind       %s (causal language model, %s mixer, %s)\n", mega_model_kind_name(lm->kind), mega_mixer_name(lc->block.mixer),
           vocab);
    if (lm->tps) printf("eval       fairseq tokens-per-sample %zu (mega eval restarts the state every %zu tokens)\n", lm->tps, lm->tps);
    if (step) printf("step       %s\n", step);
    printf("parameters %zu\n", mega_lm_num_params(lm->lm));
    print_lm_config(stdout, lc, "           ");
    char *js = mega_lm_config_to_json(lc);
    printf("config     %s\n", js ? js : "");
    free(js);
    if (tensors && f)
        for (int i = 0; i < mega_st_count(f); i++) {
            const mega_st_tensor *t = mega_st_at(f, i);
            printf("  %-60s %s [", t->name, mega_dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) printf(d ? ", %lld" : "%lld", (long long)t->shape[d]);
            printf("]\n");
        }
    mega_st_close(f);
}

/* of a run directory: the file shown (--which) and, when the run kept one, its best model's step
 * and validation figure (best.safetensors' metadata, written by mega train) */
/* the weights' storage: float32, or how many matrices q8_0 holds; the file's size */
static void info_weights(const char *path) {
    mega_st_file *f;
    struct stat sb;
    if (mega_st_open(path, &f) != MEGA_OK) return;
    int q8 = 0;
    for (int i = 0; i < mega_st_count(f); i++) {
        const char *n = mega_st_at(f, i)->name;
        const size_t l = strlen(n);
        q8 += l > 5 && !strcmp(n + l - 5, ".q8_0");
    }
    const double mb = stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0;
    if (q8) printf("weights    q8_0: %d matrices in blocks of 32 int8 values and an fp16 scale, the rest float32; file %.2f MB\n", q8, mb);
    else printf("weights    float32; file %.2f MB\n", mb);
    mega_st_close(f);
}

static void info_which(const char *dir, const char *shown) {
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return;
    char best[4096], last[4096];
    path_join(best, sizeof best, dir, "best.safetensors");
    mega_st_file *f;
    if (!file_exists(best) || mega_st_open(best, &f) != MEGA_OK) return;
    const char *st = mega_st_meta(f, "step"), *bm = mega_st_meta(f, "best-metric"), *bv = mega_st_meta(f, "best-value");
    printf("  file      %s (--which %s)\n", shown, tool_which);
    printf("  best      step %s, validation %s %.6g", st ? st : "?", bm ? bm : "loss", bv ? atof(bv) : NAN);
    if (mega_model_file(dir, last, sizeof last) == MEGA_OK) printf("; --which last: %s", last);
    printf("\n");
    mega_st_close(f);
}

int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    int tensors = 0;
    cli_flag fl[] = {{"model", F_STR, &model, "checkpoint directory (or model.safetensors)", NULL, 1, 0, 0},
                     WHICH_FLAG,
                     {"tensors", F_SET, &tensors, "also list every tensor with its shape", NULL, 1, 0, 0},
                     FL_END};
    int r = cli_parse("info", "--model DIR [--tensors]", fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model) return cli_error("--model is required (see 'mega info --help')"), 2;
    loaded_model lm;
    int rc = model_load(model, &lm);
    if (!rc && lm.kind == MEGA_MODEL_S2S) info_s2s(&lm);
    else if (!rc && lm.kind == MEGA_MODEL_CLS) info_cls(&lm);
    else if (!rc) info_lm(&lm, tensors);
    if (!rc) info_weights(lm.path);
    if (!rc) info_which(model, lm.path);
    loaded_model_free(&lm);
    return rc ? 2 : 0;
}
