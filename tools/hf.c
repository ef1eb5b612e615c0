/*
 * mega hf-export / mega hf-import: the Hugging Face `transformers` layout of Mega (a directory
 * with config.json and model.safetensors), for the two models that exist on both sides:
 *
 *   our causal LM (mega_lm)                 <->  MegaForCausalLM
 *   our classifier's bidirectional encoder  <->  MegaModel (the head travels in a side file)
 *
 * The source read is huggingface/transformers, src/transformers/models/mega/:
 * configuration_mega.py (MegaConfig: field names and defaults), modeling_mega.py (the module
 * tree, hence the parameter names and shapes, and the forward semantics) and
 * convert_mega_original_pytorch_checkpoint_to_pytorch.py (its renames of the official fairseq
 * parameters); read at the commits d0202787aa8f, 11f31e94c460 and 4c9844fed2bb. This project names weights as the official fairseq code does
 * (docs/checkpoints.md), so the conversion is a renaming with two reshapes (the simple relative
 * bias is stored at another length; the LM head gains a zero bias), checked both ways against
 * the layout a config implies. What transformers computes differently from the official code
 * (and so from this project) is refused here rather than converted approximately; the list and
 * the reasons are in docs/interop.md ("Hugging Face layout").
 */
#include "common.h"
#include "models.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_HEAD_FILE "mega_cls_head.safetensors"

/* ---- the name table ---------------------------------------------------------------------
 * Inside a layer, official (fairseq) name -> transformers name. transformers renamed the
 * parameters called alpha/beta/gamma/delta/omega (convert_mega_original_pytorch_checkpoint_to_
 * pytorch.py: "names containing beta or gamma aren't safe", "renaming to improve readability")
 * and calls the EMA sub-module ema_gate where fairseq calls it move (modeling_mega.py
 * MegaMovingAverageGatedAttention.__init__: self.ema_gate = MegaMultiDimensionDampedEma).
 * Every other name of a layer (norm.norm.*, v_proj, mx_proj, h_proj, rel_pos_bias.rel_pos_bias,
 * rel_pos_bias.alpha, nffn.*) is the same on both sides. */
static const char *const LAYER_NAMES[][2] = {
    {"mega_layer.move.delta", "mega_layer.ema_gate.damping_factor"},
    {"mega_layer.move.alpha", "mega_layer.ema_gate.decay_factor"},
    {"mega_layer.move.beta", "mega_layer.ema_gate.ema_expansion_matrix"},
    {"mega_layer.move.gamma", "mega_layer.ema_gate.kernel_projection_matrix"},
    {"mega_layer.move.omega", "mega_layer.ema_gate.residual_weight"},
    {"mega_layer.gamma", "mega_layer.qk_weight"},
    {"mega_layer.beta", "mega_layer.qk_bias"},
    {"mega_layer.rel_pos_bias.beta", "mega_layer.rel_pos_bias.b_param"},
};
#define NLAYER_NAMES (sizeof LAYER_NAMES / sizeof *LAYER_NAMES)

static const char *hf_layer_name(const char *ours) {
    for (size_t i = 0; i < NLAYER_NAMES; i++)
        if (!strcmp(LAYER_NAMES[i][0], ours)) return LAYER_NAMES[i][1];
    return ours;
}

/* ---- the layout a config implies ---------------------------------------------------------- */

/* how a tensor moves between the two files */
enum {
    T_COPY,   /* same values and shape */
    T_RELPOS, /* simple relative bias: ours [2 C - 1] (C the chunk, or max-positions unchunked);
                 transformers [2 max_positions - 1], of which it reads the first 2 C - 1 entries
                 (MegaSimpleRelativePositionalBias: max_positions = chunk_size when chunking, yet
                 the parameter is sized by config.max_positions) */
    T_ZERO,   /* lm_head.bias: transformers' LM head is nn.Linear with a bias; the official
                 output projection has none, so it is written as zeros and must be zero */
    T_BUFFER  /* rel_pos_bias._float_tensor: a persistent buffer of MegaRotaryRelativePositional-
                 Bias (a device/dtype marker, not a weight), written as [0.0] and ignored */
};

typedef struct {
    char hf[256], ours[256];
    int ndim;
    int64_t shape[3];   /* transformers' shape */
    int64_t ours_numel; /* T_RELPOS: our length */
    int how, i64, used;
} hf_entry;

/* what the layout depends on */
typedef struct {
    int lm;                 /* MegaForCausalLM (names under "mega.", an lm_head), else MegaModel */
    int V, D, L, Z, E, N, F;
    int bidir, rotary, tied;
    mega_norm_type norm;
    int affine;
    int ours_mp, hf_maxpos; /* simple bias: our C, transformers' max_positions */
    char ours_top[64];      /* "decoder." or "encoder.encoder." */
} hf_arch;

typedef struct {
    hf_entry *e;
    int n, cap;
} hf_layout;

