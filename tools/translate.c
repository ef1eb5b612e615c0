/*
 * mega translate: one translation per input line with a trained encoder–decoder; and the
 * evaluation of such a model on parallel text (mega eval --task translate): the report of the
 * library's mega_s2s_evaluate_translations (corpus BLEU and chrF as sacreBLEU computes them, exact
 * match, the teacher-forced loss, and the copy baseline) and its memory check.
 */
#include "common.h"
#include "models.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Model output bytes as one line of text: valid UTF-8 sequences are copied, every byte of an
 * invalid one becomes U+FFFD, and line breaks and tabs become spaces (one line per input).
 * out needs 3n + 1 bytes. Returns the length. */
static size_t bytes_to_line(const uint8_t *b, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t ok = mega_utf8_check(b + i, n - i);
        /* copy the valid prefix, then one replacement per invalid byte */
        for (size_t k = 0; k < ok; k++) {
            uint8_t c = b[i + k];
            out[o++] = (char)(c == '\n' || c == '\r' || c == '\t' ? ' ' : c);
        }
        i += ok;
        if (i < n) {
            out[o++] = (char)0xEF, out[o++] = (char)0xBF, out[o++] = (char)0xBD;
            i++;
        }
    }
    out[o] = 0;
    return o;
}


/* a token row of one side (tgt: the target) as text: subword units decoded to their bytes, or the
 * bytes (ids < 256) of a byte vocabulary (</s> and <pad> give nothing); out needs
 * `bytes_cap(d, tgt, n)` bytes, NUL-terminated */
static size_t tokens_text(const s2s_dicts *d, int tgt, const int32_t *t, int n, char *out) {
    const size_t k = mega_bpe_decode(tgt ? d->tgt_bpe : d->src_bpe, t, (size_t)n, (uint8_t *)out);
    out[k] = 0;
    return k;
}
static size_t bytes_cap(const s2s_dicts *d, int tgt, int n) {
    return (tgt ? d->tgt_longest : d->src_longest) * (size_t)(n > 0 ? n : 0) + 1;
}

/* whether the search's length limit counts the source in bytes: subword sources with byte
 * targets (--bpe-sides source), where a * (source tokens) + b would cut translations short */
static int limit_in_bytes(const s2s_dicts *d) { return d->src_bpe && !d->tgt_bpe; }

/* A line of source text into ids with the source dictionary (its words, then </s>), at most max;
 * 0, or -1 with the reason in why. */
static int fdict_tokenize(const mega_fdict *d, const char *line, size_t n, int max, int32_t *ids, int *len, char *why,
                          size_t wn) {
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--; /* the line's end is the one </s> */
    size_t cnt = 0;
    if (mega_fdict_encode(d, (const uint8_t *)line, n, 1, NULL, &cnt, NULL) != MEGA_OK)
        return snprintf(why, wn, "%s", mega_last_error()), -1;
    if (cnt > (size_t)max) return snprintf(why, wn, "source: %zu tokens, more than the limit of %d", cnt, max), -1;
    mega_fdict_encode(d, (const uint8_t *)line, n, 1, ids, &cnt, NULL); /* counted above */
    *len = (int)cnt;
    return 0;
}

/* The words of a hypothesis as one line (out: cap bytes); with remove_bpe the subword-nmt joins
 * "@@ " are undone as fairseq's --post-process subword_nmt does. Returns the length. */
static size_t fdict_line(const mega_fdict *d, const int32_t *tok, int n, int remove_bpe, char *out, size_t cap) {
    size_t o = 0;
    int line_start = 1;
    for (int i = 0; i < n && o + 1 < cap; i++) {
        if (tok[i] == mega_fdict_get_specials(d).eos) continue; /* one line per input */
        o += mega_fdict_decode(d, tok[i], &line_start, out + o, cap - 1 - o);
    }
    out[o] = 0;
    if (remove_bpe) {
        size_t w = 0;
        for (size_t r = 0; r < o;) {
            if (out[r] == '@' && r + 1 < o && out[r + 1] == '@' && (r + 2 == o || out[r + 2] == ' ')) {
                r += r + 2 == o ? 2 : 3;
                continue;
            }
            out[w++] = out[r++];
        }
        out[o = w] = 0;
    }
    return o;
}

