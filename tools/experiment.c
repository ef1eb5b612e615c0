/* `mega experiment NAME`: the seeds' claims as experiments anyone can rerun (docs/results.md).
 *
 * Each experiment prepares its data, trains and evaluates its models by running this same binary
 * (`mega listops`, `mega train`, `mega eval`) as child processes, so every number comes from the
 * commands a user runs and every run keeps its own log (OUT/NAME/logs/), checkpoint
 * (OUT/NAME/runs/) and curves. It then writes OUT/NAME/results.md (the table, the command lines,
 * the budget) and its SVG figures. A child's peak resident memory and CPU time come from wait4().
 * --quick runs the same code at toy sizes for a few steps (make test runs it so no experiment
 * rots); its numbers mean nothing. */
#include "experiment.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>

void xa(xargv *a, const char *s) {
    if (a->n < 127) a->v[a->n++] = strdup(s), a->v[a->n] = NULL;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void xaf(xargv *a, const char *fmt, ...) {
    char b[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    xa(a, b);
}

/* the words of a space-separated flag string */
void xwords(xargv *a, const char *s) {
    while (s && *s) {
        while (*s == ' ') s++;
        const char *e = s;
        while (*e && *e != ' ') e++;
        if (e > s) {
            char w[512];
            snprintf(w, sizeof w, "%.*s", (int)(e - s), s);
            xa(a, w);
        }
        s = e;
    }
}

void xfree(xargv *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    a->n = 0;
}

/* `mega ARGS` with stdout and stderr to OUT/NAME/logs/LOG.txt; the command line is the log's
 * first line */
int xspawn(xctx *c, const char *log, xargv *a, xrun *r) {
    char lp[8192], ld[4096];
    path_join(ld, sizeof ld, c->dir, "logs");
    if (ensure_dir(ld)) return -1;
    snprintf(lp, sizeof lp, "%s/%s.txt", ld, log);
    FILE *f = fopen(lp, "w");
    if (!f) return cli_error("%s: %s", lp, strerror(errno)), -1;
    fprintf(f, "$ mega");
    for (int i = 1; i < a->n; i++) fprintf(f, " %s", a->v[i]);
    fprintf(f, "\n");
    fclose(f);
    fflush(stdout), fflush(stderr);
    const double t = now_sec();
    pid_t pid = fork();
    if (pid < 0) return cli_error("fork: %s", strerror(errno)), -1;
    if (pid == 0) {
        int fd = open(lp, O_WRONLY | O_APPEND);
        if (fd < 0) _exit(127);
        dup2(fd, 1), dup2(fd, 2), close(fd);
        execv(c->self, a->v);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &st, 0, &ru) < 0)
        if (errno != EINTR) return cli_error("wait4: %s", strerror(errno)), -1;
    r->wall = now_sec() - t;
    r->cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    r->peak_mib = ru.ru_maxrss / 1024.0; /* KiB on Linux */
    r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 0;
}

/* the first line of LOG's output that contains key, and the number right after it */
int log_number(xctx *c, const char *log, const char *key, double *v) {
    char lp[4096];
    snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
    FILE *f = fopen(lp, "r");
    if (!f) return -1;
    char line[8192];
    int ok = -1;
    while (ok && fgets(line, sizeof line, f)) {
        char *p = strstr(line, key);
        if (p && sscanf(p + strlen(key), "%lf", v) == 1) ok = 0;
    }
    fclose(f);
    return ok;
}

/* run a child and check it; on failure the last lines of its log are pointed to */
int xrun_ok(xctx *c, const char *log, xargv *a, xrun *r) {
    fprintf(stderr, "[%s %5.0fs] %s ...\n", c->name, now_sec() - c->t0, log);
    int e = xspawn(c, log, a, r);
    xfree(a);
    if (e) return -1;
    if (r->rc) c->failed++;
    if (r->rc) fprintf(stderr, "[%s] %s failed (exit %d): see %s/logs/%s.txt\n", c->name, log, r->rc, c->dir, log);
    return r->rc;
}

/* ---- what a run left: log.jsonl ---- */

int read_runlog(const char *run, const char *metric, xlog *g) {
    char p[8192];
    snprintf(p, sizeof p, "%s/log.jsonl", run);
    memset(g, 0, sizeof *g);
    g->final = NAN;
    mega_bytes b;
    if (mega_read_file(p, "log", &b) != MEGA_OK) return cli_error("%s", mega_last_error()), -1;
    char vkey[64];
    snprintf(vkey, sizeof vkey, "valid_%s", metric);
    double ts = 0, toks = 0;
    int nt = 0;
    for (size_t pos = 0; pos < b.n;) {
        size_t e = pos;
        while (e < b.n && b.data[e] != '\n') e++;
        cJSON *j = e > pos ? cJSON_ParseWithLength((const char *)b.data + pos, e - pos) : NULL;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step"), *v = cJSON_GetObjectItemCaseSensitive(j, vkey),
                    *t = cJSON_GetObjectItemCaseSensitive(j, "train_seconds"), *k = cJSON_GetObjectItemCaseSensitive(j, "tok_s");
        if (cJSON_IsNumber(t) && !g->first_step && cJSON_IsNumber(st))
            g->first_step = st->valueint, g->first_train_s = t->valuedouble;
        if (cJSON_IsNumber(t)) ts = t->valuedouble, g->train_s = ts;
        if (cJSON_IsNumber(k)) toks += k->valuedouble, nt++;
        if (cJSON_IsNumber(st)) g->steps = st->valueint;
        if (cJSON_IsNumber(v) && g->n < 512) g->x[g->n] = ts, g->xs[g->n] = g->steps, g->y[g->n++] = v->valuedouble;
        if (cJSON_IsNumber(v)) g->final = v->valuedouble;
        cJSON_Delete(j);
        pos = e + 1;
    }
    mega_bytes_free(&b);
    g->tok_s = nt ? toks / nt : NAN;
    return 0;
}

/* the table rows "LENGTH BPB BYTES" of a `mega eval --lengths` log: bpb[j] for lens[j] (n lengths;
 * a length without a row keeps its value) */
void read_lengths(xctx *c, const char *log, const int *lens, int n, double *bpb) {
    char lp[4096], line[512];
    snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
    FILE *f = fopen(lp, "r");
    while (f && fgets(line, sizeof line, f)) {
        int L;
        double v;
        if (sscanf(line, "%d %lf", &L, &v) == 2)
            for (int j = 0; j < n; j++)
                if (L == lens[j]) bpb[j] = v;
    }
    if (f) fclose(f);
}

/* ---- results.md ---- */

void md_cmd(xctx *c, const char *log) {
    char lp[4096], line[8192];
    snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
    FILE *f = fopen(lp, "r");
    if (f && fgets(line, sizeof line, f)) sbuf_printf(&c->md, "    %s", line + 2);
    if (f) fclose(f);
}

int write_fig(xctx *c, const char *file, sbuf *svg) {
    char p[4096];
    path_join(p, sizeof p, c->dir, file);
    int r = sbuf_write(svg, p);
    sbuf_free(svg);
    if (!r) sbuf_printf(&c->md, "\n![%s](%s)\n", file, file);
    return r;
}

int curves_fig(xctx *c, const char *file, const char *title, const char *ylabel, const xcurve *cv, int n,
                      int by_steps) {
    svg_series s[16];
    for (int i = 0; i < n && i < 16; i++)
        s[i] = (svg_series){cv[i].label, by_steps ? cv[i].g.xs : cv[i].g.x, cv[i].g.y, (size_t)cv[i].g.n, 1, 0};
    svg_chart ch = {title, by_steps ? "training step" : "training time (s, validation excluded)", ylabel, 0, 0, 0};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, n < 16 ? n : 16);
    return write_fig(c, file, &svg);
}

