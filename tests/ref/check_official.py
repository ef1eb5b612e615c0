#!/usr/bin/python3
"""Optional cross-check of fixture cases against the OFFICIAL Mega modules (not part of the reference).

Usage: /usr/bin/python3 tests/ref/check_official.py [FIXTURES_DIR] [--repo GIT_DIR]

The official sources are read at run time from a git mirror of facebookresearch/mega (default
/work/.mirror/facebookresearch+mega/repo) into a temporary directory, with small stubs for the
fairseq modules they import but do not use (data.iterators, multihead_attention). Nothing from the
official code is copied into this repository.

Layer cases run the official MovingAverageGatedAttention + NormalizedFeedForwardNetwork, with the
official future mask for causal cases, the official incremental path for decode.out, and, for the
ragged extension, the official-wrapper recipe (zero-pad x to a multiple of the chunk, pad mask on the
tail, drop the tail). LM and cls cases run official layers glued together as described in the
fixture README (the glue itself is written here). float64 cases keep the official float32 casts
(FFT, softmax, rotary tables), so they agree only to about 1e-6; float32 cases to about 1e-5.
"""
import argparse
import atexit
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mega_ref  # noqa: E402  (only the torch gelu workaround and the config-name mapping)
import st  # noqa: E402

FILES = ["fairseq/incremental_decoding_utils.py", "fairseq/logging/meters.py", "fairseq/utils.py",
         "fairseq/modules/gelu.py", "fairseq/modules/fairseq_dropout.py", "fairseq/modules/layer_norm.py",
         "fairseq/modules/scale_norm.py", "fairseq/modules/root_mean_square_norm.py",
         "fairseq/modules/sequence_norm.py", "fairseq/modules/relative_positional_bias.py",
         "fairseq/modules/exponential_moving_average.py", "fairseq/modules/moving_average_gated_attention.py",
         "fairseq/modules/normalized_feedforward_network.py",
         "fairseq/modules/quant_noise.py", "fairseq/modules/adaptive_input.py", "fairseq/modules/adaptive_softmax.py"]
STUBS = {
    "fairseq/__init__.py": "",
    "fairseq/data/__init__.py": "",
    "fairseq/data/iterators.py": "",
    "fairseq/logging/__init__.py": "",
    "fairseq/modules/__init__.py": "from .gelu import gelu, gelu_accurate\n",
    "fairseq/modules/multihead_attention.py": "MultiheadAttention = None\n",
}


def import_official(repo):
    root = tempfile.mkdtemp(prefix="mega_official_")
    atexit.register(shutil.rmtree, root, True)
    for path, text in STUBS.items():
        os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
        open(os.path.join(root, path), "w").write(text)
    for path in FILES:
        src = subprocess.run(["git", "-C", repo, "show", "HEAD:" + path], check=True, capture_output=True).stdout
        open(os.path.join(root, path), "wb").write(src)
    sys.path.insert(0, root)
    from fairseq.modules.moving_average_gated_attention import MovingAverageGatedAttention
    from fairseq.modules.normalized_feedforward_network import NormalizedFeedForwardNetwork
    from fairseq.modules.sequence_norm import SequenceNorm
    import fairseq.utils as futils

    # torch 1.13 float32 gelu_backward bug: the backward on a contiguous gradient (see mega_ref.gelu)
    futils.gelu = lambda x: mega_ref.gelu(x.float()).type_as(x)
    return MovingAverageGatedAttention, NormalizedFeedForwardNetwork, SequenceNorm


