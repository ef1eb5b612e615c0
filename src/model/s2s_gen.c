/*
 * Incremental decoding and search for the encoder–decoder (official incremental_state path of
 * MegaDecoder, fairseq SequenceGenerator/BeamSearch; docs/translation.md).
 *
 * The stream runs the encoder once per source batch and keeps, per decoder layer, the mixer's
 * streaming state (Mega: the EMA state and the current chunk's keys and values, cleared at each
 * chunk border as the official incremental state is) and the cross-attention's keys and values
 * of the encoder output (the official static_kv cache). A step feeds one token per row. Rows whose
 * token is padding produce zero logits (the official decoder multiplies its features by the
 * inverse pad mask). Nothing allocates after mega_s2s_stream_new.
 */
#include "model/s2s.h"

mega_status mega_s2s_stream_new(mega_s2s *m, int B, int Smax, int tmax, mega_s2s_stream **out) {
    *out = NULL;
    const mega_s2s_config *c = &m->cfg;
    if (B < 1 || Smax < 1 || tmax < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "stream rows, source length and decoding length must be positive (got %d, %d, %d)", B,
                  Smax, tmax);
    const int Ld = c->decoder_layers;
    const size_t D = (size_t)c->decoder.embed_dim;
    /* the decoder mixer's cache for tmax tokens (chunked Mega: one chunk of keys) */
    mega_block_context x;
    mega_block_context_of(&c->decoder, tmax, &x);
    const int cap = x.cache;
    mega_s2s_stream *s = calloc(1, sizeof *s);
    if (!s) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    s->m = m, s->B = B, s->Smax = Smax, s->tmax = tmax;
    s->sper = mega_block_state_size(&m->dl[0].self, B, cap);
    s->xper = mega_xattn_state_size(&m->dl[0].x, B, Smax, tmax);
    size_t scr = mega_block_step_scratch(&m->dl[0].self, B, 1, cap);
    scr = MEGA_MAX(scr, mega_xattn_step_scratch(&m->dl[0].x, B, Smax));
    if (c->decoder.ffn_dim > 0) scr = MEGA_MAX(scr, mega_nffn_step_scratch(&m->dl[0].ffn, (size_t)B));
    s->SS = calloc((size_t)Ld, sizeof *s->SS);
    s->XS = calloc((size_t)Ld, sizeof *s->XS);
    s->smem = mega__calloc(s->sper * (size_t)Ld + 1, sizeof(real));
    s->xmem = mega__calloc(s->xper * (size_t)Ld + 1, sizeof(real));
    s->E = mega__calloc((size_t)B * Smax * D, sizeof(real));
    s->pad = calloc((size_t)B * Smax, 1);
    s->x = mega__calloc((size_t)B * D * 2 + 2 * (size_t)B + 2 * D + 32, sizeof(real));
    s->scratch = mega__calloc(scr, sizeof(real));
    s->tmp = mega__calloc(s->sper + 1, sizeof(real));
    if (!s->SS || !s->XS || !s->smem || !s->xmem || !s->E || !s->pad || !s->x || !s->scratch || !s->tmp) {
        mega_s2s_stream_free(s);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory allocating the decoding state for %d rows", B);
    }
    s->y = s->x + (size_t)B * D, s->st = s->y + (size_t)B * D;
    for (int l = 0; l < Ld; l++) {
        mega_status st = mega_block_state_init(&m->dl[l].self, m->P.data, &s->SS[l], s->smem + (size_t)l * s->sper, B, cap);
        if (st) {
            mega_s2s_stream_free(s);
            return st;
        }
        mega_xattn_state_view(&m->dl[l].x, &s->XS[l], s->xmem + (size_t)l * s->xper, B, Smax, tmax);
    }
    *out = s;
    return MEGA_OK;
}

void mega_s2s_stream_free(mega_s2s_stream *s) {
    if (!s) return;
    free(s->SS), free(s->XS), free(s->pad);
    mega__free(s->smem), mega__free(s->xmem), mega__free(s->E), mega__free(s->x), mega__free(s->scratch);
    mega__free(s->tmp);
    free(s);
}

