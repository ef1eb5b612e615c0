/*
 * mega data: what the `mega` CLI trains on, as a library.
 *
 *  - text for byte-level language models: reading a whole file, the data fingerprint, the
 *    sampler that decides the data order (its one uint64 of state goes into checkpoints) and
 *    random contiguous windows of bytes with their next-byte targets;
 *  - long-sequence classification (Long Range Arena style): vocabularies, class lists, dataset
 *    loaders (ListOps TSV, byte-level text TSV, text pairs TSV, IDX images, real-valued
 *    sequences) in one table of formats, format detection, padded batches;
 *  - ListOps: the evaluator and a bit-exact copy of the published generator;
 *  - parallel text for translation: "source<TAB>target" TSV with per-reason counts of the lines
 *    skipped, batching by length (fairseq --max-tokens) in a reproducible order, padded batches.
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
 * Parallel text (sequence to sequence, MEGA_S2S_*): one byte vocabulary shared by the source
 * and the target side: ids 0..255 are the bytes, 256 is <pad>, 257 is </s> (end of sentence),
 * size 258, no <unk>. A sentence of n bytes is n + 1 tokens, its bytes then </s> (fairseq
 * appends eos to both sides); the decoder's input is </s> followed by the target shifted right.
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
#include "mega_metrics.h" /* the translation metrics */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * files, fingerprints, data order, language-model windows */

/* A whole file: n bytes, followed by a NUL byte that n does not count (so text files can be
 * used as C strings). Owned by the caller: mega_bytes_free. The bytes are writable either way
 * (a mapped file is mapped copy-on-write: writing changes this copy, never the file). */
typedef struct {
    uint8_t *data;
    size_t n;
    size_t mapped; /* bytes of the mapping when data maps the file (mega_bytes_free unmaps it), 0 on the heap */
} mega_bytes;

/* Read the file at path into *out. `what` names the file in messages ("--data" gives
 * "--data file 'x.txt' is empty"). Fails (out left empty) when the file is missing
 * (MEGA_ERR_NOT_FOUND), a directory, unreadable (MEGA_ERR_IO), empty (MEGA_ERR_FORMAT), or on
 * MEGA_ERR_OOM. */
MEGA_API mega_status mega_read_file(const char *path, const char *what, mega_bytes *out);
/* The same, reading at most max bytes (0 = the whole file): `mega eval --max-bytes` reads the
 * start of a large file without the rest. Only regular files are opened (a FIFO, a device or a
 * directory fails at once with MEGA_ERR_IO: "--data file '/dev/zero' is not a regular file (a
 * character device)"), and what is read must fit the memory available (mega_memory_available;
 * MEGA_ERR_IO naming the size otherwise); mega_read_file applies the same rules.
 * A whole file of MEGA_MAP_MIN bytes or more is mapped (mmap, private copy-on-write) rather than
 * copied onto the heap: its pages are the kernel's page cache, read on first touch, shared with
 * other readers and dropped under memory pressure instead of swapped. The price of a mapping: if
 * another process truncates the file while it is mapped, touching the lost pages raises SIGBUS,
 * so a data file must not be shortened under a running job (appending is harmless). Where mmap
 * fails the file is read as before. */
#define MEGA_MAP_MIN ((size_t)1 << 16)
MEGA_API mega_status mega_read_file_max(const char *path, const char *what, uint64_t max, mega_bytes *out);
MEGA_API void mega_bytes_free(mega_bytes *b);
/* A whole gzip (or dictzip) file, decompressed onto the heap, NUL-terminated like mega_read_file;
 * a file that is not gzip is taken as it is, unless its name ends in .gz or .dz. `what` names the
 * file in messages ("dictionary" gives "dictionary file 'x.dict.dz': corrupt compressed data
 * (...)"). Fails when the file is missing, a directory, unreadable, corrupt or truncated
 * compressed data, empty, larger than 16 GiB uncompressed, or on MEGA_ERR_OOM. */
MEGA_API mega_status mega_read_gzip(const char *path, const char *what, mega_bytes *out);

/* 64-bit FNV-1a of n bytes (prime 1099511628211): the fingerprint a checkpoint stores of its
 * training data. The offset basis is 1469598103934665603, a digit short of the published
 * 14695981039346656037; kept, since existing checkpoints hold hashes made with it. */
MEGA_API uint64_t mega_fnv1a64(const void *p, size_t n);

/* The data-order sampler: a splitmix64 stream whose whole state is one uint64 (checkpoints save
 * it, so a resumed run draws exactly what the uninterrupted run would have drawn).
 * mega_data_rng_seed gives the CLI's initial state for a --seed; mega_data_rng_below returns a
 * uniform integer in [0, n) without modulo bias and advances *state (n <= 1: 0, state kept). */
MEGA_API uint64_t mega_data_rng_seed(uint64_t seed);
MEGA_API uint64_t mega_data_rng_below(uint64_t *state, uint64_t n);

/* B random windows of T contiguous bytes of text[0..n), as `mega train --task lm` draws them:
 * for each row b in order, s = mega_data_rng_below(state, n - T), tokens[b*T + i] = text[s + i]
 * and targets[b*T + i] = text[s + i + 1] (the next byte). tokens and targets hold B*T values.
 * MEGA_ERR_INVALID when B < 1, T < 1 or n < T + 1 (nothing drawn then). */
MEGA_API mega_status mega_text_windows(const uint8_t *text, size_t n, int B, int T, uint64_t *state, int32_t *tokens,
                              int32_t *targets);
/* The same windows over a stream of token ids ids[0..n) (a fairseq binarized dataset's sequences
 * joined: `mega train --data data-bin/...`), with the same draws. */
MEGA_API mega_status mega_id_windows(const int32_t *ids, size_t n, int B, int T, uint64_t *state, int32_t *tokens,
                            int32_t *targets);

/* Masked-LM corruption of one sequence (fairseq's masked_lm task, MaskTokensDataset with
 * mask_prob 0.15, leave_unmasked_prob 0.1, random_token_prob 0.1): of the n positions,
 * floor(p * n + u) (u uniform in [0, 1): probabilistic rounding, as fairseq) are chosen without
 * replacement; a chosen position gets targets[i] = its token and becomes mask_id with probability
 * 0.8, a uniform random token in [0, n_random) with 0.1, and stays as it is with 0.1; the others
 * get targets[i] = -1 (no loss). tokens is corrupted in place. Every draw comes from *state
 * (mega_data_rng_below), so a seed gives the same masks. Returns the number chosen. */
MEGA_API int mega_mlm_mask(int32_t *tokens, int32_t *targets, int n, double p, int32_t mask_id, int32_t n_random,
                           uint64_t *state);

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

MEGA_API mega_vocab mega_vocab_listops(int keep_parens);
MEGA_API mega_vocab mega_vocab_bytes(void);
MEGA_API mega_vocab mega_vocab_pixels(int reals, double mean, double std);
/* ListOps map: token string of an id (NULL when out of range), and the id of a token (length n,
 * not NUL-terminated; MEGA_LISTOPS_UNK when unknown). */
MEGA_API const char *mega_listops_token(int id);
MEGA_API int mega_listops_id(const char *tok, size_t n);
/* One text as a classifier trained on text reads it (the text of a "label<TAB>text" line, or a
 * ListOps Source field): bytes, each byte its id; ListOps, its whitespace-separated tokens with
 * "(" and ")" dropped unless v->keep_parens and unknown words <unk>. The first min(*count, cap)
 * ids go to ids (NULL: only count); *count is the number the whole text gives, so a caller cuts
 * at cap as the loaders cut at max_len. MEGA_ERR_INVALID for a pixel vocabulary (images read
 * pixel values, not text). */
MEGA_API mega_status mega_vocab_encode(const mega_vocab *v, const char *text, size_t n, int32_t *ids, size_t cap,
                                       size_t *count);
/* JSON object describing the vocabulary (malloc'd, the caller frees it; NULL when out of
 * memory). For ListOps it lists every token in id order:
 * {"kind":"listops","size":21,"pad":0,"unk":1,"keep_parens":false,"tokens":[...]};
 * bytes: {"kind":"bytes","size":257,"pad":256}; pixels add "real", "mean", "std". */
