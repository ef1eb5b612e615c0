/*
 * The AFT token mixers (Zhai et al. 2021, arXiv 2105.14103; the time-weighted AFT of PENG Bo's
 * article), as cores of the standard residual sublayer (mixer.h):
 *
 *   [Q | K | V] = x Wqkvᵀ + b                    (one fused projection D -> 3 D_a, D_a = D)
 *   K          += log beta_h(t)                   (aft-tw with max-len > 0: key-position factor)
 *   ybar        = sum_u exp(K_u + b_{t,u}) V_u / sum_u exp(K_u + b_{t,u})   (src/ops/aft.c)
 *   o           = gamma(t) * sigmoid(Q) * ybar    (gamma: aft-tw with max-len > 0)
 *   y           = o Woutᵀ + b_out
 *
 * with the position bias b_{t,u} of each variant:
 *   aft-full    w[t,u], a learned max-len x max-len table (absolute positions, L <= max-len);
 *   aft-local   w[t,u] inside the window |t-u| < s (causal 0 <= t-u < s), 0 outside (AFT paper:
 *               not -inf, the far tokens still contribute with weight e^K); the table keeps only
 *               the band: [max-len, s] causal, [max-len, 2s-1] bidirectional, entry (t,u) at
 *               column u - t + s - 1;
 *   aft-simple  0 (softmax of K over positions per channel), O(L D) by the scan kernel;
 *   aft-tw      time-weighted AFT (PENG Bo's article) with W_{t,u} = f_h(t-u) alpha_h(t) beta_h(u)
 *               and the exponential f_h(d) = exp(-w_h |d|), w_h = exp(time_decay_h) > 0, so it
 *               runs as the RNN scan in training and streams with a 3 D_a state. alpha_h(t)
 *               cancels in the normalised ratio and is not a parameter. beta_h(u)
 *               (stored as its log, time_beta [H, max-len]) and gamma(t) (time_gamma [max-len])
 *               are absolute-position parameters: they exist only when max-len > 0; beyond
 *               max-len they are clamped to the last learned position (project extension, as
 *               mhatw: the scan and the stream go on past the training length); with max-len 0
 *               the mixer is the pure RNN (alpha = beta = gamma = 1). The general learned-f
 *               form (O(L^2), RWKV-v1 time_w) is not offered.
 * Parameters (under "<prefix>mixer."): qkv.weight [3D, D], qkv.bias [3D], out.weight [D, D],
 * out.bias [D]; pos_bias (full/local); time_decay [H], time_beta [H, T], time_gamma [T] (tw).
 * Init (project choices): projections N(0, 0.02) with zero biases (as the Mega layer), pos_bias 0
 * (as labml's AFTLocal: AFT-full starts as AFT-simple), time_decay = log(T0^{-(h+1)/H}) with
 * T0 = max-len or 1024 (after RWKV_TimeMix's decays), time_beta 0 (beta = 1), time_gamma 1.
 */
#include "layers/mixer.h"
#include "ops/aft.h"
#include "ops/ops.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* the variant, fixed by the kind's declare entry */
enum { V_FULL, V_LOCAL, V_SIMPLE, V_TW };

typedef struct {
    const mega_block_config *cfg;
    int var;            /* V_* */
    int tlim;           /* length limit (full/local: the table rows, max-len); 0 = none */
    int heads;          /* aft-tw decay heads (1 otherwise) */
    int win;            /* aft-local window s */
    int haspos;         /* aft-tw with beta/gamma (their table length is max-len; positions beyond
                         * it use the last entry) */
    size_t qkv_w, qkv_b, out_w, out_b, pos, decay, beta, gamma;
} aft_layer;
MEGA_MIXER_LAYER_FITS(aft_layer);

/* saved activations */
typedef struct {
    real *qkv, *ybar, *lden, *o; /* [R,3D], [R,D] x 3 */
    uint8_t *flags;             /* the pair kernel's fallback flags */
} aft_acts;