static int lay_add(hf_layout *y, const char *hf, const char *ours, int how, int ndim, int64_t d0, int64_t d1,
                   int64_t d2) {
    if (y->n == y->cap) {
        int cap = y->cap ? 2 * y->cap : 64;
        hf_entry *e = realloc(y->e, (size_t)cap * sizeof *e);
        if (!e) return cli_error("out of memory");
        y->e = e, y->cap = cap;
    }
    hf_entry *t = &y->e[y->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    snprintf(t->ours, sizeof t->ours, "%s", ours);
    t->how = how, t->ndim = ndim;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    return 0;
}

/* a tensor of layer i: sub is our name inside the layer */
static int lay_layer(hf_layout *y, const hf_arch *a, int i, const char *sub, int how, int ndim, int64_t d0,
                     int64_t d1, int64_t d2) {
    char hf[256], ours[256];
    snprintf(hf, sizeof hf, "%slayers.%d.%s", a->lm ? "mega." : "", i, hf_layer_name(sub));
    snprintf(ours, sizeof ours, "%slayers.%d.%s", a->ours_top, i, sub);
    return lay_add(y, hf, ours, how, ndim, d0, d1, d2);
}

/* a SequenceNorm (modeling_mega.py MegaSequenceNorm: nn.LayerNorm, MegaScaleNorm.scalar,
 * nn.BatchNorm1d under .norm, as the official SequenceNorm) */
static int lay_norm(hf_layout *y, const hf_arch *a, int i, const char *pre) {
    char s[96];
    const int64_t D = a->D;
    int r = 0;
#define N1(name, d)                                                                                                    \
    (snprintf(s, sizeof s, "%s%s", pre, name), lay_layer(y, a, i, s, T_COPY, 1, (d), 0, 0))
    switch (a->norm) {
    case MEGA_NORM_LAYER:
        if (a->affine) r = N1("weight", D) || N1("bias", D);
        break;
    case MEGA_NORM_SCALE:
        if (a->affine) r = N1("scalar", 1);
        break;
    case MEGA_NORM_BATCH:
        if (a->affine) r = N1("weight", D) || N1("bias", D);
        r = r || N1("running_mean", D) || N1("running_var", D);
        if (!r) {
            snprintf(s, sizeof s, "%snum_batches_tracked", pre);
            r = lay_layer(y, a, i, s, T_COPY, 0, 0, 0, 0);
            if (!r) y->e[y->n - 1].i64 = 1;
        }
        break;
    default: r = cli_error("internal: norm type %d in the Hugging Face layout", (int)a->norm); break;
    }
#undef N1
    return r;
}

/* Every tensor of the transformers model for a, in modeling_mega.py's module order
 * (MegaEmbeddings, MegaBlock: MegaMovingAverageGatedAttention, MegaNormalizedFeedForwardNetwork;
 * MegaForCausalLM.lm_head), with our name for each. */
static int layout_build(hf_layout *y, const hf_arch *a) {
    const int64_t V = a->V, D = a->D, Z = a->Z, E = a->E, N = a->N, F = a->F, kd = a->bidir ? 2 * D : D;
    char ours[256];
    snprintf(ours, sizeof ours, "%s%s", a->ours_top, a->lm ? "embed_tokens.weight" : "embed_tokens.embed.weight");
    if (lay_add(y, a->lm ? "mega.embedding_layer.word_embeddings.weight" : "embedding_layer.word_embeddings.weight",
                ours, T_COPY, 2, V, D, 0))
        return 1;
    for (int i = 0; i < a->L; i++) {
        if (lay_norm(y, a, i, "mega_layer.norm.norm.") ||
            lay_layer(y, a, i, "mega_layer.move.delta", T_COPY, 3, kd, N, 1) ||
            lay_layer(y, a, i, "mega_layer.move.alpha", T_COPY, 3, kd, N, 1) ||
            lay_layer(y, a, i, "mega_layer.move.beta", T_COPY, 3, kd, N, 1) ||
            lay_layer(y, a, i, "mega_layer.move.gamma", T_COPY, 2, kd, N, 0) ||
            lay_layer(y, a, i, "mega_layer.move.omega", T_COPY, 1, D, 0, 0) ||
            lay_layer(y, a, i, "mega_layer.v_proj.weight", T_COPY, 2, E, D, 0) ||
            lay_layer(y, a, i, "mega_layer.v_proj.bias", T_COPY, 1, E, 0, 0) ||
            lay_layer(y, a, i, "mega_layer.mx_proj.weight", T_COPY, 2, Z + E + 2 * D, D, 0) ||
            lay_layer(y, a, i, "mega_layer.mx_proj.bias", T_COPY, 1, Z + E + 2 * D, 0, 0) ||
            lay_layer(y, a, i, "mega_layer.h_proj.weight", T_COPY, 2, D, E, 0) ||
            lay_layer(y, a, i, "mega_layer.h_proj.bias", T_COPY, 1, D, 0, 0) ||
            lay_layer(y, a, i, "mega_layer.gamma", T_COPY, 2, 2, Z, 0) ||
            lay_layer(y, a, i, "mega_layer.beta", T_COPY, 2, 2, Z, 0))
            return 1;
        if (a->rotary) {
            if (lay_layer(y, a, i, "mega_layer.rel_pos_bias.alpha", T_COPY, 2, 1, Z, 0) ||
                lay_layer(y, a, i, "mega_layer.rel_pos_bias.beta", T_COPY, 2, 1, Z, 0) ||
                lay_layer(y, a, i, "mega_layer.rel_pos_bias._float_tensor", T_BUFFER, 1, 1, 0, 0))
                return 1;
        } else {
            if (lay_layer(y, a, i, "mega_layer.rel_pos_bias.rel_pos_bias", T_RELPOS, 1, 2 * (int64_t)a->hf_maxpos - 1,
                          0, 0))
                return 1;
            y->e[y->n - 1].ours_numel = 2 * (int64_t)a->ours_mp - 1;
        }
        if (F > 0 && (lay_norm(y, a, i, "nffn.norm.norm.") || lay_layer(y, a, i, "nffn.fc1.weight", T_COPY, 2, F, D, 0) ||
                      lay_layer(y, a, i, "nffn.fc1.bias", T_COPY, 1, F, 0, 0) ||
                      lay_layer(y, a, i, "nffn.fc2.weight", T_COPY, 2, D, F, 0) ||
                      lay_layer(y, a, i, "nffn.fc2.bias", T_COPY, 1, D, 0, 0)))
            return 1;
    }
    if (a->lm) {
        /* tied: transformers saves no lm_head.weight (MegaForCausalLM._tied_weights_keys) */
        if (!a->tied && lay_add(y, "lm_head.weight", "decoder.output_projection.weight", T_COPY, 2, V, D, 0)) return 1;
        if (lay_add(y, "lm_head.bias", "", T_ZERO, 1, V, 0, 0)) return 1;
    }
    return 0;
}

static int64_t entry_numel(const hf_entry *e) {
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    return n;
}

/* a tensor's shape equals the entry's (a one-element tensor: [] and [1] alike, as our loader) */
static int shape_eq(const mega_st_tensor *t, const hf_entry *e, int ours) {
    if (ours && e->how == T_RELPOS) return t->ndim == 1 && t->shape[0] == e->ours_numel;
    if (entry_numel(e) == 1 && e->ndim <= 1) return (int64_t)t->numel == 1 && t->ndim <= 1;
    if (t->ndim != e->ndim) return 0;
    for (int d = 0; d < e->ndim; d++)
        if (t->shape[d] != e->shape[d]) return 0;
    return 1;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && o < n; d++) o += (size_t)snprintf(buf + o, n - o, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static int is_float_dt(mega_dtype t) { return t == MEGA_DT_F32 || t == MEGA_DT_F64 || t == MEGA_DT_F16 || t == MEGA_DT_BF16; }

/* ---- our config -> the transformers config (and what cannot be represented) ---------------- */

/* our activation names (silu, gelu, relu, linear, sigmoid) are keys of transformers' ACT2FN
 * (activations.py), which MegaConfig.activation indexes; "gelu" is the exact erf form on both
 * sides. Our attention functions (softmax, relu2, laplace) and relative biases (simple, rotary)
 * have MegaConfig's names too. */

/* the one mixer of transformers' MegaModel blocks, ours by its name (the official Mega layer) */
static mega_mixer_kind hf_mixer(void) {
    mega_mixer_kind k = (mega_mixer_kind)0;
    mega_mixer_parse("mega", &k);
    return k;
}

/* the block options transformers can represent, checked on export; 0 or 1 after the error */
static int block_exportable(const mega_block_config *b, const char *what) {
    if (b->mixer != hf_mixer())
        return cli_error("%s: the %s mixer has no Hugging Face counterpart (transformers has Mega blocks only)", what,
                         mega_mixer_name(b->mixer));
    if (b->prenorm)
        return cli_error("%s: pre-norm models end with a final norm, which transformers' MegaModel does not have; only "
                         "post-norm models (--postnorm) can be exported", what);
    if (b->n_dim < 1) return cli_error("%s: Mega without the EMA (n-dim 0) has no Hugging Face counterpart", what);
    if (b->norm_type == MEGA_NORM_RMS)
        return cli_error("%s: rmsnorm is not exported: transformers' MegaRMSNorm multiplies by its weight but never "
                         "divides by the RMS (modeling_mega.py), so it would compute another function", what);
    if (b->rel_pos_bias == MEGA_RELPOS_ROTARY && b->embed_dim % 2)
        return cli_error("%s: transformers' rotary bias requires an even hidden_size (embed-dim %d)", what, b->embed_dim);
    return 0;
}

/* transformers' MegaConfig key of one of our fields, from the library's table of official names
 * (the language model's own, then the block's; a classifier's encoder has the same keys) */
#define HF(field) mega_official_hf_name(MEGA_MODEL_LM, field)

/* a float config value as its shortest decimal (0.1, not 0.10000000149011612) */
static double tidy(float v) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", (double)v);
    return strtod(b, NULL);
}

static cJSON *hf_config_json(const mega_block_config *b, int lm, int V, int L, int pad, int tied, const hf_arch *a,
                             const cJSON *vocab) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(lm ? "MegaForCausalLM" : "MegaModel"));
    cJSON_AddStringToObject(o, "model_type", "mega");
    cJSON_AddNumberToObject(o, HF("vocab-size"), V);
    cJSON_AddNumberToObject(o, HF("embed-dim"), b->embed_dim);
    cJSON_AddNumberToObject(o, HF("layers"), L);
    cJSON_AddNumberToObject(o, HF("hidden-dim"), b->hidden_dim);
    cJSON_AddNumberToObject(o, HF("n-dim"), b->n_dim);
    cJSON_AddBoolToObject(o, HF("bidirectional"), b->bidirectional);
    cJSON_AddNumberToObject(o, HF("z-dim"), b->z_dim);
    cJSON_AddBoolToObject(o, "use_chunking", b->chunk_size > 0);
    cJSON_AddNumberToObject(o, HF("chunk-size"), b->chunk_size > 0 ? b->chunk_size : -1);
    if (b->truncation > 0) cJSON_AddNumberToObject(o, HF("truncation"), b->truncation);
    else cJSON_AddNullToObject(o, HF("truncation"));
    cJSON_AddBoolToObject(o, HF("prenorm"), 0);
    cJSON_AddStringToObject(o, HF("norm-type"), mega_norm_name(b->norm_type));
    cJSON_AddBoolToObject(o, HF("norm-affine"), b->norm_affine);
    cJSON_AddStringToObject(o, HF("activation"), mega_act_name(b->activation));
    cJSON_AddStringToObject(o, HF("attention-activation"), mega_attn_fn_name(b->attention_activation));
    cJSON_AddNumberToObject(o, HF("dropout"), tidy(b->dropout));
    cJSON_AddNumberToObject(o, HF("hidden-dropout"), tidy(b->hidden_dropout));
    cJSON_AddNumberToObject(o, HF("attention-dropout"), tidy(b->attention_dropout));
    cJSON_AddBoolToObject(o, "use_feature_dropout", 0);
    cJSON_AddBoolToObject(o, "use_normalized_ffn", b->ffn_dim > 0);
    cJSON_AddNumberToObject(o, HF("ffn-dim"), b->ffn_dim);
    cJSON_AddBoolToObject(o, "normalize_before_ffn", 0);
    cJSON_AddNumberToObject(o, HF("activation-dropout"), tidy(b->activation_dropout));
    cJSON_AddNumberToObject(o, HF("max-positions"), a->hf_maxpos);
    cJSON_AddBoolToObject(o, "add_token_type_embeddings", 0);
    cJSON_AddNumberToObject(o, "type_vocab_size", 2);
    cJSON_AddNumberToObject(o, "initializer_range", 0.02);
    cJSON_AddNumberToObject(o, "ema_delta_alpha_range", 0.2);
    cJSON_AddNumberToObject(o, "ema_beta_range", 0.02);
    cJSON_AddNumberToObject(o, "ema_gamma_omega_range", 1.0);
    cJSON_AddStringToObject(o, HF("rel-pos-bias"), mega_relpos_name(b->rel_pos_bias));
    cJSON_AddNullToObject(o, "classifier_dropout");
    cJSON_AddBoolToObject(o, "use_cache", 1);
    cJSON_AddBoolToObject(o, "add_lm_hidden_dense_layer", 0);
    if (pad >= 0) cJSON_AddNumberToObject(o, HF("padding-idx"), pad);
    else cJSON_AddNullToObject(o, HF("padding-idx"));
    /* bos/eos: a fairseq dictionary's (<s> 0, </s> 2, as MegaConfig's defaults); none for bytes,
     * where the defaults would make transformers' generate stop at byte 2 */
    const cJSON *vj = cJSON_IsObject(vocab) ? vocab : NULL;
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(vj, "bos"), *eos = cJSON_GetObjectItemCaseSensitive(vj, "eos");
    if (cJSON_IsNumber(bos)) cJSON_AddNumberToObject(o, "bos_token_id", bos->valuedouble);
    else cJSON_AddNullToObject(o, "bos_token_id");
    if (cJSON_IsNumber(eos)) cJSON_AddNumberToObject(o, "eos_token_id", eos->valuedouble);
    else cJSON_AddNullToObject(o, "eos_token_id");
    cJSON_AddBoolToObject(o, "is_decoder", lm);
    cJSON_AddBoolToObject(o, HF("tie-embeddings"), tied);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    return o;
}

