/*
 * mega data: what the `mega` CLI trains on, as a library.
 *
 *  - text for byte-level language models: reading a whole file, the data fingerprint, the
 *    sampler that decides the data order (its one uint64 of state goes into checkpoints) and
 *    random contiguous windows of bytes with their next-byte targets;
 *  - long-sequence classification (Long Range Arena style): vocabularies, class lists, dataset
 *    loaders (ListOps TSV, byte-level text TSV, text pairs TSV, IDX images), format detection,
 *    padded batches;
 *  - ListOps: the evaluator and a bit-exact copy of the published generator.
 *
 * Errors: as everywhere in the library (include/mega.h), a failing function returns a negative
 * mega_status and leaves one line in mega_last_error(); nothing here prints or exits. Messages
 * name the file and, for text files, the line: "file:LINE: reason". An output that owns memory is
 * left empty by a failed call (freeing it is still allowed).
 *
 * Token storage is uint16_t (every vocabulary here has < 65536 ids: ListOps 21, bytes/pixels 257),
 * half the memory of int32 for the 96k x 2000-token ListOps train split; mega_batch_fill widens to
 * int32 (or to normalised reals for pixels) when assembling a batch.
 *
 * ---------------------------------------------------------------------------------------------
 * ListOps vocabulary (fixed; the same ids at train and eval time, serialisable with
 * mega_vocab_to_json into a checkpoint's metadata):
 *     0 <pad>   1 <unk>   2..11 the digits "0".."9" (id = digit + 2)
 *    12 [MIN   13 [MAX   14 [MED   15 [SM   16 ]   17 (   18 )   19 [FIRST   20 [LAST
 * size 21. "(" and ")" carry no information (the operators' "]" already closes every list) and
 * are dropped while loading unless keep_parens is set, so a loaded sequence has exactly the
 * published generator's `length` tokens (< --max-len, 2000 by default). Tokens not in the table
 * map to <unk> (counted in mega_dataset.n_unk). [FIRST/[LAST are defined by the published code
 * but never generated; the evaluator supports them.
 *
 * Bytes (text, pairs): ids 0..255 are the bytes, 256 is <pad>, size 257, no <unk>.
 * Pixels (IDX): ids 0..255 are the grey levels, 256 is <pad>, size 257; as real inputs a pixel x
 * becomes (x/255 - mean)/std (the official LRA pixel pipeline; defaults 0.5/0.5), padding 0.
 *
 * Class labels: the classes of a file are its distinct label strings, sorted numerically when
 * every label is a number (so "0".."K-1" map to themselves, "1.0" sorts after "0.0"), otherwise
 * bytewise; class id = index in that order, class_names[id] = the label string. ListOps always
 * has the 10 classes "0".."9". Evaluation/prediction pass the training classes (opts.classes):
 * a label is then looked up there (exact string, else numeric equality) and an unknown label is
 * an error naming the file and line. mega_classes_to_json/from_json store the list.
 */
#ifndef MEGA_DATA_H
#define MEGA_DATA_H

#include "mega.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * files, fingerprints, data order, language-model windows */

/* A whole file: n bytes, followed by a NUL byte that n does not count (so text files can be
 * used as C strings). Owned by the caller: mega_bytes_free. */
typedef struct {
    uint8_t *data;
    size_t n;
} mega_bytes;

/* Read the file at path into *out. `what` names the file in messages ("--data" gives
 * "--data file 'x.txt' is empty"). Fails (out left empty) when the file is missing
 * (MEGA_ERR_NOT_FOUND), a directory, unreadable (MEGA_ERR_IO), empty (MEGA_ERR_FORMAT), or on
 * MEGA_ERR_OOM. */
mega_status mega_read_file(const char *path, const char *what, mega_bytes *out);
void mega_bytes_free(mega_bytes *b);

/* 64-bit FNV-1a of n bytes (prime 1099511628211): the fingerprint a checkpoint stores of its
 * training data. The offset basis is 1469598103934665603, a digit short of the published
 * 14695981039346656037; kept, since existing checkpoints hold hashes made with it. */
uint64_t mega_fnv1a64(const void *p, size_t n);

/* The data-order sampler: a splitmix64 stream whose whole state is one uint64 (checkpoints save
 * it, so a resumed run draws exactly what the uninterrupted run would have drawn).
 * mega_data_rng_seed gives the CLI's initial state for a --seed; mega_data_rng_below returns a
 * uniform integer in [0, n) without modulo bias and advances *state (n <= 1: 0, state kept). */
uint64_t mega_data_rng_seed(uint64_t seed);
uint64_t mega_data_rng_below(uint64_t *state, uint64_t n);

