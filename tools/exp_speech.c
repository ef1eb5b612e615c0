/* The speech experiment of `mega experiment`: raw keyword spotting at L = 16,000 samples (the
 * official sc_raw input, fairseq/models/speech_commands/model.py) on a corpus synthesized by
 * `mega speech-synth`, Mega (chunk 1000) against local attention, the Transformer and ABC at equal
 * parameters and equal training time. */
#include "experiment.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the corpus: the first SP_WORDS words of SC10 (yes, no, up, down), SP_PER_WORD clips each */
#define SP_WORDS 4
#define SP_PER_WORD 200
#define SP_WORDS_QUICK 2
#define SP_PER_WORD_QUICK 6
/* training seconds per model (validation excluded) */
#define SP_BUDGET 300
/* the model: the sc-raw preset (laplace attention, batchnorm pre-norm, chunk 1000, EMA truncation
 * 1000, L = 16,000) with one layer and small widths, for a CPU budget of minutes */
#define SP_MODEL "--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --n-dim 16 --batch 8 --warmup 10 --eval-every 25"
#define SP_MODEL_QUICK "--layers 1 --embed-dim 8 --z-dim 4 --hidden-dim 16 --n-dim 2 --batch 2 --warmup 1 --eval-every 1"
#define SP_FFN 32
#define SP_FFN_QUICK 16
/* the Transformer's full attention costs seconds per clip at L = 16,000 on one core: it validates
 * on SP_SUB_VALID and is tested on SP_SUB_TEST clips of each word (the same clips' first ones) */
#define SP_SUB_VALID 2
#define SP_SUB_TEST 4

/* the corpus under OUT/NAME/data/speech (kept for a rerun) */
static int speech_data(xctx *c, char *dir, size_t n, int nw) {
    path_join(dir, n, c->dir, "data");
    if (ensure_dir(dir)) return -1;
    path_join(dir, n, c->dir, "data/speech");
    char t[4200];
    snprintf(t, sizeof t, "%s/testing_list.txt", dir);
    if (file_exists(t)) return 0;
    xargv a = {0};
    xrun r;
    xa(&a, c->self), xa(&a, "speech-synth"), xaf(&a, "--out=%s", dir), xaf(&a, "--seed=%lld", c->seed), xa(&a, "--quiet");
    xaf(&a, "--n-words=%d", nw), xaf(&a, "--per-word=%d", c->quick ? SP_PER_WORD_QUICK : SP_PER_WORD);
    return xrun_ok(c, "data-speech", &a, &r) ? -1 : 0;
}

/* the word indices of a split list's clips ("word/clip.wav"), at most `cap` */
static int list_labels(const char *path, const char *const *words, int nw, int *y, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return cli_error("%s: %s", path, strerror(errno)), -1;
    char line[4200];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        char *s = strchr(line, '/');
        if (!s) continue;
        *s = 0;
        for (int k = 0; k < nw; k++)
            if (!strcmp(line, words[k])) y[n++] = k;
    }
    fclose(f);
    return n;
}

/* the first `per` clips of each word in list `src`, linked into sub/<word>/ (relative symbolic
 * links to ../../speech/<word>/); their names are appended to `dst` when it is not NULL */
static int sub_clips(const char *src, const char *sub, FILE *dst, const char *const *words, int nw, int per) {
    FILE *f = fopen(src, "r");
    if (!f) return cli_error("%s: %s", src, strerror(errno)), -1;
    int cnt[64] = {0}, e = 0;
    char line[4200], a[4400], b[8800];
    while (!e && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        for (int k = 0; k < nw && k < 64; k++) {
            const size_t l = strlen(words[k]);
            if (strncmp(line, words[k], l) || line[l] != '/' || strchr(line + l + 1, '/') || cnt[k] >= per) continue;
            cnt[k]++;
            snprintf(a, sizeof a, "../../speech/%s", line), snprintf(b, sizeof b, "%s/%s", sub, line);
            unlink(b);
            if (symlink(a, b)) e = (cli_error("%s: %s", b, strerror(errno)), -1);
            if (dst) fprintf(dst, "%s\n", line);
        }
    }
    fclose(f);
    return e;
}