/* ---- data ---- */

/* The text of the language-model experiments, as a training file and a held-out file (its last
 * 5%): --data FILE split into OUT/NAME/data/; else data/gcide.{train,valid} of `make run`; else
 * the GCIDE dictionary of dict-gcide, decompressed and split the same way. */
int corpus(xctx *c, char *train, char *valid, size_t n) {
    if (!c->data && file_exists("data/gcide.train") && file_exists("data/gcide.valid"))
        return snprintf(train, n, "data/gcide.train"), snprintf(valid, n, "data/gcide.valid"), 0;
    const char *src = c->data ? c->data : "/usr/share/dictd/gcide.dict.dz";
    if (!file_exists(src))
        return cli_error(c->data ? "--data %s: no such file" : "no corpus: give --data FILE, install dict-gcide (%s) or run 'make run' first", src), -1;
    char d[4096];
    path_join(d, sizeof d, c->dir, "data");
    if (ensure_dir(d)) return -1;
    path_join(train, n, d, "train.txt");
    path_join(valid, n, d, "valid.txt");
    mega_bytes t;
    if (mega_read_gzip(src, c->data ? "--data" : "corpus", &t) != MEGA_OK) return cli_error("%s", mega_last_error()), -1;
    const size_t len = t.n, nv = len / 20;
    if (nv < 1024) return mega_bytes_free(&t), cli_error("%s: %zu bytes is too little text (at least 20 KiB)", src, len), -1;
    mega_status st = mega_write_file_atomic(train, t.data, len - nv);
    if (!st) st = mega_write_file_atomic(valid, t.data + len - nv, nv);
    mega_bytes_free(&t);
    return st ? (cli_error("%s", mega_last_error()), -1) : 0;
}

