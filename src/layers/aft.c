/*
 * The AFT token mixers (SPEC §5), as cores of the standard residual sublayer (mixer.h):
 *
 *   [Q | K | V] = x Wqkvᵀ + b                    (one fused projection D -> 3 D_a, D_a = D)
 *   K          += log beta_h(t)                   (aft-tw with max-len > 0: key-position factor)
 *   ybar        = sum_u exp(K_u + b_{t,u}) V_u / sum_u exp(K_u + b_{t,u})   (src/ops/aft.c)
 *   o           = gamma(t) * sigmoid(Q) * ybar    (gamma: aft-tw with max-len > 0)
 *   y           = o Woutᵀ + b_out
 *
 * with the position bias b_{t,u} of each variant:
 *   aft-full    w[t,u], a learned max-len x max-len table (absolute positions, L <= max-len);
 *   aft-local   w[t,u] inside the window |t-u| < s (causal 0 <= t-u < s), 0 outside (SPEC §5.2:
 *               not -inf, the far tokens still contribute with weight e^K); the table keeps only
 *               the band: [max-len, s] causal, [max-len, 2s-1] bidirectional, entry (t,u) at
 *               column u - t + s - 1;
 *   aft-simple  0 (softmax of K over positions per channel), O(L D) by the scan kernel;
 *   aft-tw      time-weighted AFT (SPEC §5.3) with W_{t,u} = f_h(t-u) alpha_h(t) beta_h(u) and the
 *               exponential f_h(d) = exp(-w_h |d|), w_h = exp(time_decay_h) > 0 (SPEC §5.4), so it
 *               runs as the RNN scan in training and streams with a 3 D_a state. alpha_h(t)
 *               cancels in the normalised ratio (SPEC §5.3) and is not a parameter. beta_h(u)
 *               (stored as its log, time_beta [H, max-len]) and gamma(t) (time_gamma [max-len])
 *               are absolute-position parameters: they exist only when max-len > 0; beyond
 *               max-len they are clamped to the last learned position (SPEC §4.1 length policy
 *               (c), so the scan and the stream go on past the training length); with max-len 0
 *               the mixer is the pure RNN (alpha = beta = gamma = 1). The general learned-f
 *               form (O(L^2), SPEC §5.3 / RWKV-v1) is not offered.
 * Parameters (under "<prefix>mixer."): qkv.weight [3D, D], qkv.bias [3D], out.weight [D, D],
 * out.bias [D]; pos_bias (full/local); time_decay [H], time_beta [H, T], time_gamma [T] (tw).
 * Init [ext]: projections N(0, 0.02) with zero biases (as the Mega layer), pos_bias 0 (SPEC §5.2:
 * AFT-full starts as AFT-simple), time_decay = log(T0^{-(h+1)/H}) with T0 = max-len or 1024
 * (after RWKV_TimeMix's decays, §4.1), time_beta 0 (beta = 1), time_gamma 1.
 */
#include "layers/block.h"
#include "ops/aft.h"
#ifdef _OPENMP
#include <omp.h>
#endif

enum { V_FULL, V_LOCAL, V_SIMPLE, V_TW };
/* mx->off */
enum { O_QKV_W, O_QKV_B, O_OUT_W, O_OUT_B, O_POS, O_DECAY, O_BETA, O_GAMMA };
/* mx->iv: [0] variant, [1] length limit (0 = none), [2] heads, [3] local window s, [4] has beta/gamma
 * (their table length is cfg->max_len; positions beyond it use the last entry) */
#define VAR(mx) ((mx)->iv[0])
#define TLIM(mx) ((mx)->iv[1])
#define HEADS(mx) ((mx)->iv[2])
#define WIN(mx) ((mx)->iv[3])
#define HASPOS(mx) ((mx)->iv[4])
/* activations: p[0] qkv [R,3D], p[1] ybar [R,D], p[2] lden [R,D], p[3] o [R,D], p[4] flags (pair) */

static int variant_of(mega_mixer_kind k) {
    switch (k) {
    case MEGA_MIXER_AFT_FULL: return V_FULL;
    case MEGA_MIXER_AFT_LOCAL: return V_LOCAL;
    case MEGA_MIXER_AFT_SIMPLE: return V_SIMPLE;
    default: return V_TW;
    }
}
static int is_pair(const mega_mixer *mx) { return VAR(mx) == V_FULL || VAR(mx) == V_LOCAL; }
static size_t rup(size_t n) { return (n + 15) & ~(size_t)15; }