static int is_pair(const aft_layer *L) { return L->var == V_FULL || L->var == V_LOCAL; }
static size_t rup(size_t n) { return (n + 15) & ~(size_t)15; }

/* ---- configuration ------------------------------------------------------------------------ */

static void pos_resolve(mega_block_config *c) {
    if (c->max_len == 0) c->max_len = mega__default_max_len(c);
}
static void local_resolve(mega_block_config *c) {
    pos_resolve(c);
    if (c->window == 0) c->window = MEGA_DEFAULT_WINDOW;
}
static void tw_resolve(mega_block_config *c) {
    pos_resolve(c);
    if (c->heads == 0) c->heads = mega__default_heads(c->embed_dim, 0);
}

/* full/local: max-len rows of the bias table, at most lim */
static mega_status table_check(const mega_block_config *c, int lim) {
    const char *nm = mega_mixer_name(c->mixer);
    if (c->max_len < 1 || c->max_len > lim)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s needs max-len in [1, %d] (the length of its position-bias table), got %d", nm, lim,
                  c->max_len);
    return MEGA_OK;
}
static mega_status full_check(const mega_block_config *c) { return table_check(c, 16384); }
static mega_status local_check(const mega_block_config *c) {
    MEGA_TRY(table_check(c, 1 << 20));
    MEGA_TRY(mega__window_check(c));
    if ((double)c->max_len * mega_aft_local_cols(c->window, c->bidirectional) > (double)(1 << 28))
        MEGA_FAIL(MEGA_ERR_INVALID, "aft-local: the band table max-len x %d is too large (window %d; a window >= max-len "
                  "covers every position, use aft-full)", mega_aft_local_cols(c->window, c->bidirectional), c->window);
    return MEGA_OK;
}
static mega_status tw_check(const mega_block_config *c) {
    if (c->max_len < -1 || c->max_len > 1 << 20)
        MEGA_FAIL(MEGA_ERR_INVALID, "aft-tw: max-len %d is out of range [-1 (none), 2^20]", c->max_len);
    if (c->heads < 1 || c->embed_dim % c->heads)
        MEGA_FAIL(MEGA_ERR_INVALID, "aft-tw: heads (%d) must be >= 1 and divide embed-dim %d", c->heads, c->embed_dim);
    return MEGA_OK;
}

/* ---- declaration and init --------------------------------------------------------------- */

static mega_status declare(aft_layer *L, const mega_block_config *c, mega_params *P, const char *prefix, int v) {
    const int64_t D = c->embed_dim, T = c->max_len;
    char pre[MEGA_NAME_MAX];
    memset(L, 0, sizeof *L);
    L->cfg = c, L->var = v;
    L->heads = v == V_TW ? c->heads : 1;
    L->win = v == V_LOCAL ? c->window : 0;
    L->haspos = v == V_TW && c->max_len > 0;
    L->tlim = (v == V_FULL || v == V_LOCAL) ? c->max_len : 0;
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "qkv.weight", MEGA_P_DECAY, &L->qkv_w, 3 * D, D));
    MEGA_TRY(MEGA_PADD(P, pre, "qkv.bias", 0, &L->qkv_b, 3 * D));
    MEGA_TRY(MEGA_PADD(P, pre, "out.weight", MEGA_P_DECAY, &L->out_w, D, D));
    MEGA_TRY(MEGA_PADD(P, pre, "out.bias", 0, &L->out_b, D));
    if (v == V_FULL) MEGA_TRY(MEGA_PADD(P, pre, "pos_bias", MEGA_P_DECAY, &L->pos, T, T));
    if (v == V_LOCAL)
        MEGA_TRY(MEGA_PADD(P, pre, "pos_bias", MEGA_P_DECAY, &L->pos, T,
                           (int64_t)mega_aft_local_cols(c->window, c->bidirectional)));
    if (v == V_TW) {
        MEGA_TRY(MEGA_PADD(P, pre, "time_decay", 0, &L->decay, (int64_t)c->heads));
        if (L->haspos) {
            MEGA_TRY(MEGA_PADD(P, pre, "time_beta", 0, &L->beta, (int64_t)c->heads, T));
            MEGA_TRY(MEGA_PADD(P, pre, "time_gamma", 0, &L->gamma, T));
        }
    }
    return MEGA_OK;
}
MEGA_DECLARE_VARIANT(full_declare, declare, V_FULL)
MEGA_DECLARE_VARIANT(local_declare, declare, V_LOCAL)
MEGA_DECLARE_VARIANT(simple_declare, declare, V_SIMPLE)
MEGA_DECLARE_VARIANT(tw_declare, declare, V_TW)

