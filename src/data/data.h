/*
 * Internal to src/data: file access with the CLI's messages, and the dataset builder the loaders
 * share (labels -> classes, token pool, per-example arrays). Not installed.
 */
#ifndef MEGA_DATA_INTERNAL_H
#define MEGA_DATA_INTERNAL_H
#include "core/internal.h"
#include "mega_data.h"

/* FNV-1a as the checkpoints store it (see mega_fnv1a64 for the offset basis) */
#define MEGA__FNV_BASIS 1469598103934665603ull
#define MEGA__FNV_PRIME 1099511628211ull

/* ---- files (text.c) ---- */

/* "<what>: no file given" (MEGA_ERR_INVALID) for a NULL or empty path, else MEGA_OK */
mega_status mega__data_given(const char *path, const char *what);
/* fopen(path, "rb") after checking it exists and is not a directory:
 * "<what> file '<path>': <strerror>", "<what> file '<path>' is a directory" */
mega_status mega__data_open(const char *path, const char *what, FILE **f);
/* the whole file (empty allowed) in a malloc'd buffer followed by a NUL byte not counted in *n */
mega_status mega__data_read_all(const char *path, const char *what, uint8_t **buf, size_t *n);
/* mega_read_file_max (a large whole file mapped, else read), with an empty file allowed when
 * allow_empty (the caller's parser then says what is missing) */
mega_status mega__data_load(const char *path, const char *what, uint64_t max, int allow_empty, mega_bytes *out);

/* 1 when dir is a directory in the Pathfinder layout (pathfinder_data.c) */
int mega__pathfinder_dir(const char *dir);
/* 1 when dir is a directory in the official LRA image layout, with input/ and label/ (lra_image.c) */
int mega__lra_image_dir(const char *dir);
/* 1 when path is DIR/SPLIT of that layout, with DIR/input/SPLIT.src a file (lra_image.c) */
int mega__lra_image_split(const char *path);

/* ---- messages and labels (vocab.c) ---- */

/* a short printable excerpt of untrusted bytes for error messages (non-printables as '?', "..."
 * when cut to fit cap) */
const char *mega__data_show(const char *s, size_t n, char *buf, size_t cap);
/* strict number: the whole string parses, finite */
int mega__data_number(const char *s, double *x);
/* the next ListOps token id of s[*s..e) (whitespace-separated; "(" and ")" skipped unless
 * keep_parens; unknown words MEGA_LISTOPS_UNK), *s moved past it; -1 at the end. The one reader
 * of ListOps text: the data loader and mega_vocab_encode. */
int mega__listops_next(const char **s, const char *e, int keep_parens);

/* ---- characters (metrics.c) ---- */

/* (the next character of s[*i..n): mega__utf8_next with MEGA__UTF8_ESCAPE, core/internal.h) */
/* Python's str.isspace(), which str.split() and str.rstrip() use */
int mega__py_isspace(uint32_t c);
/* the words of s[0..n) as str.split() finds them: calls out(ctx, offset, length) per word; stops
 * with -1 when out returns non-zero */
typedef int (*mega__word_fn)(void *ctx, size_t off, size_t len);
int mega__py_split(const char *s, size_t n, mega__word_fn out, void *ctx);

/* ---- the dataset builder (dataset.c) ---- */
#define MEGA_DATA_MAX_LABEL 256
#define MEGA_DATA_MAX_CLASSES 65536

typedef struct {
    const char *path;
    const mega_data_opts *o;
    mega_dataset *d;
    size_t cap;
    size_t *off, *off2;
    /* distinct labels as read: strings, first line, hash index */
    char **lab;
    int *lab_line;
    int nlab, labcap;
    int *hidx; /* open addressing over lab, -1 empty */
    int hcap;
    int *ex_lab; /* per example: index into lab */
    size_t pool_cap;
    const char *line_note; /* appended to an unknown-label message (IDX: what "line" means) */
} mega__builder;

/* start a dataset read from path (d is zeroed; a negative opts->max_len is MEGA_ERR_INVALID) */
mega_status mega__builder_init(mega__builder *b, const char *path, const mega_data_opts *o, mega_dataset *d);
void mega__builder_free(mega__builder *b);
/* index of a label string (added when new); line is for messages */
mega_status mega__builder_label(mega__builder *b, const char *s, size_t n, int line, int *index);
/* room for one more example (pairs: the second-sequence arrays too) */
mega_status mega__builder_grow(mega__builder *b, int pairs);
/* room for `more` tokens in the pool */
mega_status mega__builder_reserve(mega__builder *b, size_t more);
/* store bytes s[0..n) as tokens (cut at opts->max_len); *off = their pool offset, *len = count */
mega_status mega__builder_put_bytes(mega__builder *b, const char *s, size_t n, size_t *off, int *len);
/* the values x[0..n) (cut at opts->max_len) of a real-valued example into d->vpool: *off, *len;
 * a dataset is either all tokens or all values (finish makes d->val, not d->tok) */
mega_status mega__builder_put_reals(mega__builder *b, const float *x, size_t n, size_t *off, int *len);
/* map the distinct labels to classes (opts->classes, else fixed_default, else sorted) and point
 * the examples into the pool */
mega_status mega__builder_finish(mega__builder *b, const mega_classes *fixed_default);
#endif