static mega_status aft_declare(mega_mixer *mx, mega_params *P, const char *prefix) {
    const mega_block_cfg *c = mx->cfg;
    const int v = variant_of(c->mixer);
    const char *nm = mega_mixer_name(c->mixer);
    const int64_t D = c->D, T = c->max_len;
    char pre[MEGA_NAME_MAX];
    memset(mx->off, 0, sizeof mx->off);
    memset(mx->iv, 0, sizeof mx->iv);
    if ((v == V_FULL || v == V_LOCAL) && c->max_len < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s needs max-len >= 1 (the length of its position-bias table), got %d", nm, c->max_len);
    if (c->max_len < 0 || c->max_len > (v == V_FULL ? 16384 : 1 << 20))
        MEGA_FAIL(MEGA_ERR_INVALID, "%s: max-len %d is out of range [0, %d]", nm, c->max_len, v == V_FULL ? 16384 : 1 << 20);
    if (v == V_LOCAL && (c->window < 1 || c->window > 1 << 20))
        MEGA_FAIL(MEGA_ERR_INVALID, "aft-local needs a window in [1, 2^20], got %d", c->window);
    if (v == V_LOCAL && (double)c->max_len * mega_aft_local_cols(c->window, c->bidir) > (double)(1 << 28))
        MEGA_FAIL(MEGA_ERR_INVALID, "aft-local: the band table max-len x %d is too large (window %d; a window >= max-len "
                  "covers every position, use aft-full)", mega_aft_local_cols(c->window, c->bidir), c->window);
    if (v == V_TW && (c->heads < 1 || c->D % c->heads))
        MEGA_FAIL(MEGA_ERR_INVALID, "aft-tw: heads (%d) must be >= 1 and divide embed-dim %d", c->heads, c->D);
    VAR(mx) = v;
    HEADS(mx) = v == V_TW ? c->heads : 1;
    WIN(mx) = v == V_LOCAL ? c->window : 0;
    HASPOS(mx) = v == V_TW && c->max_len > 0;
    TLIM(mx) = (v == V_FULL || v == V_LOCAL) ? c->max_len : 0;
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    MEGA_TRY(MEGA_PADD(P, pre, "qkv.weight", MEGA_P_DECAY, &mx->off[O_QKV_W], 3 * D, D));
    MEGA_TRY(MEGA_PADD(P, pre, "qkv.bias", 0, &mx->off[O_QKV_B], 3 * D));
    MEGA_TRY(MEGA_PADD(P, pre, "out.weight", MEGA_P_DECAY, &mx->off[O_OUT_W], D, D));
    MEGA_TRY(MEGA_PADD(P, pre, "out.bias", 0, &mx->off[O_OUT_B], D));
    if (v == V_FULL) MEGA_TRY(MEGA_PADD(P, pre, "pos_bias", MEGA_P_DECAY, &mx->off[O_POS], T, T));
    if (v == V_LOCAL)
        MEGA_TRY(MEGA_PADD(P, pre, "pos_bias", MEGA_P_DECAY, &mx->off[O_POS], T, (int64_t)mega_aft_local_cols(c->window, c->bidir)));
    if (v == V_TW) {
        MEGA_TRY(MEGA_PADD(P, pre, "time_decay", 0, &mx->off[O_DECAY], (int64_t)c->heads));
        if (HASPOS(mx)) {
            MEGA_TRY(MEGA_PADD(P, pre, "time_beta", 0, &mx->off[O_BETA], (int64_t)c->heads, T));
            MEGA_TRY(MEGA_PADD(P, pre, "time_gamma", 0, &mx->off[O_GAMMA], T));
        }
    }
    return MEGA_OK;
}

static void aft_init(const mega_mixer *mx, real *W, mega_rng *rng) {
    const mega_block_cfg *c = mx->cfg;
    const size_t D = (size_t)c->D, T = (size_t)c->max_len;
    mega_fill_normal(W + mx->off[O_QKV_W], 3 * D * D, 0, 0.02, rng);
    mega_fill_const(W + mx->off[O_QKV_B], 3 * D, 0);
    mega_fill_normal(W + mx->off[O_OUT_W], D * D, 0, 0.02, rng);
    mega_fill_const(W + mx->off[O_OUT_B], D, 0);
    if (VAR(mx) == V_FULL) mega_fill_const(W + mx->off[O_POS], T * T, 0);
    if (VAR(mx) == V_LOCAL) mega_fill_const(W + mx->off[O_POS], T * (size_t)mega_aft_local_cols(WIN(mx), c->bidir), 0);
    if (VAR(mx) == V_TW) {
        const int H = HEADS(mx);
        const double T0 = c->max_len > 0 ? c->max_len : 1024;
        for (int h = 0; h < H; h++) W[mx->off[O_DECAY] + h] = (real)(-(double)(h + 1) / H * log(T0));
        if (HASPOS(mx)) {
            mega_fill_const(W + mx->off[O_BETA], (size_t)H * T, 0);
            mega_fill_const(W + mx->off[O_GAMMA], T, 1);
        }
    }
}

static size_t aft_acts(const mega_mixer *mx, mega_mixer_acts *A, real *base, int B, int T) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D;
    mega_bump b = {base, 0};
    mega_mixer_acts a;
    memset(&a, 0, sizeof a);
    a.p[0] = mega_bump_take(&b, R * 3 * D);
    a.p[1] = mega_bump_take(&b, R * D);
    a.p[2] = mega_bump_take(&b, R * D);
    a.p[3] = mega_bump_take(&b, R * D);
    a.p[4] = is_pair(mx) ? mega_bump_take(&b, mega_aft_pair_flag_reals(B, T, (int)D)) : NULL;
    if (A) *A = a;
    return b.off;
}

