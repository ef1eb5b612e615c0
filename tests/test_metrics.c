/* Translation metrics (src/data/metrics.c) against sacreBLEU 2.6.0:
 *  - the cases of tests/fixtures/metrics/sacrebleu_cases.txt (copied from sacreBLEU's own tests at
 *    tag v2.6.0; the file's header gives the format and the tolerance rule);
 *  - the 13a tokenizer on tricky strings, expected outputs printed by sacreBLEU v2.6.0's
 *    Tokenizer13a (sacrebleu/tokenizers/tokenizer_13a.py at commit 2277cacc);
 *  - a few small cases computed by hand (arithmetic in the comments);
 *  - the API: empty corpora, reset, exact match, signatures, bad arguments, embedded NUL bytes,
 *    random bytes (invalid UTF-8 never fails).
 * Usage: build/test_metrics [fixture file] (run from the repository root). */
#include "mega_data.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * the fixture file */

typedef struct {
    char kind[16], name[96];
    mega_metrics_options o;
    char **hyp, ***refs; /* hyp[s], refs[s][r] */
    size_t *hyp_len, **ref_len;
    int nseg, *nref, cap;
    int64_t counts[MEGA_METRICS_MAX_ORDER], totals[MEGA_METRICS_MAX_ORDER], sys_len, ref_len_stat;
    int nstats;
} fx_case;

/* the text of a seg/ref line with its escapes resolved (malloc'd, *n bytes) */
static char *unescape(const char *s, size_t *n) {
    size_t len = strlen(s), k = 0;
    char *out = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\\' || i + 1 >= len) {
            out[k++] = s[i];
            continue;
        }
        char c = s[++i];
        if (c == 'n') out[k++] = '\n';
        else if (c == 't') out[k++] = '\t';
        else if (c == '\\') out[k++] = '\\';
        else if (c == 'x' && i + 2 < len + 1) {
            char h[3] = {s[i + 1], s[i + 2], 0};
            out[k++] = (char)strtol(h, NULL, 16);
            i += 2;
        } else out[k++] = '\\', out[k++] = c;
    }
    out[k] = 0;
    *n = k;
    return out;
}

static void case_free(fx_case *c) {
    for (int s = 0; s < c->nseg; s++) {
        free(c->hyp[s]);
        for (int r = 0; r < c->nref[s]; r++) free(c->refs[s][r]);
        free(c->refs[s]), free(c->ref_len[s]);
    }
    free(c->hyp), free(c->refs), free(c->hyp_len), free(c->ref_len), free(c->nref);
    memset(c, 0, sizeof *c);
}

