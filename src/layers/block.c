/* The Mega block = gated-attention layer + normalized FFN (official MegaDecoderLayer without
 * cross-attention, MegaEncoderLayer / MegaSentenceEncoderLayer). */
#include "layers/block.h"

mega_status mega_block_cfg_check(const mega_block_cfg *c) {
    if (c->D < 1 || c->Z < 1 || c->E < 1) MEGA_FAIL(MEGA_ERR_INVALID, "embed-dim, z-dim and hidden-dim must be positive (got %d, %d, %d)", c->D, c->Z, c->E);
    if (c->D > 65536 || c->Z > 65536 || c->E > 262144 || c->F > 262144)
        MEGA_FAIL(MEGA_ERR_INVALID, "layer widths are absurdly large (embed %d, z %d, hidden %d, ffn %d)", c->D, c->Z, c->E, c->F);
    if (c->N < 1 || c->N > 64) MEGA_FAIL(MEGA_ERR_INVALID, "n-dim must be in [1, 64] (got %d)", c->N);
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
    MEGA_TRY(mega_mlayer_declare(&bl->ml, P, prefix, cfg));
    if (cfg->F > 0) MEGA_TRY(mega_nffn_declare(&bl->ffn, P, prefix, cfg));
    return MEGA_OK;
}

void mega_block_init(const mega_block *bl, real *W, mega_rng *rng) {
    mega_mlayer_init(&bl->ml, W, rng);
    if (bl->cfg.F > 0) mega_nffn_init(&bl->ffn, W, rng);
}

size_t mega_block_acts_size(const mega_block *bl, int B, int T) {
    size_t n = mega_mlayer_acts_point(&bl->ml, NULL, NULL, B, T);
    if (bl->cfg.F > 0) n += mega_nffn_acts_point(&bl->ffn, NULL, NULL, B, T) + (((size_t)B * T * bl->cfg.D + 15) & ~(size_t)15);
    return n;
}

void mega_block_acts_point(const mega_block *bl, mega_block_acts *A, real *base, int B, int T) {
    memset(A, 0, sizeof *A);
    size_t off = mega_mlayer_acts_point(&bl->ml, &A->ml, base, B, T);
    if (bl->cfg.F > 0) {
        A->y1 = base + off;
        off += ((size_t)B * T * bl->cfg.D + 15) & ~(size_t)15;
        mega_nffn_acts_point(&bl->ffn, &A->ffn, base + off, B, T);
    }
}

size_t mega_block_scratch_size(const mega_block *bl, int B, int T, int nthreads) {
    size_t s = mega_mlayer_scratch(&bl->ml, B, T, nthreads);
    if (bl->cfg.F > 0) /* backward keeps dy1 (R x D) in front of the layers' scratch */
        s = (((size_t)B * T * bl->cfg.D + 15) & ~(size_t)15) + MEGA_MAX(s, mega_nffn_scratch(&bl->ffn, B, T));
    return s;
}

mega_status mega_block_forward(const mega_block *bl, real *W, mega_block_acts *A, real *out, const real *x,
                               const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    if (bl->cfg.F <= 0) return mega_mlayer_forward(&bl->ml, W, &A->ml, out, x, pad, B, T, run, scratch);
    MEGA_TRY(mega_mlayer_forward(&bl->ml, W, &A->ml, A->y1, x, pad, B, T, run, scratch));
    mega_nffn_forward(&bl->ffn, W, &A->ffn, out, A->y1, (size_t)B * T, run);
    return MEGA_OK;
}

