/*
 * Synchronized batchnorm statistics (mega_lm_set_batch_sync, mega_cls_set_batch_sync;
 * docs/distributed.md), without MPI: two threads play two processes, each with its own copy of a
 * batchnorm model and half of a batch, and the sum function adds their buffers through a shared
 * slot and a barrier (what MPI_Allreduce does between processes). Checked against one model
 * given the whole batch:
 *  (1) the two halves' losses (each scaled by its share, 1/2) add up to the whole batch's loss;
 *  (2) their gradients (backward with scale 1/2) add up to the whole batch's gradient;
 *  (3) the running statistics after the step (they moved) are the same in both copies, and the
 *      whole batch's;
 *  and, as the control that makes (1)-(3) mean something, without the sum function the halves'
 *  gradients do not add up to the whole batch's (each half normalises with its own statistics).
 * For the language model (pre-norm and post-norm) and the classifier (two towers: every norm of
 * both towers synchronized, in the same order on both sides).
 */
#include "testlib.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, T = 16, MAXN = 256 };

/* the meeting point of the two "processes" */
typedef struct {
    pthread_barrier_t bar;
    double *slot[2];
    size_t n[2];
    int mismatch;
} meeting;

typedef struct {
    meeting *m;
    int id;
} party;

static void sum2(double *buf, size_t n, void *ctx) {
    party *p = ctx;
    meeting *m = p->m;
    m->slot[p->id] = buf, m->n[p->id] = n;
    pthread_barrier_wait(&m->bar);
    double tmp[MAXN];
    const int ok = m->n[0] == m->n[1] && n <= MAXN;
    if (!ok) m->mismatch = 1;
    for (size_t i = 0; ok && i < n; i++) tmp[i] = m->slot[0][i] + m->slot[1][i];
    pthread_barrier_wait(&m->bar); /* both have read both slots */
    for (size_t i = 0; ok && i < n; i++) buf[i] = tmp[i];
}

/* one model kind behind one interface */
typedef struct {
    int cls; /* 0: language model, 1: classifier (two towers) */
    int prenorm;
} kind;

typedef struct {
    const kind *k;
    mega_lm *lm;
    mega_cls *cl;
} model;

static int32_t g_tok[B * T], g_tgt[B * T], g_tok2[B * T], g_len[B], g_len2[B], g_lab[B];

static int make(model *md, const kind *k) {
    md->k = k, md->lm = NULL, md->cl = NULL;
    const mega_load_opts o = {0, 1};
    if (k->cls) {
        mega_cls_config c;
        mega_cls_config_default(&c);
        c.layers = 2, c.block.embed_dim = 16, c.block.z_dim = 8, c.block.hidden_dim = 32, c.block.n_dim = 2, c.block.ffn_dim = 32;
        c.block.chunk_size = -1, c.block.norm_type = MEGA_NORM_BATCH, c.block.prenorm = k->prenorm;
        c.block.dropout = c.block.attention_dropout = c.block.hidden_dropout = c.block.activation_dropout = 0;
        c.block.max_positions = 64;
        c.vocab_size = 20, c.padding_idx = 0, c.classes = 3, c.two_tower = 1;
        if (mega_cls_create_ex(&c, &o, &md->cl) != MEGA_OK) return 1;
        mega_cls_init_params(md->cl, 7);
        return 0;
    }
    mega_lm_config c;
    mega_lm_config_default(&c);
    c.layers = 2, c.block.embed_dim = 16, c.block.z_dim = 8, c.block.hidden_dim = 32, c.block.n_dim = 2, c.block.ffn_dim = 32;
    c.block.chunk_size = 8, c.block.norm_type = MEGA_NORM_BATCH, c.block.prenorm = k->prenorm;
    c.block.dropout = c.block.attention_dropout = c.block.hidden_dropout = c.block.activation_dropout = 0;
    if (mega_lm_create_ex(&c, &o, &md->lm) != MEGA_OK) return 1;
    mega_lm_init_params(md->lm, 7);
    return 0;
}

static void drop(model *md) {
    mega_lm_free(md->lm);
    mega_cls_free(md->cl);
}

static mega_paramset *ps(model *md) { return md->cl ? mega_cls_paramset(md->cl) : mega_lm_paramset(md->lm); }

/* forward + backward of rows [r0, r1) with the backward scaled by `part`; the loss x part */
static int run_rows(model *md, int r0, int r1, double part, double *loss) {
    mega_lm_run run = {1, 0};
    mega_ps_zero_grad(ps(md));
    const int n = r1 - r0;
    if (md->cl) {
        /* every row padded to T (the whole batch's shape, as mega train pads a shard) */
        mega_cls_input in = {g_tok + r0 * T, NULL, g_len + r0, T}, in2 = {g_tok2 + r0 * T, NULL, g_len2 + r0, T};
        int64_t ok;
        if (mega_cls_forward(md->cl, &in, &in2, n, g_lab + r0, &run, loss, &ok) != MEGA_OK) return 1;
        if (mega_cls_backward(md->cl, part) != MEGA_OK) return 1;
    } else {
        int64_t cnt;
        if (mega_lm_forward(md->lm, g_tok + r0 * T, g_tgt + r0 * T, n, T, &run, loss, &cnt) != MEGA_OK) return 1;
        if (mega_lm_backward(md->lm, part) != MEGA_OK) return 1;
    }
    *loss *= part;
    return 0;
}

