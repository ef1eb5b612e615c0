/*
 * The ABC token mixers (ABC, arXiv 2110.02488) behind the mixer interface (mixer.h): abc-window,
 * abc-linformer, abc-mlp. Each is a "core" (self_residual = 0) that the block wraps in the
 * standard residual sublayer; parameters are "<prefix>mixer.<name>".
 *
 *   Q = X Wq^T + bq, K = X Wk^T + bk, V = X Wv^T + bv       (as mha; H heads of d = D/H)
 *   per head: o_t = V~^T softmax(K~ q_t / sqrt d)           (ABC; memory of n = cfg->memory_size slots)
 *   Y = concat_h(o) Wo^T + bo
 *
 * The memories (the ABC paper's instances):
 *   abc-window     causal only: the last n tokens (sliding-window attention of width n; empty
 *                  slots masked by default, the literal form via mega_abc_set_mask_empty).
 *                  Bidirectional is rejected: there is no shared-memory form, its encoder
 *                  analogue is banded local attention (the `local` mixer).
 *   abc-linformer  phi^K_i = E[:, i], phi^V_i = F[:, i], E, F in R^{n x N_max} (N_max = cfg->max_len,
 *                  names compress_k / compress_v as fairseq): bidirectional K~ = E[:, :L] K;
 *                  causal K~_t = K~_{t-1} + E[:, t] k_t^T. Pad keys are zeroed before the
 *                  compression; a position >= N_max is an error.
 *   abc-mlp        phi = softmax over positions (per slot) of l = X W_phi^T, W_phi in R^{H n x D},
 *                  separate for K and V (phi_k / phi_v; project choices: no bias, N(0, 0.02)):
 *                  bidirectional over the valid positions; causal by the normalised cumulative
 *                  (logaddexp) recurrence (fla's naive_recurrent_abc, in log space) with our exact
 *                  reverse scan.
 *
 * Saved activations (A->p): q, k, v, o [B,T,D]; P [B,T,H,n] slot weights; bidirectional memories
 * K~, V~ [B,H,n,d]; abc-mlp: Phi_K^T, Phi_V^T [B,H n,T] (bidirectional) or the logits l_K, l_V
 * [B,T,H n] (causal).
 * Streaming state: window: ring buffers of keys and values [B,n,D] x 2; Linformer:
 * K~, V~ [B,H,n,d] (+ the position counter); ABC-MLP: K~, V~ and log Z_K, log Z_V [B,H,n].
 */
#include "layers/mixer.h"
#include "ops/abc.h"
#include "ops/ops.h"
#ifdef _OPENMP
#include <omp.h>
#endif

enum { C_WIN, C_LIN, C_MLP }; /* the memory control, fixed by the kind's declare entry */
enum { SITE_ATTN = 31 };      /* dropout site of the slot weights (the block's sublayer dropout is 11) */

typedef struct {
    const mega_block_config *cfg;
    int ctl;                /* C_* */
    int H, n, dh;           /* heads, memory slots, head width */
    int mask;               /* abc-window: mask the empty slots (default) */
    int nmax;               /* abc-linformer: columns of E and F (max-len) */
    mega_qkvo proj;         /* q/k/v/out_proj */
    size_t ck, cv;          /* E and F (Linformer) or W_phi for K and V (MLP) */
} abc_layer;
MEGA_MIXER_LAYER_FITS(abc_layer);

/* saved activations: q, k, v, o [B,T,D]; P [B,T,H,n] slot weights; bidirectional memories
 * km, vm [B,H,n,d]; abc-mlp: Phi_K^T, Phi_V^T [B,H n,T] (bidirectional) or the logits [B,T,H n] */
typedef struct {
    real *q, *k, *v, *o, *P, *km, *vm, *ck, *cv;
} abc_acts;

static int is_win(const abc_layer *L) { return L->ctl == C_WIN; }
static int is_lin(const abc_layer *L) { return L->ctl == C_LIN; }
static int is_mlp(const abc_layer *L) { return L->ctl == C_MLP; }

void mega_abc_set_mask_empty(void *layer, int on) { ((abc_layer *)layer)->mask = on ? 1 : 0; }

