/*
 * mega_metrics.h: translation metrics of libmega (included by mega_data.h): corpus BLEU, chrF
 * and exact match as sacreBLEU computes them, and its 13a tokenizer. Errors and the MEGA_API
 * rule as in include/mega.h.
 */
#ifndef MEGA_METRICS_H
#define MEGA_METRICS_H

#include "mega.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * translation metrics: corpus BLEU, chrF and exact match (src/data/metrics.c, docs/metrics.md)
 *
 * Computed as sacreBLEU 2.6.0 computes them (mjpost/sacrebleu tag v2.6.0, commit 2277cacc):
 * with mega_metrics_defaults(), BLEU is sacrebleu.metrics.BLEU() (tokenizer 13a, mixed case,
 * exp smoothing, 4-grams, no effective order) and chrF is CHRF() (chrF2: 6 character orders,
 * no word n-grams, beta 2, whitespace removed, effective-order averaging, eps_smoothing=False),
 * both corpus-level (statistics summed over the sentences, then one score). Not supported:
 * lowercasing (case:lc) and the tokenizers other than 13a and none.
 *
 * Strings are UTF-8 bytes. Where sacreBLEU works on characters (chrF n-grams, str.split() and
 * str.rstrip() with Python's Unicode whitespace) each byte of an invalid UTF-8 sequence counts as
 * one character of its own (what Python's "surrogateescape" decoding gives); nothing fails on
 * bad input. Usage: new, add every (hypothesis, references) pair, then read the scores; adding
 * more afterwards and reading again is allowed. One accumulator must not be used by two threads
 * at once; different accumulators are independent. */

#define MEGA_METRICS_SACREBLEU_VERSION "2.6.0"
#define MEGA_METRICS_MAX_ORDER 16 /* largest BLEU n-gram order, chrF character or word order */

typedef enum { MEGA_BLEU_TOK_13A = 0, MEGA_BLEU_TOK_NONE = 1 } mega_bleu_tok;
typedef enum {
    MEGA_BLEU_SMOOTH_EXP = 0, /* sacreBLEU "exp" (mteval-v13a) */
    MEGA_BLEU_SMOOTH_NONE,
    MEGA_BLEU_SMOOTH_FLOOR,
    MEGA_BLEU_SMOOTH_ADD_K
} mega_bleu_smooth;

typedef struct {
    /* BLEU (sacrebleu.metrics.BLEU arguments) */
    mega_bleu_tok tokenize;         /* 13a */
    mega_bleu_smooth smooth_method; /* exp */
    double smooth_value;            /* floor / add-k value; < 0: sacreBLEU's default (0.1 / 1) */
    int max_ngram_order;            /* 4 (1..MEGA_METRICS_MAX_ORDER) */
    int effective_order;            /* 0 */
    /* chrF (sacrebleu.metrics.CHRF arguments) */
    int char_order;    /* 6 (0..MAX) */
    int word_order;    /* 0 (0..MAX; 2 is chrF++); char_order + word_order >= 1 */
    int beta;          /* 2 (0..1000) */
    int whitespace;    /* 0: whitespace is removed before extracting character n-grams */
    int eps_smoothing; /* 0: effective-order averaging (sacreBLEU's default) */
} mega_metrics_options;

/* sacreBLEU's defaults (above). A zeroed struct is not valid (max_ngram_order 0). */
MEGA_API mega_metrics_options mega_metrics_defaults(void);

typedef struct mega_metrics mega_metrics;

/* *out = a new, empty accumulator (opts NULL: mega_metrics_defaults()). MEGA_ERR_INVALID for an
 * option out of range (the message names it), MEGA_ERR_OOM; *out is NULL on failure. */
MEGA_API mega_status mega_metrics_new(const mega_metrics_options *opts, mega_metrics **out);
MEGA_API void mega_metrics_free(mega_metrics *m); /* NULL allowed */
/* forget every sentence added (the options and the scratch memory stay) */
MEGA_API void mega_metrics_reset(mega_metrics *m);
MEGA_API const mega_metrics_options *mega_metrics_get_options(const mega_metrics *m);

/* Add one segment: the hypothesis and its nrefs >= 1 references (sacreBLEU's references for
 * this segment, one from each reference stream; "" is a valid, empty reference). Strings are
 * taken whole, with no trimming (BLEU itself applies sacreBLEU's rstrip() before tokenizing);
 * _n takes explicit byte lengths (NUL bytes are then ordinary characters), the other
 * NUL-terminated strings. MEGA_ERR_INVALID (NULL strings, nrefs < 1, a sentence of 2^31 words
 * or characters), MEGA_ERR_OOM; on failure nothing is added. */
MEGA_API mega_status mega_metrics_add(mega_metrics *m, const char *hyp, const char *const *refs, int nrefs);
MEGA_API mega_status mega_metrics_add_n(mega_metrics *m, const char *hyp, size_t hyp_len, const char *const *refs,
                               const size_t *ref_lens, int nrefs);
MEGA_API int64_t mega_metrics_sentences(const mega_metrics *m); /* segments added */

/* sacreBLEU's BLEUScore: orders 1..order are used in the arrays */
typedef struct {
    double score;                                  /* 0..100 (0 when nothing matched, e.g. sys_len 0) */
    double precisions[MEGA_METRICS_MAX_ORDER];     /* percent, after smoothing (BLEUScore.precisions) */
    int64_t counts[MEGA_METRICS_MAX_ORDER];        /* clipped n-gram matches (before add-k) */
    int64_t totals[MEGA_METRICS_MAX_ORDER];        /* hypothesis n-grams (before add-k) */
    double bp;                                     /* brevity penalty (0 when sys_len is 0 < ref_len) */
    double ratio;                                  /* sys_len / ref_len, 0 when ref_len is 0 */
    int64_t sys_len, ref_len;                      /* tokens; ref_len sums the closest reference lengths */
    int order;                                     /* max_ngram_order */
} mega_bleu_score;

/* sacreBLEU's CHRFScore, with the summed statistics: index i < char_order is the character
 * (i+1)-grams, then word_order entries for the word n-grams */
typedef struct {
    double score; /* 0..100 */
    int64_t hyp[2 * MEGA_METRICS_MAX_ORDER], ref[2 * MEGA_METRICS_MAX_ORDER], match[2 * MEGA_METRICS_MAX_ORDER];
    int char_order, word_order, beta;
    char name[48]; /* "chrF2", "chrF2++" (f'chrF{beta}' + '+' * word_order) */
} mega_chrf_score;

typedef struct {
    double score;      /* 100 * matches / sentences (0 with no sentences) */
    int64_t matches;   /* hypotheses byte-equal to one of their references */
    int64_t sentences;
} mega_exact_score;

/* The corpus scores of everything added so far (with nothing added: every field 0; sacreBLEU
 * refuses an empty corpus). MEGA_ERR_INVALID for NULL arguments only. */
MEGA_API mega_status mega_metrics_bleu(const mega_metrics *m, mega_bleu_score *out);
MEGA_API mega_status mega_metrics_chrf(const mega_metrics *m, mega_chrf_score *out);
MEGA_API mega_status mega_metrics_exact_match(const mega_metrics *m, mega_exact_score *out);
/* BLEU from summed statistics (sacreBLEU's BLEU.compute_bleu): counts[n-1] clipped matches and
 * totals[n-1] hypothesis n-grams for n = 1..opts->max_ngram_order, with opts' smoothing and
 * effective order (opts NULL: defaults; the other options are not used). MEGA_ERR_INVALID for
 * NULL arrays or invalid options. */
MEGA_API mega_status mega_bleu_compute(const int64_t *counts, const int64_t *totals, int64_t sys_len, int64_t ref_len,
                              const mega_metrics_options *opts, mega_bleu_score *out);

/* sacreBLEU's signature strings (format as snprintf: returns the full length, -1 for m NULL):
 *   BLEU  "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
 *   chrF  "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"
 * nrefs is "var" when segments had different numbers of references (0 before any was added);
 * floor and add-k smoothing print their value as sacreBLEU does ("smooth:floor[0.10]"). */
MEGA_API int mega_metrics_bleu_signature(const mega_metrics *m, char *buf, size_t cap);
MEGA_API int mega_metrics_chrf_signature(const mega_metrics *m, char *buf, size_t cap);

/* sacreBLEU's Tokenizer13a()(line) (mteval-v13a: "<skipped>" dropped, "-\n" joined, "\n" to a
 * space, &quot; &amp; &lt; &gt; decoded; punctuation split off, "." and "," unless between
 * digits, "-" after a digit; words joined by single spaces) of line[0..n), written to out as a
 * NUL-terminated string cut to fit cap bytes. Returns the full length (as snprintf), or
 * (size_t)-1 when out of memory (out then ""). */
MEGA_API size_t mega_tokenize_13a(const char *line, size_t n, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* MEGA_METRICS_H */
