/*
 * Mega encoder–decoder (official fairseq/models/mega.py MegaModel; docs/translation.md):
 *
 *   encoder (MegaEncoder.forward), src [B,S] right-padded to a chunk multiple when ragged:
 *     x = embed_scale * Emb_src[src]; x = embed_norm(x) (normalize_embedding); dropout; x *= valid
 *     x = block_l(x, pad) for the bidirectional blocks; x = final_norm(x) (prenorm); x *= valid
 *     e = x[:, :S]                                         (the encoder output, [B,S,D])
 *   decoder (MegaDecoder.extract_features_scriptable), prev [B,L], padded likewise:
 *     y = embed_scale * Emb_tgt[prev]; embed_norm; dropout; y *= valid
 *     per layer (MegaDecoderLayer.forward): y = self(y, pad, causal) -> cross_attn(y, e, src pad)
 *                                           -> nffn(y)
 *     y = final_norm(y) (prenorm); y *= valid; logits = y[:, :L] W^T (no bias)
 *   W = output_projection, or Emb_tgt (share_decoder_input_output_embed), Emb_tgt = Emb_src
 *   (share_all_embeddings).
 * Loss: fairseq label_smoothed_cross_entropy over the targets that are not padding_idx (mean).
 */
#include "model/s2s.h"
#include "model/modelio.h"

#include <stddef.h>

enum { SITE_EMBED = 7 };

void mega_s2s_config_default(mega_s2s_config *c) {
    memset(c, 0, sizeof *c);
    c->src_vocab_size = c->tgt_vocab_size = 258;
    c->padding_idx = 256, c->eos_idx = 257;
    c->encoder_layers = c->decoder_layers = 2;
    mega_block_config_default(&c->encoder);
    c->encoder.chunk_size = -1;
    c->encoder.bidirectional = 1;
    c->decoder = c->encoder;
    c->decoder.bidirectional = 0;
    c->final_norm_affine = 1;
    c->scale_embedding = 1;
    c->tie_embeddings = 1;
    c->cross_attention = 0; /* auto */
    c->cross_memory = MEGA_DEFAULT_MEMORY;
}

/* the cross-attention choices; after "auto", in the order of mega_xattn_kind */
static const char *const CROSS_NAMES[] = {"auto", "gated", "mha", "abc-window", "abc-linformer", "abc-mlp"};
#define N_CROSS ((int)(sizeof CROSS_NAMES / sizeof *CROSS_NAMES))
_Static_assert(N_CROSS == MEGA_XATTN_ABC_MLP + 2, "one cross-attention name per mega_xattn_kind, after auto");

/* the resolved kind of a config (auto: the decoder mixer's default) */
static mega_xattn_kind cross_kind(const mega_s2s_config *c) {
    return c->cross_attention > 0 ? (mega_xattn_kind)(c->cross_attention - 1) : mega_xattn_default_kind(&c->decoder);
}

const char *mega_s2s_cross_attention_name(const mega_s2s_config *c, char *buf, size_t n) {
    const mega_xattn_kind k = cross_kind(c);
    if (k == MEGA_XATTN_GATED) snprintf(buf, n, "gated");
    else if (k == MEGA_XATTN_MHA) snprintf(buf, n, "multi-head");
    else snprintf(buf, n, "%s (%d slots)", CROSS_NAMES[k + 1], c->cross_memory);
    return buf;
}

#define OFF(f) offsetof(mega_s2s_config, f)
static const mega_field S2S_FIELDS[] = {
    {"src-vocab-size", MEGA_FIELD_INT, OFF(src_vocab_size), 2, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0, "source vocabulary size"},
    {"tgt-vocab-size", MEGA_FIELD_INT, OFF(tgt_vocab_size), 2, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0, "target vocabulary size"},
    {"padding-idx", MEGA_FIELD_INT, OFF(padding_idx), 0, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0, "padding token"},
    {"eos-idx", MEGA_FIELD_INT, OFF(eos_idx), 0, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0, "end-of-sentence token"},
    {"encoder-layers", MEGA_FIELD_INT, OFF(encoder_layers), 1, 1024, NULL, 0, 0, 0, "encoder blocks"},
    {"decoder-layers", MEGA_FIELD_INT, OFF(decoder_layers), 1, 1024, NULL, 0, 0, 0, "decoder layers"},
    {"final-norm-affine", MEGA_FIELD_BOOL, OFF(final_norm_affine), 0, 1, NULL, 0, 0, 0,
     "learned scale and shift in the final norms (pre-norm models)"},
    {"scale-embedding", MEGA_FIELD_BOOL, OFF(scale_embedding), 0, 1, NULL, 0, 0, 0, "multiply the embeddings by sqrt(embed-dim)"},
    {"normalize-embedding", MEGA_FIELD_BOOL, OFF(normalize_embedding), 0, 1, NULL, 0, 0, 0,
     "a norm after the embeddings (post-norm models)"},
    {"share-all-embeddings", MEGA_FIELD_BOOL, OFF(share_all_embeddings), 0, 1, NULL, 0, 0, 0,
     "one table for source, target and output (joined vocabulary)"},
    {"tie-embeddings", MEGA_FIELD_BOOL, OFF(tie_embeddings), 0, 1, NULL, 0, 0, 0, "output projection = the target embedding"},
    {"cross-attention", MEGA_FIELD_CHOICE, OFF(cross_attention), 0, N_CROSS - 1, CROSS_NAMES, N_CROSS, 0, 0,
     "the decoder's cross-attention: auto (gated with the mega mixer, mha otherwise), gated, mha, or a bounded "
     "memory of --cross-memory slots (abc-window, abc-linformer, abc-mlp; docs/translation.md)"},
    /* 0 is only refused for the abc-* kinds (mega_s2s_config_check): a config made without
     * mega_s2s_config_default, with zeros, stays valid for the full kinds */
    {"cross-memory", MEGA_FIELD_INT, OFF(cross_memory), 0, 65536, NULL, 0, 0, 0,
     "memory slots per head of the abc-* cross-attention (a decoding step reads these, whatever the source length)"},
};
#undef OFF

