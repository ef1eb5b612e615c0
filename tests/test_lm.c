/*
 * The causal language model through the public API (mega.h):
 *   (1) greedy streaming generation == argmax of the full forward, token by token: for small
 *       random LMs (chunked with the chunk smaller than the generated length, so cache resets are
 *       crossed; full attention; softmax / relu2 / laplace; simple / rotary; pre / post norm;
 *       tied / untied; layernorm / rmsnorm / scalenorm / batchnorm with running statistics), a
 *       prompt is fed to mega_lm_stream_feed in one multi-token call and, separately, in pieces;
 *       then N tokens are generated greedily. At every step the full forward (mega_lm_forward,
 *       training = 0) over prompt + generated-so-far must give the same argmax at the last
 *       position and the same logits (1e-4 of max |logit| in float, 1e-10 in double). The full
 *       forward treats a length that is not a multiple of the chunk as a shorter last chunk.
 *   (2) mega_lm_save / mega_lm_load: bit-identical logits after a round trip; a save into a
 *       missing directory fails with MEGA_ERR_IO and leaves nothing; every prefix of a model file
 *       (step of a few hundred bytes) fails cleanly with a message; byte flips in the JSON header
 *       fail cleanly or load a usable model; a config that does not match the tensors fails with a
 *       clear message; mega_lm_config_from_json rejects bad values.
 *   (3) training through the API: two identical runs of 5 AdamW steps with dropout and a fixed
 *       key (one thread) give bit-identical parameters (and a different dropout key does not);
 *       the loss on a repetitive byte sequence falls clearly within 30 steps.
 *   (4) the AdamW moments of a training state (mega_adamw_save_moments / _load_moments): a
 *       bit-identical round trip; a NaN, a negative second moment, another shape or dtype, a
 *       missing moment are refused naming the tensor.
 *   (5) adaptive input / adaptive softmax (layers/adaptive.h), on five band layouts (untied,
 *       tied, tied with the projections, softmax only, input only): the logits are
 *       log-probabilities (every row's log-sum-exp is 0), the loss is -mean log p(target),
 *       streaming equals the full forward, a save/load round trip is exact, the tied names are
 *       stored once; in double, every gradient against finite differences (training mode with
 *       both dropouts, padded inputs, ignored targets); bad cutoffs are refused.
 * build/t64_lm is this file built against the double-precision library (Makefile T64_FROM).
 */
#include "fd.h"
#include "testlib.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef MEGA_F64
#define GEN_TOL 1e-10
#else
#define GEN_TOL 1e-4
#endif

typedef mega_real rl;
static char g_dir[256];
static double g_worst_gen;

/* ---- helpers --------------------------------------------------------------------------- */

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }


static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

/* move every parameter away from its initial value (norm weights 1, biases 0, small rel-pos
 * tables); batchnorm running statistics become non-trivial */
static void perturb(mega_lm *m, unsigned long long *seed) {
    rl *W = mega_lm_params(m);
    for (int i = 0; i < mega_lm_tensor_count(m); i++) {
        size_t off, n;
        unsigned fl;
        const char *nm = mega_lm_tensor_info(m, i, &off, &n, &fl);
        rl *w = W + off;
        if (fl & 2) {
            if (ends_with(nm, "running_mean"))
                for (size_t j = 0; j < n; j++) w[j] = (rl)(0.2 * tl_randn(seed));
            else if (ends_with(nm, "running_var"))
                for (size_t j = 0; j < n; j++) w[j] = (rl)(0.5 + tl_rand01(seed));
            continue;
        }
        double sd = strstr(nm, "rel_pos_bias") || ends_with(nm, "mega_layer.gamma") ? 0.3 : 0.1;
        for (size_t j = 0; j < n; j++) w[j] += (rl)(sd * tl_randn(seed));
    }
}

static double rel_diff(const rl *a, const rl *b, size_t n) {
    double d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
        mx = fmax(mx, fabs((double)b[i]));
    }
    return mx > 0 ? d / mx : d;
}

static int argmax_nopad(const rl *l, int V, int pad) {
    int best = -1;
    for (int v = 0; v < V; v++)
        if (v != pad && (best < 0 || l[v] > l[best])) best = v;
    return best;
}

static void small_config(mega_lm_config *c) {
    mega_lm_config_default(c);
    c->vocab_size = 37, c->padding_idx = 36;
    c->layers = 2, c->block.embed_dim = 16, c->block.z_dim = 8, c->block.hidden_dim = 24, c->block.n_dim = 4, c->block.ffn_dim = 20;
    c->block.chunk_size = 4, c->block.max_positions = 64;
}

/* ---- (1) greedy streaming generation vs the full forward -------------------------------- */

typedef struct {
    const char *name;
    int V, pad, chunk, attn, rotary, norm, prenorm, tied, act, F, scale_emb, final_affine;
    int B, P, N;
    int no_ema; /* n-dim 0: Mega without the EMA */
} gen_case;

/* full eval-mode forward over seq[:, :len] (row stride `stride`); logits of the last position
 * of every row into out [B, V] */
static mega_status full_last(mega_lm *m, const int32_t *seq, int B, int stride, int len, rl *out, int32_t *buf) {
    const int V = mega_lm_get_config(m)->vocab_size;
    for (int b = 0; b < B; b++) memcpy(buf + (size_t)b * len, seq + (size_t)b * stride, (size_t)len * sizeof(int32_t));
    mega_lm_run run = {0, 0};
    mega_status st = mega_lm_forward(m, buf, NULL, B, len, &run, NULL, NULL);
    if (st) return st;
    const rl *lg = mega_lm_logits(m);
    for (int b = 0; b < B; b++) memcpy(out + (size_t)b * V, lg + ((size_t)b * len + len - 1) * V, (size_t)V * sizeof(rl));
    return MEGA_OK;
}