MEGA_API char *mega_vocab_to_json(const mega_vocab *v);
/* Parse it back (MEGA_ERR_FORMAT when it is not such an object; a ListOps token list that
 * differs from this build's map is an error). */
MEGA_API mega_status mega_vocab_from_json(const char *json, mega_vocab *v);

/* the real-valued input of one token (pixels): (x/255 - mean)/std */
static inline float mega_pixel_value(const mega_vocab *v, int x) {
    return (float)(((double)x / 255.0 - v->mean) / v->std);
}

/* ---------------------------------------------------------------------------------------------
 * fairseq dictionaries: the vocabulary of a language model converted from an official fairseq
 * checkpoint (scripts/convert_fairseq.py, docs/interop.md), stored in its model.safetensors
 * metadata as "vocab": {"kind": "fairseq", "unit": "byte"|"word", "tokens": [every token in id
 * order, specials and madeupword fillers included], "bos": 0, "pad": 1, "eos": 2, "unk": 3}.
 *
 * Text becomes ids as fairseq-preprocess made the official training data: line by line, each
 * line's tokens followed by </s>.
 *  - unit "byte" (the enwik8 model): the tokens are byte values written in decimal ("32", "101");
 *    every byte is one token, a newline is the line's </s> and a byte without a token is <unk>.
 *  - unit "word" (the WikiText-103 model): lines end at \n, \r\n or \r (Python's text mode), the
 *    tokens are the line's whitespace-separated words (Python's str.split()), an unknown word is
 *    <unk>; the text must be valid UTF-8.
 * A later token with the same string as an earlier one takes its place (dict.txt's
 * `#fairseq:overwrite`). */
typedef enum { MEGA_FDICT_BYTE = 0, MEGA_FDICT_WORD = 1 } mega_fdict_unit;
typedef struct {
    int bos, pad, eos, unk;
} mega_fdict_specials;
typedef struct mega_fdict mega_fdict;

/* parse the metadata JSON (MEGA_ERR_FORMAT naming what is wrong) */
MEGA_API mega_status mega_fdict_from_json(const char *json, mega_fdict **out);
MEGA_API void mega_fdict_free(mega_fdict *d);
MEGA_API int mega_fdict_size(const mega_fdict *d);
MEGA_API mega_fdict_unit mega_fdict_get_unit(const mega_fdict *d);
MEGA_API mega_fdict_specials mega_fdict_get_specials(const mega_fdict *d);
/* the token string of an id, NULL out of range */
MEGA_API const char *mega_fdict_token(const mega_fdict *d, int id);
/* Encode text[0..n) into ids (NULL: only count; else it holds *count ids, from a counting call).
 * final_eos: the last line gets its </s> even without a newline at the end (fairseq-preprocess
 * does; a prompt does not). *unknown (NULL = not wanted) counts the <unk> ids produced.
 * MEGA_ERR_FORMAT for a word-unit text that is not UTF-8. */
MEGA_API mega_status mega_fdict_encode(const mega_fdict *d, const uint8_t *text, size_t n, int final_eos, int32_t *ids,
                              size_t *count, size_t *unknown);
/* whether generation may produce id: not <s>, <pad> or a filler, and in the byte unit only
 * byte tokens and </s> */
MEGA_API int mega_fdict_generable(const mega_fdict *d, int id);
/* the text of a generated id into buf (at most cap bytes; returns the length): a byte, or a
 * word preceded by a space unless *line_start; </s> is a newline; ids that are not generable give
 * nothing. *line_start tracks the line across calls (start it at 1). */
MEGA_API size_t mega_fdict_decode(const mega_fdict *d, int id, int *line_start, char *buf, size_t cap);
/* the metadata JSON of d (what mega_fdict_from_json reads back); caller frees with free(); NULL
 * when out of memory */
MEGA_API char *mega_fdict_to_json(const mega_fdict *d);
/* The unit a dictionary's tokens suggest, as scripts/convert_fairseq.py --unit auto decides:
 * byte when there is an ordinary token and every one is a decimal byte value 0..255 (the specials
 * and the madeupword fillers of Dictionary.pad_to_multiple_ are not ordinary tokens), else word. */
MEGA_API mega_fdict_unit mega_fdict_detect_unit(const mega_fdict *d);

/* ---------------------------------------------------------------------------------------------
 * fairseq binarized datasets: what fairseq-preprocess writes into data-bin/ (the official
 * fairseq/data/indexed_dataset.py; docs/interop.md), a prefix such as data-bin/enwik8/test naming
 * two files:
 *  - test.idx, the index, either
 *      "mmap" (MMapIndexedDataset, the default): the 9-byte magic "MMIDIDX\0\0", version (uint64,
 *      1), dtype code (uint8), n (uint64), sizes (n int32: tokens per sequence), pointers (n int64:
 *      byte offset of each sequence in the .bin); Megatron-LM's variant, with a count of documents
 *      after n and that many int64 document starts after the pointers, is read too (its document
 *      boundaries are not used);
 *    or "cached"/"lazy" (IndexedDataset, the older TorchNet format): the 8-byte magic
 *      "TNTIDX\0\0", version (1), dtype code, element size, n, s (uint64 each), dim_offsets (n+1
 *      int64), data_offsets (n+1 int64, in elements), sizes (s int64); its ids are stored plus 1
 *      (Lua indexing), which reading takes off as fairseq's loader does;
 *  - test.bin, the token ids of every sequence, little-endian, of the dtype: 1 uint8, 2 int8,
 *    3 int16, 4 int32, 5 int64, 8 uint16 (codes 6 and 7, floats, are not token ids and refused).
 * fairseq-preprocess stores each line as its tokens then </s>. Opening checks the whole index
 * before anything is allocated from its counts: magic, version, dtype code, element size, that
 * the index has exactly the size its counts announce, sizes >= 0, every sequence within the
 * .bin (no wrap-around in the arithmetic), one dimension per item (TNTIDX). Token values are
 * checked as they are read. Errors name the file: "fairseq dataset 'x.idx': ...". */
typedef struct mega_fbin mega_fbin;

/* Whether path names a binarized dataset: a prefix P with P.idx and P.bin (P itself not a
 * file), or the .idx or .bin file of such a pair. Writes the prefix into prefix[cap] (may be
 * NULL); returns 1 for a dataset, 0 otherwise (too long a path: 0). */
MEGA_API int mega_fbin_prefix(const char *path, char *prefix, size_t cap);
/* Open the dataset that path names (as mega_fbin_prefix; a bare prefix whose files are missing
 * gives MEGA_ERR_NOT_FOUND). The .bin is mapped when large, as text data is. */
MEGA_API mega_status mega_fbin_open(const char *path, mega_fbin **out);
MEGA_API void mega_fbin_close(mega_fbin *d);
MEGA_API size_t mega_fbin_count(const mega_fbin *d);             /* sequences */
MEGA_API size_t mega_fbin_length(const mega_fbin *d, size_t i);  /* tokens of sequence i (0 out of range) */
MEGA_API uint64_t mega_fbin_tokens(const mega_fbin *d);          /* tokens of all sequences */
/* "mmap uint16", "cached int32", ...: the format and the stored dtype */
MEGA_API const char *mega_fbin_describe(const mega_fbin *d);
/* The ids of sequence i into out[mega_fbin_length(d, i)]. MEGA_ERR_FORMAT for an id that is
 * negative or not below limit (limit <= 0: any id up to INT32_MAX), naming the sequence, the
 * position and the value; MEGA_ERR_INVALID for i out of range. */
MEGA_API mega_status mega_fbin_read(const mega_fbin *d, size_t i, int32_t limit, int32_t *out);

/* A fairseq dict.txt read as Dictionary.load does: the 4 specials <s> <pad> </s> <unk> (ids 0..3)
 * then one token per line, "token count" with an optional " #fairseq:overwrite" after the count
 * (a repeat without it is refused, as fairseq does; with it the repeat gets a new id and the
 * spelling), trailing whitespace ignored; the text must be UTF-8. No fillers are added. unit
 * says how the tokens spell text (include/mega_data.h above). Errors name "path:LINE". */