/* data/speech-sub, the Transformer's smaller sets: SP_SUB_VALID validation clips of each word as
 * its training split (what `train --valid DIR` reads) and SP_SUB_TEST test clips of each word in
 * its testing_list.txt (what `eval --data DIR` reads) */
static int sub_corpus(const char *dir, char *sub, size_t n, const char *const *words, int nw) {
    snprintf(sub, n, "%s-sub", dir);
    if (ensure_dir(sub)) return -1;
    char a[4400], b[4400];
    for (int k = 0; k < nw; k++) {
        snprintf(b, sizeof b, "%s/%s", sub, words[k]);
        if (ensure_dir(b)) return -1;
    }
    snprintf(b, sizeof b, "%s/testing_list.txt", sub);
    FILE *t = fopen(b, "w");
    if (!t) return cli_error("%s: %s", b, strerror(errno)), -1;
    snprintf(a, sizeof a, "%s/validation_list.txt", dir);
    int e = sub_clips(a, sub, NULL, words, nw, SP_SUB_VALID);
    snprintf(a, sizeof a, "%s/testing_list.txt", dir);
    if (!e) e = sub_clips(a, sub, t, words, nw, SP_SUB_TEST);
    if (fclose(t) && !e) e = (cli_error("%s: %s", b, strerror(errno)), -1);
    return e;
}

/* `mega eval --confusion` of run ID on DATA: the accuracy and the nw x nw counts of the words
 * present (*outside: predictions of SC10 words the corpus does not have) */
static double speech_test(xctx *c, const char *id, const char *data, int nw, double *cm, int *outside) {
    char log[256], run[4096], lp[4400];
    snprintf(log, sizeof log, "%s-test", id);
    snprintf(run, sizeof run, "%s/runs/%s", c->dir, id);
    xargv a = {0};
    xrun r;
    double acc = NAN;
    xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xaf(&a, "--data=%s", data), xa(&a, "--confusion");
    xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet"), xa(&a, "--batch=8");
    if (xrun_ok(c, log, &a, &r) || log_number(c, log, "accuracy ", &acc)) return NAN;
    snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
    FILE *f = fopen(lp, "r");
    char line[8192];
    int row = -1;
    *outside = 0;
    memset(cm, 0, sizeof(double) * (size_t)nw * nw);
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "confusion matrix")) {
            row = 0;
            if (!fgets(line, sizeof line, f)) break; /* the header of predicted words */
            continue;
        }
        if (row < 0 || row >= nw) continue;
        char *p = line + 10; /* the row's word, %10.10s */
        for (int k = 0; strlen(line) > 10; k++) {
            char *e;
            const long v = strtol(p, &e, 10);
            if (e == p) break;
            if (k < nw) cm[row * nw + k] = (double)v;
            else *outside += (int)v;
            p = e;
        }
        row++;
    }
    if (f) fclose(f);
    return acc;
}

typedef struct {
    double params, acc, peak_mib;
    int F, outside;
    xlog g;
    double cm[64 * 64];
} sp_result;

