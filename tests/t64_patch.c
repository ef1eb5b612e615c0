/* Images as patches in the classifier (mega_cls_config.patch; docs/vision.md), in double
 * precision: every parameter's gradient against finite differences with 2 x 2 patches of 4 x 6
 * images (the patch embedding, the blocks behind it, the head); patch 1 against the per-pixel
 * real-number embedding with the same weights (the same logits: a 1 x 1 patch is one pixel
 * through the same affine map); a patch that does not divide the width refused. */
#include "fd.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, H = 4, W = 6, T = H * W };

static mega_cls_config small_cfg(int patch) {
    mega_cls_config c;
    mega_cls_config_default(&c);
    c.layers = 1, c.embedding = MEGA_EMBED_REAL, c.classes = 3, c.classifier_dim = 8;
    c.block.embed_dim = 8, c.block.hidden_dim = 16, c.block.z_dim = 4, c.block.n_dim = 2, c.block.ffn_dim = 12;
    c.block.dropout = c.block.attention_dropout = c.block.hidden_dropout = 0;
    c.patch = patch, c.image_width = W;
    return c;
}

typedef struct {
    mega_cls *m;
    mega_real x[B * T];
    int32_t len[B], y[B];
} prob;

static double loss_of(void *arg) {
    prob *p = arg;
    mega_cls_input in = {NULL, p->x, p->len, T};
    double l = 0;
    mega_cls_forward(p->m, &in, NULL, B, p->y, NULL, &l, NULL);
    return l;
}

static void test_fd(void) {
    mega_cls_config c = small_cfg(2);
    prob p;
    TL_CHECK(mega_cls_create(&c, &p.m) == MEGA_OK, "a classifier with 2 x 2 patches (%s)", mega_last_error());
    if (!p.m) return;
    mega_cls_init_params(p.m, 3);
    unsigned long long s = 11;
    for (int i = 0; i < B * T; i++) p.x[i] = tl_randn(&s);
    for (int b = 0; b < B; b++) p.len[b] = T, p.y[b] = b % 3;
    mega_paramset *ps = mega_cls_paramset(p.m);
    mega_ps_zero_grad(ps);
    loss_of(&p);
    TL_CHECK(mega_cls_backward(p.m, 1.0) == MEGA_OK, "backward");
    const mega_real *hid = mega_cls_hidden(p.m, 0, 0, NULL);
    int Tp = 0;
    mega_cls_hidden(p.m, 0, 0, &Tp);
    TL_CHECK(hid && Tp == (H / 2) * (W / 2), "the sequence is the %d patches (%d)", (H / 2) * (W / 2), Tp);
    mega_real *val = mega_ps_data(ps), *grad = mega_ps_grad(ps);
    double worst = 0;
    const char *wname = "";
    int checked = 0, saw_patch = 0;
    fd_opts o = {loss_of, &p, 0, 0, 64, 24, 5};
    /* the floor of the repository's checks (tests/lib/blocktest.c): 1e-3 x the largest gradient */
    double gall = 0;
    for (size_t k = 0; k < mega_ps_total(ps); k++) gall = fmax(gall, fabs(grad[k]));
    for (int i = 0; i < mega_ps_count(ps); i++) {
        size_t off, n;
        unsigned fl;
        const char *name = mega_ps_info(ps, i, &off, &n, &fl);
        double gmax = 0;
        for (size_t k = 0; k < n; k++) gmax = fmax(gmax, fabs(grad[off + k]));
        const double e = fd_tensor_err(&o, val + off, grad + off, n, 1e-3 * gall);
        if (e > worst) worst = e, wname = name;
        saw_patch |= strstr(name, "patch_embed.weight") != NULL && gmax > 0;
        checked++;
    }
    TL_CHECK(saw_patch, "the patch embedding receives a gradient");
    TL_CHECK(checked > 5 && worst < 1e-6, "%d tensors against finite differences: worst %.2e (%s)", checked, worst, wname);
    mega_cls_free(p.m);
}

