/* Timestep normalization (Megalodon): forward with a carried (count, mean, var) state, backward,
 * streaming through the same forward. See tsnorm.h. */
#include "layers/tsnorm.h"

mega_status mega_tsnorm_declare(mega_tsnorm *n, mega_params *P, const char *prefix, int D, int G, double eps) {
    memset(n, 0, sizeof *n);
    if (G < 1 || G > 512 || D % G)
        MEGA_FAIL(MEGA_ERR_INVALID, "timestep norm: %d features do not split into %d groups (at most 512)", D, G);
    n->D = D, n->G = G, n->eps = eps;
    /* the official module's state dict, in its order; the prior is a set of buffers when
     * prior_count = 0 (Megalodon's setting) */
    MEGA_TRY(mega_params_add(P, prefix, "prior_count", 0, NULL, MEGA_P_BUFFER | MEGA_P_I64, &n->prior_count));
    MEGA_TRY(MEGA_PADD(P, prefix, "prior_mean", MEGA_P_BUFFER, &n->prior_mean, G));
    MEGA_TRY(MEGA_PADD(P, prefix, "prior_logv", MEGA_P_BUFFER, &n->prior_logv, G));
    MEGA_TRY(MEGA_PADD(P, prefix, "weight", 0, &n->weight, D));
    MEGA_TRY(MEGA_PADD(P, prefix, "bias", 0, &n->bias, D));
    return MEGA_OK;
}

void mega_tsnorm_init(const mega_tsnorm *n, real *W) {
    memset(W + n->weight, 0, sizeof(real) * n->D);
    memset(W + n->bias, 0, sizeof(real) * n->D);
    W[n->prior_count] = 0;
    memset(W + n->prior_mean, 0, sizeof(real) * n->G);
    memset(W + n->prior_logv, 0, sizeof(real) * n->G);
}

mega_tsnorm_acts mega_tsnorm_acts_at(const mega_tsnorm *n, real *buf, int B, int T) {
    const size_t S = (size_t)B * T * n->G;
    mega_tsnorm_acts a = {buf, buf + S, buf + 2 * S, buf + 3 * S};
    return a;
}

void mega_tsnorm_state_prior(const mega_tsnorm *n, const real *W, mega_tsnorm_state *s, int B) {
    const int G = n->G;
    for (int b = 0; b < B; b++) {
        s->count[b] = (int64_t)W[n->prior_count];
        for (int g = 0; g < G; g++) {
            s->mv[(size_t)b * 2 * G + g] = W[n->prior_mean + g];
            s->mv[(size_t)b * 2 * G + G + g] = (real)exp((double)W[n->prior_logv + g]);
        }
    }
}

/* population means and variances of the G groups of Dg features of one row x (two passes, in
 * double). Each group is summed in feature order, as one group at a time would be; the loops run
 * over the groups innermost so that they vectorise across groups (the groups are short: 8
 * features at D 256 with 32 groups) */
#define TSN_GMAX 512
static void group_moments(const real *restrict x, int G, int Dg, double *restrict m, double *restrict v) {
    for (int g = 0; g < G; g++) m[g] = 0, v[g] = 0;
    for (int k = 0; k < Dg; k++)
        for (int g = 0; g < G; g++) m[g] += x[(size_t)g * Dg + k];
    for (int g = 0; g < G; g++) m[g] /= Dg;
    for (int k = 0; k < Dg; k++)
        for (int g = 0; g < G; g++) {
            const double d = x[(size_t)g * Dg + k] - m[g];
            v[g] += d * d;
        }
    for (int g = 0; g < G; g++) v[g] /= Dg;
}

