#!/usr/bin/python3
"""Own PyTorch reference for the ABC token mixers and their fixture cases in tests/fixtures/mixers/
(written by case_writer.py).

Written from the ABC paper (Peng et al., "ABC: Attention with Bounded-memory Control", arXiv
2110.02488: the control vectors, the sliding-window, Linformer and ABC-MLP instances) and the
block wrapper of src/layers/mixer.h; not from any ABC code (docs/mixers.md "ABC mixers").
Projections as fairseq MultiheadAttention. Batch-first tensors [B, T, D] everywhere.

The forward here is deliberately the *naive* form, independent of the C kernels:
  * abc-window: a [T, T] band mask (t - n < u <= t, valid u) on full scores, i.e. sliding-window
    attention (empty slots masked, a project extension); the literal form adds one logit-0 entry
    per empty slot to the normaliser;
  * abc-linformer: bidirectional K~ = E[:, :L] K (pad keys zeroed); causal K~_t materialised for
    every t through a lower-triangular mask, K~_t = sum_{i<=t} E[:, i] k_i^T;
  * abc-mlp: Phi = softmax over positions per slot of l = X W_phi^T; causal Phi^(t) = softmax over
    i <= t (a [T, T] mask per slot), K~_t materialised for every t.
Gradients come from autograd. `step` is a separate recurrent implementation (ring buffer, running
sums, the logaddexp normaliser of the normalised cumulative form, as fla-org/flash-linear-attention
fla/ops/abc/naive.py); case_writer checks step == forward before writing.

Usage (from the repository root; deterministic output):
    /usr/bin/python3 tests/ref/ref_abc.py [--out tests/fixtures/mixers] [--case NAME ...] [--list]
Case format: as tests/fixtures/generated (kind "layer"; config names the mixer; weights use the
library's parameter names mixer_norm.norm.*, mixer.*, nffn.*).
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
GENERATOR = "tests/ref/ref_abc.py (own PyTorch implementation of ABC, docs/mixers.md)"


# ----------------------------------------------------------------------------------------------
# the mixers


def _slot_softmax(s, present=None, empty=None):
    """softmax over the last axis; entries with present == False are masked (weight 0). `empty`
    (same shape as s without the last axis): count of literal empty slots, each a logit 0 with a
    zero value (the literal form of the ABC read). A row with nothing present and no empty slot gives 0."""
    if present is not None:
        s = s.masked_fill(~present, float("-inf"))
    if empty is not None:
        extra = torch.log(empty.to(s.dtype)).unsqueeze(-1)  # log(count): logit 0 repeated count times
        s = torch.cat([s, extra], dim=-1)
    none = torch.isinf(s).all(dim=-1, keepdim=True)
    p = torch.softmax(s.masked_fill(none, 0.0), dim=-1).masked_fill(none, 0.0)
    if empty is not None:
        p = p[..., :-1]
    if present is not None:
        p = p.masked_fill(~present, 0.0)
    return p


class ABCMixer(nn.Module):
    """The ABC core: projections, memory (the paper's instances), read (softmax over slots), output projection."""

    def __init__(self, kind, embed_dim, heads, memory, max_len=0, bidirectional=False, mask_empty=True):
        super().__init__()
        assert embed_dim % heads == 0
        self.kind, self.D, self.H, self.n, self.N = kind, embed_dim, heads, memory, max_len
        self.d = embed_dim // heads
        self.bidir, self.mask_empty = bidirectional, mask_empty
        if kind == "abc-window" and bidirectional:
            raise ValueError("abc-window has no bidirectional form (a project decision: docs/mixers.md)")
        for nm in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self, nm, nn.Linear(embed_dim, embed_dim))
        with torch.no_grad():
            for nm in ("q_proj", "k_proj", "v_proj"):
                nn.init.xavier_uniform_(getattr(self, nm).weight, gain=2 ** -0.5)
            nn.init.xavier_uniform_(self.out_proj.weight)
            for nm in ("q_proj", "k_proj", "v_proj", "out_proj"):
                nn.init.zeros_(getattr(self, nm).bias)
        if kind == "abc-linformer":
            self.compress_k = nn.Linear(max_len, memory, bias=False)  # E, weight [n, N_max]
            self.compress_v = nn.Linear(max_len, memory, bias=False)  # F
            with torch.no_grad():
                nn.init.xavier_uniform_(self.compress_k.weight, gain=2 ** -0.5)
                nn.init.xavier_uniform_(self.compress_v.weight, gain=2 ** -0.5)
        elif kind == "abc-mlp":
            self.phi_k = nn.Linear(embed_dim, heads * memory, bias=False)  # W_phi for K, [H n, D]
            self.phi_v = nn.Linear(embed_dim, heads * memory, bias=False)
            with torch.no_grad():
                nn.init.normal_(self.phi_k.weight, 0.0, 0.02)
                nn.init.normal_(self.phi_v.weight, 0.0, 0.02)
        elif kind != "abc-window":
            raise ValueError(kind)

    def _heads(self, y):  # [B, T, D] -> [B, H, T, d]
        B, T, _ = y.shape
        return y.view(B, T, self.H, self.d).transpose(1, 2)

    def forward(self, x, pad=None):
        B, T, D = x.shape
        H, n, d = self.H, self.n, self.d
        valid = torch.ones(B, T, dtype=torch.bool) if pad is None else ~pad.bool()
        q, k, v = (self._heads(getattr(self, nm)(x)) for nm in ("q_proj", "k_proj", "v_proj"))
        scale = 1.0 / math.sqrt(d)
        t_idx = torch.arange(T)
        if self.kind == "abc-window":
            # slot j of query t holds token t-n+1+j: the band t-n < u <= t, pad keys excluded
            band = (t_idx[None, :] <= t_idx[:, None]) & (t_idx[None, :] > t_idx[:, None] - n)
            present = band[None, None] & valid[:, None, None, :]  # [B, 1, T, T]
            s = torch.einsum("bhtd,bhud->bhtu", q, k) * scale
            empty = None if self.mask_empty else (n - present.sum(-1)).expand(B, H, T)
            p = _slot_softmax(s, present.expand(B, H, T, T), empty)
            o = torch.einsum("bhtu,bhud->bhtd", p, v)
        else:
            vm = valid[:, None, :, None].to(x.dtype)  # [B, 1, T, 1]
            if self.kind == "abc-linformer":
                if T > self.N:
                    raise ValueError("sequence longer than max_len")
                phik = self.compress_k.weight[:, :T].t()[None, None] * vm  # [B, 1, T, n]; pads zeroed
                phiv = self.compress_v.weight[:, :T].t()[None, None] * vm
                if self.bidir:
                    Km = torch.einsum("bhij,bhid->bhjd", phik.expand(B, H, T, n), k)
                    Vm = torch.einsum("bhij,bhid->bhjd", phiv.expand(B, H, T, n), v)
                else:
                    tri = (t_idx[None, :] <= t_idx[:, None]).to(x.dtype)  # [t, i]
                    Km = torch.einsum("ti,bhij,bhid->bhtjd", tri, phik.expand(B, H, T, n), k)
                    Vm = torch.einsum("ti,bhij,bhid->bhtjd", tri, phiv.expand(B, H, T, n), v)
            else:
                lk = self.phi_k(x).view(B, T, H, n).transpose(1, 2)  # [B, H, T(i), n]
                lv = self.phi_v(x).view(B, T, H, n).transpose(1, 2)
                if self.bidir:
                    pres = valid[:, None, :, None].expand(B, H, T, n)
                    # softmax over positions i per slot: move i to the last axis
                    phik = _slot_softmax(lk.transpose(2, 3), pres.transpose(2, 3)).transpose(2, 3)
                    phiv = _slot_softmax(lv.transpose(2, 3), pres.transpose(2, 3)).transpose(2, 3)
                    Km = torch.einsum("bhij,bhid->bhjd", phik, k)
                    Vm = torch.einsum("bhij,bhid->bhjd", phiv, v)
                else:
                    # Phi^(t)_{ij} = softmax over valid i <= t of l_ij: a [t, i] mask per slot
                    tri = t_idx[None, :] <= t_idx[:, None]
                    pres = (tri[None, None] & valid[:, None, None, :])[..., None].expand(B, H, T, T, n)
                    phik = _slot_softmax(lk[:, :, None].expand(B, H, T, T, n).transpose(3, 4),
                                         pres.transpose(3, 4)).transpose(3, 4)  # [B, H, t, i, n]
                    phiv = _slot_softmax(lv[:, :, None].expand(B, H, T, T, n).transpose(3, 4),
                                         pres.transpose(3, 4)).transpose(3, 4)
                    Km = torch.einsum("bhtij,bhid->bhtjd", phik, k)
                    Vm = torch.einsum("bhtij,bhid->bhtjd", phiv, v)
            if self.bidir:
                s = torch.einsum("bhtd,bhjd->bhtj", q, Km) * scale
                o = torch.einsum("bhtj,bhjd->bhtd", torch.softmax(s, -1), Vm)
            else:
                s = torch.einsum("bhtd,bhtjd->bhtj", q, Km) * scale
                o = torch.einsum("bhtj,bhtjd->bhtd", torch.softmax(s, -1), Vm)
        return self.out_proj(o.transpose(1, 2).reshape(B, T, D))

    # ---- streaming: the recurrent forms of §7.2/§7.3/§7.5 (no pads, eval) --------------------
    def step(self, x, state):
        B, T, D = x.shape
        H, n, d = self.H, self.n, self.d
        q, k, v = (self._heads(getattr(self, nm)(x)) for nm in ("q_proj", "k_proj", "v_proj"))
        scale = 1.0 / math.sqrt(d)
        pos = state.get("pos", 0)
        if self.kind == "abc-mlp":
            lk = self.phi_k(x).view(B, T, H, n).transpose(1, 2)
            lv = self.phi_v(x).view(B, T, H, n).transpose(1, 2)
        outs = []
        for t in range(T):
            p_abs = pos + t
            qt, kt, vt = q[:, :, t], k[:, :, t], v[:, :, t]
            if self.kind == "abc-window":
                if "kr" not in state:
                    state["kr"] = x.new_zeros(B, H, n, d)
                    state["vr"] = x.new_zeros(B, H, n, d)
                slot = p_abs % n
                state["kr"][:, :, slot] = kt
                state["vr"][:, :, slot] = vt
                m = min(p_abs + 1, n)  # filled slots 0..m-1
                s = torch.einsum("bhd,bhjd->bhj", qt, state["kr"][:, :, :m]) * scale
                if self.mask_empty or m == n:
                    p = torch.softmax(s, -1)
                else:
                    p = torch.softmax(torch.cat([s, s.new_zeros(B, H, n - m)], -1), -1)[..., :m]
                o = torch.einsum("bhj,bhjd->bhd", p, state["vr"][:, :, :m])
            else:
                if "Km" not in state:
                    state["Km"] = x.new_zeros(B, H, n, d)
                    state["Vm"] = x.new_zeros(B, H, n, d)
                    state["lzk"] = x.new_full((B, H, n), float("-inf"))
                    state["lzv"] = x.new_full((B, H, n), float("-inf"))
                if self.kind == "abc-linformer":
                    if p_abs >= self.N:
                        raise ValueError("position beyond max_len")
                    wk = self.compress_k.weight[:, p_abs]
                    wv = self.compress_v.weight[:, p_abs]
                    state["Km"] = state["Km"] + wk[None, None, :, None] * kt[:, :, None, :]
                    state["Vm"] = state["Vm"] + wv[None, None, :, None] * vt[:, :, None, :]
                else:
                    for nm, l, src in (("k", lk[:, :, t], kt), ("v", lv[:, :, t], vt)):
                        lz = state["lz" + nm]
                        new = torch.logaddexp(lz, l)
                        g = torch.where(torch.isinf(lz), torch.zeros_like(l), torch.exp(lz - new))
                        w = torch.exp(l - new)
                        M = state["Km" if nm == "k" else "Vm"]
                        state["Km" if nm == "k" else "Vm"] = g[..., None] * M + w[..., None] * src[:, :, None, :]
                        state["lz" + nm] = new
                s = torch.einsum("bhd,bhjd->bhj", qt, state["Km"]) * scale
                o = torch.einsum("bhj,bhjd->bhd", torch.softmax(s, -1), state["Vm"])
            outs.append(o.reshape(B, 1, D))
        state["pos"] = pos + T
        return self.out_proj(torch.cat(outs, 1))


