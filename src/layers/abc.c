/*
 * The ABC token mixers (SPEC §7) behind the mixer interface (mixer.h): abc-window,
 * abc-linformer, abc-mlp. Each is a "core" (self_residual = 0) that the block wraps in the
 * standard residual sublayer; parameters are "<prefix>mixer.<name>".
 *
 *   Q = X Wq^T + bq, K = X Wk^T + bk, V = X Wv^T + bv       (SPEC §3.1; H heads of d = D/H)
 *   per head: o_t = V~^T softmax(K~ q_t / sqrt d)           (§7.1; memory of n = cfg->memory slots)
 *   Y = concat_h(o) Wo^T + bo
 *
 * The memories (§7.2):
 *   abc-window     causal only: the last n tokens (sliding-window attention of width n; empty
 *                  slots masked by default, the literal form via mega_abc_set_mask_empty).
 *                  Bidirectional is rejected: there is no shared-memory form (§7.2a), its encoder
 *                  analogue is banded local attention (the `local` mixer).
 *   abc-linformer  phi^K_i = E[:, i], phi^V_i = F[:, i], E, F in R^{n x N_max} (N_max = cfg->max_len,
 *                  names compress_k / compress_v as fairseq): bidirectional K~ = E[:, :L] K;
 *                  causal K~_t = K~_{t-1} + E[:, t] k_t^T. Pad keys are zeroed before the
 *                  compression; a position >= N_max is an error.
 *   abc-mlp        phi = softmax over positions (per slot) of l = X W_phi^T, W_phi in R^{H n x D},
 *                  separate for K and V (phi_k / phi_v, [ext]: no bias, N(0, 0.02)):
 *                  bidirectional over the valid positions; causal by the normalised cumulative
 *                  (logaddexp) recurrence of §7.3 with the exact reverse scan of §7.4.
 *
 * Saved activations (A->p): q, k, v, o [B,T,D]; P [B,T,H,n] slot weights; bidirectional memories
 * K~, V~ [B,H,n,d]; abc-mlp: Phi_K^T, Phi_V^T [B,H n,T] (bidirectional) or the logits l_K, l_V
 * [B,T,H n] (causal).
 * Streaming state (§7.5): window: ring buffers of keys and values [B,n,D] x 2; Linformer:
 * K~, V~ [B,H,n,d] (+ the position counter); ABC-MLP: K~, V~ and log Z_K, log Z_V [B,H,n].
 */
#include "layers/block.h"
#include "ops/abc.h"
#ifdef _OPENMP
#include <omp.h>
#endif

enum { O_QW, O_QB, O_KW, O_KB, O_VW, O_VB, O_OW, O_OB, O_CK, O_CV }; /* O_CK/O_CV: E, F or W_phi K/V */
enum { IV_H, IV_N, IV_DH, IV_MASK, IV_NMAX };
enum { A_Q, A_K, A_V, A_O, A_P, A_KM, A_VM, A_CK, A_CV };
enum { SITE_ATTN = 31 }; /* dropout site of the slot weights (the block's sublayer dropout is 11) */

static int kind_of(const mega_mixer *mx) { return (int)mx->cfg->mixer; }
static int is_win(const mega_mixer *mx) { return kind_of(mx) == MEGA_MIXER_ABC_WINDOW; }
static int is_lin(const mega_mixer *mx) { return kind_of(mx) == MEGA_MIXER_ABC_LINFORMER; }
static int is_mlp(const mega_mixer *mx) { return kind_of(mx) == MEGA_MIXER_ABC_MLP; }

void mega_abc_set_mask_empty(struct mega_mixer *mx, int on) { mx->iv[IV_MASK] = on ? 1 : 0; }

