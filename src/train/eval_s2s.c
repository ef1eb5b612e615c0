/*
 * The evaluation of an encoder-decoder on parallel text by its translations: the teacher-forced
 * loss, then a search over the segments (the lines with the same source, their targets the
 * references) in batches of similar sources, then corpus BLEU, chrF and exact match of the
 * translations and of the copy baseline (each source as its own translation). Nothing here
 * prints: the caller reports progress and writes the results.
 */
#include "core/internal.h"
#include "mega.h"
#include "mega_data.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int first, n; /* examples first .. first+n-1 of the grouped order share a source */
} group_t;

/* what one evaluation works with: the model, the data, the sides' units, the grouped order */
typedef struct {
    mega_s2s *m;
    const mega_s2s_data *d;
    const mega_s2s_translation_opts *o;
    size_t longest[2]; /* [0] source, [1] target */
    int *order;
    group_t *g;
    int ng;
} eval_ctx;

static int cmp_src(const mega_s2s_data *d, int a, int b) {
    int la = d->src_len[a], lb = d->src_len[b];
    if (la != lb) return la < lb ? -1 : 1;
    int c = memcmp(mega_s2s_data_src(d, a), mega_s2s_data_src(d, b), (size_t)la * sizeof(uint16_t));
    return c ? c : (a < b ? -1 : a > b);
}
/* qsort has no context argument; an evaluation sorts on one thread at a time per process */
static _Thread_local const mega_s2s_data *g_sort_d;
static int qcmp(const void *x, const void *y) { return cmp_src(g_sort_d, *(const int *)x, *(const int *)y); }

/* segments: the examples with the same source, its translations the references (group 0: every
 * line its own segment); order: the examples sorted by source; returns the number of segments */
static int make_groups(const mega_s2s_data *d, int group, int *order, group_t *g) {
    const int n = d->n;
    int ng = 0;
    for (int i = 0; i < n; i++) order[i] = i;
    if (group) {
        g_sort_d = d;
        qsort(order, (size_t)n, sizeof(int), qcmp);
    }
    for (int i = 0; i < n;) {
        int k = 1;
        while (group && i + k < n && d->src_len[order[i + k]] == d->src_len[order[i]] &&
               !memcmp(mega_s2s_data_src(d, order[i + k]), mega_s2s_data_src(d, order[i]), (size_t)d->src_len[order[i]] * 2))
            k++;
        g[ng++] = (group_t){i, k};
        i += k;
    }
    return ng;
}

static const mega_bpe *side_bpe(const eval_ctx *c, int tgt) { return tgt ? c->o->tgt_bpe : c->o->src_bpe; }

/* the text of a token row (bytes or subword units; </s> and <pad> give nothing) in a new string
 * *out; returns its length, or (size_t)-1 when out of memory */
static size_t ids_text(const eval_ctx *c, int tgt, const int32_t *ids, int n, char **out) {
    *out = malloc(c->longest[tgt] * (size_t)(n > 0 ? n : 0) + 1);
    if (!*out) return (size_t)-1;
    const size_t k = mega_bpe_decode(side_bpe(c, tgt), ids, (size_t)n, (uint8_t *)*out);
    (*out)[k] = 0;
    return k;
}
static size_t row_text(const eval_ctx *c, int tgt, const uint16_t *t, int n, char **out) {
    int32_t small[256] = {0}, *ids = n <= 256 ? small : malloc((size_t)n * sizeof *ids);
    *out = NULL;
    if (!ids) return (size_t)-1;
    for (int i = 0; i < n; i++) ids[i] = t[i];
    const size_t k = ids_text(c, tgt, ids, n, out);
    if (ids != small) free(ids);
    return k;
}

/* corpus scores of hypotheses (hyp/hl per segment) against the segments' references: w = 0 the
 * model's, 1 the copy baseline's */
