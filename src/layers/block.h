/*
 * The Mega block: the gated-attention layer (official MovingAverageGatedAttention,
 * `mega_layer.*`) followed by the normalized FFN (`nffn.*`), SPEC §2.2–2.12.
 *
 * Shapes: x, out (B, T, D); rows R = B*T. Parameter names are the official ones under the
 * block prefix (e.g. "decoder.layers.3."). All buffers (activations, scratch, streaming state)
 * are owned by the caller and sized by the *_size functions: forward and backward never
 * allocate.
 */
#ifndef MEGA_BLOCK_H
#define MEGA_BLOCK_H
#include "core/params.h"
#include "core/rng.h"
#include "layers/ema.h"
#include "layers/mixer.h"
#include "layers/relpos.h"
#include "layers/seqnorm.h"
#include "ops/attn.h"
#include "ops/ops.h"

struct mega_block_cfg {
    mega_mixer_kind mixer; /* the token mixer (MEGA_MIXER_MEGA = 0: the official Mega layer) */
    int D, Z, E, N, F;   /* embed, zdim, hdim, ndim (0 = Mega without EMA), ffn hidden (0 = no FFN) */
    int chunk;           /* attention chunk, -1 = full attention */
    int trunc;           /* EMA truncation, 0 = none */
    int max_positions;   /* simple bias length when chunk < 0 */
    mega_attn_fn attn_fn;
    int rotary;          /* rel_pos_bias: 0 simple, 1 rotary */
    int bidir;           /* encoder (bidirectional EMA, no causal mask) */
    int prenorm;
    int norm_affine;
    mega_norm_type norm;
    mega_act act;
    double dropout, attn_dropout, hidden_dropout, act_dropout;
    /* other mixers (SPEC §3-§8) */
    int heads;           /* attention heads (mha, mhatw, local, abc) */
    int window;          /* local attention / AFT-local window */
    int memory;          /* ABC memory slots */
    int max_len;         /* trained context T for absolute-position parameters (AFT-full, gMLP, MHATW, Linformer) */
    mega_pos_kind pos;   /* positional scheme of the attention mixers */
    int attn_window;     /* local mask applied at evaluation (0 = none) */
    int log_n;           /* log-n attention scaling (with train_len) */
    int train_len;       /* training length L_train for log-n scaling */
};

/* validate a configuration (clear one-line error) */
mega_status mega_block_cfg_check(const mega_block_cfg *c);

/* how a forward/backward runs */
struct mega_run {
    int training;     /* dropout active, batchnorm batch statistics */
    int update_stats; /* batchnorm running statistics updated in training forward */
    uint64_t key;     /* dropout key (already specific to this layer) */
    int nthreads;     /* threads for the library's own parallel loops */
};

/* ---- the gated-attention layer ---------------------------------------------------------- */
typedef struct {
    mega_block_cfg cfg;
    mega_seqnorm norm;
    mega_ema ema;
    mega_relpos rp;
    size_t v_w, v_b, mx_w, mx_b, h_w, h_b, qk_g, qk_b;
} mega_mlayer;

typedef struct {
    real *xn, *nstat;          /* normalised input (prenorm) and its statistics */
    real *vpre, *v;            /* v_proj pre-activation; v after act and hidden dropout */
    real *coef;                /* EMA coefficients */
    real *mpre, *m;            /* EMA pre-silu, EMA output after dropout */
    real *base;                /* mx_proj output [u | z | r | hx] */
    real *q, *k, *lse, *O;     /* attention */
    real *hpre, *h;            /* h_proj pre-activation; h after act and dropout */
    real *opre, *ostat;        /* pre-norm output and statistics (postnorm) */
    real *btab;                /* relative-position table */
    int Mc;
} mega_mlayer_acts;

/* ---- the normalized FFN ----------------------------------------------------------------- */
typedef struct {
    mega_block_cfg cfg;
    mega_seqnorm norm;
    size_t fc1_w, fc1_b, fc2_w, fc2_b;
} mega_nffn;

typedef struct {
    real *xn, *nstat, *fpre, *f, *ypre, *ystat;
} mega_nffn_acts;

/* ---- the block -------------------------------------------------------------------------- */
typedef struct {
    mega_block_cfg cfg;
    mega_mixer mix;      /* the token mixer (ops + offsets) */
    mega_mlayer ml;      /* Mega's layer (mix.impl points here when mixer == MEGA) */
    mega_seqnorm mnorm;  /* sublayer norm for the other mixers */
    mega_nffn ffn;
} mega_block;

typedef struct {
    union {
        mega_mlayer_acts ml; /* Mega */
        mega_mixer_acts mx;  /* any other mixer */
    };
    real *mn, *mstat;  /* sublayer wrapper: normalised input (prenorm) or residual sum (postnorm), stats */
    mega_nffn_acts ffn;
    real *y1; /* mixer sublayer output (FFN input) */
} mega_block_acts;

