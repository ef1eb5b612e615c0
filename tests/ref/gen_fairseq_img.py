#!/usr/bin/python3
"""A small LRA image classifier in the official format and data in the official image layout
(tests/fixtures/fairseq/lra_img/), for the converter's lra-image path and the tool's reader of
that layout.

Usage: /usr/bin/python3 tests/ref/gen_fairseq_img.py [--out DIR] [--repo GIT_DIR]

The model is gen_fairseq.py's OfficialLRA (official MovingAverageGatedAttention,
NormalizedFeedForwardNetwork, SequenceNorm under the official state-dict names) with the
official RealNumberEmbedding (fairseq/modules/real_number_embedding.py, read from the mirror at
run time) as embed_tokens, as LRAModel builds it for the lra-image task (embedding_type 'linear',
sen_rep_type 'mp'): arch mega_lra_cifar10 made tiny, task lra-image, pixel_normalization
[0.48, 0.24] (the CIFAR-10 recipe of examples/mega/README.lra.md; not the task's default 0.5 0.5,
so that a converter ignoring it is caught).

Written to DIR (default tests/fixtures/fairseq/lra_img):
  model.pt                 the checkpoint (args + model state dict, as fairseq saves it)
  data/input/test.src      six images of 16 pixels, one per line, as the lra-image task reads them
  data/label/test.label    their classes, one integer per line
  expected.json            the official logits of each image (pixels read by the official
                           PixelSequenceDataset with the checkpoint's normalisation), their
                           argmax (the predictions), the accuracy and the mean cross-entropy
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_official as co  # noqa: E402
from gen_fairseq import REPO, OfficialLRA  # noqa: E402


def official(repo, path, replace=(), env=None):
    """the namespace of an official file executed on its own (its package imports replaced)"""
    src = subprocess.run(["git", "--git-dir", repo, "show", "HEAD:" + path], check=True, capture_output=True).stdout.decode()
    for a, b in replace:
        assert a in src, (path, a)
        src = src.replace(a, b)
    ns = {"__name__": "official_" + os.path.basename(path)[:-3], **(env or {})}
    exec(compile(src, path, "exec"), ns)
    return ns


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "fairseq",
                                                 "lra_img"))
    p.add_argument("--repo", default=REPO)
    o = p.parse_args()
    git_dir = o.repo if o.repo.endswith("repo") else os.path.join(o.repo, ".git")
    O = co.import_official(o.repo)
    rne = official(git_dir, "fairseq/modules/real_number_embedding.py")["RealNumberEmbedding"]
    tok = official(git_dir, "fairseq/tokenizer.py")["tokenize_line"]
    psd = official(git_dir, "fairseq/data/pixel_sequence_dataset.py",
                   [("from . import FairseqDataset", "FairseqDataset = object"),
                    ("from fairseq.tokenizer import tokenize_line", "")], {"tokenize_line": tok})
    PixelSequenceDataset = psd["PixelSequenceDataset"]

    torch.manual_seed(2026)
    a = argparse.Namespace(
        arch="mega_lra_cifar10", task="lra-image", input_type="image", layer_type="mega", encoder_layers=2,
        encoder_embed_dim=16, encoder_hidden_dim=32, encoder_ffn_embed_dim=24, z_dim=8, n_dim=4, chunk_size=8,
        truncation_length=None, max_positions=16, attention_activation_fn="laplace", rel_pos_bias="simple",
        norm_type="layernorm", encoder_normalize_before=True, normalize_embedding=False, feature_dropout=False,
        activation_fn="silu", sen_rep_type="mp", classifier_layers=1, classifier_out_dim=20,
        classifier_activation_fn="gelu", classifier_in_dim=16, sentence_class_num=4, use_p=False, dropout=0.1,
        attention_dropout=0.0, act_dropout=0.0, pixel_normalization=[0.48, 0.24], seed=1)
    m = OfficialLRA(O, a, 8)
    enc = m.encoder.encoder
    enc.embed_tokens = rne(a.encoder_embed_dim)  # LRAModel with input_type image: RealNumberEmbedding
    m.eval()

    def forward(x):  # x: [B, L] normalised pixels; no padding (the task's images have one length)
        h, _ = co.run_stack(enc.layers, enc.final_norm, enc.embed_tokens(x), None)
        rep = h.sum(0) / x.size(1)
        for layer in m.classifier:
            rep = F.gelu(layer(rep))
        return m.sentence_projection_layer(rep)

    g = torch.Generator().manual_seed(7)
    imgs = torch.randint(0, 256, (6, 16), generator=g).tolist()
    imgs[0] = [0] * 16  # the extremes of the pixel range
    imgs[1] = [255] * 16
    labels = [0, 3, 1, 2, 1, 0]
    d = os.path.join(o.out, "data")
    os.makedirs(os.path.join(d, "input"), exist_ok=True)
    os.makedirs(os.path.join(d, "label"), exist_ok=True)
    src = os.path.join(d, "input", "test.src")
    with open(src, "w") as f:
        for im in imgs:  # separators as found in the wild: spaces, and a TAB
            f.write(" ".join(map(str, im[:8])) + "\t" + " ".join(map(str, im[8:])) + "\n")
    with open(os.path.join(d, "label", "test.label"), "w") as f:
        f.write("".join(f"{k}\n" for k in labels))
    ds = PixelSequenceDataset(src, a.pixel_normalization)
    x = torch.stack([ds[i] for i in range(len(ds))]).float()
    assert torch.allclose(x, (torch.tensor(imgs, dtype=torch.float) / 255 - 0.48) / 0.24)
    with torch.no_grad():
        logits = forward(x)
    y = torch.tensor(labels)
    pred = logits.argmax(-1)
    ck = {"args": a, "model": m.state_dict(), "optimizer_history": [{"criterion_name": "LRACrossEntropyCriterion",
                                                                      "optimizer_name": "FairseqAdam",
                                                                      "lr_scheduler_state": {"best": 0.5},
                                                                      "num_updates": 10}],
          "extra_state": {"epoch": 1, "train_iterator": {"epoch": 1}}, "last_optimizer_state": None}
    torch.save(ck, os.path.join(o.out, "model.pt"))
    json.dump({"logits": np.round(logits.numpy().astype(np.float64), 7).tolist(), "predictions": pred.tolist(),
               "labels": labels, "accuracy": float((pred == y).float().mean()),
               "loss": float(F.cross_entropy(logits, y)),
               "generator": "tests/ref/gen_fairseq_img.py (official Mega modules, facebookresearch/mega)"},
              open(os.path.join(o.out, "expected.json"), "w"), indent=1)
    print(f"{o.out}: {len(imgs)} images of 16 pixels, predictions {pred.tolist()}, labels {labels}, "
          f"loss {float(F.cross_entropy(logits, y)):.4f}")


if __name__ == "__main__":
    main()