MEGA_API mega_status mega_fdict_load_txt(const char *path, mega_fdict_unit unit, mega_fdict **out);
/* Whether data (a dataset's dict.txt) numbers tokens as model does: the same token at every id of
 * data, and model's further ids only madeupword fillers (Dictionary.pad_to_multiple_).
 * MEGA_ERR_FORMAT naming the first difference, with `what` naming data in the message. */
MEGA_API mega_status mega_fdict_check_same(const mega_fdict *model, const mega_fdict *data, const char *what);

/* ---------------------------------------------------------------------------------------------
 * class lists */
typedef struct {
    int n;
    char **names; /* [n] label strings, class id = index */
} mega_classes;

/* frees the names and empties the list (NULL allowed) */
MEGA_API void mega_classes_free(mega_classes *c);
/* deep copy into dst (overwritten; mega_classes_free it); MEGA_ERR_OOM */
MEGA_API mega_status mega_classes_copy(mega_classes *dst, const mega_classes *src);
/* class id of a label string (exact match, else numeric equality), -1 if absent */
MEGA_API int mega_classes_find(const mega_classes *c, const char *label);
/* JSON array of the names (malloc'd; NULL when out of memory) and back: a non-empty array of
 * distinct strings, else MEGA_ERR_FORMAT. */
MEGA_API char *mega_classes_to_json(const mega_classes *c);
MEGA_API mega_status mega_classes_from_json(const char *json, mega_classes *c);

/* ---------------------------------------------------------------------------------------------
 * datasets */
typedef enum {
    MEGA_DATA_AUTO = 0, /* the first format whose detector accepts the file's first line (mega_data_detect) */
    MEGA_DATA_LISTOPS,
    MEGA_DATA_TEXT,
    MEGA_DATA_PAIRS,
    MEGA_DATA_IDX,
    MEGA_DATA_REAL,
    MEGA_DATA_PATHFINDER, /* a directory of PNG images in the layout of the LRA Pathfinder release */
    MEGA_DATA_SPEECH,      /* a Speech Commands directory of WAV clips */
    MEGA_DATA_LRA_IMAGE    /* the official LRA image layout: DIR/input/SPLIT.src, DIR/label/SPLIT.label */
} mega_data_format;

/* "auto", "listops", "text", "pairs", "idx", "real", "pathfinder", "speech", "lra-image" (as on the command line and in checkpoints) */
MEGA_API const char *mega_data_format_name(mega_data_format f);
MEGA_API int mega_data_format_parse(const char *s, mega_data_format *f); /* 0 on success */

typedef struct {
    int max_len;                 /* truncate every sequence to this many tokens (0 = keep all) */
    int keep_parens;             /* ListOps: keep "(" and ")" as tokens */
    const mega_classes *classes; /* eval/predict: map labels with the training classes; NULL = derive */
    int real;                    /* IDX: real-valued pixels (x/255 - mean)/std in mega_batch_fill */
    double mean, std;            /* for real pixels; 0/0 means the defaults 0.5/0.5 */
    int max_examples;            /* stop after this many examples (0 = all) */
    int split;                   /* speech: 0 training, 1 validation, 2 test clips */
    int all_words;               /* speech: all 35 words (0: the ten of SC10) */
    int pad_short;               /* speech: zero-pad clips shorter than a second (0: drop them) */
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
    float **val;           /* real: [n] the len[i] values of each example (tok is then NULL) */
    int png_dir;           /* read from a directory of PNG images (the pathfinder format) */
    int audio_rate;        /* speech: the clips' sample rate (0 for the other formats) */
    int pixel_lines;       /* read from the official LRA image layout (the lra-image format) */
    /* storage (internal) */
    uint16_t *pool;
    size_t pool_n;
    float *vpool;
} mega_dataset;

/* Every loader fills *d (overwritten; the caller frees it with mega_dataset_free) and returns
 * MEGA_OK, or fails with *d empty: MEGA_ERR_NOT_FOUND / MEGA_ERR_IO (missing, a directory,
 * unreadable), MEGA_ERR_FORMAT (malformed: "file:LINE: reason"; no examples; a label that is not
 * in opts->classes), MEGA_ERR_INVALID (no path given: "<what>: no file given"; bad options),
 * MEGA_ERR_OOM. opts may be NULL (defaults: all zero). */

/* ListOps TSV: header line "Source<TAB>Target" (CRLF or LF), then "<tokens><TAB><0-9>" lines;
 * empty lines are skipped. */
MEGA_API mega_status mega_dataset_load_listops(const char *path, const mega_data_opts *opts, mega_dataset *d);
/* byte-level text: "label<TAB>text" lines (exactly two fields; the text is raw bytes, any byte but
 * TAB/LF, CR only stripped at the end of a line). An optional first line "label<TAB>text" is a
 * header and skipped. */
MEGA_API mega_status mega_dataset_load_text(const char *path, const mega_data_opts *opts, mega_dataset *d);
/* text pairs (two-tower retrieval): "label<TAB>text1<TAB>text2", or the LRA AAN layout
 * "label<TAB>id1<TAB>id2<TAB>text1<TAB>text2" (ids ignored). Optional header "label<TAB>text1<TAB>text2". */
MEGA_API mega_status mega_dataset_load_pairs(const char *path, const mega_data_opts *opts, mega_dataset *d);
/* IDX images (magic 0x00000803: unsigned bytes, N x rows x cols, big-endian dims) and labels
 * (0x00000801: N unsigned bytes); the pixel sequence of an image is row-major. The label of
 * image i is the decimal string of its byte; "line" numbers are image numbers. Either file may be
 * gzip-compressed (as MNIST and Fashion-MNIST are published: train-images-idx3-ubyte.gz); it is
 * then decompressed whole. */
MEGA_API mega_status mega_dataset_load_idx(const char *images, const char *labels, const mega_data_opts *opts, mega_dataset *d);

/* Real-valued sequences: one example per line, fields separated by commas, spaces or TABs (a run
 * of them is one separator), the label first, then the values, each a finite number that fits a
 * float ("1\t0.25, -3e-2 7" is label "1" with 3 values); every example has the same number of
 * values. Empty lines are skipped; a first line whose first field is "label" is a header. The
 * values are stored as floats in d->val (d->tok is NULL); mega_batch_fill copies them into a
 * real-valued batch. Errors name the line: a value that is not a number or not finite, a line
 * without values, a line whose count differs from the first example's. No model reads them yet:
 * this is the input format, loaded and validated. */
MEGA_API mega_status mega_dataset_load_real(const char *path, const mega_data_opts *opts, mega_dataset *d);
/* The Long Range Arena's Pathfinder layout (src/data/pathfinder_data.c): dir is a difficulty
 * directory holding metadata/<k>.npy, or the directory above them (the hard set,
 * curv_contour_length_14, is taken first). Each metadata line "<subdir> <file> <i> <label> ..."
 * names an 8-bit grayscale PNG (all of one size, at most 1024 x 1024), read as rows*cols pixels
 * like the IDX images (opts->real, mean, std). MEGA_ERR_UNSUPPORTED without libpng. */
MEGA_API mega_status mega_dataset_load_pathfinder(const char *dir, const mega_data_opts *opts, mega_dataset *d);

/* ---- audio (libsndfile; a build without it fails these with MEGA_ERR_UNSUPPORTED) ---- */
#define MEGA_SPEECH_RATE 16000 /* Speech Commands: 16 kHz */
#define MEGA_SPEECH_CLIP 16000 /* one second */
/* whether this build reads and writes audio */
MEGA_API int mega_audio_available(void);
/* One mono clip (WAV, FLAC, ... as libsndfile reads them) as floats in [-1, 1]: *x (malloc'd, the
 * caller frees it), *n samples. rate > 0: the file's sample rate must be this; max_samples > 0:
 * longer files are refused before anything is allocated. MEGA_ERR_FORMAT (one line naming the
 * file): not audio, stereo, another rate, a sample format other than 16-bit PCM or float, no
 * samples, too long, truncated, a non-finite sample; MEGA_ERR_NOT_FOUND / MEGA_ERR_IO. */
