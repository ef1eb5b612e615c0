/*
 * Streaming (incremental) decoding of the attention mixers mha, local and mhatw (a KV cache as
 * fairseq MultiheadAttention's incremental_state; a ring buffer for windows, a project choice;
 * docs/mixers.md "Softmax-attention mixers", "MHATW") against the eval-mode full causal forward
 * of the same block (mixer norm -> mixer -> residual -> NFFN) over the whole sequence (B = 2,
 * T = 70, so the forward runs more than one 64-row block), through the shared driver
 * bt_stream_check (tests/lib/blocktest.h): token by token, the standard multi-token splits
 * (including the whole sequence at once), reset then re-streaming bit-identical, the step inside
 * its state and scratch sizes (guard zones).
 * Configurations: mha with every causal positional scheme (none, rope, alibi, kerple-power,
 * kerple-log, sandwich, xpos), mha with a local mask (attn_window: the ring-buffer cache of
 * `window` slots, shorter than the stream) and with log-n scaling, local (window 5) with rope /
 * alibi / xpos, mhatw with max_len = T and max_len < T (distances, positions and gamma past the
 * learned range use the clamped values in both paths), pre/post norm, with and without the FFN.
 * Also: a bidirectional attention block refuses a streaming state; a full cache of capacity
 * cap fails cleanly (MEGA_ERR_INVALID, state unchanged) when a call would pass it; a windowed
 * mixer streams far past the capacity it was given (ring buffer: its state size does not
 * depend on the capacity).
 * XPOS at long lengths: mha + xpos + attn_window 16 over 100k positions, streamed in pieces,
 * equals the full forward and is finite, although the un-centred XPOS key factor overflows
 * float there (checked: zeta_0^(-1e5/512) is +inf in float; XPOS, arXiv 2212.10554, re-centred
 * per query block: a project extension).
 * Tolerance (BT_STOL): 1e-5 of max |out| (float build); 1e-12 in the double build
 * (build/t64_mixer_attn_stream, the same source).
 */
#include "blocktest.h"
#include "ops/posenc.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bt_worst g_worst;

enum { MHA = MEGA_MIXER_MHA, LOC = MEGA_MIXER_LOCAL, TW = MEGA_MIXER_MHATW };

/* mixer, pos, window (local) / attn_window (others), log-n train_len, mhatw max_len, pre, F, heads */
typedef struct {
    int mixer, pos, win, logn, Tm, pre, F, H;
} scfg;

static void fill_cfg(mega_block_config *c, const scfg *g) {
    mega_block_config_default(c);
    c->mixer = (mega_mixer_kind)g->mixer;
    c->embed_dim = 8, c->ffn_dim = g->F, c->chunk_size = -1;
    c->prenorm = g->pre, c->norm_type = g->pre ? MEGA_NORM_LAYER : MEGA_NORM_RMS;
    c->heads = g->H, c->pos = (mega_pos_kind)g->pos;
    if (g->mixer == LOC) c->window = g->win;
    else c->attn_window = g->win;
    c->log_n_scaling = g->logn > 0, c->train_len = g->logn, c->max_len = g->Tm;
}

static int open_cfg(bt_ctx *c, const scfg *g, int B, int T, uint64_t seed) {
    mega_block_config cfg;
    fill_cfg(&cfg, g);
    if (g->mixer == TW && g->Tm == 0) cfg.max_len = T;
    const bt_opts o = {.B = B, .T = T, .seed = seed, .prefix = "decoder.layers.0."};
    return bt_open(c, &cfg, &o);
}

static void run_config(const scfg *g, uint64_t seed) {
    bt_ctx c;
    if (open_cfg(&c, g, 2, 70, seed)) return;
    const bt_stream_opts so = {.worst = &g_worst}; /* capacity T (a windowed mixer keeps only its window) */
    bt_stream_check(&c, &so);
    bt_close(&c);
}

/* a full cache of 5: 4 tokens, then a 2-token call is refused with the state unchanged */
static void run_capacity(void) {
    const scfg g = {TW, MEGA_POS_ALIBI, 0, 0, 9, 1, 16, 2};
    bt_ctx c;
    if (open_cfg(&c, &g, 2, 9, 72)) return;
    bt_stream s;
    mega_status st = bt_stream_start(&c, &s, 5, 2, NULL, 4);
    const mega_status st2 = st == MEGA_OK ? bt_stream_feed(&c, &s, &(bt_split){{2}, 0}, s.out, 4, 6) : st;
    TL_CHECK(st == MEGA_OK && st2 == MEGA_ERR_INVALID && s.S.pos == 4,
             "capacity: a 2-token call at 4 of 5 fails with MEGA_ERR_INVALID, state unchanged (got %d, pos %lld) (%s)", (int)st2,
             (long long)s.S.pos, mega_last_error());
    if (st == MEGA_OK) st = bt_stream_feed(&c, &s, NULL, s.out, 4, 5);
    const double e = bt_stream_err(&c, &s, 0, 5);
    TL_CHECK(st == MEGA_OK && e < BT_STOL, "capacity: 5 tokens into a cache of 5 match the full forward (%.2e)", e);
    bt_stream_close(&s);
    bt_close(&c);
}

