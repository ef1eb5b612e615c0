/*
 * Causal Mega language model (official fairseq/models/mega_lm.py
 * MegaDecoderNoCrossAttn.extract_features_scriptable; docs/mega.md §10):
 *   x = embed_scale * Emb[tokens]        (embed_scale = sqrt(D) unless disabled)
 *   x = dropout(x); x *= valid           (pads zeroed)
 *   x = block_l(x) for l = 0..L-1        (causal mask, chunk-local)
 *   x = final_norm(x) if prenorm; x *= valid
 *   logits = x W^T                       (W = Emb when tied, else output_projection)
 * A sequence whose length is not a multiple of the chunk is handled as a shorter last chunk
 * (exactly the official right-padding for every norm but batchnorm); for batchnorm models the
 * official padding is reproduced (pad tokens, pad mask, statistics over the padded batch).
 */
#include "model/lm.h"
#include "model/modelio.h"

#include <stddef.h>

enum { SITE_EMBED = 7 };

void mega_lm_config_default(mega_lm_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 257;
    c->padding_idx = 256;
    c->layers = 4;
    mega_block_config_default(&c->block);
    c->final_norm_affine = 1;
    c->scale_embedding = 1;
    c->tie_embeddings = 0;
    c->adaptive_input_factor = c->adaptive_softmax_factor = 4;
}

#define OFF(f) offsetof(mega_lm_config, f)
static const mega_field LM_FIELDS[] = {
    {"vocab-size", MEGA_FIELD_INT, OFF(vocab_size), 2, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0, "vocabulary size"},
    {"padding-idx", MEGA_FIELD_INT, OFF(padding_idx), -1, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0,
     "padding token (-1 = none)"},
    {"layers", MEGA_FIELD_INT, OFF(layers), 1, 1024, NULL, 0, 0, 0, "number of blocks"},
    {"final-norm-affine", MEGA_FIELD_BOOL, OFF(final_norm_affine), 0, 1, NULL, 0, 0, 0,
     "learned scale and shift in the final norm (pre-norm models)"},
    {"scale-embedding", MEGA_FIELD_BOOL, OFF(scale_embedding), 0, 1, NULL, 0, 0, 0, "multiply the embeddings by sqrt(embed-dim)"},
    {"tie-embeddings", MEGA_FIELD_BOOL, OFF(tie_embeddings), 0, 1, NULL, 0, 0, 0, "output projection = the embedding table"},
    {"adaptive-input", MEGA_FIELD_BOOL, OFF(adaptive_input), 0, 1, NULL, 0, 0, 0,
     "adaptive input: the vocabulary in bands at adaptive-input-cutoff, band i embedded in embed-dim / factor^i dims"},
    {"adaptive-input-factor", MEGA_FIELD_FLOAT, OFF(adaptive_input_factor), 1, 64, NULL, 0, 0, 0,
     "adaptive input: the width divisor from one band to the next"},
    {"adaptive-input-cutoff", MEGA_FIELD_INTS, OFF(adaptive_input_cutoff), 1, 1 << 24, NULL, 0, 0, 0,
     "adaptive input: the token ids where bands end, e.g. 20000,60000 (the vocabulary size ends the last)"},
    {"adaptive-softmax-cutoff", MEGA_FIELD_INTS, OFF(adaptive_softmax_cutoff), 1, 1 << 24, NULL, 0, 0, 0,
     "adaptive softmax: the token ids where bands end (none: a full softmax)"},
    {"adaptive-softmax-factor", MEGA_FIELD_FLOAT, OFF(adaptive_softmax_factor), 1, 64, NULL, 0, 0, 0,
     "adaptive softmax: the width divisor from one tail to the next"},
    {"adaptive-softmax-dropout", MEGA_FIELD_FLOAT, OFF(adaptive_softmax_dropout), 0, 0.99, NULL, 0, 0, 0,
     "adaptive softmax: dropout on its input and on the tails' projections"},
    {"tie-adaptive-weights", MEGA_FIELD_BOOL, OFF(tie_adaptive_weights), 0, 1, NULL, 0, 0, 0,
     "adaptive softmax: its word matrices are the adaptive input's embeddings"},
    {"tie-adaptive-proj", MEGA_FIELD_BOOL, OFF(tie_adaptive_proj), 0, 1, NULL, 0, 0, 0,
     "adaptive softmax: with tie-adaptive-weights, its tail projections are the input's projections"},
};
#undef OFF

const mega_field *mega_lm_config_fields(int *count) {
    *count = (int)(sizeof LM_FIELDS / sizeof *LM_FIELDS);
    return LM_FIELDS;
}

void mega_lm_config_resolve(mega_lm_config *c) { mega_block_config_resolve(&c->block); }

mega_status mega_lm_config_check(const mega_lm_config *c) {
    int n;
    const mega_field *f = mega_lm_config_fields(&n);
    MEGA_TRY(mega__fields_check(f, n, c));
    if (c->padding_idx >= c->vocab_size) MEGA_FAIL(MEGA_ERR_INVALID, "padding index %d is outside the vocabulary of %d", c->padding_idx, c->vocab_size);
    if (c->block.bidirectional) MEGA_FAIL(MEGA_ERR_INVALID, "a language model is causal (bidirectional must be false)");
    /* the official build_model's asserts and the combinations it cannot build */
    const int as = c->adaptive_softmax_cutoff[0] != 0;
    int64_t cut[MEGA_BANDS_MAX + 1];
    if (c->adaptive_input && mega_adaptive_bands(c->adaptive_input_cutoff, c->vocab_size, cut, "adaptive-input-cutoff") < 0)
        return MEGA_ERR_INVALID;
    if (as && mega_adaptive_bands(c->adaptive_softmax_cutoff, c->vocab_size, cut, "adaptive-softmax-cutoff") < 0)
        return MEGA_ERR_INVALID;
    if (c->tie_adaptive_weights && !(c->adaptive_input && as))
        MEGA_FAIL(MEGA_ERR_INVALID, "tie-adaptive-weights needs adaptive-input and adaptive-softmax-cutoff");
    if (as && c->tie_embeddings)
        MEGA_FAIL(MEGA_ERR_INVALID, "tie-embeddings has no meaning with an adaptive softmax (use tie-adaptive-weights)");
    if (c->adaptive_input && !as && c->tie_embeddings)
        MEGA_FAIL(MEGA_ERR_INVALID, "an adaptive input cannot be tied to a full output projection (add adaptive-softmax-cutoff)");
    return mega_block_config_check(&c->block);
}

