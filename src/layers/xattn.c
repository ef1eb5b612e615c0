/* Cross-attention of the encoder–decoder (see xattn.h for the equations). */
#include "layers/xattn.h"
#include "ops/abc.h"
#include "ops/attn.h"
#include "ops/ops.h"

/* dropout sites */
enum { SITE_HIDDEN = 21, SITE_ATTN, SITE_OUT };

static inline int is_abc(const mega_xattn *X) { return X->kind >= MEGA_XATTN_ABC_WINDOW; }
/* heads whose control is their own (MLP) or one shared by all (window, Linformer) */
static inline size_t HC(const mega_xattn *X) { return X->kind == MEGA_XATTN_ABC_MLP ? (size_t)X->H : 1; }

mega_xattn_kind mega_xattn_default_kind(const mega_block_config *dec) {
    const mega_mixer_ops *ops = mega_mixer_ops_of(dec->mixer);
    return ops && (ops->flags & MEGA_MIXER_GATED_XATTN) ? MEGA_XATTN_GATED : MEGA_XATTN_MHA;
}

static inline size_t PW(const mega_xattn *X) { /* q_proj width */
    const mega_block_config *c = X->cfg;
    return X->kind == MEGA_XATTN_GATED ? 2 * (size_t)c->embed_dim + (size_t)c->z_dim : (size_t)c->embed_dim;
}
static inline size_t KW(const mega_xattn *X) { /* key width */
    return X->kind == MEGA_XATTN_GATED ? (size_t)X->cfg->z_dim : (size_t)X->cfg->embed_dim;
}
/* rounded as the bump allocator rounds */
static inline size_t rnd(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- bounded memory (ABC) ------------------------------------------------------------------ */

/* the control's parameters under pre ("<prefix>cross_attn.") */
static mega_status abc_declare(mega_xattn *X, mega_params *P, const char *pre, int n, int M) {
    if (n < 1 || n > 65536)
        MEGA_FAIL(MEGA_ERR_INVALID, "cross-memory must be in [1, 65536] (the bounded cross-attention's slots), got %d", n);
    X->n = n;
    const int64_t Hn = (int64_t)X->H * n, D = X->cfg->embed_dim;
    if (X->kind == MEGA_XATTN_ABC_LINFORMER) {
        if (M < 1 || M > (1 << 24)) MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer cross-attention: max positions %d outside [1, 2^24]", M);
        X->M = M;
        MEGA_TRY(MEGA_PADD(P, pre, "compress_k.weight", MEGA_P_DECAY, &X->c_k, (int64_t)n, (int64_t)M));
        MEGA_TRY(MEGA_PADD(P, pre, "compress_v.weight", MEGA_P_DECAY, &X->c_v, (int64_t)n, (int64_t)M));
    } else if (X->kind == MEGA_XATTN_ABC_MLP) {
        MEGA_TRY(MEGA_PADD(P, pre, "phi_k.weight", MEGA_P_DECAY, &X->c_k, Hn, D));
        MEGA_TRY(MEGA_PADD(P, pre, "phi_v.weight", MEGA_P_DECAY, &X->c_v, Hn, D));
    }
    return MEGA_OK;
}

static void abc_init(const mega_xattn *X, real *W, mega_rng *rng) {
    const size_t n = (size_t)X->n, Hn = (size_t)X->H * n, D = (size_t)X->cfg->embed_dim;
    if (X->kind == MEGA_XATTN_ABC_LINFORMER) { /* as the abc-linformer mixer (fairseq MultiheadLinearAttention) */
        mega_fill_xavier(W + X->c_k, n, (size_t)X->M, sqrt(0.5), rng);
        mega_fill_xavier(W + X->c_v, n, (size_t)X->M, sqrt(0.5), rng);
    } else if (X->kind == MEGA_XATTN_ABC_MLP) { /* as the abc-mlp mixer: N(0, 0.02) */
        mega_fill_normal(W + X->c_k, Hn * D, 0, 0.02, rng);
        mega_fill_normal(W + X->c_v, Hn * D, 0, 0.02, rng);
    }
}

/* reals of one control Phi^T [B, Hc, n, Tk] */
static size_t phi_len(const mega_xattn *X, int B, int Tk) { return (size_t)B * HC(X) * X->n * (size_t)Tk; }

static mega_abc_k abc_kernel(const mega_xattn *X, int Tq, int Tk, const uint8_t *empty, const mega_run *run) {
    mega_abc_k k;
    memset(&k, 0, sizeof k);
    k.T = Tk, k.Tq = Tq, k.n = X->n, k.d = X->dh, k.H = X->H;
    k.scale = (real)(1.0 / sqrt((double)k.d));
    k.p_drop = run && run->training ? X->cfg->attention_dropout : 0;
    k.key = run ? mega__subkey(run->key, SITE_ATTN) : 0;
    if (X->kind == MEGA_XATTN_ABC_WINDOW) k.empty = empty, k.empty_b = (size_t)X->n;
    return k;
}
static size_t abc_tmp(const mega_xattn *X, int Tq, int Tk) {
    mega_abc_k k = abc_kernel(X, Tq, Tk, NULL, NULL);
    return rnd(mega_abc_bidir_tmp(&k));
}

/* the memory control of the source e [B,Tk,D] (pads kpad): Phi^T of K and V (phv == phk for the
 * window) and the empty slots */
static mega_status abc_control(const mega_xattn *X, const real *W, real *phk, real *phv, uint8_t *empty, const real *e,
                               const uint8_t *kpad, int B, int Tk) {
    const size_t Hn = (size_t)X->H * X->n, D = (size_t)X->cfg->embed_dim;
    switch (X->kind) {
    case MEGA_XATTN_ABC_WINDOW: mega_abc_block_phi(phk, empty, kpad, B, Tk, X->n); break;
    case MEGA_XATTN_ABC_LINFORMER:
        if (Tk > X->M)
            MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer cross-attention: source length %d exceeds max positions %d (the "
                                        "columns of its control)", Tk, X->M);
        mega_abc_lin_phi(W + X->c_k, (size_t)X->M, X->n, phk, kpad, B, Tk);
        mega_abc_lin_phi(W + X->c_v, (size_t)X->M, X->n, phv, kpad, B, Tk);
        break;
    default:
        mega_abc_mlp_phi(W + X->c_k, phk, e, kpad, B, Tk, Hn, D);
        mega_abc_mlp_phi(W + X->c_v, phv, e, kpad, B, Tk, Hn, D);
    }
    return MEGA_OK;
}
/* unit (b, h)'s control rows */
static inline const real *phi_of(const mega_xattn *X, const real *ph, int b, int h, int Tk) {
    return ph + ((size_t)b * HC(X) + (HC(X) > 1 ? (size_t)h : 0)) * X->n * (size_t)Tk;
}

/* O [R, D] (A->O) from q = A->base, k = A->k, v = A->v; tmp: nthreads x abc_tmp */
static mega_status abc_core_forward(const mega_xattn *X, const real *W, mega_xattn_acts *A, const real *e,
                                    const uint8_t *kpad, int B, int Tq, int Tk, const mega_run *run, real *tmp) {
    MEGA_TRY(abc_control(X, W, A->phk, A->phv, A->empty, e, kpad, B, Tk));
    const mega_abc_k k = abc_kernel(X, Tq, Tk, A->empty, run);
    const size_t nd = (size_t)X->n * X->dh, per = abc_tmp(X, Tq, Tk);
    const int H = X->H, nt = run->nthreads > 0 ? run->nthreads : 1;
    const long units = (long)B * H;
    (void)nt; /* without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (units > 1 && (size_t)units * Tq * nd > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        const int b = (int)(u / H), h = (int)(u % H);
        mega_abc_bidir_forward(&k, A->O, A->P, A->km + (size_t)u * nd, A->vm + (size_t)u * nd, A->base, A->k, A->v,
                               phi_of(X, A->phk, b, h, Tk), phi_of(X, A->phv, b, h, Tk), (size_t)Tk, b, h,
                               tmp + per * (size_t)mega__thread_id());
    }
    return MEGA_OK;
}

/* dbase, dk, dv (overwritten) from dO; the control's gradients (dW; MLP: also dE, accumulated);
 * scr: 2 phi buffers of B*H*n*Tk, then nthreads x abc_tmp */
static void abc_core_backward(const mega_xattn *X, const real *W, real *dW, const mega_xattn_acts *A, real *dbase,
                              real *dk, real *dv, real *dE, const real *dO, const real *e, const uint8_t *kpad, int B,
                              int Tq, int Tk, const mega_run *run, real *scr) {
    const int H = X->H, n = X->n;
    const size_t nd = (size_t)n * X->dh, Hn = (size_t)H * n, D = (size_t)X->cfg->embed_dim, ph = (size_t)B * Hn * Tk;
    real *dphk = scr, *dphv = dphk + rnd(ph), *tmp = dphv + rnd(ph);
    const mega_abc_k k = abc_kernel(X, Tq, Tk, A->empty, run);
    const size_t per = abc_tmp(X, Tq, Tk);
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    const long units = (long)B * H;
    (void)nt; /* without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (units > 1 && (size_t)units * Tq * nd > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        const int b = (int)(u / H), h = (int)(u % H);
        mega_abc_bidir_backward(&k, dbase, dk, dv, dphk + (size_t)u * n * Tk, dphv + (size_t)u * n * Tk, (size_t)Tk, dO,
                                A->P, A->km + (size_t)u * nd, A->vm + (size_t)u * nd, A->base, A->k, A->v,
                                phi_of(X, A->phk, b, h, Tk), phi_of(X, A->phv, b, h, Tk), (size_t)Tk, b, h,
                                tmp + per * (size_t)mega__thread_id());
    }
    if (X->kind == MEGA_XATTN_ABC_LINFORMER) {
        mega_abc_lin_phi_backward(dW + X->c_k, (size_t)X->M, dphk, kpad, B, H, n, Tk);
        mega_abc_lin_phi_backward(dW + X->c_v, (size_t)X->M, dphv, kpad, B, H, n, Tk);
    } else if (X->kind == MEGA_XATTN_ABC_MLP) {
        mega_abc_mlp_phi_backward(W + X->c_k, dW + X->c_k, dE, dphk, A->phk, e, B, Tk, Hn, D);
        mega_abc_mlp_phi_backward(W + X->c_v, dW + X->c_v, dE, dphv, A->phv, e, B, Tk, Hn, D);
    }
}

mega_status mega_xattn_declare(mega_xattn *X, mega_params *P, const char *prefix, const mega_block_config *c,
                               mega_xattn_kind kind, int n, int M) {
    memset(X, 0, sizeof *X);
    X->cfg = c;
    if ((unsigned)kind > MEGA_XATTN_ABC_MLP) MEGA_FAIL(MEGA_ERR_INVALID, "unknown cross-attention kind %d", (int)kind);
    X->kind = kind;
    const int64_t D = c->embed_dim, Z = c->z_dim;
    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%scross_attn.", prefix);
    if (X->kind == MEGA_XATTN_GATED) {
        if (M < 1) MEGA_FAIL(MEGA_ERR_INVALID, "cross-attention max positions must be positive (got %d)", M);
        X->M = M;
        MEGA_TRY(MEGA_PADD(P, pre, "k_proj.weight", MEGA_P_DECAY, &X->k_w, Z, D));
        MEGA_TRY(MEGA_PADD(P, pre, "k_proj.bias", 0, &X->k_b, Z));
        MEGA_TRY(MEGA_PADD(P, pre, "v_proj.weight", MEGA_P_DECAY, &X->v_w, D, D));
        MEGA_TRY(MEGA_PADD(P, pre, "v_proj.bias", 0, &X->v_b, D));
        MEGA_TRY(MEGA_PADD(P, pre, "q_proj.weight", MEGA_P_DECAY, &X->q_w, 2 * D + Z, D));
        MEGA_TRY(MEGA_PADD(P, pre, "q_proj.bias", 0, &X->q_b, 2 * D + Z));
        MEGA_TRY(MEGA_PADD(P, pre, "h_proj.weight", MEGA_P_DECAY, &X->o_w, D, D));
        MEGA_TRY(MEGA_PADD(P, pre, "h_proj.bias", 0, &X->o_b, D));
        char rp[MEGA_NAME_MAX];
        snprintf(rp, sizeof rp, "%scross_attn.rel_pos_bias.", prefix);
        MEGA_TRY(mega_relpos_declare(&X->rp, P, rp, c->rel_pos_bias == MEGA_RELPOS_ROTARY, M, c->z_dim));
    } else {
        X->H = c->heads > 0 ? c->heads : mega__default_heads(c->embed_dim, 0);
        if (c->embed_dim % X->H) MEGA_FAIL(MEGA_ERR_INVALID, "heads %d must divide embed-dim %d", X->H, c->embed_dim);
        X->dh = c->embed_dim / X->H;
        mega_qkvo q;
        MEGA_TRY(mega_qkvo_declare(&q, P, prefix, "cross_attn.", c->embed_dim));
        X->q_w = q.w[MEGA_Q], X->q_b = q.b[MEGA_Q], X->k_w = q.w[MEGA_K], X->k_b = q.b[MEGA_K];
        X->v_w = q.w[MEGA_V], X->v_b = q.b[MEGA_V], X->o_w = q.w[MEGA_O], X->o_b = q.b[MEGA_O];
        if (is_abc(X)) MEGA_TRY(abc_declare(X, P, pre, n, M));
    }
    snprintf(pre, sizeof pre, "%scross_attn.norm.norm.", prefix);
    MEGA_TRY(mega_seqnorm_declare(&X->norm, P, pre, c->norm_type, c->embed_dim, c->norm_affine));
    return MEGA_OK;
}

void mega_xattn_init(const mega_xattn *X, real *W, mega_rng *rng) {
    const size_t D = (size_t)X->cfg->embed_dim;
    mega_seqnorm_init(&X->norm, W);
    if (X->kind == MEGA_XATTN_GATED) {
        /* official reset_parameters: N(0, 0.02) weights, zero biases */
        const size_t Z = (size_t)X->cfg->z_dim;
        mega_fill_normal(W + X->k_w, Z * D, 0, 0.02, rng);
        mega_fill_const(W + X->k_b, Z, 0);
        mega_fill_normal(W + X->v_w, D * D, 0, 0.02, rng);
        mega_fill_const(W + X->v_b, D, 0);
        mega_fill_normal(W + X->q_w, (2 * D + Z) * D, 0, 0.02, rng);
        mega_fill_const(W + X->q_b, 2 * D + Z, 0);
        mega_fill_normal(W + X->o_w, D * D, 0, 0.02, rng);
        mega_fill_const(W + X->o_b, D, 0);
        mega_relpos_init(&X->rp, W, rng);
    } else {
        /* fairseq MultiheadAttention (encoder-decoder attention): xavier, zero biases */
        mega_qkvo q = {{X->q_w, X->k_w, X->v_w, X->o_w}, {X->q_b, X->k_b, X->v_b, X->o_b}};
        mega_qkvo_init(&q, W, (int)D, rng);
        if (is_abc(X)) abc_init(X, W, rng);
    }
}

/* the bias table's length for queries at positions < nq and nk keys */
static size_t btab_len(const mega_xattn *X, int nq, int nk) {
    if (X->kind != MEGA_XATTN_GATED) return 0;
    return mega_relpos_table_size(&X->rp, MEGA_MAX(nq, nk));
}

size_t mega_xattn_acts_view(const mega_xattn *X, mega_xattn_acts *A, real *base, int B, int Tq, int Tk) {
    const size_t R = (size_t)B * Tq, Rs = (size_t)B * Tk, D = (size_t)X->cfg->embed_dim;
    const int gated = X->kind == MEGA_XATTN_GATED;
    mega_bump b = {base, 0};
    memset(A, 0, sizeof *A);
    A->xn = mega_bump_take(&b, R * D);
    A->nstat = mega_bump_take(&b, mega_seqnorm_stat_size(&X->norm, R));
    A->base = mega_bump_take(&b, R * PW(X));
    A->k = mega_bump_take(&b, Rs * KW(X));
    if (gated) A->vpre = mega_bump_take(&b, Rs * D);
    A->v = mega_bump_take(&b, Rs * D);
    A->O = mega_bump_take(&b, R * D);
    A->lse = mega_bump_take(&b, R * (gated ? 1 : (size_t)X->H));
    if (gated) A->hpre = mega_bump_take(&b, R * D);
    A->h = mega_bump_take(&b, R * D);
    A->btab = mega_bump_take(&b, btab_len(X, Tq, Tk));
    if (is_abc(X)) {
        const size_t nD = (size_t)B * X->n * D;
        A->P = mega_bump_take(&b, R * X->H * (size_t)X->n);
        A->km = mega_bump_take(&b, nD);
        A->vm = mega_bump_take(&b, nD);
        A->phk = mega_bump_take(&b, phi_len(X, B, Tk));
        A->phv = X->kind == MEGA_XATTN_ABC_WINDOW ? A->phk : mega_bump_take(&b, phi_len(X, B, Tk));
        A->empty = (uint8_t *)mega_bump_take(&b, ((size_t)B * X->n + sizeof(real) - 1) / sizeof(real));
    }
    return b.off;
}

static mega_attn_k kernel(const mega_xattn *X, const real *btab, int Mc, const mega_run *run, int head) {
    const mega_block_config *c = X->cfg;
    mega_attn_k k = {0};
    if (X->kind == MEGA_XATTN_GATED) {
        const int D = c->embed_dim;
        k.Z = c->z_dim, k.E = D, k.fn = c->attention_activation, k.btab = btab, k.Mc = Mc;
        k.ldq = 2 * D + c->z_dim; /* q is the last Z columns of q_proj's output */
    } else {
        k.Z = k.E = X->dh, k.fn = MEGA_ATTN_SOFTMAX, k.Mc = 1;
        k.ldq = k.ldk = k.ldv = k.ldo = c->embed_dim; /* one head: a column slice */
    }
    k.chunk_size = -1;
    k.p_attn = run && run->training ? c->attention_dropout : 0;
    k.key_attn = run ? mega__subkey(run->key, SITE_ATTN + 100 * (uint64_t)head) : 0;
    return k;
}

size_t mega_xattn_scratch_size(const mega_xattn *X, int B, int Tq, int Tk, int nthreads) {
    const size_t R = (size_t)B * Tq, Rs = (size_t)B * Tk, D = (size_t)X->cfg->embed_dim;
    if (nthreads < 1) nthreads = 1;
    mega_attn_k k = kernel(X, NULL, (int)((btab_len(X, Tq, Tk) + 1) / 2), NULL, 0);
    size_t attn = mega_attn_cross_scratch(&k, Tk) * (size_t)nthreads + mega_attn_db_scratch(&k);
    if (is_abc(X)) attn = 2 * rnd((size_t)B * X->H * X->n * (size_t)Tk) + abc_tmp(X, Tq, Tk) * (size_t)nthreads;
    /* backward: g, hin, dhpre, dxq [R,D]; dbase [R,PW]; dk [Rs,KW]; dv [Rs,D]; dbtab; attn */
    return rnd(R * D) * 4 + rnd(R * PW(X)) + rnd(Rs * KW(X)) + rnd(Rs * D) + rnd(2 * (size_t)k.Mc + 16) + attn + 64;
}

mega_status mega_xattn_forward(const mega_xattn *X, real *W, mega_xattn_acts *A, real *y, const real *x,
                               const real *e, const uint8_t *kpad, int B, int Tq, int Tk, const mega_run *run,
                               real *scratch) {
    const mega_block_config *c = X->cfg;
    const size_t R = (size_t)B * Tq, Rs = (size_t)B * Tk, D = (size_t)c->embed_dim, Pw = PW(X);
    const int train = run->training;
    const real *xq = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&X->norm, W, A->xn, A->nstat, x, R, train, run->update_stats, run->sync);
        xq = A->xn;
    }
    mega_linear_forward(A->base, xq, W + X->q_w, W + X->q_b, R, D, Pw);
    mega_linear_forward(A->k, e, W + X->k_w, W + X->k_b, Rs, D, KW(X));
    real *attn_scr = scratch + rnd(R * D);
    if (X->kind == MEGA_XATTN_GATED) {
        mega_linear_forward(A->vpre, e, W + X->v_w, W + X->v_b, Rs, D, D);
        mega_act_forward(c->activation, A->v, A->vpre, Rs * D);
        if (train && c->hidden_dropout > 0) mega_dropout(A->v, A->v, Rs * D, c->hidden_dropout, mega__subkey(run->key, SITE_HIDDEN));
        MEGA_TRY(mega_relpos_table(&X->rp, W, MEGA_MAX(Tq, Tk), A->btab, &A->Mc));
        mega_attn_k k = kernel(X, A->btab, A->Mc, run, 0);
        mega_attn_cross_forward(&k, A->O, A->lse, A->base + 2 * D, A->k, A->v, kpad, B, Tq, Tk, 0, attn_scr, run->nthreads);
        /* h = act(h_proj(O * silu(r))) */
        real *hin = scratch;
        mega_silu_times(hin, A->base + D, Pw, A->O, R, D);
        mega_linear_forward(A->hpre, hin, W + X->o_w, W + X->o_b, R, D, D);
        mega_act_forward(c->activation, A->h, A->hpre, R * D);
        if (train && c->dropout > 0) mega_dropout(A->h, A->h, R * D, c->dropout, mega__subkey(run->key, SITE_OUT));
        /* out = x + u * (h - x) */
        mega_gate_mix(c->prenorm ? y : A->xn, A->base, Pw, A->h, x, R, D);
    } else {
        mega_linear_forward(A->v, e, W + X->v_w, W + X->v_b, Rs, D, D);
        if (is_abc(X)) MEGA_TRY(abc_core_forward(X, W, A, e, kpad, B, Tq, Tk, run, attn_scr));
        for (int h = 0; h < X->H && !is_abc(X); h++) {
            mega_attn_k k = kernel(X, NULL, 1, run, h);
            const size_t o = (size_t)h * X->dh;
            mega_attn_cross_forward(&k, A->O + o, A->lse + (size_t)h * R, A->base + o, A->k + o, A->v + o, kpad, B, Tq,
                                    Tk, 0, attn_scr, run->nthreads);
        }
        mega_linear_forward(A->h, A->O, W + X->o_w, W + X->o_b, R, D, D);
        if (train && c->dropout > 0) mega_dropout(A->h, A->h, R * D, c->dropout, mega__subkey(run->key, SITE_OUT));
        real *out = c->prenorm ? y : A->xn;
        for (size_t i = 0; i < R * D; i++) out[i] = x[i] + A->h[i];
    }
    if (!c->prenorm) mega_seqnorm_forward(&X->norm, W, y, A->nstat, A->xn, R, train, run->update_stats, run->sync);
    return MEGA_OK;
}