static void abc_resolve(mega_block_config *c) {
    if (c->heads == 0) c->heads = mega__default_heads(c->embed_dim, 0);
    if (c->memory_size == 0) c->memory_size = MEGA_DEFAULT_MEMORY;
}
static void lin_resolve(mega_block_config *c) {
    abc_resolve(c);
    if (c->max_len == 0) c->max_len = mega__default_max_len(c);
}

static mega_status abc_check(const mega_block_config *c) {
    const char *nm = mega_mixer_name(c->mixer);
    if (c->heads < 1 || c->embed_dim % c->heads)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s: heads (%d) must be positive and divide embed-dim (%d)", nm, c->heads, c->embed_dim);
    if (c->memory_size < 1 || c->memory_size > 65536)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s needs --memory-size n in [1, 65536] (memory slots per head), got %d", nm, c->memory_size);
    if (c->pos != MEGA_POS_NONE)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED,
                  "%s: positional scheme '%s' is not available for ABC mixers (memory slots have no token distances)",
                  nm, mega_pos_name(c->pos));
    if (c->attn_window)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s: --attn-window does not apply to ABC (the memory size is its window)", nm);
    if (c->log_n_scaling)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s: log-n scaling does not apply to ABC (it counts visible tokens, not memory slots)",
                  nm);
    return MEGA_OK;
}
static mega_status win_check(const mega_block_config *c) {
    if (c->bidirectional)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "abc-window has no bidirectional form: a window memory is per query, not "
                                        "shared; use --mixer local for banded local attention");
    return abc_check(c);
}
static mega_status lin_check(const mega_block_config *c) {
    if (c->max_len < 1 || c->max_len > (1 << 24))
        MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer needs --max-len in [1, 2^24] (the N_max columns of E and F), got %d",
                  c->max_len);
    return abc_check(c);
}

static mega_status declare(abc_layer *L, const mega_block_config *c, mega_params *P, const char *prefix, int ctl) {
    memset(L, 0, sizeof *L);
    L->cfg = c, L->ctl = ctl;
    const int64_t D = c->embed_dim, H = c->heads, n = c->memory_size;
    L->H = c->heads, L->n = c->memory_size, L->dh = c->embed_dim / c->heads;
    L->mask = 1; /* mask_empty_slots (project extension), on by default */
    L->nmax = is_lin(L) ? c->max_len : 0;
    MEGA_TRY(mega_qkvo_declare(&L->proj, P, prefix, "mixer.", (int)D));
    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    if (is_lin(L)) {
        MEGA_TRY(MEGA_PADD(P, pre, "compress_k.weight", MEGA_P_DECAY, &L->ck, n, (int64_t)c->max_len));
        MEGA_TRY(MEGA_PADD(P, pre, "compress_v.weight", MEGA_P_DECAY, &L->cv, n, (int64_t)c->max_len));
    } else if (is_mlp(L)) {
        MEGA_TRY(MEGA_PADD(P, pre, "phi_k.weight", MEGA_P_DECAY, &L->ck, H * n, D));
        MEGA_TRY(MEGA_PADD(P, pre, "phi_v.weight", MEGA_P_DECAY, &L->cv, H * n, D));
    }
    return MEGA_OK;
}
MEGA_DECLARE_VARIANT(win_declare, declare, C_WIN)
MEGA_DECLARE_VARIANT(lin_declare, declare, C_LIN)
MEGA_DECLARE_VARIANT(mlp_declare, declare, C_MLP)

static void abc_init(const void *layer, real *W, mega_rng *rng) {
    const abc_layer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim, Hn = (size_t)c->heads * c->memory_size, n = (size_t)c->memory_size;
    /* as mha (fairseq MultiheadAttention.reset_parameters): q/k/v xavier-uniform with gain 2^-1/2,
     * out_proj xavier-uniform; zero biases (project choice) */
    mega_qkvo_init(&L->proj, W, (int)D, rng);
    if (is_lin(L)) { /* fairseq MultiheadLinearAttention: xavier-uniform, gain 2^-1/2 */
        const size_t N = (size_t)c->max_len;
        mega_fill_xavier(W + L->ck, n, N, sqrt(0.5), rng);
        mega_fill_xavier(W + L->cv, n, N, sqrt(0.5), rng);
    } else if (is_mlp(L)) { /* project choice: N(0, 0.02), no bias */
        mega_fill_normal(W + L->ck, Hn * D, 0, 0.02, rng);
        mega_fill_normal(W + L->cv, Hn * D, 0, 0.02, rng);
    }
}