MEGA_API mega_status mega_audio_read(const char *path, int rate, int64_t max_samples, float **x, int64_t *n);
/* x[0..n) as a mono 16-bit PCM WAV at rate Hz (clipped to [-1, 1]), written atomically */
MEGA_API mega_status mega_audio_write(const char *path, const float *x, int64_t n, int rate);
/* the Speech Commands words in the official class order: the ten of SC10, or all 35 */
MEGA_API const char *const *mega_speech_words(int all, int *n);
/* The Speech Commands v0.02 layout: dir/<word>/<clip>.wav for the words of mega_speech_words
 * (opts->all_words), opts->split choosing the clips that dir/validation_list.txt (1) or
 * dir/testing_list.txt (2) name, or neither (0, training); other folders (_background_noise_)
 * are ignored. Each clip is 16 kHz mono; clips shorter than 16,000 samples are dropped (the
 * official SC10 rule) or zero-padded (opts->pad_short), longer ones are an error. The classes
 * are the words in the official order; "line" numbers count the split's clips. Errors: not a
 * directory, no .wav in any word folder, no clip in the split, a split list naming a missing
 * clip, any clip mega_audio_read refuses. */
MEGA_API mega_status mega_dataset_load_speech(const char *dir, const mega_data_opts *opts, mega_dataset *d);

/* The official LRA text data as it ships (fairseq binarized; the lra-text task of the official
 * fairseq/tasks/long_range_arena.py, docs/interop.md): dir/src-bin/SPLIT.idx/.bin (each example's
 * ids, as fairseq-preprocess stored them: tokens then </s>), dir/src1-bin/SPLIT for the two-text
 * task (retrieval; then a pairs dataset, src-bin the first sequence), dir/label-bin/SPLIT (each
 * example's label id then </s>) with dir/label-bin/dict.txt. The ids are those of dict, the
 * dictionary of a model converted from an official LRA checkpoint; dir/src-bin/dict.txt, when
 * present, must number its tokens as dict does (dict adds <CLS> after them). prepend_cls: <CLS>
 * goes first (the model pools position 0). opts->max_len cuts sequences (the task's
 * TruncateDataset to --max-positions), opts->classes is ignored: the classes are the label
 * dictionary's tokens in order (its madeupword fillers left out), class id = label id - 4.
 * Errors as the other loaders, naming the file. */
MEGA_API mega_status mega_dataset_load_lra_bin(const char *dir, const char *split, const mega_fdict *dict, int prepend_cls,
                                               const mega_data_opts *opts, mega_dataset *d);

/* The official LRA image data as it ships (the lra-image task of the official
 * fairseq/tasks/long_range_arena.py, LRAImageTask.load_dataset; docs/interop.md): path is DIR
 * (with input/ and label/; split train, valid or test by opts->split 0, 1, 2) or DIR/SPLIT, read
 * from DIR/input/SPLIT.src (one image per line, its pixels as whitespace-separated integers
 * 0..255) and DIR/label/SPLIT.label (one integer class per line). The pixels are the pixel
 * vocabulary's ids, fed as reals (x/255 - mean)/std with opts->real (the task's
 * --pixel-normalization; 0/0: its default 0.5/0.5). Both files are checked whole before
 * anything is allocated. Errors (MEGA_ERR_FORMAT, naming the file and line): a pixel that is not
 * an integer 0..255, a label that is not an integer 0..65535, a line of no pixels or more than
 * 2^20, lines of different pixel counts, more or fewer labels than images, no images; a missing
 * file or a path that is neither layout is named too. opts->max_len cuts the images (the task's
 * TruncateDataset to --max-positions). */
MEGA_API mega_status mega_dataset_load_lra_image(const char *path, const mega_data_opts *opts, mega_dataset *d);

/* One row per data format: the CLI's --format choices, their help and the files each takes, the
 * detection and the loader all come from this table (src/data/formats.c). */
typedef struct {
    mega_data_format id;
    const char *name;         /* mega_data_format_name */
    const char *what;         /* in messages: "ListOps", "IDX", ... */
    const char *help;         /* one line: what a file of this format holds */
    const char *flag[2];      /* the CLI flags of its files: {"data", NULL} or {"images", "labels"} */
    const char *flag_help[2]; /* their help */
    /* whether a file starting with the line s[0..n) (no newline) is in this format; NULL: never
     * detected, only chosen by name */
    int (*detect)(const char *s, size_t n);
    /* path[0], path[1]: the files of flag[0], flag[1] (NULL when not given: MEGA_ERR_INVALID) */
    mega_status (*load)(const char *const path[2], const mega_data_opts *opts, mega_dataset *d);
} mega_data_format_info;

/* the rows, in detection order (*n of them; "auto" has no row) */
MEGA_API const mega_data_format_info *mega_data_formats(int *n);
/* the row of a format (NULL for MEGA_DATA_AUTO or an unknown value) */
MEGA_API const mega_data_format_info *mega_data_format_row(mega_data_format f);
/* The format of a file from its first line: the first row whose detector accepts it; text when
 * none does (also when the file cannot be opened: the loader then says why). */
MEGA_API mega_data_format mega_data_detect(const char *path);
/* The one entry point of the CLI: the format's row decides which files it reads; a format with a
 * second file (IDX) is also chosen when only that row's files are given (images without data).
 * MEGA_DATA_AUTO: mega_data_detect on data. MEGA_ERR_INVALID when the needed paths are NULL; the
 * messages name the CLI flags of the row (--data, --images, --labels). */
MEGA_API mega_status mega_dataset_load(mega_data_format format, const char *data, const char *images, const char *labels,
                              const mega_data_opts *opts, mega_dataset *d);
/* the format a loaded dataset came from (never MEGA_DATA_AUTO) */
MEGA_API mega_data_format mega_dataset_format(const mega_dataset *d);
/* The fingerprint a classifier checkpoint stores of its training data: FNV-1a over the examples'
 * first-sequence tokens (uint16, host byte order) and labels, in order. The second sequence of
 * pairs is not included (as in existing checkpoints). */
MEGA_API uint64_t mega_dataset_fingerprint(const mega_dataset *d);
/* frees everything and empties *d (NULL allowed; safe on a zeroed or failed dataset) */
MEGA_API void mega_dataset_free(mega_dataset *d);

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
MEGA_API mega_status mega_batch_init(mega_batch *b, int B, int L, int L2, int reals);
MEGA_API void mega_batch_free(mega_batch *b);
/* longest first (which = 0) or second (which = 1) sequence among examples idx[0..n) */
MEGA_API int mega_batch_max_len(const mega_dataset *d, const int *idx, int n, int which);
/* Copy examples idx[0..n) (n <= B) into the batch; longer sequences are cut at L (L2).
 * MEGA_ERR_INVALID: n out of range, an index out of range, a pairs dataset into a batch without
 * L2, reals requested for tokens other than pixels, or real values (the real format) into a
 * batch of token ids. */
MEGA_API mega_status mega_batch_fill(mega_batch *b, const mega_dataset *d, const int *idx, int n);

/* ---------------------------------------------------------------------------------------------
 * ListOps (Nangia & Bowman 2018, as generated for the Long Range Arena) */

/* Value of a ListOps expression (a Source string): tokens separated by whitespace, "(" and ")"
 * ignored but required to balance, values are single digits. MIN, MAX, MED = int(numpy.median(args))
 * as in the published to_value (the middle value for an odd count; for an even count the mean of
 * the two middle values, truncated: [MED 3 4 ] = 3, [MED 1 2 6 9 ] = 4), SM = sum mod 10, FIRST,
 * LAST. No recursion (any nesting depth). Returns MEGA_OK and *value, or MEGA_ERR_FORMAT with the
 * token position in the message (MEGA_ERR_INVALID for NULL, MEGA_ERR_OOM). */
MEGA_API mega_status mega_listops_eval(const char *expr, int *value);

typedef struct {
    int64_t n_train, n_valid, n_test;
    int min_len, max_len; /* accepted when min_len < length < max_len (strict, as published) */
    int max_depth, max_args;
    int64_t seed;
} mega_listops_params;

/* the published defaults: 96000/2000/2000, lengths 500-2000, depth 10, 10 args, seed 0 */
MEGA_API mega_listops_params mega_listops_defaults(void);
/* Check the parameters: MEGA_ERR_INVALID with a message naming the `mega listops` flags
 * (including lengths that no tree of the given depth/arguments can reach). */
MEGA_API mega_status mega_listops_check(const mega_listops_params *p);