void mega_xattn_backward(const mega_xattn *X, const real *W, real *dW, const mega_xattn_acts *A, real *dx, real *dE,
                         const real *dy, const real *x, const real *e, const uint8_t *kpad, int B, int Tq, int Tk,
                         const mega_run *run, real *scratch) {
    const mega_block_config *c = X->cfg;
    const size_t R = (size_t)B * Tq, Rs = (size_t)B * Tk, D = (size_t)c->embed_dim, Pw = PW(X), Kw = KW(X);
    const int train = run->training;
    mega_bump b = {scratch, 0};
    real *g = mega_bump_take(&b, R * D), *hin = mega_bump_take(&b, R * D), *dh = mega_bump_take(&b, R * D);
    real *dxq = mega_bump_take(&b, R * D), *dbase = mega_bump_take(&b, R * Pw), *dk = mega_bump_take(&b, Rs * Kw);
    real *dv = mega_bump_take(&b, Rs * D);
    const int gated = X->kind == MEGA_XATTN_GATED;
    const int Mc = gated ? A->Mc : 1;
    real *dbtab = mega_bump_take(&b, 2 * (size_t)Mc + 16);
    real *attn_scr = scratch + b.off;
    /* through the post-norm */
    if (!c->prenorm)
        mega_seqnorm_backward(&X->norm, W, dW, g, dy, A->xn, A->nstat, R, train, 0, run->sync);
    else
        memcpy(g, dy, R * D * sizeof(real));
    memset(dbase, 0, R * Pw * sizeof(real));
    memset(dk, 0, Rs * Kw * sizeof(real));
    memset(dv, 0, Rs * D * sizeof(real));
    if (gated) {
        /* out = x + u (h - x): dx = g (1 - u), dh = g u, du_pre = g (h - x) u (1 - u) */
        mega_gate_mix_backward(dx, dh, dbase, Pw, g, A->base, A->h, x, R, D);
        if (train && c->dropout > 0) mega_dropout(dh, dh, R * D, c->dropout, mega__subkey(run->key, SITE_OUT));
        mega_act_backward(c->activation, dh, dh, A->hpre, R * D);
        mega_silu_times(hin, A->base + D, Pw, A->O, R, D);
        /* dhin (into g, no longer needed) = dhpre Wh */
        mega_linear_backward(g, dW + X->o_w, dW + X->o_b, dh, hin, W + X->o_w, R, D, D, 0);
        /* dO = dhin * silu(r) (into dh), dr_pre = dhin * O * silu'(r) */
#pragma omp parallel for schedule(static) if (R * D > MEGA_PAR_MIN)
        for (size_t r = 0; r < R; r++) {
            const real *rr = A->base + r * Pw + D, *o = A->O + r * D, *gi = g + r * D;
            real *dO = dh + r * D, *dr = dbase + r * Pw + D;
            mega_sigmoid_row(dr, rr, D); /* sigmoid(r_pre), vectorised; dr_pre replaces it */
            for (size_t d = 0; d < D; d++) {
                const real rv = rr[d], sg = dr[d];
                dO[d] = gi[d] * (rv * sg);                                 /* silu(r) */
                dr[d] = gi[d] * o[d] * mega_silu_grad_s(rv, sg); /* silu'(r) */
            }
        }
        memset(dbtab, 0, (2 * (size_t)Mc - 1) * sizeof(real));
        mega_attn_k k = kernel(X, A->btab, Mc, run, 0);
        mega_attn_cross_backward(&k, dbase + 2 * D, dk, dv, dbtab, dh, A->base + 2 * D, A->k, A->v, A->lse, kpad, B, Tq,
                                 Tk, 0, attn_scr, run->nthreads);
        mega_relpos_backward(&X->rp, W, dW, dbtab, Mc);
        if (train && c->hidden_dropout > 0) mega_dropout(dv, dv, Rs * D, c->hidden_dropout, mega__subkey(run->key, SITE_HIDDEN));
        mega_act_backward(c->activation, dv, dv, A->vpre, Rs * D);
    } else {
        memcpy(dx, g, R * D * sizeof(real)); /* residual */
        if (train && c->dropout > 0) mega_dropout(g, g, R * D, c->dropout, mega__subkey(run->key, SITE_OUT));
        mega_linear_backward(dh, dW + X->o_w, dW + X->o_b, g, A->O, W + X->o_w, R, D, D, 0);
        if (is_abc(X)) abc_core_backward(X, W, dW, A, dbase, dk, dv, dE, dh, e, kpad, B, Tq, Tk, run, attn_scr);
        for (int h = 0; h < X->H && !is_abc(X); h++) {
            mega_attn_k k = kernel(X, NULL, 1, run, h);
            const size_t o = (size_t)h * X->dh;
            mega_attn_cross_backward(&k, dbase + o, dk + o, dv + o, NULL, dh + o, A->base + o, A->k + o, A->v + o,
                                     A->lse + (size_t)h * R, kpad, B, Tq, Tk, 0, attn_scr, run->nthreads);
        }
    }
    /* the encoder side (accumulated into dE) and the query projection */
    mega_linear_backward(dE, dW + X->v_w, dW + X->v_b, dv, e, W + X->v_w, Rs, D, D, 1);
    mega_linear_backward(dE, dW + X->k_w, dW + X->k_b, dk, e, W + X->k_w, Rs, D, Kw, 1);
    const real *xq = c->prenorm ? A->xn : x;
    mega_linear_backward(dxq, dW + X->q_w, dW + X->q_b, dbase, xq, W + X->q_w, R, D, Pw, 0);
    if (c->prenorm)
        mega_seqnorm_backward(&X->norm, W, dW, dx, dxq, x, A->nstat, R, train, 1, run->sync);
    else
        for (size_t i = 0; i < R * D; i++) dx[i] += dxq[i];
}

