/* Relative-position bias tables (see relpos.h). */
#include "core/rng.h"
#include "layers/relpos.h"

mega_status mega_relpos_declare(mega_relpos *rp, mega_params *P, const char *prefix, int rotary, int Mp, int Z) {
    memset(rp, 0, sizeof *rp);
    rp->rotary = rotary;
    rp->Mp = Mp;
    rp->Z = Z;
    if (rotary) {
        if (Z % 2) MEGA_FAIL(MEGA_ERR_INVALID, "rotary relative-position bias needs an even z-dim (got %d)", Z);
        MEGA_TRY(MEGA_PADD(P, prefix, "alpha", 0, &rp->alpha, 1, Z));
        MEGA_TRY(MEGA_PADD(P, prefix, "beta", 0, &rp->beta, 1, Z));
    } else {
        if (Mp < 1) MEGA_FAIL(MEGA_ERR_INVALID, "relative-position bias length must be positive");
        MEGA_TRY(MEGA_PADD(P, prefix, "rel_pos_bias", 0, &rp->w, 2 * (int64_t)Mp - 1));
    }
    return MEGA_OK;
}

void mega_relpos_init(const mega_relpos *rp, real *W, mega_rng *rng) {
    if (rp->rotary) {
        mega_fill_normal(W + rp->alpha, (size_t)rp->Z, 0, 0.02, rng);
        mega_fill_normal(W + rp->beta, (size_t)rp->Z, 0, 0.02, rng);
    } else {
        mega_fill_normal(W + rp->w, 2 * (size_t)rp->Mp - 1, 0, 0.02, rng);
    }
}

static double theta(int l, int h) { return exp(-(double)l * log(10000.0) / h); }

mega_status mega_relpos_table(const mega_relpos *rp, const real *W, int n, real *btab, int *Mc) {
    if (!rp->rotary) {
        if (n > rp->Mp)
            MEGA_FAIL(MEGA_ERR_INVALID, "sequence/chunk length %d exceeds the simple relative-position bias length %d "
                      "(max positions or chunk size)", n, rp->Mp);
        memcpy(btab, W + rp->w, (2 * (size_t)rp->Mp - 1) * sizeof(real));
        *Mc = rp->Mp;
        return MEGA_OK;
    }
    const int h = rp->Z / 2;
    const real *a = W + rp->alpha, *b = W + rp->beta;
    for (int d = -(n - 1); d <= n - 1; d++) {
        double s = 0;
        for (int l = 0; l < h; l++) {
            double P = (double)a[l] * b[l] + (double)a[l + h] * b[l + h];
            double Q = (double)a[l] * b[l + h] - (double)a[l + h] * b[l];
            double ang = d * theta(l, h);
            s += P * cos(ang) - Q * sin(ang);
        }
        btab[n - 1 + d] = (real)s;
    }
    *Mc = n;
    return MEGA_OK;
}

void mega_relpos_backward(const mega_relpos *rp, const real *W, real *dW, const real *dbtab, int Mc) {
    if (!rp->rotary) {
        for (int i = 0; i < 2 * rp->Mp - 1; i++) dW[rp->w + i] += dbtab[i];
        return;
    }
    const int h = rp->Z / 2;
    const real *a = W + rp->alpha, *b = W + rp->beta;
    real *da = dW + rp->alpha, *dbb = dW + rp->beta;
    for (int l = 0; l < h; l++) {
        double th = theta(l, h), dP = 0, dQ = 0;
        for (int d = -(Mc - 1); d <= Mc - 1; d++) {
            double g = dbtab[Mc - 1 + d];
            if (g == 0) continue;
            dP += g * cos(d * th);
            dQ -= g * sin(d * th);
        }
        double a1 = a[l], a2 = a[l + h], b1 = b[l], b2 = b[l + h];
        da[l] += (real)(dP * b1 + dQ * b2);
        da[l + h] += (real)(dP * b2 - dQ * b1);
        dbb[l] += (real)(dP * a1 - dQ * a2);
        dbb[l + h] += (real)(dP * a2 + dQ * a1);
    }
}