static void fwd_seq(const mega_tsnorm *n, const real *W, real *y, const real *x, const uint8_t *pad, int b, int T,
                    mega_tsnorm_state *s, const mega_tsnorm_acts *a) {
    const int D = n->D, G = n->G, Dg = D / G;
    real *M = s->mv + (size_t)b * 2 * G, *V = M + G;
    const real *restrict w = W + n->weight, *restrict bias = W + n->bias;
    double m[TSN_GMAX], v[TSN_GMAX], M1[TSN_GMAX], r[TSN_GMAX];
    int64_t c = s->count[b];
    for (int t = 0; t < T; t++) {
        const size_t row = ((size_t)b * T + t) * D, st = ((size_t)b * T + t) * G;
        const int padded = pad && pad[(size_t)b * T + t];
        const double cb = 1.0 / (double)(c + 1), ca = 1.0 - cb; /* WelfordCombine with a count-1 sample */
        group_moments(x + row, G, Dg, m, v);
        for (int g = 0; g < G; g++) {
            const double dl = m[g] - M[g];
            M1[g] = ca * M[g] + cb * m[g];
            const double V1 = ca * V[g] + cb * v[g] + (ca * dl) * (cb * dl);
            r[g] = 1.0 / sqrt(V1 + n->eps);
            if (a) a->mprev[st + g] = M[g], a->mean[st + g] = (real)M1[g], a->rstd[st + g] = (real)r[g];
            if (!padded) M[g] = (real)M1[g], V[g] = (real)V1;
        }
        real *restrict yr = y + row;
        const real *restrict xr = x + row;
        if (padded) memset(yr, 0, (size_t)D * sizeof(real));
        else
            for (int g = 0; g < G; g++)
                for (int k = g * Dg; k < (g + 1) * Dg; k++)
                    yr[k] = (real)((xr[k] - M1[g]) * r[g] * (1.0 + w[k]) + bias[k]);
        if (a) a->coef[(size_t)b * T + t] = padded ? 0 : (real)cb;
        c += !padded;
    }
    s->count[b] = c;
}

void mega_tsnorm_forward(const mega_tsnorm *n, const real *W, real *y, const real *x, const uint8_t *pad, int B,
                         int T, mega_tsnorm_state *s, const mega_tsnorm_acts *a) {
    const int par = (size_t)B * T * n->D > MEGA_PAR_MIN && B > 1;
    if (!par) { /* no region at all: the streaming step runs inside the step team (ops.h), where
                 * one would be nested, and libgomp allocates a team even for a false if() */
        for (int b = 0; b < B; b++) fwd_seq(n, W, y, x, pad, b, T, s, a);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int b = 0; b < B; b++) fwd_seq(n, W, y, x, pad, b, T, s, a);
}

/* reverse pass of sequence b (dx and the carried state; the weight and bias gradients are
 * bwd_params'): aM, aV ([G] each) hold dL/d(state after the last step) on entry and dL/d(initial
 * state) on return */
static void bwd_seq(const mega_tsnorm *n, const real *W, real *dx, const real *gy, const real *x,
                    const uint8_t *pad, int b, int T, const mega_tsnorm_acts *a, double *aM, double *aV) {
    const int D = n->D, G = n->G, Dg = D / G;
    const real *restrict w = W + n->weight;
    double m[TSN_GMAX], v[TSN_GMAX], sdy[TSN_GMAX], sdr[TSN_GMAX], dm[TSN_GMAX], dv[TSN_GMAX];
    for (int t = T - 1; t >= 0; t--) {
        if (pad && pad[(size_t)b * T + t]) continue; /* y = 0, state unchanged: nothing flows */
        const size_t row = ((size_t)b * T + t) * D, st = ((size_t)b * T + t) * G;
        const double cb = a->coef[(size_t)b * T + t], ca = 1.0 - cb;
        const real *restrict xr = x + row, *restrict gr = gy + row, *restrict M1 = a->mean + st;
        real *restrict dxr = dx + row;
        group_moments(xr, G, Dg, m, v);
        for (int g = 0; g < G; g++) sdy[g] = 0, sdr[g] = 0;
        for (int k = 0; k < Dg; k++) /* each group in feature order, the groups innermost */
            for (int g = 0; g < G; g++) {
                const int i = g * Dg + k;
                const double dyw = gr[i] * (1.0 + w[i]), xc = xr[i] - (double)M1[g];
                sdy[g] += dyw, sdr[g] += dyw * xc;
            }
        for (int g = 0; g < G; g++) {
            const double r = a->rstd[st + g], M0 = a->mprev[st + g];
            /* through y = (x - M') r w + b and r = (V' + eps)^-1/2 */
            const double dM = aM[g] - r * sdy[g], dV = aV[g] - 0.5 * r * r * r * sdr[g];
            /* through M' = ca M + cb m and V' = ca V + cb v + ca cb (m - M)^2 */
            const double dl = m[g] - M0;
            dm[g] = cb * dM + 2 * ca * cb * dl * dV, dv[g] = cb * dV;
            aM[g] = ca * dM - 2 * ca * cb * dl * dV;
            aV[g] = ca * dV;
        }
        /* m and v are the group's population moments of x */
        for (int g = 0; g < G; g++) {
            const double r = a->rstd[st + g];
            for (int k = g * Dg; k < (g + 1) * Dg; k++)
                dxr[k] += (real)(gr[k] * (1.0 + w[k]) * r + dm[g] / Dg + dv[g] * 2.0 * (xr[k] - m[g]) / Dg);
        }
    }
}

