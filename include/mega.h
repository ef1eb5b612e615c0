/*
 * mega: Mega (moving-average equipped gated attention) and efficient-attention models in C.
 *
 * Public API. Everything is prefixed mega_ / MEGA_. The library never calls exit() and never
 * prints unless a log callback is installed (mega_set_log). Failing functions return a negative
 * mega_status and leave a one-line description in mega_last_error() (thread-local).
 *
 * Tensors are row-major, batch-first, PyTorch order: x is (B, T, D) with D contiguous.
 * Dimension names used throughout: B batch, T time (sequence length), D model width,
 * Z shared q/k width (zdim), E value/hidden width (hdim), N EMA expansion (ndim), F FFN width,
 * C attention chunk.
 *
 * Precision: the library is built in float (mega_real = float). The test suite also builds a
 * double-precision copy (-DMEGA_F64) for finite-difference checks and float64 fixtures; the two
 * are separate archives (libmega.a, libmega64.a) and must not be linked together.
 *
 * Linking: after `make install`, cc prog.c $(pkg-config --cflags --libs mega) (docs/library.md;
 * an example program in examples/).
 *
 * Threads (docs/library.md; tests/test_threads.c). The library parallelises inside its calls
 * (OpenMP, OpenBLAS); a program may also call it from several threads of its own:
 *  - objects that share nothing (two models, samplers, optimizers, safetensors files, a stream
 *    and another model) may be used at the same time from different threads;
 *  - otherwise an object is used by one thread at a time, with one exception: the streams of
 *    one language model (mega_lm_stream_new) may be fed at the same time from different threads,
 *    each stream by one thread at a time. Streaming only reads the model; each stream owns its
 *    state and scratch. Meanwhile nothing may change the model or use its buffers:
 *    mega_lm_forward / _backward / _reserve / _zero_grad / _init_params / _load_weights, an
 *    optimizer step, mega_lm_free. Forward and backward work in buffers the model owns, so two
 *    of them never run at once on one model; a classifier is used by one thread at a time;
 *  - per thread: mega_last_error / mega_clear_error, and mega_set_threads / mega_get_threads
 *    (OpenMP keeps the count per thread: a thread the program creates starts with OpenMP's
 *    default, OMP_NUM_THREADS or every core, whatever another thread set);
 *  - process-wide: the log callback (mega_set_log: set it before starting threads) and
 *    OpenBLAS's thread count (also set by mega_set_threads, from any thread).
 * Threads that each run parallel calls share the cores: give each a share (e.g.
 * mega_set_threads(1) in each of as many threads as cores).
 */
#ifndef MEGA_H
#define MEGA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEGA_VERSION "0.1.0"

/* MEGA_API marks the public API: libmega.so is built with hidden visibility
 * (-fvisibility=hidden), so it exports exactly the functions declared with MEGA_API in the public
 * headers (tests/sh/test_exports.sh checks it); the library's internal functions stay internal. */
#ifndef MEGA_API
#if defined(__GNUC__) || defined(__clang__)
#define MEGA_API __attribute__((visibility("default")))
#else
#define MEGA_API
#endif
#endif

#ifdef MEGA_F64
typedef double mega_real;
#define MEGA_REAL_NAME "float64"
#else
typedef float mega_real;
#define MEGA_REAL_NAME "float32"
#endif

/* ---------------------------------------------------------------------------------------------
 * status codes and errors */
typedef enum {
    MEGA_OK = 0,
    MEGA_ERR_INVALID = -1,     /* invalid argument or hyper-parameter */
    MEGA_ERR_IO = -2,          /* file could not be opened / read / written */
    MEGA_ERR_FORMAT = -3,      /* malformed or corrupt file */
    MEGA_ERR_SHAPE = -4,       /* tensor shape or dtype mismatch */
    MEGA_ERR_OOM = -5,         /* allocation failed */
    MEGA_ERR_NOT_FOUND = -6,   /* missing tensor / key / file */
    MEGA_ERR_UNSUPPORTED = -7, /* valid request this build or configuration cannot do */
    MEGA_ERR_NUMERIC = -8      /* non-finite values */
} mega_status;

MEGA_API const char *mega_status_str(mega_status s);
/* The detail message of the most recent failure in this thread ("" if none). */
MEGA_API const char *mega_last_error(void);
MEGA_API void mega_clear_error(void);

/* Optional log sink for progress/info messages from the library (default: silent). Process-wide:
 * set it before starting threads; it may be called from any thread that calls the library. */
typedef void (*mega_log_fn)(int level, const char *msg, void *user);
MEGA_API void mega_set_log(mega_log_fn fn, void *user);

/* Threads used by the library's OpenMP regions started from the calling thread (OpenMP keeps
 * the count per thread) and by OpenBLAS (process-wide); 0 = OMP_NUM_THREADS when set, else all
 * cores. */
/* "512 bytes", "3.50 MiB", "12.3 GiB": a byte count for messages, into buf; returns buf */
MEGA_API const char *mega_fmt_bytes(char *buf, size_t n, uint64_t bytes);

MEGA_API void mega_set_threads(int n);
MEGA_API int mega_get_threads(void); /* the calling thread's count */
/* One line describing the build: precision, SIMD, OpenMP, BLAS. */
MEGA_API const char *mega_build_info(void);

/* ---------------------------------------------------------------------------------------------
 * safetensors (https://github.com/huggingface/safetensors): read, validate, write. */
typedef enum {
    MEGA_DT_F32 = 0, MEGA_DT_F64, MEGA_DT_F16, MEGA_DT_BF16,
    MEGA_DT_I64, MEGA_DT_I32, MEGA_DT_I16, MEGA_DT_I8, MEGA_DT_U8, MEGA_DT_BOOL
} mega_dtype;

#define MEGA_ST_MAX_DIMS 8

typedef struct {
    char *name;
    mega_dtype dtype;
    int ndim;
    int64_t shape[MEGA_ST_MAX_DIMS];
    size_t numel;
    size_t nbytes;
    const void *data; /* points into the file image, little-endian, row-major */
} mega_st_tensor;

typedef struct mega_st_file mega_st_file;

/* Read and fully validate a safetensors file (header cap, JSON, dtypes, shapes, offsets in bounds
 * and non-overlapping, covering the data section, no duplicate names). */
MEGA_API mega_status mega_st_open(const char *path, mega_st_file **out);
/* Same, from a memory image (copied). */
MEGA_API mega_status mega_st_open_mem(const void *buf, size_t len, mega_st_file **out);
MEGA_API void mega_st_close(mega_st_file *f);
MEGA_API int mega_st_count(const mega_st_file *f);
MEGA_API const mega_st_tensor *mega_st_at(const mega_st_file *f, int i);
MEGA_API const mega_st_tensor *mega_st_get(const mega_st_file *f, const char *name); /* NULL if absent */
/* __metadata__ value for key, or NULL. */
MEGA_API const char *mega_st_meta(const mega_st_file *f, const char *key);
MEGA_API int mega_st_meta_count(const mega_st_file *f);
MEGA_API const char *mega_st_meta_key(const mega_st_file *f, int i);
/* Copy a tensor into a mega_real array of n elements, converting F32/F64/F16/BF16/ints.
 * Fails with MEGA_ERR_SHAPE if numel != n. */
MEGA_API mega_status mega_st_read_real(const mega_st_tensor *t, mega_real *dst, size_t n);
/* Copy an integer tensor (I32/I64/U8/I8/I16/BOOL) into int32. */
MEGA_API mega_status mega_st_read_i32(const mega_st_tensor *t, int32_t *dst, size_t n);

/* Writer: add tensors (the data is copied by mega_st_writer_add, so the caller's buffer may be
 * freed right after), then write atomically (temporary file, fsync, rename). */
typedef struct mega_st_writer mega_st_writer;
MEGA_API mega_st_writer *mega_st_writer_new(void);
MEGA_API void mega_st_writer_free(mega_st_writer *w);
MEGA_API mega_status mega_st_writer_add(mega_st_writer *w, const char *name, mega_dtype dtype, int ndim,
                               const int64_t *shape, const void *data);
MEGA_API mega_status mega_st_writer_meta(mega_st_writer *w, const char *key, const char *value);
MEGA_API mega_status mega_st_writer_write(mega_st_writer *w, const char *path);

MEGA_API size_t mega_dtype_size(mega_dtype dt);
MEGA_API const char *mega_dtype_name(mega_dtype dt); /* "F32", ... */

/* Atomically replace `path` with `len` bytes (temporary file in the same directory, fsync,
 * rename, fsync of the directory). */