static mega_status abc_declare(mega_mixer *mx, mega_params *P, const char *prefix) {
    const mega_block_cfg *c = mx->cfg;
    const char *nm = mega_mixer_name(c->mixer);
    if (c->heads < 1 || c->D % c->heads)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s: heads (%d) must be positive and divide embed-dim (%d)", nm, c->heads, c->D);
    if (c->memory < 1 || c->memory > 65536)
        MEGA_FAIL(MEGA_ERR_INVALID, "%s needs --memory-size n in [1, 65536] (memory slots per head), got %d", nm, c->memory);
    if (is_win(mx) && c->bidir)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "abc-window has no bidirectional form: a window memory is per query, not "
                                        "shared (SPEC §7.2a); use --mixer local for banded local attention");
    if (is_lin(mx) && (c->max_len < 1 || c->max_len > (1 << 24)))
        MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer needs --max-len in [1, 2^24] (the N_max columns of E and F), got %d",
                  c->max_len);
    if (c->pos != MEGA_POS_NONE)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s: positional scheme '%s' is not available for ABC mixers (SPEC §8.8)", nm,
                  mega_pos_name(c->pos));
    if (c->attn_window)
        MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s: --attn-window does not apply to ABC (the memory size is its window, SPEC §8.8)",
                  nm);
    if (c->log_n) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "%s: log-n scaling does not apply to ABC (SPEC §8.8)", nm);
    const int64_t D = c->D, H = c->heads, n = c->memory;
    mx->iv[IV_H] = c->heads, mx->iv[IV_N] = c->memory, mx->iv[IV_DH] = c->D / c->heads;
    mx->iv[IV_MASK] = 1; /* [ext] mask_empty_slots, on by default (§7.1) */
    mx->iv[IV_NMAX] = is_lin(mx) ? c->max_len : 0;
    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%smixer.", prefix);
    static const char *const proj[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
    for (int i = 0; i < 4; i++) {
        char w[64], b[64];
        snprintf(w, sizeof w, "%s.weight", proj[i]);
        snprintf(b, sizeof b, "%s.bias", proj[i]);
        MEGA_TRY(MEGA_PADD(P, pre, w, MEGA_P_DECAY, &mx->off[O_QW + 2 * i], D, D));
        MEGA_TRY(MEGA_PADD(P, pre, b, 0, &mx->off[O_QB + 2 * i], D));
    }
    if (is_lin(mx)) {
        MEGA_TRY(MEGA_PADD(P, pre, "compress_k.weight", MEGA_P_DECAY, &mx->off[O_CK], n, (int64_t)c->max_len));
        MEGA_TRY(MEGA_PADD(P, pre, "compress_v.weight", MEGA_P_DECAY, &mx->off[O_CV], n, (int64_t)c->max_len));
    } else if (is_mlp(mx)) {
        MEGA_TRY(MEGA_PADD(P, pre, "phi_k.weight", MEGA_P_DECAY, &mx->off[O_CK], H * n, D));
        MEGA_TRY(MEGA_PADD(P, pre, "phi_v.weight", MEGA_P_DECAY, &mx->off[O_CV], H * n, D));
    }
    return MEGA_OK;
}

static void abc_init(const mega_mixer *mx, real *W, mega_rng *rng) {
    const mega_block_cfg *c = mx->cfg;
    const size_t D = (size_t)c->D, Hn = (size_t)c->heads * c->memory, n = (size_t)c->memory;
    /* §3.1 [ext] fairseq: q/k/v xavier-uniform with gain 2^-1/2, out_proj xavier-uniform, zero biases */
    const double a_qkv = sqrt(0.5) * sqrt(6.0 / (2.0 * (double)D)), a_out = sqrt(6.0 / (2.0 * (double)D));
    for (int i = 0; i < 4; i++) {
        const double a = i < 3 ? a_qkv : a_out;
        mega_fill_uniform(W + mx->off[O_QW + 2 * i], D * D, -a, a, rng);
        mega_fill_const(W + mx->off[O_QB + 2 * i], D, 0);
    }
    if (is_lin(mx)) { /* §7.2b: xavier-uniform with gain 2^-1/2 on (n, N_max) */
        const size_t N = (size_t)c->max_len;
        const double a = sqrt(0.5) * sqrt(6.0 / (double)(n + N));
        mega_fill_uniform(W + mx->off[O_CK], n * N, -a, a, rng);
        mega_fill_uniform(W + mx->off[O_CV], n * N, -a, a, rng);
    } else if (is_mlp(mx)) { /* §7.2c [ext]: N(0, 0.02), no bias */
        mega_fill_normal(W + mx->off[O_CK], Hn * D, 0, 0.02, rng);
        mega_fill_normal(W + mx->off[O_CV], Hn * D, 0, 0.02, rng);
    }
}

