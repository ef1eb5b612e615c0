/* `mega experiment megalodon`: Mega, Megalodon and a Transformer as byte language models trained
 * for the same time, then evaluated at 1-16x the training length, and the memory of decoding
 * against the context length (docs/megalodon.md, docs/results.md). */
#include "experiment.h"

#include <math.h>
#include <string.h>

static const xmodel MODELS[] = {
    {"mega", "Mega (chunk C)", "--mixer mega"},
    {"megalodon", "Megalodon (chunk C)", "--arch megalodon"},
    {"transformer", "Transformer (MHA + RoPE, 2x FFN)", "--mixer mha --pos rope"},
};
enum { NM = sizeof MODELS / sizeof *MODELS, NL = 5, ND = 3 };

/* peak resident memory of `mega generate` producing n bytes from the trained model */
static double decode_mib(xctx *c, const char *id, int n) {
    char run[4096], log[128];
    snprintf(run, sizeof run, "%s/runs/%s", c->dir, id);
    snprintf(log, sizeof log, "%s-generate-%d", id, n);
    xargv a = {0};
    xrun r;
    xa(&a, c->self), xa(&a, "generate"), xaf(&a, "--model=%s", run), xaf(&a, "--tokens=%d", n);
    xaf(&a, "--threads=%d", c->threads), xwords(&a, "--temperature 0 --quiet --prompt x");
    if (xrun_ok(c, log, &a, &r)) return NAN;
    return r.peak_mib;
}

static void table_row(xctx *c, const char *label, const double *v, int n, const char *fmt) {
    sbuf_printf(&c->md, "| %s |", label);
    for (int j = 0; j < n; j++) {
        char b[32];
        fmt_num(b, sizeof b, v[j], fmt);
        sbuf_printf(&c->md, " %s |", b);
    }
    sbuf_printf(&c->md, "\n");
}

static void table_head(xctx *c, const char *first, const int *x, int n, const char *unit) {
    sbuf_printf(&c->md, "| %s |", first);
    for (int j = 0; j < n; j++) sbuf_printf(&c->md, " %d%s |", x[j], unit);
    sbuf_printf(&c->md, "\n|---|");
    for (int j = 0; j < n; j++) sbuf_printf(&c->md, "---|");
    sbuf_printf(&c->md, "\n");
}