/* transformers' max_positions for our block: ours, raised to the chunk when it is shorter (the
 * simple bias of modeling_mega.py is sized by max_positions but indexed around chunk_size) */
static int hf_maxpos_of(const mega_block_config *b) {
    return b->chunk_size > b->max_positions ? b->chunk_size : b->max_positions;
}

static void arch_of_block(hf_arch *a, const mega_block_config *b) {
    a->D = b->embed_dim, a->Z = b->z_dim, a->E = b->hidden_dim, a->N = b->n_dim, a->F = b->ffn_dim;
    a->bidir = b->bidirectional, a->rotary = b->rel_pos_bias == MEGA_RELPOS_ROTARY;
    a->norm = b->norm_type, a->affine = b->norm_affine;
    a->ours_mp = b->chunk_size > 0 ? b->chunk_size : b->max_positions;
    a->hf_maxpos = hf_maxpos_of(b);
}

/* metadata carried through the Hugging Face files (transformers reads only "format") */
static const char *const CARRY_LM[] = {"vocab", "tokens-per-sample", NULL};
static const char *const CARRY_CLS[] = {"vocab", "classes", "data-format", NULL};

/* the writer gets every tensor of the layout from our file f */
static int export_tensors(const hf_layout *y, const mega_st_file *f, mega_st_writer *w, const char *path) {
    for (int i = 0; i < y->n; i++) {
        const hf_entry *e = &y->e[i];
        mega_status st = MEGA_OK;
        if (e->how == T_ZERO || e->how == T_BUFFER) {
            float *z = calloc((size_t)entry_numel(e), sizeof *z);
            if (!z) return cli_error("out of memory");
            st = mega_st_writer_add(w, e->hf, MEGA_DT_F32, e->ndim, e->shape, z);
            free(z);
        } else {
            const mega_st_tensor *t = mega_st_get(f, e->ours);
            char s1[64], s2[64];
            if (!t) return cli_error("%s: no tensor '%s' (needed for '%s')", path, e->ours, e->hf);
            if (!shape_eq(t, e, 1)) {
                fmt_shape(s1, sizeof s1, t->ndim, t->shape);
                fmt_shape(s2, sizeof s2, e->ndim, e->shape);
                return cli_error("%s: tensor '%s' has shape %s, not the %s its config implies", path, e->ours, s1, s2);
            }
            if (e->how == T_RELPOS) {
                /* our 2C - 1 entries first, zeros after: transformers reads only the first 2C - 1 */
                const size_t es = mega_dtype_size(t->dtype);
                uint8_t *b = calloc((size_t)entry_numel(e), es);
                if (!b) return cli_error("out of memory");
                memcpy(b, t->data, t->nbytes);
                st = mega_st_writer_add(w, e->hf, t->dtype, e->ndim, e->shape, b);
                free(b);
            } else {
                st = mega_st_writer_add(w, e->hf, t->dtype, e->ndim, e->shape, t->data);
            }
        }
        if (st) return cli_error("%s", mega_last_error());
    }
    return 0;
}

static int write_json(const char *path, cJSON *o) {
    char *s = cJSON_Print(o);
    if (!s) return cli_error("out of memory");
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) return free(s), cli_error("out of memory");
    t[n] = '\n', t[n + 1] = 0;
    mega_status st = mega_write_file_atomic(path, t, n + 1);
    free(t);
    if (st) return cli_error("%s", mega_last_error());
    return 0;
}

static int carry_meta(mega_st_writer *w, const mega_st_file *f, const char *const *keys) {
    for (const char *const *k = keys; *k; k++) {
        const char *v = mega_st_meta(f, *k);
        if (v && mega_st_writer_meta(w, *k, v)) return cli_error("%s", mega_last_error());
    }
    return 0;
}

/* the exported LM's layout (a) and config.json (*cj), from the whole file checked as `mega eval`
 * would load it (names, shapes, finite values) */