/* the longest source the model accepts (the encoder's relative table: Mega's simple bias under
 * full attention); mega serve's /v1/translate too */
int s2s_max_source(const mega_s2s *m) {
    mega_block_context x;
    mega_block_context_of(&mega_s2s_get_config(m)->encoder, 0, &x);
    return x.positions > 0 ? x.positions : 1 << 20;
}

/* translate n sources (tok rows of width S, right-padded) into out (rows of cap), lengths */
static int translate_batch(mega_s2s *m, const int32_t *src, int n, int S, const mega_s2s_search *p, int32_t *out,
                           int *len, int cap) {
    if (mega_s2s_translate(m, src, n, S, p, out, len, cap, NULL) != MEGA_OK) return cli_error("%s", mega_last_error());
    return 0;
}

/* ---- mega translate ------------------------------------------------------------------------ */

/* One line of `in` into *buf: at most lim bytes are kept (the rest of a longer line is read and
 * dropped, so one enormous line cannot exhaust the memory); *full receives the line's whole
 * length (its newline included). Returns the bytes kept, -1 at the end of input, -2 when out of
 * memory, -3 for a line beyond LINE_HARD_MAX bytes (not worth reading to its end). */
#define LINE_HARD_MAX ((size_t)64 << 20)
static long read_line_bounded(FILE *in, char **buf, size_t *cap, size_t lim, size_t *full) {
    size_t n = 0, all = 0;
    int c = EOF;
    while ((c = getc(in)) != EOF) {
        if (++all > LINE_HARD_MAX) return -3;
        if (n < lim) {
            if (n + 2 > *cap) {
                size_t nc = *cap ? 2 * *cap : 256;
                if (nc > lim + 2) nc = lim + 2;
                char *nb = realloc(*buf, nc);
                if (!nb) return -2;
                *buf = nb, *cap = nc;
            }
            (*buf)[n++] = (char)c;
        }
        if (c == '\n') break;
    }
    if (all == 0 && c == EOF) return -1;
    if (*buf) (*buf)[n] = 0;
    *full = all;
    return (long)n;
}

/* bytes of an output line of up to L tokens: 3 per byte (U+FFFD), or the longest word + 1 each */
static size_t text_cap(const s2s_dicts *d, int L) {
    size_t w = 4;
    for (int i = 0; d->tgt && i < mega_fdict_size(d->tgt); i++) {
        const char *t = mega_fdict_token(d->tgt, i);
        if (t && strlen(t) + 1 > w) w = strlen(t) + 1;
    }
    return (d->tgt ? w : 3 * (d->tgt_longest ? d->tgt_longest : 1)) * (size_t)L + 1;
}

/* mega translate's batch of source lines: rows of capS tokens while lines are added (the row
 * grows with the longest source), compacted to the batch's width when it is translated */
typedef struct {
    mega_s2s *m;
    const s2s_dicts *dc;
    mega_s2s_search sp;
    int batch, capS, capL, nb, remove_bpe;
    int32_t *src, *one, *out;
    int *slen, *ok, *olen, *limn; /* limn: the length each search limit counts */
    char *text;
    uint8_t *raw; /* a byte or subword model's output bytes */
} tr_batch;

static void tr_free(tr_batch *b) {
    free(b->src), free(b->one), free(b->out), free(b->slen), free(b->ok), free(b->olen), free(b->limn), free(b->text);
    free(b->raw);
}

/* widen the rows to hold n tokens; nonzero (reported) when out of memory */
static int tr_widen(tr_batch *b, int n) {
    if (n <= b->capS) return 0;
    int32_t *ns = malloc((size_t)b->batch * n * sizeof(int32_t)), *no = realloc(b->one, (size_t)n * sizeof(int32_t));
    if (no) b->one = no;
    if (!ns || !no) {
        free(ns);
        return cli_error("out of memory for a line of %d bytes", n - 2);
    }
    for (int i = 0; i < b->nb; i++) memcpy(ns + (size_t)i * n, b->src + (size_t)i * b->capS, (size_t)b->capS * sizeof(int32_t));
    free(b->src), b->src = ns, b->capS = n;
    return 0;
}

