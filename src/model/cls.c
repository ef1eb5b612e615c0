/*
 * Long-sequence classifier (official fairseq/models/lra/mega_lra_encoder.py MegaLRAEncoder and
 * fairseq/models/lra/model.py LRAModel; docs/mega.md §10):
 *   token inputs are right-padded with padding_idx to a chunk multiple when T > chunk (official);
 *   x = Emb[tokens] (no scale) or x = v*w + b (RealNumberEmbedding); dropout; pads zeroed
 *   (or, with patch P: x_t = W vec(patch t) + b over the P x P patches in raster order, the
 *   linear patch embedding of a vision Transformer (Dosovitskiy et al. 2021; the Mega paper's
 *   ImageNet model, Ma et al. 2023 §4.5); not in the official LRA code)
 *   bidirectional Mega blocks (pad mask), final norm when prenorm, pads zeroed
 *   rep = sum_t x_t / length (mean, "mp") or x_0 ("cls"); two-tower: [rep(doc2), rep(doc1)]
 *   head: classifier_layers x [act(dropout(Linear))], then sentence_projection (no bias)
 */
#include "model/modelio.h"
#include "model/stack.h"

#include <stddef.h>

enum { SITE_EMBED = 7, SITE_HEAD = 9 };

typedef struct {
    mega_stack st;
    int B, T, Tp;
    int32_t *tok;
    uint8_t *pad;
    size_t tokcap;
    int any_pad;
    int32_t *plen; /* patch inputs: patches per example (the pooling's true length) */
    int plencap;
    const mega_real *vals; /* the real inputs [B, T] as the encoder saw them (normalised: nv) */
    real *nv;
    size_t nvcap;
    const int32_t *len;
    real *rep; /* [B, D] pooled */
    const real *feat; /* the stack's output [B, Tp, D] of the last forward */
} cls_pass;

/* the masked-LM head's activations for the M predicted positions of the last forward */
typedef struct {
    size_t dw, db, lw, lb, bias; /* dense [D, D] and bias, layer norm weight and bias, output bias [V] */
    int M, cap;
    size_t *row;                 /* their rows in [B * Tp] */
    int32_t *tgt;
    real *h, *u, *g, *xhat, *rstd, *y, *logits, *dy; /* [M, D] (rstd [M]), logits [M, V] */
} cls_mlm;

struct mega_cls {
    mega_model hdr;      /* first: a mega_cls is a mega_model (model/kinds.h) */
    mega_cls_config cfg; /* the one copy; the blocks point at cfg.block */
    mega_params P;
    size_t emb, emb_w, emb_b;   /* token table, or real-embedding weight/bias */
    size_t pw, pb;              /* patch embedding [D, P*P] and bias [D] */
    size_t in_mean, in_std;     /* input_norm buffers */
    size_t *hw, *hb;            /* head layers */
    size_t proj;
    int in_dim, head_dim;       /* rep width (D or 2D), head width */
    cls_pass pass[2];
    int Bmax;
    real *hbuf;                 /* head activations: [layers+1][B][max(in,out)] pre and post */
    real *logits, *dlog;        /* [B, C] */
    int32_t *tgt;
    int B, has_targets;
    mega_lm_run run;
    cls_mlm mlm;
};

void mega_cls_config_default(mega_cls_config *c) {
    memset(c, 0, sizeof *c);
    c->layers = 4;
    mega_block_config_default(&c->block); /* the LM's widths; full attention, post-norm, encoder */
    c->block.chunk_size = -1, c->block.prenorm = 0, c->block.bidirectional = 1;
    c->final_norm_affine = 1;
    c->embedding = MEGA_EMBED_TOKEN, c->vocab_size = 257, c->padding_idx = 256;
    c->pool = MEGA_POOL_MEAN, c->classifier_layers = 1, c->classifier_dim = 0;
    c->classifier_activation = MEGA_ACT_GELU, c->classes = 2, c->two_tower = 0;
    c->patch = 0, c->image_width = 0;
}

static const char *const EMBED_NAMES[] = {"token", "real"};
static const char *const POOL_NAMES[] = {"mean", "cls"};
#define OFF(f) offsetof(mega_cls_config, f)
static const mega_field CLS_FIELDS[] = {
    {"layers", MEGA_FIELD_INT, OFF(layers), 1, 1024, NULL, 0, 0, 0, "number of blocks"},
    {"final-norm-affine", MEGA_FIELD_BOOL, OFF(final_norm_affine), 0, 1, NULL, 0, 0, 0,
     "learned scale and shift in the final norm (pre-norm models)"},
    {"embedding", MEGA_FIELD_CHOICE, OFF(embedding), 0, 1, EMBED_NAMES, 2, 0, 0,
     "token ids, or real numbers (pixels) through a learned scale and shift"},
    {"vocab-size", MEGA_FIELD_INT, OFF(vocab_size), 2, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0, "vocabulary size (token inputs)"},
    {"padding-idx", MEGA_FIELD_INT, OFF(padding_idx), 0, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0, "padding token (token inputs)"},
    {"pool", MEGA_FIELD_CHOICE, OFF(pool), 0, 1, POOL_NAMES, 2, 0, 0,
     "sequence representation: mean over the true length, or position 0"},
    {"classifier-layers", MEGA_FIELD_INT, OFF(classifier_layers), 0, 16, NULL, 0, 0, 0, "hidden layers of the head"},
    {"classifier-dim", MEGA_FIELD_INT, OFF(classifier_dim), 0, 1 << 20, NULL, 0, 0, 0, "head width (0 = 2 x embed-dim)"},
    {"classifier-activation", MEGA_FIELD_CHOICE, OFF(classifier_activation), 0, MEGA_ACT_COUNT - 1, mega__names_act,
     MEGA_ACT_COUNT, 0, 0, "head activation"},
    {"classes", MEGA_FIELD_INT, OFF(classes), 2, 1 << 20, NULL, 0, MEGA_FIELD_NOFLAG, 0, "number of classes"},
    {"two-tower", MEGA_FIELD_BOOL, OFF(two_tower), 0, 1, NULL, 0, MEGA_FIELD_NOFLAG, 0,
     "pairs of inputs (retrieval): both pooled vectors, concatenated"},
    {"patch", MEGA_FIELD_INT, OFF(patch), 0, 64, NULL, 0, 0, 0,
     "images as patches: a linear embedding of P x P pixels per position (0 = a position per pixel)"},
    {"image-width", MEGA_FIELD_INT, OFF(image_width), 0, 1 << 16, NULL, 0, MEGA_FIELD_NOFLAG, 0,
     "with patch: the images' width in pixels (from the data)"},
    {"input-norm", MEGA_FIELD_INT, OFF(input_norm), 0, 1 << 24, NULL, 0, MEGA_FIELD_NOFLAG, 0,
     "real inputs: positions with a stored mean and std (speech; set from the training data)"},
    {"mlm", MEGA_FIELD_BOOL, OFF(mlm), 0, 1, NULL, 0, MEGA_FIELD_NOFLAG, 0,
     "a masked-LM head tied to the embedding instead of the classification head (mega train --task mlm)"},
};
#undef OFF

