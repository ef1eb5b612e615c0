/* Masked-LM pretraining (mega_cls with mlm = 1, mega_mlm_mask; docs/pretraining.md), in double
 * precision: the corruption's statistics over a large draw (15% of positions chosen, of them 80%
 * masked, 10% random, 10% kept) and its reproducibility from a seed; the loss is the mean over the
 * predicted positions only (equal to the mean of single-position losses, whatever the other
 * positions' targets would have been); every parameter's gradient against finite differences,
 * with padded rows, for the mega and the softmax-attention mixers; weights copied by name and
 * shape into a classifier (mega_ps_copy_matching). */
#include "fd.h"
#include "mega_data.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 9, V = 258, MASK = 257 };

static void test_mask_stats(void) {
    enum { NSEQ = 4000, LEN = 70 };
    int32_t *tok = malloc(sizeof(int32_t) * NSEQ * LEN), *orig = malloc(sizeof(int32_t) * NSEQ * LEN);
    int32_t *tgt = malloc(sizeof(int32_t) * NSEQ * LEN);
    if (!tok || !orig || !tgt) return free(tok), free(orig), free(tgt), (void)TL_CHECK(0, "out of memory");
    uint64_t st = mega_data_rng_seed(7);
    for (int i = 0; i < NSEQ * LEN; i++) orig[i] = tok[i] = (int32_t)mega_data_rng_below(&st, 256);
    st = mega_data_rng_seed(1);
    long chosen = 0, masked = 0, changed = 0, kept = 0, bad = 0, count_ok = 1;
    for (int s = 0; s < NSEQ; s++) {
        const int n = 10 + s % 60; /* lengths 10..69: the probabilistic rounding of 0.15 n */
        int32_t *t = tok + (size_t)s * LEN, *g = tgt + (size_t)s * LEN, *o = orig + (size_t)s * LEN;
        const int k = mega_mlm_mask(t, g, n, 0.15, MASK, 256, &st);
        count_ok &= k == (int)(0.15 * n) || k == (int)(0.15 * n) + 1;
        int c = 0;
        for (int i = 0; i < n; i++) {
            if (g[i] < 0) {
                bad += t[i] != o[i];
                continue;
            }
            c++, bad += g[i] != o[i];
            if (t[i] == MASK) masked++;
            else if (t[i] != o[i]) changed++;
            else kept++;
        }
        chosen += c, count_ok &= c == k;
    }
    long total = 0;
    for (int s = 0; s < NSEQ; s++) total += 10 + s % 60;
    TL_CHECK(count_ok && bad == 0, "each sequence: floor(0.15 n) or one more chosen, targets = the original tokens, the rest untouched");
    TL_CHECK(fabs((double)chosen / total - 0.15) < 0.003, "chosen %.4f of %ld positions (0.15)", (double)chosen / total, total);
    /* a random token equals the original one time in 256 */
    const double fm = (double)masked / chosen, fr = (double)changed / chosen, fk = (double)kept / chosen;
    TL_CHECK(fabs(fm - 0.8) < 0.012 && fabs(fr - 0.1 * 255 / 256) < 0.008 && fabs(fk - (0.1 + 0.1 / 256)) < 0.008,
             "of %ld chosen: %.4f masked (0.8), %.4f random (0.0996), %.4f kept (0.1004)", chosen, fm, fr, fk);
    /* the same seed, the same masks; another seed, others */
    int32_t a[200], ga[200], b2[200], gb[200], c2[200], gc[200];
    for (int i = 0; i < 200; i++) a[i] = b2[i] = c2[i] = i % 256;
    uint64_t s1 = mega_data_rng_seed(5), s2 = mega_data_rng_seed(5), s3 = mega_data_rng_seed(6);
    mega_mlm_mask(a, ga, 200, 0.15, MASK, 256, &s1);
    mega_mlm_mask(b2, gb, 200, 0.15, MASK, 256, &s2);
    mega_mlm_mask(c2, gc, 200, 0.15, MASK, 256, &s3);
    TL_CHECK(!memcmp(a, b2, sizeof a) && !memcmp(ga, gb, sizeof ga) && s1 == s2, "seed 5 twice: the same corruption and stream");
    TL_CHECK(memcmp(ga, gc, sizeof ga) != 0, "seed 6: other positions");
    free(tok), free(orig), free(tgt);
}

