#!/usr/bin/python3
"""Fixture cases of the raw speech classifier made by the OFFICIAL sc_raw model.

Usage: /usr/bin/python3 tests/ref/ref_sc_raw.py [--out tests/fixtures/sc_raw] [--repo GIT_DIR]

The official sources are read at run time from the git mirror of facebookresearch/mega (default
/work/.mirror/facebookresearch+mega/repo) into a temporary directory; nothing is copied here. The
model is the official SCRawModel of fairseq/models/speech_commands/model.py with its encoder
MegaSCRawEncoder (mega_scraw_encoder.py: RealNumberEmbedding, MegaSentenceEncoderLayer, the final
SequenceNorm, mean pooling x.sum(0) / src_lengths) and its head (Linear + dropout, the activation,
sentence_projection_layer without bias), built by SCRawModel.build_model on tiny dimensions.

Stubbed (fairseq's package machinery, which the model does not use): fairseq/__init__.py,
fairseq/data, fairseq/logging/__init__.py, fairseq/models/__init__.py (FairseqEncoder and
FairseqEncoderModel as plain nn.Module shells, register_model* as identity decorators),
fairseq/modules/__init__.py (re-exports only the modules the encoder imports),
fairseq/modules/transformer_sentence_encoder.py (init_bert_params, unused: apply_bert_init is
false), fairseq/modules/multihead_attention.py. Everything the forward computes is official.

Each case: the state dict (official initialisation under torch.manual_seed(seed), then every
float parameter moved by N(0, 0.3) so that none keeps a trivial value), random values [2, L],
lengths (the official pooling divides the sum over ALL positions by the length), targets; the
training-mode logits, the mean cross-entropy, every gradient, the batchnorm running statistics
after the forward (buffer_after.*) and the eval-mode logits with the stored statistics
(eval.logits). tests/test_fixtures.c reads them as classifier ("cls") cases.
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from argparse import Namespace

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_official  # noqa: E402  (the list of official module files and their stubs)
import st  # noqa: E402

GENERATOR = "tests/ref/ref_sc_raw.py (the official fairseq/models/speech_commands SCRawModel, read from the git mirror)"
EXTRA_FILES = ["fairseq/modules/real_number_embedding.py", "fairseq/modules/mega_sentence_encoder_layer.py",
               "fairseq/modules/layer_drop.py", "fairseq/models/speech_commands/mega_scraw_encoder.py",
               "fairseq/models/speech_commands/model.py"]
EXTRA_STUBS = {
    "fairseq/models/__init__.py": (
        "import torch.nn as nn\n"
        "class FairseqEncoder(nn.Module):\n"
        "    def __init__(self, dictionary):\n"
        "        super().__init__()\n"
        "        self.dictionary = dictionary\n"
        "class FairseqEncoderModel(nn.Module):\n"
        "    def __init__(self, encoder):\n"
        "        super().__init__()\n"
        "        self.encoder = encoder\n"
        "def register_model(name):\n"
        "    return lambda cls: cls\n"
        "def register_model_architecture(model, arch):\n"
        "    return lambda fn: fn\n"),
    "fairseq/models/speech_commands/__init__.py": "",
    "fairseq/modules/__init__.py": (
        "from .gelu import gelu, gelu_accurate\n"
        "from .fairseq_dropout import FairseqDropout\n"
        "from .sequence_norm import SequenceNorm\n"
        "from .real_number_embedding import RealNumberEmbedding\n"
        "from .layer_drop import LayerDropModuleList\n"
        "from .mega_sentence_encoder_layer import MegaSentenceEncoderLayer\n"),
    "fairseq/modules/transformer_sentence_encoder.py": "init_bert_params = None\n",
}

# tiny sc_raw configurations (the official argument names; the model reads them as mega_sc_raw_base
# does, base_architecture filling the rest)
CASES = [
    dict(name="sc_raw_laplace_batchnorm_pre_c8_trunc12_L32", seed=3601, L=32, lengths=[32, 27],
         args=dict(encoder_layers=2, encoder_embed_dim=16, encoder_hidden_dim=32, encoder_ffn_embed_dim=32, z_dim=8,
                   n_dim=4, chunk_size=8, truncation_length=12, max_positions=32, sentence_class_num=4),
         notes=["official sc_raw (mega_sc_raw_base rules) on tiny dimensions: 2 layers, D=16, E=F=32, Z=8, N=4, chunk 8, "
                "EMA truncation 12 < L = 32, laplace, batchnorm pre-norm + batchnorm final norm, bidirectional EMA, "
                "RealNumberEmbedding, mean pooling, head Linear(16, 32) + gelu, projection without bias, 4 classes",
                "lengths 32/27: the official encoder builds no padding mask for real inputs and divides the sum over "
                "all 32 positions by the length"]),
    dict(name="sc_raw_big_rules_full_L24", seed=3602, L=24, lengths=[24, 24],
         args=dict(encoder_layers=1, encoder_embed_dim=12, encoder_hidden_dim=24, z_dim=6, n_dim=3, chunk_size=-1,
                   truncation_length=None, max_positions=24, sentence_class_num=3, classifier_layers=2),
         notes=["official sc_raw, 1 layer, D=12, E=F=24 (FFN = hidden, as base_architecture sets it), Z=6, N=3, full "
                "attention (chunk -1), untruncated EMA, laplace, batchnorm pre-norm, 2 hidden head layers, 3 classes"]),
]


def import_official(repo):
    root = tempfile.mkdtemp(prefix="mega_official_sc_")
    atexit.register(shutil.rmtree, root, True)
    stubs = dict(check_official.STUBS)
    stubs.update(EXTRA_STUBS)
    for path, text in stubs.items():
        os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
        open(os.path.join(root, path), "w").write(text)
    sha = {}
    for path in check_official.FILES + EXTRA_FILES:
        src = subprocess.run(["git", "--git-dir", repo, "show", "HEAD:" + path], check=True, capture_output=True).stdout
        os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
        open(os.path.join(root, path), "wb").write(src)
        import hashlib
        sha[path] = hashlib.sha256(src).hexdigest()
    commit = subprocess.run(["git", "--git-dir", repo, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    sys.path.insert(0, root)
    import fairseq.utils as futils
    import mega_ref
    # torch 1.13 float32 gelu_backward bug: the backward on a contiguous gradient (as check_official)
    futils.gelu = lambda x: mega_ref.gelu(x.float()).type_as(x)
    from fairseq.models.speech_commands import model as scm
    return scm, commit, sha


def official_args(a):
    args = Namespace(layer_type="mega", rel_pos_bias="simple", dropout=0.0, attention_dropout=0.0, act_dropout=0.0)
    for k, v in a.items():
        setattr(args, k, v)
    return args


def lra_config(args):
    """the case's config in the argument names the classifier reader takes (mega_cls_config_from_json)"""
    return dict(encoder_layers=args.encoder_layers, encoder_embed_dim=args.encoder_embed_dim, encoder_z_dim=args.z_dim,
                encoder_hidden_dim=args.encoder_hidden_dim, encoder_n_dim=args.n_dim,
                encoder_ffn_embed_dim=args.encoder_ffn_embed_dim, encoder_chunk_size=args.chunk_size,
                attention_activation_fn=args.attention_activation_fn, normalization_type=args.norm_type,
                normalize_before=args.encoder_normalize_before, rel_pos_bias=args.rel_pos_bias,
                truncation_length=args.truncation_length, max_positions=args.max_positions,
                activation_fn=args.activation_fn, embedding_type="linear", sen_rep_type=args.sen_rep_type,
                classifier_layers=args.classifier_layers, classifier_out_dim=args.classifier_out_dim,
                classifier_activation_fn=args.classifier_activation_fn, sentence_class_num=args.sentence_class_num,
                vocab_size=None, padding_idx=None)