const mega_field *mega_cls_config_fields(int *count) {
    *count = (int)(sizeof CLS_FIELDS / sizeof *CLS_FIELDS);
    return CLS_FIELDS;
}

/* the head width: classifier-dim, 0 = 2 x embed-dim (none without hidden layers) */
static int head_dim_of(const mega_cls_config *c) {
    if (c->classifier_layers == 0) return 0;
    return c->classifier_dim > 0 ? c->classifier_dim : 2 * c->block.embed_dim;
}

void mega_cls_config_resolve(mega_cls_config *c) {
    mega_block_config_resolve(&c->block);
    c->classifier_dim = head_dim_of(c);
}

mega_status mega_cls_config_check(const mega_cls_config *c) {
    int n;
    const mega_field *f = mega_cls_config_fields(&n);
    MEGA_TRY(mega__fields_check(f, n, c));
    if (c->embedding == MEGA_EMBED_TOKEN && c->padding_idx >= c->vocab_size)
        MEGA_FAIL(MEGA_ERR_INVALID, "padding index %d is outside the vocabulary of %d", c->padding_idx, c->vocab_size);
    if (c->patch > 0 && c->embedding != MEGA_EMBED_REAL)
        MEGA_FAIL(MEGA_ERR_INVALID, "patch %d: patches are made of real-valued pixels (embedding real)", c->patch);
    if (c->patch > 0 && (c->image_width < 1 || c->image_width % c->patch))
        MEGA_FAIL(MEGA_ERR_INVALID, "patch %d does not divide the image width %d", c->patch, c->image_width);
    if (c->input_norm && c->embedding != MEGA_EMBED_REAL)
        MEGA_FAIL(MEGA_ERR_INVALID, "input normalisation (input-norm %d) applies to real-valued inputs only", c->input_norm);
    if (c->mlm && (c->embedding != MEGA_EMBED_TOKEN || c->two_tower))
        MEGA_FAIL(MEGA_ERR_INVALID, "a masked-LM head (mlm) predicts tokens: it needs token inputs and one tower");
    if (!c->block.bidirectional) MEGA_FAIL(MEGA_ERR_INVALID, "a classifier's encoder is bidirectional (bidirectional must be true)");
    return mega_block_config_check(&c->block);
}

static void free_buffers(mega_cls *m) {
    for (int k = 0; k < 2; k++) {
        free(m->pass[k].tok);
        free(m->pass[k].pad);
        mega__free(m->pass[k].rep);
        free(m->pass[k].plen);
        m->pass[k].tok = NULL, m->pass[k].pad = NULL, m->pass[k].rep = NULL, m->pass[k].tokcap = 0;
        m->pass[k].plen = NULL, m->pass[k].plencap = 0;
        mega__free(m->pass[k].nv);
        m->pass[k].nv = NULL, m->pass[k].nvcap = 0;
    }
    mega__free(m->hbuf);
    mega__free(m->logits);
    free(m->mlm.row), free(m->mlm.tgt), mega__free(m->mlm.h);
    m->mlm.row = NULL, m->mlm.tgt = NULL, m->mlm.h = NULL, m->mlm.cap = 0;
    free(m->tgt);
    m->hbuf = m->logits = NULL, m->tgt = NULL;
    m->Bmax = 0;
}

/* fairseq RobertaLMHead (fairseq/models/roberta/model.py): dense [D, D] + bias, layer_norm, and
 * an output bias over the vocabulary; its weight is the token embedding (tied) */
static mega_status declare_mlm_head(mega_cls *m) {
    const int64_t D = m->cfg.block.embed_dim;
    cls_mlm *h = &m->mlm;
    MEGA_TRY(MEGA_PADD(&m->P, "encoder.lm_head.", "dense.weight", MEGA_P_DECAY, &h->dw, D, D));
    MEGA_TRY(MEGA_PADD(&m->P, "encoder.lm_head.", "dense.bias", 0, &h->db, D));
    MEGA_TRY(MEGA_PADD(&m->P, "encoder.lm_head.", "layer_norm.weight", 0, &h->lw, D));
    MEGA_TRY(MEGA_PADD(&m->P, "encoder.lm_head.", "layer_norm.bias", 0, &h->lb, D));
    return MEGA_PADD(&m->P, "encoder.lm_head.", "bias", 0, &h->bias, (int64_t)m->cfg.vocab_size);
}

