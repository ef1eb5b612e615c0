/*
 * The sampler (mega_sampler_*, src/model/sample.c): what `mega generate` draws with.
 *  - known answers: 16 draws for each of six parameter sets on logits with many ties, as the
 *    sampler `mega generate` had before it moved into the library drew them (so generated text
 *    stays byte-identical for a model, prompt and seed);
 *  - greedy = the first index of the largest logit; top_k 1 and a tiny top_p are greedy too;
 *    the excluded token is never drawn; top_k and top_p cut exactly the tokens they should;
 *  - frequencies follow softmax(logits / temperature) (20000 draws, within 0.015);
 *  - the same seed gives the same draws, mega_sampler_reset restarts them, another seed differs;
 *  - a large vocabulary (2^18) samples quickly (no quadratic sort);
 *  - 3000 draws on logits with ties, +0 and -0, -inf: the tokens of the algorithm written plainly;
 *  - bad arguments and non-finite logits fail with a one-line message.
 */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
/* logits in [-4, 4) in steps of 1/250: ties among 257 tokens */
static void make_logits(mega_real *lg, int V, uint64_t seed) {
    uint64_t s = seed;
    for (int v = 0; v < V; v++) lg[v] = (mega_real)((double)(lcg(&s) % 2000) / 250.0 - 4.0);
}

static int one_line(const char *msg) { return msg[0] && !strchr(msg, '\n'); }

/* the documented algorithm written plainly (sample.c's header): candidates sorted by qsort on
 * (larger logit, then smaller index), softmax of the k best, the top_p prefix, the draw; the
 * library sorts otherwise (a radix sort on float keys) and must draw the same tokens */
static const mega_real *ref_lg;
static int ref_cmp(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (ref_lg[x] != ref_lg[y]) return ref_lg[x] > ref_lg[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}
static int ref_next(const mega_real *lg, int V, const mega_sample_params *p, uint64_t *rng, int exclude, int *idx, double *prob) {
    int n = 0;
    for (int v = 0; v < V; v++)
        if (v != exclude) idx[n++] = v;
    ref_lg = lg;
    qsort(idx, (size_t)n, sizeof *idx, ref_cmp);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    double mx = lg[idx[0]], sum = 0;
    for (int i = 0; i < n; i++) sum += (prob[i] = exp(((double)lg[idx[i]] - mx) / p->temperature));
    for (int i = 0; i < n; i++) prob[i] /= sum;
    if (p->top_p < 1) {
        double c = 0;
        int k = 0;
        while (k < n && c < p->top_p) c += prob[k++];
        n = k;
        for (int i = 0; i < n; i++) prob[i] /= c;
    }
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull); /* splitmix64 (core/rng.h), u = top 53 bits */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull, z ^= z >> 31;
    const double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
    double c = 0;
    for (int i = 0; i < n; i++)
        if (u < (c += prob[i])) return idx[i];
    return idx[n - 1];
}

/* 3000 draws on logits with many ties, +0 and -0 among them, -inf, negative and positive values:
 * the library's tokens are the plain algorithm's */
static void same_as_plain(void) {
    enum { V = 300 };
    static const mega_sample_params P[4] = {{0.8, 0, 0.95, 5}, {1.0, 0, 1, 6}, {0.7, 9, 0.9, 7}, {3.0, 0, 0.99, 8}};
    mega_real lg[V];
    int idx[V], differ = 0, draws = 0;
    double prob[V];
    for (int c = 0; c < 4; c++) {
        mega_sampler *s;
        if (mega_sampler_new(V, &P[c], &s) != MEGA_OK) {
            TL_CHECK(0, "same as plain %d: %s", c, mega_last_error());
            continue;
        }
        uint64_t rng = P[c].seed * 0xD1B54A32D192ED03ull + 11, g = 77 + (uint64_t)c;
        for (int t = 0; t < 750; t++, draws++) {
            for (int v = 0; v < V; v++) {
                const uint64_t r = lcg(&g) % 1000;
                lg[v] = r < 30 ? (mega_real)0.0 : r < 60 ? (mega_real)-0.0 : r < 70 ? (mega_real)-INFINITY
                                                                    : (mega_real)((double)(r % 64) / 16.0 - 2.0);
            }
            const int ex = t % 7 ? (int)(t % V) : -1;
            differ += mega_sampler_next(s, lg, ex) != ref_next(lg, V, &P[c], &rng, ex, idx, prob);
        }
        mega_sampler_free(s);
    }
    TL_CHECK(differ == 0, "%d draws with ties, +-0 and -inf: the plain algorithm's tokens (%d differ)", draws, differ);
}