/* the kernels' descriptions, from the parameters (wch: per-channel decays for aft-tw) */
static mega_aft_pair_k pair_k(const mega_mixer *mx, const real *W) {
    const mega_block_cfg *c = mx->cfg;
    mega_aft_pair_k k = {c->D, c->bidir, WIN(mx), c->max_len, W + mx->off[O_POS]};
    return k;
}
static mega_aft_scan_k scan_k(const mega_mixer *mx, const real *W, real *wch) {
    const mega_block_cfg *c = mx->cfg;
    mega_aft_scan_k k = {c->D, c->bidir, NULL};
    if (VAR(mx) == V_TW) {
        const int hd = c->D / HEADS(mx);
        for (int ch = 0; ch < c->D; ch++) wch[ch] = R_EXP(W[mx->off[O_DECAY] + ch / hd]); /* w_h = e^{raw} > 0 */
        k.w = wch;
    }
    return k;
}
static size_t kernel_scratch(const mega_mixer *mx, int B, int T, int nt) {
    const mega_block_cfg *c = mx->cfg;
    if (is_pair(mx)) {
        mega_aft_pair_k k = {c->D, c->bidir, WIN(mx), c->max_len, NULL};
        return mega_aft_pair_scratch(&k, B, T, nt);
    }
    mega_aft_scan_k k = {c->D, c->bidir, NULL};
    return mega_aft_scan_scratch(&k, B, T, nt);
}

/* scratch: wch [D] | dw per channel [D] | backward: dqkv [R,3D], do [R,D] | kernel scratch */
static size_t aft_scratch(const mega_mixer *mx, int B, int T, int nt) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D;
    return 2 * rup(D) + rup(R * 3 * D) + rup(R * D) + kernel_scratch(mx, B, T, nt) + 64;
}

static mega_status too_long(const mega_mixer *mx, long long n) {
    MEGA_FAIL(MEGA_ERR_INVALID, "sequence length %lld exceeds the mixer's max-len %d (%s: absolute-position parameters)", n,
              TLIM(mx), mega_mixer_name(mx->cfg->mixer));
}

/* the table entry of position p for beta / gamma: clamped to the last learned one (SPEC §4.1 (c)) */
static inline size_t tpos(const mega_mixer *mx, int64_t p) {
    return (size_t)(p < mx->cfg->max_len ? p : mx->cfg->max_len - 1);
}

/* K += log beta_h(pos) for rows [B, n] starting at position p0 (aft-tw with position factors) */
static void add_log_beta(const mega_mixer *mx, const real *W, real *qkv, int B, int n, int64_t p0) {
    const int D = mx->cfg->D, hd = D / HEADS(mx);
    const size_t Tm = (size_t)mx->cfg->max_len;
    const real *lb = W + mx->off[O_BETA];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) {
            real *k = qkv + ((size_t)b * n + t) * 3 * D + D;
            const size_t p = tpos(mx, p0 + t);
            for (int c = 0; c < D; c++) k[c] += lb[(size_t)(c / hd) * Tm + p];
        }
}