/* ---- model ------------------------------------------------------------------------------ */

static void free_buffers(mega_lm *m) {
    mega__free(m->logits);
    free(m->pad);
    free(m->tok);
    free(m->tgt);
    mega__free(m->ascr);
    free(m->aorder);
    m->logits = NULL, m->pad = NULL, m->tok = m->tgt = m->aorder = NULL, m->ascr = NULL;
    m->Bmax = m->Tmax = 0;
}

/* the model with its parameter table declared: names, shapes and offsets, no memory for them */
mega_status mega__lm_declare(const mega_lm_config *c, mega_lm **out) {
    *out = NULL;
    MEGA_TRY(mega_lm_config_check(c));
    mega_lm *m = calloc(1, sizeof *m);
    if (!m) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    m->hdr.kind = MEGA_MODEL_LM;
    m->cfg = *c;
    mega_lm_config_resolve(&m->cfg);
    c = &m->cfg; /* from here on the resolved config (the mixer's defaults) */
    mega_params_init(&m->P);
    mega_status st;
    const int64_t V = c->vocab_size, D = c->block.embed_dim;
    m->has_ai = c->adaptive_input, m->has_as = c->adaptive_softmax_cutoff[0] != 0;
    if (m->has_ai)
        st = mega_adaptive_input_declare(&m->ai, &m->P, "decoder.embed_tokens.", V, (int)D, c->padding_idx,
                                         c->adaptive_input_factor, c->adaptive_input_cutoff);
    else
        st = MEGA_PADD(&m->P, "decoder.", "embed_tokens.weight", MEGA_P_DECAY, &m->emb, V, D);
    if (st) goto fail;
    if ((st = mega_stack_declare(&m->st, &m->P, "decoder.layers.", "decoder.final_norm.norm.", &c->block, c->layers,
                                 c->final_norm_affine)))
        goto fail;
    if (m->has_as)
        st = mega_adaptive_softmax_declare(&m->as, &m->P, "decoder.adaptive_softmax.", V, (int)D, c->adaptive_softmax_factor,
                                           c->adaptive_softmax_cutoff, c->adaptive_softmax_dropout,
                                           c->tie_adaptive_weights ? &m->ai : NULL, c->tie_adaptive_proj);
    else if (!c->tie_embeddings)
        st = MEGA_PADD(&m->P, "decoder.", "output_projection.weight", MEGA_P_DECAY, &m->out_w, V, D);
    if (st) goto fail;
    *out = m;
    return MEGA_OK;
fail:
    mega_lm_free(m);
    return st;
}

mega_status mega_lm_create_ex(const mega_lm_config *c, const mega_load_opts *o, mega_lm **out) {
    mega_model *m;
    mega_status st = mega__model_create(MEGA_MODEL_LM, c, o, &m);
    *out = (mega_lm *)m;
    return st;
}

mega_status mega_lm_create(const mega_lm_config *c, mega_lm **out) { return mega_lm_create_ex(c, NULL, out); }

void mega_lm_free(mega_lm *m) {
    if (!m) return;
    free_buffers(m);
    mega_stack_free(&m->st);
    mega_params_free(&m->P);
    free(m);
}

const mega_lm_config *mega_lm_get_config(const mega_lm *m) { return &m->cfg; }

void mega_lm_init_params(mega_lm *m, uint64_t seed) {
    mega_rng rng;
    mega_rng_seed(&rng, seed);
    const mega_lm_config *c = &m->cfg;
    const size_t V = (size_t)c->vocab_size, D = (size_t)c->block.embed_dim;
    real *W = m->P.data;
    if (m->has_ai) {
        mega_adaptive_input_init(&m->ai, W, &rng);
    } else {
        /* official Embedding(): N(0, D^-1/2) with the padding row zeroed */
        mega_fill_normal(W + m->emb, V * D, 0, 1.0 / sqrt((double)D), &rng);
        if (c->padding_idx >= 0) memset(W + m->emb + (size_t)c->padding_idx * D, 0, D * sizeof(real));
    }
    mega_stack_init(&m->st, W, &rng);
    if (m->has_as) mega_adaptive_softmax_init(&m->as, W, &rng);
    else if (!c->tie_embeddings) mega_fill_normal(W + m->out_w, V * D, 0, 1.0 / sqrt((double)D), &rng);
}

size_t mega_lm_num_params(const mega_lm *m) { return mega_params_count_trainable(&m->P); }
mega_real *mega_lm_params(mega_lm *m) { return m->P.data; }
mega_real *mega_lm_grads(mega_lm *m) { return m->P.grad; }
size_t mega_lm_param_total(const mega_lm *m) { return m->P.total; }
int mega_lm_tensor_count(const mega_lm *m) { return m->P.n; }
const char *mega_lm_tensor_info(const mega_lm *m, int i, size_t *offset, size_t *numel, unsigned *flags) {
    return mega_params_info(&m->P, i, offset, numel, flags);
}
void mega_lm_zero_grad(mega_lm *m) { mega_params_zero_grad(&m->P); }
const mega_real *mega_lm_logits(const mega_lm *m) { return m->logits; }

/* padded length for a batch of T positions (official right-padding kept only for batchnorm) */
static int padded_len(const mega_lm *m, int T) {
    int c = m->cfg.block.chunk_size;
    if (m->cfg.block.norm_type == MEGA_NORM_BATCH && c > 0 && c < T && T % c) return (T + c - 1) / c * c;
    return T;
}

/* reals of the adaptive layers' scratch and saved activations for R rows (0: none) */
static size_t adaptive_reals(const mega_lm *m, size_t R) {
    size_t a = m->has_ai ? mega_adaptive_input_scratch(&m->ai, R) : 0;
    size_t b = m->has_as ? mega_adaptive_softmax_acts(&m->as, R) : 0;
    return MEGA_MAX(a, b);
}