mega_status mega__cls_declare(const mega_cls_config *c, mega_cls **out) {
    *out = NULL;
    MEGA_TRY(mega_cls_config_check(c));
    mega_cls *m = calloc(1, sizeof *m);
    if (!m) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    m->hdr.kind = MEGA_MODEL_CLS;
    m->cfg = *c;
    mega_cls_config_resolve(&m->cfg);
    c = &m->cfg; /* from here on the resolved config (classifier-dim 0 = 2 x embed-dim, the mixer's defaults) */
    mega_params_init(&m->P);
    mega_status st;
    const int64_t D = c->block.embed_dim;
    if (c->embedding == MEGA_EMBED_TOKEN)
        st = MEGA_PADD(&m->P, "encoder.encoder.", "embed_tokens.embed.weight", MEGA_P_DECAY, &m->emb, c->vocab_size, D);
    else if (c->patch > 0) {
        if (!(st = MEGA_PADD(&m->P, "encoder.encoder.", "patch_embed.weight", MEGA_P_DECAY, &m->pw, D, (int64_t)c->patch * c->patch)))
            st = MEGA_PADD(&m->P, "encoder.encoder.", "patch_embed.bias", 0, &m->pb, D);
    } else if (!(st = MEGA_PADD(&m->P, "encoder.encoder.", "embed_tokens.weight", 0, &m->emb_w, D)))
        st = MEGA_PADD(&m->P, "encoder.encoder.", "embed_tokens.bias", 0, &m->emb_b, D);
    if (!st && c->input_norm && !(st = MEGA_PADD(&m->P, "", "input_norm.mean", MEGA_P_BUFFER, &m->in_mean, c->input_norm)))
        st = MEGA_PADD(&m->P, "", "input_norm.std", MEGA_P_BUFFER, &m->in_std, c->input_norm);
    if (st) goto fail;
    if ((st = mega_stack_declare(&m->pass[0].st, &m->P, "encoder.encoder.layers.", "encoder.encoder.final_norm.norm.",
                                 &c->block, c->layers, c->final_norm_affine)))
        goto fail;
    if (c->two_tower) mega_stack_share(&m->pass[1].st, &m->pass[0].st);
    if (c->mlm) {
        st = declare_mlm_head(m);
        if (st) goto fail;
        *out = m;
        return MEGA_OK;
    }
    m->in_dim = (c->two_tower ? 2 : 1) * c->block.embed_dim;
    m->head_dim = c->classifier_layers > 0 ? c->classifier_dim : m->in_dim;
    m->hw = calloc((size_t)c->classifier_layers + 1, sizeof(size_t));
    m->hb = calloc((size_t)c->classifier_layers + 1, sizeof(size_t));
    if (!m->hw || !m->hb) {
        st = mega__error(MEGA_ERR_OOM, "out of memory");
        goto fail;
    }
    for (int j = 0; j < c->classifier_layers; j++) {
        char nm[64];
        int64_t in = j == 0 ? m->in_dim : c->classifier_dim;
        snprintf(nm, sizeof nm, "classifier.%d.0.weight", j);
        if ((st = MEGA_PADD(&m->P, "", nm, MEGA_P_DECAY, &m->hw[j], c->classifier_dim, in))) goto fail;
        snprintf(nm, sizeof nm, "classifier.%d.0.bias", j);
        if ((st = MEGA_PADD(&m->P, "", nm, 0, &m->hb[j], c->classifier_dim))) goto fail;
    }
    if ((st = MEGA_PADD(&m->P, "", "sentence_projection_layer.weight", MEGA_P_DECAY, &m->proj, c->classes, m->head_dim)))
        goto fail;
    *out = m;
    return MEGA_OK;
fail:
    mega_cls_free(m);
    return st;
}

mega_status mega_cls_create_ex(const mega_cls_config *c, const mega_load_opts *o, mega_cls **out) {
    mega_model *m;
    mega_status st = mega__model_create(MEGA_MODEL_CLS, c, o, &m);
    *out = (mega_cls *)m;
    return st;
}

mega_status mega_cls_create(const mega_cls_config *c, mega_cls **out) { return mega_cls_create_ex(c, NULL, out); }

void mega_cls_free(mega_cls *m) {
    if (!m) return;
    free_buffers(m);
    mega_stack_free(&m->pass[1].st);
    mega_stack_free(&m->pass[0].st);
    mega_params_free(&m->P);
    free(m->hw);
    free(m->hb);
    free(m);
}

const mega_cls_config *mega_cls_get_config(const mega_cls *m) { return &m->cfg; }
mega_paramset *mega_cls_paramset(mega_cls *m) { return (mega_paramset *)&m->P; }
const mega_real *mega_cls_logits(const mega_cls *m) { return m->logits; }

void mega_cls_init_params(mega_cls *m, uint64_t seed) {
    mega_rng rng;
    mega_rng_seed(&rng, seed);
    const mega_cls_config *c = &m->cfg;
    const size_t D = (size_t)c->block.embed_dim;
    real *W = m->P.data;
    if (c->embedding == MEGA_EMBED_TOKEN) {
        /* official LRA Embedding: N(0, D^-1/2) over the whole table, padding row included */
        mega_fill_normal(W + m->emb, (size_t)c->vocab_size * D, 0, 1.0 / sqrt((double)D), &rng);
    } else if (c->patch > 0) {
        /* a linear layer's init (xavier-uniform weight, zero bias) */
        mega_fill_xavier(W + m->pw, D, (size_t)c->patch * c->patch, 1.0, &rng);
        mega_fill_const(W + m->pb, D, 0);
    } else {
        mega_fill_normal(W + m->emb_w, D, 0, 1.0, &rng); /* RealNumberEmbedding */
        mega_fill_normal(W + m->emb_b, D, 0, 0.1, &rng);
        if (c->input_norm) { /* the identity until mega_cls_set_input_norm */
            mega_fill_const(W + m->in_mean, (size_t)c->input_norm, 0);
            mega_fill_const(W + m->in_std, (size_t)c->input_norm, 1);
        }
    }
    mega_stack_init(&m->pass[0].st, W, &rng);
    if (c->mlm) {
        /* fairseq init_bert_params: Linear N(0, 0.02) with zero bias; layer norm 1, 0 */
        mega_fill_normal(W + m->mlm.dw, D * D, 0, 0.02, &rng);
        mega_fill_const(W + m->mlm.db, D, 0);
        mega_fill_const(W + m->mlm.lw, D, 1);
        mega_fill_const(W + m->mlm.lb, D, 0);
        mega_fill_const(W + m->mlm.bias, (size_t)c->vocab_size, 0);
        return;
    }
    for (int j = 0; j < c->classifier_layers; j++) {
        size_t in = (size_t)(j == 0 ? m->in_dim : c->classifier_dim);
        mega_fill_xavier(W + m->hw[j], (size_t)c->classifier_dim, in, 1.0, &rng);
        mega_fill_const(W + m->hb[j], (size_t)c->classifier_dim, 0);
    }
    mega_fill_xavier(W + m->proj, (size_t)c->classes, (size_t)m->head_dim, 1.0, &rng);
}

/* positions of an input of T values: T, or its patches (-1 when T is not whole rows of patches) */
static int positions(const mega_cls_config *c, int T) {
    if (c->patch <= 0) return T;
    const int64_t band = (int64_t)c->image_width * c->patch; /* pixels in one row of patches */
    if (T % band) return -1;
    return (int)(T / band) * (c->image_width / c->patch);
}

static int padded_len(const mega_cls *m, int T) {
    int c = m->cfg.block.chunk_size;
    /* official: token inputs are right-padded to a chunk multiple when longer than a chunk */
    if (m->cfg.embedding == MEGA_EMBED_TOKEN && c > 0 && T > c && T % c) return (T + c - 1) / c * c;
    return T;
}

static size_t head_width(const mega_cls *m) {
    return (size_t)MEGA_MAX(MEGA_MAX(m->in_dim, m->head_dim), m->cfg.classes);
}