class OffBlock(nn.Module):
    def __init__(self, O, cfg):
        super().__init__()
        MGA, NFFN, _ = O
        self.cfg = cfg
        self.mega_layer = MGA(cfg["embed_dim"], cfg["zdim"], cfg["hdim"], cfg["ndim"], activation=cfg["activation"],
                              attention_activation=cfg["attention_activation"], bidirectional=cfg["bidirectional"],
                              chunk_size=cfg["chunk_size"], truncation=cfg["truncation"], norm_type=cfg["norm_type"],
                              prenorm=cfg["prenorm"], rel_pos_bias=cfg["rel_pos_bias"],
                              max_positions=cfg["max_positions"])
        F_ = cfg["ffn_hidden_dim"]
        self.nffn = NFFN(cfg["embed_dim"], F_, activation=cfg["activation"], norm_type=cfg["norm_type"],
                         prenorm=cfg["prenorm"]) if F_ and F_ > 0 else None

    def future_mask(self, L, dtype):
        c = self.cfg["chunk_size"]
        dim = c if 0 < c < L else L
        if self.cfg["attention_activation"] == "softmax":
            return torch.triu(torch.full((dim, dim), float("-inf"), dtype=dtype), 1)
        return torch.tril(torch.ones(dim, dim, dtype=dtype), 0)

    def forward(self, x, pad):
        """x [L, B, D] (official layout), L a multiple of the chunk."""
        mask = None if self.cfg["bidirectional"] or x.size(0) == 1 else self.future_mask(x.size(0), x.dtype)
        x, _ = self.mega_layer(x, padding_mask=pad, attn_mask=mask)
        return x if self.nffn is None else self.nffn(x)

    def step(self, x, state):
        x, _ = self.mega_layer(x, padding_mask=None, incremental_state=state, attn_mask=None)
        return x if self.nffn is None else self.nffn(x)


def pad_to_chunk(x, pad, c):
    """[B, L, D] -> zero-padded to a multiple of c with the tail marked as padding."""
    B, L, _ = x.shape
    if not (0 < c < L and L % c):
        return x, pad
    e = -L % c
    pad = torch.zeros(B, L, dtype=torch.bool) if pad is None else pad
    return F.pad(x, (0, 0, 0, e)), F.pad(pad, (0, e), value=True)


def load(m, W, dtype):
    m.to(dtype)
    sd = {k: torch.from_numpy(v) for k, v in W.items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("_float_tensor")]
    if missing or unexpected:
        raise KeyError(f"missing {missing} unexpected {unexpected}")


def layer_case(O, case, W, io, dtype):
    cfg = case["config"]
    res = {}
    m = OffBlock(O, cfg)
    load(m, W, dtype)
    m.train()
    x = torch.from_numpy(io["x"]).requires_grad_(True)
    pad = torch.from_numpy(io["padding_mask"]).bool() if "padding_mask" in io else None
    L = x.size(1)
    xp, pp = pad_to_chunk(x, pad, cfg["chunk_size"])
    out = m(xp.transpose(0, 1), pp).transpose(0, 1)[:, :L]
    (out * torch.from_numpy(io["dout"])).sum().backward()
    res["out"], res["dx"] = out, x.grad
    for n, p in m.named_parameters():
        res["grad." + n] = p.grad
    for n, b in m.named_buffers():
        if "running" in n or "num_batches" in n:
            res["buffer_after." + n] = b
    if "eval.out" in io:
        m = OffBlock(O, cfg)
        load(m, W, dtype)
        m.eval()
        with torch.no_grad():
            xp, pp = pad_to_chunk(torch.from_numpy(io["x"]), pad, cfg["chunk_size"])
            res["eval.out"] = m(xp.transpose(0, 1), pp).transpose(0, 1)[:, :L]
    if "decode.out" in io:
        m = OffBlock(O, cfg)
        load(m, W, dtype)
        m.eval()
        state = {}
        xs = torch.from_numpy(io["x"]).transpose(0, 1)
        with torch.no_grad():
            res["decode.out"] = torch.cat([m.step(xs[t:t + 1], state) for t in range(L)], 0).transpose(0, 1)
    return res


def _sub(W, prefix):
    return {k[len(prefix):]: v for k, v in W.items() if k.startswith(prefix)}


def run_stack(layers, fn, x, pad):
    """the glue of the official wrappers (MegaDecoderNoCrossAttn / MegaLRAEncoder): pad rows zeroed,
    the layers time-major, the final norm, pad rows zeroed again; returns (x [L, B, D], the
    hidden states [B, L, D])"""
    if pad is not None:
        x = x * (~pad).unsqueeze(-1).to(x.dtype)
    hidden = [x]
    x = x.transpose(0, 1)
    for l in layers:
        x = l(x, pad)
        hidden.append(x.transpose(0, 1))
    if fn is not None:
        x = fn(x)
    if pad is not None:
        x = x * (~pad).t().unsqueeze(-1).to(x.dtype)
    return x, hidden