/* B random windows of T contiguous bytes of text[0..n), as `mega train --task lm` draws them:
 * for each row b in order, s = mega_data_rng_below(state, n - T), tokens[b*T + i] = text[s + i]
 * and targets[b*T + i] = text[s + i + 1] (the next byte). tokens and targets hold B*T values.
 * MEGA_ERR_INVALID when B < 1, T < 1 or n < T + 1 (nothing drawn then). */
mega_status mega_text_windows(const uint8_t *text, size_t n, int B, int T, uint64_t *state, int32_t *tokens,
                              int32_t *targets);

/* ---------------------------------------------------------------------------------------------
 * vocabularies */
typedef enum { MEGA_VOCAB_LISTOPS = 0, MEGA_VOCAB_BYTES = 1, MEGA_VOCAB_PIXELS = 2 } mega_vocab_kind;

/* the ListOps ids (see the table above) */
enum {
    MEGA_LISTOPS_PAD = 0, MEGA_LISTOPS_UNK = 1, MEGA_LISTOPS_DIGIT0 = 2, MEGA_LISTOPS_MIN = 12,
    MEGA_LISTOPS_MAX = 13, MEGA_LISTOPS_MED = 14, MEGA_LISTOPS_SM = 15, MEGA_LISTOPS_END = 16,
    MEGA_LISTOPS_LPAREN = 17, MEGA_LISTOPS_RPAREN = 18, MEGA_LISTOPS_FIRST = 19, MEGA_LISTOPS_LAST = 20,
    MEGA_LISTOPS_VOCAB = 21
};

typedef struct {
    mega_vocab_kind kind;
    int size;        /* number of ids (embedding rows), pad and unk included */
    int pad;         /* pad id */
    int unk;         /* unknown-token id, -1 when every input maps to a token (bytes, pixels) */
    int keep_parens; /* ListOps: "(" and ")" are kept as tokens */
    int real;        /* pixels: fed as real numbers (x/255 - mean)/std instead of token ids */
    double mean, std;
} mega_vocab;

mega_vocab mega_vocab_listops(int keep_parens);
mega_vocab mega_vocab_bytes(void);
mega_vocab mega_vocab_pixels(int reals, double mean, double std);
/* ListOps map: token string of an id (NULL when out of range), and the id of a token (length n,
 * not NUL-terminated; MEGA_LISTOPS_UNK when unknown). */
const char *mega_listops_token(int id);
int mega_listops_id(const char *tok, size_t n);
/* JSON object describing the vocabulary (malloc'd, the caller frees it; NULL when out of
 * memory). For ListOps it lists every token in id order:
 * {"kind":"listops","size":21,"pad":0,"unk":1,"keep_parens":false,"tokens":[...]};
 * bytes: {"kind":"bytes","size":257,"pad":256}; pixels add "real", "mean", "std". */
char *mega_vocab_to_json(const mega_vocab *v);
/* Parse it back (MEGA_ERR_FORMAT when it is not such an object; a ListOps token list that
 * differs from this build's map is an error). */
mega_status mega_vocab_from_json(const char *json, mega_vocab *v);

/* the real-valued input of one token (pixels): (x/255 - mean)/std */
static inline float mega_pixel_value(const mega_vocab *v, int x) {
    return (float)(((double)x / 255.0 - v->mean) / v->std);
}

/* ---------------------------------------------------------------------------------------------
 * class lists */
typedef struct {
    int n;
    char **names; /* [n] label strings, class id = index */
} mega_classes;

/* frees the names and empties the list (NULL allowed) */
void mega_classes_free(mega_classes *c);
/* deep copy into dst (overwritten; mega_classes_free it); MEGA_ERR_OOM */
mega_status mega_classes_copy(mega_classes *dst, const mega_classes *src);
/* class id of a label string (exact match, else numeric equality), -1 if absent */
int mega_classes_find(const mega_classes *c, const char *label);
/* JSON array of the names (malloc'd; NULL when out of memory) and back: a non-empty array of
 * distinct strings, else MEGA_ERR_FORMAT. */
char *mega_classes_to_json(const mega_classes *c);
mega_status mega_classes_from_json(const char *json, mega_classes *c);

/* ---------------------------------------------------------------------------------------------
 * datasets */
typedef enum {
    MEGA_DATA_AUTO = 0, /* ListOps header, 3 or more fields = pairs, else text (mega_data_detect) */
    MEGA_DATA_LISTOPS,
    MEGA_DATA_TEXT,
    MEGA_DATA_PAIRS,
    MEGA_DATA_IDX
} mega_data_format;

/* "auto", "listops", "text", "pairs", "idx" (as on the command line and in checkpoints) */
const char *mega_data_format_name(mega_data_format f);
int mega_data_format_parse(const char *s, mega_data_format *f); /* 0 on success */