MEGA_API mega_status mega_write_file_atomic(const char *path, const void *data, size_t len);

/* ---------------------------------------------------------------------------------------------
 * Mechanisms and their names. Each list below is the ONE place its values are written: the enum,
 * the names used on the command line and in config JSON, and the one-line summaries are all
 * generated from it. X(ID, name, summary).
 */
#define MEGA_ATTN_LIST(X)                                                                          \
    X(SOFTMAX, "softmax", "softmax(qk^T / sqrt(Z) + bias)")                                         \
    X(RELU2, "relu2", "relu(qk^T / L + bias)^2 (L: the chunk's length)")                          \
    X(LAPLACE, "laplace", "0.5 (1 + erf((qk^T / L + bias - mu) / (sigma sqrt 2)))")
#define MEGA_NORM_LIST(X)                                                                          \
    X(LAYER, "layernorm", "LayerNorm over the channels")                                            \
    X(SCALE, "scalenorm", "ScaleNorm: g x / ||x||")                                                \
    X(RMS, "rmsnorm", "RMSNorm: w x / rms(x)")                                                      \
    X(BATCH, "batchnorm", "BatchNorm over batch and time (running statistics at evaluation)")
#define MEGA_ACT_LIST(X)                                                                           \
    X(SILU, "silu", "x sigmoid(x)")                                                                 \
    X(GELU, "gelu", "x Phi(x) (exact erf form)")                                                    \
    X(RELU, "relu", "max(0, x)")                                                                    \
    X(LINEAR, "linear", "x")                                                                        \
    X(SIGMOID, "sigmoid", "1 / (1 + e^-x)")
/* Mega's relative position bias */
#define MEGA_RELPOS_LIST(X)                                                                        \
    X(SIMPLE, "simple", "a learned bias per distance (at most max-positions / the chunk)")         \
    X(ROTARY, "rotary", "rot(a, i) . rot(b, j): a rotary form with no length limit")
/* positional schemes of the attention mixers (docs/mixers.md) */
#define MEGA_POS_LIST(X)                                                                           \
    X(NONE, "none", "no positional information")                                                    \
    X(ROPE, "rope", "rotary position embedding of queries and keys (RoFormer)")                     \
    X(ALIBI, "alibi", "linear distance penalty, one slope per head (ALiBi)")                        \
    X(KERPLE_POWER, "kerple-power", "-p |t-u|^a, learned p, a per head (KERPLE)")                   \
    X(KERPLE_LOG, "kerple-log", "-p log(1 + a |t-u|), learned p, a per head (KERPLE)")              \
    X(SANDWICH, "sandwich", "sinusoidal-embedding dot product as a bias (Sandwich)")                \
    X(XPOS, "xpos", "rotary with an exponential scale (XPOS; causal only)")
/* Token mixers (docs/mixers.md). X(ID, id, name, summary): `id` names the mixer's ops table,
 * mega_mixer_ops_<id>, defined in its file in src/layers/. A new mixer is one line here plus
 * its file. */
#define MEGA_MIXER_LIST(X)                                                                         \
    X(MEGA, mega, "mega", "Mega: multi-dimensional damped EMA + single-head gated attention")       \
    X(MHA, mha, "mha", "Transformer multi-head softmax attention (--pos for positions)")            \
    X(MHATW, mhatw, "mhatw", "multi-head attention with explicit time weighting f(t-u) beta(u)")    \
    X(AFT_FULL, aft_full, "aft-full", "attention-free transformer, learned position-pair bias")     \
    X(AFT_LOCAL, aft_local, "aft-local", "attention-free transformer, bias inside a window")        \
    X(AFT_SIMPLE, aft_simple, "aft-simple", "attention-free transformer without position bias")    \
    X(AFT_TW, aft_tw, "aft-tw", "time-weighted AFT, exponential decay per head (an RNN)")          \
    X(GMLP, gmlp, "gmlp", "gMLP spatial gating unit")                                              \
    X(ABC_WINDOW, abc_window, "abc-window", "bounded-memory attention over the last n tokens")      \
    X(ABC_LINFORMER, abc_linformer, "abc-linformer", "bounded-memory attention, Linformer control") \
    X(ABC_MLP, abc_mlp, "abc-mlp", "bounded-memory attention, learned input-dependent control")    \
    X(LOCAL, local, "local", "multi-head attention restricted to a sliding window")                \
    X(MEGALODON, megalodon, "megalodon", "Megalodon: timestep norm, complex EMA, chunk attention, own FFN")

/* Model kinds (docs/library.md, the generic model API). X(ID, id, name, summary): `name` is the
 * kind a checkpoint's config names ("model": "mega_lm"); `id` names the typed API (mega_<id>,
 * mega_<id>_config) and the kind's ops table, mega__kind_<id>, defined in its file in src/model/.
 * A new model kind is one line here plus its file. */
#define MEGA_MODEL_LIST(X)                                                                         \
    X(LM, lm, "mega_lm", "causal language model (official mega_lm)")                               \
    X(CLS, cls, "mega_cls", "long-sequence classifier (official LRA encoder and head)")           \
    X(S2S, s2s, "mega_s2s", "encoder-decoder translation model (official mega)")

#define MEGA_ENUM_ATTN_(ID, name, help) MEGA_ATTN_##ID,
#define MEGA_ENUM_NORM_(ID, name, help) MEGA_NORM_##ID,
#define MEGA_ENUM_ACT_(ID, name, help) MEGA_ACT_##ID,
#define MEGA_ENUM_RELPOS_(ID, name, help) MEGA_RELPOS_##ID,
#define MEGA_ENUM_POS_(ID, name, help) MEGA_POS_##ID,
#define MEGA_ENUM_MIXER_(ID, id, name, help) MEGA_MIXER_##ID,
#define MEGA_ENUM_MODEL_(ID, id, name, help) MEGA_MODEL_##ID,
typedef enum { MEGA_ATTN_LIST(MEGA_ENUM_ATTN_) MEGA_ATTN_COUNT } mega_attn_fn;
typedef enum { MEGA_NORM_LIST(MEGA_ENUM_NORM_) MEGA_NORM_COUNT } mega_norm_type;
typedef enum { MEGA_ACT_LIST(MEGA_ENUM_ACT_) MEGA_ACT_COUNT } mega_act;
typedef enum { MEGA_RELPOS_LIST(MEGA_ENUM_RELPOS_) MEGA_RELPOS_COUNT } mega_relpos_kind;
typedef enum { MEGA_POS_LIST(MEGA_ENUM_POS_) MEGA_POS_COUNT } mega_pos_kind;
typedef enum { MEGA_MIXER_LIST(MEGA_ENUM_MIXER_) MEGA_MIXER_COUNT } mega_mixer_kind;
typedef enum { MEGA_MODEL_LIST(MEGA_ENUM_MODEL_) MEGA_MODEL_COUNT } mega_model_kind;

/* Names: *_name returns "?" for an out-of-range value; *_parse returns 0 on success, -1 for an
 * unknown name (a few historical aliases are accepted: "swish" = silu). */
MEGA_API const char *mega_attn_fn_name(mega_attn_fn f);
MEGA_API int mega_attn_fn_parse(const char *s, mega_attn_fn *f);
MEGA_API const char *mega_norm_name(mega_norm_type t);
MEGA_API int mega_norm_parse(const char *s, mega_norm_type *t);
MEGA_API const char *mega_act_name(mega_act a);
MEGA_API int mega_act_parse(const char *s, mega_act *a);
MEGA_API const char *mega_relpos_name(mega_relpos_kind r);
MEGA_API int mega_relpos_parse(const char *s, mega_relpos_kind *r);
MEGA_API const char *mega_pos_name(mega_pos_kind p);
MEGA_API int mega_pos_parse(const char *s, mega_pos_kind *p);
MEGA_API const char *mega_mixer_name(mega_mixer_kind k);
MEGA_API int mega_mixer_parse(const char *s, mega_mixer_kind *k);
MEGA_API const char *mega_mixer_summary(mega_mixer_kind k);
MEGA_API int mega_mixer_available(mega_mixer_kind k); /* built into this library */

/* ---------------------------------------------------------------------------------------------
 * The block configuration: everything a block (token mixer + normalized FFN) needs, one field
 * per setting. Each field has ONE name: the C field, the command-line flag and the config-JSON
 * key are the same word (`chunk_size`, `--chunk-size`, "chunk-size"). The language model, the
 * classifier and the other model kinds embed one; the layers read it directly (they keep a
 * pointer to it, never a copy). Validated by mega_block_config_check only; written to and read
 * from JSON only through the field table (mega_block_config_fields).
 *
 * Options marked "0 = the mixer's default" are resolved when a model is created (the resolved
 * values are what checkpoints store): see mega_block_config_resolve and docs/mixers.md.
 */
