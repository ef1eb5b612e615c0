/* The language-model experiments of `mega experiment`: aft (the AFT article's one-layer byte LMs),
 * extrapolate (train short, test long) and speed (time and memory against length), and the
 * figures drawn from a trained model. */
#include "experiment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
/* ---- model inspection for the figures ---- */

/* the reals of the tensor whose name ends with suffix in layer `layer` (-1: any) */
static const mega_real *lm_tensor(mega_lm *m, const char *suffix, int layer, size_t *numel) {
    const mega_real *w = mega_lm_params(m);
    char pre[64];
    snprintf(pre, sizeof pre, "layers.%d.", layer);
    for (int i = 0; i < mega_lm_tensor_count(m); i++) {
        size_t off, ne;
        unsigned fl;
        const char *nm = mega_lm_tensor_info(m, i, &off, &ne, &fl);
        const size_t ln = strlen(nm), ls = strlen(suffix);
        if (ln >= ls && !strcmp(nm + ln - ls, suffix) && (layer < 0 || strstr(nm, pre))) return *numel = ne, w + off;
    }
    return NULL;
}

/* The EMA kernel of each channel, as the official code materialises it
 * (fairseq/modules/exponential_moving_average.py, MultiHeadEMA._calc_coeffs and _compute_kernel):
 * p = sigmoid(delta), q = 1 - p * sigmoid(alpha), k_d(t) = sum_n p beta q^t gamma / sqrt(N). The
 * library never builds it (it runs the recurrence); it is drawn here only. */
static int ema_fig(xctx *c, mega_lm *m, int layers, const char *file) {
    const mega_lm_config *cf = mega_lm_get_config(m);
    const int D = cf->block.embed_dim, N = cf->block.n_dim, T = 128;
    if (N <= 0) return 0;
    static double ks[8][128], xt[128];
    svg_series s[8];
    char lab[8][64];
    sbuf all = {0};
    for (int l = 0; l < layers; l++) {
        size_t nd, na, nb, ng;
        const mega_real *dl = lm_tensor(m, "move.delta", l, &nd), *al = lm_tensor(m, "move.alpha", l, &na),
                        *be = lm_tensor(m, "move.beta", l, &nb), *ga = lm_tensor(m, "move.gamma", l, &ng);
        if (!dl || !al || !be || !ga || nd < (size_t)D * N || ng < (size_t)D * N) continue;
        /* 8 channels spread over the width */
        for (int k = 0; k < 8; k++) {
            const int d = k * D / 8;
            for (int t = 0; t < T; t++) {
                double v = 0;
                for (int n = 0; n < N; n++) {
                    const size_t i = (size_t)d * N + n;
                    const double p = 1 / (1 + exp(-(double)dl[i])), q = 1 - p / (1 + exp(-(double)al[i]));
                    v += p * be[i] * pow(q, t) * ga[i] / sqrt((double)N);
                }
                ks[k][t] = v, xt[t] = t;
            }
            snprintf(lab[k], sizeof lab[k], "channel %d", d);
            s[k] = (svg_series){lab[k], xt, ks[k], T, 0, 0};
        }
        char title[128], f[256];
        snprintf(title, sizeof title, "learned EMA kernels, layer %d (8 of %d channels)", l, D);
        svg_chart ch = {title, "lag t (tokens)", "kernel weight k_d(t)", 0, 0, 0};
        svg_line_chart(&all, &ch, s, 8);
        snprintf(f, sizeof f, "%s-layer%d.svg", file, l);
        if (write_fig(c, f, &all)) return -1;
    }
    return 0;
}

static int cmp_real(const void *a, const void *b) {
    const mega_real x = *(const mega_real *)a, y = *(const mega_real *)b;
    return (x > y) - (x < y);
}

/* The attention weights of Mega's layer `layer` over one chunk: the first chunk of the held-out
 * text streamed from its start (mega_lm_stream_probe_attention), drawn as a heat map (row:
 * query position, column: key position; causal, so the upper triangle is empty). */
