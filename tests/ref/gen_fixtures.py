#!/usr/bin/python3
"""Generate additional Mega fixture cases with the own reference implementation (mega_ref.py).

Usage: /usr/bin/python3 tests/ref/gen_fixtures.py --out tests/fixtures/generated [--case NAME ...] [--list]

Output format = /work/shared/fixtures (see its README): <out>/<case>/{case.json, weights.safetensors,
io.safetensors}. Deterministic: every case has a fixed seed, torch runs single-threaded.

Before a case is written the generator checks it:
  * float32 result vs the same weights/inputs in float64 (the float32 tensors must be within
    FP32_VS_F64 of each tensor's largest magnitude; noise gradients are detected in float64);
  * directional finite differences (float64) of the loss w.r.t. all parameters (and x / values);
  * causal layers and LMs: streaming one token at a time == full forward, and chunk-at-a-time
    multi-token steps == full forward (eval mode, running statistics for batchnorm);
  * ragged cases: the padded route (stored) == the native shorter-last-chunk route, at every
    position, for outputs, dx and every gradient, in float64.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_shared  # noqa: E402
import mega_ref  # noqa: E402
import st  # noqa: E402

GENERATOR = "tests/ref/gen_fixtures.py (own PyTorch implementation from SPEC.md)"
FP32_VS_F64 = 5e-5
FD_TOL = 1e-6
NOISE_REL = 1e-11


# ----------------------------------------------------------------------------------------------
# case definitions


def layer_cfg(**kw):
    cfg = dict(embed_dim=16, zdim=8, hdim=32, ndim=4, ffn_hidden_dim=32, chunk_size=8,
               attention_activation="softmax", bidirectional=False, norm_type="layernorm", prenorm=True,
               rel_pos_bias="simple", max_positions=64, truncation=None, activation="silu")
    cfg.update(kw)
    return cfg


def lm_cfg(**kw):
    cfg = dict(decoder_layers=2, decoder_embed_dim=16, decoder_z_dim=8, decoder_hidden_dim=32, decoder_n_dim=4,
               decoder_ffn_embed_dim=32, decoder_chunk_size=8, attention_activation_fn="softmax",
               normalization_type="layernorm", normalize_before=True, rel_pos_bias="simple",
               truncation_length=None, max_target_positions=64, activation_fn="silu", no_scale_embedding=False,
               share_decoder_input_output_embed=False, no_affine_final_norm=False, vocab_size=32, padding_idx=None)
    cfg.update(kw)
    return cfg


def cls_cfg(**kw):
    cfg = dict(encoder_layers=2, encoder_embed_dim=16, encoder_z_dim=8, encoder_hidden_dim=32, encoder_n_dim=4,
               encoder_ffn_embed_dim=32, encoder_chunk_size=8, attention_activation_fn="softmax",
               normalization_type="layernorm", normalize_before=True, rel_pos_bias="simple",
               truncation_length=None, max_positions=64, activation_fn="silu", embedding_type="sparse",
               sen_rep_type="mp", classifier_layers=1, classifier_out_dim=24, classifier_activation_fn="gelu",
               sentence_class_num=3, vocab_size=20, padding_idx=1)
    cfg.update(kw)
    return cfg


CASES = [
    dict(name="layer_causal_relu2_rotary_layernorm_post_c8_ragged_L29", kind="layer", dtype="float32", seed=1101,
         L=29, config=layer_cfg(attention_activation="relu2", rel_pos_bias="rotary", prenorm=False),
         notes=["causal block, relu2 (divided by the causal key count i+1), rotary rel-pos, layernorm, post-norm, "
                "chunk 8 with L=29: ragged last chunk of 5 (EXTENSION, see below), streaming decode across chunk "
                "borders into the short last chunk"]),
    dict(name="layer_causal_softmax_rotary_rmsnorm_pre_c8_ragged_L21_f64", kind="layer", dtype="float64", seed=1102,
         L=21, config=layer_cfg(rel_pos_bias="rotary", norm_type="rmsnorm", hdim=24, zdim=6, ndim=3),
         notes=["causal block, softmax, rotary rel-pos (zdim 6), rmsnorm, pre-norm, chunk 8 with L=21: ragged last "
                "chunk of 5 (EXTENSION), hdim 24, ndim 3, float64, streaming decode"]),
    dict(name="layer_causal_laplace_rotary_layernorm_post_full_gelu_f64", kind="layer", dtype="float64", seed=1103,
         L=24, config=layer_cfg(attention_activation="laplace", rel_pos_bias="rotary", prenorm=False, chunk_size=-1,
                                max_positions=32, activation="gelu"),
         notes=["causal block, laplace (divided by the causal key count), rotary rel-pos, layernorm, post-norm, "
                "full attention (chunk -1, 24 x 24 causal mask), gelu activation (exact erf form), float64, "
                "streaming decode"]),
    dict(name="layer_causal_softmax_simple_batchnorm_pre_c8", kind="layer", dtype="float32", seed=1104,
         L=32, config=layer_cfg(norm_type="batchnorm"),
         notes=["causal block, softmax, simple rel-pos, batchnorm, pre-norm, chunk 8 (training-mode batch statistics "
                "over all B*L positions; eval.out with the running statistics; buffer_after.*)",
                "no decode.out: the incremental path only runs in eval mode, where batchnorm uses running statistics, "
                "so it cannot reproduce the training-mode out (the generator checked that streaming in eval mode "
                "reproduces eval.out)"]),
    dict(name="layer_causal_relu2_simple_scalenorm_pre_noffn_relu", kind="layer", dtype="float32", seed=1105,
         L=24, config=layer_cfg(attention_activation="relu2", norm_type="scalenorm", ffn_hidden_dim=0,
                                chunk_size=-1, max_positions=24, activation="relu"),
         notes=["causal block without NFFN (ffn_hidden_dim 0), relu2, simple rel-pos with max_positions = L = 24 "
                "(full attention uses the whole 2*24-1 table), scalenorm, pre-norm, relu activation (v, h), "
                "streaming decode"]),
    dict(name="layer_bidir_softmax_rotary_batchnorm_pre_c8_pad", kind="layer", dtype="float32", seed=1106,
         L=32, lengths=[32, 26], config=layer_cfg(bidirectional=True, rel_pos_bias="rotary", norm_type="batchnorm"),
         notes=["bidirectional block, softmax, rotary rel-pos, batchnorm, pre-norm, chunk 8, right padding (row 1: "
                "last chunk partly padding); batch statistics include padded positions; eval.out; buffer_after.*"]),
    dict(name="layer_bidir_relu2_rotary_scalenorm_pre_full_trunc5_f64_pad", kind="layer", dtype="float64",
         seed=1107, L=32, lengths=[23, 32],
         config=layer_cfg(bidirectional=True, attention_activation="relu2", rel_pos_bias="rotary",
                          norm_type="scalenorm", chunk_size=-1, max_positions=32, truncation=5, hdim=24,
                          ffn_hidden_dim=24),
         notes=["bidirectional block, relu2 (divided by the non-pad key count), rotary, scalenorm, pre-norm, full "
                "attention, EMA kernel truncated to 5 taps in both directions, padding in row 0, hdim = F = 24, float64"]),
    dict(name="layer_bidir_laplace_simple_layernorm_post_c8_ragged_L28_pad", kind="layer", dtype="float32",
         seed=1108, L=28, lengths=[28, 19],
         config=layer_cfg(bidirectional=True, attention_activation="laplace", prenorm=False),
         notes=["bidirectional block, laplace (divided by the non-pad key count, clamped to >= 1), simple rel-pos, "
                "layernorm, post-norm, chunk 8 with L=28: ragged last chunk of 4 (EXTENSION); right padding, "
                "row 1 (length 19): its short last chunk is entirely padding (weights 0, divisor clamped to 1)"]),
    dict(name="layer_bidir_softmax_simple_rmsnorm_post_c8_allpad_chunk", kind="layer", dtype="float32", seed=1109,
         L=32, lengths=[32, 13], config=layer_cfg(bidirectional=True, norm_type="rmsnorm", prenorm=False),
         notes=["bidirectional block, softmax, simple rel-pos, rmsnorm, post-norm, chunk 8; row 1 has length 13: "
                "chunk 1 is partly padding and chunks 2 and 3 are entirely padding, where the official rule "
                "'all keys of the chunk are padding -> nothing is masked' applies (those queries attend to all 8 "
                "keys of their chunk)"]),
    dict(name="layer_causal_softmax_simple_layernorm_pre_c8_trunc40", kind="layer", dtype="float32", seed=1110,
         L=32, config=layer_cfg(truncation=40),
         notes=["causal block, softmax, simple rel-pos, layernorm, pre-norm, chunk 8, EMA truncation 40 >= L = 32 "
                "(so the kernel uses min(40, L) = 32 taps and the untruncated incremental path is still exact), "
                "streaming decode"]),
    dict(name="lm_softmax_rotary_layernorm_pre_c8_L24_untied", kind="lm", dtype="float32", seed=1201, L=24,
         config=lm_cfg(rel_pos_bias="rotary", padding_idx=1, decoder_hidden_dim=24, decoder_ffn_embed_dim=24,
                       vocab_size=24),
         notes=["2-layer causal LM, softmax, rotary, layernorm, pre-norm + affine final norm, chunk 8 with L=24 "
                "(3 chunks), E=F=24, V=24, scaled embedding, untied output projection, padding_idx 1 (never used: its embedding "
                "row gets a zero gradient), decode.logits",
                "layernorm instead of the batchnorm first asked for: a batchnorm LM's streaming decode (eval mode, "
                "running statistics) cannot reproduce the training-mode logits"]),
    dict(name="lm_laplace_simple_rmsnorm_post_full_L20_f64", kind="lm", dtype="float64", seed=1202, L=20,
         config=lm_cfg(decoder_embed_dim=12, decoder_z_dim=6, decoder_hidden_dim=16, decoder_n_dim=3,
                       decoder_ffn_embed_dim=12, decoder_chunk_size=-1, attention_activation_fn="laplace",
                       normalization_type="rmsnorm", normalize_before=False, max_target_positions=32,
                       vocab_size=20),
         notes=["2-layer post-norm LM (no final norm), laplace, simple rel-pos (2*32-1 table), rmsnorm, full "
                "attention (chunk -1), D=12 Z=6 E=16 N=3 F=12, V=20, float64, decode.logits"]),
    dict(name="cls_sparse_pad_cls_head2_rmsnorm_post_c8_L30", kind="cls", dtype="float32", seed=1303, L=30,
         lengths=[30, 17],
         config=cls_cfg(normalization_type="rmsnorm", normalize_before=False, sen_rep_type="cls",
                        classifier_layers=2, classifier_out_dim=20, classifier_activation_fn="relu",
                        encoder_hidden_dim=24, encoder_ffn_embed_dim=24,
                        attention_activation_fn="relu2", rel_pos_bias="rotary", sentence_class_num=4),
         notes=["LRA classifier, token embedding, right padding (lengths 30/17), cls pooling (position 0), 2 hidden "
                "head layers (relu), relu2, rotary, rmsnorm post-norm (no final norm), chunk 8 with L=30 (encoder "
                "right-pads to 32 with padding_idx; row 1's last chunk is entirely padding)"]),
    dict(name="cls_sparse_pad_mp_batchnorm_pre_c8_L32", kind="cls", dtype="float32", seed=1302, L=32,
         lengths=[32, 21],
         config=cls_cfg(normalization_type="batchnorm", attention_activation_fn="laplace", truncation_length=16,
                        classifier_out_dim=16, encoder_hidden_dim=24, encoder_ffn_embed_dim=24),
         expected_noise=["encoder.encoder.layers.1.nffn.fc2.bias"],
         notes=["LRA classifier, token embedding, right padding (lengths 32/21), mean pooling, 1 hidden head layer "
                "(gelu), laplace, simple rel-pos, batchnorm pre-norm + batchnorm final norm (batch statistics "
                "include padded positions), chunk 8, EMA truncation 16 < L; eval.logits with the running "
                "statistics; buffer_after.*",
                "the last layer's nffn.fc2.bias adds a per-channel constant right before the training-mode "
                "batchnorm final norm, so its gradient is exactly 0 (noise_gradients)"]),
]

COMMON_NOTES = {
    "train": "training mode, every dropout 0; weights are the reference initialisation (torch.manual_seed(seed)) "
             "perturbed so that no parameter keeps a trivial value (0, 1, std 0.02); they are arbitrary test values",
    "float32": "float32: EMA convolution by FFT in float32, attention softmax in float32, rotary sin/cos tables in "
               "float32 (as the official code); the generator checked that float64 differs by < 5e-5 of each "
               "tensor's largest magnitude",
    "float64": "float64: every operation in float64 (the official float32 casts lifted, as in the shared cases)",
    "gelu32": "gelu: its float32 backward was computed on a contiguous copy of the incoming gradient (same kernel; "
              "works around a torch 1.13 CPU bug, see the shared README)",
    "layer_loss": "loss = sum(out * dout); dx and grad.* are its gradients",
    "causal": "causal: MegaDecoderLayer semantics (no cross-attention) with the official future mask: additive -inf "
              "above the diagonal for softmax, multiplicative lower-triangular ones for relu2/laplace, chunk x chunk "
              "per chunk (L x L for full attention)",
    "bidir": "bidirectional: MegaSentenceEncoderLayer semantics, bidirectional EMA (2D kernel rows), no causal mask",
    "decode": "decode.out: same x fed one position at a time through the incremental path (eval mode, no mask): "
              "untruncated EMA state carried, cached keys/values reset at every chunk border",
    "pad": "right padding: true lengths {lengths}; padding_mask 1 = pad; x is random also at padded positions and "
           "out/dx there are part of the reference",
    "batchnorm": "batchnorm: batch statistics over all B*L positions, padded ones included; buffer_after.* = "
                 "running statistics after this one training forward (momentum 0.1, unbiased variance); "
                 "eval.out/eval.logits use the running statistics stored in weights.safetensors",
    "ragged": "EXTENSION (not accepted by the official layer, which needs L % chunk == 0): ragged L={L}, chunk {c}. "
              "Semantics = what the official LM/LRA wrappers do with pad tokens: right-pad x with zeros to {Lp}, "
              "mark the added tail in the padding mask, run the layer, drop the tail. This equals a shorter last "
              "chunk of {r} (checked by the generator at every position in float64).",
    "lm_loss": "loss = mean cross-entropy over all B*L positions",
    "cls_loss": "loss = mean cross-entropy over the batch",
    "cls_tokens": "tokens are right-padded with padding_idx beyond lengths {lengths}",
    "cls_ragged": "ragged: L={L} is not a multiple of chunk {c}, the encoder right-pads the tokens with padding_idx "
                  "to {Lp} (official MegaLRAEncoder behaviour)",
}


# ----------------------------------------------------------------------------------------------
# weights and inputs


@torch.no_grad()
def perturb(model, gen):
    """Move every parameter away from its trivial initial value (float64 model)."""

    def randn(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * std

    for name, p in model.named_parameters():
        leaf = name.split(".")[-1]
        if ".move." in "." + name:
            if leaf in ("delta", "alpha"):
                p.copy_(randn(p.shape, 1.0))  # official init std 0.2
            elif leaf == "beta":
                p.add_(randn(p.shape, 0.05))
            # gamma / omega: official N(0, 1) kept
        elif "norm.norm." in name:
            if leaf == "weight":
                p.copy_(1.0 + randn(p.shape, 0.2))
            elif leaf == "bias":
                p.copy_(randn(p.shape, 0.1))
            elif leaf == "scalar":
                p.copy_(1.0 + randn(p.shape, 0.15))
        elif leaf == "rel_pos_bias" or name.endswith("rel_pos_bias.alpha") or name.endswith("rel_pos_bias.beta"):
            p.copy_(randn(p.shape, 0.3))
        elif name.endswith("mega_layer.gamma"):
            p.copy_(randn(p.shape, 1.0))
        elif name.endswith("mega_layer.beta"):
            p.copy_(randn(p.shape, 0.3))
        elif "embed_tokens" in name:
            if name.endswith("embed_tokens.bias"):
                p.add_(randn(p.shape, 0.1))
            # token tables: official N(0, D^-1/2); real-number weight N(0, 1): kept
        elif leaf == "weight" and p.dim() == 2:
            p.copy_(randn(p.shape, p.shape[1] ** -0.5))
        elif leaf == "bias":
            p.copy_(randn(p.shape, 0.1))
        else:
            raise KeyError(f"no perturbation rule for {name}")
    for name, b in model.named_buffers():
        if name.endswith("running_mean"):
            b.copy_(randn(b.shape, 0.2))
        elif name.endswith("running_var"):
            b.copy_(0.5 + torch.rand(b.shape, generator=gen, dtype=torch.float64))
        elif name.endswith("num_batches_tracked"):
            b.fill_(5)


def make_case_data(spec):
    """Return (W float64/int numpy dict in state_dict order, inputs numpy dict in case dtype)."""
    kind, cfg, L, B = spec["kind"], spec["config"], spec["L"], 2
    np_dt = np.float32 if spec["dtype"] == "float32" else np.float64
    torch.manual_seed(spec["seed"])
    model = mega_ref.build(kind, cfg).double()
    gen = torch.Generator().manual_seed(spec["seed"] * 7 + 3)
    perturb(model, gen)
    if kind == "lm" and cfg.get("padding_idx") is not None:
        with torch.no_grad():
            model.decoder.embed_tokens.weight[cfg["padding_idx"]].zero_()  # official LM Embedding init
    W = {}
    for k, v in model.state_dict().items():
        a = v.numpy()
        W[k] = a.astype(np_dt) if a.dtype.kind == "f" else a.astype(np.int64)
    io = {}
    lengths = spec.get("lengths")
    if kind == "layer":
        D = cfg["embed_dim"]
        io["x"] = torch.randn(B, L, D, generator=gen, dtype=torch.float64).numpy().astype(np_dt)
        if lengths is not None:
            io["padding_mask"] = (np.arange(L)[None, :] >= np.array(lengths)[:, None]).astype(np.uint8)
        io["dout"] = torch.randn(B, L, D, generator=gen, dtype=torch.float64).numpy().astype(np_dt)
    elif kind == "lm":
        V, pidx = cfg["vocab_size"], cfg.get("padding_idx")
        allowed = np.array([t for t in range(V) if t != pidx])
        io["tokens"] = allowed[torch.randint(len(allowed), (B, L), generator=gen).numpy()].astype(np.int32)
        io["targets"] = allowed[torch.randint(len(allowed), (B, L), generator=gen).numpy()].astype(np.int32)
    else:
        lengths = lengths or [L] * B
        if cfg["embedding_type"] == "sparse":
            V, pidx = cfg["vocab_size"], cfg["padding_idx"]
            allowed = np.array([t for t in range(V) if t != pidx])
            tok = allowed[torch.randint(len(allowed), (B, L), generator=gen).numpy()]
            tok[np.arange(L)[None, :] >= np.array(lengths)[:, None]] = pidx
            io["tokens"] = tok.astype(np.int32)
        else:
            io["values"] = torch.randn(B, L, generator=gen, dtype=torch.float64).numpy().astype(np_dt)
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


def finite_difference_check(kind, cfg, W, io, seed):
    """Directional derivative of the loss (float64) vs autograd, all parameters (+ x / values)."""
    W64 = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in W.items()}
    gen = torch.Generator().manual_seed(seed + 99)
    torch.manual_seed(0)
    m = mega_ref.build(kind, cfg).double()
    mega_ref.load_weights(m, W64)
    m.train()
    params = [p for p in m.parameters()]
    dirs = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
    if kind == "lm":
        inp = torch.from_numpy(io["tokens"]).long()
        tgt = torch.from_numpy(io["targets"]).long()
    elif kind == "cls":
        inp = (torch.from_numpy(io["tokens"]).long() if "tokens" in io
               else torch.from_numpy(io["values"]).double().requires_grad_(True))
        tgt = torch.from_numpy(io["targets"]).long()
        lengths = torch.from_numpy(io["lengths"]).long()
    else:
        inp = torch.from_numpy(io["x"]).double().requires_grad_(True)
        pad = torch.from_numpy(io["padding_mask"]).bool() if "padding_mask" in io else None
        dout = torch.from_numpy(io["dout"]).double()
    dx_dir = torch.randn(inp.shape, generator=gen, dtype=torch.float64) if inp.is_floating_point() else None

    def loss_fn(x):
        if kind == "layer":
            return (m(x, pad) * dout).sum()
        if kind == "lm":
            logits = m(x)[0]
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1))
        return torch.nn.functional.cross_entropy(m(x, lengths)[0], tgt)

    loss = loss_fn(inp)
    loss.backward()
    analytic = sum((p.grad * d).sum() for p, d in zip(params, dirs) if p.grad is not None).item()
    if dx_dir is not None:
        analytic += (inp.grad * dx_dir).sum().item()
    eps = 1e-6
    vals = []
    with torch.no_grad():
        for sgn in (1.0, -1.0):
            for p, d in zip(params, dirs):
                p.add_(sgn * eps * d)
            x = inp.detach() + sgn * eps * dx_dir if dx_dir is not None else inp
            vals.append(loss_fn(x).item())
            for p, d in zip(params, dirs):
                p.sub_(sgn * eps * d)
    numeric = (vals[0] - vals[1]) / (2 * eps)
    return abs(numeric - analytic) / max(abs(analytic), 1e-300), numeric, analytic


def streaming_checks(spec, W, io):
    """Eval-mode streaming (one token per call, and chunk-sized multi-token steps) vs the eval-mode
    full forward, float64. Returns the worst relative difference."""
    kind, cfg = spec["kind"], spec["config"]
    W64 = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in W.items()}
    torch.manual_seed(0)
    m = mega_ref.build(kind, cfg).double()
    mega_ref.load_weights(m, W64)
    m.eval()
    if kind == "layer":
        inp = torch.from_numpy(io["x"]).double()
        c = cfg["chunk_size"]
    else:
        inp = torch.from_numpy(io["tokens"]).long()
        c = cfg["decoder_chunk_size"]
    L = inp.size(1)
    worst = 0.0
    with torch.no_grad():
        full = m(inp) if kind == "layer" else m(inp)[0]
        # a) one token per call
        state = {} if kind == "layer" else []
        one = torch.cat([m.step(inp[:, t:t + 1], state) for t in range(L)], 1)
        worst = max(worst, rel_err(one, full))
        # b) multi-token steps: chunk-sized pieces (or an uneven split for full attention)
        if c > 0:
            bounds = list(range(0, L, c)) + [L]
        else:
            bounds = [0, 5, 6, 13, L]
        state = {} if kind == "layer" else []
        multi = torch.cat([m.step(inp[:, a:b], state) for a, b in zip(bounds[:-1], bounds[1:])], 1)
        worst = max(worst, rel_err(multi, full))
    return worst


def ragged_check(spec, W, io):
    """Padded route (stored) vs native shorter-last-chunk route, float64, every position."""
    W64 = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in W.items()}
    a = check_shared.run_reference("layer", spec["config"], torch.float64, W64, io)
    b = check_shared.run_reference("layer", spec["config"], torch.float64, W64, io, ragged_mode="native")
    return max(rel_err(b[k], a[k]) for k in a if a[k].is_floating_point())


# ----------------------------------------------------------------------------------------------
# writing


def is_ragged(spec):
    cfg, L = spec["config"], spec["L"]
    c = cfg.get("chunk_size", cfg.get("decoder_chunk_size", cfg.get("encoder_chunk_size")))
    return 0 < c < L and L % c != 0, c


def build_notes(spec, noise):
    kind, cfg, L = spec["kind"], spec["config"], spec["L"]
    notes = list(spec["notes"][:1])
    notes.append(COMMON_NOTES["train"])
    notes.append(COMMON_NOTES[spec["dtype"]])
    acts = {cfg.get("activation"), cfg.get("activation_fn"), cfg.get("classifier_activation_fn")}
    if spec["dtype"] == "float32" and "gelu" in acts:
        notes.append(COMMON_NOTES["gelu32"])
    ragged, c = is_ragged(spec)
    Lp = -(-L // c) * c if ragged else L
    if kind == "layer":
        notes.append(COMMON_NOTES["layer_loss"])
        notes.append(COMMON_NOTES["bidir" if cfg["bidirectional"] else "causal"])
        if spec.get("lengths") is not None:
            notes.append(COMMON_NOTES["pad"].format(lengths=spec["lengths"]))
        if ragged:
            notes.append(COMMON_NOTES["ragged"].format(L=L, c=c, Lp=Lp, r=L - (Lp - c)))
        if not cfg["bidirectional"] and cfg["norm_type"] != "batchnorm":
            notes.append(COMMON_NOTES["decode"])
    elif kind == "lm":
        notes.append(COMMON_NOTES["lm_loss"])
    else:
        notes.append(COMMON_NOTES["cls_loss"])
        if spec.get("lengths") is not None and cfg["embedding_type"] == "sparse":
            notes.append(COMMON_NOTES["cls_tokens"].format(lengths=spec["lengths"]))
        if ragged:
            notes.append(COMMON_NOTES["cls_ragged"].format(L=L, c=c, Lp=Lp))
    if cfg.get("norm_type", cfg.get("normalization_type")) == "batchnorm":
        notes.append(COMMON_NOTES["batchnorm"])
    notes.extend(spec["notes"][1:])
    if noise:
        notes.append("noise_gradients (exactly zero in exact arithmetic, stored values are rounding noise): "
                     + ", ".join(noise))
    return notes


def generate(spec, out_dir, verbose=True):
    kind, cfg, dtype = spec["kind"], spec["config"], spec["dtype"]
    tdt = check_shared.DTYPES[dtype]
    W, io = make_case_data(spec)
    norm = cfg.get("norm_type", cfg.get("normalization_type"))
    batchnorm = norm == "batchnorm"
    causal = kind == "lm" or (kind == "layer" and not cfg["bidirectional"])
    ragged, _ = is_ragged(spec)
    if batchnorm and ragged and kind == "layer":
        raise ValueError("ragged + batchnorm layer cases are not generated (not equivalent to a short chunk)")
    want_decode = causal and not batchnorm
    want_eval = batchnorm
    ours = check_shared.run_reference(kind, cfg, tdt, W, io, want_eval=want_eval, want_decode=want_decode)

    # float64 replica: stability of the float32 numbers and detection of noise gradients
    W64 = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in W.items()}
    io64 = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in io.items()}
    ref64 = check_shared.run_reference(kind, cfg, torch.float64, W64, io64, want_eval=want_eval,
                                       want_decode=want_decode)
    gmax = max(v.abs().max().item() for k, v in ref64.items() if k.startswith("grad."))
    noise = [k[5:] for k, v in ref64.items() if k.startswith("grad.") and v.abs().max().item() <= NOISE_REL * gmax]
    if noise != spec.get("expected_noise", []):
        # an unexpected zero gradient means a degenerate draw (e.g. a dead relu2 row): change the seed
        raise RuntimeError(f"{spec['name']}: zero gradients {noise}, expected {spec.get('expected_noise', [])}")
    worst32 = 0.0
    if dtype == "float32":
        for k, v in ours.items():
            if not v.is_floating_point() or k[5:] in noise:
                continue
            e = rel_err(v, ref64[k])
            if e > worst32:
                worst32, worst32_name = e, k
        if worst32 > FP32_VS_F64:
            raise RuntimeError(f"{spec['name']}: float32 vs float64 {worst32:.2e} at {worst32_name}")
    fd_err, fd_num, fd_an = finite_difference_check(kind, cfg, W, io, spec["seed"])
    if fd_err > FD_TOL:
        raise RuntimeError(f"{spec['name']}: finite differences {fd_num} vs autograd {fd_an} ({fd_err:.1e})")
    checks = {"fp32_vs_fp64": worst32, "finite_diff": fd_err}
    if causal:
        checks["streaming_vs_full(eval)"] = streaming_checks(spec, W, io)
        if checks["streaming_vs_full(eval)"] > 1e-12:
            raise RuntimeError(f"{spec['name']}: streaming mismatch {checks['streaming_vs_full(eval)']:.2e}")
    if want_decode:
        key = "decode.out" if kind == "layer" else "decode.logits"
        full = "out" if kind == "layer" else "logits"
        checks["decode_vs_out"] = rel_err(ours[key], ours[full])
    if ragged and kind == "layer":
        checks["ragged_pad_vs_native"] = ragged_check(spec, W, io)
        if checks["ragged_pad_vs_native"] > 1e-12:
            raise RuntimeError(f"{spec['name']}: ragged routes differ {checks['ragged_pad_vs_native']:.2e}")

    # assemble io.safetensors in the shared order
    out = dict(io)
    if kind == "layer":
        order = ["out", "dx", "decode.out", "eval.out"]
    else:
        order = ["logits", "loss"] + [k for k in ours if k.startswith("hidden.")] + ["decode.logits", "eval.logits"]
    np_dt = np.float32 if dtype == "float32" else np.float64
    for k in order + [k for k in ours if k.startswith("buffer_after.")] + [k for k in ours if k.startswith("grad.")]:
        if k not in ours:
            continue
        if k.startswith("buffer_after.") and not batchnorm:
            continue
        a = ours[k].cpu().numpy()
        out[k] = a.astype(np_dt) if a.dtype.kind == "f" else a.astype(np.int64)
    # inputs first, as in the shared cases
    first = [k for k in ("x", "padding_mask", "dout", "tokens", "values", "lengths", "targets") if k in io]
    if kind == "lm":
        first = ["tokens", "targets"]
    elif kind == "cls":
        first = [k for k in ("tokens", "values") if k in io] + ["lengths", "targets"]
    out = {k: out[k] for k in first + [k for k in out if k not in first]}

    cdir = os.path.join(out_dir, spec["name"])
    os.makedirs(cdir, exist_ok=True)
    st.save(os.path.join(cdir, "weights.safetensors"), W, {"config": json.dumps(cfg, sort_keys=True)})
    st.save(os.path.join(cdir, "io.safetensors"), out, {"case": spec["name"], "kind": kind, "dtype": dtype})
    tensors = {}
    for k, v in out.items():
        dn = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64", np.dtype(np.int32): "int32",
              np.dtype(np.int64): "int64", np.dtype(np.uint8): "uint8"}[v.dtype]
        tensors[k] = [dn, list(v.shape)]
    case = {
        "kind": kind, "config": cfg, "dtype": dtype, "batch": 2, "seq_len": spec["L"], "seed": spec["seed"],
        "generator": GENERATOR, "notes": build_notes(spec, noise), "noise_gradients": noise,
        "tensors": tensors, "torch_version": torch.__version__,
    }
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(cdir, n)) for n in os.listdir(cdir))
    if verbose:
        cs = "  ".join(f"{k} {v:.1e}" for k, v in checks.items())
        print(f"{spec['name']:62s} {size / 1024:5.1f} KB  noise={noise}  {cs}")
    return checks, size


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    specs = [s for s in CASES if not args.case or s["name"] in args.case]
    if args.list:
        for s in specs:
            print(s["name"])
        return 0
    os.makedirs(args.out, exist_ok=True)
    for s in specs:
        generate(s, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
