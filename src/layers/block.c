/* The block = token-mixer sublayer + normalized FFN (official MegaDecoderLayer without
 * cross-attention, MegaEncoderLayer / MegaSentenceEncoderLayer; see block.h). */
#include "layers/block.h"
#include "ops/ops.h"

enum { SITE_SUBLAYER = 11 }; /* dropout site of the standard sublayer's output */

static int self_residual(const mega_block *bl) { return (bl->ops->flags & MEGA_MIXER_SELF_RESIDUAL) != 0; }
/* the block's own normalized FFN (not when the mixer brings its own, MEGA_MIXER_OWN_FFN) */
static int has_ffn(const mega_block *bl) { return bl->cfg->ffn_dim > 0 && !(bl->ops->flags & MEGA_MIXER_OWN_FFN); }

mega_status mega_block_declare(mega_block *bl, mega_params *P, const char *prefix, const mega_block_config *cfg) {
    memset(bl, 0, sizeof *bl);
    MEGA_TRY(mega_block_config_check(cfg));
    bl->cfg = cfg;
    bl->ops = mega_mixer_ops_of(cfg->mixer);
    if (!self_residual(bl)) {
        char pre[MEGA_NAME_MAX];
        snprintf(pre, sizeof pre, "%smixer_norm.norm.", prefix);
        MEGA_TRY(mega_seqnorm_declare(&bl->mnorm, P, pre, cfg->norm_type, cfg->embed_dim, cfg->norm_affine));
    }
    MEGA_TRY(bl->ops->declare(bl->mixer, cfg, P, prefix));
    if (has_ffn(bl)) MEGA_TRY(mega_nffn_declare(&bl->ffn, P, prefix, cfg));
    return MEGA_OK;
}

void mega_block_init(const mega_block *bl, real *W, mega_rng *rng) {
    if (!self_residual(bl)) mega_seqnorm_init(&bl->mnorm, W);
    bl->ops->init(bl->mixer, W, rng);
    if (has_ffn(bl)) mega_nffn_init(&bl->ffn, W, rng);
}

/* reals of one [B, T, D] tensor, rounded as the bump allocator rounds */
static size_t rd(const mega_block *bl, int B, int T) { return (((size_t)B * T * bl->cfg->embed_dim) + 15) & ~(size_t)15; }

size_t mega_block_acts_size(const mega_block *bl, int B, int T) {
    mega_block_acts A;
    return mega_block_acts_point(bl, &A, NULL, B, T);
}

/* lay out: mixer | wrapper (mn, mstat) | y1 | ffn, the last two in `tail` instead when split;
 * returns the reals used in base (*tail_used: in tail) */
static size_t layout(const mega_block *bl, mega_block_acts *A, real *base, real *tail, int split, int B, int T,
                     size_t *tail_used) {
    memset(A, 0, sizeof *A);
    mega_bump b = {base, 0}, t = {tail, 0};
    A->mixer = mega_bump_take(&b, bl->ops->acts_size(bl->mixer, B, T));
    if (!self_residual(bl)) {
        A->mn = mega_bump_take(&b, (size_t)B * T * bl->cfg->embed_dim);
        A->mstat = mega_bump_take(&b, mega_seqnorm_stat_size(&bl->mnorm, (size_t)B * T));
    }
    if (has_ffn(bl)) {
        mega_bump *f = split ? &t : &b;
        A->y1 = mega_bump_take(f, (size_t)B * T * bl->cfg->embed_dim);
        f->off += mega_nffn_acts_point(&bl->ffn, &A->ffn, f->base ? f->base + f->off : NULL, B, T);
        A->y1_in_scratch = split;
    }
    if (tail_used) *tail_used = t.off;
    return b.off;
}

size_t mega_block_acts_point(const mega_block *bl, mega_block_acts *A, real *base, int B, int T) {
    return layout(bl, A, base, NULL, 0, B, T, NULL);
}

/* where the split layout's tail starts in the scratch: past dy1 and the FFN's scratch, which
 * mega_nffn_forward (from the scratch's start) and the FFN's backward (from rd) use */
static size_t tail_start(const mega_block *bl, int B, int T) {
    return rd(bl, B, T) + ((mega_nffn_scratch(&bl->ffn, B, T) + 15) & ~(size_t)15);
}

size_t mega_block_acts_point_split(const mega_block *bl, mega_block_acts *A, real *base, real *scratch, int B, int T) {
    return layout(bl, A, base, scratch && has_ffn(bl) ? scratch + tail_start(bl, B, T) : NULL, 1, B, T, NULL);
}