/* a windowed mixer streams far past its capacity argument: a ring buffer of `window` slots */
static void run_ring(void) {
    const scfg g = {LOC, MEGA_POS_XPOS, 5, 3, 0, 1, 16, 2};
    const int T = 70, cap = 3;
    bt_ctx c;
    if (open_cfg(&c, &g, 2, T, 73)) return;
    bt_stream s;
    const mega_status st = bt_stream_start(&c, &s, cap, 4, &(bt_split){{0}, 4}, T);
    const double e = bt_stream_err(&c, &s, 0, T);
    const size_t nbig = mega_block_state_size(&c.bl, c.B, 100000);
    bt_note(&g_worst, e, "%s", c.name);
    TL_CHECK(st == MEGA_OK && e < BT_STOL && s.nmem == nbig && bt_stream_guards_ok(&s),
             "local window 5 with capacity 3: streams %d tokens == full forward: rel err %.2e; state size %zu independent of "
             "the capacity (%zu)", T, e, s.nmem, nbig);
    bt_stream_close(&s);
    bt_close(&c);
}

/* XPOS at 100k positions in pieces of 1000 (window 16) */
static void run_xpos_long(void) {
    const double z0 = mega_xpos_zeta(0, 4);
    TL_CHECK(isinf((float)pow(z0, -100000.0 / MEGA_XPOS_BASE)),
             "the un-centred XPOS key factor zeta_0^(-1e5/512) overflows float (%.3g): re-centring is needed",
             pow(z0, -100000.0 / MEGA_XPOS_BASE));
    const scfg g = {MHA, MEGA_POS_XPOS, 16, 0, 0, 1, 0, 2};
    const int T = 100000;
    bt_ctx c;
    if (open_cfg(&c, &g, 1, T, 74)) return;
    bt_stream s;
    const mega_status st = bt_stream_start(&c, &s, T, 1000, &(bt_split){{0}, 1000}, T);
    int finite = 1;
    for (size_t i = 0; i < c.RD; i++) finite &= isfinite((double)s.full[i]) && isfinite((double)s.out[i]);
    const double e = bt_stream_err(&c, &s, 0, T);
    bt_note(&g_worst, e, "%s", c.name);
    TL_CHECK(st == MEGA_OK && finite && e < BT_STOL,
             "XPOS + attn-window 16 over %d positions: forward and stream finite, stream == forward: rel err %.2e", T, e);
    bt_stream_close(&s);
    bt_close(&c);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    enum { PN = MEGA_POS_NONE, PR = MEGA_POS_ROPE, PA = MEGA_POS_ALIBI, PKP = MEGA_POS_KERPLE_POWER,
           PKL = MEGA_POS_KERPLE_LOG, PS = MEGA_POS_SANDWICH, PX = MEGA_POS_XPOS };
    /* mixer pos win logn Tm pre F H */
    static const scfg CF[] = {
        {MHA, PN, 0, 0, 0, 1, 16, 2},  {MHA, PR, 0, 0, 0, 0, 16, 2}, {MHA, PA, 0, 0, 0, 1, 0, 4},
        {MHA, PKP, 0, 0, 0, 1, 16, 2}, {MHA, PKL, 0, 0, 0, 0, 16, 2}, {MHA, PS, 0, 0, 0, 1, 16, 2},
        {MHA, PX, 0, 0, 0, 1, 16, 2},  {MHA, PR, 6, 0, 0, 1, 16, 2}, {MHA, PX, 9, 20, 0, 0, 16, 2},
        {MHA, PA, 0, 10, 0, 1, 16, 2}, {LOC, PR, 5, 0, 0, 1, 16, 2}, {LOC, PA, 5, 4, 0, 0, 0, 2},
        {LOC, PX, 5, 0, 0, 1, 16, 2},  {TW, PN, 0, 0, 0, 1, 16, 2},  {TW, PN, 0, 0, 25, 0, 16, 2},
        {TW, PR, 0, 30, 40, 1, 16, 2}, {TW, PKL, 8, 0, 12, 1, 16, 2}, {TW, PX, 0, 0, 33, 1, 0, 4},
    };
    for (size_t i = 0; i < sizeof CF / sizeof CF[0]; i++) run_config(&CF[i], 500 + i);
    /* a bidirectional attention block has no streaming state */
    const scfg gb = {MHA, PR, 0, 0, 0, 1, 16, 2};
    mega_block_config cb;
    fill_cfg(&cb, &gb);
    cb.bidirectional = 1;
    const bt_opts ob = {.T = 9, .seed = 71};
    bt_ctx c;
    if (!bt_open(&c, &cb, &ob)) {
        bt_stream s;
        const mega_status st = bt_stream_start(&c, &s, 9, 1, NULL, 0);
        TL_CHECK(st == MEGA_ERR_UNSUPPORTED, "bidirectional mha: state init refused (got %d)", (int)st);
        bt_stream_close(&s);
        bt_close(&c);
    }
    run_capacity();
    run_ring();
    run_xpos_long();
    printf("NOTE worst streaming rel err %.2e (%s)\n", g_worst.v, g_worst.where);
    return tl_finish();
}
