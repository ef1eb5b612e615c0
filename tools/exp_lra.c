/* The classification experiments of `mega experiment`: lra (ListOps and sequential Fashion-MNIST at
 * equal parameters and time) and the Mega ablations on both tasks. */
#include "experiment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- lra: long-range classification at equal parameters and equal time ---- */

/* the model of both classification tasks; the width of the normalized FFN is each model's own
 * flag (--ffn-dim: Mega's default, the others' matched to Mega's parameter count) */
#define LRA_MODEL_QUICK "--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --n-dim 4 --eval-every 4 --eval-tokens 60"
#define LRA_MODEL "--layers 2 --embed-dim 64 --z-dim 32 --hidden-dim 128 --n-dim 16 --eval-every 100 --eval-tokens 500"
/* the sentence of results.md that says how Fashion-MNIST is split */
void fashion_note(xctx *c) {
    sbuf_printf(&c->md, "Fashion-MNIST: the first 55,000 training images train, the last 5,000 validate, and the test accuracy is "
                        "measured on the first %d of the 10000 test images.%s\n\n",
                FASHION_TEST, c->quick ? " Quick mode: 200 training, 50 validation and 50 test images." : "");
}
/* training seconds per model in the lra experiment */
#define LRA_BUDGET 75

/* the tasks in `want` (bit 0: ListOps -> t[0], bit 1: Fashion-MNIST -> t[1]) */
int lra_tasks(xctx *c, xtask *t, int want) {
    const char *model = c->quick ? LRA_MODEL_QUICK : LRA_MODEL;
    int cls;
    if (want & 1) {
        char ld[4096], p[8192];
        if (listops_data(c, ld, sizeof ld)) return -1;
        int *ytr = NULL, *yte = NULL;
        snprintf(p, sizeof p, "%s/train.tsv", ld);
        int ntr = tsv_labels(p, &ytr);
        snprintf(p, sizeof p, "%s/test.tsv", ld);
        int nte = tsv_labels(p, &yte);
        if (ntr < 0 || nte < 0) return free(ytr), free(yte), -1;
        t[0] = (xtask){.id = "listops", .label = "ListOps (generated, 30-150 tokens)"};
        t[0].majority = majority(ytr, ntr, yte, nte, &cls);
        t[0].budget = c->quick ? 1 : LRA_BUDGET;
        free(ytr), free(yte);
        snprintf(t[0].common, sizeof t[0].common,
                 "--task classify --data %s/train.tsv --valid %s/valid.tsv --seq-len %d --chunk-size -1 --batch %d --warmup %d %s", ld,
                 ld, c->quick ? 64 : 150, c->quick ? 8 : 32, c->quick ? 2 : 100, model);
        snprintf(t[0].test_args, sizeof t[0].test_args, "--data %s/test.tsv", ld);
    }
    if (want & 2) {
        char fd[4096];
        int *labels[3] = {0}, cnt[3];
        int e = fashion_data(c, fd, sizeof fd, FASHION_TEST, labels, cnt);
        if (!e) {
            t[1] = (xtask){.id = "fmnist", .label = "sequential Fashion-MNIST (784 pixels)"};
            t[1].majority = majority(labels[0], cnt[0], labels[2], cnt[2], &cls);
            t[1].budget = c->quick ? 1 : LRA_BUDGET;
            snprintf(t[1].common, sizeof t[1].common,
                     "--task classify --images %s/train-images.idx --labels %s/train-labels.idx --valid-images %s/valid-images.idx "
                     "--valid-labels %s/valid-labels.idx --seq-len 784 --chunk-size 112 --batch %d --warmup %d %s",
                     fd, fd, fd, fd, c->quick ? 4 : 8, c->quick ? 2 : 30, model);
            snprintf(t[1].test_args, sizeof t[1].test_args, "--images %s/test-images.idx --labels %s/test-labels.idx", fd, fd);
        }
        for (int s = 0; s < 3; s++) free(labels[s]);
        if (e) return -1;
    }
    return 0;
}

/* test accuracy of a trained classifier */
double test_accuracy(xctx *c, const xtask *t, const char *id) {
    char log[256], run[4096];
    snprintf(log, sizeof log, "%s-test", id);
    snprintf(run, sizeof run, "%s/runs/%s", c->dir, id);
    xargv a = {0};
    xrun r;
    double acc = NAN;
    xa(&a, c->self), xa(&a, "eval"), xaf(&a, "--model=%s", run), xwords(&a, t->test_args);
    xaf(&a, "--threads=%d", c->threads), xa(&a, "--quiet");
    if (!xrun_ok(c, log, &a, &r)) log_number(c, log, "accuracy ", &acc);
    return acc;
}