size_t mega_block_scratch_size(const mega_block *bl, int B, int T, int nthreads) {
    size_t s = bl->ops->scratch_size(bl->mixer, B, T, nthreads);
    if (!self_residual(bl)) s += 2 * rd(bl, B, T); /* wrapper: core output / gradients */
    if (has_ffn(bl)) /* backward keeps dy1 (R x D) in front of the layers' scratch */
        s = rd(bl, B, T) + MEGA_MAX(s, mega_nffn_scratch(&bl->ffn, B, T));
    return s;
}

size_t mega_block_scratch_size_split(const mega_block *bl, int B, int T, int nthreads) {
    const size_t s = mega_block_scratch_size(bl, B, T, nthreads);
    if (!has_ffn(bl)) return s;
    mega_block_acts A;
    size_t tail;
    layout(bl, &A, NULL, NULL, 1, B, T, &tail);
    return MEGA_MAX(s, tail_start(bl, B, T) + tail);
}

/* the mixer sublayer: Mega directly, any other mixer inside the standard residual wrapper */
static mega_status sublayer_forward(const mega_block *bl, real *W, mega_block_acts *A, real *y, const real *x,
                                    const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    if (self_residual(bl)) return bl->ops->forward(bl->mixer, W, A->mixer, y, x, pad, B, T, run, scratch);
    const mega_block_config *c = bl->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim;
    const int train = run->training;
    real *core = scratch, *rest = scratch + rd(bl, B, T);
    const real *xin = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&bl->mnorm, W, A->mn, A->mstat, x, R, train, run->update_stats, run->sync);
        xin = A->mn;
    }
    MEGA_TRY(bl->ops->forward(bl->mixer, W, A->mixer, core, xin, pad, B, T, run, rest));
    if (train) mega_dropout(core, core, R * D, c->dropout, mega__subkey(run->key, SITE_SUBLAYER));
    real *sum = c->prenorm ? y : A->mn;
    for (size_t i = 0; i < R * D; i++) sum[i] = x[i] + core[i];
    if (!c->prenorm) mega_seqnorm_forward(&bl->mnorm, W, y, A->mstat, A->mn, R, train, run->update_stats, run->sync);
    return MEGA_OK;
}

static void sublayer_backward(const mega_block *bl, const real *W, real *dW, const mega_block_acts *A, real *dx,
                              const real *dy, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                              real *scratch) {
    if (self_residual(bl)) {
        bl->ops->backward(bl->mixer, W, dW, A->mixer, dx, dy, x, pad, B, T, run, scratch);
        return;
    }
    const mega_block_config *c = bl->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim;
    real *g = scratch, *dxin = scratch + rd(bl, B, T), *rest = scratch + 2 * rd(bl, B, T);
    if (!c->prenorm)
        mega_seqnorm_backward(&bl->mnorm, W, dW, g, dy, A->mn, A->mstat, R, run->training, 0, run->sync);
    else
        memcpy(g, dy, R * D * sizeof(real));
    memcpy(dx, g, R * D * sizeof(real)); /* residual */
    if (run->training) mega_dropout(g, g, R * D, c->dropout, mega__subkey(run->key, SITE_SUBLAYER));
    const real *xin = c->prenorm ? A->mn : x;
    bl->ops->backward(bl->mixer, W, dW, A->mixer, dxin, g, xin, pad, B, T, run, rest);
    if (c->prenorm)
        mega_seqnorm_backward(&bl->mnorm, W, dW, dx, dxin, x, A->mstat, R, run->training, 1, run->sync);
    else
        for (size_t i = 0; i < R * D; i++) dx[i] += dxin[i];
}

mega_status mega_block_forward(const mega_block *bl, real *W, mega_block_acts *A, real *out, const real *x,
                               const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    if (!has_ffn(bl)) return sublayer_forward(bl, W, A, out, x, pad, B, T, run, scratch);
    if (A->y1_in_scratch) {
        /* y1 in the scratch's tail, which the sublayer's forward uses: its output goes to out
         * first (the FFN then reads its copy and overwrites out) */
        MEGA_TRY(sublayer_forward(bl, W, A, out, x, pad, B, T, run, scratch));
        memcpy(A->y1, out, (size_t)B * T * bl->cfg->embed_dim * sizeof(real));
    } else {
        MEGA_TRY(sublayer_forward(bl, W, A, A->y1, x, pad, B, T, run, scratch));
    }
    mega_nffn_forward(&bl->ffn, W, &A->ffn, out, A->y1, (size_t)B * T, run, scratch);
    return MEGA_OK;
}

