/* `mega experiment NAME`: the seeds' claims as experiments anyone can rerun (docs/results.md).
 *
 * Each experiment prepares its data, trains and evaluates its models by running this same binary
 * (`mega listops`, `mega train`, `mega eval`) as child processes, so every number comes from the
 * commands a user runs and every run keeps its own log (OUT/NAME/logs/), checkpoint
 * (OUT/NAME/runs/) and curves. It then writes OUT/NAME/results.md (the table, the command lines,
 * the budget) and its SVG figures. A child's peak resident memory and CPU time come from wait4().
 * --quick runs the same code at toy sizes for a few steps (make test runs it so no experiment
 * rots); its numbers mean nothing. */
#include "common.h"
#include "svg.h"

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

typedef struct {
    const char *self; /* this binary */
    char dir[2048];   /* OUT/NAME */
    const char *name;
    int quick, threads;
    long long seed;
    const char *data; /* text corpus of the language-model experiments */
    const char *fashion; /* directory of the Fashion-MNIST files (NULL: Debian's) */
    char corpus[4096];
    sbuf md;          /* results.md */
    int failed;       /* child runs that failed */
    double t0;
} xctx;

/* ---- child processes ---- */

typedef struct {
    char *v[128];
    int n;
} xargv;

static void xa(xargv *a, const char *s) {
    if (a->n < 127) a->v[a->n++] = strdup(s), a->v[a->n] = NULL;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void xaf(xargv *a, const char *fmt, ...) {
    char b[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    xa(a, b);
}

/* the words of a space-separated flag string */
static void xwords(xargv *a, const char *s) {
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

static void xfree(xargv *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    a->n = 0;
}

typedef struct {
    int rc;
    double wall, cpu;   /* seconds */
    double peak_mib;    /* peak resident memory */
} xrun;

/* `mega ARGS` with stdout and stderr to OUT/NAME/logs/LOG.txt; the command line is the log's
 * first line */
static int xspawn(xctx *c, const char *log, xargv *a, xrun *r) {
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
static int log_number(xctx *c, const char *log, const char *key, double *v) {
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
static int xrun_ok(xctx *c, const char *log, xargv *a, xrun *r) {
    fprintf(stderr, "[%s %5.0fs] %s ...\n", c->name, now_sec() - c->t0, log);
    int e = xspawn(c, log, a, r);
    xfree(a);
    if (e) return -1;
    if (r->rc) c->failed++;
    if (r->rc) fprintf(stderr, "[%s] %s failed (exit %d): see %s/logs/%s.txt\n", c->name, log, r->rc, c->dir, log);
    return r->rc;
}

/* ---- what a run left: log.jsonl ---- */

typedef struct {
    double x[512], y[512]; /* validation metric against training seconds */
    double xs[512];        /* ... against steps */
    int n;
    double final;          /* last validation value */
    double tok_s;          /* mean training tokens/s */
    double train_s;        /* training seconds (validation excluded) */
    int steps;
    int first_step;        /* the first training record: its step and training seconds */
    double first_train_s;
} xlog;

static int read_runlog(const char *run, const char *metric, xlog *g) {
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

/* ---- results.md ---- */

static void md_cmd(xctx *c, const char *log) {
    char lp[4096], line[8192];
    snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
    FILE *f = fopen(lp, "r");
    if (f && fgets(line, sizeof line, f)) sbuf_printf(&c->md, "    %s", line + 2);
    if (f) fclose(f);
}

static int write_fig(xctx *c, const char *file, sbuf *svg) {
    char p[4096];
    path_join(p, sizeof p, c->dir, file);
    int r = sbuf_write(svg, p);
    sbuf_free(svg);
    if (!r) sbuf_printf(&c->md, "\n![%s](%s)\n", file, file);
    return r;
}

/* one figure of validation curves, one series per model */
typedef struct {
    const char *label;
    xlog g;
} xcurve;

static int curves_fig(xctx *c, const char *file, const char *title, const char *ylabel, const xcurve *cv, int n,
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
static int corpus(xctx *c, char *train, char *valid, size_t n) {
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
static int listops_data(xctx *c, char *dir, size_t n) {
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
static double majority(const int *ytr, int ntr, const int *yte, int nte, int *cls) {
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
static int tsv_labels(const char *path, int **y) {
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
static double u01(uint64_t *s) { /* splitmix64 */
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
#define FASHION_DEFAULT "/usr/share/datasets/fashion-mnist"

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

static int fashion_data(xctx *c, char *dir, size_t n, int test_n, int **labels, int *counts) {
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

/* ---- model inspection for the figures ---- */

/* the reals of the tensor whose name ends with suffix in layer `layer` (-1: any) */
static const mega_real *lm_tensor(mega_lm *m, const char *suffix, int layer, size_t *numel) {
    const mega_real *w = mega_lm_params(m);
    char pre[64];
    snprintf(pre, sizeof pre, "layers.%d.", layer);
    for (int i = 0; i < mega_lm_tensor_count(m); i++) {
        size_t off, ne;
        unsigned fl;
        const char *nm = mega_lm_tensor_info(m, i, &off, &ne, &fl);
        const size_t ln = strlen(nm), ls = strlen(suffix);
        if (ln >= ls && !strcmp(nm + ln - ls, suffix) && (layer < 0 || strstr(nm, pre))) return *numel = ne, w + off;
    }
    return NULL;
}

/* The EMA kernel of each channel, as the official code materialises it
 * (fairseq/modules/exponential_moving_average.py, MultiHeadEMA._calc_coeffs and _compute_kernel):
 * p = sigmoid(delta), q = 1 - p * sigmoid(alpha), k_d(t) = sum_n p beta q^t gamma / sqrt(N). The
 * library never builds it (it runs the recurrence); it is drawn here only. */
static int ema_fig(xctx *c, mega_lm *m, int layers, const char *file) {
    const mega_lm_config *cf = mega_lm_get_config(m);
    const int D = cf->block.embed_dim, N = cf->block.n_dim, T = 128;
    if (N <= 0) return 0;
    static double ks[8][128], xt[128];
    svg_series s[8];
    char lab[8][64];
    sbuf all = {0};
    for (int l = 0; l < layers; l++) {
        size_t nd, na, nb, ng;
        const mega_real *dl = lm_tensor(m, "move.delta", l, &nd), *al = lm_tensor(m, "move.alpha", l, &na),
                        *be = lm_tensor(m, "move.beta", l, &nb), *ga = lm_tensor(m, "move.gamma", l, &ng);
        if (!dl || !al || !be || !ga || nd < (size_t)D * N || ng < (size_t)D * N) continue;
        /* 8 channels spread over the width */
        for (int k = 0; k < 8; k++) {
            const int d = k * D / 8;
            for (int t = 0; t < T; t++) {
                double v = 0;
                for (int n = 0; n < N; n++) {
                    const size_t i = (size_t)d * N + n;
                    const double p = 1 / (1 + exp(-(double)dl[i])), q = 1 - p / (1 + exp(-(double)al[i]));
                    v += p * be[i] * pow(q, t) * ga[i] / sqrt((double)N);
                }
                ks[k][t] = v, xt[t] = t;
            }
            snprintf(lab[k], sizeof lab[k], "channel %d", d);
            s[k] = (svg_series){lab[k], xt, ks[k], T, 0, 0};
        }
        char title[128], f[256];
        snprintf(title, sizeof title, "learned EMA kernels, layer %d (8 of %d channels)", l, D);
        svg_chart ch = {title, "lag t (tokens)", "kernel weight k_d(t)", 0, 0, 0};
        svg_line_chart(&all, &ch, s, 8);
        snprintf(f, sizeof f, "%s-layer%d.svg", file, l);
        if (write_fig(c, f, &all)) return -1;
    }
    return 0;
}

static int cmp_real(const void *a, const void *b) {
    const mega_real x = *(const mega_real *)a, y = *(const mega_real *)b;
    return (x > y) - (x < y);
}

/* The attention weights of Mega's layer `layer` over one chunk: the first chunk of the held-out
 * text streamed from its start (mega_lm_stream_probe_attention), drawn as a heat map (row:
 * query position, column: key position; causal, so the upper triangle is empty). */
static int attn_fig(xctx *c, mega_lm *m, const char *text, int layer, const char *file) {
    const mega_lm_config *cf = mega_lm_get_config(m);
    mega_block_context x; /* one chunk, or 128 positions under full attention */
    mega_block_context_of(&cf->block, 128, &x);
    const int C = x.cache;
    mega_bytes b;
    if (mega_read_file_max(text, "held-out text", (uint64_t)C, &b) != MEGA_OK) return cli_error("%s", mega_last_error()), -1;
    const int n = (int)(b.n < (size_t)C ? b.n : (size_t)C);
    int32_t *tk = malloc(sizeof(int32_t) * (size_t)C);
    mega_real *rows = malloc(sizeof(mega_real) * (size_t)C * C), *lg = malloc(sizeof(mega_real) * (size_t)cf->vocab_size * C);
    double *map = malloc(sizeof(double) * (size_t)C * C);
    mega_lm_stream *s = NULL;
    int e = -1;
    if (tk && rows && lg && map && n > 0 && mega_lm_stream_new(m, 1, C, &s) == MEGA_OK &&
        mega_lm_stream_probe_attention(s, layer, rows, C) == MEGA_OK) {
        for (int i = 0; i < n; i++) tk[i] = b.data[i];
        if (mega_lm_stream_feed(s, tk, n, lg) == MEGA_OK) {
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) map[(size_t)i * n + j] = j <= i ? rows[(size_t)i * C + j] : NAN;
            /* the first rows (few keys, large weights) would take the whole colour scale: clip it
             * at the 99th percentile of the weights */
            size_t nv = 0;
            for (size_t i = 0; i < (size_t)n * n; i++)
                if (isfinite(map[i])) rows[nv++] = (mega_real)map[i];
            qsort(rows, nv, sizeof *rows, cmp_real);
            const double top = nv ? rows[(size_t)(0.99 * (double)(nv - 1))] : 1;
            for (size_t i = 0; i < (size_t)n * n; i++)
                if (map[i] > top) map[i] = top;
            char title[200];
            snprintf(title, sizeof title, "Mega attention weights, layer %d, %d held-out bytes (colour up to the 99th pct.)",
                     layer, n);
            sbuf svg = {0};
            svg_heatmap(&svg, title, "key position (byte)", "query position (byte)", map, n, n);
            e = write_fig(c, file, &svg);
        }
    }
    if (e && mega_last_error()[0]) cli_error("attention map: %s", mega_last_error());
    mega_lm_stream_free(s);
    mega_bytes_free(&b);
    free(tk), free(rows), free(lg), free(map);
    return e;
}

/* the time-weighting f_h(d) of an aft-tw (f = exp(-e^{time_decay_h} d)) or mhatw (f =
 * exp(time_logw[h, Tm-1-d])) model's first layer */
static int tw_fig(xctx *c, mega_lm *m, const char *label, const char *file) {
    size_t n;
    const mega_real *td = lm_tensor(m, "mixer.time_decay", 0, &n), *lw = NULL;
    int H = (int)n, Tm = 0;
    if (!td) { /* mhatw, causal: time_logw [H, Tm], time_gamma [Tm] */
        size_t ng;
        lw = lm_tensor(m, "mixer.time_logw", 0, &n);
        if (!lw || !lm_tensor(m, "mixer.time_gamma", 0, &ng) || !ng) return 0;
        Tm = (int)ng, H = (int)(n / ng);
    }
    static double y[8][256], x[256];
    char lab[8][64];
    svg_series s[8];
    const int T = Tm ? (Tm < 256 ? Tm : 256) : 256;
    for (int h = 0; h < H && h < 8; h++) {
        for (int d = 0; d < T; d++)
            x[d] = d, y[h][d] = td ? exp(-exp((double)td[h]) * d) : exp((double)lw[(size_t)h * Tm + (Tm - 1 - d)]);
        snprintf(lab[h], sizeof lab[h], "head %d", h);
        s[h] = (svg_series){lab[h], x, y[h], (size_t)T, 0, 0};
    }
    char title[160];
    snprintf(title, sizeof title, "learned time weighting f_h(t-u), %s, layer 0", label);
    svg_chart ch = {title, "distance t - u (bytes)", "f_h(t - u)", 0, 0, 0};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, H < 8 ? H : 8);
    return write_fig(c, file, &svg);
}

/* ---- training ---- */

/* `mega train COMMON FLAGS` into OUT/NAME/runs/ID, logged as ID; reads its log.jsonl and the
 * parameter count it printed */
static int train_model(xctx *c, const char *id, const char *common, const char *flags, const char *metric, xlog *g,
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

static void fmt_num(char *b, size_t n, double v, const char *fmt) {
    if (isfinite(v)) snprintf(b, n, fmt, v);
    else snprintf(b, n, "—");
}

/* ---- aft: the AFT article's one-layer byte LM ---- */

typedef struct {
    const char *id, *label, *flags;
} xmodel;

static int exp_aft(xctx *c) {
    static const xmodel M[] = {
        {"mha-plus", "MHA+ (rotary + time weighting)", "--mixer mhatw --pos rope"},
        {"gmlp", "gMLP", "--mixer gmlp"},
        {"aft-tw", "AFT, time-weighted", "--mixer aft-tw"},
        {"aft-simple", "AFT-simple", "--mixer aft-simple"},
        {"mega", "Mega", "--mixer mega"},
    };
    enum { NM = sizeof M / sizeof *M };
    char tr[4096], va[4096], common[9000];
    if (corpus(c, tr, va, sizeof tr)) return -1;
    snprintf(common, sizeof common, "--task lm --data %s --valid %s %s", tr, va,
             c->quick ? "--layers 1 --embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64 --seq-len 64 --batch 4 "
                        "--steps 8 --warmup 2 --eval-every 4 --eval-tokens 2048"
                      : "--layers 1 --embed-dim 128 --seq-len 128 --batch 32 --steps 1500 --warmup 100 "
                        "--lr 1e-3 --min-lr 1e-4 --eval-every 250 --eval-tokens 131072");
    sbuf_printf(&c->md, "One-layer byte-level language models of equal width (D = %d) on the same text, with the "
                        "article's context (128) and schedule (1e-3, cosine to 1e-4), the same steps; validation bits per byte on "
                        "held-out text (%s).\n\n",
                c->quick ? 32 : 128, c->quick ? "quick mode: toy sizes, meaningless numbers" : "the last 5%");
    sbuf_printf(&c->md, "| model | flags | parameters | valid bits/byte | perplexity per byte | training tok/s | training time (s) |\n"
                        "|---|---|---|---|---|---|---|\n");
    xcurve cv[NM];
    for (int i = 0; i < NM; i++) {
        double p;
        xrun r;
        cv[i].label = M[i].label;
        train_model(c, M[i].id, common, M[i].flags, "bpb", &cv[i].g, &p, &r);
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        fmt_num(b1, 32, p, "%.0f"), fmt_num(b2, 32, cv[i].g.final, "%.4f"), fmt_num(b3, 32, exp2(cv[i].g.final), "%.3f");
        fmt_num(b4, 32, cv[i].g.tok_s, "%.0f"), fmt_num(b5, 32, cv[i].g.train_s, "%.1f");
        sbuf_printf(&c->md, "| %s | `%s` | %s | %s | %s | %s | %s |\n", M[i].label, M[i].flags, b1, b2, b3, b4, b5);
    }
    sbuf_printf(&c->md, "\nCommands (the common flags, then each model's):\n\n");
    for (int i = 0; i < NM; i++) md_cmd(c, M[i].id);
    if (curves_fig(c, "aft-curves.svg", "one-layer byte LMs: validation bits per byte", "bits per byte", cv, NM, 1) ||
        curves_fig(c, "aft-curves-time.svg", "one-layer byte LMs: validation bits per byte against training time",
                   "bits per byte", cv, NM, 0))
        return -1;
    /* what the models learned: the time-weighting curves and Mega's EMA kernels */
    for (int i = 0; i < NM; i++) {
        char p[4096], f[128];
        mega_lm *m = NULL;
        snprintf(p, sizeof p, "%s/runs/%s", c->dir, M[i].id);
        if (mega_lm_load(p, &m) != MEGA_OK) continue;
        snprintf(f, sizeof f, "aft-timeweight-%s.svg", M[i].id);
        int e = strcmp(M[i].id, "mega") ? tw_fig(c, m, M[i].label, f)
                                        : ema_fig(c, m, 1, "aft-ema-kernels") || attn_fig(c, m, va, 0, "aft-mega-attention.svg");
        mega_lm_free(m);
        if (e) return -1;
    }
    return 0;
}

/* ---- lra: long-range classification at equal parameters and equal time ---- */

typedef struct {
    const char *id, *label;
    char common[20000];
    char test_args[9000];
    double majority;
    int nclass, budget;
} xtask;

/* the model of both classification tasks; the width of the normalized FFN is each model's own
 * flag (--ffn-dim: Mega's default, the others' matched to Mega's parameter count) */
#define LRA_MODEL_QUICK "--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --n-dim 4 --eval-every 4 --eval-tokens 60"
#define LRA_MODEL "--layers 2 --embed-dim 64 --z-dim 32 --hidden-dim 128 --n-dim 16 --eval-every 100 --eval-tokens 500"
/* test images of Fashion-MNIST scored by the experiments (of 10,000): enough for a standard
 * error under 1 point, at a fifth of the evaluation time */
#define FASHION_TEST 2000
/* the sentence of results.md that says how Fashion-MNIST is split */
static void fashion_note(xctx *c) {
    sbuf_printf(&c->md, "Fashion-MNIST: the first 55,000 training images train, the last 5,000 validate, and the test accuracy is "
                        "measured on the first %d of the 10000 test images.%s\n\n",
                FASHION_TEST, c->quick ? " Quick mode: 200 training, 50 validation and 50 test images." : "");
}
/* training seconds per model in the lra experiment */
#define LRA_BUDGET 75

/* the tasks in `want` (bit 0: ListOps -> t[0], bit 1: Fashion-MNIST -> t[1]) */
static int lra_tasks(xctx *c, xtask *t, int want) {
    const char *model = c->quick ? LRA_MODEL_QUICK : LRA_MODEL;
    int cls;
    if (want & 1) {
        char ld[4096], p[8192];
        if (listops_data(c, ld, sizeof ld)) return -1;
        int *ytr = NULL, *yte = NULL;
        snprintf(p, sizeof p, "%s/train.tsv", ld);
        int ntr = tsv_labels(p, &ytr);
        snprintf(p, sizeof p, "%s/test.tsv", ld);
        int nte = tsv_labels(p, &yte);
        if (ntr < 0 || nte < 0) return free(ytr), free(yte), -1;
        t[0] = (xtask){.id = "listops", .label = "ListOps (generated, 30-150 tokens)"};
        t[0].majority = majority(ytr, ntr, yte, nte, &cls);
        t[0].budget = c->quick ? 1 : LRA_BUDGET;
        free(ytr), free(yte);
        snprintf(t[0].common, sizeof t[0].common,
                 "--task classify --data %s/train.tsv --valid %s/valid.tsv --seq-len %d --chunk-size -1 --batch %d --warmup %d %s", ld,
                 ld, c->quick ? 64 : 150, c->quick ? 8 : 32, c->quick ? 2 : 100, model);
        snprintf(t[0].test_args, sizeof t[0].test_args, "--data %s/test.tsv", ld);
    }
    if (want & 2) {
        char fd[4096];
        int *labels[3] = {0}, cnt[3];
        int e = fashion_data(c, fd, sizeof fd, FASHION_TEST, labels, cnt);
        if (!e) {
            t[1] = (xtask){.id = "fmnist", .label = "sequential Fashion-MNIST (784 pixels)"};
            t[1].majority = majority(labels[0], cnt[0], labels[2], cnt[2], &cls);
            t[1].budget = c->quick ? 1 : LRA_BUDGET;
            snprintf(t[1].common, sizeof t[1].common,
                     "--task classify --images %s/train-images.idx --labels %s/train-labels.idx --valid-images %s/valid-images.idx "
                     "--valid-labels %s/valid-labels.idx --seq-len 784 --chunk-size 112 --batch %d --warmup %d %s",
                     fd, fd, fd, fd, c->quick ? 4 : 8, c->quick ? 2 : 30, model);
            snprintf(t[1].test_args, sizeof t[1].test_args, "--images %s/test-images.idx --labels %s/test-labels.idx", fd, fd);
        }
        for (int s = 0; s < 3; s++) free(labels[s]);
        if (e) return -1;
    }
    return 0;
}

/* test accuracy of a trained classifier */
static double test_accuracy(xctx *c, const xtask *t, const char *id) {
    char log[256], run[4096];
    snprintf(log, sizeof log, "%s-test", id);
    snprintf(run, sizeof run, "%s/runs/%s", c->dir, id);
    xargv a = {0};
    xrun r;
    double acc = NAN;
    xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xwords(&a, t->test_args);
    xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet");
    if (!xrun_ok(c, log, &a, &r)) log_number(c, log, "accuracy ", &acc);
    return acc;
}

static int exp_lra(xctx *c) {
    static const xmodel M[] = {
        {"mega", "Mega", "--mixer mega"},
        {"mha", "Transformer (mha, RoPE)", "--mixer mha --pos rope"},
        {"local", "local attention (RoPE)", "--mixer local --pos rope"},
        {"abc", "ABC (learned control; no positions)", "--mixer abc-mlp"},
        {"aft", "AFT-local (window 32)", "--mixer aft-local --window 32"},
    };
    enum { NM = sizeof M / sizeof *M };
    xtask T[2];
    if (lra_tasks(c, T, 3)) return -1;
    sbuf_printf(&c->md, "Each model of a task trains for the same time (`--time-budget`: ListOps %d s, Fashion-MNIST %d s; validation excluded) on "
                        "%d threads; the FFN width of the other mixers is set so that every model has about as many "
                        "parameters as Mega. The classifiers have no absolute position embedding: Mega gets order from its EMA, "
                        "the attention mixers from RoPE, AFT-local from its learned position biases; the ABC mixer has none "
                        "here (it refuses relative schemes), so it sees the tokens as a bag.%s\n\n", T[0].budget, T[1].budget, c->threads,
                c->quick ? " Quick mode: toy sizes, meaningless numbers." : "");
    fashion_note(c);
    for (int k = 0; k < 2; k++) {
        xtask *t = &T[k];
        xcurve cv[NM];
        double mega_p = NAN;
        sbuf_printf(&c->md, "### %s\n\n| model | parameters | steps | test accuracy |\n|---|---|---|---|\n", t->label);
        for (int i = 0; i < NM; i++) {
            char id[64], flags[512], common[24000];
            xrun r;
            double p = NAN;
            snprintf(id, sizeof id, "%s-%s", t->id, M[i].id);
            const int F0 = c->quick ? 32 : 128;
            snprintf(flags, sizeof flags, "%s --ffn-dim %d", M[i].flags, F0);
            if (i > 0 && isfinite(mega_p)) {
                /* equal parameters: probe at the default FFN width, then move the width by the
                 * FFN's 2D + 1 parameters per unit per layer (fc1 and fc2 of the normalized FFN) */
                char pid[80];
                xlog pg;
                snprintf(pid, sizeof pid, "%s-probe", id);
                snprintf(common, sizeof common, "%s --steps 1 --eval-every 0", t->common);
                if (!train_model(c, pid, common, flags, "acc", &pg, &p, &r) && isfinite(p)) {
                    const int D = c->quick ? 16 : 64, L = c->quick ? 1 : 2;
                    int F = (int)lround(F0 + (mega_p - p) / (L * (2.0 * D + 1)));
                    F = F < 8 ? 8 : (F + 4) / 8 * 8;
                    snprintf(flags, sizeof flags, "%s --ffn-dim %d", M[i].flags, F);
                }
            }
            snprintf(common, sizeof common, "%s --time-budget %d --steps 1000000", t->common, t->budget);
            cv[i].label = M[i].label;
            train_model(c, id, common, flags, "acc", &cv[i].g, &p, &r);
            if (i == 0) mega_p = p;
            const double acc = test_accuracy(c, t, id);
            char b1[32], b2[32];
            fmt_num(b1, 32, p, "%.0f"), fmt_num(b2, 32, 100 * acc, "%.1f %%");
            sbuf_printf(&c->md, "| %s (`%s`) | %s | %d | %s |\n", M[i].label, flags, b1, cv[i].g.steps, b2);
        }
        sbuf_printf(&c->md, "| majority class | | | %.1f %% |\n\nCommands:\n\n", 100 * t->majority);
        for (int i = 0; i < NM; i++) {
            char id[64];
            snprintf(id, sizeof id, "%s-%s", t->id, M[i].id);
            md_cmd(c, id);
        }
        char f[128], title[200];
        snprintf(f, sizeof f, "lra-%s-curves.svg", t->id);
        snprintf(title, sizeof title, "%s: validation accuracy at equal training time", t->label);
        if (curves_fig(c, f, title, "validation accuracy", cv, NM, 0)) return -1;
        sbuf_printf(&c->md, "\n");
    }
    return 0;
}

/* ---- ablation: Mega's EMA dimension, chunk size and attention function ---- */

/* optimizer steps of every ablation variant (a fixed count, so the variants differ only in
 * the one thing changed; their time per step is reported) */
#define ABL_STEPS_LISTOPS 800
#define ABL_STEPS_FMNIST 600

/* the ablation on task k (0: ListOps, 1: Fashion-MNIST). The reference is the lra experiment's
 * Mega: full attention on ListOps (expressions of at most 150 tokens), chunks of 112 on the 784
 * pixels; the chunk rows are 16, 64 and the third of {128, full} that is not the reference. */
static int exp_ablation_task(xctx *c, int k) {
    xmodel V[] = {
        {"base", "", ""},
        {"n0", "EMA dimension 0 (no EMA)", "--n-dim 0"},
        {"n1", "EMA dimension 1", "--n-dim 1"},
        {"n2", "EMA dimension 2", "--n-dim 2"},
        {"n4", "EMA dimension 4", "--n-dim 4"},
        {"n8", "EMA dimension 8", "--n-dim 8"},
        {"c16", "chunk 16", "--chunk-size 16"},
        {"c64", "chunk 64", "--chunk-size 64"},
        {"", "", ""},
        {"relu2", "relu² attention", "--attention-activation relu2"},
        {"laplace", "Laplace attention", "--attention-activation laplace"},
    };
    enum { NV = sizeof V / sizeof *V };
    if (k == 0) {
        V[0].label = "EMA dimension 16, full attention, softmax (the reference)";
        V[8] = (xmodel){"c128", "chunk 128", "--chunk-size 128"};
    } else {
        /* the reference is the lra experiment's image model as it is, chunks of 112 pixels (a
         * divisor of 784: no padding); every variant keeps them unless it is a chunk row */
        V[0].label = "EMA dimension 16, chunk 112, softmax (the reference)";
        V[8] = (xmodel){"full", "full attention", "--chunk-size -1"};
    }
    xtask T[2];
    if (lra_tasks(c, T, 1 << k)) return -1;
    const xtask *t = &T[k];
    const int steps = c->quick ? 4 : (k ? ABL_STEPS_FMNIST : ABL_STEPS_LISTOPS), batch = k ? (c->quick ? 4 : 8) : (c->quick ? 8 : 32);
    double acc[NV], sps[NV];
    xcurve cv[NV];
    for (int i = 0; i < NV; i++) {
        char id[64], common[24000];
        xrun r;
        double p;
        snprintf(id, sizeof id, "%s-%s", t->id, V[i].id);
        snprintf(common, sizeof common, "%s --ffn-dim %d --steps %d --eval-every %d", t->common, c->quick ? 32 : 128, steps,
                 steps / 4);
        cv[i].label = V[i].label;
        train_model(c, id, common, V[i].flags, "acc", &cv[i].g, &p, &r);
        acc[i] = test_accuracy(c, t, id);
        sps[i] = cv[i].g.steps ? cv[i].g.train_s / cv[i].g.steps : NAN;
    }
    sbuf_printf(&c->md, "Mega (the lra experiment's model) with one thing changed, each trained for %d steps at batch %d on %s; "
                        "test accuracy and training seconds per step.%s\n\n",
                steps, batch, t->label, c->quick ? " Quick mode: meaningless numbers." : "");
    if (k) fashion_note(c);
    sbuf_printf(&c->md, "| variant | flags | test accuracy | s/step |\n|---|---|---|---|\n");
    for (int i = 0; i < NV; i++) {
        char a0[32], s0[32];
        fmt_num(a0, 32, 100 * acc[i], "%.1f %%"), fmt_num(s0, 32, sps[i], "%.3f");
        sbuf_printf(&c->md, "| %s | `%s` | %s | %s |\n", V[i].label, V[i].flags, a0, s0);
    }
    sbuf_printf(&c->md, "| majority class | | %.1f %% | |\n\nCommands (the common flags, then each variant's):\n\n", 100 * t->majority);
    for (int i = 0; i < NV; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%s", t->id, V[i].id);
        md_cmd(c, id);
    }
    /* accuracy against the EMA dimension: the reference run is n 16 */
    static const int order[6] = {1, 2, 3, 4, 5, 0};
    double x[6], y[6];
    for (int j = 0; j < 6; j++) x[j] = j == 5 ? 16 : (j == 0 ? 0 : 1 << (j - 1)), y[j] = 100 * acc[order[j]];
    char f[128], title[200];
    svg_series s[1] = {{t->label, x, y, 6, 1, 0}};
    snprintf(title, sizeof title, "Mega on %s: test accuracy against the EMA dimension", t->label);
    svg_chart ch = {title, "EMA dimension n", "test accuracy (%)", 0, 0, 0};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, 1);
    snprintf(f, sizeof f, "ablation-%s-ema.svg", t->id);
    if (write_fig(c, f, &svg)) return -1;
    snprintf(f, sizeof f, "ablation-%s-curves.svg", t->id);
    snprintf(title, sizeof title, "Mega ablations on %s: validation accuracy", t->label);
    return curves_fig(c, f, title, "validation accuracy", cv, NV, 1);
}

static int exp_ablation_listops(xctx *c) { return exp_ablation_task(c, 0); }
static int exp_ablation_fmnist(xctx *c) { return exp_ablation_task(c, 1); }

/* ---- extrapolate: train short, test long ---- */

static int exp_extrapolate(xctx *c) {
    /* of: evaluate that model's run instead of training one, with the local mask of the training
     * length at evaluation (the "super baseline" of Su's article: RoPE + a window mask) */
    static const struct {
        const char *id, *label, *flags, *of;
    } M[] = {
        {"mega", "Mega (chunk 128)", "--mixer mega --chunk-size 128", NULL},
        {"rope", "MHA + RoPE", "--mixer mha --pos rope", NULL},
        {"rope-mask", "MHA + RoPE, window mask at evaluation", NULL, "rope"},
        {"alibi", "MHA + ALiBi", "--mixer mha --pos alibi", NULL},
        {"kerple", "MHA + KERPLE (log)", "--mixer mha --pos kerple-log", NULL},
        {"sandwich", "MHA + Sandwich", "--mixer mha --pos sandwich", NULL},
        {"xpos", "MHA + XPOS", "--mixer mha --pos xpos", NULL},
        {"local", "local attention (window 64) + RoPE", "--mixer local --pos rope", NULL},
        {"logn", "MHA + RoPE + log-n scaling", "--mixer mha --pos rope --log-n-scaling", NULL},
    };
    enum { NM = sizeof M / sizeof *M, NL = 6 };
    const int train_len = c->quick ? 32 : 256;
    int lens[NL];
    for (int j = 0; j < NL; j++) lens[j] = train_len << j;
    char tr[4096], va[4096], common[9000], lstr[128] = "";
    if (corpus(c, tr, va, sizeof tr)) return -1;
    for (int j = 0; j < NL; j++) snprintf(lstr + strlen(lstr), sizeof lstr - strlen(lstr), "%s%d", j ? "," : "", lens[j]);
    snprintf(common, sizeof common, "--task lm --data %s --valid %s --seq-len %d %s", tr, va, train_len,
             c->quick ? "--layers 1 --embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64 --batch 4 --steps 6 "
                        "--warmup 2 --eval-every 3 --eval-tokens 2048"
                      : "--layers 2 --embed-dim 128 --batch 16 --steps 500 --warmup 100 --eval-every 250 "
                        "--eval-tokens 65536");
    static double bpb[NM][NL], xl[NL];
    for (int i = 0; i < NM; i++) {
        xlog g;
        xrun r;
        double p;
        for (int j = 0; j < NL; j++) bpb[i][j] = NAN, xl[j] = lens[j];
        if (!M[i].of && train_model(c, M[i].id, common, M[i].flags, "bpb", &g, &p, &r)) continue;
        char run[4096], log[128];
        snprintf(run, sizeof run, "%s/runs/%s", c->dir, M[i].of ? M[i].of : M[i].id);
        snprintf(log, sizeof log, "%s-eval", M[i].id);
        xargv a = {0};
        xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xaf(&a, "--data=%s", va), xaf(&a, "--lengths=%s", lstr);
        xaf(&a, "--max-bytes=%d", lens[NL - 1] * (c->quick ? 4 : 8)), xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet");
        if (M[i].of) xaf(&a, "--attn-window=%d", train_len);
        if (xrun_ok(c, log, &a, &r)) continue;
        /* the table rows of mega eval --lengths: "LENGTH   BPB   BYTES" */
        char lp[4096], line[512];
        snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
        FILE *f = fopen(lp, "r");
        while (f && fgets(line, sizeof line, f)) {
            int L;
            double v;
            if (sscanf(line, "%d %lf", &L, &v) == 2)
                for (int j = 0; j < NL; j++)
                    if (L == lens[j]) bpb[i][j] = v;
        }
        if (f) fclose(f);
    }
    sbuf_printf(&c->md, "Two-layer byte LMs trained on %d-byte sequences, then scored on held-out text in "
                        "non-overlapping windows of each length (`mega eval --lengths`: one full forward per window); "
                        "bits per byte. The window-mask row is the RoPE model evaluated with `--attn-window %d` (each token sees "
                        "at most the training length back).%s\n\n| model |", train_len, train_len, c->quick ? " Quick mode: meaningless numbers." : "");
    for (int j = 0; j < NL; j++) sbuf_printf(&c->md, " %d |", lens[j]);
    sbuf_printf(&c->md, "\n|---|");
    for (int j = 0; j < NL; j++) sbuf_printf(&c->md, "---|");
    sbuf_printf(&c->md, "\n");
    svg_series s[NM];
    for (int i = 0; i < NM; i++) {
        sbuf_printf(&c->md, "| %s |", M[i].label);
        for (int j = 0; j < NL; j++) {
            char b[32];
            fmt_num(b, 32, bpb[i][j], "%.3f");
            sbuf_printf(&c->md, " %s |", b);
        }
        sbuf_printf(&c->md, "\n");
        s[i] = (svg_series){M[i].label, xl, bpb[i], NL, 1, 0};
    }
    sbuf_printf(&c->md, "\nCommands:\n\n");
    for (int i = 0; i < NM; i++) {
        char log[128];
        snprintf(log, sizeof log, "%s-eval", M[i].id);
        if (!M[i].of) md_cmd(c, M[i].id);
        md_cmd(c, log);
    }
    /* what the Mega model learned: its EMA kernels per layer, a chunk's attention */
    char mp[4096];
    mega_lm *mm = NULL;
    snprintf(mp, sizeof mp, "%s/runs/mega", c->dir);
    if (mega_lm_load(mp, &mm) == MEGA_OK) {
        int e = ema_fig(c, mm, mega_lm_get_config(mm)->layers, "extrapolate-mega-ema") ||
                attn_fig(c, mm, va, mega_lm_get_config(mm)->layers - 1, "extrapolate-mega-attention.svg");
        mega_lm_free(mm);
        if (e) return -1;
    }
    char title[160];
    snprintf(title, sizeof title, "train on %d bytes, evaluate longer", train_len);
    svg_chart ch = {title, "evaluation length (bytes)", "bits per byte", 1, 0, 1};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, NM);
    return write_fig(c, "extrapolate.svg", &svg);
}

/* ---- speed: time and memory against length ---- */

static int exp_speed(xctx *c) {
    static const xmodel M[] = {
        {"mega-chunk", "Mega-chunk (128)", "--mixer mega --chunk-size 128"},
        {"mega-full", "Mega, full attention", "--mixer mega --chunk-size -1"},
        {"mha", "Transformer (mha)", "--mixer mha"},
    };
    enum { NM = sizeof M / sizeof *M, NL = 5 };
    int lens[NL];
    for (int j = 0; j < NL; j++) lens[j] = (c->quick ? 64 : 1024) << j;
    static double sec[NM][NL], mib[NM][NL], xl[NL];
    char d[4096];
    path_join(d, sizeof d, c->dir, "data");
    if (ensure_dir(d)) return -1;
    for (int j = 0; j < NL; j++) {
        /* 4 examples of random letters at the length: only the cost is measured */
        char p[8192];
        snprintf(p, sizeof p, "%s/len%d.tsv", d, lens[j]);
        sbuf t = {0};
        uint64_t g = 1234 + (uint64_t)j;
        for (int e = 0; e < 4; e++) {
            sbuf_printf(&t, "%d\t", e & 1);
            for (int i = 0; i < lens[j]; i++) sbuf_printf(&t, "%c", 'a' + (int)(u01(&g) * 26));
            sbuf_printf(&t, "\n");
        }
        int e = sbuf_write(&t, p);
        sbuf_free(&t);
        if (e) return -1;
        xl[j] = lens[j];
        for (int i = 0; i < NM; i++) {
            char id[64], common[20000];
            xlog lg;
            xrun r;
            double pr;
            snprintf(id, sizeof id, "%s-%d", M[i].id, lens[j]);
            snprintf(common, sizeof common,
                     "--task classify --data %s --valid %s --seq-len %d --max-positions %d --batch 1 --steps 4 "
                     "--warmup 1 --eval-every 0 --eval-tokens 1 --log-every 1 %s",
                     p, p, lens[j], lens[j], c->quick ? "--layers 1 --embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64"
                                                      : "--layers 2 --embed-dim 128 --z-dim 64 --hidden-dim 256 --ffn-dim 256");
            sec[i][j] = mib[i][j] = NAN;
            if (train_model(c, id, common, M[i].flags, "acc", &lg, &pr, &r)) continue;
            /* steps 2-4: the first step also sizes the buffers */
            if (lg.steps == 4 && lg.first_step == 1) sec[i][j] = (lg.train_s - lg.first_train_s) / 3;
            mib[i][j] = r.peak_mib;
        }
    }
    sbuf_printf(&c->md, "One training step (forward, backward, AdamW) of a %s classifier, batch 1, on %d threads: "
                        "seconds per step (the mean of steps 2-4) and the process's peak resident memory.%s\n\n"
                        "| model | length | s/step | peak memory (MiB) |\n|---|---|---|---|\n",
                c->quick ? "toy" : "2-layer D 128", c->threads, c->quick ? " Quick mode: meaningless numbers." : "");
    svg_series st[NM], sm[NM];
    for (int i = 0; i < NM; i++) {
        for (int j = 0; j < NL; j++) {
            char b1[32], b2[32];
            fmt_num(b1, 32, sec[i][j], "%.3f"), fmt_num(b2, 32, mib[i][j], "%.0f");
            sbuf_printf(&c->md, "| %s | %d | %s | %s |\n", M[i].label, lens[j], b1, b2);
        }
        st[i] = (svg_series){M[i].label, xl, sec[i], NL, 1, 0};
        sm[i] = (svg_series){M[i].label, xl, mib[i], NL, 1, 0};
    }
    sbuf_printf(&c->md, "\nCommands (one length shown per model):\n\n");
    for (int i = 0; i < NM; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%d", M[i].id, lens[NL - 1]);
        md_cmd(c, id);
    }
    svg_chart c1 = {"training step time against length", "sequence length (tokens)", "seconds per step", 1, 1, 1};
    svg_chart c2 = {"peak memory against length", "sequence length (tokens)", "peak resident memory (MiB)", 1, 1, 1};
    sbuf a = {0}, b = {0};
    svg_line_chart(&a, &c1, st, NM);
    svg_line_chart(&b, &c2, sm, NM);
    return write_fig(c, "speed-time.svg", &a) || write_fig(c, "speed-memory.svg", &b) ? -1 : 0;
}

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