const mega_field *mega_s2s_config_fields(int *count) {
    *count = (int)(sizeof S2S_FIELDS / sizeof *S2S_FIELDS);
    return S2S_FIELDS;
}

void mega_s2s_config_resolve(mega_s2s_config *c) {
    c->encoder.bidirectional = 1, c->decoder.bidirectional = 0;
    mega_block_config_resolve(&c->encoder);
    mega_block_config_resolve(&c->decoder);
    if (c->share_all_embeddings) c->tie_embeddings = 1; /* official build_model */
    if (c->cross_attention == 0 && (unsigned)c->decoder.mixer < MEGA_MIXER_COUNT)
        c->cross_attention = (int)mega_xattn_default_kind(&c->decoder) + 1;
}

mega_status mega_s2s_config_check(const mega_s2s_config *config) {
    mega_s2s_config c = *config;
    mega_s2s_config_resolve(&c);
    if ((unsigned)c.cross_attention < (unsigned)N_CROSS && cross_kind(&c) >= MEGA_XATTN_ABC_WINDOW &&
        (c.cross_memory < 1 || c.cross_memory > 65536))
        MEGA_FAIL(MEGA_ERR_INVALID, "cross-memory must be in [1, 65536] (the slots per head of the %s cross-attention), got %d",
                  CROSS_NAMES[cross_kind(&c) + 1], c.cross_memory);
    int n;
    const mega_field *f = mega_s2s_config_fields(&n);
    MEGA_TRY(mega__fields_check(f, n, &c));
    const int V = MEGA_MIN(c.src_vocab_size, c.tgt_vocab_size);
    if (c.padding_idx >= V) MEGA_FAIL(MEGA_ERR_INVALID, "padding index %d is outside the vocabulary of %d", c.padding_idx, V);
    if (c.eos_idx >= V) MEGA_FAIL(MEGA_ERR_INVALID, "eos index %d is outside the vocabulary of %d", c.eos_idx, V);
    if (c.eos_idx == c.padding_idx) MEGA_FAIL(MEGA_ERR_INVALID, "eos and padding must be different tokens (both %d)", c.eos_idx);
    if (c.encoder.embed_dim != c.decoder.embed_dim)
        MEGA_FAIL(MEGA_ERR_INVALID, "encoder embed-dim %d must equal the decoder's %d (the cross-attention projects the "
                  "encoder output with the decoder's weights)", c.encoder.embed_dim, c.decoder.embed_dim);
    if (c.share_all_embeddings && c.src_vocab_size != c.tgt_vocab_size)
        MEGA_FAIL(MEGA_ERR_INVALID, "share-all-embeddings needs one joined vocabulary (source %d, target %d)",
                  c.src_vocab_size, c.tgt_vocab_size);
    if (c.normalize_embedding && (c.encoder.prenorm || c.decoder.prenorm))
        MEGA_FAIL(MEGA_ERR_INVALID, "normalize-embedding is for post-norm models (the official encoder asserts it)");
    if (c.encoder.norm_type == MEGA_NORM_BATCH || c.decoder.norm_type == MEGA_NORM_BATCH)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "batchnorm is not available in the encoder-decoder (as in the official model)");
    if (c.encoder.mixer != c.decoder.mixer)
        MEGA_FAIL(MEGA_ERR_INVALID, "encoder and decoder must use the same mixer (%s vs %s)", mega_mixer_name(c.encoder.mixer),
                  mega_mixer_name(c.decoder.mixer));
    MEGA_TRY(mega_block_config_check(&c.encoder));
    return mega_block_config_check(&c.decoder);
}

/* ---- model ------------------------------------------------------------------------------ */

static void free_buffers(mega_s2s *m) {
    free(m->stok), free(m->ttok), free(m->tgt), free(m->spad), free(m->spadc), free(m->tpad);
    real **r[] = {&m->enpre, &m->enstat, &m->dnpre, &m->dnstat, &m->E, &m->dE, &m->H, &m->Y1, &m->Y2, &m->bacts,
                  &m->xacts, &m->facts, &m->xf, &m->fstat, &m->xfc, &m->scratch, &m->g[0], &m->g[1], &m->g[2],
                  &m->logits};
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) mega__free(*r[i]), *r[i] = NULL;
    free(m->BA), free(m->XA), free(m->FA);
    m->stok = m->ttok = m->tgt = NULL, m->spad = m->spadc = m->tpad = NULL;
    m->BA = NULL, m->XA = NULL, m->FA = NULL;
    m->Rs_cap = m->R_cap = m->bper = m->xper = m->fper = m->scr_cap = 0;
}