/* ---- streaming ----------------------------------------------------------------------------- */

static size_t state_layout(const mega_xattn *X, mega_xattn_state *S, real *mem, int B, int Tkmax, int tmax) {
    const size_t Rs = (size_t)B * Tkmax, D = (size_t)X->cfg->embed_dim;
    mega_bump b = {mem, 0};
    memset(S, 0, sizeof *S);
    S->B = B, S->Tkmax = Tkmax, S->tmax = tmax, S->mem = mem;
    if (is_abc(X)) { /* the memories only: nothing grows with the source */
        const size_t nD = (size_t)B * X->n * D;
        S->k = mega_bump_take(&b, nD);
        S->v = mega_bump_take(&b, nD);
        S->kpad = (uint8_t *)mega_bump_take(&b, ((size_t)B * X->n + sizeof(real) - 1) / sizeof(real));
        return b.off;
    }
    S->k = mega_bump_take(&b, Rs * KW(X));
    S->v = mega_bump_take(&b, Rs * D);
    S->kpad = (uint8_t *)mega_bump_take(&b, (Rs + sizeof(real) - 1) / sizeof(real));
    S->btab = mega_bump_take(&b, btab_len(X, tmax, Tkmax));
    return b.off;
}

size_t mega_xattn_state_size(const mega_xattn *X, int B, int Tkmax, int tmax) {
    mega_xattn_state S;
    return state_layout(X, &S, NULL, B, Tkmax, tmax);
}