static mega_status score_all(const eval_ctx *c, char *const *hyp, const size_t *hl, mega_s2s_translation_eval *r, int w) {
    mega_metrics *mt = NULL;
    mega_status st = mega_metrics_new(NULL, &mt);
    if (st != MEGA_OK) return st;
    int maxr = 1;
    for (int i = 0; i < c->ng; i++) maxr = c->g[i].n > maxr ? c->g[i].n : maxr;
    char **refs = calloc((size_t)maxr, sizeof(char *));
    size_t *rl = calloc((size_t)maxr, sizeof(size_t));
    st = !refs || !rl ? mega__error(MEGA_ERR_OOM, "out of memory") : MEGA_OK;
    for (int i = 0; i < c->ng && st == MEGA_OK; i++) {
        for (int k = 0; k < c->g[i].n && st == MEGA_OK; k++) {
            const int e = c->order[c->g[i].first + k];
            rl[k] = row_text(c, 1, mega_s2s_data_tgt(c->d, e), c->d->tgt_len[e], &refs[k]);
            if (!refs[k]) st = mega__error(MEGA_ERR_OOM, "out of memory");
        }
        if (st == MEGA_OK) st = mega_metrics_add_n(mt, hyp[i], hl[i], (const char *const *)refs, rl, c->g[i].n);
        for (int k = 0; k < c->g[i].n; k++) free(refs[k]), refs[k] = NULL;
    }
    if (st == MEGA_OK) {
        mega_metrics_bleu(mt, &r->bleu[w]), mega_metrics_chrf(mt, &r->chrf[w]), mega_metrics_exact_match(mt, &r->exact[w]);
        mega_metrics_bleu_signature(mt, r->bleu_signature, sizeof r->bleu_signature);
        mega_metrics_chrf_signature(mt, r->chrf_signature, sizeof r->chrf_signature);
    }
    free(refs), free(rl);
    mega_metrics_free(mt);
    return st;
}

/* the sources of segments i .. i+nb-1 (right-padded to the longest, S) into *src, their texts
 * (the copy baseline) into r->source, and the lengths the search limit counts into lim;
 * returns the limit's longest source, or -1 when out of memory */
static int batch_sources(const eval_ctx *c, int i, int nb, int32_t **src, int *S, int *lim, mega_s2s_translation_eval *r) {
    const mega_s2s_data *d = c->d;
    const int in_bytes = c->o->src_bpe && !c->o->tgt_bpe;
    int SL = 0;
    *S = 0;
    for (int k = 0; k < nb; k++) {
        const int gi = i + k, e = c->order[c->g[gi].first];
        *S = d->src_len[e] > *S ? d->src_len[e] : *S;
        r->source_len[gi] = row_text(c, 0, mega_s2s_data_src(d, e), d->src_len[e], &r->source[gi]);
        if (!r->source[gi]) return -1;
        lim[k] = in_bytes ? (int)r->source_len[gi] + 1 : d->src_len[e];
        SL = lim[k] > SL ? lim[k] : SL;
    }
    free(*src);
    *src = malloc((size_t)nb * *S * sizeof(int32_t));
    if (!*src) return -1;
    for (int k = 0; k < nb; k++) {
        const int e = c->order[c->g[i + k].first];
        const uint16_t *s = mega_s2s_data_src(d, e);
        for (int t = 0; t < *S; t++) (*src)[(size_t)k * *S + t] = t < d->src_len[e] ? s[t] : MEGA_S2S_PAD;
    }
    return SL;
}

/* translations, one per segment, in batches of o->batch sources of similar length (the groups
 * are sorted by source) into r->hyp, the sources' text into r->source */
