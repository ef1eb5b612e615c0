#!/usr/bin/python3
"""Reference values for Megalodon's complex EMA and timestep normalization from the OFFICIAL
modules (XuezheMax/megalodon, MIT), run on the CPU, into tests/fixtures/megalodon/.

The official files are read from a bare mirror of the repository (--repo, default
/work/.mirror/XuezheMax+megalodon/repo; the commit is recorded in each case.json) and executed as
they are:
  * megalodon/modules/complex_exponential_moving_average.py (MultiHeadComplexEMA: _calc_coeffs,
    forward: residual, fftconv of the kernel, bias of the prior state, last state);
  * megalodon/modules/fused_ops/fftconv.py (on the CPU it takes its own pure-PyTorch branch,
    _fftconv_fwd / _fftconv_bwd: torch.fft with the official hand-written backward);
  * megalodon/modules/timestep_norm.py (TimestepNorm: weight stored as an offset from 1, prior
    count/mean/log-variance, the grouped op);
  * megalodon/distributed/utils.py (divide_and_check_no_remainder);
  * megalodon/modules/moving_average_gated_attention.py: _InnerAttention (efficient_attn None:
    the plain PyTorch path with the model's additive causal mask) and the whole
    MovingAverageGatedAttention layer; megalodon/modules/layer_norm.py (FusedRMSNorm); and
    megalodon/modules/rotary_positional_embedding.py (RotaryEmbedding, apply_rotary_emb).

What is replaced, and why it computes the same:
  * megalodon_extension.ops (the compiled CUDA/C++ extension, not built here). The three ops the
    modules call on the CPU are transcribed from their CPU loops into differentiable PyTorch
    (float64; gradients by autograd rather than the extension's hand-written *_bwd, so they are
    an independent check of the C backward):
      - ema_parameters (fused_ops/ema_parameters.py -> csrc/ops/ema_parameters.cc,
        EMAParametersCPUFwdImpl): w[d, j] = sum_n Re(p gamma exp(log_q j)),
        b[b, d, j] = sum_n Re(exp(log_q (j+1)) gamma h[b, d, n]);
      - ema_hidden (ema_hidden.cc, EMAHiddenCPUFwdImpl):
        h[b, d, n] = p sum_j exp(log_q (L-j-1)) x[b, d, j] + exp(log_q L) hx[b, d, n];
      - the grouped timestep norm (timestep_norm.cc, GroupTimestepNormCPUFwdImpl with
        utils.h WelfordCombine and RowwiseMoments): per step, the group's population mean and
        variance over its features, combined with the running (count, mean, var) as a sample of
        count 1; padded steps give y = 0 and leave the state and count unchanged.
    The transcriptions evaluate the same formulas as the loops (same exp(log_q * j) powers, same
    Welford combination), in float64 instead of the extension's float32 accumulation.
    rfft / fftconv_fwd / fftconv_bwd (the CUDA-only FFT kernels) are stubs that raise: the CPU
    branch never calls them.
  * megalodon.distributed (its __init__ imports fairscale and process groups): a stub with model
    parallel rank 0 and world size 1 (what a single process has).
  * MultiHeadComplexEMA._init_parameters (calls .cuda() and dist.broadcast): not run; the
    parameters are set from a seeded generator instead (initialisation is not what is compared).
  * for the layer case: apex's manual_rms_norm (the branch FusedRMSNorm takes off CUDA) is
    transcribed, with the variance in float64 instead of float32; ColumnParallelLinear and
    RowParallelLinear are nn.Linear (at model-parallel world size 1 they are the same affine maps
    with the same weight [out, in] and bias names); gather_from_model_parallel_region is the
    identity and there is no chunk parallelism (should_send/recv false), as in one process.
  * the rest of moving_average_gated_attention.py's imports, which _InnerAttention does not use
    (FusedRMSNorm, the model-parallel linears, chunk-parallel communication, the fused swift
    attention, get_init_fn): stubs that raise if called. memory_efficient_dropout (a CUDA op) is
    the identity, which is what it computes at p = 0 (the cases use dropout 0).
  * float64 variants: rotary_positional_embedding.py computes its frequencies and rotations in
    float32 (torch.float32 / .float()); the float64 cases read float64 / .double() there, and
    _calc_coeffs's .float() casts read .double() (see cema_case), and _InnerAttention's softmax,
    taken in float32 (F.softmax(..., dtype=torch.float32)), is taken in float64. Without that
    last change the official forward and the official cached decode already differ by 6e-8.

Layouts written (the C library's, batch first): x, dout, y [B, L, D]; the CEMA state h0 / hT as
[B, 2, N, D] (real plane, imaginary plane) from the official [B, D, N] complex; tsnorm
prev_mean / prev_var / mean / var [B, G], count [B] (int64).

Usage: /usr/bin/python3 tests/ref/ref_megalodon.py [--repo DIR] [--out tests/fixtures/megalodon]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

torch.set_num_threads(1)


def official_source(repo, path):
    return subprocess.run(["git", "--git-dir", repo, "show", "HEAD:" + path], check=True,
                          capture_output=True, text=True).stdout


def load_module(name, source, package):
    mod = types.ModuleType(name)
    mod.__package__ = package
    sys.modules[name] = mod
    exec(compile(source, name.replace(".", "/") + ".py", "exec"), mod.__dict__)
    return mod


# ---- transcriptions of the extension's CPU loops (differentiable, float64) ----
def ema_parameters(p, q, gamma, hx, length):
    log_q = q.log()  # as EMAParametersFunc.forward
    j = torch.arange(length, dtype=torch.float64)
    vw = torch.exp(log_q * j)                                  # D x N x L
    w = ((p * gamma.unsqueeze(-1)) * vw).real.sum(1)            # D x L
    if hx is None:
        return w, None
    vb = torch.exp(log_q * (j + 1))                             # D x N x L
    b = (vb.unsqueeze(0) * (gamma.unsqueeze(-1) * hx.unsqueeze(-1))).real.sum(2)  # B x D x L
    return w, b


def ema_hidden(x, p, q, hx):
    log_q = q.log()
    L = x.size(-1)
    j = torch.arange(L, dtype=torch.float64)
    v = torch.exp(log_q * (L - j - 1))                          # D x N x L
    h = (v.unsqueeze(0) * x.unsqueeze(2).to(v.dtype)).sum(-1) * p.squeeze(-1)   # B x D x N
    if hx is not None:
        h = h + torch.exp(log_q * L).squeeze(-1) * hx
    return h


def group_timestep_norm(x, prev_count, prev_mean, prev_var, gamma, beta, padding_mask, num_groups, eps):
    B, L, H = x.shape
    G = num_groups
    xg = x.view(B, L, G, H // G)
    gm = xg.mean(-1)                                  # RowwiseMoments: population moments
    gv = (xg * xg).mean(-1) - gm * gm
    ys, count, m, v = [], prev_count.clone(), prev_mean, prev_var
    for j in range(L):
        keep = torch.ones(B, dtype=torch.bool) if padding_mask is None else ~padding_mask[:, j]
        n = count.to(torch.float64) + 1                                   # WelfordCombine with (1, gm, gv)
        c1 = ((n - 1) / n).unsqueeze(-1)
        c2 = (1 / n).unsqueeze(-1)
        delta = gm[:, j] - m
        m1 = c1 * m + c2 * gm[:, j]
        m2 = c1 * v + c2 * gv[:, j] + (c1 * delta) * (c2 * delta)
        rstd = 1 / torch.sqrt(m2 + eps)
        y = (xg[:, j] - m1.unsqueeze(-1)) * rstd.unsqueeze(-1)
        y = y.reshape(B, H) * gamma + beta
        k = keep.unsqueeze(-1)
        ys.append(torch.where(k, y, torch.zeros_like(y)))
        m = torch.where(k, m1, m)
        v = torch.where(k, m2, v)
        count = count + keep.to(count.dtype)
    return torch.stack(ys, 1), count, m, v


def stub(*_a, **_k):
    raise RuntimeError("CUDA-only extension op called")


def load_official(repo):
    ext = types.ModuleType("megalodon_extension")
    ops = types.ModuleType("megalodon_extension.ops")
    for n in ("rfft", "fftconv_fwd", "fftconv_bwd", "ema_parameters_fwd", "ema_parameters_bwd",
              "ema_hidden_fwd", "ema_hidden_bwd", "timestep_norm_fwd", "timestep_norm_bwd",
              "group_timestep_norm_fwd", "group_timestep_norm_bwd"):
        setattr(ops, n, stub)
    ext.ops = ops
    sys.modules["megalodon_extension"] = ext
    sys.modules["megalodon_extension.ops"] = ops
    for pkg in ("megalodon", "megalodon.modules"):
        m = types.ModuleType(pkg)
        m.__path__ = []
        sys.modules[pkg] = m
    dist = types.ModuleType("megalodon.distributed")
    dist.__path__ = []
    dist.get_model_parallel_rank = lambda: 0
    dist.get_model_parallel_world_size = lambda: 1
    sys.modules["megalodon.distributed"] = dist
    load_module("megalodon.distributed.utils", official_source(repo, "megalodon/distributed/utils.py"),
                "megalodon.distributed")
    fused = types.ModuleType("megalodon.modules.fused_ops")
    fused.__path__ = []
    sys.modules["megalodon.modules.fused_ops"] = fused
    fft = load_module("megalodon.modules.fused_ops.fftconv",
                      official_source(repo, "megalodon/modules/fused_ops/fftconv.py"), "megalodon.modules.fused_ops")
    fused.fftconv = fft.fftconv
    fused.ema_parameters = ema_parameters
    fused.ema_hidden = ema_hidden
    src = official_source(repo, "megalodon/modules/complex_exponential_moving_average.py")
    cema = load_module("megalodon.modules.complex_exponential_moving_average", src, "megalodon.modules")
    cema.MultiHeadComplexEMA._init_parameters = lambda self: None
    # the float64 variant: _calc_coeffs casts every parameter with .float() (float32 coefficients
    # whatever the module's dtype, for mixed precision); these four casts, and nothing else,
    # become .double()
    assert src.count(".float()") == 4 and src.count("self.theta.float()") == 1
    cema64 = load_module("megalodon.modules.complex_exponential_moving_average_f64",
                         src.replace(".float()", ".double()"), "megalodon.modules")
    cema64.MultiHeadComplexEMA._init_parameters = lambda self: None
    tsn = load_module("megalodon.modules.timestep_norm", official_source(repo, "megalodon/modules/timestep_norm.py"),
                      "megalodon.modules")
    tsn.timestep_norm = lambda x, c, m, v, g, b, pm, ng, eps: group_timestep_norm(x, c, m, v, g, b, pm, ng, eps)
    rsrc = official_source(repo, "megalodon/modules/rotary_positional_embedding.py")
    assert rsrc.count("torch.float32") == 2 and rsrc.count(".float()") == 3
    rope = load_module("megalodon.modules.rotary_positional_embedding",
                       rsrc.replace("torch.float32", "torch.float64").replace(".float()", ".double()"),
                       "megalodon.modules")
    for n, attrs in (("megalodon.modules.layer_norm", ("FusedRMSNorm",)),
                     ("megalodon.modules.model_parallel", ("ColumnParallelLinear", "RowParallelLinear",
                                                           "gather_from_model_parallel_region")),
                     ("megalodon.modules.chunk_parallel", ("should_send_to_next", "should_recv_from_prev",
                                                           "send_to_next_chunk_parallel_region",
                                                           "recv_from_prev_chunk_parallel_region")),
                     ("megalodon.utils", ("get_init_fn",))):
        m = types.ModuleType(n)
        for a in attrs:
            setattr(m, a, stub)
        sys.modules[n] = m
    dist.get_chunk_parallel_rank = lambda: 0
    fused.swift_efficient_attention = stub
    fused.memory_efficient_dropout = lambda x, p, training: x if (p == 0 or not training) else stub()
    msrc = official_source(repo, "megalodon/modules/moving_average_gated_attention.py")
    sm = "F.softmax(scores, dim=-1, dtype=torch.float32)"
    assert msrc.count(sm) == 1
    mega = load_module("megalodon.modules.moving_average_gated_attention",
                       msrc.replace(sm, sm.replace("float32", "float64")), "megalodon.modules")
    return cema, cema64, tsn, (mega, rope)


def write_case(out, name, kind, config, weights, io, notes, commit, dtype="float64"):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    meta = {"kind": kind, "config": config, "dtype": dtype, "batch": int(config["batch"]),
            "seq_len": int(config["seq_len"]), "generator": "tests/ref/ref_megalodon.py",
            "official": "XuezheMax/megalodon@" + commit, "torch_version": torch.__version__, "notes": notes}
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    st.save(os.path.join(d, "weights.safetensors"), {k: v.detach().numpy() for k, v in weights.items()},
            {"config": json.dumps(config, sort_keys=True)})
    st.save(os.path.join(d, "io.safetensors"), {k: v.detach().numpy() for k, v in io.items()},
            {"case": name, "kind": kind, "dtype": dtype})


def state_to_c(h):  # official [B, D, N] complex -> [B, 2, N, D]
    return torch.stack([h.real, h.imag], 1).transpose(2, 3).contiguous()


def cema_case(cema_mod, out, commit, D, N, B, L, seed, f32coef=False):
    g = torch.Generator().manual_seed(seed)
    m = cema_mod.MultiHeadComplexEMA(D, N).double()
    with torch.no_grad():
        for name, sd in (("alpha", 1.0), ("delta", 1.0), ("theta", 1.5), ("gamma", 1.0), ("omega", 1.0)):
            p = getattr(m, name)
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * sd)
    m.train()
    x = torch.randn(B, D, L, generator=g, dtype=torch.float64, requires_grad=True)
    hx = torch.complex(torch.randn(B, D, N, generator=g, dtype=torch.float64),
                       torch.randn(B, D, N, generator=g, dtype=torch.float64)).requires_grad_(True)
    dout = torch.randn(B, D, L, generator=g, dtype=torch.float64)
    names = ("alpha", "delta", "theta", "gamma", "omega")
    y0, h0last = m(x, None, compute_last_state=True)
    grads0 = torch.autograd.grad((y0 * dout).sum(), [x] + [getattr(m, n) for n in names])
    y1, h1last = m(x, hx, compute_last_state=True)
    grads1 = torch.autograd.grad((y1 * dout).sum(), [x, hx] + [getattr(m, n) for n in names])
    bt = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731  [B, D, L] -> [B, L, D]
    io = {"x": bt(x), "h0": state_to_c(hx), "dout": bt(dout),
          "out": bt(y0), "hT": state_to_c(h0last), "out_h0": bt(y1), "hT_h0": state_to_c(h1last),
          "grad.x": bt(grads0[0]), "grad_h0.x": bt(grads1[0]),
          # d/dh0 of the real loss through h = re + i im: (dL/dre, dL/dim) = (Re g, Im g) of
          # autograd's complex gradient (PyTorch's convention: grad = dL/dre + i dL/dim)
          "grad_h0.h0": state_to_c(grads1[1])}
    for i, n in enumerate(names):
        io["grad." + n] = grads0[1 + i]
        io["grad_h0." + n] = grads1[2 + i]
    weights = {"cema." + n: getattr(m, n) for n in names}
    name = "cema_D%d_N%d_B%d_L%d%s" % (D, N, B, L, "_f32coef" if f32coef else "")
    write_case(out, name, "cema", {"dim": D, "ndim": N, "batch": B, "seq_len": L}, weights, io,
               "MultiHeadComplexEMA forward (with and without a prior state hx), last state, and gradients of "
               "sum(dout * y) by autograd; " + ("the official _calc_coeffs as is: coefficients in float32, so the "
               "case is float32-accurate" if f32coef else "_calc_coeffs in float64 (its .float() casts as .double())"),
               commit, "float32" if f32coef else "float64")
    print("wrote", name)


def tsnorm_case(tsn_mod, out, commit, D, G, B, L, seed, pad, prior):
    g = torch.Generator().manual_seed(seed)
    m = tsn_mod.TimestepNorm(D, G, prior_count=0, eps=1e-5).double()
    with torch.no_grad():
        m.weight.copy_(torch.randn(D, generator=g, dtype=torch.float64) * 0.5)
        m.bias.copy_(torch.randn(D, generator=g, dtype=torch.float64) * 0.5)
    x = (torch.randn(B, L, D, generator=g, dtype=torch.float64) * 2 + 0.5).requires_grad_(True)
    mask = None
    if pad:
        mask = torch.zeros(B, L, dtype=torch.bool)
        mask[0, L - 3:] = True   # right padding
        mask[1, 2] = True        # a padded step in the middle (the op allows it)
    if prior:
        pc = torch.tensor([3, 0][:B] + [5] * max(0, B - 2), dtype=torch.int64)
        pm = torch.randn(B, G, generator=g, dtype=torch.float64).requires_grad_(True)
        pv = (torch.rand(B, G, generator=g, dtype=torch.float64) + 0.5).requires_grad_(True)
        y, cnt, mean, var = m(x, pc, pm, pv, mask)
    else:
        pc = m.prior_count.expand(B).contiguous()
        pm = m.prior_mean.expand(B, -1).contiguous()
        pv = m.prior_logv.exp().expand(B, -1).contiguous()
        y, cnt, mean, var = m(x, None, None, None, mask)
    if not prior and mask is None:
        # independent check of the transcription: from an empty prior, the running (mean, var)
        # after the last step are the population mean and variance of the group over all steps
        xg = x.detach().view(B, L, G, D // G)
        assert torch.allclose(mean, xg.mean((1, 3)), rtol=0, atol=1e-12)
        assert torch.allclose(var, xg.var((1, 3), unbiased=False), rtol=0, atol=1e-12)
    dout = torch.randn(B, L, D, generator=g, dtype=torch.float64)
    dmean = torch.randn(B, G, generator=g, dtype=torch.float64)
    dvar = torch.randn(B, G, generator=g, dtype=torch.float64)
    loss = (y * dout).sum() + (mean * dmean).sum() + (var * dvar).sum()
    wrt = [x, m.weight, m.bias] + ([pm, pv] if prior else [])
    grads = torch.autograd.grad(loss, wrt)
    io = {"x": x, "prev_count": pc, "prev_mean": pm, "prev_var": pv, "dout": dout, "dmean": dmean, "dvar": dvar}
    if mask is not None:
        io["padding_mask"] = mask.to(torch.int32)
    io.update({"out": y, "count": cnt, "mean": mean, "var": var, "grad.x": grads[0], "grad.weight": grads[1],
               "grad.bias": grads[2]})
    if prior:
        io["grad.prev_mean"], io["grad.prev_var"] = grads[3], grads[4]
    weights = {"norm." + n: t for n, t in m.state_dict().items()}
    name = "tsnorm_D%d_G%d_B%d_L%d%s%s" % (D, G, B, L, "_pad" if pad else "", "_prior" if prior else "")
    write_case(out, name, "tsnorm", {"dim": D, "groups": G, "eps": 1e-5, "batch": B, "seq_len": L}, weights, io,
               "TimestepNorm (grouped) forward from the module's prior or a given (count, mean, var), final state, "
               "gradients of sum(dout*y) + sum(dmean*mean) + sum(dvar*var) by autograd", commit)
    print("wrote", name)


def manual_rms_norm(input, normalized_shape, weight, eps):
    """apex.normalization.fused_layer_norm.manual_rms_norm (the branch FusedRMSNorm takes on the
    CPU), with the variance in the input's dtype instead of float32"""
    dims = tuple(i for i in range(-1, -len(normalized_shape) - 1, -1))
    variance = input.pow(2).mean(dims, keepdim=True)
    input = input * torch.rsqrt(variance + eps)
    return input if weight is None else weight * input


