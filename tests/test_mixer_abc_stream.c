/*
 * Streaming step of the causal ABC mixers (Peng et al., arXiv 2110.02488; bounded streaming
 * state: docs/mixers.md ABC "Cost per token and streaming state") against the eval-mode full
 * causal forward of the same block (mega_run training = 0, no pads), through the shared driver
 * bt_stream_check (tests/lib/blocktest.h): token by token; the standard multi-token splits
 * (among them pieces that straddle the wrap-around of the window's ring buffer and the point
 * where its empty slots fill up: n + 1 then 3, and the whole sequence at once); reset then
 * re-stream bit-identical; the step inside mega_block_step_scratch and the state memory (guard
 * zones).
 * Mixers: abc-window (masked and literal empty slots, n < T, n = 1, n > T), abc-linformer
 * (max-len = T and > T), abc-mlp (n = 1, several n), heads 1/2/4, pre/post norm, layernorm /
 * rmsnorm / scalenorm, with and without the FFN, B = 2, T = 37.
 * Also: the state size does not depend on the capacity (bounded memory: 2 n D (+ 2 H n));
 * Linformer refuses to stream past max-len (MEGA_ERR_INVALID) without touching the state, and
 * the remaining positions still match.
 * Tolerance (BT_STOL): 1e-5 of max |out| (float build), 1e-12 (double build,
 * build/t64_mixer_abc_stream, the same source).
 */
#include "blocktest.h"
#include "ops/abc.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bt_worst g_worst;

enum { WIN = MEGA_MIXER_ABC_WINDOW, LIN = MEGA_MIXER_ABC_LINFORMER, MLP = MEGA_MIXER_ABC_MLP };

typedef struct {
    int kind, H, n, pre, norm, F, mask, nmax_extra;
} scfg;

/* bounded memory: the state size does not depend on the capacity */
static void state_size(bt_ctx *c) {
    const mega_block_config *k = &c->cfg;
    const int B = c->B;
    const size_t ssz = mega_block_state_size(&c->bl, B, c->T);
    const size_t want = 2 * (size_t)B * k->memory_size * k->embed_dim +
                        (k->mixer == MEGA_MIXER_ABC_MLP ? 2 * (size_t)B * k->heads * k->memory_size : 0);
    TL_CHECK(ssz == mega_block_state_size(&c->bl, B, 1) && ssz == mega_block_state_size(&c->bl, B, 100000) && ssz >= want &&
                 ssz <= want + 64,
             "%s: state size %zu reals, independent of the capacity (2 n D B (+ 2 H n B) = %zu)", c->name, ssz, want);
}

/* max-len = T: a call past it is refused and changes nothing; the last positions still match */
static void linformer_limit(bt_ctx *c) {
    const int T = c->T;
    bt_stream s;
    mega_status st = bt_stream_start(c, &s, T, 3, NULL, T - 2); /* the first T-2 positions */
    const mega_status st3 = st == MEGA_OK ? mega_block_step(&c->bl, c->P.data, &s.S, s.ot, c->x, 3, s.scr) : st;
    TL_CHECK(st == MEGA_OK && st3 == MEGA_ERR_INVALID && strstr(mega_last_error(), "max-len") && s.S.pos == T - 2,
             "%s: a step past max-len fails with MEGA_ERR_INVALID and leaves the position (%s)", c->name, mega_last_error());
    if (st == MEGA_OK) st = bt_stream_feed(c, &s, NULL, s.out, T - 2, T); /* the last two still fit and match */
    const double el = bt_stream_err(c, &s, T - 2, T);
    TL_CHECK(st == MEGA_OK && el < BT_STOL, "%s: after the refusal the last positions still match (%.2e)", c->name, el);
    st = st == MEGA_OK ? mega_block_step(&c->bl, c->P.data, &s.S, s.ot, c->x, 1, s.scr) : st;
    TL_CHECK(st == MEGA_ERR_INVALID, "%s: position max-len refused", c->name);
    bt_stream_close(&s);
}

static void run_config(const scfg *k, uint64_t seed) {
    const int T = 37;
    mega_block_config cfg;
    mega_block_config_default(&cfg);
    cfg.mixer = (mega_mixer_kind)k->kind, cfg.embed_dim = 8, cfg.ffn_dim = k->F, cfg.chunk_size = -1;
    cfg.prenorm = k->pre, cfg.norm_type = (mega_norm_type)k->norm;
    cfg.heads = k->H, cfg.memory_size = k->n, cfg.max_len = T + k->nmax_extra;
    const bt_opts o = {.B = 2, .T = T, .seed = seed, .prefix = "layers.0.", .tag = k->kind == WIN && !k->mask ? " literal" : "",
                       .setup = mega_abc_set_mask_empty, .setup_arg = k->mask};
    bt_ctx c;
    if (bt_open(&c, &cfg, &o)) return;
    state_size(&c);
    const bt_stream_opts so = {.worst = &g_worst};
    bt_stream_check(&c, &so);
    if (k->kind == LIN && k->nmax_extra == 0) linformer_limit(&c);
    bt_close(&c);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-v")) tl_verbose = 1;
    enum { LN = MEGA_NORM_LAYER, SN = MEGA_NORM_SCALE, RN = MEGA_NORM_RMS };
    static const scfg cfgs[] = {
        /* kind H n pre norm F mask nmax_extra */
        {WIN, 2, 5, 1, LN, 12, 1, 0}, {WIN, 1, 5, 0, RN, 0, 0, 0},  {WIN, 4, 1, 1, SN, 12, 1, 0},
        {WIN, 2, 50, 0, LN, 12, 0, 0}, {WIN, 2, 50, 1, LN, 0, 1, 0}, {LIN, 2, 4, 1, LN, 12, 1, 0},
        {LIN, 1, 3, 0, RN, 0, 1, 9},  {LIN, 4, 8, 1, SN, 12, 1, 3},  {MLP, 2, 4, 1, LN, 12, 1, 0},
        {MLP, 1, 1, 0, SN, 0, 1, 0},  {MLP, 4, 6, 0, RN, 12, 1, 0},  {MLP, 2, 3, 1, RN, 0, 1, 0},
    };
    const int ncfg = (int)(sizeof cfgs / sizeof cfgs[0]);
    for (int i = 0; i < ncfg; i++) run_config(&cfgs[i], 4100 + (uint64_t)i);
    printf("NOTE abc streaming: %d configurations, worst rel err %.2e (tolerance %.0e; %s)\n", ncfg, g_worst.v, BT_STOL,
           g_worst.where);
    return tl_finish();
}