typedef struct {
    mega_mixer_kind mixer;  /* the token mixer (default: Mega) */
    /* widths */
    int embed_dim;          /* D, the model width */
    int z_dim;              /* Z, Mega's shared query/key width */
    int hidden_dim;         /* E, Mega's value (and gated output) width; gMLP's width */
    int n_dim;              /* N, EMA components per channel; 0 = Mega without the EMA */
    int ffn_dim;            /* F, hidden width of the normalized FFN; 0 = no FFN */
    /* Mega's attention and EMA */
    int chunk_size;         /* attention chunk C; -1 = full attention over the whole sequence */
    int truncation;         /* EMA kernel length K (training forward); 0 = the whole sequence */
    int max_positions;      /* length of the simple relative bias when chunk_size is -1 */
    mega_attn_fn attention_activation;
    mega_relpos_kind rel_pos_bias;
    /* sublayers */
    mega_norm_type norm_type;
    int prenorm;            /* 1: pre-norm sublayers (and a final norm); 0: post-norm */
    int norm_affine;        /* learned scale/shift in the block's norms */
    mega_act activation;    /* of v, h (Mega) and the FFN */
    float dropout, attention_dropout, hidden_dropout, activation_dropout;
    /* direction: set by the model kind (1 for encoders, 0 for causal decoders), not a flag */
    int bidirectional;
    /* the other token mixers' options */
    int heads;              /* attention heads; 0 = the mixer's default */
    int window;             /* local / aft-local window; 0 = the mixer's default */
    int memory_size;        /* ABC memory slots n; 0 = the mixer's default */
    int max_len;            /* positions of absolute-position parameters; 0 = train_len (1024 when
                             * that is 0 too); aft-tw: -1 = none (the pure recurrence) */
    mega_pos_kind pos;      /* positional scheme of the attention mixers */
    int attn_window;        /* local attention mask (attention mixers, usually set at evaluation);
                             * 0 = none */
    int log_n_scaling;      /* scale attention logits by max(1, log n / log train_len) */
    int train_len;          /* the training sequence length (log-n scaling, max_len's default) */
    /* Megalodon (official ModelConf names; docs/megalodon.md) */
    int norm_num_groups;    /* timestep-norm groups; 0 = the mixer's default */
    int swiglu;             /* the normalized FFN as SwiGLU (fc3) */
    int rescale_nffn;       /* learned per-channel scale of the FFN output (layer scale) */
} mega_block_config;

/* Mega's defaults (the small byte-level model of `mega train`); bidirectional 0 */
MEGA_API void mega_block_config_default(mega_block_config *c);
/* fill the options left at 0 with the chosen mixer's defaults (idempotent) */
MEGA_API void mega_block_config_resolve(mega_block_config *c);
/* one-line error naming the field for an invalid configuration (after resolving the defaults;
 * the mixer's own rules included) */
MEGA_API mega_status mega_block_config_check(const mega_block_config *c);

/* What a caller running a block needs to know about its mixer, for sequences (or streams) of up
 * to T tokens: asked instead of testing which mixer it is (each mixer answers for itself). */
typedef struct {
    int segment;   /* the length attended over at a time in a T-token forward: Mega's chunk when
                    * 0 < chunk-size < T, otherwise T; a forward pads T up to a multiple of it */
    int cache;     /* the streaming cache capacity to ask for (mega_lm_stream_new's cap) for
                    * streams of up to T tokens: chunked Mega needs its chunk, every other case T
                    * (mixers with a bounded state, a window or a recurrence, ignore it) */
    int cache_full; /* 1: the cache keeps every streamed position, so a stream longer than `cache`
                     * tokens fails (Mega under full attention, attention without a window,
                     * aft-full, gmlp); 0: the state is bounded */
    int carry;     /* 1: a long text is evaluated in segments with the state carried across them
                    * (chunked Mega: attention within a chunk, the EMA carries the rest, as in
                    * training); 0: each segment restarts, so the context is one segment */
    int eval_len;  /* the segment length to evaluate a text in when none is given (`mega eval`):
                    * chunked Mega its chunk, Mega under full attention 2048, the other mixers
                    * max-len (2048 when not positive) */
    int positions; /* the longest sequence the mixer's relative-position table covers (Mega's
                    * simple bias under full attention: max-positions); 0: no such bound (mixers
                    * with absolute-position parameters check max-len themselves) */
    const char *cross_attention; /* the cross-attention of an encoder-decoder whose decoder has
                                  * this mixer: "gated" (Mega) or "multi-head" (the others) */
} mega_block_context;
/* the context of config c (as a model holds it: the mixer's defaults resolved) for sequences of up
 * to T tokens (T < 1: the longest is not known; chunked Mega still answers its chunk) */
MEGA_API void mega_block_context_of(const mega_block_config *c, int T, mega_block_context *x);

/* Field tables: the name, type, location, range and meaning of every config field, in order.
 * The JSON reader/writer and the command line are built from them. */
/* MEGA_FIELD_INTS: a list of up to MEGA_INTS_MAX ints, strictly increasing, each in [lo, hi], stored
 * in int[MEGA_INTS_MAX] ended by 0 when shorter; text and JSON "a,b,c" (JSON also an array;
 * "" or null: empty) */
typedef enum { MEGA_FIELD_INT = 0, MEGA_FIELD_FLOAT, MEGA_FIELD_BOOL, MEGA_FIELD_CHOICE, MEGA_FIELD_INTS } mega_field_type;
#define MEGA_INTS_MAX 8
enum {
    MEGA_FIELD_NOFLAG = 1u << 0, /* set by the program, not on the command line */
    MEGA_FIELD_NONZERO = 1u << 1 /* 0 is not a value (e.g. chunk-size: -1 or >= 1) */
};
typedef struct {
    const char *name;           /* flag and JSON key; the C field is the same with '_' */
    mega_field_type type;
    size_t offset;              /* offsetof in the config struct (an int, float, or enum) */
    double lo, hi;              /* valid range (INT, FLOAT) */
    const char *const *choices; /* CHOICE: the names, index = the stored value */
    int nchoices;
    unsigned flags;
    unsigned mixers;            /* 0: every mixer; else the mixers it applies to, a bit per kind
                                 * (block fields: built from the options each mixer declares) */
    const char *help;           /* one line: the meaning, including what 0 / -1 mean */
} mega_field;
MEGA_API const mega_field *mega_block_config_fields(int *count);
/* whether field f matters for mixer k (e.g. z-dim only for Mega; heads not for Mega) */
MEGA_API int mega_field_applies(const mega_field *f, mega_mixer_kind k);
/* a field's value as text ("128", "0.1", "true", "softmax") */
MEGA_API void mega_field_format(const mega_field *f, const void *config, char *buf, size_t n);
/* set a field from text (the forms mega_field_format writes); the value is not range-checked
 * here (the config check does that) */
MEGA_API mega_status mega_field_parse(const mega_field *f, void *config, const char *text);

/* ---------------------------------------------------------------------------------------------
 * Creating and loading models (every model kind), and the memory they need.
 *
 * Loads check the file before allocating: the config in its metadata is validated, the model's
 * parameter table is declared (names and shapes, no memory yet) and compared with the file's
 * tensors (every name, shape and dtype: floating point for weights, no silent int -> float), and
 * only then are the parameters allocated and read. A file whose config describes a model larger
 * than its tensors fails naming the first tensor that differs, having allocated nothing large. */
typedef struct {
    int inference; /* no gradient buffer: forward, evaluation and streaming only (backward fails
                      with MEGA_ERR_INVALID, mega_*_grads / mega_ps_grad return NULL; gradient
                      norms and optimizer steps are for training models only) */
    int no_init;   /* mega_*_create_ex: leave the weights at zero instead of drawing the official
                      initialisation, for a caller that sets or loads them next (loads never draw) */
} mega_load_opts;  /* NULL or all zero: a model for training, with gradients */

/* Bytes a model allocates, computed from the sizes the allocations use, without allocating:
 * its parameters; when training, their gradients and the AdamW moments (2 x the parameters,
 * mega_adamw_new); and the buffers of forward (and backward) for a batch (mega_*_reserve: the
 * activations saved per layer, hidden states, scratch, logits). */
typedef struct {
    size_t params, grads, optimizer, buffers;
    size_t total; /* the sum */
} mega_memory;