static mega_status reserve(mega_cls *m, int B) {
    if (B <= m->Bmax) return MEGA_OK;
    free_buffers(m);
    const mega_cls_config *c = &m->cfg;
    const size_t D = (size_t)c->block.embed_dim, HW = head_width(m);
    int ok = 1;
    m->hbuf = mega__calloc(2 * ((size_t)c->classifier_layers + 2) * (size_t)B * HW, sizeof(real));
    m->logits = mega__calloc(2 * (size_t)B * c->classes, sizeof(real));
    m->tgt = calloc((size_t)B, sizeof(int32_t));
    ok = m->hbuf && m->logits && m->tgt;
    for (int k = 0; k < 2 && ok; k++) {
        m->pass[k].rep = mega__calloc((size_t)B * D, sizeof(real));
        ok = m->pass[k].rep != NULL;
    }
    if (!ok) {
        free_buffers(m);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory reserving classifier buffers");
    }
    m->dlog = m->logits + (size_t)B * c->classes;
    m->Bmax = B;
    return MEGA_OK;
}

/* the bytes of reserve(B) and of the stacks' reserve for B x T (what a forward allocates) */
static size_t forward_bytes(const mega_cls *m, int B, int T) {
    const mega_cls_config *c = &m->cfg;
    const int Tp = padded_len(m, positions(c, T) > 0 ? positions(c, T) : 1);
    const size_t D = (size_t)c->block.embed_dim, HW = head_width(m), R = (size_t)B * Tp;
    size_t head = (2 * ((size_t)c->classifier_layers + 2) * (size_t)B * HW + 2 * (size_t)B * c->classes + 2 * (size_t)B * D) *
                      sizeof(real) + (size_t)B * sizeof(int32_t);
    const int towers = c->two_tower ? 2 : 1;
    const size_t nv = c->input_norm ? (size_t)B * T * sizeof(real) : 0; /* normalise_inputs */
    return head + (size_t)towers * (mega__stack_bytes(&m->pass[0].st, B, Tp) + R * (sizeof(int32_t) + 1) + nv);
}

mega_status mega_cls_memory(const mega_cls_config *c, int training, int B, int T, mega_memory *out) {
    memset(out, 0, sizeof *out);
    if (B < 0 || T < 0 || (B > 0 && T < 1)) MEGA_FAIL(MEGA_ERR_INVALID, "mega_cls_memory: bad batch %d x %d", B, T);
    mega_cls *m;
    MEGA_TRY(mega__cls_declare(c, &m));
    mega__memory_fill(out, &m->P, training, B > 0 ? forward_bytes(m, B, T) : 0);
    mega_cls_free(m);
    return MEGA_OK;
}

/* the pixel of patch t, element k (row-major inside the patch; patches in raster order) */
static size_t patch_pixel(const mega_cls_config *c, int t, int k) {
    const int P = c->patch, per_row = c->image_width / P, pr = t / per_row, pc = t % per_row;
    return ((size_t)pr * P + (size_t)(k / P)) * (size_t)c->image_width + (size_t)pc * P + (size_t)(k % P);
}

/* patch inputs: each example's length in patches (whole rows of patches only) */
static mega_status patch_lengths(mega_cls *m, cls_pass *p, const mega_cls_input *in, int B) {
    if (p->plencap < B) {
        free(p->plen);
        p->plen = malloc(sizeof(int32_t) * (size_t)B);
        p->plencap = p->plen ? B : 0;
        if (!p->plen) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    for (int b = 0; b < B; b++) {
        p->plen[b] = positions(&m->cfg, in->lengths[b]);
        if (p->plen[b] < 1)
            MEGA_FAIL(MEGA_ERR_INVALID, "length %d of sequence %d is not whole rows of %dx%d patches", in->lengths[b], b, m->cfg.patch,
                      m->cfg.patch);
    }
    p->len = p->plen;
    return MEGA_OK;
}

/* x_t = W vec(patch t) + b for every patch of every example (a position past an example's
 * patches, in a batch of unequal images, reads its zero-padded pixels) */
static void patch_embed(mega_cls *m, const cls_pass *p, real *x, const real *W) {
    const mega_cls_config *c = &m->cfg;
    const size_t D = (size_t)c->block.embed_dim, PP = (size_t)c->patch * c->patch;
    const real *w = W + m->pw, *bias = W + m->pb;
    real v[64 * 64];
    for (int b = 0; b < p->B; b++)
        for (int t = 0; t < p->Tp; t++) {
            const real *img = p->vals + (size_t)b * p->T;
            for (size_t k = 0; k < PP; k++) v[k] = img[patch_pixel(c, t, (int)k)];
            real *xr = x + ((size_t)b * p->Tp + t) * D;
            for (size_t d = 0; d < D; d++) {
                real s = bias[d];
                const real *wd = w + d * PP;
                for (size_t k = 0; k < PP; k++) s += wd[k] * v[k];
                xr[d] = s;
            }
        }
}

/* the gradients of W and b from dx */
static void patch_embed_back(mega_cls *m, const cls_pass *p, const real *dx, real *dW) {
    const mega_cls_config *c = &m->cfg;
    const size_t D = (size_t)c->block.embed_dim, PP = (size_t)c->patch * c->patch;
    real *dw = dW + m->pw, *db = dW + m->pb;
    real v[64 * 64];
    for (int b = 0; b < p->B; b++)
        for (int t = 0; t < p->Tp; t++) {
            const real *img = p->vals + (size_t)b * p->T;
            for (size_t k = 0; k < PP; k++) v[k] = img[patch_pixel(c, t, (int)k)];
            const real *g = dx + ((size_t)b * p->Tp + t) * D;
            for (size_t d = 0; d < D; d++) {
                real *wd = dw + d * PP;
                for (size_t k = 0; k < PP; k++) wd[k] += g[d] * v[k];
                db[d] += g[d];
            }
        }
}

/* the real inputs the embedding reads: as given, or (v - mean[t]) / std[t] with the stored
 * statistics (the official speech data is normalised so, per sample index, before the model) */
static mega_status normalise_inputs(mega_cls *m, cls_pass *p, const mega_cls_input *in) {
    const int N = m->cfg.input_norm, T = in->T, B = p->B;
    if (!N) return MEGA_OK;
    if (T > N) MEGA_FAIL(MEGA_ERR_INVALID, "inputs of %d values, but the model's input statistics cover %d", T, N);
    const size_t n = (size_t)B * T;
    if (p->nvcap < n) {
        mega__free(p->nv);
        p->nv = mega__calloc(n, sizeof(real));
        p->nvcap = p->nv ? n : 0;
        if (!p->nv) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    const real *mu = m->P.data + m->in_mean, *sd = m->P.data + m->in_std;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)b * T + t;
            /* positions past the clip's length stay 0 (padding) */
            p->nv[i] = t < in->lengths[b] ? (in->values[i] - mu[t]) / sd[t] : 0;
        }
    p->vals = p->nv;
    return MEGA_OK;
}

