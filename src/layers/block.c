/* The Mega block = gated-attention layer + normalized FFN (official MegaDecoderLayer without
 * cross-attention, MegaEncoderLayer / MegaSentenceEncoderLayer). */
#include "layers/block.h"

mega_status mega_block_cfg_check(const mega_block_cfg *c) {
    if (c->D < 1) MEGA_FAIL(MEGA_ERR_INVALID, "embed-dim must be positive (got %d)", c->D);
    /* z-dim and hidden-dim are Mega's widths (gMLP uses hidden-dim as its width) */
    if (c->mixer == MEGA_MIXER_MEGA && (c->Z < 1 || c->E < 1))
        MEGA_FAIL(MEGA_ERR_INVALID, "z-dim and hidden-dim must be positive (got %d, %d)", c->Z, c->E);
    if (c->mixer == MEGA_MIXER_GMLP && c->E < 2) MEGA_FAIL(MEGA_ERR_INVALID, "gmlp needs hidden-dim >= 2 (got %d)", c->E);
    if (c->D > 65536 || c->Z > 65536 || c->E > 262144 || c->F > 262144)
        MEGA_FAIL(MEGA_ERR_INVALID, "layer widths are absurdly large (embed %d, z %d, hidden %d, ffn %d)", c->D, c->Z, c->E, c->F);
    if ((unsigned)c->mixer >= MEGA_MIXER_COUNT) MEGA_FAIL(MEGA_ERR_INVALID, "unknown mixer");
    const mega_mixer_ops *ops = mega_mixer_ops_of(c->mixer);
    if (!ops) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "mixer '%s' is not available in this build", mega_mixer_name(c->mixer));
    if (c->bidir ? !ops->bidir : !ops->causal)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "mixer '%s' has no %s form", ops->name, c->bidir ? "bidirectional" : "causal");
    if (c->N < 0 || c->N > 64) MEGA_FAIL(MEGA_ERR_INVALID, "n-dim must be in [0, 64] (got %d; 0 = Mega without EMA)", c->N);
    if (c->F < 0) MEGA_FAIL(MEGA_ERR_INVALID, "ffn-dim must be >= 0 (0 = no FFN), got %d", c->F);
    if (c->chunk == 0 || c->chunk < -1) MEGA_FAIL(MEGA_ERR_INVALID, "chunk-size must be positive or -1 (full attention), got %d", c->chunk);
    if (c->chunk < 0 && c->max_positions < 1 && !c->rotary)
        MEGA_FAIL(MEGA_ERR_INVALID, "full attention with a simple bias needs max-positions >= 1");
    if (c->trunc < 0) MEGA_FAIL(MEGA_ERR_INVALID, "truncation must be >= 0 (0 = none), got %d", c->trunc);
    if (c->rotary && c->Z % 2) MEGA_FAIL(MEGA_ERR_INVALID, "rotary relative-position bias needs an even z-dim (got %d)", c->Z);
    const double p[4] = {c->dropout, c->attn_dropout, c->hidden_dropout, c->act_dropout};
    for (int i = 0; i < 4; i++)
        if (!(p[i] >= 0 && p[i] < 1)) MEGA_FAIL(MEGA_ERR_INVALID, "dropout probabilities must be in [0, 1), got %g", p[i]);
    if ((unsigned)c->attn_fn > MEGA_ATTN_LAPLACE) MEGA_FAIL(MEGA_ERR_INVALID, "unknown attention function");
    if ((unsigned)c->norm > MEGA_NORM_BATCH) MEGA_FAIL(MEGA_ERR_INVALID, "unknown norm type");
    return MEGA_OK;
}

mega_status mega_block_declare(mega_block *bl, mega_params *P, const char *prefix, const mega_block_cfg *cfg) {
    memset(bl, 0, sizeof *bl);
    MEGA_TRY(mega_block_cfg_check(cfg));
    bl->cfg = *cfg;
    bl->mix.ops = mega_mixer_ops_of(cfg->mixer);
    bl->mix.cfg = &bl->cfg;
    bl->mix.impl = &bl->ml;
    if (!bl->mix.ops->self_residual) {
        char pre[MEGA_NAME_MAX];
        snprintf(pre, sizeof pre, "%smixer_norm.norm.", prefix);
        MEGA_TRY(mega_seqnorm_declare(&bl->mnorm, P, pre, cfg->norm, cfg->D, cfg->norm_affine));
    }
    MEGA_TRY(bl->mix.ops->declare(&bl->mix, P, prefix));
    if (cfg->F > 0) MEGA_TRY(mega_nffn_declare(&bl->ffn, P, prefix, cfg));
    return MEGA_OK;
}