mega_status mega_s2s_stream_start(mega_s2s_stream *s, const int32_t *src, int S, int rep) {
    mega_s2s *m = s->m;
    const mega_s2s_config *c = &m->cfg;
    if (rep < 1 || s->B % rep) MEGA_FAIL(MEGA_ERR_INVALID, "%d stream rows are not a multiple of %d", s->B, rep);
    if (S < 1 || S > s->Smax) MEGA_FAIL(MEGA_ERR_INVALID, "source length %d is outside the stream's [1, %d]", S, s->Smax);
    const int Bs = s->B / rep;
    const size_t D = (size_t)c->encoder.embed_dim;
    MEGA_TRY(mega__s2s_reserve(m, Bs, S, 1));
    MEGA_TRY(mega__s2s_encode(m, src, Bs, S, 0, 0));
    for (int b = 0; b < s->B; b++) {
        memcpy(s->E + (size_t)b * S * D, m->E + (size_t)(b / rep) * S * D, (size_t)S * D * sizeof(real));
        memcpy(s->pad + (size_t)b * S, m->spadc + (size_t)(b / rep) * S, (size_t)S);
    }
    for (int l = 0; l < c->decoder_layers; l++) {
        /* the states are built from the current weights (the bias tables), so a start after a
         * parameter update sees the new ones */
        MEGA_TRY(mega_block_state_init(&m->dl[l].self, m->P.data, &s->SS[l], s->SS[l].mem, s->B, s->SS[l].cap));
        MEGA_TRY(mega_xattn_state_init(&m->dl[l].x, m->P.data, &s->XS[l], s->E, m->src_any_pad ? s->pad : NULL, S,
                                       s->scratch));
    }
    s->S = S, s->rep = rep, s->pos = 0;
    return MEGA_OK;
}

mega_status mega_s2s_stream_step(mega_s2s_stream *s, const int32_t *tok, mega_real *logits) {
    mega_s2s *m = s->m;
    const mega_s2s_config *c = &m->cfg;
    const int B = s->B, t = (int)s->pos;
    const size_t D = (size_t)c->decoder.embed_dim, V = (size_t)c->tgt_vocab_size;
    if (!s->S) MEGA_FAIL(MEGA_ERR_INVALID, "decoding step before mega_s2s_stream_start");
    if (t >= s->tmax) MEGA_FAIL(MEGA_ERR_INVALID, "decoding beyond the stream's %d positions", s->tmax);
    const real *W = m->P.data;
    int32_t *tk = (int32_t *)s->tmp; /* the reorder scratch is free between calls */
    uint8_t *pd = (uint8_t *)(tk + B);
    for (int b = 0; b < B; b++) {
        if (tok[b] < 0 || tok[b] >= (int32_t)V) MEGA_FAIL(MEGA_ERR_INVALID, "token %d is outside the vocabulary of %zu", tok[b], V);
        tk[b] = tok[b];
        pd[b] = tok[b] == c->padding_idx;
    }
    const real scale = c->scale_embedding ? (real)sqrt((double)D) : (real)1;
    real *x = s->x, *y = s->y;
    mega_embedding_forward(x, W + m->tgt_emb, tk, pd, (size_t)B, D, scale);
    if (c->normalize_embedding) mega_seqnorm_forward(&m->dec_enorm, (real *)W, x, s->st, x, (size_t)B, 0, 0, NULL);
    for (size_t b = 0; b < (size_t)B; b++)
        if (pd[b]) memset(x + b * D, 0, D * sizeof(real));
    for (int l = 0; l < c->decoder_layers; l++) {
        MEGA_TRY(mega_block_step(&m->dl[l].self, W, &s->SS[l], y, x, 1, s->scratch));
        MEGA_TRY(mega_xattn_step(&m->dl[l].x, W, &s->XS[l], x, y, t, s->scratch));
        if (c->decoder.ffn_dim > 0) mega_nffn_step(&m->dl[l].ffn, W, x, x, (size_t)B, s->scratch);
    }
    if (m->has_dfnorm) mega_seqnorm_forward(&m->dfnorm, (real *)W, x, s->st, x, (size_t)B, 0, 0, NULL);
    for (size_t b = 0; b < (size_t)B; b++)
        if (pd[b]) memset(x + b * D, 0, D * sizeof(real));
    if (logits) mega_linear_step(logits, x, W + (c->tie_embeddings ? m->tgt_emb : m->out_w), NULL, (size_t)B, D, V);
    s->pos++;
    return MEGA_OK;
}

