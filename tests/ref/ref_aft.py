#!/usr/bin/python3
"""Own PyTorch reference for the AFT token mixers (aft-full, aft-local, aft-simple, aft-tw) and the
gMLP spatial gating unit (gmlp), and their fixture cases in tests/fixtures/mixers/ (written by
case_writer.py).

Written from the papers, not from the C code (docs/mixers.md "AFT family and gMLP token
mixers"): AFT (Zhai et al., arXiv 2105.14103; max subtraction as labml_nn AFTLocal), the
time-weighted AFT of PENG Bo's article with the RWKV-v1 parameterisation (BlinkDL/RWKV-LM
RWKV-v1/src/model.py: RWKV_TimeMix) and its RNN form, gMLP's spatial gating unit (Liu et al.,
arXiv 2105.08050 §2.1; lucidrains/g-mlp-pytorch SpatialGatingUnit), and the block wrapper of
src/layers/mixer.h. Batch-first [B, T, D].

The forward is the naive O(T^2) form, independent of the C kernels (blocked GEMMs, scans): for
every (t, u, c) the logit K[u, c] + b(t, u, c), an explicit boolean mask (causal, pad keys), a
softmax over u with rows that see no key set to 0, then the weighted sum of V. `step` is a
separate streaming implementation (the RNN form with the running-max state, a project
extension, for aft-simple / aft-tw; caches for aft-full, a ring of the band plus a running
aggregate for aft-local, the LN(Z2) cache for gmlp); case_writer checks step == forward before
writing. Gradients come from autograd.

Conventions (the library's; docs/mixers.md):
  * AFT: one fused projection qkv D -> 3D (rows [Q | K | V]) with bias, out D -> D with bias;
    ybar = softmax_u(K + b) . V per channel; o = gamma(t) sigmoid(Q) ybar; y = out(o);
  * aft-full: b = pos_bias[t, u] ([max_len, max_len]);
  * aft-local (window s): b = pos_bias[t, u - t + s - 1] inside the band 0 <= t-u < s (causal) or
    |t-u| < s (bidirectional), 0 outside (not -inf, as the AFT paper's w' = 0); pos_bias
    [max_len, s] causal, [max_len, 2s-1] bidirectional;
  * aft-simple: b = 0;
  * aft-tw: b = -exp(time_decay[h]) |t-u| + time_beta[h, min(u, max_len-1)] (the log of beta_h(u)),
    output factor time_gamma[min(t, max_len-1)] (clamped past max_len: the project's length
    policy, docs/mixers.md); heads h = c // (D / heads); time_beta/time_gamma exist only when
    max_len > 0 (the case configs use this reference's max_len 0 for the pure recurrence, the
    library's -1);
  * gmlp (F = hdim): [Z1 | Z2] = gelu(proj_in(x)); N2 = LayerNorm(Z2) (sgu_norm), pad rows zeroed;
    G[t, c] = sum_u spatial.weight[h, t, u] N2[u, c] + spatial.bias[h, t] (causal: u <= t),
    h = c // (F/2 / heads); y = proj_out(Z1 * G).
Block: prenorm y = x + mixer(mixer_norm(x)); postnorm y = mixer_norm(x + mixer(x)); then nffn.

Usage (from the repository root; deterministic output):
    /usr/bin/python3 tests/ref/ref_aft.py [--out tests/fixtures/mixers] [--case NAME ...] [--list]
"""
import math
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import case_writer as cw  # noqa: E402
import mega_ref  # noqa: E402  (MixerBlock, NORM_EPS, gelu)

# stored in the committed cases (case.json "generator"): kept verbatim
GENERATOR = "tests/ref/ref_aft.py (own PyTorch implementation of AFT, time-weighted AFT and gMLP, docs/mixers.md)"


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
                # the RNN form: a = e^{-w} a + e^{k} v, b = e^{-w} b + e^{k}, stored as (a', b', p)
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


# ----------------------------------------------------------------------------------------------
# cases


def cfg_of(**kw):
    cfg = dict(mixer="aft-full", embed_dim=16, heads=1, ffn_hidden_dim=32, bidirectional=False, norm_type="layernorm",
               prenorm=True, activation="silu", zdim=1, hdim=8, ndim=0)
    cfg.update(kw)
    return cfg


# (the names, configs and notes are stored in the committed cases: kept verbatim)
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
              "gamma of positions >= 11 use entry 11 (clamped to the last learned position, a project extension), rmsnorm, right padding"),
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


def make_mixer(cfg):
    return GMLPMixer(cfg) if cfg["mixer"] == "gmlp" else AFTMixer(cfg)


# perturbation: the shared rules and the AFT / gMLP position and decay parameters
RULES = [
    cw.NORM,
    (cw.leaf_is("pos_bias"), lambda p, leaf, d: 0.7 * d.n(p)),
    (cw.leaf_is("time_decay"), lambda p, leaf, d: torch.log(0.05 + 1.2 * d.u(p))),
    (cw.leaf_is("time_beta"), lambda p, leaf, d: 0.4 * d.n(p)),
    (cw.leaf_is("time_gamma"), lambda p, leaf, d: 1 + 0.3 * d.n(p)),
    (cw.ends("spatial.weight"), lambda p, leaf, d: 0.4 * d.n(p)),
    (cw.ends("spatial.bias"), lambda p, leaf, d: 1 + 0.3 * d.n(p)),
    cw.MATRIX_DIV,
    cw.BIAS,
]


def rnn_vs_direct_check():
    """the exponential-decay running-max recurrence (the RNN form of the time-weighted AFT; the
    running maximum is a project extension) equals the direct O(L^2) sum, also with K spread
    over +-300 (no clamping needed), float64"""
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


def self_check():
    e = rnn_vs_direct_check()
    if e > 1e-12:
        raise RuntimeError(f"RNN form check failed ({e:.1e})")
    return f"self-check: RNN running-max form vs direct sum (K up to +-300): {e:.1e}"


BLOCK_NOTE = ("block: prenorm y = x + mixer(mixer_norm(x)), postnorm y = mixer_norm(x + mixer(x)); then nffn "
             "(mega_ref.NormalizedFeedForwardNetwork); zdim/ndim are unused placeholders, hdim is the gMLP width F "
             "(unused by the AFT mixers)")


def notes(spec, noise):
    cfg = spec["config"]
    out = cw.layer_notes(spec, BLOCK_NOTE)
    if spec.get("lengths") is not None:
        out.append(f"padding_mask: 1 = pad (row lengths {spec['lengths']}); pad keys are dropped from both sums "
                   "(gmlp: their LN(Z2) rows are zeroed); outputs at pad positions are the formula's values, "
                   "compared like the others")
    if not cfg.get("bidirectional", False):
        out.append("decode.out: eval-mode streaming one position per call from a separate step (RNN state, caches), "
                   "no mask")
    return out


REFERENCE = cw.Reference(
    GENERATOR, lambda kind, cfg: mega_ref.MixerBlock(cfg, make_mixer), RULES, notes,
    default_out=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "mixers"),
    self_check=self_check)

if __name__ == "__main__":
    sys.exit(cw.main(REFERENCE, CASES))