/* The memory available to this process now, in bytes: MemAvailable of /proc/meminfo (else the
 * free physical pages), lowered to what a cgroup memory limit leaves. Files read whole (models,
 * data) must fit in it. */
MEGA_API size_t mega_memory_available(void);

/* ---------------------------------------------------------------------------------------------
 * causal language model (official fairseq mega_lm / MegaDecoderNoCrossAttn; docs/mega.md §10).
 * Weight names follow the official state dict: decoder.embed_tokens.weight,
 * decoder.layers.<i>.mega_layer.*, decoder.layers.<i>.nffn.*, decoder.final_norm.norm.*,
 * decoder.output_projection.weight (untied only). */
typedef struct {
    int vocab_size;         /* 257: the bytes and a pad */
    int padding_idx;        /* 256; -1 = no pad token */
    int layers;             /* blocks */
    mega_block_config block;
    int final_norm_affine;  /* learned scale/shift in the final norm (pre-norm models) */
    int scale_embedding;    /* multiply the embeddings by sqrt(embed_dim) */
    int tie_embeddings;     /* the output projection is the embedding table */
    /* Adaptive input and adaptive softmax (Baevski & Auli 2019; Grave et al. 2017; fairseq
     * modules/adaptive_input.py, adaptive_softmax.py; docs/mega.md §10). The vocabulary is cut into
     * bands at the cutoffs (the vocabulary size closes the last one): band i embeds its tokens in
     * embed_dim / factor^i dimensions projected to embed_dim; the softmax is a head over band 0
     * plus one class per further band, each band a tail of its own at input_dim / factor^(i+1). */
    int adaptive_input;                          /* AdaptiveInput instead of one embedding table */
    float adaptive_input_factor;                 /* dimension divisor per band (4) */
    int adaptive_input_cutoff[MEGA_INTS_MAX];    /* band ends (0-ended list) */
    int adaptive_softmax_cutoff[MEGA_INTS_MAX];  /* empty: a full softmax */
    float adaptive_softmax_factor;               /* 4 */
    float adaptive_softmax_dropout;              /* on the softmax input and the tails' projections */
    int tie_adaptive_weights; /* the softmax's word matrices are the adaptive input's embeddings */
    int tie_adaptive_proj;    /* ... and its tail projections the input's projections, transposed */
} mega_lm_config;

/* the defaults of `mega train` (a small byte-level model) */
MEGA_API void mega_lm_config_default(mega_lm_config *c);
/* fill the defaults left at 0 (the block's mixer options), as mega_lm_create does */
MEGA_API void mega_lm_config_resolve(mega_lm_config *c);
/* one-line error for an invalid configuration */
MEGA_API mega_status mega_lm_config_check(const mega_lm_config *c);
/* JSON with the field names as keys ("layers", "embed-dim", ...; also reads the official fairseq
 * argument names); caller frees with free() */
MEGA_API char *mega_lm_config_to_json(const mega_lm_config *c);
MEGA_API mega_status mega_lm_config_from_json(const char *json, mega_lm_config *c);
/* the model-level fields (vocab-size ... tie-embeddings); the block's are in
 * mega_block_config_fields, at offsetof(mega_lm_config, block) */
MEGA_API const mega_field *mega_lm_config_fields(int *count);

typedef struct mega_lm mega_lm;

MEGA_API mega_status mega_lm_create(const mega_lm_config *c, mega_lm **out);
/* the same with options (NULL = mega_lm_create: gradients, the initialisation of seed 0) */
MEGA_API mega_status mega_lm_create_ex(const mega_lm_config *c, const mega_load_opts *o, mega_lm **out);
/* what a model of config c needs: training (gradients, AdamW) or not, forward buffers for B x T
 * (mega_lm_reserve; B = 0: none). Streams (mega_lm_stream_new) need less than a forward of one
 * segment. */
MEGA_API mega_status mega_lm_memory(const mega_lm_config *c, int training, int B, int T, mega_memory *out);
MEGA_API void mega_lm_free(mega_lm *m);
MEGA_API const mega_lm_config *mega_lm_get_config(const mega_lm *m);
/* official initialisation (reset_parameters distributions), deterministic in seed */
MEGA_API void mega_lm_init_params(mega_lm *m, uint64_t seed);
MEGA_API size_t mega_lm_num_params(const mega_lm *m); /* trainable */
/* write model.safetensors (config JSON in __metadata__["config"]) atomically */
MEGA_API mega_status mega_lm_save(const mega_lm *m, const char *path);
/* same, with extra __metadata__ entries: kv = {key, value, key, value, ..., NULL} */
MEGA_API mega_status mega_lm_save_ex(const mega_lm *m, const char *path, const char *const *kv);
/* create a model from a model.safetensors written by mega_lm_save (or an official-named file
 * with a config in the metadata); path is the file or the run directory holding it
 * (mega_model_file) */
MEGA_API mega_status mega_lm_load(const char *path, mega_lm **out);
/* the same with options: o->inference loads without gradients (`mega eval`, `mega generate`) */
MEGA_API mega_status mega_lm_load_ex(const char *path, const mega_load_opts *o, mega_lm **out);
/* load weights by official name into an existing model (the config must match: every tensor is
 * checked before any is read, so a failure leaves the weights unchanged); path as above */
MEGA_API mega_status mega_lm_load_weights(mega_lm *m, const char *path);

typedef struct {
    int training;      /* dropout on, batchnorm batch statistics */
    uint64_t key;      /* dropout key for this step */
} mega_lm_run;

/* Synchronized batch statistics (data parallelism, docs/distributed.md). When one batch is split
 * over several processes, each calling forward and backward on its own rows, a batchnorm model
 * given `sum` computes its batch statistics (forward) and their gradients' means (backward) over
 * the rows of all the processes, as one process with the whole batch would: `sum` must add
 * buf[0..n) in place over the processes (MPI_Allreduce with MPI_SUM), ctx is passed through. It
 * is called from the thread calling forward/backward, the same number of times with the same n
 * on every process (so every process must run every forward/backward, each with its rows, which
 * must be padded to the same shape). The running statistics then stay identical everywhere.
 * NULL (the default): the statistics of the rows given. Models without batchnorm never call it. */
typedef void (*mega_sum_fn)(double *buf, size_t n, void *ctx);
MEGA_API void mega_lm_set_batch_sync(mega_lm *m, mega_sum_fn sum, void *ctx);

/* Reserve buffers for batches up to B x T (called implicitly by forward when needed). */
MEGA_API mega_status mega_lm_reserve(mega_lm *m, int B, int T);
/* Forward over tokens [B,T]. With targets (NULL = none; negative entries are ignored) computes
 * the mean cross-entropy over the counted targets (*loss, *count) and keeps what backward needs.
 * Logits are available with mega_lm_logits until the next call. */
MEGA_API mega_status mega_lm_forward(mega_lm *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                            const mega_lm_run *run, double *loss, int64_t *count);
/* Gradients of the last forward's loss, ACCUMULATED into the gradient buffer (zero it first
 * with mega_lm_zero_grad). `scale` multiplies the gradient (1 for the mean loss). */
MEGA_API mega_status mega_lm_backward(mega_lm *m, double scale);
MEGA_API void mega_lm_zero_grad(mega_lm *m);
MEGA_API const mega_real *mega_lm_logits(const mega_lm *m); /* [B, T, V] of the last forward (until backward) */
/* hidden state i (0 = scaled embedding, i = output of layer i) of the last forward:
 * [B, Tp, D] with Tp = mega_lm_padded_len (T, except batchnorm models whose length is not a
 * multiple of the chunk: those are right-padded to a chunk multiple, as the official decoder) */
MEGA_API const mega_real *mega_lm_hidden(const mega_lm *m, int i);
MEGA_API int mega_lm_padded_len(const mega_lm *m);

/* the flat parameter / gradient buffers and their table */
MEGA_API mega_real *mega_lm_params(mega_lm *m);
MEGA_API mega_real *mega_lm_grads(mega_lm *m);
MEGA_API size_t mega_lm_param_total(const mega_lm *m); /* reals in the buffer (incl. buffers and padding) */
MEGA_API int mega_lm_tensor_count(const mega_lm *m);
/* name, offset, numel, flags of tensor i (flags: 1 decay, 2 non-trainable buffer) */
MEGA_API const char *mega_lm_tensor_info(const mega_lm *m, int i, size_t *offset, size_t *numel, unsigned *flags);

/* Streaming (incremental) inference for B sequences, caller-owned state. cap: longest stream
 * for full-attention models (ignored when chunked). */