# ----------------------------------------------------------------------------------------------
# cases


def cfg_of(**kw):
    cfg = dict(mixer="abc-mlp", embed_dim=16, heads=2, memory=4, max_len=0, ffn_hidden_dim=32, bidirectional=False,
               norm_type="layernorm", prenorm=True, activation="silu",
               # unused by ABC; the block's config check wants positive Mega widths
               zdim=1, hdim=1, ndim=0)
    cfg.update(kw)
    return cfg


# (the names, configs and notes are stored in the committed cases: kept verbatim)
CASES = [
    dict(name="abc_window_causal_pre_n5_L24_pad", dtype="float32", seed=7101, L=24, lengths=[24, 17],
         config=cfg_of(mixer="abc-window", memory=5),
         notes=["abc-window (sliding-window attention of width n = 5 over the ring-buffer memory, empty slots masked), "
                "causal, 2 heads, layernorm pre-norm, silu NFFN, right padding in row 1, decode.out"]),
    dict(name="abc_window_causal_post_n8_rmsnorm_f64", dtype="float64", seed=7102, L=20, lengths=None,
         config=cfg_of(mixer="abc-window", memory=8, heads=4, norm_type="rmsnorm", prenorm=False, activation="gelu"),
         notes=["abc-window n = 8 > the first positions (empty slots masked), 4 heads, rmsnorm post-norm, gelu NFFN, "
                "float64, decode.out"]),
    dict(name="abc_linformer_causal_pre_n4_L20_max24", dtype="float32", seed=7103, L=20, lengths=None,
         config=cfg_of(mixer="abc-linformer", memory=4, max_len=24),
         notes=["abc-linformer causal (K~_t = K~_{t-1} + E[:, t] k_t^T), n = 4, max_len 24 > L, layernorm pre-norm, "
                "decode.out"]),
    dict(name="abc_linformer_bidir_post_n6_L16_pad_f64", dtype="float64", seed=7104, L=16, lengths=[16, 9],
         config=cfg_of(mixer="abc-linformer", memory=6, max_len=16, bidirectional=True, prenorm=False,
                       norm_type="scalenorm", ffn_hidden_dim=0),
         notes=["abc-linformer bidirectional (K~ = E[:, :L] K, pad keys zeroed before compression), n = 6, "
                "max_len = L, scalenorm post-norm, no FFN, right padding in row 1, float64"]),
    dict(name="abc_mlp_causal_pre_n4_L24_f64", dtype="float64", seed=7105, L=24, lengths=None,
         config=cfg_of(mixer="abc-mlp", memory=4),
         notes=["abc-mlp causal: phi = softmax over i <= t per slot of X W_phi^T (separate K and V controls), "
                "the normalised cumulative form (fla-org naive_cumsum_abc); layernorm pre-norm, float64, decode.out"]),
    dict(name="abc_mlp_causal_post_n3_L22_pad", dtype="float32", seed=7106, L=22, lengths=[22, 15],
         config=cfg_of(mixer="abc-mlp", memory=3, heads=1, prenorm=False, norm_type="rmsnorm"),
         notes=["abc-mlp causal, 1 head, n = 3, rmsnorm post-norm, right padding in row 1 (pads write nothing), "
                "decode.out (unmasked)"]),
    dict(name="abc_mlp_bidir_pre_n5_L18_pad", dtype="float32", seed=7107, L=18, lengths=[18, 11],
         config=cfg_of(mixer="abc-mlp", memory=5, heads=4, bidirectional=True),
         notes=["abc-mlp bidirectional: phi = softmax over the valid positions per slot, 4 heads, n = 5, "
                "layernorm pre-norm, right padding in row 1"]),
]