/* train and test every model; the tables and figures */
static int speech_models(xctx *c, const xmodel *M, int nm, int mha, const char *dir, const char *sub, int nw, int F0) {
    sp_result *R = calloc((size_t)nm, sizeof *R);
    xcurve *cv = calloc((size_t)nm, sizeof *cv);
    if (!R || !cv) return free(R), free(cv), cli_error("out of memory"), -1;
    char common[24000], flags[1024], id[64];
    const char *model = c->quick ? SP_MODEL_QUICK : SP_MODEL;
    for (int i = 0; i < nm; i++) {
        snprintf(id, sizeof id, "speech-%s", M[i].id);
        snprintf(common, sizeof common, "--task classify --preset sc-raw --data %s %s%s%s", dir, model, i == mha ? " --valid " : "",
                 i == mha ? sub : "");
        if (i > 0 && !c->quick) { /* one layer of width 16 (SP_MODEL); the probe on one clip */
            char probe[24100];
            snprintf(probe, sizeof probe, "%s --batch 1", common);
            R[i].F = match_ffn(c, id, probe, M[i].flags, F0, 16, 1, R[0].params);
        } else {
            R[i].F = F0;
        }
        snprintf(flags, sizeof flags, "%s --ffn-dim %d", M[i].flags, R[i].F);
        char full[24100];
        if (c->quick) snprintf(full, sizeof full, "%s --steps 1", common);
        else snprintf(full, sizeof full, "%s --time-budget %d --steps 1000000", common, SP_BUDGET);
        xrun r;
        memset(&r, 0, sizeof r);
        R[i].params = R[i].acc = NAN;
        cv[i].label = M[i].label;
        /* quick mode: one step of full attention at L = 16,000 alone takes longer than the test's budget */
        if (c->quick && i == mha) continue;
        if (!train_model(c, id, full, flags, "acc", &R[i].g, &R[i].params, &r))
            R[i].acc = speech_test(c, id, i == mha ? sub : dir, nw, R[i].cm, &R[i].outside);
        R[i].peak_mib = r.peak_mib;
        cv[i].g = R[i].g;
    }
    sbuf_printf(&c->md, "| model | parameters | steps | training tokens/s | peak memory (MiB) | validation accuracy | test accuracy |\n"
                        "|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nm; i++) {
        char b[5][32];
        if (c->quick && i == mha) {
            sbuf_printf(&c->md, "| %s (`%s`) | not run in quick mode | | | | | |\n", M[i].label, M[i].flags);
            continue;
        }
        fmt_num(b[0], 32, R[i].params, "%.0f"), fmt_num(b[1], 32, R[i].g.tok_s, "%.0f"), fmt_num(b[2], 32, R[i].peak_mib, "%.0f");
        fmt_num(b[3], 32, 100 * R[i].g.final, "%.1f %%"), fmt_num(b[4], 32, 100 * R[i].acc, "%.1f %%");
        sbuf_printf(&c->md, "| %s (`%s --ffn-dim %d`) | %s | %d | %s | %s | %s | %s%s |\n", M[i].label, M[i].flags, R[i].F, b[0], R[i].g.steps,
                    b[1], b[2], b[3], b[4], i == mha ? " (subset)" : "");
    }
    sbuf_printf(&c->md, "\nPeak memory is the training process's peak resident set (`getrusage`), data included. The Transformer's full "
                        "attention at L = 16,000 runs (its attention is computed without storing the 16,000 x 16,000 scores) but costs "
                        "seconds per clip on a CPU, so it validates on %d and is tested on %d clips of each word (the first of each "
                        "list: `%s`); the others use the whole lists.\n\nCommands:\n\n", SP_SUB_VALID, SP_SUB_TEST, sub);
    for (int i = 0; i < nm; i++) {
        snprintf(id, sizeof id, "speech-%s", M[i].id);
        if (!(c->quick && i == mha)) md_cmd(c, id);
    }
    int e = curves_fig(c, "speech-curves.svg", "Raw keyword spotting (L = 16,000): validation accuracy at equal training time",
                       "validation accuracy", cv, nm, 0);
    if (!e) {
        /* the confusion of Mega on the test clips, each row as fractions of its word's clips */
        double m[64 * 64];
        for (int r0 = 0; r0 < nw; r0++) {
            double s = 0;
            for (int k = 0; k < nw; k++) s += R[0].cm[r0 * nw + k];
            for (int k = 0; k < nw; k++) m[r0 * nw + k] = s > 0 ? R[0].cm[r0 * nw + k] / s : 0;
        }
        sbuf svg = {0};
        char xl[600], yl[600], wl[500] = "";
        int nall;
        const char *const *words = mega_speech_words(0, &nall);
        for (int k = 0; k < nw; k++) snprintf(wl + strlen(wl), sizeof wl - strlen(wl), "%s%s", k ? ", " : "", words[k]);
        snprintf(xl, sizeof xl, "predicted word (%s)", wl), snprintf(yl, sizeof yl, "spoken word (%s)", wl);
        svg_heatmap(&svg, "Mega on the test clips: the fraction of each spoken word's clips (accuracy) per predicted word", xl, yl, m,
                    nw, nw);
        e = write_fig(c, "speech-confusion.svg", &svg);
        sbuf_printf(&c->md, "\nFigures: `speech-curves.svg` (validation accuracy against training seconds), `speech-confusion.svg` "
                            "(Mega's test confusion, rows the spoken word; %d test clip(s) went to SC10 words the corpus does not have).\n",
                    R[0].outside);
    }
    free(R), free(cv);
    return e;
}