def load_layer(repo, cema64):
    """MovingAverageGatedAttention with the official FusedRMSNorm (its CPU branch), the float64
    CEMA, and nn.Linear for the model-parallel linears (world size 1: the same affine maps, the
    same [out, in] weight and bias names)"""
    apex = types.ModuleType("apex")
    apex.__path__ = []
    norm = types.ModuleType("apex.normalization")
    norm.__path__ = []
    fln = types.ModuleType("apex.normalization.fused_layer_norm")
    fln.manual_rms_norm = manual_rms_norm
    for n in ("fused_layer_norm_affine", "fused_layer_norm", "fused_rms_norm_affine", "fused_rms_norm"):
        setattr(fln, n, stub)
    sys.modules.update({"apex": apex, "apex.normalization": norm, "apex.normalization.fused_layer_norm": fln,
                        "fused_layer_norm_cuda": types.ModuleType("fused_layer_norm_cuda")})
    load_module("megalodon.modules.layer_norm", official_source(repo, "megalodon/modules/layer_norm.py"),
                "megalodon.modules")
    mp = sys.modules["megalodon.modules.model_parallel"]
    mp.ColumnParallelLinear = lambda i, o, bias=True, **_k: torch.nn.Linear(i, o, bias=bias)
    mp.RowParallelLinear = lambda i, o, bias=True, **_k: torch.nn.Linear(i, o, bias=bias)
    mp.gather_from_model_parallel_region = lambda x, dim=-1: x
    cp = sys.modules["megalodon.modules.chunk_parallel"]
    cp.should_send_to_next = lambda: False
    cp.should_recv_from_prev = lambda: False
    sys.modules["megalodon.utils"].get_init_fn = lambda mode: None
    sys.modules["megalodon.modules.complex_exponential_moving_average"] = cema64
    msrc = official_source(repo, "megalodon/modules/moving_average_gated_attention.py")
    sm = "F.softmax(scores, dim=-1, dtype=torch.float32)"
    return load_module("megalodon.modules.moving_average_gated_attention_layer",
                       msrc.replace(sm, sm.replace("float32", "float64")), "megalodon.modules")