static int export_lm_config(const char *p, const mega_st_file *f, hf_arch *a, cJSON **cj) {
    const mega_load_opts inference = {1, 0};
    mega_lm *m;
    if (mega_lm_load_ex(p, &inference, &m)) return cli_error("%s", mega_last_error());
    const mega_lm_config c = *mega_lm_get_config(m);
    mega_lm_free(m);
    if (block_exportable(&c.block, p)) return 1;
    if (c.adaptive_input || c.adaptive_softmax_cutoff[0])
        return cli_error("%s: adaptive input / adaptive softmax have no counterpart in transformers' Mega models", p);
    if (c.scale_embedding)
        return cli_error("%s: the embeddings are scaled by sqrt(embed-dim), which transformers' MegaEmbeddings never "
                         "does; only models with --no-scale-embedding can be exported", p);
    a->lm = 1, a->V = c.vocab_size, a->L = c.layers, a->tied = c.tie_embeddings;
    snprintf(a->ours_top, sizeof a->ours_top, "decoder.");
    arch_of_block(a, &c.block);
    const char *vs = mega_st_meta(f, "vocab");
    cJSON *vocab = vs ? cJSON_Parse(vs) : NULL;
    *cj = hf_config_json(&c.block, 1, c.vocab_size, c.layers, c.padding_idx, c.tie_embeddings, a, vocab);
    cJSON_Delete(vocab);
    return *cj ? 0 : cli_error("out of memory");
}

/* the same for a classifier's encoder */
static int export_cls_config(const char *p, hf_arch *a, cJSON **cj) {
    const mega_load_opts inference = {1, 0};
    mega_cls *m;
    if (mega_cls_load_ex(p, &inference, &m)) return cli_error("%s", mega_last_error());
    const mega_cls_config c = *mega_cls_get_config(m);
    mega_cls_free(m);
    if (block_exportable(&c.block, p)) return 1;
    if (c.embedding != MEGA_EMBED_TOKEN)
        return cli_error("%s: real-valued inputs (embedding real) have no counterpart in transformers' MegaEmbeddings "
                         "(token ids only)", p);
    a->lm = 0, a->V = c.vocab_size, a->L = c.layers, a->tied = 0;
    snprintf(a->ours_top, sizeof a->ours_top, "encoder.encoder.");
    arch_of_block(a, &c.block);
    *cj = hf_config_json(&c.block, 0, c.vocab_size, c.layers, c.padding_idx, 0, a, NULL);
    return *cj ? 0 : cli_error("out of memory");
}

/* ---- writing the export safely ----------------------------------------------------------
 * The files are written under temporary names in --out (TMP_PREFIX, the process id, the final
 * name) and renamed into place at the end, config.json last. The weights carry a fingerprint of
 * the config.json written with them (metadata HF_FINGERPRINT), so that an export stopped between
 * two renames, which leaves new weights beside the old config.json, is refused by hf-import
 * instead of read with the old config's activation or norm. */
#define TMP_PREFIX ".mega-hf-export."
#define HF_FINGERPRINT "mega-hf-config"

/* FNV-1a 64 of the config as cJSON prints it unformatted (blanks and indentation do not count) */
static int config_fingerprint(const cJSON *o, char *buf, size_t n) {
    char *s = cJSON_PrintUnformatted(o);
    if (!s) return cli_error("out of memory");
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) h = (h ^ *c) * 0x100000001b3ull;
    free(s);
    snprintf(buf, n, "fnv1a64:%016llx", (unsigned long long)h);
    return 0;
}

/* the same directory: equal st_dev and st_ino (a path through a symlink, "dir/." or "./dir" too) */
static int same_dir(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* the directory part of a file path ("." for a bare name) */
static void dir_of(const char *path, char *buf, size_t n) {
    const char *sl = strrchr(path, '/');
    if (!sl) snprintf(buf, n, ".");
    else if (sl == path) snprintf(buf, n, "/");
    else snprintf(buf, n, "%.*s", (int)(sl - path), path);
}

/* temporaries of an earlier export in dir whose process is gone (killed mid-write): removed */
static void remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) continue;
        char *end;
        const long pid = strtol(e->d_name + strlen(TMP_PREFIX), &end, 10);
        if (end == e->d_name + strlen(TMP_PREFIX) || *end != '.') continue;
        if (pid > 0 && (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno == EPERM)) continue; /* alive */
        char p[4400];
        unlink(path_join(p, sizeof p, dir, e->d_name));
    }
    closedir(d);
}

/* the export's files: final names, and their temporary names while written */
enum { EXP_MODEL, EXP_HEAD, EXP_CONFIG, EXP_FILES };
static const char *const EXP_NAMES[EXP_FILES] = {"model.safetensors", HF_HEAD_FILE, "config.json"};

static void exp_tmp(char *buf, size_t n, const char *out, int i) {
    char name[128];
    snprintf(name, sizeof name, TMP_PREFIX "%ld.%s", (long)getpid(), EXP_NAMES[i]);
    path_join(buf, n, out, name);
}

/* Ctrl-C or a kill while the files are written: the temporaries (ours and the writer's own
 * "NAME.tmp.PID") are removed before the signal does what it would have done */
static char exp_tmps[2 * EXP_FILES][4450];
static const int EXP_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};