/* Generator state: the published recursive procedure driven by a bit-exact copy of CPython's
 * random module (MT19937, random.random, random.randint, random.choice), so seed S gives the
 * trees the published script draws after random.seed(S), in the same order.
 * (google-research/long-range-arena lra_benchmarks/data/listops.py; the splits are taken in
 * drawing order: the first n_train accepted trees are the training split, the next n_valid
 * validation, the rest test.) */
typedef struct mega_listops_gen mega_listops_gen;
/* *out = a new generator (free it with mega_listops_gen_free); fails as mega_listops_check, or
 * MEGA_ERR_OOM, with *out = NULL. */
MEGA_API mega_status mega_listops_gen_new(const mega_listops_params *p, mega_listops_gen **out);
MEGA_API void mega_listops_gen_free(mega_listops_gen *g);
/* Draw until a tree with min_len < length < max_len that was not drawn before (every example of
 * every split is distinct). *src points to the Source string (owned by the generator, valid until
 * the next call), *length is the published length (tokens without parentheses), *target its
 * value. Fails with MEGA_ERR_INVALID when sampling makes no progress (the lengths are
 * unreachable or the distinct examples are exhausted), or MEGA_ERR_OOM. */
MEGA_API mega_status mega_listops_gen_next(mega_listops_gen *g, const char **src, int *length, int *target);
/* draws made so far (accepted or not) */
MEGA_API int64_t mega_listops_gen_attempts(const mega_listops_gen *g);

/* ---------------------------------------------------------------------------------------------
 * parallel text (sequence to sequence, translation; src/data/pairs.c)
 *
 * A TSV of "source<TAB>target" lines, UTF-8, in the shared byte vocabulary (MEGA_S2S_*, see the
 * top of this file): a sentence of n bytes is n + 1 tokens, its bytes then </s>. Lengths and
 * limits are always in tokens, </s> included. The data functions are mega_s2s_data_load/free,
 * mega_s2s_tokenize, mega_s2s_batches and mega_s2s_fill (the model, mega_s2s, is in mega.h). */

enum { MEGA_S2S_PAD = 256, MEGA_S2S_EOS = 257, MEGA_S2S_VOCAB = 258 };

/* ---------------------------------------------------------------------------------------------
 * byte-level BPE subword units for parallel text (src/data/bpe.c; docs/translation.md)
 *
 * Ids 0..255 are the bytes, 256 <pad> and 257 </s> (the byte vocabulary above), and merge i
 * (0-based) is token 258 + i, the concatenation of two earlier tokens. Text is cut into units
 * before every space (the space starts the unit: "dock workers" is "dock", " workers"); a unit
 * is encoded by applying the merges in the order they were learned (the earliest merge present
 * replaces all of its occurrences, left to right, and again), and never across units. Decoding
 * concatenates the tokens' bytes, so it gives the encoded text back exactly. */

#define MEGA_BPE_MAX_MERGES (65536 - MEGA_S2S_VOCAB) /* token ids fit in 16 bits */
/* Learning's bounds: a unit longer than MEGA_BPE_MAX_UNIT bytes is learned from as pieces of at
 * most that many bytes (cut at character starts), so no learned token is longer; and when the
 * distinct units (pieces) hold more than MEGA_BPE_LEARN_BYTES bytes, only the most frequent that
 * fit are learned from (ties: by their bytes). Learning thus does at most about
 * MEGA_BPE_LEARN_BYTES * MEGA_BPE_MAX_UNIT pair updates, in memory proportional to the texts. */
#define MEGA_BPE_MAX_UNIT 64
#define MEGA_BPE_LEARN_BYTES ((size_t)1 << 24)

typedef struct mega_bpe mega_bpe;

/* Learn up to `merges` merges from nt texts (texts[i] has lens[i] bytes; a NULL text must have
 * length 0): subword-nmt's learn_bpe on the units of the texts, each merge the most frequent
 * adjacent pair of tokens over all units (ties: the smaller left id, then right id), stopping
 * early when the best pair occurs fewer than min_count times (values below 1 mean 1), within the
 * bounds above. The result depends on the texts only (not on their order beyond that).
 * MEGA_ERR_INVALID (bad arguments),
 * MEGA_ERR_OOM; *out NULL on failure. */
MEGA_API mega_status mega_bpe_learn(const uint8_t *const *texts, const size_t *lens, size_t nt, int merges, int min_count,
                           mega_bpe **out);
MEGA_API void mega_bpe_free(mega_bpe *b); /* NULL allowed */
MEGA_API int mega_bpe_merges(const mega_bpe *b);     /* merges (0 for NULL) */
MEGA_API int mega_bpe_vocab_size(const mega_bpe *b); /* 258 + merges */
/* token id's bytes (len receives their count; <pad> and </s> have none); NULL for an id outside
 * the vocabulary */
MEGA_API const uint8_t *mega_bpe_token(const mega_bpe *b, int id, size_t *len);
/* the longest token's byte count (1 for NULL, the byte vocabulary): what decoding n tokens needs
 * at most per token */
MEGA_API size_t mega_bpe_longest(const mega_bpe *b);
/* s[0..n) as tokens into ids (room for n values: a text never has more tokens than bytes);
 * returns the count. b NULL: the bytes themselves. No </s> is added. */
MEGA_API size_t mega_bpe_encode(const mega_bpe *b, const uint8_t *s, size_t n, int32_t *ids);
/* the bytes of tokens ids[0..n) into out (room for the sum of their lengths: at most
 * n * the longest token); <pad>, </s> and ids outside the vocabulary give nothing. b NULL: the
 * byte vocabulary. Returns the byte count. */
MEGA_API size_t mega_bpe_decode(const mega_bpe *b, const int32_t *ids, size_t n, uint8_t *out);
/* The merge list as text ("mega-bpe 1 <n>" then one "<left> <right>" line per merge), malloc'd
 * (free it); *len its length (may be NULL). NULL when out of memory. */
MEGA_API char *mega_bpe_to_string(const mega_bpe *b, size_t *len);
/* ... and back: MEGA_ERR_FORMAT for anything but that exact form (decimal ids without leading
 * zeros, single spaces and newlines; a wrong header, a cut or
 * corrupt line, a merge using <pad>, </s> or a later token, a repeated merge, trailing bytes,
 * more than MEGA_BPE_MAX_MERGES), MEGA_ERR_OOM. */
MEGA_API mega_status mega_bpe_from_string(const char *s, size_t n, mega_bpe **out);

/* Whether s[0..n) is well-formed UTF-8 (Unicode table 3-7: no overlong forms, no surrogates
 * U+D800..DFFF, nothing above U+10FFFF, no sequence cut short by the end): returns n when it is,
 * else the offset of the first byte of the first bad sequence. */
MEGA_API size_t mega_utf8_check(const void *s, size_t n);

/* Why a line is not used; checked in this order, a line counts under the first reason only. */
typedef enum {
    MEGA_S2S_BAD_NO_TAB = 0,    /* no TAB on the line */
    MEGA_S2S_BAD_EXTRA_TAB,     /* more than one TAB */
    MEGA_S2S_BAD_EMPTY_SRC,     /* nothing before the TAB */
    MEGA_S2S_BAD_EMPTY_TGT,     /* nothing after it */
    MEGA_S2S_BAD_UTF8,          /* the source or the target is not valid UTF-8 (mega_utf8_check) */
    MEGA_S2S_BAD_SRC_LONG,      /* source tokens > opts.max_src_len */
    MEGA_S2S_BAD_TGT_LONG,      /* target tokens > opts.max_tgt_len */
    MEGA_S2S_BAD_N
} mega_s2s_bad;

/* "no-tab", "extra-tab", "empty-source", "empty-target", "bad-utf8", "source-too-long",
 * "target-too-long" ("?" out of range) */
MEGA_API const char *mega_s2s_bad_name(int reason);