static int attn_fig(xctx *c, mega_lm *m, const char *text, int layer, const char *file) {
    const mega_lm_config *cf = mega_lm_get_config(m);
    mega_block_context x; /* one chunk, or 128 positions under full attention */
    mega_block_context_of(&cf->block, 128, &x);
    const int C = x.cache;
    mega_bytes b;
    if (mega_read_file_max(text, "held-out text", (uint64_t)C, &b) != MEGA_OK) return cli_error("%s", mega_last_error()), -1;
    const int n = (int)(b.n < (size_t)C ? b.n : (size_t)C);
    int32_t *tk = malloc(sizeof(int32_t) * (size_t)C);
    mega_real *rows = malloc(sizeof(mega_real) * (size_t)C * C), *lg = malloc(sizeof(mega_real) * (size_t)cf->vocab_size * C);
    double *map = malloc(sizeof(double) * (size_t)C * C);
    mega_lm_stream *s = NULL;
    int e = -1;
    if (tk && rows && lg && map && n > 0 && mega_lm_stream_new(m, 1, C, &s) == MEGA_OK &&
        mega_lm_stream_probe_attention(s, layer, rows, C) == MEGA_OK) {
        for (int i = 0; i < n; i++) tk[i] = b.data[i];
        if (mega_lm_stream_feed(s, tk, n, lg) == MEGA_OK) {
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) map[(size_t)i * n + j] = j <= i ? rows[(size_t)i * C + j] : NAN;
            /* the first rows (few keys, large weights) would take the whole colour scale: clip it
             * at the 99th percentile of the weights */
            size_t nv = 0;
            for (size_t i = 0; i < (size_t)n * n; i++)
                if (isfinite(map[i])) rows[nv++] = (mega_real)map[i];
            qsort(rows, nv, sizeof *rows, cmp_real);
            const double top = nv ? rows[(size_t)(0.99 * (double)(nv - 1))] : 1;
            for (size_t i = 0; i < (size_t)n * n; i++)
                if (map[i] > top) map[i] = top;
            char title[200];
            snprintf(title, sizeof title, "Mega attention weights, layer %d, %d held-out bytes (colour up to the 99th pct.)",
                     layer, n);
            sbuf svg = {0};
            svg_heatmap(&svg, title, "key position (byte)", "query position (byte)", map, n, n);
            e = write_fig(c, file, &svg);
        }
    }
    if (e && mega_last_error()[0]) cli_error("attention map: %s", mega_last_error());
    mega_lm_stream_free(s);
    mega_bytes_free(&b);
    free(tk), free(rows), free(lg), free(map);
    return e;
}

/* the time-weighting f_h(d) of an aft-tw (f = exp(-e^{time_decay_h} d)) or mhatw (f =
 * exp(time_logw[h, Tm-1-d])) model's first layer */
static int tw_fig(xctx *c, mega_lm *m, const char *label, const char *file) {
    size_t n;
    const mega_real *td = lm_tensor(m, "mixer.time_decay", 0, &n), *lw = NULL;
    int H = (int)n, Tm = 0;
    if (!td) { /* mhatw, causal: time_logw [H, Tm], time_gamma [Tm] */
        size_t ng;
        lw = lm_tensor(m, "mixer.time_logw", 0, &n);
        if (!lw || !lm_tensor(m, "mixer.time_gamma", 0, &ng) || !ng) return 0;
        Tm = (int)ng, H = (int)(n / ng);
    }
    static double y[8][256], x[256];
    char lab[8][64];
    svg_series s[8];
    const int T = Tm ? (Tm < 256 ? Tm : 256) : 256;
    for (int h = 0; h < H && h < 8; h++) {
        for (int d = 0; d < T; d++)
            x[d] = d, y[h][d] = td ? exp(-exp((double)td[h]) * d) : exp((double)lw[(size_t)h * Tm + (Tm - 1 - d)]);
        snprintf(lab[h], sizeof lab[h], "head %d", h);
        s[h] = (svg_series){lab[h], x, y[h], (size_t)T, 0, 0};
    }
    char title[160];
    snprintf(title, sizeof title, "learned time weighting f_h(t-u), %s, layer 0", label);
    svg_chart ch = {title, "distance t - u (bytes)", "f_h(t - u)", 0, 0, 0};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, H < 8 ? H : 8);
    return write_fig(c, file, &svg);
}

