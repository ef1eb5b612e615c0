/*
 * The block test harness: one block under test, built from a mega_block_config, and the two
 * drivers every mixer's tests share:
 *   - bt_fd_check: finite differences (tests/lib/fd.h) of loss = sum(out * R) w.r.t. the input and
 *     every trainable tensor, against mega_block_backward (or the mixer core's backward), one
 *     check per tensor;
 *   - bt_stream_check: mega_block_state_init + mega_block_step over the sequence in pieces of
 *     several sizes, against the eval-mode full causal forward; reset and re-stream.
 * Mixer-specific settings come in through the configuration (and bt_opts.setup for the few that
 * are not configuration fields, e.g. ABC's literal empty slots).
 *
 * A bt_ctx holds the resolved configuration the block points to (mega_block keeps a pointer to
 * its config): it must not be copied or moved while open.
 */
#ifndef MEGA_BLOCKTEST_H
#define MEGA_BLOCKTEST_H
#include "fd.h"
#include "layers/block.h"
#include "testlib.h"

/* streaming vs full forward: relative to max |out| */
#ifdef MEGA_F64
#define BT_STOL 1e-12
#else
#define BT_STOL 1e-5
#endif

/* padding patterns (1 = pad) of sequences 0 and 1; other sequences are never padded */
enum {
    BT_PAD_NONE,
    BT_PAD_RIGHT, /* seq 0: the last position; seq 1: the last max(3, T/3) */
    BT_PAD_ALL,   /* seq 0: the last two; seq 1: every position */
    BT_PAD_LEFT,  /* seq 0: one interior pad (T/2); seq 1: positions 0..2 (causal queries that see no key) */
    BT_PAD_MID    /* seq 1: interior (2; T/2, T/2+1 when T > 20) and trailing (T-2, T-1) pads */
};

typedef struct {
    int B, T;             /* B 0: 2 */
    int pad;              /* BT_PAD_* */
    uint64_t seed;        /* initialisation, perturbation, x and R all derive from it */
    int nthreads;         /* of the forward/backward runs (0: mega_get_threads()) */
    int core;             /* forward/backward of the mixer core alone (not the Mega mixer) */
    int keep_init;        /* leave the parameters at mega_block_init's values (default: bt_perturb) */
    const char *prefix;   /* parameter names (NULL: "") */
    const char *tag;      /* appended to the generated name */
    void (*setup)(void *layer, int arg); /* after declare: a mixer-specific setting */
    int setup_arg;
} bt_opts;

typedef struct {
    mega_block_config cfg; /* resolved; the block points here */
    mega_block bl;
    mega_params P;         /* values and gradients */
    mega_block_acts A;
    mega_real *acts, *scr, *x, *R, *out, *dx;
    uint8_t *pad;
    const uint8_t *pm;     /* pad, or NULL for BT_PAD_NONE */
    int B, T, core;
    size_t RD;             /* B * T * embed_dim */
    mega_run run;          /* training, fixed dropout key */
    unsigned long long rs; /* stream of x redraws */
    char name[320];
} bt_ctx;