COMMON = {
    "train": "training mode, every dropout 0; weights are the reference initialisation (torch.manual_seed(seed)) "
             "perturbed so that no parameter keeps a trivial value; they are arbitrary test values",
    "loss": "loss = sum(out * dout); dx and grad.* are its gradients",
    "float32": "float32: every operation in float32",
    "float64": "float64: every operation in float64",
    "pad": "padding_mask: 1 = pad (row lengths {lengths}); pad tokens write nothing into the memory (phi_i = 0); "
           "outputs at pad positions are the formula's values (queries still read), compared like the others",
    "decode": "decode.out: the same x fed one position at a time through the streaming state (eval mode, no mask): "
              "ring buffer (window), running E-weighted sums (Linformer) or the logaddexp normaliser (ABC-MLP)",
    "block": "block: prenorm y = x + mixer(mixer_norm(x)), postnorm y = mixer_norm(x + mixer(x)); then nffn "
             "(mega_ref.NormalizedFeedForwardNetwork); zdim/hdim/ndim are unused placeholders",
}


def make_mixer(cfg):
    return ABCMixer(cfg["mixer"], cfg["embed_dim"], cfg["heads"], cfg["memory"], cfg.get("max_len", 0),
                    cfg["bidirectional"])


RULES = [cw.NORM, cw.MATRIX, cw.BIAS]