mega_status mega__s2s_declare(const mega_s2s_config *config, mega_s2s **out) {
    *out = NULL;
    MEGA_TRY(mega_s2s_config_check(config));
    mega_s2s *m = calloc(1, sizeof *m);
    if (!m) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    m->hdr.kind = MEGA_MODEL_S2S;
    m->cfg = *config;
    mega_s2s_config_resolve(&m->cfg);
    const mega_s2s_config *c = &m->cfg;
    m->dec_self = c->decoder;
    m->dec_self.ffn_dim = 0;
    m->Mx = MEGA_MAX(c->encoder.max_positions, c->decoder.max_positions);
    m->recompute = mega_get_recompute() == MEGA_RECOMPUTE_BLOCKS;
    mega_params_init(&m->P);
    mega_status st;
    const int64_t D = c->encoder.embed_dim, Vs = c->src_vocab_size, Vt = c->tgt_vocab_size;
    const int Ld = c->decoder_layers;
    /* official state dict order: encoder (embed, embed_norm, layers, final_norm), decoder */
    if ((st = MEGA_PADD(&m->P, "encoder.", "embed_tokens.weight", MEGA_P_DECAY, &m->src_emb, Vs, D))) goto fail;
    if (c->normalize_embedding &&
        (st = mega_seqnorm_declare(&m->enc_enorm, &m->P, "encoder.embed_norm.norm.", c->encoder.norm_type, (int)D, 1)))
        goto fail;
    if ((st = mega_stack_declare(&m->enc, &m->P, "encoder.layers.", "encoder.final_norm.norm.", &c->encoder,
                                 c->encoder_layers, c->final_norm_affine)))
        goto fail;
    m->tgt_emb = m->src_emb;
    if (!c->share_all_embeddings &&
        (st = MEGA_PADD(&m->P, "decoder.", "embed_tokens.weight", MEGA_P_DECAY, &m->tgt_emb, Vt, D)))
        goto fail;
    if (c->normalize_embedding &&
        (st = mega_seqnorm_declare(&m->dec_enorm, &m->P, "decoder.embed_norm.norm.", c->decoder.norm_type, (int)D, 1)))
        goto fail;
    m->dl = calloc((size_t)Ld, sizeof *m->dl);
    if (!m->dl) {
        st = mega__error(MEGA_ERR_OOM, "out of memory");
        goto fail;
    }
    for (int l = 0; l < Ld; l++) {
        char pre[MEGA_NAME_MAX];
        snprintf(pre, sizeof pre, "decoder.layers.%d.", l);
        if ((st = mega_block_declare(&m->dl[l].self, &m->P, pre, &m->dec_self))) goto fail;
        if ((st = mega_xattn_declare(&m->dl[l].x, &m->P, pre, &c->decoder, cross_kind(c), c->cross_memory, m->Mx)))
            goto fail;
        if (c->decoder.ffn_dim > 0 && (st = mega_nffn_declare(&m->dl[l].ffn, &m->P, pre, &c->decoder))) goto fail;
    }
    m->has_dfnorm = c->decoder.prenorm;
    if (m->has_dfnorm && (st = mega_seqnorm_declare(&m->dfnorm, &m->P, "decoder.final_norm.norm.", c->decoder.norm_type,
                                                    (int)D, c->final_norm_affine)))
        goto fail;
    if (!c->tie_embeddings && (st = MEGA_PADD(&m->P, "decoder.", "output_projection.weight", MEGA_P_DECAY, &m->out_w, Vt, D)))
        goto fail;
    *out = m;
    return MEGA_OK;
fail:
    mega_s2s_free(m);
    return st;
}

mega_status mega_s2s_create_ex(const mega_s2s_config *c, const mega_load_opts *o, mega_s2s **out) {
    mega_model *m;
    mega_status st = mega__model_create(MEGA_MODEL_S2S, c, o, &m);
    *out = (mega_s2s *)m;
    return st;
}

mega_status mega_s2s_create(const mega_s2s_config *c, mega_s2s **out) { return mega_s2s_create_ex(c, NULL, out); }

void mega_s2s_free(mega_s2s *m) {
    if (!m) return;
    free_buffers(m);
    mega_stack_free(&m->enc);
    free(m->dl);
    mega_params_free(&m->P);
    free(m);
}

const mega_s2s_config *mega_s2s_get_config(const mega_s2s *m) { return &m->cfg; }
mega_paramset *mega_s2s_paramset(mega_s2s *m) { return (mega_paramset *)&m->P; }
const mega_real *mega_s2s_logits(const mega_s2s *m) { return m->logits; }
const mega_real *mega_s2s_encoder_out(const mega_s2s *m) { return m->E; }

const mega_real *mega_s2s_hidden(const mega_s2s *m, int side, int i, int *Tp) {
    if (side == 0) {
        if (i < 0 || i > m->cfg.encoder_layers || !m->enc.H) return NULL;
        if (Tp) *Tp = m->Sp;
        return mega_stack_hidden(&m->enc, i);
    }
    if (i < 0 || i > m->cfg.decoder_layers || !m->H) return NULL;
    if (Tp) *Tp = m->Lp;
    return m->H + (size_t)i * m->B * m->Lp * m->cfg.decoder.embed_dim;
}

/* official Embedding(): N(0, D^-1/2) with the padding row zeroed */
static void init_embedding(real *E, size_t V, size_t D, int pad, mega_rng *rng) {
    mega_fill_normal(E, V * D, 0, 1.0 / sqrt((double)D), rng);
    if (pad >= 0 && (size_t)pad < V) memset(E + (size_t)pad * D, 0, D * sizeof(real));
}

void mega_s2s_init_params(mega_s2s *m, uint64_t seed) {
    mega_rng rng;
    mega_rng_seed(&rng, seed);
    const mega_s2s_config *c = &m->cfg;
    const size_t D = (size_t)c->encoder.embed_dim;
    real *W = m->P.data;
    init_embedding(W + m->src_emb, (size_t)c->src_vocab_size, D, c->padding_idx, &rng);
    if (c->normalize_embedding) mega_seqnorm_init(&m->enc_enorm, W);
    mega_stack_init(&m->enc, W, &rng);
    if (!c->share_all_embeddings) init_embedding(W + m->tgt_emb, (size_t)c->tgt_vocab_size, D, c->padding_idx, &rng);
    if (c->normalize_embedding) mega_seqnorm_init(&m->dec_enorm, W);
    for (int l = 0; l < c->decoder_layers; l++) {
        mega_block_init(&m->dl[l].self, W, &rng);
        mega_xattn_init(&m->dl[l].x, W, &rng);
        if (c->decoder.ffn_dim > 0) mega_nffn_init(&m->dl[l].ffn, W, &rng);
    }
    if (m->has_dfnorm) mega_seqnorm_init(&m->dfnorm, W);
    if (!c->tie_embeddings) mega_fill_normal(W + m->out_w, (size_t)c->tgt_vocab_size * D, 0, 1.0 / sqrt((double)D), &rng);
}