static size_t abc_acts(const mega_mixer *mx, mega_mixer_acts *A, real *base, int B, int T) {
    const mega_block_cfg *c = mx->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->D, Hn = (size_t)c->heads * c->memory;
    mega_bump b = {base, 0};
    mega_mixer_acts a;
    memset(&a, 0, sizeof a);
    for (int i = A_Q; i <= A_O; i++) a.p[i] = mega_bump_take(&b, R * D);
    a.p[A_P] = mega_bump_take(&b, R * Hn);
    if (c->bidir) {
        a.p[A_KM] = mega_bump_take(&b, (size_t)B * c->memory * D);
        a.p[A_VM] = mega_bump_take(&b, (size_t)B * c->memory * D);
    }
    if (is_mlp(mx)) {
        a.p[A_CK] = mega_bump_take(&b, R * Hn);
        a.p[A_CV] = mega_bump_take(&b, R * Hn);
    }
    if (A) *A = a;
    return b.off;
}

static mega_abc_k kernel_of(const mega_mixer *mx, int T, const mega_run *run) {
    const mega_block_cfg *c = mx->cfg;
    mega_abc_k k;
    memset(&k, 0, sizeof k);
    k.T = T, k.n = mx->iv[IV_N], k.d = mx->iv[IV_DH], k.H = mx->iv[IV_H];
    k.mode = is_win(mx) ? MEGA_ABC_WINDOW : is_lin(mx) ? MEGA_ABC_SUM : MEGA_ABC_LOGZ;
    k.mask_empty = mx->iv[IV_MASK];
    k.scale = (real)(1.0 / sqrt((double)k.d));
    k.p_drop = run && run->training ? c->attn_dropout : 0;
    k.key = run ? mega__subkey(run->key, SITE_ATTN) : 0;
    return k;
}

