"""Independent PyTorch reference implementation of Mega (moving-average equipped gated attention).

Written from the Mega paper (Ma et al., arXiv 2209.10655) and the official facebookresearch/mega code
(fairseq/modules/exponential_moving_average.py, moving_average_gated_attention.py,
normalized_feedforward_network.py, relative_positional_bias.py, sequence_norm.py; docs/mega.md).
Module and parameter names reproduce the official state_dict names so that official checkpoints and
the official fixture cases load with ``load_state_dict``. Tensors are batch-first ([B, L, D]) everywhere in this file.

Contents
  * SequenceNorm (layernorm | scalenorm | rmsnorm | batchnorm), eps 1e-5
  * MultiHeadEMA: damped multi-dimensional EMA, FFT convolution (causal / bidirectional layout of
    the official MultiHeadEMA.forward), truncation, and an incremental step (one or several
    tokens, carried state)
  * SimpleRelativePositionalBias / RotaryRelativePositionalBias
  * MovingAverageGatedAttention: single-head gated attention, chunking, causal and padding masks,
    softmax / relu2 / laplace, streaming step with per-chunk cache reset
  * NormalizedFeedForwardNetwork, MegaBlock (mega_layer + nffn), MixerBlock (the block of the
    library's other token mixers, used by ref_attn.py, ref_aft.py, ref_abc.py)
  * MegaLM (decoder.*) and MegaLRAClassifier (encoder.encoder.*, classifier.*, sentence_projection_layer)

Extension (not in the official layer): a sequence length that is not a multiple of chunk_size
("ragged last chunk") is accepted by the layer and the block. Default route ('pad'): right-pad x with
zeros to a multiple of the chunk, mark the added tail in the padding mask, run, drop the tail (what the
official LM / LRA wrappers do with pad tokens). Route 'native' computes the shorter last chunk
directly; it is used only to cross-check the equivalence (a shorter last chunk is a project
extension: docs/mega.md §5).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NORM_EPS = 1e-5
LAPLACE_MU = 0.707107
LAPLACE_SIGMA = 0.282095


# ----------------------------------------------------------------------------------------------
# activations


class _GeluContiguousGrad(torch.autograd.Function):
    """Exact (erf) GELU whose backward runs on a contiguous gradient.

    Debian's torch 1.13 float32 CPU gelu_backward is wrong for non-contiguous incoming gradients
    (see the fixture README); the result is the same kernel applied to a contiguous copy.
    """

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward(grad.contiguous(), x)


def gelu(x):
    return _GeluContiguousGrad.apply(x)


def get_activation(name):
    table = {
        "silu": F.silu,
        "gelu": gelu,
        "relu": F.relu,
        "linear": lambda t: t,
        "identity": lambda t: t,
    }
    if name not in table:
        raise ValueError(f"unknown activation {name!r}")
    return table[name]


def relu2(s):
    return F.relu(s).square()


def laplace(s):
    return 0.5 * (1.0 + torch.erf((s - LAPLACE_MU) / (LAPLACE_SIGMA * math.sqrt(2.0))))


# ----------------------------------------------------------------------------------------------
# norms


class _RootMeanSquareNorm(nn.Module):
    """y = g * x / sqrt(mean(x^2) + eps), the gain g stored as the parameter `name` of `shape`"""

    def __init__(self, name, shape, eps, affine):
        super().__init__()
        self.eps, self._gain = eps, name
        if affine:
            setattr(self, name, nn.Parameter(torch.ones(shape)))
        else:
            self.register_parameter(name, None)

    def forward(self, x):
        inv_rms = torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + self.eps)
        g = getattr(self, self._gain)
        if g is not None:
            x = x * g
        return x * inv_rms


class ScaleNorm(_RootMeanSquareNorm):
    """one scalar g (official scale_norm.py: ScaleNorm, parameter ``scalar``)"""

    def __init__(self, eps=NORM_EPS, affine=True):
        super().__init__("scalar", 1, eps, affine)


class RMSNorm(_RootMeanSquareNorm):
    """per-feature weight g (official root_mean_square_norm.py: RMSNorm, parameter ``weight``)"""

    def __init__(self, dim, eps=NORM_EPS, affine=True):
        super().__init__("weight", dim, eps, affine)


class SequenceNorm(nn.Module):
    """Wrapper holding the actual norm under ``.norm`` (official names ``*.norm.norm.*``).

    Input is batch-first [B, L, D]. batchnorm normalises every channel over all B*L positions
    (including pads) in training mode and uses the running statistics in eval mode.
    """

    KINDS = ("layernorm", "scalenorm", "rmsnorm", "batchnorm")

    def __init__(self, kind, dim, affine=True, eps=NORM_EPS):
        super().__init__()
        self.kind = kind
        if kind == "layernorm":
            self.norm = nn.LayerNorm(dim, eps=eps, elementwise_affine=affine)
        elif kind == "scalenorm":
            self.norm = ScaleNorm(eps=eps, affine=affine)
        elif kind == "rmsnorm":
            self.norm = RMSNorm(dim, eps=eps, affine=affine)
        elif kind == "batchnorm":
            self.norm = nn.BatchNorm1d(dim, eps=eps, affine=affine)
        else:
            raise ValueError(f"unknown norm type {kind!r}")

    def forward(self, x):
        if self.kind == "batchnorm":
            return self.norm(x.transpose(1, 2)).transpose(1, 2)
        return self.norm(x)


# ----------------------------------------------------------------------------------------------
# EMA


def _fft_conv(x, k, n_fft):
    """Linear convolution of x [..., Lx] with k [..., Lk] via real FFTs of size n_fft (no wrap
    reaches the indices used by the callers). Computed in the dtype of x."""
    xf = torch.fft.rfft(x, n=n_fft)
    kf = torch.fft.rfft(k.to(x.dtype), n=n_fft)
    return torch.fft.irfft(xf * kf, n=n_fft)


class MultiHeadEMA(nn.Module):
    """Multi-dimensional damped EMA (Mega eq. (5); official exponential_moving_average.py: MultiHeadEMA).

    Parameters (official names): delta (D',N,1) -> p = sigmoid(delta); alpha (D',N,1) -> a =
    sigmoid(alpha); q = 1 - p*a; beta (D',N,1); gamma (D',N); omega (D). D' = 2D when
    bidirectional (rows 0..D-1 forward kernel, rows D..2D-1 backward kernel).
    """

    def __init__(self, embed_dim, ndim=2, bidirectional=False, truncation=None):
        super().__init__()
        self.embed_dim = embed_dim
        self.ndim = ndim
        self.bidirectional = bidirectional
        self.truncation = truncation
        self.scale = ndim ** -0.5
        rows = 2 * embed_dim if bidirectional else embed_dim
        self.delta = nn.Parameter(torch.empty(rows, ndim, 1))
        self.alpha = nn.Parameter(torch.empty(rows, ndim, 1))
        self.beta = nn.Parameter(torch.empty(rows, ndim, 1))
        self.gamma = nn.Parameter(torch.empty(rows, ndim))
        self.omega = nn.Parameter(torch.empty(embed_dim))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        nn.init.normal_(self.delta, 0.0, 0.2)
        nn.init.normal_(self.alpha, 0.0, 0.2)
        sign = torch.ones(self.ndim, 1)
        sign[1::2] = -1.0
        self.beta.normal_(0.0, 0.02).add_(sign)
        nn.init.normal_(self.gamma, 0.0, 1.0)
        nn.init.normal_(self.omega, 0.0, 1.0)

    # -- coefficients --------------------------------------------------------------------------
    def _coeffs(self):
        """Return (p*beta) [D',N], log q [D',N], gamma*scale [D',N]."""
        p = torch.sigmoid(self.delta)
        a = torch.sigmoid(self.alpha)
        log_q = torch.log1p(-p * a)
        return (p * self.beta).squeeze(-1), log_q.squeeze(-1), self.gamma * self.scale

    def vandermonde_kernel(self, length):
        """k[d, j] = sum_n c[d,n] q[d,n]^j for j < length, with c = p*beta*gamma*scale. [D', length]"""
        pb, log_q, gs = self._coeffs()
        j = torch.arange(length, dtype=pb.dtype, device=pb.device)
        powers = torch.exp(log_q.unsqueeze(-1) * j)  # D' x N x length
        return torch.einsum("dn,dnj->dj", pb * gs, powers)

    # -- full (non-incremental) forward --------------------------------------------------------
    def forward(self, x, padding_mask=None):
        """x [B, L, D], padding_mask bool [B, L] (True = pad) -> silu(EMA(x) + omega*x) [B, L, D]."""
        B, L, D = x.shape
        skip = x * self.omega
        if padding_mask is not None:
            x = x.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        xt = x.transpose(1, 2)  # B x D x L
        K = L if self.truncation is None else min(self.truncation, L)
        k = self.vandermonde_kernel(K)
        if not self.bidirectional:
            e = _fft_conv(xt, k, 2 * L)[..., :L]
        else:
            kf, kb = k[:D], k[D:]
            # combined two-sided kernel of length 2K-1: index K-1+j <- kf_j, K-1-j <- kb_j
            kappa = torch.cat([kb[:, 1:].flip(-1), kf[:, :1] + kb[:, :1], kf[:, 1:]], dim=-1)
            xp = F.pad(xt, (K - 1, 0))
            s = 2 * K - 2
            e = _fft_conv(xp, kappa, 2 * (L + K - 1))[..., s:s + L]
        return F.silu(e.transpose(1, 2) + skip)

    # -- incremental (streaming) step: untruncated recurrence -----------------------------------
    def step(self, x, state=None, padding_mask=None):
        """x [B, T, D], state [B, D, N] or None -> (y [B, T, D], new state [B, D, N])."""
        if self.bidirectional:
            raise RuntimeError("bidirectional EMA has no incremental state")
        B, T, D = x.shape
        skip = x * self.omega
        if padding_mask is not None:
            x = x.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        pb, log_q, gs = self._coeffs()
        if T == 1:
            h = pb * x[:, 0, :, None]  # B x D x N
            if state is not None:
                h = h + torch.exp(log_q) * state
            e = torch.einsum("bdn,dn->bd", h, gs).unsqueeze(1)
            return F.silu(e + skip), h
        j = torch.arange(T + 1, dtype=pb.dtype, device=pb.device)
        powers = torch.exp(log_q.unsqueeze(-1) * j)  # D x N x (T+1): q^0 .. q^T
        k = torch.einsum("dn,dnj->dj", pb * gs, powers[..., :T])
        xt = x.transpose(1, 2)
        e = _fft_conv(xt, k, 2 * T)[..., :T]  # B x D x T
        # h_out = sum_j pb q^{T-1-j} x_j (+ q^T h_in)
        h = torch.einsum("bdt,dnt->bdn", xt, pb.unsqueeze(-1) * powers[..., :T].flip(-1))
        if state is not None:
            e = e + torch.einsum("bdn,dnt->bdt", state, gs.unsqueeze(-1) * powers[..., 1:])
            h = h + powers[..., T] * state
        return F.silu(e.transpose(1, 2) + skip), h


# ----------------------------------------------------------------------------------------------
# relative position biases


class SimpleRelativePositionalBias(nn.Module):
    """Bias[i, j] = w[M-1 + j - i] for a block of n <= M positions."""

    def __init__(self, max_positions):
        super().__init__()
        self.max_positions = max_positions
        self.rel_pos_bias = nn.Parameter(torch.empty(2 * max_positions - 1))
        nn.init.normal_(self.rel_pos_bias, 0.0, 0.02)

    def forward(self, n):
        if n > self.max_positions:
            raise ValueError(f"sequence length {n} exceeds max positions {self.max_positions}")
        i = torch.arange(n, device=self.rel_pos_bias.device)
        return self.rel_pos_bias[(self.max_positions - 1) + i.unsqueeze(0) - i.unsqueeze(1)]


class RotaryRelativePositionalBias(nn.Module):
    """Bias[i, j] = rot_i(alpha) . rot_j(beta), half-split pairing, theta_l = 10000^(-l/h).

    The sin/cos tables are built in the parameter dtype (float32 tables for float32 models, as the
    official code does; float64 for float64 models).
    """

    def __init__(self, zdim, max_positions):
        super().__init__()
        assert zdim % 2 == 0
        self.zdim = zdim
        self.max_positions = max_positions
        self.alpha = nn.Parameter(torch.empty(1, zdim))
        self.beta = nn.Parameter(torch.empty(1, zdim))
        # dtype marker of the official module (meaningless value); kept so names match
        self.register_buffer("_float_tensor", torch.zeros(1))
        nn.init.normal_(self.alpha, 0.0, 0.02)
        nn.init.normal_(self.beta, 0.0, 0.02)

    def _tables(self, n):
        half = self.zdim // 2
        dt, dev = self.alpha.dtype, self.alpha.device
        inv_freq = torch.exp(torch.arange(half, dtype=dt, device=dev) * -(math.log(10000.0) / half))
        ang = torch.arange(n, dtype=dt, device=dev).unsqueeze(1) * inv_freq.unsqueeze(0)
        return torch.sin(ang), torch.cos(ang)

    @staticmethod
    def _rotate(v, sin, cos):
        v1, v2 = v.chunk(2, dim=-1)
        return torch.cat([v1 * cos - v2 * sin, v2 * cos + v1 * sin], dim=-1)

    def forward(self, n):
        sin, cos = self._tables(n)
        a = self._rotate(self.alpha, sin, cos)  # n x Z
        b = self._rotate(self.beta, sin, cos)
        return a @ b.transpose(0, 1)


# ----------------------------------------------------------------------------------------------
# gated attention layer


def _ragged_pad(x, padding_mask, chunk):
    """Right-pad x [B,L,D] with zeros to a multiple of chunk; mark the tail as padding.
    Returns (x, mask, L) with mask None when nothing is padded at all."""
    B, L, _ = x.shape
    if not (0 < chunk < L and L % chunk != 0):
        return x, padding_mask, L
    extra = -L % chunk
    x = F.pad(x, (0, 0, 0, extra))
    if padding_mask is None:
        padding_mask = torch.zeros(B, L, dtype=torch.bool, device=x.device)
    padding_mask = F.pad(padding_mask, (0, extra), value=True)
    return x, padding_mask, L


def _ragged_forward(mod, x, padding_mask):
    """mod.forward_core over x, with the ragged extension unless mod.ragged_mode is 'native': a
    length that is not a chunk multiple is right-padded (_ragged_pad) and the tail dropped"""
    if padding_mask is not None:
        padding_mask = padding_mask.to(torch.bool)
    if mod.ragged_mode == "native":
        return mod.forward_core(x, padding_mask)
    xp, mp, L = _ragged_pad(x, padding_mask, mod.chunk_size)
    return mod.forward_core(xp, mp)[:, :L]


class MovingAverageGatedAttention(nn.Module):
    """Mega gated attention layer (Mega §3.2-§3.5; official MovingAverageGatedAttention). Causal iff not
    bidirectional."""

    def __init__(self, embed_dim, zdim, hdim, ndim, chunk_size=-1, attention_activation="softmax",
                 bidirectional=False, norm_type="layernorm", prenorm=True, rel_pos_bias="simple",
                 max_positions=1024, truncation=None, activation="silu", norm_affine=True,
                 ragged_mode="pad"):
        super().__init__()
        if attention_activation not in ("softmax", "relu2", "laplace"):
            raise ValueError(f"unknown attention activation {attention_activation!r}")
        self.embed_dim, self.zdim, self.hdim, self.ndim = embed_dim, zdim, hdim, ndim
        self.chunk_size = chunk_size
        self.attention_activation = attention_activation
        self.bidirectional = bidirectional
        self.prenorm = prenorm
        self.act = get_activation(activation)
        self.ragged_mode = ragged_mode
        # own parameters first (this also reproduces the official state_dict order)
        self.gamma = nn.Parameter(torch.empty(2, zdim))
        self.beta = nn.Parameter(torch.empty(2, zdim))
        self.norm = SequenceNorm(norm_type, embed_dim, affine=norm_affine)
        self.move = MultiHeadEMA(embed_dim, ndim=ndim, bidirectional=bidirectional, truncation=truncation)
        self.v_proj = nn.Linear(embed_dim, hdim)
        self.mx_proj = nn.Linear(embed_dim, 2 * embed_dim + zdim + hdim)
        self.h_proj = nn.Linear(hdim, embed_dim)
        bias_len = chunk_size if chunk_size > 0 else max_positions
        if rel_pos_bias == "simple":
            self.rel_pos_bias = SimpleRelativePositionalBias(bias_len)
        elif rel_pos_bias == "rotary":
            self.rel_pos_bias = RotaryRelativePositionalBias(zdim, bias_len)
        else:
            raise ValueError(f"unknown rel_pos_bias {rel_pos_bias!r}")
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        for lin in (self.v_proj, self.mx_proj, self.h_proj):
            nn.init.normal_(lin.weight, 0.0, 0.02)
            nn.init.zeros_(lin.bias)
        nn.init.normal_(self.gamma, 0.0, 0.02)
        nn.init.zeros_(self.beta)

    # -- attention on blocks -------------------------------------------------------------------
    def _attend(self, q, k, v, pad, causal):
        """q [B,K,nq,Z], k [B,K,n,Z], v [B,K,n,E], pad bool [B,K,n] or None.

        The nq queries are the last nq of the n key positions (nq == n except in streaming).
        causal applies the chunk-local causal mask (only when nq > 1, as the official decoder).
        """
        nq, n = q.size(-2), k.size(-2)
        off = n - nq
        bias = self.rel_pos_bias(n)[off:]  # nq x n
        causal = causal and nq > 1
        if causal:
            qi = torch.arange(nq, device=q.device).unsqueeze(1) + off
            kj = torch.arange(n, device=q.device).unsqueeze(0)
            allowed = kj <= qi  # nq x n
        if self.attention_activation == "softmax":
            s = (q * self.zdim ** -0.5) @ k.transpose(-1, -2) + bias
            if causal:
                s = s.masked_fill(~allowed, float("-inf"))
            if pad is not None:
                # a chunk whose keys are all padding is left unmasked
                kill = pad & ~pad.all(dim=-1, keepdim=True)
                s = s.masked_fill(kill.unsqueeze(-2), float("-inf"))
            attn = torch.softmax(s, dim=-1)
        else:
            if causal:
                count = allowed.sum(dim=-1, keepdim=True).to(q.dtype)  # nq x 1: i+1
            elif pad is not None:
                count = (~pad).sum(dim=-1).clamp(min=1).to(q.dtype)[..., None, None]
            else:
                count = n
            s = (q @ k.transpose(-1, -2)) / count + bias
            attn = relu2(s) if self.attention_activation == "relu2" else laplace(s)
            if pad is not None:
                attn = attn * (~pad).unsqueeze(-2).to(attn.dtype)
            if causal:
                attn = attn * allowed.to(attn.dtype)
        return attn @ v

    def _attention(self, q, k, v, pad, causal):
        """Chunked attention over a whole sequence. q,k [B,L,Z], v [B,L,E], pad [B,L]."""
        B, L, _ = q.shape
        c = self.chunk_size
        if c <= 0 or L <= c:
            c = L
        nfull = L // c
        outs = []
        Lf = nfull * c

        def blocks(t, n_blk, size):
            return None if t is None else t.reshape(B, n_blk, size, *t.shape[2:])

        if nfull > 0:
            outs.append(self._attend(blocks(q[:, :Lf], nfull, c), blocks(k[:, :Lf], nfull, c),
                                     blocks(v[:, :Lf], nfull, c),
                                     None if pad is None else blocks(pad[:, :Lf], nfull, c),
                                     causal).reshape(B, Lf, -1))
        if Lf < L:  # native ragged last chunk (only reached with ragged_mode='native')
            r = L - Lf
            outs.append(self._attend(blocks(q[:, Lf:], 1, r), blocks(k[:, Lf:], 1, r),
                                     blocks(v[:, Lf:], 1, r),
                                     None if pad is None else blocks(pad[:, Lf:], 1, r),
                                     causal).reshape(B, r, -1))
        return torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]

    def _gates(self, xn, mx):
        D, Z, E = self.embed_dim, self.zdim, self.hdim
        base = self.mx_proj(mx)
        u, zr, hx = torch.split(base, [D, Z + E, D], dim=-1)
        u = torch.sigmoid(u)
        z, r = torch.split(F.silu(zr), [Z, E], dim=-1)
        qk = z.unsqueeze(-2) * self.gamma + self.beta  # ... x 2 x Z
        q, k = qk.unbind(dim=-2)
        return u, r, hx, q, k

    def _output(self, residual, u, r, hx, o):
        h = self.act(hx + self.h_proj(o * r))
        out = residual + u * (h - residual)
        if not self.prenorm:
            out = self.norm(out)
        return out

    def forward_core(self, x, padding_mask=None):
        """Layer on a sequence whose length is a multiple of the chunk (or <= chunk, or ragged
        with ragged_mode='native')."""
        residual = x
        xn = self.norm(x) if self.prenorm else x
        v = self.act(self.v_proj(xn))
        mx = self.move(xn, padding_mask)
        u, r, hx, q, k = self._gates(xn, mx)
        o = self._attention(q, k, v, padding_mask, causal=not self.bidirectional)
        return self._output(residual, u, r, hx, o)

    def forward(self, x, padding_mask=None):
        """x [B, L, D]; padding_mask [B, L] (bool/uint8, 1 = pad, right padding) or None."""
        return _ragged_forward(self, x, padding_mask)

    # -- streaming -----------------------------------------------------------------------------
    def step(self, x, state):
        """Incremental forward of T new tokens x [B, T, D] (causal layers only, no padding).

        state: dict, updated in place: 'ema' [B,D,N]; 'k' [B,t,Z], 'v' [B,t,E] cached keys/values
        of the current chunk (cleared whenever the cache length reaches a multiple of chunk_size).
        T > 1 requires the tokens to stay inside one chunk, or to start on a chunk border with T a
        multiple of chunk_size.
        """
        if self.bidirectional:
            raise RuntimeError("bidirectional layers have no streaming form")
        B, T, _ = x.shape
        c = self.chunk_size
        residual = x
        xn = self.norm(x) if self.prenorm else x
        v = self.act(self.v_proj(xn))
        mx, state["ema"] = self.move.step(xn, state.get("ema"))
        u, r, hx, q, k = self._gates(xn, mx)
        prev = state.get("k")
        t0 = 0 if prev is None else prev.size(1)
        if prev is not None:
            k = torch.cat([prev, k], dim=1)
            v = torch.cat([state["v"], v], dim=1)
        n = k.size(1)
        if c > 0 and n > c:
            if t0 != 0 or n % c != 0:
                raise ValueError("multi-token step crosses a chunk border")
            o = self._attention(q, k, v, None, causal=True)
        else:
            o = self._attend(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), None, causal=True)[:, 0]
        if c > 0 and n % c == 0:
            state.pop("k", None)
            state.pop("v", None)
        else:
            state["k"], state["v"] = k, v
        return self._output(residual, u, r, hx, o)