int exp_lra(xctx *c) {
    static const xmodel M[] = {
        {"mega", "Mega", "--mixer mega"},
        {"mha", "Transformer (mha, RoPE)", "--mixer mha --pos rope"},
        {"local", "local attention (RoPE)", "--mixer local --pos rope"},
        {"abc", "ABC (learned control; no positions)", "--mixer abc-mlp"},
        {"aft", "AFT-local (window 32)", "--mixer aft-local --window 32"},
    };
    enum { NM = sizeof M / sizeof *M };
    xtask T[2];
    if (lra_tasks(c, T, 3)) return -1;
    sbuf_printf(&c->md, "Each model of a task trains for the same time (`--time-budget`: ListOps %d s, Fashion-MNIST %d s; validation excluded) on "
                        "%d threads; the FFN width of the other mixers is set so that every model has about as many "
                        "parameters as Mega. The classifiers have no absolute position embedding: Mega gets order from its EMA, "
                        "the attention mixers from RoPE, AFT-local from its learned position biases; the ABC mixer has none "
                        "here (it refuses relative schemes), so it sees the tokens as a bag.%s\n\n", T[0].budget, T[1].budget, c->threads,
                c->quick ? " Quick mode: toy sizes, meaningless numbers." : "");
    fashion_note(c);
    for (int k = 0; k < 2; k++) {
        xtask *t = &T[k];
        xcurve cv[NM];
        double mega_p = NAN;
        sbuf_printf(&c->md, "### %s\n\n| model | parameters | steps | test accuracy |\n|---|---|---|---|\n", t->label);
        for (int i = 0; i < NM; i++) {
            char id[64], flags[512], common[24000];
            xrun r;
            double p = NAN;
            snprintf(id, sizeof id, "%s-%s", t->id, M[i].id);
            const int F0 = c->quick ? 32 : 128;
            snprintf(flags, sizeof flags, "%s --ffn-dim %d", M[i].flags, F0);
            if (i > 0 && isfinite(mega_p)) {
                /* equal parameters: probe at the default FFN width, then move the width by the
                 * FFN's 2D + 1 parameters per unit per layer (fc1 and fc2 of the normalized FFN) */
                char pid[80];
                xlog pg;
                snprintf(pid, sizeof pid, "%s-probe", id);
                snprintf(common, sizeof common, "%s --steps 1 --eval-every 0", t->common);
                if (!train_model(c, pid, common, flags, "acc", &pg, &p, &r) && isfinite(p)) {
                    const int D = c->quick ? 16 : 64, L = c->quick ? 1 : 2;
                    int F = (int)lround(F0 + (mega_p - p) / (L * (2.0 * D + 1)));
                    F = F < 8 ? 8 : (F + 4) / 8 * 8;
                    snprintf(flags, sizeof flags, "%s --ffn-dim %d", M[i].flags, F);
                }
            }
            snprintf(common, sizeof common, "%s --time-budget %d --steps 1000000", t->common, t->budget);
            cv[i].label = M[i].label;
            train_model(c, id, common, flags, "acc", &cv[i].g, &p, &r);
            if (i == 0) mega_p = p;
            const double acc = test_accuracy(c, t, id);
            char b1[32], b2[32];
            fmt_num(b1, 32, p, "%.0f"), fmt_num(b2, 32, 100 * acc, "%.1f %%");
            sbuf_printf(&c->md, "| %s (`%s`) | %s | %d | %s |\n", M[i].label, flags, b1, cv[i].g.steps, b2);
        }
        sbuf_printf(&c->md, "| majority class | | | %.1f %% |\n\nCommands:\n\n", 100 * t->majority);
        for (int i = 0; i < NM; i++) {
            char id[64];
            snprintf(id, sizeof id, "%s-%s", t->id, M[i].id);
            md_cmd(c, id);
        }
        char f[128], title[200];
        snprintf(f, sizeof f, "lra-%s-curves.svg", t->id);
        snprintf(title, sizeof title, "%s: validation accuracy at equal training time", t->label);
        if (curves_fig(c, f, title, "validation accuracy", cv, NM, 0)) return -1;
        sbuf_printf(&c->md, "\n");
    }
    return 0;
}

/* ---- ablation: Mega's EMA dimension, chunk size and attention function ---- */

/* optimizer steps of every ablation variant (a fixed count, so the variants differ only in
 * the one thing changed; their time per step is reported) */
#define ABL_STEPS_LISTOPS 800
#define ABL_STEPS_FMNIST 600

/* the ablation on task k (0: ListOps, 1: Fashion-MNIST). The reference is the lra experiment's
 * Mega: full attention on ListOps (expressions of at most 150 tokens), chunks of 112 on the 784
 * pixels; the chunk rows are 16, 64 and the third of {128, full} that is not the reference. */