static void known_answers(void) {
    static const mega_sample_params P[6] = {{0.8, 0, 0.95, 0}, {1.0, 0, 1, 7},        {0.5, 5, 0.9, 42},
                                            {2.0, 0, 0.5, 123456789}, {1.3, 40, 1, 99}, {0, 0, 1, 3}};
    static const int want[6][16] = {
        {65, 47, 162, 91, 74, 101, 98, 140, 242, 96, 37, 127, 208, 20, 144, 216},
        {86, 71, 185, 111, 44, 180, 45, 102, 144, 208, 10, 45, 183, 171, 122, 183},
        {73, 77, 63, 110, 59, 180, 61, 114, 155, 31, 245, 130, 180, 196, 255, 253},
        {96, 61, 193, 111, 150, 180, 188, 8, 111, 50, 197, 224, 204, 141, 131, 250},
        {238, 48, 110, 32, 167, 28, 97, 158, 116, 217, 197, 224, 179, 73, 183, 94},
        {219, 217, 240, 200, 42, 230, 242, 162, 155, 217, 245, 90, 180, 88, 132, 186},
    };
    mega_real lg[257];
    for (int c = 0; c < 6; c++) {
        mega_sampler *s;
        if (mega_sampler_new(257, &P[c], &s) != MEGA_OK) {
            TL_CHECK(0, "known answers %d: %s", c, mega_last_error());
            continue;
        }
        int got[16], same = 1;
        for (int i = 0; i < 16; i++) {
            make_logits(lg, 257, 1000 + (uint64_t)i);
            got[i] = mega_sampler_next(s, lg, 256);
            same &= got[i] == want[c][i];
        }
        TL_CHECK(same, "known answers: temperature %g, top_k %d, top_p %g, seed %llu (first: %d, want %d)", P[c].temperature,
                 P[c].top_k, P[c].top_p, (unsigned long long)P[c].seed, got[0], want[c][0]);
        mega_sampler_free(s);
    }
}

/* n draws with parameters p; counts[V] */
static int draw(const mega_real *lg, int V, const mega_sample_params *p, int exclude, int n, int *counts) {
    mega_sampler *s;
    if (mega_sampler_new(V, p, &s) != MEGA_OK) return -1;
    memset(counts, 0, (size_t)V * sizeof *counts);
    for (int i = 0; i < n; i++) {
        int t = mega_sampler_next(s, lg, exclude);
        if (t < 0 || t >= V) {
            mega_sampler_free(s);
            return -1;
        }
        counts[t]++;
    }
    mega_sampler_free(s);
    return 0;
}