# ----------------------------------------------------------------------------------------------
# NFFN and block


class NormalizedFeedForwardNetwork(nn.Module):
    def __init__(self, embed_dim, ffn_hidden_dim, activation="silu", norm_type="layernorm",
                 prenorm=True, norm_affine=True):
        super().__init__()
        self.act = get_activation(activation)
        self.prenorm = prenorm
        self.norm = SequenceNorm(norm_type, embed_dim, affine=norm_affine)
        self.fc1 = nn.Linear(embed_dim, ffn_hidden_dim)
        self.fc2 = nn.Linear(ffn_hidden_dim, embed_dim)
        with torch.no_grad():
            for lin in (self.fc1, self.fc2):
                nn.init.normal_(lin.weight, 0.0, 0.02)
                nn.init.zeros_(lin.bias)

    def forward(self, x):
        y = self.norm(x) if self.prenorm else x
        y = x + self.fc2(self.act(self.fc1(y)))
        return y if self.prenorm else self.norm(y)


LAYER_KEYS = ("embed_dim", "zdim", "hdim", "ndim", "ffn_hidden_dim", "chunk_size", "attention_activation",
              "bidirectional", "norm_type", "prenorm", "rel_pos_bias", "max_positions", "truncation",
              "activation")


class MixerBlock(nn.Module):
    """A block with a token mixer other than Mega (the library's src/layers/mixer.h): prenorm
    y = x + mixer(mixer_norm(x)), postnorm y = mixer_norm(x + mixer(x)); then the normalized FFN
    (none when ffn_hidden_dim <= 0). make_mixer(cfg) builds the core; it is built after the norm
    and before the FFN, the order of the initialisation draws."""

    def __init__(self, cfg, make_mixer):
        super().__init__()
        D, nt, aff = cfg["embed_dim"], cfg.get("norm_type", "layernorm"), cfg.get("norm_affine", True)
        self.prenorm = cfg.get("prenorm", True)
        self.mixer_norm = SequenceNorm(nt, D, affine=aff)
        self.mixer = make_mixer(cfg)
        F = cfg.get("ffn_hidden_dim", 0)
        self.nffn = (NormalizedFeedForwardNetwork(D, F, activation=cfg.get("activation", "silu"), norm_type=nt,
                                                  prenorm=self.prenorm, norm_affine=aff) if F and F > 0 else None)

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