mega_status mega_lm_reserve(mega_lm *m, int B, int T) {
    if (B < 1 || T < 1) MEGA_FAIL(MEGA_ERR_INVALID, "batch and sequence length must be positive (got %d x %d)", B, T);
    int Tp = padded_len(m, T);
    MEGA_TRY(mega_stack_reserve(&m->st, B, Tp));
    if (B <= m->Bmax && Tp <= m->Tmax) return MEGA_OK;
    B = MEGA_MAX(B, m->Bmax);
    Tp = MEGA_MAX(Tp, m->Tmax);
    free_buffers(m);
    const size_t R = (size_t)B * Tp, V = (size_t)m->cfg.vocab_size;
    m->logits = mega__calloc(R * V + R, sizeof(real));
    m->pad = calloc(R, 1);
    m->tok = calloc(R, sizeof(int32_t));
    m->tgt = calloc(R, sizeof(int32_t));
    const size_t as = adaptive_reals(m, R);
    if (as) {
        m->ascr = mega__calloc(as, sizeof(real));
        m->aorder = calloc(R, sizeof(int32_t));
    }
    if (!m->logits || !m->pad || !m->tok || !m->tgt || (as && (!m->ascr || !m->aorder))) {
        free_buffers(m);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory reserving logits for %d x %d tokens", B, Tp);
    }
    m->lse = m->logits + R * V;
    m->Bmax = B;
    m->Tmax = Tp;
    return MEGA_OK;
}

int mega_lm_padded_len(const mega_lm *m) { return m->Tp; }

/* the bytes mega_lm_reserve allocates for B x T (the stack's buffers, the logits, the tokens) */
static size_t reserve_bytes(const mega_lm *m, int B, int T) {
    const int Tp = padded_len(m, T);
    const size_t R = (size_t)B * Tp, V = (size_t)m->cfg.vocab_size;
    return mega__stack_bytes(&m->st, B, Tp) + (R * V + R + adaptive_reals(m, R)) * sizeof(real) + R +
           (2 + (m->has_ai || m->has_as)) * R * sizeof(int32_t);
}

mega_status mega_lm_memory(const mega_lm_config *c, int training, int B, int T, mega_memory *out) {
    memset(out, 0, sizeof *out);
    if (B < 0 || T < 0 || (B > 0 && T < 1)) MEGA_FAIL(MEGA_ERR_INVALID, "mega_lm_memory: bad batch %d x %d", B, T);
    mega_lm *m;
    MEGA_TRY(mega__lm_declare(c, &m));
    mega__memory_fill(out, &m->P, training, B > 0 ? reserve_bytes(m, B, T) : 0);
    mega_lm_free(m);
    return MEGA_OK;
}

const mega_real *mega_lm_hidden(const mega_lm *m, int i) {
    if (i < 0 || i > m->cfg.layers || !m->st.H) return NULL;
    return mega_stack_hidden(&m->st, i);
}

mega_status mega_lm_forward(mega_lm *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                            const mega_lm_run *run, double *loss, int64_t *count) {
    const mega_lm_config *c = &m->cfg;
    MEGA_TRY(mega_lm_reserve(m, B, T));
    const int Tp = padded_len(m, T);
    const size_t R = (size_t)B * Tp, D = (size_t)c->block.embed_dim, V = (size_t)c->vocab_size;
    m->B = B, m->T = T, m->Tp = Tp;
    m->run = run ? *run : (mega_lm_run){0, 0};
    /* tokens, padded to Tp with padding_idx when needed; validate the range */
    int any_pad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tp; t++) {
            int32_t tk = t < T ? tokens[(size_t)b * T + t] : c->padding_idx;
            if (tk < 0 || tk >= c->vocab_size) MEGA_FAIL(MEGA_ERR_INVALID, "token %d at [%d, %d] is outside the vocabulary of %d", tk, b, t, c->vocab_size);
            size_t r = (size_t)b * Tp + t;
            m->tok[r] = tk;
            m->pad[r] = c->padding_idx >= 0 && tk == c->padding_idx;
            any_pad |= m->pad[r];
            m->tgt[r] = (targets && t < T) ? targets[(size_t)b * T + t] : -1;
            if (m->tgt[r] >= c->vocab_size) MEGA_FAIL(MEGA_ERR_INVALID, "target %d is outside the vocabulary of %d", m->tgt[r], c->vocab_size);
        }
    const uint8_t *pad = any_pad ? m->pad : NULL;
    m->any_pad = any_pad;
    /* x = embed_scale * Emb[tokens]; dropout; pads zeroed */
    const real scale = c->scale_embedding ? (real)sqrt((double)D) : (real)1;
    real *W = m->P.data;
    real *H0 = mega_stack_input(&m->st);
    if (m->has_ai) mega_adaptive_input_forward(&m->ai, W, H0, m->tok, m->pad, R, scale, m->ascr, m->aorder);
    else mega_embedding_forward(H0, W + m->emb, m->tok, m->pad, R, D, scale);
    const int train = m->run.training;
    if (train && c->block.dropout > 0) mega_dropout(H0, H0, R * D, c->block.dropout, mega__subkey(m->run.key, SITE_EMBED));
    const real *xf;
    MEGA_TRY(mega_stack_forward(&m->st, W, pad, B, Tp, train, m->run.key, &xf));
    double tot = 0, nll = 0;
    int64_t cnt = 0;
    if (m->has_as) {
        /* the adaptive softmax's log-probabilities (they are the logits: their softmax is p) */
        mega_adaptive_softmax_forward(&m->as, W, m->logits, xf, R, train, m->run.key, m->ascr);
        if (targets)
            for (size_t r = 0; r < R; r++)
                if (m->tgt[r] >= 0) tot -= (double)m->logits[r * V + (size_t)m->tgt[r]], cnt++;
    } else {
        /* logits = x W^T; the cross-entropy over the counted targets */
        const real *Wo = W + (c->tie_embeddings ? m->emb : m->out_w);
        mega_linear_forward(m->logits, xf, Wo, NULL, R, D, V);
        if (targets) mega_xent_rows(m->logits, m->tgt, m->lse, R, V, 0, &tot, &nll, &cnt);
    }
    /* the public layout is [B, T, V]: drop the rows of the official padding (batchnorm models) */
    if (Tp != T)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                memmove(m->logits + ((size_t)b * T + t) * V, m->logits + ((size_t)b * Tp + t) * V, V * sizeof(real));
    m->count = cnt;
    m->has_targets = targets != NULL;
    if (loss) *loss = cnt ? tot / (double)cnt : 0;
    if (count) *count = cnt;
    return MEGA_OK;
}

void mega_lm_set_batch_sync(mega_lm *m, mega_sum_fn sum, void *ctx) {
    m->st.sync.fn = sum, m->st.sync.ctx = ctx;
}

static mega_status backward_stack(mega_lm *m);