/* per-unit temporary reals: the kernel's own plus (causal scan) the running memory */
static size_t unit_tmp(const mega_mixer *mx, const mega_abc_k *k, int backward) {
    const size_t nd = (size_t)k->n * k->d;
    if (is_win(mx)) return mega_abc_window_tmp(k);
    if (mx->cfg->bidir) return mega_abc_bidir_tmp(k);
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

static size_t scr_layout(const mega_mixer *mx, int B, int T, int nt, real *base, abc_scr *s) {
    const mega_block_cfg *c = mx->cfg;
    const size_t R = (size_t)B * T, D = (size_t)c->D, Hn = (size_t)c->heads * c->memory, n = (size_t)c->memory;
    mega_bump b = {base, 0};
    mega_abc_k k = kernel_of(mx, T, NULL);
    memset(s, 0, sizeof *s);
    s->dO = mega_bump_take(&b, R * D);
    s->dQ = mega_bump_take(&b, R * D);
    s->dK = mega_bump_take(&b, R * D);
    s->dV = mega_bump_take(&b, R * D);
    if (!is_win(mx)) {
        s->dck = mega_bump_take(&b, R * Hn);
        s->dcv = mega_bump_take(&b, R * Hn);
    }
    if (is_lin(mx)) {
        const size_t ph = c->bidir ? (size_t)B * n * T : (size_t)T * n;
        s->phk = mega_bump_take(&b, ph);
        s->phv = mega_bump_take(&b, ph);
    }
    s->per = (unit_tmp(mx, &k, 1) + 15) & ~(size_t)15;
    s->thr = mega_bump_take(&b, s->per * (size_t)(nt > 0 ? nt : 1));
    return b.off;
}

static size_t abc_scratch(const mega_mixer *mx, int B, int T, int nthreads) {
    abc_scr s;
    return scr_layout(mx, B, T, nthreads, NULL, &s) + 16;
}

/* Linformer control: bidirectional Phi^T [B, n, T] = E[:, :T] with pad columns zeroed (§7.2b:
 * pads zeroed before compression); causal rows [T, n] = E[:, pos + t]^T */
static void lin_phi_bidir(const mega_mixer *mx, const real *E, real *ph, const uint8_t *pad, int B, int T) {
    const size_t n = (size_t)mx->iv[IV_N], N = (size_t)mx->iv[IV_NMAX];
    for (int b = 0; b < B; b++)
        for (size_t j = 0; j < n; j++) {
            real *row = ph + ((size_t)b * n + j) * T;
            for (int t = 0; t < T; t++) row[t] = (pad && pad[(size_t)b * T + t]) ? 0 : E[j * N + (size_t)t];
        }
}
static void lin_rows(const mega_mixer *mx, const real *E, real *rows, int64_t pos, int T) {
    const size_t n = (size_t)mx->iv[IV_N], N = (size_t)mx->iv[IV_NMAX];
    for (int t = 0; t < T; t++)
        for (size_t j = 0; j < n; j++) rows[(size_t)t * n + j] = E[j * N + (size_t)pos + (size_t)t];
}

/* ABC-MLP bidirectional control: Phi^T [B, H n, T], each row the softmax over the valid
 * positions of l^T = W_phi X^T (§7.2c); a row with no valid position is 0 */
static void mlp_phi_bidir(const mega_mixer *mx, const real *Wp, real *ph, const real *x, const uint8_t *pad, int B,
                          int T) {
    const size_t D = (size_t)mx->cfg->D, Hn = (size_t)mx->iv[IV_H] * mx->iv[IV_N];
    for (int b = 0; b < B; b++) {
        real *pb = ph + (size_t)b * Hn * T;
        mega_gemm(0, 1, Hn, (size_t)T, D, 1, Wp, D, x + (size_t)b * T * D, D, 0, pb, (size_t)T);
        const uint8_t *pr = pad ? pad + (size_t)b * T : NULL;
#pragma omp parallel for schedule(static) if (Hn * (size_t)T > MEGA_PAR_MIN)
        for (size_t j = 0; j < Hn; j++) {
            real *row = pb + j * T;
            if (pr)
                for (int t = 0; t < T; t++)
                    if (pr[t]) row[t] = -INFINITY;
            mega_softmax_row(row, (size_t)T);
        }
    }
}

static mega_status abc_forward(const mega_mixer *mx, real *W, mega_mixer_acts *A, real *y, const real *x,
                               const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    const mega_block_cfg *c = mx->cfg;
    const int H = mx->iv[IV_H], n = mx->iv[IV_N], dh = mx->iv[IV_DH];
    const size_t R = (size_t)B * T, D = (size_t)c->D, Hn = (size_t)H * n, nd = (size_t)n * dh;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    if (is_lin(mx) && T > mx->iv[IV_NMAX])
        MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer: sequence length %d exceeds max-len %d (E and F have max-len columns)",
                  T, mx->iv[IV_NMAX]);
    real *q = A->p[A_Q], *k = A->p[A_K], *v = A->p[A_V], *o = A->p[A_O], *P = A->p[A_P];
    mega_linear_forward(q, x, W + mx->off[O_QW], W + mx->off[O_QB], R, D, D);
    mega_linear_forward(k, x, W + mx->off[O_KW], W + mx->off[O_KB], R, D, D);
    mega_linear_forward(v, x, W + mx->off[O_VW], W + mx->off[O_VB], R, D, D);
    abc_scr s;
    scr_layout(mx, B, T, nt, scratch, &s);
    mega_abc_k kk = kernel_of(mx, T, run);
    const real *phk = NULL, *phv = NULL;
    size_t ph_b = 0, ph_h = 0; /* bidirectional Phi^T of unit (b,h) at phk + b*ph_b + h*ph_h */
    if (is_lin(mx)) {
        if (c->bidir) {
            lin_phi_bidir(mx, W + mx->off[O_CK], s.phk, pad, B, T);
            lin_phi_bidir(mx, W + mx->off[O_CV], s.phv, pad, B, T);
            phk = s.phk, phv = s.phv, ph_b = (size_t)n * T, ph_h = 0;
        } else {
            lin_rows(mx, W + mx->off[O_CK], s.phk, 0, T);
            lin_rows(mx, W + mx->off[O_CV], s.phv, 0, T);
            kk.ck = s.phk, kk.cv = s.phv, kk.cs_b = 0, kk.cs_t = (size_t)n, kk.cs_h = 0;
        }
    } else if (is_mlp(mx)) {
        if (c->bidir) {
            mlp_phi_bidir(mx, W + mx->off[O_CK], A->p[A_CK], x, pad, B, T);
            mlp_phi_bidir(mx, W + mx->off[O_CV], A->p[A_CV], x, pad, B, T);
            phk = A->p[A_CK], phv = A->p[A_CV], ph_b = Hn * T, ph_h = (size_t)n * T;
        } else {
            mega_linear_forward(A->p[A_CK], x, W + mx->off[O_CK], NULL, R, D, Hn);
            mega_linear_forward(A->p[A_CV], x, W + mx->off[O_CV], NULL, R, D, Hn);
            kk.ck = A->p[A_CK], kk.cv = A->p[A_CV], kk.cs_b = (size_t)T * Hn, kk.cs_t = Hn, kk.cs_h = (size_t)n;
        }
    }
    const long units = (long)B * H;
    const int win = is_win(mx), bidir = c->bidir;
#pragma omp parallel for schedule(static) num_threads(nt) if (units > 1 && R * Hn * (size_t)dh > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        real *tmp = s.thr + s.per * (size_t)tid;
        const int b = (int)(u / H), h = (int)(u % H);
        if (win) {
            mega_abc_window_forward(&kk, o, P, q, k, v, pad, b, h);
        } else if (bidir) {
            real *Km = A->p[A_KM] + (size_t)u * nd, *Vm = A->p[A_VM] + (size_t)u * nd;
            mega_abc_bidir_forward(&kk, o, P, Km, Vm, q, k, v, phk + (size_t)b * ph_b + (size_t)h * ph_h,
                                   phv + (size_t)b * ph_b + (size_t)h * ph_h, (size_t)T, b, h, tmp);
        } else {
            real *Mk = tmp, *Mv = Mk + nd, *lzk = Mv + nd, *lzv = lzk + n, *rest = lzv + n;
            for (size_t i = 0; i < 2 * nd; i++) Mk[i] = 0;
            for (int j = 0; j < n; j++) lzk[j] = lzv[j] = -INFINITY;
            mega_abc_scan_forward(&kk, o, P, q, k, v, pad, b, h, Mk, Mv, lzk, lzv, rest);
        }
    }
    mega_linear_forward(y, o, W + mx->off[O_OW], W + mx->off[O_OB], R, D, D);
    return MEGA_OK;
}

