/*
 * What each mixer tells its callers (mega_block_context_of, the mixer ops' context) and the options
 * it declares (the field table's "applies to these mixers" masks are built from them):
 *   - per mixer, a causal language model of that mixer: the cache capacity for a T-token stream,
 *     whether the cache keeps the whole stream, whether evaluation carries the state, the
 *     evaluation length, the relative table's length and the cross-attention's name, against a
 *     table written by hand;
 *   - the flags tell the truth: a stream of the cache capacity it asks for takes T tokens, and
 *     one more fails (feeding nothing) exactly when cache_full says the cache keeps the whole
 *     stream;
 *   - every declared option is a field of the table and applies to its mixer; a field no mixer
 *     declares applies to every mixer;
 *   - the window rule, one for local and aft-local: [1, 2^24] after the default (0 = 64).
 */
#include "testlib.h"
#include <string.h>

#define T 12

typedef struct {
    const char *mixer;
    int chunk;        /* Mega: chunk-size (-1 full attention); others: unused */
    int attn_window;  /* attention mixers: a local mask */
    int cache, cache_full, carry, eval_len, positions;
    const char *cross;
} want;

/* resolved max-len of the mixers with absolute positions: train-len 0 -> 1024 */
static const want WANT[] = {
    {"mega", 5, 0, 5, 0, 1, 5, 0, "gated"},
    {"mega", -1, 0, T, 1, 0, 2048, 16, "gated"},
    {"mha", 0, 0, T, 1, 0, 2048, 0, "multi-head"},
    {"mha", 0, 4, T, 0, 0, 2048, 0, "multi-head"},
    {"mhatw", 0, 0, T, 1, 0, 1024, 0, "multi-head"},
    {"local", 0, 0, T, 0, 0, 2048, 0, "multi-head"},
    {"aft-full", 0, 0, T, 1, 0, 1024, 0, "multi-head"},
    {"aft-local", 0, 0, T, 0, 0, 1024, 0, "multi-head"},
    {"aft-simple", 0, 0, T, 0, 0, 2048, 0, "multi-head"},
    {"aft-tw", 0, 0, T, 0, 0, 1024, 0, "multi-head"},
    {"gmlp", 0, 0, T, 1, 0, 1024, 0, "multi-head"},
    {"abc-window", 0, 0, T, 0, 0, 2048, 0, "multi-head"},
    {"abc-linformer", 0, 0, T, 0, 0, 1024, 0, "multi-head"},
    {"abc-mlp", 0, 0, T, 0, 0, 2048, 0, "multi-head"},
};

static void lm_cfg(mega_lm_config *c, const want *w) {
    mega_lm_config_default(c);
    c->vocab_size = 11, c->padding_idx = -1, c->layers = 2;
    mega_block_config *b = &c->block;
    mega_mixer_parse(w->mixer, &b->mixer);
    b->embed_dim = 8, b->z_dim = 4, b->hidden_dim = 8, b->n_dim = 2, b->ffn_dim = 8, b->max_positions = 16;
    b->chunk_size = w->chunk ? w->chunk : 128, b->attn_window = w->attn_window;
}