mega_status mega_cls_set_input_norm(mega_cls *m, const float *mean, const float *std, int n) {
    if (n != m->cfg.input_norm || n < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "input statistics of %d positions for a model with input-norm %d", n, m->cfg.input_norm);
    for (int t = 0; t < n; t++)
        if (!isfinite(mean[t]) || !isfinite(std[t]) || !(std[t] > 0))
            MEGA_FAIL(MEGA_ERR_INVALID, "input statistics: position %d has mean %g and std %g", t, mean[t], std[t]);
    for (int t = 0; t < n; t++) m->P.data[m->in_mean + t] = mean[t], m->P.data[m->in_std + t] = std[t];
    return MEGA_OK;
}

/* embed, run the stack, pool one input into p->rep */
static mega_status encode(mega_cls *m, int k, const mega_cls_input *in, int B) {
    const mega_cls_config *c = &m->cfg;
    cls_pass *p = &m->pass[k];
    if (in->T < 1) MEGA_FAIL(MEGA_ERR_INVALID, "sequence length must be positive");
    if (!in->lengths) MEGA_FAIL(MEGA_ERR_INVALID, "lengths are required");
    const int T = in->T, Ts = positions(c, T), Tp = padded_len(m, Ts);
    if (Ts < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "an input of %d pixels is not whole rows of %dx%d patches of a %d-pixel-wide image", T, c->patch,
                  c->patch, c->image_width);
    const size_t D = (size_t)c->block.embed_dim, R = (size_t)B * Tp;
    MEGA_TRY(mega_stack_reserve(&p->st, B, Tp));
    const size_t cap = p->st.Rcap;
    if (p->tokcap < cap) {
        free(p->tok), free(p->pad);
        p->tok = calloc(cap, sizeof(int32_t));
        p->pad = calloc(cap, 1);
        p->tokcap = p->tok && p->pad ? cap : 0;
        if (!p->tokcap) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    }
    p->B = B, p->T = T, p->Tp = Tp, p->len = in->lengths, p->vals = in->values;
    for (int b = 0; b < B; b++)
        if (in->lengths[b] < 1 || in->lengths[b] > T)
            MEGA_FAIL(MEGA_ERR_INVALID, "length %d of sequence %d is outside [1, %d]", in->lengths[b], b, T);
    if (c->patch > 0) MEGA_TRY(patch_lengths(m, p, in, B));
    real *W = m->P.data;
    real *x = mega_stack_input(&p->st);
    p->any_pad = 0;
    if (c->embedding == MEGA_EMBED_TOKEN) {
        if (!in->tokens) MEGA_FAIL(MEGA_ERR_INVALID, "this classifier takes token inputs");
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tp; t++) {
                size_t r = (size_t)b * Tp + t;
                int32_t tk = (t < T && t < in->lengths[b]) ? in->tokens[(size_t)b * T + t] : c->padding_idx;
                if (tk < 0 || tk >= c->vocab_size) MEGA_FAIL(MEGA_ERR_INVALID, "token %d is outside the vocabulary of %d", tk, c->vocab_size);
                p->tok[r] = tk;
                p->pad[r] = tk == c->padding_idx;
                p->any_pad |= p->pad[r];
            }
        mega_embedding_forward(x, W + m->emb, p->tok, p->pad, R, D, 1);
    } else if (c->patch > 0) {
        if (!in->values) MEGA_FAIL(MEGA_ERR_INVALID, "this classifier takes real-valued inputs");
        MEGA_TRY(normalise_inputs(m, p, in));
        patch_embed(m, p, x, W);
    } else {
        if (!in->values) MEGA_FAIL(MEGA_ERR_INVALID, "this classifier takes real-valued inputs");
        MEGA_TRY(normalise_inputs(m, p, in));
        /* RealNumberEmbedding; the official encoder builds no padding mask for real inputs */
        const real *w = W + m->emb_w, *bb = W + m->emb_b;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tp; t++) {
                real v = p->vals[(size_t)b * T + t];
                real *xr = x + ((size_t)b * Tp + t) * D;
                for (size_t d = 0; d < D; d++) xr[d] = v * w[d] + bb[d];
            }
    }
    const int train = m->run.training;
    uint64_t key = mega__subkey(m->run.key, 1000 + (uint64_t)k);
    if (train && c->block.dropout > 0) {
        mega_dropout(x, x, R * D, c->block.dropout, mega__subkey(key, SITE_EMBED));
        if (p->any_pad)
            for (size_t r = 0; r < R; r++)
                if (p->pad[r]) memset(x + r * D, 0, D * sizeof(real));
    }
    const real *feat;
    MEGA_TRY(mega_stack_forward(&p->st, W, p->any_pad ? p->pad : NULL, B, Tp, train, key, &feat));
    p->feat = feat;
    for (int b = 0; b < B; b++) {
        real *rep = p->rep + (size_t)b * D;
        const real *fb = feat + (size_t)b * Tp * D;
        if (c->pool == MEGA_POOL_CLS) {
            memcpy(rep, fb, D * sizeof(real));
        } else {
            /* official "mp": sum over all positions (pads are zero) / true length */
            for (size_t d = 0; d < D; d++) rep[d] = 0;
            for (int t = 0; t < Tp; t++)
                for (size_t d = 0; d < D; d++) rep[d] += fb[(size_t)t * D + d];
            real inv = (real)1 / (real)p->len[b];
            for (size_t d = 0; d < D; d++) rep[d] *= inv;
        }
    }
    return MEGA_OK;
}

const mega_real *mega_cls_hidden(const mega_cls *m, int which, int i, int *Tp) {
    if (which < 0 || which > 1 || i < 0 || i > m->cfg.layers || !m->pass[which].st.H) return NULL;
    if (Tp) *Tp = m->pass[which].Tp;
    return mega_stack_hidden(&m->pass[which].st, i);
}

/* head buffers: pre-activation z_j and output h_j for j = 0..layers (h_0 = input rep) */
static real *hz(mega_cls *m, int j) { return m->hbuf + (2 * (size_t)j) * m->Bmax * head_width(m); }
static real *hh(mega_cls *m, int j) { return m->hbuf + (2 * (size_t)j + 1) * m->Bmax * head_width(m); }