static void abc_backward(const mega_mixer *mx, const real *W, real *dW, const mega_mixer_acts *A, real *dx,
                         const real *dy, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                         real *scratch) {
    const mega_block_cfg *c = mx->cfg;
    const int H = mx->iv[IV_H], n = mx->iv[IV_N], dh = mx->iv[IV_DH];
    const size_t R = (size_t)B * T, D = (size_t)c->D, Hn = (size_t)H * n, nd = (size_t)n * dh;
    const int nt = run->nthreads > 0 ? run->nthreads : 1;
    const real *q = A->p[A_Q], *k = A->p[A_K], *v = A->p[A_V], *P = A->p[A_P];
    abc_scr s;
    scr_layout(mx, B, T, nt, scratch, &s);
    mega_abc_k kk = kernel_of(mx, T, run);
    /* Y = O Wo^T + bo */
    mega_linear_backward(s.dO, dW + mx->off[O_OW], dW + mx->off[O_OB], dy, A->p[A_O], W + mx->off[O_OW], R, D, D, 0);
    const real *phk = NULL, *phv = NULL;
    size_t ph_b = 0, ph_h = 0;
    if (is_lin(mx)) {
        if (c->bidir) {
            lin_phi_bidir(mx, W + mx->off[O_CK], s.phk, pad, B, T);
            lin_phi_bidir(mx, W + mx->off[O_CV], s.phv, pad, B, T);
            phk = s.phk, phv = s.phv, ph_b = (size_t)n * T;
        } else {
            lin_rows(mx, W + mx->off[O_CK], s.phk, 0, T);
            lin_rows(mx, W + mx->off[O_CV], s.phv, 0, T);
            kk.ck = s.phk, kk.cv = s.phv, kk.cs_b = 0, kk.cs_t = (size_t)n, kk.cs_h = 0;
        }
    } else if (is_mlp(mx)) {
        if (c->bidir) {
            phk = A->p[A_CK], phv = A->p[A_CV], ph_b = Hn * T, ph_h = (size_t)n * T;
        } else {
            kk.ck = A->p[A_CK], kk.cv = A->p[A_CV], kk.cs_b = (size_t)T * Hn, kk.cs_t = Hn, kk.cs_h = (size_t)n;
        }
    }
    const long units = (long)B * H;
    const int win = is_win(mx), bidir = c->bidir;
#pragma omp parallel for schedule(static) num_threads(nt) if (units > 1 && R * Hn * (size_t)dh > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        real *tmp = s.thr + s.per * (size_t)tid;
        const int b = (int)(u / H), h = (int)(u % H);
        if (win) {
            mega_abc_window_backward(&kk, s.dQ, s.dK, s.dV, s.dO, P, q, k, v, pad, b, h, tmp);
        } else if (bidir) {
            /* dL/dPhi^T of the unit: [B, H, n, T] */
            const size_t du = (size_t)u * n * T;
            mega_abc_bidir_backward(&kk, s.dQ, s.dK, s.dV, s.dck + du, s.dcv + du, (size_t)T, s.dO, P,
                                    A->p[A_KM] + (size_t)u * nd, A->p[A_VM] + (size_t)u * nd, q, k, v,
                                    phk + (size_t)b * ph_b + (size_t)h * ph_h, phv + (size_t)b * ph_b + (size_t)h * ph_h,
                                    (size_t)T, b, h, tmp);
        } else {
            mega_abc_scan_backward(&kk, s.dQ, s.dK, s.dV, s.dck, s.dcv, s.dO, P, q, k, v, pad, b, h, tmp);
        }
    }
    /* the control parameters */
    if (is_lin(mx)) {
        /* dE[j, t] += sum over b, h of dL/dphi (bidirectional: only valid columns; causal: the
         * scan already wrote 0 at pads) */
        const size_t N = (size_t)mx->iv[IV_NMAX];
        for (int which = 0; which < 2; which++) {
            real *dE = dW + mx->off[which ? O_CV : O_CK];
            const real *g = which ? s.dcv : s.dck;
#pragma omp parallel for schedule(static) if (R * Hn > MEGA_PAR_MIN)
            for (int j = 0; j < n; j++)
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < H; h++)
                        for (int t = 0; t < T; t++) {
                            const size_t r = (size_t)b * T + t;
                            if (bidir) {
                                if (!pad || !pad[r]) dE[(size_t)j * N + t] += g[(((size_t)b * H + h) * n + j) * T + t];
                            } else {
                                dE[(size_t)j * N + t] += g[(r * H + h) * n + j];
                            }
                        }
        }
    }
    /* X -> Q, K, V */
    mega_linear_backward(dx, dW + mx->off[O_QW], dW + mx->off[O_QB], s.dQ, x, W + mx->off[O_QW], R, D, D, 0);
    mega_linear_backward(dx, dW + mx->off[O_KW], dW + mx->off[O_KB], s.dK, x, W + mx->off[O_KW], R, D, D, 1);
    mega_linear_backward(dx, dW + mx->off[O_VW], dW + mx->off[O_VB], s.dV, x, W + mx->off[O_VW], R, D, D, 1);
    if (is_mlp(mx)) {
        for (int which = 0; which < 2; which++) {
            const size_t oW = mx->off[which ? O_CV : O_CK];
            real *g = which ? s.dcv : s.dck;
            if (bidir) {
                /* each row of Phi^T is a softmax over positions (§7.4):
                 * dl = Phi (dPhi - sum Phi dPhi); then dW_phi += dl^T X, dX += dl W_phi per batch */
                const real *ph = which ? A->p[A_CV] : A->p[A_CK];
#pragma omp parallel for schedule(static) if (R * Hn > MEGA_PAR_MIN)
                for (size_t r = 0; r < (size_t)B * Hn; r++)
                    mega_softmax_row_backward(g + r * T, g + r * T, ph + r * T, (size_t)T);
                for (int b = 0; b < B; b++) {
                    const real *gb = g + (size_t)b * Hn * T, *xb = x + (size_t)b * T * D;
                    mega_gemm(0, 0, Hn, D, (size_t)T, 1, gb, (size_t)T, xb, D, 1, dW + oW, D);
                    mega_gemm(1, 0, (size_t)T, D, Hn, 1, gb, (size_t)T, W + oW, D, 1, dx + (size_t)b * T * D, D);
                }
            } else {
                mega_linear_backward(dx, dW + oW, NULL, g, x, W + oW, R, D, Hn, 1);
            }
        }
    }
}