void mega_xattn_state_view(const mega_xattn *X, mega_xattn_state *S, real *mem, int B, int Tkmax, int tmax) {
    state_layout(X, S, mem, B, Tkmax, tmax);
}

size_t mega_xattn_step_scratch(const mega_xattn *X, int B, int Tkmax) {
    const size_t D = (size_t)X->cfg->embed_dim;
    mega_attn_k k = kernel(X, NULL, (int)((btab_len(X, 1, Tkmax) + 1) / 2), NULL, 0);
    const int nt = MEGA_MAX(1, mega_get_threads());
    if (is_abc(X)) { /* the step's q, O, h, P; the state's construction: k, v [B Tkmax, D], two controls */
        const size_t step = 5 * rnd((size_t)B * D) + rnd((size_t)B * X->H * X->n) + rnd(mega_seqnorm_stat_size(&X->norm, (size_t)B));
        const size_t init = 2 * rnd((size_t)B * Tkmax * D) + 2 * rnd(phi_len(X, B, Tkmax));
        return MEGA_MAX(step, init) + 64;
    }
    return rnd((size_t)B * PW(X)) + 4 * rnd((size_t)B * D) + rnd(mega_seqnorm_stat_size(&X->norm, (size_t)B)) +
           mega_attn_cross_scratch(&k, Tkmax) * (size_t)nt + 64;
}

