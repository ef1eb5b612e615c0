/* The Megalodon layer: forward and backward (see mglayer.h). */
#include "layers/mglayer.h"
#include "ops/ops.h"

/* dropout sites (mega__subkey of the mega_mgdrop key) */
enum { SITE_MX = 1, SITE_ATTN, SITE_AR, SITE_OUT };

/* the dropout at one site, in place (forward on values, backward on gradients: the same mask) */
static void drop(real *v, size_t n, const mega_mgdrop *dr, double p, int site) {
    if (dr && p > 0) mega_dropout(v, v, n, p, mega__subkey(dr->key, (uint64_t)site));
}

mega_status mega_mglayer_declare(mega_mglayer *L, mega_params *P, const char *prefix, int D, int Z, int E, int H,
                                 int N, int G, int C, double eps, double rope_base) {
    memset(L, 0, sizeof *L);
    if (H < 1 || Z % H || E % H || (Z / H) % 2 || C < 1)
        MEGA_FAIL(MEGA_ERR_INVALID, "megalodon layer: zdim %d and hdim %d must split into %d heads (even zdim/heads), "
                  "chunk %d >= 1", Z, E, H, C);
    L->D = D, L->Z = Z, L->E = E, L->H = H, L->N = N, L->G = G, L->C = C, L->eps = eps;
    char pre[MEGA_NAME_MAX];
    snprintf(pre, sizeof pre, "%stimenorm.", prefix);
    MEGA_TRY(mega_tsnorm_declare(&L->tn, P, pre, D, G, eps));
    snprintf(pre, sizeof pre, "%scema.", prefix);
    MEGA_TRY(mega_cema_declare(&L->cema, P, pre, D, N));
    MEGA_TRY(MEGA_PADD(P, prefix, "rmsnorm.weight", 0, &L->rms_w, D));
    MEGA_TRY(MEGA_PADD(P, prefix, "wv.weight", MEGA_P_DECAY, &L->wv, E, D));
    MEGA_TRY(MEGA_PADD(P, prefix, "wv.bias", 0, &L->bv, E));
    MEGA_TRY(MEGA_PADD(P, prefix, "wz.weight", MEGA_P_DECAY, &L->wz, Z, D));
    MEGA_TRY(MEGA_PADD(P, prefix, "wz.bias", 0, &L->bz, Z));
    MEGA_TRY(MEGA_PADD(P, prefix, "wr.weight", MEGA_P_DECAY, &L->wr, E, D));
    MEGA_TRY(MEGA_PADD(P, prefix, "wr.bias", 0, &L->br, E));
    MEGA_TRY(MEGA_PADD(P, prefix, "wh1.weight", MEGA_P_DECAY, &L->wh1, D, D));
    MEGA_TRY(MEGA_PADD(P, prefix, "wh1.bias", 0, &L->bh1, D));
    MEGA_TRY(MEGA_PADD(P, prefix, "wh2.weight", MEGA_P_DECAY, &L->wh2, D, E));
    MEGA_TRY(MEGA_PADD(P, prefix, "gamma", 0, &L->gamma, 2, Z));
    MEGA_TRY(MEGA_PADD(P, prefix, "beta", 0, &L->beta, 2, Z));
    L->at.H = H, L->at.Z = Z / H, L->at.E = E / H, L->at.C = C, L->at.rope_base = rope_base;
    return MEGA_OK;
}

/* the activations, carved in order from one buffer */
typedef struct {
    real *xn, *tna, *coef, *c, *rinv, *mx, *zl, *zr, *q, *k, *vpre, *v, *rpre, *a, *ar, *ata;
    size_t total;
} acts_map;

static acts_map map_acts(const mega_mglayer *L, real *base, int B, int T) {
    const size_t R = (size_t)B * T, D = L->D, Z = L->Z, E = L->E;
    acts_map m;
    size_t o = 0;
#define TAKE(f, n) (m.f = base ? base + o : NULL, o += (n))
    TAKE(xn, R * D), TAKE(tna, mega_tsnorm_acts_size(&L->tn, B, T)), TAKE(coef, mega_cema_layer_coef_size(&L->cema));
    TAKE(c, R * D), TAKE(rinv, R), TAKE(mx, R * D), TAKE(zl, R * Z), TAKE(zr, R * L->H), TAKE(q, R * Z);
    TAKE(k, R * Z), TAKE(vpre, R * E), TAKE(v, R * E), TAKE(rpre, R * E), TAKE(a, R * E), TAKE(ar, R * E);
    TAKE(ata, mega_mgattn_acts_size(&L->at, B, T));
#undef TAKE
    m.total = o;
    return m;
}

