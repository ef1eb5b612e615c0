#!/usr/bin/python3
"""Datasets written by the OFFICIAL fairseq-preprocess (tests/fixtures/fairseq-bin/preprocess/).

Usage: /usr/bin/python3 tests/ref/gen_fairseq_preprocess.py [--out DIR] [--repo GIT_DIR]

Runs fairseq_cli/preprocess.py of the official repository (facebookresearch/mega, its git mirror
extracted to a temporary directory at run time; nothing of it is copied here) in a child process,
as `fairseq-preprocess` would run, on small texts made here. Its whole import chain is the
official code; two imports cannot be satisfied on this machine and get inert stand-ins:
  * `sklearn` (imported at module level by fairseq/data/audio/speech_commands_dataset.py, which
    fairseq/data/__init__.py imports; speech data only), and
  * `fairseq.data.token_block_utils_fast` (a Cython extension of fairseq/data/token_block_dataset.py
    that is built by setup.py; used to cut LM blocks at training time).
Neither is on the path that builds the dictionary and writes dict.txt, .bin and .idx
(fairseq_cli/preprocess.py main -> Dictionary, Binarizer, indexed_dataset): the stand-ins raise if
anything is called or instantiated from them, and the run would fail. numpy >= 1.24 lost the alias
np.float that indexed_dataset.py's dtype table names; it is put back (the builtin float).

Written to DIR (default tests/fixtures/fairseq-bin/preprocess):
  words/     --only-source, train/valid/test of word lines (some words rare: --thresholdsrc 0):
             dict.txt (padded to a multiple of 8 with madeupword fillers, counts of 0), *.bin/*.idx
  bytes/     --only-source, the enwik8 form: each line's bytes as decimal tokens (a few UTF-8
             letters), dict.txt of byte values with fillers
  mt/        --source-lang de --target-lang en: train.de-en.de.bin/.idx, train.de-en.en.bin/.idx,
             valid.de-en.*, dict.de.txt, dict.en.txt (fairseq's translation layout)
  lra/       the lra-text layout the official LRA data has (fairseq/tasks/long_range_arena.py):
             src-bin/ (--only-source on the inputs), label-bin/ (--only-source on the labels)
  */*.ids    the ids of each split as the official MMapIndexedDataset reads them back, one line
             per sequence (what our reader must give)
  */*.txt    the texts given to fairseq-preprocess
Deterministic: regenerating gives byte-identical files (preprocess.log is not kept).
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile

REPO = "/work/.mirror/facebookresearch+mega/repo"
HERE = os.path.dirname(os.path.abspath(__file__))

# the child: stand-ins for the two missing imports, then the official preprocess.py's cli_main
STANDINS = r'''
import importlib.abc, importlib.machinery, sys, types
STUB = ("sklearn", "fairseq.data.token_block_utils_fast")
class Inert:
    """what a stand-in module gives for any name: usable in an import, a base class or a default
    argument, but calling or instantiating it fails (so it cannot silently do work)"""
    def __init__(self, name): self._name = name
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return Inert(self._name + "." + n)
    def __call__(self, *a, **k): raise RuntimeError("stand-in called: " + self._name)
    def __mro_entries__(self, bases): return (object,)
class Mod(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"): raise AttributeError(n)
        return Inert(self.__name__ + "." + n)
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if any(name == s or name.startswith(s + ".") for s in STUB):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = Mod(spec.name); m.__path__ = []; return m
    def exec_module(self, m): pass
sys.meta_path.insert(0, Finder())
import numpy as np
if not hasattr(np, "float"): np.float = float
'''
CHILD = STANDINS + r'''
sys.argv = ["fairseq-preprocess"] + sys.argv[1:]
from fairseq_cli import preprocess
preprocess.cli_main()
'''

READ = STANDINS + r'''
from fairseq.data import indexed_dataset
for prefix in sys.argv[1:]:
    ds = indexed_dataset.MMapIndexedDataset(prefix)
    with open(prefix + ".ids", "w") as f:
        for i in range(len(ds)):
            f.write(" ".join(str(int(x)) for x in ds[i]) + "\n")
'''

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but "
         "have an they you were their one all we can her has there been if more when will would who so").split()


def run(src, args, cwd):
    env = dict(os.environ, PYTHONPATH=src, PYTHONHASHSEED="0")
    r = subprocess.run([sys.executable, "-c", CHILD] + args, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit("fairseq-preprocess failed:\n" + r.stdout[-2000:] + r.stderr[-4000:])


def read_back(src, prefixes):
    """each dataset's ids as the official MMapIndexedDataset reads them, into PREFIX.ids"""
    env = dict(os.environ, PYTHONPATH=src)
    r = subprocess.run([sys.executable, "-c", READ] + prefixes, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit("reading back failed:\n" + r.stderr[-4000:])


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def word_lines(rng, n, vocab):
    return [" ".join(rng.choice(vocab) for _ in range(rng.randrange(0, 12))) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "fixtures", "fairseq-bin", "preprocess"))
    ap.add_argument("--repo", default=REPO)
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        arch = subprocess.run(["git", "--git-dir", a.repo, "archive", "HEAD"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=arch, check=True)
        shutil.rmtree(out, ignore_errors=True)

        # words: a Zipf-like draw so the counts differ; 3 splits
        d = os.path.join(out, "words")
        os.makedirs(d)
        zipf = [w for i, w in enumerate(WORDS) for _ in range(max(1, 40 // (i + 1)))]
        for split, n in (("train", 60), ("valid", 12), ("test", 12)):
            write(os.path.join(d, split + ".txt"), word_lines(rng, n, zipf + ["zzrare%d" % rng.randrange(9)]))
        run(src, ["--only-source", "--trainpref", "train.txt", "--validpref", "valid.txt", "--testpref", "test.txt",
                  "--destdir", ".", "--workers", "1"], d)

        # bytes (enwik8 form): each byte of a line as its decimal value
        d = os.path.join(out, "bytes")
        os.makedirs(d)
        text = ("Mega: moving average equipped gated attention. Überall café naïve — "
                "the quick brown fox jumps over the lazy dog.").encode("utf-8")
        for split, n in (("train", 30), ("valid", 6)):
            lines = []
            for _ in range(n):
                s = rng.randrange(len(text) - 20)
                lines.append(" ".join(str(b) for b in text[s:s + rng.randrange(5, 20)]))
            write(os.path.join(d, split + ".txt"), lines)
        run(src, ["--only-source", "--trainpref", "train.txt", "--validpref", "valid.txt", "--destdir", ".",
                  "--workers", "1"], d)

        # translation: de -> en, separate dictionaries
        d = os.path.join(out, "mt")
        os.makedirs(d)
        de = "der die das und ist ein eine nicht mit von zu".split()
        for split, n in (("train", 24), ("valid", 6)):
            src_l = word_lines(rng, n, de)
            write(os.path.join(d, split + ".de"), src_l)
            write(os.path.join(d, split + ".en"), word_lines(rng, n, WORDS[:14]))
        run(src, ["--source-lang", "de", "--target-lang", "en", "--trainpref", "train", "--validpref", "valid",
                  "--destdir", ".", "--workers", "1"], d)

        # LRA text layout: src-bin and label-bin, each by --only-source
        d = os.path.join(out, "lra")
        os.makedirs(d)
        ops = ["[MAX", "[MIN", "[MED", "[SM", "]"] + [str(k) for k in range(10)]
        for split, n in (("train", 20), ("valid", 5)):
            write(os.path.join(d, split + ".input"), word_lines(rng, n, ops))
            write(os.path.join(d, split + ".label"), [str(rng.randrange(10)) for _ in range(n)])
        for sub, ext in (("src-bin", "input"), ("label-bin", "label")):
            run(src, ["--only-source", "--trainpref", "train." + ext, "--validpref", "valid." + ext,
                      "--destdir", sub, "--workers", "1"], d)

        prefixes = []
        for root, _, files in os.walk(out):
            for f in files:
                if f == "preprocess.log":
                    os.remove(os.path.join(root, f))
                elif f.endswith(".idx"):
                    prefixes.append(os.path.join(root, f[:-4]))
        read_back(src, sorted(prefixes))


if __name__ == "__main__":
    main()