mega_status mega_lm_backward(mega_lm *m, double scale) {
    const mega_lm_config *c = &m->cfg;
    if (!m->P.grad) MEGA_FAIL(MEGA_ERR_INVALID, "backward: this model was loaded for inference (no gradients)");
    if (!m->has_targets) MEGA_FAIL(MEGA_ERR_INVALID, "backward needs a forward with targets");
    const size_t R = (size_t)m->B * m->Tp, D = (size_t)c->block.embed_dim, V = (size_t)c->vocab_size;
    const real *W = m->P.data;
    real *dW = m->P.grad;
    const int train = m->run.training;
    /* back to the padded row layout the stack works in (rows of the padding get no gradient) */
    if (m->Tp != m->T)
        for (int b = m->B - 1; b >= 0; b--)
            for (int t = m->T - 1; t >= 0; t--)
                memmove(m->logits + ((size_t)b * m->Tp + t) * V, m->logits + ((size_t)b * m->T + t) * V, V * sizeof(real));
    const real g = m->count ? (real)(scale / (double)m->count) : 0;
    if (m->has_as) {
        mega_adaptive_softmax_backward(&m->as, W, dW, m->st.dx, m->logits, m->st.out, m->tgt, R, g, train, m->run.key,
                                       m->ascr);
        m->has_targets = 0;
        return backward_stack(m);
    }
    /* d logits = (softmax - onehot) * scale / count, in place */
#pragma omp parallel for schedule(static) if (R * V > MEGA_PAR_MIN)
    for (size_t r = 0; r < R; r++) {
        real *lg = m->logits + r * V;
        int32_t y = m->tgt[r];
        if (y < 0) {
            memset(lg, 0, V * sizeof(real));
            continue;
        }
        mega_exp_sub(lg, V, m->lse[r], 0); /* softmax = e^(logit - lse), vectorised */
        for (size_t v = 0; v < V; v++) lg[v] *= g;
        lg[y] -= g;
    }
    m->has_targets = 0; /* logits are now gradients */
    /* output projection, then the stack */
    size_t wo = c->tie_embeddings ? m->emb : m->out_w;
    mega_linear_backward(m->st.dx, dW + wo, NULL, m->logits, m->st.out, W + wo, R, D, V, 0);
    return backward_stack(m);
}

/* from d(final features) in m->st.dx: the stack, the embedding dropout and the embedding */
static mega_status backward_stack(mega_lm *m) {
    const mega_lm_config *c = &m->cfg;
    const size_t R = (size_t)m->B * m->Tp, D = (size_t)c->block.embed_dim;
    const real *W = m->P.data;
    real *dW = m->P.grad;
    const int train = m->run.training;
    real *dH = mega_stack_backward(&m->st, W, dW, m->st.dx, train, m->run.key);
    /* embedding: dropout, scale; scatter into the rows (pads and the padding row get nothing) */
    if (train && c->block.dropout > 0) mega_dropout(dH, dH, R * D, c->block.dropout, mega__subkey(m->run.key, SITE_EMBED));
    const real es = c->scale_embedding ? (real)sqrt((double)D) : (real)1;
    if (m->has_ai) mega_adaptive_input_backward(&m->ai, W, dW, dH, m->tok, m->pad, R, es, m->ascr, m->aorder);
    else mega_embedding_backward(dW + m->emb, dH, m->tok, m->pad, R, D, es, c->padding_idx);
    return MEGA_OK;
}

/* ---- streaming -------------------------------------------------------------------------- */

#define STREAM_TMAX 64 /* tokens per internal step (projections batched as GEMMs) */

/* Pieces of at most this many rows (batch x tokens) of a Mega model run in one step-team region
 * (stepteam.c: the ~25 products and attentions of a decoded token share one region instead of
 * opening one each). Only where nothing in the step opens a region of its own, which would be
 * nested in the team: the Mega step's norms and activations stay on the calling thread up to
 * MEGA_PAR_MIN elements (checked below), its EMA inside a team always; other mixers' step code
 * may parallelise with plain OpenMP regions. */
#define STREAM_TEAM_ROWS 16

/* Decoding a batch as groups of sequences. With the products of a token split over the threads
 * (mega_linear_step), a batch-8 token of the bench's model ends about 33 parallel jobs, each a
 * wait for the slower thread, and runs its norms, activations, gates and EMA on one thread while
 * the other spins. Run instead as groups of consecutive sequences, each group going through the
 * whole model on one thread (its own buffers, and a view of its sequences in the stream's state:
 * mega_mixer_state.b0), a token ends one job; each thread reads every weight, which costs less
 * than the waits (the measurements on 2 cores: docs/performance.md, seventh round).
 * On one thread (or when the step tuner finds the team slower, stepteam.c) a token runs
 * as one batch again, each weight read once; so it does on more threads than groups, its
 * products split over them as without groups.
 * Bits: every output of a step product is the same sum whichever rows share it (gemm.c,
 * step_dots; test_decode_alloc) and the rest of a token's step is per sequence, so a token gives
 * the same bits grouped or not. A prompt's rows go through GEMMs whose last bits depend on the
 * rows multiplied together, so a prompt always runs group by group, and the grouping is a
 * function of the batch and the model only, never of the thread count: a stream gives the same
 * bits with any number of threads. Groups: none below 2 x STREAM_GROUP_ROWS sequences (fewer
 * rows per product read the weights for too little work: batch 4 split over 2 threads was no
 * faster), then pairs of groups (the machines measured have 2 cores) of at most
 * STREAM_TEAM_ROWS rows; the Mega mixer without an adaptive softmax only (the step team's
 * conditions). */
#define STREAM_GROUP_ROWS 4
#define STREAM_GROUP_PAIR 2

static size_t stream_wide(const mega_lm_config *c) {
    const size_t D = (size_t)c->block.embed_dim;
    return MEGA_MAX(MEGA_MAX((size_t)c->block.hidden_dim, (size_t)c->block.ffn_dim),
                    2 * D + (size_t)c->block.z_dim + (size_t)c->block.hidden_dim);
}

/* rows a step-team region may take: STREAM_TEAM_ROWS, and no row-wide pass above MEGA_PAR_MIN */
static size_t stream_team_rows(const mega_lm *m) {
    return MEGA_MIN((size_t)STREAM_TEAM_ROWS, (size_t)MEGA_PAR_MIN / stream_wide(&m->cfg));
}

static int stream_team_ok(const mega_lm *m, size_t rows) {
    const mega_mixer_ops *ops = mega_mixer_ops_of(m->cfg.block.mixer);
    return (ops->flags & MEGA_MIXER_STEP_TEAM) && !m->has_as && rows <= stream_team_rows(m);
}