class MegaBlock(nn.Module):
    """mega_layer (MovingAverageGatedAttention) followed by nffn (omitted when ffn_hidden_dim <= 0).

    Causal block = official MegaDecoderLayer without cross-attention (causal mask built here);
    bidirectional block = official MegaSentenceEncoderLayer.
    """

    def __init__(self, embed_dim, zdim, hdim, ndim, ffn_hidden_dim, chunk_size=-1,
                 attention_activation="softmax", bidirectional=False, norm_type="layernorm",
                 prenorm=True, rel_pos_bias="simple", max_positions=1024, truncation=None,
                 activation="silu", norm_affine=True, ragged_mode="pad"):
        super().__init__()
        self.chunk_size = chunk_size
        self.ragged_mode = ragged_mode
        self.mega_layer = MovingAverageGatedAttention(
            embed_dim, zdim, hdim, ndim, chunk_size=chunk_size, attention_activation=attention_activation,
            bidirectional=bidirectional, norm_type=norm_type, prenorm=prenorm, rel_pos_bias=rel_pos_bias,
            max_positions=max_positions, truncation=truncation, activation=activation,
            norm_affine=norm_affine, ragged_mode=ragged_mode)
        if ffn_hidden_dim is not None and ffn_hidden_dim > 0:
            self.nffn = NormalizedFeedForwardNetwork(embed_dim, ffn_hidden_dim, activation=activation,
                                                     norm_type=norm_type, prenorm=prenorm,
                                                     norm_affine=norm_affine)
        else:
            self.nffn = None

    @classmethod
    def from_config(cls, cfg, **kw):
        return cls(**{k: cfg[k] for k in LAYER_KEYS}, **kw)

    def forward_core(self, x, padding_mask=None):
        x = self.mega_layer.forward_core(x, padding_mask)
        return x if self.nffn is None else self.nffn(x)

    def forward(self, x, padding_mask=None):
        return _ragged_forward(self, x, padding_mask)

    def step(self, x, state):
        x = self.mega_layer.step(x, state)
        return x if self.nffn is None else self.nffn(x)


