/* Data for long-sequence classification (Long Range Arena style): the ListOps generator and
 * evaluator, dataset loaders (ListOps TSV, byte-level text TSV, text pairs TSV, IDX images) and
 * padded-batch assembly.
 *
 * Errors: the loaders never print and never exit. A failing function returns non-zero and leaves
 * one line in cls_last_error(), always naming the file and, for text files, "file:LINE: reason".
 * CLI callers print it with cli_error("%s", cls_last_error()).
 *
 * Token storage is uint16_t (every vocabulary here has < 65536 ids: ListOps 21, bytes/pixels 257),
 * half the memory of int32 for the 96k x 2000-token ListOps train split; cls_batch_fill widens to
 * int32 (or to normalised reals for pixels) when assembling a batch.
 *
 * ---------------------------------------------------------------------------------------------
 * ListOps vocabulary (fixed; the same ids at train and eval time, serialisable with
 * cls_vocab_to_json into a checkpoint's metadata):
 *     0 <pad>   1 <unk>   2..11 the digits "0".."9" (id = digit + 2)
 *    12 [MIN   13 [MAX   14 [MED   15 [SM   16 ]   17 (   18 )   19 [FIRST   20 [LAST
 * size 21. "(" and ")" carry no information (the operators' "]" already closes every list) and
 * are dropped while loading unless keep_parens is set, so a loaded sequence has exactly the
 * published generator's `length` tokens (< --max-len, 2000 by default). Tokens not in the table
 * map to <unk> (counted in cls_dataset.n_unk). [FIRST/[LAST are defined by the published code
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
 * an error naming the file and line. cls_classes_to_json/from_json store the list.
 */
#ifndef MEGA_CLS_DATA_H
#define MEGA_CLS_DATA_H
#include <stddef.h>
#include <stdint.h>

/* last error message of a cls_ / listops_ function ("" if none) */
const char *cls_last_error(void);
/* (internal) set it; returns -1 */
int cls_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---------------------------------------------------------------------------------------------
 * vocabularies */
typedef enum { CLS_VOCAB_LISTOPS = 0, CLS_VOCAB_BYTES = 1, CLS_VOCAB_PIXELS = 2 } cls_vocab_kind;

enum {
    CLS_LO_PAD = 0, CLS_LO_UNK = 1, CLS_LO_DIGIT0 = 2, CLS_LO_MIN = 12, CLS_LO_MAX = 13, CLS_LO_MED = 14,
    CLS_LO_SM = 15, CLS_LO_END = 16, CLS_LO_LPAREN = 17, CLS_LO_RPAREN = 18, CLS_LO_FIRST = 19, CLS_LO_LAST = 20,
    CLS_LO_VOCAB = 21
};

typedef struct {
    cls_vocab_kind kind;
    int size;        /* number of ids (embedding rows), pad and unk included */
    int pad;         /* pad id */
    int unk;         /* unknown-token id, -1 when every input maps to a token (bytes, pixels) */
    int keep_parens; /* ListOps: "(" and ")" are kept as tokens */
    int real;        /* pixels: fed as real numbers (x/255 - mean)/std instead of token ids */
    double mean, std;
} cls_vocab;

cls_vocab cls_vocab_listops(int keep_parens);
cls_vocab cls_vocab_bytes(void);
cls_vocab cls_vocab_pixels(int real, double mean, double std);
/* ListOps map: token string of an id (NULL when out of range), and the id of a token (length n,
 * not NUL-terminated; CLS_LO_UNK when unknown). */
const char *cls_listops_token(int id);
int cls_listops_id(const char *tok, size_t n);
/* JSON object describing the vocabulary (malloc'd; free it). For ListOps it lists every token in
 * id order: {"kind":"listops","size":21,"pad":0,"unk":1,"keep_parens":false,"tokens":[...]};
 * bytes: {"kind":"bytes","size":257,"pad":256}; pixels add "real", "mean", "std". */
char *cls_vocab_to_json(const cls_vocab *v);
/* parse it back; a ListOps token list that differs from this build's map is an error */
int cls_vocab_from_json(const char *json, cls_vocab *v);

/* ---------------------------------------------------------------------------------------------
 * class lists */
typedef struct {
    int n;
    char **names; /* [n] label strings, class id = index */
} cls_classes;

void cls_classes_free(cls_classes *c);
int cls_classes_copy(cls_classes *dst, const cls_classes *src);
/* class id of a label string (exact match, else numeric equality), -1 if absent */
int cls_classes_find(const cls_classes *c, const char *label);
/* JSON array of the names (malloc'd) and back */
char *cls_classes_to_json(const cls_classes *c);
int cls_classes_from_json(const char *json, cls_classes *c);

/* ---------------------------------------------------------------------------------------------
 * datasets */
typedef struct {
    int max_len;                /* truncate every sequence to this many tokens (0 = keep all) */
    int keep_parens;            /* ListOps: keep "(" and ")" as tokens */
    const cls_classes *classes; /* eval/predict: map labels with the training classes; NULL = derive */
    int real;                   /* IDX: real-valued pixels (x/255 - mean)/std in cls_batch_fill */
    double mean, std;           /* for real pixels; 0/0 means the defaults 0.5/0.5 */
    int max_examples;           /* stop after this many examples (0 = all) */
} cls_load_opts;