int mega__s2s_padded(const mega_block_config *c, int T) {
    mega_block_context x;
    mega_block_context_of(c, T, &x);
    const int k = x.segment; /* a chunk shorter than T, else T */
    return (k < T && T % k) ? (T + k - 1) / k * k : T;
}

int mega__s2s_max_len(const mega_s2s *m) {
    mega_block_context x;
    mega_block_context_of(&m->cfg.decoder, 0, &x);
    int lim = x.positions > 0 ? x.positions : 1 << 20;
    const mega_xattn *X = &m->dl[0].x;
    if (X->kind == MEGA_XATTN_GATED && !X->rp.rotary) lim = MEGA_MIN(lim, X->M);
    return lim;
}

/* the capacities a batch B x S -> L needs: rows of each side, activation reals per decoder layer
 * (block, cross-attention, FFN), scratch reals */
typedef struct {
    size_t Rs, R, bper, xper, fper, scr;
} s2s_caps;

static s2s_caps caps_for(const mega_s2s *m, int B, int S, int L) {
    const mega_s2s_config *c = &m->cfg;
    const int Lp = mega__s2s_padded(&c->decoder, L), nt = mega_get_threads();
    mega_xattn_acts xa;
    mega_nffn_acts fa;
    s2s_caps k;
    k.Rs = (size_t)B * mega__s2s_padded(&c->encoder, S), k.R = (size_t)B * Lp;
    k.bper = mega_block_acts_size(&m->dl[0].self, B, Lp);
    k.xper = mega_xattn_acts_view(&m->dl[0].x, &xa, NULL, B, Lp, S);
    k.fper = c->decoder.ffn_dim > 0 ? mega_nffn_acts_point(&m->dl[0].ffn, &fa, NULL, B, Lp) : 0;
    k.scr = mega_block_scratch_size(&m->dl[0].self, B, Lp, nt);
    k.scr = MEGA_MAX(k.scr, mega_xattn_scratch_size(&m->dl[0].x, B, Lp, S, nt));
    if (c->decoder.ffn_dim > 0) k.scr = MEGA_MAX(k.scr, mega_nffn_scratch(&m->dl[0].ffn, B, Lp));
    return k;
}

/* the bytes free_buffers releases for capacities k: every buffer mega__s2s_reserve allocates */
static size_t caps_bytes(const mega_s2s *m, const s2s_caps *k) {
    const mega_s2s_config *c = &m->cfg;
    const size_t Ld = (size_t)c->decoder_layers, D = (size_t)c->encoder.embed_dim;
    const size_t V = (size_t)MEGA_MAX(c->tgt_vocab_size, 1), Rs = k->Rs, R = k->R;
    const size_t nst = 2 * MEGA_MAX(Rs, R) + 2 * D + 16;
    const size_t slots = m->recompute ? 1 : Ld; /* of Y1, Y2 and the layers' activations */
    const size_t reals = Rs * D * 3 + R * D * 3 + 3 * nst + R * D * (Ld + 1) + 2 * R * D * slots +
                         (k->bper + k->xper + k->fper) * slots + k->scr + 3 * MEGA_MAX(R, Rs) * D + R * V + R;
    return reals * sizeof(real) + (Rs + 2 * R) * sizeof(int32_t) + 2 * Rs + R +
           Ld * (sizeof(mega_block_acts) + sizeof(mega_xattn_acts) + sizeof(mega_nffn_acts));
}

