#!/usr/bin/python3
"""The one writer of fixture cases, shared by the reference generators: gen_fixtures.py (Mega
layers, language models, classifiers into tests/fixtures/generated) and ref_attn.py, ref_aft.py,
ref_abc.py (the other token mixers, into tests/fixtures/mixers). Each generator keeps its own
reference modules, case list and notes, and describes itself with a Reference; this module makes
the weights and inputs, runs the self-checks every case passes before it is written, writes it
and provides the command line.

A case is a directory <out>/<name>/ in the format of the official cases (tests/fixtures/official
and its README):
  * case.json: kind, config, dtype, batch, seq_len, seed, generator, notes, noise_gradients,
    tensors ({name: [dtype, shape]}), torch_version;
  * weights.safetensors: the state dict in the case dtype (integer buffers int64), __metadata__
    config = json.dumps(config, sort_keys=True);
  * io.safetensors: the inputs first (x, padding_mask, dout / tokens, targets / tokens or values,
    lengths, targets), then out or logits, loss, hidden.*, decode.*, eval.*, buffer_after.*
    (batchnorm) and grad.*; __metadata__ case, kind, dtype.

Self-checks (a case that fails one is not written):
  * the float32 results against a float64 rerun of the same weights and inputs (FP32_VS_F64 of
    each tensor's largest magnitude). Gradients at most NOISE_REL of the largest gradient in
    float64 are noise gradients (exactly zero in exact arithmetic): they must be the expected
    ones, since an unexpected one is a degenerate draw (e.g. a dead relu2 row);
  * a directional finite difference (float64, central, step 1e-6) of the loss over every
    parameter and the input against autograd (FD_TOL);
  * causal cases: the eval-mode step one position at a time and in multi-token pieces equals the
    full eval-mode forward (STREAM_TOL);
  * the generator's own checks (Reference.extra_checks).

Deterministic: the weights are the reference initialisation (torch.manual_seed(seed)) moved away
from trivial values by a torch.Generator seeded with seed * 7 + 3, which then draws the inputs;
torch runs single-threaded. Two runs write byte-identical files.

Always run with /usr/bin/python3 (torch 1.13 and numpy; see README.md).
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import check_shared
import mega_ref
import st

FP32_VS_F64 = 5e-5
FD_TOL = 1e-6
STREAM_TOL = 1e-12
NOISE_REL = 1e-11
MAX_CASE_BYTES = 100 * 1024
DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.int32): "int32",
               np.dtype(np.int64): "int64", np.dtype(np.uint8): "uint8"}


class Reference:
    """What a generator supplies to write its cases.

    generator     the "generator" string of case.json
    model         model(kind, cfg) -> torch module (kind "layer", "lm" or "cls")
    rules         the perturbation rules of its parameters (see perturb)
    notes         notes(spec, noise) -> the case.json notes
    default_out   the default --out directory
    expected_noise(spec) -> the expected noise gradients (default: spec["expected_noise"] or none)
    splits(spec)  -> the multi-token streaming splits, lists of piece bounds (default: 0 5 6 13 L)
    prepare(model, spec)        after the perturbation (e.g. the LM's padding row)
    extra_checks(spec, W, io)   -> {name: error} of further self-checks (raise on failure)
    self_check()  -> a line to print before the cases are generated
    """

    def __init__(self, generator, model, rules, notes, default_out, expected_noise=None, splits=None, prepare=None,
                 extra_checks=None, self_check=None):
        self.generator, self.model, self.rules, self.notes = generator, model, rules, notes
        self.default_out = default_out
        self.expected_noise = expected_noise or (lambda spec: spec.get("expected_noise", []))
        self.splits = splits or (lambda spec: [[0, 5, 6, 13, spec["L"]]])
        self.prepare, self.extra_checks, self.self_check = prepare, extra_checks, self_check


# ----------------------------------------------------------------------------------------------
# perturbation: rules (test(name, leaf, p), value(p, leaf, draw)), the first accepting rule wins;
# value returns the new value, or None to keep the initial one (drawing nothing)


class Draw:
    """float64 draws from the case's generator, of a parameter's shape"""

    def __init__(self, gen):
        self.gen = gen

    def n(self, p):
        return torch.randn(p.shape, generator=self.gen, dtype=torch.float64)

    def u(self, p):
        return torch.rand(p.shape, generator=self.gen, dtype=torch.float64)


def ends(suffix):
    return lambda name, leaf, p: name.endswith(suffix)


def leaf_is(*leaves):
    return lambda name, leaf, p: leaf in leaves


def _norm_value(p, leaf, d):
    if leaf == "weight":
        return 1 + 0.2 * d.n(p)
    return 0.1 * d.n(p) if leaf == "bias" else 1 + 0.15 * d.n(p)


# the parameters of a normalisation module (its name ends with "norm": norm.norm.*, sgu_norm.*)
NORM = (lambda name, leaf, p: name.rsplit(".", 2)[-2].endswith("norm") and leaf in ("weight", "bias", "scalar"),
        _norm_value)
# matrices N(0, 1/fan_in); the ref_attn / ref_aft cases were drawn with the division form, whose
# rounding differs: each generator keeps its own so that its committed cases stay reproducible
MATRIX = (lambda name, leaf, p: leaf == "weight" and p.dim() == 2, lambda p, leaf, d: d.n(p) * p.shape[1] ** -0.5)
MATRIX_DIV = (MATRIX[0], lambda p, leaf, d: d.n(p) / math.sqrt(p.shape[1]))
BIAS = (leaf_is("bias"), lambda p, leaf, d: 0.1 * d.n(p))


@torch.no_grad()
def perturb(model, gen, rules):
    """Move every parameter of a float64 model away from its trivial initial value (0, 1, std
    0.02) with the rules; a parameter without a rule is an error. Batchnorm running statistics:
    mean N(0, 0.2), variance U(0.5, 1.5), num_batches_tracked 5."""
    d = Draw(gen)
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        rule = next((r for r in rules if r[0](name, leaf, p)), None)
        if rule is None:
            raise KeyError(f"no perturbation rule for {name}")
        v = rule[1](p, leaf, d)
        if v is not None:
            p.copy_(v)
    for name, b in model.named_buffers():
        if name.endswith("running_mean"):
            b.copy_(0.2 * d.n(b))
        elif name.endswith("running_var"):
            b.copy_(0.5 + d.u(b))
        elif name.endswith("num_batches_tracked"):
            b.fill_(5)


# ----------------------------------------------------------------------------------------------
# weights and inputs


def f64(d):
    return {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in d.items()}


def make_case_data(ref, spec):
    """(W: the state dict as numpy in the case dtype, integer buffers int64; io: the inputs)"""
    kind, cfg, L, B = spec.get("kind", "layer"), spec["config"], spec["L"], 2
    np_dt = np.float32 if spec["dtype"] == "float32" else np.float64
    torch.manual_seed(spec["seed"])
    model = ref.model(kind, cfg).double()
    gen = torch.Generator().manual_seed(spec["seed"] * 7 + 3)
    perturb(model, gen, ref.rules)
    if ref.prepare:
        ref.prepare(model, spec)
    W = {}
    for k, v in model.state_dict().items():
        a = v.numpy()
        W[k] = a.astype(np_dt) if a.dtype.kind == "f" else a.astype(np.int64)
    io, lengths = {}, spec.get("lengths")

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).numpy().astype(np_dt)

    def tokens(V, pidx):
        allowed = np.array([t for t in range(V) if t != pidx])
        return allowed[torch.randint(len(allowed), (B, L), generator=gen).numpy()]

    if kind == "layer":
        io["x"] = randn(B, L, cfg["embed_dim"])
        if lengths is not None:
            io["padding_mask"] = (np.arange(L)[None, :] >= np.array(lengths)[:, None]).astype(np.uint8)
        io["dout"] = randn(B, L, cfg["embed_dim"])
    elif kind == "lm":
        io["tokens"] = tokens(cfg["vocab_size"], cfg.get("padding_idx")).astype(np.int32)
        io["targets"] = tokens(cfg["vocab_size"], cfg.get("padding_idx")).astype(np.int32)
    else:
        lengths = lengths or [L] * B
        if cfg["embedding_type"] == "sparse":
            tok = tokens(cfg["vocab_size"], cfg["padding_idx"])
            tok[np.arange(L)[None, :] >= np.array(lengths)[:, None]] = cfg["padding_idx"]
            io["tokens"] = tok.astype(np.int32)
        else:
            io["values"] = randn(B, L)
        io["lengths"] = np.array(lengths, dtype=np.int32)
        io["targets"] = torch.randint(cfg["sentence_class_num"], (B,), generator=gen).numpy().astype(np.int32)
    return W, io


# ----------------------------------------------------------------------------------------------
# checks


def rel_err(a, b):
    a, b = a.double(), b.double()
    scale = b.abs().max().item() if b.numel() else 0.0
    d = (a - b).abs().max().item() if b.numel() else 0.0
    return d / scale if scale > 0 else d


def float64_model(ref, kind, cfg, W):
    torch.manual_seed(0)
    m = ref.model(kind, cfg).double()
    mega_ref.load_weights(m, f64(W))
    return m


def finite_difference_check(ref, spec, W, io):
    """Directional derivative of the loss (float64) against autograd, over all parameters (and x /
    values); returns (relative error, numeric, analytic)."""
    kind, cfg = spec.get("kind", "layer"), spec["config"]
    m = float64_model(ref, kind, cfg, W).train()
    gen = torch.Generator().manual_seed(spec["seed"] + 99)
    params = list(m.parameters())
    dirs = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
    if kind == "layer":
        inp = torch.from_numpy(io["x"]).double().requires_grad_(True)
        pad = torch.from_numpy(io["padding_mask"]).bool() if "padding_mask" in io else None
        dout = torch.from_numpy(io["dout"]).double()
    elif kind == "lm":
        inp, tgt = torch.from_numpy(io["tokens"]).long(), torch.from_numpy(io["targets"]).long()
    else:
        inp = (torch.from_numpy(io["tokens"]).long() if "tokens" in io
               else torch.from_numpy(io["values"]).double().requires_grad_(True))
        tgt, lengths = torch.from_numpy(io["targets"]).long(), torch.from_numpy(io["lengths"]).long()
    dx_dir = torch.randn(inp.shape, generator=gen, dtype=torch.float64) if inp.is_floating_point() else None

    def loss_fn(x):
        if kind == "layer":
            return (m(x, pad) * dout).sum()
        if kind == "lm":
            logits = m(x)[0]
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1))
        return F.cross_entropy(m(x, lengths)[0], tgt)

    loss_fn(inp).backward()
    analytic = sum((p.grad * d).sum() for p, d in zip(params, dirs) if p.grad is not None).item()
    if dx_dir is not None:
        analytic += (inp.grad * dx_dir).sum().item()
    eps, vals = 1e-6, []
    with torch.no_grad():
        for sgn in (1.0, -1.0):
            for p, d in zip(params, dirs):
                p.add_(sgn * eps * d)
            vals.append(loss_fn(inp.detach() + sgn * eps * dx_dir if dx_dir is not None else inp).item())
            for p, d in zip(params, dirs):
                p.sub_(sgn * eps * d)
    numeric = (vals[0] - vals[1]) / (2 * eps)
    return abs(numeric - analytic) / max(abs(analytic), 1e-300), numeric, analytic


def streaming_check(ref, spec, W, io):
    """Eval-mode streaming, one position per call and in the pieces of ref.splits(spec), against
    the eval-mode full forward, float64; returns the worst relative difference."""
    kind, cfg = spec.get("kind", "layer"), spec["config"]
    m = float64_model(ref, kind, cfg, W).eval()
    inp = torch.from_numpy(io["x"]).double() if kind == "layer" else torch.from_numpy(io["tokens"]).long()
    L, worst = inp.size(1), 0.0
    with torch.no_grad():
        full = m(inp) if kind == "layer" else m(inp)[0]
        for bounds in [list(range(L + 1))] + ref.splits(spec):
            state = {} if kind == "layer" else []
            got = torch.cat([m.step(inp[:, a:b], state) for a, b in zip(bounds[:-1], bounds[1:])], 1)
            worst = max(worst, rel_err(got, full))
    return worst


def layer_notes(spec, block):
    """the first notes of the ref_attn / ref_aft cases: the case's note, the block, the mode, the
    dtype, the loss"""
    return [
        spec["note"], block,
        "training mode, every dropout 0; weights are the reference initialisation perturbed away from trivial values",
        ("float64: every operation in float64" if spec["dtype"] == "float64"
         else "float32 (checked against a float64 rerun)"),
        "loss = sum(out * dout); dx and grad.* are its gradients",
    ]


def noise_note(noise):
    return "noise_gradients (exactly zero in exact arithmetic, stored values are rounding noise): " + ", ".join(noise)


def self_checks(ref, spec, W, io, ours, ref64, causal, decode):
    """the noise gradients and the self-checks; returns (noise, {check: error})"""
    name, kind = spec["name"], spec.get("kind", "layer")
    gmax = max(v.abs().max().item() for k, v in ref64.items() if k.startswith("grad."))
    noise = sorted(k[5:] for k, v in ref64.items()
                   if k.startswith("grad.") and v.abs().max().item() <= NOISE_REL * gmax)
    if noise != ref.expected_noise(spec):
        raise RuntimeError(f"{name}: zero gradients {noise}, expected {ref.expected_noise(spec)}")
    worst32, at = 0.0, ""
    if spec["dtype"] == "float32":
        for k, v in ours.items():
            if v.is_floating_point() and k[5:] not in noise and rel_err(v, ref64[k]) > worst32:
                worst32, at = rel_err(v, ref64[k]), k
        if worst32 > FP32_VS_F64:
            raise RuntimeError(f"{name}: float32 vs float64 {worst32:.2e} at {at}")
    fd, num, an = finite_difference_check(ref, spec, W, io)
    if fd > FD_TOL:
        raise RuntimeError(f"{name}: finite differences {num} vs autograd {an} ({fd:.1e})")
    checks = {"fp32_vs_fp64": worst32, "finite_diff": fd}
    if causal:
        checks["streaming_vs_full(eval)"] = streaming_check(ref, spec, W, io)
        if checks["streaming_vs_full(eval)"] > STREAM_TOL:
            raise RuntimeError(f"{name}: streaming mismatch {checks['streaming_vs_full(eval)']:.2e}")
    if decode and "padding_mask" not in io:  # (the decode runs without a mask)
        full = "out" if kind == "layer" else "logits"
        checks["decode_vs_out"] = rel_err(ours["decode." + full], ours[full])
    if ref.extra_checks:
        checks.update(ref.extra_checks(spec, W, io))
    return noise, checks


# ----------------------------------------------------------------------------------------------
# writing


def io_tensors(kind, io, ours, np_dt, batchnorm):
    """io.safetensors in the shared order: the inputs, the outputs, buffer_after.* (batchnorm), grad.*"""
    out = dict(io)
    if kind == "layer":
        order = ["out", "dx", "decode.out", "eval.out"]
    else:
        order = ["logits", "loss"] + [k for k in ours if k.startswith("hidden.")] + ["decode.logits", "eval.logits"]
    order += [k for k in ours if k.startswith("buffer_after.") and batchnorm]
    order += [k for k in ours if k.startswith("grad.")]
    for k in order:
        if k in ours:
            a = ours[k].cpu().numpy()
            out[k] = a.astype(np_dt) if a.dtype.kind == "f" else a.astype(np.int64)
    first = {"layer": ["x", "padding_mask", "dout"], "lm": ["tokens", "targets"],
             "cls": ["tokens", "values", "lengths", "targets"]}[kind]
    first = [k for k in first if k in io]
    return {k: out[k] for k in first + [k for k in out if k not in first]}


def write_case(ref, spec, out_dir, W, out, noise):
    """the three files of a case; returns its size in bytes"""
    kind, cfg, dtype = spec.get("kind", "layer"), spec["config"], spec["dtype"]
    cdir = os.path.join(out_dir, spec["name"])
    os.makedirs(cdir, exist_ok=True)
    st.save(os.path.join(cdir, "weights.safetensors"), W, {"config": json.dumps(cfg, sort_keys=True)})
    st.save(os.path.join(cdir, "io.safetensors"), out, {"case": spec["name"], "kind": kind, "dtype": dtype})
    case = {"kind": kind, "config": cfg, "dtype": dtype, "batch": 2, "seq_len": spec["L"], "seed": spec["seed"],
            "generator": ref.generator, "notes": ref.notes(spec, noise), "noise_gradients": noise,
            "tensors": {k: [DTYPE_NAMES[v.dtype], list(v.shape)] for k, v in out.items()},
            "torch_version": torch.__version__}
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(cdir, n)) for n in os.listdir(cdir))
    if size > MAX_CASE_BYTES:
        raise RuntimeError(f"{spec['name']}: {size} bytes > {MAX_CASE_BYTES}")
    return size


def generate(ref, spec, out_dir):
    """compute, check and write one case"""
    kind, cfg, dtype = spec.get("kind", "layer"), spec["config"], spec["dtype"]
    W, io = make_case_data(ref, spec)
    batchnorm = cfg.get("norm_type", cfg.get("normalization_type")) == "batchnorm"
    causal = kind == "lm" or (kind == "layer" and not cfg.get("bidirectional", False))
    want = dict(want_eval=batchnorm, want_decode=causal and not batchnorm, model=lambda c: ref.model(kind, c))
    ours = check_shared.run_reference(kind, cfg, check_shared.DTYPES[dtype], W, io, **want)
    ref64 = check_shared.run_reference(kind, cfg, torch.float64, f64(W), f64(io), **want)
    noise, checks = self_checks(ref, spec, W, io, ours, ref64, causal, want["want_decode"])
    out = io_tensors(kind, io, ours, np.float32 if dtype == "float32" else np.float64, batchnorm)
    size = write_case(ref, spec, out_dir, W, out, noise)
    cs = "  ".join(f"{k} {v:.1e}" for k, v in checks.items())
    print(f"{spec['name']:62s} {size / 1024:5.1f} KB  noise={noise}  {cs}")


def main(ref, cases, argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=ref.default_out)
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    specs = [s for s in cases if not args.case or s["name"] in args.case]
    if args.list:
        print("\n".join(s["name"] for s in specs))
        return 0
    if ref.self_check:
        print(ref.self_check())
    os.makedirs(args.out, exist_ok=True)
    for s in specs:
        generate(ref, s, args.out)
    return 0