static mega_status search_groups(const eval_ctx *c, mega_s2s_translation_eval *r) {
    const int batch = c->o->batch, ng = c->ng;
    int32_t *src = NULL, *out = NULL;
    int *olen = malloc((size_t)batch * sizeof(int)), *lim = malloc((size_t)batch * sizeof(int));
    mega_status st = !olen || !lim ? mega__error(MEGA_ERR_OOM, "out of memory") : MEGA_OK;
    mega_s2s_search spb = c->o->search;
    for (int i = 0; st == MEGA_OK && i < ng; i += batch) {
        const int nb = ng - i < batch ? ng - i : batch;
        int S;
        const int SL = batch_sources(c, i, nb, &src, &S, lim, r);
        spb.limit_src_len = lim;
        const int cap = (int)(spb.max_len_a * SL + spb.max_len_b) + 2;
        free(out);
        out = SL < 0 ? NULL : malloc((size_t)nb * cap * sizeof(int32_t));
        if (!out) {
            st = mega__error(MEGA_ERR_OOM, "out of memory");
            break;
        }
        st = mega_s2s_translate(c->m, src, nb, S, &spb, out, olen, cap, NULL);
        for (int k = 0; k < nb && st == MEGA_OK; k++) {
            /* the hypothesis as the bytes the model produced (invalid UTF-8 counts per byte) */
            r->hyp_len[i + k] = ids_text(c, 1, out + (size_t)k * cap, olen[k], &r->hyp[i + k]);
            if (!r->hyp[i + k]) st = mega__error(MEGA_ERR_OOM, "out of memory");
            r->out_tokens += olen[k] + 1;
        }
        if (st == MEGA_OK && c->o->progress) c->o->progress(c->o->ctx, i + nb, ng, 0);
    }
    free(src), free(out), free(olen), free(lim);
    return st;
}

void mega_s2s_translation_eval_free(mega_s2s_translation_eval *r) {
    if (!r) return;
    for (int i = 0; i < r->segments; i++) {
        if (r->hyp) free(r->hyp[i]);
        if (r->source) free(r->source[i]);
    }
    free(r->hyp), free(r->source), free(r->hyp_len), free(r->source_len);
    memset(r, 0, sizeof *r);
}

mega_status mega_s2s_evaluate_translations(mega_s2s *m, const mega_s2s_data *d, const mega_s2s_translation_opts *o,
                                           mega_s2s_translation_eval *r) {
    memset(r, 0, sizeof *r);
    if (!m || !d || !o || o->batch < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_evaluate_translations: bad arguments");
    const int n = d->n;
    eval_ctx c = {m, d, o, {mega_bpe_longest(o->src_bpe), mega_bpe_longest(o->tgt_bpe)}, NULL, NULL, 0};
    c.order = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    c.g = malloc((size_t)(n > 0 ? n : 1) * sizeof(group_t));
    r->hyp = calloc((size_t)n + 1, sizeof(char *)), r->source = calloc((size_t)n + 1, sizeof(char *));
    r->hyp_len = calloc((size_t)n + 1, sizeof(size_t)), r->source_len = calloc((size_t)n + 1, sizeof(size_t));
    mega_status st = MEGA_OK;
    if (!c.order || !c.g || !r->hyp || !r->source || !r->hyp_len || !r->source_len)
        st = mega__error(MEGA_ERR_OOM, "out of memory");
    if (st == MEGA_OK) c.ng = r->segments = make_groups(d, o->group, c.order, c.g);
    const double t0 = seconds_now();
    if (st == MEGA_OK) st = mega_s2s_evaluate(m, d, c.order, n, o->max_tokens, &r->nll, &r->acc, &r->tokens);
    const double t1 = seconds_now();
    if (st == MEGA_OK) st = search_groups(&c, r);
    const double t2 = seconds_now();
    r->forced_seconds = t1 - t0, r->search_seconds = t2 - t1;
    if (st == MEGA_OK) st = score_all(&c, r->hyp, r->hyp_len, r, 0);
    if (st == MEGA_OK) st = score_all(&c, r->source, r->source_len, r, 1);
    free(c.order), free(c.g);
    if (st != MEGA_OK) mega_s2s_translation_eval_free(r);
    return st;
}
