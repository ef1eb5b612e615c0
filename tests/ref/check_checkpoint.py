"""Prove that PyTorch reads a model.safetensors written by `mega train`.

    /usr/bin/python3 tests/ref/check_checkpoint.py MODEL.safetensors LOGITS.safetensors [MODEL LOGITS ...] [--tol 1e-4]

MODEL.safetensors is read with st.py (numpy) into torch tensors. The model config comes from
__metadata__["config"], whose keys are the CLI flag names (mega_lm_config_to_json in
src/model/lm_io.c); they are mapped to the official fairseq argument names that mega_ref.MegaLM
takes. The reference LM is built, the checkpoint is loaded with load_state_dict(strict=True), and
the model runs in eval mode (batchnorm: running statistics) on LOGITS.safetensors["tokens"].
Its logits must match LOGITS.safetensors["logits"] (our C full forward) and its incremental
step (token by token) must match ["stream_logits"] (our C streaming path), within --tol of
max |logit|. (With an EMA truncation shorter than the text the two differ, in torch as in C: the
incremental recurrence is untruncated, as in the official code.) One line per comparison ("ok" or "FAIL"), several pairs per call.

The only tensor added before load_state_dict is the rotary `_float_tensor`: a dtype marker
buffer of the official module that holds no information (mega does not store it). Exits 0 on
success, 1 on a mismatch, 2 when a file cannot be read or does not load strictly.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mega_ref  # noqa: E402
import st  # noqa: E402


def official_config(c):
    """mega CLI config keys -> the official argument names used by mega_ref.MegaLM."""
    if c.get("model", "mega_lm") != "mega_lm":
        raise ValueError(f"not a language model config: model = {c.get('model')!r}")
    if not c.get("norm-affine", True):
        raise ValueError("norm-affine = false is not supported by mega_ref's LM")
    pad = int(c.get("padding-idx", 256))
    trunc = int(c.get("truncation", 0))
    return {
        "vocab_size": int(c["vocab-size"]),
        "padding_idx": None if pad < 0 else pad,
        "decoder_layers": int(c["layers"]),
        "decoder_embed_dim": int(c["embed-dim"]),
        "decoder_z_dim": int(c["z-dim"]),
        "decoder_hidden_dim": int(c["hidden-dim"]),
        "decoder_n_dim": int(c["n-dim"]),
        "decoder_ffn_embed_dim": int(c["ffn-dim"]),
        "decoder_chunk_size": int(c["chunk-size"]),
        "truncation_length": None if trunc <= 0 else trunc,
        "max_target_positions": int(c["max-positions"]),
        "attention_activation_fn": c["attention-activation"],
        "rel_pos_bias": c["rel-pos-bias"],
        "normalization_type": c["norm-type"],
        "normalize_before": bool(c["prenorm"]),
        "no_affine_final_norm": not c.get("final-norm-affine", True),
        "activation_fn": c["activation"],
        "no_scale_embedding": not c.get("scale-embedding", True),
        "share_decoder_input_output_embed": bool(c.get("tie-embeddings", False)),
    }


def rel_err(got, ref):
    d = (got - ref).abs().max().item()
    m = ref.abs().max().item()
    return d / m if m > 0 else d


def check_pair(model_path, logits_path, tol):
    """One model file against one dump; prints one line per compared tensor; returns 0/1/2."""
    try:
        W, meta = st.load(model_path)
        if not meta or "config" not in meta:
            raise ValueError("no __metadata__ config")
        cfg_cli = json.loads(meta["config"])
        cfg = official_config(cfg_cli)
        torch.manual_seed(0)
        model = mega_ref.MegaLM(cfg).float()
        sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in W.items()}
        added = []
        for k, v in model.state_dict().items():
            if k.endswith("_float_tensor") and k not in sd:
                sd[k] = v.clone()
                added.append(k)
        model.load_state_dict(sd, strict=True)  # raises on any missing / unexpected / misshapen tensor
        D, _ = st.load(logits_path)
    except Exception as e:  # noqa: BLE001
        print(f"FAIL {model_path}: cannot build/load the reference model: {type(e).__name__}: {e}")
        return 2
    model.eval()
    tokens = torch.from_numpy(D["tokens"].astype(np.int64))
    with torch.no_grad():
        logits, _ = model(tokens)
        # the streaming reference: mega_ref's incremental step, token by token (official incremental
        # semantics: the EMA recurrence is untruncated, so it differs from a truncated full forward)
        state = []
        step_logits = torch.cat([model.step(tokens[:, t:t + 1], state) for t in range(tokens.shape[1])], dim=1)
    ok = True
    n_par = sum(int(np.prod(v.shape)) for v in W.values())
    desc = (f"{model_path}: {cfg_cli['layers']}L D{cfg_cli['embed-dim']} chunk {cfg_cli['chunk-size']} "
            f"{cfg_cli['attention-activation']}/{cfg_cli['rel-pos-bias']}/{cfg_cli['norm-type']}/"
            f"{'pre' if cfg_cli['prenorm'] else 'post'}/{'tied' if cfg_cli.get('tie-embeddings') else 'untied'}")
    extra = f", added {len(added)} _float_tensor" if added else ""
    for name in ("logits", "stream_logits"):
        if name not in D:
            continue
        ours = torch.from_numpy(D[name]).float()
        ref, how = (logits, "forward") if name == "logits" else (step_logits, "step")
        if ours.shape != ref.shape:
            print(f"FAIL {desc}: {name} shape {tuple(ours.shape)} vs torch {tuple(ref.shape)}")
            ok = False
            continue
        e = rel_err(ours, ref)
        good = e <= tol  # NaN fails
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {desc}: torch {how} vs C {name}: rel err {e:.2e} "
              f"(T = {tokens.shape[1]}, {len(W)} tensors, {n_par} values{extra})")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="MODEL.safetensors LOGITS.safetensors [MODEL LOGITS ...]")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    if len(a.files) % 2:
        ap.error("expected pairs: MODEL.safetensors LOGITS.safetensors")
    rc = 0
    for i in range(0, len(a.files), 2):
        rc = max(rc, check_pair(a.files[i], a.files[i + 1], a.tol))
    return rc


if __name__ == "__main__":
    sys.exit(main())
