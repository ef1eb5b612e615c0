#!/usr/bin/python3
"""Own PyTorch reference for the softmax-attention token mixers mha, local and mhatw, with their
positional schemes, and the fixture cases of tests/fixtures/mixers/ (written by case_writer.py).

Written from the papers, not from the C code (docs/mixers.md "The mechanisms and their
sources"): multi-head attention (Vaswani et al., arXiv 1706.03762) with RoPE (RoFormer, arXiv
2104.09864 §3.2); MHATW, the normalised time-weighted attention of PENG Bo's article with the
RWKV-v1 parameterisation (BlinkDL/RWKV-LM RWKV-v1/src/model.py: RWKV_TimeMix); ALiBi (arXiv
2108.12409; slopes of ofirpress/attention_with_linear_biases get_slopes), KERPLE (arXiv
2205.09921; chijames/KERPLE ParallelKerplePower / ParallelKerpleLog), Sandwich (arXiv 2212.10356;
NVIDIA NeMo SandwichRelativePositionEmbedding), XPOS (arXiv 2212.10554; microsoft/torchscale
xpos_relative_position.py), the local mask and log-n scaling (Su, kexue.fm/archives/9431 and
8823; Chiang & Cholak, arXiv 2202.12172); and the block wrapper of src/layers/mixer.h.
Batch-first tensors [B, T, D].

The forward is the naive form, independent of the C kernels: the full [B, H, T, T] score tensor,
an explicit boolean mask (causal / local window / pad keys), softmax with rows that see no key
set to 0, biases evaluated per (t, u) pair. XPOS is applied *un-centred* in the forward, with the
torchscale offset c0 = L // 2 (q * zeta^((t-c0)/512), k * zeta^(-(u-c0)/512)); the C library
re-centres per query block (a project extension), so the fixtures check that the two agree.
`step` is a separate cached implementation (keys cached rotated, XPOS relative to the current
query); case_writer checks step == forward before writing. Gradients come from autograd.

Conventions (the library's; docs/mixers.md):
  * q/k/v/out projections D -> D with biases (fairseq names q_proj, k_proj, v_proj, out_proj);
    H heads of dh = D / H; content score <q_t, k_u> / sqrt(dh);
  * RoPE: half-split pairs (x_i, x_{i+dh/2}) as RWKV-v1 rotate_half, r = dh,
    theta_i = 10000^(-2i/dh), angles in float64 (project choice);
  * XPOS: interleaved pairs (x_2i, x_2i+1), theta_i as above, zeta_i = (2i + 0.4 dh)/(1.4 dh),
    base 512; causal only;
  * ALiBi: -m_h |t - u| (get_slopes; bidirectional: symmetric, a project extension);
  * KERPLE: power -bias_a |d|^bias_p, log -bias_p log(1 + bias_a |d|); data clamped in place
    (>= 0.01, power exponent <= 2) on every forward, as the official module does;
  * Sandwich: (sum_{i=1}^{dh/2} cos(|d| 10000^(-2i/dh)) - dh/2) * H / (8 h), h = 1..H (NeMo);
  * local mask: causal t - w < u <= t, bidirectional |t - u| <= w (local: window; mha/mhatw:
    attn_window; both set: the smaller);
  * log-n: lambda_t = max(1, log n_t / log train_len) on the content term, n_t = visible keys;
  * mhatw: + time_logw[h, clamp(Tm-1-(t-u), 0, Lw-1)] + time_logbeta[h, min(u, Tm-1)], and the
    output times time_gamma[min(t, Tm-1)] (Lw = Tm causal, 2Tm-1 bidirectional).
Block: prenorm y = x + mixer(mixer_norm(x)); postnorm y = mixer_norm(x + mixer(x)); then nffn.

Usage (from the repository root; deterministic output):
    /usr/bin/python3 tests/ref/ref_attn.py [--out tests/fixtures/mixers] [--case NAME ...] [--list]
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import case_writer as cw  # noqa: E402
import mega_ref  # noqa: E402  (MixerBlock)

# stored in the committed cases (case.json "generator"): kept verbatim
GENERATOR = "tests/ref/ref_attn.py (own PyTorch implementation of the papers cited in docs/mixers.md: MHA, RoPE, MHATW, ALiBi, KERPLE, Sandwich, XPOS, local, log-n)"
KERPLE_EPS = 0.01
XPOS_BASE = 512.0


# ----------------------------------------------------------------------------------------------
# positional pieces


def alibi_slopes(H):
    """ALiBi slopes as get_slopes (ofirpress/attention_with_linear_biases, fairseq/models/transformer.py):
    powers of two 2^(-8h/H); otherwise the P = 2^floor(log2 H) list followed by
    every other entry of the 2P list."""
    def pow2(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    P = 2 ** int(math.floor(math.log2(H)))
    if P == H:
        return pow2(H)
    return pow2(P) + pow2(2 * P)[0::2][: H - P]


def rope_half(x, pos):
    """x [..., L, dh], pos [L] (float64 angles): rotate pairs (i, i + dh/2)."""
    dh = x.shape[-1]
    h = dh // 2
    theta = 10000.0 ** (-2.0 * torch.arange(h, dtype=torch.float64) / dh)
    ang = pos.to(torch.float64)[:, None] * theta[None, :]
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def rope_interleaved(x, pos):
    """pairs (2i, 2i+1), theta_i = 10000^(-2i/dh) (torchscale XPOS rotation)."""
    dh = x.shape[-1]
    h = dh // 2
    theta = 10000.0 ** (-2.0 * torch.arange(h, dtype=torch.float64) / dh)
    ang = pos.to(torch.float64)[:, None] * theta[None, :]
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.stack([a * c - b * s, b * c + a * s], dim=-1)
    return out.flatten(-2)


def xpos_zeta(dh):
    i = torch.arange(dh // 2, dtype=torch.float64)
    return (2 * i + 0.4 * dh) / (1.4 * dh)


def xpos_factor(dh, expo, dtype):
    """zeta_i^(expo / 512) per position, duplicated over the interleaved pair: [L, dh]."""
    z = xpos_zeta(dh)
    f = z[None, :] ** (expo.to(torch.float64)[:, None] / XPOS_BASE)
    return torch.repeat_interleave(f, 2, dim=-1).to(dtype)


def sandwich_bias(d, H, dh, dtype):
    """d: |t - u| (float64 tensor) -> [H, ...] bias (NeMo: i = 1..dh/2)."""
    n = dh // 2
    w = 10000.0 ** (-2.0 * torch.arange(1, n + 1, dtype=torch.float64) / dh)
    s = torch.cos(d[..., None] * w).sum(-1) - n
    scale = torch.tensor([H / (8.0 * (h + 1)) for h in range(H)], dtype=torch.float64)
    return (scale.view([H] + [1] * d.dim()) * s[None]).to(dtype)


# ----------------------------------------------------------------------------------------------
# the mixer and the block


class Kerple(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.bias_p = nn.Parameter(torch.rand(H) * 2)
        self.bias_a = nn.Parameter(torch.rand(H))


class AttnMixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg["mixer"]
        D, H = cfg["embed_dim"], cfg.get("heads", 1)
        self.D, self.H, self.dh = D, H, D // H
        self.bidir = cfg.get("bidirectional", False)
        self.pos = cfg.get("pos", "none")
        win = cfg.get("window", 0) if self.kind == "local" else 0
        aw = cfg.get("attn_window", 0)
        if aw > 0:
            win = min(win, aw) if win > 0 else aw
        self.win = win
        self.log_train = math.log(cfg["train_len"]) if cfg.get("log_n", False) else 0.0
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            lin = nn.Linear(D, D)
            nn.init.xavier_uniform_(lin.weight, gain=(2 ** -0.5) if n != "out_proj" else 1.0)
            nn.init.zeros_(lin.bias)
            setattr(self, n, lin)
        if self.pos in ("kerple-power", "kerple-log"):
            self.kerple = Kerple(H)
        self.tw = self.kind == "mhatw"
        if self.tw:
            Tm = cfg["max_len"]
            self.Tm = Tm
            Lw = 2 * Tm - 1 if self.bidir else Tm
            self.Lw = Lw
            lam = [Tm ** (-(h + 1) / (H - 1)) if h < H - 1 else 0.0 for h in range(H)]
            delta = (Tm - 1 - torch.arange(Lw, dtype=torch.float64)).abs()
            self.time_logw = nn.Parameter(torch.stack([-delta * lam[h] for h in range(H)]).float())
            self.time_logbeta = nn.Parameter(torch.zeros(H, Tm))
            self.time_gamma = nn.Parameter(torch.ones(Tm))

    # pair terms ---------------------------------------------------------------------------
    def visible(self, t, u):
        """t [Lq], u [Lk] absolute positions -> bool [Lq, Lk] (causal / local masks)."""
        d = u[None, :] - t[:, None]
        m = torch.ones_like(d, dtype=torch.bool)
        if not self.bidir:
            m &= d <= 0
            if self.win > 0:
                m &= d > -self.win
        elif self.win > 0:
            m &= d.abs() <= self.win
        return m

    def bias(self, t, u, dtype):
        """additive bias [H, Lq, Lk] (or 0)."""
        H = self.H
        d = (u[None, :] - t[:, None]).to(torch.float64)
        ad = d.abs()
        b = torch.zeros(H, len(t), len(u), dtype=dtype)
        if self.pos == "alibi":
            m = torch.tensor(alibi_slopes(H), dtype=torch.float64)
            b = b + (-m[:, None, None] * ad[None]).to(dtype)
        elif self.pos == "kerple-power":
            p = self.kerple.bias_p.view(H, 1, 1)
            a = self.kerple.bias_a.view(H, 1, 1)
            ads = ad.clamp(min=1).to(dtype)[None]
            b = b - a * ads ** p * (ad > 0).to(dtype)[None]  # exactly 0 (and 0 gradient) at d = 0
        elif self.pos == "kerple-log":
            p = self.kerple.bias_p.view(H, 1, 1)
            a = self.kerple.bias_a.view(H, 1, 1)
            b = b - p * torch.log1p(a * ad.to(dtype)[None])
        elif self.pos == "sandwich":
            b = b + sandwich_bias(ad, H, self.dh, dtype)
        if self.tw:
            delta = (t[:, None] - u[None, :])
            j = (self.Tm - 1 - delta).clamp(0, self.Lw - 1)
            b = b + self.time_logw[:, j]
            b = b + self.time_logbeta[:, u.clamp(max=self.Tm - 1)][:, None, :]
        return b

    def clamp_kerple(self):
        if self.pos.startswith("kerple"):
            with torch.no_grad():
                self.kerple.bias_p.clamp_(min=KERPLE_EPS, max=2.0 if self.pos == "kerple-power" else None)
                self.kerple.bias_a.clamp_(min=KERPLE_EPS)

    def heads(self, x):
        B, L, _ = x.shape
        return x.view(B, L, self.H, self.dh).transpose(1, 2)  # [B, H, L, dh]

    def attend(self, s, vis, v):
        """s [B,H,Lq,Lk] scores, vis [B or 1, 1, Lq, Lk] bool -> [B,H,Lq,dh]; empty rows -> 0."""
        s = s.masked_fill(~vis, float("-inf"))
        none = ~vis.any(-1, keepdim=True)
        p = torch.softmax(s.masked_fill(none, 0.0), dim=-1).masked_fill(none, 0.0)
        return p @ v

    def lam(self, vis, dtype):
        if self.log_train <= 0:
            return 1.0
        n = vis.sum(-1, keepdim=True).to(torch.float64)
        lam = torch.where(n > 1, torch.log(n.clamp(min=1)) / self.log_train, torch.zeros_like(n)).clamp(min=1.0)
        return lam.to(dtype)

    def forward(self, x, padding_mask=None):
        self.clamp_kerple()
        B, L, D = x.shape
        pos = torch.arange(L)
        q, k, v = self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        if self.pos == "rope":
            q, k = rope_half(q, pos), rope_half(k, pos)
        elif self.pos == "xpos":
            c0 = L // 2  # torchscale's centring; any c0 gives the same products
            q = rope_interleaved(q, pos) * xpos_factor(self.dh, pos - c0, x.dtype)
            k = rope_interleaved(k, pos) * xpos_factor(self.dh, -(pos - c0), x.dtype)
        vis = self.visible(pos, pos)[None, None]
        if padding_mask is not None:
            vis = vis & ~padding_mask.bool()[:, None, None, :]
        s = self.lam(vis, x.dtype) * (q @ k.transpose(-1, -2)) / math.sqrt(self.dh) + self.bias(pos, pos, x.dtype)[None]
        o = self.attend(s, vis, v).transpose(1, 2).reshape(B, L, D)
        y = self.out_proj(o)
        if self.tw:
            y = y * self.time_gamma[pos.clamp(max=self.Tm - 1)][None, :, None]
        return y

    def step(self, x, state):
        """causal streaming: x [B, n, D] new tokens; state dict with 't', 'k', 'v' caches."""
        self.clamp_kerple()
        B, n, D = x.shape
        t0 = state.get("t", 0)
        pos = torch.arange(t0, t0 + n)
        q, k, v = self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        if self.pos == "rope":
            q, k = rope_half(q, pos), rope_half(k, pos)
        elif self.pos == "xpos":
            q, k = rope_interleaved(q, pos), rope_interleaved(k, pos)
        K = torch.cat([state["k"], k], 2) if "k" in state else k
        V = torch.cat([state["v"], v], 2) if "v" in state else v
        state["k"], state["v"], state["t"] = K, V, t0 + n
        upos = torch.arange(0, t0 + n)
        outs = []
        for i in range(n):
            t = t0 + i
            tt = torch.tensor([t])
            vis = self.visible(tt, upos)[None, None]
            qi = q[:, :, i:i + 1]
            if self.pos == "xpos":
                # relative to the query (c0 = t): keys scaled zeta^((t-u)/512), queries by 1
                kk = K * xpos_factor(self.dh, t - upos, x.dtype)
            else:
                kk = K
            s = self.lam(vis, x.dtype) * (qi @ kk.transpose(-1, -2)) / math.sqrt(self.dh) + self.bias(tt, upos, x.dtype)[None]
            outs.append(self.attend(s, vis, V))
        o = torch.cat(outs, 2).transpose(1, 2).reshape(B, n, D)
        y = self.out_proj(o)
        if self.tw:
            y = y * self.time_gamma[pos.clamp(max=self.Tm - 1)][None, :, None]
        return y


# ----------------------------------------------------------------------------------------------
# cases


def cfg_of(**kw):
    cfg = dict(mixer="mha", embed_dim=16, heads=2, pos="none", ffn_hidden_dim=32, bidirectional=False,
               norm_type="layernorm", prenorm=True, activation="silu", zdim=1, hdim=1, ndim=0)
    cfg.update(kw)
    return cfg


# (the names, configs and notes are stored in the committed cases: kept verbatim)
CASES = [
    dict(name="mha_causal_none_layernorm_pre_L20", dtype="float32", seed=8101, L=20,
         config=cfg_of(heads=4),
         note="mha causal, no positional scheme, 4 heads, layernorm pre-norm"),
    dict(name="mha_causal_rope_rmsnorm_post_pad_f64", dtype="float64", seed=8102, L=18, lengths=[18, 12],
         config=cfg_of(pos="rope", norm_type="rmsnorm", prenorm=False),
         note="mha causal, RoPE (half-split, r = dh), rmsnorm post-norm, right padding, float64"),
    dict(name="mha_bidir_rope_pad", dtype="float32", seed=8103, L=16, lengths=[16, 10],
         config=cfg_of(pos="rope", bidirectional=True, ffn_hidden_dim=0),
         note="mha bidirectional, RoPE, right padding, no FFN"),
    dict(name="mha_causal_alibi_h3_f64", dtype="float64", seed=8104, L=16,
         config=cfg_of(embed_dim=12, heads=3, pos="alibi", ffn_hidden_dim=24),
         note="mha causal, ALiBi with 3 heads (non-power-of-2 slopes), float64"),
    dict(name="mha_bidir_alibi_h6_pad", dtype="float32", seed=8105, L=14, lengths=[14, 9],
         config=cfg_of(embed_dim=12, heads=6, pos="alibi", bidirectional=True, ffn_hidden_dim=24),
         note="mha bidirectional, ALiBi -m|t-u| with 6 heads, right padding"),
    dict(name="mha_causal_kerple_power_f64", dtype="float64", seed=8106, L=16, lengths=[16, 11],
         config=cfg_of(pos="kerple-power", norm_type="scalenorm"),
         note="mha causal, KERPLE power (-bias_a |d|^bias_p), scalenorm, right padding, float64"),
    dict(name="mha_bidir_kerple_log_pad", dtype="float32", seed=8107, L=16, lengths=[16, 12],
         config=cfg_of(pos="kerple-log", bidirectional=True, prenorm=False),
         note="mha bidirectional, KERPLE log (-bias_p log(1 + bias_a |d|)), post-norm, right padding"),
    dict(name="mha_causal_sandwich", dtype="float32", seed=8108, L=20,
         config=cfg_of(pos="sandwich", heads=4),
         note="mha causal, Sandwich (NeMo form, i = 1..dh/2), 4 heads"),
    dict(name="mha_causal_xpos_f64", dtype="float64", seed=8109, L=20,
         config=cfg_of(pos="xpos"),
         note="mha causal, XPOS (interleaved rotation + zeta^((t-u)/512)); the reference is un-centred (c0 = L//2), "
              "the library re-centres per query block; float64"),
    dict(name="mha_causal_rope_attnwin5_logn8", dtype="float32", seed=8110, L=20,
         config=cfg_of(pos="rope", attn_window=5, log_n=True, train_len=8),
         note="mha causal, RoPE, local mask attn_window 5 (t-5 < u <= t), log-n scaling max(1, log n_t / log 8)"),
    dict(name="mha_bidir_none_attnwin3_logn4_pad_f64", dtype="float64", seed=8111, L=16, lengths=[16, 9],
         config=cfg_of(bidirectional=True, attn_window=3, log_n=True, train_len=4, norm_type="rmsnorm"),
         note="mha bidirectional, band |t-u| <= 3, log-n (n_t = visible valid keys, train_len 4), right padding "
              "(pad rows far from valid keys see no key: output 0), float64"),
    dict(name="local_causal_rope_w4_f64", dtype="float64", seed=8112, L=18, lengths=[18, 13],
         config=cfg_of(mixer="local", window=4, pos="rope"),
         note="local (sliding window 4, causal t-4 < u <= t), RoPE, right padding, float64"),
    dict(name="local_bidir_alibi_w3_pad", dtype="float32", seed=8113, L=16, lengths=[16, 11],
         config=cfg_of(mixer="local", window=3, pos="alibi", bidirectional=True, prenorm=False),
         note="local bidirectional band |t-u| <= 3, ALiBi, post-norm, right padding"),
    dict(name="local_causal_xpos_w6_logn", dtype="float32", seed=8114, L=20,
         config=cfg_of(mixer="local", window=6, pos="xpos", log_n=True, train_len=3),
         note="local causal window 6, XPOS, log-n (train_len 3)"),
    dict(name="mhatw_causal_f64", dtype="float64", seed=8115, L=16,
         config=cfg_of(mixer="mhatw", max_len=16),
         note="mhatw causal, max_len = L: bias log f_h(t-u) + log beta_h(u), output gamma(t), float64"),
    dict(name="mhatw_causal_maxlen10_rope_pad", dtype="float32", seed=8116, L=16, lengths=[16, 12],
         config=cfg_of(mixer="mhatw", max_len=10, pos="rope"),
         note="mhatw causal, max_len 10 < L = 16: distances, positions and gamma beyond 9 use the last learned "
              "value (length policy (c)), RoPE, right padding"),
    dict(name="mhatw_bidir_maxlen12_kerple_log_pad_f64", dtype="float64", seed=8117, L=16, lengths=[16, 10],
         config=cfg_of(mixer="mhatw", max_len=12, bidirectional=True, pos="kerple-log", norm_type="scalenorm"),
         note="mhatw bidirectional two-sided f (2 max_len - 1 entries, clamped beyond +-11), KERPLE log on top, "
              "right padding, float64"),
    dict(name="mhatw_causal_sandwich_attnwin6_post", dtype="float32", seed=8118, L=18,
         config=cfg_of(mixer="mhatw", max_len=18, pos="sandwich", attn_window=6, prenorm=False, heads=4),
         note="mhatw causal with Sandwich, attn_window 6, post-norm, 4 heads"),
]


# perturbation: the shared rules, KERPLE inside its clamp range (away from its edges), the MHATW
# time weights
RULES = [
    cw.NORM,
    (cw.ends("kerple.bias_p"), lambda p, leaf, d: 0.3 + 1.4 * d.u(p)),
    (cw.ends("kerple.bias_a"), lambda p, leaf, d: 0.2 + 0.7 * d.u(p)),
    (cw.leaf_is("time_logw"), lambda p, leaf, d: p + 0.3 * d.n(p)),
    (cw.leaf_is("time_logbeta"), lambda p, leaf, d: 0.3 * d.n(p)),
    (cw.leaf_is("time_gamma"), lambda p, leaf, d: 1 + 0.2 * d.n(p)),
    cw.MATRIX_DIV,
    cw.BIAS,
]


def xpos_centring_check():
    """the products <q~_t, k~_u> do not depend on the centre c0 (float64; XPOS re-centring, a
    project extension of torchscale's XPOS)"""
    torch.manual_seed(5)
    dh, L = 8, 50
    q, k = torch.randn(L, dh, dtype=torch.float64), torch.randn(L, dh, dtype=torch.float64)
    pos = torch.arange(L)
    worst = 0.0
    ref = None
    for c0 in (0, L // 2, L - 1, 1000):
        s = (q * xpos_factor(dh, pos - c0, torch.float64)) @ (k * xpos_factor(dh, -(pos - c0), torch.float64)).T
        ref = s if ref is None else ref
        worst = max(worst, cw.rel_err(s, ref))
    return worst


def self_check():
    assert alibi_slopes(12) == [2.0 ** -(h + 1) for h in range(8)] + [2.0 ** -(h + 0.5) for h in range(4)]
    c = xpos_centring_check()
    assert c < 1e-13, c
    return f"self-checks: ALiBi H=12 slopes ok; XPOS products independent of the centre ({c:.1e})"


def expected_noise(spec):
    """gradients that are exactly 0 in exact arithmetic: without a rotation (RoPE/XPOS) the key
    bias adds <q_t, b_k> to every score of row t, which the softmax cancels"""
    return [] if spec["config"].get("pos") in ("rope", "xpos") else ["mixer.k_proj.bias"]


BLOCK_NOTE = ("block: prenorm y = x + mixer(mixer_norm(x)), postnorm y = mixer_norm(x + mixer(x)); then nffn "
             "(mega_ref.NormalizedFeedForwardNetwork); zdim/hdim/ndim are unused placeholders")


def notes(spec, noise):
    cfg = spec["config"]
    out = cw.layer_notes(spec, BLOCK_NOTE)
    if spec.get("lengths") is not None:
        out.append(f"padding_mask: 1 = pad (row lengths {spec['lengths']}); pad keys are masked; outputs at pad "
                   "positions are the formula's values (a row with no visible key gives 0), compared like the others")
    if not cfg.get("bidirectional", False):
        out.append("decode.out: eval-mode streaming one position per call from a separate cached step, no mask")
    if noise:
        out.append(cw.noise_note(noise))
    return out


REFERENCE = cw.Reference(
    GENERATOR, lambda kind, cfg: mega_ref.MixerBlock(cfg, AttnMixer), RULES, notes,
    default_out=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "mixers"),
    expected_noise=expected_noise, self_check=self_check)

if __name__ == "__main__":
    sys.exit(cw.main(REFERENCE, CASES))