/* Capacities, not shapes (as mega_stack_reserve): batches by tokens vary B, S and L together */
mega_status mega__s2s_reserve(mega_s2s *m, int B, int S, int L) {
    const mega_s2s_config *c = &m->cfg;
    if (B < 1 || S < 1 || L < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "batch, source and target lengths must be positive (got %d, %d, %d)", B, S, L);
    const int Sp = mega__s2s_padded(&c->encoder, S);
    MEGA_TRY(mega_stack_reserve(&m->enc, B, Sp));
    const int Ld = c->decoder_layers;
    const size_t D = (size_t)c->encoder.embed_dim;
    const s2s_caps k = caps_for(m, B, S, L);
    size_t Rs = k.Rs, R = k.R, bper = k.bper, xper = k.xper, fper = k.fper, scr = k.scr;
    if (m->H && Rs <= m->Rs_cap && R <= m->R_cap && bper <= m->bper && xper <= m->xper && fper <= m->fper &&
        scr <= m->scr_cap)
        return MEGA_OK;
    Rs = MEGA_MAX(Rs, m->Rs_cap), R = MEGA_MAX(R, m->R_cap), bper = MEGA_MAX(bper, m->bper);
    xper = MEGA_MAX(xper, m->xper), fper = MEGA_MAX(fper, m->fper), scr = MEGA_MAX(scr, m->scr_cap);
    free_buffers(m);
    const size_t V = (size_t)MEGA_MAX(c->tgt_vocab_size, 1);
    const size_t nst = 2 * MEGA_MAX(Rs, R) + 2 * D + 16;
    m->stok = calloc(Rs, sizeof(int32_t)), m->ttok = calloc(R, sizeof(int32_t)), m->tgt = calloc(R, sizeof(int32_t));
    m->spad = calloc(Rs, 1), m->spadc = calloc(Rs, 1), m->tpad = calloc(R, 1);
    m->enpre = mega__calloc(Rs * D, sizeof(real)), m->enstat = mega__calloc(nst, sizeof(real));
    m->dnpre = mega__calloc(R * D, sizeof(real)), m->dnstat = mega__calloc(nst, sizeof(real));
    m->E = mega__calloc(Rs * D, sizeof(real)), m->dE = mega__calloc(Rs * D, sizeof(real));
    const size_t slots = m->recompute ? 1 : (size_t)Ld;
    m->H = mega__calloc(R * D * (size_t)(Ld + 1), sizeof(real));
    m->Y1 = mega__calloc(R * D * slots, sizeof(real)), m->Y2 = mega__calloc(R * D * slots, sizeof(real));
    m->bacts = mega__calloc(bper * slots, sizeof(real));
    m->xacts = mega__calloc(xper * slots, sizeof(real));
    m->facts = fper ? mega__calloc(fper * slots, sizeof(real)) : NULL;
    m->BA = calloc((size_t)Ld, sizeof *m->BA), m->XA = calloc((size_t)Ld, sizeof *m->XA);
    m->FA = calloc((size_t)Ld, sizeof *m->FA);
    m->xf = mega__calloc(R * D, sizeof(real)), m->fstat = mega__calloc(nst, sizeof(real));
    m->xfc = mega__calloc(R * D, sizeof(real));
    m->scratch = mega__calloc(scr, sizeof(real));
    for (int i = 0; i < 3; i++) m->g[i] = mega__calloc(MEGA_MAX(R, Rs) * D, sizeof(real));
    m->logits = mega__calloc(R * V + R, sizeof(real));
    int ok = m->stok && m->ttok && m->tgt && m->spad && m->spadc && m->tpad && m->enpre && m->enstat && m->dnpre &&
             m->dnstat && m->E && m->dE && m->H && m->Y1 && m->Y2 && m->bacts && m->xacts && (m->facts || !fper) &&
             m->BA && m->XA && m->FA && m->xf && m->fstat && m->xfc && m->scratch && m->g[0] && m->g[1] && m->g[2] &&
             m->logits;
    if (!ok) {
        const s2s_caps kk = {Rs, R, bper, xper, fper, scr};
        size_t mb = caps_bytes(m, &kk) >> 20;
        free_buffers(m);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory reserving buffers for %d sentences of %d -> %d tokens (about %zu MiB)", B, S,
                  L, mb);
    }
    m->lse = m->logits + R * V;
    m->Rs_cap = Rs, m->R_cap = R, m->bper = bper, m->xper = xper, m->fper = fper, m->scr_cap = scr;
    return MEGA_OK;
}

mega_status mega_s2s_memory(const mega_s2s_config *c, int training, int B, int S, int L, mega_memory *out) {
    memset(out, 0, sizeof *out);
    if (B < 0 || (B > 0 && (S < 1 || L < 1)))
        MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_memory: bad batch %d x (%d -> %d)", B, S, L);
    mega_s2s *m;
    MEGA_TRY(mega__s2s_declare(c, &m));
    size_t buffers = 0;
    if (B > 0) {
        const s2s_caps k = caps_for(m, B, S, L);
        buffers = caps_bytes(m, &k) + mega__stack_bytes(&m->enc, B, mega__s2s_padded(&c->encoder, S));
    }
    mega__memory_fill(out, &m->P, training, buffers);
    mega_s2s_free(m);
    return MEGA_OK;
}

mega_status mega_s2s_search_memory(const mega_s2s_config *c, int B, int S, const mega_s2s_search *p, size_t *bytes) {
    *bytes = 0;
    if (B < 1 || S < 1 || !p || p->beam < 1) MEGA_FAIL(MEGA_ERR_INVALID, "mega_s2s_search_memory: bad arguments");
    mega_s2s *m;
    MEGA_TRY(mega__s2s_declare(c, &m));
    const mega_block_config *d = &m->cfg.decoder;
    const int K = p->beam, G = K > 1 ? K + 1 : 1, R = B * G, Ld = m->cfg.decoder_layers;
    const size_t D = (size_t)d->embed_dim, V = (size_t)m->cfg.tgt_vocab_size;
    /* the sizes of mega_s2s_translate (s2s_gen.c): the decoded length, the stream's state
     * (mega_s2s_stream_new: self-attention state, cross-attention keys and values, the encoder
     * output per row, scratch) and the search's arrays; the sources' encoding (mega__s2s_reserve) */
    const double ml = MEGA_MIN(p->max_len_a * S + p->max_len_b, (double)(mega__s2s_max_len(m) - 1));
    const int tmax = MEGA_MAX((int)ml, 1) + 1;
    mega_block_context x;
    mega_block_context_of(d, tmax, &x);
    const int cap = x.cache;
    const size_t sper = mega_block_state_size(&m->dl[0].self, R, cap), xper = mega_xattn_state_size(&m->dl[0].x, R, S, tmax);
    size_t scr = MEGA_MAX(mega_block_step_scratch(&m->dl[0].self, R, 1, cap), mega_xattn_step_scratch(&m->dl[0].x, R, S));
    if (d->ffn_dim > 0) scr = MEGA_MAX(scr, mega_nffn_step_scratch(&m->dl[0].ffn, (size_t)R));
    const size_t stream = (sper * Ld + xper * Ld + (size_t)R * S * D + 2 * (size_t)R * D + 2 * (size_t)R + 2 * D + scr + sper) *
                              sizeof(real) + (size_t)R * S;
    const size_t search = (size_t)R * V * sizeof(real) + 3 * (size_t)R * tmax * sizeof(int32_t) + 2 * (size_t)K * V * 16;
    const s2s_caps k = caps_for(m, B, S, 1);
    *bytes = stream + search + caps_bytes(m, &k) + mega__stack_bytes(&m->enc, B, mega__s2s_padded(&m->cfg.encoder, S));
    mega_s2s_free(m);
    return MEGA_OK;
}