/* copy the values of b's tensors into a by name, the per-pixel embedding into the 1 x 1 patch one */
static void copy_named(mega_cls *dst, mega_cls *src) {
    mega_paramset *a = mega_cls_paramset(dst), *b = mega_cls_paramset(src);
    for (int i = 0; i < mega_ps_count(a); i++) {
        size_t oa, na;
        unsigned f;
        const char *name = mega_ps_info(a, i, &oa, &na, &f);
        char want[256];
        snprintf(want, sizeof want, "%s", name);
        char *pe = strstr(want, "patch_embed.");
        if (pe) memmove(pe + strlen("embed_tokens."), pe + strlen("patch_embed."), strlen(pe + strlen("patch_embed.")) + 1),
                memcpy(pe, "embed_tokens.", strlen("embed_tokens."));
        for (int j = 0; j < mega_ps_count(b); j++) {
            size_t ob, nb;
            if (!strcmp(mega_ps_info(b, j, &ob, &nb, &f), want) && nb == na)
                memcpy(mega_ps_data(a) + oa, mega_ps_data(b) + ob, na * sizeof(mega_real));
        }
    }
}

static void test_patch1(void) {
    mega_cls_config c0 = small_cfg(0), c1 = small_cfg(1);
    prob p0, p1;
    if (mega_cls_create(&c0, &p0.m) || mega_cls_create(&c1, &p1.m)) {
        TL_CHECK(0, "create: %s", mega_last_error());
        return;
    }
    mega_cls_init_params(p0.m, 4);
    mega_cls_init_params(p1.m, 9);
    copy_named(p1.m, p0.m);
    unsigned long long s = 5;
    for (int i = 0; i < B * T; i++) p0.x[i] = p1.x[i] = tl_randn(&s);
    for (int b = 0; b < B; b++) p0.len[b] = p1.len[b] = T, p0.y[b] = p1.y[b] = b % 3;
    loss_of(&p0), loss_of(&p1);
    const mega_real *l0 = mega_cls_logits(p0.m), *l1 = mega_cls_logits(p1.m);
    double d = 0, mx = 0;
    for (int i = 0; i < B * 3; i++) d = fmax(d, fabs(l0[i] - l1[i])), mx = fmax(mx, fabs(l0[i]));
    TL_CHECK(mx > 0 && d < 1e-12, "patch 1 = the per-pixel embedding with its weights (max |diff| %.1e of %.2f)", d, mx);
    mega_cls_free(p0.m), mega_cls_free(p1.m);
}

static void test_errors(void) {
    mega_cls_config c = small_cfg(4);
    mega_cls *m = NULL;
    TL_CHECK(mega_cls_create(&c, &m) == MEGA_ERR_INVALID && strstr(mega_last_error(), "does not divide the image width 6"),
             "patch 4 of a width of 6: %s", mega_last_error());
    c = small_cfg(2);
    c.embedding = MEGA_EMBED_TOKEN;
    TL_CHECK(mega_cls_create(&c, &m) == MEGA_ERR_INVALID && strstr(mega_last_error(), "real-valued"), "patches of tokens: %s",
             mega_last_error());
    c = small_cfg(2);
    prob p;
    if (mega_cls_create(&c, &p.m) != MEGA_OK) return;
    mega_cls_init_params(p.m, 1);
    for (int i = 0; i < B * T; i++) p.x[i] = 0;
    for (int b = 0; b < B; b++) p.len[b] = T - W, p.y[b] = 0; /* 3 rows: not whole rows of patches */
    mega_cls_input in = {NULL, p.x, p.len, T};
    TL_CHECK(mega_cls_forward(p.m, &in, NULL, B, p.y, NULL, NULL, NULL) == MEGA_ERR_INVALID && strstr(mega_last_error(), "whole rows"),
             "a length that is not whole rows of patches: %s", mega_last_error());
    mega_cls_free(p.m);
}

int main(void) {
    test_fd();
    test_patch1();
    test_errors();
    return tl_finish();
}