/* the memories K~, V~ of e (ABC paper section 3), once per source */
static mega_status abc_state_init(const mega_xattn *X, const real *W, mega_xattn_state *S, const real *e,
                                  const uint8_t *kpad, int Tk, real *scratch) {
    const int B = S->B, H = X->H;
    const size_t Rs = (size_t)B * Tk, D = (size_t)X->cfg->embed_dim, nd = (size_t)X->n * X->dh;
    mega_bump b = {scratch, 0};
    real *k = mega_bump_take(&b, Rs * D), *v = mega_bump_take(&b, Rs * D), *phk = mega_bump_take(&b, phi_len(X, B, Tk));
    real *phv = X->kind == MEGA_XATTN_ABC_WINDOW ? phk : mega_bump_take(&b, phi_len(X, B, Tk));
    mega_linear_forward(k, e, W + X->k_w, W + X->k_b, Rs, D, D);
    mega_linear_forward(v, e, W + X->v_w, W + X->v_b, Rs, D, D);
    MEGA_TRY(abc_control(X, W, phk, phv, S->kpad, e, kpad, B, Tk));
    const mega_abc_k kk = abc_kernel(X, 1, Tk, S->kpad, NULL);
    const long units = (long)B * H;
#pragma omp parallel for schedule(static) if (units > 1 && (size_t)units * nd * Tk > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        const int bb = (int)(u / H), h = (int)(u % H);
        mega_abc_bidir_memory(&kk, S->k + (size_t)u * nd, S->v + (size_t)u * nd, k, v, phi_of(X, phk, bb, h, Tk),
                              phi_of(X, phv, bb, h, Tk), (size_t)Tk, bb, h);
    }
    S->any_pad = 0;
    return MEGA_OK;
}

