/* `mega experiment pathfinder`: the Pathfinder task of the Long Range Arena at 32 x 32, easy (6
 * paddles per path) and hard (14), made by `mega pathfinder` (src/data/pathfinder.c) as a child
 * process; Mega against the Transformer at equal parameters and equal training time, with their
 * learning curves, and the generator's statistics (label balance, ink, distractors, markers; the
 * ink per image by label, which must not give the label away) with a figure of samples.
 *
 * The paper (Ma et al. 2023, Table 2) reads the 1,024 pixels one position each and trains 250,000
 * steps of batch 128; a CPU budget of minutes cannot, so both models here read 4 x 4 patches (64
 * positions of 16 pixels, `--patch 4`) and results.md says what that leaves out. */
#include "experiment.h"
#include "mega_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PF_MODEL_QUICK "--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --n-dim 4 --eval-every 4 --eval-tokens 20"
#define PF_MODEL "--layers 2 --embed-dim 64 --z-dim 32 --hidden-dim 128 --n-dim 16 --eval-every 100 --eval-tokens 500"
/* training seconds per model and difficulty */
#define PF_BUDGET 150
/* images per difficulty: training (the last 5% validate) and test (another seed) */
#define PF_TRAIN 20000
#define PF_TEST 2000
/* images of a set scanned for the ink histogram */
#define PF_SCAN 2000
#define PF_BINS 50 /* ink per image in bins of 0.5 % from 0 to 25 % (a pixel is 0.1 %) */

typedef struct {
    double label1, ink, distractors, dpaddles, attempts, markers; /* as `mega pathfinder` prints them */
    int wanted;
    double hist[2][PF_BINS]; /* share of the images of label 0 / 1 (%) per ink bin */
    double ink_by_label[2];  /* mean ink per image (%) */
    int *labels, n;          /* every label of the set */
} pf_set;

/* `mega pathfinder` into OUT/NAME/data/pathfinder32-SPLIT-N (the count in the name: a rerun of
 * another size never reads stale batches); dir gets the difficulty's directory */
static int pf_generate(xctx *c, int hard, const char *split, int count, long long seed, char *dir, size_t n) {
    mega_pathfinder_params p;
    if (mega_pathfinder_defaults(32, hard ? 2 : 0, &p) != MEGA_OK) return cli_error("%s", mega_last_error()), -1;
    char top[2200], log[64];
    path_join(top, sizeof top, c->dir, "data");
    if (ensure_dir(top)) return -1;
    snprintf(top, sizeof top, "%s/data/pathfinder32-%s-%d", c->dir, split, count);
    snprintf(dir, n, "%s/%s", top, mega_pathfinder_subdir(p.contour_length));
    snprintf(log, sizeof log, "data-%s-%s", split, hard ? "hard" : "easy");
    xargv a = {0};
    xrun r;
    xa(&a, c->self), xa(&a, "pathfinder"), xaf(&a, "--out=%s", top), xa(&a, "--size=32"), xaf(&a, "--difficulty=%s", hard ? "hard" : "easy");
    xaf(&a, "--count=%d", count), xaf(&a, "--seed=%lld", seed);
    if (!strcmp(split, "train")) xaf(&a, "--figure=%s/pathfinder-%s.png", c->dir, hard ? "hard" : "easy");
    return xrun_ok(c, log, &a, &r) ? -1 : 0;
}

/* the generator's summary line in its log */
static int pf_summary(xctx *c, const char *log, pf_set *s) {
    char lp[4096], line[1024];
    snprintf(lp, sizeof lp, "%s/logs/%s.txt", c->dir, log);
    FILE *f = fopen(lp, "r");
    int ok = -1;
    while (f && ok && fgets(line, sizeof line, f))
        if (sscanf(line, "label 1: %lf%%; ink (pixels > 0): %lf%%; distractors %lf of %d (%lf paddles); pair attempts %lf; markers on ink %lf%%",
                   &s->label1, &s->ink, &s->distractors, &s->wanted, &s->dpaddles, &s->attempts, &s->markers) == 7)
            ok = 0;
    if (f) fclose(f);
    return ok ? (cli_error("%s: no summary line of mega pathfinder", lp), -1) : 0;
}

/* every label of a generated set (its metadata, in batch order) and, over its first PF_SCAN
 * images, the ink per image by label */
