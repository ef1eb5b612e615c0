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

/* Row-wise passes: rows split over the OpenMP team when the pass is large (training), on the
 * calling thread without entering a region when it is small (the streaming step: libgomp
 * allocates a team descriptor for every region it enters, even one whose if() is false). Every
 * row's sums run in the fixed lanes of mega_row_dot, so the result does not depend on the
 * thread count. */
#define ROWS_PAR(R, n) ((R) * (n) > MEGA_PAR_MIN)

/* one row of rms_rows */
static void rms_row(real *restrict y, real *restrict rinv, const real *restrict x, size_t n, double eps,
                    const real *restrict w) {
    const double ri = 1.0 / sqrt((double)mega_row_dot(x, x, n) / (double)n + eps);
    *rinv = (real)ri;
    for (size_t i = 0; i < n; i++) y[i] = (real)(x[i] * ri);
    if (w)
        for (size_t i = 0; i < n; i++) y[i] *= 1 + w[i];
}
/* y = x / sqrt(mean(x^2) + eps) (1 + w) over rows of n (apex manual_rms_norm; the weight is stored
 * as an offset, w NULL: none); rinv [R] kept */
static void rms_rows(real *y, real *rinv, const real *x, size_t R, size_t n, double eps, const real *w) {
    if (!ROWS_PAR(R, n)) {
        for (size_t r = 0; r < R; r++) rms_row(y + r * n, rinv + r, x + r * n, n, eps, w);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < R; r++) rms_row(y + r * n, rinv + r, x + r * n, n, eps, w);
}
/* one row of rms_rows_back */
static void rms_row_back(real *restrict dx, const real *restrict du, const real *restrict x, double ri, size_t n) {
    const double s = (double)mega_row_dot(du, x, n) * ri / (double)n;
    for (size_t i = 0; i < n; i++) dx[i] += (real)(ri * (du[i] - x[i] * ri * s));
}
/* dx += ri (du - u mean(du u)) for u = x ri, rows of n */
static void rms_rows_back(real *dx, const real *du, const real *x, const real *rinv, size_t R, size_t n) {
    if (!ROWS_PAR(R, n)) {
        for (size_t r = 0; r < R; r++) rms_row_back(dx + r * n, du + r * n, x + r * n, rinv[r], n);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < R; r++) rms_row_back(dx + r * n, du + r * n, x + r * n, rinv[r], n);
}

/* q, k = zn (gamma + 1) / sqrt(dz) + beta over rows of Z (g: gamma [2][Z], be: beta [2][Z]) */
static void qk_row(real *restrict q, real *restrict k, const real *restrict zn, const real *restrict g,
                   const real *restrict be, size_t Z, double sc) {
    for (size_t i = 0; i < Z; i++) {
        q[i] = (real)(zn[i] * (g[i] + 1) * sc + be[i]);
        k[i] = (real)(zn[i] * (g[Z + i] + 1) * sc + be[Z + i]);
    }
}
static void qk_rows(real *q, real *k, const real *zn, const real *g, const real *be, size_t R, size_t Z, double sc) {
    if (!ROWS_PAR(R, Z)) {
        for (size_t r = 0; r < R; r++) qk_row(q + r * Z, k + r * Z, zn + r * Z, g, be, Z, sc);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < R; r++) qk_row(q + r * Z, k + r * Z, zn + r * Z, g, be, Z, sc);
}


void mega_mglayer_forward(const mega_mglayer *L, const real *W, real *y, const real *x, int B, int T,
                          mega_tsnorm_state *s, const real *h0, const mega_mgdrop *dr, real *acts, real *scratch) {
    const size_t R = (size_t)B * T, D = L->D, Z = L->Z, E = L->E, dz = Z / L->H;
    acts_map m = map_acts(L, acts, B, T);
    mega_tsnorm_acts ta = mega_tsnorm_acts_at(&L->tn, m.tna, B, T);
    mega_tsnorm_forward(&L->tn, W, m.xn, x, NULL, B, T, s, &ta);
    mega_cema_layer_forward(&L->cema, W, m.coef, m.c, m.xn, B, T, h0, NULL);
    rms_rows(m.mx, m.rinv, m.c, R, D, L->eps, W + L->rms_w);
    drop(m.mx, R * D, dr, dr ? dr->p_hidden : 0, SITE_MX); /* mx = hidden_dropout(rmsnorm(...)) */
    mega_linear_forward(m.zl, m.mx, W + L->wz, W + L->bz, R, D, Z);
    real *zn = scratch; /* normalised z, only to form q and k */
    rms_rows(zn, m.zr, m.zl, R * L->H, dz, L->eps, NULL);
    qk_rows(m.q, m.k, zn, W + L->gamma, W + L->beta, R, Z, 1.0 / sqrt((double)dz));
    mega_linear_forward(m.vpre, m.xn, W + L->wv, W + L->bv, R, D, E);
    mega_linear_forward(m.rpre, m.mx, W + L->wr, W + L->br, R, D, E);
    mega_act_rows(MEGA_ACT_SILU, m.v, m.vpre, R, E);
    mega_mgattn_forward(&L->at, m.a, m.q, m.k, m.v, B, T, dr ? dr->p_attn : 0,
                        dr ? mega__subkey(dr->key, SITE_ATTN) : 0, m.ata, scratch, 1);
    mega_silu_times(m.ar, m.rpre, E, m.a, R, E);
    drop(m.ar, R * E, dr, dr ? dr->p_hidden : 0, SITE_AR); /* hidden_dropout(attn * r) */
    mega_linear_forward(y, m.mx, W + L->wh1, W + L->bh1, R, D, D);
    mega_gemm(0, 1, R, D, E, 1, m.ar, E, W + L->wh2, E, 1, y, D);
    drop(y, R * D, dr, dr ? dr->p_out : 0, SITE_OUT); /* h = dropout(wh1 mx + wh2 attn) */
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, D))
    for (size_t i = 0; i < R * D; i++) y[i] += x[i];
}