/* line (n bytes read of a line of full bytes) into the next row; a line that cannot be tokenized
 * is reported and becomes a placeholder row (its output is not printed): *bad is set */
static void tr_add(tr_batch *b, const char *line, size_t n, size_t full, size_t lim, const char *where, long lineno,
                   int strict, int *bad) {
    const int32_t eos = mega_s2s_get_config(b->m)->eos_idx;
    const int maxS = s2s_max_source(b->m);
    int len = 0;
    char why[256] = "";
    mega_status st = MEGA_ERR_INVALID;
    if (full > n)
        snprintf(why, sizeof why, "source: a line of %zu bytes, more than the limit of %zu", full, lim - 8);
    else if (b->dc->src)
        st = fdict_tokenize(b->dc->src, line, n, maxS, b->one, &len, why, sizeof why) ? MEGA_ERR_INVALID : MEGA_OK;
    else if ((st = mega_s2s_tokenize_bpe(b->dc->src_bpe, line, n, maxS, b->one, &len)) != MEGA_OK)
        snprintf(why, sizeof why, "%s", mega_last_error());
    const int nb = b->nb;
    b->ok[nb] = st == MEGA_OK;
    *bad = !b->ok[nb];
    if (*bad) {
        fprintf(stderr, "mega translate: %s line %ld: %s%s\n", where, lineno, why, strict ? "" : " (empty output line)");
        b->one[0] = eos, len = 1;
    }
    memcpy(b->src + (size_t)nb * b->capS, b->one, (size_t)len * sizeof(int32_t));
    size_t mb = n; /* the line's bytes without its end */
    if (mb && line[mb - 1] == '\n') mb--;
    if (mb && line[mb - 1] == '\r') mb--;
    b->limn[nb] = limit_in_bytes(b->dc) && b->ok[nb] ? (int)mb + 1 : len;
    b->slen[b->nb++] = len;
}

/* translate the batch (lines first..) and print one line per source; nonzero (reported) on failure */
static int tr_flush(tr_batch *b, long first) {
    const int nb = b->nb;
    const int32_t padi = mega_s2s_get_config(b->m)->padding_idx;
    int S = 0, SL = 0;
    for (int i = 0; i < nb; i++) S = b->slen[i] > S ? b->slen[i] : S, SL = b->limn[i] > SL ? b->limn[i] : SL;
    /* compact to width S, right-padded */
    for (int i = 0; i < nb; i++) {
        memmove(b->src + (size_t)i * S, b->src + (size_t)i * b->capS, (size_t)b->slen[i] * sizeof(int32_t));
        for (int t = b->slen[i]; t < S; t++) b->src[(size_t)i * S + t] = padi;
    }
    b->sp.limit_src_len = b->limn;
    const int need = (int)(b->sp.max_len_a * SL + b->sp.max_len_b) + 2;
    if (need > b->capL || !b->out) {
        b->capL = need > b->capL ? need : b->capL;
        free(b->out), free(b->text), free(b->raw);
        b->out = malloc((size_t)b->batch * b->capL * sizeof(int32_t));
        b->text = malloc(text_cap(b->dc, b->capL));
        b->raw = malloc(bytes_cap(b->dc, 1, b->capL));
        if (!b->out || !b->text || !b->raw) return cli_error("out of memory");
    }
    if (translate_batch(b->m, b->src, nb, S, &b->sp, b->out, b->olen, b->capL))
        return cli_error("lines %ld-%ld", first, first + nb - 1);
    for (int i = 0; i < nb; i++) {
        const int32_t *o = b->out + (size_t)i * b->capL;
        if (!b->ok[i]) b->text[0] = 0;
        else if (b->dc->tgt) fdict_line(b->dc->tgt, o, b->olen[i], b->remove_bpe, b->text, text_cap(b->dc, b->capL));
        else bytes_to_line(b->raw, tokens_text(b->dc, 1, o, b->olen[i], (char *)b->raw), b->text);
        fputs(b->text, stdout);
        fputc('\n', stdout);
    }
    fflush(stdout);
    if (out_failed()) return 1; /* nobody reads the rest: stop translating */
    b->nb = 0; /* back to the wide layout for the next batch */
    return 0;
}

