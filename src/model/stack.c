/* Stack of Mega blocks + final norm (see stack.h). */
#include "model/stack.h"

mega_status mega_stack_declare(mega_stack *s, mega_params *P, const char *layer_prefix, const char *fnorm_prefix,
                               const mega_block_config *cfg, int layers, int fnorm_affine) {
    memset(s, 0, sizeof *s);
    s->L = layers;
    s->cfg = cfg;
    s->nthreads = mega_get_threads();
    s->recompute = mega_get_recompute() == MEGA_RECOMPUTE_BLOCKS;
    s->blocks = calloc((size_t)layers, sizeof *s->blocks);
    if (!s->blocks) MEGA_FAIL(MEGA_ERR_OOM, "out of memory");
    s->owns_blocks = 1;
    for (int l = 0; l < layers; l++) {
        char pre[MEGA_NAME_MAX];
        snprintf(pre, sizeof pre, "%s%d.", layer_prefix, l);
        MEGA_TRY(mega_block_declare(&s->blocks[l], P, pre, cfg));
    }
    if (mega_mixer_ops_of(cfg->mixer)->flags & MEGA_MIXER_FINAL_TSNORM) {
        s->has_tfnorm = 1; /* official MegaOutputLayer: TimestepNorm(model_dim, norm_num_groups, eps) */
        return mega_tsnorm_declare(&s->tfnorm, P, fnorm_prefix, cfg->embed_dim, cfg->norm_num_groups, 1e-5);
    }
    s->has_fnorm = cfg->prenorm;
    if (s->has_fnorm) MEGA_TRY(mega_seqnorm_declare(&s->fnorm, P, fnorm_prefix, cfg->norm_type, cfg->embed_dim, fnorm_affine));
    return MEGA_OK;
}

void mega_stack_init(const mega_stack *s, real *W, mega_rng *rng) {
    for (int l = 0; l < s->L; l++) mega_block_init(&s->blocks[l], W, rng);
    if (s->has_fnorm) mega_seqnorm_init(&s->fnorm, W);
    if (s->has_tfnorm) mega_tsnorm_init(&s->tfnorm, W);
}

/* acts [R][3G+1] | counts (int64 per sequence, at most R) | means, variances [R][2G] */
static size_t rnd16(size_t n) { return (n + 15) & ~(size_t)15; } /* keeps the int64 counts aligned */
static size_t tf_acts_reals(const mega_stack *s, size_t R) { return rnd16(R * (3 * (size_t)s->tfnorm.G + 1)); }
static size_t tf_count_reals(size_t R) { return rnd16((R * sizeof(int64_t) + sizeof(real) - 1) / sizeof(real)); }
size_t mega_stack_tf_reals(const mega_stack *s, size_t R) {
    if (!s->has_tfnorm) return 0;
    return tf_acts_reals(s, R) + tf_count_reals(R) + R * 2 * (size_t)s->tfnorm.G;
}

static void free_buffers(mega_stack *s) {
    mega__free(s->acts);
    mega__free(s->H);
    mega__free(s->xf);
    mega__free(s->scratch);
    mega__free(s->dx);
    mega__free(s->dy);
    mega__free(s->tf);
    s->tf = NULL;
    free(s->A);
    s->acts = s->H = s->xf = s->scratch = s->dx = s->dy = NULL;
    s->A = NULL;
    s->Bmax = s->Tmax = 0;
    s->Rcap = s->scr_cap = s->acts_per = 0;
}

void mega_stack_free(mega_stack *s) {
    free_buffers(s);
    if (s->owns_blocks) free(s->blocks);
    s->blocks = NULL;
}

void mega_stack_share(mega_stack *dst, const mega_stack *src) {
    memset(dst, 0, sizeof *dst);
    dst->L = src->L, dst->cfg = src->cfg, dst->blocks = src->blocks, dst->owns_blocks = 0;
    dst->fnorm = src->fnorm, dst->has_fnorm = src->has_fnorm, dst->nthreads = src->nthreads;
    dst->tfnorm = src->tfnorm, dst->has_tfnorm = src->has_tfnorm;
    dst->recompute = src->recompute;
}

/* the features and final-norm statistics for R rows; without a final norm (layer norm or
 * Megalodon's timestep norm), recomputation zeroes the pads of H[L] in place (mega_stack_forward)
 * and needs none */