/* tokens [B,T] padded to Tp with padding_idx into tok/pad; returns whether any is pad */
static mega_status load_tokens(const mega_s2s *m, const int32_t *in, int B, int T, int Tp, int V, int32_t *tok,
                               uint8_t *pad, const char *what, int *any) {
    const int P = m->cfg.padding_idx;
    *any = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tp; t++) {
            int32_t v = t < T ? in[(size_t)b * T + t] : P;
            if (v < 0 || v >= V) MEGA_FAIL(MEGA_ERR_INVALID, "%s token %d at [%d, %d] is outside the vocabulary of %d", what, v, b, t, V);
            const size_t r = (size_t)b * Tp + t;
            tok[r] = v;
            pad[r] = v == P;
            *any |= pad[r];
        }
    return MEGA_OK;
}

/* x [R,D] = embed_scale * Emb[tok] -> embed norm -> dropout -> zero pads */
static void embed_forward(const mega_s2s *m, real *x, size_t emb, const mega_seqnorm *en, real *npre, real *nstat,
                          const int32_t *tok, const uint8_t *pad, size_t R, int training, uint64_t key) {
    const mega_s2s_config *c = &m->cfg;
    const size_t D = (size_t)c->encoder.embed_dim;
    const real scale = c->scale_embedding ? (real)sqrt((double)D) : (real)1;
    real *W = m->P.data;
    if (c->normalize_embedding) {
        mega_embedding_forward(npre, W + emb, tok, pad, R, D, scale);
        mega_seqnorm_forward(en, W, x, nstat, npre, R, training, training, &m->bnsync);
    } else {
        mega_embedding_forward(x, W + emb, tok, pad, R, D, scale);
    }
    if (training && c->encoder.dropout > 0) mega_dropout(x, x, R * D, c->encoder.dropout, key);
    for (size_t r = 0; r < R; r++)
        if (pad[r]) memset(x + r * D, 0, D * sizeof(real));
}

static void embed_backward(mega_s2s *m, real *dx, size_t emb, const mega_seqnorm *en, const real *npre,
                           const real *nstat, const int32_t *tok, const uint8_t *pad, size_t R, int training,
                           uint64_t key, real *tmp) {
    const mega_s2s_config *c = &m->cfg;
    const size_t D = (size_t)c->encoder.embed_dim;
    const real scale = c->scale_embedding ? (real)sqrt((double)D) : (real)1;
    for (size_t r = 0; r < R; r++)
        if (pad[r]) memset(dx + r * D, 0, D * sizeof(real));
    if (training && c->encoder.dropout > 0) mega_dropout(dx, dx, R * D, c->encoder.dropout, key);
    if (c->normalize_embedding) {
        mega_seqnorm_backward(en, m->P.data, m->P.grad, tmp, dx, npre, nstat, R, training, 0, &m->bnsync);
        dx = tmp;
    }
    mega_embedding_backward(m->P.grad + emb, dx, tok, pad, R, D, scale, c->padding_idx);
}

mega_status mega__s2s_encode(mega_s2s *m, const int32_t *src, int B, int S, int training, uint64_t key) {
    const mega_s2s_config *c = &m->cfg;
    const int Sp = mega__s2s_padded(&c->encoder, S);
    const size_t D = (size_t)c->encoder.embed_dim, Rs = (size_t)B * Sp;
    int any;
    MEGA_TRY(load_tokens(m, src, B, S, Sp, c->src_vocab_size, m->stok, m->spad, "source", &any));
    real *H0 = mega_stack_input(&m->enc);
    embed_forward(m, H0, m->src_emb, &m->enc_enorm, m->enpre, m->enstat, m->stok, m->spad, Rs, training,
                  mega__subkey(key, SITE_EMBED));
    const real *out;
    MEGA_TRY(mega_stack_forward(&m->enc, m->P.data, any ? m->spad : NULL, B, Sp, training, mega__subkey(key, 1), &out));
    /* the encoder output drops the positions added for a ragged chunk (official) */
    int anyc = 0;
    for (int b = 0; b < B; b++) {
        memcpy(m->E + (size_t)b * S * D, out + (size_t)b * Sp * D, (size_t)S * D * sizeof(real));
        for (int t = 0; t < S; t++) anyc |= (m->spadc[(size_t)b * S + t] = m->spad[(size_t)b * Sp + t]);
    }
    m->src_any_pad = anyc;
    m->B = B, m->S = S, m->Sp = Sp;
    return MEGA_OK;
}

static mega_run layer_run(const mega_s2s *m, int l, int training, uint64_t key) {
    mega_run r = {training, training, mega__subkey(key, 200 + (uint64_t)l), m->enc.nthreads, &m->bnsync};
    return r;
}
static mega_run cross_run(const mega_run *r) {
    mega_run x = *r;
    x.key = mega__subkey(r->key, 77);
    return x;
}

/* Y1 and Y2 of decoder layer l: its own slot, or the one slot every layer shares with recompute */
static real *layer_y(const mega_s2s *m, real *Y, int l) {
    return Y + (size_t)(m->recompute ? 0 : l) * m->B * m->Lp * m->cfg.decoder.embed_dim;
}

/* decoder layer l (official MegaDecoderLayer.forward): H[l] -> self -> Y1 -> cross-attention to
 * the encoder output E -> Y2 -> FFN -> H[l+1], its activations in its slot. With recompute the
 * backward calls it again for the layers below the last (mega_s2s_backward). */
