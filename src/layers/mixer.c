/* The registry of token mixers (mixer.h), generated from MEGA_MIXER_LIST (mega.h). */
#include "layers/mixer.h"

#define OPS_(ID, id, name, help) &mega_mixer_ops_##id,
static const mega_mixer_ops *const OPS[MEGA_MIXER_COUNT] = {MEGA_MIXER_LIST(OPS_)};

const mega_mixer_ops *mega_mixer_ops_of(mega_mixer_kind k) { return (unsigned)k < MEGA_MIXER_COUNT ? OPS[k] : NULL; }
int mega_mixer_available(mega_mixer_kind k) { return mega_mixer_ops_of(k) != NULL; }

void mega__context_default(const mega_mixer_ops *ops, const mega_block_config *c, int T, mega_block_context *x) {
    memset(x, 0, sizeof *x);
    x->segment = T, x->cache = T;
    x->eval_len = c->max_len > 0 ? c->max_len : 2048;
    x->cross_attention = ops && (ops->flags & MEGA_MIXER_GATED_XATTN) ? "gated" : "multi-head";
}

void mega_block_context_of(const mega_block_config *c, int T, mega_block_context *x) {
    const mega_mixer_ops *ops = mega_mixer_ops_of(c->mixer);
    if (ops && ops->context) ops->context(c, T, x);
    else mega__context_default(ops, c, T, x);
}

void mega__rows_gather(real *a, size_t per, int B, const int *idx, real *tmp) {
    /* only the rows that change: their sources saved first (a source may itself be overwritten),
     * then written; a row that keeps its place is not copied at all (a stream's row that leaves,
     * model/lm.c, moves one row of B) */
    for (int b = 0; b < B; b++)
        if (idx[b] != b) memcpy(tmp + (size_t)idx[b] * per, a + (size_t)idx[b] * per, per * sizeof(real));
    for (int b = 0; b < B; b++)
        if (idx[b] != b) memcpy(a + (size_t)b * per, tmp + (size_t)idx[b] * per, per * sizeof(real));
}

mega_status mega_qkvo_declare(mega_qkvo *p, mega_params *P, const char *prefix, const char *sub, int D) {
    static const char *const lin[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%s%s", prefix, sub);
    for (int i = 0; i < 4; i++) {
        char nw[64], nb[64];
        snprintf(nw, sizeof nw, "%s.weight", lin[i]);
        snprintf(nb, sizeof nb, "%s.bias", lin[i]);
        MEGA_TRY(MEGA_PADD(P, pre, nw, MEGA_P_DECAY, &p->w[i], D, D));
        MEGA_TRY(MEGA_PADD(P, pre, nb, 0, &p->b[i], D));
    }
    return MEGA_OK;
}

void mega_qkvo_init(const mega_qkvo *p, real *W, int D, mega_rng *rng) {
    for (int i = 0; i < 4; i++) {
        mega_fill_xavier(W + p->w[i], (size_t)D, (size_t)D, i < MEGA_O ? sqrt(0.5) : 1.0, rng);
        mega_fill_const(W + p->b[i], (size_t)D, 0);
    }
}