static void exp_on_signal(int sig) {
    for (int i = 0; i < 2 * EXP_FILES; i++)
        if (exp_tmps[i][0]) unlink(exp_tmps[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* arm (out) or disarm (NULL) the removal on a signal */
static void exp_signals(const char *out) {
    for (int i = 0; out && i < EXP_FILES; i++) {
        char t[4400];
        exp_tmp(t, sizeof t, out, i);
        snprintf(exp_tmps[2 * i], sizeof exp_tmps[0], "%.4399s", t);
        snprintf(exp_tmps[2 * i + 1], sizeof exp_tmps[0], "%.4399s.tmp.%ld", t, (long)getpid());
    }
    for (size_t k = 0; k < sizeof EXP_SIGNALS / sizeof *EXP_SIGNALS; k++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = out ? exp_on_signal : SIG_DFL;
        sigemptyset(&sa.sa_mask);
        sigaction(EXP_SIGNALS[k], &sa, NULL);
    }
}

static void exp_cleanup(const char *out) {
    char p[4400];
    for (int i = 0; i < EXP_FILES; i++) exp_tmp(p, sizeof p, out, i), unlink(p);
}

/* the temporaries renamed into place, config.json last, and the directory synced */
static int exp_commit(const char *out, int has_head) {
    char t[4400], p[4400];
    for (int i = 0; i < EXP_FILES; i++) {
        if (i == EXP_HEAD && !has_head) continue;
        exp_tmp(t, sizeof t, out, i);
        if (rename(t, path_join(p, sizeof p, out, EXP_NAMES[i])))
            return cli_error("%s: rename failed: %s", p, strerror(errno));
    }
    const int fd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) fsync(fd), close(fd);
    return 0;
}

static int hf_export(const char *model, const char *out) {
    char p[4096], path[4200];
    if (!model_path(model, p, sizeof p)) return cli_error("%s", mega_last_error()); /* --which of a run directory */
    dir_of(p, path, sizeof path);
    if (same_dir(out, path))
        return cli_error("--out '%s' is the directory of the model (%s): the export would overwrite its input; choose "
                         "another directory", out, p);
    mega_st_file *f;
    if (mega_st_open(p, &f)) return cli_error("%s", mega_last_error());
    int rc = 1;
    hf_layout y = {0};
    mega_st_writer *w = NULL, *hw = NULL;
    cJSON *cj = NULL;
    const char *cfg = mega_st_meta(f, "config");
    if (!cfg) {
        cli_error("%s: no model config in the file's __metadata__ (key 'config')", p);
        goto done;
    }
    mega_model_kind kind;
    if (mega_model_kind_of_json(cfg, &kind)) {
        cli_error("%s: %s", p, mega_last_error());
        goto done;
    }
    const int cls = kind == MEGA_MODEL_CLS;
    if (kind == MEGA_MODEL_S2S) {
        cli_error("%s: an encoder-decoder (translation) model: transformers has no Mega encoder-decoder class to export "
                  "it to", p);
        goto done;
    }
    hf_arch a;
    memset(&a, 0, sizeof a);
    if (cls ? export_cls_config(p, &a, &cj) : export_lm_config(p, f, &a, &cj)) goto done;
    if (layout_build(&y, &a)) goto done;
    w = mega_st_writer_new();
    if (!w) {
        cli_error("out of memory");
        goto done;
    }
    char fp[64];
    if (config_fingerprint(cj, fp, sizeof fp)) goto done;
    /* transformers refuses a safetensors file whose metadata "format" is not pt/tf/flax/mlx */
    if (mega_st_writer_meta(w, "format", "pt") || mega_st_writer_meta(w, HF_FINGERPRINT, fp)) {
        cli_error("%s", mega_last_error());
        goto done;
    }
    if (!cls && carry_meta(w, f, CARRY_LM)) goto done;
    if (export_tensors(&y, f, w, p)) goto done;
    if (cls) {
        /* the head (classifier.*, sentence_projection_layer.weight) and our config go to a side
         * file transformers does not read, so that hf-import can rebuild the classifier */
        hw = mega_st_writer_new();
        if (!hw || mega_st_writer_meta(hw, "config", cfg) || mega_st_writer_meta(hw, "format", "mega " MEGA_VERSION) ||
            mega_st_writer_meta(hw, HF_FINGERPRINT, fp) || carry_meta(hw, f, CARRY_CLS)) {
            cli_error("%s", hw ? mega_last_error() : "out of memory");
            goto done;
        }
        for (int i = 0; i < mega_st_count(f); i++) {
            const mega_st_tensor *t = mega_st_at(f, i);
            if (strncmp(t->name, "classifier.", 11) && strcmp(t->name, "sentence_projection_layer.weight")) continue;
            if (mega_st_writer_add(hw, t->name, t->dtype, t->ndim, t->shape, t->data)) {
                cli_error("%s", mega_last_error());
                goto done;
            }
        }
    }
    if (ensure_dir(out)) goto done;
    remove_stale_temps(out);
    exp_signals(out);
    exp_tmp(path, sizeof path, out, EXP_MODEL);
    int bad = mega_st_writer_write(w, path) != MEGA_OK;
    if (!bad && hw) exp_tmp(path, sizeof path, out, EXP_HEAD), bad = mega_st_writer_write(hw, path) != MEGA_OK;
    if (bad) cli_error("%s", mega_last_error());
    if (!bad) exp_tmp(path, sizeof path, out, EXP_CONFIG), bad = write_json(path, cj);
    bad = bad || exp_commit(out, hw != NULL);
    if (bad) exp_cleanup(out);
    exp_signals(NULL);
    if (bad) goto done;
    printf("exported %s -> %s (%s, %d tensors%s)\n", p, out, cls ? "MegaModel" : "MegaForCausalLM", y.n,
           cls ? "; the classification head in " HF_HEAD_FILE : "");
    rc = 0;
done:
    cJSON_Delete(cj);
    mega_st_writer_free(w);
    mega_st_writer_free(hw);
    free(y.e);
    mega_st_close(f);
    return rc;
}

/* ---- import: the transformers config -> ours ---------------------------------------------- */

typedef struct {
    const cJSON *o;
    const char *path;
} hf_cfg;

static const cJSON *cfg_get(const hf_cfg *c, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* an integer field; required, or the transformers default (MegaConfig.__init__) when absent */
static int cfg_int(const hf_cfg *c, const char *k, int required, int def, int lo, int *dst) {
    const cJSON *v = cfg_get(c, k);
    if (!v) {
        if (required) return cli_error("%s: '%s' is missing", c->path, k);
        *dst = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > 1 << 30)
        return cli_error("%s: '%s' must be an integer >= %d", c->path, k, lo);
    *dst = (int)v->valuedouble;
    return 0;
}

static int cfg_bool(const hf_cfg *c, const char *k, int required, int def, int *dst) {
    const cJSON *v = cfg_get(c, k);
    if (!v) {
        if (required) return cli_error("%s: '%s' is missing", c->path, k);
        *dst = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) return cli_error("%s: '%s' must be true or false", c->path, k);
    *dst = cJSON_IsTrue(v);
    return 0;
}

static int cfg_flt(const hf_cfg *c, const char *k, float def, float *dst) {
    const cJSON *v = cfg_get(c, k);
    if (!v) {
        *dst = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1))
        return cli_error("%s: '%s' must be a probability in [0, 1)", c->path, k);
    *dst = (float)v->valuedouble;
    return 0;
}

/* a string field looked up in names[0..n); absent: def */
static int cfg_choice(const hf_cfg *c, const char *k, const char *def, const char *const *names, int n, int *dst,
                      const char *why) {
    const cJSON *v = cfg_get(c, k);
    const char *s = v && cJSON_IsString(v) ? v->valuestring : v ? NULL : def;
    if (!s) return cli_error("%s: '%s' must be a string", c->path, k);
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return *dst = i, 0;
    return cli_error("%s: %s '%s' is not supported here%s", c->path, k, s, why ? why : "");
}

/* the block options from a transformers config (bidirectional as the model kind needs) */
static int block_from_hf(const hf_cfg *c, mega_block_config *b, int want_bidir) {
    int v = 0, pre_mega = 1, pre_ffn = 1, chunking = 0, chunk, ffn = 0, trunc = 0;
    mega_block_config_default(b);
    b->mixer = hf_mixer();
    if (cfg_int(c, HF("embed-dim"), 1, 0, 1, &b->embed_dim) || cfg_int(c, HF("z-dim"), 1, 0, 1, &b->z_dim) ||
        cfg_int(c, HF("hidden-dim"), 1, 0, 1, &b->hidden_dim) || cfg_int(c, HF("n-dim"), 1, 0, 1, &b->n_dim) ||
        cfg_int(c, HF("max-positions"), 1, 0, 1, &b->max_positions))
        return 1;
    if (cfg_bool(c, HF("bidirectional"), 1, 0, &v)) return 1;
    if (v != want_bidir)
        return cli_error("%s: bidirectional is %s, but this project's %s", c->path, v ? "true" : "false",
                         want_bidir ? "encoders are bidirectional (both EMA directions and no causal mask)"
                                    : "language models are causal (a one-way EMA)");
    b->bidirectional = want_bidir;
    const cJSON *t = cfg_get(c, HF("truncation"));
    if (t && (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 1 || t->valuedouble > 1 << 30))
        return cli_error("%s: 'truncation' must be null or a positive integer", c->path);
    if (t) trunc = (int)t->valuedouble;
    b->truncation = trunc;
    if (cfg_bool(c, HF("prenorm"), 0, 1, &pre_mega) || cfg_bool(c, "normalize_before_ffn", 0, 1, &pre_ffn)) return 1;
    if (pre_mega != pre_ffn)
        return cli_error("%s: normalize_before_mega and normalize_before_ffn differ; the official block (and this "
                         "project's) normalizes both sublayers the same way", c->path);
    if (pre_mega)
        return cli_error("%s: pre-norm blocks (normalize_before_mega true, the transformers default) without a final "
                         "norm: this project's pre-norm models end with a final norm, as the official ones; only "
                         "post-norm models can be imported", c->path);
    b->prenorm = 0;
    static const char *const NORMS[] = {"layernorm", "scalenorm", "rmsnorm", "batchnorm", "syncbatchnorm"};
    if (cfg_choice(c, HF("norm-type"), "scalenorm", NORMS, 5, &v, NULL)) return 1;
    if (v == 2)
        return cli_error("%s: normalization_type rmsnorm is refused: transformers' MegaRMSNorm multiplies by its "
                         "weight but never divides by the RMS (modeling_mega.py), unlike the official RMSNorm", c->path);
    b->norm_type = v == 0 ? MEGA_NORM_LAYER : v == 1 ? MEGA_NORM_SCALE : MEGA_NORM_BATCH; /* sync: the same at inference */
    if (cfg_bool(c, HF("norm-affine"), 0, 1, &b->norm_affine)) return 1;
    const char *acts[MEGA_ACT_COUNT], *attns[MEGA_ATTN_COUNT], *rels[MEGA_RELPOS_COUNT];
    for (int i = 0; i < MEGA_ACT_COUNT; i++) acts[i] = mega_act_name((mega_act)i);
    for (int i = 0; i < MEGA_ATTN_COUNT; i++) attns[i] = mega_attn_fn_name((mega_attn_fn)i);
    for (int i = 0; i < MEGA_RELPOS_COUNT; i++) rels[i] = mega_relpos_name((mega_relpos_kind)i);
    int act;
    if (cfg_choice(c, HF("activation"), "silu", acts, MEGA_ACT_COUNT, &act, " (silu, gelu, relu, linear, sigmoid)")) return 1;
    b->activation = (mega_act)act;
    if (cfg_choice(c, HF("attention-activation"), "softmax", attns, MEGA_ATTN_COUNT, &act, NULL)) return 1;
    b->attention_activation = (mega_attn_fn)act;
    if (cfg_choice(c, HF("rel-pos-bias"), "rotary", rels, MEGA_RELPOS_COUNT, &act, NULL)) return 1;
    b->rel_pos_bias = (mega_relpos_kind)act;
    if (cfg_bool(c, "use_chunking", 0, 0, &chunking)) return 1;
    const cJSON *cs = cfg_get(c, HF("chunk-size"));
    if (cs && (!cJSON_IsNumber(cs) || cs->valuedouble != floor(cs->valuedouble) || cs->valuedouble > 1 << 20))
        return cli_error("%s: 'chunk_size' must be an integer", c->path);
    chunk = cs ? (int)cs->valuedouble : -1;
    if (chunking && chunk < 1) return cli_error("%s: use_chunking is true but chunk_size is %d", c->path, chunk);
    if (chunk > 0 && b->rel_pos_bias == MEGA_RELPOS_SIMPLE && chunk > b->max_positions)
        return cli_error("%s: chunk_size %d exceeds max_positions %d: transformers' simple bias would be read past "
                         "its end", c->path, chunk, b->max_positions);
    if (chunking) b->chunk_size = chunk;
    else {
        /* without chunking transformers still centres the simple bias on chunk_size when it is
         * set (MegaSimpleRelativePositionalBias): that is full attention over at most
         * chunk_size positions, our max-positions */
        b->chunk_size = -1;
        if (chunk > 0 && b->rel_pos_bias == MEGA_RELPOS_SIMPLE) b->max_positions = chunk;
    }
    if (cfg_bool(c, "use_normalized_ffn", 0, 1, &v) || cfg_int(c, HF("ffn-dim"), 0, 256, 0, &ffn)) return 1;
    if (v && ffn < 1) return cli_error("%s: use_normalized_ffn is true but nffn_hidden_size is %d", c->path, ffn);
    b->ffn_dim = v ? ffn : 0;
    if (cfg_flt(c, HF("dropout"), 0.1f, &b->dropout) || cfg_flt(c, HF("hidden-dropout"), 0.1f, &b->hidden_dropout) ||
        cfg_flt(c, HF("attention-dropout"), 0.1f, &b->attention_dropout) ||
        cfg_flt(c, HF("activation-dropout"), 0.1f, &b->activation_dropout))
        return 1;
    if (cfg_bool(c, "add_token_type_embeddings", 0, 0, &v)) return 1;
    if (v)
        return cli_error("%s: add_token_type_embeddings is true: token type embeddings have no counterpart here", c->path);
    return 0;
}

/* the transformers class a config names, and whether it is one we import */
static int hf_kind(const hf_cfg *c, int *lm) {
    const cJSON *mt = cfg_get(c, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "mega")))
        return cli_error("%s: model_type is %s, not mega", c->path, cJSON_IsString(mt) ? mt->valuestring : "not a string");
    const cJSON *ar = cfg_get(c, "architectures"), *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
    const char *cls = a0 && cJSON_IsString(a0) ? a0->valuestring : NULL;
    int dec = 0;
    if (cfg_bool(c, "is_decoder", 0, 0, &dec)) return 1;
    if (!cls) cls = dec ? "MegaForCausalLM" : "MegaModel";
    if (!strcmp(cls, "MegaForCausalLM")) {
        if (!dec)
            return cli_error("%s: MegaForCausalLM with is_decoder false: transformers then builds no causal mask, so it "
                             "is not a causal language model", c->path);
        *lm = 1;
        return 0;
    }
    if (!strcmp(cls, "MegaModel")) {
        if (dec) return cli_error("%s: a MegaModel with is_decoder true is a decoder; only encoders are imported", c->path);
        *lm = 0;
        return 0;
    }
    return cli_error("%s: %s is not imported: only MegaForCausalLM (our language model) and MegaModel (our classifier's "
                     "encoder) have counterparts here%s", c->path, cls,
                     !strcmp(cls, "MegaForMaskedLM") ? " (a masked LM head)"
                     : !strcmp(cls, "MegaForSequenceClassification") ? " (its dense+tanh head on the first token differs from the official LRA head)"
                                                                      : "");
}

