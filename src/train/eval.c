/*
 * Evaluation loops shared by training (validation) and the inference commands: a language
 * model's loss over windows or streamed over a whole text, a classifier's loss and accuracy, an
 * encoder-decoder's teacher-forced loss and token accuracy. Nothing here prints: a long
 * evaluation reports through the caller's progress callback.
 */
#include "core/internal.h"
#include "mega.h"
#include "mega_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline int32_t tok_at(const mega_tokens *s, size_t i) { return s->bytes ? (int32_t)s->bytes[i] : s->ids[i]; }

mega_status mega_lm_eval_windows(mega_lm *m, const mega_tokens *sq, int B, int T, size_t max_tokens, double *loss,
                                 int64_t *count) {
    const size_t n = sq->n;
    if (n < 2) MEGA_FAIL(MEGA_ERR_INVALID, "validation text is too short (%zu bytes)", n);
    if (B < 1 || T < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_lm_eval_windows: bad windows %d x %d", B, T);
    if ((size_t)T + 1 > n) T = (int)(n - 1);
    size_t nwin = (n - 1) / (size_t)T;
    if (max_tokens && nwin * (size_t)T > max_tokens) nwin = max_tokens / (size_t)T > 0 ? max_tokens / (size_t)T : 1;
    int32_t *tok = malloc((size_t)B * T * sizeof(int32_t)), *tgt = malloc((size_t)B * T * sizeof(int32_t));
    if (!tok || !tgt) {
        free(tok), free(tgt);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    double tot = 0;
    int64_t cnt = 0;
    mega_lm_run run = {0, 0};
    for (size_t w0 = 0; w0 < nwin; w0 += (size_t)B) {
        int nb = (int)((nwin - w0) < (size_t)B ? (nwin - w0) : (size_t)B);
        for (int b = 0; b < nb; b++) {
            const size_t s = (w0 + (size_t)b) * (size_t)T;
            for (int t = 0; t < T; t++)
                tok[(size_t)b * T + t] = tok_at(sq, s + (size_t)t), tgt[(size_t)b * T + t] = tok_at(sq, s + (size_t)t + 1);
        }
        double l;
        int64_t c;
        mega_status st = mega_lm_forward(m, tok, tgt, nb, T, &run, &l, &c);
        if (st != MEGA_OK) {
            free(tok), free(tgt);
            return st;
        }
        tot += l * (double)c;
        cnt += c;
    }
    free(tok), free(tgt);
    *loss = cnt ? tot / (double)cnt : 0;
    *count = cnt;
    return MEGA_OK;
}

mega_status mega_lm_eval_stream(mega_lm *m, const mega_tokens *sq, int seg, size_t restart, mega_eval_progress progress,
                                void *ctx, double *loss, int64_t *count) {
    const mega_lm_config *c = mega_lm_get_config(m);
    const size_t n = sq->n;
    if (n < 2) MEGA_FAIL(MEGA_ERR_INVALID, "evaluation text is too short (%zu %s)", n, sq->bytes ? "bytes" : "tokens");
    if (seg < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_lm_eval_stream: bad segment length %d", seg);
    const int V = c->vocab_size;
    /* chunked Mega carries its whole state across segments (the cache resets at chunk borders);
     * full attention, and every other mixer, restarts at every segment (their caches would grow
     * with the text): their context is one segment (mega_block_context.carry) */
    mega_block_context x;
    mega_block_context_of(&c->block, seg, &x);
    const int full = !x.carry;
    const int cap = x.cache;
    mega_lm_stream *s;
    MEGA_TRY(mega_lm_stream_new(m, 1, cap, &s));
    int32_t *tok = malloc((size_t)seg * sizeof(int32_t));
    mega_real *lg = malloc((size_t)seg * V * sizeof(mega_real));
    if (!tok || !lg) {
        free(tok), free(lg);
        mega_lm_stream_free(s);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    double tot = 0;
    int64_t cnt = 0;
    const size_t N = n - 1; /* predictions */
    for (size_t p = 0; p < N;) {
        /* a segment never crosses a restart */
        size_t end = restart ? (p / restart + 1) * restart : N;
        end = end < N ? end : N;
        int T = (int)((end - p) < (size_t)seg ? (end - p) : (size_t)seg);
        for (int t = 0; t < T; t++) tok[t] = tok_at(sq, p + (size_t)t);
        if (full || (restart && p % restart == 0)) mega_lm_stream_reset(s);
        mega_status st = mega_lm_stream_feed(s, tok, T, lg);
        if (st != MEGA_OK) {
            free(tok), free(lg);
            mega_lm_stream_free(s);
            return st;
        }
        for (int t = 0; t < T; t++) {
            const mega_real *l = lg + (size_t)t * V;
            double mx = l[0], sum = 0;
            for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
            tot += mx + log(sum) - (double)l[tok_at(sq, p + (size_t)t + 1)];
            cnt++;
        }
        p += (size_t)T;
        if (progress) progress(ctx, (int64_t)p, (int64_t)N, tot / (double)cnt);
    }
    free(tok), free(lg);
    mega_lm_stream_free(s);
    *loss = tot / (double)cnt;
    *count = cnt;
    return MEGA_OK;
}

/* ---- classifiers ---- */

/* examples idx[0..n) of d through the classifier (eval mode), in a batch n x (the longest of
 * them, at most maxlen) inside *b, grown to the largest batch seen (*capB rows, *cap / *cap2
 * elements) */
static mega_status cls_batch(mega_cls *m, mega_batch *b, int *capB, size_t *cap, size_t *cap2, const mega_dataset *d,
                             const int *idx, int n, int maxlen, double *loss, int64_t *correct) {
    int L = mega_batch_max_len(d, idx, n, 0), L2 = d->pairs ? mega_batch_max_len(d, idx, n, 1) : 0;
    if (L > maxlen) L = maxlen;
    if (L2 > maxlen) L2 = maxlen;
    if (L < 1) L = 1;
    if (d->pairs && L2 < 1) L2 = 1;
    if ((size_t)n * L > *cap || (size_t)n * L2 > *cap2 || n > *capB) {
        size_t nc = (size_t)n * L > *cap ? (size_t)n * L : *cap, nc2 = (size_t)n * L2 > *cap2 ? (size_t)n * L2 : *cap2;
        int nb = n > *capB ? n : *capB;
        mega_batch_free(b);
        /* nb rows x (capacity / nb) columns, rounded up */
        int L2cap = d->pairs ? (int)((nc2 + nb - 1) / nb) : 0;
        MEGA_TRY(mega_batch_init(b, nb, (int)((nc + nb - 1) / nb), L2cap, d->vocab.real));
        *capB = nb, *cap = (size_t)nb * b->L, *cap2 = (size_t)nb * b->L2;
    }
    b->B = n, b->L = L, b->L2 = L2;
    MEGA_TRY(mega_batch_fill(b, d, idx, n));
    mega_cls_input in = {b->tok, b->val, b->len, L};
    mega_cls_input in2 = {b->tok2, NULL, b->len2, L2};
    mega_lm_run run = {0, 0};
    return mega_cls_forward(m, &in, d->pairs ? &in2 : NULL, n, b->label, &run, loss, correct);
}

mega_status mega_cls_evaluate(mega_cls *m, const mega_dataset *d, const int *idx, int n, int batch, int maxlen,
                              mega_eval_progress progress, void *ctx, double *loss, int64_t *correct, int *pred) {
    if (batch < 1 || maxlen < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_cls_evaluate: bad batch %d or length %d", batch, maxlen);
    mega_batch b;
    memset(&b, 0, sizeof b);
    int capB = 0;
    size_t cap = 0, cap2 = 0;
    double tot = 0;
    int64_t ok = 0;
    const int C = mega_cls_get_config(m)->classes;
    for (int i = 0; i < n; i += batch) {
        int nb = n - i < batch ? n - i : batch;
        double l;
        int64_t c;
        mega_status st = cls_batch(m, &b, &capB, &cap, &cap2, d, idx + i, nb, maxlen, &l, &c);
        if (st != MEGA_OK) {
            mega_batch_free(&b);
            return st;
        }
        tot += l * nb, ok += c;
        if (pred) {
            const mega_real *lg = mega_cls_logits(m);
            for (int r = 0; r < nb; r++) {
                int am = 0;
                for (int k = 1; k < C; k++)
                    if (lg[(size_t)r * C + k] > lg[(size_t)r * C + am]) am = k;
                pred[i + r] = am;
            }
        }
        if (progress) progress(ctx, i + nb, n, (double)ok / (i + nb));
    }
    mega_batch_free(&b);
    *loss = n ? tot / n : 0;
    *correct = ok;
    return MEGA_OK;
}

/* ---- encoder-decoders ---- */

/* examples idx[0..B) of d through the model (eval mode, teacher forcing) in the buffers *src,
 * *prev, *tgt of *cap tokens (grown as needed); *correct: the argmax predictions that are the
 * counted targets */
static mega_status s2s_batch(mega_s2s *m, int32_t **src, int32_t **prev, int32_t **tgt, size_t *cap, const mega_s2s_data *d,
                             const int *idx, int B, double *nll, int64_t *count, int64_t *correct) {
    int S, L;
    MEGA_TRY(mega_s2s_batch_shape(d, idx, B, &S, &L));
    const size_t need = (size_t)B * (size_t)MEGA_MAX(S, L);
    if (need > *cap) {
        free(*src), free(*prev), free(*tgt);
        *src = malloc(need * sizeof(int32_t)), *prev = malloc(need * sizeof(int32_t)), *tgt = malloc(need * sizeof(int32_t));
        *cap = need;
        if (!*src || !*prev || !*tgt) {
            *cap = 0;
            MEGA_FAIL(MEGA_ERR_OOM, "out of memory for a batch of %zu tokens", need);
        }
    }
    MEGA_TRY(mega_s2s_fill(d, idx, B, *src, S, *prev, *tgt, L, NULL, NULL));
    mega_lm_run run = {0, 0};
    double loss;
    MEGA_TRY(mega_s2s_forward(m, *src, S, *prev, *tgt, L, B, &run, 0.0, &loss, nll, count));
    const int V = mega_s2s_get_config(m)->tgt_vocab_size;
    const mega_real *lg = mega_s2s_logits(m);
    int64_t ok = 0;
    for (size_t r = 0; r < (size_t)B * L; r++) {
        if ((*tgt)[r] == MEGA_S2S_PAD) continue;
        int am = 0;
        for (int v = 1; v < V; v++)
            if (lg[r * V + v] > lg[r * V + am]) am = v;
        ok += am == (*tgt)[r];
    }
    *correct = ok;
    return MEGA_OK;
}

mega_status mega_s2s_evaluate(mega_s2s *m, const mega_s2s_data *d, const int *sel, int n, int max_tokens, double *nll_out,
                              double *acc_out, int64_t *tokens) {
    /* sort the selection by length (the batches then waste little padding) */
    int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    if (!idx) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    memcpy(idx, sel, (size_t)n * sizeof(int));
    for (int i = 1; i < n; i++) { /* insertion sort by (source, target) length: n is a validation set */
        int v = idx[i], j = i - 1;
        while (j >= 0 && (d->src_len[idx[j]] > d->src_len[v] ||
                          (d->src_len[idx[j]] == d->src_len[v] && d->tgt_len[idx[j]] > d->tgt_len[v])))
            idx[j + 1] = idx[j], j--;
        idx[j + 1] = v;
    }
    int32_t *src = NULL, *prev = NULL, *tgt = NULL;
    size_t cap = 0;
    double tot = 0;
    int64_t cnt = 0, ok = 0;
    mega_status st = MEGA_OK;
    for (int i = 0; i < n && !st;) {
        int B = 1, mx = MEGA_MAX(d->src_len[idx[i]], d->tgt_len[idx[i]]);
        while (i + B < n) {
            int w = MEGA_MAX(mx, MEGA_MAX(d->src_len[idx[i + B]], d->tgt_len[idx[i + B]]));
            if ((int64_t)(B + 1) * w > max_tokens) break;
            mx = w, B++;
        }
        double nll = 0;
        int64_t c = 0, k = 0;
        st = s2s_batch(m, &src, &prev, &tgt, &cap, d, idx + i, B, &nll, &c, &k);
        tot += nll * (double)c, cnt += c, ok += k;
        i += B;
    }
    free(idx);
    free(src), free(prev), free(tgt);
    if (st) return st;
    *nll_out = cnt ? tot / (double)cnt : 0;
    *acc_out = cnt ? (double)ok / (double)cnt : 0;
    if (tokens) *tokens = cnt;
    return MEGA_OK;
}

mega_status mega_mlm_evaluate(mega_cls *m, const uint8_t *text, size_t n, int batch, int T, uint64_t seed, size_t max_bytes,
                              mega_eval_progress progress, void *ctx, double *loss, int64_t *correct, int64_t *count) {
    const mega_cls_config *c = mega_cls_get_config(m);
    if (!c->mlm) MEGA_FAIL(MEGA_ERR_INVALID, "this model has no masked-LM head (it was not trained with --task mlm)");
    if (batch < 1 || T < 1) MEGA_FAIL(MEGA_ERR_INVALID, "masked-LM evaluation: bad batch %d x %d", batch, T);
    if (max_bytes > 0 && max_bytes < n) n = max_bytes;
    if (n < 1) MEGA_FAIL(MEGA_ERR_INVALID, "masked-LM evaluation: no text");
    const size_t nw = (n + (size_t)T - 1) / (size_t)T;
    const int B = nw < (size_t)batch ? (int)nw : batch;
    int32_t *tok = malloc((size_t)B * T * sizeof *tok), *tgt = malloc((size_t)B * T * sizeof *tgt);
    int32_t *len = malloc((size_t)B * sizeof *len);
    if (!tok || !tgt || !len) {
        free(tok), free(tgt), free(len);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    uint64_t st = mega_data_rng_seed(seed);
    double tot = 0;
    int64_t ok = 0, cnt = 0;
    mega_status rc = MEGA_OK;
    const mega_lm_run run = {0, 0};
    for (size_t w0 = 0; w0 < nw && !rc; w0 += (size_t)B) {
        const int nb = (int)(nw - w0 < (size_t)B ? nw - w0 : (size_t)B);
        for (int b = 0; b < nb; b++) {
            const size_t s0 = (w0 + (size_t)b) * (size_t)T, L = n - s0 < (size_t)T ? n - s0 : (size_t)T;
            int32_t *tk = tok + (size_t)b * T, *tg = tgt + (size_t)b * T;
            for (int t = 0; t < T; t++) tk[t] = (size_t)t < L ? text[s0 + (size_t)t] : c->padding_idx, tg[t] = -1;
            len[b] = (int32_t)L;
            mega_mlm_mask(tk, tg, (int)L, 0.15, c->vocab_size - 1, 256, &st);
        }
        const mega_cls_input in = {tok, NULL, len, T};
        double l;
        int64_t k, cn;
        rc = mega_cls_mlm_forward(m, &in, nb, tgt, &run, &l, &k, &cn);
        tot += l * (double)cn, ok += k, cnt += cn;
        if (!rc && progress) progress(ctx, (int64_t)(w0 + (size_t)nb), (int64_t)nw, cnt ? (double)ok / (double)cnt : 0);
    }
    free(tok), free(tgt), free(len);
    if (rc) return rc;
    *loss = cnt ? tot / (double)cnt : 0, *correct = ok, *count = cnt;
    return MEGA_OK;
}