static void gen_run(const gen_case *g, unsigned long long seed) {
    mega_lm_config c;
    small_config(&c);
    c.vocab_size = g->V, c.padding_idx = g->pad, c.block.chunk_size = g->chunk;
    c.block.attention_activation = (mega_attn_fn)g->attn, c.block.rel_pos_bias = (mega_relpos_kind)g->rotary, c.block.norm_type = (mega_norm_type)g->norm;
    c.block.prenorm = g->prenorm, c.tie_embeddings = g->tied, c.block.activation = (mega_act)g->act, c.block.ffn_dim = g->F;
    c.scale_embedding = g->scale_emb, c.final_norm_affine = g->final_affine;
    if (g->no_ema) c.block.n_dim = 0;
    mega_lm *m = NULL;
    mega_status st = mega_lm_create(&c, &m);
    TL_CHECK(st == MEGA_OK, "%s: create (%s)", g->name, mega_last_error());
    if (st) return;
    mega_lm_init_params(m, seed);
    unsigned long long ps = seed * 7919u + 3;
    perturb(m, &ps);
    const int B = g->B, P = g->P, N = g->N, V = g->V, total = P + N;
    int32_t *seq = calloc((size_t)B * total, sizeof(int32_t)), *buf = calloc((size_t)B * total, sizeof(int32_t));
    int32_t *piece = calloc((size_t)B * total, sizeof(int32_t)), *tok = calloc((size_t)B, sizeof(int32_t));
    int32_t *gen0 = calloc((size_t)B * total, sizeof(int32_t));
    rl *sl = calloc((size_t)B * total * V, sizeof(rl)), *cur = calloc((size_t)B * V, sizeof(rl));
    rl *full = calloc((size_t)B * V, sizeof(rl)), *fullp = calloc((size_t)B * P * V, sizeof(rl));
    unsigned long long ts = seed * 31u + 17;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < P; t++) {
            int32_t k;
            do k = (int32_t)(tl_rand01(&ts) * V);
            while (k >= V || k == g->pad);
            seq[(size_t)b * total + t] = k;
        }
    /* reference logits of the whole prompt */
    for (int b = 0; b < B; b++) memcpy(buf + (size_t)b * P, seq + (size_t)b * total, (size_t)P * sizeof(int32_t));
    mega_lm_run run0 = {0, 0};
    st = mega_lm_forward(m, buf, NULL, B, P, &run0, NULL, NULL);
    TL_CHECK(st == MEGA_OK, "%s: full forward of the prompt (%s)", g->name, mega_last_error());
    if (!st) memcpy(fullp, mega_lm_logits(m), (size_t)B * P * V * sizeof(rl));

    mega_lm_stream *s = NULL;
    st = mega_lm_stream_new(m, B, total, &s);
    TL_CHECK(st == MEGA_OK, "%s: stream_new (%s)", g->name, mega_last_error());
    static const int pieces[] = {1, 3, 2, 5, 1, 4, 7, 0};
    for (int mode = 0; mode < 2 && s; mode++) {
        const char *mn = mode ? "prompt in pieces" : "prompt in one call";
        mega_lm_stream_reset(s);
        /* feed the prompt */
        st = MEGA_OK;
        if (mode == 0) {
            for (int b = 0; b < B; b++) memcpy(piece + (size_t)b * P, seq + (size_t)b * total, (size_t)P * sizeof(int32_t));
            st = mega_lm_stream_feed(s, piece, P, sl);
        } else {
            int a = 0, k = 0;
            while (a < P && !st) {
                int n = pieces[k] ? pieces[k++] : 1;
                if (n > P - a) n = P - a;
                for (int b = 0; b < B; b++)
                    memcpy(piece + (size_t)b * n, seq + (size_t)b * total + a, (size_t)n * sizeof(int32_t));
                rl *tmp = calloc((size_t)B * n * V, sizeof(rl));
                st = mega_lm_stream_feed(s, piece, n, tmp);
                for (int b = 0; b < B; b++)
                    memcpy(sl + ((size_t)b * P + a) * V, tmp + (size_t)b * n * V, (size_t)n * V * sizeof(rl));
                free(tmp);
                a += n;
            }
        }
        TL_CHECK(st == MEGA_OK, "%s [%s]: feed the prompt (%s)", g->name, mn, mega_last_error());
        if (st) break;
        double ep = rel_diff(sl, fullp, (size_t)B * P * V);
        g_worst_gen = fmax(g_worst_gen, ep);
        TL_CHECK(ep <= GEN_TOL, "%s [%s]: streamed prompt logits == full forward: rel err %.2e", g->name, mn, ep);
        for (int b = 0; b < B; b++) memcpy(cur + (size_t)b * V, sl + ((size_t)b * P + P - 1) * V, (size_t)V * sizeof(rl));
        /* generate: at every step compare with the full forward over everything so far */
        double worst = 0;
        int bad_arg = 0, bad_step = -1, near_ties = 0;
        for (int i = 0; i <= N && !st; i++) {
            const int len = P + i;
            st = full_last(m, seq, B, total, len, full, buf);
            if (st) break;
            double e = rel_diff(cur, full, (size_t)B * V);
            if (!(e <= worst)) worst = e, bad_step = i;
            for (int b = 0; b < B; b++) {
                int as = argmax_nopad(cur + (size_t)b * V, V, g->pad), af = argmax_nopad(full + (size_t)b * V, V, g->pad);
                if (as != af) {
                    /* a float near-tie (within the logit tolerance) is not a disagreement */
                    double gap = fabs((double)full[(size_t)b * V + af] - (double)full[(size_t)b * V + as]), mx = 0;
                    for (int v = 0; v < V; v++) mx = fmax(mx, fabs((double)full[(size_t)b * V + v]));
                    if (gap <= GEN_TOL * mx) near_ties++;
                    else bad_arg++;
                }
                tok[b] = as;
            }
            if (i == N) break;
            for (int b = 0; b < B; b++) seq[(size_t)b * total + len] = tok[b];
            st = mega_lm_stream_feed(s, tok, 1, cur);
        }
        g_worst_gen = fmax(g_worst_gen, worst);
        TL_CHECK(st == MEGA_OK, "%s [%s]: generation ran (%s)", g->name, mn, mega_last_error());
        TL_CHECK(worst <= GEN_TOL, "%s [%s]: streamed logits == full forward at every step: worst rel err %.2e (step %d)",
                 g->name, mn, worst, bad_step);
        TL_CHECK(bad_arg == 0, "%s [%s]: streamed greedy choice == argmax of the full forward (%d mismatches, %d near ties)",
                 g->name, mn, bad_arg, near_ties);
        TL_CHECK(mega_lm_stream_pos(s) == total, "%s [%s]: stream position %lld == %d", g->name, mn,
                 (long long)mega_lm_stream_pos(s), total);
        /* both prompt modes generate the same continuation (deterministic; near ties excepted) */
        if (mode == 0) memcpy(gen0, seq, (size_t)B * total * sizeof(int32_t));
        else if (!near_ties)
            TL_CHECK(!memcmp(gen0, seq, (size_t)B * total * sizeof(int32_t)), "%s: same continuation in both prompt modes", g->name);
    }
    mega_lm_stream_free(s);
    free(seq), free(buf), free(piece), free(tok), free(gen0), free(sl), free(cur), free(full), free(fullp);
    mega_lm_free(m);
}