/* why an HF tensor that the layout does not hold is there */
static const char *extra_reason(const char *n) {
    if (strstr(n, "token_type_embeddings")) return "token type embeddings have no counterpart here";
    if (!strncmp(n, "dense.", 6)) return "the dense+tanh layer before the LM head has no counterpart here";
    if (strstr(n, "pooler.")) return "the pooler of MegaModel has no counterpart here";
    return "not part of the Mega model its config.json describes";
}

/* The writer gets our tensors from the transformers file f (path names it in messages): every
 * tensor of the layout present with its shape and a fitting dtype, lm_head.bias zero, and no
 * tensor left over. 0, or 1 after the error. */
static int import_tensors(const hf_layout *y, const mega_st_file *f, mega_st_writer *w, const char *path) {
    const int nt = mega_st_count(f);
    int *used = calloc((size_t)nt + 1, sizeof *used);
    float *tmp = NULL;
    int rc = 1;
    if (!used) return cli_error("out of memory");
    for (int i = 0; i < y->n; i++) {
        const hf_entry *e = &y->e[i];
        const mega_st_tensor *t = mega_st_get(f, e->hf);
        char s1[64], s2[64];
        fmt_shape(s2, sizeof s2, e->ndim, e->shape);
        if (!t) {
            if (e->how == T_BUFFER) continue; /* a marker buffer, recreated by transformers */
            cli_error("%s: no tensor '%s' (%s, which config.json implies)", path, e->hf, s2);
            goto out;
        }
        for (int k = 0; k < nt; k++)
            if (mega_st_at(f, k) == t) used[k] = 1;
        if (!shape_eq(t, e, 0)) {
            fmt_shape(s1, sizeof s1, t->ndim, t->shape);
            cli_error("%s: tensor '%s' has shape %s, but config.json implies %s", path, e->hf, s1, s2);
            goto out;
        }
        if (e->i64 ? is_float_dt(t->dtype) || t->dtype == MEGA_DT_BOOL : !is_float_dt(t->dtype)) {
            cli_error("%s: tensor '%s' has dtype %s (%s expected)", path, e->hf, mega_dtype_name(t->dtype),
                      e->i64 ? "an integer type" : "floating point");
            goto out;
        }
        if (e->how == T_BUFFER) continue;
        if (e->how == T_ZERO) {
            /* the official LM head has no bias: only a zero bias converts exactly */
            free(tmp);
            tmp = malloc(t->numel * sizeof *tmp);
            if (!tmp || mega_st_read_real(t, tmp, t->numel)) {
                cli_error("%s", tmp ? mega_last_error() : "out of memory");
                goto out;
            }
            size_t k = 0;
            while (k < t->numel && tmp[k] == 0) k++;
            if (k < t->numel) {
                cli_error("%s: lm_head.bias is not zero (entry %zu is %g): this project's language models have no "
                          "output bias (the official output_projection has none)", path, k, (double)tmp[k]);
                goto out;
            }
            continue;
        }
        /* T_RELPOS: the first 2C - 1 entries, the ones transformers reads */
        const int64_t rel[1] = {e->ours_numel};
        if (mega_st_writer_add(w, e->ours, t->dtype, e->how == T_RELPOS ? 1 : t->ndim, e->how == T_RELPOS ? rel : t->shape,
                               t->data)) {
            cli_error("%s", mega_last_error());
            goto out;
        }
    }
    for (int k = 0; k < nt; k++) {
        const mega_st_tensor *t = mega_st_at(f, k);
        if (used[k]) continue;
        if (!strcmp(t->name, "lm_head.weight")) {
            /* tied (tie_word_embeddings): transformers uses the word embeddings whatever this holds;
             * a copy that differs would make the file say two things */
            const mega_st_tensor *e = mega_st_get(f, y->e[0].hf);
            if (e && e->dtype == t->dtype && e->nbytes == t->nbytes && !memcmp(e->data, t->data, t->nbytes)) continue;
            cli_error("%s: lm_head.weight differs from the word embeddings, but tie_word_embeddings is true", path);
            goto out;
        }
        cli_error("%s: tensor '%s': %s", path, t->name, extra_reason(t->name));
        goto out;
    }
    rc = 0;
out:
    free(tmp);
    free(used);
    return rc;
}

