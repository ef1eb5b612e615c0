#!/usr/bin/python3
"""Own PyTorch reference for the AFT token mixers (aft-full, aft-local, aft-simple, aft-tw) and the
gMLP spatial gating unit (gmlp), and the fixture writer for their cases in tests/fixtures/mixers/.

Written from /work/shared/SPEC.md §5 (AFT family, time-weighted AFT and its RNN form), §6.1 (gMLP
SGU) and the block wrapper of src/layers/mixer.h; not from the C code. Batch-first [B, T, D].

The forward is the naive O(T^2) form, independent of the C kernels (blocked GEMMs, scans): for
every (t, u, c) the logit K[u, c] + b(t, u, c), an explicit boolean mask (causal, pad keys), a
softmax over u with rows that see no key set to 0, then the weighted sum of V. `step` is a
separate streaming implementation (the RNN form of SPEC §5.4 with the running-max state for
aft-simple / aft-tw, caches for aft-full, a ring of the band plus a running aggregate for
aft-local, the LN(Z2) cache for gmlp); the generator checks step == forward before writing.
Gradients come from autograd.

Conventions (the library's; docs/mixers_aft.md):
  * AFT: one fused projection qkv D -> 3D (rows [Q | K | V]) with bias, out D -> D with bias;
    ybar = softmax_u(K + b) . V per channel; o = gamma(t) sigmoid(Q) ybar; y = out(o);
  * aft-full: b = pos_bias[t, u] ([max_len, max_len]);
  * aft-local (window s): b = pos_bias[t, u - t + s - 1] inside the band 0 <= t-u < s (causal) or
    |t-u| < s (bidirectional), 0 outside (not -inf, SPEC §5.2); pos_bias [max_len, s] causal,
    [max_len, 2s-1] bidirectional;
  * aft-simple: b = 0;
  * aft-tw: b = -exp(time_decay[h]) |t-u| + time_beta[h, min(u, max_len-1)] (the log of beta_h(u)),
    output factor time_gamma[min(t, max_len-1)] (clamped past max_len, SPEC §4.1 (c)); heads
    h = c // (D / heads); time_beta/time_gamma exist only when max_len > 0;
  * gmlp (F = hdim): [Z1 | Z2] = gelu(proj_in(x)); N2 = LayerNorm(Z2) (sgu_norm), pad rows zeroed;
    G[t, c] = sum_u spatial.weight[h, t, u] N2[u, c] + spatial.bias[h, t] (causal: u <= t),
    h = c // (F/2 / heads); y = proj_out(Z1 * G).
Block: prenorm y = x + mixer(mixer_norm(x)); postnorm y = mixer_norm(x + mixer(x)); then nffn.

Usage (from the repository root; deterministic output):
    /usr/bin/python3 tests/ref/ref_aft.py --out tests/fixtures/mixers [--case NAME ...] [--list]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mega_ref  # noqa: E402  (SequenceNorm, NormalizedFeedForwardNetwork, load_weights)
import st  # noqa: E402

GENERATOR = "tests/ref/ref_aft.py (own PyTorch implementation of SPEC.md §5, §6.1)"
FP32_VS_F64 = 5e-5
FD_TOL = 1e-6
STREAM_TOL = 1e-12
NOISE_REL = 1e-11
MAX_CASE_BYTES = 100 * 1024


# ----------------------------------------------------------------------------------------------
# AFT family


class AFTMixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg["mixer"]
        D = cfg["embed_dim"]
        self.D, self.bidir = D, cfg.get("bidirectional", False)
        self.Tm, self.s = cfg.get("max_len", 0), cfg.get("window", 0)
        self.H = cfg.get("heads", 1) if self.kind == "aft-tw" else 1
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        for lin in (self.qkv, self.out):
            nn.init.normal_(lin.weight, 0.0, 0.02)
            nn.init.zeros_(lin.bias)
        if self.kind == "aft-full":
            self.pos_bias = nn.Parameter(torch.zeros(self.Tm, self.Tm))
        elif self.kind == "aft-local":
            self.pos_bias = nn.Parameter(torch.zeros(self.Tm, 2 * self.s - 1 if self.bidir else self.s))
        elif self.kind == "aft-tw":
            T0 = self.Tm if self.Tm > 0 else 1024
            self.time_decay = nn.Parameter(torch.tensor([-(h + 1) / self.H * math.log(T0) for h in range(self.H)]))
            if self.Tm > 0:
                self.time_beta = nn.Parameter(torch.zeros(self.H, self.Tm))
                self.time_gamma = nn.Parameter(torch.ones(self.Tm))

    def head_of(self):
        return torch.arange(self.D) // (self.D // self.H)

    def bias(self, t, u):
        """b(t, u, c) for position vectors t [Lt], u [Lu]: a tensor broadcastable to [Lt, Lu, D]"""
        dt = self.qkv.weight.dtype
        tt, uu = t[:, None], u[None, :]
        if self.kind == "aft-full":
            return self.pos_bias[tt, uu][..., None]
        if self.kind == "aft-local":
            d, s = tt - uu, self.s
            band = (d < s) & ((d > -s) if self.bidir else (d >= 0))
            col = (s - 1 - d).clamp(0, self.pos_bias.shape[1] - 1)
            return torch.where(band, self.pos_bias[tt.expand_as(col), col], torch.zeros((), dtype=dt))[..., None]
        if self.kind == "aft-simple":
            return torch.zeros(1, 1, 1, dtype=dt)
        h = self.head_of()
        b = -torch.exp(self.time_decay)[h][None, None, :] * (tt - uu).abs().to(dt)[..., None]
        if self.Tm > 0:
            b = b + self.time_beta[h][:, u.clamp(max=self.Tm - 1)].T[None, :, :]  # log beta_h(u), clamped
        return b

    def forward(self, x, padding_mask=None):
        B, L, D = x.shape
        if self.Tm > 0 and self.kind in ("aft-full", "aft-local") and L > self.Tm:
            raise ValueError(f"sequence length {L} exceeds the mixer's max-len {self.Tm}")
        q, k, v = self.qkv(x).split(D, dim=-1)
        pos = torch.arange(L)
        s = k[:, None, :, :] + self.bias(pos, pos)[None]  # [B, t, u, c]
        vis = torch.ones(L, L, dtype=torch.bool) if self.bidir else (pos[None, :] <= pos[:, None])
        vis = vis[None, :, :].expand(B, L, L)
        if padding_mask is not None:
            vis = vis & ~padding_mask[:, None, :]
        vis = vis[..., None]
        s = s.masked_fill(~vis, float("-inf"))
        any_ = vis.any(dim=2, keepdim=True)
        s = torch.where(any_, s, torch.zeros((), dtype=s.dtype))  # a row with no visible key: no NaN
        p = torch.softmax(s, dim=2) * any_
        ybar = (p * v[:, None, :, :]).sum(dim=2)
        o = torch.sigmoid(q) * ybar
        if self.kind == "aft-tw" and self.Tm > 0:
            o = o * self.time_gamma[pos.clamp(max=self.Tm - 1)][None, :, None]
        return self.out(o)

    def step(self, x, state):
        """eval-mode streaming of n tokens x [B, n, D] (no mask)"""
        B, n, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        t0 = state.get("pos", 0)
        ys = []
        for i in range(n):
            t = t0 + i
            kt, vt = k[:, i], v[:, i]
            if self.kind in ("aft-simple", "aft-tw"):
                # SPEC §5.4: a = e^{-w} a + e^{k} v, b = e^{-w} b + e^{k}, stored as (a', b', p)
                w = torch.exp(self.time_decay)[self.head_of()] if self.kind == "aft-tw" else torch.zeros(D, dtype=x.dtype)
                if self.kind == "aft-tw" and self.Tm > 0:
                    kt = kt + self.time_beta[self.head_of(), min(t, self.Tm - 1)][None, :]
                if "a" not in state:
                    state["a"], state["b"] = torch.zeros(B, D, dtype=x.dtype), torch.zeros(B, D, dtype=x.dtype)
                    state["p"] = torch.full((B, D), float("-inf"), dtype=x.dtype)
                pn = torch.maximum(state["p"] - w, kt)
                fo, fn = torch.exp(state["p"] - w - pn), torch.exp(kt - pn)
                state["a"] = fo * state["a"] + fn * vt
                state["b"] = fo * state["b"] + fn
                state["p"] = pn
                yb = state["a"] / state["b"]
            else:
                state.setdefault("K", []).append(kt)
                state.setdefault("V", []).append(vt)
                K, V = torch.stack(state["K"], 1), torch.stack(state["V"], 1)  # [B, t+1, D]
                if self.kind == "aft-full":
                    lg = K + self.pos_bias[t, : t + 1][None, :, None]
                    yb = (torch.softmax(lg, 1) * V).sum(1)
                else:
                    # the band t-s < u <= t explicitly, the keys before it as a running aggregate
                    s = self.s
                    if t - s >= 0:
                        ku, vu = K[:, t - s], V[:, t - s]
                        if "ga" not in state:
                            state["ga"], state["gb"], state["gp"] = torch.zeros_like(ku), torch.zeros_like(ku), ku.clone()
                        gp = torch.maximum(state["gp"], ku)
                        state["ga"] = state["ga"] * torch.exp(state["gp"] - gp) + torch.exp(ku - gp) * vu
                        state["gb"] = state["gb"] * torch.exp(state["gp"] - gp) + torch.exp(ku - gp)
                        state["gp"] = gp
                    u0 = max(0, t - s + 1)
                    lg = K[:, u0:] + self.pos_bias[t, [u - t + s - 1 for u in range(u0, t + 1)]][None, :, None]
                    m = lg.max(1).values
                    if "ga" in state:
                        m = torch.maximum(m, state["gp"])
                    e = torch.exp(lg - m[:, None])
                    num, den = (e * V[:, u0:]).sum(1), e.sum(1)
                    if "ga" in state:
                        f = torch.exp(state["gp"] - m)
                        num, den = num + f * state["ga"], den + f * state["gb"]
                    yb = num / den
            o = torch.sigmoid(q[:, i]) * yb
            if self.kind == "aft-tw" and self.Tm > 0:
                o = o * self.time_gamma[min(t, self.Tm - 1)]
            ys.append(self.out(o))
        state["pos"] = t0 + n
        return torch.stack(ys, 1)


# ----------------------------------------------------------------------------------------------
# gMLP spatial gating unit


class Spatial(nn.Module):
    def __init__(self, H, n):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(H, n, n).uniform_(-1e-3 / n, 1e-3 / n))
        self.bias = nn.Parameter(torch.ones(H, n))


class GMLPMixer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D, Fg = cfg["embed_dim"], cfg["hdim"]
        self.F2, self.H, self.n = Fg // 2, cfg.get("heads", 1), cfg["max_len"]
        self.bidir = cfg.get("bidirectional", False)
        self.proj_in = nn.Linear(D, Fg)
        self.sgu_norm = nn.LayerNorm(self.F2, eps=mega_ref.NORM_EPS)
        self.spatial = Spatial(self.H, self.n)
        self.proj_out = nn.Linear(self.F2, D)
        for lin in (self.proj_in, self.proj_out):
            nn.init.normal_(lin.weight, 0.0, 0.02)
            nn.init.zeros_(lin.bias)

    def gelu(self, x):
        return mega_ref.gelu(x)

    def forward(self, x, padding_mask=None):
        B, L, _ = x.shape
        if L > self.n:
            raise ValueError(f"sequence length {L} exceeds the mixer's max-len {self.n}")
        z = self.gelu(self.proj_in(x))
        z1, z2 = z[..., : self.F2], z[..., self.F2:]
        n2 = self.sgu_norm(z2)
        if padding_mask is not None:
            n2 = n2.masked_fill(padding_mask[..., None], 0.0)
        W = self.spatial.weight[:, :L, :L]
        if not self.bidir:
            W = W * torch.tril(torch.ones(L, L, dtype=W.dtype))
        hd = self.F2 // self.H
        n2h = n2.reshape(B, L, self.H, hd)
        g = torch.einsum("htu,buhc->bthc", W, n2h) + self.spatial.bias[:, :L].T[None, :, :, None]
        return self.proj_out(z1 * g.reshape(B, L, self.F2))

    def step(self, x, state):
        B, n, _ = x.shape
        z = self.gelu(self.proj_in(x))
        z1, n2 = z[..., : self.F2], self.sgu_norm(z[..., self.F2:])
        hd = self.F2 // self.H
        ys = []
        for i in range(n):
            t = state.get("pos", 0)
            state.setdefault("N", []).append(n2[:, i])
            N = torch.stack(state["N"], 1).reshape(B, t + 1, self.H, hd)
            g = torch.einsum("hu,buhc->bhc", self.spatial.weight[:, t, : t + 1], N) + self.spatial.bias[:, t][None, :, None]
            ys.append(self.proj_out(z1[:, i] * g.reshape(B, self.F2)))
            state["pos"] = t + 1
        return torch.stack(ys, 1)


class MixerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.prenorm = cfg.get("prenorm", True)
        nt = cfg.get("norm_type", "layernorm")
        self.mixer_norm = mega_ref.SequenceNorm(nt, cfg["embed_dim"])
        self.mixer = GMLPMixer(cfg) if cfg["mixer"] == "gmlp" else AFTMixer(cfg)
        Fn = cfg.get("ffn_hidden_dim", 0)
        self.nffn = (mega_ref.NormalizedFeedForwardNetwork(cfg["embed_dim"], Fn, activation=cfg.get("activation", "silu"),
                                                           norm_type=nt, prenorm=self.prenorm)
                     if Fn and Fn > 0 else None)

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
    cfg = dict(mixer="aft-full", embed_dim=16, heads=1, ffn_hidden_dim=32, bidirectional=False, norm_type="layernorm",
               prenorm=True, activation="silu", zdim=1, hdim=8, ndim=0)
    cfg.update(kw)
    return cfg


CASES = [
    dict(name="aft_full_causal_pre_L20", dtype="float32", seed=9101, L=20, config=cfg_of(max_len=24),
         note="aft-full causal, max_len 24 > L = 20 (rows/columns >= 20 of pos_bias unused), layernorm pre-norm"),
    dict(name="aft_full_bidir_post_rmsnorm_pad_f64", dtype="float64", seed=9102, L=18, lengths=[18, 11],
         config=cfg_of(max_len=18, bidirectional=True, prenorm=False, norm_type="rmsnorm"),
         note="aft-full bidirectional, max_len = L, rmsnorm post-norm, right padding (pad keys dropped from both sums), "
              "float64"),
    dict(name="aft_local_causal_w4_pad_f64", dtype="float64", seed=9103, L=20, lengths=[20, 14],
         config=cfg_of(mixer="aft-local", window=4, max_len=20, ffn_hidden_dim=0),
         note="aft-local causal, window 4 (band 0 <= t-u < 4 uses pos_bias, keys further back weight e^K), no FFN, "
              "right padding, float64"),
    dict(name="aft_local_bidir_w3_pad", dtype="float32", seed=9104, L=18, lengths=[18, 12],
         config=cfg_of(mixer="aft-local", window=3, max_len=20, bidirectional=True, norm_type="scalenorm"),
         note="aft-local bidirectional, window 3 (|t-u| < 3, pos_bias [20, 5]), scalenorm, right padding"),
    dict(name="aft_simple_causal_post", dtype="float32", seed=9105, L=20,
         config=cfg_of(mixer="aft-simple", prenorm=False),
         note="aft-simple causal (prefix softmax of K per channel), post-norm"),
    dict(name="aft_simple_bidir_pad_f64", dtype="float64", seed=9106, L=16, lengths=[16, 9],
         config=cfg_of(mixer="aft-simple", bidirectional=True, ffn_hidden_dim=24, activation="gelu"),
         note="aft-simple bidirectional, right padding, gelu FFN, float64"),
    dict(name="aft_tw_causal_h4_maxlen20_f64", dtype="float64", seed=9107, L=20,
         config=cfg_of(mixer="aft-tw", heads=4, max_len=20),
         note="aft-tw causal, 4 heads, exponential f_h(d) = exp(-exp(time_decay_h) d), time_beta (log beta_h(u)) and "
              "time_gamma (gamma(t)) over max_len 20, float64"),
    dict(name="aft_tw_bidir_h2_maxlen12_pad", dtype="float32", seed=9108, L=18, lengths=[18, 13],
         config=cfg_of(mixer="aft-tw", heads=2, max_len=12, bidirectional=True, norm_type="rmsnorm"),
         note="aft-tw bidirectional (f_h(|t-u|), two scans in the library), 2 heads, max_len 12 < L = 18: beta and "
              "gamma of positions >= 11 use entry 11 (clamped, SPEC §4.1 (c)), rmsnorm, right padding"),
    dict(name="aft_tw_causal_h2_maxlen8_f64", dtype="float64", seed=9113, L=20,
         config=cfg_of(mixer="aft-tw", heads=2, max_len=8, ffn_hidden_dim=0, norm_type="scalenorm"),
         note="aft-tw causal, max_len 8 < L = 20 (beta/gamma clamped past position 7; streaming continues past "
              "max_len), no FFN, scalenorm, float64"),
    dict(name="aft_tw_causal_rnn_h2_pad", dtype="float32", seed=9109, L=20, lengths=[20, 15],
         config=cfg_of(mixer="aft-tw", heads=2, max_len=0, prenorm=False),
         note="aft-tw causal with max_len 0: the pure RNN form (alpha = beta = gamma = 1, no length limit), 2 heads, "
              "post-norm, right padding"),
    dict(name="gmlp_causal_h1_pre", dtype="float32", seed=9110, L=16,
         config=cfg_of(mixer="gmlp", hdim=16, max_len=20),
         note="gmlp causal (lower-triangular spatial projection), F = hdim 16, 1 head, max_len 20 > L"),
    dict(name="gmlp_bidir_h2_pad_f64", dtype="float64", seed=9111, L=14, lengths=[14, 9],
         config=cfg_of(mixer="gmlp", hdim=16, max_len=14, heads=2, bidirectional=True, prenorm=False,
                       norm_type="rmsnorm"),
         note="gmlp bidirectional, 2 heads (spatial.weight [2, 14, 14]), rmsnorm post-norm, right padding (LN(Z2) "
              "rows of pads zeroed before the mixing), float64"),
    dict(name="gmlp_causal_h2_noffn_f64", dtype="float64", seed=9112, L=16, lengths=[16, 12],
         config=cfg_of(mixer="gmlp", hdim=12, max_len=16, heads=2, ffn_hidden_dim=0),
         note="gmlp causal, 2 heads, F = 12, no FFN, right padding, float64"),
]


def perturb(model, gen):
    """Move every parameter away from its trivial initial value."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            r = lambda: torch.randn(p.shape, generator=gen, dtype=torch.float64)  # noqa: E731
            u = lambda: torch.rand(p.shape, generator=gen, dtype=torch.float64)  # noqa: E731
            if "norm.norm." in name or "sgu_norm." in name:
                p.copy_(1 + 0.2 * r() if leaf == "weight" else (0.1 * r() if leaf == "bias" else 1 + 0.15 * r()))
            elif leaf == "pos_bias":
                p.copy_(0.7 * r())
            elif leaf == "time_decay":
                p.copy_(torch.log(0.05 + 1.2 * u()))
            elif leaf == "time_beta":
                p.copy_(0.4 * r())
            elif leaf == "time_gamma":
                p.copy_(1 + 0.3 * r())
            elif name.endswith("spatial.weight"):
                p.copy_(0.4 * r())
            elif name.endswith("spatial.bias"):
                p.copy_(1 + 0.3 * r())
            elif leaf == "weight" and p.dim() == 2:
                p.copy_(r() / math.sqrt(p.shape[1]))
            elif leaf == "bias":
                p.copy_(0.1 * r())
            else:
                raise KeyError(f"no perturbation rule for {name}")


