#!/usr/bin/python3
"""Own PyTorch reference for the softmax-attention token mixers mha, local and mhatw, with the
positional schemes of SPEC.md §8, and the fixture writer for tests/fixtures/mixers/.

Written from /work/shared/SPEC.md §3 (MHA + RoPE), §4.1-§4.2 (MHATW, normalised form), §8
(ALiBi, KERPLE, Sandwich, XPOS, local mask, log-n scaling) and the block wrapper of
src/layers/mixer.h; not from the C code. Batch-first tensors [B, T, D].

The forward is the naive form, independent of the C kernels: the full [B, H, T, T] score tensor,
an explicit boolean mask (causal / local window / pad keys), softmax with rows that see no key
set to 0, biases evaluated per (t, u) pair. XPOS is applied *un-centred* in the forward, with the
torchscale offset c0 = L // 2 (q * zeta^((t-c0)/512), k * zeta^(-(u-c0)/512)); the C library
re-centres per query block, so the fixtures check that the two agree. `step` is a separate
cached implementation (keys cached rotated, XPOS relative to the current query); the generator
checks step == forward before writing. Gradients come from autograd.

Conventions (the library's, SPEC §3.1-§3.2, §8):
  * q/k/v/out projections D -> D with biases (fairseq names q_proj, k_proj, v_proj, out_proj);
    H heads of dh = D / H; content score <q_t, k_u> / sqrt(dh);
  * RoPE: half-split pairs (x_i, x_{i+dh/2}), r = dh, theta_i = 10000^(-2i/dh), angles in float64;
  * XPOS: interleaved pairs (x_2i, x_2i+1), theta_i as above, zeta_i = (2i + 0.4 dh)/(1.4 dh),
    base 512; causal only;
  * ALiBi: -m_h |t - u| (SPEC §8.2 slopes; bidirectional: symmetric);
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
    /usr/bin/python3 tests/ref/ref_attn.py --out tests/fixtures/mixers [--case NAME ...] [--list]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mega_ref  # noqa: E402  (SequenceNorm, NormalizedFeedForwardNetwork)
import st  # noqa: E402

GENERATOR = "tests/ref/ref_attn.py (own PyTorch implementation of SPEC.md §3, §4.2, §8)"
FP32_VS_F64 = 5e-5
FD_TOL = 1e-6
STREAM_TOL = 1e-12
NOISE_REL = 1e-11
MAX_CASE_BYTES = 100 * 1024
KERPLE_EPS = 0.01
XPOS_BASE = 512.0


# ----------------------------------------------------------------------------------------------
# positional pieces


def alibi_slopes(H):
    """SPEC §8.2: powers of two 2^(-8h/H); otherwise the P = 2^floor(log2 H) list followed by
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


class AttnBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.prenorm = cfg.get("prenorm", True)
        nt, aff = cfg.get("norm_type", "layernorm"), cfg.get("norm_affine", True)
        self.mixer_norm = mega_ref.SequenceNorm(nt, cfg["embed_dim"], affine=aff)
        self.mixer = AttnMixer(cfg)
        F = cfg.get("ffn_hidden_dim", 0)
        self.nffn = (mega_ref.NormalizedFeedForwardNetwork(cfg["embed_dim"], F, activation=cfg.get("activation", "silu"),
                                                           norm_type=nt, prenorm=self.prenorm, norm_affine=aff)
                     if F and F > 0 else None)

    def forward(self, x, padding_mask=None):
        if self.prenorm:
            y = x + self.mixer(self.mixer_norm(x), padding_mask)
        else:
            y = self.mixer_norm(x + self.mixer(x, padding_mask))
        return y if self.nffn is None else self.nffn(y)

    def step(self, x, state):
        if self.prenorm:
            y = x + self.mixer.step(self.mixer_norm(x), state)
        else:
            y = self.mixer_norm(x + self.mixer.step(x, state))
        return y if self.nffn is None else self.nffn(y)


# ----------------------------------------------------------------------------------------------
# cases