static size_t acts_view(const abc_layer *L, abc_acts *A, real *base, int B, int T) {
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Hn = (size_t)L->H * L->n;
    mega_bump b = {base, 0};
    memset(A, 0, sizeof *A);
    A->q = mega_bump_take(&b, R * D);
    A->k = mega_bump_take(&b, R * D);
    A->v = mega_bump_take(&b, R * D);
    A->o = mega_bump_take(&b, R * D);
    A->P = mega_bump_take(&b, R * Hn);
    if (c->bidirectional) {
        A->km = mega_bump_take(&b, (size_t)B * L->n * D);
        A->vm = mega_bump_take(&b, (size_t)B * L->n * D);
    }
    if (is_mlp(L)) {
        A->ck = mega_bump_take(&b, R * Hn);
        A->cv = mega_bump_take(&b, R * Hn);
    }
    return b.off;
}
static size_t abc_acts_size(const void *L, int B, int T) {
    abc_acts A;
    return acts_view(L, &A, NULL, B, T);
}

static mega_abc_k kernel_of(const abc_layer *L, int T, const mega_run *run) {
    const mega_block_config *c = L->cfg;
    mega_abc_k k;
    memset(&k, 0, sizeof k);
    k.T = T, k.n = L->n, k.d = L->dh, k.H = L->H;
    k.mode = is_win(L) ? MEGA_ABC_WINDOW : is_lin(L) ? MEGA_ABC_SUM : MEGA_ABC_LOGZ;
    k.mask_empty = L->mask;
    k.scale = (real)(1.0 / sqrt((double)k.d));
    k.p_drop = run && run->training ? c->attention_dropout : 0;
    k.key = run ? mega__subkey(run->key, SITE_ATTN) : 0;
    return k;
}

/* per-unit temporary reals: the kernel's own plus (causal scan) the running memory */
static size_t unit_tmp(const abc_layer *L, const mega_abc_k *k, int backward) {
    const size_t nd = (size_t)k->n * k->d;
    if (is_win(L)) return mega_abc_window_tmp(k);
    if (L->cfg->bidirectional) return mega_abc_bidir_tmp(k);
    size_t f = mega_abc_scan_fwd_tmp(k) + 2 * nd + 2 * (size_t)k->n + 16;
    return backward ? MEGA_MAX(f, mega_abc_scan_bwd_tmp(k)) : f;
}

/* scratch layout of forward / backward (count when base is NULL):
 *   dO, dQ, dK, dV [R,D]; dck, dcv [B,T,H n] (or [B,H n,T]); Phi_E, Phi_F (Linformer: [B,n,T]
 *   bidirectional, [T,n] causal); per-thread unit temporaries */
typedef struct {
    real *dO, *dQ, *dK, *dV, *dck, *dcv, *phk, *phv, *thr;
    size_t per;
} abc_scr;

static size_t scr_layout(const abc_layer *L, int B, int T, int nt, real *base, abc_scr *s) {
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Hn = (size_t)c->heads * c->memory_size, n = (size_t)c->memory_size;
    mega_bump b = {base, 0};
    mega_abc_k k = kernel_of(L, T, NULL);
    memset(s, 0, sizeof *s);
    s->dO = mega_bump_take(&b, R * D);
    s->dQ = mega_bump_take(&b, R * D);
    s->dK = mega_bump_take(&b, R * D);
    s->dV = mega_bump_take(&b, R * D);
    if (!is_win(L)) {
        s->dck = mega_bump_take(&b, R * Hn);
        s->dcv = mega_bump_take(&b, R * Hn);
    }
    if (is_lin(L)) {
        const size_t ph = c->bidirectional ? (size_t)B * n * T : (size_t)T * n;
        s->phk = mega_bump_take(&b, ph);
        s->phv = mega_bump_take(&b, ph);
    }
    s->per = (unit_tmp(L, &k, 1) + 15) & ~(size_t)15;
    s->thr = mega_bump_take(&b, s->per * (size_t)(nt > 0 ? nt : 1));
    return b.off;
}