static mega_status decoder_layer_forward(mega_s2s *m, int l, int train, int update) {
    const mega_s2s_config *c = &m->cfg;
    const int B = m->B, Lp = m->Lp, S = m->S, sl = m->recompute ? 0 : l;
    const size_t D = (size_t)c->decoder.embed_dim, R = (size_t)B * Lp;
    const uint8_t *tpad = m->tgt_any_pad ? m->tpad : NULL, *spad = m->src_any_pad ? m->spadc : NULL;
    real *W = m->P.data;
    mega_declayer *dl = &m->dl[l];
    mega_run r = layer_run(m, l, train, m->run.key);
    r.update_stats = update && train;
    const mega_run rx = cross_run(&r);
    real *in = m->H + (size_t)l * R * D, *out = m->H + (size_t)(l + 1) * R * D;
    real *y1 = layer_y(m, m->Y1, l), *y2 = c->decoder.ffn_dim > 0 ? layer_y(m, m->Y2, l) : out;
    mega_block_acts_point(&dl->self, &m->BA[l], m->bacts + (size_t)sl * m->bper, B, Lp);
    mega_xattn_acts_view(&dl->x, &m->XA[l], m->xacts + (size_t)sl * m->xper, B, Lp, S);
    MEGA_TRY(mega_block_forward(&dl->self, W, &m->BA[l], y1, in, tpad, B, Lp, &r, m->scratch));
    MEGA_TRY(mega_xattn_forward(&dl->x, W, &m->XA[l], y2, y1, m->E, spad, B, Lp, S, &rx, m->scratch));
    if (c->decoder.ffn_dim > 0) {
        mega_nffn_acts_point(&dl->ffn, &m->FA[l], m->facts + (size_t)sl * m->fper, B, Lp);
        mega_nffn_forward(&dl->ffn, W, &m->FA[l], out, y2, R, &r, m->scratch);
    }
    return MEGA_OK;
}

mega_status mega_s2s_forward(mega_s2s *m, const int32_t *src, int S, const int32_t *prev, const int32_t *tgt, int L,
                             int B, const mega_lm_run *run, double label_smoothing, double *loss, double *nll,
                             int64_t *count) {
    const mega_s2s_config *c = &m->cfg;
    if (label_smoothing < 0 || label_smoothing >= 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "label smoothing must be in [0, 1) (got %g)", label_smoothing);
    MEGA_TRY(mega__s2s_reserve(m, B, S, L));
    m->run = run ? *run : (mega_lm_run){0, 0};
    m->has_targets = 0;
    const int train = m->run.training, Ld = c->decoder_layers;
    const uint64_t key = m->run.key;
    MEGA_TRY(mega__s2s_encode(m, src, B, S, train, key));
    const int Lp = mega__s2s_padded(&c->decoder, L);
    const size_t D = (size_t)c->decoder.embed_dim, R = (size_t)B * Lp, RL = (size_t)B * L, V = (size_t)c->tgt_vocab_size;
    m->L = L, m->Lp = Lp;
    int any;
    MEGA_TRY(load_tokens(m, prev, B, L, Lp, c->tgt_vocab_size, m->ttok, m->tpad, "target", &any));
    m->tgt_any_pad = any;
    for (size_t r = 0; r < RL; r++) {
        int32_t y = tgt ? tgt[r] : -1;
        if (tgt && (y < 0 || y >= (int32_t)V)) MEGA_FAIL(MEGA_ERR_INVALID, "target %d is outside the vocabulary of %zu", y, V);
        m->tgt[r] = y == c->padding_idx ? -1 : y;
    }
    real *W = m->P.data;
    embed_forward(m, m->H, m->tgt_emb, &m->dec_enorm, m->dnpre, m->dnstat, m->ttok, m->tpad, R, train,
                  mega__subkey(key, SITE_EMBED + 1000));
    for (int l = 0; l < Ld; l++) MEGA_TRY(decoder_layer_forward(m, l, train, 1));
    const real *HL = m->H + (size_t)Ld * R * D;
    if (m->has_dfnorm)
        mega_seqnorm_forward(&m->dfnorm, W, m->xf, m->fstat, HL, R, train, train, &m->bnsync);
    else
        memcpy(m->xf, HL, R * D * sizeof(real));
    /* zero the pads, drop the ragged positions */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < L; t++) {
            const size_t r = (size_t)b * Lp + t;
            real *dst = m->xfc + ((size_t)b * L + t) * D;
            if (m->tpad[r])
                memset(dst, 0, D * sizeof(real));
            else
                memcpy(dst, m->xf + r * D, D * sizeof(real));
        }
    const real *Wo = W + (c->tie_embeddings ? m->tgt_emb : m->out_w);
    mega_linear_forward(m->logits, m->xfc, Wo, NULL, RL, D, V);
    /* label-smoothed cross-entropy (fairseq label_smoothed_nll_loss) */
    const double eps = label_smoothing;
    double tot = 0, totn = 0;
    int64_t cnt = 0;
    mega_xent_rows(m->logits, m->tgt, m->lse, RL, V, eps, &tot, &totn, &cnt);
    m->count = cnt, m->eps = eps, m->has_targets = tgt != NULL;
    if (loss) *loss = cnt ? tot / (double)cnt : 0;
    if (nll) *nll = cnt ? totn / (double)cnt : 0;
    if (count) *count = cnt;
    return MEGA_OK;
}

void mega_s2s_set_batch_sync(mega_s2s *m, mega_sum_fn sum, void *ctx) {
    m->bnsync.fn = m->enc.sync.fn = sum;
    m->bnsync.ctx = m->enc.sync.ctx = ctx;
}

