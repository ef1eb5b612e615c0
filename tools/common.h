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
/* Standard output that cannot be written (a full disk, a closed pipe with SIGPIPE ignored):
 * out_failed() is 1 once a write to it has failed, after one error line (printed once); the
 * commands' output loops stop on it. out_close() (main, at the end) flushes and closes it: 0, or 1
 * after the error line (none if out_failed already said it). */
int out_failed(void);
int out_close(void);

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

/* print a model config as "key value" pairs (lines begin with indent): the model's fields, then
 * the block fields that apply to its mixer */
void print_config(FILE *f, const mega_field *mf, int nmf, const void *cfg, const mega_block_config *block, const char *indent);
void print_lm_config(FILE *f, const mega_lm_config *c, const char *indent);
void print_cls_config(FILE *f, const mega_cls_config *c, const char *indent);
void print_s2s_config(FILE *f, const mega_s2s_config *c, const char *indent); /* task_s2s.c */

/* ---- memory: what a run needs, and --max-memory ---- */

/* "12.3 MiB" into buf */
const char *fmt_bytes(char *buf, size_t n, uint64_t bytes);
/* the size of a regular file (0 when it cannot be read: the loader reports that) */
uint64_t file_size(const char *path);
/* `mega train --max-memory`: the limit in bytes, 0 = the memory available (set by the flag table
 * of train.c; read by the tasks when they build their model) */
extern int64_t tool_max_memory;
/* the optimizer of a training run (`mega train --optimizer`): its state in the memory estimate */
extern mega_optim_kind tool_optim;
/* What a run needs: the model (mega_*_memory) and its data in memory (bytes). */
typedef struct {
    mega_memory model;
    uint64_t data;
    uint64_t save;     /* training: a checkpoint save (the safetensors writer copies the tensors and
                          builds the file in memory: 2 x the optimizer state, the larger file) */
    uint64_t total;
    uint64_t limit;    /* the limit it was checked against */
    int limit_given;   /* --max-memory (else the memory available) */
} run_memory;
/* Check a run's needs against --max-memory (max_memory > 0) or the memory available now, and fill
 * r. `what` names the run ("this training run"), `how` the batch it was sized for ("batch 16 x
 * 256"), `advice` what would lower it ("lower --batch or --seq-len, or "; NULL = none).
 * resident: the bytes of it already allocated (the weights of a loaded model, data read), which
 * count in the total but are no longer in the memory available now. Returns 0, or 1 after one
 * "mega: error:" line stating the memory needed, its parts and the limit. */
int memory_guard(const char *what, const char *how, const char *advice, const mega_memory *model, uint64_t data,
                 uint64_t resident, int64_t max_memory, run_memory *r);
/* "about 41.2 MiB: weights 3.5 MiB, gradients 3.5 MiB, AdamW moments 7.0 MiB, buffers 20.1 MiB
 * (batch 16 x 256), data 7.0 MiB, checkpoint saves 14.2 MiB; limit 22.9 GiB (the memory
 * available)" */
void fmt_run_memory(char *buf, size_t n, const run_memory *r, const char *how);
/* open a user's input file for reading: regular files only (a FIFO or a device is refused at once,
 * without blocking); NULL after "mega: error: <what> '<path>' ..." */
FILE *open_input(const char *path, const char *what);

/* The table of data formats (mega_data_formats) on the command line: --format's choices
 * ("auto|listops|...") and help, one clause per row; the flags of the format read from two files
 * (IDX: "images", "labels"; prefix "valid-" for the validation ones) and their help. */
const char *data_format_choices(void);
const char *data_format_help(void);
const char *data_file_flag(const char *prefix, int i);
const char *data_file_help(const char *prefix, int i);

/* A classifier's data: --data (a TSV) or --images with --labels (IDX), never both, and never one
 * of the IDX pair alone. flag: the three flags' names ("data", "images", "labels"; or the
 * validation ones). 0, or 1 after the error. */
int data_flags_check(const char *const flag[3], const char *data, const char *images, const char *labels);

/* mega eval on a translation model (translate.c) */
/* The subword units of a translation model file (metadata "vocab" of kind "bpe", the merge
 * lists "src-bpe" and "tgt-bpe"; a side without one uses bytes), checked against the config's
 * vocabularies (258 + merges each, pad 256, eos 257); *src and *tgt are NULL for bytes and the
 * same object when both sides share one list (free it once). 0, or 1 after printing the error. */
int meta_bpe(const char *path, const mega_s2s_config *c, mega_bpe **src, mega_bpe **tgt);
int eval_translate(const char *model, const char *data, const mega_s2s_search *sp, int batch, int64_t max_examples,
                   int group, int max_tokens, const char *hyp_out, int quiet, int64_t max_memory);
/* The fairseq dictionary stored under metadata key of an open model file (models converted from
 * official checkpoints, docs/interop.md): *d = NULL when there is none (the byte models this
 * project trains); an error (printed, naming path and `what`) when it does not parse or its size
 * is not `size`. */
int meta_fdict(const mega_st_file *f, const char *key, int size, const char *path, const char *what, mega_fdict **d);
/* The four rows of cli_flag for the beam search (a mega_s2s_search *sp), shared by `mega
 * translate` and `mega eval --task translate`; P prefixes each help text ("" or "translate: "). */
#define SEARCH_FLAGS(P, sp)                                                                                              \
    {"beam", F_INT, &(sp)->beam, P "beam size (1 = greedy)", NULL, 1, 1024, 0},                                          \
        {"lenpen", F_DBL, &(sp)->lenpen, P "length penalty: a hypothesis scores log P / length^lenpen (fairseq --lenpen)", \
         NULL, 0, 100, 0},                                                                                               \
        {"max-len-a", F_DBL, &(sp)->max_len_a,                                                                           \
         P "longest output = a * source tokens + b (fairseq --max-len-a; a model with subword sources and byte targets " \
           "counts the source in bytes)",                                                                                \
         NULL, 0, 1000, 0},                                                                                              \
        {"max-len-b", F_INT, &(sp)->max_len_b, P "see --max-len-a", NULL, 0, 1 << 20, 0}

#endif