def build(cfg, dtype, W=None):
    torch.manual_seed(0)
    m = MixerBlock(cfg).to(dtype)
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


def rnn_vs_direct_check():
    """SPEC §5.4: the exponential-decay running-max recurrence equals the direct O(L^2) sum,
    also with K spread over +-300 (no clamping needed), float64"""
    torch.manual_seed(11)
    worst = 0.0
    for scale in (1.0, 300.0):
        L, D = 40, 3
        k, v = scale * torch.randn(L, D, dtype=torch.float64), torch.randn(L, D, dtype=torch.float64)
        w = torch.tensor([0.0, 0.3, 2.0], dtype=torch.float64)
        a, b, p = torch.zeros(D, dtype=torch.float64), torch.zeros(D, dtype=torch.float64), torch.full((D,), -math.inf,
                                                                                                   dtype=torch.float64)
        for t in range(L):
            pn = torch.maximum(p - w, k[t])
            a = torch.exp(p - w - pn) * a + torch.exp(k[t] - pn) * v[t]
            b = torch.exp(p - w - pn) * b + torch.exp(k[t] - pn)
            p = pn
            lg = k[: t + 1] - w[None, :] * (t - torch.arange(t + 1, dtype=torch.float64))[:, None]
            direct = (torch.softmax(lg, 0) * v[: t + 1]).sum(0)
            worst = max(worst, (a / b - direct).abs().max().item())
    return worst