mega_status mega_xattn_state_init(const mega_xattn *X, const real *W, mega_xattn_state *S, const real *e,
                                  const uint8_t *kpad, int Tk, real *scratch) {
    if (Tk < 1 || Tk > S->Tkmax)
        MEGA_FAIL(MEGA_ERR_INVALID, "source length %d is outside the cross-attention state's [1, %d]", Tk, S->Tkmax);
    const size_t Rs = (size_t)S->B * Tk, D = (size_t)X->cfg->embed_dim;
    S->Tk = Tk;
    if (is_abc(X)) return abc_state_init(X, W, S, e, kpad, Tk, scratch);
    mega_linear_forward(S->k, e, W + X->k_w, W + X->k_b, Rs, D, KW(X));
    mega_linear_forward(S->v, e, W + X->v_w, W + X->v_b, Rs, D, D);
    if (X->kind == MEGA_XATTN_GATED) {
        mega_act_forward(X->cfg->activation, S->v, S->v, Rs * D);
        MEGA_TRY(mega_relpos_table(&X->rp, W, MEGA_MAX(S->tmax, Tk), S->btab, &S->Mc));
    }
    S->any_pad = 0;
    for (size_t i = 0; i < Rs; i++) S->any_pad |= (S->kpad[i] = kpad ? kpad[i] : 0);
    return MEGA_OK;
}