typedef struct mega_lm_stream mega_lm_stream;
MEGA_API mega_status mega_lm_stream_new(mega_lm *m, int B, int cap, mega_lm_stream **out);
MEGA_API void mega_lm_stream_free(mega_lm_stream *s);
MEGA_API void mega_lm_stream_reset(mega_lm_stream *s);
/* feed T tokens per sequence (tokens [B,T]); logits [B,T,V] (or NULL). The whole call is checked
 * first (every token in the vocabulary; the cache capacity when the mixer's cache keeps the whole
 * stream, mega_block_context.cache_full: Mega under full attention, mha): on an error nothing is
 * fed. */
MEGA_API mega_status mega_lm_stream_feed(mega_lm_stream *s, const int32_t *tokens, int T, mega_real *logits);
MEGA_API int64_t mega_lm_stream_pos(const mega_lm_stream *s);
/* Inspection: while streaming, every token of sequence 0 writes the attention weights of Mega
 * layer `layer` over the cached positions (the current chunk up to and including it; the whole
 * stream for full attention) into row (its position in the cache) of `rows`, rows `ld` reals
 * apart (ld >= the cache capacity: the chunk size, or cap of mega_lm_stream_new). Feeding a
 * chunk from its start fills the chunk's causal attention map. rows NULL stops. Mega mixer only
 * (MEGA_ERR_UNSUPPORTED otherwise). */
MEGA_API mega_status mega_lm_stream_probe_attention(mega_lm_stream *s, int layer, mega_real *rows, int ld);
/* Rows: a stream's B sequences used one by one, each at its own position (continuous batching:
 * a sequence joins or leaves while the others go on). row_add takes the next free row (the rows
 * in use are always 0 .. mega_lm_stream_rows() - 1) and starts it empty at position 0;
 * row_feed feeds T tokens to that row alone (a prompt; logits [T,V] or NULL); rows_step feeds
 * one token to every row in use (tokens [rows], logits [rows,V] or NULL) as one batch, each weight
 * read once; row_remove frees a row: the last row in use moves into its place (its index becomes
 * `row`). A row's logits are those it gives alone: the same bits whichever rows run beside it.
 * A stream fed through rows is not fed with mega_lm_stream_feed (MEGA_ERR_INVALID) until
 * mega_lm_stream_reset. The Mega and Megalodon mixers only (their steps take a position per row;
 * other mixers: MEGA_ERR_UNSUPPORTED); the attention probe sees no row's tokens. */
MEGA_API mega_status mega_lm_stream_row_add(mega_lm_stream *s, int *row);
MEGA_API mega_status mega_lm_stream_row_feed(mega_lm_stream *s, int row, const int32_t *tokens, int T, mega_real *logits);
MEGA_API mega_status mega_lm_stream_rows_step(mega_lm_stream *s, const int32_t *tokens, mega_real *logits);
MEGA_API mega_status mega_lm_stream_row_remove(mega_lm_stream *s, int row);
/* rows_step_n: rows_step over rows 0 .. n-1 alone (n at most the rows in use; tokens [n], logits
 * [n,V] or NULL): the other rows keep their state and position (a row still being fed its prompt
 * block by block while the others decode). row_swap: rows a and b exchange their places (their
 * states and positions), as row_remove moves the last row. */
MEGA_API mega_status mega_lm_stream_rows_step_n(mega_lm_stream *s, int n, const int32_t *tokens, mega_real *logits);
MEGA_API mega_status mega_lm_stream_row_swap(mega_lm_stream *s, int a, int b);
MEGA_API int mega_lm_stream_rows(const mega_lm_stream *s);
MEGA_API int64_t mega_lm_stream_row_pos(const mega_lm_stream *s, int row);

/* ---------------------------------------------------------------------------------------------
 * Classifier (official LRA model: MegaLRAEncoder + LRAModel head; docs/mega.md §10).
 * Names: encoder.encoder.embed_tokens.embed.weight (token) or encoder.encoder.embed_tokens.
 * {weight,bias} (real-valued inputs), encoder.encoder.layers.<i>.*, encoder.encoder.final_norm.
 * norm.*, classifier.<j>.0.{weight,bias}, sentence_projection_layer.weight. */
typedef enum { MEGA_EMBED_TOKEN = 0, MEGA_EMBED_REAL } mega_embed_kind;
typedef enum { MEGA_POOL_MEAN = 0, MEGA_POOL_CLS } mega_pool_kind;
typedef struct {
    int layers;                    /* blocks (bidirectional) */
    mega_block_config block;
    int final_norm_affine;         /* learned scale/shift in the final norm (pre-norm models) */
    mega_embed_kind embedding;     /* token ids, or real numbers (pixels) */
    int vocab_size, padding_idx;   /* token embedding only */
    mega_pool_kind pool;           /* mean over the true length, or position 0 */
    int classifier_layers;         /* hidden layers of the head */
    int classifier_dim;            /* their width */
    mega_act classifier_activation;
    int classes;                   /* outputs */
    int two_tower;                 /* retrieval pairs: pooled vectors of both inputs concatenated */
    int patch;                     /* real inputs: images as P x P patches, each a position
                                      through a linear embedding (0 = a position per pixel) */
    int image_width;               /* with patch: the images' width in pixels (rows = T / width) */
    int input_norm;                /* real inputs: positions with a stored mean and std (0 = none):
                                      value t becomes (v - mean[t]) / std[t] (raw speech) */
    int mlm;                       /* a masked-LM head in place of the classification head
                                      (mega train --task mlm; mega_cls_mlm_forward) */
} mega_cls_config;

MEGA_API void mega_cls_config_default(mega_cls_config *c);
/* fill the defaults left at 0 (the mixer's options, classifier-dim), as mega_cls_create does */
MEGA_API void mega_cls_config_resolve(mega_cls_config *c);
MEGA_API mega_status mega_cls_config_check(const mega_cls_config *c);
/* JSON with the field names (also reads the official LRA argument names) */
MEGA_API char *mega_cls_config_to_json(const mega_cls_config *c);
MEGA_API mega_status mega_cls_config_from_json(const char *json, mega_cls_config *c);
/* the model-level fields (layers ... two-tower); the block's at offsetof(mega_cls_config, block) */
MEGA_API const mega_field *mega_cls_config_fields(int *count);

typedef struct mega_cls mega_cls;
MEGA_API mega_status mega_cls_create(const mega_cls_config *c, mega_cls **out);
MEGA_API mega_status mega_cls_create_ex(const mega_cls_config *c, const mega_load_opts *o, mega_cls **out);
/* as mega_lm_memory: forward (and backward) buffers for B inputs of T tokens (two towers: pairs) */
MEGA_API mega_status mega_cls_memory(const mega_cls_config *c, int training, int B, int T, mega_memory *out);
MEGA_API void mega_cls_free(mega_cls *m);
MEGA_API const mega_cls_config *mega_cls_get_config(const mega_cls *m);
MEGA_API void mega_cls_init_params(mega_cls *m, uint64_t seed);
MEGA_API mega_status mega_cls_save_ex(const mega_cls *m, const char *path, const char *const *kv);
MEGA_API mega_status mega_cls_load(const char *path, mega_cls **out); /* path: file or run directory */
MEGA_API mega_status mega_cls_load_ex(const char *path, const mega_load_opts *o, mega_cls **out);

/* One input of a batch: tokens [B,T] (token embedding) or values [B,T] (real embedding), and the
 * true lengths [B] (positions >= length are padding; tokens there should be padding_idx). */
typedef struct {
    const int32_t *tokens;
    const mega_real *values;
    const int32_t *lengths;
    int T;
} mega_cls_input;
/* logits [B, C]; with targets [B] the mean cross-entropy (*loss) and the number of correct
 * argmax predictions (*correct). in2 is the second document for two-tower models (else NULL). */
MEGA_API mega_status mega_cls_forward(mega_cls *m, const mega_cls_input *in, const mega_cls_input *in2, int B,
                             const int32_t *targets, const mega_lm_run *run, double *loss, int64_t *correct);
MEGA_API mega_status mega_cls_backward(mega_cls *m, double scale);
/* A model with mlm = 1 (docs/pretraining.md): the encoder's output at every position whose target
 * [B*T] is >= 0 goes through the masked-LM head (fairseq RobertaLMHead: dense, gelu, layer norm,
 * then the token embedding transposed, plus a bias), targets < 0 are not predicted. *loss: the
 * mean cross-entropy (nats) over the predicted positions, *correct: their argmax hits, *count:
 * their number. mega_cls_backward(m, scale) then gives scale x the gradient of that mean. */