/* o = gamma(pos) * sigmoid(Q) * ybar */
static void gate(const mega_mixer *mx, const real *W, real *o, const real *qkv, const real *yb, int B, int n, int64_t p0) {
    const size_t D = (size_t)mx->cfg->D;
    const real *gm = HASPOS(mx) ? W + mx->off[O_GAMMA] : NULL;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) {
            const size_t r = (size_t)b * n + t;
            const real g = gm ? gm[tpos(mx, p0 + t)] : 1;
            for (size_t c = 0; c < D; c++) o[r * D + c] = g * mega_sigmoid(qkv[r * 3 * D + c]) * yb[r * D + c];
        }
}

static mega_status aft_forward(const mega_mixer *mx, real *W, mega_mixer_acts *A, real *y, const real *x,
                               const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    if (TLIM(mx) > 0 && T > TLIM(mx)) return too_long(mx, T);
    real *qkv = A->p[0], *yb = A->p[1], *lden = A->p[2], *o = A->p[3];
    real *wch = scratch, *ks = scratch + 2 * rup(D) + rup(R * 3 * D) + rup(R * D);
    mega_linear_forward(qkv, x, W + mx->off[O_QKV_W], W + mx->off[O_QKV_B], R, D, 3 * D);
    if (HASPOS(mx)) add_log_beta(mx, W, qkv, B, T, 0);
    if (is_pair(mx)) {
        mega_aft_pair_k k = pair_k(mx, W);
        mega_aft_pair_forward(&k, yb, lden, (uint8_t *)A->p[4], qkv + D, qkv + 2 * D, 3 * D, pad, B, T, ks, nt);
    } else {
        mega_aft_scan_k k = scan_k(mx, W, wch);
        mega_aft_scan_forward(&k, yb, lden, qkv + D, qkv + 2 * D, 3 * D, pad, B, T, ks, nt);
    }
    gate(mx, W, o, qkv, yb, B, T, 0);
    mega_linear_forward(y, o, W + mx->off[O_OUT_W], W + mx->off[O_OUT_B], R, D, D);
    return MEGA_OK;
}

static void aft_backward(const mega_mixer *mx, const real *W, real *dW, const mega_mixer_acts *A, real *dx, const real *dy,
                         const real *x, const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const mega_block_cfg *c = mx->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->D;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    const real *qkv = A->p[0], *yb = A->p[1], *lden = A->p[2], *o = A->p[3];
    real *wch = scratch, *dwc = wch + rup(D), *dq = dwc + rup(D), *dob = dq + rup(R * 3 * D), *ks = dob + rup(R * D);
    /* y = o Woutᵀ + b */
    mega_linear_backward(dob, dW + mx->off[O_OUT_W], dW + mx->off[O_OUT_B], dy, o, W + mx->off[O_OUT_W], R, D, D, 0);
    /* o = gamma sigmoid(Q) ybar: dQ = do gamma ybar s(1-s), dybar (in place in dob) = do gamma s */
    const real *gm = HASPOS(mx) ? W + mx->off[O_GAMMA] : NULL;
    real *dgm = HASPOS(mx) ? dW + mx->off[O_GAMMA] : NULL;
    memset(dq, 0, R * 3 * D * sizeof(real));
    for (int t = 0; t < T; t++) {
        const real g = gm ? gm[tpos(mx, t)] : 1;
        real acc = 0;
        for (int b = 0; b < B; b++) {
            const size_t r = (size_t)b * T + t;
            for (size_t ch = 0; ch < D; ch++) {
                const real s = mega_sigmoid(qkv[r * 3 * D + ch]), d = dob[r * D + ch], v = yb[r * D + ch];
                acc += d * s * v;
                dq[r * 3 * D + ch] = d * g * v * s * (1 - s);
                dob[r * D + ch] = d * g * s;
            }
        }
        if (dgm) dgm[tpos(mx, t)] += acc;
    }
    /* the ratio: dK, dV (and the table / decays) */
    if (is_pair(mx)) {
        mega_aft_pair_k k = pair_k(mx, W);
        mega_aft_pair_backward(&k, dq + D, dq + 2 * D, 3 * D, dW + mx->off[O_POS], dob, yb, lden,
                               (const uint8_t *)A->p[4], qkv + D, qkv + 2 * D, 3 * D, pad, B, T, ks, nt);
    } else {
        mega_aft_scan_k k = scan_k(mx, W, wch);
        const int tw = VAR(mx) == V_TW;
        memset(dwc, 0, D * sizeof(real));
        mega_aft_scan_backward(&k, dq + D, dq + 2 * D, 3 * D, tw ? dwc : NULL, dob, yb, lden, qkv + D, qkv + 2 * D, 3 * D,
                               pad, B, T, ks, nt);
        /* d time_decay_h = sum_{c in h} dw_c * w_h  (w = e^{raw}) */
        const int hd = c->D / HEADS(mx);
        if (tw)
            for (size_t ch = 0; ch < D; ch++) dW[mx->off[O_DECAY] + ch / hd] += dwc[ch] * wch[ch];
    }
    /* K + log beta_h(t): d time_beta[h, t] = sum over batch and the head's channels of dK */
    if (HASPOS(mx)) {
        const int hd = c->D / HEADS(mx);
        const size_t Tm = (size_t)c->max_len;
        real *db = dW + mx->off[O_BETA];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const real *dk = dq + ((size_t)b * T + t) * 3 * D + D;
                for (size_t ch = 0; ch < D; ch++) db[(size_t)(ch / hd) * Tm + tpos(mx, t)] += dk[ch];
            }
    }
    mega_linear_backward(dx, dW + mx->off[O_QKV_W], dW + mx->off[O_QKV_B], dq, x, W + mx->off[O_QKV_W], R, D, 3 * D, 0);
}