static void aft_init(const void *layer, real *W, mega_rng *rng) {
    const aft_layer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t D = (size_t)c->embed_dim, T = (size_t)(c->max_len > 0 ? c->max_len : 0);
    mega_fill_normal(W + L->qkv_w, 3 * D * D, 0, 0.02, rng);
    mega_fill_const(W + L->qkv_b, 3 * D, 0);
    mega_fill_normal(W + L->out_w, D * D, 0, 0.02, rng);
    mega_fill_const(W + L->out_b, D, 0);
    if (L->var == V_FULL) mega_fill_const(W + L->pos, T * T, 0);
    if (L->var == V_LOCAL) mega_fill_const(W + L->pos, T * (size_t)mega_aft_local_cols(L->win, c->bidirectional), 0);
    if (L->var == V_TW) {
        const int H = L->heads;
        const double T0 = c->max_len > 0 ? c->max_len : 1024;
        for (int h = 0; h < H; h++) W[L->decay + h] = (real)(-(double)(h + 1) / H * log(T0));
        if (L->haspos) {
            mega_fill_const(W + L->beta, (size_t)H * T, 0);
            mega_fill_const(W + L->gamma, T, 1);
        }
    }
}

static size_t acts_view(const aft_layer *L, aft_acts *A, real *base, int B, int T) {
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim;
    mega_bump b = {base, 0};
    A->qkv = mega_bump_take(&b, R * 3 * D);
    A->ybar = mega_bump_take(&b, R * D);
    A->lden = mega_bump_take(&b, R * D);
    A->o = mega_bump_take(&b, R * D);
    A->flags = is_pair(L) ? (uint8_t *)mega_bump_take(&b, mega_aft_pair_flag_reals(B, T, (int)D)) : NULL;
    return b.off;
}
static size_t aft_acts_size(const void *L, int B, int T) {
    aft_acts A;
    return acts_view(L, &A, NULL, B, T);
}

/* the kernels' descriptions, from the parameters (wch: per-channel decays for aft-tw) */
static mega_aft_pair_k pair_k(const aft_layer *L, const real *W) {
    const mega_block_config *c = L->cfg;
    mega_aft_pair_k k = {c->embed_dim, c->bidirectional, L->win, c->max_len, W ? W + L->pos : NULL};
    return k;
}
static mega_aft_scan_k scan_k(const aft_layer *L, const real *W, real *wch) {
    const mega_block_config *c = L->cfg;
    mega_aft_scan_k k = {c->embed_dim, c->bidirectional, NULL};
    if (L->var == V_TW && W) {
        const int hd = c->embed_dim / L->heads;
        for (int ch = 0; ch < c->embed_dim; ch++) wch[ch] = R_EXP(W[L->decay + ch / hd]); /* w_h = e^{raw} > 0 */
        k.w = wch;
    }
    return k;
}
static size_t kernel_scratch(const aft_layer *L, int B, int T, int nt) {
    if (is_pair(L)) {
        mega_aft_pair_k k = pair_k(L, NULL);
        return mega_aft_pair_scratch(&k, B, T, nt);
    }
    mega_aft_scan_k k = scan_k(L, NULL, NULL);
    return mega_aft_scan_scratch(&k, B, T, nt);
}