typedef struct {
    int max_src_len;  /* longest usable source in tokens, </s> included (0 = no limit; 1 is invalid) */
    int max_tgt_len;  /* the same for targets */
    int max_examples; /* stop reading after this many usable lines (0 = all) */
    int strict;       /* a bad line is an error "file:LINE: reason" instead of skipped */
    const char *what; /* names the file in messages ("--train" gives "--train file 'x' is empty");
                         NULL: "parallel text" */
    const char *limit; /* names both length limits in messages and in the skip summary, as the
                          caller's user sets them ("--seq-len" gives "longer than --seq-len 256");
                          NULL: "max_src_len" / "max_tgt_len" */
    const mega_bpe *src_bpe, *tgt_bpe; /* subword units (mega_bpe_encode) of each side instead of
                                          bytes (NULL: bytes); the limits count the side's tokens */
} mega_s2s_opts;

typedef struct {
    int n;                   /* examples (usable lines, in file order) */
    size_t *off;             /* [n] pool offset of example i: its source, then its target */
    int *src_len, *tgt_len;  /* [n] tokens, </s> included (>= 2) */
    int *line;               /* [n] 1-based line number */
    uint16_t *pool;          /* every example's source and target tokens */
    size_t pool_n;
    int src_max, tgt_max;    /* longest source / target stored */
    int64_t n_src_tokens, n_tgt_tokens;
    int64_t n_src_bytes, n_tgt_bytes; /* the UTF-8 bytes of the stored sentences (no </s>) */
    int n_lines;             /* lines read (all of them, or up to the max_examples-th usable one) */
    int n_blank;             /* empty lines (also "\r" alone): skipped, never an error */
    int n_crlf;              /* lines that ended in "\r\n" (the "\r" is stripped) */
    int n_skipped;           /* bad lines skipped: the sum of n_bad */
    int n_bad[MEGA_S2S_BAD_N];     /* bad lines per reason (mega_s2s_bad) */
    int first_bad[MEGA_S2S_BAD_N]; /* 1-based line of the first of each, 0 = none */
    uint64_t fingerprint;    /* mega_fnv1a64 of the whole file as read (before any option) */
    char *path;
    int max_src_len, max_tgt_len; /* the limits it was read with (mega_s2s_opts) */
    char limit[2][48];       /* their names in messages (mega_s2s_opts.limit) */
} mega_s2s_data;

/* the tokens of example i: src_len[i] source tokens, then tgt_len[i] target tokens */
static inline const uint16_t *mega_s2s_data_src(const mega_s2s_data *d, int i) { return d->pool + d->off[i]; }
static inline const uint16_t *mega_s2s_data_tgt(const mega_s2s_data *d, int i) { return d->pool + d->off[i] + d->src_len[i]; }

/* Read the TSV at path into *d (overwritten; free it with mega_s2s_data_free). Lines end in "\n" or
 * "\r\n"; the last one may lack it; a UTF-8 byte-order mark at the start of the file is dropped.
 * Blank lines are skipped. A bad line (mega_s2s_bad) is skipped and counted in n_bad /
 * first_bad (mega_s2s_skip_summary words them for a log), or with opts.strict fails with
 * MEGA_ERR_FORMAT "file:LINE: reason" (e.g. "x.tsv:7: invalid UTF-8 in the target at column 12
 * (byte 0xc0)"; columns are 1-based bytes of the line). Other failures, with *d empty:
 * MEGA_ERR_NOT_FOUND / MEGA_ERR_IO (missing, a directory, unreadable: mega_read_file),
 * MEGA_ERR_FORMAT (empty file; no usable line, the message says why each line was skipped),
 * MEGA_ERR_INVALID (NULL path, negative options or a limit of 1), MEGA_ERR_OOM.
 * opts may be NULL (all zero). */
MEGA_API mega_status mega_s2s_data_load(const char *path, const mega_s2s_opts *opts, mega_s2s_data *d);
/* frees everything and empties *d (NULL allowed; safe on a zeroed or failed load) */
MEGA_API void mega_s2s_data_free(mega_s2s_data *d);
/* "2 without a tab (first at line 3), 1 with invalid UTF-8 (at line 7)" (reasons in mega_s2s_bad
 * order; "" when nothing was skipped) into buf (cap bytes, cut to fit); returns n_skipped. */
MEGA_API int mega_s2s_skip_summary(const mega_s2s_data *d, char *buf, size_t cap);

/* One source sentence as the model's input (`mega translate` on stdin lines): one final "\n" or
 * "\r\n" of s[0..n) is dropped, the rest must be non-empty valid UTF-8 (else MEGA_ERR_FORMAT
 * "source: empty" / "source: invalid UTF-8 at column C (byte 0xXX)") and at most max_len tokens
 * with its </s> (0 = no limit; else MEGA_ERR_INVALID "source: N tokens (N-1 bytes + </s>), more
 * than the limit of M"). tok (room for n + 1 values) receives the bytes then MEGA_S2S_EOS, *len
 * their count (0 on failure). */
MEGA_API mega_status mega_s2s_tokenize(const char *s, size_t n, int max_len, int32_t *tok, int *len);
/* the same with subword units (b NULL: bytes, as mega_s2s_tokenize); the limit then counts
 * subword tokens ("source: N tokens (N-1 subwords of B bytes + </s>), more than the limit of M") */
MEGA_API mega_status mega_s2s_tokenize_bpe(const mega_bpe *b, const char *s, size_t n, int max_len, int32_t *tok, int *len);

/* The batches of one epoch: example indices in idx, batch b = idx[off[b] .. off[b] + count[b]). */
typedef struct {
    int n;          /* batches */
    int *off;       /* [n] */
    int *count;     /* [n] examples in each (>= 1) */
    int *idx;       /* [n_idx] every example exactly once, sorted by (source len, target len, index) */
    int n_idx;      /* = the dataset's n */
    int max_count;  /* largest batch */
    int n_oversize; /* single-example batches whose max(source, target) tokens exceed max_tokens */
} mega_s2s_plan;

/* Batching by length, as fairseq's --max-tokens / --batch-size: sort the examples by (source
 * tokens, target tokens, index) and cut that order greedily into consecutive batches of B
 * examples with B * max(longest source, longest target) <= max_tokens and B <= max_sentences
 * (0 = no limit of that kind, not both; one example longer than max_tokens is a batch alone,
 * counted in n_oversize). shuffle = 0 (evaluation) keeps the batches in sorted order; else the
 * ORDER of the batches (not their contents) is shuffled from (seed, epoch) only:
 *     st = mega_data_rng_seed(seed ^ (0x9E3779B97F4A7C15 * (uint64_t)epoch));
 *     for (i = n - 1; i > 0; i--) swap batches i and mega_data_rng_below(&st, i + 1);
 * so a run resumes mid-epoch from (epoch, batch index) alone. *p is overwritten (free it with
 * mega_s2s_plan_free). MEGA_ERR_INVALID (no examples, bad limits), MEGA_ERR_OOM (*p empty). */
MEGA_API mega_status mega_s2s_batches(const mega_s2s_data *d, int max_tokens, int max_sentences, uint64_t seed, int64_t epoch,
                             int shuffle, mega_s2s_plan *p);
MEGA_API void mega_s2s_plan_free(mega_s2s_plan *p); /* NULL allowed */

/* S = longest source and L = longest target (tokens) among examples idx[0..B) (either pointer
 * may be NULL). MEGA_ERR_INVALID for B < 1 or an index out of range. */
MEGA_API mega_status mega_s2s_batch_shape(const mega_s2s_data *d, const int *idx, int B, int *S, int *L);
/* Fill B rows with examples idx[0..B), everything right-padded with MEGA_S2S_PAD:
 *   src  [B, S]  source bytes, </s>
 *   tgt  [B, L]  target bytes, </s>                        (the labels of the decoder)
 *   prev [B, L]  </s>, then tgt shifted right by one:      (fairseq prev_output_tokens, the
 *                prev[t] = tgt[t-1] for 0 < t < tgt_len,     decoder input)
 *                padded exactly where tgt is
 *   src_len, tgt_len [B]  the tokens of each row (</s> included)
 * Any output may be NULL (not written). Nothing is cut: MEGA_ERR_INVALID when an example is longer
 * than S or L (size them with mega_s2s_batch_shape), an index is out of range or B, S, L < 1. */
MEGA_API mega_status mega_s2s_fill(const mega_s2s_data *d, const int *idx, int B, int32_t *src, int S, int32_t *prev, int32_t *tgt,
                          int L, int32_t *src_len, int32_t *tgt_len);