static void selection(void) {
    enum { V = 6, N = 20000 };
    /* token 5 is the excluded one with the largest logit; 1 and 3 tie for the best of the rest */
    const double p3[V] = {0.1, 0.3, 0.2, 0.3, 0.1, 0};
    mega_real lg[V];
    for (int v = 0; v < V; v++) lg[v] = (mega_real)(v == 5 ? 9.0 : log(p3[v]));
    int cnt[V];
    mega_sample_params p = {0, 0, 1, 1};
    TL_CHECK(!draw(lg, V, &p, 5, 50, cnt) && cnt[1] == 50, "greedy: the first of the tied best tokens, never the excluded one");
    TL_CHECK(!draw(lg, V, &p, -1, 50, cnt) && cnt[5] == 50, "greedy with nothing excluded: the largest logit");
    p = (mega_sample_params){1.5, 1, 1, 2};
    TL_CHECK(!draw(lg, V, &p, 5, 200, cnt) && cnt[1] == 200, "top_k 1 is greedy");
    p = (mega_sample_params){1.5, 0, 1e-9, 2};
    TL_CHECK(!draw(lg, V, &p, 5, 200, cnt) && cnt[1] == 200, "a tiny top_p is greedy");
    /* temperature 1: the softmax of the logits is p3 */
    p = (mega_sample_params){1, 0, 1, 3};
    int ok = !draw(lg, V, &p, 5, N, cnt) && cnt[5] == 0;
    double worst = 0;
    for (int v = 0; v < 5 && ok; v++) worst = fmax(worst, fabs((double)cnt[v] / N - p3[v]));
    TL_CHECK(ok && worst < 0.015, "temperature 1: frequencies follow the softmax (worst deviation %.4f)", worst);
    /* temperature 0.5: p^2 normalised */
    p = (mega_sample_params){0.5, 0, 1, 4};
    double z = 0;
    for (int v = 0; v < 5; v++) z += p3[v] * p3[v];
    ok = !draw(lg, V, &p, 5, N, cnt);
    worst = 0;
    for (int v = 0; v < 5 && ok; v++) worst = fmax(worst, fabs((double)cnt[v] / N - p3[v] * p3[v] / z));
    TL_CHECK(ok && worst < 0.015, "temperature 0.5: frequencies follow softmax(logits / 0.5) (worst deviation %.4f)", worst);
    /* top_k 3: tokens 1, 3 (0.3 each) and 2 (0.2), renormalised */
    p = (mega_sample_params){1, 3, 1, 5};
    ok = !draw(lg, V, &p, 5, N, cnt) && cnt[0] == 0 && cnt[4] == 0 && cnt[5] == 0;
    TL_CHECK(ok && fabs(cnt[2] / (double)N - 0.25) < 0.015, "top_k 3: only the three best, renormalised (token 2: %.4f)",
             cnt[2] / (double)N);
    /* top_p 0.7: 0.3 + 0.3 < 0.7, + 0.2 reaches it: tokens 1, 3, 2 */
    p = (mega_sample_params){1, 0, 0.7, 6};
    ok = !draw(lg, V, &p, 5, N, cnt) && cnt[0] == 0 && cnt[4] == 0 && cnt[5] == 0 && cnt[2] > 0;
    TL_CHECK(ok, "top_p 0.7: the shortest prefix reaching 0.7 (tokens 1, 3, 2)");
    p = (mega_sample_params){1, 0, 0.6, 6};
    ok = !draw(lg, V, &p, 5, N, cnt) && cnt[1] > 0 && cnt[3] > 0 && cnt[1] + cnt[3] == N;
    TL_CHECK(ok, "top_p 0.6: exactly the two tokens whose mass reaches it");
}

static void streams(void) {
    enum { V = 257, N = 64 };
    mega_real lg[V];
    make_logits(lg, V, 5);
    mega_sample_params p;
    mega_sample_params_default(&p);
    TL_CHECK(p.temperature == 0.8 && p.top_k == 0 && p.top_p == 0.95 && p.seed == 0, "defaults are those of mega generate");
    p.seed = 17;
    mega_sampler *a, *b, *c;
    if (mega_sampler_new(V, &p, &a) || mega_sampler_new(V, &p, &b) || mega_sampler_new(V, NULL, &c)) {
        TL_CHECK(0, "streams: %s", mega_last_error());
        return;
    }
    int ta[N], same = 1, differ = 0, again = 1;
    for (int i = 0; i < N; i++) {
        ta[i] = mega_sampler_next(a, lg, 256);
        same &= ta[i] == mega_sampler_next(b, lg, 256);
        differ |= ta[i] != mega_sampler_next(c, lg, 256); /* seed 0 */
    }
    mega_sampler_reset(a, 17);
    for (int i = 0; i < N; i++) again &= ta[i] == mega_sampler_next(a, lg, 256);
    TL_CHECK(same, "the same seed gives the same draws");
    TL_CHECK(again, "mega_sampler_reset restarts the draws");
    TL_CHECK(differ, "another seed gives other draws");
    mega_sampler_free(a), mega_sampler_free(b), mega_sampler_free(c);
}