static void check_mixer(const want *w) {
    mega_lm_config c;
    lm_cfg(&c, w);
    char nm[64];
    snprintf(nm, sizeof nm, "%s chunk %d attn-window %d", w->mixer, w->chunk, w->attn_window);
    mega_lm *m = NULL;
    if (mega_lm_create(&c, &m) != MEGA_OK) {
        TL_CHECK(0, "%s: create: %s", nm, mega_last_error());
        return;
    }
    const mega_block_config *b = &mega_lm_get_config(m)->block;
    mega_block_context x;
    mega_block_context_of(b, T, &x);
    TL_CHECK(x.cache == w->cache && x.cache_full == w->cache_full && x.carry == w->carry,
             "%s: cache %d (want %d), full %d (%d), carry %d (%d)", nm, x.cache, w->cache, x.cache_full, w->cache_full,
             x.carry, w->carry);
    TL_CHECK(x.eval_len == w->eval_len && x.positions == w->positions && !strcmp(x.cross_attention, w->cross),
             "%s: eval-len %d (want %d), positions %d (%d), cross-attention %s (%s)", nm, x.eval_len, w->eval_len,
             x.positions, w->positions, x.cross_attention, w->cross);
    const int seg = w->chunk > 0 && w->chunk < T && !strcmp(w->mixer, "mega") ? w->chunk : T;
    TL_CHECK(x.segment == seg, "%s: segment %d (want %d)", nm, x.segment, seg);
    /* the flags tell the truth: T tokens fit the cache asked for; one more fails iff cache_full */
    mega_lm_stream *s = NULL;
    if (mega_lm_stream_new(m, 2, x.cache, &s) != MEGA_OK) {
        TL_CHECK(0, "%s: stream_new(cap %d): %s", nm, x.cache, mega_last_error());
        mega_lm_free(m);
        return;
    }
    int32_t tok[2 * (T + 1)];
    for (int i = 0; i < 2 * (T + 1); i++) tok[i] = (i * 7 + 3) % c.vocab_size;
    int ok = 1;
    for (int t = 0; t < T && ok; t++) {
        const int32_t two[2] = {tok[t], tok[T + 1 + t]};
        ok = mega_lm_stream_feed(s, two, 1, NULL) == MEGA_OK;
    }
    TL_CHECK(ok, "%s: %d tokens stream through a cache of %d", nm, T, x.cache);
    const int32_t more[2] = {1, 2};
    const mega_status st = mega_lm_stream_feed(s, more, 1, NULL);
    TL_CHECK((st != MEGA_OK) == (x.cache_full != 0) && mega_lm_stream_pos(s) == (st ? T : T + 1),
             "%s: token %d %s (cache_full %d): %s", nm, T + 1, st ? "refused" : "taken", x.cache_full,
             st ? mega_last_error() : "");
    mega_lm_stream_free(s);
    mega_lm_free(m);
}

/* every declared option is a field of the table and applies to its mixer */
static void check_options(void) {
    int n;
    const mega_field *f = mega_block_config_fields(&n);
    int declared = 0;
    for (int i = 0; i < n; i++) {
        if (!f[i].mixers) continue;
        declared++;
        for (int k = 0; k < MEGA_MIXER_COUNT; k++)
            if ((f[i].mixers >> k) & 1u)
                TL_CHECK(mega_field_applies(&f[i], (mega_mixer_kind)k), "%s applies to %s", f[i].name,
                         mega_mixer_name((mega_mixer_kind)k));
    }
    TL_CHECK(declared == 20, "fields some mixer declares: %d (20: Mega's 10, heads, window, memory-size, max-len, pos, "
             "attn-window, log-n-scaling, Megalodon's norm-num-groups, swiglu, rescale-nffn)", declared);
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].name, "z-dim") || !strcmp(f[i].name, "heads") || !strcmp(f[i].name, "ffn-dim")) {
            const int mega = mega_field_applies(&f[i], MEGA_MIXER_MEGA), mha = mega_field_applies(&f[i], MEGA_MIXER_MHA);
            const int want_mega = strcmp(f[i].name, "heads") != 0, want_mha = strcmp(f[i].name, "z-dim") != 0;
            TL_CHECK(mega == want_mega && mha == want_mha, "%s: applies to mega %d, mha %d", f[i].name, mega, mha);
        }
}

/* the one window rule */
static void check_window(void) {
    static const mega_mixer_kind K[2] = {MEGA_MIXER_LOCAL, MEGA_MIXER_AFT_LOCAL};
    for (int i = 0; i < 2; i++) {
        mega_block_config c;
        mega_block_config_default(&c);
        c.mixer = K[i], c.embed_dim = 8, c.max_len = 8;
        c.window = 0;
        mega_block_config_resolve(&c);
        TL_CHECK(c.window == 64, "%s: window 0 resolves to 64 (%d)", mega_mixer_name(K[i]), c.window);
        c.window = 1 << 24;
        TL_CHECK(mega_block_config_check(&c) == MEGA_OK, "%s: window 2^24 accepted: %s", mega_mixer_name(K[i]),
                 mega_last_error());
        c.window = (1 << 24) + 1;
        TL_CHECK(mega_block_config_check(&c) != MEGA_OK && strstr(mega_last_error(), "window"),
                 "%s: window 2^24 + 1 refused: %s", mega_mixer_name(K[i]), mega_last_error());
        c.window = -1;
        TL_CHECK(mega_block_config_check(&c) != MEGA_OK, "%s: window -1 refused: %s", mega_mixer_name(K[i]),
                 mega_last_error());
    }
}

int main(void) {
    for (size_t i = 0; i < sizeof WANT / sizeof *WANT; i++) check_mixer(&WANT[i]);
    check_options();
    check_window();
    return tl_finish();
}