int exp_speech(xctx *c) {
    static const xmodel M[] = {
        {"mega", "Mega (chunk 1000)", "--mixer mega"},
        {"local", "local attention (window 1000, RoPE)", "--mixer local --pos rope --window 1000"},
        {"mha", "Transformer (full attention, RoPE)", "--mixer mha --pos rope"},
        {"abc", "ABC (learned control; no positions)", "--mixer abc-mlp"},
    };
    enum { NM = sizeof M / sizeof *M, MHA = 2 };
    if (!mega_audio_available()) return cli_error("speech: this build reads no audio (libsndfile was not found when it was built)"), -1;
    const int nw = c->quick ? SP_WORDS_QUICK : SP_WORDS, F0 = c->quick ? SP_FFN_QUICK : SP_FFN;
    int nall;
    const char *const *words = mega_speech_words(0, &nall);
    char dir[4096], sub[4200], p[4400];
    if (speech_data(c, dir, sizeof dir, nw) || sub_corpus(dir, sub, sizeof sub, words, nw)) return -1;
    /* chance and the majority class: every word has SP_PER_WORD clips, the lists hold the rest */
    enum { CAP = 1 << 16 };
    int *yv = malloc(CAP * sizeof(int)), *yt = malloc(CAP * sizeof(int)), *ytr = malloc(CAP * sizeof(int)), cls;
    if (!yv || !yt || !ytr) return free(yv), free(yt), free(ytr), cli_error("out of memory"), -1;
    snprintf(p, sizeof p, "%s/validation_list.txt", dir);
    const int nv = list_labels(p, words, nw, yv, CAP);
    snprintf(p, sizeof p, "%s/testing_list.txt", dir);
    const int nt = list_labels(p, words, nw, yt, CAP);
    int ntr = 0, per = c->quick ? SP_PER_WORD_QUICK : SP_PER_WORD;
    for (int k = 0; k < nw && nv >= 0 && nt >= 0; k++) {
        int held = 0;
        for (int i = 0; i < nv; i++) held += yv[i] == k;
        for (int i = 0; i < nt; i++) held += yt[i] == k;
        for (int i = held; i < per && ntr < CAP; i++) ytr[ntr++] = k;
    }
    const double maj = nv < 0 || nt < 0 ? NAN : majority(ytr, ntr, yt, nt, &cls);
    free(yv), free(yt), free(ytr);
    if (nv < 0 || nt < 0) return -1;
    char wl[500] = "";
    for (int k = 0; k < nw; k++) snprintf(wl + strlen(wl), sizeof wl - strlen(wl), "%s%s", k ? ", " : "", words[k]);
    sbuf_printf(&c->md,
                "The corpus: `mega speech-synth --n-words %d --per-word %d` (espeak-ng; the words %s; "
                "%d training, %d validation and %d test clips, the validation and test speakers never heard in training; "
                "docs/speech.md). Every model is the `sc-raw` preset (raw samples, L = 16,000, per-index input statistics, "
                "batchnorm pre-norm, laplace attention for Mega, EMA truncation 1000) made small for a CPU: `%s`, with its token "
                "mixer changed and the FFN width of the others set so that every model has about as many parameters as Mega. "
                "Each trains for the same time (`--time-budget %d`, validation excluded) on %d thread(s). Chance is %.1f %%; "
                "always answering the most frequent training word scores %.1f %% on the test clips.%s\n\n",
                nw, per, wl, ntr, nv, nt,
                c->quick ? SP_MODEL_QUICK : SP_MODEL, c->quick ? 1 : SP_BUDGET, c->threads, 100.0 / nw, 100 * maj,
                c->quick ? " Quick mode: one step, toy sizes, meaningless numbers." : "");
    return speech_models(c, M, NM, MHA, dir, sub, nw, F0);
}