int exp_aft(xctx *c) {
    static const xmodel M[] = {
        {"mha-plus", "MHA+ (rotary + time weighting)", "--mixer mhatw --pos rope"},
        {"gmlp", "gMLP", "--mixer gmlp"},
        {"aft-tw", "AFT, time-weighted", "--mixer aft-tw"},
        {"aft-simple", "AFT-simple", "--mixer aft-simple"},
        {"mega", "Mega", "--mixer mega"},
    };
    enum { NM = sizeof M / sizeof *M };
    char tr[4096], va[4096], common[9000];
    if (corpus(c, tr, va, sizeof tr)) return -1;
    snprintf(common, sizeof common, "--task lm --data %s --valid %s %s", tr, va,
             c->quick ? "--layers 1 --embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64 --seq-len 64 --batch 4 "
                        "--steps 8 --warmup 2 --eval-every 4 --eval-tokens 2048"
                      : "--layers 1 --embed-dim 128 --seq-len 128 --batch 32 --steps 1500 --warmup 100 "
                        "--lr 1e-3 --min-lr 1e-4 --eval-every 250 --eval-tokens 131072");
    sbuf_printf(&c->md, "One-layer byte-level language models of equal width (D = %d) on the same text, with the "
                        "article's context (128) and schedule (1e-3, cosine to 1e-4), the same steps; validation bits per byte on "
                        "held-out text (%s).\n\n",
                c->quick ? 32 : 128, c->quick ? "quick mode: toy sizes, meaningless numbers" : "the last 5%");
    sbuf_printf(&c->md, "| model | flags | parameters | valid bits/byte | perplexity per byte | training tok/s | training time (s) |\n"
                        "|---|---|---|---|---|---|---|\n");
    xcurve cv[NM];
    for (int i = 0; i < NM; i++) {
        double p;
        xrun r;
        cv[i].label = M[i].label;
        train_model(c, M[i].id, common, M[i].flags, "bpb", &cv[i].g, &p, &r);
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        fmt_num(b1, 32, p, "%.0f"), fmt_num(b2, 32, cv[i].g.final, "%.4f"), fmt_num(b3, 32, exp2(cv[i].g.final), "%.3f");
        fmt_num(b4, 32, cv[i].g.tok_s, "%.0f"), fmt_num(b5, 32, cv[i].g.train_s, "%.1f");
        sbuf_printf(&c->md, "| %s | `%s` | %s | %s | %s | %s | %s |\n", M[i].label, M[i].flags, b1, b2, b3, b4, b5);
    }
    sbuf_printf(&c->md, "\nCommands (the common flags, then each model's):\n\n");
    for (int i = 0; i < NM; i++) md_cmd(c, M[i].id);
    if (curves_fig(c, "aft-curves.svg", "one-layer byte LMs: validation bits per byte", "bits per byte", cv, NM, 1) ||
        curves_fig(c, "aft-curves-time.svg", "one-layer byte LMs: validation bits per byte against training time",
                   "bits per byte", cv, NM, 0))
        return -1;
    /* what the models learned: the time-weighting curves and Mega's EMA kernels */
    for (int i = 0; i < NM; i++) {
        char p[4096], f[128];
        mega_lm *m = NULL;
        snprintf(p, sizeof p, "%s/runs/%s", c->dir, M[i].id);
        if (mega_lm_load(p, &m) != MEGA_OK) continue;
        snprintf(f, sizeof f, "aft-timeweight-%s.svg", M[i].id);
        int e = strcmp(M[i].id, "mega") ? tw_fig(c, m, M[i].label, f)
                                        : ema_fig(c, m, 1, "aft-ema-kernels") || attn_fig(c, m, va, 0, "aft-mega-attention.svg");
        mega_lm_free(m);
        if (e) return -1;
    }
    return 0;
}

/* ---- extrapolate: train short, test long ---- */