/* linear backward (ops.h): dW [O,I] += dY^T X, db += column sums of dY (b may be NULL),
 * dX (+)= dY W (acc 0: dX written, not read: no zeroing pass first) */
static void linear_back(real *dX, real *dW, real *db, const real *dY, const real *X, const real *Wt, size_t R,
                        size_t In, size_t O, int acc) {
    mega_linear_backward(dX, dW, db, dY, X, Wt, R, In, O, acc);
}

/* Parameter gradients summed over the rows are split by columns over the team: each thread owns
 * whole columns and sums them over the rows in row order, so the bits do not depend on the
 * thread count. COLS columns per piece (whole cache lines of a row). */
#define COLS 32

/* q, k = zn (gamma + 1) sc + beta: the gamma and beta gradients over the rows (zn recomputed
 * from zl and zr, heads of dz), and dzn into dq; columns [i0, i1) */
static void qk_back_cols(real *restrict dq, const real *restrict dk, real *restrict dg, real *restrict db,
                         const real *restrict g, const real *restrict zl, const real *restrict zr, size_t R,
                         size_t Z, size_t H, double sc, size_t i0, size_t i1) {
    const size_t dz = Z / H;
    for (size_t r = 0; r < R; r++)
        for (size_t i = i0; i < i1;) {
            const size_t h = i / dz, ie = MEGA_MIN(i1, (h + 1) * dz);
            const double ri = zr[r * H + h];
            for (; i < ie; i++) {
                const size_t o = r * Z + i;
                const double zn = (double)zl[o] * ri;
                dg[i] += (real)(dq[o] * zn * sc), dg[Z + i] += (real)(dk[o] * zn * sc);
                db[i] += dq[o], db[Z + i] += dk[o];
                dq[o] = (real)((dq[o] * (g[i] + 1) + dk[o] * (g[Z + i] + 1)) * sc);
            }
        }
}
static void qk_back(real *dq, const real *dk, real *dg, real *db, const real *g, const real *zl, const real *zr,
                    size_t R, size_t Z, size_t H, double sc) {
    const size_t nb = (Z + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, Z) && nb > 1)
    for (size_t c = 0; c < nb; c++)
        qk_back_cols(dq, dk, dg, db, g, zl, zr, R, Z, H, sc, c * COLS, MEGA_MIN(Z, (c + 1) * COLS));
}

/* mx = c rinv (1 + w): dw += dmx c rinv over the rows, dmx *= 1 + w; columns [i0, i1) */
static void rmsw_back_cols(real *restrict dmx, real *restrict dw, const real *restrict w, const real *restrict c,
                           const real *restrict rinv, size_t R, size_t D, size_t i0, size_t i1) {
    for (size_t r = 0; r < R; r++)
        for (size_t i = i0; i < i1; i++) {
            const size_t o = r * D + i;
            dw[i] += (real)(dmx[o] * c[o] * rinv[r]);
            dmx[o] *= 1 + w[i];
        }
}
static void rmsw_back(real *dmx, real *dw, const real *w, const real *c, const real *rinv, size_t R, size_t D) {
    const size_t nb = (D + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, D) && nb > 1)
    for (size_t b = 0; b < nb; b++) rmsw_back_cols(dmx, dw, w, c, rinv, R, D, b * COLS, MEGA_MIN(D, (b + 1) * COLS));
}