typedef struct {
    model *md;
    int r0, r1, rc;
    double loss;
} job;

static void *run_job(void *p) {
    job *j = p;
    mega_set_threads(1);
    j->rc = run_rows(j->md, j->r0, j->r1, 0.5, &j->loss);
    return NULL;
}

/* the whole batch in one model, and the two halves in two copies (synchronized or not):
 * relative differences of the loss, the gradient sum, and the running statistics */
static int compare(const kind *k, int sync, double *dloss, double *dgrad, double *dstats, int *moved, int *mismatch) {
    model whole, half[2], fresh;
    if (make(&whole, k) || make(&half[0], k) || make(&half[1], k) || make(&fresh, k)) return 1;
    meeting m;
    memset(&m, 0, sizeof m);
    pthread_barrier_init(&m.bar, NULL, 2);
    party pa[2] = {{&m, 0}, {&m, 1}};
    for (int i = 0; i < 2 && sync; i++) {
        if (k->cls) mega_cls_set_batch_sync(half[i].cl, sum2, &pa[i]);
        else mega_lm_set_batch_sync(half[i].lm, sum2, &pa[i]);
    }
    mega_set_threads(1);
    double lw;
    int rc = run_rows(&whole, 0, B, 1.0, &lw);
    job j[2] = {{&half[0], 0, B / 2, 0, 0}, {&half[1], B / 2, B, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run_job, &j[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    rc = rc || j[0].rc || j[1].rc;
    if (!rc) {
        const size_t n = mega_ps_total(ps(&whole));
        const mega_real *gw = mega_ps_grad(ps(&whole)), *g0 = mega_ps_grad(ps(&half[0])), *g1 = mega_ps_grad(ps(&half[1]));
        const mega_real *pw = mega_ps_data(ps(&whole)), *p0 = mega_ps_data(ps(&half[0])), *p1 = mega_ps_data(ps(&half[1]));
        double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
        if (!a || !b) rc = 1;
        for (size_t i = 0; !rc && i < n; i++) a[i] = (double)g0[i] + (double)g1[i], b[i] = gw[i];
        if (!rc) *dgrad = tl_compare(a, b, n).rel;
        /* the parameters after the forward: only the running statistics moved */
        double d01 = 0;
        const mega_real *pf = mega_ps_data(ps(&fresh));
        *moved = 0;
        for (size_t i = 0; !rc && i < n; i++) {
            *moved += pw[i] != pf[i];
            a[i] = p0[i], b[i] = pw[i];
            const double d = (double)p0[i] - (double)p1[i];
            d01 = d > d01 ? d : -d > d01 ? -d : d01;
        }
        if (!rc) *dstats = tl_compare(a, b, n).rel + d01;
        free(a), free(b);
        double l = j[0].loss + j[1].loss;
        *dloss = (l > lw ? l - lw : lw - l) / lw;
    }
    *mismatch = m.mismatch;
    pthread_barrier_destroy(&m.bar);
    drop(&whole), drop(&half[0]), drop(&half[1]), drop(&fresh);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    unsigned long long s = 12345;
    for (int i = 0; i < B * T; i++) {
        g_tok[i] = (int32_t)(tl_rand01(&s) * 255), g_tgt[i] = (int32_t)(tl_rand01(&s) * 255);
        g_tok2[i] = 1 + (int32_t)(tl_rand01(&s) * 18);
    }
    for (int b = 0; b < B; b++) {
        g_len[b] = T - 3 * b, g_len2[b] = T - 2 * b, g_lab[b] = b % 3;
        for (int t = 0; t < T; t++) {
            if (t >= g_len[b]) g_tok[b * T + t] = 0; /* the classifier's pads */
            else if (g_tok[b * T + t] == 0) g_tok[b * T + t] = 1;
            if (t >= g_len2[b]) g_tok2[b * T + t] = 0;
        }
    }
    for (int i = 0; i < B * T; i++) g_tok[i] = g_tok[i] > 19 ? g_tok[i] % 19 + 1 : g_tok[i]; /* the classifier's vocabulary */
    const kind kinds[] = {{0, 1}, {0, 0}, {1, 0}, {1, 1}};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        const kind *k = &kinds[i];
        char name[64];
        snprintf(name, sizeof name, "%s %s", k->cls ? "classifier (two towers)" : "lm", k->prenorm ? "pre-norm" : "post-norm");
        double dl = 1, dg = 1, ds = 1;
        int mis = 0, moved = 0;
        int rc = compare(k, 1, &dl, &dg, &ds, &moved, &mis);
        TL_CHECK(!rc && !mis, "%s: two synchronized halves run (same sizes on both sides)", name);
        TL_CHECK(!rc && moved > 0, "%s: the training forward moved the running statistics (%d values)", name, moved);
        TL_CHECK(!rc && dl < 1e-5, "%s: the halves' losses add up to the whole batch's (rel. %.2g)", name, dl);
        TL_CHECK(!rc && dg < 1e-4, "%s: the halves' gradients add up to the whole batch's (rel. %.2g)", name, dg);
        TL_CHECK(!rc && ds < 1e-5, "%s: the running statistics are the whole batch's, in both copies (rel. %.2g)", name, ds);
        double ug = 0;
        rc = compare(k, 0, &dl, &ug, &ds, &moved, &mis);
        TL_CHECK(!rc && ug > 1e-3, "%s: control: without synchronization the gradients differ (rel. %.2g)", name, ug);
    }
    return tl_finish();
}
