/* Megalodon's inner attention: chunk-local rotary, unscaled causal softmax per chunk. See mgattn.h. */
#include "layers/mgattn.h"
#include "core/rng.h"
#include "ops/attn.h"
#include "ops/ops.h"

#define ZMAX 1024 /* per-head q/k dims (rotary angles on the stack) */

static mega_attn_k head_kernel(const mega_mgattn *a) {
    mega_attn_k k = {0};
    k.Z = a->Z, k.E = a->E, k.chunk_size = a->C, k.causal = 1, k.fn = MEGA_ATTN_SOFTMAX;
    k.ldq = k.ldk = a->H * a->Z, k.ldv = k.ldo = a->H * a->E;
    return k;
}

size_t mega_mgattn_scratch(const mega_mgattn *a, int T, int nthreads) {
    mega_attn_k k = head_kernel(a);
    return mega_attn_scratch(&k, T) * (size_t)(nthreads < 1 ? 1 : nthreads) + mega_attn_db_scratch(&k);
}

/* rotate (inverse = 0) or rotate back (inverse = 1) every head of rows [B*T][H*Z] in place, the
 * position of row (b, t) being t mod C; scale multiplies the result */
static void rope_rows(const mega_mgattn *a, real *x, int B, int T, int inverse, real scale) {
    const int HZ = a->H * a->Z;
    real cs[ZMAX];
    for (int t = 0; t < T; t++) {
        mega_rope_angles(cs, a->Z, t % a->C, a->rope_base, inverse);
        for (int b = 0; b < B; b++) {
            real *row = x + ((size_t)b * T + t) * HZ;
            for (int h = 0; h < a->H; h++) mega_rope_apply(row + (size_t)h * a->Z, cs, a->Z, 1);
            if (scale != 1)
                for (int i = 0; i < HZ; i++) row[i] *= scale;
        }
    }
}

void mega_mgattn_forward(const mega_mgattn *a, real *O, const real *q, const real *k, const real *v, int B, int T,
                         double p, uint64_t key, real *acts, real *scratch, int nthreads) {
    MEGA_ASSERT(a->Z <= ZMAX && a->Z % 2 == 0 && a->C > 0);
    const size_t RZ = (size_t)B * T * a->H * a->Z;
    real *qr = acts, *kr = acts + RZ, *lse = acts + 2 * RZ;
    memcpy(qr, q, RZ * sizeof(real));
    memcpy(kr, k, RZ * sizeof(real));
    /* the kernel's softmax scales q.k by 1/sqrt(Z); Megalodon's does not */
    rope_rows(a, qr, B, T, 0, (real)sqrt((double)a->Z));
    rope_rows(a, kr, B, T, 0, 1);
    mega_attn_k ak = head_kernel(a);
    ak.p_attn = p;
    for (int h = 0; h < a->H; h++) {
        ak.key_attn = mega__subkey(key, (uint64_t)h); /* each head its own mask */
        mega_attn_forward(&ak, O + (size_t)h * a->E, lse + (size_t)h * B * T, qr + (size_t)h * a->Z,
                          kr + (size_t)h * a->Z, v + (size_t)h * a->E, NULL, B, T, scratch, nthreads);
    }
}

void mega_mgattn_backward(const mega_mgattn *a, real *dq, real *dk, real *dv, const real *dO, const real *v, int B,
                          int T, double p, uint64_t key, real *acts, real *scratch, int nthreads) {
    const size_t RZ = (size_t)B * T * a->H * a->Z;
    const real *qr = acts, *kr = acts + RZ, *lse = acts + 2 * RZ;
    mega_attn_k ak = head_kernel(a);
    ak.p_attn = p; /* the kernel regenerates the forward's masks from the keys */
    /* gradients with respect to the rotated q and k go to a rotated frame first: dq, dk
     * accumulate, so they are rotated into that frame, added to, and rotated back (the rotation
     * is orthogonal: its transpose is the inverse rotation) */
    rope_rows(a, dq, B, T, 0, 1);
    rope_rows(a, dk, B, T, 0, 1);
    const real s = (real)sqrt((double)a->Z);
    /* d(qr) = sqrt(Z) rope(dq_raw): accumulate d(qr) into dq scaled by 1/sqrt(Z), rescale after */
    for (size_t i = 0; i < RZ; i++) dq[i] /= s;
    for (int h = 0; h < a->H; h++) {
        ak.key_attn = mega__subkey(key, (uint64_t)h);
        mega_attn_backward(&ak, dq + (size_t)h * a->Z, dk + (size_t)h * a->Z, dv + (size_t)h * a->E, NULL,
                           dO + (size_t)h * a->E, qr + (size_t)h * a->Z, kr + (size_t)h * a->Z, v + (size_t)h * a->E,
                           lse + (size_t)h * B * T, NULL, B, T, scratch, nthreads);
    }
    for (size_t i = 0; i < RZ; i++) dq[i] *= s;
    rope_rows(a, dq, B, T, 1, 1);
    rope_rows(a, dk, B, T, 1, 1);
}

void mega_mgattn_step(const mega_mgattn *a, real *O, const real *q, const real *k, const real *v, int B, int64_t pos,
                      const int64_t *rpos, real *cache, real *w) {
    MEGA_ASSERT(a->Z <= ZMAX);
    const int H = a->H, Z = a->Z, E = a->E, HZ = H * Z, HE = H * E;
    real cs[ZMAX], qh[ZMAX];
    int nprev = -1;
    for (int b = 0; b < B; b++) {
        /* keys in the current chunk, this one included: each sequence's own with rpos */
        const int n = (int)((rpos ? rpos[b] : pos) % a->C) + 1;
        if (n != nprev) mega_rope_angles(cs, Z, n - 1, a->rope_base, 0), nprev = n;
        real *kc = cache + (size_t)b * mega_mgattn_cache_size(a), *vc = kc + (size_t)a->C * HZ;
        /* a new chunk starts with an empty cache: row n-1 is overwritten, earlier rows are this
         * chunk's */
        memcpy(kc + (size_t)(n - 1) * HZ, k + (size_t)b * HZ, HZ * sizeof(real));
        memcpy(vc + (size_t)(n - 1) * HE, v + (size_t)b * HE, HE * sizeof(real));
        for (int h = 0; h < H; h++) mega_rope_apply(kc + (size_t)(n - 1) * HZ + (size_t)h * Z, cs, Z, 1);
        for (int h = 0; h < H; h++) {
            memcpy(qh, q + (size_t)b * HZ + (size_t)h * Z, Z * sizeof(real));
            mega_rope_apply(qh, cs, Z, 1);
            /* unscaled scores in the fixed lanes of mega_row_dot, their exponentials vectorised
             * (mega_exp_sub) */
            real mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                w[j] = mega_row_dot(qh, kc + (size_t)j * HZ + (size_t)h * Z, (size_t)Z);
                if (w[j] > mx) mx = w[j];
            }
            const real sum = mega_exp_sub(w, (size_t)n, mx, 1);
            real *o = O + (size_t)b * HE + (size_t)h * E;
            for (int e = 0; e < E; e++) o[e] = 0;
            for (int j = 0; j < n; j++) {
                const real p = w[j] / sum;
                const real *vr = vc + (size_t)j * HE + (size_t)h * E;
                for (int e = 0; e < E; e++) o[e] += p * vr[e];
            }
        }
    }
}