/* the number of groups for B sequences (1 = not grouped) */
static int stream_groups(const mega_lm *m, int B) {
    const size_t rmax = stream_team_rows(m);
    if (B < STREAM_GROUP_ROWS * STREAM_GROUP_PAIR || !stream_team_ok(m, 1)) return 1; /* ok(1): rmax >= 1 */
    const size_t per = rmax * STREAM_GROUP_PAIR; /* sequences a pair of groups can take */
    const size_t G = STREAM_GROUP_PAIR * (((size_t)B + per - 1) / per);
    return G > (size_t)B ? B : (int)G;
}

/* group g's first sequence */
static int group_first(const mega_lm_stream *s, int g) { return (int)((int64_t)s->B * g / s->ngroups); }

/* a view's final timestep-norm state: sequences from b0 of the stream of's */
static void tfs_at(mega_lm_stream *v, const mega_lm_stream *of, int b0) {
    v->tfs.count = of->tfs.count + b0;
    v->tfs.mv = of->tfs.mv + (size_t)b0 * 2 * v->m->st.tfnorm.G;
}

/* one stream of B sequences with its own buffers (cap: already the cache capacity): with its own
 * state (of NULL), or a view of sequences [b0, b0 + B) of the state of stream of (a group) */
static mega_status stream_alloc(mega_lm *m, int B, int cap, const mega_lm_stream *of, int b0, mega_lm_stream **out) {
    *out = NULL;
    const mega_lm_config *c = &m->cfg;
    mega_lm_stream *s = calloc(1, sizeof *s);
    if (!s) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    s->m = m, s->B = B, s->cap = cap, s->ngroups = 1;
    const int L = c->layers;
    const size_t D = (size_t)c->block.embed_dim;
    s->tmax = STREAM_TMAX;
    size_t per = mega_block_state_size(&m->st.blocks[0], B, cap);
    size_t scr = mega_block_step_scratch(&m->st.blocks[0], B, s->tmax, cap);
    s->S = calloc((size_t)L, sizeof *s->S);
    if (!of) s->mem = mega__calloc(per * (size_t)L, sizeof(real));
    /* x, y ([B, tmax, D] each) and the final-norm statistics (2 per row, or 2*D for batchnorm) */
    s->x = mega__calloc((size_t)B * s->tmax * D * 2 + 2 * (size_t)B * s->tmax + 2 * D, sizeof(real));
    s->scratch = mega__calloc(scr, sizeof(real));
    s->tok = calloc((size_t)B * s->tmax, sizeof(int32_t));
    s->pad = calloc((size_t)B * s->tmax, 1);
    const size_t as = adaptive_reals(m, (size_t)B * s->tmax);
    if (as) {
        s->ascr = mega__calloc(as, sizeof(real));
        s->aorder = calloc((size_t)B * s->tmax, sizeof(int32_t));
    }
    if (m->st.has_tfnorm && !of) {
        s->tfs.count = calloc((size_t)B, sizeof(int64_t));
        s->tfs.mv = mega__calloc((size_t)B * 2 * m->st.tfnorm.G, sizeof(real));
        if (s->tfs.count && s->tfs.mv) mega_tsnorm_state_prior(&m->st.tfnorm, m->P.data, &s->tfs, B);
    } else if (m->st.has_tfnorm) { /* a view: its sequences' part of the stream's final-norm state */
        s->tfs_view = 1;
        tfs_at(s, of, b0);
    }
    if (!s->S || (!of && !s->mem) || !s->x || !s->scratch || !s->tok || !s->pad || (as && (!s->ascr || !s->aorder)) ||
        (m->st.has_tfnorm && (!s->tfs.count || !s->tfs.mv))) {
        mega_lm_stream_free(s);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory allocating the streaming state");
    }
    for (int l = 0; l < L; l++) {
        if (of) { /* a view: the same memory, cache and tables, B of its sequences, no probe */
            s->S[l] = of->S[l];
            s->S[l].B = B, s->S[l].b0 = b0, s->S[l].Bmem = of->B, s->S[l].probe = NULL, s->S[l].probe_ld = 0;
            continue;
        }
        mega_status st = mega_block_state_init(&m->st.blocks[l], m->P.data, &s->S[l], s->mem + (size_t)l * per, B, cap);
        if (st) {
            mega_lm_stream_free(s);
            return st;
        }
    }
    *out = s;
    return MEGA_OK;
}

mega_status mega_lm_stream_new(mega_lm *m, int B, int cap, mega_lm_stream **out) {
    *out = NULL;
    const mega_lm_config *c = &m->cfg;
    if (B < 1) MEGA_FAIL(MEGA_ERR_INVALID, "stream batch must be positive");
    /* the mixer's cache for the longest stream (chunked Mega: one chunk; mixers with a bounded
     * state, e.g. local windows or recurrences, ignore the capacity) */
    mega_block_context x;
    mega_block_context_of(&c->block, cap, &x);
    cap = x.cache;
    if (cap < 1) MEGA_FAIL(MEGA_ERR_INVALID, "full-attention streaming needs a capacity (the longest stream)");
    mega_lm_stream *s = NULL;
    MEGA_TRY(stream_alloc(m, B, cap, NULL, 0, &s));
    const int G = stream_groups(m, B);
    if (G == 1) {
        *out = s;
        return MEGA_OK;
    }
    s->ngroups = G;
    s->group = calloc((size_t)G, sizeof *s->group);
    s->gst = calloc((size_t)G, sizeof *s->gst);
    s->gerr = calloc((size_t)G, sizeof *s->gerr);
    if (!s->group || !s->gst || !s->gerr) {
        mega_lm_stream_free(s);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory allocating the streaming state");
    }
    for (int g = 0; g < G; g++) {
        const int b0 = group_first(s, g);
        mega_status st = stream_alloc(m, group_first(s, g + 1) - b0, cap, s, b0, &s->group[g]);
        if (st) {
            mega_lm_stream_free(s);
            return st;
        }
    }
    *out = s;
    return MEGA_OK;
}

/* the rows' views and buffers (lm.c, rows below) */
static void rows_drop(mega_lm_stream *s) {
    mega_lm_stream_free(s->rowv);
    mega_lm_stream_free(s->stepv);
    free(s->rpos);
    mega__free(s->rtmp);
    free(s->ridx);
    s->rowv = s->stepv = NULL, s->rpos = NULL, s->rtmp = NULL, s->ridx = NULL, s->nrows = 0;
}