# ----------------------------------------------------------------------------------------------
# causal LM


def run_stack(layers, final_norm, x, pad):
    """the glue of the official wrappers (MegaDecoderNoCrossAttn.extract_features_scriptable,
    MegaLRAEncoder.forward): pad rows zeroed, the layers, the final norm (or None), pad rows zeroed
    again; x [B, L, D]; returns (x, the hidden states: the input and every layer's output)"""
    if pad is not None:
        x = x * (~pad).unsqueeze(-1).to(x.dtype)
    hidden = [x]
    for layer in layers:
        x = layer(x, pad)
        hidden.append(x)
    if final_norm is not None:
        x = final_norm(x)
    if pad is not None:
        x = x * (~pad).unsqueeze(-1).to(x.dtype)
    return x, hidden


def layer_kwargs(cfg, side, bidirectional, max_positions):
    """the block settings of a model config whose keys start with `side` ("decoder" / "encoder")"""
    return dict(embed_dim=cfg[side + "_embed_dim"], zdim=cfg[side + "_z_dim"], hdim=cfg[side + "_hidden_dim"],
                ndim=cfg[side + "_n_dim"], ffn_hidden_dim=cfg[side + "_ffn_embed_dim"],
                chunk_size=cfg[side + "_chunk_size"], attention_activation=cfg["attention_activation_fn"],
                bidirectional=bidirectional, norm_type=cfg["normalization_type"], prenorm=cfg["normalize_before"],
                rel_pos_bias=cfg["rel_pos_bias"], max_positions=cfg[max_positions],
                truncation=cfg["truncation_length"], activation=cfg["activation_fn"])


class MegaDecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        V, D = cfg["vocab_size"], cfg["decoder_embed_dim"]
        self.padding_idx = cfg.get("padding_idx")
        self.chunk_size = cfg["decoder_chunk_size"]
        self.embed_scale = 1.0 if cfg.get("no_scale_embedding", False) else math.sqrt(D)
        self.tied = bool(cfg.get("share_decoder_input_output_embed", False))
        self.embed_tokens = nn.Embedding(V, D, padding_idx=self.padding_idx)
        with torch.no_grad():
            nn.init.normal_(self.embed_tokens.weight, 0.0, D ** -0.5)
            if self.padding_idx is not None:
                self.embed_tokens.weight[self.padding_idx].zero_()
        lk = layer_kwargs(cfg, "decoder", False, "max_target_positions")
        self.layers = nn.ModuleList([MegaBlock(**lk) for _ in range(cfg["decoder_layers"])])
        if cfg["normalize_before"]:
            self.final_norm = SequenceNorm(cfg["normalization_type"], D,
                                           affine=not cfg.get("no_affine_final_norm", False))
        else:
            self.final_norm = None
        if self.tied:
            self.output_projection = None
        else:
            self.output_projection = nn.Linear(D, V, bias=False)
            nn.init.normal_(self.output_projection.weight, 0.0, D ** -0.5)

    def project(self, x):
        w = self.embed_tokens.weight if self.tied else self.output_projection.weight
        return x @ w.transpose(0, 1)

    def forward(self, tokens):
        """tokens [B, L] -> (logits [B, L, V], hidden list of [B, L, D])."""
        B, L = tokens.shape
        c = self.chunk_size
        if 0 < c < L and L % c != 0:  # ragged: right-pad with the pad token
            tokens = F.pad(tokens, (0, -L % c), value=self.padding_idx)
        x = self.embed_scale * self.embed_tokens(tokens)
        pad = None if self.padding_idx is None else tokens.eq(self.padding_idx)
        if pad is not None and not bool(pad.any()):
            pad = None
        x, hidden = run_stack(self.layers, self.final_norm, x, pad)
        x = x[:, :L]
        return self.project(x), [h[:, :L] for h in hidden]

    def step(self, tokens, state):
        """Incremental: tokens [B, T] (usually T = 1) -> logits [B, T, V]; state: list of dicts."""
        while len(state) < len(self.layers):
            state.append({})
        x = self.embed_scale * self.embed_tokens(tokens)
        for layer, st in zip(self.layers, state):
            x = layer.step(x, st)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.project(x)