static void parse_opt(fx_case *c, char *s) {
    for (char *tok = strtok(s, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        mega_metrics_options *o = &c->o;
        if (!strcmp(k, "tok")) o->tokenize = !strcmp(v, "none") ? MEGA_BLEU_TOK_NONE : MEGA_BLEU_TOK_13A;
        else if (!strcmp(k, "smooth"))
            o->smooth_method = !strcmp(v, "none")    ? MEGA_BLEU_SMOOTH_NONE
                               : !strcmp(v, "floor") ? MEGA_BLEU_SMOOTH_FLOOR
                               : !strcmp(v, "add-k") ? MEGA_BLEU_SMOOTH_ADD_K
                                                     : MEGA_BLEU_SMOOTH_EXP;
        else if (!strcmp(k, "value")) o->smooth_value = atof(v);
        else if (!strcmp(k, "order")) o->max_ngram_order = atoi(v);
        else if (!strcmp(k, "eff")) o->effective_order = atoi(v);
        else if (!strcmp(k, "nc")) o->char_order = atoi(v);
        else if (!strcmp(k, "nw")) o->word_order = atoi(v);
        else if (!strcmp(k, "beta")) o->beta = atoi(v);
        else if (!strcmp(k, "space")) o->whitespace = atoi(v);
        else if (!strcmp(k, "eps")) o->eps_smoothing = atoi(v);
        else tl_check(0, "fixture: unknown option %s", k);
    }
}

static int parse_list(const char *s, int64_t *v, int max) {
    int n = 0;
    while (*s && n < max) {
        char *e;
        v[n++] = strtoll(s, &e, 10);
        if (*e != ',') break;
        s = e + 1;
    }
    return n;
}

/* decimals printed in a number's text */
static int decimals(const char *s) {
    const char *dot = strchr(s, '.');
    if (!dot) return 0;
    int d = 0;
    for (dot++; *dot >= '0' && *dot <= '9'; dot++) d++;
    return d;
}

/* got matches the printed value `want` (half a unit of its last digit, at least 1e-12 relative) */
static int close_to(double got, const char *want, double tol) {
    double w = strtod(want, NULL);
    if (tol <= 0) {
        tol = 0.5 * pow(10.0, -decimals(want));
        double rel = 1e-12 * (fabs(w) > 1 ? fabs(w) : 1);
        if (tol < rel) tol = rel;
    }
    return isfinite(got) && fabs(got - w) <= tol;
}

static void check_expect(const fx_case *c, const char *line, const mega_bleu_score *b, const mega_chrf_score *f,
                         const char *sig) {
    char field[32] = {0}, value[512] = {0};
    double tol = 0;
    const char *sp = strchr(line, ' ');
    if (!sp) {
        tl_check(0, "%s %s: bad expect line", c->kind, c->name);
        return;
    }
    snprintf(field, sizeof field, "%.*s", (int)(sp - line), line);
    snprintf(value, sizeof value, "%s", sp + 1);
    char *t = strstr(value, " tol=");
    if (t) tol = atof(t + 5), *t = 0;
    int is_bleu = strcmp(c->kind, "chrf") != 0;
    if (!strcmp(field, "score")) {
        double got = is_bleu ? b->score : f->score;
        tl_check(close_to(got, value, tol), "%s %s: score %.10f, sacreBLEU %s%s%s", c->kind, c->name, got, value,
                 t ? " tol=" : "", t ? t + 5 : "");
    } else if (!strcmp(field, "bp")) {
        tl_check(close_to(b->bp, value, tol), "%s %s: bp %.6f, sacreBLEU %s", c->kind, c->name, b->bp, value);
    } else if (!strcmp(field, "ratio")) {
        tl_check(close_to(b->ratio, value, tol), "%s %s: ratio %.6f, sacreBLEU %s", c->kind, c->name, b->ratio, value);
    } else if (!strcmp(field, "sys_len") || !strcmp(field, "ref_len")) {
        int64_t got = field[0] == 's' ? b->sys_len : b->ref_len;
        tl_check(got == atoll(value), "%s %s: %s %lld, sacreBLEU %s", c->kind, c->name, field, (long long)got, value);
    } else if (!strcmp(field, "counts") || !strcmp(field, "totals")) {
        int64_t v[MEGA_METRICS_MAX_ORDER];
        int n = parse_list(value, v, MEGA_METRICS_MAX_ORDER), ok = n == b->order;
        const int64_t *got = field[0] == 'c' ? b->counts : b->totals;
        for (int i = 0; i < n && ok; i++) ok = got[i] == v[i];
        tl_check(ok, "%s %s: %s %lld,%lld,%lld,%lld..., sacreBLEU %s", c->kind, c->name, field, (long long)got[0],
                 (long long)got[1], (long long)got[2], (long long)got[3], value);
    } else if (!strcmp(field, "prec")) {
        char *save = NULL, *p = strtok_r(value, "/", &save);
        int i = 0, ok = 1;
        for (; p; p = strtok_r(NULL, "/", &save), i++) ok &= i < b->order && close_to(b->precisions[i], p, 0);
        tl_check(ok && i == b->order, "%s %s: precisions %.2f/%.2f/%.2f/%.2f", c->kind, c->name, b->precisions[0],
                 b->precisions[1], b->precisions[2], b->precisions[3]);
    } else if (!strcmp(field, "sig")) {
        tl_check(!strcmp(sig, value), "%s %s: signature '%s', expected '%s'", c->kind, c->name, sig, value);
    } else if (!strcmp(field, "name")) {
        tl_check(!strcmp(f->name, value), "%s %s: name '%s', expected '%s'", c->kind, c->name, f->name, value);
    } else {
        tl_check(0, "%s %s: unknown expect field '%s'", c->kind, c->name, field);
    }
}

/* run the case (segments or statistics), then check each expect line of lines[0..n) */
static void run_case(fx_case *c, char **lines, int n) {
    mega_bleu_score b;
    mega_chrf_score f;
    char sig[256] = "";
    memset(&b, 0, sizeof b), memset(&f, 0, sizeof f);
    if (!strcmp(c->kind, "bleu-stats")) {
        mega_status st = mega_bleu_compute(c->counts, c->totals, c->sys_len, c->ref_len_stat, &c->o, &b);
        tl_check(st == MEGA_OK && c->nstats == 1, "bleu-stats %s: mega_bleu_compute (%s)", c->name, mega_last_error());
    } else {
        mega_metrics *m = NULL;
        mega_status st = mega_metrics_new(&c->o, &m);
        tl_check(st == MEGA_OK, "%s %s: mega_metrics_new (%s)", c->kind, c->name, mega_last_error());
        if (st != MEGA_OK) return;
        for (int s = 0; s < c->nseg && st == MEGA_OK; s++)
            st = mega_metrics_add_n(m, c->hyp[s], c->hyp_len[s], (const char *const *)c->refs[s], c->ref_len[s],
                                    c->nref[s]);
        tl_check(st == MEGA_OK && c->nseg > 0, "%s %s: add %d segments (%s)", c->kind, c->name, c->nseg,
                 mega_last_error());
        mega_metrics_bleu(m, &b);
        mega_metrics_chrf(m, &f);
        if (!strcmp(c->kind, "bleu")) mega_metrics_bleu_signature(m, sig, sizeof sig);
        else mega_metrics_chrf_signature(m, sig, sizeof sig);
        mega_metrics_free(m);
    }
    for (int i = 0; i < n; i++) check_expect(c, lines[i], &b, &f, sig);
}

static int run_fixtures(const char *path) {
    size_t len = 0;
    char *text = (char *)tl_read_file(path, &len);
    if (!text) {
        tl_check(0, "read %s", path);
        return 0;
    }
    int ncases = 0, nexp = 0, in_case = 0;
    char *expects[64];
    fx_case c;
    memset(&c, 0, sizeof c);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || line[0] == 0) continue;
        if (!strncmp(line, "case ", 5)) {
            memset(&c, 0, sizeof c);
            c.o = mega_metrics_defaults();
            sscanf(line + 5, "%15s %95s", c.kind, c.name);
            in_case = 1, nexp = 0;
        } else if (!in_case) {
            tl_check(0, "%s: line outside a case: %.40s", path, line);
        } else if (!strncmp(line, "source", 6)) {
        } else if (!strncmp(line, "opt ", 4)) {
            parse_opt(&c, line + 4);
        } else if (!strncmp(line, "seg", 3) && (line[3] == ' ' || line[3] == 0)) {
            if (c.nseg == c.cap) {
                c.cap = c.cap ? 2 * c.cap : 8;
                c.hyp = realloc(c.hyp, (size_t)c.cap * sizeof *c.hyp);
                c.hyp_len = realloc(c.hyp_len, (size_t)c.cap * sizeof *c.hyp_len);
                c.refs = realloc(c.refs, (size_t)c.cap * sizeof *c.refs);
                c.ref_len = realloc(c.ref_len, (size_t)c.cap * sizeof *c.ref_len);
                c.nref = realloc(c.nref, (size_t)c.cap * sizeof *c.nref);
            }
            int s = c.nseg++;
            c.hyp[s] = unescape(line[3] ? line + 4 : "", &c.hyp_len[s]);
            c.refs[s] = NULL, c.ref_len[s] = NULL, c.nref[s] = 0;
        } else if (!strncmp(line, "ref", 3) && (line[3] == ' ' || line[3] == 0) && c.nseg > 0) {
            int s = c.nseg - 1, r = c.nref[s]++;
            c.refs[s] = realloc(c.refs[s], (size_t)c.nref[s] * sizeof *c.refs[s]);
            c.ref_len[s] = realloc(c.ref_len[s], (size_t)c.nref[s] * sizeof *c.ref_len[s]);
            c.refs[s][r] = unescape(line[3] ? line + 4 : "", &c.ref_len[s][r]);
        } else if (!strncmp(line, "stats ", 6)) {
            char a[256], b[256];
            long long sl, rl;
            if (sscanf(line + 6, "%255s %255s %lld %lld", a, b, &sl, &rl) == 4) {
                int n1 = parse_list(a, c.counts, MEGA_METRICS_MAX_ORDER), n2 = parse_list(b, c.totals, MEGA_METRICS_MAX_ORDER);
                c.sys_len = sl, c.ref_len_stat = rl;
                c.nstats = n1 == n2 && n1 == c.o.max_ngram_order;
            }
        } else if (!strncmp(line, "expect ", 7)) {
            if (nexp < 64) expects[nexp++] = line + 7;
        } else if (!strcmp(line, "end")) {
            run_case(&c, expects, nexp);
            tl_check(nexp > 0, "%s %s: has expectations", c.kind, c.name);
            case_free(&c);
            ncases++, in_case = 0;
        } else {
            tl_check(0, "%s: unknown line: %.40s", path, line);
        }
    }
    free(text);
    return ncases;
}

