/*
 * The block configuration (mega.h, mega_block_config): defaults, the mixers' option defaults,
 * the one validity check, and the field table that the JSON reader/writer and the command line
 * are built from.
 */
#include "layers/mixer.h"

#include <stdatomic.h>
#include <stddef.h>

void mega_block_config_default(mega_block_config *c) {
    memset(c, 0, sizeof *c);
    c->mixer = MEGA_MIXER_MEGA;
    c->embed_dim = 128, c->z_dim = 64, c->hidden_dim = 256, c->n_dim = 16, c->ffn_dim = 256;
    c->chunk_size = 128, c->truncation = 0, c->max_positions = 1024;
    c->attention_activation = MEGA_ATTN_SOFTMAX, c->rel_pos_bias = MEGA_RELPOS_SIMPLE;
    c->norm_type = MEGA_NORM_LAYER, c->prenorm = 1, c->norm_affine = 1, c->activation = MEGA_ACT_SILU;
    c->pos = MEGA_POS_NONE;
}

void mega_block_config_resolve(mega_block_config *c) {
    const mega_mixer_ops *ops = mega_mixer_ops_of(c->mixer);
    if (ops && ops->resolve) ops->resolve(c);
}

int mega__default_heads(int width, int even_head) {
    for (int h = 8; h > 1; h /= 2)
        if (width % h == 0 && (!even_head || (width / h) % 2 == 0)) return h;
    return 1;
}

int mega__default_max_len(const mega_block_config *c) { return c->train_len > 0 ? c->train_len : 1024; }

#define OFF(f) offsetof(mega_block_config, f)
#define INT_(name, f, lo, hi, fl, help) {name, MEGA_FIELD_INT, OFF(f), lo, hi, NULL, 0, fl, 0, help}
#define FLT_(name, f, lo, hi, help) {name, MEGA_FIELD_FLOAT, OFF(f), lo, hi, NULL, 0, 0, 0, help}
#define BOOL_(name, f, fl, help) {name, MEGA_FIELD_BOOL, OFF(f), 0, 1, NULL, 0, fl, 0, help}
#define CHOICE_(name, f, names, n, help) {name, MEGA_FIELD_CHOICE, OFF(f), 0, (n) - 1, names, n, 0, 0, help}

/* The mixers a field applies to (mega_field.mixers) are not written here: they are built from
 * the options each mixer declares (mega_mixer_ops.options) when the table is first asked for. A
 * field no mixer declares applies to every mixer. */
static mega_field FIELDS[] = {
    CHOICE_("mixer", mixer, mega__names_mixer, MEGA_MIXER_COUNT, "token mixer (docs/mixers.md)"),
    INT_("embed-dim", embed_dim, 1, 65536, 0, "model width D"),
    INT_("z-dim", z_dim, 1, 65536, 0, "shared query/key width Z"),
    INT_("hidden-dim", hidden_dim, 1, 262144, 0, "value width E (gmlp: its width)"),
    INT_("n-dim", n_dim, 0, 64, 0, "EMA components per channel N (0 = Mega without the EMA)"),
    INT_("ffn-dim", ffn_dim, 0, 262144, 0, "normalized FFN hidden width (0 = no FFN)"),
    INT_("chunk-size", chunk_size, -1, 1 << 20, MEGA_FIELD_NONZERO, "attention chunk (-1 = full attention)"),
    INT_("truncation", truncation, 0, 1 << 30, 0, "EMA kernel truncation in training (0 = none)"),
    INT_("max-positions", max_positions, 1, 1 << 20, 0, "simple relative-bias length for full attention"),
    CHOICE_("attention-activation", attention_activation, mega__names_attn, MEGA_ATTN_COUNT, "attention function"),
    CHOICE_("rel-pos-bias", rel_pos_bias, mega__names_relpos, MEGA_RELPOS_COUNT, "relative position bias"),
    CHOICE_("norm-type", norm_type, mega__names_norm, MEGA_NORM_COUNT, "normalization"),
    BOOL_("prenorm", prenorm, 0, "pre-norm sublayers and a final norm (false: post-norm)"),
    BOOL_("norm-affine", norm_affine, 0, "learned scale and shift in the block's norms"),
    CHOICE_("activation", activation, mega__names_act, MEGA_ACT_COUNT, "activation (Mega's v and h, the FFN)"),
    FLT_("dropout", dropout, 0, 0.99, "dropout (embedding, sublayer outputs, head)"),
    FLT_("attention-dropout", attention_dropout, 0, 0.99, "dropout on the attention weights"),
    FLT_("hidden-dropout", hidden_dropout, 0, 0.99, "dropout on the attention values"),
    FLT_("activation-dropout", activation_dropout, 0, 0.99, "dropout inside the FFN"),
    BOOL_("bidirectional", bidirectional, MEGA_FIELD_NOFLAG, "encoder (no causal mask); set by the model kind"),
    INT_("heads", heads, 0, 4096, 0, "attention heads (0 = the mixer's default)"),
    INT_("window", window, 0, MEGA_WINDOW_MAX, 0, "local window (0 = the mixer's default)"),
    INT_("memory-size", memory_size, 0, 65536, 0, "ABC memory slots (0 = the mixer's default)"),
    INT_("max-len", max_len, -1, 1 << 24, 0,
         "positions of absolute-position parameters (0 = the training length; aft-tw: -1 = none)"),
    CHOICE_("pos", pos, mega__names_pos, MEGA_POS_COUNT, "positional scheme"),
    INT_("attn-window", attn_window, 0, 1 << 24, 0, "local attention mask, usually at evaluation (0 = none)"),
    BOOL_("log-n-scaling", log_n_scaling, 0, "scale attention logits by max(1, log n / log train-len)"),
    INT_("train-len", train_len, 0, 1 << 24, MEGA_FIELD_NOFLAG, "training sequence length (0 = unknown)"),
    INT_("norm-num-groups", norm_num_groups, 0, 65536, 0, "timestep-norm groups (0 = the mixer's default)"),
    BOOL_("swiglu", swiglu, 0, "the FFN as SwiGLU: silu(fc1 x) * fc3 x"),
    BOOL_("rescale-nffn", rescale_nffn, 0, "a learned per-channel scale on the FFN output (layer scale)"),
};
#define NFIELDS ((int)(sizeof FIELDS / sizeof *FIELDS))