/* ---- streaming (causal) ------------------------------------------------------------------
 * state: scan variants p[0] = (s1, s2, e) [B, 3D]  (SPEC §5.4: 3 D_a floats per sequence)
 *        aft-full  p[0]/p[1] = K/V cache [B, capT, D], capT = min(cap, max-len)
 *        aft-local p[0]/p[1] = K/V ring [B, s, D] of the keys inside the band, p[2] = the
 *                  aggregate (s1, s2, e) [B, 3D] of the keys that left it (SPEC §10: 3D_a + 2sD_a) */
static int cache_rows(const mega_mixer *mx, int cap) {
    if (VAR(mx) == V_FULL) return MEGA_MAX(1, MEGA_MIN(cap, TLIM(mx)));
    if (VAR(mx) == V_LOCAL) return MEGA_MIN(WIN(mx), TLIM(mx));
    return 0;
}

static size_t aft_state_size(const mega_mixer *mx, int B, int cap) {
    const size_t D = (size_t)mx->cfg->D, rows = (size_t)cache_rows(mx, cap);
    if (!is_pair(mx)) return rup((size_t)B * 3 * D);
    return 2 * rup((size_t)B * rows * D) + (VAR(mx) == V_LOCAL ? rup((size_t)B * 3 * D) : 0);
}

static void aft_state_reset(const mega_mixer *mx, mega_mixer_state *S) {
    const int D = mx->cfg->D;
    S->pos = 0, S->len = 0;
    real *agg = is_pair(mx) ? (VAR(mx) == V_LOCAL ? S->p[2] : NULL) : S->p[0];
    if (agg)
        for (int b = 0; b < S->B; b++) mega_aft_scan_state_reset(agg + (size_t)b * 3 * D, D);
}

static mega_status aft_state_init(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *mem, int B, int cap) {
    (void)W;
    const size_t D = (size_t)mx->cfg->D;
    if (mx->cfg->bidir) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "bidirectional %s has no streaming form", mega_mixer_name(mx->cfg->mixer));
    if (cap < 1) MEGA_FAIL(MEGA_ERR_INVALID, "streaming capacity must be positive");
    memset(S, 0, sizeof *S);
    S->B = B;
    S->cap = VAR(mx) == V_FULL ? cache_rows(mx, cap) : cap;
    mega_bump b = {mem, 0};
    if (!is_pair(mx)) {
        S->p[0] = mega_bump_take(&b, (size_t)B * 3 * D), S->n[0] = (size_t)B * 3 * D;
    } else {
        const size_t rows = (size_t)cache_rows(mx, cap);
        S->p[0] = mega_bump_take(&b, (size_t)B * rows * D), S->n[0] = (size_t)B * rows * D;
        S->p[1] = mega_bump_take(&b, (size_t)B * rows * D), S->n[1] = (size_t)B * rows * D;
        S->iv[0] = (int)rows;
        if (VAR(mx) == V_LOCAL) S->p[2] = mega_bump_take(&b, (size_t)B * 3 * D), S->n[2] = (size_t)B * 3 * D;
    }
    aft_state_reset(mx, S);
    return MEGA_OK;
}