/* ---------------------------------------------------------------------------------------------
 * FreeDict bilingual dictionaries as parallel phrases (src/data/freedict.c; `mega freedict`)
 *
 * A dictd database is X.dict.dz (dictzip: gzip with random-access chunks; a plain X.dict is
 * read too) and X.index, one line per headword: "headword<TAB>offset<TAB>length", offset and
 * length of the entry's text in the uncompressed .dict written in dictd's base64 (digits
 * "A-Za-z0-9+/", most significant first). Several index lines may point at one entry; the
 * entries whose headword starts with "00-database" or "00database" describe the database.
 *
 * An entry of a FreeDict dictionary (tei2c5 layout) is a headword line
 *     "Aal /ˈɑːl/ <masc, n, sg>"            headword, pronunciation, grammar
 * followed by body lines: senses ("1. ..."), each with its translations separated by ", ",
 * domain labels "[cook.]", grammar "<n>", and indented "Note:", "Synonym(s):", "see:" lines and
 * '"example" - translation' lines. mega_freedict_clean turns one entry into one pair, the
 * headword phrase and its first translation; docs/freedict.md gives the rule with examples. */

typedef struct mega_dictd mega_dictd;

typedef struct {
    const char *headword; /* the index's headword (NUL-terminated; dictd's normalised form) */
    const char *text;     /* the entry: len bytes of the uncompressed .dict, not NUL-terminated */
    size_t len;
    uint64_t offset;      /* where text starts in the uncompressed .dict */
    int line;             /* 1-based line of the index */
} mega_dictd_entry;

/* Open a dictionary: dict_path is X.dict.dz or X.dict (decompressed whole into memory); the
 * index is index_path, or with index_path NULL, X.index next to it. Fails with *out = NULL:
 * MEGA_ERR_INVALID (no path; a dict path not ending in .dict.dz or .dict with no index given),
 * MEGA_ERR_NOT_FOUND / MEGA_ERR_IO (missing, a directory, unreadable), MEGA_ERR_FORMAT (a .dz
 * that is not gzip, corrupt or truncated compressed data, an empty dictionary, an index line
 * that is not "headword<TAB>base64<TAB>base64": "X.index:LINE: reason", an index without
 * entries), MEGA_ERR_OOM. */
MEGA_API mega_status mega_dictd_open(const char *dict_path, const char *index_path, mega_dictd **out);
MEGA_API void mega_dictd_free(mega_dictd *d); /* NULL allowed */
/* index lines (entries in index order, 0-based) and the uncompressed size of the .dict */
MEGA_API size_t mega_dictd_count(const mega_dictd *d);
MEGA_API size_t mega_dictd_size(const mega_dictd *d);
/* Entry i in index order. MEGA_ERR_INVALID for i out of range; MEGA_ERR_FORMAT when its offset
 * and length lie outside the .dict ("X.index:LINE: ..."): *e then still names the headword and
 * line, with text NULL and len 0. */
MEGA_API mega_status mega_dictd_get(const mega_dictd *d, size_t i, mega_dictd_entry *e);
/* whether a headword names a database description entry (00-database-*, 00database*) */
MEGA_API int mega_dictd_is_meta(const char *headword);
/* dictd's base64 number in s[0..n) (1 to 10 digits) into *v; 0 on success, -1 when malformed */
MEGA_API int mega_dictd_b64(const char *s, size_t n, uint64_t *v);

/* Why an entry gives no pair. mega_freedict_clean returns one of the first five; the counts of
 * mega_freedict_read use them all, an entry counting under the first that applies. */
typedef enum {
    MEGA_FREEDICT_KEPT = 0,    /* a pair */
    MEGA_FREEDICT_BAD_UTF8,    /* the entry is not valid UTF-8 */
    MEGA_FREEDICT_NO_SOURCE,   /* nothing left of the headword line */
    MEGA_FREEDICT_NO_TARGET,   /* no translation line, or nothing left of it */
    MEGA_FREEDICT_GLUED,       /* the first translation has an abbreviation glued to it */
    MEGA_FREEDICT_BAD_OFFSET,  /* the index points outside the .dict */
    MEGA_FREEDICT_TOO_LONG,    /* source or target longer than opts.max_len bytes */
    MEGA_FREEDICT_IDENTICAL,   /* source == target, with opts.drop_identical */
    MEGA_FREEDICT_DUPLICATE,   /* the same (source, target) as an earlier entry */
    MEGA_FREEDICT_NREASONS
} mega_freedict_reason;

/* "kept", "bad-utf8", "no-source", "no-target", "glued-abbreviation", "bad-offset", "too-long",
 * "identical", "duplicate" ("?" out of range) */
MEGA_API const char *mega_freedict_reason_name(int reason);

/* Clean one entry (text[0..len), as mega_dictd_get gives it) into its source phrase and first
 * translation: NUL-terminated, UTF-8, no TAB, newline or other control byte, single spaces,
 * trimmed. src and tgt each need room for len + 1 bytes. Returns MEGA_FREEDICT_KEPT, or why
 * there is no pair (src and tgt are then "" or partial). */
MEGA_API mega_freedict_reason mega_freedict_clean(const char *text, size_t len, char *src, char *tgt);

typedef struct {
    int max_len;        /* drop pairs whose source or target is longer, in bytes (0 = no limit) */
    int drop_identical; /* drop pairs whose source and target are the same string */
} mega_freedict_opts;

typedef struct {
    size_t index_lines; /* lines of the index */
    size_t meta;        /* of those, database description lines (skipped, not entries) */
    size_t entries;     /* distinct entries of the other lines (one text read once) */
    size_t kept;        /* pairs in the result */
    size_t identical;   /* of the kept pairs, those whose source and target are the same */
    size_t dropped[MEGA_FREEDICT_NREASONS]; /* entries per reason ([MEGA_FREEDICT_KEPT] is 0);
                                               kept + the sum of dropped = entries */
} mega_freedict_stats;

typedef struct {
    size_t n;         /* pairs, sorted by (source, target) bytewise, all distinct */
    const char **src; /* [n] NUL-terminated */
    const char **tgt; /* [n] */
    char *pool;       /* storage (internal) */
} mega_freedict_pairs;

/* Every pair of a dictionary (mega_dictd_open's paths): each distinct entry cleaned
 * (mega_freedict_clean), then the length and identity options, then exact duplicate pairs
 * removed. *p is overwritten (free it with mega_freedict_pairs_free); *st (may be NULL) gets
 * the counts. Fails as mega_dictd_open, or MEGA_ERR_FORMAT when no pair is left ("...: no
 * usable entry (N entries: ...)"), or MEGA_ERR_INVALID (negative max_len), *p empty. opts may be
 * NULL (no limit, identical pairs kept). */
MEGA_API mega_status mega_freedict_read(const char *dict_path, const char *index_path, const mega_freedict_opts *opts,
                               mega_freedict_pairs *p, mega_freedict_stats *st);
/* the same from an open dictionary */
MEGA_API mega_status mega_freedict_pairs_from(const mega_dictd *d, const mega_freedict_opts *opts, mega_freedict_pairs *p,
                                     mega_freedict_stats *st);
MEGA_API void mega_freedict_pairs_free(mega_freedict_pairs *p); /* NULL allowed */

/* Split the pairs into train / valid / test without leaking a source phrase: the pairs with one
 * source (a group; consecutive in p) always go to one split. The groups are shuffled
 * (Fisher-Yates, st = mega_data_rng_seed(seed), j = mega_data_rng_below(&st, i + 1) for
 * i = G-1..1); walking that order, groups go to test until it holds round(test_frac * n) pairs
 * or more, then to valid likewise, then the rest to train. order (room for p->n) receives the
 * pair indices, train then valid then test, each in the shuffled group order; count[3] the pairs
 * and groups[3] (may be NULL) the source phrases of each split. MEGA_ERR_INVALID when a fraction
 * is outside [0, 1) or their sum is not below 1; MEGA_ERR_OOM. */
MEGA_API mega_status mega_freedict_split(const mega_freedict_pairs *p, uint64_t seed, double valid_frac, double test_frac,
                                size_t *order, size_t count[3], size_t groups[3]);