mega_status mega_cls_forward(mega_cls *m, const mega_cls_input *in, const mega_cls_input *in2, int B,
                             const int32_t *targets, const mega_lm_run *run, double *loss, int64_t *correct) {
    const mega_cls_config *c = &m->cfg;
    if (B < 1) MEGA_FAIL(MEGA_ERR_INVALID, "batch must be positive");
    if (c->two_tower && !in2) MEGA_FAIL(MEGA_ERR_INVALID, "two-tower model needs a second input");
    if (c->mlm) MEGA_FAIL(MEGA_ERR_INVALID, "this model has a masked-LM head (mega train --task mlm): it does not classify");
    MEGA_TRY(reserve(m, B));
    m->run = run ? *run : (mega_lm_run){0, 0};
    m->B = B;
    MEGA_TRY(encode(m, 0, in, B));
    if (c->two_tower) MEGA_TRY(encode(m, 1, in2, B));
    const size_t D = (size_t)c->block.embed_dim, C = (size_t)c->classes;
    /* rep: [rep(doc2), rep(doc1)] for two towers (official concat order), else rep(doc1) */
    real *h = hh(m, 0);
    const size_t in0 = (size_t)m->in_dim;
    for (int b = 0; b < B; b++) {
        real *dst = h + (size_t)b * in0;
        if (c->two_tower) {
            memcpy(dst, m->pass[1].rep + (size_t)b * D, D * sizeof(real));
            memcpy(dst + D, m->pass[0].rep + (size_t)b * D, D * sizeof(real));
        } else {
            memcpy(dst, m->pass[0].rep + (size_t)b * D, D * sizeof(real));
        }
    }
    real *W = m->P.data;
    size_t w_in = in0;
    for (int j = 0; j < c->classifier_layers; j++) {
        const size_t o = (size_t)c->classifier_dim;
        real *z = hz(m, j + 1), *y = hh(m, j + 1);
        mega_linear_forward(z, hh(m, j), W + m->hw[j], W + m->hb[j], (size_t)B, w_in, o);
        /* official order: activation(dropout(linear(x))) */
        if (m->run.training && c->block.dropout > 0)
            mega_dropout(z, z, (size_t)B * o, c->block.dropout, mega__subkey(m->run.key, SITE_HEAD + (uint64_t)j));
        mega_act_forward(c->classifier_activation, y, z, (size_t)B * o);
        w_in = o;
    }
    mega_linear_forward(m->logits, hh(m, c->classifier_layers), W + m->proj, NULL, (size_t)B, w_in, C);
    m->has_targets = targets != NULL;
    double tot = 0;
    int64_t ok = 0;
    if (targets) {
        for (int b = 0; b < B; b++) {
            int32_t y = targets[b];
            if (y < 0 || y >= (int)C) MEGA_FAIL(MEGA_ERR_INVALID, "label %d is outside [0, %zu)", y, C);
            m->tgt[b] = y;
            const real *l = m->logits + (size_t)b * C;
            double mx = l[0], s = 0;
            size_t am = 0;
            for (size_t k = 1; k < C; k++)
                if (l[k] > l[am]) am = k;
            mx = l[am];
            for (size_t k = 0; k < C; k++) s += exp((double)l[k] - mx);
            double lse = mx + log(s);
            tot += lse - (double)l[y];
            ok += (int32_t)am == y;
            real *g = m->dlog + (size_t)b * C;
            for (size_t k = 0; k < C; k++) g[k] = (real)exp((double)l[k] - lse);
            g[y] -= 1;
        }
    }
    if (loss) *loss = targets ? tot / B : 0;
    if (correct) *correct = ok;
    return MEGA_OK;
}

static void stack_back(mega_cls *m, int k);

/* backward of one tower from d rep [B, D] (stride ld) */
static void decode_back(mega_cls *m, int k, const real *drep, size_t ld) {
    const mega_cls_config *c = &m->cfg;
    cls_pass *p = &m->pass[k];
    const int B = p->B, Tp = p->Tp;
    const size_t D = (size_t)c->block.embed_dim;
    real *dfeat = p->st.dx;
    for (int b = 0; b < B; b++) {
        const real *g = drep + (size_t)b * ld;
        real *df = dfeat + (size_t)b * Tp * D;
        memset(df, 0, (size_t)Tp * D * sizeof(real));
        if (c->pool == MEGA_POOL_CLS) {
            memcpy(df, g, D * sizeof(real));
        } else {
            real inv = (real)1 / (real)p->len[b];
            for (int t = 0; t < Tp; t++)
                for (size_t d = 0; d < D; d++) df[(size_t)t * D + d] = g[d] * inv;
        }
    }
    stack_back(m, k);
}

/* backward of tower k's stack and embedding from d features [B, Tp, D] in its stack's dx */
static void stack_back(mega_cls *m, int k) {
    const mega_cls_config *c = &m->cfg;
    cls_pass *p = &m->pass[k];
    const int B = p->B, Tp = p->Tp;
    const size_t D = (size_t)c->block.embed_dim, R = (size_t)B * Tp;
    real *dfeat = p->st.dx;
    const int train = m->run.training;
    uint64_t key = mega__subkey(m->run.key, 1000 + (uint64_t)k);
    real *W = m->P.data, *dW = m->P.grad;
    real *dx = mega_stack_backward(&p->st, W, dW, dfeat, train, key);
    if (train && c->block.dropout > 0) mega_dropout(dx, dx, R * D, c->block.dropout, mega__subkey(key, SITE_EMBED));
    if (c->embedding == MEGA_EMBED_TOKEN) {
        mega_embedding_backward(dW + m->emb, dx, p->tok, p->any_pad ? p->pad : NULL, R, D, 1, c->padding_idx);
    } else if (c->patch > 0) {
        patch_embed_back(m, p, dx, dW);
    } else {
        real *dw = dW + m->emb_w, *db = dW + m->emb_b;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tp; t++) {
                real v = p->vals[(size_t)b * p->T + t];
                const real *g = dx + ((size_t)b * Tp + t) * D;
                for (size_t d = 0; d < D; d++) dw[d] += g[d] * v, db[d] += g[d];
            }
    }
}

void mega_cls_set_batch_sync(mega_cls *m, mega_sum_fn sum, void *ctx) {
    for (int i = 0; i < 2; i++) m->pass[i].st.sync.fn = sum, m->pass[i].st.sync.ctx = ctx;
}

/* ---- the masked-LM head (mlm = 1; fairseq RobertaLMHead, docs/pretraining.md) --------------- */