mega_status mega_xattn_step(const mega_xattn *X, const real *W, const mega_xattn_state *S, real *y, const real *x,
                            int t, real *scratch) {
    const mega_block_config *c = X->cfg;
    const int B = S->B, Tk = S->Tk;
    const size_t R = (size_t)B, D = (size_t)c->embed_dim, Pw = PW(X);
    if (t < 0 || t >= S->tmax) MEGA_FAIL(MEGA_ERR_INVALID, "decoding position %d is beyond the state's %d positions", t, S->tmax);
    mega_bump b = {scratch, 0};
    real *base = mega_bump_take(&b, R * Pw), *xn = mega_bump_take(&b, R * D), *O = mega_bump_take(&b, R * D);
    real *hin = mega_bump_take(&b, R * D), *h = mega_bump_take(&b, R * D);
    real *st = mega_bump_take(&b, mega_seqnorm_stat_size(&X->norm, R));
    real *attn_scr = scratch + b.off;
    const uint8_t *kpad = S->any_pad ? S->kpad : NULL;
    const int nt = MEGA_MAX(1, mega_get_threads());
    const real *xq = x;
    if (c->prenorm) {
        mega_seqnorm_forward(&X->norm, (real *)W, xn, st, x, R, 0, 0, NULL);
        xq = xn;
    }
    mega_linear_step(base, xq, W + X->q_w, W + X->q_b, R, D, Pw);
    if (X->kind == MEGA_XATTN_GATED) {
        mega_attn_k k = kernel(X, S->btab, S->Mc, NULL, 0);
        mega_attn_cross_forward(&k, O, NULL, base + 2 * D, S->k, S->v, kpad, B, 1, Tk, t, attn_scr, nt);
        for (size_t r = 0; r < R; r++)
            for (size_t d = 0; d < D; d++) hin[r * D + d] = O[r * D + d] * mega_silu(base[r * Pw + D + d]);
        mega_linear_step(h, hin, W + X->o_w, W + X->o_b, R, D, D);
        mega_act_forward(c->activation, h, h, R * D);
        for (size_t r = 0; r < R; r++)
            for (size_t d = 0; d < D; d++) {
                const size_t i = r * D + d;
                y[i] = x[i] + mega_sigmoid(base[r * Pw + d]) * (h[i] - x[i]);
            }
    } else if (is_abc(X)) {
        /* each head reads its n slots: O(n) whatever the source length */
        real *P = mega_bump_take(&b, R * X->H * (size_t)X->n);
        const mega_abc_k k = abc_kernel(X, 1, Tk, S->kpad, NULL);
        const size_t nd = (size_t)X->n * X->dh;
        for (long u = 0; u < (long)B * X->H; u++)
            mega_abc_bidir_read(&k, O, P, S->k + (size_t)u * nd, S->v + (size_t)u * nd, base, (int)(u / X->H),
                                (int)(u % X->H), NULL);
        mega_linear_step(h, O, W + X->o_w, W + X->o_b, R, D, D);
        for (size_t i = 0; i < R * D; i++) y[i] = x[i] + h[i];
    } else {
        for (int hd = 0; hd < X->H; hd++) {
            mega_attn_k k = kernel(X, NULL, 1, NULL, hd);
            const size_t o = (size_t)hd * X->dh;
            mega_attn_cross_forward(&k, O + o, NULL, base + o, S->k + o, S->v + o, kpad, B, 1, Tk, t, attn_scr, nt);
        }
        mega_linear_step(h, O, W + X->o_w, W + X->o_b, R, D, D);
        for (size_t i = 0; i < R * D; i++) y[i] = x[i] + h[i];
    }
    if (!c->prenorm) mega_seqnorm_forward(&X->norm, (real *)W, y, st, y, R, 0, 0, NULL);
    return MEGA_OK;
}