static int pf_scan(const char *dir, pf_set *s) {
    int cap = 1024, seen[2] = {0, 0};
    double sum[2] = {0, 0};
    s->labels = malloc(sizeof(int) * (size_t)cap), s->n = 0;
    memset(s->hist, 0, sizeof s->hist);
    for (int k = 0; s->labels; k++) {
        char p[8192], line[512], file[256];
        snprintf(p, sizeof p, "%s/metadata/%d.npy", dir, k);
        FILE *f = fopen(p, "r");
        if (!f) break;
        int sub, lab, idx;
        while (s->labels && fgets(line, sizeof line, f) && sscanf(line, "imgs/%d %255s %d %d", &sub, file, &idx, &lab) == 4) {
            if (s->n == cap) s->labels = realloc(s->labels, sizeof(int) * (size_t)(cap *= 2));
            if (!s->labels) break;
            s->labels[s->n++] = lab;
            if (s->n > PF_SCAN || lab < 0 || lab > 1) continue;
            uint8_t *px;
            int w, h;
            snprintf(p, sizeof p, "%s/imgs/%d/%s", dir, sub, file);
            if (mega_png_read_gray(p, "Pathfinder image", 64, &px, &w, &h) != MEGA_OK) {
                fclose(f);
                return cli_error("%s", mega_last_error()), -1;
            }
            int ink = 0;
            for (int i = 0; i < w * h; i++) ink += px[i] > 0;
            free(px);
            const double frac = 100.0 * ink / (w * h);
            const int b = (int)(frac * 2);
            s->hist[lab][b < PF_BINS ? b : PF_BINS - 1] += 1;
            sum[lab] += frac, seen[lab]++;
        }
        fclose(f);
    }
    if (!s->labels) return cli_error("out of memory"), -1;
    if (!s->n) return cli_error("%s: no metadata", dir), -1;
    for (int l = 0; l < 2; l++) {
        s->ink_by_label[l] = seen[l] ? sum[l] / seen[l] : NAN;
        for (int b = 0; b < PF_BINS; b++) s->hist[l][b] = seen[l] ? 100 * s->hist[l][b] / seen[l] : NAN;
    }
    return 0;
}

/* the statistics table, the samples and the ink figure */
static int pf_stats_md(xctx *c, pf_set *S) {
    sbuf_printf(&c->md, "### The generated data\n\nThe training sets, as `mega pathfinder` reports them (label balance, pixels above zero, "
                        "distractor paths drawn of those wanted and their paddles, target pairs drawn per kept image, markers on "
                        "ink) and, over their first %d images, the mean ink per image by label: a model cannot read the label off "
                        "the amount of ink when the two agree.\n\n", PF_SCAN);
    sbuf_printf(&c->md, "| set | images | paddles per path | label 1 | ink | ink, label 0 | ink, label 1 | distractors | distractor paddles | "
                        "pair attempts | markers on ink |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int h = 0; h < 2; h++) {
        char a[32], b[32];
        fmt_num(a, 32, S[h].ink_by_label[0], "%.1f %%"), fmt_num(b, 32, S[h].ink_by_label[1], "%.1f %%");
        sbuf_printf(&c->md, "| 32 %s | %d | %d | %.1f %% | %.1f %% | %s | %s | %.2f of %d | %.1f | %.2f | %.0f %% |\n", h ? "hard" : "easy",
                    S[h].n, h ? 14 : 6, S[h].label1, S[h].ink, a, b, S[h].distractors, S[h].wanted, S[h].dpaddles, S[h].attempts,
                    S[h].markers);
    }
    sbuf_printf(&c->md, "\nThe first 16 training images of each set (enlarged 4 x; the grey squares are the markers):\n\n"
                        "![easy](pathfinder-easy.png) ![hard](pathfinder-hard.png)\n");
    double x[PF_BINS];
    for (int b = 0; b < PF_BINS; b++) x[b] = 0.5 * b + 0.25;
    svg_series s[4] = {{"easy, label 0", x, S[0].hist[0], PF_BINS, 0, 1}, {"easy, label 1", x, S[0].hist[1], PF_BINS, 0, 0},
                       {"hard, label 0", x, S[1].hist[0], PF_BINS, 0, 1}, {"hard, label 1", x, S[1].hist[1], PF_BINS, 0, 0}};
    svg_chart ch = {"Pathfinder-32: ink per image by label", "pixels above zero per image (%, bins of 0.5)", "images (% of the label)", 0, 0, 0};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, 4);
    return write_fig(c, "pathfinder-ink.svg", &svg);
}