/* scratch: wch [D] | dw per channel [D] | backward: dqkv [R,3D], do [R,D] | kernel scratch */
static size_t aft_scratch(const void *layer, int B, int T, int nt) {
    const aft_layer *L = layer;
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim;
    return 2 * rup(D) + rup(R * 3 * D) + rup(R * D) + kernel_scratch(L, B, T, nt) + 64;
}

static mega_status too_long(const aft_layer *L, long long n) {
    MEGA_FAIL(MEGA_ERR_INVALID, "sequence length %lld exceeds the mixer's max-len %d (%s: absolute-position parameters)", n,
              L->tlim, mega_mixer_name(L->cfg->mixer));
}

/* the table entry of position p for beta / gamma: clamped to the last learned one (length policy) */
static inline size_t tpos(const aft_layer *L, int64_t p) {
    return (size_t)(p < L->cfg->max_len ? p : L->cfg->max_len - 1);
}

/* K += log beta_h(pos) for rows [B, n] starting at position p0 (aft-tw with position factors) */
static void add_log_beta(const aft_layer *L, const real *W, real *qkv, int B, int n, int64_t p0) {
    const int D = L->cfg->embed_dim, hd = D / L->heads;
    const size_t Tm = (size_t)L->cfg->max_len;
    const real *lb = W + L->beta;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) {
            real *k = qkv + ((size_t)b * n + t) * 3 * D + D;
            const size_t p = tpos(L, p0 + t);
            for (int c = 0; c < D; c++) k[c] += lb[(size_t)(c / hd) * Tm + p];
        }
}

/* o = gamma(pos) * sigmoid(Q) * ybar */
static void gate(const aft_layer *L, const real *W, real *o, const real *qkv, const real *yb, int B, int n, int64_t p0) {
    const size_t D = (size_t)L->cfg->embed_dim;
    const real *gm = L->haspos ? W + L->gamma : NULL;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) {
            const size_t r = (size_t)b * n + t;
            const real g = gm ? gm[tpos(L, p0 + t)] : 1;
            for (size_t c = 0; c < D; c++) o[r * D + c] = g * mega_sigmoid(qkv[r * 3 * D + c]) * yb[r * D + c];
        }
}

static mega_status aft_forward(const void *layer, real *W, real *acts, real *y, const real *x, const uint8_t *pad,
                               int B, int T, const mega_run *run, real *scratch) {
    const aft_layer *L = layer;
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    if (L->tlim > 0 && T > L->tlim) return too_long(L, T);
    aft_acts A;
    acts_view(L, &A, acts, B, T);
    real *wch = scratch, *ks = scratch + 2 * rup(D) + rup(R * 3 * D) + rup(R * D);
    mega_linear_forward(A.qkv, x, W + L->qkv_w, W + L->qkv_b, R, D, 3 * D);
    if (L->haspos) add_log_beta(L, W, A.qkv, B, T, 0);
    if (is_pair(L)) {
        mega_aft_pair_k k = pair_k(L, W);
        mega_aft_pair_forward(&k, A.ybar, A.lden, A.flags, A.qkv + D, A.qkv + 2 * D, 3 * D, pad, B, T, ks, nt);
    } else {
        mega_aft_scan_k k = scan_k(L, W, wch);
        mega_aft_scan_forward(&k, A.ybar, A.lden, A.qkv + D, A.qkv + 2 * D, 3 * D, pad, B, T, ks, nt);
    }
    gate(L, W, A.o, A.qkv, A.ybar, B, T, 0);
    mega_linear_forward(y, A.o, W + L->out_w, W + L->out_b, R, D, D);
    return MEGA_OK;
}

/* o = gamma sigmoid(Q) ybar: dQ (into dq) = do gamma ybar s(1-s), dybar (in place in dob) =
 * do gamma s, and d gamma */