static mega_status mlm_reserve(mega_cls *m, int M) {
    cls_mlm *h = &m->mlm;
    if (M <= h->cap) return MEGA_OK;
    const size_t D = (size_t)m->cfg.block.embed_dim, V = (size_t)m->cfg.vocab_size, n = (size_t)M;
    free(h->row), free(h->tgt), mega__free(h->h);
    h->row = malloc(n * sizeof *h->row);
    h->tgt = malloc(n * sizeof *h->tgt);
    h->h = mega__calloc(n * (6 * D + 1 + V), sizeof(real));
    if (!h->row || !h->tgt || !h->h) {
        free(h->row), free(h->tgt), mega__free(h->h);
        h->row = NULL, h->tgt = NULL, h->h = NULL, h->cap = 0;
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory reserving the masked-LM head's buffers (%d positions)", M);
    }
    h->u = h->h + n * D, h->g = h->u + n * D, h->xhat = h->g + n * D, h->y = h->xhat + n * D, h->dy = h->y + n * D;
    h->rstd = h->dy + n * D, h->logits = h->rstd + n;
    h->cap = M;
    return MEGA_OK;
}

/* the head over the M gathered features h->h: logits, then (softmax - one-hot) in their place */
static void mlm_head(mega_cls *m, double *tot, int64_t *ok) {
    cls_mlm *h = &m->mlm;
    const size_t M = (size_t)h->M, D = (size_t)m->cfg.block.embed_dim, V = (size_t)m->cfg.vocab_size;
    const real *W = m->P.data;
    mega_linear_forward(h->u, h->h, W + h->dw, W + h->db, M, D, D);
    mega_act_forward(MEGA_ACT_GELU, h->g, h->u, M * D);
    for (size_t i = 0; i < M; i++) { /* LayerNorm(D), eps 1e-5 (torch's default, as fairseq's) */
        const real *g = h->g + i * D;
        double mu = 0, var = 0;
        for (size_t d = 0; d < D; d++) mu += g[d];
        mu /= (double)D;
        for (size_t d = 0; d < D; d++) var += (g[d] - mu) * (g[d] - mu);
        const double rs = 1 / sqrt(var / (double)D + 1e-5);
        h->rstd[i] = (real)rs;
        for (size_t d = 0; d < D; d++) {
            h->xhat[i * D + d] = (real)((g[d] - mu) * rs);
            h->y[i * D + d] = h->xhat[i * D + d] * W[h->lw + d] + W[h->lb + d];
        }
    }
    /* the output layer is the token embedding transposed (tied), plus its own bias */
    mega_linear_forward(h->logits, h->y, W + m->emb, W + h->bias, M, D, V);
    for (size_t i = 0; i < M; i++) {
        real *l = h->logits + i * V;
        size_t am = 0;
        for (size_t k = 1; k < V; k++)
            if (l[k] > l[am]) am = k;
        double s = 0;
        for (size_t k = 0; k < V; k++) s += exp((double)l[k] - (double)l[am]);
        const double lse = (double)l[am] + log(s);
        *tot += lse - (double)l[h->tgt[i]];
        *ok += (int32_t)am == h->tgt[i];
        for (size_t k = 0; k < V; k++) l[k] = (real)exp((double)l[k] - lse);
        l[h->tgt[i]] -= 1;
    }
}

mega_status mega_cls_mlm_forward(mega_cls *m, const mega_cls_input *in, int B, const int32_t *targets, const mega_lm_run *run,
                                 double *loss, int64_t *correct, int64_t *count) {
    const mega_cls_config *c = &m->cfg;
    if (!c->mlm) MEGA_FAIL(MEGA_ERR_INVALID, "this model has no masked-LM head (it was not trained with --task mlm)");
    if (B < 1 || !targets || !in || in->T < 1 || !in->lengths) MEGA_FAIL(MEGA_ERR_INVALID, "masked-LM forward: bad batch");
    const int T = in->T;
    int M = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t y = targets[(size_t)b * T + t];
            if (y < 0) continue;
            if (y >= c->vocab_size) MEGA_FAIL(MEGA_ERR_INVALID, "target %d is outside the vocabulary of %d", y, c->vocab_size);
            if (t >= in->lengths[b]) MEGA_FAIL(MEGA_ERR_INVALID, "a target at position %d, past the length %d of sequence %d", t, in->lengths[b], b);
            M++;
        }
    MEGA_TRY(reserve(m, B));
    MEGA_TRY(mlm_reserve(m, M));
    m->run = run ? *run : (mega_lm_run){0, 0};
    m->B = B;
    MEGA_TRY(encode(m, 0, in, B));
    cls_mlm *h = &m->mlm;
    const size_t D = (size_t)c->block.embed_dim, Tp = (size_t)m->pass[0].Tp;
    h->M = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            if (targets[(size_t)b * T + t] >= 0) {
                h->row[h->M] = (size_t)b * Tp + (size_t)t;
                h->tgt[h->M] = targets[(size_t)b * T + t];
                memcpy(h->h + (size_t)h->M * D, m->pass[0].feat + h->row[h->M] * D, D * sizeof(real));
                h->M++;
            }
    double tot = 0;
    int64_t ok = 0;
    if (M > 0) mlm_head(m, &tot, &ok);
    m->has_targets = 1;
    if (loss) *loss = M > 0 ? tot / M : 0;
    if (correct) *correct = ok;
    if (count) *count = M;
    return MEGA_OK;
}

static mega_status mlm_backward(mega_cls *m, double scale) {
    cls_mlm *h = &m->mlm;
    cls_pass *p = &m->pass[0];
    const size_t M = (size_t)h->M, D = (size_t)m->cfg.block.embed_dim, V = (size_t)m->cfg.vocab_size;
    real *W = m->P.data, *dW = m->P.grad, *dfeat = p->st.dx;
    memset(dfeat, 0, (size_t)p->B * p->Tp * D * sizeof(real));
    if (M > 0) {
        const real sc = (real)(scale / (double)M);
        for (size_t i = 0; i < M * V; i++) h->logits[i] *= sc;
        mega_linear_backward(h->dy, dW + m->emb, dW + h->bias, h->logits, h->y, W + m->emb, M, D, V, 0);
        for (size_t i = 0; i < M; i++) { /* layer norm: dg = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)) */
            real *dy = h->dy + i * D, *g = h->g + i * D;
            const real *xh = h->xhat + i * D;
            double s1 = 0, s2 = 0;
            for (size_t d = 0; d < D; d++) {
                dW[h->lw + d] += dy[d] * xh[d], dW[h->lb + d] += dy[d];
                const double dx = (double)dy[d] * W[h->lw + d];
                s1 += dx, s2 += dx * xh[d];
            }
            s1 /= (double)D, s2 /= (double)D;
            for (size_t d = 0; d < D; d++) g[d] = (real)(h->rstd[i] * ((double)dy[d] * W[h->lw + d] - s1 - xh[d] * s2));
        }
        mega_act_backward(MEGA_ACT_GELU, h->u, h->g, h->u, M * D);
        mega_linear_backward(h->xhat, dW + h->dw, dW + h->db, h->u, h->h, W + h->dw, M, D, D, 0);
        for (size_t i = 0; i < M; i++) memcpy(dfeat + h->row[i] * D, h->xhat + i * D, D * sizeof(real));
    }
    stack_back(m, 0);
    return MEGA_OK;
}