static size_t abc_scratch(const void *L, int B, int T, int nthreads) {
    abc_scr s;
    return scr_layout(L, B, T, nthreads, NULL, &s) + 16;
}

/* Linformer control, causal rows [T, n] = E[:, pos + t]^T (bidirectional: mega_abc_lin_phi) */
static void lin_rows(const abc_layer *L, const real *E, real *rows, int64_t pos, int T) {
    const size_t n = (size_t)L->n, N = (size_t)L->nmax;
    for (int t = 0; t < T; t++)
        for (size_t j = 0; j < n; j++) rows[(size_t)t * n + j] = E[j * N + (size_t)pos + (size_t)t];
}

/* The control of the memory for the kernels: bidirectional Phi^T of unit (b, h) at
 * phk + b*ph_b + h*ph_h (Linformer: E[:, :T] with pad columns zeroed, computed here; MLP: the
 * forward's saved softmax), or, causal, the per-position control rows set in the kernel
 * description kk (Linformer: E's columns, computed here; MLP: the saved logits). */
typedef struct {
    const real *phk, *phv;
    size_t ph_b, ph_h;
} abc_ctl;

static abc_ctl control_of(const abc_layer *L, const real *W, const abc_acts *A, const abc_scr *s, mega_abc_k *kk,
                          const uint8_t *pad, int B, int T) {
    const size_t n = (size_t)L->n, Hn = (size_t)L->H * L->n;
    abc_ctl ctl = {NULL, NULL, 0, 0};
    const int bidir = L->cfg->bidirectional;
    if (is_lin(L)) {
        if (bidir) {
            mega_abc_lin_phi(W + L->ck, (size_t)L->nmax, L->n, s->phk, pad, B, T);
            mega_abc_lin_phi(W + L->cv, (size_t)L->nmax, L->n, s->phv, pad, B, T);
            ctl.phk = s->phk, ctl.phv = s->phv, ctl.ph_b = n * T;
        } else {
            lin_rows(L, W + L->ck, s->phk, 0, T);
            lin_rows(L, W + L->cv, s->phv, 0, T);
            kk->ck = s->phk, kk->cv = s->phv, kk->cs_b = 0, kk->cs_t = n, kk->cs_h = 0;
        }
    } else if (is_mlp(L)) {
        if (bidir) ctl.phk = A->ck, ctl.phv = A->cv, ctl.ph_b = Hn * T, ctl.ph_h = n * T;
        else kk->ck = A->ck, kk->cv = A->cv, kk->cs_b = (size_t)T * Hn, kk->cs_t = Hn, kk->cs_h = n;
    }
    return ctl;
}

static mega_status abc_forward(const void *layer, real *W, real *acts, real *y, const real *x, const uint8_t *pad,
                               int B, int T, const mega_run *run, real *scratch) {
    const abc_layer *L = layer;
    abc_acts A;
    acts_view(L, &A, acts, B, T);
    const mega_block_config *c = L->cfg;
    const int H = L->H, n = L->n, dh = L->dh;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Hn = (size_t)H * n, nd = (size_t)n * dh;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    if (is_lin(L) && T > L->nmax)
        MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer: sequence length %d exceeds max-len %d (E and F have max-len columns)",
                  T, L->nmax);
    real *q = A.q, *k = A.k, *v = A.v, *o = A.o, *P = A.P;
    mega_linear_forward(q, x, W + L->proj.w[MEGA_Q], W + L->proj.b[MEGA_Q], R, D, D);
    mega_linear_forward(k, x, W + L->proj.w[MEGA_K], W + L->proj.b[MEGA_K], R, D, D);
    mega_linear_forward(v, x, W + L->proj.w[MEGA_V], W + L->proj.b[MEGA_V], R, D, D);
    abc_scr s;
    scr_layout(L, B, T, nt, scratch, &s);
    mega_abc_k kk = kernel_of(L, T, run);
    if (is_mlp(L)) { /* the learned control of the memory: Phi^T (bidirectional) or its logits */
        if (c->bidirectional) {
            mega_abc_mlp_phi(W + L->ck, A.ck, x, pad, B, T, Hn, D);
            mega_abc_mlp_phi(W + L->cv, A.cv, x, pad, B, T, Hn, D);
        } else {
            mega_linear_forward(A.ck, x, W + L->ck, NULL, R, D, Hn);
            mega_linear_forward(A.cv, x, W + L->cv, NULL, R, D, Hn);
        }
    }
    abc_ctl ctl = control_of(L, W, &A, &s, &kk, pad, B, T);
    const long units = (long)B * H;
    const int win = is_win(L), bidir = c->bidirectional;