static void large_vocab(void) {
    const int V = 1 << 18;
    mega_real *lg = malloc((size_t)V * sizeof *lg);
    mega_sampler *s = NULL;
    mega_sample_params p = {1, 0, 0.9, 1};
    int ok = lg && mega_sampler_new(V, &p, &s) == MEGA_OK;
    if (ok) make_logits(lg, V, 9);
    for (int i = 0; i < 5 && ok; i++) ok = mega_sampler_next(s, lg, 0) > 0;
    TL_CHECK(ok, "a vocabulary of 2^18: five draws (merge sort, not quadratic): %s", ok ? "" : mega_last_error());
    mega_sampler_free(s);
    free(lg);
}

static void errors(void) {
    mega_sampler *s = NULL;
    mega_sample_params p = {0.8, 0, 0.95, 0};
    TL_CHECK(mega_sampler_new(0, &p, &s) == MEGA_ERR_INVALID && !s && one_line(mega_last_error()), "vocabulary 0: %s",
             mega_last_error());
    p.temperature = -1;
    TL_CHECK(mega_sampler_new(10, &p, &s) == MEGA_ERR_INVALID && one_line(mega_last_error()), "temperature -1: %s",
             mega_last_error());
    p.temperature = NAN;
    TL_CHECK(mega_sampler_new(10, &p, &s) == MEGA_ERR_INVALID, "temperature NaN: %s", mega_last_error());
    p.temperature = 1, p.top_p = 1.5;
    TL_CHECK(mega_sampler_new(10, &p, &s) == MEGA_ERR_INVALID && one_line(mega_last_error()), "top_p 1.5: %s", mega_last_error());
    p.top_p = 1, p.top_k = -2;
    TL_CHECK(mega_sampler_new(10, &p, &s) == MEGA_ERR_INVALID && one_line(mega_last_error()), "top_k -2: %s", mega_last_error());
    p.top_k = 0;
    mega_real lg[3] = {0, 1, 2};
    if (mega_sampler_new(1, &p, &s) == MEGA_OK) {
        TL_CHECK(mega_sampler_next(s, lg, 0) == MEGA_ERR_INVALID && one_line(mega_last_error()), "the only token excluded: %s",
                 mega_last_error());
        mega_sampler_free(s);
    }
    if (mega_sampler_new(3, &p, &s) == MEGA_OK) {
        lg[1] = NAN;
        TL_CHECK(mega_sampler_next(s, lg, -1) == MEGA_ERR_NUMERIC && one_line(mega_last_error()), "a NaN logit: %s",
                 mega_last_error());
        lg[1] = INFINITY;
        TL_CHECK(mega_sampler_next(s, lg, -1) == MEGA_ERR_NUMERIC, "an infinite logit: %s", mega_last_error());
        lg[1] = -INFINITY;
        int never = 1;
        for (int i = 0; i < 50; i++) {
            const int t = mega_sampler_next(s, lg, -1);
            never &= t == 0 || t == 2;
        }
        TL_CHECK(never, "-inf logits are allowed (and never drawn)");
        TL_CHECK(mega_sampler_next(s, NULL, -1) == MEGA_ERR_INVALID, "NULL logits: %s", mega_last_error());
        mega_sampler_free(s);
    }
    mega_sampler_free(NULL);
}

int main(void) {
    known_answers();
    same_as_plain();
    selection();
    streams();
    large_vocab();
    errors();
    return tl_finish();
}
