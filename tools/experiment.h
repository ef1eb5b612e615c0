/* The shared machinery of `mega experiment` (tools/experiment.c): the context of a run, child
 * processes of this binary, what their runs left (log.jsonl), results.md and its figures, and the
 * data the experiments share. Each experiment is a function `int exp_NAME(xctx *)` in its own file
 * (tools/exp_*.c) with one row in the EXPERIMENTS table of tools/experiment.c. */
#ifndef MEGA_TOOLS_EXPERIMENT_H
#define MEGA_TOOLS_EXPERIMENT_H
#include "common.h"
#include "svg.h"

#include <stdint.h>

/* the published Fashion-MNIST files of Debian's dataset-fashion-mnist */
#define FASHION_DEFAULT "/usr/share/datasets/fashion-mnist"

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

typedef struct {
    int rc;
    double wall, cpu;   /* seconds */
    double peak_mib;    /* peak resident memory */
} xrun;

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

/* one figure of validation curves, one series per model */
typedef struct {
    const char *label;
    xlog g;
} xcurve;

typedef struct {
    const char *id, *label, *flags;
} xmodel;

typedef struct {
    const char *id, *label;
    char common[20000];
    char test_args[9000];
    double majority;
    int nclass, budget;
} xtask;

/* ---- child processes ---- */
void xa(xargv *a, const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void xaf(xargv *a, const char *fmt, ...);
void xwords(xargv *a, const char *s);
void xfree(xargv *a);
int xspawn(xctx *c, const char *log, xargv *a, xrun *r);
int log_number(xctx *c, const char *log, const char *key, double *v);
int xrun_ok(xctx *c, const char *log, xargv *a, xrun *r);

/* ---- runs, results.md, figures ---- */
int read_runlog(const char *run, const char *metric, xlog *g);
void read_lengths(xctx *c, const char *log, const int *lens, int n, double *bpb);
void md_cmd(xctx *c, const char *log);
int write_fig(xctx *c, const char *file, sbuf *svg);
int curves_fig(xctx *c, const char *file, const char *title, const char *ylabel, const xcurve *cv, int n, int by_steps);

/* ---- data ---- */
int corpus(xctx *c, char *train, char *valid, size_t n);
int listops_data(xctx *c, char *dir, size_t n);
double majority(const int *ytr, int ntr, const int *yte, int nte, int *cls);
int tsv_labels(const char *path, int **y);
double u01(uint64_t *s);
int fashion_data(xctx *c, char *dir, size_t n, int test_n, int **labels, int *counts);

/* ---- training ---- */
int train_model(xctx *c, const char *id, const char *common, const char *flags, const char *metric, xlog *g, double *params, xrun *r);
void fmt_num(char *b, size_t n, double v, const char *fmt);
int match_ffn(xctx *c, const char *id, const char *common, const char *flags, int F0, int D, int L, double target);

/* ---- the classification tasks of the lra experiment (tools/exp_lra.c) ---- */
/* test images of Fashion-MNIST scored by the experiments (of 10,000): enough for a standard
 * error under 1 point, at a fifth of the evaluation time */
#define FASHION_TEST 2000
void fashion_note(xctx *c);
int lra_tasks(xctx *c, xtask *t, int want);
double test_accuracy(xctx *c, const xtask *t, const char *id);

/* ---- the experiments ---- */
int exp_aft(xctx *c);
int exp_lra(xctx *c);
int exp_ablation_listops(xctx *c);
int exp_ablation_fmnist(xctx *c);
int exp_extrapolate(xctx *c);
int exp_speed(xctx *c);
int exp_pathfinder(xctx *c);
int exp_vision(xctx *c);
int exp_abc_mlm(xctx *c);
int exp_megalodon(xctx *c);
int exp_speech(xctx *c);
int exp_abc_mt(xctx *c);

#endif