/* ---- streaming (§7.5) ------------------------------------------------------------------- */

static size_t state_reals(const mega_mixer *mx, int B, size_t n[3]) {
    const size_t D = (size_t)mx->cfg->D, Hn = (size_t)mx->iv[IV_H] * mx->iv[IV_N];
    n[0] = n[1] = (size_t)B * mx->iv[IV_N] * D; /* ring buffers [B,n,D] or memories [B,H,n,d] */
    n[2] = is_mlp(mx) ? 2 * (size_t)B * Hn : 0;  /* log Z_K, log Z_V [B,H,n] */
    mega_bump b = {NULL, 0};
    for (int i = 0; i < 3; i++) mega_bump_take(&b, n[i]);
    return b.off;
}

static size_t abc_state_size(const mega_mixer *mx, int B, int cap) {
    (void)cap; /* bounded memory: the state does not grow with the stream */
    size_t n[3];
    return state_reals(mx, B, n);
}

static void abc_state_reset(const mega_mixer *mx, mega_mixer_state *S) {
    (void)mx;
    S->len = 0, S->pos = 0;
    for (int i = 0; i < 2; i++)
        if (S->p[i]) memset(S->p[i], 0, S->n[i] * sizeof(real));
    for (size_t i = 0; i < S->n[2]; i++) S->p[2][i] = -INFINITY; /* empty memory: log Z = -inf */
}