mega_status mega_s2s_stream_reorder(mega_s2s_stream *s, const int *idx) {
    for (int b = 0; b < s->B; b++)
        if (idx[b] < 0 || idx[b] >= s->B || (s->rep && idx[b] / s->rep != b / s->rep))
            MEGA_FAIL(MEGA_ERR_INVALID, "reorder: row %d cannot continue row %d (another source)", b, idx[b]);
    for (int l = 0; l < s->m->cfg.decoder_layers; l++)
        MEGA_TRY(mega_block_state_reorder(&s->m->dl[l].self, &s->SS[l], idx, s->tmp));
    return MEGA_OK;
}

/* ---- search ------------------------------------------------------------------------------- */

void mega_s2s_search_default(mega_s2s_search *p) {
    p->beam = 4, p->lenpen = 1.0, p->max_len_a = 1.2, p->max_len_b = 10, p->limit_src_len = NULL;
}

typedef struct {
    double score; /* the hypothesis' cumulative log-probability */
    int row, tok;
} cand;

/* log-softmax of a row of logits into lp (double) */
static void log_softmax(const real *l, int V, double *lp) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
    const double lse = mx + log(sum);
    for (int v = 0; v < V; v++) lp[v] = (double)l[v] - lse;
}

/*
 * Beam search as fairseq's SequenceGenerator/BeamSearch does it: at step t every live beam of a
 * sentence proposes every token (step 0: beam 0 only, the beams being identical); the best 2K
 * candidates are ranked; eos candidates among the first K end a hypothesis (score / (t+1)^lenpen);
 * the first K candidates that do not end are the next beams; a sentence is done when K hypotheses
 * have ended (or at its length limit, where eos is forced).
 * Project rule: with K > 1 each sentence also decodes its greedy hypothesis in one extra row, and
 * that hypothesis competes in the final choice, so that a beam never returns a translation
 * scoring below greedy decoding (plain beam search can: it may prune the greedy path and then
 * stop on K worse hypotheses). Cost: one row in K+1.
 */
/* the search's state: R = B*G rows (G per sentence: K beams, then the greedy row when K > 1) of
 * histories up to tmax tokens; ended hypotheses: K per sentence, then the greedy one (slot
 * b*G + K); done[b*G] = the beams of sentence b have ended, done[b*G + K] = its greedy row has */
typedef struct {
    int K, G, V, eos, pad, tmax;
    double lenpen;
    real *lg;
    double *bscore, *fin_score, *lp;
    int32_t *hist, *hist2, *prev, *fin_tok;
    int *idx, *fin_n, *fin_len, *done;
    cand *cd;
} search_t;

static void search_free(search_t *s) {
    mega__free(s->lg);
    free(s->lp), free(s->bscore), free(s->hist), free(s->hist2), free(s->prev), free(s->idx), free(s->fin_score);
    free(s->fin_len), free(s->fin_tok), free(s->fin_n), free(s->done), free(s->cd);
}

static mega_status search_alloc(search_t *s, int B) {
    const int R = B * s->G, K = s->K, V = s->V, tmax = s->tmax;
    s->lg = mega__calloc((size_t)R * V, sizeof(real));
    s->lp = calloc((size_t)V, sizeof(double));
    s->bscore = calloc((size_t)R, sizeof(double));
    s->hist = calloc((size_t)R * tmax, sizeof(int32_t)), s->hist2 = calloc((size_t)R * tmax, sizeof(int32_t));
    s->prev = calloc((size_t)R, sizeof(int32_t));
    s->idx = calloc((size_t)R, sizeof(int));
    s->fin_score = calloc((size_t)R, sizeof(double)), s->fin_len = calloc((size_t)R, sizeof(int));
    s->fin_tok = calloc((size_t)R * tmax, sizeof(int32_t));
    s->fin_n = calloc((size_t)B, sizeof(int)), s->done = calloc((size_t)R, sizeof(int));
    s->cd = calloc((size_t)2 * K * V + 1, sizeof(cand));
    if (!s->lg || !s->lp || !s->bscore || !s->hist || !s->hist2 || !s->prev || !s->idx || !s->fin_score || !s->fin_len ||
        !s->fin_tok || !s->fin_n || !s->done || !s->cd)
        return mega__error(MEGA_ERR_OOM, "out of memory for the search of %d sentences x beam %d", B, K);
    return MEGA_OK;
}