/* y = (x - M') r (1 + w) + b: dw += gy r (x - M'), db += gy over every unpadded row, features
 * of groups [g0, g1), in the order the sequential reverse pass took (sequences in order,
 * time reversed) */
static void bwd_params(const mega_tsnorm *n, real *restrict dw, real *restrict db, const real *restrict gy,
                       const real *restrict x, const uint8_t *pad, int B, int T, const mega_tsnorm_acts *a, int g0,
                       int g1) {
    const int D = n->D, G = n->G, Dg = D / G;
    for (int b = 0; b < B; b++)
        for (int t = T - 1; t >= 0; t--) {
            if (pad && pad[(size_t)b * T + t]) continue;
            const size_t row = ((size_t)b * T + t) * D, st = ((size_t)b * T + t) * G;
            for (int g = g0; g < g1; g++) {
                const double M1 = a->mean[st + g], r = a->rstd[st + g];
                for (int k = g * Dg; k < (g + 1) * Dg; k++) {
                    dw[k] += (real)(gy[row + k] * r * (x[row + k] - M1));
                    db[k] += gy[row + k];
                }
            }
        }
}

void mega_tsnorm_backward(const mega_tsnorm *n, const real *W, real *dW, real *dx, const real *gy, const real *x,
                          const uint8_t *pad, int B, int T, const mega_tsnorm_acts *a, const real *gmv, real *dmv0) {
    const int G = n->G;
    MEGA_ASSERT(G <= TSN_GMAX);
    /* the sequences are independent but for the weight and bias gradients (bwd_params, after) */
    const int par = (size_t)B * T * n->D > MEGA_PAR_MIN && B > 1;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (par)
#endif
    for (int b = 0; b < B; b++) {
        double aM[TSN_GMAX], aV[TSN_GMAX]; /* G <= 512: the official configurations use 32-64 groups */
        for (int g = 0; g < G; g++) {
            aM[g] = gmv ? gmv[(size_t)b * 2 * G + g] : 0;
            aV[g] = gmv ? gmv[(size_t)b * 2 * G + G + g] : 0;
        }
        bwd_seq(n, W, dx, gy, x, pad, b, T, a, aM, aV);
        if (dmv0)
            for (int g = 0; g < G; g++) {
                dmv0[(size_t)b * 2 * G + g] = (real)aM[g];
                dmv0[(size_t)b * 2 * G + G + g] = (real)aV[g];
            }
    }
    /* the weight and bias gradients split by groups over the team: each feature's sum in the
     * same order whatever the thread count */
    const int pieces = MEGA_MIN(G, 8);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if ((size_t)B * T * n->D > MEGA_PAR_MIN && pieces > 1)
#endif
    for (int p = 0; p < pieces; p++)
        bwd_params(n, dW + n->weight, dW + n->bias, gy, x, pad, B, T, a, G * p / pieces, G * (p + 1) / pieces);
    (void)par;
}