int exp_extrapolate(xctx *c) {
    /* of: evaluate that model's run instead of training one, with the local mask of the training
     * length at evaluation (the "super baseline" of Su's article: RoPE + a window mask) */
    static const struct {
        const char *id, *label, *flags, *of;
    } M[] = {
        {"mega", "Mega (chunk 128)", "--mixer mega --chunk-size 128", NULL},
        {"rope", "MHA + RoPE", "--mixer mha --pos rope", NULL},
        {"rope-mask", "MHA + RoPE, window mask at evaluation", NULL, "rope"},
        {"alibi", "MHA + ALiBi", "--mixer mha --pos alibi", NULL},
        {"kerple", "MHA + KERPLE (log)", "--mixer mha --pos kerple-log", NULL},
        {"sandwich", "MHA + Sandwich", "--mixer mha --pos sandwich", NULL},
        {"xpos", "MHA + XPOS", "--mixer mha --pos xpos", NULL},
        {"local", "local attention (window 64) + RoPE", "--mixer local --pos rope", NULL},
        {"logn", "MHA + RoPE + log-n scaling", "--mixer mha --pos rope --log-n-scaling", NULL},
    };
    enum { NM = sizeof M / sizeof *M, NL = 6 };
    const int train_len = c->quick ? 32 : 256;
    int lens[NL];
    for (int j = 0; j < NL; j++) lens[j] = train_len << j;
    char tr[4096], va[4096], common[9000], lstr[128] = "";
    if (corpus(c, tr, va, sizeof tr)) return -1;
    for (int j = 0; j < NL; j++) snprintf(lstr + strlen(lstr), sizeof lstr - strlen(lstr), "%s%d", j ? "," : "", lens[j]);
    snprintf(common, sizeof common, "--task lm --data %s --valid %s --seq-len %d %s", tr, va, train_len,
             c->quick ? "--layers 1 --embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64 --batch 4 --steps 6 "
                        "--warmup 2 --eval-every 3 --eval-tokens 2048"
                      : "--layers 2 --embed-dim 128 --batch 16 --steps 500 --warmup 100 --eval-every 250 "
                        "--eval-tokens 65536");
    static double bpb[NM][NL], xl[NL];
    for (int i = 0; i < NM; i++) {
        xlog g;
        xrun r;
        double p;
        for (int j = 0; j < NL; j++) bpb[i][j] = NAN, xl[j] = lens[j];
        if (!M[i].of && train_model(c, M[i].id, common, M[i].flags, "bpb", &g, &p, &r)) continue;
        char run[4096], log[128];
        snprintf(run, sizeof run, "%s/runs/%s", c->dir, M[i].of ? M[i].of : M[i].id);
        snprintf(log, sizeof log, "%s-eval", M[i].id);
        xargv a = {0};
        xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xaf(&a, "--data=%s", va), xaf(&a, "--lengths=%s", lstr);
        xaf(&a, "--max-bytes=%d", lens[NL - 1] * (c->quick ? 4 : 8)), xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet");
        if (M[i].of) xaf(&a, "--attn-window=%d", train_len);
        if (!xrun_ok(c, log, &a, &r)) read_lengths(c, log, lens, NL, bpb[i]);
    }
    sbuf_printf(&c->md, "Two-layer byte LMs trained on %d-byte sequences, then scored on held-out text in "
                        "non-overlapping windows of each length (`mega eval --lengths`: one full forward per window); "
                        "bits per byte. The window-mask row is the RoPE model evaluated with `--attn-window %d` (each token sees "
                        "at most the training length back).%s\n\n| model |", train_len, train_len, c->quick ? " Quick mode: meaningless numbers." : "");
    for (int j = 0; j < NL; j++) sbuf_printf(&c->md, " %d |", lens[j]);
    sbuf_printf(&c->md, "\n|---|");
    for (int j = 0; j < NL; j++) sbuf_printf(&c->md, "---|");
    sbuf_printf(&c->md, "\n");
    svg_series s[NM];
    for (int i = 0; i < NM; i++) {
        sbuf_printf(&c->md, "| %s |", M[i].label);
        for (int j = 0; j < NL; j++) {
            char b[32];
            fmt_num(b, 32, bpb[i][j], "%.3f");
            sbuf_printf(&c->md, " %s |", b);
        }
        sbuf_printf(&c->md, "\n");
        s[i] = (svg_series){M[i].label, xl, bpb[i], NL, 1, 0};
    }
    sbuf_printf(&c->md, "\nCommands:\n\n");
    for (int i = 0; i < NM; i++) {
        char log[128];
        snprintf(log, sizeof log, "%s-eval", M[i].id);
        if (!M[i].of) md_cmd(c, M[i].id);
        md_cmd(c, log);
    }
    /* what the Mega model learned: its EMA kernels per layer, a chunk's attention */
    char mp[4096];
    mega_lm *mm = NULL;
    snprintf(mp, sizeof mp, "%s/runs/mega", c->dir);
    if (mega_lm_load(mp, &mm) == MEGA_OK) {
        int e = ema_fig(c, mm, mega_lm_get_config(mm)->layers, "extrapolate-mega-ema") ||
                attn_fig(c, mm, va, mega_lm_get_config(mm)->layers - 1, "extrapolate-mega-attention.svg");
        mega_lm_free(mm);
        if (e) return -1;
    }
    char title[160];
    snprintf(title, sizeof title, "train on %d bytes, evaluate longer", train_len);
    svg_chart ch = {title, "evaluation length (bytes)", "bits per byte", 1, 0, 1};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, NM);
    return write_fig(c, "extrapolate.svg", &svg);
}