/* ---------------------------------------------------------------------------------------------
 * the 13a tokenizer */

static void check_tok(const char *in, size_t n, const char *want) {
    char out[512];
    size_t len = mega_tokenize_13a(in, n, out, sizeof out);
    tl_check(len == strlen(want) && !strcmp(out, want), "13a(\"%s\") = \"%s\", sacreBLEU \"%s\"", in, out, want);
}
#define TOK(in, want) check_tok(in, sizeof(in) - 1, want)

static void test_tokenizer(void) {
    /* expected: sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()(line), v2.6.0 */
    TOK("Hello, world.", "Hello , world .");
    TOK("3.14 and 1,000 items.", "3.14 and 1,000 items ."); /* . and , between digits stay */
    TOK("U.S.A. 1.5.2019 .5 ,5 5. 5,", "U . S . A . 1.5.2019 . 5 , 5 5 . 5 ,");
    TOK("end. a,b 2,a a,2", "end . a , b 2 , a a , 2");
    TOK("x..y,,z", "x . . y , , z");
    TOK("9.-1 1-.9", "9 . -1 1 - . 9");
    TOK("pages 10-20 and 5 -6", "pages 10 - 20 and 5 -6"); /* dash split only after a digit */
    TOK("A-B x-ray 2-", "A-B x-ray 2 -");
    TOK("&quot;quoted&quot; &amp; &lt;tag&gt;", "\" quoted \" & < tag >");
    TOK("&amp;lt; &amp;amp; &QUOT; &apos;", "< & amp ; & QUOT ; & apos ;"); /* one pass each, in order */
    TOK("line one-\nline two\nend", "line oneline two end");
    TOK("a<skipped>b <skipped>c", "ab c");
    TOK("naïve café, 中文。 Ünïcödé.", "naïve café , 中文。 Ünïcödé .");
    TOK("\xc3\xa9.\xc3\xa9,1", "\xc3\xa9 . \xc3\xa9 , 1");
    TOK("$5.00, 50%! (really) [odd] {x}", "$ 5.00 , 50 % ! ( really ) [ odd ] { x }");
    TOK("a/b c|d ~e `f^g_h\\i @j #k", "a / b c | d ~ e ` f ^ g _ h \\ i @ j # k");
    TOK("it's O'Neil's", "it's O'Neil's");
    TOK("\xc2\xa0non-breaking\xe3\x80\x80space\xe2\x80\xa8sep\tTab", "non-breaking space sep Tab"); /* Unicode spaces */
    TOK("", "");
    TOK("   ", "");
    TOK("-\n", "");
    /* invalid UTF-8: each bad byte is one (non-digit) character */
    TOK("\xff.\xfe,1 \xe2\x82.", "\xff . \xfe , 1 \xe2\x82 .");
    /* the length is returned when the buffer is short, the output cut and terminated */
    char small[6];
    size_t need = mega_tokenize_13a("Hello, world.", 13, small, sizeof small);
    tl_check(need == 15 && !strcmp(small, "Hello"), "13a: short buffer gives the full length %zu, '%s'", need, small);
    tl_check(mega_tokenize_13a("a,b", 3, NULL, 0) == 5, "13a: NULL buffer with cap 0 gives the length");
    /* an embedded NUL byte is an ordinary character */
    char out[16];
    mega_tokenize_13a("a\0.b", 4, out, sizeof out);
    tl_check(!memcmp(out, "a\0 . b", 7), "13a: an embedded NUL is a character");
}