void mega_lm_stream_free(mega_lm_stream *s) {
    if (!s) return;
    rows_drop(s);
    if (s->group)
        for (int g = 0; g < s->ngroups; g++) mega_lm_stream_free(s->group[g]);
    free(s->group);
    free(s->gst);
    free(s->gerr);
    free(s->S);
    if (!s->tfs_view) free(s->tfs.count), mega__free(s->tfs.mv);
    mega__free(s->mem);
    mega__free(s->x);
    mega__free(s->scratch);
    free(s->tok);
    free(s->pad);
    mega__free(s->ascr);
    free(s->aorder);
    free(s);
}

/* a grouped stream's position, in the stream, its groups and every layer's state and view */
static void stream_set_pos(mega_lm_stream *s, int64_t pos) {
    const int L = s->m->cfg.layers;
    s->pos = pos;
    for (int l = 0; l < L; l++) s->S[l].pos = pos;
    if (s->group)
        for (int g = 0; g < s->ngroups; g++) {
            s->group[g]->pos = pos;
            for (int l = 0; l < L; l++) s->group[g]->S[l].pos = pos;
        }
}

void mega_lm_stream_reset(mega_lm_stream *s) {
    /* the whole state (the groups' views included) */
    for (int l = 0; l < s->m->cfg.layers; l++) mega_block_state_reset(&s->m->st.blocks[l], &s->S[l]);
    if (s->m->st.has_tfnorm) mega_tsnorm_state_prior(&s->m->st.tfnorm, s->m->P.data, &s->tfs, s->B);
    stream_set_pos(s, 0);
    rows_drop(s); /* fed as a whole again, or by rows from scratch */
}

int64_t mega_lm_stream_pos(const mega_lm_stream *s) { return s->pos; }

mega_status mega_lm_stream_probe_attention(mega_lm_stream *s, int layer, mega_real *rows, int ld) {
    const mega_lm_config *c = &s->m->cfg;
    if (layer < 0 || layer >= c->layers) MEGA_FAIL(MEGA_ERR_INVALID, "layer %d is out of range [0, %d)", layer, c->layers);
    if (!(mega_mixer_ops_of(c->block.mixer)->flags & MEGA_MIXER_PROBE))
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "attention weights can be probed in Mega layers only (this model's mixer is %s)",
                  mega_mixer_name(c->block.mixer));
    if (rows && ld < s->cap) MEGA_FAIL(MEGA_ERR_INVALID, "probe row stride %d is below the stream's cache capacity %d", ld, s->cap);
    s->S[layer].probe = rows, s->S[layer].probe_ld = rows ? (size_t)ld : 0;
    if (s->group) s->group[0]->S[layer].probe = rows, s->group[0]->S[layer].probe_ld = s->S[layer].probe_ld; /* sequence 0 */
    return MEGA_OK;
}

/* one piece of a feed: n tokens per sequence starting at t0, already in s->x (embedded) */
typedef struct {
    mega_lm_stream *s;
    mega_real *logits;
    int T, t0, n;
} feed_piece;

/* the layers, the final norm and the logits of a piece (the body of the step team) */
static mega_status feed_layers(void *arg) {
    const feed_piece *f = arg;
    mega_lm_stream *s = f->s;
    mega_lm *m = s->m;
    const mega_lm_config *c = &m->cfg;
    const int B = s->B, L = c->layers, n = f->n, T = f->T, t0 = f->t0;
    const size_t D = (size_t)c->block.embed_dim, V = (size_t)c->vocab_size, R = (size_t)B * n;
    const real *W = m->P.data;
    const real *Wo = W + (m->has_as ? 0 : c->tie_embeddings ? m->emb : m->out_w);
    real *x = s->x, *y = s->x + (size_t)B * s->tmax * D, *st = y + (size_t)B * s->tmax * D;
    for (int l = 0; l < L; l++) {
        MEGA_TRY(mega_block_step(&m->st.blocks[l], W, &s->S[l], y, x, n, s->scratch));
        real *tmp = x;
        x = y;
        y = tmp;
    }
    if (m->st.has_fnorm) mega_seqnorm_forward(&m->st.fnorm, (real *)W, x, st, x, R, 0, 0, NULL);
    if (m->st.has_tfnorm) mega_tsnorm_forward(&m->st.tfnorm, W, x, x, NULL, B, n, &s->tfs, NULL); /* rows [b][n] */
    if (f->logits && m->has_as) {
        /* the adaptive softmax's log-probabilities, a sequence's rows at a time unless in order */
        if (n == T) mega_adaptive_softmax_forward(&m->as, W, f->logits, x, R, 0, 0, s->ascr);
        else
            for (int b = 0; b < B; b++)
                mega_adaptive_softmax_forward(&m->as, W, f->logits + ((size_t)b * T + t0) * V, x + (size_t)b * n * D,
                                              (size_t)n, 0, 0, s->ascr);
    } else if (f->logits) {
        /* rows are [b][t] for this piece; scatter into [B, T, V]. When the piece is the whole
         * call (decode: one token per sequence) the rows are already in [B, T, V] order: one
         * product, split over the threads (mega_linear_step) */
        if (n == T)
            mega_linear_step(f->logits, x, Wo, NULL, R, D, V);
        else
            for (int b = 0; b < B; b++)
                mega_linear_step(f->logits + ((size_t)b * T + t0) * V, x + (size_t)b * n * D, Wo, NULL, (size_t)n, D,
                                 V);
    }
    return MEGA_OK;
}

/* T tokens of an ungrouped stream (tokens already checked) */
static mega_status stream_feed_rows(mega_lm_stream *s, const int32_t *tokens, int T, mega_real *logits) {
    mega_lm *m = s->m;
    const mega_lm_config *c = &m->cfg;
    const int B = s->B;
    const size_t D = (size_t)c->block.embed_dim;
    const real *W = m->P.data;
    const real scale = c->scale_embedding ? (real)sqrt((double)D) : (real)1;
    for (int t0 = 0; t0 < T; t0 += s->tmax) {
        const int n = MEGA_MIN(s->tmax, T - t0);
        const size_t R = (size_t)B * n;
        int32_t *tk = s->tok;
        uint8_t *pd = s->pad;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < n; t++) {
                const int32_t v = tokens[(size_t)b * T + t0 + t];
                tk[(size_t)b * n + t] = v;
                pd[(size_t)b * n + t] = c->padding_idx >= 0 && v == c->padding_idx;
            }
        if (m->has_ai) mega_adaptive_input_forward(&m->ai, W, s->x, tk, pd, R, scale, s->ascr, s->aorder);
        else mega_embedding_forward(s->x, W + m->emb, tk, pd, R, D, scale);
        feed_piece f = {s, logits, T, t0, n};
        /* the adaptive softmax opens regions of its own (GEMMs, rows): no team around it */
        MEGA_TRY(stream_team_ok(m, R) ? mega_step_team_run(&s->tune, R, feed_layers, &f) : feed_layers(&f));
        s->pos += n;
    }
    return MEGA_OK;
}