def run(model, W, io, train):
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in W.items()})
    model.train(train)
    sample = {"net_input": {"src_tokens": torch.from_numpy(io["values"]),
                            "src_lengths": torch.from_numpy(io["lengths"]).long()}}
    logits = model(sample)["encoder_out"]
    return logits


def make_case(scm, spec, commit, sha, out_dir):
    args = official_args(spec["args"])
    torch.manual_seed(spec["seed"])
    model = scm.SCRawModel.build_model(args, None)
    gen = torch.Generator().manual_seed(spec["seed"] * 7 + 3)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    W = {k: (v.numpy().astype(np.float32) if v.dtype.is_floating_point else v.numpy().astype(np.int64))
         for k, v in model.state_dict().items()}
    B, L = 2, spec["L"]
    io = {"values": torch.randn(B, L, generator=gen).numpy().astype(np.float32),
          "lengths": np.array(spec["lengths"], dtype=np.int32),
          "targets": torch.randint(args.sentence_class_num, (B,), generator=gen).numpy().astype(np.int32)}
    # eval mode first, with the stored running statistics
    with torch.no_grad():
        ev = run(model, W, io, False)
    logits = run(model, W, io, True)
    loss = F.cross_entropy(logits, torch.from_numpy(io["targets"]).long())
    model.zero_grad()
    loss.backward()
    out = dict(io)
    out["logits"] = logits.detach().numpy().astype(np.float32)
    out["loss"] = np.array(loss.item(), dtype=np.float32)
    out["eval.logits"] = ev.numpy().astype(np.float32)
    for n, b in model.named_buffers():
        if "running" in n or "num_batches" in n:
            a = b.numpy()
            out["buffer_after." + n] = a.astype(np.float32) if a.dtype.kind == "f" else a.astype(np.int64)
    for n, p in model.named_parameters():
        out["grad." + n] = p.grad.numpy().astype(np.float32)
    # the last layer's nffn.fc2.bias adds a per-channel constant right before the training-mode
    # batchnorm final norm, which removes it: its gradient is exactly 0, float32 rounding remains
    noise = [f"encoder.encoder.layers.{args.encoder_layers - 1}.nffn.fc2.bias"]
    cfg = lra_config(args)
    cdir = os.path.join(out_dir, spec["name"])
    os.makedirs(cdir, exist_ok=True)
    st.save(os.path.join(cdir, "weights.safetensors"), W, {"config": json.dumps(cfg, sort_keys=True)})
    st.save(os.path.join(cdir, "io.safetensors"), out, {"case": spec["name"], "kind": "cls", "dtype": "float32"})
    case = {"kind": "cls", "config": cfg, "dtype": "float32", "batch": B, "seq_len": L, "seed": spec["seed"],
            "generator": GENERATOR, "official_commit": commit,
            "notes": spec["notes"] + [
                "training mode, every dropout 0; loss = mean cross-entropy over the batch; eval.logits: eval mode with "
                "the initial running statistics; buffer_after.*: after the training forward",
                "float32: the official code as is",
                "noise_gradients: the last layer's nffn.fc2.bias feeds the training-mode batchnorm final norm, which "
                "removes any per-channel constant: its gradient is exactly 0 up to rounding"],
            "noise_gradients": noise,
            "tensors": {k: [str(v.dtype), list(v.shape)] for k, v in out.items()},
            "torch_version": torch.__version__, "official_files_sha256": sha}
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    print(f"{spec['name']:50s} loss {loss.item():.4f}")