def layer_case(mega, rope, out, commit, D, Z, E, H, N, G, C, B, L, seed):
    g = torch.Generator().manual_seed(seed)
    m = mega.MovingAverageGatedAttention(D, Z, E, N, H, chunk_size=C, efficient_attn=None, norm_num_groups=G,
                                         norm_eps=1e-5).double()
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.4)
    x = (torch.randn(B, L, D, generator=g, dtype=torch.float64) + 0.2).requires_grad_(True)
    dout = torch.randn(B, L, D, generator=g, dtype=torch.float64)
    rot = rope.RotaryEmbedding(Z // H, C, base=10000)
    ms = min(L, C)
    mask = torch.triu(torch.full((1, 1, ms, ms), float("-inf"), dtype=torch.float64), diagonal=1)
    y, _ = m(x, rot.get_freqs_cis(0, ms), mask, None)
    names = [n for n, _ in m.named_parameters()]
    grads = torch.autograd.grad((y * dout).sum(), [x] + [p for _, p in m.named_parameters()])
    io = {"x": x, "dout": dout, "out": y, "dx": grads[0]}  # (grad.* are the parameters)
    for n, gr in zip(names, grads[1:]):
        io["grad." + n] = gr
    name = "layer_D%d_Z%d_E%d_H%d_N%d_G%d_C%d_B%d_L%d" % (D, Z, E, H, N, G, C, B, L)
    write_case(out, name, "layer", {"dim": D, "zdim": Z, "hdim": E, "heads": H, "ndim": N, "groups": G,
                                    "chunk_size": C, "eps": 1e-5, "rope_base": 10000, "batch": B, "seq_len": L},
               dict(m.state_dict()), io,
               "MovingAverageGatedAttention (no dropout, no cache) from the timestep norm's prior; gradients of "
               "sum(dout * out) by autograd for the input and every parameter", commit)
    print("wrote", name)


def load_nffn(repo):
    """NormalizedFeedForwardNetwork with the official FusedLayerNorm (its CPU branch, F.layer_norm with
    weight + 1) and nn.Linear for the model-parallel linears (after load_layer set them up)"""
    return load_module("megalodon.modules.normalized_feedforward_network",
                       official_source(repo, "megalodon/modules/normalized_feedforward_network.py"), "megalodon.modules")


def model_case(mega, rope, nffn, tsn, out, commit, V, NL, D, Z, E, H, N, G, C, F, swiglu, rescale, B, L, seed):
    """The whole model: official MegaBlock.forward (y = mega(x); out = nffn(y, x), the two-hop residual),
    Mega.forward (embedding scale sqrt(D), the chunk's causal mask and rotary frequencies) and
    MegaOutputLayer.forward (final TimestepNorm, the tied output projection), transcribed from
    model/mega.py (which needs fairscale and process groups) over the official modules; the loss is
    the mean cross-entropy of the targets, its gradients by autograd. Written under the library's
    names (decoder.layers.<i>.mega.*, .nffn.*, decoder.final_norm.norm.*, decoder.embed_tokens.weight)."""
    g = torch.Generator().manual_seed(seed)
    layers = [mega.MovingAverageGatedAttention(D, Z, E, N, H, chunk_size=C, efficient_attn=None, norm_num_groups=G,
                                               norm_eps=1e-5).double() for _ in range(NL)]
    ffns = [nffn.NormalizedFeedForwardNetwork(D, F, swiglu=swiglu, norm_eps=1e-5,
                                              rescale=0.1 * 0.5 ** i if rescale else None).double() for i in range(NL)]
    fnorm = tsn.TimestepNorm(D, G, eps=1e-5).double()
    emb = torch.nn.Parameter(torch.zeros(V, D, dtype=torch.float64))
    named = [("decoder.embed_tokens.weight", emb)]
    for i in range(NL):
        named += [("decoder.layers.%d.mega.%s" % (i, n), p) for n, p in layers[i].named_parameters()]
        named += [("decoder.layers.%d.nffn.%s" % (i, n), p) for n, p in ffns[i].named_parameters()]
    named += [("decoder.final_norm.norm." + n, p) for n, p in fnorm.named_parameters()]
    with torch.no_grad():
        for _, p in named:
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.4)
    tok = torch.randint(0, V, (B, L), generator=g)
    tgt = torch.randint(0, V, (B, L), generator=g)
    rot = rope.RotaryEmbedding(Z // H, C, base=10000)
    ms = min(L, C)
    mask = torch.triu(torch.full((1, 1, ms, ms), float("-inf"), dtype=torch.float64), diagonal=1)
    x = emb[tok] * math.sqrt(D)
    for m, f in zip(layers, ffns):
        y, _ = m(x, rot.get_freqs_cis(0, ms), mask, None)
        x = f(y, x)
    x, _, _, _ = fnorm(x, None, None, None)
    logits = x @ emb.t()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    grads = torch.autograd.grad(loss, [p for _, p in named])
    weights = {n: p for n, p in named}
    for i in range(NL):
        weights.update({"decoder.layers.%d.mega.%s" % (i, n): b for n, b in layers[i].named_buffers()})
    weights.update({"decoder.final_norm.norm." + n: b for n, b in fnorm.named_buffers()})
    io = {"tokens": tok.double(), "targets": tgt.double(), "out": logits, "loss": loss.reshape(1)}
    for (n, _), gr in zip(named, grads):
        io["grad." + n] = gr
    name = "model_V%d_L%d_D%d_C%d_B%d_T%d%s" % (V, NL, D, C, B, L, "_swiglu" if swiglu else "")
    write_case(out, name, "model", {"vocab": V, "layers": NL, "dim": D, "zdim": Z, "hdim": E, "heads": H, "ndim": N,
                                    "groups": G, "chunk_size": C, "ffn_dim": F, "swiglu": int(swiglu),
                                    "rescale": int(rescale), "batch": B, "seq_len": L},
               weights, io, "Megalodon model (two blocks, scaled embedding, final timestep norm, tied head) from "
               "the official modules; logits, the mean cross-entropy and its gradients by autograd", commit)
    print("wrote", name)


def attn_case(mods, out, commit, H, Z, E, C, B, L, seed):
    mega, rope = mods
    g = torch.Generator().manual_seed(seed)
    inner = mega._InnerAttention(Z, E, H, C, 0.0, None)
    rot = mega_rope = rope.RotaryEmbedding(Z, C, base=10000)
    q = (torch.randn(B, L, H * Z, generator=g, dtype=torch.float64) * 0.8).requires_grad_(True)
    k = (torch.randn(B, L, H * Z, generator=g, dtype=torch.float64) * 0.8).requires_grad_(True)
    v = torch.randn(B, L, H * E, generator=g, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(B, L, H * E, generator=g, dtype=torch.float64)
    # as Mega.forward builds them (model/mega.py): the causal mask of one chunk, rotary positions 0..
    ms = min(L, C)
    mask = torch.triu(torch.full((1, 1, ms, ms), float("-inf"), dtype=torch.float64), diagonal=1)
    y, _ = inner(q, k, v, mask, rot.get_freqs_cis(0, ms), None)
    gq, gk, gv = torch.autograd.grad((y * dout).sum(), [q, k, v])
    # decoding token by token through the official cache (keys and values of the current chunk)
    cache = (torch.zeros(B, 0, H, Z, dtype=torch.float64), torch.zeros(B, 0, H, E, dtype=torch.float64), 0)
    outs = []
    with torch.no_grad():
        for t in range(L):
            n = cache[2]
            m1 = torch.zeros(1, 1, 1, n + 1, dtype=torch.float64)
            o, cache = inner(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], m1, rot.get_freqs_cis(n, n + 1), cache)
            outs.append(o)
    dec = torch.cat(outs, 1)
    assert torch.allclose(dec, y, rtol=0, atol=1e-12), "official decode != official forward"
    del mega_rope
    io = {"q": q, "k": k, "v": v, "dout": dout, "out": y, "decode.out": dec, "grad.q": gq, "grad.k": gk, "grad.v": gv}
    name = "attn_H%d_Z%d_E%d_C%d_B%d_L%d" % (H, Z, E, C, B, L)
    write_case(out, name, "attn", {"heads": H, "z_head_dim": Z, "v_head_dim": E, "chunk_size": C, "rope_base": 10000,
                                   "batch": B, "seq_len": L}, {}, io,
               "_InnerAttention (efficient_attn None) with the model's mask and rotary frequencies; decode through "
               "the official cache token by token; gradients of sum(dout * out) by autograd", commit)
    print("wrote", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default="/work/.mirror/XuezheMax+megalodon/repo")
    ap.add_argument("--out", default="tests/fixtures/megalodon")
    a = ap.parse_args()
    commit = subprocess.run(["git", "--git-dir", a.repo, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    cema_mod, cema64_mod, tsn_mod, attn_mods = load_official(a.repo)
    cema_case(cema64_mod, a.out, commit, D=5, N=4, B=2, L=11, seed=1)
    cema_case(cema64_mod, a.out, commit, D=18, N=3, B=1, L=40, seed=2)  # L > 32: fftconv pads to 2 * 64
    cema_case(cema_mod, a.out, commit, D=5, N=4, B=2, L=11, seed=1, f32coef=True)
    tsnorm_case(tsn_mod, a.out, commit, D=8, G=4, B=2, L=9, seed=3, pad=True, prior=True)
    tsnorm_case(tsn_mod, a.out, commit, D=6, G=1, B=2, L=7, seed=4, pad=False, prior=False)
    tsnorm_case(tsn_mod, a.out, commit, D=6, G=3, B=3, L=6, seed=5, pad=True, prior=True)
    attn_case(attn_mods, a.out, commit, H=2, Z=4, E=3, C=4, B=2, L=12, seed=6)   # three chunks
    attn_case(attn_mods, a.out, commit, H=1, Z=6, E=5, C=16, B=1, L=10, seed=7)  # shorter than a chunk
    layer = load_layer(a.repo, cema64_mod)
    layer_case(layer, attn_mods[1], a.out, commit, D=8, Z=8, E=6, H=2, N=3, G=4, C=4, B=2, L=8, seed=8)
    nffn = load_nffn(a.repo)
    model_case(layer, attn_mods[1], nffn, tsn_mod, a.out, commit, V=11, NL=2, D=8, Z=4, E=6, H=2, N=2, G=2, C=4, F=10,
               swiglu=True, rescale=True, B=2, L=12, seed=9)  # three chunks
    model_case(layer, attn_mods[1], nffn, tsn_mod, a.out, commit, V=7, NL=2, D=6, Z=4, E=4, H=1, N=3, G=3, C=8, F=6,
               swiglu=False, rescale=False, B=1, L=5, seed=10)  # shorter than a chunk


if __name__ == "__main__":
    main()