size_t mega_mglayer_acts_size(const mega_mglayer *L, int B, int T) { return map_acts(L, NULL, B, T).total; }

size_t mega_mglayer_scratch(const mega_mglayer *L, int B, int T) {
    const size_t R = (size_t)B * T;
    return mega_cema_layer_scratch(&L->cema) + mega_mgattn_scratch(&L->at, T, 1) +
           R * (3 * (size_t)L->D + 2 * (size_t)L->Z + 2 * (size_t)L->E);
}

/* y = x / sqrt(mean(x^2) + eps) over rows of n (apex manual_rms_norm); rinv [R] kept */
static void rms_rows(real *y, real *rinv, const real *x, size_t R, size_t n, double eps) {
    for (size_t r = 0; r < R; r++) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += (double)x[r * n + i] * x[r * n + i];
        const double ri = 1.0 / sqrt(s / n + eps);
        rinv[r] = (real)ri;
        for (size_t i = 0; i < n; i++) y[r * n + i] = (real)(x[r * n + i] * ri);
    }
}
/* dx += ri (du - u mean(du u)) for u = x ri, rows of n */
static void rms_rows_back(real *dx, const real *du, const real *x, const real *rinv, size_t R, size_t n) {
    for (size_t r = 0; r < R; r++) {
        double s = 0;
        const double ri = rinv[r];
        for (size_t i = 0; i < n; i++) s += (double)du[r * n + i] * x[r * n + i] * ri;
        s /= n;
        for (size_t i = 0; i < n; i++) dx[r * n + i] += (real)(ri * (du[r * n + i] - x[r * n + i] * ri * s));
    }
}

void mega_mglayer_forward(const mega_mglayer *L, const real *W, real *y, const real *x, int B, int T,
                          mega_tsnorm_state *s, const real *h0, const mega_mgdrop *dr, real *acts, real *scratch) {
    const size_t R = (size_t)B * T, D = L->D, Z = L->Z, E = L->E, dz = Z / L->H;
    acts_map m = map_acts(L, acts, B, T);
    mega_tsnorm_acts ta = mega_tsnorm_acts_at(&L->tn, m.tna, B, T);
    mega_tsnorm_forward(&L->tn, W, m.xn, x, NULL, B, T, s, &ta);
    mega_cema_layer_forward(&L->cema, W, m.coef, m.c, m.xn, B, T, h0, NULL);
    rms_rows(m.mx, m.rinv, m.c, R, D, L->eps);
    for (size_t r = 0; r < R; r++)
        for (size_t i = 0; i < D; i++) m.mx[r * D + i] *= 1 + W[L->rms_w + i];
    drop(m.mx, R * D, dr, dr ? dr->p_hidden : 0, SITE_MX); /* mx = hidden_dropout(rmsnorm(...)) */
    mega_linear_forward(m.zl, m.mx, W + L->wz, W + L->bz, R, D, Z);
    real *zn = scratch; /* normalised z, only to form q and k */
    rms_rows(zn, m.zr, m.zl, R * L->H, dz, L->eps);
    const double sc = 1.0 / sqrt((double)dz);
    for (size_t r = 0; r < R; r++)
        for (size_t i = 0; i < Z; i++) {
            m.q[r * Z + i] = (real)(zn[r * Z + i] * (W[L->gamma + i] + 1) * sc + W[L->beta + i]);
            m.k[r * Z + i] = (real)(zn[r * Z + i] * (W[L->gamma + Z + i] + 1) * sc + W[L->beta + Z + i]);
        }
    mega_linear_forward(m.vpre, m.xn, W + L->wv, W + L->bv, R, D, E);
    mega_linear_forward(m.rpre, m.mx, W + L->wr, W + L->br, R, D, E);
    for (size_t i = 0; i < R * E; i++) m.v[i] = mega_silu(m.vpre[i]);
    mega_mgattn_forward(&L->at, m.a, m.q, m.k, m.v, B, T, dr ? dr->p_attn : 0,
                        dr ? mega__subkey(dr->key, SITE_ATTN) : 0, m.ata, scratch, 1);
    for (size_t i = 0; i < R * E; i++) m.ar[i] = m.a[i] * mega_silu(m.rpre[i]);
    drop(m.ar, R * E, dr, dr ? dr->p_hidden : 0, SITE_AR); /* hidden_dropout(attn * r) */
    mega_linear_forward(y, m.mx, W + L->wh1, W + L->bh1, R, D, D);
    mega_gemm(0, 1, R, D, E, 1, m.ar, E, W + L->wh2, E, 1, y, D);
    drop(y, R * D, dr, dr ? dr->p_out : 0, SITE_OUT); /* h = dropout(wh1 mx + wh2 attn) */
    for (size_t i = 0; i < R * D; i++) y[i] += x[i];
}