#pragma omp parallel for schedule(static) num_threads(nt) if (units > 1 && R * Hn * (size_t)dh > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        const int tid = mega__thread_id();
        real *tmp = s.thr + s.per * (size_t)tid;
        const int b = (int)(u / H), h = (int)(u % H);
        if (win) {
            mega_abc_window_forward(&kk, o, P, q, k, v, pad, b, h);
        } else if (bidir) {
            real *Km = A.km + (size_t)u * nd, *Vm = A.vm + (size_t)u * nd;
            mega_abc_bidir_forward(&kk, o, P, Km, Vm, q, k, v, ctl.phk + (size_t)b * ctl.ph_b + (size_t)h * ctl.ph_h,
                                   ctl.phv + (size_t)b * ctl.ph_b + (size_t)h * ctl.ph_h, (size_t)T, b, h, tmp);
        } else {
            real *Mk = tmp, *Mv = Mk + nd, *lzk = Mv + nd, *lzv = lzk + n, *rest = lzv + n;
            for (size_t i = 0; i < 2 * nd; i++) Mk[i] = 0;
            for (int j = 0; j < n; j++) lzk[j] = lzv[j] = -INFINITY;
            mega_abc_scan_forward(&kk, o, P, q, k, v, pad, b, h, Mk, Mv, lzk, lzv, rest);
        }
    }
    mega_linear_forward(y, o, W + L->proj.w[MEGA_O], W + L->proj.b[MEGA_O], R, D, D);
    return MEGA_OK;
}