static void test_generation(void) {
    enum { SM = MEGA_ATTN_SOFTMAX, R2 = MEGA_ATTN_RELU2, LP = MEGA_ATTN_LAPLACE };
    enum { LN = MEGA_NORM_LAYER, SN = MEGA_NORM_SCALE, RN = MEGA_NORM_RMS, BN = MEGA_NORM_BATCH };
    enum { SILU = MEGA_ACT_SILU, GELU = MEGA_ACT_GELU, RELU = MEGA_ACT_RELU, LIN = MEGA_ACT_LINEAR };
    /* name, V, pad, chunk, attn, rotary, norm, prenorm, tied, act, F, scale_emb, final_affine, B, P, N, no_ema */
    static const gen_case cases[] = {
        {"c4/softmax/simple/pre/untied/LN", 37, 36, 4, SM, 0, LN, 1, 0, SILU, 20, 1, 1, 2, 6, 18, 0},
        {"c5/relu2/rotary/post/tied/RN/gelu", 37, 36, 5, R2, 1, RN, 0, 1, GELU, 20, 1, 1, 1, 7, 20, 0},
        {"c3/laplace/simple/pre/tied/SN/noFFN", 29, 0, 3, LP, 0, SN, 1, 1, RELU, 0, 1, 0, 2, 5, 16, 0},
        {"full/laplace/simple/pre/tied/SN", 37, 36, -1, LP, 0, SN, 1, 1, SILU, 20, 1, 1, 2, 6, 16, 0},
        {"full/softmax/rotary/post/untied/LN/noscale", 41, -1, -1, SM, 1, LN, 0, 0, SILU, 0, 0, 1, 1, 9, 16, 0},
        /* batchnorm + ragged length: B = 1 (see test_logits_layout for B > 1) */
        {"c6/softmax/rotary/pre/untied/BN(eval)", 37, 36, 6, SM, 1, BN, 1, 0, RELU, 20, 1, 1, 1, 8, 20, 0},
        {"c4/relu2/simple/post/untied/BN(eval)", 37, 36, 4, R2, 0, BN, 0, 0, SILU, 16, 1, 1, 1, 3, 14, 0},
        {"c4/softmax/simple/pre/untied/BN(eval)/B2/aligned", 37, 36, 4, SM, 0, BN, 1, 0, SILU, 16, 1, 1, 2, 8, 0, 0},
        {"c8/softmax/simple/post/tied/RN/linear/nopad", 23, -1, 8, SM, 0, RN, 0, 1, LIN, 20, 1, 1, 2, 11, 21, 0},
        {"c4/laplace/rotary/pre/untied/RN/noaffine", 257, 256, 4, LP, 1, RN, 1, 0, GELU, 20, 1, 0, 1, 5, 15, 0},
        {"c5/softmax/simple/pre/untied/LN/n-dim 0", 37, 36, 5, SM, 0, LN, 1, 0, SILU, 20, 1, 1, 2, 6, 16, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) gen_run(&cases[i], 1000 + i);
#ifdef MEGA_F64
    const char *self = "t64_lm";
#else
    const char *self = "test_lm";
#endif
    printf("NOTE %s: worst streaming-vs-full logit rel err %.2e (tolerance %.0e)\n", self, g_worst_gen, GEN_TOL);
}

/* mega_lm_logits is documented as [B, T, V]. A batchnorm model pads a ragged batch to a multiple
 * of the chunk internally (official token padding); the rows of sequence b must still start at
 * b*T*V. Checked against a B = 1 forward of the same sequence (eval mode: no batch coupling). */
static void test_logits_layout(void) {
    for (int norm = MEGA_NORM_LAYER; norm <= MEGA_NORM_BATCH; norm += MEGA_NORM_BATCH - MEGA_NORM_LAYER) {
        mega_lm_config c;
        small_config(&c);
        c.block.chunk_size = 6, c.block.norm_type = (mega_norm_type)norm;
        mega_lm *m = NULL;
        if (mega_lm_create(&c, &m) != MEGA_OK) {
            TL_CHECK(0, "layout: create (%s)", mega_last_error());
            return;
        }
        mega_lm_init_params(m, 3);
        unsigned long long ps = 5;
        perturb(m, &ps);
        enum { B = 2, T = 8 };
        const int V = c.vocab_size;
        int32_t tk[B * T];
        for (int i = 0; i < B * T; i++) tk[i] = (i * 5 + 1) % (V - 1);
        rl *two = calloc((size_t)B * T * V, sizeof(rl)), *one = calloc((size_t)T * V, sizeof(rl));
        mega_lm_run run = {0, 0};
        mega_status st = mega_lm_forward(m, tk, NULL, B, T, &run, NULL, NULL);
        if (!st) memcpy(two, mega_lm_logits(m), (size_t)B * T * V * sizeof(rl));
        if (!st) st = mega_lm_forward(m, tk + T, NULL, 1, T, &run, NULL, NULL);
        if (!st) memcpy(one, mega_lm_logits(m), (size_t)T * V * sizeof(rl));
        double e = rel_diff(two + (size_t)T * V, one, (size_t)T * V);
        TL_CHECK(st == MEGA_OK && e <= GEN_TOL,
                 "%s, chunk 6, B = 2, T = 8: mega_lm_logits rows of sequence 1 start at T*V ([B, T, V] as documented): "
                 "rel err %.2e vs a B = 1 forward",
                 mega_norm_name(c.block.norm_type), e);
        free(two), free(one);
        mega_lm_free(m);
    }
}

/* ---- (2) save / load -------------------------------------------------------------------- */

static mega_lm *make_model(unsigned long long seed, int rotary) {
    mega_lm_config c;
    small_config(&c);
    c.block.rel_pos_bias = (mega_relpos_kind)rotary;
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK) {
        TL_CHECK(0, "create (%s)", mega_last_error());
        return NULL;
    }
    mega_lm_init_params(m, seed);
    unsigned long long ps = seed + 99;
    perturb(m, &ps);
    return m;
}

static mega_status logits_of(mega_lm *m, rl *out, int B, int T) {
    const int V = mega_lm_get_config(m)->vocab_size;
    int32_t *tk = malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) tk[i] = (i * 7 + 3) % (V - 1);
    mega_lm_run run = {0, 0};
    mega_status st = mega_lm_forward(m, tk, NULL, B, T, &run, NULL, NULL);
    if (!st) memcpy(out, mega_lm_logits(m), (size_t)B * T * V * sizeof(rl));
    free(tk);
    return st;
}

/* expect a failure with a non-empty message and no model */
static int load_fails(const char *path, mega_status *stp) {
    mega_lm *m = (mega_lm *)1;
    mega_clear_error();
    mega_status st = mega_lm_load(path, &m);
    if (stp) *stp = st;
    int ok = st != MEGA_OK && m == NULL && mega_last_error()[0] != 0;
    if (st == MEGA_OK) mega_lm_free(m);
    return ok;
}

/* save and load, simple and rotary: bit-identical logits, parameters and config; 0 when a model
 * cannot be made */
static int save_load_round_trip(void) {
    char p[1024];
    /* the simple-bias model is saved last: the edits below start from it */
    for (int rot = 1; rot >= 0; rot--) {
        mega_lm *m = make_model(42 + rot, rot);
        if (!m) return 0;
        path_in(p, sizeof p, "model.safetensors");
        mega_status st = mega_lm_save(m, p);
        TL_CHECK(st == MEGA_OK, "save (%s)", mega_last_error());
        mega_lm *m2 = NULL;
        st = mega_lm_load(p, &m2);
        TL_CHECK(st == MEGA_OK && m2, "load (%s)", mega_last_error());
        if (m2) {
            const int B = 2, T = 11, V = mega_lm_get_config(m)->vocab_size;
            rl *a = calloc((size_t)B * T * V, sizeof(rl)), *b = calloc((size_t)B * T * V, sizeof(rl));
            int ok = logits_of(m, a, B, T) == MEGA_OK && logits_of(m2, b, B, T) == MEGA_OK;
            TL_CHECK(ok && !memcmp(a, b, (size_t)B * T * V * sizeof(rl)), "%s: save/load round trip gives bit-identical logits",
                     rot ? "rotary" : "simple");
            TL_CHECK(mega_lm_param_total(m) == mega_lm_param_total(m2) &&
                         !memcmp(mega_lm_params(m), mega_lm_params(m2), mega_lm_param_total(m) * sizeof(rl)),
                     "%s: round trip gives bit-identical parameters", rot ? "rotary" : "simple");
            char *j1 = mega_lm_config_to_json(mega_lm_get_config(m)), *j2 = mega_lm_config_to_json(mega_lm_get_config(m2));
            TL_CHECK(j1 && j2 && !strcmp(j1, j2), "config survives the round trip");
            free(j1), free(j2), free(a), free(b);
            mega_lm_free(m2);
        }
        mega_lm_free(m);
    }
    return 1;
}

/* failed saves leave nothing behind and touch no other file */
static void save_failures(void) {
    char p[1024], q[512];
    /* save into a directory that does not exist: MEGA_ERR_IO, nothing left behind */
    {
        mega_lm *m = make_model(7, 0);
        int before = tl_count_entries(g_dir, NULL);
        path_in(q, sizeof q, "no_such_dir");
        snprintf(p, sizeof p, "%s/model.safetensors", q);
        mega_clear_error();
        mega_status st = mega_lm_save(m, p);
        struct stat sb;
        TL_CHECK(st == MEGA_ERR_IO && mega_last_error()[0], "save into a missing directory fails with MEGA_ERR_IO (%d: %s)",
                 (int)st, mega_last_error());
        TL_CHECK(stat(q, &sb) != 0 && tl_count_entries(g_dir, NULL) == before, "failed save leaves nothing behind");
        /* a failing save over an existing file keeps the old file: the target is a directory */
        path_in(p, sizeof p, "model.safetensors");
        size_t n0, n1;
        unsigned char *old = tl_read_file(p, &n0);
        path_in(q, sizeof q, "adir");
        mkdir(q, 0755);
        st = mega_lm_save(m, q);
        unsigned char *now = tl_read_file(p, &n1);
        TL_CHECK(st != MEGA_OK && old && now && n0 == n1 && !memcmp(old, now, n0),
                 "save onto a directory fails (%s) and touches nothing else", mega_last_error());
        rmdir(q);
        TL_CHECK(tl_count_entries(g_dir, NULL) == before, "no temporary files after the failed saves");
        free(old), free(now);
        mega_lm_free(m);
    }
}