/* streaming state of one block for B sequences (caller-owned memory, see *_state_size):
 * the mixer's state (for Mega: len = attention cache length; p[0] EMA state [B,N,D], p[1]/p[2]
 * key/value caches [B,cap,Z]/[B,cap,E], p[3] untruncated EMA coefficients, p[4] bias table,
 * iv[0] = its centre Mc) */
typedef mega_mixer_state mega_block_state;

mega_status mega_block_declare(mega_block *bl, mega_params *P, const char *prefix, const mega_block_cfg *cfg);
void mega_block_init(const mega_block *bl, real *W, mega_rng *rng);

size_t mega_block_acts_size(const mega_block *bl, int B, int T);
void mega_block_acts_point(const mega_block *bl, mega_block_acts *A, real *base, int B, int T);
size_t mega_block_acts_point_n(const mega_block *bl, mega_block_acts *A, real *base, int B, int T);
/* scratch reals for forward + backward */
size_t mega_block_scratch_size(const mega_block *bl, int B, int T, int nthreads);

/* out [B,T,D] = block(x); pad [B,T] (1 = pad) or NULL */
mega_status mega_block_forward(const mega_block *bl, real *W, mega_block_acts *A, real *out, const real *x,
                               const uint8_t *pad, int B, int T, const mega_run *run, real *scratch);
/* dx [B,T,D] (overwritten) and dW (accumulated) from dout; x is the forward's input */
void mega_block_backward(const mega_block *bl, const real *W, real *dW, const mega_block_acts *A, real *dx,
                         const real *dout, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                         real *scratch);

/* streaming (causal blocks only): cap = attention cache capacity (chunk size when chunked, else
 * the longest sequence to be streamed) */
size_t mega_block_state_size(const mega_block *bl, int B, int cap);
mega_status mega_block_state_init(const mega_block *bl, const real *W, mega_block_state *S, real *mem, int B, int cap);
void mega_block_state_reset(const mega_block *bl, mega_block_state *S);
size_t mega_block_step_scratch(const mega_block *bl, int B, int T, int cap);
/* T tokens per sequence through the block in streaming mode (eval semantics): equivalent to the
 * causal forward over the whole stream so far, with the cache cleared at every chunk border */
mega_status mega_block_step(const mega_block *bl, const real *W, mega_block_state *S, real *out, const real *x,
                            int T, real *scratch);

/* the parts (block.c assembles them; exposed for the tests) */
mega_status mega_mlayer_declare(mega_mlayer *L, mega_params *P, const char *prefix, const mega_block_cfg *c);
void mega_mlayer_init(const mega_mlayer *L, real *W, mega_rng *rng);
size_t mega_mlayer_acts_point(const mega_mlayer *L, mega_mlayer_acts *A, real *base, int B, int T);
size_t mega_mlayer_scratch(const mega_mlayer *L, int B, int T, int nthreads);
mega_status mega_mlayer_forward(const mega_mlayer *L, real *W, mega_mlayer_acts *A, real *out, const real *x,
                                const uint8_t *pad, int B, int T, const mega_run *run, real *scratch);
void mega_mlayer_backward(const mega_mlayer *L, const real *W, real *dW, const mega_mlayer_acts *A, real *dx,
                          const real *dout, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                          real *scratch);
mega_status mega_mlayer_step(const mega_mlayer *L, const real *W, mega_mixer_state *S, real *out, const real *x,
                             int T, real *scratch);
size_t mega_mlayer_step_scratch(const mega_mlayer *L, int B, int T, int cap);

mega_status mega_nffn_declare(mega_nffn *f, mega_params *P, const char *prefix, const mega_block_cfg *c);
void mega_nffn_init(const mega_nffn *f, real *W, mega_rng *rng);
size_t mega_nffn_acts_point(const mega_nffn *f, mega_nffn_acts *A, real *base, int B, int T);
size_t mega_nffn_scratch(const mega_nffn *f, int B, int T);
void mega_nffn_forward(const mega_nffn *f, real *W, mega_nffn_acts *A, real *out, const real *x, size_t R,
                       const mega_run *run);
void mega_nffn_backward(const mega_nffn *f, const real *W, real *dW, const mega_nffn_acts *A, real *dx,
                        const real *dout, const real *x, size_t R, const mega_run *run, real *scratch);
/* eval-mode FFN for streaming (no saved activations); scratch: R*(F+D) reals plus the norm
 * statistics, mega_seqnorm_stat_size(&f->norm, R) (2R, or 2D for batchnorm) */
void mega_nffn_step(const mega_nffn *f, const real *W, real *out, const real *x, size_t R, real *scratch);

/* bump allocator over a real buffer: counts when base is NULL */
typedef struct {
    real *base;
    size_t off;
} mega_bump;
static inline real *mega_bump_take(mega_bump *b, size_t n) {
    real *p = b->base ? b->base + b->off : NULL;
    b->off += (n + 15) & ~(size_t)15;
    return p;
}
#endif