static void gate_backward(const aft_layer *L, const real *W, real *dW, const aft_acts *A, real *dq, real *dob, int B,
                          int T) {
    const size_t D = (size_t)L->cfg->embed_dim;
    const real *gm = L->haspos ? W + L->gamma : NULL;
    real *dgm = L->haspos ? dW + L->gamma : NULL;
    memset(dq, 0, (size_t)B * T * 3 * D * sizeof(real));
    for (int t = 0; t < T; t++) {
        const real g = gm ? gm[tpos(L, t)] : 1;
        real acc = 0;
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T + t;
            for (size_t ch = 0; ch < D; ch++) {
                const real s = mega_sigmoid(A->qkv[r * 3 * D + ch]), d = dob[r * D + ch], v = A->ybar[r * D + ch];
                acc += d * s * v;
                dq[r * 3 * D + ch] = d * g * v * s * (1 - s);
                dob[r * D + ch] = d * g * s;
            }
        }
        if (dgm) dgm[tpos(L, t)] += acc;
    }
}

static void aft_backward(const void *layer, const real *W, real *dW, const real *acts, real *dx, const real *dy,
                         const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const aft_layer *L = layer;
    const mega_block_config *c = L->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->embed_dim;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    aft_acts A;
    acts_view(L, &A, (real *)(uintptr_t)acts, B, T);
    real *wch = scratch, *dwc = wch + rup(D), *dq = dwc + rup(D), *dob = dq + rup(R * 3 * D), *ks = dob + rup(R * D);
    /* y = o Woutᵀ + b */
    mega_linear_backward(dob, dW + L->out_w, dW + L->out_b, dy, A.o, W + L->out_w, R, D, D, 0);
    gate_backward(L, W, dW, &A, dq, dob, B, T);
    /* the ratio: dK, dV (and the table / decays) */
    if (is_pair(L)) {
        mega_aft_pair_k k = pair_k(L, W);
        mega_aft_pair_backward(&k, dq + D, dq + 2 * D, 3 * D, dW + L->pos, dob, A.ybar, A.lden, A.flags, A.qkv + D,
                               A.qkv + 2 * D, 3 * D, pad, B, T, ks, nt);
    } else {
        mega_aft_scan_k k = scan_k(L, W, wch);
        const int tw = L->var == V_TW;
        memset(dwc, 0, D * sizeof(real));
        mega_aft_scan_backward(&k, dq + D, dq + 2 * D, 3 * D, tw ? dwc : NULL, dob, A.ybar, A.lden, A.qkv + D,
                               A.qkv + 2 * D, 3 * D, pad, B, T, ks, nt);
        /* d time_decay_h = sum_{c in h} dw_c * w_h  (w = e^{raw}) */
        const int hd = c->embed_dim / L->heads;
        if (tw)
            for (size_t ch = 0; ch < D; ch++) dW[L->decay + ch / hd] += dwc[ch] * wch[ch];
    }
    /* K + log beta_h(t): d time_beta[h, t] = sum over batch and the head's channels of dK */
    if (L->haspos) {
        const int hd = c->embed_dim / L->heads;
        const size_t Tm = (size_t)c->max_len;
        real *db = dW + L->beta;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const real *dk = dq + ((size_t)b * T + t) * 3 * D + D;
                for (size_t ch = 0; ch < D; ch++) db[(size_t)(ch / hd) * Tm + tpos(L, t)] += dk[ch];
            }
    }
    mega_linear_backward(dx, dW + L->qkv_w, dW + L->qkv_b, dq, x, W + L->qkv_w, R, D, 3 * D, 0);
}

/* ---- streaming (causal) ------------------------------------------------------------------
 * state: scan variants agg = (s1, s2, e) [B, 3D]  (3 D_a floats per sequence)
 *        aft-full  kc/vc = K/V cache [B, rows, D], rows = min(cap, max-len)
 *        aft-local kc/vc = K/V ring [B, s, D] of the keys inside the band, agg = the aggregate
 *                  (s1, s2, e) [B, 3D] of the keys that left it (3D_a + 2sD_a in all) */
typedef struct {
    real *kc, *vc, *agg;
    int rows;
} aft_state;