/* a grouped feed: group g takes sequences [group_first(g), group_first(g + 1)) */
typedef struct {
    mega_lm_stream *s;
    const int32_t *tokens;
    mega_real *logits;
    int T;
} group_feed;

static void group_piece(void *arg, int g) {
    const group_feed *a = arg;
    mega_lm_stream *s = a->s;
    const size_t b0 = (size_t)group_first(s, g), T = (size_t)a->T, V = (size_t)s->m->cfg.vocab_size;
    s->gst[g] = stream_feed_rows(s->group[g], a->tokens + b0 * T, a->T, a->logits ? a->logits + b0 * T * V : NULL);
    /* the message is this thread's (error.c): kept for the caller's thread */
    if (s->gst[g]) snprintf(s->gerr[g], sizeof s->gerr[g], "%s", mega_last_error());
}

/* the groups one after the other, up to the first that fails */
static void groups_in_turn(const group_feed *a) {
    for (int g = 0; g < a->s->ngroups; g++) {
        group_piece((void *)a, g);
        if (a->s->gst[g]) break;
    }
}

/* a grouped feed of rows the step products take (every row the bits it has alone): on a team of
 * at most as many threads as groups, the groups side by side; on one thread, or a team larger
 * than the groups (the threads would sit idle), the whole batch in one pass when it fits (each
 * weight read once; the products split over the team's threads), else the groups one after the
 * other */
static mega_status group_body(void *arg) {
    const group_feed *a = arg;
    mega_lm_stream *s = a->s;
    const int th = mega_step_threads();
    if (th > 1 && th <= s->ngroups) mega_step_parallel(s->ngroups, group_piece, (void *)a, 1);
    else if (stream_team_ok(s->m, (size_t)s->B * a->T)) return stream_feed_rows(s, a->tokens, a->T, a->logits);
    else groups_in_turn(a);
    return MEGA_OK;
}

static mega_status check_tokens(const mega_lm_config *c, const int32_t *tokens, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            MEGA_FAIL(MEGA_ERR_INVALID, "token %d is outside the vocabulary of %d", tokens[i], c->vocab_size);
    return MEGA_OK;
}

mega_status mega_lm_stream_feed(mega_lm_stream *s, const int32_t *tokens, int T, mega_real *logits) {
    mega_lm *m = s->m;
    const mega_lm_config *c = &m->cfg;
    const int B = s->B;
    if (T < 0) MEGA_FAIL(MEGA_ERR_INVALID, "stream feed of %d tokens", T);
    if (s->stepv) MEGA_FAIL(MEGA_ERR_INVALID, "a stream fed by rows is fed by rows until it is reset");
    /* the whole call is checked first: a bad token or an overflowing cache feeds nothing */
    MEGA_TRY(check_tokens(c, tokens, (size_t)B * (size_t)T));
    mega_block_context x;
    mega_block_context_of(&c->block, s->cap, &x);
    if (x.cache_full && s->pos + T > s->cap)
        MEGA_FAIL(MEGA_ERR_INVALID, "stream of %lld tokens exceeds the %s cache capacity %d", (long long)(s->pos + T),
                  mega_mixer_name(c->block.mixer), s->cap);
    if (!s->group) return stream_feed_rows(s, tokens, T, logits);
    if (T == 0) return MEGA_OK;
    const int G = s->ngroups;
    const int64_t pos = s->pos + T;
    int bmax = 0;
    for (int g = 0; g < G; g++) bmax = MEGA_MAX(bmax, group_first(s, g + 1) - group_first(s, g));
    group_feed a = {s, tokens, logits, T};
    for (int g = 0; g < G; g++) s->gst[g] = MEGA_OK;
    mega_status st = MEGA_OK;
    if (stream_team_ok(m, (size_t)bmax * T)) {
        /* a token (or a few): the step team's tuner picks the groups side by side or one thread */
        st = mega_step_team_run(&s->tune, (size_t)B * T, group_body, &a);
    } else {
        /* a prompt: the groups one after the other, each with the threads (GEMMs whose bits
         * depend on the rows multiplied together: always the same groups) */
        groups_in_turn(&a);
    }
    for (int g = 0; g < G && !st; g++)
        if (s->gst[g]) st = mega__error(s->gst[g], "%s", s->gerr[g]);
    if (st) return st;
    stream_set_pos(s, pos);
    return MEGA_OK;
}

/* ---- rows: sequences at their own positions (continuous batching) ----------------------------
 * The state keeps B sequences; rows 0 .. nrows-1 are in use, row b at position rpos[b]. A row's
 * prompt goes through a view of that one sequence (stream_alloc's views, as the groups above),
 * fed as a stream of one sequence is fed (the same GEMMs over the same rows: the same bits as a
 * stream of its own); a step goes through a view of the first nrows sequences with the positions
 * rpos (mega_mixer_state.rpos: the Mega step attends each row over its own cached positions).
 * The step's products give every row the sum it has alone (gemm.c, step_dots) and the rest of a
 * step is per row, so a row's tokens do not depend on the rows beside it. A row that leaves is
 * replaced by the last one (mega_block_state_reorder), so a step always covers rows 0 .. n-1. */

/* the views and buffers, made on the first row (a stream never fed by rows has none) */
static mega_status rows_ready(mega_lm_stream *s) {
    if (s->stepv) return MEGA_OK;
    mega_lm *m = s->m;
    if (!(mega_mixer_ops_of(m->cfg.block.mixer)->flags & MEGA_MIXER_ROWS))
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "a stream's rows need the Mega or Megalodon mixer (this model's is %s)",
                  mega_mixer_name(m->cfg.block.mixer));
    if (s->pos) MEGA_FAIL(MEGA_ERR_INVALID, "a stream fed as a whole is fed by rows only after a reset");
    const size_t per = mega_block_state_size(&m->st.blocks[0], s->B, s->cap);
    s->rpos = calloc((size_t)s->B, sizeof *s->rpos);
    s->ridx = calloc((size_t)s->B, sizeof *s->ridx);
    s->rtmp = mega__calloc(per, sizeof(real));
    mega_status st = !s->rpos || !s->ridx || !s->rtmp ? mega__error(MEGA_ERR_OOM, "out of memory allocating a stream's rows")
                     : stream_alloc(m, 1, s->cap, s, 0, &s->rowv);
    mega_lm_stream *v = NULL;
    if (!st) st = stream_alloc(m, s->B, s->cap, s, 0, &v);
    if (st) return rows_drop(s), st;
    for (int l = 0; l < m->cfg.layers; l++) v->S[l].rpos = s->rpos;
    s->stepv = v; /* last: the mark that the rows are ready */
    return MEGA_OK;
}