class MegaLM(nn.Module):
    """Official MegaLanguageModel / MegaDecoderNoCrossAttn computation (names decoder.*)."""

    def __init__(self, cfg):
        super().__init__()
        self.decoder = MegaDecoder(cfg)

    def forward(self, tokens):
        return self.decoder(tokens)

    def step(self, tokens, state):
        return self.decoder.step(tokens, state)


# ----------------------------------------------------------------------------------------------
# LRA classifier


class SparseEmbedding(nn.Module):
    def __init__(self, vocab_size, dim, padding_idx):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=padding_idx)
        nn.init.normal_(self.embed.weight, 0.0, dim ** -0.5)  # whole table, pad row included

    def forward(self, tokens):
        return self.embed(tokens)


class RealNumberEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        nn.init.normal_(self.weight, 0.0, 1.0)
        nn.init.normal_(self.bias, 0.0, 0.1)

    def forward(self, values):
        return values.unsqueeze(-1) * self.weight + self.bias


class MegaLRAEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        D = cfg["encoder_embed_dim"]
        self.embedding_type = cfg["embedding_type"]
        self.padding_idx = cfg.get("padding_idx")
        self.chunk_size = cfg["encoder_chunk_size"]
        self.sen_rep_type = cfg["sen_rep_type"]
        if self.embedding_type == "sparse":
            self.embed_tokens = SparseEmbedding(cfg["vocab_size"], D, self.padding_idx)
        elif self.embedding_type == "linear":
            self.embed_tokens = RealNumberEmbedding(D)
        else:
            raise ValueError(f"unknown embedding_type {self.embedding_type!r}")
        lk = layer_kwargs(cfg, "encoder", True, "max_positions")
        self.layers = nn.ModuleList([MegaBlock(**lk) for _ in range(cfg["encoder_layers"])])
        self.final_norm = SequenceNorm(cfg["normalization_type"], D) if cfg["normalize_before"] else None

    def forward(self, inputs, lengths):
        """inputs: tokens [B, L] (sparse) or values [B, L] (linear); lengths [B].
        Returns (sentence representation [B, D], hidden list [B, L, D])."""
        B, L = inputs.shape
        c = self.chunk_size
        pad = None
        if self.embedding_type == "sparse":
            if 0 < c < L and L % c != 0:
                inputs = F.pad(inputs, (0, -L % c), value=self.padding_idx)
            pad = inputs.eq(self.padding_idx)
            if not bool(pad.any()):
                pad = None
        x = self.embed_tokens(inputs)
        x, hidden = run_stack(self.layers, self.final_norm, x, pad)
        if self.sen_rep_type == "mp":
            rep = x.sum(dim=1) / lengths.to(x.dtype).unsqueeze(1)
        elif self.sen_rep_type == "cls":
            rep = x[:, 0]
        else:
            raise ValueError(f"unknown sen_rep_type {self.sen_rep_type!r}")
        return rep, [h[:, :L] for h in hidden]