def lm_case(O, case, W, io, dtype):
    cfg = case["config"]
    lcfg = mega_ref.layer_kwargs(cfg, "decoder", False, "max_target_positions")
    D, c, pidx = cfg["decoder_embed_dim"], cfg["decoder_chunk_size"], cfg["padding_idx"]
    scale = 1.0 if cfg["no_scale_embedding"] else math.sqrt(D)

    def build():
        layers = nn.ModuleList([OffBlock(O, lcfg) for _ in range(cfg["decoder_layers"])])
        for i, l in enumerate(layers):
            load(l, _sub(W, f"decoder.layers.{i}."), dtype)
        fn = None
        if cfg["normalize_before"]:
            fn = O[2](cfg["normalization_type"], D, affine=not cfg["no_affine_final_norm"])
            load(fn, _sub(W, "decoder.final_norm."), dtype)
        emb = nn.Parameter(torch.from_numpy(W["decoder.embed_tokens.weight"]).clone())
        outw = emb if cfg["share_decoder_input_output_embed"] else \
            nn.Parameter(torch.from_numpy(W["decoder.output_projection.weight"]).clone())
        return layers, fn, emb, outw

    layers, fn, emb, outw = build()
    tok = torch.from_numpy(io["tokens"]).long()
    B, L = tok.shape
    t = F.pad(tok, (0, -L % c), value=pidx) if 0 < c < L and L % c else tok
    x = scale * F.embedding(t, emb, padding_idx=pidx)
    pad = t.eq(pidx) if pidx is not None else None
    if pad is not None and not pad.any():
        pad = None
    x, hidden = run_stack(layers, fn, x, pad)
    logits = x[:L].transpose(0, 1) @ outw.t()
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), torch.from_numpy(io["targets"]).long().reshape(-1))
    loss.backward()
    res = {"logits": logits, "loss": loss}
    for i, h in enumerate(hidden):
        res[f"hidden.{i}"] = h[:, :L]
    res["grad.decoder.embed_tokens.weight"] = emb.grad
    if not cfg["share_decoder_input_output_embed"]:
        res["grad.decoder.output_projection.weight"] = outw.grad
    for i, l in enumerate(layers):
        for n, p in l.named_parameters():
            res[f"grad.decoder.layers.{i}.{n}"] = p.grad
    if fn is not None:
        for n, p in fn.named_parameters():
            res[f"grad.decoder.final_norm.{n}"] = p.grad
    if "decode.logits" in io:
        layers, fn, emb, outw = build()
        for l in layers:
            l.eval()
        if fn is not None:
            fn.eval()
        states = [{} for _ in layers]
        outs = []
        with torch.no_grad():
            for s in range(L):
                x = (scale * F.embedding(tok[:, s:s + 1], emb)).transpose(0, 1)
                for l, stt in zip(layers, states):
                    x = l.step(x, stt)
                if fn is not None:
                    x = fn(x)
                outs.append(x.transpose(0, 1) @ outw.t())
        res["decode.logits"] = torch.cat(outs, 1)
    return res