void mega_mglayer_backward(const mega_mglayer *L, const real *W, real *dW, real *dx, const real *dy, const real *x,
                           int B, int T, const real *h0, const mega_mgdrop *dr, real *acts, real *scratch) {
    const size_t R = (size_t)B * T, D = L->D, Z = L->Z, E = L->E, dz = Z / L->H;
    acts_map m = map_acts(L, acts, B, T);
    real *cs = scratch, *as = cs + mega_cema_layer_scratch(&L->cema), *dxn = as + mega_mgattn_scratch(&L->at, T, 1);
    real *dc = dxn + R * D, *dmx = dc + R * D, *dq = dmx + R * D, *dk = dq + R * Z, *dv = dk + R * Z, *dar = dv + R * E;
    /* only what is accumulated into before it is written: dc (rms_rows_back), dq and dk (the
     * attention's backward); dxn, dmx and dar are written by their first product */
    memset(dc, 0, sizeof(real) * R * D);
    memset(dq, 0, sizeof(real) * R * 2 * Z);
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, D))
    for (size_t i = 0; i < R * D; i++) dx[i] += dy[i]; /* residual */
    const real *dh = dy; /* dh = the output dropout's mask on dy, in dc until dc is needed */
    if (dr && dr->p_out > 0) memcpy(dc, dy, sizeof(real) * R * D), drop(dc, R * D, dr, dr->p_out, SITE_OUT), dh = dc;
    linear_back(dmx, dW + L->wh1, dW + L->bh1, dh, m.mx, W + L->wh1, R, D, D, 0);
    linear_back(dar, dW + L->wh2, NULL, dh, m.ar, W + L->wh2, R, E, D, 0);
    if (dh != dy) memset(dc, 0, sizeof(real) * R * D);
    drop(dar, R * E, dr, dr ? dr->p_hidden : 0, SITE_AR);
    /* ar = a * silu(rpre): drpre into dv's slot first, dar becomes the attention's output gradient */
#pragma omp parallel for schedule(static) if (ROWS_PAR(R, E))
    for (size_t r = 0; r < R; r++) /* dar becomes da = g silu(rpre), dv gets d(rpre) = g a silu'(rpre) */
        mega_silu_times_backward_row(dar + r * E, dv + r * E, dar + r * E, m.a + r * E, m.rpre + r * E, E);
    linear_back(dmx, dW + L->wr, dW + L->br, dv, m.mx, W + L->wr, R, D, E, 1);
    memset(dv, 0, sizeof(real) * R * E);
    mega_mgattn_backward(&L->at, dq, dk, dv, dar, m.v, B, T, dr ? dr->p_attn : 0,
                         dr ? mega__subkey(dr->key, SITE_ATTN) : 0, m.ata, as, 1);
    mega_act_backward(MEGA_ACT_SILU, dv, dv, m.vpre, R * E);
    linear_back(dxn, dW + L->wv, dW + L->bv, dv, m.xn, W + L->wv, R, D, E, 0);
    /* q, k = zn (gamma + 1) / sqrt(dz) + beta: dzn into dq (zn recomputed from zl and zr) */
    qk_back(dq, dk, dW + L->gamma, dW + L->beta, W + L->gamma, m.zl, m.zr, R, Z, L->H, 1.0 / sqrt((double)dz));
    memset(dk, 0, sizeof(real) * R * Z); /* dzl */
    rms_rows_back(dk, dq, m.zl, m.zr, R * L->H, dz);
    linear_back(dmx, dW + L->wz, dW + L->bz, dk, m.mx, W + L->wz, R, D, Z, 1);
    /* mx = hdrop(c rinv (1 + w)) */
    drop(dmx, R * D, dr, dr ? dr->p_hidden : 0, SITE_MX);
    rmsw_back(dmx, dW + L->rms_w, W + L->rms_w, m.c, m.rinv, R, D);
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
    /* the forward's operations on one row per sequence (see mega_mglayer_forward), the products
     * in their streaming-step form (ops.h mega_linear_step, as Mega's step) */
    mega_tsnorm_forward(&L->tn, W, xn, x, NULL, B, 1, s, NULL);
    mega_cema_layer_step(&L->cema, W, coef, h, c, xn, B, 1);
    rms_rows(mx, rinv, c, R, D, L->eps, W + L->rms_w);
    mega_linear_step(zl, mx, W + L->wz, W + L->bz, R, D, Z);
    rms_rows(zn, zr, zl, R * L->H, dz, L->eps, NULL);
    qk_rows(q, k, zn, W + L->gamma, W + L->beta, R, Z, 1.0 / sqrt((double)dz));
    mega_linear_step(v, xn, W + L->wv, W + L->bv, R, D, E);
    mega_linear_step(r, mx, W + L->wr, W + L->br, R, D, E);
    mega_act_rows(MEGA_ACT_SILU, v, v, R, E); /* the forward's rows (the same vector lanes) */
    mega_mgattn_step(&L->at, a, q, k, v, B, pos, rpos, cache, w);
    mega_act_rows(MEGA_ACT_SILU, r, r, R, E);
    for (size_t i = 0; i < R * E; i++) ar[i] = a[i] * r[i]; /* mega_silu_times's product */
    mega_linear_step(y, mx, W + L->wh1, W + L->bh1, R, D, D);
    mega_gemm_step(R, D, E, ar, E, W + L->wh2, E, 1, y, D);
    for (size_t i = 0; i < R * D; i++) y[i] += x[i];
}