/* ---------------------------------------------------------------------------------------------
 * small cases by hand */

static void add1(mega_metrics *m, const char *hyp, const char *ref) {
    mega_status st = mega_metrics_add(m, hyp, &ref, 1);
    tl_check(st == MEGA_OK, "add ('%s', '%s'): %s", hyp, ref, mega_last_error());
}

static void test_by_hand(void) {
    mega_metrics *m = NULL;
    mega_bleu_score b;
    mega_chrf_score f;

    /* BLEU, hyp "a b c d" vs ref "a b c e" (13a leaves them alone):
     *   1-grams 3/4, 2-grams 2/3, 3-grams 1/2, 4-grams 0/1 -> exp smoothing: p4 = 100/(2*1) = 50
     *   precisions 75, 66.67, 50, 50; BP 1 (4 = 4)
     *   BLEU = exp((ln 75 + ln 66.666.. + ln 50 + ln 50) / 4) = (75*66.667*50*50)^(1/4)
     *        = 12500000^(1/4) = 59.4603557501361 */
    mega_metrics_new(NULL, &m);
    add1(m, "a b c d", "a b c e");
    mega_metrics_bleu(m, &b);
    tl_check(fabs(b.score - pow(12500000.0, 0.25)) < 1e-9 && b.counts[3] == 0 && b.precisions[3] == 50.0,
             "hand: BLEU 'a b c d'/'a b c e' = %.10f (59.4603557501)", b.score);

    /* short hypothesis "a b" vs "a b c d": 1-grams 2/2, 2-grams 1/1, no 3- or 4-grams: total 0
     * stops the loop with p3 = p4 = 0 -> my_log(0) = -9999999999 -> BLEU 0 (no effective order);
     * BP = exp(1 - 4/2) = exp(-1) = 0.36787944117144233 */
    mega_metrics_reset(m);
    add1(m, "a b", "a b c d");
    mega_metrics_bleu(m, &b);
    tl_check(b.score == 0.0 && fabs(b.bp - exp(-1.0)) < 1e-15 && b.sys_len == 2 && b.ref_len == 4,
             "hand: BLEU short hypothesis = %g (0), BP %.17g", b.score, b.bp);

    /* empty hypothesis: sys_len 0 < ref_len 2 -> BP 0; no matches -> BLEU 0 */
    mega_metrics_reset(m);
    add1(m, "", "a b");
    mega_metrics_bleu(m, &b);
    tl_check(b.score == 0.0 && b.bp == 0.0 && b.sys_len == 0 && b.ref_len == 2 && b.ratio == 0.0,
             "hand: BLEU empty hypothesis 0, BP 0");

    /* chrF2 (defaults) "aa" vs "ab": chars 1: hyp {a:2} ref {a,b} -> 2 hyp, 2 ref, 1 match,
     * P = R = 0.5; 2-grams: {aa} vs {ab} -> 1, 1, 0 -> P = R = 0; orders 3..6: the reference has
     * none, so hyp counts 0 and the order is not effective. Averages over 2 orders: P = R = 0.25;
     * F2 = (1+4) P R / (4 P + R) = 5 * 0.0625 / 1.25 = 0.25 -> 25 */
    mega_metrics_reset(m);
    add1(m, "aa", "ab");
    mega_metrics_chrf(m, &f);
    tl_check(fabs(f.score - 25.0) < 1e-12 && f.hyp[0] == 2 && f.ref[0] == 2 && f.match[0] == 1 && f.hyp[2] == 0,
             "hand: chrF2 'aa'/'ab' = %.12f (25)", f.score);

    /* chrF2 "ab c" vs "abc": whitespace removed, so equal -> orders 1..3 P = R = 1 (4..6 absent) -> 100 */
    mega_metrics_reset(m);
    add1(m, "ab c", "abc");
    mega_metrics_chrf(m, &f);
    tl_check(f.score == 100.0, "hand: chrF2 'ab c'/'abc' = %g (100)", f.score);

    /* chrF2 two segments "ab"/"ab" and "cd"/"xy": corpus sums: 1-grams hyp 4, ref 4, match 2;
     * 2-grams hyp 2, ref 2, match 1 -> P = R = 0.5 at both orders -> F2 = 5*0.25/2.5 = 0.5 -> 50
     * (not the mean of the sentence scores 100 and 0 — the same number here, so also check the
     * statistics) */
    mega_metrics_reset(m);
    add1(m, "ab", "ab");
    add1(m, "cd", "xy");
    mega_metrics_chrf(m, &f);
    tl_check(fabs(f.score - 50.0) < 1e-12 && f.hyp[0] == 4 && f.match[0] == 2 && f.hyp[1] == 2 && f.match[1] == 1,
             "hand: chrF2 corpus statistics summed, score %.12f (50)", f.score);

    /* chrF2 with an empty hypothesis: every hyp count 0 -> no effective order -> 0 */
    mega_metrics_reset(m);
    add1(m, "", "abc");
    mega_metrics_chrf(m, &f);
    tl_check(f.score == 0.0, "hand: chrF2 empty hypothesis = %g (0)", f.score);
    mega_metrics_free(m);
}