/* ---------------------------------------------------------------------------------------------
 * Evaluation on datasets (with mega_lm_eval_windows / mega_lm_eval_stream of include/mega.h). */

/* a classifier's mean loss and correct count over examples idx[0..n) of d, in batches of at most
 * `batch` (inputs cut to maxlen tokens); pred (optional) receives the argmax per example;
 * progress (optional) after each batch, with the running accuracy */
MEGA_API mega_status mega_cls_evaluate(mega_cls *m, const mega_dataset *d, const int *idx, int n, int batch, int maxlen,
                              mega_eval_progress progress, void *ctx, double *loss, int64_t *correct, int *pred);
/* A masked-LM model's (mega_cls_mlm_forward) figures over text[0..n): consecutive windows of T
 * bytes (the last one shorter), in batches of at most `batch`, the first max_bytes only (0 = all);
 * each window corrupted by mega_mlm_mask (p 0.15, mask id vocab_size - 1, random bytes) from the
 * one stream mega_data_rng_seed(seed), so the same seed scores the same masks. *loss: the mean
 * cross-entropy (nats) over the masked positions, *correct and *count: their argmax hits and
 * number. progress (optional) after each batch with the running accuracy. */
MEGA_API mega_status mega_mlm_evaluate(mega_cls *m, const uint8_t *text, size_t n, int batch, int T, uint64_t seed,
                                       size_t max_bytes, mega_eval_progress progress, void *ctx, double *loss,
                                       int64_t *correct, int64_t *count);
/* an encoder-decoder's mean NLL per target token (nats) and teacher-forced token accuracy over
 * examples sel[0..n) of d, in length-sorted batches of at most max_tokens tokens; *tokens
 * (optional): the target tokens counted */
MEGA_API mega_status mega_s2s_evaluate(mega_s2s *m, const mega_s2s_data *d, const int *sel, int n, int max_tokens, double *nll,
                              double *acc, int64_t *tokens);

/* The evaluation of an encoder-decoder by its translations (mega eval --task translate). */
typedef struct {
    mega_s2s_search search; /* beam, length penalty and limit (limit_src_len is set per batch) */
    int batch;              /* sources per search batch */
    int max_tokens;         /* tokens per teacher-forced batch */
    int group;              /* lines with the same source share one segment, their targets its
                               references (0: each line its own segment) */
    const mega_bpe *src_bpe, *tgt_bpe; /* the sides' subword units (NULL: bytes); with subword
                                          sources and byte targets the limit counts source bytes */
    mega_eval_progress progress;       /* optional: after each search batch (segments done, total) */
    void *ctx;
} mega_s2s_translation_opts;
typedef struct {
    int segments;                     /* the segments scored */
    double nll, acc;                  /* teacher-forced: mean NLL per target token, token accuracy */
    int64_t tokens;                   /* ... over these target tokens */
    mega_bleu_score bleu[2];          /* [0] the model's translations, [1] the copy baseline (each */
    mega_chrf_score chrf[2];          /*     source as its own translation) */
    mega_exact_score exact[2];
    char bleu_signature[128], chrf_signature[128];
    int64_t out_tokens;               /* tokens the search produced, </s> included */
    double forced_seconds, search_seconds;
    /* per segment, in the evaluation's order (sorted by source when grouped): the translation's
     * bytes as the model produced them and the source's text, each NUL-terminated */
    char **hyp, **source;
    size_t *hyp_len, *source_len;
} mega_s2s_translation_eval;
/* The teacher-forced loss (mega_s2s_evaluate) over all of d, then one translation per segment,
 * searched in batches of o->batch segments of similar sources, scored against the segment's
 * references with corpus BLEU, chrF and exact match (mega_metrics); the copy baseline scored
 * likewise. r is filled (free it with mega_s2s_translation_eval_free); on failure it is left
 * empty. MEGA_ERR_INVALID, MEGA_ERR_OOM, or the search's error. */
MEGA_API mega_status mega_s2s_evaluate_translations(mega_s2s *m, const mega_s2s_data *d, const mega_s2s_translation_opts *o,
                                           mega_s2s_translation_eval *r);
MEGA_API void mega_s2s_translation_eval_free(mega_s2s_translation_eval *r); /* NULL allowed */

/* ---------------------------------------------------------------------------------------------
 * PNG images (libpng; a build without it fails these with MEGA_ERR_UNSUPPORTED) and the
 * Pathfinder task of the Long Range Arena (docs/vision.md) */

/* 1 when this build reads and writes PNG */
MEGA_API int mega_png_available(void);
/* Decode a PNG held in memory to 8-bit grayscale: *px (malloc'd, w*h bytes, row-major). A
 * grayscale PNG of 1, 2, 4 or 16 bits is converted to 8 bits; colour, palette, alpha and
 * interlaced PNGs fail with MEGA_ERR_FORMAT naming what they are, as do a width or height above
 * max_side (checked before any pixel buffer is allocated) and a truncated or corrupt stream.
 * `what` names the image in messages. */
MEGA_API mega_status mega_png_decode_gray(const uint8_t *data, size_t n, const char *what, int max_side, uint8_t **px, int *w,
                                          int *h);
/* The same from a file ("<what> file '<path>': ..."; a missing file is MEGA_ERR_NOT_FOUND). */
MEGA_API mega_status mega_png_read_gray(const char *path, const char *what, int max_side, uint8_t **px, int *w, int *h);
/* Encode w x h 8-bit grayscale pixels as a PNG into *out (free with mega_bytes_free). */
MEGA_API mega_status mega_png_encode_gray(const uint8_t *px, int w, int h, mega_bytes *out);

/* The settings of the snakes2 generator (Linsley et al. 2018) as the Long Range Arena used it
 * (src/data/pathfinder.c documents the procedure and where it differs). */
typedef struct {
    int size;                 /* image side: 32, 64 or 128 */
    int contour_length;       /* paddles per target path: 6, 9, 14 (easy, medium, hard) */
    int paddle_length;        /* pixels */
    double paddle_thickness;  /* pixels */
    double marker_radius;     /* pixels */
    double continuity;        /* turn penalty: weight cos(min(continuity * turn, pi/2))^2 */
    int margins[4], n_margins; /* gap between paddles: one drawn per image */
    int seed_distance;        /* distance of the two paths' first paddles */
    int padding;              /* border kept free */
    int distractor_length;    /* paddles per distractor path */
    int n_distractors;        /* distractor paths wanted */
    double snake_contrast, paddle_contrast; /* target paddles paddle*snake, distractors snake */
    int antialias;            /* sample points per pixel side */
    int max_paddle_trials, max_distractor_trials, max_pair_trials;
    uint64_t seed;
} mega_pathfinder_params;
/* The release's settings for size 32, 64 or 128 and difficulty 0, 1, 2 (easy, medium, hard);
 * MEGA_ERR_INVALID for others. seed = 0. */
MEGA_API mega_status mega_pathfinder_defaults(int size, int difficulty, mega_pathfinder_params *p);
/* the release's directory of a contour length: curv_baseline (6), curv_contour_length_9, _14 */
MEGA_API const char *mega_pathfinder_subdir(int contour_length);

typedef struct {
    int label;                /* 1: both markers on the same path */
    int margin;               /* the gap drawn for this image */
    int target_paddles;       /* 2 * contour_length */
    int distractors, distractor_paddles; /* distractor paths drawn (some may not fit) */
    int pair_attempts;        /* tries of the target pair */
    int marker[2][2];         /* the markers' centres (y, x) */
} mega_pathfinder_info;

typedef struct mega_pathfinder_gen mega_pathfinder_gen;
MEGA_API mega_status mega_pathfinder_gen_new(const mega_pathfinder_params *p, mega_pathfinder_gen **out);
MEGA_API void mega_pathfinder_gen_free(mega_pathfinder_gen *g);
/* the next image (size*size bytes into img, scaled so that its maximum is 255) and its facts */
MEGA_API mega_status mega_pathfinder_gen_next(mega_pathfinder_gen *g, uint8_t *img, mega_pathfinder_info *info);
/* target pairs drawn so far (restarts included) */
MEGA_API int64_t mega_pathfinder_gen_attempts(const mega_pathfinder_gen *g);

#ifdef __cplusplus
}
#endif
#endif /* MEGA_DATA_H */
