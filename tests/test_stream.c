/*
 * Streaming (incremental) decoding of causal Mega blocks (official incremental_state paths:
 * MovingAverageGatedAttention.forward with its key/value cache cleared when it reaches a chunk
 * multiple, MultiHeadEMA.forward with prev_state; docs/mega.md §9) against the eval-mode full
 * forward (mega_run training = 0), through the shared driver bt_stream_check
 * (tests/lib/blocktest.h):
 *   (a) mega_block_step token by token;
 *   (b) multi-token calls in the driver's standard splits: a first call that ends exactly at a
 *       chunk border, then calls of other sizes, splits that cross the chunk borders anywhere
 *       (the step attends token by token, clearing the cache at every chunk border, so any
 *       split must work; multi-token steps at any cache length are a project extension), the
 *       whole sequence at once;
 *   (c) truncation: the step is untruncated (as the official incremental path), so it equals
 *       the full forward when truncation >= T (here T + 5), and it must DIFFER when
 *       truncation < T;
 * plus: mega_block_state_reset then re-streaming gives bit-identical outputs; a bidirectional
 * block refuses mega_block_state_init (MEGA_ERR_UNSUPPORTED); streaming past the capacity of a
 * full-attention cache fails with MEGA_ERR_INVALID without touching the state or the memory
 * around it; a capacity below the chunk size is refused; the step stays inside the scratch size
 * it asks for (batchnorm statistics with B*T = 1 and a wide FFN, guard zone checked).
 * Configurations: chunk 4 with T = 13 (cache cleared at chunk borders, ragged last chunk),
 * chunk 5, chunk = T, chunk > T, chunk 1, full attention; softmax / relu2 / laplace; simple /
 * rotary; pre / post norm; every norm, batchnorm with non-trivial running statistics (eval
 * mode); with and without the FFN; silu / gelu / relu; B = 2; D = 8, and D = 20 and 36 with N = 5
 * (a partial last EMA channel block after full ones: the step reads full blocks in place and the
 * partial one through the zero-padded copy).
 * Tolerance (BT_STOL): 1e-5 of max |out| (float build), 1e-12 (double build, build/t64_stream).
 */
#include "blocktest.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bt_worst g_worst;

static void base_cfg(mega_block_config *c) {
    mega_block_config_default(c);
    c->embed_dim = 8, c->z_dim = 6, c->hidden_dim = 10, c->n_dim = 3, c->ffn_dim = 12;
    c->chunk_size = -1, c->max_positions = 16;
}

/* (c) truncation: >= T equal, < T must differ */
static void run_truncation(int k) {
    const int T = 13;
    for (int i = 0; i < 2; i++) {
        mega_block_config c;
        base_cfg(&c);
        c.chunk_size = k ? -1 : 4, c.attention_activation = k ? MEGA_ATTN_LAPLACE : MEGA_ATTN_SOFTMAX;
        c.rel_pos_bias = k ? MEGA_RELPOS_ROTARY : MEGA_RELPOS_SIMPLE, c.prenorm = !k;
        c.norm_type = k ? MEGA_NORM_BATCH : MEGA_NORM_LAYER;
        c.truncation = i == 0 ? T + 5 : 3;
        const bt_opts o = {.T = T, .seed = 200 + (uint64_t)k, .prefix = "decoder.layers.0."};
        bt_ctx g;
        if (bt_open(&g, &c, &o)) return;
        bt_stream s;
        const mega_status st = bt_stream_start(&g, &s, c.chunk_size > 0 ? c.chunk_size : T, 1, NULL, T);
        const double e = bt_stream_err(&g, &s, 0, T);
        if (i == 0) {
            bt_note(&g_worst, e, "%s", g.name);
            TL_CHECK(st == MEGA_OK && e < BT_STOL, "%s: truncation T+5 >= T: step == full forward: rel err %.2e", g.name, e);
        } else {
            /* the first K positions agree (the kernel is not cut there), later ones differ */
            const double early = bt_stream_err(&g, &s, 0, c.truncation);
            TL_CHECK(st == MEGA_OK && e > 1e3 * BT_STOL && early < BT_STOL,
                     "%s: truncation 3 < T: the untruncated step differs from the truncated forward (rel diff %.2e, "
                     "first 3 positions %.2e)", g.name, e, early);
        }
        bt_stream_close(&s);
        bt_close(&g);
    }
}