void mega_block_init(const mega_block *bl, real *W, mega_rng *rng) {
    if (!bl->mix.ops->self_residual) mega_seqnorm_init(&bl->mnorm, W);
    bl->mix.ops->init(&bl->mix, W, rng);
    if (bl->cfg.F > 0) mega_nffn_init(&bl->ffn, W, rng);
}

static size_t rd(const mega_block *bl, int B, int T) { return (((size_t)B * T * bl->cfg.D) + 15) & ~(size_t)15; }

size_t mega_block_acts_size(const mega_block *bl, int B, int T) {
    mega_block_acts A;
    return mega_block_acts_point_n(bl, &A, NULL, B, T);
}

/* lay out: mixer | wrapper (mn, mstat) | y1 | ffn */
size_t mega_block_acts_point_n(const mega_block *bl, mega_block_acts *A, real *base, int B, int T) {
    memset(A, 0, sizeof *A);
    size_t off = bl->mix.ops->acts(&bl->mix, &A->mx, base, B, T);
    mega_bump b = {base, off};
    if (!bl->mix.ops->self_residual) {
        A->mn = mega_bump_take(&b, (size_t)B * T * bl->cfg.D);
        A->mstat = mega_bump_take(&b, mega_seqnorm_stat_size(&bl->mnorm, (size_t)B * T));
    }
    if (bl->cfg.F > 0) {
        A->y1 = mega_bump_take(&b, (size_t)B * T * bl->cfg.D);
        b.off += mega_nffn_acts_point(&bl->ffn, &A->ffn, base ? base + b.off : NULL, B, T);
    }
    return b.off;
}

void mega_block_acts_point(const mega_block *bl, mega_block_acts *A, real *base, int B, int T) {
    mega_block_acts_point_n(bl, A, base, B, T);
}

size_t mega_block_scratch_size(const mega_block *bl, int B, int T, int nthreads) {
    size_t s = bl->mix.ops->scratch(&bl->mix, B, T, nthreads);
    if (!bl->mix.ops->self_residual) s += 2 * rd(bl, B, T); /* wrapper: core output / gradients */
    if (bl->cfg.F > 0) /* backward keeps dy1 (R x D) in front of the layers' scratch */
        s = rd(bl, B, T) + MEGA_MAX(s, mega_nffn_scratch(&bl->ffn, B, T));
    return s;
}

enum { SITE_SUBLAYER = 11 };

/* the mixer sublayer: Mega directly, any other mixer inside the standard residual wrapper */
static mega_status sublayer_forward(const mega_block *bl, real *W, mega_block_acts *A, real *y, const real *x,
                                    const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const mega_mixer *mx = &bl->mix;
    if (mx->ops->self_residual) return mx->ops->forward(mx, W, &A->mx, y, x, pad, B, T, run, scratch);
    const mega_block_cfg *c = &bl->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->D;
    const int train = run->training;
    real *core = scratch, *rest = scratch + rd(bl, B, T);
    const real *xin = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&bl->mnorm, W, A->mn, A->mstat, x, R, train, run->update_stats);
        xin = A->mn;
    }
    MEGA_TRY(mx->ops->forward(mx, W, &A->mx, core, xin, pad, B, T, run, rest));
    if (train) mega_dropout(core, core, R * D, c->dropout, mega__subkey(run->key, SITE_SUBLAYER));
    real *sum = c->prenorm ? y : A->mn;
    for (size_t i = 0; i < R * D; i++) sum[i] = x[i] + core[i];
    if (!c->prenorm) mega_seqnorm_forward(&bl->mnorm, W, y, A->mstat, A->mn, R, train, run->update_stats);
    return MEGA_OK;
}