static mega_cls_config small_cfg(mega_mixer_kind mixer) {
    mega_cls_config c;
    mega_cls_config_default(&c);
    c.layers = 1, c.vocab_size = V, c.padding_idx = 256, c.mlm = 1;
    c.block.mixer = mixer;
    c.block.embed_dim = 8, c.block.hidden_dim = 16, c.block.z_dim = 4, c.block.n_dim = 2, c.block.ffn_dim = 12;
    c.block.dropout = c.block.attention_dropout = c.block.hidden_dropout = 0;
    if (mixer == MEGA_MIXER_MHA) c.block.heads = 2;
    return c;
}

typedef struct {
    mega_cls *m;
    int32_t tok[B * T], len[B], y[B * T];
    int64_t count;
} prob;

static double loss_of(void *arg) {
    prob *p = arg;
    mega_cls_input in = {p->tok, NULL, p->len, T};
    double l = 0;
    int64_t ok;
    mega_cls_mlm_forward(p->m, &in, B, p->y, NULL, &l, &ok, &p->count);
    return l;
}

static int setup(prob *p, mega_mixer_kind mixer) {
    mega_cls_config c = small_cfg(mixer);
    if (mega_cls_create(&c, &p->m) != MEGA_OK) return TL_CHECK(0, "create (%s): %s", mega_mixer_name(mixer), mega_last_error()), 1;
    mega_cls_init_params(p->m, 3);
    /* the head's weights away from their init (zero biases, unit norm scale) so that every term is exercised */
    mega_paramset *ps = mega_cls_paramset(p->m);
    unsigned long long s = 13;
    for (int i = 0; i < mega_ps_count(ps); i++) {
        size_t off, n;
        const char *name = mega_ps_info(ps, i, &off, &n, NULL);
        if (strstr(name, "lm_head"))
            for (size_t k = 0; k < n; k++) mega_ps_data(ps)[off + k] += 0.3 * tl_randn(&s);
    }
    p->len[0] = T, p->len[1] = T - 3; /* a padded row */
    for (int i = 0; i < B * T; i++) p->tok[i] = (i * 37) % 256, p->y[i] = -1;
    for (int t = T - 3; t < T; t++) p->tok[T + t] = 256;
    p->y[1] = 40, p->y[4] = 7, p->tok[4] = MASK, p->y[T + 2] = 200, p->y[T + 5] = 3, p->tok[T + 5] = MASK;
    return 0;
}

static void test_fd(mega_mixer_kind mixer) {
    prob p;
    if (setup(&p, mixer)) return;
    mega_paramset *ps = mega_cls_paramset(p.m);
    mega_ps_zero_grad(ps);
    loss_of(&p);
    TL_CHECK(p.count == 4, "4 predicted positions (%lld)", (long long)p.count);
    TL_CHECK(mega_cls_backward(p.m, 1.0) == MEGA_OK, "backward");
    mega_real *val = mega_ps_data(ps), *grad = mega_ps_grad(ps);
    double gall = 0, worst = 0;
    for (size_t k = 0; k < mega_ps_total(ps); k++) gall = fmax(gall, fabs(grad[k]));
    const char *wname = "";
    int checked = 0, head = 0;
    fd_opts o = {loss_of, &p, 0, 0, 64, 24, 5};
    for (int i = 0; i < mega_ps_count(ps); i++) {
        size_t off, n;
        const char *name = mega_ps_info(ps, i, &off, &n, NULL);
        const double e = fd_tensor_err(&o, val + off, grad + off, n, 1e-3 * gall);
        if (e > worst) worst = e, wname = name;
        head += strstr(name, "lm_head") != NULL;
        checked++;
    }
    TL_CHECK(head == 5 && checked > 8 && worst < 1e-6, "%s: %d tensors (%d of the head) against finite differences: worst %.2e (%s)",
             mega_mixer_name(mixer), checked, head, worst, wname);
    /* a classification forward on it is refused; a classifier refuses the masked-LM forward */
    mega_cls_input in = {p.tok, NULL, p.len, T};
    TL_CHECK(mega_cls_forward(p.m, &in, NULL, B, p.y, NULL, NULL, NULL) == MEGA_ERR_INVALID, "no classification on a masked-LM model");
    mega_cls_free(p.m);
}

