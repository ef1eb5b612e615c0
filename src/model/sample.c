/*
 * Sampling the next token from a row of logits (public API in mega.h; `mega generate` uses it):
 * temperature, top-k, top-p (nucleus), one excluded token (the padding index).
 *
 *   greedy (temperature 0): the first index of the largest logit;
 *   otherwise: the candidates sorted by logit, descending (ties by index), cut to the k best,
 *   p_i = exp((l_i - l_max) / temperature) normalised, cut to the shortest prefix whose mass
 *   reaches top_p (in (0, 1]; 1 = no cut; a tiny top_p keeps the best candidate only) and
 *   renormalised; then u ~ U[0,1) from the seed's splitmix64 stream picks the
 *   first candidate whose cumulative probability exceeds u.
 *
 * The random stream and every floating-point step are those of the sampler `mega generate` had
 * before it moved here, so its output for a model, prompt and seed is unchanged. Everything is
 * allocated by mega_sampler_new: a token costs no allocation. With float logits the candidates
 * are sorted by a radix sort on keys that order as the merge sort's comparison does (the same
 * order, ties included): the merge sort's data-dependent branches made it most of a token's
 * sampling time, itself a sixth of a served token's time at 16 rows (perf, docs/serving.md).
 */
#include "core/internal.h"
#include "core/rng.h"

struct mega_sampler {
    int V;
    mega_sample_params p;
    mega_rng rng;
    int *idx, *tmp; /* candidates, and the sort's buffer */
    uint32_t *key;  /* the radix sort's keys, 2 V (float logits) */
    double *prob;
};

void mega_sample_params_default(mega_sample_params *p) {
    p->temperature = 0.8;
    p->top_k = 0;
    p->top_p = 0.95;
    p->seed = 0;
}

static mega_status check_params(const mega_sample_params *p) {
    if (!p) MEGA_FAIL(MEGA_ERR_INVALID, "sampler: parameters are NULL");
    if (!(p->temperature >= 0 && p->temperature <= 1e6))
        MEGA_FAIL(MEGA_ERR_INVALID, "sampler: temperature must be in [0, 1e6] (got %g)", p->temperature);
    if (p->top_k < 0) MEGA_FAIL(MEGA_ERR_INVALID, "sampler: top_k must be >= 0 (got %d)", p->top_k);
    /* (0, 1]: 1 keeps every candidate; a mass of 0 would keep none (greedy is temperature 0) */
    if (!(p->top_p > 0 && p->top_p <= 1))
        MEGA_FAIL(MEGA_ERR_INVALID, "sampler: top_p must be in (0, 1] (got %g; 1 = off, greedy is temperature 0)", p->top_p);
    return MEGA_OK;
}

mega_status mega_sampler_new(int vocab, const mega_sample_params *p, mega_sampler **out) {
    if (!out) MEGA_FAIL(MEGA_ERR_INVALID, "mega_sampler_new: out is NULL");
    *out = NULL;
    if (vocab < 1 || vocab > 1 << 24) MEGA_FAIL(MEGA_ERR_INVALID, "sampler: vocabulary size must be in [1, 2^24] (got %d)", vocab);
    mega_sample_params d;
    if (!p) mega_sample_params_default(&d), p = &d;
    MEGA_TRY(check_params(p));
    mega_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->idx = malloc((size_t)vocab * sizeof(int));
        s->tmp = malloc((size_t)vocab * sizeof(int));
        s->prob = malloc((size_t)vocab * sizeof(double));
        s->key = malloc(2 * (size_t)vocab * sizeof(uint32_t));
    }
    if (!s || !s->idx || !s->tmp || !s->prob || !s->key) {
        mega_sampler_free(s);
        MEGA_FAIL(MEGA_ERR_OOM, "sampler: out of memory for a vocabulary of %d", vocab);
    }
    s->V = vocab;
    s->p = *p;
    mega_sampler_reset(s, p->seed);
    *out = s;
    return MEGA_OK;
}

void mega_sampler_free(mega_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->tmp);
    free(s->prob);
    free(s->key);
    free(s);
}

void mega_sampler_reset(mega_sampler *s, uint64_t seed) {
    s->p.seed = seed;
    s->rng.s = seed * 0xD1B54A32D192ED03ull + 11;
}