def cls_case(O, case, W, io, dtype):
    cfg = case["config"]
    lcfg = mega_ref.layer_kwargs(cfg, "encoder", True, "max_positions")
    D, c, pidx = cfg["encoder_embed_dim"], cfg["encoder_chunk_size"], cfg["padding_idx"]
    import fairseq.utils as futils
    acts = {"gelu": futils.gelu, "relu": F.relu, "silu": F.silu}
    head_act = acts[cfg["classifier_activation_fn"]]

    def run(train):
        layers = nn.ModuleList([OffBlock(O, lcfg) for _ in range(cfg["encoder_layers"])])
        for i, l in enumerate(layers):
            load(l, _sub(W, f"encoder.encoder.layers.{i}."), dtype)
        fn = None
        if cfg["normalize_before"]:
            fn = O[2](cfg["normalization_type"], D)
            load(fn, _sub(W, "encoder.encoder.final_norm."), dtype)
        P = {k: nn.Parameter(torch.from_numpy(v).clone()) for k, v in W.items()
             if not k.startswith("encoder.encoder.layers.") and not k.startswith("encoder.encoder.final_norm.")}
        for mod in list(layers) + ([fn] if fn is not None else []):
            mod.train(train)
        L = io["lengths"].shape[0] and (io["tokens"].shape[1] if "tokens" in io else io["values"].shape[1])
        pad = None
        if "tokens" in io:
            t = torch.from_numpy(io["tokens"]).long()
            if 0 < c < L and L % c:
                t = F.pad(t, (0, -L % c), value=pidx)
            pad = t.eq(pidx)
            if not pad.any():
                pad = None
            x = F.embedding(t, P["encoder.encoder.embed_tokens.embed.weight"], padding_idx=pidx)
        else:
            v = torch.from_numpy(io["values"])
            x = v.unsqueeze(-1) * P["encoder.encoder.embed_tokens.weight"] + P["encoder.encoder.embed_tokens.bias"]
        x, hidden = run_stack(layers, fn, x, pad)
        if cfg["sen_rep_type"] == "mp":
            rep = x.sum(0) / torch.from_numpy(io["lengths"]).to(x.dtype).unsqueeze(1)
        else:
            rep = x[0]
        for j in range(cfg["classifier_layers"]):
            rep = head_act(rep @ P[f"classifier.{j}.0.weight"].t() + P[f"classifier.{j}.0.bias"])
        logits = rep @ P["sentence_projection_layer.weight"].t()
        return logits, hidden, layers, fn, P, L

    logits, hidden, layers, fn, P, L = run(True)
    loss = F.cross_entropy(logits, torch.from_numpy(io["targets"]).long())
    loss.backward()
    res = {"logits": logits, "loss": loss}
    for i, h in enumerate(hidden):
        res[f"hidden.{i}"] = h[:, :L]
    for k, p in P.items():
        res["grad." + k] = p.grad
    for i, l in enumerate(layers):
        for n, p in l.named_parameters():
            res[f"grad.encoder.encoder.layers.{i}.{n}"] = p.grad
        for n, b in l.named_buffers():
            if "running" in n or "num_batches" in n:
                res[f"buffer_after.encoder.encoder.layers.{i}.{n}"] = b
    if fn is not None:
        for n, p in fn.named_parameters():
            res[f"grad.encoder.encoder.final_norm.{n}"] = p.grad
        for n, b in fn.named_buffers():
            if "running" in n or "num_batches" in n:
                res[f"buffer_after.encoder.encoder.final_norm.{n}"] = b
    if "eval.logits" in io:
        with torch.no_grad():
            res["eval.logits"] = run(False)[0]
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="*", default=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")])
    ap.add_argument("--repo", default="/work/.mirror/facebookresearch+mega/repo")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.repo):
        print(f"official mirror {args.repo} not found: skipped")
        return 0
    torch.set_num_threads(1)
    O = import_official(args.repo)
    worst_all = 0.0
    for d in args.dirs:
        for name in sorted(os.listdir(d)):
            cdir = os.path.join(d, name)
            if not os.path.isfile(os.path.join(cdir, "case.json")):
                continue
            case = json.load(open(os.path.join(cdir, "case.json")))
            W, _ = st.load(os.path.join(cdir, "weights.safetensors"))
            io, _ = st.load(os.path.join(cdir, "io.safetensors"))
            dtype = torch.float32 if case["dtype"] == "float32" else torch.float64
            fn = {"layer": layer_case, "lm": lm_case, "cls": cls_case}[case["kind"]]
            res = fn(O, case, W, io, dtype)
            noise = {"grad." + n for n in case.get("noise_gradients", [])}
            gmax = max(np.abs(v).max() for k, v in io.items() if k.startswith("grad."))
            worst, wname, missing = 0.0, "", []
            for k, ref in io.items():
                if k in ("x", "padding_mask", "dout", "tokens", "targets", "values", "lengths"):
                    continue
                if k not in res or res[k] is None:
                    missing.append(k)
                    continue
                a = res[k].detach().double().numpy()
                diff = np.abs(a - ref.astype(np.float64)).max()
                e = diff / gmax if k in noise else diff / max(np.abs(ref).max(), 1e-300)
                if e > worst:
                    worst, wname = e, k
            worst_all = max(worst_all, worst)
            print(f"{name:62s} {case['dtype']:8s} worst {worst:.2e} ({wname})"
                  + (f"  NOT COMPUTED {missing}" if missing else ""))
    print(f"worst over all cases {worst_all:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