/* truncated files and header byte flips of the saved model fail cleanly (or load a model that
 * runs); 0 when the model file cannot be read */
static int load_cut_and_flipped(void) {
    char p[1024], q[512];
    /* truncated files: every prefix (step of a few hundred bytes, plus the first 64 lengths and
     * the lengths around the end of the header) must fail cleanly */
    path_in(p, sizeof p, "model.safetensors");
    size_t len = 0;
    unsigned char *img = tl_read_file(p, &len);
    TL_CHECK(img && len > 1000, "model file read back (%zu bytes)", len);
    if (!img) return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | img[i];
    path_in(q, sizeof q, "cut.safetensors");
    {
        int tried = 0, bad = 0;
        size_t first_bad = 0;
        for (size_t n = 0; n < len; n += (n < 64 ? 1 : (n + 1 >= 8 + hlen - 3 && n < 8 + hlen + 3) ? 1 : 211)) {
            if (tl_write_file(q, img, n)) continue;
            tried++;
            if (!load_fails(q, NULL)) {
                if (!bad) first_bad = n;
                bad++;
            }
        }
        if (tl_write_file(q, img, len - 1) == 0) {
            tried++;
            if (!load_fails(q, NULL)) bad++, first_bad = len - 1;
        }
        TL_CHECK(bad == 0, "%d truncated files of %zu bytes fail cleanly with a message (%d did not, first at %zu bytes)", tried,
                 len, bad, first_bad);
    }
    /* byte flips in the JSON header: load fails with a message, or loads a model that runs */
    {
        static const unsigned char repl[] = {'"', '}', '{', ',', ':', '0', '9', '-', '.', 'e', ' ', 0, 0xff, '[', ']', '\\'};
        unsigned char *mut = malloc(len);
        int loaded = 0, failed = 0, bad = 0;
        size_t first_bad = 0;
        for (size_t i = 8; i < 8 + hlen; i++) {
            for (int k = 0; k < 2; k++) {
                memcpy(mut, img, len);
                mut[i] = k == 0 ? (unsigned char)(img[i] ^ 0x01) : repl[(i * 7 + (size_t)k) % sizeof repl];
                if (mut[i] == img[i]) continue;
                if (tl_write_file(q, mut, len)) continue;
                mega_lm *m = NULL;
                mega_clear_error();
                mega_status st = mega_lm_load(q, &m);
                if (st == MEGA_OK && m) {
                    rl *lg = calloc((size_t)2 * 5 * mega_lm_get_config(m)->vocab_size, sizeof(rl));
                    if (logits_of(m, lg, 2, 5) == MEGA_OK) loaded++;
                    else bad += !first_bad ? (first_bad = i, 1) : 1;
                    free(lg);
                    mega_lm_free(m);
                } else if (st != MEGA_OK && !m && mega_last_error()[0]) {
                    failed++;
                } else {
                    if (!bad) first_bad = i;
                    bad++;
                }
            }
        }
        TL_CHECK(bad == 0 && failed > 0, "header byte flips: %d rejected with a message, %d loaded and ran, %d bad (first at byte %zu)",
                 failed, loaded, bad, first_bad);
        free(mut);
    }
    free(img);
    return 1;
}

/* configs edited against the tensors fail naming the file and the tensor; 0 when the model file
 * cannot be reopened */
static int load_edited_configs(void) {
    char p[1024], q[512];
    path_in(p, sizeof p, "model.safetensors");
    /* a config that does not match the tensors: rewrite the metadata of a valid file */
    {
        mega_st_file *f = NULL;
        mega_status st = mega_st_open(p, &f);
        TL_CHECK(st == MEGA_OK, "reopen model file (%s)", mega_last_error());
        if (st) return 0;
        const char *cfg = mega_st_meta(f, "config");
        TL_CHECK(cfg && strstr(cfg, "\"embed-dim\":16"), "config metadata holds embed-dim 16: %s", cfg ? cfg : "(none)");
        static const struct {
            const char *from, *to, *expect;
        } edits[] = {
            {"\"embed-dim\":16", "\"embed-dim\":24", "embed_tokens.weight"},
            {"\"layers\":2", "\"layers\":3", "decoder.layers.2"},
            {"\"layers\":2", "\"layers\":1", "decoder.layers.1"},
            {"\"ffn-dim\":20", "\"ffn-dim\":0", "nffn"},
            {"\"prenorm\":true", "\"prenorm\":false", "final_norm"},
            {"\"norm-type\":\"layernorm\"", "\"norm-type\":\"rmsnorm\"", "norm.bias"},
            {"\"n-dim\":4", "\"n-dim\":5", "move."},
            {"\"chunk-size\":4", "\"chunk-size\":6", "rel_pos_bias"},
            {"\"embed-dim\":16", "\"embed-dim\":0", "embed-dim"},
            {"\"attention-activation\":\"softmax\"", "\"attention-activation\":\"tanh\"", "attention-activation"},
        };
        for (size_t e = 0; e < sizeof edits / sizeof *edits && cfg; e++) {
            const char *at = strstr(cfg, edits[e].from);
            if (!at) {
                TL_CHECK(0, "config edit %zu: '%s' not found", e, edits[e].from);
                continue;
            }
            char nc[4096];
            snprintf(nc, sizeof nc, "%.*s%s%s", (int)(at - cfg), cfg, edits[e].to, at + strlen(edits[e].from));
            mega_st_writer *w = mega_st_writer_new();
            st = mega_st_writer_meta(w, "config", nc);
            for (int i = 0; i < mega_st_count(f) && !st; i++) {
                const mega_st_tensor *t = mega_st_at(f, i);
                st = mega_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
            }
            path_in(q, sizeof q, "edited.safetensors");
            if (!st) st = mega_st_writer_write(w, q);
            mega_st_writer_free(w);
            TL_CHECK(st == MEGA_OK, "write the edited file (%s)", mega_last_error());
            mega_status ls;
            int ok = load_fails(q, &ls);
            TL_CHECK(ok && strstr(mega_last_error(), edits[e].expect) && strstr(mega_last_error(), "edited.safetensors"),
                     "config edit %s -> %s: load fails naming the file and '%s': %s", edits[e].from, edits[e].to,
                     edits[e].expect, mega_last_error());
        }
        mega_st_close(f);
    }
    return 1;
}

