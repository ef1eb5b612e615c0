/* The translation metrics on arbitrary bytes: mega_metrics_add_n (BLEU statistics with the 13a
 * or no tokenizer, chrF / chrF++ statistics), the corpus scores and signatures, and
 * mega_tokenize_13a. The first five bytes are the options:
 *   byte 0: bit 0 tokenizer none, bits 1-2 smoothing, bit 3 effective order, bit 4 whitespace
 *           kept, bit 5 eps smoothing, bits 6-7 the smoothing value (default, 0, 0.5, 1)
 *   byte 1: bits 0-3 max n-gram order - 1, bits 4-7 chrF character order
 *   byte 2: bits 0-4 chrF word order (mod 17), bits 5-7 beta
 *   byte 3: the field separator       byte 4: references per segment - 1 (mod 3)
 * and the rest is fields (hypothesis, references, hypothesis, ...) cut at the separator; NUL
 * bytes are ordinary characters. Invariants: scores are finite and within [0, 100], the
 * tokenizer's length is its output's, and cutting the output to fit never overflows. */
#include "fuzz_common.h"

#include <math.h>

#define MAX_FIELDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const unsigned b0 = fz_byte(&in), b1 = fz_byte(&in), b2 = fz_byte(&in), sep = fz_byte(&in), b4 = fz_byte(&in);
    static const double smooth_values[4] = {-1.0, 0.0, 0.5, 1.0};
    mega_metrics_options o = mega_metrics_defaults();
    o.tokenize = (b0 & 1) ? MEGA_BLEU_TOK_NONE : MEGA_BLEU_TOK_13A;
    o.smooth_method = (mega_bleu_smooth)((b0 >> 1) & 3);
    o.effective_order = (b0 >> 3) & 1;
    o.whitespace = (b0 >> 4) & 1;
    o.eps_smoothing = (b0 >> 5) & 1;
    o.smooth_value = smooth_values[(b0 >> 6) & 3];
    o.max_ngram_order = 1 + (int)(b1 & 15);
    o.char_order = (int)(b1 >> 4);
    o.word_order = (int)((b2 & 31) % 17);
    o.beta = (int)(b2 >> 5);
    const int nrefs = 1 + (int)(b4 % 3);

    /* the 13a tokenizer on everything, with a roomy and a tight output buffer */
    char *line = fz_cstr(in.p, in.n);
    size_t cap = 4 * in.n + 16;
    char *out = malloc(cap), small[8];
    FZ_CHECK(out);
    size_t need = mega_tokenize_13a(line, in.n, out, cap);
    FZ_CHECK(need != (size_t)-1 && need < cap && out[need] == 0); /* (NUL bytes are characters too) */
    FZ_CHECK(mega_tokenize_13a(line, in.n, small, sizeof small) == need);
    const size_t k = need < sizeof small ? need : sizeof small - 1;
    FZ_CHECK(small[k] == 0 && !memcmp(small, out, k));
    free(out);
    free(line);

    mega_metrics *m = NULL;
    if (mega_metrics_new(&o, &m) != MEGA_OK) {
        FZ_CHECK(m == NULL && o.char_order + o.word_order == 0);
        return 0;
    }
    /* the fields, each an exact-size heap copy (so reading past one is an ASan report) */
    char *f[MAX_FIELDS];
    size_t fl[MAX_FIELDS];
    int nf = 0;
    size_t st = 0;
    for (size_t i = 0; i <= in.n && nf < MAX_FIELDS; i++)
        if (i == in.n || in.p[i] == sep) {
            fl[nf] = i - st;
            f[nf] = malloc(fl[nf] ? fl[nf] : 1);
            FZ_CHECK(f[nf]);
            if (fl[nf]) memcpy(f[nf], in.p + st, fl[nf]);
            nf++;
            st = i + 1;
        }
    static const char empty[1] = "";
    int64_t added = 0;
    for (int i = 0; i < nf; i += 1 + nrefs) {
        const char *refs[3];
        size_t rl[3];
        for (int r = 0; r < nrefs; r++) {
            const int k = i + 1 + r;
            refs[r] = k < nf ? f[k] : empty;
            rl[r] = k < nf ? fl[k] : 0;
        }
        FZ_CHECK(mega_metrics_add_n(m, f[i], fl[i], refs, rl, nrefs) == MEGA_OK);
        added++;
    }
    FZ_CHECK(mega_metrics_sentences(m) == added);
    mega_bleu_score bleu;
    mega_chrf_score chrf;
    mega_exact_score ex;
    FZ_CHECK(mega_metrics_bleu(m, &bleu) == MEGA_OK);
    FZ_CHECK(isfinite(bleu.score) && bleu.score >= 0 && bleu.score <= 100 + 1e-9);
    FZ_CHECK(bleu.bp >= 0 && bleu.bp <= 1);
    for (int n = 0; n < o.max_ngram_order; n++) FZ_CHECK(bleu.counts[n] >= 0 && bleu.counts[n] <= bleu.totals[n]);
    FZ_CHECK(mega_metrics_chrf(m, &chrf) == MEGA_OK);
    FZ_CHECK(isfinite(chrf.score) && chrf.score >= 0 && chrf.score <= 100 + 1e-9);
    for (int n = 0; n < o.char_order + o.word_order; n++)
        FZ_CHECK(chrf.match[n] >= 0 && chrf.match[n] <= chrf.hyp[n] && chrf.match[n] <= chrf.ref[n]);
    FZ_CHECK(mega_metrics_exact_match(m, &ex) == MEGA_OK && ex.matches <= ex.sentences && ex.sentences == added);
    char sig[160];
    FZ_CHECK(mega_metrics_bleu_signature(m, sig, sizeof sig) > 0 && mega_metrics_chrf_signature(m, sig, sizeof sig) > 0);
    mega_metrics_reset(m);
    FZ_CHECK(mega_metrics_sentences(m) == 0);
    for (int i = 0; i < nf; i++) free(f[i]);
    mega_metrics_free(m);
    return 0;
}