def literal_check():
    """self-check of the literal window form: the band mask + logit-0 empties equals a direct loop"""
    torch.manual_seed(3)
    mx = ABCMixer("abc-window", 4, 1, 3, mask_empty=False).double()
    x = torch.randn(1, 5, 4, dtype=torch.float64)
    y = mx(x)
    q, k, v = (mx._heads(getattr(mx, nm)(x))[0, 0] for nm in ("q_proj", "k_proj", "v_proj"))
    o = []
    for t in range(5):
        us = [u for u in range(t - 2, t + 1) if u >= 0]
        s = torch.stack([q[t] @ k[u] / 2.0 for u in us] + [torch.zeros((), dtype=torch.float64)] * (3 - len(us)))
        p = torch.softmax(s, 0)
        o.append(sum(p[i] * v[u] for i, u in enumerate(us)))
    ref = mx.out_proj(torch.stack(o)[None])
    assert cw.rel_err(y, ref) < 1e-14, cw.rel_err(y, ref)


def expected_noise(spec):
    """k_proj.bias shifts every slot logit of a row by the same q.b_k when the slot weights of each
    memory row sum to one (masked window: one token per slot; ABC-MLP: phi is a softmax over
    positions), so the slot softmax ignores it: its gradient is 0 in exact arithmetic"""
    return ["mixer.k_proj.bias"] if spec["config"]["mixer"] in ("abc-window", "abc-mlp") else []


def notes(spec, noise):
    out = [spec["notes"][0], COMMON["block"], COMMON["train"], COMMON[spec["dtype"]], COMMON["loss"]]
    if spec["lengths"] is not None:
        out.append(COMMON["pad"].format(lengths=spec["lengths"]))
    if not spec["config"]["bidirectional"]:
        out.append(COMMON["decode"])
    if noise:
        out.append(cw.noise_note(noise) + " (" + expected_noise.__doc__.split(",")[0].strip() + ", ...)")
    return out


def self_check():
    literal_check()
    return "self-check: the literal window form equals a direct loop"


REFERENCE = cw.Reference(
    GENERATOR, lambda kind, cfg: mega_ref.MixerBlock(cfg, make_mixer), RULES, notes,
    default_out=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "mixers"),
    expected_noise=expected_noise, splits=lambda spec: [[0, 5, 6, 13, spec["L"]], [0, spec["L"]]],
    self_check=self_check)

if __name__ == "__main__":
    sys.exit(cw.main(REFERENCE, CASES))