/* files that are not model files, and run directories */
static void load_not_models(void) {
    char q[512];
    /* files that are not model files */
    path_in(q, sizeof q, "junk.safetensors");
    tl_write_file(q, "hello, world: this is not a safetensors file at all\n", 52);
    TL_CHECK(load_fails(q, NULL), "a text file is rejected: %s", mega_last_error());
    tl_write_file(q, "", 0);
    TL_CHECK(load_fails(q, NULL), "an empty file is rejected: %s", mega_last_error());
    path_in(q, sizeof q, "missing.safetensors");
    mega_status ms;
    TL_CHECK(load_fails(q, &ms) && ms == MEGA_ERR_IO, "a missing file fails with MEGA_ERR_IO: %s", mega_last_error());
    {
        /* a run directory means its model.safetensors (mega_model_file); one without it fails */
        char e[300];
        path_in(e, sizeof e, "norun");
        mega_lm *a = NULL, *b = NULL;
        path_in(q, sizeof q, "model.safetensors");
        int ok = mega_lm_load(g_dir, &a) == MEGA_OK && mega_lm_load(q, &b) == MEGA_OK &&
                 mega_lm_param_total(a) == mega_lm_param_total(b) &&
                 !memcmp(mega_lm_params(a), mega_lm_params(b), mega_lm_param_total(a) * sizeof(rl));
        TL_CHECK(ok, "a run directory loads its model.safetensors: %s", ok ? "" : mega_last_error());
        {
            /* mega_model_file_which: "best" names best.safetensors when the run has one, else the
             * newest; "last" the newest; another word is refused */
            char bp[600], f1[700], f2[700], f3[700];
            path_in(bp, sizeof bp, "best.safetensors");
            const int none = mega_model_file_which(g_dir, "best", f1, sizeof f1) == MEGA_OK && !strcmp(f1, q);
            const int saved = a && mega_lm_save(a, bp) == MEGA_OK;
            const int best = saved && mega_model_file_which(g_dir, "best", f2, sizeof f2) == MEGA_OK && !strcmp(f2, bp);
            const int last = mega_model_file_which(g_dir, "last", f3, sizeof f3) == MEGA_OK && !strcmp(f3, q);
            const int file = mega_model_file_which(q, "best", f3, sizeof f3) == MEGA_OK && !strcmp(f3, q);
            const int bad = mega_model_file_which(g_dir, "first", f3, sizeof f3) == MEGA_ERR_INVALID;
            remove(bp);
            TL_CHECK(none && best && last && file && bad, "mega_model_file_which: best %d/%d, last %d, a file %d, a bad word %d",
                     none, best, last, file, bad);
        }
        mega_lm_free(a), mega_lm_free(b);
        TL_CHECK(mkdir(e, 0755) == 0 && load_fails(e, NULL) && strstr(mega_last_error(), "no model.safetensors in this directory") &&
                     !strchr(mega_last_error(), '\n'),
                 "a directory without model.safetensors is rejected in one line: %s", mega_last_error());
    }
    {
        /* a valid safetensors file without a config */
        mega_st_writer *w = mega_st_writer_new();
        int64_t sh[1] = {3};
        float x[3] = {1, 2, 3};
        mega_st_writer_add(w, "x", MEGA_DT_F32, 1, sh, x);
        path_in(q, sizeof q, "noconfig.safetensors");
        mega_st_writer_write(w, q);
        mega_st_writer_free(w);
        TL_CHECK(load_fails(q, NULL) && strstr(mega_last_error(), "config"), "a file without a config is rejected: %s",
                 mega_last_error());
    }
}

static void test_save_load(void) {
    if (!save_load_round_trip()) return;
    save_failures();
    if (!load_cut_and_flipped()) return;
    if (!load_edited_configs()) return;
    load_not_models();
}

static void test_config_json(void) {
    mega_lm_config c, d;
    mega_lm_config_default(&d);
    char *js = mega_lm_config_to_json(&d);
    TL_CHECK(js && mega_lm_config_from_json(js, &c) == MEGA_OK, "default config JSON parses back (%s)", mega_last_error());
    char *js2 = mega_lm_config_to_json(&c);
    TL_CHECK(js && js2 && !strcmp(js, js2), "default config JSON round trip");
    free(js), free(js2);
    TL_CHECK(mega_lm_config_from_json("{}", &c) == MEGA_OK && c.layers == d.layers, "empty object gives the defaults");
    TL_CHECK(mega_lm_config_from_json("{\"chunk-size\":-1}", &c) == MEGA_OK && c.block.chunk_size == -1, "chunk-size -1 accepted");
    static const char *bad[] = {
        "{\"layers\":0}",
        "{\"layers\":-3}",
        "{\"layers\":1e10}",
        "{\"embed-dim\":-3e9}",
        "{\"ffn-dim\":1e300}",
        "{\"dropout\":1e39}",
        "{\"attention-activation\":\"tanh\"}",
        "{\"attention-activation\":7}",
        "{\"norm-type\":\"groupnorm\"}",
        "{\"rel-pos-bias\":\"alibi\"}",
        "{\"activation\":\"tanh\"}",
        "{\"embed-dim\":16.5}",
        "{\"embed-dim\":\"16\"}",
        "{\"z-dim\":true}",
        "{\"hidden-dim\":0}",
        "{\"n-dim\":-1}",
        "{\"n-dim\":65}",
        "{\"ffn-dim\":-1}",
        "{\"chunk-size\":-2}",
        "{\"chunk-size\":-128}",
        "{\"chunk-size\":0}",
        "{\"chunk-size\":2.5}",
        "{\"truncation\":-1}",
        "{\"dropout\":1.5}",
        "{\"dropout\":-0.1}",
        "{\"dropout\":\"0.1\"}",
        "{\"prenorm\":1}",
        "{\"tie-embeddings\":\"yes\"}",
        "{\"rel-pos-bias\":\"rotary\",\"z-dim\":7}",
        "{\"vocab-size\":1}",
        "{\"padding-idx\":257}",
        "{\"model\":\"mega_lra\"}",
        "{\"model\":3}",
        "{\"layers\":2",
        "[1,2,3]",
        "\"mega_lm\"",
        "",
        "null",
    };
    int nbad = 0;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        mega_clear_error();
        mega_status st = mega_lm_config_from_json(bad[i], &c);
        int ok = st != MEGA_OK && mega_last_error()[0];
        if (!ok) nbad++;
        TL_CHECK(ok, "config_from_json rejects %s (%d: %s)", bad[i], (int)st, mega_last_error());
    }
}

/* ---- (3) training through the API ------------------------------------------------------- */

static const char *TEXT = "the quick brown fox jumps over the lazy dog. ";

static void fill_batch(int32_t *tok, int32_t *tgt, int B, int T, int step) {
    const size_t n = strlen(TEXT);
    for (int b = 0; b < B; b++) {
        size_t s0 = (size_t)(step * 5 + b * 11) % n;
        for (int t = 0; t < T; t++) {
            tok[(size_t)b * T + t] = (unsigned char)TEXT[(s0 + (size_t)t) % n];
            tgt[(size_t)b * T + t] = (unsigned char)TEXT[(s0 + (size_t)t + 1) % n];
        }
    }
}

/* steps of AdamW from a fresh model (seed 5); returns the model; losses[i] before step i */
static mega_lm *train_run(const mega_lm_config *c, int steps, uint64_t key0, double lr, double *losses) {
    mega_lm *m = NULL;
    if (mega_lm_create(c, &m) != MEGA_OK) {
        TL_CHECK(0, "train: create (%s)", mega_last_error());
        return NULL;
    }
    mega_lm_init_params(m, 5);
    mega_adamw *o = NULL;
    if (mega_adamw_new(mega_lm_param_total(m), &o) != MEGA_OK) {
        TL_CHECK(0, "train: adamw (%s)", mega_last_error());
        mega_lm_free(m);
        return NULL;
    }
    const int B = 4, T = 48;
    int32_t tok[4 * 48], tgt[4 * 48];
    mega_adamw_hp hp = {0.9, 0.98, 1e-8, 0.01, 0};
    for (int s = 0; s < steps; s++) {
        fill_batch(tok, tgt, B, T, s);
        mega_lm_run run = {1, key0 + (uint64_t)s * 7919u};
        double loss = NAN;
        int64_t cnt = 0;
        mega_status st = mega_lm_forward(m, tok, tgt, B, T, &run, &loss, &cnt);
        if (st == MEGA_OK) {
            mega_lm_zero_grad(m);
            st = mega_lm_backward(m, 1.0);
        }
        if (st != MEGA_OK || cnt != B * T) {
            TL_CHECK(0, "train step %d (%s, count %lld)", s, mega_last_error(), (long long)cnt);
            break;
        }
        if (losses) losses[s] = loss;
        double gn = mega_lm_grad_norm(m);
        if (gn > 1.0) mega_lm_scale_grads(m, 1.0 / gn);
        mega_adamw_step_lm(o, m, &hp, lr);
    }
    mega_adamw_free(o);
    return m;
}