#ifdef MEGA_F64
/* a precedes b: larger logit, or the same logit and a smaller index (the order a stable sort by
 * descending logit gives from ascending indexes) */
static inline int before(const mega_real *lg, int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); }

/* sort idx[0..n) by `before`: bottom-up merge sort, O(n log n), into idx (tmp: n ints) */
static void sort_candidates(const mega_real *lg, int *idx, int *tmp, int n) {
    int *src = idx, *dst = tmp;
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            const int mid = MEGA_MIN(lo + w, n), hi = MEGA_MIN(lo + 2 * w, n);
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = before(lg, src[j], src[i]) ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        int *t = src;
        src = dst, dst = t;
    }
    if (src != idx) memcpy(idx, src, (size_t)n * sizeof(int));
}
#else
/* float logits in sort_candidates' order (f64 builds): a key per candidate that ascends as
 * `before` does (a larger logit first; -0 as +0, which == says they are; NaN never comes here),
 * then a stable LSD radix sort over the key's 4 bytes from the ascending indexes, so equal logits
 * keep the smaller index first. A byte that all keys share is skipped. */
static void radix_candidates(const float *lg, int *idx, int *tmp, uint32_t *key, int n) {
    uint32_t *ks = key, *kd = key + n;
    for (int i = 0; i < n; i++) {
        float x = lg[idx[i]];
        uint32_t b;
        if (x == 0) x = 0;
        memcpy(&b, &x, sizeof b);
        ks[i] = b & 0x80000000u ? b : ~b & 0x7fffffffu; /* negatives: larger magnitude later */
    }
    int *src = idx, *dst = tmp;
    for (int sh = 0; sh < 32 && n > 1; sh += 8) {
        int cnt[257] = {0};
        for (int i = 0; i < n; i++) cnt[((ks[i] >> sh) & 255) + 1]++;
        if (cnt[((ks[0] >> sh) & 255) + 1] == n) continue;
        for (int d = 0; d < 256; d++) cnt[d + 1] += cnt[d];
        for (int i = 0; i < n; i++) {
            const int p = cnt[(ks[i] >> sh) & 255]++;
            kd[p] = ks[i], dst[p] = src[i];
        }
        uint32_t *tk = ks;
        ks = kd, kd = tk;
        int *t = src;
        src = dst, dst = t;
    }
    if (src != idx) memcpy(idx, src, (size_t)n * sizeof(int));
}
#endif

int mega_sampler_next(mega_sampler *s, const mega_real *lg, int exclude) {
    if (!s || !lg) MEGA_FAIL(MEGA_ERR_INVALID, "mega_sampler_next: NULL sampler or logits");
    const int V = s->V;
    int best = -1, nan = 0;
    for (int v = 0; v < V; v++) {
        nan |= lg[v] != lg[v];
        if (v != exclude && (best < 0 || lg[v] > lg[best])) best = v;
    }
    if (best < 0) MEGA_FAIL(MEGA_ERR_INVALID, "sampler: no token to choose (the only token, %d, is excluded)", exclude);
    if (nan || !isfinite((double)lg[best])) MEGA_FAIL(MEGA_ERR_NUMERIC, "sampler: the logits are not finite (NaN or infinite)");
    const double temp = s->p.temperature, topp = s->p.top_p;
    if (temp <= 0) return best;
    int *idx = s->idx;
    double *prob = s->prob;
    int n = 0;
    for (int v = 0; v < V; v++)
        if (v != exclude) idx[n++] = v;
#ifdef MEGA_F64
    sort_candidates(lg, idx, s->tmp, n);
#else
    radix_candidates(lg, idx, s->tmp, s->key, n);
#endif
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    double mx = lg[idx[0]], sum = 0;
    for (int i = 0; i < n; i++) sum += (prob[i] = exp(((double)lg[idx[i]] - mx) / temp));
    for (int i = 0; i < n; i++) prob[i] /= sum;
    if (topp < 1) {
        double c = 0;
        int k = 0;
        while (k < n && c < topp) c += prob[k++];
        n = k;
        for (int i = 0; i < n; i++) prob[i] /= c;
    }
    double u = mega_rng_u01(&s->rng), c = 0;
    for (int i = 0; i < n; i++) {
        c += prob[i];
        if (u < c) return idx[i];
    }
    return idx[n - 1];
}
