/*
 * The token-mixer interface: every sequence-mixing mechanism (Mega, MHA, MHATW, AFT, gMLP, ABC,
 * local attention) sits behind this one vtable, so a block, the language model and the
 * classifier switch mechanism with one config field (mega_block_config.mixer) and nothing else.
 * The mixers are registered in ONE list, MEGA_MIXER_LIST in mega.h; mixer.c turns it into the
 * registry (mega_mixer_ops_of).
 *
 * A mixer maps x [B,T,D] to y [B,T,D]:
 *   - Mega (MEGA_MIXER_SELF_RESIDUAL) is the whole official sublayer: norm, EMA, gated attention
 *     and its gated residual (official moving_average_gated_attention.py);
 *   - every other mixer is a "core"; the block wraps it as the standard Transformer sublayer:
 *         prenorm  y = x + dropout(core(norm(x)))       postnorm y = norm(x + dropout(core(x)))
 *     with the norm named "<prefix>mixer_norm.norm.*" and the core's parameters "<prefix>mixer.*".
 *
 * Typed and opaque: each mixer defines its own layer struct (parameter offsets, derived sizes),
 * activation layout and streaming-state layout, and the interface passes them as `void *` /
 * `real *`: the block reserves layer_size bytes for the layer struct, acts_size reals of
 * activations and state_size reals of streaming state, and the mixer points its typed view into
 * them. The layer struct keeps a pointer to the block's configuration (never a copy).
 *
 * Memory contract (as everywhere in the library): the mixer declares its parameters into the
 * model's one buffer and keeps offsets; activations, scratch and streaming state are caller-owned
 * regions sized by the *_size functions; forward/backward/step never allocate.
 * backward overwrites dx and accumulates parameter gradients into dW.
 * Streaming (causal mixers): step(T tokens) must equal the full causal forward over the stream so
 * far (tested for every mixer).
 */
#ifndef MEGA_MIXER_H
#define MEGA_MIXER_H
#include "core/params.h"
#include "core/rng.h"
#include "layers/seqnorm.h"

/* how a forward/backward runs */
typedef struct {
    int training;     /* dropout active, batchnorm batch statistics */
    int update_stats; /* batchnorm running statistics updated in training forward */
    uint64_t key;     /* dropout key (already specific to this layer) */
    int nthreads;     /* threads for the library's own parallel loops */
    const mega_bnsync *sync; /* batchnorm statistics over processes (NULL = none) */
} mega_run;

/* streaming state for B sequences; mem holds the mixer's own layout (state_size reals) */
typedef struct {
    int B, cap;  /* sequences; the cache capacity asked for (the longest stream, or the chunk) */
    int64_t pos; /* tokens streamed so far */
    real *mem;
    /* for inspection (mega_lm_stream_probe_attention; Mega mixer): each streamed token of
     * sequence 0 writes its attention weights over the cached positions into row (its position
     * in the cache) of probe, rows probe_ld apart; NULL = off */
    real *probe;
    size_t probe_ld;
    /* a view of sequences [b0, b0 + B) of a state laid out for Bmem sequences (0: not a view);
     * the Mega mixer's step only (model/lm.c decodes a batch as groups of sequences through such
     * views); views are stepped and reset (their sequences only), never initialised or reordered */
    int b0, Bmem;
    /* per-sequence positions (MEGA_MIXER_ROWS mixers; model/lm.c, a stream's rows): when not
     * NULL, a step of one token where sequence b of this state (or view) stands at rpos[b], not
     * at pos (continuous batching: each sequence started at its own time) */
    const int64_t *rpos;
} mega_mixer_state;

enum {
    MEGA_MIXER_SELF_RESIDUAL = 1u << 0, /* forward produces the whole sublayer output (Mega) */
    MEGA_MIXER_CAUSAL = 1u << 1,        /* has a causal form (and a streaming step) */
    MEGA_MIXER_BIDIR = 1u << 2,         /* has a bidirectional form */
    MEGA_MIXER_STEP_TEAM = 1u << 3,     /* its step runs on the step team (ops.h), so a language
                                         * model's stream may be fed in groups (model/lm.c) */
    MEGA_MIXER_PROBE = 1u << 4,         /* its step writes attention weights into state.probe */
    MEGA_MIXER_GATED_XATTN = 1u << 5,   /* a decoder with it uses the gated cross-attention
                                         * (xattn.h); the others use multi-head */
    MEGA_MIXER_OWN_FFN = 1u << 6,       /* forward is the whole block, its FFN included (Megalodon's
                                         * two-hop residual): the block adds no FFN of its own */
    MEGA_MIXER_FINAL_TSNORM = 1u << 7,  /* a stack of it ends with a timestep norm (model/stack.h),
                                         * Megalodon's MegaOutputLayer.final_norm */
    MEGA_MIXER_ROWS = 1u << 8           /* its step reads mega_mixer_state.rpos and its reset
                                         * clears a view's sequences alone */
};

/* bytes a block reserves for a mixer's layer struct (each mixer asserts that it fits) */
#define MEGA_MIXER_LAYER_MAX 384

