/* `mega experiment vision`: images as patches against images as pixels, Mega against a vision
 * Transformer, on Fashion-MNIST at equal parameters and equal training time.
 *
 * The Mega paper's ImageNet model (Ma et al. 2023, §4.5 and Table 7) is a DeiT-style vision
 * Transformer (Touvron et al. 2021) whose attention is replaced by Mega: the image enters as a
 * sequence of patches in raster order through a linear patch embedding (Dosovitskiy et al. 2021),
 * Mega's EMA runs over that sequence in both directions, and the pooled sequence feeds the head.
 * Here both models are the classifier of `mega train --task classify` with `--patch 4` (a 28 x 28
 * image is 49 positions of 16 pixels): Mega, and the Transformer's multi-head softmax attention
 * with RoPE as its position encoding (the ViT). Both pool by the mean over the positions (our
 * classifier has no learned class token) and have no stochastic depth; the paper's augmentations
 * (Mixup, CutMix, RandAugment, ...) are out of reach of a few minutes of CPU. The same two mixers
 * also read the 784 pixels one position each, so the table shows what the patch input buys at
 * equal time. */
#include "experiment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VIS_MODEL_QUICK "--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --n-dim 4 --eval-tokens 50"
#define VIS_MODEL "--layers 2 --embed-dim 64 --z-dim 32 --hidden-dim 128 --n-dim 16 --eval-tokens 500"
/* training seconds per model */
#define VIS_BUDGET 120

int exp_vision(xctx *c) {
    static const xmodel M[] = {
        {"mega-patch", "Mega, 4x4 patches (49 positions)", "--mixer mega --patch 4"},
        {"vit-patch", "ViT: Transformer (mha, RoPE), 4x4 patches (49 positions)", "--mixer mha --pos rope --patch 4"},
        {"mega-pixel", "Mega, pixels (784 positions, chunks of 112)", "--mixer mega --chunk-size 112"},
        {"mha-pixel", "Transformer (mha, RoPE), pixels (784 positions)", "--mixer mha --pos rope"},
    };
    enum { NM = sizeof M / sizeof *M };
    char fd[4096];
    int *labels[3] = {0}, cnt[3], cls;
    if (fashion_data(c, fd, sizeof fd, FASHION_TEST, labels, cnt)) {
        for (int s = 0; s < 3; s++) free(labels[s]);
        return -1;
    }
    xtask t = {.id = "fmnist", .label = "Fashion-MNIST"};
    t.majority = majority(labels[0], cnt[0], labels[2], cnt[2], &cls);
    for (int s = 0; s < 3; s++) free(labels[s]);
    t.budget = c->quick ? 1 : VIS_BUDGET;
    const int D = c->quick ? 16 : 64, L = c->quick ? 1 : 2, F0 = c->quick ? 32 : 128;
    /* every model reads real-valued pixels (x/255 normalised): a patch through the patch
     * embedding, a pixel through the per-pixel scale and shift */
    snprintf(t.common, sizeof t.common,
             "--task classify --images %s/train-images.idx --labels %s/train-labels.idx --valid-images %s/valid-images.idx "
             "--valid-labels %s/valid-labels.idx --embedding real --prenorm --batch %d --lr 3e-3 --warmup %d %s",
             fd, fd, fd, fd, c->quick ? 8 : 32, c->quick ? 2 : 50, c->quick ? VIS_MODEL_QUICK : VIS_MODEL);
    snprintf(t.test_args, sizeof t.test_args, "--images %s/test-images.idx --labels %s/test-labels.idx", fd, fd);
    sbuf_printf(&c->md,
                "Each model trains for the same time (`--time-budget %d`, validation excluded) on %d thread(s), at batch %d; the "
                "FFN width of the others is set so that every model has about as many parameters as Mega on patches. Every "
                "model reads real-valued pixels, pre-norm, mean pooling over the positions (no class token, no stochastic "
                "depth, no augmentation). The ViT is our Transformer (multi-head softmax attention) with RoPE over the patches "
                "in raster order as its position encoding; Mega's bidirectional EMA runs over the same order.%s\n\n",
                t.budget, c->threads, c->quick ? 8 : 32, c->quick ? " Quick mode: toy sizes, meaningless numbers." : "");
    fashion_note(c);
    sbuf_printf(&c->md, "| model | flags | parameters | steps | s/step | test accuracy |\n|---|---|---|---|---|---|\n");
    xcurve cv[NM];
    double mega_p = NAN;
    for (int i = 0; i < NM; i++) {
        char id[64], flags[512], common[24000];
        xrun r;
        double p = NAN;
        /* a pixel model takes 49 times the positions per image: it validates more often (in
         * steps) so that its curve has points */
        snprintf(id, sizeof id, "%s", M[i].id);
        snprintf(common, sizeof common, "%s --eval-every %d", t.common, c->quick ? 4 : (i < 2 ? 100 : 10));
        const int F = i ? match_ffn(c, id, common, M[i].flags, F0, D, L, mega_p) : F0;
        snprintf(flags, sizeof flags, "%s --ffn-dim %d", M[i].flags, F);
        snprintf(common + strlen(common), sizeof common - strlen(common), " --time-budget %d --steps 1000000", t.budget);
        cv[i].label = M[i].label;
        train_model(c, id, common, flags, "acc", &cv[i].g, &p, &r);
        if (i == 0) mega_p = p;
        const double acc = test_accuracy(c, &t, id);
        char b1[32], b2[32], b3[32];
        fmt_num(b1, 32, p, "%.0f"), fmt_num(b2, 32, 100 * acc, "%.1f %%");
        fmt_num(b3, 32, cv[i].g.steps ? cv[i].g.train_s / cv[i].g.steps : NAN, "%.3f");
        sbuf_printf(&c->md, "| %s | `%s` | %s | %d | %s | %s |\n", M[i].label, flags, b1, cv[i].g.steps, b3, b2);
    }
    sbuf_printf(&c->md, "| majority class | | | | | %.1f %% |\n\nCommands:\n\n", 100 * t.majority);
    for (int i = 0; i < NM; i++) md_cmd(c, M[i].id);
    sbuf_printf(&c->md,
                "\nFor context, not comparable: the Mega paper's ImageNet-1k figures (Table 7; 224 x 224 images as 196 "
                "patches of 16 x 16, 300 to 400 epochs on GPUs with DeiT's augmentations and stochastic depth) are top-1 "
                "accuracy 82.3 %% for Mega (90M parameters) against 81.8 %% for DeiT-B (86M).\n");
    return curves_fig(c, "vision-curves.svg", "Fashion-MNIST: validation accuracy at equal training time", "validation accuracy", cv, NM, 0);
}
