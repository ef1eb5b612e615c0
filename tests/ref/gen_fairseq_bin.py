#!/usr/bin/python3
"""fairseq binarized datasets for the reader's tests (tests/fixtures/fairseq-bin/).

Usage: /usr/bin/python3 tests/ref/gen_fairseq_bin.py [--out DIR] [--repo GIT_DIR]

Everything is written by the OFFICIAL code, read from the git mirror of facebookresearch/mega at
run time (nothing of it is copied here): fairseq/data/indexed_dataset.py (the builders),
fairseq/data/dictionary.py (Dictionary: load, encode_line, finalize, save), fairseq/binarizer.py
(Binarizer.binarize, what fairseq-preprocess runs on each split) and fairseq/tokenizer.py. Their
fairseq imports that these paths never use (utils, data_utils, file_io's PathManager) are stubs;
numpy >= 1.24 lost the alias np.float that indexed_dataset.py's dtype table names, so it is put
back (it was the builtin float) while the module loads.

Written to DIR (default tests/fixtures/fairseq-bin):
  dict.txt          a word dictionary made with Dictionary.add_symbol + finalize (sorted by count,
                    padded to a multiple of 8 with madeupword fillers) and Dictionary.save
  text.txt          lines of its words (some unknown, one empty), as fairseq-preprocess reads them
  ids.txt           the ids Binarizer.binarize produced for each line, one line per sequence
  mmap.bin/.idx     make_builder(impl="mmap", vocab_size=len(dict)): MMIDIDX, uint16
  mmap_i32.*        make_builder(impl="mmap") without a vocabulary size: int32
  mmap_i64.*        MMapIndexedDatasetBuilder's default dtype: int64
  mmap_u8.*         MMapIndexedDatasetBuilder(dtype=uint8)
  cached.*          make_builder(impl="cached"): IndexedDatasetBuilder, TNTIDX, int32, ids + 1
  byte_lm/          eval.bin/.idx + dict.txt: the eval.txt of tests/fixtures/fairseq/byte_lm
                    binarized with its dict.txt (each line's bytes written as decimal tokens first,
                    as the enwik8 data is), for `mega eval` on binarized data. (word_lm's dict.txt
                    lists <unk> as a word, which Dictionary.load refuses as a duplicate.)
  lra/              the official LRA data layout as the lra-text task reads it
                    (fairseq/tasks/long_range_arena.py): src-bin/test.bin/.idx + dict.txt (the
                    text.txt of tests/fixtures/fairseq/lra_cls binarized with its dict.txt),
                    label-bin/test.bin/.idx + dict.txt (each line's ListOps value binarized with its
                    label_dict.txt), and expected.json: the labels, and the official model's
                    predictions (argmax of the official logits of lra_cls/expected.safetensors, which
                    gen_fairseq.py computed for the same ids; the binarized ids are checked to be
                    those) with their accuracy; the task's target is the label id minus the 4
                    specials (OffsetTokensDataset(-nspecial)), so a class is its label-dict index.
Each dataset is read back with the official MMapIndexedDataset / IndexedDataset (through
data_utils' fix_lua_indexing=True) and checked against ids.txt before anything is kept.
Deterministic: regenerating gives byte-identical files.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import types
import warnings

import numpy as np
import torch

REPO = "/work/.mirror/facebookresearch+mega/repo"
HERE = os.path.dirname(os.path.abspath(__file__))


def official(repo):
    """the official modules, loaded from the mirror under their fairseq names with stubs around"""
    def src(path):
        return subprocess.run(["git", "--git-dir", repo, "show", "HEAD:" + path], check=True,
                              capture_output=True).stdout.decode()

    def module(name, path=None, package=False, **attrs):
        m = types.ModuleType(name)
        if package:
            m.__path__ = []
        m.__package__ = name if package else name.rpartition(".")[0]
        m.__dict__.update(attrs)
        sys.modules[name] = m
        if path:
            m.__file__ = path
            exec(compile(src(path), path, "exec"), m.__dict__)
        return m

    class PathManager:  # fairseq/file_io.py's interface, local files only
        open = staticmethod(open)
        get_local_path = staticmethod(lambda p: p)
        mkdirs = staticmethod(lambda p: os.makedirs(p, exist_ok=True) if p else None)

    module("fairseq", package=True)
    module("fairseq.utils")
    module("fairseq.file_io", PathManager=PathManager)
    module("fairseq.tokenizer", "fairseq/tokenizer.py")
    binarizer = module("fairseq.binarizer", "fairseq/binarizer.py")
    module("fairseq.data", package=True, FairseqDataset=torch.utils.data.Dataset)
    module("fairseq.data.data_utils")
    dictionary = module("fairseq.data.dictionary", "fairseq/data/dictionary.py")
    had = hasattr(np, "float")
    if not had:
        np.float = float
    try:
        indexed = module("fairseq.data.indexed_dataset", "fairseq/data/indexed_dataset.py")
    finally:
        if not had:
            del np.float
    return dictionary.Dictionary, binarizer.Binarizer, indexed


def binarize(O, text_path, dict_path, prefix, impl="mmap", builder=None):
    """fairseq-preprocess on one split (fairseq_cli/preprocess.py binarize): the dictionary loaded,
    each line through Binarizer.binarize into the builder, then finalize; returns the ids"""
    Dictionary, Binarizer, indexed = O
    vocab = Dictionary.load(dict_path)
    ds = builder(prefix + ".bin") if builder else indexed.make_builder(prefix + ".bin", impl=impl, vocab_size=len(vocab))
    seqs = []

    def consume(t):
        seqs.append(t.tolist())
        ds.add_item(t)

    Binarizer.binarize(text_path, vocab, consume, offset=0, end=-1)
    ds.finalize(prefix + ".idx")
    # read back as fairseq's data_utils.load_indexed_dataset does ("lazy" for TNTIDX: the "cached"
    # reader it infers serves only what was prefetched)
    impl = indexed.infer_dataset_impl(prefix)
    got = indexed.make_dataset(prefix, impl="lazy" if impl == "cached" else impl, fix_lua_indexing=True)
    assert [got[i].tolist() for i in range(len(got))] == seqs, prefix
    return seqs


WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but "
         "have an they you were their one all we can her has there been if more when will would who so").split()


def words_case(O, out):
    Dictionary = O[0]
    rng = random.Random(7)
    d = Dictionary()
    for i, w in enumerate(WORDS):
        d.add_symbol(w, n=1000 - 13 * i + rng.randrange(10))
    d.finalize(padding_factor=8)
    d.save(os.path.join(out, "dict.txt"))
    lines = []
    for i in range(40):
        k = rng.randrange(0, 14)
        ws = [rng.choice(WORDS) if rng.random() < 0.92 else "zzunknown%d" % rng.randrange(5) for _ in range(k)]
        lines.append(" ".join(ws))
    lines[5] = ""  # an empty line: a lone </s>
    with open(os.path.join(out, "text.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    Dictionary_, Binarizer, indexed = O
    cases = [("mmap", "mmap", None), ("mmap_i32", "mmap", lambda p: indexed.MMapIndexedDatasetBuilder(p, dtype=np.int32)),
             ("mmap_i64", "mmap", lambda p: indexed.MMapIndexedDatasetBuilder(p)),
             ("mmap_u8", "mmap", lambda p: indexed.MMapIndexedDatasetBuilder(p, dtype=np.uint8)),
             ("cached", "cached", None)]
    ids = None
    for name, impl, builder in cases:
        s = binarize(O, os.path.join(out, "text.txt"), os.path.join(out, "dict.txt"), os.path.join(out, name), impl, builder)
        assert ids is None or s == ids
        ids = s
    with open(os.path.join(out, "ids.txt"), "w") as f:
        for s in ids:
            f.write(" ".join(map(str, s)) + "\n")


def lm_copy(O, fx, out):
    """the fixture LM's eval.txt binarized with its dict.txt, which is saved next to it"""
    os.makedirs(out, exist_ok=True)
    Dictionary = O[0]
    Dictionary.load(os.path.join(fx, "dict.txt")).save(os.path.join(out, "dict.txt"))
    text = os.path.join(fx, "eval.txt")
    with tempfile.TemporaryDirectory() as tmp:
        # the enwik8 form: a line's bytes as decimal tokens, the line break kept
        raw = open(text, "rb").read()
        lines = raw.split(b"\n")
        if raw.endswith(b"\n"):
            lines.pop()
        text = os.path.join(tmp, "eval.tok")
        with open(text, "w") as f:
            f.write("".join(" ".join(str(b) for b in line) + "\n" for line in lines))
        binarize(O, text, os.path.join(out, "dict.txt"), os.path.join(out, "eval"))