static void abc_backward(const void *layer, const real *W, real *dW, const real *acts, real *dx, const real *dy,
                         const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const abc_layer *L = layer;
    abc_acts A;
    acts_view(L, &A, (real *)(uintptr_t)acts, B, T);
    const mega_block_config *c = L->cfg;
    const int H = L->H, n = L->n, dh = L->dh;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim, Hn = (size_t)H * n, nd = (size_t)n * dh;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    const real *q = A.q, *k = A.k, *v = A.v, *P = A.P;
    abc_scr s;
    scr_layout(L, B, T, nt, scratch, &s);
    mega_abc_k kk = kernel_of(L, T, run);
    /* Y = O Wo^T + bo */
    mega_linear_backward(s.dO, dW + L->proj.w[MEGA_O], dW + L->proj.b[MEGA_O], dy, A.o, W + L->proj.w[MEGA_O], R, D, D, 0);
    abc_ctl ctl = control_of(L, W, &A, &s, &kk, pad, B, T);
    const long units = (long)B * H;
    const int win = is_win(L), bidir = c->bidirectional;
#pragma omp parallel for schedule(static) num_threads(nt) if (units > 1 && R * Hn * (size_t)dh > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        const int tid = mega__thread_id();
        real *tmp = s.thr + s.per * (size_t)tid;
        const int b = (int)(u / H), h = (int)(u % H);
        if (win) {
            mega_abc_window_backward(&kk, s.dQ, s.dK, s.dV, s.dO, P, q, k, v, pad, b, h, tmp);
        } else if (bidir) {
            /* dL/dPhi^T of the unit: [B, H, n, T] */
            const size_t du = (size_t)u * n * T;
            mega_abc_bidir_backward(&kk, s.dQ, s.dK, s.dV, s.dck + du, s.dcv + du, (size_t)T, s.dO, P,
                                    A.km + (size_t)u * nd, A.vm + (size_t)u * nd, q, k, v,
                                    ctl.phk + (size_t)b * ctl.ph_b + (size_t)h * ctl.ph_h,
                                    ctl.phv + (size_t)b * ctl.ph_b + (size_t)h * ctl.ph_h,
                                    (size_t)T, b, h, tmp);
        } else {
            mega_abc_scan_backward(&kk, s.dQ, s.dK, s.dV, s.dck, s.dcv, s.dO, P, q, k, v, pad, b, h, tmp);
        }
    }
    /* the control parameters */
    if (is_lin(L)) {
        /* dE[j, t] += sum over b, h of dL/dphi (bidirectional: only valid columns; causal: the
         * scan already wrote 0 at pads) */
        const size_t N = (size_t)L->nmax;
        for (int which = 0; which < 2; which++) {
            real *dE = dW + (which ? L->cv : L->ck);
            const real *g = which ? s.dcv : s.dck;
            if (bidir) {
                mega_abc_lin_phi_backward(dE, N, g, pad, B, H, n, T);
                continue;
            }
#pragma omp parallel for schedule(static) if (R * Hn > MEGA_PAR_MIN)
            for (int j = 0; j < n; j++)
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < H; h++)
                        for (int t = 0; t < T; t++)
                            dE[(size_t)j * N + t] += g[(((size_t)b * T + t) * H + h) * n + j];
        }
    }
    /* X -> Q, K, V */
    mega_linear_backward(dx, dW + L->proj.w[MEGA_Q], dW + L->proj.b[MEGA_Q], s.dQ, x, W + L->proj.w[MEGA_Q], R, D, D, 0);
    mega_linear_backward(dx, dW + L->proj.w[MEGA_K], dW + L->proj.b[MEGA_K], s.dK, x, W + L->proj.w[MEGA_K], R, D, D, 1);
    mega_linear_backward(dx, dW + L->proj.w[MEGA_V], dW + L->proj.b[MEGA_V], s.dV, x, W + L->proj.w[MEGA_V], R, D, D, 1);
    if (is_mlp(L)) {
        for (int which = 0; which < 2; which++) {
            const size_t oW = (which ? L->cv : L->ck);
            real *g = which ? s.dcv : s.dck;
            if (bidir) {
                mega_abc_mlp_phi_backward(W + oW, dW + oW, dx, g, which ? A.cv : A.ck, x, B, T, Hn, D);
            } else {
                mega_linear_backward(dx, dW + oW, NULL, g, x, W + oW, R, D, Hn, 1);
            }
        }
    }
}

/* ---- streaming -------------------------------------------------------------------------- */

/* streaming state: window: ring buffers of keys and values [B,n,D] x 2; Linformer: K~, V~
 * [B,H,n,d]; ABC-MLP: K~, V~ and log Z_K, log Z_V [B,H,n] (lz: both, the V half after the K) */
typedef struct {
    real *km, *vm, *lz;
    size_t nm, nlz; /* reals of km (= vm) and of lz */
} abc_state;

static size_t state_view(const abc_layer *L, abc_state *S, real *mem, int B) {
    const size_t D = (size_t)L->cfg->embed_dim, Hn = (size_t)L->H * L->n;
    mega_bump b = {mem, 0};
    S->nm = (size_t)B * L->n * D;
    S->nlz = is_mlp(L) ? 2 * (size_t)B * Hn : 0;
    S->km = mega_bump_take(&b, S->nm);
    S->vm = mega_bump_take(&b, S->nm);
    S->lz = mega_bump_take(&b, S->nlz);
    return b.off;
}

static size_t abc_state_size(const void *L, int B, int cap) {
    (void)cap; /* bounded memory: the state does not grow with the stream */
    abc_state S;
    return state_view(L, &S, NULL, B);
}

static void abc_state_reset(const void *L, mega_mixer_state *St) {
    abc_state S;
    state_view(L, &S, St->mem, St->B);
    St->pos = 0;
    memset(S.km, 0, S.nm * sizeof(real));
    memset(S.vm, 0, S.nm * sizeof(real));
    for (size_t i = 0; i < S.nlz; i++) S.lz[i] = -INFINITY; /* empty memory: log Z = -inf */
}