/* each field's mixers from the mixers' declared options */
static void fields_build(void) {
    for (int i = 0; i < NFIELDS; i++) FIELDS[i].mixers = 0;
    for (int k = 0; k < MEGA_MIXER_COUNT; k++) {
        const mega_mixer_ops *ops = mega_mixer_ops_of((mega_mixer_kind)k);
        for (const char *const *o = ops && ops->options ? ops->options : NULL; o && *o; o++)
            for (int i = 0; i < NFIELDS; i++)
                if (!strcmp(FIELDS[i].name, *o)) FIELDS[i].mixers |= 1u << k;
    }
}

const mega_field *mega_block_config_fields(int *count) {
    /* built once; a caller arriving while another builds waits (0 none, 1 building, 2 built) */
    static atomic_int state = 0;
    if (atomic_load_explicit(&state, memory_order_acquire) != 2) {
        int none = 0;
        if (atomic_compare_exchange_strong_explicit(&state, &none, 1, memory_order_acq_rel, memory_order_acquire)) {
            fields_build();
            atomic_store_explicit(&state, 2, memory_order_release);
        } else
            while (atomic_load_explicit(&state, memory_order_acquire) != 2) continue;
    }
    *count = NFIELDS;
    return FIELDS;
}

mega_status mega__window_check(const mega_block_config *c) {
    if (c->window < 1 || c->window > MEGA_WINDOW_MAX)
        MEGA_FAIL(MEGA_ERR_INVALID, "mixer %s needs --window in [1, 2^24] (the span of its window), got %d",
                  mega_mixer_name(c->mixer), c->window);
    return MEGA_OK;
}

mega_status mega_block_config_check(const mega_block_config *config) {
    mega_block_config c = *config; /* with the mixer's defaults resolved, as a model would */
    mega_block_config_resolve(&c);
    int n;
    const mega_field *f = mega_block_config_fields(&n);
    MEGA_TRY(mega__fields_check(f, n, &c));
    const mega_mixer_ops *ops = mega_mixer_ops_of(c.mixer);
    if (!ops) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "mixer '%s' is not available in this build", mega_mixer_name(c.mixer));
    if (ops->check) MEGA_TRY(ops->check(&c)); /* first: its messages are the more specific */
    if (!(ops->flags & (c.bidirectional ? MEGA_MIXER_BIDIR : MEGA_MIXER_CAUSAL)))
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "mixer '%s' has no %s form", ops->name,
                  c.bidirectional ? "bidirectional" : "causal");
    return MEGA_OK;
}