/* ---------------------------------------------------------------------------------------------
 * the API */

static void test_api(void) {
    mega_metrics *m = NULL;
    mega_bleu_score b;
    mega_chrf_score f;
    mega_exact_score e;
    char sig[256];

    /* empty corpus: every score 0 */
    tl_check(mega_metrics_new(NULL, &m) == MEGA_OK, "new with defaults");
    mega_metrics_bleu(m, &b), mega_metrics_chrf(m, &f), mega_metrics_exact_match(m, &e);
    tl_check(b.score == 0 && b.bp == 1.0 && f.score == 0 && e.score == 0 && e.sentences == 0 && b.order == 4,
             "empty corpus: scores 0");
    mega_metrics_bleu_signature(m, sig, sizeof sig);
    tl_check(!strcmp(sig, "nrefs:0|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"), "empty signature %s", sig);

    /* exact match: byte equality, nothing trimmed; any of the references */
    add1(m, "a b", "a b");
    add1(m, "a b ", "a b");
    add1(m, "x", "y");
    const char *two[2] = {"q", "p r"};
    tl_check(mega_metrics_add(m, "p r", two, 2) == MEGA_OK, "add with two references");
    mega_metrics_exact_match(m, &e);
    tl_check(e.matches == 2 && e.sentences == 4 && e.score == 50.0, "exact match %lld/%lld = %g", (long long)e.matches,
             (long long)e.sentences, e.score);
    tl_check(mega_metrics_sentences(m) == 4, "sentences counted");
    mega_metrics_bleu_signature(m, sig, sizeof sig);
    tl_check(!strcmp(sig, "nrefs:var|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"), "variable refs: %s", sig);
    mega_metrics_chrf_signature(m, sig, sizeof sig);
    tl_check(!strcmp(sig, "nrefs:var|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"), "chrF signature %s", sig);
    int need = mega_metrics_bleu_signature(m, sig, 5);
    tl_check(need == (int)strlen("nrefs:var|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0") && !strcmp(sig, "nref"),
             "signature: snprintf semantics");

    /* BLEU rstrip()s before tokenizing (trailing whitespace changes nothing), exact match does not */
    mega_metrics_reset(m);
    add1(m, "a b c d \t\n", "a b c d");
    mega_metrics_bleu(m, &b), mega_metrics_exact_match(m, &e);
    tl_check(fabs(b.score - 100.0) < 1e-12 && b.sys_len == 4 && e.matches == 0,
             "rstrip before BLEU (%.17g), exact match untrimmed", b.score);
    /* ...and a trailing "-\n" is not joined (rstrip first): "a-\n" -> "a-" */
    mega_metrics_reset(m);
    add1(m, "a-\n", "a-");
    mega_metrics_bleu(m, &b);
    tl_check(b.counts[0] == 1 && b.totals[0] == 1, "rstrip before the -\\n rule");

    /* incremental == all at once; reset forgets */
    mega_metrics *m2 = NULL;
    mega_metrics_new(NULL, &m2);
    const char *hy[3] = {"The cat sat on the mat.", "It rained all day, 3.5 mm.", "Nothing."};
    const char *rf[3] = {"A cat sat on the mat.", "It rained all day: 3.5 mm.", "Nothing at all."};
    mega_metrics_reset(m);
    for (int i = 0; i < 3; i++) add1(m, hy[i], rf[i]);
    for (int i = 0; i < 3; i++) add1(m2, hy[i], rf[i]);
    mega_bleu_score b2;
    mega_chrf_score f2;
    mega_metrics_bleu(m, &b), mega_metrics_bleu(m2, &b2), mega_metrics_chrf(m, &f), mega_metrics_chrf(m2, &f2);
    tl_check(b.score == b2.score && f.score == f2.score && b.score > 0 && f.score > 0, "same sentences, same scores");
    mega_bleu_score b3;
    tl_check(mega_bleu_compute(b.counts, b.totals, b.sys_len, b.ref_len, NULL, &b3) == MEGA_OK && b3.score == b.score,
             "mega_bleu_compute on the summed statistics gives the corpus BLEU");
    mega_metrics_free(m2);

    /* embedded NUL bytes through add_n */
    mega_metrics_reset(m);
    const char *r0 = "a\0b";
    size_t rl = 3;
    tl_check(mega_metrics_add_n(m, "a\0b", 3, &r0, &rl, 1) == MEGA_OK, "add_n with NUL bytes");
    mega_metrics_exact_match(m, &e), mega_metrics_chrf(m, &f);
    tl_check(e.matches == 1 && f.score == 100.0 && f.hyp[0] == 3, "NUL bytes are characters");

    /* errors */
    const char *one = "x";
    tl_check(mega_metrics_add(m, NULL, &one, 1) == MEGA_ERR_INVALID, "NULL hypothesis");
    tl_check(mega_metrics_add(m, "x", &one, 0) == MEGA_ERR_INVALID, "no reference");
    const char *nul = NULL;
    tl_check(mega_metrics_add(m, "x", &nul, 1) == MEGA_ERR_INVALID, "NULL reference");
    tl_check(mega_metrics_sentences(m) == 1, "failed adds add nothing");
    tl_check(mega_metrics_bleu(NULL, &b) == MEGA_ERR_INVALID && mega_metrics_chrf(m, NULL) == MEGA_ERR_INVALID,
             "NULL arguments");
    mega_metrics_free(m);
    mega_metrics_free(NULL);

    mega_metrics_options o = mega_metrics_defaults();
    o.max_ngram_order = 0;
    m = (mega_metrics *)&o; /* must be set to NULL on failure */
    tl_check(mega_metrics_new(&o, &m) == MEGA_ERR_INVALID && m == NULL && strstr(mega_last_error(), "order"),
             "invalid max order: %s", mega_last_error());
    o = mega_metrics_defaults(), o.char_order = 0, o.word_order = 0;
    tl_check(mega_metrics_new(&o, &m) == MEGA_ERR_INVALID, "chrF with no orders");
    o = mega_metrics_defaults(), o.smooth_value = NAN;
    tl_check(mega_metrics_new(&o, &m) == MEGA_ERR_INVALID, "NaN smoothing value");
    o = mega_metrics_defaults(), o.tokenize = (mega_bleu_tok)7;
    tl_check(mega_metrics_new(&o, &m) == MEGA_ERR_INVALID, "unknown tokenizer");
    o = mega_metrics_defaults(), o.beta = -1;
    tl_check(mega_metrics_new(&o, &m) == MEGA_ERR_INVALID, "negative beta");

    /* signatures of other settings, as sacreBLEU formats them */
    o = mega_metrics_defaults();
    o.smooth_method = MEGA_BLEU_SMOOTH_ADD_K, o.effective_order = 1, o.tokenize = MEGA_BLEU_TOK_NONE;
    o.word_order = 2, o.eps_smoothing = 1, o.whitespace = 1, o.beta = 1;
    mega_metrics_new(&o, &m);
    add1(m, "a", "a");
    mega_metrics_bleu_signature(m, sig, sizeof sig);
    tl_check(!strcmp(sig, "nrefs:1|case:mixed|eff:yes|tok:none|smooth:add-k[1.00]|version:2.6.0"), "add-k signature %s", sig);
    mega_metrics_chrf_signature(m, sig, sizeof sig);
    tl_check(!strcmp(sig, "nrefs:1|case:mixed|eff:no|nc:6|nw:2|space:yes|version:2.6.0"), "chrF++ signature %s", sig);
    mega_metrics_chrf(m, &f);
    tl_check(!strcmp(f.name, "chrF1++"), "chrF name %s", f.name);
    mega_metrics_free(m);
}