static int cache_rows(const aft_layer *L, int cap) {
    if (L->var == V_FULL) return MEGA_MAX(1, MEGA_MIN(cap, L->tlim));
    if (L->var == V_LOCAL) return MEGA_MIN(L->win, L->tlim);
    return 0;
}

static size_t state_view(const aft_layer *L, aft_state *S, real *mem, int B, int cap) {
    const size_t D = (size_t)L->cfg->embed_dim, rows = (size_t)cache_rows(L, cap);
    mega_bump b = {mem, 0};
    S->rows = (int)rows;
    S->kc = is_pair(L) ? mega_bump_take(&b, (size_t)B * rows * D) : NULL;
    S->vc = is_pair(L) ? mega_bump_take(&b, (size_t)B * rows * D) : NULL;
    S->agg = L->var != V_FULL ? mega_bump_take(&b, (size_t)B * 3 * D) : NULL;
    return b.off;
}

static size_t aft_state_size(const void *L, int B, int cap) {
    aft_state S;
    return state_view(L, &S, NULL, B, cap);
}

static void aft_state_reset(const void *layer, mega_mixer_state *St) {
    const aft_layer *L = layer;
    const int D = L->cfg->embed_dim;
    aft_state S;
    state_view(L, &S, St->mem, St->B, St->cap);
    St->pos = 0;
    if (S.agg)
        for (int b = 0; b < St->B; b++) mega_aft_scan_state_reset(S.agg + (size_t)b * 3 * D, D);
}

static mega_status aft_state_init(const void *L, const real *W, mega_mixer_state *St) {
    (void)W;
    aft_state_reset(L, St);
    return MEGA_OK;
}

/* step scratch: wch [D] | qkv [R,3D] | ybar [R,D] | o [R,D] | per-sequence query buffers */
static size_t aft_step_scratch(const void *layer, int B, int T, int cap) {
    const aft_layer *L = layer;
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim;
    const size_t q = 2 * ((size_t)cache_rows(L, cap) + 2);
    return rup(D) + rup(R * 3 * D) + 2 * rup(R * D) + rup((size_t)B * q) + 64;
}

/* one token at position p of sequence b through the pair kernel's cache: append its key and
 * value (AFT-local: to the ring, after folding the key that leaves the band into the aggregate)
 * and evaluate its query exactly */
static void pair_step_token(const aft_layer *L, const mega_aft_pair_k *pk, const aft_state *S, int b, int64_t p,
                            const real *kr, const real *vr, real *yb, real *qb) {
    const size_t D = (size_t)L->cfg->embed_dim;
    const int rows = S->rows;
    real *Kc = S->kc + (size_t)b * rows * D, *Vc = S->vc + (size_t)b * rows * D;
    if (L->var == V_LOCAL) {
        const int s = rows;
        real *agg = S->agg + (size_t)b * 3 * D;
        if (p >= s) mega_aft_agg_add(agg, Kc + (size_t)(p % s) * D, Vc + (size_t)(p % s) * D, (int)D);
        memcpy(Kc + (size_t)(p % s) * D, kr, D * sizeof(real));
        memcpy(Vc + (size_t)(p % s) * D, vr, D * sizeof(real));
        mega_aft_pair_query(pk, (int)p, (int)MEGA_MAX(0, p - s + 1), (int)p + 1, Kc, Vc, D, s, agg, yb, qb);
    } else {
        memcpy(Kc + (size_t)p * D, kr, D * sizeof(real));
        memcpy(Vc + (size_t)p * D, vr, D * sizeof(real));
        mega_aft_pair_query(pk, (int)p, 0, (int)p + 1, Kc, Vc, D, 0, NULL, yb, qb);
    }
}