def make_checkpoint(scm, out_dir):
    """an official-format sc_raw checkpoint (what fairseq's checkpoint_utils.save_state pickles:
    args, model, optimizer_history, extra_state) of a tiny model with random weights and running
    statistics, and the official eval-mode logits on given inputs (already normalised, as the
    official data is): the test of scripts/convert_fairseq.py (tests/sh/test_sc_convert.sh)"""
    args = official_args(dict(arch="mega_sc_raw_base", task="speech_commands", sc_all_classes=False, encoder_layers=2,
                              encoder_embed_dim=12, encoder_hidden_dim=24, z_dim=6, n_dim=4, chunk_size=8,
                              truncation_length=12, max_positions=32))
    torch.manual_seed(3650)
    model = scm.SCRawModel.build_model(args, None)  # fills the rest of args as base_architecture does
    gen = torch.Generator().manual_seed(3651)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
        for n, b in model.named_buffers():
            if n.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.2)
            elif n.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=gen) + 0.5)
    model.eval()
    x = torch.randn(3, 32, generator=gen)
    with torch.no_grad():
        logits = model({"net_input": {"src_tokens": x, "src_lengths": torch.full((3,), 32)}})["encoder_out"]
    os.makedirs(out_dir, exist_ok=True)
    torch.save({"args": args, "model": model.state_dict(), "optimizer_history": [], "extra_state": {}},
               os.path.join(out_dir, "sc_raw_tiny.pt"))
    st.save(os.path.join(out_dir, "expected.safetensors"),
            {"values": x.numpy().astype(np.float32), "logits": logits.numpy().astype(np.float32)},
            {"generator": GENERATOR, "note": "official SCRawModel, eval mode, on values (already normalised)"})
    print(f"{out_dir}/sc_raw_tiny.pt: logits {logits.abs().max().item():.4f} max")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/sc_raw")
    ap.add_argument("--repo", default="/work/.mirror/facebookresearch+mega/repo")
    a = ap.parse_args()
    torch.set_num_threads(1)
    scm, commit, sha = import_official(a.repo)
    for spec in CASES:
        make_case(scm, spec, commit, sha, a.out)
    make_checkpoint(scm, os.path.join(a.out, "checkpoint"))


if __name__ == "__main__":
    main()