typedef struct {
    int max_len;                 /* truncate every sequence to this many tokens (0 = keep all) */
    int keep_parens;             /* ListOps: keep "(" and ")" as tokens */
    const mega_classes *classes; /* eval/predict: map labels with the training classes; NULL = derive */
    int real;                    /* IDX: real-valued pixels (x/255 - mean)/std in mega_batch_fill */
    double mean, std;            /* for real pixels; 0/0 means the defaults 0.5/0.5 */
    int max_examples;            /* stop after this many examples (0 = all) */
} mega_data_opts;

typedef struct {
    int n;                 /* examples */
    uint16_t **tok;        /* [n] token ids of the (first) sequence */
    int *len;              /* [n] its length after truncation (>= 1) */
    uint16_t **tok2;       /* pairs: [n] the second sequence; NULL otherwise */
    int *len2;             /* pairs: [n] */
    int *label;            /* [n] class ids in [0, classes.n) */
    int *line;             /* [n] 1-based line number in the file (IDX: 1-based image index) */
    mega_classes classes;  /* label strings */
    mega_vocab vocab;
    int pairs;             /* two sequences per example */
    int max_len, max_len2; /* longest stored sequences */
    int n_truncated;       /* sequences cut at opts.max_len */
    int64_t n_tokens;      /* stored tokens (both sequences) */
    int64_t n_unk;         /* ListOps tokens mapped to <unk> */
    int rows, cols;        /* IDX images: one example is rows*cols pixels, row-major */
    char *path;            /* the file read (the images file for IDX) */
    /* storage (internal) */
    uint16_t *pool;
    size_t pool_n;
} mega_dataset;

/* Every loader fills *d (overwritten; the caller frees it with mega_dataset_free) and returns
 * MEGA_OK, or fails with *d empty: MEGA_ERR_NOT_FOUND / MEGA_ERR_IO (missing, a directory,
 * unreadable), MEGA_ERR_FORMAT (malformed: "file:LINE: reason"; no examples; a label that is not
 * in opts->classes), MEGA_ERR_INVALID (no path given: "<what>: no file given"; bad options),
 * MEGA_ERR_OOM. opts may be NULL (defaults: all zero). */

/* ListOps TSV: header line "Source<TAB>Target" (CRLF or LF), then "<tokens><TAB><0-9>" lines;
 * empty lines are skipped. */
mega_status mega_dataset_load_listops(const char *path, const mega_data_opts *opts, mega_dataset *d);
/* byte-level text: "label<TAB>text" lines (exactly two fields; the text is raw bytes, any byte but
 * TAB/LF, CR only stripped at the end of a line). An optional first line "label<TAB>text" is a
 * header and skipped. */
mega_status mega_dataset_load_text(const char *path, const mega_data_opts *opts, mega_dataset *d);
/* text pairs (two-tower retrieval): "label<TAB>text1<TAB>text2", or the LRA AAN layout
 * "label<TAB>id1<TAB>id2<TAB>text1<TAB>text2" (ids ignored). Optional header "label<TAB>text1<TAB>text2". */
mega_status mega_dataset_load_pairs(const char *path, const mega_data_opts *opts, mega_dataset *d);
/* IDX images (magic 0x00000803: unsigned bytes, N x rows x cols, big-endian dims) and labels
 * (0x00000801: N unsigned bytes); the pixel sequence of an image is row-major. The label of
 * image i is the decimal string of its byte; "line" numbers are image numbers. */
mega_status mega_dataset_load_idx(const char *images, const char *labels, const mega_data_opts *opts, mega_dataset *d);

/* The format of a TSV from its first line: the ListOps header "Source<TAB>...", else two or more
 * TABs = pairs, else text (also when the file cannot be opened: the loader then says why). */
mega_data_format mega_data_detect(const char *path);
/* The one entry point of the CLI: IDX when format is MEGA_DATA_IDX or only images are given
 * (images and labels both required), else the TSV at data in the given format (MEGA_DATA_AUTO:
 * mega_data_detect). MEGA_ERR_INVALID when the needed paths are NULL; the messages name the CLI
 * flags (--data, --images, --labels). */
mega_status mega_dataset_load(mega_data_format format, const char *data, const char *images, const char *labels,
                              const mega_data_opts *opts, mega_dataset *d);
/* the format a loaded dataset came from (never MEGA_DATA_AUTO) */
mega_data_format mega_dataset_format(const mega_dataset *d);
/* The fingerprint a classifier checkpoint stores of its training data: FNV-1a over the examples'
 * first-sequence tokens (uint16, host byte order) and labels, in order. The second sequence of
 * pairs is not included (as in existing checkpoints). */