mega_status mega_s2s_backward(mega_s2s *m, double scale) {
    const mega_s2s_config *c = &m->cfg;
    if (!m->P.grad) MEGA_FAIL(MEGA_ERR_INVALID, "backward: this model was loaded for inference (no gradients)");
    if (!m->has_targets) MEGA_FAIL(MEGA_ERR_INVALID, "backward needs a forward with targets");
    const int B = m->B, S = m->S, Sp = m->Sp, L = m->L, Lp = m->Lp, Ld = c->decoder_layers;
    const size_t D = (size_t)c->decoder.embed_dim, R = (size_t)B * Lp, RL = (size_t)B * L, V = (size_t)c->tgt_vocab_size;
    const int train = m->run.training;
    const uint64_t key = m->run.key;
    const real *W = m->P.data;
    real *dW = m->P.grad;
    /* d logits = (softmax - q) * scale / count, q = 1 - eps at the target, eps/(V-1) elsewhere */
    const real g = m->count ? (real)(scale / (double)m->count) : 0;
    const real qo = V > 1 ? (real)(m->eps / (double)(V - 1)) : 0, qt = (real)(1.0 - m->eps);
#pragma omp parallel for schedule(static) if (RL * V > MEGA_PAR_MIN)
    for (size_t r = 0; r < RL; r++) {
        real *lg = m->logits + r * V;
        const int32_t y = m->tgt[r];
        if (y < 0) {
            memset(lg, 0, V * sizeof(real));
            continue;
        }
        mega_exp_sub(lg, V, m->lse[r], 0); /* softmax = e^(logit - lse), vectorised */
        for (size_t v = 0; v < V; v++) lg[v] = (lg[v] - qo) * g;
        lg[y] += (qo - qt) * g;
    }
    m->has_targets = 0; /* logits are now gradients */
    const size_t wo = c->tie_embeddings ? m->tgt_emb : m->out_w;
    real *dxc = m->g[2];
    mega_linear_backward(dxc, dW + wo, NULL, m->logits, m->xfc, W + wo, RL, D, V, 0);
    /* back to the padded rows (pads and the ragged positions get nothing), the final norm */
    real *gin = m->g[0];
    memset(gin, 0, R * D * sizeof(real));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < L; t++) {
            const size_t r = (size_t)b * Lp + t;
            if (!m->tpad[r]) memcpy(gin + r * D, dxc + ((size_t)b * L + t) * D, D * sizeof(real));
        }
    real *dH = gin;
    if (m->has_dfnorm) {
        mega_seqnorm_backward(&m->dfnorm, W, dW, m->g[1], gin, m->H + (size_t)Ld * R * D, m->fstat, R, train, 0, &m->bnsync);
        dH = m->g[1];
    }
    memset(m->dE, 0, (size_t)B * S * D * sizeof(real));
    const uint8_t *tpad = m->tgt_any_pad ? m->tpad : NULL, *spad = m->src_any_pad ? m->spadc : NULL;
    for (int l = Ld - 1; l >= 0; l--) {
        mega_declayer *dl = &m->dl[l];
        mega_run r = layer_run(m, l, train, key), rx = cross_run(&r);
        /* recompute: layer l's activations again, with its forward's dropout keys (the same
         * masks, so the same values, H[l+1] included); the last layer's are still there, as
         * nothing but the decoder layers writes their slot and the decoder's scratch holds
         * nothing a layer's backward reads. The same forward succeeded on these shapes. */
        if (m->recompute && l < Ld - 1) (void)decoder_layer_forward(m, l, train, 0);
        real *in = m->H + (size_t)l * R * D, *y1 = layer_y(m, m->Y1, l), *y2 = layer_y(m, m->Y2, l);
        /* three gradient buffers rotate: a holds dH; with an FFN dY2 = b, dY1 = c, the new dH = a;
         * without, dY2 = a, dY1 = b, the new dH = c */
        real *a = dH, *b = a == m->g[0] ? m->g[1] : m->g[0];
        real *cc = (a != m->g[2] && b != m->g[2]) ? m->g[2] : m->g[1];
        real *dY2 = a, *dY1 = b, *dIn = cc;
        if (c->decoder.ffn_dim > 0) {
            mega_nffn_backward(&dl->ffn, W, dW, &m->FA[l], b, a, y2, R, &r, m->scratch);
            dY2 = b, dY1 = cc, dIn = a;
        }
        mega_xattn_backward(&dl->x, W, dW, &m->XA[l], dY1, m->dE, dY2, y1, m->E, spad, B, Lp, S, &rx, m->scratch);
        mega_block_backward(&dl->self, W, dW, &m->BA[l], dIn, dY1, in, tpad, B, Lp, &r, m->scratch);
        dH = dIn;
    }
    /* the decoder embedding */
    embed_backward(m, dH, m->tgt_emb, &m->dec_enorm, m->dnpre, m->dnstat, m->ttok, m->tpad, R, train,
                   mega__subkey(key, SITE_EMBED + 1000), dH == m->g[0] ? m->g[1] : m->g[0]);
    /* the encoder: its output's gradient back to the padded rows */
    real *dEnc = m->enc.dx;
    memset(dEnc, 0, (size_t)B * Sp * D * sizeof(real));
    for (int b = 0; b < B; b++)
        memcpy(dEnc + (size_t)b * Sp * D, m->dE + (size_t)b * S * D, (size_t)S * D * sizeof(real));
    real *dX = mega_stack_backward(&m->enc, W, dW, dEnc, train, mega__subkey(key, 1));
    embed_backward(m, dX, m->src_emb, &m->enc_enorm, m->enpre, m->enstat, m->stok, m->spad, (size_t)B * Sp, train,
                   mega__subkey(key, SITE_EMBED), m->g[0]);
    return MEGA_OK;
}