void mega_block_backward(const mega_block *bl, const real *W, real *dW, const mega_block_acts *A, real *dx,
                         const real *dout, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                         real *scratch) {
    if (!has_ffn(bl)) {
        sublayer_backward(bl, W, dW, A, dx, dout, x, pad, B, T, run, scratch);
        return;
    }
    /* dy1 (gradient at the FFN input) lives at the front of the scratch: the sublayer backward
     * writes dx before it has finished reading its upstream gradient, so dx cannot hold it */
    real *dy1 = scratch, *rest = scratch + rd(bl, B, T);
    mega_nffn_backward(&bl->ffn, W, dW, &A->ffn, dy1, dout, A->y1, (size_t)B * T, run, rest);
    sublayer_backward(bl, W, dW, A, dx, dy1, x, pad, B, T, run, rest);
}

/* ---- streaming -------------------------------------------------------------------------- */

size_t mega_block_state_size(const mega_block *bl, int B, int cap) {
    return bl->ops->state_size ? bl->ops->state_size(bl->mixer, B, cap) : 0;
}

mega_status mega_block_state_init(const mega_block *bl, const real *W, mega_block_state *S, real *mem, int B, int cap) {
    if (bl->cfg->bidirectional || !bl->ops->state_init)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s blocks have no streaming state", bl->cfg->bidirectional ? "bidirectional" : bl->ops->name);
    if (B < 1 || cap < 1) MEGA_FAIL(MEGA_ERR_INVALID, "streaming batch and cache capacity must be positive (got %d, %d)", B, cap);
    memset(S, 0, sizeof *S);
    S->B = B, S->cap = cap, S->mem = mem;
    return bl->ops->state_init(bl->mixer, W, S);
}

void mega_block_state_reset(const mega_block *bl, mega_block_state *S) { bl->ops->state_reset(bl->mixer, S); }

mega_status mega_block_state_reorder(const mega_block *bl, mega_block_state *S, const int *idx, real *tmp) {
    if (!bl->ops->state_reorder)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "beam search is not available with the %s mixer (use beam 1, greedy)", bl->ops->name);
    bl->ops->state_reorder(bl->mixer, S, idx, tmp);
    return MEGA_OK;
}

size_t mega_block_step_scratch(const mega_block *bl, int B, int T, int cap) {
    const size_t RD = rd(bl, B, T), R = (size_t)B * T;
    size_t s = bl->ops->step_scratch ? bl->ops->step_scratch(bl->mixer, B, T, cap) : 0;
    if (!self_residual(bl)) s += 2 * RD + mega_seqnorm_stat_size(&bl->mnorm, R) + 16;
    if (has_ffn(bl)) s = MEGA_MAX(s, mega_nffn_step_scratch(&bl->ffn, R));
    return s;
}

mega_status mega_block_step(const mega_block *bl, const real *W, mega_block_state *S, real *out, const real *x,
                            int T, real *scratch) {
    const size_t R = (size_t)S->B * T, D = (size_t)bl->cfg->embed_dim;
    if (self_residual(bl)) {
        MEGA_TRY(bl->ops->step(bl->mixer, W, S, out, x, T, scratch));
    } else {
        /* eval-mode wrapper: y = x + core(norm(x)) (prenorm) or norm(x + core(x)) */
        real *xn = scratch, *core = scratch + rd(bl, S->B, T), *st = core + rd(bl, S->B, T);
        real *rest = st + mega_seqnorm_stat_size(&bl->mnorm, R) + 16;
        const real *xin = x;
        if (bl->cfg->prenorm) {
            mega_seqnorm_forward(&bl->mnorm, (real *)W, xn, st, x, R, 0, 0, NULL);
            xin = xn;
        }
        MEGA_TRY(bl->ops->step(bl->mixer, W, S, core, xin, T, rest));
        for (size_t i = 0; i < R * D; i++) out[i] = x[i] + core[i];
        if (!bl->cfg->prenorm) mega_seqnorm_forward(&bl->mnorm, (real *)W, out, st, out, R, 0, 0, NULL);
    }
    if (has_ffn(bl)) mega_nffn_step(&bl->ffn, W, out, out, R, scratch);
    return MEGA_OK;
}