static double eval_loss(mega_lm *m) {
    const int B = 4, T = 48;
    int32_t tok[4 * 48], tgt[4 * 48];
    fill_batch(tok, tgt, B, T, 1000);
    mega_lm_run run = {0, 0};
    double loss = NAN;
    if (mega_lm_forward(m, tok, tgt, B, T, &run, &loss, NULL) != MEGA_OK) return NAN;
    return loss;
}

static void test_training(void) {
    mega_lm_config c;
    small_config(&c);
    c.vocab_size = 257, c.padding_idx = 256, c.block.chunk_size = 16;
    c.block.dropout = 0.1f, c.block.attention_dropout = 0.1f, c.block.hidden_dropout = 0.1f, c.block.activation_dropout = 0.1f;
    mega_lm *a = train_run(&c, 5, 12345, 3e-3, NULL);
    mega_lm *b = train_run(&c, 5, 12345, 3e-3, NULL);
    mega_lm *d = train_run(&c, 5, 999, 3e-3, NULL);
    if (a && b && d) {
        const size_t n = mega_lm_param_total(a) * sizeof(rl);
        TL_CHECK(!memcmp(mega_lm_params(a), mega_lm_params(b), n), "two identical 5-step AdamW runs with dropout: bit-identical parameters");
        TL_CHECK(memcmp(mega_lm_params(a), mega_lm_params(d), n) != 0, "another dropout key gives other parameters (dropout is active)");
        mega_lm *z = train_run(&c, 0, 0, 0, NULL);
        TL_CHECK(z && memcmp(mega_lm_params(a), mega_lm_params(z), n) != 0, "the 5 steps changed the parameters");
        mega_lm_free(z);
    }
    mega_lm_free(a), mega_lm_free(b), mega_lm_free(d);

    /* learning: 30 steps on a repetitive sequence, no dropout */
    c.block.dropout = c.block.attention_dropout = c.block.hidden_dropout = c.block.activation_dropout = 0;
    mega_lm *u = mega_lm_create(&c, &u) == MEGA_OK ? u : NULL;
    double l0 = NAN, l30 = NAN;
    if (u) {
        mega_lm_init_params(u, 5);
        l0 = eval_loss(u);
        mega_lm_free(u);
    }
    double losses[30];
    mega_lm *t = train_run(&c, 30, 1, 1e-2, losses);
    if (t) l30 = eval_loss(t);
    TL_CHECK(isfinite(l0) && isfinite(l30) && l30 < 0.5 * l0, "loss falls on a repetitive byte sequence: %.4f at step 0 -> %.4f after 30 steps",
             l0, l30);
    TL_CHECK(t && losses[0] > losses[29], "training loss falls: %.4f -> %.4f", losses[0], losses[29]);
    mega_lm_free(t);
}

/* ---- (4) the optimizer moments in a training state ------------------------------------------ */

/* A training state of the moments of o for ps, written as mega_adamw_save_moments does, but with
 * the first trainable tensor's exp_avg (or exp_avg_sq) changed by `damage`: 0 none, 1 a NaN in
 * exp_avg_sq, 2 a negative exp_avg_sq, 3 exp_avg of shape [2, numel/2], 4 exp_avg of dtype I32,
 * 5 exp_avg left out. */
static mega_status write_state(const char *path, mega_paramset *ps, mega_adamw *o, int damage) {
    mega_st_writer *w = mega_st_writer_new();
    if (!w) return MEGA_ERR_OOM;
    const mega_dtype dt = sizeof(rl) == 8 ? MEGA_DT_F64 : MEGA_DT_F32;
    mega_status st = MEGA_OK;
    int first = 1;
    for (int i = 0; i < mega_ps_count(ps) && !st; i++) {
        size_t off, n;
        unsigned fl;
        const char *name = mega_ps_info(ps, i, &off, &n, &fl);
        if (fl & 2) continue;
        char nm[512];
        int64_t shape[2] = {(int64_t)n, 1};
        const int hit = first && n >= 2 && n % 2 == 0 ? damage : 0;
        if (hit) first = 0;
        rl *m = malloc(n * sizeof(rl)), *v = malloc(n * sizeof(rl));
        int32_t *zi = calloc(n, sizeof(int32_t));
        if (!m || !v || !zi) st = MEGA_ERR_OOM;
        if (!st) {
            memcpy(m, mega_adamw_m(o) + off, n * sizeof(rl));
            memcpy(v, mega_adamw_v(o) + off, n * sizeof(rl));
            if (hit == 1) v[n - 1] = (rl)NAN;
            if (hit == 2) v[0] = -1;
            snprintf(nm, sizeof nm, "exp_avg.%s", name);
            if (hit == 3) shape[0] = 2, shape[1] = (int64_t)n / 2;
            if (hit == 4) st = mega_st_writer_add(w, nm, MEGA_DT_I32, 1, shape, zi);
            else if (hit != 5) st = mega_st_writer_add(w, nm, dt, hit == 3 ? 2 : 1, shape, m);
            snprintf(nm, sizeof nm, "exp_avg_sq.%s", name);
            shape[0] = (int64_t)n;
            if (!st) st = mega_st_writer_add(w, nm, dt, 1, shape, v);
        }
        free(m), free(v), free(zi);
    }
    if (!st) st = mega_st_writer_write(w, path);
    mega_st_writer_free(w);
    return st;
}

static void test_adamw_moments(void) {
    mega_lm_config c;
    small_config(&c);
    mega_lm *m = NULL;
    mega_adamw *o = NULL, *o2 = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK || mega_adamw_new(mega_lm_param_total(m), &o) != MEGA_OK ||
        mega_adamw_new(mega_lm_param_total(m), &o2) != MEGA_OK) {
        TL_CHECK(0, "moments: create (%s)", mega_last_error());
        mega_adamw_free(o), mega_adamw_free(o2), mega_lm_free(m);
        return;
    }
    mega_lm_init_params(m, 3);
    /* moments of one real step */
    const int B = 2, T = 16;
    int32_t tok[2 * 16], tgt[2 * 16];
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(i * 7 % 30), tgt[i] = (int32_t)(i * 11 % 30);
    mega_lm_run run = {0, 0};
    double loss;
    mega_lm_zero_grad(m);
    mega_status st = mega_lm_forward(m, tok, tgt, B, T, &run, &loss, NULL);
    if (!st) st = mega_lm_backward(m, 1.0);
    const mega_adamw_hp hp = {0.9, 0.98, 1e-8, 0.01, 0};
    if (!st) mega_adamw_step_lm(o, m, &hp, 1e-3);
    mega_paramset *ps = mega_lm_paramset(m);
    const size_t bytes = mega_lm_param_total(m) * sizeof(rl);
    char p[1024];
    path_in(p, sizeof p, "state.safetensors");
    /* the round trip through the library's own writer */
    mega_st_writer *w = mega_st_writer_new();
    if (!st) st = w ? mega_adamw_save_moments(o, ps, w) : MEGA_ERR_OOM;
    if (!st) st = mega_st_writer_write(w, p);
    mega_st_writer_free(w);
    mega_st_file *f = NULL;
    if (!st) st = mega_st_open(p, &f);
    if (!st) st = mega_adamw_load_moments(o2, ps, f);
    mega_st_close(f);
    TL_CHECK(!st && !memcmp(mega_adamw_m(o), mega_adamw_m(o2), bytes) && !memcmp(mega_adamw_v(o), mega_adamw_v(o2), bytes),
             "moments: save/load round trip is bit-identical (%s)", st ? mega_last_error() : "");
    /* a damaged state is refused, the message names the tensor and the fault */
    static const char *const want[] = {NULL, "holds non-finite values", "holds negative values", "are stored flat",
                                       "has dtype I32; optimizer moments are floating point", "is missing (no tensor 'exp_avg."};
    static const mega_status code[] = {MEGA_OK, MEGA_ERR_NUMERIC, MEGA_ERR_NUMERIC, MEGA_ERR_SHAPE, MEGA_ERR_SHAPE,
                                       MEGA_ERR_NOT_FOUND};
    for (int d = 0; d <= 5; d++) {
        f = NULL;
        mega_status ws = write_state(p, ps, o, d), ls = MEGA_ERR_IO;
        if (!ws && mega_st_open(p, &f) == MEGA_OK) ls = mega_adamw_load_moments(o2, ps, f);
        mega_st_close(f);
        if (d == 0)
            TL_CHECK(ws == MEGA_OK && ls == MEGA_OK, "moments: an undamaged hand-written state loads (%s)", ls ? mega_last_error() : "");
        else
            TL_CHECK(ws == MEGA_OK && ls == code[d] && strstr(mega_last_error(), want[d]) && strstr(mega_last_error(), "'exp_avg"),
                     "moments: damage %d refused with '%s' (%d: %s)", d, want[d], (int)ls, mega_last_error());
    }
    mega_adamw_free(o), mega_adamw_free(o2), mega_lm_free(m);
}

