/* `mega experiment abc-mt`: the ABC paper's machine-translation comparison (Peng et al. 2022,
 * "ABC: Attention with Bounded-memory Control", §5.2, Table 4 and the document-level setting) at
 * CPU scale, on FreeDict German-English (`mega freedict`, docs/freedict.md): the Transformer
 * (BASE), Linformer and ABC-MLP with bounded cross-attention and causal memories, and Mega, each
 * trained for the same time (`mega train --task translate --time-budget`), then scored by
 * `mega eval` (corpus BLEU and chrF2 of beam search, its decoding speed) with the peak resident
 * memory of that evaluation (docs/translation.md, "Cross-attention choices and decode cost"). The
 * document-level setting joins several dictionary entries into one long line on each side, so
 * that the source is much longer than the bounded memories. */
#include "experiment.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEU_ENG "/usr/share/dictd/freedict-deu-eng.dict.dz"

typedef struct {
    const char *id, *label, *flags, *paper;
} mt_model;

/* the paper's BLEU beside each model: WMT14 EN-DE (Table 4) for the sentence level; the
 * document-level IWSLT14 ES-EN figures are for ABC-MLP 128/64, Linformer did not converge */
static const mt_model SENT[] = {
    {"base", "BASE (Transformer)", "--mixer mha --cross-attention mha", "27.2"},
    {"lin32-32", "Linformer 32/32", "--mixer abc-linformer --memory-size 32 --cross-attention abc-linformer --cross-memory 32", "26.6"},
    {"abc32-32", "ABC-MLP 32/32", "--mixer abc-mlp --memory-size 32 --cross-attention abc-mlp --cross-memory 32", "27.3"},
    {"abc32-8", "ABC-MLP 32/8", "--mixer abc-mlp --memory-size 8 --cross-attention abc-mlp --cross-memory 32", "27.1"},
    {"abc64-64", "ABC-MLP 64/64", "--mixer abc-mlp --memory-size 64 --cross-attention abc-mlp --cross-memory 64", "not reported"},
    {"mega", "Mega", "--mixer mega", "not in this paper"},
};
static const mt_model DOC[] = {
    {"doc-base", "BASE (Transformer)", "--mixer mha --cross-attention mha", "39.9"},
    {"doc-lin32-32", "Linformer 32/32", "--mixer abc-linformer --memory-size 32 --cross-attention abc-linformer --cross-memory 32",
     "did not converge"},
    {"doc-abc32-8", "ABC-MLP 32/8", "--mixer abc-mlp --memory-size 8 --cross-attention abc-mlp --cross-memory 32", "39.7 (128/64)"},
    {"doc-mega", "Mega", "--mixer mega", "not in this paper"},
};
enum { NSENT = sizeof SENT / sizeof *SENT, NDOC = sizeof DOC / sizeof *DOC };

typedef struct {
    double params, train_s, bleu, chrf, tok_s, peak;
    int steps;
    xlog g;
} mt_result;

/* Copy `n` pairs (0 = all) of `src` to `dst`; with `doc` > 0, consecutive pairs are joined (sources
 * with a space, targets with a space) into one pair until the source has at least `doc` bytes
 * (a last shorter group is kept). Returns the pairs written, -1 on error. */
static int write_pairs(const char *src, const char *dst, int n, int doc) {
    FILE *in = fopen(src, "r");
    if (!in) return cli_error("%s: %s", src, strerror(errno)), -1;
    FILE *out = fopen(dst, "w");
    if (!out) return fclose(in), cli_error("%s: %s", dst, strerror(errno)), -1;
    sbuf s = {0}, t = {0};
    static char line[4096];
    int w = 0, nread = 0;
    while ((!n || nread < n) && fgets(line, sizeof line, in)) {
        char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        if (!tab || !nl) continue; /* freedict writes neither: a damaged file */
        *tab = *nl = 0, nread++;
        if (!doc) {
            fprintf(out, "%s\t%s\n", line, tab + 1), w++;
            continue;
        }
        sbuf_printf(&s, "%s%s", s.len ? " " : "", line), sbuf_printf(&t, "%s%s", t.len ? " " : "", tab + 1);
        if (s.len >= (size_t)doc) fprintf(out, "%s\t%s\n", s.s, t.s), w++, s.len = t.len = 0, s.s[0] = t.s[0] = 0;
    }
    if (s.len) fprintf(out, "%s\t%s\n", s.s, t.s), w++;
    sbuf_free(&s), sbuf_free(&t);
    fclose(in);
    return fclose(out) ? (cli_error("%s: write failed", dst), -1) : w;
}

/* `mega eval` of a run on `test`: BLEU and chrF of its "model" line, output tokens/s of its
 * "speed" line, and the evaluation's peak resident memory */