/* the largest error seen and where */
typedef struct {
    double v;
    char where[400];
} bt_worst;
void bt_note(bt_worst *w, double e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- building ----------------------------------------------------------------------------- */
/* declare (validating), init, perturb (unless keep_init), buffers, pads, random x and R; a failure
 * is recorded as a failed check and returns non-zero (the context is then closed) */
int bt_open(bt_ctx *c, const mega_block_config *cfg, const bt_opts *o);
void bt_close(bt_ctx *c);
/* status of declaring cfg (nothing recorded); *nparams: declared entries; *resolved: the config
 * with the mixer's defaults filled in (either may be NULL) */
mega_status bt_try_declare(const mega_block_config *cfg, mega_block_config *resolved, size_t *nparams);
/* the mixer name and every field that applies to it and differs from the defaults */
void bt_describe(const mega_block_config *cfg, char *buf, size_t n);
/* move every parameter off its initial value (the rules of tests/ref/case_writer.py perturb();
 * one rule per tensor name, a tensor without a rule is a failed check) */
void bt_perturb(mega_params *P, unsigned long long *seed);
void bt_fill_pad(uint8_t *pad, int pattern, int B, int T);

/* ---- running ------------------------------------------------------------------------------ */
/* out = block(x) (or the core's) with c->run */
mega_status bt_forward(bt_ctx *c);
/* forward, then sum(out * R); NaN when the forward fails */
double bt_loss(bt_ctx *c);
/* zeroed gradients, forward, backward of sum(out * R): dx and P.grad */
mega_status bt_backward(bt_ctx *c);
/* redraw x until ok(c) holds after a forward (at most `tries` draws); returns ok's last value */
int bt_redraw_x(bt_ctx *c, int (*ok)(bt_ctx *), int tries);
/* max |a - b| / max |b| */
double bt_rel_diff(const mega_real *a, const mega_real *b, size_t n);
/* the tensor whose name ends with suffix (NULL if none) */
mega_real *bt_param(const mega_params *P, const char *suffix);
/* y [R, O] = x W^T + b in double (b may be NULL): for naive references */
void bt_linear(double *y, const mega_real *x, const mega_real *W, const mega_real *b, size_t R, int In, int O);

/* ---- finite differences --------------------------------------------------------------------- */
typedef struct {
    int two_point;        /* fd.h: the two-point stencil (losses that are only C1) */
    int entries;          /* per-entry checks of x and every trainable tensor (one check each) */
    int directional;      /* three random directional derivatives over W and one over x */
    int canary;           /* also check that a gradient off by 1e-5 of the largest is caught */
    size_t sample_above, samples; /* fd.h: sampled entries of large tensors */
    bt_worst *worst;      /* accumulates the worst per-tensor error (may be NULL) */
    bt_worst *worst_dir;  /* and the worst directional one */
} bt_fd_opts;
#define BT_FD_TOL 1e-6
/* records: the forward runs; dropout live and deterministic (when a dropout is set); one check
 * per tensor (relative error with a floor of 1e-3 x the largest gradient, tolerance 1e-6;
 * gradients finite); the canary; the directional derivatives; the parameters unchanged by the
 * forwards. Leaves the analytic gradients in dx and P.grad. Returns the worst error. */
double bt_fd_check(bt_ctx *c, const bt_fd_opts *o);
/* one thread and mega_get_threads() threads: bit-identical out, dx and P.grad (one check; none
 * on a single core) */
void bt_threads_check(bt_ctx *c);

/* ---- streaming ---------------------------------------------------------------------------- */
/* a split of the sequence: the piece sizes (0-terminated), then pieces of `rest` tokens (0: 1) */
typedef struct {
    int sizes[8];
    int rest;
} bt_split;
/* a streaming state with its own scratch (both followed by guard zones), and the outputs */
typedef struct {
    mega_block_state S;
    mega_real *mem, *scr, *xt, *ot;
    mega_real *full, *out; /* the eval forward of the whole sequence; the streamed outputs [B, T, D] */
    size_t nmem, nscr;
    int cap, maxT;
} bt_stream;
/* s->full = the eval-mode forward of the whole sequence (recorded as a check), then a state of
 * capacity cap for calls of at most maxT tokens, fed positions [0, a1) in the pieces of sp into
 * s->out. The state stays open for further steps (bt_stream_close). Returns the first failing
 * status (mega_block_state_init's, then mega_block_step's). */
mega_status bt_stream_start(bt_ctx *c, bt_stream *s, int cap, int maxT, const bt_split *sp, int a1);
void bt_stream_close(bt_stream *s);
/* stream positions [a0, a1) of x in the pieces of sp (NULL: one token at a time) into out
 * ([B, T, D], the same rows as x); stops at the first failing step */
mega_status bt_stream_feed(bt_ctx *c, bt_stream *s, const bt_split *sp, mega_real *out, int a0, int a1);
/* max |out - full| / max |full| over positions [a0, a1) of every sequence */
double bt_stream_err(const bt_ctx *c, const bt_stream *s, int a0, int a1);
/* nothing written past the state memory or the step scratch */
int bt_stream_guards_ok(const bt_stream *s);
/* eval-mode forward of the whole sequence into out; records a check */
mega_status bt_eval_forward(bt_ctx *c, mega_real *out);

typedef struct {
    int cap;               /* cache capacity (0: T) */
    const bt_split *splits; /* multi-token splits (NULL: the standard ones, see blocktest.c) */
    int nsplits;
    bt_worst *worst;       /* accumulates the worst error (may be NULL) */
} bt_stream_opts;
/* records: the eval forward; token by token (state init included) == full forward; reset +
 * re-stream bit-identical; each split == full forward (BT_STOL); the guard zones intact. Returns the worst
 * error (c->pm must be NULL: streams have no pads). */
double bt_stream_check(bt_ctx *c, const bt_stream_opts *o);
#endif