static mega_status abc_state_init(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *mem, int B,
                                  int cap) {
    (void)W;
    if (mx->cfg->bidir) MEGA_FAIL(MEGA_ERR_UNSUPPORTED, "bidirectional %s has no streaming state", mx->ops->name);
    if (B < 1) MEGA_FAIL(MEGA_ERR_INVALID, "%s: streaming batch must be positive", mx->ops->name);
    memset(S, 0, sizeof *S);
    S->B = B, S->cap = cap;
    size_t n[3];
    state_reals(mx, B, n);
    mega_bump b = {mem, 0};
    for (int i = 0; i < 3; i++) {
        S->p[i] = mega_bump_take(&b, n[i]);
        S->n[i] = n[i];
    }
    abc_state_reset(mx, S);
    return MEGA_OK;
}

/* step scratch: q, k, v, o [R,D]; control (MLP logits [R,H n] x 2, Linformer rows [T,n] x 2);
 * per-unit temporaries (B*H of them: the step does not know the thread count) */
typedef struct {
    real *q, *k, *v, *o, *ck, *cv, *tmp;
    size_t per;
} abc_sscr;

static size_t sscr_layout(const mega_mixer *mx, int B, int T, real *base, abc_sscr *s) {
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D, Hn = (size_t)mx->iv[IV_H] * mx->iv[IV_N];
    mega_bump b = {base, 0};
    memset(s, 0, sizeof *s);
    s->q = mega_bump_take(&b, R * D);
    s->k = mega_bump_take(&b, R * D);
    s->v = mega_bump_take(&b, R * D);
    s->o = mega_bump_take(&b, R * D);
    const size_t cn = is_mlp(mx) ? R * Hn : is_lin(mx) ? (size_t)T * mx->iv[IV_N] : 0;
    s->ck = mega_bump_take(&b, cn);
    s->cv = mega_bump_take(&b, cn);
    mega_abc_k k = kernel_of(mx, T, NULL);
    s->per = ((is_win(mx) ? mega_abc_window_tmp(&k) : mega_abc_scan_fwd_tmp(&k)) + 15) & ~(size_t)15;
    s->tmp = mega_bump_take(&b, s->per * (size_t)B * mx->iv[IV_H]);
    return b.off;
}

static size_t abc_step_scratch(const mega_mixer *mx, int B, int T, int cap) {
    (void)cap;
    abc_sscr s;
    return sscr_layout(mx, B, T, NULL, &s) + 16;
}

