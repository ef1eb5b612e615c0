/* Parallel text for translation: mega_s2s_data_load on a file holding the input, then the
 * batches of an epoch (mega_s2s_batches) and every batch padded (mega_s2s_batch_shape +
 * mega_s2s_fill). The first four bytes are the options:
 *   byte 0: max_src_len (0 = none, else 2..64)       byte 1: max_tgt_len (likewise)
 *   byte 2: bits 0-3 max_examples (0 = all), bit 4 strict, bit 5 shuffle, bits 6-7 the limits
 *           of a batch (tokens only, sentences only, both)
 *   byte 3: max_tokens / 2 (with a token limit), or max_sentences (1..32)
 * Invariants: the plan holds every example exactly once, no batch breaks its limits unless it
 * is one oversize example, and the padded rows hold exactly the example's tokens. */
#include "fuzz_common.h"

static void check_plan(const mega_s2s_data *d, const mega_s2s_plan *p, int max_tokens, int max_sentences) {
    FZ_CHECK(p->n >= 1 && p->n_idx == d->n);
    char *seen = calloc((size_t)d->n, 1);
    int total = 0;
    FZ_CHECK(seen);
    for (int b = 0; b < p->n; b++) {
        FZ_CHECK(p->count[b] >= 1 && p->off[b] >= 0 && p->off[b] + p->count[b] <= p->n_idx);
        const int *idx = p->idx + p->off[b];
        int S = 0, L = 0;
        FZ_CHECK(mega_s2s_batch_shape(d, idx, p->count[b], &S, &L) == MEGA_OK);
        int w = S > L ? S : L;
        if (p->count[b] > 1) {
            if (max_tokens) FZ_CHECK((int64_t)p->count[b] * w <= max_tokens);
            if (max_sentences) FZ_CHECK(p->count[b] <= max_sentences);
        }
        const size_t B = (size_t)p->count[b];
        int32_t *src = malloc(B * (size_t)S * sizeof *src), *prev = malloc(B * (size_t)L * sizeof *prev);
        int32_t *tgt = malloc(B * (size_t)L * sizeof *tgt), *sl = malloc(B * sizeof *sl), *tl = malloc(B * sizeof *tl);
        FZ_CHECK(src && prev && tgt && sl && tl);
        FZ_CHECK(mega_s2s_fill(d, idx, p->count[b], src, S, prev, tgt, L, sl, tl) == MEGA_OK);
        for (size_t r = 0; r < B; r++) {
            const int e = idx[r];
            FZ_CHECK(e >= 0 && e < d->n && !seen[e]);
            seen[e] = 1, total++;
            FZ_CHECK(sl[r] == d->src_len[e] && tl[r] == d->tgt_len[e]);
            FZ_CHECK(src[r * (size_t)S + (size_t)sl[r] - 1] == MEGA_S2S_EOS && tgt[r * (size_t)L + (size_t)tl[r] - 1] == MEGA_S2S_EOS);
            FZ_CHECK(prev[r * (size_t)L] == MEGA_S2S_EOS);
            for (int t = 0; t < sl[r] - 1; t++) FZ_CHECK(src[r * (size_t)S + (size_t)t] < 256);
            for (int t = sl[r]; t < S; t++) FZ_CHECK(src[r * (size_t)S + (size_t)t] == MEGA_S2S_PAD);
            for (int t = 1; t < tl[r]; t++) FZ_CHECK(prev[r * (size_t)L + (size_t)t] == tgt[r * (size_t)L + (size_t)t - 1]);
        }
        FZ_CHECK(mega_s2s_fill(d, idx, p->count[b], src, S - 1, NULL, NULL, L, NULL, NULL) == MEGA_ERR_INVALID);
        free(src), free(prev), free(tgt), free(sl), free(tl);
    }
    FZ_CHECK(total == d->n);
    free(seen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    const unsigned b0 = fz_byte(&in), b1 = fz_byte(&in), b2 = fz_byte(&in), b3 = fz_byte(&in);
    mega_s2s_opts o;
    memset(&o, 0, sizeof o);
    o.max_src_len = b0 % 64 ? 1 + (int)(b0 % 64) : 0;
    o.max_tgt_len = b1 % 64 ? 1 + (int)(b1 % 64) : 0;
    o.max_examples = (int)(b2 & 15);
    o.strict = (b2 >> 4) & 1;
    o.what = "--train";
    const int shuffle = (b2 >> 5) & 1, limits = (int)(b2 >> 6) % 3;
    const int max_tokens = limits != 1 ? 1 + (int)b3 * 2 : 0, max_sentences = limits != 0 ? 1 + (int)(b3 % 32) : 0;
    const char *path = fz_write("train.tsv", in.p, in.n);
    mega_s2s_data d;
    mega_status st = mega_s2s_data_load(path, &o, &d);
    if (st != MEGA_OK) {
        FZ_CHECK(d.n == 0 && d.pool == NULL && d.off == NULL);
        FZ_CHECK(mega_last_error()[0] != 0);
        mega_s2s_data_free(&d);
        return 0;
    }
    FZ_CHECK(d.n >= 1);
    if (o.max_examples) FZ_CHECK(d.n <= o.max_examples);
    int64_t ns = 0, nt = 0;
    for (int i = 0; i < d.n; i++) {
        FZ_CHECK(d.src_len[i] >= 2 && d.tgt_len[i] >= 2 && d.src_len[i] <= d.src_max && d.tgt_len[i] <= d.tgt_max);
        if (o.max_src_len) FZ_CHECK(d.src_len[i] <= o.max_src_len);
        if (o.max_tgt_len) FZ_CHECK(d.tgt_len[i] <= o.max_tgt_len);
        FZ_CHECK(d.off[i] + (size_t)d.src_len[i] + (size_t)d.tgt_len[i] <= d.pool_n);
        FZ_CHECK(mega_s2s_data_src(&d, i)[d.src_len[i] - 1] == MEGA_S2S_EOS);
        FZ_CHECK(mega_s2s_data_tgt(&d, i)[d.tgt_len[i] - 1] == MEGA_S2S_EOS);
        for (int side = 0; side < 2; side++) { /* valid UTF-8 without TAB or newline */
            const uint16_t *t = side ? mega_s2s_data_tgt(&d, i) : mega_s2s_data_src(&d, i);
            const int len = (side ? d.tgt_len[i] : d.src_len[i]) - 1;
            uint8_t *bytes = malloc((size_t)len);
            FZ_CHECK(bytes);
            for (int k = 0; k < len; k++) {
                FZ_CHECK(t[k] < 256 && t[k] != '\t' && t[k] != '\n');
                bytes[k] = (uint8_t)t[k];
            }
            FZ_CHECK(mega_utf8_check(bytes, (size_t)len) == (size_t)len);
            free(bytes);
        }
        ns += d.src_len[i], nt += d.tgt_len[i];
    }
    FZ_CHECK(ns == d.n_src_tokens && nt == d.n_tgt_tokens);
    int skipped = 0;
    for (int r = 0; r < MEGA_S2S_BAD_N; r++) skipped += d.n_bad[r];
    FZ_CHECK(skipped == d.n_skipped);
    if (o.strict) FZ_CHECK(skipped == 0);
    char sum[512];
    FZ_CHECK(mega_s2s_skip_summary(&d, sum, sizeof sum) == d.n_skipped);
    mega_s2s_plan p;
    FZ_CHECK(mega_s2s_batches(&d, max_tokens, max_sentences, b3, (int64_t)b0, shuffle, &p) == MEGA_OK);
    check_plan(&d, &p, max_tokens, max_sentences);
    mega_s2s_plan_free(&p);
    mega_s2s_data_free(&d);
    return 0;
}