/* ListOps at CPU scale: the published generator with shorter expressions */
int listops_data(xctx *c, char *dir, size_t n) {
    path_join(dir, n, c->dir, "data");
    if (ensure_dir(dir)) return -1;
    path_join(dir, n, c->dir, "data/listops");
    char t[4096];
    path_join(t, sizeof t, dir, "test.tsv");
    if (file_exists(t)) return 0;
    xargv a = {0};
    xrun r;
    xa(&a, c->self), xa(&a, "listops"), xaf(&a, "--out=%s", dir), xaf(&a, "--seed=%lld", c->seed), xa(&a, "--quiet");
    if (c->quick) xwords(&a, "--train 300 --valid 60 --test 60 --min-len 20 --max-len 60 --max-depth 4");
    else xwords(&a, "--train 20000 --valid 500 --test 1000 --min-len 30 --max-len 150 --max-depth 6");
    return xrun_ok(c, "data-listops", &a, &r) ? -1 : 0;
}

/* the majority class of the training labels, and its accuracy on the test labels */
double majority(const int *ytr, int ntr, const int *yte, int nte, int *cls) {
    int cnt[256] = {0}, best = 0;
    for (int i = 0; i < ntr; i++)
        if (ytr[i] >= 0 && ytr[i] < 256) cnt[ytr[i]]++;
    for (int k = 1; k < 256; k++)
        if (cnt[k] > cnt[best]) best = k;
    int hit = 0;
    for (int i = 0; i < nte; i++) hit += yte[i] == best;
    *cls = best;
    return nte ? (double)hit / nte : NAN;
}

/* the labels (last field) of a ListOps TSV, header skipped */
int tsv_labels(const char *path, int **y) {
    FILE *f = fopen(path, "r");
    if (!f) return cli_error("%s: %s", path, strerror(errno)), -1;
    int n = 0, cap = 1024;
    *y = malloc(cap * sizeof(int));
    static char line[1 << 16];
    while (*y && fgets(line, sizeof line, f)) {
        char *tab = strrchr(line, '\t');
        if (!tab || !strncmp(line, "Source", 6)) continue;
        if (n == cap) *y = realloc(*y, (cap *= 2) * sizeof(int));
        if (*y) (*y)[n++] = atoi(tab + 1);
    }
    fclose(f);
    return *y ? n : -1;
}