/* linear backward: dW [O,I] += dY^T X, db += column sums of dY (b may be NULL), dX += dY W */
static void linear_back(real *dX, real *dW, real *db, const real *dY, const real *X, const real *Wt, size_t R,
                        size_t In, size_t O) {
    mega_gemm(1, 0, O, In, R, 1, dY, O, X, In, 1, dW, In);
    if (db)
        for (size_t r = 0; r < R; r++)
            for (size_t o = 0; o < O; o++) db[o] += dY[r * O + o];
    if (dX) mega_gemm(0, 0, R, In, O, 1, dY, O, Wt, In, 1, dX, In);
}

void mega_mglayer_backward(const mega_mglayer *L, const real *W, real *dW, real *dx, const real *dy, const real *x,
                           int B, int T, const real *h0, const mega_mgdrop *dr, real *acts, real *scratch) {
    const size_t R = (size_t)B * T, D = L->D, Z = L->Z, E = L->E, dz = Z / L->H;
    acts_map m = map_acts(L, acts, B, T);
    real *cs = scratch, *as = cs + mega_cema_layer_scratch(&L->cema), *dxn = as + mega_mgattn_scratch(&L->at, T, 1);
    real *dc = dxn + R * D, *dmx = dc + R * D, *dq = dmx + R * D, *dk = dq + R * Z, *dv = dk + R * Z, *dar = dv + R * E;
    memset(dxn, 0, sizeof(real) * R * (3 * D + 2 * Z + 2 * E));
    for (size_t i = 0; i < R * D; i++) dx[i] += dy[i]; /* residual */
    const real *dh = dy; /* dh = the output dropout's mask on dy, in dc until dc is needed */
    if (dr && dr->p_out > 0) memcpy(dc, dy, sizeof(real) * R * D), drop(dc, R * D, dr, dr->p_out, SITE_OUT), dh = dc;
    linear_back(dmx, dW + L->wh1, dW + L->bh1, dh, m.mx, W + L->wh1, R, D, D);
    linear_back(dar, dW + L->wh2, NULL, dh, m.ar, W + L->wh2, R, E, D);
    if (dh != dy) memset(dc, 0, sizeof(real) * R * D);
    drop(dar, R * E, dr, dr ? dr->p_hidden : 0, SITE_AR);
    /* ar = a * silu(rpre): da into dv's slot first (the attention's output gradient), drpre into dar */
    real *da = dv;
    for (size_t i = 0; i < R * E; i++) {
        da[i] = dar[i] * mega_silu(m.rpre[i]);
        dar[i] = dar[i] * m.a[i] * mega_silu_grad(m.rpre[i]);
    }
    linear_back(dmx, dW + L->wr, dW + L->br, dar, m.mx, W + L->wr, R, D, E);
    memcpy(dar, da, sizeof(real) * R * E); /* dar now holds dO of the attention */
    memset(dv, 0, sizeof(real) * R * E);
    mega_mgattn_backward(&L->at, dq, dk, dv, dar, m.v, B, T, dr ? dr->p_attn : 0,
                         dr ? mega__subkey(dr->key, SITE_ATTN) : 0, m.ata, as, 1);
    for (size_t i = 0; i < R * E; i++) dv[i] *= mega_silu_grad(m.vpre[i]);
    linear_back(dxn, dW + L->wv, dW + L->bv, dv, m.xn, W + L->wv, R, D, E);
    /* q, k = zn (gamma + 1) / sqrt(dz) + beta: dzn into dq (zn recomputed from zl and zr) */
    const double sc = 1.0 / sqrt((double)dz);
    for (size_t r = 0; r < R; r++)
        for (size_t i = 0; i < Z; i++) {
            const size_t o = r * Z + i;
            const double zn = (double)m.zl[o] * m.zr[r * L->H + i / dz];
            dW[L->gamma + i] += (real)(dq[o] * zn * sc), dW[L->gamma + Z + i] += (real)(dk[o] * zn * sc);
            dW[L->beta + i] += dq[o], dW[L->beta + Z + i] += dk[o];
            dq[o] = (real)((dq[o] * (W[L->gamma + i] + 1) + dk[o] * (W[L->gamma + Z + i] + 1)) * sc);
        }
    memset(dk, 0, sizeof(real) * R * Z); /* dzl */
    rms_rows_back(dk, dq, m.zl, m.zr, R * L->H, dz);
    linear_back(dmx, dW + L->wz, dW + L->bz, dk, m.mx, W + L->wz, R, D, Z);
    /* mx = hdrop(c rinv (1 + w)) */
    drop(dmx, R * D, dr, dr ? dr->p_hidden : 0, SITE_MX);
    for (size_t r = 0; r < R; r++)
        for (size_t i = 0; i < D; i++) {
            const size_t o = r * D + i;
            dW[L->rms_w + i] += (real)(dmx[o] * m.c[o] * m.rinv[r]);
            dmx[o] *= 1 + W[L->rms_w + i];
        }
    rms_rows_back(dc, dmx, m.c, m.rinv, R, D);
    mega_cema_layer_backward(&L->cema, W, dW, m.coef, dxn, dc, m.xn, B, T, h0, NULL, cs);
    mega_tsnorm_acts ta = mega_tsnorm_acts_at(&L->tn, m.tna, B, T);
    mega_tsnorm_backward(&L->tn, W, dW, dx, dxn, x, NULL, B, T, &ta, NULL, NULL);
}

