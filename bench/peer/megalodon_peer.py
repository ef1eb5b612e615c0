"""The PyTorch Megalodon of the peer (bench/peer/peer.py, workloads megalodon-*): the OFFICIAL
modules of XuezheMax/megalodon, composed as tests/ref/ref_megalodon.py composes them (model_case:
MegaBlock = MovingAverageGatedAttention then NormalizedFeedForwardNetwork with the two-hop
residual; Mega.forward's embedding scale, chunk mask and rotary frequencies; MegaOutputLayer's
final TimestepNorm and output projection), here in float32 as the official code runs.

The official sources are read from the bare mirror (MEGALODON_REPO, default
/work/.mirror/XuezheMax+megalodon/repo; `fetch github:XuezheMax/megalodon` creates it) and executed
as they are, through ref_megalodon.py's loaders and stubs (no distributed run, model-parallel
world size 1: nn.Linear for the parallel linears; apex's manual_rms_norm, the branch FusedRMSNorm
takes off CUDA). As there, the compiled extension (megalodon_extension, CUDA/C++, not built here)
is replaced by PyTorch transcriptions of its CPU loops; here in the input's dtype (float32), and
the grouped timestep norm over a whole sequence evaluated with cumulative sums instead of a Python
loop over time: every step merges one sample of weight 1 (csrc/utils.h WelfordCombine), so after
t steps from a prior (c0, M0, V0) the running mean and variance are the pooled moments
    M_t = (c0 M0 + sum_s m_s) / (c0 + t),   V_t = (c0 (V0 + M0^2) + sum_s (v_s + m_s^2)) / (c0 + t) - M_t^2
(no padding in the bench). The CEMA's FFT convolution is the official CPU branch of fftconv.py.

Decoding uses the official incremental path: MovingAverageGatedAttention.forward with its cache
(the chunk's keys and values, the timestep norm's (count, mean, var), the CEMA state), one token at
a time, as ref_megalodon.py's attn_case decodes.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.environ.get("MEGALODON_REPO", "/work/.mirror/XuezheMax+megalodon/repo")


def ema_parameters(p, q, gamma, hx, length):
    """csrc/ops/ema_parameters.cc EMAParametersCPUFwdImpl (as ref_megalodon.ema_parameters, in
    the coefficients' precision)"""
    log_q = q.log()
    j = torch.arange(length, dtype=log_q.real.dtype)
    w = ((p * gamma.unsqueeze(-1)) * torch.exp(log_q * j)).real.sum(1)
    if hx is None:
        return w, None
    vb = torch.exp(log_q * (j + 1))
    return w, (vb.unsqueeze(0) * (gamma.unsqueeze(-1) * hx.unsqueeze(-1))).real.sum(2)


def ema_hidden(x, p, q, hx):
    """csrc/ops/ema_hidden.cc EMAHiddenCPUFwdImpl"""
    log_q = q.log()
    L = x.size(-1)
    j = torch.arange(L, dtype=log_q.real.dtype)
    v = torch.exp(log_q * (L - j - 1))
    h = (v.unsqueeze(0) * x.unsqueeze(2).to(v.dtype)).sum(-1) * p.squeeze(-1)
    if hx is not None:
        h = h + torch.exp(log_q * L).squeeze(-1) * hx
    return h


def group_timestep_norm(x, prev_count, prev_mean, prev_var, gamma, beta, padding_mask, num_groups, eps):
    """csrc/ops/timestep_norm.cc GroupTimestepNormCPUFwdImpl without padding, by cumulative sums
    (module docstring)"""
    assert padding_mask is None, "the bench has no padding"
    B, L, H = x.shape
    G = num_groups
    xg = x.view(B, L, G, H // G)
    gm = xg.mean(-1)
    gv = (xg * xg).mean(-1) - gm * gm
    c0 = prev_count.to(x.dtype).view(B, 1, 1)
    n = c0 + torch.arange(1, L + 1, dtype=x.dtype).view(1, L, 1)
    m = (c0 * prev_mean.unsqueeze(1) + gm.cumsum(1)) / n
    v = (c0 * (prev_var + prev_mean * prev_mean).unsqueeze(1) + (gv + gm * gm).cumsum(1)) / n - m * m
    y = (xg - m.unsqueeze(-1)) * torch.rsqrt(v + eps).unsqueeze(-1)
    y = y.reshape(B, L, H) * gamma + beta
    return y, prev_count + L, m[:, -1], v[:, -1]


def load_modules(repo=REPO):
    """(MovingAverageGatedAttention module, NormalizedFeedForwardNetwork module, TimestepNorm
    module, RotaryEmbedding module), float32, from the official sources"""
    if not os.path.isdir(repo):
        raise RuntimeError(f"no mirror of XuezheMax/megalodon at {repo} (fetch github:XuezheMax/megalodon, or set MEGALODON_REPO)")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
    import ref_megalodon as ref  # noqa: E402  (its import sets torch to 1 thread; the caller sets its own after)

    cema, _cema64, tsn, _ = ref.load_official(repo)
    ref.load_layer(repo, _cema64)  # the apex / model-parallel / chunk-parallel stubs; its float64 layer unused
    cema.ema_parameters, cema.ema_hidden = ema_parameters, ema_hidden
    tsn.timestep_norm = group_timestep_norm
    src = lambda p: ref.official_source(repo, p)  # noqa: E731
    # the float32 modules as they are (load_official registered the float64 rotary variant)
    rope = ref.load_module("megalodon.modules.rotary_positional_embedding",
                           src("megalodon/modules/rotary_positional_embedding.py"), "megalodon.modules")
    sys.modules["megalodon.modules.complex_exponential_moving_average"] = cema
    sys.modules["megalodon.modules.timestep_norm"] = tsn
    mga = ref.load_module("megalodon.modules.moving_average_gated_attention_f32",
                          src("megalodon/modules/moving_average_gated_attention.py"), "megalodon.modules")
    nffn = ref.load_nffn(repo)
    return mga, nffn, tsn, rope


class MegalodonLM(nn.Module):
    """The bench model (tools/bench.c megalodon-lm-*): V 257, 4 blocks of D 256, Z 64, E 512, one
    head, CEMA N 16, 32 norm groups, chunk 256, FFN 512 (silu, no SwiGLU, no layer scale),
    embedding scaled by sqrt(D), untied output projection without bias"""

    def __init__(self, mods, V=257, NL=4, D=256, Z=64, E=512, H=1, N=16, G=32, C=256, Fd=512, seed=1):
        super().__init__()
        mga, nffn, tsn, rope = mods
        self.D, self.C, self.G, self.H, self.Z, self.E = D, C, G, H, Z, E
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList(mga.MovingAverageGatedAttention(D, Z, E, N, H, chunk_size=C, efficient_attn=None,
                                                                    norm_num_groups=G, norm_eps=1e-5) for _ in range(NL))
        self.ffns = nn.ModuleList(nffn.NormalizedFeedForwardNetwork(D, Fd, swiglu=False, norm_eps=1e-5) for _ in range(NL))
        self.fnorm = tsn.TimestepNorm(D, G, eps=1e-5)
        self.out = nn.Linear(D, V, bias=False)
        self.rot = rope.RotaryEmbedding(Z // H, C, base=10000)
        # initialisation is not what is timed (the official _init_parameters needs CUDA): seeded
        # normals, the scale of the official inits, so that no value is denormal or NaN
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, p in self.named_parameters():
                sd = 0.2 if ("cema" in n or p.dim() < 2) else 1.0 / math.sqrt(p.shape[-1])
                p.copy_(torch.randn(p.shape, generator=g) * sd)

    def forward(self, tok):
        L = tok.size(1)
        ms = min(L, self.C)
        mask = torch.triu(torch.full((1, 1, ms, ms), float("-inf")), diagonal=1)
        freqs = self.rot.get_freqs_cis(0, ms)
        x = self.embed(tok) * math.sqrt(self.D)
        for m, f in zip(self.layers, self.ffns):
            y, _ = m(x, freqs, mask, None)
            x = f(y, x)
        x, _, _, _ = self.fnorm(x, None, None, None)
        return self.out(x)

    def new_state(self, B):
        hd = self.Z // self.H, self.E // self.H
        layer = lambda: ((torch.zeros(B, 0, self.H, hd[0]), torch.zeros(B, 0, self.H, hd[1]), 0),  # noqa: E731
                         (torch.zeros(B, dtype=torch.int64), torch.zeros(B, self.G), torch.ones(B, self.G)), None)
        return {"layers": [layer() for _ in self.layers],
                "final": (torch.zeros(B, dtype=torch.int64), torch.zeros(B, self.G), torch.ones(B, self.G))}

    def step(self, tok, state):
        """one token per sequence through the official cache (tok [B, 1]); logits [B, 1, V]"""
        n = state["layers"][0][0][2]
        mask = torch.zeros(1, 1, 1, n + 1)
        freqs = self.rot.get_freqs_cis(n, n + 1)
        x = self.embed(tok) * math.sqrt(self.D)
        for i, (m, f) in enumerate(zip(self.layers, self.ffns)):
            y, state["layers"][i] = m(x, freqs, mask, state["layers"][i])
            x = f(y, x)
        c, mu, var = state["final"]
        x, c, mu, var = self.fnorm(x, c, mu, var)
        state["final"] = (c, mu, var)
        return self.out(x)