int exp_megalodon(xctx *c) {
    const int q = c->quick, train_len = q ? 32 : 256, chunk = q ? 16 : 128, budget = q ? 0 : 180;
    int lens[NL], dl[ND];
    for (int j = 0; j < NL; j++) lens[j] = train_len << j;
    for (int j = 0; j < ND; j++) dl[j] = (q ? 64 : 512) << (2 * j);
    char tr[4096], va[4096], common[9000], lstr[128] = "", label[NM][64];
    if (corpus(c, tr, va, sizeof tr)) return -1;
    for (int j = 0; j < NL; j++) snprintf(lstr + strlen(lstr), sizeof lstr - strlen(lstr), "%s%d", j ? "," : "", lens[j]);
    /* the same width and depth for every model; the value width (hidden-dim) 2x the width, as
     * Megalodon's ModelConf (value_dim = 2 model_dim) and the library's Mega default */
    if (q)
        snprintf(common, sizeof common, "--task lm --data %s --valid %s --seq-len %d --chunk-size %d --layers 1 "
                 "--embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64 --batch 4 --steps 6 --warmup 2 --eval-every 3 "
                 "--eval-tokens 2048", tr, va, train_len, chunk);
    else
        snprintf(common, sizeof common, "--task lm --data %s --valid %s --seq-len %d --chunk-size %d --layers 2 "
                 "--embed-dim 128 --z-dim 64 --hidden-dim 256 --ffn-dim 256 --batch 8 --time-budget %d "
                 "--steps 1000000 --warmup 100 --eval-every 200 --eval-tokens 32768", tr, va, train_len, chunk, budget);
    static double bpb[NM][NL], mib[NM][ND], xl[NL], xd[ND], params[NM];
    static xcurve cv[NM];
    for (int j = 0; j < NL; j++) xl[j] = lens[j];
    for (int j = 0; j < ND; j++) xd[j] = dl[j];
    for (int i = 0; i < NM; i++) {
        xrun r;
        snprintf(label[i], sizeof label[i], "%s", MODELS[i].label);
        char *cp = strstr(label[i], "chunk C");
        if (cp) snprintf(cp, sizeof label[i] - (size_t)(cp - label[i]), "chunk %d)", chunk);
        cv[i].label = label[i];
        for (int j = 0; j < NL; j++) bpb[i][j] = NAN;
        for (int j = 0; j < ND; j++) mib[i][j] = NAN;
        /* the Transformer's FFN twice as wide: about Megalodon's parameters (the same later flag wins) */
        char flags[256];
        snprintf(flags, sizeof flags, "%s%s", MODELS[i].flags, i == NM - 1 ? (q ? " --ffn-dim 128" : " --ffn-dim 512") : "");
        if (train_model(c, MODELS[i].id, common, flags, "bpb", &cv[i].g, &params[i], &r)) continue;
        char run[4096], log[128];
        snprintf(run, sizeof run, "%s/runs/%s", c->dir, MODELS[i].id);
        snprintf(log, sizeof log, "%s-eval", MODELS[i].id);
        xargv a = {0};
        xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xaf(&a, "--data=%s", va), xaf(&a, "--lengths=%s", lstr);
        xaf(&a, "--max-bytes=%d", lens[NL - 1] * 4), xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet");
        if (!xrun_ok(c, log, &a, &r)) read_lengths(c, log, lens, NL, bpb[i]);
        for (int j = 0; j < ND; j++) mib[i][j] = decode_mib(c, MODELS[i].id, dl[j]);
    }
    sbuf_printf(&c->md, "Byte language models of %s, trained on %d-byte sequences %s; Mega and Megalodon attend in "
                        "chunks of %d. Bits per byte on held-out text.%s\n\n",
                q ? "one layer at width 32" : "two layers at width 128 (z-dim 64, hidden-dim 256, ffn-dim 256)",
                train_len, q ? "for 6 steps" : "for the same training time each (`--time-budget`, validation excluded)",
                chunk, q ? " Quick mode: meaningless numbers." : "");
    sbuf_printf(&c->md, "| model | parameters | steps | tokens/s | validation bpb |\n|---|---|---|---|---|\n");
    for (int i = 0; i < NM; i++) {
        char p[32], b[32], t[32];
        fmt_num(p, sizeof p, params[i], "%.0f"), fmt_num(b, sizeof b, cv[i].g.final, "%.3f");
        fmt_num(t, sizeof t, cv[i].g.tok_s, "%.0f");
        sbuf_printf(&c->md, "| %s | %s | %d | %s | %s |\n", label[i], p, cv[i].g.steps, t, b);
    }
    sbuf_printf(&c->md, "\nTrain short, test long: `mega eval --lengths` (one full forward per non-overlapping window "
                        "of each length; Mega and Megalodon attend within chunks, their moving averages and Megalodon's "
                        "timestep norm run through the whole window).\n\n");
    table_head(c, "model (bpb at length)", lens, NL, "");
    for (int i = 0; i < NM; i++) table_row(c, label[i], bpb[i], NL, "%.3f");
    sbuf_printf(&c->md, "\nDecoding memory: peak resident MiB of `mega generate --tokens N` (greedy), the whole process "
                        "(weights, the binary, the state). Mega and Megalodon keep one chunk of keys and values per "
                        "layer; the Transformer keeps every position.\n\n");
    table_head(c, "model (MiB at tokens)", dl, ND, "");
    for (int i = 0; i < NM; i++) table_row(c, label[i], mib[i], ND, "%.1f");
    sbuf_printf(&c->md, "\nCommands:\n\n");
    for (int i = 0; i < NM; i++) {
        char log[128];
        md_cmd(c, MODELS[i].id);
        snprintf(log, sizeof log, "%s-eval", MODELS[i].id);
        md_cmd(c, log);
    }
    svg_series s[NM], m[NM];
    for (int i = 0; i < NM; i++) {
        s[i] = (svg_series){label[i], xl, bpb[i], NL, 1, 0};
        m[i] = (svg_series){label[i], xd, mib[i], ND, 1, 0};
    }
    if (curves_fig(c, "megalodon-curves.svg", "validation during training", "bits per byte", cv, NM, 0)) return -1;
    char title[160];
    snprintf(title, sizeof title, "train on %d bytes, evaluate longer", train_len);
    svg_chart ch = {title, "evaluation length (bytes)", "bits per byte", 1, 0, 1};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, NM);
    if (write_fig(c, "megalodon-extrapolate.svg", &svg)) return -1;
    svg_chart cm = {"decoding memory", "generated length (tokens)", "peak resident memory (MiB)", 1, 0, 1};
    sbuf svm = {0};
    svg_line_chart(&svm, &cm, m, NM);
    return write_fig(c, "megalodon-decode-memory.svg", &svm);
}