static void sublayer_backward(const mega_block *bl, const real *W, real *dW, const mega_block_acts *A, real *dx,
                              const real *dy, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                              real *scratch) {
    const mega_mixer *mx = &bl->mix;
    if (mx->ops->self_residual) {
        mx->ops->backward(mx, W, dW, &A->mx, dx, dy, x, pad, B, T, run, scratch);
        return;
    }
    const mega_block_cfg *c = &bl->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->D;
    real *g = scratch, *dxin = scratch + rd(bl, B, T), *rest = scratch + 2 * rd(bl, B, T);
    if (!c->prenorm)
        mega_seqnorm_backward(&bl->mnorm, W, dW, g, dy, A->mn, A->mstat, R, run->training, 0);
    else
        memcpy(g, dy, R * D * sizeof(real));
    memcpy(dx, g, R * D * sizeof(real)); /* residual */
    if (run->training) mega_dropout(g, g, R * D, c->dropout, mega__subkey(run->key, SITE_SUBLAYER));
    const real *xin = c->prenorm ? A->mn : x;
    mx->ops->backward(mx, W, dW, &A->mx, dxin, g, xin, pad, B, T, run, rest);
    if (c->prenorm)
        mega_seqnorm_backward(&bl->mnorm, W, dW, dx, dxin, x, A->mstat, R, run->training, 1);
    else
        for (size_t i = 0; i < R * D; i++) dx[i] += dxin[i];
}

mega_status mega_block_forward(const mega_block *bl, real *W, mega_block_acts *A, real *out, const real *x,
                               const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    if (bl->cfg.F <= 0) return sublayer_forward(bl, W, A, out, x, pad, B, T, run, scratch);
    MEGA_TRY(sublayer_forward(bl, W, A, A->y1, x, pad, B, T, run, scratch));
    mega_nffn_forward(&bl->ffn, W, &A->ffn, out, A->y1, (size_t)B * T, run);
    return MEGA_OK;
}

void mega_block_backward(const mega_block *bl, const real *W, real *dW, const mega_block_acts *A, real *dx,
                         const real *dout, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                         real *scratch) {
    if (bl->cfg.F <= 0) {
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
    if (!bl->mix.ops->state_size) return 0;
    return bl->mix.ops->state_size(&bl->mix, B, cap);
}

mega_status mega_block_state_init(const mega_block *bl, const real *W, mega_block_state *S, real *mem, int B, int cap) {
    if (bl->cfg.bidir || !bl->mix.ops->state_init)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s blocks have no streaming state", bl->cfg.bidir ? "bidirectional" : bl->mix.ops->name);
    return bl->mix.ops->state_init(&bl->mix, W, S, mem, B, cap);
}

void mega_block_state_reset(const mega_block *bl, mega_block_state *S) { bl->mix.ops->state_reset(&bl->mix, S); }

size_t mega_block_step_scratch(const mega_block *bl, int B, int T, int cap) {
    const size_t RD = rd(bl, B, T);
    size_t s = bl->mix.ops->step_scratch ? bl->mix.ops->step_scratch(&bl->mix, B, T, cap) : 0;
    if (!bl->mix.ops->self_residual) s += 2 * RD + mega_seqnorm_stat_size(&bl->mnorm, (size_t)B * T) + 16;
    if (bl->cfg.F > 0) s = MEGA_MAX(s, (size_t)B * T * ((size_t)bl->cfg.F + bl->cfg.D) + mega_seqnorm_stat_size(&bl->ffn.norm, (size_t)B * T) + 64);
    return s;
}

mega_status mega_block_step(const mega_block *bl, const real *W, mega_block_state *S, real *out, const real *x,
                            int T, real *scratch) {
    const mega_mixer *mx = &bl->mix;
    const size_t R = (size_t)S->B * T, D = (size_t)bl->cfg.D;
    if (mx->ops->self_residual) {
        MEGA_TRY(mx->ops->step(mx, W, S, out, x, T, scratch));
    } else {
        /* eval-mode wrapper: y = x + core(norm(x)) (prenorm) or norm(x + core(x)) */
        real *xn = scratch, *core = scratch + rd(bl, S->B, T), *st = core + rd(bl, S->B, T);
        real *rest = st + mega_seqnorm_stat_size(&bl->mnorm, R) + 16;
        const real *xin = x;
        if (bl->cfg.prenorm) {
            mega_seqnorm_forward(&bl->mnorm, (real *)W, xn, st, x, R, 0, 0);
            xin = xn;
        }
        MEGA_TRY(mx->ops->step(mx, W, S, core, xin, T, rest));
        for (size_t i = 0; i < R * D; i++) out[i] = x[i] + core[i];
        if (!bl->cfg.prenorm) mega_seqnorm_forward(&bl->mnorm, (real *)W, out, st, out, R, 0, 0);
    }
    if (bl->cfg.F > 0) mega_nffn_step(&bl->ffn, W, out, out, R, scratch);
    return MEGA_OK;
}