def cfg_of(**kw):
    cfg = dict(mixer="mha", embed_dim=16, heads=2, pos="none", ffn_hidden_dim=32, bidirectional=False,
               norm_type="layernorm", prenorm=True, activation="silu", zdim=1, hdim=1, ndim=0)
    cfg.update(kw)
    return cfg


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


def perturb(model, gen):
    """Move every parameter away from its trivial initial value (the gen_fixtures.py rules, plus
    KERPLE inside its clamp range, MHATW time weights)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            r = lambda: torch.randn(p.shape, generator=gen, dtype=torch.float64)  # noqa: E731
            u = lambda: torch.rand(p.shape, generator=gen, dtype=torch.float64)  # noqa: E731
            if "norm.norm." in name:
                p.copy_(1 + 0.2 * r() if leaf in ("weight",) else (0.1 * r() if leaf == "bias" else 1 + 0.15 * r()))
            elif name.endswith("kerple.bias_p"):
                p.copy_(0.3 + 1.4 * u())
            elif name.endswith("kerple.bias_a"):
                p.copy_(0.2 + 0.7 * u())
            elif leaf == "time_logw":
                p.add_(0.3 * r())
            elif leaf == "time_logbeta":
                p.copy_(0.3 * r())
            elif leaf == "time_gamma":
                p.copy_(1 + 0.2 * r())
            elif leaf == "weight" and p.dim() == 2:
                p.copy_(r() / math.sqrt(p.shape[1]))
            elif leaf == "bias":
                p.copy_(0.1 * r())
            else:
                raise KeyError(f"no perturbation rule for {name}")


def build(cfg, dtype, W=None):
    torch.manual_seed(0)
    m = AttnBlock(cfg).to(dtype)
    if W is not None:
        mega_ref.load_weights(m, W)
    return m


def run(cfg, dtype, W, io, decode):
    m = build(cfg, dtype, W).train()
    x = torch.from_numpy(io["x"]).to(dtype).requires_grad_(True)
    pad = torch.from_numpy(io["padding_mask"]).bool() if "padding_mask" in io else None
    out = m(x, pad)
    (out * torch.from_numpy(io["dout"]).to(dtype)).sum().backward()
    res = {"out": out.detach(), "dx": x.grad.detach()}
    for n, p in m.named_parameters():
        res["grad." + n] = p.grad.detach() if p.grad is not None else torch.zeros_like(p)
    if decode:
        m = build(cfg, dtype, W).eval()
        state = {}
        with torch.no_grad():
            xs = torch.from_numpy(io["x"]).to(dtype)
            res["decode.out"] = torch.cat([m.step(xs[:, t:t + 1], state) for t in range(xs.size(1))], 1)
    return res


def rel_err(a, b):
    a, b = a.double(), b.double()
    s = b.abs().max().item() if b.numel() else 0.0
    d = (a - b).abs().max().item() if b.numel() else 0.0
    return d / s if s > 0 else d


def fd_check(cfg, W, io, seed):
    """directional derivative of the loss w.r.t. all parameters and x, float64, vs autograd"""
    W64 = {k: v.astype(np.float64) for k, v in W.items()}
    m = build(cfg, torch.float64, W64).train()
    gen = torch.Generator().manual_seed(seed + 99)
    params = list(m.parameters())
    dirs = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
    x = torch.from_numpy(io["x"]).double().requires_grad_(True)
    dxd = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    pad = torch.from_numpy(io["padding_mask"]).bool() if "padding_mask" in io else None
    dout = torch.from_numpy(io["dout"]).double()
    (m(x, pad) * dout).sum().backward()
    an = sum((p.grad * d).sum() for p, d in zip(params, dirs)).item() + (x.grad * dxd).sum().item()
    eps, vals = 1e-6, []
    with torch.no_grad():
        for sg in (1.0, -1.0):
            for p, d in zip(params, dirs):
                p.add_(sg * eps * d)
            vals.append((m(x.detach() + sg * eps * dxd, pad) * dout).sum().item())
            for p, d in zip(params, dirs):
                p.sub_(sg * eps * d)
    num = (vals[0] - vals[1]) / (2 * eps)
    return abs(num - an) / max(abs(an), 1e-300)


def stream_check(cfg, W, io):
    """eval-mode step (one token, and uneven multi-token pieces) == full forward, float64"""
    W64 = {k: v.astype(np.float64) for k, v in W.items()}
    m = build(cfg, torch.float64, W64).eval()
    x = torch.from_numpy(io["x"]).double()
    L = x.size(1)
    with torch.no_grad():
        full = m(x)
        st1 = {}
        one = torch.cat([m.step(x[:, t:t + 1], st1) for t in range(L)], 1)
        b = [0, 5, 6, 13, L]
        st2 = {}
        multi = torch.cat([m.step(x[:, a:c], st2) for a, c in zip(b[:-1], b[1:])], 1)
    return max(rel_err(one, full), rel_err(multi, full))


def xpos_centring_check():
    """the products <q~_t, k~_u> do not depend on the centre c0 (float64, SPEC §8.5)"""
    torch.manual_seed(5)
    dh, L = 8, 50
    q, k = torch.randn(L, dh, dtype=torch.float64), torch.randn(L, dh, dtype=torch.float64)
    pos = torch.arange(L)
    worst = 0.0
    ref = None
    for c0 in (0, L // 2, L - 1, 1000):
        s = (q * xpos_factor(dh, pos - c0, torch.float64)) @ (k * xpos_factor(dh, -(pos - c0), torch.float64)).T
        ref = s if ref is None else ref
        worst = max(worst, rel_err(s, ref))
    return worst


def expected_noise(cfg):
    """gradients that are exactly 0 in exact arithmetic: without a rotation (RoPE/XPOS) the key
    bias adds <q_t, b_k> to every score of row t, which the softmax cancels"""
    return [] if cfg.get("pos") in ("rope", "xpos") else ["mixer.k_proj.bias"]


def make_data(spec):
    cfg, L, B = spec["config"], spec["L"], 2
    np_dt = np.float32 if spec["dtype"] == "float32" else np.float64
    torch.manual_seed(spec["seed"])
    m = AttnBlock(cfg).double()
    gen = torch.Generator().manual_seed(spec["seed"] * 7 + 3)
    perturb(m, gen)
    W = {k: v.numpy().astype(np_dt) for k, v in m.state_dict().items()}
    io = {"x": torch.randn(B, L, cfg["embed_dim"], generator=gen, dtype=torch.float64).numpy().astype(np_dt)}
    if spec.get("lengths") is not None:
        io["padding_mask"] = (np.arange(L)[None, :] >= np.array(spec["lengths"])[:, None]).astype(np.uint8)
    io["dout"] = torch.randn(B, L, cfg["embed_dim"], generator=gen, dtype=torch.float64).numpy().astype(np_dt)
    return W, io


def generate(spec, out_dir):
    cfg, dtype = spec["config"], spec["dtype"]
    tdt = torch.float32 if dtype == "float32" else torch.float64
    causal = not cfg.get("bidirectional", False)
    W, io = make_data(spec)
    ours = run(cfg, tdt, W, io, decode=causal)
    W64 = {k: v.astype(np.float64) for k, v in W.items()}
    io64 = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in io.items()}
    ref64 = run(cfg, torch.float64, W64, io64, decode=causal)
    gmax = max(v.abs().max().item() for k, v in ref64.items() if k.startswith("grad."))
    noise = sorted(k[5:] for k, v in ref64.items() if k.startswith("grad.") and v.abs().max().item() <= NOISE_REL * gmax)
    if noise != expected_noise(cfg):
        raise RuntimeError(f"{spec['name']}: zero gradients {noise}, expected {expected_noise(cfg)}")
    worst32 = 0.0
    if dtype == "float32":
        worst32 = max(rel_err(v, ref64[k]) for k, v in ours.items() if k[5:] not in noise)
        if worst32 > FP32_VS_F64:
            raise RuntimeError(f"{spec['name']}: float32 vs float64 {worst32:.2e}")
    fd = fd_check(cfg, W, io, spec["seed"])
    if fd > FD_TOL:
        raise RuntimeError(f"{spec['name']}: finite differences {fd:.1e}")
    checks = {"fp32_vs_fp64": worst32, "finite_diff": fd}
    if causal:
        checks["stream_vs_full"] = stream_check(cfg, W, io)
        if checks["stream_vs_full"] > STREAM_TOL:
            raise RuntimeError(f"{spec['name']}: streaming mismatch {checks['stream_vs_full']:.2e}")
    np_dt = np.float32 if dtype == "float32" else np.float64
    out = dict(io)
    for k in ["out", "dx", "decode.out"] + [k for k in ours if k.startswith("grad.")]:
        if k in ours:
            out[k] = ours[k].cpu().numpy().astype(np_dt)
    first = [k for k in ("x", "padding_mask", "dout") if k in io]
    out = {k: out[k] for k in first + [k for k in out if k not in first]}
    cdir = os.path.join(out_dir, spec["name"])
    os.makedirs(cdir, exist_ok=True)
    st.save(os.path.join(cdir, "weights.safetensors"), W, {"config": json.dumps(cfg, sort_keys=True)})
    st.save(os.path.join(cdir, "io.safetensors"), out, {"case": spec["name"], "kind": "layer", "dtype": dtype})
    dn = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.uint8): "uint8"}
    notes = [
        spec["note"],
        "block: prenorm y = x + mixer(mixer_norm(x)), postnorm y = mixer_norm(x + mixer(x)); then nffn "
        "(mega_ref.NormalizedFeedForwardNetwork); zdim/hdim/ndim are unused placeholders",
        "training mode, every dropout 0; weights are the reference initialisation perturbed away from trivial values",
        "float64: every operation in float64" if dtype == "float64" else "float32 (checked against a float64 rerun)",
        "loss = sum(out * dout); dx and grad.* are its gradients",
    ]
    if spec.get("lengths") is not None:
        notes.append(f"padding_mask: 1 = pad (row lengths {spec['lengths']}); pad keys are masked; outputs at pad "
                     "positions are the formula's values (a row with no visible key gives 0), compared like the others")
    if causal:
        notes.append("decode.out: eval-mode streaming one position per call from a separate cached step, no mask")
    if noise:
        notes.append("noise_gradients (exactly zero in exact arithmetic, stored values are rounding noise): "
                     + ", ".join(noise))
    case = {"kind": "layer", "config": cfg, "dtype": dtype, "batch": 2, "seq_len": spec["L"], "seed": spec["seed"],
            "generator": GENERATOR, "notes": notes, "noise_gradients": noise,
            "tensors": {k: [dn[v.dtype], list(v.shape)] for k, v in out.items()}, "torch_version": torch.__version__}
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(cdir, n)) for n in os.listdir(cdir))
    if size > MAX_CASE_BYTES:
        raise RuntimeError(f"{spec['name']}: {size} bytes > {MAX_CASE_BYTES}")
    print(f"{spec['name']:44s} {size / 1024:5.1f} KB  noise={noise}  " + "  ".join(f"{k} {v:.1e}" for k, v in checks.items()))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "mixers"))
    ap.add_argument("--case", action="append")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    specs = [s for s in CASES if not a.case or s["name"] in a.case]
    if a.list:
        for s in specs:
            print(s["name"])
        return 0
    # self-checks of the reference pieces
    assert alibi_slopes(12) == [2.0 ** -(h + 1) for h in range(8)] + [2.0 ** -(h + 0.5) for h in range(4)]
    c = xpos_centring_check()
    assert c < 1e-13, c
    print(f"self-checks: ALiBi H=12 slopes ok; XPOS products independent of the centre ({c:.1e})")
    os.makedirs(a.out, exist_ok=True)
    for s in specs:
        generate(s, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