/* the LM of a MegaForCausalLM config into lc and the layout's description */
static int import_lm_config(const hf_cfg *c, hf_arch *a, mega_lm_config *lc, int pad) {
    int dense = 1;
    mega_lm_config_default(lc);
    if (block_from_hf(c, &lc->block, 0) || cfg_bool(c, "add_lm_hidden_dense_layer", 0, 1, &dense) ||
        cfg_bool(c, HF("tie-embeddings"), 0, 1, &lc->tie_embeddings))
        return 1;
    if (dense)
        return cli_error("%s: add_lm_hidden_dense_layer is true (the transformers default): the dense+tanh layer before "
                         "the LM head has no counterpart here", c->path);
    lc->vocab_size = a->V, lc->layers = a->L, lc->padding_idx = pad, lc->scale_embedding = 0;
    if (mega_lm_config_check(lc)) return cli_error("%s: %s", c->path, mega_last_error());
    a->tied = lc->tie_embeddings;
    snprintf(a->ours_top, sizeof a->ours_top, "decoder.");
    return 0;
}

/* the classifier around a MegaModel encoder: our config and head from the side file (opened into
 * *hf), the encoder's fields from config.json */
static int import_cls_config(const hf_cfg *c, const char *hfdir, hf_arch *a, mega_cls_config *cc, int pad,
                             mega_st_file **hf) {
    char path[4200];
    path_join(path, sizeof path, hfdir, HF_HEAD_FILE);
    if (!file_exists(path))
        return cli_error("%s: a Mega encoder (MegaModel) without %s: this project's encoders belong to classifiers, "
                         "whose head and labels that file holds (written by mega hf-export)", hfdir, HF_HEAD_FILE);
    const char *hc;
    if (mega_st_open(path, hf) || !(hc = mega_st_meta(*hf, "config")) || mega_cls_config_from_json(hc, cc))
        return cli_error("%s: %s", path, *hf ? mega_last_error() : "unreadable");
    mega_block_config *b = &cc->block;
    const mega_block_config head_block = cc->block;
    if (block_from_hf(c, b, 1)) return 1;
    b->train_len = head_block.train_len;
    if (cc->embedding != MEGA_EMBED_TOKEN) return cli_error("%s: the classifier in %s has real-valued inputs", hfdir, HF_HEAD_FILE);
    if (pad < 0) return cli_error("%s: pad_token_id is null, but this project's encoders need a padding token", c->path);
    cc->vocab_size = a->V, cc->layers = a->L, cc->padding_idx = pad;
    if (mega_cls_config_check(cc)) return cli_error("%s: %s", c->path, mega_last_error());
    snprintf(a->ours_top, sizeof a->ours_top, "encoder.encoder.");
    return 0;
}

/* w into out/model.safetensors (outp), which must then load as `mega eval` loads it (a check of
 * this converter: the layout and our declared parameters must agree; removed if not) */
static int write_imported(mega_st_writer *w, const char *out, int lm, char *outp, size_t n) {
    if (ensure_dir(out)) return 1;
    /* a run directory's loaders prefer its newest generation to model.safetensors */
    if (file_exists(path_join(outp, n, out, "checkpoint.json")))
        return cli_error("'%s' holds a training run (checkpoint.json), whose newest checkpoint would shadow the "
                         "imported model: choose another --out", out);
    path_join(outp, n, out, "model.safetensors");
    if (mega_st_writer_write(w, outp)) return cli_error("%s", mega_last_error());
    const mega_load_opts inference = {1, 0};
    mega_model *m = NULL;
    mega_status st = mega_model_load_ex(outp, &inference, &m);
    const int other = !st && mega_model_kind_of(m) != (lm ? MEGA_MODEL_LM : MEGA_MODEL_CLS);
    mega_model_free(m);
    if (st || other) {
        cli_error("internal: the converted model does not load (%s); removed", st ? mega_last_error() : "another kind");
        unlink(outp);
        return 1;
    }
    return 0;
}

/* The metadata hf-import copies, checked as the tool's loaders check it (lm_meta;
 * load_cls_model), so that what is written loads and reads its data as it should: f is the file
 * that holds it (path names it), V the model's vocabulary, classes its outputs (classifiers). */
static int check_carried(const mega_st_file *f, const char *path, int lm, int V, int classes) {
    const char *vj = mega_st_meta(f, "vocab");
    if (lm) {
        mega_fdict *d;
        size_t tps;
        if (lm_meta(f, path, V, &d, &tps)) return 1;
        const int fd = d != NULL;
        mega_fdict_free(d);
        if (vj && !fd)
            return cli_error("%s: metadata vocab is not a fairseq dictionary (a language model's only vocabulary; "
                             "byte models have none)", path);
        return 0;
    }
    const char *cj = mega_st_meta(f, "classes"), *fm = mega_st_meta(f, "data-format");
    /* a classifier converted from an official LRA checkpoint: a fairseq dictionary, and class
     * names only when its label dictionary gave them (load_cls_model) */
    mega_fdict *d;
    if (meta_fdict(f, "vocab", V, path, "fairseq dictionary", &d)) return 1;
    const int fairseq = d != NULL;
    mega_fdict_free(d);
    mega_classes cl;
    memset(&cl, 0, sizeof cl);
    if (fairseq && !cj) return 0;
    if (!cj || mega_classes_from_json(cj, &cl) != MEGA_OK)
        return cli_error("%s: metadata classes %s", path, cj ? "is not a list of distinct class names" : "is missing");
    const int n = cl.n;
    mega_classes_free(&cl);
    if (n > classes) return cli_error("%s: metadata classes names %d classes, but the head has %d outputs", path, n, classes);
    mega_vocab v;
    if (fairseq) v.size = 0;
    else if (!vj || mega_vocab_from_json(vj, &v) != MEGA_OK)
        return cli_error("%s: metadata vocab %s", path, vj ? "is not a vocabulary this build reads" : "is missing");
    if (v.size > V) return cli_error("%s: metadata vocab has %d ids, but the model embeds %d", path, v.size, V);
    mega_data_format df;
    if (fm && mega_data_format_parse(fm, &df)) return cli_error("%s: metadata data-format '%s' is not a data format", path, fm);
    return 0;
}

static const char *hf_head_path(char *buf, size_t n, const char *hfdir) { return path_join(buf, n, hfdir, HF_HEAD_FILE); }