int cmd_translate(int argc, char **argv) {
    const char *model = NULL, *input = NULL;
    int threads = 0, batch = 32, strict = 0, remove_bpe = 0;
    mega_s2s_search sp;
    mega_s2s_search_default(&sp);
    cli_flag fl[] = {
        {"model", F_STR, &model, "checkpoint directory of a `mega train --task translate` run or of a converted official model (or its model.safetensors)", NULL, 1, 0, 0},
        WHICH_FLAG,
        {"input", F_STR, &input, "source sentences, one per line (default: standard input)", NULL, 1, 0, 0},
        SEARCH_FLAGS("", &sp),
        {"batch", F_INT, &batch, "sentences translated together", NULL, 1, 1 << 16, 0},
        {"remove-bpe", F_SET, &remove_bpe, "models with fairseq dictionaries: join subword-nmt pieces (\"@@ \") in the output", NULL, 1, 0, 0},
        {"strict", F_SET, &strict, "stop at the first bad input line (default: print an empty line, report it, exit 1 at the end)", NULL, 1, 0, 0},
        {"threads", F_INT, &threads, "threads (0 = all cores)", NULL, 0, 4096, 0},
        FL_END};
    int r = cli_parse("translate", "--model DIR [--input FILE] [--beam K] [--lenpen A] [--max-len-a A --max-len-b B]", fl,
                      argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model) return cli_error("--model DIR is required (see 'mega translate --help')"), 2;
    mega_set_threads(threads);
    FILE *in = stdin;
    if (input && !(in = open_input(input, "--input"))) return 2; /* regular files only; stdin when absent */
    const char *where = input ? input : "stdin";
    s2s_dicts dicts;
    tr_batch b = {0};
    if (load_s2s(model, &b.m, &dicts, 1)) {
        if (in != stdin) fclose(in);
        return 2;
    }
    b.dc = &dicts, b.sp = sp, b.batch = batch, b.capS = 256, b.capL = 64, b.remove_bpe = remove_bpe;
    b.src = malloc((size_t)batch * b.capS * sizeof(int32_t)), b.one = malloc((size_t)b.capS * sizeof(int32_t));
    b.slen = calloc((size_t)batch, sizeof(int)), b.ok = calloc((size_t)batch, sizeof(int));
    b.olen = calloc((size_t)batch, sizeof(int)), b.limn = calloc((size_t)batch, sizeof(int));
    int rc = !b.src || !b.one || !b.slen || !b.ok || !b.olen || !b.limn ? cli_error("out of memory") : 0, bad = 0;
    long lineno = 0, first = 0;
    char *line = NULL;
    size_t lcap = 0;
    /* a line longer than the model accepts is reported, never held whole (a word model's tokens
     * are at least 2 bytes apart, with the space) */
    const int maxS = s2s_max_source(b.m);
    const size_t lim = (size_t)(maxS < (1 << 20) ? maxS : (1 << 20)) * (dicts.src ? 64 : dicts.src_longest) + 8;
    for (int eof = 0; !rc && !eof;) {
        size_t full = 0;
        long n = read_line_bounded(in, &line, &lcap, lim, &full);
        if (n == -2) {
            cli_error("out of memory reading line %ld", lineno + 1);
            rc = 2;
            break;
        }
        if (n == -3) {
            cli_error("%s line %ld is longer than %zu MiB (not a line of text); stopping", where, lineno + 1, LINE_HARD_MAX >> 20);
            rc = 2;
            break;
        }
        if (n < 0) eof = 1;
        else {
            lineno++;
            if (b.nb == 0) first = lineno;
            if (tr_widen(&b, (int)n + 2)) {
                rc = 1;
                break;
            }
            int b1 = 0;
            tr_add(&b, line, (size_t)n, full, lim, where, lineno, strict, &b1);
            bad += b1;
            if (b1 && strict) {
                rc = 1;
                break;
            }
        }
        if ((b.nb == batch || (eof && b.nb > 0)) && tr_flush(&b, first)) rc = 1;
    }
    if (!rc && bad) {
        fprintf(stderr, "mega translate: %d of %ld lines could not be translated (see above)\n", bad, lineno);
        rc = 1;
    }
    free(line);
    tr_free(&b);
    if (in != stdin) fclose(in);
    s2s_dicts_free(&dicts);
    mega_s2s_free(b.m);
    return rc ? (rc == 2 ? 2 : 1) : 0;
}

