/*
 * The token-mixer interface: every sequence-mixing mechanism (Mega, MHA, MHATW, AFT, gMLP, ABC,
 * local attention) sits behind this one vtable, so a block, the language model and the
 * classifier switch mechanism with one config field (mega_block_cfg.mixer) and nothing else.
 *
 * A mixer maps x [B,T,D] to y [B,T,D]:
 *   - Mega (self_residual = 1) is the whole official sublayer: norm, EMA, gated attention and its
 *     gated residual (mega_layer.*);
 *   - every other mixer (self_residual = 0) is a "core"; the block wraps it as the standard
 *     Transformer sublayer:  prenorm  y = x + dropout(core(norm(x)))
 *                            postnorm y = norm(x + dropout(core(x)))
 *     with the norm named "<prefix>mixer_norm.norm.*" and the core's parameters "<prefix>mixer.*".
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

struct mega_block_cfg;
typedef struct mega_block_cfg mega_block_cfg;
typedef struct mega_run mega_run;

/* saved activations: up to 24 buffers and 8 integers, their meaning defined by the mixer */
typedef struct {
    real *p[24];
    int i[8];
} mega_mixer_acts;

/* streaming state: position, cache length and up to 12 buffers (mixer-defined) */
typedef struct {
    int B, cap, len;
    int64_t pos;
    real *p[12];
    size_t n[12];
    int iv[4];
} mega_mixer_state;

typedef struct mega_mixer mega_mixer;

typedef struct {
    const char *name;
    int self_residual; /* 1: forward produces the whole sublayer output (Mega) */
    int causal, bidir; /* supported directions */
    mega_status (*declare)(mega_mixer *mx, mega_params *P, const char *prefix);
    void (*init)(const mega_mixer *mx, real *W, mega_rng *rng);
    /* point A into base (base NULL: only count); returns reals */
    size_t (*acts)(const mega_mixer *mx, mega_mixer_acts *A, real *base, int B, int T);
    size_t (*scratch)(const mega_mixer *mx, int B, int T, int nthreads);
    mega_status (*forward)(const mega_mixer *mx, real *W, mega_mixer_acts *A, real *y, const real *x, const uint8_t *pad,
                           int B, int T, const mega_run *run, real *scratch);
    void (*backward)(const mega_mixer *mx, const real *W, real *dW, const mega_mixer_acts *A, real *dx, const real *dy,
                     const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch);
    /* streaming; NULL for mixers without a causal form */
    size_t (*state_size)(const mega_mixer *mx, int B, int cap);
    mega_status (*state_init)(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *mem, int B, int cap);
    void (*state_reset)(const mega_mixer *mx, mega_mixer_state *S);
    size_t (*step_scratch)(const mega_mixer *mx, int B, int T, int cap);
    mega_status (*step)(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                        real *scratch);
} mega_mixer_ops;

struct mega_mixer {
    const mega_mixer_ops *ops;
    const mega_block_cfg *cfg; /* the owning block's config */
    size_t off[40];            /* parameter offsets (mixer-defined) */
    int iv[8];                 /* mixer-defined integers (e.g. derived sizes) */
    void *impl;                /* mixer-defined (e.g. the Mega layer struct); owned by the block */
};

/* registry (mega_mixer_kind and mega_pos_kind are public, in mega.h) */
const char *mega_mixer_name(mega_mixer_kind k);
int mega_mixer_parse(const char *s, mega_mixer_kind *k);
/* NULL when the kind is not built yet */
const mega_mixer_ops *mega_mixer_ops_of(mega_mixer_kind k);

const char *mega_pos_name(mega_pos_kind p);
int mega_pos_parse(const char *s, mega_pos_kind *p);

/* every mixer kind's ops (defined in its file; NULL-initialised until built) */
extern const mega_mixer_ops mega_mixer_ops_mega;
extern const mega_mixer_ops mega_mixer_ops_aft_full, mega_mixer_ops_aft_local, mega_mixer_ops_aft_simple,
    mega_mixer_ops_aft_tw;                                            /* aft.c */
extern const mega_mixer_ops mega_mixer_ops_gmlp;                      /* gmlp.c */
extern const mega_mixer_ops mega_mixer_ops_mha, mega_mixer_ops_local; /* mha.c */
extern const mega_mixer_ops mega_mixer_ops_mhatw;                     /* mhatw.c */
extern const mega_mixer_ops mega_mixer_ops_abc_window, mega_mixer_ops_abc_linformer, mega_mixer_ops_abc_mlp;
#endif