/* step scratch: wch [D] | qkv [R,3D] | ybar [R,D] | o [R,D] | per-sequence query buffers */
static size_t aft_step_scratch(const mega_mixer *mx, int B, int T, int cap) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D;
    const size_t q = 2 * ((size_t)cache_rows(mx, cap) + 2);
    return rup(D) + rup(R * 3 * D) + 2 * rup(R * D) + rup((size_t)B * q) + 64;
}

static mega_status aft_step(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                            real *scratch) {
    const int B = S->B;
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D;
    if (TLIM(mx) > 0 && S->pos + T > TLIM(mx)) return too_long(mx, (long long)S->pos + T);
    if (VAR(mx) == V_FULL && S->pos + T > S->cap)
        MEGA_FAIL(MEGA_ERR_INVALID, "stream of %lld tokens exceeds the aft-full cache capacity %d", (long long)S->pos + T, S->cap);
    const int rows = is_pair(mx) ? S->iv[0] : 0;
    const size_t q = 2 * ((size_t)rows + 2);
    real *wch = scratch, *qkv = wch + rup(D), *yb = qkv + rup(R * 3 * D), *o = yb + rup(R * D), *qb = o + rup(R * D);
    mega_linear_forward(qkv, x, W + mx->off[O_QKV_W], W + mx->off[O_QKV_B], R, D, 3 * D);
    if (HASPOS(mx)) add_log_beta(mx, W, qkv, B, T, S->pos);
    mega_aft_scan_k sk = scan_k(mx, W, wch);
    mega_aft_pair_k pk = pair_k(mx, W);
#pragma omp parallel for schedule(static) if ((size_t)B * T * D * (rows + 1) > MEGA_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int64_t p = S->pos + t;
            const size_t r = (size_t)b * T + t;
            const real *kr = qkv + r * 3 * D + D, *vr = kr + D;
            if (!is_pair(mx)) {
                mega_aft_scan_step(&sk, S->p[0] + (size_t)b * 3 * D, yb + r * D, kr, vr);
                continue;
            }
            real *Kc = S->p[0] + (size_t)b * rows * D, *Vc = S->p[1] + (size_t)b * rows * D;
            if (VAR(mx) == V_LOCAL) {
                /* the key leaving the band joins the aggregate before its ring slot is reused */
                const int s = rows;
                if (p >= s) mega_aft_agg_add(S->p[2] + (size_t)b * 3 * D, Kc + (size_t)(p % s) * D, Vc + (size_t)(p % s) * D, (int)D);
                memcpy(Kc + (size_t)(p % s) * D, kr, D * sizeof(real));
                memcpy(Vc + (size_t)(p % s) * D, vr, D * sizeof(real));
                mega_aft_pair_query(&pk, (int)p, (int)MEGA_MAX(0, p - s + 1), (int)p + 1, Kc, Vc, D, s,
                                    S->p[2] + (size_t)b * 3 * D, yb + r * D, qb + (size_t)b * q);
            } else {
                memcpy(Kc + (size_t)p * D, kr, D * sizeof(real));
                memcpy(Vc + (size_t)p * D, vr, D * sizeof(real));
                mega_aft_pair_query(&pk, (int)p, 0, (int)p + 1, Kc, Vc, D, 0, NULL, yb + r * D, qb + (size_t)b * q);
            }
        }
    gate(mx, W, o, qkv, yb, B, T, S->pos);
    mega_linear_forward(y, o, W + mx->off[O_OUT_W], W + mx->off[O_OUT_B], R, D, D);
    S->pos += T;
    S->len = (int)MEGA_MIN(S->pos, (int64_t)INT32_MAX);
    return MEGA_OK;
}

#define AFT_OPS(NAME)                                                                                           \
    {                                                                                                           \
        NAME, 0, 1, 1, aft_declare, aft_init, aft_acts, aft_scratch, aft_forward, aft_backward, aft_state_size, \
            aft_state_init, aft_state_reset, aft_step_scratch, aft_step,                                        \
    }
const mega_mixer_ops mega_mixer_ops_aft_full = AFT_OPS("aft-full");
const mega_mixer_ops mega_mixer_ops_aft_local = AFT_OPS("aft-local");
const mega_mixer_ops mega_mixer_ops_aft_simple = AFT_OPS("aft-simple");
const mega_mixer_ops mega_mixer_ops_aft_tw = AFT_OPS("aft-tw");