/* random bytes (mostly invalid UTF-8): never an error, scores finite in [0, 100], and a
 * hypothesis equal to its reference scores 100 */
static void test_random_bytes(void) {
    unsigned long long rng = 12345;
    mega_metrics *m = NULL;
    mega_metrics_new(NULL, &m);
    static const char alphabet[] = "ab .,-1&;\n\t\xc3\xa9\xe2\x80\xa8\xff\x80\xed\xa0";
    int ok = 1, same_ok = 1;
    for (int it = 0; it < 300; it++) {
        char h[64], r[64];
        size_t hl = (size_t)(tl_rand01(&rng) * 60), rlen = (size_t)(tl_rand01(&rng) * 60);
        for (size_t i = 0; i < hl; i++) h[i] = (tl_rand01(&rng) < 0.5) ? (char)(tl_rand01(&rng) * 256) : alphabet[(int)(tl_rand01(&rng) * (sizeof alphabet - 1))];
        for (size_t i = 0; i < rlen; i++) r[i] = (tl_rand01(&rng) < 0.5) ? (char)(tl_rand01(&rng) * 256) : alphabet[(int)(tl_rand01(&rng) * (sizeof alphabet - 1))];
        const char *rp = r;
        ok &= mega_metrics_add_n(m, h, hl, &rp, &rlen, 1) == MEGA_OK;
        mega_metrics *one = NULL;
        mega_metrics_new(NULL, &one);
        const char *hp = h;
        mega_metrics_add_n(one, h, hl, &hp, &hl, 1);
        mega_bleu_score b;
        mega_chrf_score f;
        mega_metrics_bleu(one, &b), mega_metrics_chrf(one, &f);
        /* identical text: chrF 100 unless there is no character; BLEU 100 with >= 4 tokens */
        if (f.hyp[0] > 0) same_ok &= f.score == 100.0;
        if (b.totals[3] > 0) same_ok &= fabs(b.score - 100.0) < 1e-12;
        mega_metrics_free(one);
    }
    mega_bleu_score b;
    mega_chrf_score f;
    mega_metrics_bleu(m, &b), mega_metrics_chrf(m, &f);
    tl_check(ok && isfinite(b.score) && b.score >= 0 && b.score <= 100 && isfinite(f.score) && f.score >= 0 &&
                 f.score <= 100,
             "random bytes: BLEU %g chrF %g", b.score, f.score);
    tl_check(same_ok, "random bytes: a hypothesis equal to its reference scores 100");
    mega_metrics_free(m);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "tests/fixtures/metrics/sacrebleu_cases.txt";
    int n = run_fixtures(path);
    tl_check(n >= 60, "fixture cases run: %d", n);
    test_tokenizer();
    test_by_hand();
    test_api();
    test_random_bytes();
    return tl_finish();
}