typedef struct {
    const char *name;
    unsigned flags;
    size_t layer_size;
    /* the configuration: fill the mixer's options left at 0; the mixer's own validity rules */
    void (*resolve)(mega_block_config *c);
    mega_status (*check)(const mega_block_config *c);
    /* the options it reads: names of mega_block_config fields (the field table's "applies to
     * these mixers" masks are built from these lists), NULL-terminated */
    const char *const *options;
    /* what callers need for sequences of up to T tokens (mega_block_context_of; NULL: the
     * default, mega__context_default) */
    void (*context)(const mega_block_config *c, int T, mega_block_context *x);
    /* parameters: declare them into P (under prefix) and remember their offsets in L */
    mega_status (*declare)(void *L, const mega_block_config *c, mega_params *P, const char *prefix);
    void (*init)(const void *L, real *W, mega_rng *rng);
    /* reals of saved activations and of forward/backward scratch for a B x T batch */
    size_t (*acts_size)(const void *L, int B, int T);
    size_t (*scratch_size)(const void *L, int B, int T, int nthreads);
    mega_status (*forward)(const void *L, real *W, real *acts, real *y, const real *x, const uint8_t *pad, int B,
                           int T, const mega_run *run, real *scratch);
    void (*backward)(const void *L, const real *W, real *dW, const real *acts, real *dx, const real *dy, const real *x,
                     const uint8_t *pad, int B, int T, const mega_run *run, real *scratch);
    /* streaming (causal only) */
    size_t (*state_size)(const void *L, int B, int cap);
    mega_status (*state_init)(const void *L, const real *W, mega_mixer_state *S);
    void (*state_reset)(const void *L, mega_mixer_state *S);
    size_t (*step_scratch)(const void *L, int B, int T, int cap);
    mega_status (*step)(const void *L, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                        real *scratch);
    /* beam search (optional): new row b = old row idx[b]; tmp: state_size reals of scratch */
    void (*state_reorder)(const void *L, mega_mixer_state *S, const int *idx, real *tmp);
} mega_mixer_ops;

/* rows of a [B, per] array: new row b = old row idx[b] (tmp: B*per reals) */
void mega__rows_gather(real *a, size_t per, int B, const int *idx, real *tmp);

/* the registry: the ops of a mixer kind (NULL for an invalid kind) */
const mega_mixer_ops *mega_mixer_ops_of(mega_mixer_kind k);

/* every mixer's ops table, defined in its file (mega_mixer_ops_<id> of MEGA_MIXER_LIST) */
#define MEGA_MIXER_OPS_DECL_(ID, id, name, help) extern const mega_mixer_ops mega_mixer_ops_##id;
MEGA_MIXER_LIST(MEGA_MIXER_OPS_DECL_)
#undef MEGA_MIXER_OPS_DECL_

/* the mixers' option defaults (mega_block_config_resolve): a local window of 64, 32 ABC memory
 * slots; heads: the largest of 8, 4, 2, 1 dividing the width (with an even head width when the
 * positional scheme rotates pairs); max-len: the training length, else 1024 */
#define MEGA_DEFAULT_WINDOW 64
#define MEGA_DEFAULT_MEMORY 32
/* The one rule for the window option (local, aft-local), after the default is resolved: [1, 2^24]
 * (the field table's range, 0 there being the default). */
#define MEGA_WINDOW_MAX (1 << 24)
mega_status mega__window_check(const mega_block_config *c);
int mega__default_heads(int width, int even_head);
int mega__default_max_len(const mega_block_config *c);

/* the context most mixers share: no chunk (segment and cache T), a bounded state, no carry,
 * max-len (else 2048) to evaluate in, no relative table, the cross-attention the flags name;
 * a mixer's context op starts from it */
void mega__context_default(const mega_mixer_ops *ops, const mega_block_config *c, int T, mega_block_context *x);

/* The four projections of multi-head attention, shared by the attention and ABC mixers: fairseq
 * MultiheadAttention's q_proj, k_proj, v_proj, out_proj ([D, D] weights, [D] biases) under
 * "<prefix><sub>" (sub "mixer." for the self-attention mixers, "cross_attn." for cross-attention), initialised as its reset_parameters (q/k/v xavier-uniform with gain 2^-1/2,
 * out_proj gain 1; every bias zero). */
enum { MEGA_Q, MEGA_K, MEGA_V, MEGA_O };
typedef struct {
    size_t w[4], b[4];
} mega_qkvo;
mega_status mega_qkvo_declare(mega_qkvo *p, mega_params *P, const char *prefix, const char *sub, int D);
void mega_qkvo_init(const mega_qkvo *p, real *W, int D, mega_rng *rng);

/* fn: a registry entry's declare for one variant of a mixer family, calling the family's
 * declare(L, c, P, prefix, variant), which records the variant in the layer struct */
#define MEGA_DECLARE_VARIANT(fn, family_declare, variant)                                          \
    static mega_status fn(void *L, const mega_block_config *c, mega_params *P, const char *prefix) { \
        return family_declare(L, c, P, prefix, variant);                                            \
    }

/* a mixer file's check that its layer struct fits the block's reservation */
#define MEGA_MIXER_LAYER_FITS(type) \
    _Static_assert(sizeof(type) <= MEGA_MIXER_LAYER_MAX, #type " must fit MEGA_MIXER_LAYER_MAX")

#endif