/* full attention with a cache of 5 positions: 4 tokens, a 2-token call is refused with the state
 * unchanged, the 5th token still matches, the 6th is refused, nothing is written past the
 * state, and a reset makes it usable again */
static void run_capacity(void) {
    mega_block_config c;
    base_cfg(&c);
    const int B = 2, T = 13, cap = 5;
    const bt_opts o = {.B = B, .T = T, .seed = 78, .prefix = "decoder.layers.0."};
    bt_ctx g;
    if (bt_open(&g, &c, &o)) return;
    bt_stream s;
    mega_status st = bt_stream_start(&g, &s, cap, 2, NULL, 4); /* length 4 of 5 */
    TL_CHECK(st == MEGA_OK, "capacity: state init and 4 tokens (%s)", st == MEGA_OK ? "ok" : mega_last_error());
    const mega_status st2 = st == MEGA_OK ? bt_stream_feed(&g, &s, &(bt_split){{2}, 0}, s.out, 4, 6) : st;
    TL_CHECK(st == MEGA_OK && st2 == MEGA_ERR_INVALID && s.S.pos == 4,
             "capacity: a 2-token call at length 4 of 5 fails with MEGA_ERR_INVALID (got %d, pos %lld)", (int)st2,
             (long long)s.S.pos);
    if (st == MEGA_OK) st = bt_stream_feed(&g, &s, NULL, s.out, 4, 5); /* the EMA state untouched by the failure */
    const double worst = bt_stream_err(&g, &s, 0, 5);
    TL_CHECK(st == MEGA_OK && worst < BT_STOL, "capacity: 5 tokens into a cache of 5 match the full forward (%.2e)", worst);
    st = st == MEGA_OK ? bt_stream_feed(&g, &s, NULL, s.out, 5, 6) : MEGA_OK;
    TL_CHECK(st == MEGA_ERR_INVALID, "capacity: the 6th token into a full cache of 5 fails with MEGA_ERR_INVALID (got %d)",
             (int)st);
    TL_CHECK(bt_stream_guards_ok(&s), "capacity: nothing written past the state memory or the step scratch");
    mega_block_state_reset(&g.bl, &s.S);
    st = bt_stream_feed(&g, &s, NULL, s.out, 0, 1);
    TL_CHECK(st == MEGA_OK && bt_stream_err(&g, &s, 0, 1) < BT_STOL, "capacity: usable again after a reset");
    bt_stream_close(&s);
    bt_close(&g);
}