/* point the one-sequence view at row b */
static void rows_view(mega_lm_stream *s, int b) {
    mega_lm_stream *v = s->rowv;
    v->pos = s->rpos[b];
    for (int l = 0; l < s->m->cfg.layers; l++) v->S[l].b0 = b, v->S[l].pos = s->rpos[b];
    if (v->tfs_view) tfs_at(v, s, b);
}

mega_status mega_lm_stream_row_add(mega_lm_stream *s, int *row) {
    *row = -1;
    MEGA_TRY(rows_ready(s));
    if (s->nrows == s->B) MEGA_FAIL(MEGA_ERR_INVALID, "every row of the stream is in use (%d)", s->B);
    const int b = s->nrows;
    s->rpos[b] = 0;
    rows_view(s, b);
    /* the view's reset clears its own sequence only (MEGA_MIXER_ROWS) */
    for (int l = 0; l < s->m->cfg.layers; l++) mega_block_state_reset(&s->m->st.blocks[l], &s->rowv->S[l]);
    if (s->rowv->tfs_view) mega_tsnorm_state_prior(&s->m->st.tfnorm, s->m->P.data, &s->rowv->tfs, 1);
    s->nrows++;
    *row = b;
    return MEGA_OK;
}

/* the cache of a mixer that keeps the whole stream: rows' positions + T within the capacity */
static mega_status rows_fit(const mega_lm_stream *s, int b0, int n, int T) {
    mega_block_context x;
    mega_block_context_of(&s->m->cfg.block, s->cap, &x);
    for (int b = b0; x.cache_full && b < b0 + n; b++)
        if (s->rpos[b] + T > s->cap)
            MEGA_FAIL(MEGA_ERR_INVALID, "row %d: stream of %lld tokens exceeds the cache capacity %d", b,
                      (long long)(s->rpos[b] + T), s->cap);
    return MEGA_OK;
}

mega_status mega_lm_stream_row_feed(mega_lm_stream *s, int row, const int32_t *tokens, int T, mega_real *logits) {
    if (row < 0 || row >= s->nrows) MEGA_FAIL(MEGA_ERR_INVALID, "row %d is not in use (%d rows)", row, s->nrows);
    if (T < 0) MEGA_FAIL(MEGA_ERR_INVALID, "stream feed of %d tokens", T);
    MEGA_TRY(check_tokens(&s->m->cfg, tokens, (size_t)T));
    MEGA_TRY(rows_fit(s, row, 1, T));
    rows_view(s, row);
    MEGA_TRY(stream_feed_rows(s->rowv, tokens, T, logits));
    s->rpos[row] += T;
    return MEGA_OK;
}

mega_status mega_lm_stream_rows_step(mega_lm_stream *s, const int32_t *tokens, mega_real *logits) {
    return mega_lm_stream_rows_step_n(s, s->nrows, tokens, logits);
}

/* the step's view covers the first n rows; the rows after them are not read nor written */
mega_status mega_lm_stream_rows_step_n(mega_lm_stream *s, int n, const int32_t *tokens, mega_real *logits) {
    if (n < 0 || n > s->nrows) MEGA_FAIL(MEGA_ERR_INVALID, "a step of %d rows (%d in use)", n, s->nrows);
    if (n == 0) return MEGA_OK;
    MEGA_TRY(check_tokens(&s->m->cfg, tokens, (size_t)n));
    MEGA_TRY(rows_fit(s, 0, n, 1));
    mega_lm_stream *v = s->stepv;
    v->B = n;
    for (int l = 0; l < s->m->cfg.layers; l++) v->S[l].B = n;
    MEGA_TRY(stream_feed_rows(v, tokens, 1, logits));
    for (int b = 0; b < n; b++) s->rpos[b]++;
    return MEGA_OK;
}

/* row a takes row b's place in every state a row has (the blocks', the final timestep norm's of
 * Megalodon, the position); with swap, row b takes a's too (else b's is left as it was) */
static mega_status rows_move(mega_lm_stream *s, int a, int b, int swap) {
    for (int i = 0; i < s->B; i++) s->ridx[i] = i;
    s->ridx[a] = b;
    if (swap) s->ridx[b] = a;
    for (int l = 0; l < s->m->cfg.layers; l++) MEGA_TRY(mega_block_state_reorder(&s->m->st.blocks[l], &s->S[l], s->ridx, s->rtmp));
    if (s->tfs.count) {
        const size_t G2 = 2 * (size_t)s->m->st.tfnorm.G;
        real *ma = s->tfs.mv + (size_t)a * G2, *mb = s->tfs.mv + (size_t)b * G2;
        const int64_t c = s->tfs.count[a];
        s->tfs.count[a] = s->tfs.count[b];
        if (swap) s->tfs.count[b] = c;
        for (size_t i = 0; i < G2; i++) {
            const real t = ma[i];
            ma[i] = mb[i];
            if (swap) mb[i] = t;
        }
    }
    const int64_t p = s->rpos[a];
    s->rpos[a] = s->rpos[b];
    if (swap) s->rpos[b] = p;
    return MEGA_OK;
}

mega_status mega_lm_stream_row_remove(mega_lm_stream *s, int row) {
    if (row < 0 || row >= s->nrows) MEGA_FAIL(MEGA_ERR_INVALID, "row %d is not in use (%d rows)", row, s->nrows);
    const int last = --s->nrows;
    return row == last ? MEGA_OK : rows_move(s, row, last, 0);
}

mega_status mega_lm_stream_row_swap(mega_lm_stream *s, int a, int b) {
    if (a < 0 || a >= s->nrows || b < 0 || b >= s->nrows)
        MEGA_FAIL(MEGA_ERR_INVALID, "rows %d and %d: not both in use (%d rows)", a, b, s->nrows);
    return a == b ? MEGA_OK : rows_move(s, a, b, 1);
}

int mega_lm_stream_rows(const mega_lm_stream *s) { return s->nrows; }

int64_t mega_lm_stream_row_pos(const mega_lm_stream *s, int row) {
    return row >= 0 && row < s->nrows ? s->rpos[row] : -1;
}