class _LRAEncoderWrapper(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder = MegaLRAEncoder(cfg)

    def forward(self, inputs, lengths):
        return self.encoder(inputs, lengths)


class MegaLRAClassifier(nn.Module):
    """Official LRAModel with a Mega encoder (names encoder.encoder.*, classifier.<j>.0.*,
    sentence_projection_layer.weight). Head: [Linear -> activation] x classifier_layers -> Linear."""

    def __init__(self, cfg):
        super().__init__()
        D = cfg["encoder_embed_dim"]
        self.encoder = _LRAEncoderWrapper(cfg)
        hid = cfg["classifier_out_dim"]
        nl = cfg["classifier_layers"]
        dims = [D] + [hid] * nl
        self.classifier = nn.ModuleList([nn.Sequential(nn.Linear(dims[j], dims[j + 1])) for j in range(nl)])
        for seq in self.classifier:
            nn.init.xavier_uniform_(seq[0].weight)
            nn.init.zeros_(seq[0].bias)
        self.classifier_act = get_activation(cfg["classifier_activation_fn"])
        self.sentence_projection_layer = nn.Linear(dims[-1], cfg["sentence_class_num"], bias=False)
        nn.init.xavier_uniform_(self.sentence_projection_layer.weight)

    def forward(self, inputs, lengths):
        rep, hidden = self.encoder(inputs, lengths)
        for seq in self.classifier:
            rep = self.classifier_act(seq(rep))
        return self.sentence_projection_layer(rep), hidden


# ----------------------------------------------------------------------------------------------
# construction from case.json


def build(kind, cfg, **kw):
    if kind == "layer":
        return MegaBlock.from_config(cfg, **kw)
    if kind == "lm":
        return MegaLM(cfg)
    if kind == "cls":
        return MegaLRAClassifier(cfg)
    raise ValueError(f"unknown kind {kind!r}")


def load_weights(model, tensors):
    """Load a dict name -> numpy/torch array into model (strict; missing _float_tensor tolerated)."""
    sd = model.state_dict()
    unexpected = [k for k in tensors if k not in sd]
    missing = [k for k in sd if k not in tensors and not k.endswith("_float_tensor")]
    if unexpected or missing:
        raise KeyError(f"state_dict mismatch: unexpected {unexpected}, missing {missing}")
    with torch.no_grad():
        for k, v in tensors.items():
            t = torch.as_tensor(v)
            if sd[k].dtype.is_floating_point:
                t = t.to(sd[k].dtype)
            sd[k].copy_(t)
