/* Helpers shared by the mega subcommands. */
#ifndef MEGA_TOOLS_COMMON_H
#define MEGA_TOOLS_COMMON_H
#include "cli.h"
#include "mega.h"
#include "mega_data.h"
#include <stddef.h>
#include <stdint.h>

double now_sec(void);
void fmt_duration(char *buf, size_t n, double sec);
void fmt_rate(char *buf, size_t n, double per_sec);
int is_tty(FILE *f);
/* path join into buf */
const char *path_join(char *buf, size_t n, const char *dir, const char *file);
int ensure_dir(const char *dir);
int file_exists(const char *path);

/* Progress of a long job, one rule for every command: on a terminal, a live line rewritten in
 * place (\r) at most 4 times a second; otherwise (a log file, a pipe) a plain line at most every
 * `every` seconds, so a log stays readable and a long job is never silent. */
typedef struct {
    FILE *f;
    int tty, quiet, live; /* live: a \r line is on screen */
    double every, next;
} progress_t;
void progress_init(progress_t *p, FILE *f, int quiet, double every);
/* whether a line is due now (final: the last one, always due unless quiet) */
int progress_due(progress_t *p, int final);
void progress_print(progress_t *p, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* end a live line (before other output) */
void progress_break(progress_t *p);

/* mean loss over non-overlapping windows of T bytes of text (full forward, eval mode): the
 * validation measure used during training. max_tokens caps the work (0 = all). */
int eval_windows(mega_lm *m, const uint8_t *text, size_t n, int B, int T, size_t max_tokens, double *loss,
                 int64_t *count);

/* streaming evaluation over the whole text with state carried across segments of `seg`
 * tokens; progress on stderr when verbose */
int eval_stream(mega_lm *m, const uint8_t *text, size_t n, int seg, int verbose, double *loss, int64_t *count);

/* a classifier's mean loss and correct count over examples idx[0..n) of d, in batches of at most
 * `batch` (inputs cut to maxlen); pred (optional) receives the argmax per example; progress on
 * stderr when verbose (defined in task_cls.c) */
int cls_evaluate(mega_cls *m, const mega_dataset *d, const int *idx, int n, int batch, int maxlen, double *loss,
                 int64_t *correct, int *pred, int verbose);

/* print a model config as "key value" pairs (lines begin with indent): the model's fields, then
 * the block fields that apply to its mixer */
void print_config(FILE *f, const mega_field *mf, int nmf, const void *cfg, const mega_block_config *block, const char *indent);
void print_lm_config(FILE *f, const mega_lm_config *c, const char *indent);
void print_cls_config(FILE *f, const mega_cls_config *c, const char *indent);
void print_s2s_config(FILE *f, const mega_s2s_config *c, const char *indent); /* task_s2s.c */
/* an encoder-decoder's mean NLL per target token (nats) and teacher-forced token accuracy over
 * examples sel[0..n) of d, in length-sorted batches of at most max_tokens (task_s2s.c) */
int s2s_evaluate(mega_s2s *m, const mega_s2s_data *d, const int *sel, int n, int max_tokens, double *nll, double *acc,
                 int64_t *tokens);

/* subcommands */
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_listops(int argc, char **argv);
int cmd_translate(int argc, char **argv);
/* mega eval on a translation model (translate.c) */
int eval_translate(const char *model, const char *data, const mega_s2s_search *sp, int batch, int64_t max_examples,
                   int group, int max_tokens, const char *hyp_out, int quiet);
int cmd_freedict(int argc, char **argv);
#endif