mega_status mega_cls_backward(mega_cls *m, double scale) {
    const mega_cls_config *c = &m->cfg;
    if (!m->P.grad) MEGA_FAIL(MEGA_ERR_INVALID, "backward: this model was loaded for inference (no gradients)");
    if (!m->has_targets) MEGA_FAIL(MEGA_ERR_INVALID, "backward needs a forward with targets");
    m->has_targets = 0;
    if (c->mlm) return mlm_backward(m, scale);
    const int B = m->B;
    const size_t C = (size_t)c->classes, D = (size_t)c->block.embed_dim;
    real *W = m->P.data, *dW = m->P.grad;
    real *g = m->dlog;
    const real sc = (real)(scale / B);
    for (size_t i = 0; i < (size_t)B * C; i++) g[i] *= sc;
    /* head, in reverse; dh buffers reuse the z slots */
    size_t w_in = (size_t)(c->classifier_layers > 0 ? c->classifier_dim : m->in_dim);
    real *dh = hz(m, 0); /* z_0 is unused in the forward: scratch for d h */
    mega_linear_backward(dh, dW + m->proj, NULL, g, hh(m, c->classifier_layers), W + m->proj, (size_t)B, w_in, C, 0);
    for (int j = c->classifier_layers - 1; j >= 0; j--) {
        const size_t o = (size_t)c->classifier_dim, in = (size_t)(j == 0 ? m->in_dim : c->classifier_dim);
        real *z = hz(m, j + 1);
        /* dz = dh * act'(z) (z holds the dropped pre-activation), then dropout */
        mega_act_backward(c->classifier_activation, z, dh, z, (size_t)B * o);
        if (m->run.training && c->block.dropout > 0)
            mega_dropout(z, z, (size_t)B * o, c->block.dropout, mega__subkey(m->run.key, SITE_HEAD + (uint64_t)j));
        mega_linear_backward(dh, dW + m->hw[j], dW + m->hb[j], z, hh(m, j), W + m->hw[j], (size_t)B, in, o, 0);
    }
    /* dh now holds d rep [B, in_dim] */
    if (c->two_tower) {
        decode_back(m, 1, dh, (size_t)m->in_dim);
        decode_back(m, 0, dh + D, (size_t)m->in_dim);
    } else {
        decode_back(m, 0, dh, D);
    }
    return MEGA_OK;
}

/* ---- config JSON and checkpoints ------------------------------------------------------------ */

char *mega_cls_config_to_json(const mega_cls_config *c) {
    int n;
    const mega_field *f = mega_cls_config_fields(&n);
    /* "mlm" only on masked-LM models: a classifier's config stays as it was written before */
    return mega__config_to_json(mega_model_kind_name(MEGA_MODEL_CLS), f, c->mlm ? n : n - 1, c, offsetof(mega_cls_config, block));
}

/* the official names of the classifier's fields (fairseq LRA arguments, as in the reference
 * fixtures; transformers' MegaModel for the encoder); the block's are in modelio.c */
static const mega_official_name OFFICIAL[] = {
    {"layers", "%s_layers", "num_hidden_layers", 0},
    {"max-positions", "max_positions", NULL, 0},
    {"embedding", "embedding_type", NULL, 0},
    {"pool", "sen_rep_type", NULL, 0},
    {"classifier-layers", "classifier_layers", NULL, 0},
    {"classifier-dim", "classifier_out_dim", NULL, 0},
    {"classifier-activation", "classifier_activation_fn", NULL, 0},
    {"classes", "sentence_class_num", NULL, 0},
    {"vocab-size", "vocab_size", "vocab_size", 0},
    {"padding-idx", "padding_idx", "pad_token_id", 0},
    {"two-tower", "two_tower", NULL, 0},
    {"input-norm", "input_norm", NULL, 0}, /* not an official argument: scripts/convert_fairseq.py --speech-dir */
    {NULL, NULL, NULL, 0},
};

mega_status mega_cls_config_from_json(const char *json, mega_cls_config *c) {
    mega_cls_config_default(c);
    /* official arguments without classifier_out_dim: the width the official reader assumed */
    if (strstr(json, "\"encoder_layers\"")) c->classifier_dim = 128;
    int n;
    const mega_field *f = mega_cls_config_fields(&n);
    MEGA_TRY(mega__config_from_json(json, MEGA_MODEL_CLS, f, n, c, offsetof(mega_cls_config, block)));
    c->block.bidirectional = 1;
    if (c->classifier_layers == 0) c->classifier_dim = 0;
    return mega_cls_config_check(c);
}

mega_status mega_cls_save_ex(const mega_cls *m, const char *path, const char *const *kv) {
    return mega__model_save_kind(&m->hdr, path, kv);
}

/* the file's config, its class list (metadata "classes") checked against the head, the declared
 * table compared with the file's tensors, and only then the memory (modelio.c) */
mega_status mega_cls_load_ex(const char *path, const mega_load_opts *o, mega_cls **out) {
    const mega_model_kind k = MEGA_MODEL_CLS;
    mega_model *m;
    mega_status st = mega__model_load(path, &k, o, &m);
    *out = (mega_cls *)m;
    return st;
}

mega_status mega_cls_load(const char *path, mega_cls **out) { return mega_cls_load_ex(path, NULL, out); }

/* ---- the kind's table (model/kinds.h) ---------------------------------------------------------- */

MEGA__KIND_ADAPTERS(cls)
static const char *const *ignore(const mega_model *m, mega_ignore_list *g) {
    static const char *const list[] = {"_float_tensor", NULL};
    (void)m, (void)g;
    return list;
}
static mega_status check_file(const mega_st_file *f, const void *c) {
    return mega__check_class_names(f, ((const mega_cls_config *)c)->classes);
}
static mega_status memory(const void *c, int training, int B, int T, mega_memory *out) {
    return mega_cls_memory(c, training, B, T, out);
}

const mega_model_ops mega__kind_cls = {
    MEGA__KIND_ADAPTED(cls),
    .what = "classifier",
    .official_keys = {"encoder_layers"},
    .official = OFFICIAL,
    .official_side = "encoder",
    .ignore = ignore,
    .check_file = check_file,
    .memory = memory,
};