typedef struct {
    int n;               /* examples */
    uint16_t **tok;      /* [n] token ids of the (first) sequence */
    int *len;            /* [n] its length after truncation (>= 1) */
    uint16_t **tok2;     /* pairs: [n] the second sequence; NULL otherwise */
    int *len2;           /* pairs: [n] */
    int *label;          /* [n] class ids in [0, classes.n) */
    int *line;           /* [n] 1-based line number in the file (IDX: 1-based image index) */
    cls_classes classes; /* label strings */
    cls_vocab vocab;
    int pairs;           /* two sequences per example */
    int max_len, max_len2; /* longest stored sequences */
    int n_truncated;     /* sequences cut at opts.max_len */
    int64_t n_tokens;    /* stored tokens (both sequences) */
    int64_t n_unk;       /* ListOps tokens mapped to <unk> */
    int rows, cols;      /* IDX images: one example is rows*cols pixels, row-major */
    char *path;          /* the file read (the images file for IDX) */
    /* storage (internal) */
    uint16_t *pool;
    size_t pool_n;
} cls_dataset;

/* ListOps TSV: header line "Source<TAB>Target" (CRLF or LF), then "<tokens><TAB><0-9>" lines;
 * empty lines are skipped. */
int cls_load_listops(const char *path, const cls_load_opts *o, cls_dataset *d);
/* byte-level text: "label<TAB>text" lines (exactly two fields; the text is raw bytes, any byte but
 * TAB/LF, CR only stripped at the end of a line). An optional first line "label<TAB>text" is a
 * header and skipped. */
int cls_load_text(const char *path, const cls_load_opts *o, cls_dataset *d);
/* text pairs (two-tower retrieval): "label<TAB>text1<TAB>text2", or the LRA AAN layout
 * "label<TAB>id1<TAB>id2<TAB>text1<TAB>text2" (ids ignored). Optional header "label<TAB>text1<TAB>text2". */
int cls_load_pairs(const char *path, const cls_load_opts *o, cls_dataset *d);
/* IDX images (magic 0x00000803: unsigned bytes, N x rows x cols, big-endian dims) and labels
 * (0x00000801: N unsigned bytes); the pixel sequence of an image is row-major. */
int cls_load_idx(const char *images, const char *labels, const cls_load_opts *o, cls_dataset *d);
void cls_dataset_free(cls_dataset *d);

/* the real-valued input of one token (pixels): (x/255 - mean)/std */
static inline float cls_pixel_value(const cls_vocab *v, int x) {
    return (float)(((double)x / 255.0 - v->mean) / v->std);
}

/* ---------------------------------------------------------------------------------------------
 * batches: rows [B, L] right-padded with the pad id (tokens) or 0 (reals), true lengths in len */
typedef struct {
    int B, L, L2;   /* capacity: rows, columns of the first / second sequence */
    int n;          /* rows filled by the last cls_batch_fill (rows n..B-1: length 0, label -1) */
    int32_t *tok;   /* [B*L] token ids (NULL when the batch holds reals) */
    float *val;     /* [B*L] real inputs (pixels), NULL for token batches */
    int *len;       /* [B] lengths, <= L */
    int32_t *tok2;  /* pairs: [B*L2] */
    int *len2;      /* pairs: [B] */
    int *label;     /* [B] */
} cls_batch;

/* allocate for B rows of L (and L2 for pairs, 0 otherwise) columns; real != 0: val instead of tok */
int cls_batch_init(cls_batch *b, int B, int L, int L2, int real);
void cls_batch_free(cls_batch *b);
/* longest first (which = 0) or second (which = 1) sequence among examples idx[0..n) */
int cls_batch_max_len(const cls_dataset *d, const int *idx, int n, int which);
/* copy examples idx[0..n) (n <= B) into the batch; longer sequences are cut at L (L2) */
int cls_batch_fill(cls_batch *b, const cls_dataset *d, const int *idx, int n);

/* ---------------------------------------------------------------------------------------------
 * ListOps (tools/listops.c) */

/* Value of a ListOps expression (a Source string): tokens separated by whitespace, "(" and ")"
 * ignored but required to balance, values are single digits. MIN, MAX, MED = int(numpy.median(args))
 * as in the published to_value (the middle value for an odd count; for an even count the mean of
 * the two middle values, truncated: [MED 3 4 ] = 3, [MED 1 2 6 9 ] = 4), SM = sum mod 10, FIRST,
 * LAST. No recursion (any nesting depth). Returns 0 and *value, or non-zero with the reason in
 * cls_last_error(). */
int listops_eval(const char *expr_tokens, int *value);

typedef struct {
    int64_t n_train, n_valid, n_test;
    int min_len, max_len; /* accepted when min_len < length < max_len (strict, as published) */
    int max_depth, max_args;
    int64_t seed;
} listops_params;

/* the published defaults: 96000/2000/2000, lengths 500-2000, depth 10, 10 args, seed 0 */
listops_params listops_defaults(void);
/* check the parameters; 0 or non-zero with cls_last_error() */
int listops_check(const listops_params *p);

/* Generator state: the published recursive procedure driven by a bit-exact copy of CPython's
 * random module (MT19937, random.random, random.randint, random.choice), so seed S gives the
 * trees the published script draws after random.seed(S), in the same order. */
typedef struct listops_gen listops_gen;
listops_gen *listops_gen_new(const listops_params *p);
void listops_gen_free(listops_gen *g);
/* Draw until a tree with min_len < length < max_len that was not drawn before (every example of
 * every split is distinct). *src points to the Source string (valid until the next call),
 * *length is the published length (tokens without parentheses), *target its value. Returns 0,
 * or non-zero (cls_last_error) when sampling makes no progress: the lengths are unreachable or
 * the distinct examples are exhausted. */
int listops_gen_next(listops_gen *g, const char **src, int *length, int *target);
/* draws made so far (accepted or not) */
int64_t listops_gen_attempts(const listops_gen *g);

/* the `mega listops` command */
int cmd_listops(int argc, char **argv);
#endif