/* the loss of several predicted positions is the mean of the single-position losses: positions
 * with target -1 add nothing, and the predictions do not see the targets */
static void test_masked_only(void) {
    prob p;
    if (setup(&p, MEGA_MIXER_MEGA)) return;
    const double all = loss_of(&p);
    int32_t keep[B * T];
    memcpy(keep, p.y, sizeof keep);
    double sum = 0;
    int k = 0;
    for (int i = 0; i < B * T; i++) {
        if (keep[i] < 0) continue;
        for (int j = 0; j < B * T; j++) p.y[j] = j == i ? keep[i] : -1;
        sum += loss_of(&p), k++;
    }
    TL_CHECK(k == 4 && fabs(all - sum / k) < 1e-12, "loss %.12f = the mean of the %d single-position losses %.12f", all, k, sum / k);
    memset(p.y, 0xff, sizeof p.y);
    TL_CHECK(loss_of(&p) == 0 && p.count == 0, "no predicted position: loss 0, count 0");
    p.y[T + 7] = 5; /* a padding position of row 1 */
    mega_cls_input in = {p.tok, NULL, p.len, T};
    double l;
    int64_t ok, cnt;
    TL_CHECK(mega_cls_mlm_forward(p.m, &in, B, p.y, NULL, &l, &ok, &cnt) == MEGA_ERR_INVALID, "a target past a row's length refused");
    mega_cls_free(p.m);
}

/* fine-tuning: every encoder tensor of the masked-LM model into a classifier of the same block and
 * vocabulary, none of the head's; another width shares nothing but the 1-D shapes it has alike */
static void test_copy(void) {
    mega_cls_config cm = small_cfg(MEGA_MIXER_MEGA), cc = cm, cw = cm;
    cc.mlm = 0, cc.classes = 3, cc.classifier_dim = 8;
    cw.mlm = 0, cw.block.embed_dim = 10;
    mega_cls *m, *c, *w;
    if (mega_cls_create(&cm, &m) || mega_cls_create(&cc, &c) || mega_cls_create(&cw, &w)) return (void)TL_CHECK(0, "create");
    mega_cls_init_params(m, 1), mega_cls_init_params(c, 2);
    mega_paramset *pm = mega_cls_paramset(m), *pc = mega_cls_paramset(c);
    uint8_t got[256];
    const int n = mega_ps_copy_matching(pc, pm, got);
    int enc = 0, ok = 1;
    for (int i = 0; i < mega_ps_count(pc); i++) {
        size_t off, num;
        const char *name = mega_ps_info(pc, i, &off, &num, NULL);
        const int is_enc = !strncmp(name, "encoder.encoder.", 16);
        enc += is_enc;
        ok &= got[i] == is_enc;
        for (int j = 0; got[i] && j < mega_ps_count(pm); j++) {
            size_t o2, n2;
            if (!strcmp(mega_ps_info(pm, j, &o2, &n2, NULL), name))
                ok &= !memcmp(mega_ps_data(pc) + off, mega_ps_data(pm) + o2, num * sizeof(mega_real));
        }
    }
    TL_CHECK(ok && n == enc && n > 5, "%d of %d tensors copied: exactly the encoder's, with their values", n, mega_ps_count(pc));
    const int nw = mega_ps_copy_matching(mega_cls_paramset(w), pm, got);
    TL_CHECK(nw < n / 2, "embed-dim 10 against 8: %d tensors of matching shape (of %d)", nw, n);
    mega_cls_free(m), mega_cls_free(c), mega_cls_free(w);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    test_mask_stats();
    test_masked_only();
    test_fd(MEGA_MIXER_MEGA);
    test_fd(MEGA_MIXER_MHA);
    test_copy();
    return tl_finish();
}