static size_t xf_reals(const mega_stack *s, size_t R) {
    const size_t D = (size_t)s->cfg->embed_dim;
    return s->recompute && !s->has_fnorm && !s->has_tfnorm ? 16 : R * D + 2 * R + 2 * D;
}

void mega_stack_sizes(const mega_stack *s, int B, int T, size_t *per, size_t *scr, size_t *xf) {
    const mega_block *bl = &s->blocks[0];
    *xf = xf_reals(s, (size_t)B * T);
    if (s->recompute) {
        mega_block_acts A;
        *per = mega_block_acts_point_split(bl, &A, NULL, NULL, B, T);
        *scr = mega_block_scratch_size_split(bl, B, T, s->nthreads);
    } else {
        *per = mega_block_acts_size(bl, B, T);
        *scr = mega_block_scratch_size(bl, B, T, s->nthreads);
    }
}

/* Capacities, not shapes: a batch fits when its rows, activations and scratch fit what is
 * allocated, whatever its B x T (batches by tokens vary both; sizing by the largest B and the
 * largest T seen separately would allocate for their product). */
mega_status mega_stack_reserve(mega_stack *s, int B, int T) {
    if (B < 1 || T < 1) MEGA_FAIL(MEGA_ERR_INVALID, "batch and sequence length must be positive (got %d x %d)", B, T);
    size_t R = (size_t)B * T, per, scr, nxf; /* the features' size follows R */
    mega_stack_sizes(s, B, T, &per, &scr, &nxf);
    if (s->H && R <= s->Rcap && per <= s->acts_per && scr <= s->scr_cap) return MEGA_OK;
    R = MEGA_MAX(R, s->Rcap), per = MEGA_MAX(per, s->acts_per), scr = MEGA_MAX(scr, s->scr_cap);
    free_buffers(s);
    const size_t D = (size_t)s->cfg->embed_dim;
    const int L = s->L;
    const size_t nacts = s->recompute ? 1 : (size_t)L;
    s->acts = mega__calloc(per * nacts, sizeof(real));
    s->A = calloc((size_t)L, sizeof *s->A);
    s->H = mega__calloc(R * D * (size_t)(L + 1), sizeof(real));
    s->xf = mega__calloc(xf_reals(s, R), sizeof(real));
    s->scratch = mega__calloc(scr, sizeof(real));
    s->dx = mega__calloc(R * D, sizeof(real));
    s->dy = mega__calloc(R * D, sizeof(real));
    if (s->has_tfnorm) s->tf = mega__calloc(mega_stack_tf_reals(s, R), sizeof(real));
    if (!s->acts || !s->A || !s->H || !s->xf || !s->scratch || !s->dx || !s->dy || (s->has_tfnorm && !s->tf)) {
        size_t mb = (per * nacts + R * D * (L + 4) + scr + mega_stack_tf_reals(s, R)) * sizeof(real) >> 20;
        free_buffers(s);
        MEGA_FAIL(MEGA_ERR_OOM, "out of memory reserving buffers for %zu tokens (about %zu MiB)", R, mb);
    }
    s->fstat = s->has_fnorm ? s->xf + R * D : NULL;
    s->Bmax = B, s->Tmax = T, s->acts_per = per, s->Rcap = R, s->scr_cap = scr;
    return MEGA_OK;
}

