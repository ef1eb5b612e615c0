/*
 * Positional schemes of the attention mixers (sources per scheme below; docs/mixers.md "The
 * mechanisms and their sources"): the tables they add to the attention logits and the
 * gradients back to their parameters.
 *
 * Distance tables. Every additive scheme here depends on the query/key positions only through
 * d = u - t (u = key, t = query). A table for H heads holds, per head, `tl` entries with the
 * distance-0 entry at index `tc`:  bias_h(t,u) = tab[h*tl + tc + (u - t)],  so it covers
 * d in [-tc, tl-1-tc]. A causal table has tl = tc + 1 (d <= 0 only); a bidirectional one
 * tl = 2 tc + 1. The *_table functions ADD (+=) into the table, so several schemes can be
 * combined (MHATW's own time weighting plus a bias scheme), and the *_backward functions
 * accumulate parameter gradients from the gradient of the whole table.
 */
#ifndef MEGA_POSENC_H
#define MEGA_POSENC_H
#include "core/internal.h"

/* ---- ALiBi (Press et al., arXiv 2108.12409) ---------------------------------------------
 * Slopes m_h, h = 0..H-1 (in double): for H a power of two m_h = 2^(-8(h+1)/H); otherwise,
 * with P = 2^floor(log2 H), the P power-of-two slopes followed by the entries 0, 2, 4, ... of
 * the 2P list, the first H - P of them (the official get_slopes). */
void mega_alibi_slopes(double *m, int H);
/* tab += -m_h |d| (causal rows only use d <= 0, where this is -m_h (t - u); bidirectional:
 * the symmetric -m_h |t - u|, a project extension) */
void mega_alibi_table(real *tab, int H, int tc, int tl);

/* ---- KERPLE (arXiv 2205.09921; chijames/KERPLE ParallelKerplePower / ParallelKerpleLog) ---
 * Parameters per head, official names and roles:
 *   power: b = -r1 |d|^r2   with r1 = bias_a, r2 = bias_p  (r2 clamped to [0.01, 2])
 *   log:   b = -r1 log(1 + r2 |d|)  with r1 = bias_p, r2 = bias_a
 * every parameter clamped to >= 0.01 (MEGA_KERPLE_EPS). */
#define MEGA_KERPLE_EPS 0.01
/* clamp the parameter data in place (the official forward does this on every call) */
void mega_kerple_clamp(int power, real *bias_p, real *bias_a, int H);
/* tab += the KERPLE bias, using the clamped values of bias_p / bias_a (not written back) */
void mega_kerple_table(int power, real *tab, int H, int tc, int tl, const real *bias_p, const real *bias_a);
/* dbias_p, dbias_a += gradients from dtab (same geometry). At d = 0 the power exponent gets
 * exactly 0 (d/dr2 |d|^r2 = |d|^r2 log|d| -> 0, never 0 * log 0 = NaN). */
void mega_kerple_backward(int power, const real *dtab, int H, int tc, int tl, const real *bias_p, const real *bias_a,
                          real *dbias_p, real *dbias_a);

/* ---- Sandwich (arXiv 2212.10356; NeMo SandwichRelativePositionEmbedding) ------------------
 * tab += (sum_{i=1}^{n} cos(|d| w_i) - n) * H / (8 (h+1)),  w_i = 10000^(-2i/dbar), n = dbar/2,
 * dbar = the head width. The frequency index starts at i = 1 as in NeMo (project choice; the
 * paper's p_m.p_n would start at i = 0): b_h(t,t) = 0, every other entry <= 0. */
void mega_sandwich_table(real *tab, int H, int tc, int tl, int dbar);

/* ---- XPOS (arXiv 2212.10554; torchscale XPOS) ---------------------------------------------
 * zeta_i = (2i + 0.4 dh) / (1.4 dh), i = 0..dh/2-1, scale base 512.
 * tab[(delta - dmin) * (dh/2) + i] = zeta_i^(delta/512) for delta in [dmin, dmax), in double
 * (then rounded to real). Factors for delta >= 0 are <= 1 (decay); the kernels only ever ask
 * for |delta| up to one block beyond the attended distances, so nothing overflows. */
#define MEGA_XPOS_BASE 512.0
double mega_xpos_zeta(int i, int dh);
void mega_xpos_table(real *tab, int dh, int dmin, int dmax);

/* ---- MHATW time weighting (PENG Bo's article; RWKV-v1 RWKV_TimeMix) -----------------------
 * log f_h(delta) for delta = t - u stored as logw[h*Lw + Tm-1-delta] (the RWKV layout: the last
 * causal entry is distance 0), Lw = Tm (causal) or 2Tm-1 (two-sided, delta in (-Tm, Tm)).
 * Length policy (project extension): a distance beyond the learned range uses the entry of
 * the largest learned distance on its side (the index is clamped to [0, Lw-1]). */
void mega_tw_table(real *tab, int H, int tc, int tl, const real *logw, int Lw, int Tm);
void mega_tw_table_backward(const real *dtab, int H, int tc, int tl, real *dlogw, int Lw, int Tm);
/* RWKV_TimeMix init of log f: -|delta| lambda_h, lambda_h = Tm^(-(h+1)/(H-1)) for h < H-1 and
 * lambda_{H-1} = 0 (a uniform head; with H = 1 the only head is uniform) */
void mega_tw_init_logw(real *logw, int H, int Lw, int Tm);
#endif