MEGA_API mega_status mega_cls_mlm_forward(mega_cls *m, const mega_cls_input *in, int B, const int32_t *targets,
                                          const mega_lm_run *run, double *loss, int64_t *correct, int64_t *count);
/* synchronized batch statistics over processes (mega_lm_set_batch_sync) */
MEGA_API void mega_cls_set_batch_sync(mega_cls *m, mega_sum_fn sum, void *ctx);
MEGA_API const mega_real *mega_cls_logits(const mega_cls *m);
/* The per-position input statistics of a model with input_norm = n (buffers input_norm.mean and
 * input_norm.std, saved with it): the official speech data's normalisation, (v - mean[t]) / std[t]
 * with std already including its epsilon. MEGA_ERR_INVALID: another n, a std <= 0, non-finite. */
MEGA_API mega_status mega_cls_set_input_norm(mega_cls *m, const float *mean, const float *std, int n);
/* hidden state i of the last forward ([B, Tp, D], Tp = padded length) of input `which` (0/1) */
MEGA_API const mega_real *mega_cls_hidden(const mega_cls *m, int which, int i, int *Tp);

/* ---------------------------------------------------------------------------------------------
 * Encoder–decoder (translation; official fairseq/models/mega.py MegaModel = MegaEncoder +
 * MegaDecoder; docs/translation.md). A bidirectional encoder of `encoder_layers` blocks and a
 * causal decoder whose layers run the block's mixer sublayer, then cross-attention over the
 * encoder output (the gated cross-attention of the official GatedCrossAttention with the Mega
 * mixer; standard multi-head cross-attention with any other mixer), then the normalized FFN.
 * Names are those of the official MegaModel state dict: encoder.embed_tokens.weight,
 * encoder.embed_norm.norm.*, encoder.layers.<i>.{mega_layer,nffn}.*, encoder.final_norm.norm.*,
 * decoder.embed_tokens.weight, decoder.embed_norm.norm.*, decoder.layers.<i>.{mega_layer,
 * cross_attn,nffn}.*, decoder.final_norm.norm.*, decoder.output_projection.weight (untied only).
 * The encoder's max-positions is the official max_source_positions, the decoder's
 * max_target_positions. Tokens: both sides are right-padded with padding_idx; the decoder input
 * is eos followed by the target shifted right (fairseq's prev_output_tokens). */
typedef struct {
    int src_vocab_size, tgt_vocab_size; /* 258: the bytes, <pad> 256, </s> 257 */
    int padding_idx;                    /* 256 */
    int eos_idx;                        /* 257: ends every sentence, starts decoding */
    int encoder_layers, decoder_layers;
    mega_block_config encoder;          /* bidirectional */
    mega_block_config decoder;          /* causal; embed-dim must equal the encoder's */
    int final_norm_affine;              /* learned scale/shift in the final norms (pre-norm) */
    int scale_embedding;                /* embeddings times sqrt(embed_dim) */
    int normalize_embedding;            /* a norm after the embeddings (post-norm models only) */
    int share_all_embeddings;           /* one table: source, target and output (joined vocabulary) */
    int tie_embeddings;                 /* output projection = the target embedding */
    /* the decoder's cross-attention (docs/translation.md): 0 auto (gated with the Mega mixer,
     * multi-head otherwise; what a config without the key means), 1 gated, 2 mha, and the bounded
     * memories of ABC: 3 abc-window, 4 abc-linformer, 5 abc-mlp; names as the flag
     * --cross-attention. Resolved (auto replaced) when a model is created. */
    int cross_attention;
    int cross_memory;                   /* the abc-* kinds' memory slots per head (default 32) */
} mega_s2s_config;

/* a small byte-level model: 2 + 2 layers, separate decoder embeddings, the block defaults (also
 * the values of the fields a config.json leaves out; `mega train --task translate` starts from
 * these and sets its own recipe: 1 + 3 layers, one shared table) */
MEGA_API void mega_s2s_config_default(mega_s2s_config *c);
MEGA_API void mega_s2s_config_resolve(mega_s2s_config *c);
MEGA_API mega_status mega_s2s_config_check(const mega_s2s_config *c);
/* JSON {"model":"mega_s2s", <fields>, "encoder":{block fields}, "decoder":{block fields}}; also
 * reads the official MegaModel argument names (encoder_layers, decoder_z_dim, ...) */
MEGA_API char *mega_s2s_config_to_json(const mega_s2s_config *c);
MEGA_API mega_status mega_s2s_config_from_json(const char *json, mega_s2s_config *c);
/* the model-level fields (src-vocab-size ... tie-embeddings, cross-attention, cross-memory) */
MEGA_API const mega_field *mega_s2s_config_fields(int *count);
/* the cross-attention of config c in words: "gated", "multi-head", "abc-mlp (32 slots)", ... */
MEGA_API const char *mega_s2s_cross_attention_name(const mega_s2s_config *c, char *buf, size_t n);

typedef struct mega_s2s mega_s2s;
MEGA_API mega_status mega_s2s_create(const mega_s2s_config *c, mega_s2s **out);
MEGA_API mega_status mega_s2s_create_ex(const mega_s2s_config *c, const mega_load_opts *o, mega_s2s **out);
/* as mega_lm_memory: teacher-forced forward (and backward) buffers for B pairs of S source and L
 * target tokens (mega_s2s_forward) */
MEGA_API mega_status mega_s2s_memory(const mega_s2s_config *c, int training, int B, int S, int L, mega_memory *out);
MEGA_API void mega_s2s_free(mega_s2s *m);
MEGA_API const mega_s2s_config *mega_s2s_get_config(const mega_s2s *m);
MEGA_API void mega_s2s_init_params(mega_s2s *m, uint64_t seed);
MEGA_API mega_status mega_s2s_save_ex(const mega_s2s *m, const char *path, const char *const *kv);
MEGA_API mega_status mega_s2s_load(const char *path, mega_s2s **out); /* path: file or run directory */
MEGA_API mega_status mega_s2s_load_ex(const char *path, const mega_load_opts *o, mega_s2s **out);

/* Teacher-forced forward: src [B,S], prev (decoder input) and tgt [B,L], right-padded with
 * padding_idx. Logits [B,L,V] (0 at target pads). With tgt: the label-smoothed cross-entropy over
 * the non-pad targets (fairseq label_smoothed_cross_entropy: (1-eps-eps/(V-1)) nll + eps/(V-1)
 * sum_v -log p_v; eps = label_smoothing), its mean in *loss, the mean NLL in *nll, the number of
 * counted targets in *count. */
MEGA_API mega_status mega_s2s_forward(mega_s2s *m, const int32_t *src, int S, const int32_t *prev, const int32_t *tgt, int L,
                             int B, const mega_lm_run *run, double label_smoothing, double *loss, double *nll,
                             int64_t *count);
/* gradients of `scale` x the mean loss, accumulated */
MEGA_API mega_status mega_s2s_backward(mega_s2s *m, double scale);
/* synchronized batch statistics over processes (mega_lm_set_batch_sync) */
MEGA_API void mega_s2s_set_batch_sync(mega_s2s *m, mega_sum_fn sum, void *ctx);
MEGA_API const mega_real *mega_s2s_logits(const mega_s2s *m);
/* the last forward's hidden states: side 0 = encoder, 1 = decoder; i = 0 (embeddings) ..
 * layers; [B, Tp, D] with Tp (written) the padded length */
MEGA_API const mega_real *mega_s2s_hidden(const mega_s2s *m, int side, int i, int *Tp);
/* the encoder output the cross-attention saw: [B, S, D], zero at source pads */
MEGA_API const mega_real *mega_s2s_encoder_out(const mega_s2s *m);

/* Incremental decoding (eval semantics): the encoder runs once per source batch, the decoder one
 * token per row per step with its streaming state (EMA state, the current chunk's keys and
 * values, the encoder output's cross-attention keys and values). */
typedef struct mega_s2s_stream mega_s2s_stream;
/* B rows, sources up to Smax tokens, up to tmax decoded positions */
MEGA_API mega_status mega_s2s_stream_new(mega_s2s *m, int B, int Smax, int tmax, mega_s2s_stream **out);
MEGA_API void mega_s2s_stream_free(mega_s2s_stream *s);
/* encode src [B/rep, S] and restart decoding; row b of the stream decodes source row b / rep */
MEGA_API mega_status mega_s2s_stream_start(mega_s2s_stream *s, const int32_t *src, int S, int rep);
/* one token per row (tok [B]) -> logits [B, V] of the next token */
MEGA_API mega_status mega_s2s_stream_step(mega_s2s_stream *s, const int32_t *tok, mega_real *logits);
/* beam search: new row b continues old row idx[b] (rows of the same source only) */
MEGA_API mega_status mega_s2s_stream_reorder(mega_s2s_stream *s, const int *idx);