size_t mega_mglayer_step_work(const mega_mglayer *L, int B) {
    return (size_t)B * (3 * (size_t)L->D + 4 * (size_t)L->Z + 4 * (size_t)L->E + 1 + (size_t)L->H) + (size_t)L->C;
}

void mega_mglayer_step(const mega_mglayer *L, const real *W, const real *coef, real *y, const real *x, int B,
                       int64_t pos, const int64_t *rpos, mega_tsnorm_state *s, real *h, real *cache, real *work) {
    const size_t R = (size_t)B, D = L->D, Z = L->Z, E = L->E, dz = Z / L->H;
    real *xn = work, *c = xn + R * D, *mx = c + R * D, *zl = mx + R * D, *zn = zl + R * Z, *q = zn + R * Z;
    real *k = q + R * Z, *v = k + R * Z, *r = v + R * E, *a = r + R * E, *ar = a + R * E, *rinv = ar + R * E;
    real *zr = rinv + R, *w = zr + R * L->H;
    /* the forward's operations on one row per sequence (see mega_mglayer_forward) */
    mega_tsnorm_forward(&L->tn, W, xn, x, NULL, B, 1, s, NULL);
    mega_cema_layer_step(&L->cema, W, coef, h, c, xn, B, 1);
    rms_rows(mx, rinv, c, R, D, L->eps);
    for (size_t b = 0; b < R; b++)
        for (size_t i = 0; i < D; i++) mx[b * D + i] *= 1 + W[L->rms_w + i];
    /* the products are mega_linear_step's: each row's sums are those it has alone (gemm.c) */
    mega_linear_step(zl, mx, W + L->wz, W + L->bz, R, D, Z);
    rms_rows(zn, zr, zl, R * L->H, dz, L->eps);
    const double sc = 1.0 / sqrt((double)dz);
    for (size_t b = 0; b < R; b++)
        for (size_t i = 0; i < Z; i++) {
            q[b * Z + i] = (real)(zn[b * Z + i] * (W[L->gamma + i] + 1) * sc + W[L->beta + i]);
            k[b * Z + i] = (real)(zn[b * Z + i] * (W[L->gamma + Z + i] + 1) * sc + W[L->beta + Z + i]);
        }
    mega_linear_step(v, xn, W + L->wv, W + L->bv, R, D, E);
    mega_linear_step(r, mx, W + L->wr, W + L->br, R, D, E);
    for (size_t i = 0; i < R * E; i++) v[i] = mega_silu(v[i]);
    mega_mgattn_step(&L->at, a, q, k, v, B, pos, rpos, cache, w);
    for (size_t i = 0; i < R * E; i++) ar[i] = a[i] * mega_silu(r[i]);
    mega_linear_step(y, mx, W + L->wh1, W + L->bh1, R, D, D);
    mega_gemm_step(R, D, E, ar, E, W + L->wh2, E, 1, y, D);
    for (size_t i = 0; i < R * D; i++) y[i] += x[i];
}