/* step t of row r's greedy hypothesis (the project rule above); 1 when it ended */
static int greedy_step(search_t *s, int r, int t, int force_eos) {
    const int V = s->V;
    log_softmax(s->lg + (size_t)r * V, V, s->lp);
    int best = -1;
    for (int v = 0; v < V; v++)
        if (v != s->pad && (!force_eos || v == s->eos) && (best < 0 || s->lp[v] > s->lp[best])) best = v;
    s->bscore[r] += s->lp[best];
    if (best != s->eos) {
        s->prev[r] = best;
        return 0;
    }
    s->fin_len[r] = t, s->fin_score[r] = s->bscore[r] / pow((double)(t + 1), s->lenpen);
    memcpy(s->fin_tok + (size_t)r * s->tmax, s->hist + (size_t)r * s->tmax, (size_t)t * sizeof(int32_t));
    s->done[r] = 1;
    return 1;
}

/* step t of sentence b's beams (rows r0 = b*G ..): rank the candidates, end hypotheses, pick the
 * next beams into idx/prev/bscore; 1 when the sentence's beams are done */
static int beam_step(search_t *s, int b, int t, int force_eos) {
    const int K = s->K, V = s->V, r0 = b * s->G, eos = s->eos;
    cand *cd = s->cd;
    int nc = 0;
    for (int k = 0; k < (t == 0 ? 1 : K); k++) { /* step 0: the beams are identical */
        const int r = r0 + k;
        log_softmax(s->lg + (size_t)r * V, V, s->lp);
        for (int v = 0; v < V; v++) {
            if (v == s->pad || (force_eos && v != eos)) continue;
            cd[nc++] = (cand){s->bscore[r] + s->lp[v], r, v};
        }
    }
    /* the best 2K candidates, best first (ties: lower row, then lower token) */
    const int top = MEGA_MIN(2 * K, nc);
    for (int i = 0; i < top; i++) {
        int bi = i;
        for (int j = i + 1; j < nc; j++)
            if (cd[j].score > cd[bi].score ||
                (cd[j].score == cd[bi].score && (cd[j].row < cd[bi].row || (cd[j].row == cd[bi].row && cd[j].tok < cd[bi].tok))))
                bi = j;
        cand tmp = cd[i];
        cd[i] = cd[bi], cd[bi] = tmp;
    }
    /* eos among the first K candidates ends a hypothesis (fairseq: eos_mask[:, :beam]) */
    for (int i = 0; i < MEGA_MIN(K, top) && s->fin_n[b] < K; i++) {
        if (cd[i].tok != eos) continue;
        const int f = r0 + s->fin_n[b]++;
        s->fin_len[f] = t; /* tokens before eos */
        s->fin_score[f] = cd[i].score / pow((double)(t + 1), s->lenpen);
        memcpy(s->fin_tok + (size_t)f * s->tmax, s->hist + (size_t)cd[i].row * s->tmax, (size_t)t * sizeof(int32_t));
    }
    if (s->fin_n[b] >= K || force_eos) {
        s->done[r0] = 1;
        return 1;
    }
    /* the next beams: the best K candidates that do not end */
    int k = 0;
    for (int i = 0; i < top && k < K; i++) {
        if (cd[i].tok == eos) continue;
        const int r = r0 + k++;
        s->idx[r] = cd[i].row, s->prev[r] = cd[i].tok, s->bscore[r] = cd[i].score;
    }
    for (; k < K; k++) { /* fewer live candidates than beams (tiny vocabularies): repeat the last */
        const int r = r0 + k;
        s->idx[r] = s->idx[r - 1], s->prev[r] = s->prev[r - 1], s->bscore[r] = -INFINITY;
    }
    return 0;
}

/* the best ended hypothesis of sentence b into out/out_len/score (the greedy one only when
 * strictly better) */
static mega_status search_best(const search_t *s, int b, int32_t *out, int *out_len, int cap, double *score) {
    const int G = s->G, K = s->K;
    int best = -1;
    for (int f = 0; f < s->fin_n[b]; f++)
        if (best < 0 || s->fin_score[b * G + f] > s->fin_score[b * G + best]) best = f;
    if (G > 1 && s->done[b * G + K] && (best < 0 || s->fin_score[b * G + K] > s->fin_score[b * G + best])) best = K;
    if (best < 0) /* cannot happen: eos is forced at the length limit */
        return mega__error(MEGA_ERR_INVALID, "sentence %d: no finished hypothesis", b);
    const int f = b * G + best;
    if (s->fin_len[f] > cap)
        return mega__error(MEGA_ERR_INVALID, "sentence %d: translation of %d tokens exceeds the output capacity %d", b,
                           s->fin_len[f], cap);
    memcpy(out + (size_t)b * cap, s->fin_tok + (size_t)f * s->tmax, (size_t)s->fin_len[f] * sizeof(int32_t));
    out_len[b] = s->fin_len[f];
    if (score) score[b] = s->fin_score[f];
    return MEGA_OK;
}