/* ---- (7) probing the attention weights while streaming (mega_lm_stream_probe_attention) ---- */

static void test_probe_attention(void) {
    mega_lm *m = make_model(7, 0);
    if (!m) return;
    const int C = mega_lm_get_config(m)->block.chunk_size, V = mega_lm_get_config(m)->vocab_size, ld = C + 3;
    int32_t tk[12];
    for (int i = 0; i < 12; i++) tk[i] = (i * 5 + 2) % (V - 1);
    mega_lm_stream *a = NULL, *b = NULL;
    TL_CHECK(mega_lm_stream_new(m, 1, C, &a) == MEGA_OK && mega_lm_stream_new(m, 1, C, &b) == MEGA_OK, "probe: streams (%s)",
             mega_last_error());
    if (!a || !b) goto out;
    rl rows[64], la[12 * 64], lb[12 * 64];
    for (int i = 0; i < 64; i++) rows[i] = -1;
    TL_CHECK(mega_lm_stream_probe_attention(a, 2, rows, ld) == MEGA_ERR_INVALID, "probe: a layer out of range is refused");
    TL_CHECK(mega_lm_stream_probe_attention(a, 1, rows, C - 1) == MEGA_ERR_INVALID, "probe: a stride below the capacity is refused");
    TL_CHECK(mega_lm_stream_probe_attention(a, 1, rows, ld) == MEGA_OK, "probe: set on layer 1 (%s)", mega_last_error());
    /* one chunk from its start: row i holds i + 1 softmax weights summing to 1, nothing beyond */
    int shape = 1;
    double worst = 0;
    TL_CHECK(mega_lm_stream_feed(a, tk, C, la) == MEGA_OK && mega_lm_stream_feed(b, tk, C, lb) == MEGA_OK, "probe: feed a chunk");
    for (int i = 0; i < C; i++) {
        double sum = 0;
        for (int j = 0; j < ld; j++) {
            if (j <= i) sum += rows[i * ld + j], shape &= rows[i * ld + j] >= 0 && rows[i * ld + j] <= 1;
            else shape &= rows[i * ld + j] == -1;
        }
        worst = fmax(worst, fabs(sum - 1));
    }
    TL_CHECK(shape && worst < 1e-5, "probe: the chunk's causal map (rows of i + 1 weights in [0, 1], |sum - 1| %.1e)", worst);
    /* the next token starts a new chunk: row 0 becomes the one weight 1 */
    TL_CHECK(mega_lm_stream_feed(a, tk + C, 1, la + C * V) == MEGA_OK && mega_lm_stream_feed(b, tk + C, 1, lb + C * V) == MEGA_OK,
             "probe: feed one more");
    TL_CHECK(fabs(rows[0] - 1) < 1e-6 && rows[1] == -1 && rows[ld] != -1, "probe: a chunk border restarts at row 0 (%g)", (double)rows[0]);
    TL_CHECK(!memcmp(la, lb, (size_t)(C + 1) * V * sizeof(rl)), "probe: logits with the probe == without (bit for bit)");
    TL_CHECK(mega_lm_stream_probe_attention(a, 1, NULL, 0) == MEGA_OK, "probe: cleared");
out:
    mega_lm_stream_free(a), mega_lm_stream_free(b);
    mega_lm_free(m);
    mega_lm_config c;
    small_config(&c);
    c.block.mixer = MEGA_MIXER_MHA;
    mega_lm *h = NULL;
    mega_lm_stream *s = NULL;
    if (mega_lm_create(&c, &h) == MEGA_OK && mega_lm_stream_new(h, 1, 16, &s) == MEGA_OK) {
        rl r[16 * 16];
        TL_CHECK(mega_lm_stream_probe_attention(s, 0, r, 16) == MEGA_ERR_UNSUPPORTED && strstr(mega_last_error(), "mha"),
                 "probe: refused for the mha mixer (%s)", mega_last_error());
    } else
        TL_CHECK(0, "probe: mha model (%s)", mega_last_error());
    mega_lm_stream_free(s);
    mega_lm_free(h);
}


/* ---- (5) adaptive input / adaptive softmax ----------------------------------------------- */

typedef struct {
    const char *name;
    int ai, as, tied, tie_proj;
    const char *cut; /* both cutoffs */
} adapt_case;

static const adapt_case ADAPT[] = {
    {"input+softmax untied", 1, 1, 0, 0, "9,20"},
    {"tied", 1, 1, 1, 0, "9,20"},
    {"tied with projections", 1, 1, 1, 1, "6,14,30"},
    {"softmax only", 0, 1, 0, 0, "12"},
    {"input only", 1, 0, 0, 0, "10,25"},
};

static mega_lm *adapt_model(const adapt_case *a, double drop) {
    mega_lm_config c;
    small_config(&c);
    c.padding_idx = 1; /* fairseq's <pad>, in the first band */
    c.adaptive_input = a->ai, c.tie_adaptive_weights = a->tied, c.tie_adaptive_proj = a->tie_proj;
    c.adaptive_input_factor = 2, c.adaptive_softmax_factor = 2, c.adaptive_softmax_dropout = (float)drop;
    c.block.dropout = (float)drop;
    int nf;
    const mega_field *f = mega_lm_config_fields(&nf);
    for (int i = 0; i < nf; i++)
        if ((a->ai && !strcmp(f[i].name, "adaptive-input-cutoff")) || (a->as && !strcmp(f[i].name, "adaptive-softmax-cutoff")))
            if (mega_field_parse(&f[i], &c, a->cut)) tl_check(0, "adaptive %s: parse %s: %s", a->name, a->cut, mega_last_error());
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m)) {
        tl_check(0, "adaptive %s: create: %s", a->name, mega_last_error());
        return NULL;
    }
    unsigned long long seed = 99;
    perturb(m, &seed);
    return m;
}

#ifdef MEGA_F64
typedef struct {
    mega_lm *m;
    const int32_t *tok, *tgt;
    int B, T;
} adapt_arg;
static double adapt_loss(void *p) {
    adapt_arg *a = p;
    double l = 0;
    mega_lm_run run = {1, 12345};
    mega_lm_forward(a->m, a->tok, a->tgt, a->B, a->T, &run, &l, NULL);
    return l;
}
#endif