void mega_block_backward(const mega_block *bl, const real *W, real *dW, const mega_block_acts *A, real *dx,
                         const real *dout, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                         real *scratch) {
    if (bl->cfg.F <= 0) {
        mega_mlayer_backward(&bl->ml, W, dW, &A->ml, dx, dout, x, pad, B, T, run, scratch);
        return;
    }
    /* dy1 (gradient at the FFN input) lives at the front of the scratch: the layer backward
     * writes dx before it has finished reading its upstream gradient, so dx cannot hold it */
    const size_t RD = (size_t)B * T * bl->cfg.D;
    real *dy1 = scratch;
    real *rest = scratch + ((RD + 15) & ~(size_t)15);
    mega_nffn_backward(&bl->ffn, W, dW, &A->ffn, dy1, dout, A->y1, (size_t)B * T, run, rest);
    mega_mlayer_backward(&bl->ml, W, dW, &A->ml, dx, dy1, x, pad, B, T, run, rest);
}

/* ---- streaming -------------------------------------------------------------------------- */

size_t mega_block_state_size(const mega_block *bl, int B, int cap) {
    const mega_block_cfg *c = &bl->cfg;
    mega_bump b = {NULL, 0};
    mega_bump_take(&b, (size_t)B * c->N * c->D);
    mega_bump_take(&b, (size_t)B * cap * c->Z);
    mega_bump_take(&b, (size_t)B * cap * c->E);
    mega_bump_take(&b, mega_ema_coef_size(&bl->ml.ema));
    mega_bump_take(&b, mega_relpos_table_size(&bl->ml.rp, cap));
    return b.off;
}

mega_status mega_block_state_init(const mega_block *bl, const real *W, mega_block_state *S, real *mem, int B, int cap) {
    const mega_block_cfg *c = &bl->cfg;
    if (c->bidir) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "bidirectional blocks have no streaming state");
    if (cap < 1) MEGA_FAIL(MEGA_ERR_INVALID, "streaming cache capacity must be positive");
    if (c->chunk > 0 && cap < c->chunk) MEGA_FAIL(MEGA_ERR_INVALID, "streaming cache capacity %d is below the chunk size %d", cap, c->chunk);
    memset(S, 0, sizeof *S);
    S->B = B;
    S->cap = cap;
    mega_bump b = {mem, 0};
    S->h = mega_bump_take(&b, (size_t)B * c->N * c->D);
    S->hsize = (size_t)B * c->N * c->D;
    S->kc = mega_bump_take(&b, (size_t)B * cap * c->Z);
    S->vc = mega_bump_take(&b, (size_t)B * cap * c->E);
    S->coef = mega_bump_take(&b, mega_ema_coef_size(&bl->ml.ema));
    S->btab = mega_bump_take(&b, mega_relpos_table_size(&bl->ml.rp, cap));
    mega_ema_layer_coef(&bl->ml.ema, W, S->coef, 0);
    MEGA_TRY(mega_relpos_table(&bl->ml.rp, W, c->chunk > 0 ? c->chunk : cap, S->btab, &S->Mc));
    mega_block_state_reset(S);
    return MEGA_OK;
}

void mega_block_state_reset(mega_block_state *S) {
    S->len = 0;
    /* only the EMA state needs zeroing: the caches are overwritten before being read */
    memset(S->h, 0, S->hsize * sizeof(real));
}

size_t mega_block_step_scratch(const mega_block *bl, int B, int T, int cap) {
    size_t s = mega_mlayer_step_scratch(&bl->ml, B, T, cap);
    if (bl->cfg.F > 0) /* mega_nffn_step: R*(F+D) + the norm statistics (2R, or 2D for batchnorm) */
        s = MEGA_MAX(s, (size_t)B * T * ((size_t)bl->cfg.F + bl->cfg.D) +
                            mega_seqnorm_stat_size(&bl->ffn.norm, (size_t)B * T) + 64);
    return s;
}

mega_status mega_block_step(const mega_block *bl, const real *W, mega_block_state *S, real *out, const real *x,
                            int T, real *scratch) {
    MEGA_TRY(mega_mlayer_step(&bl->ml, W, S, out, x, T, scratch));
    if (bl->cfg.F > 0) mega_nffn_step(&bl->ffn, W, out, out, (size_t)S->B * T, scratch);
    return MEGA_OK;
}