/* splitmix64: the random letters of the speed experiment */
double u01(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static int write_idx(const char *path, int images, const uint8_t *d, int n) {
    const size_t hdr = images ? 16 : 8, per = images ? 784 : 1;
    uint8_t *b = malloc(hdr + per * (size_t)n);
    if (!b) return cli_error("out of memory"), -1;
    const uint32_t h[4] = {images ? 0x803u : 0x801u, (uint32_t)n, 28, 28};
    for (size_t i = 0; i < hdr / 4; i++)
        for (int k = 0; k < 4; k++) b[4 * i + k] = (uint8_t)(h[i] >> (24 - 8 * k));
    memcpy(b + hdr, d, per * (size_t)n);
    mega_status st = mega_write_file_atomic(path, b, hdr + per * (size_t)n);
    free(b);
    return st ? (cli_error("%s", mega_last_error()), -1) : 0;
}

/* Sequential Fashion-MNIST (Xiao, Rasul and Vollgraf 2017): 28 x 28 grey images of ten kinds of
 * clothing, read pixel by pixel (784 tokens) as the Long Range Arena reads its images. The
 * published files (gzip IDX, as Debian's dataset-fashion-mnist installs them) are split into
 * train (the first 55,000 training images), valid (the last 5,000) and test (the 10,000 test
 * images, or the first `test_n` of them), written as plain IDX files under OUT/NAME/data/ so that
 * every command of the experiment names its exact data. --quick takes the first few of each. */

/* one published IDX file of unsigned bytes (gzip or plain): its items and their bytes */
static int fashion_file(const char *dir, const char *stem, int images, mega_bytes *b, const uint8_t **items, int *n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.gz", dir, stem);
    if (!file_exists(p)) snprintf(p, sizeof p, "%s/%s", dir, stem);
    if (!file_exists(p))
        return cli_error("Fashion-MNIST: no %s/%s.gz (install Debian's dataset-fashion-mnist, or give --fashion-mnist DIR "
                         "holding the four published files)", dir, stem), -1;
    if (mega_read_gzip(p, "Fashion-MNIST", b) != MEGA_OK) return cli_error("%s", mega_last_error()), -1;
    const size_t hdr = images ? 16 : 8, per = images ? 784 : 1;
    const uint8_t *d = b->data;
    const uint32_t magic = b->n >= 8 ? (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3] : 0;
    const uint32_t cnt = b->n >= 8 ? (uint32_t)d[4] << 24 | (uint32_t)d[5] << 16 | (uint32_t)d[6] << 8 | d[7] : 0;
    if (magic != (images ? 0x803u : 0x801u) || b->n < hdr || (images && (d[11] != 28 || d[15] != 28 || d[8] | d[9] | d[10] | d[12] | d[13] | d[14])) ||
        cnt > 1000000 || b->n != hdr + per * (size_t)cnt) {
        mega_bytes_free(b);
        return cli_error("Fashion-MNIST file '%s' is not an IDX file of %s", p, images ? "28x28 images" : "labels"), -1;
    }
    *items = d + hdr, *n = (int)cnt;
    return 0;
}

static const char *const fashion_split[3] = {"train", "valid", "test"};

int fashion_data(xctx *c, char *dir, size_t n, int test_n, int **labels, int *counts) {
    const char *src = c->fashion ? c->fashion : FASHION_DEFAULT;
    mega_bytes fb[4];
    memset(fb, 0, sizeof fb);
    const uint8_t *it[4];
    int cnt[4];
    static const char *const stems[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                         "t10k-labels-idx1-ubyte"};
    int e = 0, k = 0;
    for (; k < 4 && !e; k++) e = fashion_file(src, stems[k], !(k & 1), &fb[k], &it[k], &cnt[k]);
    if (!e && (cnt[0] != cnt[1] || cnt[2] != cnt[3] || cnt[0] < 10000 || cnt[2] < 1))
        e = (cli_error("Fashion-MNIST in %s: %d/%d training and %d/%d test images/labels (expected 60000 and 10000)", src, cnt[0],
                       cnt[1], cnt[2], cnt[3]),
             -1);
    if (!e) {
        const int nv = c->quick ? 50 : 5000, ntr = c->quick ? 200 : cnt[0] - 5000, nte = c->quick ? 50 : (test_n < cnt[2] ? test_n : cnt[2]);
        /* first image, count and source file of each split */
        const int first[3] = {0, cnt[0] - nv, 0}, num[3] = {ntr, nv, nte}, from[3] = {0, 0, 2};
        path_join(dir, n, c->dir, "data");
        e = ensure_dir(dir);
        path_join(dir, n, c->dir, "data/fashion-mnist");
        e = e ? e : ensure_dir(dir);
        for (int s = 0; s < 3 && !e; s++) {
            const uint8_t *im = it[from[s]] + (size_t)first[s] * 784, *lb = it[from[s] + 1] + first[s];
            labels[s] = malloc(sizeof(int) * (size_t)num[s]);
            if (!labels[s]) {
                e = (cli_error("out of memory"), -1);
                break;
            }
            for (int i = 0; i < num[s]; i++) labels[s][i] = lb[i];
            char p[8192];
            snprintf(p, sizeof p, "%s/%s-images.idx", dir, fashion_split[s]);
            e = write_idx(p, 1, im, num[s]);
            snprintf(p, sizeof p, "%s/%s-labels.idx", dir, fashion_split[s]);
            e = e ? e : write_idx(p, 0, lb, num[s]);
            counts[s] = num[s];
        }
    }
    while (k-- > 0) mega_bytes_free(&fb[k]);
    return e;
}

/* ---- training ---- */

/* `mega train COMMON FLAGS` into OUT/NAME/runs/ID, logged as ID; reads its log.jsonl and the
 * parameter count it printed */
int train_model(xctx *c, const char *id, const char *common, const char *flags, const char *metric, xlog *g,
                       double *params, xrun *r) {
    char run[4096];
    snprintf(run, sizeof run, "%s/runs", c->dir);
    if (ensure_dir(run)) return -1;
    snprintf(run, sizeof run, "%s/runs/%s", c->dir, id);
    xargv a = {0};
    xa(&a, c->self), xa(&a, "train"), xwords(&a, common), xwords(&a, flags);
    xaf(&a, "--out=%s", run), xaf(&a, "--threads=%d", c->threads), xaf(&a, "--seed=%lld", c->seed);
    xwords(&a, "--force --quiet --keep 1 --save-every 0");
    memset(g, 0, sizeof *g);
    g->final = NAN, *params = NAN;
    if (xrun_ok(c, id, &a, r)) return -1;
    log_number(c, id, "  model ", params);
    return read_runlog(run, metric, g);
}

/* the --ffn-dim at which a model of `flags` has about `target` parameters: a one-step probe at
 * width F0 (logged as ID-probe), then the width moved by the normalized FFN's 2D + 1 parameters
 * per unit per layer (fc1 and fc2), rounded to a multiple of 8; F0 when the probe fails */
int match_ffn(xctx *c, const char *id, const char *common, const char *flags, int F0, int D, int L, double target) {
    char pid[128], pc[24000], pf[1024];
    xlog g;
    xrun r;
    double p = NAN;
    snprintf(pid, sizeof pid, "%s-probe", id);
    snprintf(pc, sizeof pc, "%s --steps 1 --eval-every 0 --eval-tokens 1", common); /* its final validation: one example */
    snprintf(pf, sizeof pf, "%s --ffn-dim %d", flags, F0);
    if (!isfinite(target) || train_model(c, pid, pc, pf, "acc", &g, &p, &r) || !isfinite(p)) return F0;
    int F = (int)lround(F0 + (target - p) / (L * (2.0 * D + 1)));
    return F < 8 ? 8 : (F + 4) / 8 * 8;
}

void fmt_num(char *b, size_t n, double v, const char *fmt) {
    if (isfinite(v)) snprintf(b, n, fmt, v);
    else snprintf(b, n, "—");
}

/* ---- aft: the AFT article's one-layer byte LM ---- */
/* ---- the command ---- */

static const struct {
    const char *name, *what, *budget;
    int (*run)(xctx *);
} EXPERIMENTS[] = {
    {"aft", "AFT article: one-layer byte LMs at equal width (MHA+, gMLP, AFT time-weighted, AFT-simple, Mega)", "~11 min", exp_aft},
    {"lra", "long-range classification at equal parameters and time: ListOps and sequential Fashion-MNIST, five mixers", "~15 min", exp_lra},
    {"ablation-listops", "Mega ablations on ListOps: EMA dimension, chunk size, attention function", "~15 min", exp_ablation_listops},
    {"ablation-fmnist", "Mega ablations on sequential Fashion-MNIST: EMA dimension, chunk size, attention function", "~15 min",
     exp_ablation_fmnist},
    {"extrapolate", "train at 256 bytes, evaluate at 256..8192: Mega, RoPE (+ window mask), ALiBi, KERPLE, Sandwich, XPOS, local, log-n", "~16 min", exp_extrapolate},
    {"speed", "training step time and peak memory from 1K to 16K tokens: Mega-chunk, Mega full, Transformer", "~3 min", exp_speed},
    {"pathfinder", "Pathfinder-32 (generated), easy and hard: Mega against the Transformer at equal parameters and time, with the generator's statistics", "~13 min", exp_pathfinder},
    {"vision", "Fashion-MNIST as patches and as pixels: Mega against a ViT (Transformer) at equal parameters and time", "~18 min", exp_vision},
    {"abc-mlm", "ABC article: masked-LM pretraining on GCIDE, then fine-tuning on language id and part of speech, against from scratch: BASE, Linformer, ABC-MLP, Mega", "~20 min", exp_abc_mlm},
    {"megalodon", "Mega vs Megalodon vs Transformer at equal training time, train at 256 / test to 4096, decode memory", "~12 min", exp_megalodon},
    {"speech", "raw keyword spotting at L = 16,000 on espeak-ng speech: Mega (chunk 1000), local attention, Transformer, ABC at equal parameters and time", "~40 min", exp_speech},
    {"abc-mt", "ABC article: translation on FreeDict deu-eng, sentences and joined-entry documents, at equal training time: BASE, Linformer, ABC-MLP 32/32, 32/8, 64/64, Mega", "~50 min", exp_abc_mt},
};
#define NEXP (int)(sizeof EXPERIMENTS / sizeof *EXPERIMENTS)

int cmd_experiment(int argc, char **argv) {
    const char *name = NULL, *out = "experiments", *data = NULL, *fashion = NULL;
    int quick = 0, list = 0, threads = 0;
    long long seed = 1;
    int i0 = 2;
    if (argc > 2 && strncmp(argv[2], "-", 1)) name = argv[2], i0 = 3;
    cli_flag fl[] = {{"list", F_SET, &list, "list the experiments", NULL, 1, 0, 0},
                     {"quick", F_SET, &quick, "the same code at toy sizes for a few steps (a smoke test; numbers mean nothing)", NULL, 1, 0, 0},
                     {"out", F_STR, &out, "results go to OUT/NAME (results.md, SVG figures, runs/, logs/)", NULL, 1, 0, 0},
                     {"data", F_STR, &data, "text for the language-model experiments (default: data/gcide.{train,valid}, else dict-gcide)", NULL, 1, 0, 0},
                     {"fashion-mnist", F_STR, &fashion, "directory of the four published Fashion-MNIST files (*-idx?-ubyte.gz) for the classification experiments (default " FASHION_DEFAULT ", Debian's dataset-fashion-mnist)", NULL, 1, 0, 0},
                     {"seed", F_I64, &seed, "seed of the data and of every run", NULL, 0, 1e15, 0},
                     {"threads", F_INT, &threads, "threads per run (0 = all cores)", NULL, 0, 4096, 0},
                     FL_END};
    const char *usage = "NAME [--quick] [--out DIR] | --list\n\nReruns a claim of the papers behind this project and writes OUT/NAME/results.md with its\n"
                        "table, the commands, and SVG figures (docs/results.md holds the last full runs).";
    int r = cli_parse("experiment", usage, fl, argc, argv, i0);
    if (r) return r == 1 ? 0 : 2;
    if (list) {
        for (int i = 0; i < NEXP; i++) printf("%-12s %s (%s on 2 cores)\n", EXPERIMENTS[i].name, EXPERIMENTS[i].what, EXPERIMENTS[i].budget);
        return 0;
    }
    if (!name) return cli_error("an experiment name is required (mega experiment --list)"), 2;
    int k = 0;
    while (k < NEXP && strcmp(EXPERIMENTS[k].name, name)) k++;
    if (k == NEXP) return cli_error("unknown experiment '%s' (mega experiment --list)", name), 2;
    xctx c;
    memset(&c, 0, sizeof c);
    static char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return cli_error("cannot find this program (/proc/self/exe)"), 2;
    self[n] = 0;
    c.self = self, c.name = name, c.quick = quick, c.seed = seed, c.data = data, c.fashion = fashion, c.t0 = now_sec();
    c.threads = threads > 0 ? threads : mega_get_threads();
    if (ensure_dir(out)) return 2;
    path_join(c.dir, sizeof c.dir, out, name);
    if (ensure_dir(c.dir)) return 2;
    sbuf_printf(&c.md, "## %s\n\n%s. `mega experiment %s%s --seed %lld --threads %d`, %s.\n\n", name, EXPERIMENTS[k].what,
                name, quick ? " --quick" : "", seed, c.threads, mega_build_info());
    fprintf(stderr, "[%s] results in %s (budget %s on 2 cores%s)\n", name, c.dir, EXPERIMENTS[k].budget, quick ? "; quick mode" : "");
    int e = EXPERIMENTS[k].run(&c);
    char p[4096], dur[64];
    fmt_duration(dur, sizeof dur, now_sec() - c.t0);
    sbuf_printf(&c.md, "\nWall time of the experiment: %s.\n\n", dur);
    path_join(p, sizeof p, c.dir, "results.md");
    if (!e) e = sbuf_write(&c.md, p);
    sbuf_free(&c.md);
    if (e) return 2;
    if (c.failed) return cli_error("%s: %d run(s) failed (their logs are in %s/logs; the table shows them as —)", name, c.failed, c.dir), 2;
    printf("%s: done in %s; %s\n", name, dur, p);
    return 0;
}