mega_status mega_s2s_translate(mega_s2s *m, const int32_t *src, int B, int S, const mega_s2s_search *p, int32_t *out,
                               int *out_len, int cap, double *score) {
    const mega_s2s_config *c = &m->cfg;
    const int K = p->beam;
    if (K < 1 || K > 1024) MEGA_FAIL(MEGA_ERR_INVALID, "beam size must be in [1, 1024] (got %d)", K);
    if (B < 1 || S < 1) MEGA_FAIL(MEGA_ERR_INVALID, "nothing to translate (%d sources of %d tokens)", B, S);
    if (!(p->max_len_a >= 0) || p->max_len_b < 0) MEGA_FAIL(MEGA_ERR_INVALID, "max-len-a and max-len-b must be >= 0");
    if (!(p->lenpen >= 0)) MEGA_FAIL(MEGA_ERR_INVALID, "the length penalty must be >= 0 (got %g)", p->lenpen);
    search_t s = {0};
    s.K = K, s.G = K > 1 ? K + 1 : 1, s.V = c->tgt_vocab_size, s.eos = c->eos_idx, s.pad = c->padding_idx;
    s.lenpen = p->lenpen;
    const int G = s.G, R = B * G, lim = mega__s2s_max_len(m) - 1;
    /* each sentence's own length limit (its true source length, so that a translation does not
     * depend on the other sentences of the batch) */
    int tmax = 1;
    int *maxlen = calloc((size_t)B, sizeof(int));
    if (!maxlen) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    for (int b = 0; b < B; b++) {
        int n = 0;
        while (n < S && src[(size_t)b * S + n] != s.pad) n++;
        if (p->limit_src_len) n = p->limit_src_len[b];
        double ml = p->max_len_a * n + p->max_len_b;
        maxlen[b] = (int)MEGA_MIN(ml, (double)lim);
        if (maxlen[b] < 1) maxlen[b] = 1;
        tmax = MEGA_MAX(tmax, maxlen[b] + 1);
    }
    s.tmax = tmax;
    mega_s2s_stream *st = NULL;
    mega_status rc = mega_s2s_stream_new(m, R, S, tmax, &st);
    if (!rc) rc = search_alloc(&s, B);
    if (!rc) rc = mega_s2s_stream_start(st, src, S, G);
    if (rc) goto out;
    for (int r = 0; r < R; r++) s.prev[r] = s.eos, s.idx[r] = r;
    int open = B * (G > 1 ? 2 : 1);
    for (int t = 0; t < tmax && open > 0; t++) {
        if ((rc = mega_s2s_stream_step(st, s.prev, s.lg))) goto out;
        for (int r = 0; r < R; r++) s.idx[r] = r;
        for (int b = 0; b < B; b++) {
            const int force_eos = t >= maxlen[b], r0 = b * G;
            if (G > 1 && !s.done[r0 + K]) open -= greedy_step(&s, r0 + K, t, force_eos);
            if (!s.done[r0]) open -= beam_step(&s, b, t, force_eos);
        }
        if (open == 0) break;
        /* the token histories and the decoder states follow the chosen rows */
        for (int r = 0; r < R; r++) {
            memcpy(s.hist2 + (size_t)r * tmax, s.hist + (size_t)s.idx[r] * tmax, (size_t)t * sizeof(int32_t));
            s.hist2[(size_t)r * tmax + t] = s.prev[r];
        }
        int32_t *sw = s.hist;
        s.hist = s.hist2, s.hist2 = sw;
        if (K > 1 && (rc = mega_s2s_stream_reorder(st, s.idx))) goto out;
    }
    for (int b = 0; b < B && !rc; b++) rc = search_best(&s, b, out, out_len, cap, score);
out:
    mega_s2s_stream_free(st);
    search_free(&s);
    free(maxlen);
    return rc;
}