static void run_errors(void) {
    mega_block_config c;
    base_cfg(&c);
    struct {
        int bidir, chunk, cap;
        mega_status want;
        const char *what;
    } bad[] = {
        {1, -1, 13, MEGA_ERR_UNSUPPORTED, "bidirectional block: state init refused with MEGA_ERR_UNSUPPORTED"},
        {0, 4, 3, MEGA_ERR_INVALID, "state init with capacity 3 < chunk 4 refused"},
        {0, -1, 20, MEGA_ERR_INVALID, "state init with capacity 20 > max_positions 16 (simple bias) refused"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c.bidirectional = bad[i].bidir, c.chunk_size = bad[i].chunk;
        const bt_opts o = {.B = 2, .T = 13, .seed = 77 + i};
        bt_ctx g;
        if (bt_open(&g, &c, &o)) continue;
        bt_stream s;
        const mega_status st = bt_stream_start(&g, &s, bad[i].cap, 1, NULL, 0);
        TL_CHECK(st == bad[i].want, "%s (got %d: %s)", bad[i].what, (int)st, mega_last_error());
        bt_stream_close(&s);
        bt_close(&g);
    }
}

/* regression: batchnorm keeps 2*D statistics (not 2 per row): with B*T = 1 and a wide FFN the
 * step scratch (mega_block_step_scratch) used to be too small for them (heap overflow in
 * mega_nffn_step). The driver allocates the scratch exactly, followed by a guard zone. */
static void run_scratch_bounds(void) {
    for (int pre = 0; pre < 2; pre++) {
        mega_block_config c;
        base_cfg(&c);
        c.embed_dim = 64, c.z_dim = 8, c.hidden_dim = 8, c.n_dim = 2, c.ffn_dim = 1024, c.chunk_size = 4;
        c.prenorm = pre, c.norm_type = MEGA_NORM_BATCH;
        const bt_opts o = {.B = 1, .T = 6, .seed = 90 + (uint64_t)pre};
        bt_ctx g;
        if (bt_open(&g, &c, &o)) return;
        bt_stream s;
        const mega_status st = bt_stream_start(&g, &s, 4, 1, NULL, g.T);
        const double e = bt_stream_err(&g, &s, 0, g.T);
        bt_note(&g_worst, e, "%s", g.name);
        TL_CHECK(st == MEGA_OK && bt_stream_guards_ok(&s) && e < BT_STOL,
                 "%s: step stays inside mega_block_step_scratch and matches the forward (%.2e)", g.name, e);
        bt_stream_close(&s);
        bt_close(&g);
    }
}

/* one configuration through the shared streaming driver, with the tightest cache: one chunk when
 * chunked */
static void stream_one(const mega_block_config *c, uint64_t seed) {
    const bt_opts o = {.B = 2, .T = 13, .seed = seed, .prefix = "decoder.layers.0."};
    bt_ctx g;
    if (bt_open(&g, c, &o)) return;
    const bt_stream_opts so = {.cap = c->chunk_size > 0 ? c->chunk_size : 0, .worst = &g_worst};
    bt_stream_check(&g, &so);
    bt_close(&g);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    enum { S_ = MEGA_ATTN_SOFTMAX, R_ = MEGA_ATTN_RELU2, L_ = MEGA_ATTN_LAPLACE };
    enum { LN = MEGA_NORM_LAYER, SN = MEGA_NORM_SCALE, RN = MEGA_NORM_RMS, BN = MEGA_NORM_BATCH };
    enum { SILU = MEGA_ACT_SILU, GELU = MEGA_ACT_GELU, RELU = MEGA_ACT_RELU };
    /* fn, rotary, prenorm, norm, act, chunk, F */
    static const int cfgs[][7] = {
        {S_, 0, 1, LN, SILU, 4, 12},  {R_, 1, 0, SN, GELU, 4, 0},   {L_, 0, 1, RN, SILU, -1, 12},
        {S_, 1, 0, BN, SILU, -1, 12}, {R_, 0, 1, BN, SILU, 4, 12},  {L_, 1, 0, LN, RELU, 5, 0},
        {S_, 0, 0, RN, GELU, 13, 12}, {R_, 1, 1, RN, SILU, -1, 0},  {L_, 0, 0, BN, GELU, 4, 12},
        {S_, 1, 1, SN, RELU, 5, 12},  {L_, 1, 1, BN, SILU, 4, 0},   {R_, 0, 0, LN, SILU, 20, 12},
        {S_, 0, 1, LN, SILU, 1, 12},
    };
    for (int i = 0; i < (int)(sizeof cfgs / sizeof cfgs[0]); i++) {
        mega_block_config c;
        base_cfg(&c);
        c.attention_activation = (mega_attn_fn)cfgs[i][0], c.rel_pos_bias = cfgs[i][1] ? MEGA_RELPOS_ROTARY : MEGA_RELPOS_SIMPLE;
        c.prenorm = cfgs[i][2], c.norm_type = (mega_norm_type)cfgs[i][3], c.activation = (mega_act)cfgs[i][4];
        c.chunk_size = cfgs[i][5], c.ffn_dim = cfgs[i][6];
        stream_one(&c, 100 + (uint64_t)i);
    }
    /* widths that are not a multiple of the EMA's channel block (MEGA_EMA_DB: 16 or 8 floats, 8
     * or 4 doubles); N = 5 is a group of the EMA kernel plus a remainder */
    for (int k = 0; k < 2; k++) {
        mega_block_config c;
        base_cfg(&c);
        c.embed_dim = k ? 36 : 20, c.n_dim = 5, c.chunk_size = k ? -1 : 4;
        c.attention_activation = k ? MEGA_ATTN_RELU2 : MEGA_ATTN_SOFTMAX;
        c.rel_pos_bias = k ? MEGA_RELPOS_ROTARY : MEGA_RELPOS_SIMPLE, c.prenorm = !k;
        c.norm_type = k ? MEGA_NORM_RMS : MEGA_NORM_LAYER;
        stream_one(&c, 300 + (uint64_t)k);
    }
    for (int k = 0; k < 2; k++) run_truncation(k); /* chunked and full attention */
    run_capacity();
    run_errors();
    run_scratch_bounds();
    printf("NOTE %s: worst streaming rel err %.2e (tolerance %.0e; %s)\n",
#ifdef MEGA_F64
           "t64_stream",
#else
           "test_stream",
#endif
           g_worst.v, BT_STOL, g_worst.where);
    return tl_finish();
}