def expected_noise(cfg):
    return []


def make_data(spec):
    cfg, L, B = spec["config"], spec["L"], 2
    np_dt = np.float32 if spec["dtype"] == "float32" else np.float64
    torch.manual_seed(spec["seed"])
    m = MixerBlock(cfg).double()
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
        worst32 = max(rel_err(v, ref64[k]) for k, v in ours.items())
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
        "(mega_ref.NormalizedFeedForwardNetwork); zdim/ndim are unused placeholders, hdim is the gMLP width F "
        "(unused by the AFT mixers)",
        "training mode, every dropout 0; weights are the reference initialisation perturbed away from trivial values",
        "float64: every operation in float64" if dtype == "float64" else "float32 (checked against a float64 rerun)",
        "loss = sum(out * dout); dx and grad.* are its gradients",
    ]
    if spec.get("lengths") is not None:
        notes.append(f"padding_mask: 1 = pad (row lengths {spec['lengths']}); pad keys are dropped from both sums "
                     "(gmlp: their LN(Z2) rows are zeroed); outputs at pad positions are the formula's values, "
                     "compared like the others")
    if causal:
        notes.append("decode.out: eval-mode streaming one position per call from a separate step (RNN state, caches), "
                     "no mask")
    case = {"kind": "layer", "config": cfg, "dtype": dtype, "batch": 2, "seq_len": spec["L"], "seed": spec["seed"],
            "generator": GENERATOR, "notes": notes, "noise_gradients": noise,
            "tensors": {k: [dn[v.dtype], list(v.shape)] for k, v in out.items()}, "torch_version": torch.__version__}
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(cdir, n)) for n in os.listdir(cdir))
    if size > MAX_CASE_BYTES:
        raise RuntimeError(f"{spec['name']}: {size} bytes > {MAX_CASE_BYTES}")
    print(f"{spec['name']:40s} {size / 1024:5.1f} KB  " + "  ".join(f"{k} {v:.1e}" for k, v in checks.items()))


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
    e = rnn_vs_direct_check()
    print(f"self-check: RNN running-max form vs direct sum (K up to +-300): {e:.1e}")
    if e > 1e-12:
        raise RuntimeError("RNN form check failed")
    os.makedirs(a.out, exist_ok=True)
    for s in specs:
        generate(s, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