/* ---- speed: time and memory against length ---- */

int exp_speed(xctx *c) {
    static const xmodel M[] = {
        {"mega-chunk", "Mega-chunk (128)", "--mixer mega --chunk-size 128"},
        {"mega-full", "Mega, full attention", "--mixer mega --chunk-size -1"},
        {"mha", "Transformer (mha)", "--mixer mha"},
    };
    enum { NM = sizeof M / sizeof *M, NL = 5 };
    int lens[NL];
    for (int j = 0; j < NL; j++) lens[j] = (c->quick ? 64 : 1024) << j;
    static double sec[NM][NL], mib[NM][NL], xl[NL];
    char d[4096];
    path_join(d, sizeof d, c->dir, "data");
    if (ensure_dir(d)) return -1;
    for (int j = 0; j < NL; j++) {
        /* 4 examples of random letters at the length: only the cost is measured */
        char p[8192];
        snprintf(p, sizeof p, "%s/len%d.tsv", d, lens[j]);
        sbuf t = {0};
        uint64_t g = 1234 + (uint64_t)j;
        for (int e = 0; e < 4; e++) {
            sbuf_printf(&t, "%d\t", e & 1);
            for (int i = 0; i < lens[j]; i++) sbuf_printf(&t, "%c", 'a' + (int)(u01(&g) * 26));
            sbuf_printf(&t, "\n");
        }
        int e = sbuf_write(&t, p);
        sbuf_free(&t);
        if (e) return -1;
        xl[j] = lens[j];
        for (int i = 0; i < NM; i++) {
            char id[64], common[20000];
            xlog lg;
            xrun r;
            double pr;
            snprintf(id, sizeof id, "%s-%d", M[i].id, lens[j]);
            snprintf(common, sizeof common,
                     "--task classify --data %s --valid %s --seq-len %d --max-positions %d --batch 1 --steps 4 "
                     "--warmup 1 --eval-every 0 --eval-tokens 1 --log-every 1 %s",
                     p, p, lens[j], lens[j], c->quick ? "--layers 1 --embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64"
                                                      : "--layers 2 --embed-dim 128 --z-dim 64 --hidden-dim 256 --ffn-dim 256");
            sec[i][j] = mib[i][j] = NAN;
            if (train_model(c, id, common, M[i].flags, "acc", &lg, &pr, &r)) continue;
            /* steps 2-4: the first step also sizes the buffers */
            if (lg.steps == 4 && lg.first_step == 1) sec[i][j] = (lg.train_s - lg.first_train_s) / 3;
            mib[i][j] = r.peak_mib;
        }
    }
    sbuf_printf(&c->md, "One training step (forward, backward, AdamW) of a %s classifier, batch 1, on %d threads: "
                        "seconds per step (the mean of steps 2-4) and the process's peak resident memory.%s\n\n"
                        "| model | length | s/step | peak memory (MiB) |\n|---|---|---|---|\n",
                c->quick ? "toy" : "2-layer D 128", c->threads, c->quick ? " Quick mode: meaningless numbers." : "");
    svg_series st[NM], sm[NM];
    for (int i = 0; i < NM; i++) {
        for (int j = 0; j < NL; j++) {
            char b1[32], b2[32];
            fmt_num(b1, 32, sec[i][j], "%.3f"), fmt_num(b2, 32, mib[i][j], "%.0f");
            sbuf_printf(&c->md, "| %s | %d | %s | %s |\n", M[i].label, lens[j], b1, b2);
        }
        st[i] = (svg_series){M[i].label, xl, sec[i], NL, 1, 0};
        sm[i] = (svg_series){M[i].label, xl, mib[i], NL, 1, 0};
    }
    sbuf_printf(&c->md, "\nCommands (one length shown per model):\n\n");
    for (int i = 0; i < NM; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%d", M[i].id, lens[NL - 1]);
        md_cmd(c, id);
    }
    svg_chart c1 = {"training step time against length", "sequence length (tokens)", "seconds per step", 1, 1, 1};
    svg_chart c2 = {"peak memory against length", "sequence length (tokens)", "peak resident memory (MiB)", 1, 1, 1};
    sbuf a = {0}, b = {0};
    svg_line_chart(&a, &c1, st, NM);
    svg_line_chart(&b, &c2, sm, NM);
    return write_fig(c, "speed-time.svg", &a) || write_fig(c, "speed-memory.svg", &b) ? -1 : 0;
}