static void mt_eval(xctx *c, const char *id, const char *test, mt_result *m) {
    char log[160], run[4096], lp[4096], line[1024];
    snprintf(log, sizeof log, "%s-eval", id);
    snprintf(run, sizeof run, "%s/runs/%s", c->dir, id);
    xargv a = {0};
    xrun r;
    xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xaf(&a, "--data=%s", test), xa(&a, "--beam=4");
    xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet");
    if (xrun_ok(c, log, &a, &r)) return;
    m->peak = r.peak_mib;
    log_number(c, log, "s search (", &m->tok_s);
    snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
    FILE *f = fopen(lp, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model ", 6) && sscanf(line + 6, "%lf %lf", &m->bleu, &m->chrf) == 2) break;
    if (f) fclose(f);
}

/* the model size of the experiment: its --ffn-dim F0 is BASE's, the other models' FFN width is
 * moved to about BASE's parameters (match_ffn: a one-step probe each) */
typedef struct {
    const char *common, *run, *test;
    int D, L, F0;
} mt_size;

/* train and score the models of one setting; its table and validation-accuracy figure */
static int mt_setting(xctx *c, const mt_model *M, int n, const mt_size *z, const char *fig, const char *title, const char *paper) {
    mt_result R[8];
    xcurve cv[8];
    char full[16000], flags[8][512];
    snprintf(full, sizeof full, "%s %s", z->common, z->run);
    for (int i = 0; i < n; i++) {
        xrun r;
        memset(&R[i], 0, sizeof R[i]);
        R[i].bleu = R[i].chrf = R[i].tok_s = R[i].peak = NAN;
        /* at least half BASE's FFN: ABC-MLP's controls (2 H n D per attention) can outweigh all of it */
        int F = i ? match_ffn(c, M[i].id, z->common, M[i].flags, z->F0, z->D, z->L, R[0].params) : z->F0;
        if (F < z->F0 / 2) F = z->F0 / 2;
        snprintf(flags[i], sizeof flags[i], "%s --ffn-dim %d", M[i].flags, F);
        if (!train_model(c, M[i].id, full, flags[i], "acc", &R[i].g, &R[i].params, &r)) {
            R[i].steps = R[i].g.steps;
            mt_eval(c, M[i].id, z->test, &R[i]);
        }
        cv[i] = (xcurve){M[i].label, R[i].g};
    }
    sbuf_printf(&c->md, "| model | flags | parameters | steps | BLEU | chrF2 | decode tokens/s (beam 4) | eval peak MiB | %s |\n"
                        "|---|---|---|---|---|---|---|---|---|\n", paper);
    for (int i = 0; i < n; i++) {
        char b[6][32];
        fmt_num(b[0], 32, R[i].params, "%.0f"), fmt_num(b[1], 32, R[i].steps > 0 ? R[i].steps : NAN, "%.0f");
        fmt_num(b[2], 32, R[i].bleu, "%.2f"), fmt_num(b[3], 32, R[i].chrf, "%.2f"), fmt_num(b[4], 32, R[i].tok_s, "%.0f");
        fmt_num(b[5], 32, R[i].peak, "%.0f");
        sbuf_printf(&c->md, "| %s | `%s` | %s | %s | %s | %s | %s | %s | %s |\n", M[i].label, flags[i], b[0], b[1], b[2], b[3], b[4],
                    b[5], M[i].paper);
    }
    return curves_fig(c, fig, title, "validation token accuracy", cv, n, 0);
}

int exp_abc_mt(xctx *c) {
    if (!file_exists(DEU_ENG)) return cli_error("%s: not found (install Debian's dict-freedict-deu-eng)", DEU_ENG), -1;
    const int q = c->quick, budget = 240, doc_bytes = q ? 100 : 400;
    char dir[4096], fd[4096], p[3][4600], sent[3][4600], docf[3][4600];
    path_join(dir, sizeof dir, c->dir, "data");
    if (ensure_dir(dir)) return -1;
    path_join(fd, sizeof fd, dir, "deu-eng");
    xargv a = {0};
    xrun r;
    xa(&a, c->self), xa(&a, "freedict"), xaf(&a, "--dict=%s", DEU_ENG), xaf(&a, "--out=%s", fd), xaf(&a, "--seed=%lld", c->seed);
    if (xrun_ok(c, "data-freedict", &a, &r)) return -1;
    /* pairs per split: sentence level (train 0 = all), and the pairs joined into documents */
    static const char *const SPL[3] = {"train", "valid", "test"};
    const int ns[3] = {q ? 300 : 0, q ? 30 : 1000, q ? 20 : 1000}, nd[3] = {q ? 300 : 0, q ? 60 : 4000, q ? 60 : 4000};
    int gs[3], gd[3];
    for (int s = 0; s < 3; s++) {
        snprintf(p[s], sizeof p[s], "%s/%s.tsv", fd, SPL[s]);
        snprintf(sent[s], sizeof sent[s], "%s/sent-%s.tsv", dir, SPL[s]);
        snprintf(docf[s], sizeof docf[s], "%s/doc-%s.tsv", dir, SPL[s]);
        if ((gs[s] = write_pairs(p[s], sent[s], ns[s], 0)) < 0 || (gd[s] = write_pairs(p[s], docf[s], nd[s], doc_bytes)) < 0) return -1;
    }
    /* bytes on both sides (--bpe 0): the bounded memories count bytes, and no run learns subword units */
    const int D = q ? 16 : 128, L = q ? 2 : 4, F0 = q ? 32 : 256, sent_len = 256, doc_len = q ? 512 : 1024;
    char model[512], run[1024], common[12000];
    snprintf(model, sizeof model, "%s --bpe 0",
             q ? "--encoder-layers 1 --decoder-layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --n-dim 4 --heads 2"
               : "--encoder-layers 2 --decoder-layers 2 --embed-dim 128 --z-dim 64 --hidden-dim 256 --n-dim 16 --heads 4");
    if (q) snprintf(run, sizeof run, "--steps 4 --eval-every 2 --warmup 1");
    else snprintf(run, sizeof run, "--time-budget %d --steps 1000000 --eval-every 200 --patience 0", budget);
    sbuf_printf(&c->md,
                "Every model is an encoder-decoder over bytes (`%s`; the ABC and Linformer mixers are the encoder's "
                "bidirectional and the decoder's causal attention with `--memory-size` slots, and the cross-attention has "
                "`--cross-memory` slots: \"32/8\" is cross/causal) with the FFN width of each moved so that it has about "
                "BASE's parameters (`--ffn-dim %d` for BASE; at least half of it: where ABC-MLP's controls, 2·H·n·D per "
                "attention, or Linformer's length-`--seq-len` projections outweigh that, the parameters column shows the "
                "excess), and `--max-positions` equal to `--seq-len` (Linformer's "
                "projections have that length). Each is trained %s with `mega train --task translate`'s defaults "
                "otherwise, then scored with `mega eval --beam 4` on held-out pairs: corpus BLEU and chrF2 (sacreBLEU's "
                "definitions), beam-search output tokens per second, and the evaluation's peak resident memory (wait4; "
                "teacher-forced scoring included). The best model by validation token accuracy is scored. %d thread%s.%s\n\n",
                model, F0, q ? "for 4 steps" : "for the same time each (`--time-budget`, validation excluded; `--patience 0`)",
                c->threads, c->threads == 1 ? "" : "s", q ? " Quick mode: toy sizes, meaningless numbers." : "");
    sbuf_printf(&c->md, "### Sentence level: FreeDict deu-eng entries\n\n%d / %d / %d training / validation / test pairs of "
                        "`mega freedict` (one German headword or phrase and its first English translation, at most 200 bytes). "
                        "The paper's column is WMT14 EN-DE BLEU (Table 4), a far larger task: compare the order, not the "
                        "values.\n\n",
                gs[0], gs[1], gs[2]);
    snprintf(common, sizeof common, "--task translate --data %s --valid %s %s --seq-len %d --max-positions %d", sent[0], sent[1], model,
             sent_len, sent_len);
    mt_size z = {common, run, sent[2], D, L, F0};
    if (mt_setting(c, SENT, NSENT, &z, "abc-mt-sentence.svg", "FreeDict deu-eng, sentence level", "paper: WMT14 EN-DE BLEU")) return -1;
    sbuf_printf(&c->md, "\n### Document level: entries joined into long lines\n\n%d / %d / %d training / validation / test "
                        "\"documents\": consecutive pairs of the (shuffled) splits above joined with spaces until the source "
                        "has at least %d bytes, so that a source is several times longer than the 32 slots of the bounded "
                        "memories. These are not real documents (no context links the entries); the paper's column is "
                        "document-level IWSLT14 ES-EN BLEU, with ABC-MLP at 128/64.\n\n",
                gd[0], gd[1], gd[2], doc_bytes);
    snprintf(common, sizeof common, "--task translate --data %s --valid %s %s --seq-len %d --max-positions %d --max-tokens %d", docf[0],
             docf[1], model, doc_len, doc_len, 4 * doc_len);
    z.test = docf[2];
    if (mt_setting(c, DOC, NDOC, &z, "abc-mt-document.svg", "FreeDict deu-eng, documents of joined entries",
                   "paper: doc-level IWSLT14 ES-EN BLEU"))
        return -1;
    sbuf_printf(&c->md, "\nCommands:\n\n");
    md_cmd(c, "data-freedict");
    for (int i = 0; i < NSENT; i++) md_cmd(c, SENT[i].id);
    for (int i = 0; i < NDOC; i++) md_cmd(c, DOC[i].id);
    sbuf_printf(&c->md, "\n");
    return 0;
}