int exp_pathfinder(xctx *c) {
    static const xmodel M[] = {
        {"mega", "Mega", "--mixer mega"},
        {"mha", "Transformer (mha, RoPE)", "--mixer mha --pos rope"},
    };
    enum { NM = sizeof M / sizeof *M };
    if (!mega_png_available())
        return cli_error("the pathfinder experiment needs PNG images: this build has no libpng (install libpng-dev and rebuild)"), -1;
    const int ntr = c->quick ? 80 : PF_TRAIN, nte = c->quick ? 40 : PF_TEST, budget = c->quick ? 1 : PF_BUDGET;
    const int D = c->quick ? 16 : 64, L = c->quick ? 1 : 2, F0 = c->quick ? 32 : 128;
    pf_set S[2];
    xtask T[2];
    memset(S, 0, sizeof S);
    int e = 0;
    for (int h = 0; h < 2 && !e; h++) {
        char tr[4096], te[4096];
        e = pf_generate(c, h, "train", ntr, c->seed, tr, sizeof tr) || pf_generate(c, h, "test", nte, c->seed + 1000, te, sizeof te) ||
            pf_summary(c, h ? "data-train-hard" : "data-train-easy", &S[h]) || pf_scan(tr, &S[h]);
        pf_set st = {0};
        if (!e) e = pf_scan(te, &st);
        if (e) {
            free(st.labels);
            break;
        }
        int cls;
        T[h] = (xtask){.id = h ? "hard" : "easy", .label = h ? "Pathfinder-32, hard (14 paddles per path)" : "Pathfinder-32, easy (6 paddles per path)"};
        T[h].majority = majority(S[h].labels, S[h].n, st.labels, st.n, &cls);
        T[h].budget = budget;
        free(st.labels);
        snprintf(T[h].common, sizeof T[h].common,
                 "--task classify --data %s --embedding real --patch 4 --prenorm --batch %d --lr 3e-3 --warmup %d %s", tr,
                 c->quick ? 8 : 32, c->quick ? 2 : 100, c->quick ? PF_MODEL_QUICK : PF_MODEL);
        snprintf(T[h].test_args, sizeof T[h].test_args, "--data %s", te);
    }
    if (!e) e = pf_stats_md(c, S);
    for (int h = 0; h < 2; h++) free(S[h].labels);
    if (e) return -1;
    sbuf_printf(&c->md, "\n### Mega against the Transformer\n\n%d training images per difficulty (seed %lld; the last 5 %% validate) and %d "
                        "test images (seed %lld). Each model reads the 32 x 32 image as 4 x 4 patches (64 positions of 16 pixels, "
                        "`--patch 4`), mean pooling, and trains for the same time (`--time-budget %d`, validation excluded) on %d "
                        "thread(s) at batch %d; the Transformer's FFN width is set so that it has about as many parameters as Mega.%s\n\n",
                ntr, c->seed, nte, c->seed + 1000, budget, c->threads, c->quick ? 8 : 32,
                c->quick ? " Quick mode: toy sizes, meaningless numbers." : "");
    sbuf_printf(&c->md, "| model | flags | parameters | steps | s/step | test accuracy |\n|---|---|---|---|---|---|\n");
    xcurve cv[2][NM];
    for (int h = 0; h < 2; h++) {
        double mega_p = NAN;
        for (int i = 0; i < NM; i++) {
            char id[64], flags[512], common[24000];
            xrun r;
            double p = NAN;
            snprintf(id, sizeof id, "%s-%s", T[h].id, M[i].id);
            const int F = i ? match_ffn(c, id, T[h].common, M[i].flags, F0, D, L, mega_p) : F0;
            snprintf(flags, sizeof flags, "%s --ffn-dim %d", M[i].flags, F);
            snprintf(common, sizeof common, "%s --time-budget %d --steps 1000000", T[h].common, budget);
            cv[h][i].label = M[i].label;
            train_model(c, id, common, flags, "acc", &cv[h][i].g, &p, &r);
            if (i == 0) mega_p = p;
            const double acc = test_accuracy(c, &T[h], id);
            char b1[32], b2[32], b3[32];
            fmt_num(b1, 32, p, "%.0f"), fmt_num(b2, 32, 100 * acc, "%.1f %%");
            fmt_num(b3, 32, cv[h][i].g.steps ? cv[h][i].g.train_s / cv[h][i].g.steps : NAN, "%.3f");
            sbuf_printf(&c->md, "| %s: %s | `%s` | %s | %d | %s | %s |\n", T[h].id, M[i].label, flags, b1, cv[h][i].g.steps, b3, b2);
        }
        sbuf_printf(&c->md, "| majority class (%s) | | | | | %.1f %% |\n", T[h].id, 100 * T[h].majority);
    }
    sbuf_printf(&c->md, "\nCommands:\n\n");
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < NM; i++) {
            char id[64];
            snprintf(id, sizeof id, "%s-%s", T[h].id, M[i].id);
            md_cmd(c, id);
        }
    sbuf_printf(&c->md,
                "\nWhere this stops short of the paper: its Pathfinder figures (hard set, 1,024 pixels one position each; Mega "
                "96.01 %%, Mega-chunk 94.41 %%, the Transformer 71.40 %% in the Long Range Arena and 71.83 %% in the Mega paper's "
                "rerun) come from 250,000 steps of batch 128 (32 million images) over 200,000 images on a GPU. Here each model "
                "sees %s images in %d s and reads patches, so the sequence is 16 times shorter than the task's; the figures below "
                "show how far a CPU budget gets, not the paper's separation.\n",
                c->quick ? "a few" : "some tens of thousands of", budget);
    for (int h = 0; h < 2; h++) {
        char f[128], title[200];
        snprintf(f, sizeof f, "pathfinder-%s-curves.svg", T[h].id);
        snprintf(title, sizeof title, "%s: validation accuracy at equal training time", T[h].label);
        if (curves_fig(c, f, title, "validation accuracy", cv[h], NM, 0)) return -1;
    }
    return 0;
}