# the ListOps values of lra_cls/text.txt's lines ([MED 8 2 1 7] = int(median) = 4; the line with
# an unknown token is given 4 too)
LRA_LABELS = ["9", "8", "6", "4", "4"]


def lra_copy(O, fx, out):
    """the lra_cls fixture's lines in the official LRA data layout, with the official predictions"""
    import json
    sys.path.insert(0, HERE)
    import st
    Dictionary = O[0]
    src, lab = os.path.join(out, "src-bin"), os.path.join(out, "label-bin")
    os.makedirs(src, exist_ok=True)
    os.makedirs(lab, exist_ok=True)
    Dictionary.load(os.path.join(fx, "dict.txt")).save(os.path.join(src, "dict.txt"))
    Dictionary.load(os.path.join(fx, "label_dict.txt")).save(os.path.join(lab, "dict.txt"))
    seqs = binarize(O, os.path.join(fx, "text.txt"), os.path.join(src, "dict.txt"), os.path.join(src, "test"))
    with tempfile.TemporaryDirectory() as tmp:
        t = os.path.join(tmp, "test.label")
        with open(t, "w") as f:
            f.write("\n".join(LRA_LABELS) + "\n")
        labs = binarize(O, t, os.path.join(lab, "dict.txt"), os.path.join(lab, "test"))
    ref, _ = st.load(os.path.join(fx, "expected.safetensors"))
    assert seqs == [list(ref["tokens"][i, :ref["lengths"][i]]) for i in range(len(seqs))], "ids differ from lra_cls's"
    names = [l.split()[0] for l in open(os.path.join(fx, "label_dict.txt"))]
    target = [q[0] - 4 for q in labs]  # StripTokenDataset(eos), OffsetTokensDataset(-nspecial)
    assert [names[k] for k in target] == LRA_LABELS
    pred = [int(np.argmax(r)) for r in ref["logits"]]
    correct = sum(p == t for p, t in zip(pred, target))
    lg = ref["logits"].astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
    loss = float(np.mean(lse - lg[np.arange(len(target)), target]))  # lra_cross_entropy, per sentence
    json.dump({"labels": LRA_LABELS, "predictions": [names[k] for k in pred], "correct": correct,
               "count": len(pred), "accuracy": correct / len(pred), "loss": loss}, open(os.path.join(out, "expected.json"), "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "fixtures", "fairseq-bin"))
    ap.add_argument("--repo", default=REPO)
    a = ap.parse_args()
    warnings.filterwarnings("ignore", "The given NumPy array is not writable")  # the mmap reader's
    O = official(a.repo)
    os.makedirs(a.out, exist_ok=True)
    words_case(O, a.out)
    fx = os.path.join(HERE, "..", "fixtures", "fairseq")
    lm_copy(O, os.path.join(fx, "byte_lm"), os.path.join(a.out, "byte_lm"))
    lra_copy(O, os.path.join(fx, "lra_cls"), os.path.join(a.out, "lra"))


if __name__ == "__main__":
    main()
