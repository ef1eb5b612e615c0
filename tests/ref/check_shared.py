#!/usr/bin/python3
"""Recompute every stored tensor of a fixtures directory with the reference in mega_ref.py.

Usage: /usr/bin/python3 tests/ref/check_shared.py [FIXTURES_DIR ...] [-v] [--case NAME]

For every case: build the model from case.json, load weights.safetensors, run the training-mode
forward + backward of the case's loss and (where stored) the eval-mode forward, the streaming
decode and the batchnorm running statistics, and compare with io.safetensors. The error of a
tensor is max|ours - ref| / max|ref|. noise_gradients are compared with an absolute tolerance:
max|ours - ref| / (largest gradient magnitude of the case), which must be <= 1e-6.
Pass limits: 1e-5 (float32 cases), 1e-9 (float64 cases).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mega_ref  # noqa: E402
import st  # noqa: E402

LIMIT = {"float32": 1e-5, "float64": 1e-9}
NOISE_LIMIT = 1e-6
INPUTS = {"x", "padding_mask", "dout", "tokens", "targets", "values", "lengths"}
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _t(a, dtype=None):
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t if dtype is None else t.to(dtype)


def run_reference(kind, cfg, dtype, W, io, want_eval=False, want_decode=False, model=None, **build_kw):
    """Recompute a case from weights W and the input tensors in io (numpy dicts).

    Returns a dict name -> torch tensor with out/logits, loss, dx, hidden.*, grad.*, buffer_after.*
    and, if requested, eval.out/eval.logits and decode.out/decode.logits.
    model(cfg) builds the module (default: mega_ref.build(kind, cfg, **build_kw), e.g.
    ragged_mode='native' for layers); a layer module is called as m(x, padding_mask) and streams
    with m.step(x, state).
    """

    def fresh():
        torch.manual_seed(0)
        m = (model(cfg) if model else mega_ref.build(kind, cfg, **build_kw)).to(dtype)
        mega_ref.load_weights(m, W)
        return m

    ours = {}
    m = fresh().train()
    pad = inp = lengths = None
    if kind == "layer":
        x = _t(io["x"], dtype).requires_grad_(True)
        pad = _t(io["padding_mask"]).bool() if "padding_mask" in io else None
        out = m(x, pad)
        (out * _t(io["dout"], dtype)).sum().backward()
        ours["out"], ours["dx"] = out, x.grad
    else:
        if kind == "lm":
            inp = _t(io["tokens"]).long()
            logits, hidden = m(inp)
            V = logits.size(-1)
            loss = F.cross_entropy(logits.reshape(-1, V), _t(io["targets"]).long().reshape(-1))
        else:
            inp = _t(io["tokens"]).long() if "tokens" in io else _t(io["values"], dtype)
            lengths = _t(io["lengths"]).long()
            logits, hidden = m(inp, lengths)
            loss = F.cross_entropy(logits, _t(io["targets"]).long())
        loss.backward()
        ours["logits"], ours["loss"] = logits, loss
        for i, h in enumerate(hidden):
            ours[f"hidden.{i}"] = h
    for name, p in m.named_parameters():
        ours["grad." + name] = p.grad if p.grad is not None else torch.zeros_like(p)
    for name, b in m.named_buffers():
        if not name.endswith("_float_tensor"):
            ours["buffer_after." + name] = b

    # eval-mode full forward with the stored running statistics
    if want_eval:
        m = fresh().eval()
        with torch.no_grad():
            if kind == "layer":
                ours["eval.out"] = m(_t(io["x"], dtype), pad)
            elif kind == "lm":
                ours["eval.logits"] = m(inp)[0]
            else:
                ours["eval.logits"] = m(inp, lengths)[0]

    # streaming decode, one position per call, eval mode, no mask
    if want_decode:
        m = fresh().eval()
        with torch.no_grad():
            if kind == "layer":
                state = {}
                xs = _t(io["x"], dtype)
                ours["decode.out"] = torch.cat([m.step(xs[:, t:t + 1], state) for t in range(xs.size(1))], 1)
            elif kind == "lm":
                state = []
                ours["decode.logits"] = torch.cat([m.step(inp[:, t:t + 1], state) for t in range(inp.size(1))], 1)
            else:
                raise ValueError("no streaming form for the bidirectional classifier")
    return {k: v.detach() for k, v in ours.items()}


def compute(case_dir):
    """Return (case, ref io dict, ours dict) for one fixture directory."""
    case = json.load(open(os.path.join(case_dir, "case.json")))
    W, meta = st.load(os.path.join(case_dir, "weights.safetensors"))
    if meta is not None and "config" in meta and json.loads(meta["config"]) != case["config"]:
        raise ValueError(f"{case_dir}: weights metadata config differs from case.json")
    io, _ = st.load(os.path.join(case_dir, "io.safetensors"))
    ours = run_reference(case["kind"], case["config"], DTYPES[case["dtype"]], W, io,
                         want_eval=any(k.startswith("eval.") for k in io),
                         want_decode=any(k.startswith("decode.") for k in io))
    return case, io, ours


def compare(case, io, ours):
    """Return (rows, worst_rel, worst_noise, missing) with rows = [(name, err, is_noise)]."""
    noise = {"grad." + n for n in case.get("noise_gradients", [])}
    gmax = max(float(np.abs(v).max()) for k, v in io.items() if k.startswith("grad.") and k not in noise)
    rows, missing = [], []
    for name, ref in io.items():
        if name in INPUTS:
            continue
        if name not in ours:
            missing.append(name)
            continue
        mine = ours[name].cpu().numpy()
        if tuple(mine.shape) != tuple(ref.shape):
            rows.append((name, float("inf"), False))
            continue
        if ref.dtype.kind in "iu":
            rows.append((name, 0.0 if np.array_equal(mine.astype(np.int64), ref.astype(np.int64)) else float("inf"), False))
            continue
        diff = float(np.abs(mine.astype(np.float64) - ref.astype(np.float64)).max()) if ref.size else 0.0
        if name in noise:
            rows.append((name, diff / gmax, True))
        else:
            scale = float(np.abs(ref).max()) if ref.size else 0.0
            rows.append((name, diff / scale if scale > 0 else diff, False))
    worst = max([r for r in rows if not r[2]], key=lambda r: r[1])
    worst_noise = max([r for r in rows if r[2]], key=lambda r: r[1], default=None)
    return rows, worst, worst_noise, missing


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*", default=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                                                             "official")])
    ap.add_argument("-v", "--verbose", action="store_true", help="print every tensor's error")
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    ok_all = True
    for d in args.dirs:
        names = sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n, "case.json")))
        if args.case:
            names = [n for n in names if n in args.case]
        print(f"== {d}  ({len(names)} cases)")
        for n in names:
            case, io, ours = compute(os.path.join(d, n))
            rows, worst, worst_noise, missing = compare(case, io, ours)
            lim = LIMIT[case["dtype"]]
            ok = worst[1] <= lim and not missing and (worst_noise is None or worst_noise[1] <= NOISE_LIMIT)
            ok_all &= ok
            extra = ""
            if worst_noise is not None:
                extra = f"  noise {worst_noise[0]} {worst_noise[1]:.1e} (abs/gmax)"
            if missing:
                extra += f"  NOT RECOMPUTED: {missing}"
            print(f"{'ok  ' if ok else 'FAIL'} {n:62s} {case['dtype']:8s} {len(rows):3d} tensors  "
                  f"worst {worst[1]:.2e} ({worst[0]}){extra}")
            if args.verbose:
                for name, err, is_noise in rows:
                    print(f"       {err:.2e} {'(noise) ' if is_noise else ''}{name}")
    print("ALL OK" if ok_all else "SOME CASES FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