int exp_ablation_task(xctx *c, int k) {
    xmodel V[] = {
        {"base", "", ""},
        {"n0", "EMA dimension 0 (no EMA)", "--n-dim 0"},
        {"n1", "EMA dimension 1", "--n-dim 1"},
        {"n2", "EMA dimension 2", "--n-dim 2"},
        {"n4", "EMA dimension 4", "--n-dim 4"},
        {"n8", "EMA dimension 8", "--n-dim 8"},
        {"c16", "chunk 16", "--chunk-size 16"},
        {"c64", "chunk 64", "--chunk-size 64"},
        {"", "", ""},
        {"relu2", "relu² attention", "--attention-activation relu2"},
        {"laplace", "Laplace attention", "--attention-activation laplace"},
    };
    enum { NV = sizeof V / sizeof *V };
    if (k == 0) {
        V[0].label = "EMA dimension 16, full attention, softmax (the reference)";
        V[8] = (xmodel){"c128", "chunk 128", "--chunk-size 128"};
    } else {
        /* the reference is the lra experiment's image model as it is, chunks of 112 pixels (a
         * divisor of 784: no padding); every variant keeps them unless it is a chunk row */
        V[0].label = "EMA dimension 16, chunk 112, softmax (the reference)";
        V[8] = (xmodel){"full", "full attention", "--chunk-size -1"};
    }
    xtask T[2];
    if (lra_tasks(c, T, 1 << k)) return -1;
    const xtask *t = &T[k];
    const int steps = c->quick ? 4 : (k ? ABL_STEPS_FMNIST : ABL_STEPS_LISTOPS), batch = k ? (c->quick ? 4 : 8) : (c->quick ? 8 : 32);
    double acc[NV], sps[NV];
    xcurve cv[NV];
    for (int i = 0; i < NV; i++) {
        char id[64], common[24000];
        xrun r;
        double p;
        snprintf(id, sizeof id, "%s-%s", t->id, V[i].id);
        snprintf(common, sizeof common, "%s --ffn-dim %d --steps %d --eval-every %d", t->common, c->quick ? 32 : 128, steps,
                 steps / 4);
        cv[i].label = V[i].label;
        train_model(c, id, common, V[i].flags, "acc", &cv[i].g, &p, &r);
        acc[i] = test_accuracy(c, t, id);
        sps[i] = cv[i].g.steps ? cv[i].g.train_s / cv[i].g.steps : NAN;
    }
    sbuf_printf(&c->md, "Mega (the lra experiment's model) with one thing changed, each trained for %d steps at batch %d on %s; "
                        "test accuracy and training seconds per step.%s\n\n",
                steps, batch, t->label, c->quick ? " Quick mode: meaningless numbers." : "");
    if (k) fashion_note(c);
    sbuf_printf(&c->md, "| variant | flags | test accuracy | s/step |\n|---|---|---|---|\n");
    for (int i = 0; i < NV; i++) {
        char a0[32], s0[32];
        fmt_num(a0, 32, 100 * acc[i], "%.1f %%"), fmt_num(s0, 32, sps[i], "%.3f");
        sbuf_printf(&c->md, "| %s | `%s` | %s | %s |\n", V[i].label, V[i].flags, a0, s0);
    }
    sbuf_printf(&c->md, "| majority class | | %.1f %% | |\n\nCommands (the common flags, then each variant's):\n\n", 100 * t->majority);
    for (int i = 0; i < NV; i++) {
        char id[64];
        snprintf(id, sizeof id, "%s-%s", t->id, V[i].id);
        md_cmd(c, id);
    }
    /* accuracy against the EMA dimension: the reference run is n 16 */
    static const int order[6] = {1, 2, 3, 4, 5, 0};
    double x[6], y[6];
    for (int j = 0; j < 6; j++) x[j] = j == 5 ? 16 : (j == 0 ? 0 : 1 << (j - 1)), y[j] = 100 * acc[order[j]];
    char f[128], title[200];
    svg_series s[1] = {{t->label, x, y, 6, 1, 0}};
    snprintf(title, sizeof title, "Mega on %s: test accuracy against the EMA dimension", t->label);
    svg_chart ch = {title, "EMA dimension n", "test accuracy (%)", 0, 0, 0};
    sbuf svg = {0};
    svg_line_chart(&svg, &ch, s, 1);
    snprintf(f, sizeof f, "ablation-%s-ema.svg", t->id);
    if (write_fig(c, f, &svg)) return -1;
    snprintf(f, sizeof f, "ablation-%s-curves.svg", t->id);
    snprintf(title, sizeof title, "Mega ablations on %s: validation accuracy", t->label);
    return curves_fig(c, f, title, "validation accuracy", cv, NV, 1);
}

int exp_ablation_listops(xctx *c) { return exp_ablation_task(c, 0); }
int exp_ablation_fmnist(xctx *c) { return exp_ablation_task(c, 1); }