/* ---- mega eval --task translate --------------------------------------------------------------- */

/* the memory an evaluation needs against --max-memory: the weights and the pairs (in memory), the
 * buffers of the largest teacher-forced batch (--max-tokens over the longest pair) and of the
 * search (--batch sources of the longest length, --beam rows each); nonzero (reported) = refuse */
static int eval_memory(mega_s2s *m, const s2s_dicts *dc, const mega_s2s_data *d, const mega_s2s_search *sp, int batch,
                       int max_tokens, int64_t max_memory) {
    const int S = d->src_max, L = d->tgt_max, mx = S > L ? S : L;
    int B = mx > 0 ? max_tokens / mx : 1;
    B = B < 1 ? 1 : B > d->n ? d->n : B;
    mega_memory mm;
    run_memory rm;
    char how[64];
    const uint64_t data_b = (uint64_t)d->pool_n * sizeof(uint16_t) + (uint64_t)d->n * 32; /* tokens, per-pair arrays */
    size_t search = 0;
    const int Bs = batch < d->n ? batch : d->n;
    int bad = mega_s2s_memory(mega_s2s_get_config(m), 0, B, S > 0 ? S : 1, L > 0 ? L : 1, &mm) != MEGA_OK ||
              mega_s2s_search_memory(mega_s2s_get_config(m), Bs,
                                     /* a limit in source bytes: at most the longest token's bytes per token */
                                     (limit_in_bytes(dc) ? S * (int)dc->src_longest : S) + 1, sp, &search) != MEGA_OK;
    if (bad) return cli_error("%s", mega_last_error());
    mm.buffers += search, mm.total += search;
    snprintf(how, sizeof how, "%d pairs of %d -> %d tokens; search %d x %d", B, S, L, Bs, sp->beam);
    return memory_guard("this evaluation", how, "lower --max-tokens or --batch, or ", &mm, data_b, mm.params + data_b,
                        max_memory, &rm);
}

/* --hyp-out: one line per segment, the source and the hypothesis (escaped as in the data) */
static int write_hyps(const char *path, char *const *cp, char *const *hyp, const size_t *hl, int ng) {
    FILE *f = fopen(path, "w");
    if (!f) return cli_error("--hyp-out '%s': %s", path, strerror(errno));
    int rc = 0;
    char *tx = NULL;
    for (int i = 0; !rc && i < ng; i++) {
        free(tx);
        tx = malloc(3 * hl[i] + 1);
        if (!tx) {
            rc = cli_error("out of memory");
            break;
        }
        bytes_to_line((const uint8_t *)hyp[i], hl[i], tx);
        fprintf(f, "%s\t%s\n", cp[i], tx);
    }
    free(tx);
    if (fclose(f) && !rc) rc = cli_error("--hyp-out '%s': write failed", path);
    return rc;
}

/* the search's progress (the library's callback): segments translated of all */
static void search_progress(void *ctx, int64_t done, int64_t total, double value) {
    (void)value;
    if (progress_due(ctx, done >= total)) progress_print(ctx, "  translating %lld/%lld segments", (long long)done, (long long)total);
}