static mega_status abc_state_init(const void *L, const real *W, mega_mixer_state *St) {
    (void)W;
    abc_state_reset(L, St);
    return MEGA_OK;
}

/* beam search: new row b = old row idx[b] (every part of the state is per row; tmp: state_size
 * reals) */
static void abc_state_reorder(const void *L, mega_mixer_state *St, const int *idx, real *tmp) {
    abc_state S;
    state_view(L, &S, St->mem, St->B);
    const size_t per = S.nm / (size_t)St->B;
    mega__rows_gather(S.km, per, St->B, idx, tmp);
    mega__rows_gather(S.vm, per, St->B, idx, tmp);
    if (S.nlz) { /* [2][B][Hn]: the K half, then the V half */
        const size_t pl = S.nlz / 2 / (size_t)St->B;
        mega__rows_gather(S.lz, pl, St->B, idx, tmp);
        mega__rows_gather(S.lz + S.nlz / 2, pl, St->B, idx, tmp);
    }
}

/* step scratch: q, k, v, o [R,D]; control (MLP logits [R,H n] x 2, Linformer rows [T,n] x 2);
 * per-unit temporaries (B*H of them: the step does not know the thread count) */
typedef struct {
    real *q, *k, *v, *o, *ck, *cv, *tmp;
    size_t per;
} abc_sscr;

static size_t sscr_layout(const abc_layer *L, int B, int T, real *base, abc_sscr *s) {
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim, Hn = (size_t)L->H * L->n;
    mega_bump b = {base, 0};
    memset(s, 0, sizeof *s);
    s->q = mega_bump_take(&b, R * D);
    s->k = mega_bump_take(&b, R * D);
    s->v = mega_bump_take(&b, R * D);
    s->o = mega_bump_take(&b, R * D);
    const size_t cn = is_mlp(L) ? R * Hn : is_lin(L) ? (size_t)T * L->n : 0;
    s->ck = mega_bump_take(&b, cn);
    s->cv = mega_bump_take(&b, cn);
    mega_abc_k k = kernel_of(L, T, NULL);
    s->per = ((is_win(L) ? mega_abc_window_tmp(&k) : mega_abc_scan_fwd_tmp(&k)) + 15) & ~(size_t)15;
    s->tmp = mega_bump_take(&b, s->per * (size_t)B * L->H);
    return b.off;
}

static size_t abc_step_scratch(const void *L, int B, int T, int cap) {
    (void)cap;
    abc_sscr s;
    return sscr_layout(L, B, T, NULL, &s) + 16;
}

/* T tokens per sequence (eval semantics, no pads): equals the causal forward over the stream */
static mega_status abc_step(const void *layer, const real *W, mega_mixer_state *St, real *y, const real *x, int T,
                            real *scratch) {
    const abc_layer *L = layer;
    abc_state S;
    state_view(L, &S, St->mem, St->B);
    const int B = St->B, H = L->H, n = L->n, dh = L->dh;
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim, Hn = (size_t)H * n, nd = (size_t)n * dh;
    if (T < 1) return MEGA_OK;
    if (is_lin(L) && St->pos + T > L->nmax)
        MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer: streaming position %lld exceeds max-len %d (E and F have max-len columns)",
                  (long long)(St->pos + T - 1), L->nmax);
    abc_sscr s;
    sscr_layout(L, B, T, scratch, &s);
    mega_linear_forward(s.q, x, W + L->proj.w[MEGA_Q], W + L->proj.b[MEGA_Q], R, D, D);
    mega_linear_forward(s.k, x, W + L->proj.w[MEGA_K], W + L->proj.b[MEGA_K], R, D, D);
    mega_linear_forward(s.v, x, W + L->proj.w[MEGA_V], W + L->proj.b[MEGA_V], R, D, D);
    mega_abc_k kk = kernel_of(L, T, NULL);
    if (is_lin(L)) {
        lin_rows(L, W + L->ck, s.ck, St->pos, T);
        lin_rows(L, W + L->cv, s.cv, St->pos, T);
        kk.ck = s.ck, kk.cv = s.cv, kk.cs_b = 0, kk.cs_t = (size_t)n, kk.cs_h = 0;
    } else if (is_mlp(L)) {
        mega_linear_forward(s.ck, x, W + L->ck, NULL, R, D, Hn);
        mega_linear_forward(s.cv, x, W + L->cv, NULL, R, D, Hn);
        kk.ck = s.ck, kk.cv = s.cv, kk.cs_b = (size_t)T * Hn, kk.cs_t = Hn, kk.cs_h = (size_t)n;
    }
    const long units = (long)B * H;
    const int win = is_win(L);
    const int64_t pos = St->pos;