/* Search (fairseq SequenceGenerator): beam 1 is greedy. A hypothesis ends with eos; its score
 * is the sum of its token log-probabilities (eos included) divided by len^lenpen (len counts
 * eos). Decoding stops at max_len_a * S + max_len_b tokens (S: source tokens with eos), where eos
 * is forced; pad is never produced. */
typedef struct {
    int beam;          /* 1 = greedy */
    double lenpen;     /* length penalty (fairseq --lenpen; 1 = divide by the length) */
    double max_len_a;  /* maximum length = a * source length + b */
    int max_len_b;
    /* the source length of each sentence in that limit (NULL: its tokens, </s> included). A
     * caller whose source tokens are subword units and whose targets are bytes gives each
     * source's byte length + 1 here, so that a and b keep their meaning for byte targets. */
    const int *limit_src_len;
} mega_s2s_search;
MEGA_API void mega_s2s_search_default(mega_s2s_search *p); /* beam 4, lenpen 1, a 1.2, b 10, token lengths */
/* translate B sources (src [B, S] right-padded, eos-terminated): out [B, cap] receives each best
 * hypothesis without its eos, out_len [B] its length, score [B] (may be NULL) its score. A
 * hypothesis longer than cap is an error. */
MEGA_API mega_status mega_s2s_translate(mega_s2s *m, const int32_t *src, int B, int S, const mega_s2s_search *p, int32_t *out,
                               int *out_len, int cap, double *score);
/* the bytes mega_s2s_translate allocates for B sources of S tokens (its decoding stream, the
 * search's arrays, the sources' encoding), computed from the sizes the allocations use */
MEGA_API mega_status mega_s2s_search_memory(const mega_s2s_config *c, int B, int S, const mega_s2s_search *p, size_t *bytes);

/* ---------------------------------------------------------------------------------------------
 * A model's parameter set: one flat buffer of values and one of gradients, described by a table
 * of named tensors. Shared by every model kind (optimizer, clipping, checkpoints). */
typedef struct mega_paramset mega_paramset;
MEGA_API mega_paramset *mega_lm_paramset(mega_lm *m);
MEGA_API mega_paramset *mega_cls_paramset(mega_cls *m);
MEGA_API mega_paramset *mega_s2s_paramset(mega_s2s *m);
MEGA_API mega_real *mega_ps_data(mega_paramset *p);
MEGA_API mega_real *mega_ps_grad(mega_paramset *p);
MEGA_API size_t mega_ps_total(const mega_paramset *p);      /* reals in each buffer */
MEGA_API size_t mega_ps_trainable(const mega_paramset *p);  /* trainable parameters */
MEGA_API int mega_ps_count(const mega_paramset *p);
/* name, offset, numel, flags (1 decay, 2 non-trainable buffer) of tensor i */
MEGA_API const char *mega_ps_info(const mega_paramset *p, int i, size_t *offset, size_t *numel, unsigned *flags);
MEGA_API void mega_ps_zero_grad(mega_paramset *p);
/* Every tensor of dst whose name and shape are those of a tensor of src gets its values
 * (fine-tuning from a pretrained model: mega train --init-from); copied[i] (room for
 * mega_ps_count(dst)) says which of dst's were. Returns how many. */
MEGA_API int mega_ps_copy_matching(mega_paramset *dst, const mega_paramset *src, uint8_t *copied);
/* the same with src's names renamed first: map is pairs of prefixes {from, to, from, to, ...,
 * NULL}, the first pair whose `from` begins a name replacing that beginning by `to` (a name no
 * pair matches is kept). The translation model's encoder from a classifier's:
 * {"encoder.encoder.embed_tokens.embed.", "encoder.embed_tokens.", "encoder.encoder.", "encoder.", NULL} */
MEGA_API int mega_ps_copy_renamed(mega_paramset *dst, const mega_paramset *src, const char *const *map, uint8_t *copied);
MEGA_API double mega_ps_grad_norm(const mega_paramset *p);
MEGA_API void mega_ps_scale_grad(mega_paramset *p, double s);

/* ---------------------------------------------------------------------------------------------
 * AdamW (decoupled weight decay, Loshchilov & Hutter) over a model's flat parameter buffer: the
 * AdamW row of the optimizer table (mega_train.h, mega_optim_*), kept as its own small API.
 * Weight decay applies to tensors flagged "decay" (matrices and embeddings) unless decay_all is
 * set; never to non-trainable buffers. */
typedef struct {
    double beta1, beta2, eps, weight_decay;
    int decay_all;
} mega_adamw_hp;
typedef struct mega_adamw mega_adamw;
MEGA_API mega_status mega_adamw_new(size_t total, mega_adamw **out);
MEGA_API void mega_adamw_free(mega_adamw *o);
/* one update of a parameter set from its gradients with learning rate lr */
MEGA_API void mega_adamw_step(mega_adamw *o, mega_paramset *p, const mega_adamw_hp *hp, double lr);
/* the same for a language model (mega_adamw_step on mega_lm_paramset) */
MEGA_API void mega_adamw_step_lm(mega_adamw *o, mega_lm *m, const mega_adamw_hp *hp, double lr);
/* The moments in a training-state file: exp_avg.<name> and exp_avg_sq.<name> per trainable
 * tensor of ps, flat ([numel]; F32, or F64 in a MEGA_F64 build). Loading checks each one against
 * its parameter (present, floating point, of shape [numel], finite, second moments >= 0) and
 * fails naming the tensor. */
MEGA_API mega_status mega_adamw_save_moments(const mega_adamw *o, const mega_paramset *ps, mega_st_writer *w);
MEGA_API mega_status mega_adamw_load_moments(mega_adamw *o, const mega_paramset *ps, const mega_st_file *f);
/* moment buffers (total reals each) and step counter, for checkpoints */
MEGA_API mega_real *mega_adamw_m(mega_adamw *o);
MEGA_API mega_real *mega_adamw_v(mega_adamw *o);
MEGA_API int64_t *mega_adamw_t(mega_adamw *o);
/* global L2 norm of the trainable gradients; scale them */
MEGA_API double mega_lm_grad_norm(const mega_lm *m);
MEGA_API void mega_lm_scale_grads(mega_lm *m, double s);

/* ---------------------------------------------------------------------------------------------
 * Evaluation: the loops that score a model on held-out data, shared by training (validation) and
 * the inference commands. Nothing is printed: a long evaluation reports through an optional
 * progress callback. The classifier's and the encoder-decoder's (mega_cls_evaluate,
 * mega_s2s_evaluate) take the datasets of include/mega_data.h and are declared there. */

/* A token sequence to score: bytes (byte-level models), or token ids when bytes is NULL (models
 * with a fairseq dictionary); the model predicts token i + 1 from tokens 0..i. */
typedef struct {
    const uint8_t *bytes;
    const int32_t *ids;
    size_t n;
} mega_tokens;

/* called after each batch or segment: `done` of `total` units (predictions or examples) and the
 * running value (mean loss in nats, or accuracy) */
typedef void (*mega_eval_progress)(void *ctx, int64_t done, int64_t total, double value);

/* mean loss (nats per token) over non-overlapping windows of T tokens, B windows per forward
 * pass (eval mode; the validation of language-model training); max_tokens caps the work (0 =
 * all). *count: the predictions scored. MEGA_ERR_INVALID when s has fewer than 2 tokens. */
MEGA_API mega_status mega_lm_eval_windows(mega_lm *m, const mega_tokens *s, int B, int T, size_t max_tokens, double *loss,
                                 int64_t *count);
/* streaming evaluation of every prediction of s, fed in segments of `seg` tokens: chunked Mega
 * carries its state across segments, every other model restarts at each one; the state also
 * restarts every `restart` predictions (0 = never: fairseq's --tokens-per-sample blocks).
 * progress (optional) after each segment, with the running mean loss. */
MEGA_API mega_status mega_lm_eval_stream(mega_lm *m, const mega_tokens *s, int seg, size_t restart, mega_eval_progress progress,
                                void *ctx, double *loss, int64_t *count);

/* ---------------------------------------------------------------------------------------------
 * Sampling the next token from a row of logits, as `mega generate` does. The sampler owns its
 * buffers and its random stream: a token costs no allocation, and a seed gives the same
 * choices on every run. Greedy (temperature 0) takes the first index of the largest logit.
 * Otherwise the candidates are sorted by logit (ties by index) and cut to the top_k best,
 * p = softmax(logits / temperature) over them is cut to the shortest prefix whose mass reaches
 * top_p and renormalised, and one draw from the seed's splitmix64 stream picks the token. */