/* T tokens per sequence (eval semantics, no pads): equals the causal forward over the stream */
static mega_status abc_step(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                            real *scratch) {
    const int B = S->B, H = mx->iv[IV_H], n = mx->iv[IV_N], dh = mx->iv[IV_DH];
    const size_t R = (size_t)B * T, D = (size_t)mx->cfg->D, Hn = (size_t)H * n, nd = (size_t)n * dh;
    if (T < 1) return MEGA_OK;
    if (is_lin(mx) && S->pos + T > mx->iv[IV_NMAX])
        MEGA_FAIL(MEGA_ERR_INVALID, "abc-linformer: streaming position %lld exceeds max-len %d (E and F have max-len columns)",
                  (long long)(S->pos + T - 1), mx->iv[IV_NMAX]);
    abc_sscr s;
    sscr_layout(mx, B, T, scratch, &s);
    mega_linear_forward(s.q, x, W + mx->off[O_QW], W + mx->off[O_QB], R, D, D);
    mega_linear_forward(s.k, x, W + mx->off[O_KW], W + mx->off[O_KB], R, D, D);
    mega_linear_forward(s.v, x, W + mx->off[O_VW], W + mx->off[O_VB], R, D, D);
    mega_abc_k kk = kernel_of(mx, T, NULL);
    if (is_lin(mx)) {
        lin_rows(mx, W + mx->off[O_CK], s.ck, S->pos, T);
        lin_rows(mx, W + mx->off[O_CV], s.cv, S->pos, T);
        kk.ck = s.ck, kk.cv = s.cv, kk.cs_b = 0, kk.cs_t = (size_t)n, kk.cs_h = 0;
    } else if (is_mlp(mx)) {
        mega_linear_forward(s.ck, x, W + mx->off[O_CK], NULL, R, D, Hn);
        mega_linear_forward(s.cv, x, W + mx->off[O_CV], NULL, R, D, Hn);
        kk.ck = s.ck, kk.cv = s.cv, kk.cs_b = (size_t)T * Hn, kk.cs_t = Hn, kk.cs_h = (size_t)n;
    }
    const long units = (long)B * H;
    const int win = is_win(mx);
    const int64_t pos = S->pos;
#pragma omp parallel for schedule(static) if (units > 1 && R * Hn * (size_t)dh > MEGA_PAR_MIN)
    for (long u = 0; u < units; u++) {
        const int b = (int)(u / H), h = (int)(u % H);
        real *tmp = s.tmp + s.per * (size_t)u;
        const size_t off = (size_t)h * dh;
        if (win) {
            /* ring buffer: token at absolute position p lives in slot p mod n; the filled slots
             * are 0..min(p+1, n)-1 */
            real *kr = S->p[0] + (size_t)b * n * D + off, *vr = S->p[1] + (size_t)b * n * D + off;
            for (int t = 0; t < T; t++) {
                const int64_t p = pos + t;
                const size_t r = (size_t)b * T + t, slot = (size_t)(p % n);
                memcpy(kr + slot * D, s.k + r * D + off, (size_t)dh * sizeof(real));
                memcpy(vr + slot * D, s.v + r * D + off, (size_t)dh * sizeof(real));
                const int m = p + 1 < n ? (int)(p + 1) : n;
                mega_abc_window_read(&kk, s.o + r * D + off, tmp, s.q + r * D + off, kr, vr, D, m, NULL, n - m, 0);
            }
        } else {
            real *Mk = S->p[0] + (size_t)u * nd, *Mv = S->p[1] + (size_t)u * nd;
            real *lzk = is_mlp(mx) ? S->p[2] + (size_t)u * n : NULL;
            real *lzv = is_mlp(mx) ? S->p[2] + Hn * (size_t)B + (size_t)u * n : NULL;
            mega_abc_scan_forward(&kk, s.o, NULL, s.q, s.k, s.v, NULL, b, h, Mk, Mv, lzk, lzv, tmp);
        }
    }
    mega_linear_forward(y, s.o, W + mx->off[O_OW], W + mx->off[O_OB], R, D, D);
    S->pos += T;
    return MEGA_OK;
}

/* name, self_residual, causal, bidirectional, ... */
const mega_mixer_ops mega_mixer_ops_abc_window = {
    "abc-window", 0, 1, 0, abc_declare, abc_init, abc_acts, abc_scratch, abc_forward, abc_backward,
    abc_state_size, abc_state_init, abc_state_reset, abc_step_scratch, abc_step,
};
const mega_mixer_ops mega_mixer_ops_abc_linformer = {
    "abc-linformer", 0, 1, 1, abc_declare, abc_init, abc_acts, abc_scratch, abc_forward, abc_backward,
    abc_state_size, abc_state_init, abc_state_reset, abc_step_scratch, abc_step,
};
const mega_mixer_ops mega_mixer_ops_abc_mlp = {
    "abc-mlp", 0, 1, 1, abc_declare, abc_init, abc_acts, abc_scratch, abc_forward, abc_backward,
    abc_state_size, abc_state_init, abc_state_reset, abc_step_scratch, abc_step,
};
