/*
 * `mhatw`: multi-head attention with explicit time weighting, the article's normalised form
 * (SPEC §4.2; PENG Bo, seed 001; parameters as in RWKV-v1 MHA_pro / RWKV_TimeMix, §4.1):
 *
 *   MHATW_t = sum_u W(t,u) exp(q_t.k_u/sqrt dh) v_u / sum_u W(t,u) exp(q_t.k_u/sqrt dh),
 *   W(t,u)  = f_h(t-u) alpha_h(t) beta_h(u),   y_t = gamma(t) (MHATW_t Wo^T + bo)
 *
 * which is softmax attention with the additive bias log f_h(t-u) + log beta_h(u) (alpha_h(t)
 * cancels, so it is not a parameter). Positivity by parameterisation: f = exp(time_logw),
 * beta = exp(time_logbeta) (SPEC §4.2 [ext]); gamma (time_gamma) is used directly.
 *   time_logw    [H, Lw]  log f_h(delta) at index Tm-1-delta (RWKV layout: the last causal entry
 *                         is distance 0); causal Lw = Tm; bidirectional Lw = 2Tm-1, the two-sided
 *                         f of SPEC §4.1 [ext], delta in (-Tm, Tm) (entries Tm.. are u > t)
 *   time_logbeta [H, Tm]  log beta_h(u)
 *   time_gamma   [Tm]     gamma(t), shared over channels, applied after the output projection
 * with Tm = cfg->max_len. Init: RWKV_TimeMix's f_h(delta) = exp(-|delta| lambda_h),
 * lambda_h = Tm^(-(h+1)/(H-1)) and a uniform last head; beta = gamma = 1.
 *
 * Length policy (SPEC §4.1, option (c), chosen here): positions and distances beyond the
 * learned range use the last learned value: f_h(delta) for |delta| >= Tm is f_h(+-(Tm-1)),
 * beta_h(u >= Tm) = beta_h(Tm-1), gamma(t >= Tm) = gamma(Tm-1); they get the gradients of the
 * clamped uses. Option (b) (local attention with window Tm, where no distance reaches Tm) is
 * available with --attn-window Tm; positions are still clamped then. Streaming follows the same
 * rule, so an unbounded stream is well defined.
 *
 * Everything else (projections, positional schemes of §8.8, local mask, log-n, the kernel,
 * streaming) is the attention engine in mha.c: these entries forward to it, and the engine
 * declares and uses the time-weighting tensors when cfg->mixer is MEGA_MIXER_MHATW.
 */
#include "layers/block.h"

static mega_status tw_declare(mega_mixer *mx, mega_params *P, const char *prefix) {
    return mega_mixer_ops_mha.declare(mx, P, prefix);
}
static void tw_init(const mega_mixer *mx, real *W, mega_rng *rng) { mega_mixer_ops_mha.init(mx, W, rng); }
static size_t tw_acts(const mega_mixer *mx, mega_mixer_acts *A, real *base, int B, int T) {
    return mega_mixer_ops_mha.acts(mx, A, base, B, T);
}
static size_t tw_scratch(const mega_mixer *mx, int B, int T, int nt) {
    return mega_mixer_ops_mha.scratch(mx, B, T, nt);
}
static mega_status tw_forward(const mega_mixer *mx, real *W, mega_mixer_acts *A, real *y, const real *x,
                              const uint8_t *pad, int B, int T, const mega_run *run, real *scratch) {
    return mega_mixer_ops_mha.forward(mx, W, A, y, x, pad, B, T, run, scratch);
}
static void tw_backward(const mega_mixer *mx, const real *W, real *dW, const mega_mixer_acts *A, real *dx,
                        const real *dy, const real *x, const uint8_t *pad, int B, int T, const mega_run *run,
                        real *scratch) {
    mega_mixer_ops_mha.backward(mx, W, dW, A, dx, dy, x, pad, B, T, run, scratch);
}
static size_t tw_state_size(const mega_mixer *mx, int B, int cap) { return mega_mixer_ops_mha.state_size(mx, B, cap); }
static mega_status tw_state_init(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *mem, int B, int cap) {
    return mega_mixer_ops_mha.state_init(mx, W, S, mem, B, cap);
}
static void tw_state_reset(const mega_mixer *mx, mega_mixer_state *S) { mega_mixer_ops_mha.state_reset(mx, S); }
static size_t tw_step_scratch(const mega_mixer *mx, int B, int T, int cap) {
    return mega_mixer_ops_mha.step_scratch(mx, B, T, cap);
}
static mega_status tw_step(const mega_mixer *mx, const real *W, mega_mixer_state *S, real *y, const real *x, int T,
                           real *scratch) {
    return mega_mixer_ops_mha.step(mx, W, S, y, x, T, scratch);
}

const mega_mixer_ops mega_mixer_ops_mhatw = {
    "mhatw", 0, 1, 1, tw_declare, tw_init, tw_acts, tw_scratch, tw_forward, tw_backward,
    tw_state_size, tw_state_init, tw_state_reset, tw_step_scratch, tw_step,
};