static mega_status aft_step(const void *layer, const real *W, mega_mixer_state *St, real *y, const real *x, int T,
                            real *scratch) {
    const aft_layer *L = layer;
    const int B = St->B;
    const size_t R = (size_t)B * T, D = (size_t)L->cfg->embed_dim;
    aft_state S;
    state_view(L, &S, St->mem, B, St->cap);
    if (L->tlim > 0 && St->pos + T > L->tlim) return too_long(L, (long long)St->pos + T);
    if (L->var == V_FULL && St->pos + T > S.rows)
        MEGA_FAIL(MEGA_ERR_INVALID, "stream of %lld tokens exceeds the aft-full cache capacity %d", (long long)St->pos + T,
                  S.rows);
    const int rows = S.rows;
    const size_t q = 2 * ((size_t)rows + 2);
    real *wch = scratch, *qkv = wch + rup(D), *yb = qkv + rup(R * 3 * D), *o = yb + rup(R * D), *qb = o + rup(R * D);
    mega_linear_forward(qkv, x, W + L->qkv_w, W + L->qkv_b, R, D, 3 * D);
    if (L->haspos) add_log_beta(L, W, qkv, B, T, St->pos);
    mega_aft_scan_k sk = scan_k(L, W, wch);
    mega_aft_pair_k pk = pair_k(L, W);
    const int pair = is_pair(L);
#pragma omp parallel for schedule(static) if ((size_t)B * T * D * (rows + 1) > MEGA_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t r = (size_t)b * T + t;
            const real *kr = qkv + r * 3 * D + D, *vr = kr + D;
            if (pair)
                pair_step_token(L, &pk, &S, b, St->pos + t, kr, vr, yb + r * D, qb + (size_t)b * q);
            else
                mega_aft_scan_step(&sk, S.agg + (size_t)b * 3 * D, yb + r * D, kr, vr);
        }
    gate(L, W, o, qkv, yb, B, T, St->pos);
    mega_linear_forward(y, o, W + L->out_w, W + L->out_b, R, D, D);
    St->pos += T;
    return MEGA_OK;
}

/* aft-full caches every key and value of the stream (up to max-len); the others keep a window or
 * a recurrence */
static void full_context(const mega_block_config *c, int T, mega_block_context *x) {
    mega__context_default(&mega_mixer_ops_aft_full, c, T, x);
    x->cache_full = 1;
}

static const char *const FULL_OPTIONS[] = {"max-len", NULL};
static const char *const LOCAL_OPTIONS[] = {"window", "max-len", NULL};
static const char *const SIMPLE_OPTIONS[] = {NULL};
static const char *const TW_OPTIONS[] = {"heads", "max-len", NULL};

#define AFT_OPS(NAME, RESOLVE, CHECK, DECLARE, OPTIONS, CONTEXT)                                                  \
    {                                                                                                             \
        .name = NAME, .flags = MEGA_MIXER_CAUSAL | MEGA_MIXER_BIDIR, .layer_size = sizeof(aft_layer),            \
        .resolve = RESOLVE, .check = CHECK, .options = OPTIONS, .context = CONTEXT, .declare = DECLARE,          \
        .init = aft_init, .acts_size = aft_acts_size,                                                             \
        .scratch_size = aft_scratch, .forward = aft_forward, .backward = aft_backward,                           \
        .state_size = aft_state_size, .state_init = aft_state_init, .state_reset = aft_state_reset,              \
        .step_scratch = aft_step_scratch, .step = aft_step,                                                       \
    }
const mega_mixer_ops mega_mixer_ops_aft_full =
    AFT_OPS("aft-full", pos_resolve, full_check, full_declare, FULL_OPTIONS, full_context);
const mega_mixer_ops mega_mixer_ops_aft_local =
    AFT_OPS("aft-local", local_resolve, local_check, local_declare, LOCAL_OPTIONS, NULL);
const mega_mixer_ops mega_mixer_ops_aft_simple =
    AFT_OPS("aft-simple", NULL, NULL, simple_declare, SIMPLE_OPTIONS, NULL);
const mega_mixer_ops mega_mixer_ops_aft_tw = AFT_OPS("aft-tw", tw_resolve, tw_check, tw_declare, TW_OPTIONS, NULL);