mega_status mega_stack_forward(mega_stack *s, real *W, const uint8_t *pad, int B, int T, int training, uint64_t key,
                               const real **out) {
    MEGA_TRY(mega_stack_reserve(s, B, T));
    const size_t R = (size_t)B * T, D = (size_t)s->cfg->embed_dim;
    const int L = s->L;
    s->B = B, s->T = T, s->pad = pad;
    for (int l = 0; l < L; l++) {
        if (s->recompute) mega_block_acts_point_split(&s->blocks[l], &s->A[l], s->acts, s->scratch, B, T);
        else mega_block_acts_point(&s->blocks[l], &s->A[l], s->acts + (size_t)l * s->acts_per, B, T);
        mega_run br = {training, training, mega_stack_key(key, l), s->nthreads, &s->sync};
        MEGA_TRY(mega_block_forward(&s->blocks[l], W, &s->A[l], s->H + (size_t)(l + 1) * R * D, s->H + (size_t)l * R * D,
                                    pad, B, T, &br, s->scratch));
    }
    /* final norm (prenorm models), then zero the pads (official: x *= 1 - padding_mask) */
    real *HL = s->H + (size_t)L * R * D;
    const real *xf = HL;
    if (s->has_fnorm) {
        mega_seqnorm_forward(&s->fnorm, W, s->xf, s->fstat, HL, R, training, training, &s->sync);
        xf = s->xf;
    }
    if (s->has_tfnorm) { /* from the prior; no padding mask, as MegaOutputLayer.forward */
        mega_tsnorm_acts ta = mega_tsnorm_acts_at(&s->tfnorm, s->tf, B, T);
        real *cnt = s->tf + tf_acts_reals(s, R);
        mega_tsnorm_state ts = {(int64_t *)(void *)cnt, cnt + tf_count_reals(R)};
        mega_tsnorm_state_prior(&s->tfnorm, W, &ts, B);
        mega_tsnorm_forward(&s->tfnorm, W, s->xf, HL, NULL, B, T, &ts, &ta);
        xf = s->xf;
    }
    if (pad) {
        /* recomputation zeroes H[L]'s pads in place: without a final norm the backward does not
         * read H[L] (the last block's backward reads its input), and a copy would be one more
         * R x D buffer */
        real *z = s->recompute && xf == HL ? HL : s->xf;
        if (xf == HL && z != HL) memcpy(s->xf, HL, R * D * sizeof(real));
        for (size_t r = 0; r < R; r++)
            if (pad[r]) memset(z + r * D, 0, D * sizeof(real));
        xf = z;
    }
    s->out = xf;
    *out = xf;
    return MEGA_OK;
}

/* block l's activations again (recomputation): its forward from its input H[l] with the dropout
 * key of the training forward, so the masks are the same, and without updating the batchnorm
 * running statistics a second time (the forward then writes nothing into W). Its output goes to
 * H[l+1], which block l+1's backward, already done, was the last to read; the values are those of
 * the first forward. The same forward on the same input and buffers succeeded in the training
 * forward, so its status is not looked at again. */
static void recompute_block(mega_stack *s, const real *W, int l, int training, uint64_t key) {
    const size_t R = (size_t)s->B * s->T, D = (size_t)s->cfg->embed_dim;
    mega_run br = {training, 0, mega_stack_key(key, l), s->nthreads, &s->sync};
    mega_status st = mega_block_forward(&s->blocks[l], (real *)W, &s->A[l], s->H + (size_t)(l + 1) * R * D,
                                        s->H + (size_t)l * R * D, s->pad, s->B, s->T, &br, s->scratch);
    (void)st;
}

real *mega_stack_backward(mega_stack *s, const real *W, real *dW, real *dout, int training, uint64_t key) {
    const int B = s->B, T = s->T, L = s->L;
    const size_t R = (size_t)B * T, D = (size_t)s->cfg->embed_dim;
    if (s->pad)
        for (size_t r = 0; r < R; r++)
            if (s->pad[r]) memset(dout + r * D, 0, D * sizeof(real));
    real *dH = dout;
    if (s->has_fnorm) {
        real *dst = dout == s->dx ? s->dy : s->dx;
        mega_seqnorm_backward(&s->fnorm, W, dW, dst, dout, s->H + (size_t)L * R * D, s->fstat, R, training, 0, &s->sync);
        dH = dst;
    }
    if (s->has_tfnorm) {
        real *dst = dout == s->dx ? s->dy : s->dx;
        mega_tsnorm_acts ta = mega_tsnorm_acts_at(&s->tfnorm, s->tf, B, T);
        memset(dst, 0, R * D * sizeof(real)); /* the timestep norm's backward accumulates */
        mega_tsnorm_backward(&s->tfnorm, W, dW, dst, dout, s->H + (size_t)L * R * D, NULL, B, T, &ta, NULL, NULL);
        dH = dst;
    }
    for (int l = L - 1; l >= 0; l--) {
        mega_run br = {training, training, mega_stack_key(key, l), s->nthreads, &s->sync};
        real *dIn = (dH == s->dx) ? s->dy : s->dx;
        /* the last block's activations are still there: its FFN's in the scratch too, since
         * nothing else writes the stack's scratch between its forward and its backward (the
         * final norm and the models' heads have their own buffers) */
        if (s->recompute && l < L - 1) recompute_block(s, W, l, training, key);
        mega_block_backward(&s->blocks[l], W, dW, &s->A[l], dIn, dH, s->H + (size_t)l * R * D, s->pad, B, T, &br,
                            s->scratch);
        dH = dIn;
    }
    return dH;
}