/* the weights (f, at path) were written by hf-export with this config.json (o), when they say so */
static int check_fingerprint(const mega_st_file *f, const char *path, const cJSON *o, const char *hfdir) {
    const char *want = f ? mega_st_meta(f, HF_FINGERPRINT) : NULL;
    char got[64];
    if (!want) return 0; /* not written by mega hf-export (transformers' save_pretrained, say) */
    if (config_fingerprint(o, got, sizeof got)) return 1;
    if (strcmp(want, got))
        return cli_error("%s was written by mega hf-export with another config.json than the one in %s (an export "
                         "interrupted between its files, or an edited config.json): export again", path, hfdir);
    return 0;
}

static int hf_import(const char *hfdir, const char *out) {
    char path[4200], outp[4200];
    mega_bytes cb = {0};
    cJSON *o = NULL;
    mega_st_file *f = NULL, *hf = NULL;
    mega_st_writer *w = NULL;
    hf_layout y = {0};
    char *ocfg = NULL;
    int rc = 1;
    if (same_dir(hfdir, out))
        return cli_error("--out '%s' is the --hf directory: the import would overwrite its input; choose another "
                         "directory", out);
    path_join(path, sizeof path, hfdir, "config.json");
    if (mega_read_file_max(path, "config", 1 << 24, &cb)) {
        cli_error("%s", mega_last_error());
        goto done;
    }
    o = cJSON_ParseWithLength((const char *)cb.data, cb.n);
    if (!o || !cJSON_IsObject(o)) {
        cli_error("%s: not a JSON object", path);
        goto done;
    }
    hf_cfg c = {o, path};
    int lm = 0;
    if (hf_kind(&c, &lm)) goto done;
    hf_arch a;
    memset(&a, 0, sizeof a);
    a.lm = lm;
    mega_lm_config lc;
    mega_cls_config cc;
    int pad = -1;
    if (cfg_int(&c, HF("vocab-size"), 1, 0, 2, &a.V) || cfg_int(&c, HF("layers"), 1, 0, 1, &a.L) ||
        cfg_int(&c, HF("padding-idx"), 0, 1, 0, &pad))
        goto done;
    if (!cfg_get(&c, HF("padding-idx")) && cJSON_GetObjectItemCaseSensitive(o, HF("padding-idx"))) pad = -1; /* null */
    if (lm ? import_lm_config(&c, &a, &lc, pad) : import_cls_config(&c, hfdir, &a, &cc, pad, &hf)) goto done;
    arch_of_block(&a, lm ? &lc.block : &cc.block);
    /* transformers' parameter length is its own max_positions (read, not derived) */
    {
        int mp;
        if (cfg_int(&c, HF("max-positions"), 1, 0, 1, &mp)) goto done;
        a.hf_maxpos = mp;
    }
    if (layout_build(&y, &a)) goto done;

    path_join(path, sizeof path, hfdir, "model.safetensors");
    if (!file_exists(path)) {
        char bin[4200];
        cli_error("%s: no model.safetensors%s", hfdir,
                  file_exists(path_join(bin, sizeof bin, hfdir, "pytorch_model.bin"))
                      ? " (pytorch_model.bin is not read: save the model with safe_serialization=True)"
                      : "");
        goto done;
    }
    if (mega_st_open(path, &f)) {
        cli_error("%s", mega_last_error());
        goto done;
    }
    w = mega_st_writer_new();
    if (!w) {
        cli_error("out of memory");
        goto done;
    }
    if (import_tensors(&y, f, w, path) || check_fingerprint(f, path, o, hfdir)) goto done;
    if (lm ? check_carried(f, path, 1, a.V, 0) : check_carried(hf, hf_head_path(path, sizeof path, hfdir), 0, a.V, cc.classes) ||
                                                  check_fingerprint(hf, path, o, hfdir))
        goto done;
    if (lm) {
        /* the head-less classes' metadata (vocab) travels in model.safetensors */
        if (carry_meta(w, f, CARRY_LM)) goto done;
        ocfg = mega_lm_config_to_json(&lc);
    } else {
        for (int i = 0; i < mega_st_count(hf); i++) {
            const mega_st_tensor *t = mega_st_at(hf, i);
            if (mega_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data)) {
                cli_error("%s", mega_last_error());
                goto done;
            }
        }
        if (carry_meta(w, hf, CARRY_CLS)) goto done;
        ocfg = mega_cls_config_to_json(&cc);
    }
    if (!ocfg || mega_st_writer_meta(w, "config", ocfg) || mega_st_writer_meta(w, "format", "mega " MEGA_VERSION) ||
        mega_st_writer_meta(w, "task", lm ? "lm" : "classify")) {
        cli_error("%s", ocfg ? mega_last_error() : "out of memory");
        goto done;
    }
    if (write_imported(w, out, lm, outp, sizeof outp)) goto done;
    printf("imported %s (%s, %d layers) -> %s\n", hfdir, lm ? "MegaForCausalLM" : "MegaModel", a.L, outp);
    rc = 0;
done:
    free(ocfg);
    free(y.e);
    mega_st_writer_free(w);
    mega_st_close(f);
    mega_st_close(hf);
    cJSON_Delete(o);
    mega_bytes_free(&cb);
    return rc;
}

/* ---- the commands ------------------------------------------------------------------------- */

int cmd_hf_export(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    cli_flag fl[] = {{"model", F_STR, &model, "our model: a checkpoint directory or model.safetensors", NULL, 1, 0, 0},
                     {"out", F_STR, &out, "the Hugging Face directory to write (config.json, model.safetensors)", NULL, 1, 0, 0},
                     WHICH_FLAG,
                     FL_END};
    const char *usage =
        "--model DIR --out HFDIR [--which best|last]\n\n"
        "Writes a model in the layout of Hugging Face transformers' Mega (config.json with MegaConfig's\n"
        "fields, model.safetensors with modeling_mega.py's parameter names): a language model as\n"
        "MegaForCausalLM, a classifier's encoder as MegaModel (its head goes to " HF_HEAD_FILE ",\n"
        "which transformers does not read and mega hf-import does). Refused, with the reason: what\n"
        "transformers computes differently (pre-norm models, whose final norm it lacks; scaled\n"
        "embeddings; rmsnorm; other mixers; n-dim 0; real-valued inputs). docs/interop.md.";
    int r = cli_parse("hf-export", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!model || !out) return cli_error("--model and --out are required (see 'mega hf-export --help')"), 2;
    if (strlen(out) > 4000) return cli_error("--out: path too long"), 2;
    return hf_export(model, out) ? 2 : 0;
}

int cmd_hf_import(int argc, char **argv) {
    const char *hf = NULL, *out = NULL;
    cli_flag fl[] = {{"hf", F_STR, &hf, "a Hugging Face Mega directory (config.json, model.safetensors)", NULL, 1, 0, 0},
                     {"out", F_STR, &out, "the directory to write our model.safetensors into", NULL, 1, 0, 0},
                     FL_END};
    const char *usage =
        "--hf HFDIR --out DIR\n\n"
        "Reads a Hugging Face transformers Mega model (config.json, model.safetensors) and writes\n"
        "DIR/model.safetensors with the official parameter names: MegaForCausalLM becomes a language\n"
        "model, MegaModel a classifier (with the head of " HF_HEAD_FILE ", written by hf-export).\n"
        "Refused, with the reason: what this project cannot compute as transformers does (pre-norm\n"
        "blocks without a final norm, the transformers default; add_lm_hidden_dense_layer, also a\n"
        "default; token type embeddings; rmsnorm; a non-zero lm_head.bias; masked-LM and other task\n"
        "heads). Every tensor is checked against the shapes config.json implies. docs/interop.md.";
    int r = cli_parse("hf-import", usage, fl, argc, argv, 2);
    if (r) return r == 1 ? 0 : 2;
    if (!hf || !out) return cli_error("--hf and --out are required (see 'mega hf-import --help')"), 2;
    if (strlen(out) > 4000 || strlen(hf) > 4000) return cli_error("path too long"), 2;
    return hf_import(hf, out) ? 2 : 0;
}