uint64_t mega_dataset_fingerprint(const mega_dataset *d);
/* frees everything and empties *d (NULL allowed; safe on a zeroed or failed dataset) */
void mega_dataset_free(mega_dataset *d);

/* ---------------------------------------------------------------------------------------------
 * batches: rows [B, L] right-padded with the pad id (tokens) or 0 (reals), true lengths in len */
typedef struct {
    int B, L, L2;     /* capacity: rows, columns of the first / second sequence */
    int n;            /* rows filled by the last mega_batch_fill (rows n..B-1: length 0, label -1) */
    int32_t *tok;     /* [B*L] token ids (NULL when the batch holds reals) */
    mega_real *val;   /* [B*L] real inputs (pixels), NULL for token batches */
    int32_t *len;     /* [B] lengths, <= L */
    int32_t *tok2;    /* pairs: [B*L2] */
    int32_t *len2;    /* pairs: [B] */
    int32_t *label;   /* [B] */
} mega_batch;

/* Allocate for B rows of L (and L2 for pairs, 0 otherwise) columns; reals != 0: val instead of
 * tok. *b is overwritten; free it with mega_batch_free. MEGA_ERR_INVALID (bad shape), MEGA_ERR_OOM. */
mega_status mega_batch_init(mega_batch *b, int B, int L, int L2, int reals);
void mega_batch_free(mega_batch *b);
/* longest first (which = 0) or second (which = 1) sequence among examples idx[0..n) */
int mega_batch_max_len(const mega_dataset *d, const int *idx, int n, int which);
/* Copy examples idx[0..n) (n <= B) into the batch; longer sequences are cut at L (L2).
 * MEGA_ERR_INVALID: n out of range, an index out of range, a pairs dataset into a batch without
 * L2, or reals requested for something other than pixels. */
mega_status mega_batch_fill(mega_batch *b, const mega_dataset *d, const int *idx, int n);

/* ---------------------------------------------------------------------------------------------
 * ListOps (Nangia & Bowman 2018, as generated for the Long Range Arena) */

/* Value of a ListOps expression (a Source string): tokens separated by whitespace, "(" and ")"
 * ignored but required to balance, values are single digits. MIN, MAX, MED = int(numpy.median(args))
 * as in the published to_value (the middle value for an odd count; for an even count the mean of
 * the two middle values, truncated: [MED 3 4 ] = 3, [MED 1 2 6 9 ] = 4), SM = sum mod 10, FIRST,
 * LAST. No recursion (any nesting depth). Returns MEGA_OK and *value, or MEGA_ERR_FORMAT with the
 * token position in the message (MEGA_ERR_INVALID for NULL, MEGA_ERR_OOM). */
mega_status mega_listops_eval(const char *expr, int *value);

typedef struct {
    int64_t n_train, n_valid, n_test;
    int min_len, max_len; /* accepted when min_len < length < max_len (strict, as published) */
    int max_depth, max_args;
    int64_t seed;
} mega_listops_params;

/* the published defaults: 96000/2000/2000, lengths 500-2000, depth 10, 10 args, seed 0 */
mega_listops_params mega_listops_defaults(void);
/* Check the parameters: MEGA_ERR_INVALID with a message naming the `mega listops` flags
 * (including lengths that no tree of the given depth/arguments can reach). */
mega_status mega_listops_check(const mega_listops_params *p);

/* Generator state: the published recursive procedure driven by a bit-exact copy of CPython's
 * random module (MT19937, random.random, random.randint, random.choice), so seed S gives the
 * trees the published script draws after random.seed(S), in the same order.
 * (google-research/long-range-arena lra_benchmarks/data/listops.py; the splits are taken in
 * drawing order: the first n_train accepted trees are the training split, the next n_valid
 * validation, the rest test.) */
typedef struct mega_listops_gen mega_listops_gen;
/* *out = a new generator (free it with mega_listops_gen_free); fails as mega_listops_check, or
 * MEGA_ERR_OOM, with *out = NULL. */
mega_status mega_listops_gen_new(const mega_listops_params *p, mega_listops_gen **out);
void mega_listops_gen_free(mega_listops_gen *g);
/* Draw until a tree with min_len < length < max_len that was not drawn before (every example of
 * every split is distinct). *src points to the Source string (owned by the generator, valid until
 * the next call), *length is the published length (tokens without parentheses), *target its
 * value. Fails with MEGA_ERR_INVALID when sampling makes no progress (the lengths are
 * unreachable or the distinct examples are exhausted), or MEGA_ERR_OOM. */
mega_status mega_listops_gen_next(mega_listops_gen *g, const char **src, int *length, int *target);
/* draws made so far (accepted or not) */
int64_t mega_listops_gen_attempts(const mega_listops_gen *g);

#ifdef __cplusplus
}
#endif
#endif /* MEGA_DATA_H */