typedef struct {
    double temperature; /* 0 = greedy argmax */
    int top_k;          /* sample among the k most likely tokens (0 = all) */
    double top_p;       /* nucleus mass in (0, 1]; 1 = off (0 is refused: greedy is temperature 0) */
    uint64_t seed;      /* the random stream */
} mega_sample_params;
/* the defaults of `mega generate`: temperature 0.8, top_k 0, top_p 0.95, seed 0 */
MEGA_API void mega_sample_params_default(mega_sample_params *p);
typedef struct mega_sampler mega_sampler;
/* a sampler for vocab-sized logit rows (p NULL = the defaults) */
MEGA_API mega_status mega_sampler_new(int vocab, const mega_sample_params *p, mega_sampler **out);
MEGA_API void mega_sampler_free(mega_sampler *s);
/* restart the random stream from seed (the state mega_sampler_new left it in for that seed) */
MEGA_API void mega_sampler_reset(mega_sampler *s, uint64_t seed);
/* the next token for logits[vocab], never `exclude` (e.g. the model's padding_idx; -1 = none):
 * the token (>= 0), or a negative mega_status (NaN or infinite logits: MEGA_ERR_NUMERIC) */
MEGA_API int mega_sampler_next(mega_sampler *s, const mega_real *logits, int exclude);

/* ---------------------------------------------------------------------------------------------
 * Models of any kind (MEGA_MODEL_LIST): create, load, save, free, memory and config without
 * naming the kind. A mega_model is the typed model itself: mega_model_lm(m) (mega_model_cls,
 * mega_model_s2s) gives the typed handle, NULL for a model of another kind, and mega_lm_model(lm)
 * (mega_cls_model, mega_s2s_model) the generic one; forward, backward, streams and search stay
 * typed. A config is passed as a pointer to the kind's config struct (mega_lm_config, ...), of
 * mega_model_config_size bytes.
 */
typedef struct mega_model mega_model;
MEGA_API const char *mega_model_kind_name(mega_model_kind k);    /* "mega_lm"; "?" out of range */
MEGA_API const char *mega_model_kind_summary(mega_model_kind k);
MEGA_API int mega_model_kind_from_name(const char *s, mega_model_kind *k); /* 0, or -1 for an unknown name */
/* the kind a config JSON describes: its "model" (a name outside MEGA_MODEL_LIST fails, naming it
 * and the known kinds), else the kind whose official fairseq arguments it holds (decoder_layers:
 * mega_lm, encoder_layers: mega_cls, both: mega_s2s), else mega_lm (as mega_lm_config_from_json
 * reads a config without "model") */
MEGA_API mega_status mega_model_kind_of_json(const char *json, mega_model_kind *k);

MEGA_API size_t mega_model_config_size(mega_model_kind k); /* 0 out of range */
MEGA_API void mega_model_config_default(mega_model_kind k, void *cfg);
MEGA_API mega_status mega_model_config_check(mega_model_kind k, const void *cfg);
MEGA_API char *mega_model_config_to_json(mega_model_kind k, const void *cfg); /* caller frees */
MEGA_API mega_status mega_model_config_from_json(mega_model_kind k, const char *json, void *cfg);
/* the kind's model-level fields (the block's: mega_block_config_fields) */
MEGA_API const mega_field *mega_model_config_fields(mega_model_kind k, int *count);

/* as mega_lm_create / _create_ex */
MEGA_API mega_status mega_model_create(mega_model_kind k, const void *cfg, mega_model **out);
MEGA_API mega_status mega_model_create_ex(mega_model_kind k, const void *cfg, const mega_load_opts *o, mega_model **out);
/* a model file (or run directory) of any kind: the kind is read from the config in its metadata
 * (mega_model_kind_of_json); then as mega_lm_load_ex */
MEGA_API mega_status mega_model_load(const char *path, mega_model **out);
MEGA_API mega_status mega_model_load_ex(const char *path, const mega_load_opts *o, mega_model **out);
/* as mega_lm_save / _save_ex (kv: extra metadata pairs, NULL-terminated) */
MEGA_API mega_status mega_model_save(const mega_model *m, const char *path);
MEGA_API mega_status mega_model_save_ex(const mega_model *m, const char *path, const char *const *kv);
MEGA_API void mega_model_free(mega_model *m);
/* Quantized weights (docs/quantization.md): the model file (or run directory) `in` written to
 * `out` with its projection and embedding matrices in q8_0 blocks (type NULL or "q8_0"), the
 * rest float32, the metadata kept; *matrices (may be NULL): how many were quantized. Such a file
 * loads for inference only (mega_load_opts.inference); its products run on the int8 blocks. */
MEGA_API mega_status mega_model_quantize(const char *in, const char *out, const char *type, size_t *matrices);
/* "q8_0" for a model loaded from a quantized file, NULL otherwise */
MEGA_API const char *mega_model_quantization(const mega_model *m);
MEGA_API mega_model_kind mega_model_kind_of(const mega_model *m);
MEGA_API const void *mega_model_config(const mega_model *m); /* the kind's config struct */
MEGA_API char *mega_model_config_json(const mega_model *m);  /* caller frees */
MEGA_API mega_paramset *mega_model_paramset(mega_model *m);
MEGA_API void mega_model_init_params(mega_model *m, uint64_t seed);
/* as mega_lm_memory, for B inputs of T tokens (an encoder-decoder: T source and T target tokens) */
MEGA_API mega_status mega_model_memory(mega_model_kind k, const void *cfg, int training, int B, int T, mega_memory *out);
/* The official names of the config fields, in one table per kind (model-level fields) and one
 * for the block: the fairseq argument ("%s" stands for the kind's side, "decoder" for mega_lm,
 * "encoder" for mega_cls, either for mega_s2s) and transformers' MegaConfig key; NULL where there
 * is none. The config readers, `mega hf-export` / `hf-import` and scripts/convert_fairseq.py
 * (through scripts/official_names.json) all read them here. */
enum {
    MEGA_OFFICIAL_INVERT = 1,  /* a negated boolean (no_scale_embedding = !scale-embedding) */
    MEGA_OFFICIAL_TRAINING = 2 /* a training setting (dropout) the official LM and LRA readers skip */
};
typedef struct {
    const char *field;   /* our config key ("embed-dim") */
    const char *fairseq; /* the official fairseq argument ("%s_embed_dim") */
    const char *hf;      /* the Hugging Face MegaConfig key ("hidden_size") */
    unsigned flags;
} mega_official_name;
MEGA_API const mega_official_name *mega_block_official_names(int *count);
MEGA_API const mega_official_name *mega_model_official_names(mega_model_kind k, int *count);
MEGA_API const char *mega_model_official_side(mega_model_kind k); /* "decoder", "encoder"; NULL: both sides */
/* the Hugging Face key of a field of kind k (its own table first, then the block's); NULL if none */
MEGA_API const char *mega_official_hf_name(mega_model_kind k, const char *field);
/* typed <-> generic, one pair per kind */
#define MEGA_MODEL_TYPED_(ID, id, name, help)                                                      \
    MEGA_API mega_##id *mega_model_##id(mega_model *m);                                            \
    MEGA_API mega_model *mega_##id##_model(mega_##id *m);
MEGA_MODEL_LIST(MEGA_MODEL_TYPED_)
#undef MEGA_MODEL_TYPED_

/* ---------------------------------------------------------------------------------------------
 * Model files. Every function that loads a model (mega_lm_load, mega_lm_load_weights,
 * mega_cls_load) takes either the .safetensors file or a run directory (what `mega train --out`
 * writes), meaning the model.safetensors inside it. This is that rule: the file `path` names,
 * written to buf (size bytes). Fails with one line: MEGA_ERR_IO when path does not exist or is a
 * directory without model.safetensors, MEGA_ERR_INVALID when buf is too small. */
MEGA_API mega_status mega_model_file(const char *path, char *buf, size_t size);
/* The same rule with a choice of the run's models: which = "best" (or NULL) names the run
 * directory's best.safetensors (the model of the best validation figure, kept by mega train)
 * when it exists, else the newest model as mega_model_file; "last" is mega_model_file. A file
 * path is used as given. MEGA_ERR_INVALID for another `which`. */
MEGA_API mega_status mega_model_file_which(const char *path, const char *which, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#include "mega_train.h" /* optimizers, schedules, training keys */
#endif /* MEGA_H */