int eval_translate(const char *model, const char *data, const mega_s2s_search *sp, int batch, int64_t max_examples,
                   int group, int max_tokens, const char *hyp_out, int quiet, int64_t max_memory) {
    mega_s2s *m = NULL;
    s2s_dicts dc;
    if (load_s2s(model, &m, &dc, 0)) return 2;
    mega_s2s_opts o = {s2s_max_source(m), 0, (int)(max_examples > 0 && max_examples < (1 << 30) ? max_examples : 0), 0, "--data",
                       "the model's max-positions", dc.src_bpe, dc.tgt_bpe};
    mega_s2s_data d;
    if (mega_s2s_data_load(data, &o, &d) != MEGA_OK) {
        cli_error("%s", mega_last_error());
        s2s_dicts_free(&dc);
        mega_s2s_free(m);
        return 2;
    }
    if (d.n > 0 && eval_memory(m, &dc, &d, sp, batch, max_tokens, max_memory)) {
        mega_s2s_data_free(&d);
        s2s_dicts_free(&dc);
        mega_s2s_free(m);
        return 2;
    }
    char sk[512];
    if (mega_s2s_skip_summary(&d, sk, sizeof sk)) fprintf(stderr, "mega eval: skipped in %s: %s\n", data, sk);
    progress_t pr;
    progress_init(&pr, stderr, quiet, 10);
    const mega_s2s_translation_opts eo = {*sp, batch, max_tokens, group, dc.src_bpe, dc.tgt_bpe, search_progress, &pr};
    mega_s2s_translation_eval r;
    int rc = mega_s2s_evaluate_translations(m, &d, &eo, &r) != MEGA_OK;
    progress_break(&pr);
    if (rc) cli_error("%s", mega_last_error());
    if (!rc) {
        const int n = d.n;
        printf("data        %s: %d pairs, %d segments (%s), %d lines skipped\n", data, n, r.segments,
               group ? "lines with the same source share one segment, its targets the references" : "one per line",
               d.n_skipped);
        printf("loss        %.4f nats/token (teacher forcing, %lld target tokens), token accuracy %.4f\n", r.nll,
               (long long)r.tokens, r.acc);
        if (dc.tgt_bpe) /* comparable with a byte model's loss: per byte, </s> counted as one */
            printf("            %.4f nats per target byte (%lld bytes + %d </s>; %d byte-pair merges, %.2f bytes per token)\n",
                   r.nll * (double)r.tokens / (double)(d.n_tgt_bytes + d.n), (long long)d.n_tgt_bytes, d.n,
                   mega_bpe_merges(dc.tgt_bpe), (double)d.n_tgt_bytes / (double)(d.n_tgt_tokens - d.n));
        printf("search      beam %d, lenpen %g, max length %g * source%s + %d\n", sp->beam, sp->lenpen, sp->max_len_a,
               limit_in_bytes(&dc) ? " bytes" : "", sp->max_len_b);
        printf("%-12s %8s %8s %12s\n", "", "BLEU", "chrF2", "exact match");
        printf("%-12s %8.2f %8.2f %11.2f%%\n", "model", r.bleu[0].score, r.chrf[0].score, r.exact[0].score);
        printf("%-12s %8.2f %8.2f %11.2f%%\n", "copy source", r.bleu[1].score, r.chrf[1].score, r.exact[1].score);
        printf("BLEU signature  %s\nchrF signature  %s\n", r.bleu_signature, r.chrf_signature);
        printf("speed       %.1f s teacher-forced, %.1f s search (%.0f output tokens/s)\n", r.forced_seconds,
               r.search_seconds, (double)r.out_tokens / (r.search_seconds > 0 ? r.search_seconds : 1e-9));
        if (hyp_out) rc = write_hyps(hyp_out, r.source, r.hyp, r.hyp_len, r.segments);
        mega_s2s_translation_eval_free(&r);
    }
    mega_s2s_data_free(&d);
    s2s_dicts_free(&dc);
    mega_s2s_free(m);
    return rc ? 2 : 0;
}