static void test_adaptive(void) {
    const int B = 2, T = 7, V = 37;
    /* every band gets tokens; sequence 1 ends in pads whose targets are ignored */
    const int32_t tok[2 * 7] = {0, 5, 12, 33, 20, 8, 29, 2, 36, 15, 6, 31, 1, 1};
    const int32_t tgt[2 * 7] = {5, 12, 33, 20, 8, 29, 3, 36, 15, 6, 31, 10, -1, -1};
    for (size_t k = 0; k < sizeof ADAPT / sizeof *ADAPT; k++) {
        const adapt_case *a = &ADAPT[k];
        mega_lm *m = adapt_model(a, 0);
        if (!m) continue;
        mega_lm_run run = {0, 0};
        double loss = 0;
        int64_t cnt = 0;
        if (mega_lm_forward(m, tok, tgt, B, T, &run, &loss, &cnt)) tl_check(0, "adaptive %s: forward: %s", a->name, mega_last_error());
        rl *lg = malloc((size_t)B * T * V * sizeof(rl)), *sl = malloc((size_t)B * T * V * sizeof(rl));
        memcpy(lg, mega_lm_logits(m), (size_t)B * T * V * sizeof(rl));
        double worst_lse = 0, nll = 0;
        for (int r = 0; r < B * T; r++) {
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, lg[(size_t)r * V + v]);
            for (int v = 0; v < V; v++) sum += exp(lg[(size_t)r * V + v] - mx);
            if (a->as) worst_lse = fmax(worst_lse, fabs(mx + log(sum)));
            if (tgt[r] >= 0) nll -= lg[(size_t)r * V + tgt[r]] - (mx + log(sum));
        }
        TL_CHECK(worst_lse < 1e-5 && cnt == 12 && fabs(loss - nll / 12) < 1e-5 * fmax(1, loss),
                 "adaptive %s: logits are log-probabilities (worst |lse| %.2e), loss %.6f = -mean log p %.6f over %lld targets",
                 a->name, worst_lse, loss, nll / 12, (long long)cnt);
        /* streaming: all at once and one token at a time */
        mega_lm_stream *st = NULL;
        double sd = 1;
        if (!mega_lm_stream_new(m, B, T, &st)) {
            for (int t = 0; t < T; t++) {
                int32_t two[2] = {tok[t], tok[T + t]};
                rl out[2 * 37];
                mega_lm_stream_feed(st, two, 1, out);
                for (int b = 0; b < B; b++)
                    memcpy(sl + ((size_t)b * T + t) * V, out + (size_t)b * V, (size_t)V * sizeof(rl));
            }
            /* the rows of real tokens (the full forward zeroes the features of pad positions, a
             * stream computes them: their rows differ by design) */
            sd = rel_diff(sl, lg, (size_t)(B * T - 2) * V);
        }
        mega_lm_stream_free(st);
        TL_CHECK(sd < GEN_TOL, "adaptive %s: streaming = full forward (rel %.2e)", a->name, sd);
        /* save / load; the tied matrices are stored once */
        char path[512];
        path_in(path, sizeof path, "adaptive.safetensors");
        mega_lm *h = NULL;
        double ld = 1;
        if (!mega_lm_save(m, path) && !mega_lm_load(path, &h) && !mega_lm_forward(h, tok, NULL, B, T, &run, NULL, NULL))
            ld = rel_diff(mega_lm_logits(h), lg, (size_t)B * T * V);
        TL_CHECK(ld == 0, "adaptive %s: save/load round trip is exact (rel %.2e)", a->name, ld);
        int dup = 0;
        for (int i = 0; i < mega_lm_tensor_count(m); i++) {
            const char *nm = mega_lm_tensor_info(m, i, NULL, &(size_t){0}, &(unsigned){0});
            if (strstr(nm, "word_proj") || (a->tied && strstr(nm, "tail.") && strstr(nm, ".2.weight")) ||
                (a->tie_proj && strstr(nm, "tail.") && strstr(nm, ".0.weight")))
                dup = 1;
        }
        TL_CHECK(!dup, "adaptive %s: tied matrices are declared once", a->name);
        mega_lm_free(h);
        mega_lm_free(m);
        free(lg);
        free(sl);
#ifdef MEGA_F64
        /* gradients against finite differences, training mode with dropout 0.1 everywhere */
        m = adapt_model(a, 0.1);
        if (!m) continue;
        adapt_arg arg = {m, tok, tgt, B, T};
        double l0 = adapt_loss(&arg);
        mega_lm_zero_grad(m);
        mega_lm_backward(m, 1.0);
        const size_t P = mega_lm_param_total(m);
        rl *grad = malloc(P * sizeof(rl));
        memcpy(grad, mega_lm_grads(m), P * sizeof(rl));
        fd_opts o = {adapt_loss, &arg, 0, 0, 48, 16, 11 + k};
        double gmax = 0, worst = 0;
        const char *wn = "";
        for (size_t i = 0; i < P; i++) gmax = fmax(gmax, fabs(grad[i]));
        for (int i = 0; i < mega_lm_tensor_count(m); i++) {
            size_t off, n;
            unsigned fl;
            const char *nm = mega_lm_tensor_info(m, i, &off, &n, &fl);
            if (fl & 2) continue;
            double e = fd_tensor_err(&o, mega_lm_params(m) + off, grad + off, n, 1e-3 * gmax);
            if (e > worst) worst = e, wn = nm;
        }
        double dir = fd_directional(&o, mega_lm_params(m), grad, P, NULL);
        TL_CHECK(isfinite(l0) && worst < 1e-6 && dir < 1e-6, "adaptive %s: gradients = finite differences (worst %.2e in %s, directional %.2e)",
                 a->name, worst, wn, dir);
        free(grad);
        mega_lm_free(m);
#endif
    }
    /* refused configurations, each with its message */
    static const struct {
        const char *json, *want;
    } BAD[] = {
        {"{\"vocab-size\":37,\"padding-idx\":1,\"adaptive-input\":true}", "adaptive-input-cutoff is empty"},
        {"{\"vocab-size\":37,\"padding-idx\":1,\"adaptive-input\":true,\"adaptive-input-cutoff\":\"20,9\"}", "must be increasing"},
        {"{\"vocab-size\":37,\"padding-idx\":1,\"adaptive-softmax-cutoff\":\"40\"}", "up to the vocabulary size"},
        {"{\"vocab-size\":37,\"padding-idx\":1,\"adaptive-softmax-cutoff\":\"a,b\"}", "list of integers"},
        {"{\"vocab-size\":37,\"padding-idx\":1,\"adaptive-softmax-cutoff\":\"9\",\"tie-adaptive-weights\":true}", "needs adaptive-input"},
        {"{\"vocab-size\":37,\"padding-idx\":1,\"adaptive-softmax-cutoff\":\"9\",\"tie-embeddings\":true}", "no meaning"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        mega_lm_config c;
        mega_status st = mega_lm_config_from_json(BAD[i].json, &c);
        TL_CHECK(st && strstr(mega_last_error(), BAD[i].want), "adaptive config %zu refused with '%s' (got '%s')", i, BAD[i].want,
                 st ? mega_last_error() : "accepted");
    }
    mega_lm_config c;
    mega_lm *m = NULL;
    TL_CHECK(!mega_lm_config_from_json("{\"vocab-size\":37,\"padding-idx\":1,\"adaptive-input\":true,\"adaptive-input-cutoff\":\"9,20\","
                                       "\"adaptive-softmax-cutoff\":\"9,20\",\"tie-adaptive-weights\":true,\"adaptive-input-factor\":4,"
                                       "\"adaptive-softmax-factor\":2}", &c) &&
                 mega_lm_create(&c, &m) && strstr(mega_last_error(), "factor"),
             "tied bands of different factors are refused: %s", mega_last_error());
    mega_lm_free(m);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    mega_set_threads(1);
    if (tl_mkdtemp(g_dir, sizeof g_dir, "mega_lm_")) return tl_finish();
    test_generation();
    test_logits_layout();
    test_save_load();
    test_config_json();
    test_training();
    test_adamw_moments();
    test_probe_attention();
    test_adaptive();
    tl_rm_rf(g_dir);
    return tl_finish();
}