#pragma omp parallel for schedule(static) if (units > 1 && R * Hn * (size_t)dh > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        const int b = (int)(u / H), h = (int)(u % H);
        real *tmp = s.tmp + s.per * (size_t)u;
        const size_t off = (size_t)h * dh;
        if (win) {
            /* ring buffer: token at absolute position p lives in slot p mod n; the filled slots
             * are 0..min(p+1, n)-1 */
            real *kr = S.km + (size_t)b * n * D + off, *vr = S.vm + (size_t)b * n * D + off;
            for (int t = 0; t < T; t++) {
                const int64_t p = pos + t;
                const size_t r = (size_t)b * T + t, slot = (size_t)(p % n);
                memcpy(kr + slot * D, s.k + r * D + off, (size_t)dh * sizeof(real));
                memcpy(vr + slot * D, s.v + r * D + off, (size_t)dh * sizeof(real));
                const int m = p + 1 < n ? (int)(p + 1) : n;
                mega_abc_window_read(&kk, s.o + r * D + off, tmp, s.q + r * D + off, kr, vr, D, m, NULL, n - m, 0);
            }
        } else {
            real *Mk = S.km + (size_t)u * nd, *Mv = S.vm + (size_t)u * nd;
            real *lzk = is_mlp(L) ? S.lz + (size_t)u * n : NULL;
            real *lzv = is_mlp(L) ? S.lz + Hn * (size_t)St->B + (size_t)u * n : NULL;
            mega_abc_scan_forward(&kk, s.o, NULL, s.q, s.k, s.v, NULL, b, h, Mk, Mv, lzk, lzv, tmp);
        }
    }
    mega_linear_forward(y, s.o, W + L->proj.w[MEGA_O], W + L->proj.b[MEGA_O], R, D, D);
    St->pos += T;
    return MEGA_OK;
}

/* a bounded memory: the default context */
#define ABC_OPTIONS "attention-dropout", "heads", "memory-size"
static const char *const ABC_OPTS[] = {ABC_OPTIONS, NULL};
static const char *const LIN_OPTS[] = {ABC_OPTIONS, "max-len", NULL};

#define ABC_OPS(NAME, FLAGS, RESOLVE, CHECK, DECLARE, OPTIONS)                                                 \
    {                                                                                                           \
        .name = NAME, .flags = FLAGS, .layer_size = sizeof(abc_layer), .resolve = RESOLVE, .check = CHECK,      \
        .options = OPTIONS,                                                                                     \
        .declare = DECLARE, .init = abc_init, .acts_size = abc_acts_size, .scratch_size = abc_scratch,          \
        .forward = abc_forward, .backward = abc_backward, .state_size = abc_state_size,                         \
        .state_init = abc_state_init, .state_reset = abc_state_reset, .step_scratch = abc_step_scratch,         \
        .step = abc_step, .state_reorder = abc_state_reorder,                                                   \
    }
const mega_mixer_ops mega_mixer_ops_abc_window =
    ABC_OPS("abc-window", MEGA_MIXER_CAUSAL, abc_resolve, win_check, win_declare, ABC_OPTS);
const mega_mixer_ops mega_mixer_ops_abc_linformer =
    ABC_OPS("abc-linformer", MEGA_MIXER_CAUSAL | MEGA_MIXER_BIDIR, lin_resolve, lin_check, lin_declare, LIN_OPTS);
const mega_mixer_ops mega_mixer_ops_abc_mlp =
    ABC_OPS("abc-mlp", MEGA_MIXER_CAUSAL | MEGA_MIXER_BIDIR, abc_resolve, abc_check, mlp_declare, ABC_OPTS);
