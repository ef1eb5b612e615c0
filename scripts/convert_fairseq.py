#!/usr/bin/python3
"""Convert an official Mega checkpoint (fairseq .pt + dict.txt) into this project's model file.

    python3 scripts/convert_fairseq.py --checkpoint model.pt --dict dict.txt --out DIR [--unit auto|byte|word]
    python3 scripts/convert_fairseq.py --checkpoint lra.pt --dict src-bin/dict.txt --label-dict label-bin/dict.txt --out DIR
    python3 scripts/convert_fairseq.py --checkpoint wmt.pt --dict dict.en.txt --tgt-dict dict.de.txt --out DIR

The official repository (facebookresearch/mega, a fork of fairseq) saves checkpoints with
fairseq/checkpoint_utils.py save_state: a pickled dict {"args": argparse.Namespace, "model": the
state dict, "optimizer_history": [...], "extra_state": {...}, ...}, whose extra state holds
objects of fairseq classes (meters, iterators). This script reads it WITHOUT fairseq and without
running anything the file names: the unpickler resolves only tensors, storages and plain data
(_allowed_globals), the classes of fairseq, fairseq_cli, omegaconf and hydra become inert stand-ins,
and any other global is refused with one line naming it; only the args and the tensors are used.

It writes DIR/model.safetensors: the weights by their official names (this project loads them by
those names, docs/checkpoints.md), the model config from the fairseq arguments, the fairseq
dictionary as the vocabulary (docs/interop.md), and the training --tokens-per-sample, which
`mega eval` uses as the official evaluation does. Supported: the language models (`mega_lm*`
architectures, task language_modeling), the translation models (model `mega`: `mega_wmt_en_de*`
architectures, task translation), the Long Range Arena classifiers with the Mega encoder
(model `lra`, `mega_lra_*` architectures, tasks lra-text and lra-image) and the raw speech
classifier (model `sc_raw`, `mega_sc_raw*` architectures, task speech_commands; --speech-dir for
its input statistics, docs/speech.md). Everything else is refused with one line naming it.

Exit status: 0 converted, 2 refused or failed (nothing written).
Needs /usr/bin/python3 with torch and numpy (whoever holds a .pt has torch).
"""
import argparse
import importlib
import json
import math
import os
import struct
import sys
import tempfile
import types

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq Dictionary(): bos 0, pad 1, eos 2, unk 3
FORMAT = "mega-convert-fairseq 1"


class Refused(Exception):
    """a checkpoint, dictionary or option this converter cannot represent (one line)"""


# ---- reading a fairseq checkpoint without fairseq, and without running anything it names ----
#
# A .pt file is a pickle, and an unrestricted unpickler calls whatever callable the file names
# (os.system, builtins.eval, ...) while it loads. torch.load is therefore given a pickle module
# whose Unpickler resolves only the globals of _allowed_globals (data, tensors, storages), builds
# inert stand-ins for the classes of fairseq and its config packages, and refuses every other
# global at the opcode that names it, before anything can call it. torch's own weights_only
# unpickler is not enough: it refuses argparse.Namespace and the fairseq objects of extra_state.

class _Stub:
    """stands in for an object of a fairseq / omegaconf / hydra class: accepts any construction
    and keeps its pickled state; nothing of the real class runs"""

    def __init__(self, *args, **kwargs):
        self._args, self._kwargs = args, kwargs

    def __setstate__(self, state):
        self._state = state

    def __call__(self, *args, **kwargs):  # a stubbed function used as a reducer
        return _Stub(*args, **kwargs)


# packages a released checkpoint names in its pickle (their classes become _Stub subclasses,
# whether or not the package is installed: a real class's __setstate__ would run its code)
STUB_PACKAGES = ("fairseq", "fairseq_cli", "omegaconf", "hydra")


class Forbidden(Exception):
    """a global that the checkpoint names and that is not allowed (its 'module.name')"""


def _allowed_globals():
    """'module.name' -> object: everything a fairseq checkpoint needs that is not a fairseq class"""
    import argparse as ap
    import collections
    import copyreg
    import typing
    import torch
    ok = {"collections.OrderedDict": collections.OrderedDict, "collections.defaultdict": collections.defaultdict,
          "collections.Counter": collections.Counter, "argparse.Namespace": ap.Namespace,
          "typing.Any": typing.Any,  # the key and element types an omegaconf config records
          # protocol 0/1 objects: copyreg._reconstructor(cls, object, state) -> object.__new__(cls)
          "copyreg._reconstructor": copyreg._reconstructor, "builtins.object": object,
          "torch.Size": torch.Size, "torch.device": torch.device, "torch.Tensor": torch.Tensor,
          "torch.nn.parameter.Parameter": torch.nn.Parameter,
          "torch.serialization._get_layout": torch.serialization._get_layout}
    def latin1(text, encoding):  # the bytes of protocols 0-2: _codecs.encode(text, 'latin1'), nothing else
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise Forbidden(f"_codecs.encode with {encoding!r}"[:80])
        return text.encode("latin1")
    ok["_codecs.encode"] = latin1
    for t in (set, frozenset, bytearray, complex, slice, range, int, float, bool, str, bytes, list, dict, tuple):
        ok["builtins." + t.__name__] = t  # data types (not eval, exec, getattr, open, __import__, ...)
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
                 "_rebuild_parameter_with_state", "_rebuild_sparse_tensor", "_rebuild_sparse_csr_tensor",
                 "_rebuild_meta_tensor_no_storage"):
        if hasattr(torch._utils, name):
            ok["torch._utils." + name] = getattr(torch._utils, name)
    for name, v in vars(torch).items():  # torch.float32, torch.strided, torch.contiguous_format, ...
        if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
            ok["torch." + name] = v
    for s in torch._storage_classes:  # torch.FloatStorage, torch.UntypedStorage, ...
        ok[f"{s.__module__}.{s.__name__}"] = ok[f"torch.{s.__name__}"] = s
    for core in ("numpy._core", "numpy.core"):  # numpy scalars and arrays (a loss kept as float64)
        try:
            mm, num = importlib.import_module(core + ".multiarray"), importlib.import_module(core + ".numeric")
        except ImportError:
            continue
        for c in ("numpy._core", "numpy.core"):  # numpy 2 reads the files of numpy 1
            ok[c + ".multiarray.scalar"], ok[c + ".multiarray._reconstruct"] = mm.scalar, mm._reconstruct
            ok[c + ".numeric._frombuffer"] = num._frombuffer  # protocol 5 arrays
        ok["numpy.dtype"], ok["numpy.ndarray"] = mm.dtype, mm.ndarray
        break
    return ok


def _restricted_pickle_module():
    """a module with the pickle interface torch.load uses (Unpickler, load, __name__), whose
    unpickler resolves only the allowed globals"""
    import _compat_pickle
    import io
    import pickle
    allowed, stubs = _allowed_globals(), {}

    class Unpickler(pickle._Unpickler):  # the Python one: its BUILD can be guarded
        dispatch = dict(pickle._Unpickler.dispatch)

        def load_build(self):
            # BUILD on a class would set attributes of an allowed class (torch.Tensor, ...) for the
            # whole process; state is for instances only
            if isinstance(self.stack[-2], type):
                c = self.stack[-2]
                raise Forbidden(f"{c.__module__}.{c.__qualname__} (setting attributes of a class)")
            super().load_build()
        dispatch[pickle.BUILD[0]] = load_build

        def find_class(self, module, name):
            # the Python 2 spellings protocols 0-2 write (__builtin__.set, copy_reg._reconstructor)
            module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
            key = f"{module}.{name}"
            if key in allowed:
                return allowed[key]
            if module.split(".")[0] in STUB_PACKAGES and name.isidentifier():
                if key not in stubs:
                    stubs[key] = type(name, (_Stub,), {"__module__": module})
                return stubs[key]
            raise Forbidden(key)

    def load(f, **kwargs):
        return Unpickler(f, **kwargs).load()

    m = types.ModuleType("convert_fairseq_restricted_pickle")
    m.__dict__.update({k: v for k, v in vars(pickle).items() if not k.startswith("__")})
    for k in ("_Unpickler", "_load", "_loads"):  # every way in is through the Unpickler above
        m.__dict__.pop(k, None)
    m.Unpickler, m.load, m.loads = Unpickler, load, lambda b, **kw: load(io.BytesIO(b), **kw)
    return m


class TorchScript(Exception):
    """the file is a TorchScript archive (code), which torch.load hands to torch.jit.load"""


def _torch_load(torch, f, m):
    """torch.load through the pickle module m. torch 1.13 ignores its pickle_module argument unless
    weights_only is set (it unpickles with its module global `pickle`), so that global is m while
    torch.load runs (_restricted_load checks that the restriction holds before any real file), and
    torch.jit.load refuses instead of loading a TorchScript archive"""
    import warnings

    def no_jit(*args, **kwargs):
        raise TorchScript()
    ser, jit_load = torch.serialization, torch.jit.load
    saved = ser.pickle
    ser.pickle, torch.jit.load = m, no_jit
    try:
        with warnings.catch_warnings():  # torch's notes on storages and sources; the converter prints one line
            warnings.simplefilter("ignore")
            return torch.load(f, map_location="cpu", pickle_module=m)  # m.Unpickler: the allowed globals only
    finally:
        ser.pickle, torch.jit.load = saved, jit_load


def _restricted_load(torch, path):
    import io
    m = _restricted_pickle_module()
    for zipped in (True, False):  # both formats refuse a global that is not allowed, or nothing is read
        probe = io.BytesIO()
        torch.save({"probe": types.SimpleNamespace()}, probe, _use_new_zipfile_serialization=zipped)
        probe.seek(0)
        try:
            _torch_load(torch, probe, m)
        except Forbidden:
            continue
        raise Refused(f"this PyTorch ({torch.__version__}) does not let the converter restrict what a checkpoint "
                      "may name when it loads: not reading it")
    return _torch_load(torch, path, m)


def load_checkpoint(path):
    try:
        import torch
    except ImportError as e:
        raise Refused(f"PyTorch is needed to read a .pt file ({e}); use /usr/bin/python3 with python3-torch") from e
    if not os.path.isfile(path):
        raise Refused(f"--checkpoint '{path}': no such file")
    try:
        ck = _restricted_load(torch, path)
    except Refused:
        raise
    except TorchScript:
        raise Refused(f"--checkpoint '{path}' is a TorchScript archive (code), not a fairseq checkpoint") from None
    except Forbidden as e:
        raise Refused(f"--checkpoint '{path}' names {e.args[0]}, which a checkpoint may not name (only tensors, plain "
                      "data and fairseq classes, read as inert stand-ins): refused before it could run") from None
    except Exception as e:  # noqa: BLE001 - a corrupt or truncated file raises many kinds
        raise Refused(f"--checkpoint '{path}' is not a readable PyTorch checkpoint ({type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120] if str(e) else 'no detail'})") from e
    if not isinstance(ck, dict) or "model" not in ck or not isinstance(ck["model"], dict):
        raise Refused(f"--checkpoint '{path}' is not a fairseq checkpoint (no 'model' state dict)")
    return ck


def checkpoint_args(ck):
    """the model arguments: args (argparse.Namespace) or cfg['model'] (a dict or omegaconf node)"""
    a = ck.get("args")
    if a is not None and hasattr(a, "__dict__") and not isinstance(a, _Stub):
        return dict(vars(a))
    cfg = ck.get("cfg")
    if isinstance(cfg, dict):
        m = cfg.get("model")
        if m is not None and hasattr(m, "__dict__") and not isinstance(m, _Stub):
            return dict(vars(m))
        if isinstance(m, dict):
            return dict(m)
    raise Refused("the checkpoint has no readable model arguments ('args' or 'cfg'); an omegaconf 'cfg' needs "
                  "fairseq to read: re-save it with args")


# ---- the dictionary -------------------------------------------------------------------------

def read_dict(path):
    """the tokens of a fairseq dict.txt in id order after the 4 specials, as Dictionary.add_from_file
    reads what Dictionary.save writes: 'token count' per line (counts of 0 for the madeupword
    fillers), trailing whitespace ignored, and an optional '#fairseq:overwrite' flag after the count
    that lets a token repeat an earlier one: the repeat gets a new id and takes the spelling over"""
    if not os.path.isfile(path):
        raise Refused(f"--dict '{path}': no such file")
    toks = []
    seen = set()
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip()
            except UnicodeDecodeError as e:
                raise Refused(f"--dict {path}:{n}: not UTF-8 ({e.reason})") from e
            word, sep, count = line.rpartition(" ")
            overwrite = bool(sep) and count == "#fairseq:overwrite"
            if overwrite:
                word, sep, count = word.rpartition(" ")
            if not sep or not word:
                raise Refused(f"--dict {path}:{n}: expected 'token count', got {line[:60]!r}")
            try:
                int(count)
            except ValueError:
                raise Refused(f"--dict {path}:{n}: the count {count[:20]!r} is not an integer") from None
            if word in seen and not overwrite:
                raise Refused(f"--dict {path}:{n}: duplicate token {word[:40]!r} (fairseq refuses it without "
                              "'#fairseq:overwrite')")
            seen.add(word)
            toks.append(word)
    if not toks:
        raise Refused(f"--dict '{path}' is empty")
    return toks


def is_filler(t):
    """a padding token of Dictionary.pad_to_multiple_ ('madeupword{:04d}')"""
    return t.startswith("madeupword") and len(t) >= 14 and t[10:].isdigit() and t[10:].isascii()


def vocabulary(dict_tokens, rows, unit):
    """the full id -> token list for an embedding of `rows` rows, and the unit"""
    toks = SPECIALS + dict_tokens
    if len(toks) > rows:
        raise Refused(f"the dictionary has {len(toks)} tokens (with the 4 specials) but the model's embedding has "
                      f"{rows} rows: is it the dict.txt of this checkpoint?")
    if rows - len(toks) >= 8:
        raise Refused(f"the model's embedding has {rows} rows, {rows - len(toks)} more than the dictionary's "
                      f"{len(toks)} tokens (the padding of a fairseq dictionary to a multiple of 8 adds at most 7): is it the dict.txt of this "
                      "checkpoint?")
    toks += ["madeupword%04d" % i for i in range(rows - len(toks))]  # Dictionary.pad_to_multiple_
    if unit == "auto":
        def is_byte(t):
            return t.isdigit() and t.isascii() and (t == "0" or not t.startswith("0")) and int(t) < 256

        # the fillers Dictionary.save writes (madeupword0000 0, ...) and a special symbol written
        # as a token (<unk> in a word list) say nothing of the unit
        ordinary = [t for t in dict_tokens if not is_filler(t) and t not in SPECIALS]
        unit = "byte" if ordinary and all(is_byte(t) for t in ordinary) else "word"
    return toks, unit


# ---- the model config -----------------------------------------------------------------------

# the official names of our config fields: written from the library's tables (include/mega.h
# mega_official_name) by `build/test_models --write-official`, which also checks that this file
# still matches them
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "official_names.json")) as _f:
    OFFICIAL = json.load(_f)


def official_name(kind, field, side=None):
    """the fairseq argument that our config field `field` of the model kind ("mega_lm", "mega_cls",
    "mega_s2s") reads: the kind's own name, else the block's with the side for %s"""
    k = OFFICIAL["kinds"][kind]
    for n in k["names"] + OFFICIAL["block"]:
        if n["field"] == field and n["fairseq"]:
            return n["fairseq"].replace("%s", side or k["side"] or "")
    raise KeyError(f"{kind} has no official name for {field}")


def official_args(kind):
    """every fairseq argument the kind's config reader takes (the block's training settings only
    where the reader takes them)"""
    k = OFFICIAL["kinds"][kind]
    args = [n["fairseq"].replace("%s", k["side"] or "") for n in k["names"] if n["fairseq"]]
    for n in OFFICIAL["block"]:
        if n["fairseq"] and not n["training"] and n["field"] not in {m["field"] for m in k["names"]}:
            args.append(n["fairseq"].replace("%s", k["side"]))
    return args


# fairseq/models/mega_lm.py base_lm_architecture: the defaults of the arguments we map
LM_DEFAULTS = {
    "decoder_embed_dim": 512, "decoder_hidden_dim": 1664, "decoder_z_dim": 128, "decoder_n_dim": 16,
    "decoder_layers": 6, "decoder_chunk_size": -1, "rel_pos_bias": "simple", "normalization_type": "layernorm",
    "normalize_before": False, "normalize_embedding": False, "no_scale_embedding": False,
    "no_affine_final_norm": False, "share_decoder_input_output_embed": False, "activation_fn": "silu",
    "attention_activation_fn": "softmax", "truncation_length": 2048, "adaptive_input": False,
    "adaptive_softmax_cutoff": None, "max_target_positions": 1024, "adaptive_input_factor": 4,
    "adaptive_input_cutoff": None, "adaptive_softmax_factor": 4, "adaptive_softmax_dropout": 0,
    "tie_adaptive_weights": False, "tie_adaptive_proj": False,
}
NULLABLE = ("adaptive_softmax_cutoff", "adaptive_input_cutoff", "truncation_length")


def cutoffs(v, what):
    """a cutoff list as the official options.eval_str_list reads it ("20000,60000", a list, or an int)"""
    if v is None:
        return None
    try:
        xs = [int(x) for x in (v.split(",") if isinstance(v, str) else v if isinstance(v, (list, tuple)) else [v])]
    except (TypeError, ValueError):
        raise Refused(f"{what} {v!r} is not a list of integers") from None
    return ",".join(str(x) for x in xs)


def lm_config(a, rows):
    g = {k: a.get(k, v) if a.get(k, v) is not None or k in NULLABLE else v for k, v in LM_DEFAULTS.items()}
    g["decoder_ffn_embed_dim"] = a.get("decoder_ffn_embed_dim", g["decoder_hidden_dim"])
    g["adaptive_input_cutoff"] = cutoffs(g["adaptive_input_cutoff"], "adaptive_input_cutoff")
    g["adaptive_softmax_cutoff"] = cutoffs(g["adaptive_softmax_cutoff"], "adaptive_softmax_cutoff")
    if g["adaptive_input"] and g["adaptive_input_cutoff"] is None:
        raise Refused("adaptive_input is set but adaptive_input_cutoff is not")
    if g["adaptive_softmax_cutoff"] is not None:
        g["share_decoder_input_output_embed"] = False  # the official decoder ignores it then
    elif g["adaptive_input"] and g["share_decoder_input_output_embed"]:
        raise Refused("share_decoder_input_output_embed with an adaptive input and no adaptive softmax (the "
                      "official decoder cannot build it)")
    if a.get("decoder_input_dim", g["decoder_embed_dim"]) != g["decoder_embed_dim"]:
        raise Refused(f"decoder_input_dim {a.get('decoder_input_dim')} != decoder_embed_dim {g['decoder_embed_dim']} "
                      "(an input projection) is not supported")
    if g["normalize_embedding"]:
        raise Refused("normalize_embedding (a norm after the embedding) is not supported")
    # the reader's arguments that have a value here (vocab_size and padding_idx come from the
    # dictionary, the input cutoff only with an adaptive input)
    cfg = {k: g[k] for k in official_args("mega_lm") if k in g and k != "adaptive_input_cutoff"}
    if g["adaptive_input"]:
        cfg["adaptive_input_cutoff"] = g["adaptive_input_cutoff"]
    cfg["vocab_size"], cfg["padding_idx"] = rows, SPECIALS.index("<pad>")
    return cfg


def embedding_rows(sd, a):
    """(rows, width) of the token embedding: one table, or the bands of an adaptive input"""
    if a.get("adaptive_input"):
        bands, i = [], 0
        while f"decoder.embed_tokens.embeddings.{i}.0.weight" in sd:
            bands.append(sd[f"decoder.embed_tokens.embeddings.{i}.0.weight"])
            i += 1
        if not bands or any(not hasattr(b, "shape") or len(b.shape) != 2 for b in bands):
            raise Refused("the state dict has no decoder.embed_tokens.embeddings.<i>.0.weight (adaptive input)")
        return sum(int(b.shape[0]) for b in bands), int(bands[0].shape[1])
    emb = sd.get("decoder.embed_tokens.weight")
    if emb is None or not hasattr(emb, "shape") or len(emb.shape) != 2:
        raise Refused("the state dict has no decoder.embed_tokens.weight [V, D]")
    return int(emb.shape[0]), int(emb.shape[1])


def drop_tied(tensors, cfg):
    """the adaptive softmax's second names of the adaptive input's matrices (the official state dict
    holds a tied tensor under both names; this project stores it once, under the input's): checked
    equal, then dropped"""
    if not (cfg.get("adaptive_softmax_cutoff") and cfg.get("tie_adaptive_weights")):
        return
    import numpy as np
    pairs = [("decoder.adaptive_softmax.head.word_proj.weight", "decoder.embed_tokens.embeddings.0.0.weight")]
    i = 0
    while f"decoder.embed_tokens.embeddings.{i + 1}.0.weight" in tensors:
        pairs.append((f"decoder.adaptive_softmax.tail.{i}.2.weight", f"decoder.embed_tokens.embeddings.{i + 1}.0.weight"))
        if cfg.get("tie_adaptive_proj"):
            pairs.append((f"decoder.adaptive_softmax.tail.{i}.0.weight", f"decoder.embed_tokens.embeddings.{i + 1}.1.weight"))
        i += 1
    for dup, src in pairs:
        if dup not in tensors:
            continue
        if src not in tensors or tensors[dup].shape != tensors[src].shape or not np.array_equal(tensors[dup], tensors[src]):
            raise Refused(f"{dup} should be the tied {src} (tie_adaptive_weights) but differs from it")
        del tensors[dup]


# fairseq/models/lra/model.py: base_architecture and the mega_lra_* architectures, for arguments a
# checkpoint leaves out (a saved Namespace normally holds them all)
LRA_BASE = {
    "encoder_hidden_dim": 2048, "z_dim": 128, "n_dim": 2, "encoder_layers": 6, "encoder_embed_dim": 512,
    "classifier_out_dim": 2048, "sentence_class_num": 2, "activation_fn": "gelu", "attention_activation_fn": "relu2",
    "classifier_layers": 1, "classifier_activation_fn": "gelu", "encoder_normalize_before": False,
    "normalize_embedding": False, "layer_type": "transformer", "chunk_size": -1, "truncation_length": None,
    "rel_pos_bias": "simple", "norm_type": "layernorm", "sen_rep_type": "mp", "use_p": False,
}
LRA_ARCH = {  # the architecture's own defaults over LRA_BASE (layer_type mega for all)
    "mega_lra_listop": dict(encoder_hidden_dim=160, z_dim=64, n_dim=16, encoder_layers=6, activation_fn="silu",
                            encoder_embed_dim=80, classifier_out_dim=160, truncation_length=1024, max_positions=2002,
                            norm_type="scalenorm", sentence_class_num=10),
    "mega_lra_imdb": dict(encoder_hidden_dim=256, z_dim=64, n_dim=16, encoder_layers=4, activation_fn="silu",
                          encoder_embed_dim=128, classifier_out_dim=256, truncation_length=1024, max_positions=4002,
                          norm_type="scalenorm"),
    "mega_lra_aan": dict(encoder_hidden_dim=256, z_dim=64, n_dim=16, encoder_layers=6, activation_fn="silu",
                         encoder_embed_dim=128, classifier_out_dim=256, truncation_length=1024, max_positions=4002),
    "mega_lra_cifar10": dict(encoder_hidden_dim=320, z_dim=96, n_dim=16, encoder_layers=8, activation_fn="silu",
                             encoder_embed_dim=160, norm_type="batchnorm", classifier_out_dim=320,
                             sentence_class_num=10, chunk_size=1024, truncation_length=1024, max_positions=1024),
    "mega_lra_pf32": dict(encoder_hidden_dim=256, z_dim=64, n_dim=16, encoder_layers=6, activation_fn="silu",
                          encoder_embed_dim=128, norm_type="batchnorm", classifier_out_dim=256, chunk_size=1024,
                          truncation_length=1024, max_positions=1024),
    "mega_lra_pf128": dict(encoder_hidden_dim=128, z_dim=32, n_dim=16, encoder_layers=4, activation_fn="silu",
                           encoder_embed_dim=64, norm_type="batchnorm", classifier_out_dim=128,
                           chunk_size=128 * 128, truncation_length=4096, max_positions=128 * 128),
}
# fairseq/models/speech_commands/model.py base_architecture and the mega_sc_raw* architectures (the
# raw speech classifier; its state dict has the LRA model's names)
_SC = dict(encoder_layers=6, encoder_embed_dim=60, encoder_hidden_dim=120, z_dim=30, n_dim=16, activation_fn="silu",
           attention_activation_fn="laplace", norm_type="batchnorm", encoder_normalize_before=True,
           classifier_layers=1, classifier_out_dim=120, sentence_class_num=10, classifier_activation_fn="gelu",
           chunk_size=1000, truncation_length=1000, max_positions=16000, sen_rep_type="mp")
SC_ARCH = {"sc_raw": _SC, "mega_sc_raw": _SC, "mega_sc_raw_base": _SC,
           "mega_sc_raw_big": dict(_SC, encoder_embed_dim=72, encoder_hidden_dim=144, z_dim=36, classifier_out_dim=144)}
LRA_ARCH.update(SC_ARCH)
# SpeechCommandsDataset.SUBSET_CLASSES and ALL_CLASSES (fairseq/data/audio/speech_commands_dataset.py)
SC10 = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
SC35 = ["bed", "cat", "down", "five", "forward", "go", "house", "left", "marvin", "no", "on", "right", "sheila", "tree",
        "up", "visual", "yes", "backward", "bird", "dog", "eight", "follow", "four", "happy", "learn", "nine", "off",
        "one", "seven", "six", "stop", "three", "two", "wow", "zero"]


def lra_config(a, sd):
    """the classifier config (the official argument names mega_cls_config_from_json reads) of an
    `lra` checkpoint with a Mega encoder, from its arguments and its state dict"""
    arch = str(a.get("arch", ""))
    g = dict(LRA_BASE)
    if arch in LRA_ARCH:
        g.update(layer_type="mega", **LRA_ARCH[arch])
    g.update({k: v for k, v in a.items() if v is not None or k == "truncation_length"})
    if g["layer_type"] != "mega":
        raise Refused(f"LRA layer_type '{g['layer_type']}' is not supported: only the Mega encoder (layer_type mega) "
                      "is converted")
    for k, why in (("normalize_embedding", "a norm after the embedding"), ("use_p", "prediction from p")):
        if g.get(k):
            raise Refused(f"{k} ({why}) is not supported")
    g.setdefault("encoder_ffn_embed_dim", g["encoder_hidden_dim"])
    D = g["encoder_embed_dim"]
    g.setdefault("classifier_in_dim", D)
    if g["classifier_in_dim"] not in (D, 2 * D):
        raise Refused(f"classifier_in_dim {g['classifier_in_dim']} is neither encoder_embed_dim {D} nor twice it")
    if "encoder.encoder.embed_tokens.embed.weight" in sd:
        emb = sd["encoder.encoder.embed_tokens.embed.weight"]
        embedding, rows = "sparse", int(emb.shape[0])
        if int(emb.shape[1]) != D:
            raise Refused(f"the token embedding is {list(emb.shape)} but encoder_embed_dim is {D}")
    elif "encoder.encoder.embed_tokens.weight" in sd:
        embedding, rows = "linear", None  # RealNumberEmbedding: pixel values
    else:
        raise Refused("the state dict has no encoder.encoder.embed_tokens (not an LRA Mega encoder?)")
    norm = "batchnorm" if g["norm_type"] == "syncbatchnorm" else g["norm_type"]  # the same at evaluation
    # our fields from the LRA arguments, under the names mega_cls_config_from_json reads
    ours = {"layers": g["encoder_layers"], "embed-dim": D, "z-dim": g["z_dim"], "hidden-dim": g["encoder_hidden_dim"],
            "n-dim": g["n_dim"], "ffn-dim": g["encoder_ffn_embed_dim"], "chunk-size": g["chunk_size"],
            "truncation": g["truncation_length"], "max-positions": g["max_positions"],
            "attention-activation": g["attention_activation_fn"], "rel-pos-bias": g["rel_pos_bias"],
            "norm-type": norm, "prenorm": bool(g["encoder_normalize_before"]), "activation": g["activation_fn"],
            "embedding": embedding, "pool": g["sen_rep_type"], "classifier-layers": g["classifier_layers"],
            "classifier-dim": g["classifier_out_dim"], "classifier-activation": g["classifier_activation_fn"],
            "classes": g["sentence_class_num"], "vocab-size": rows,
            "padding-idx": SPECIALS.index("<pad>") if rows else None, "two-tower": g["classifier_in_dim"] == 2 * D}
    cfg = {official_name("mega_cls", field): v for field, v in ours.items()}
    return cfg, rows


# ---- writing --------------------------------------------------------------------------------

def safetensors_bytes(tensors, metadata):
    """a safetensors file (F32 little-endian; integer arrays as I64) of name -> numpy array, names sorted"""
    import numpy as np
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        integer = np.asarray(tensors[name]).dtype.kind in "iu"  # batchnorm's num_batches_tracked: I64
        a = np.ascontiguousarray(tensors[name], dtype="<i8" if integer else "<f4")
        b = a.tobytes()
        header[name] = {"dtype": "I64" if integer else "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def weights(sd):
    """the state dict as float32 arrays (integer buffers as integers), without the buffers that are not weights"""
    tensors = {}
    for k, v in sd.items():
        if k.endswith("_float_tensor") or k.endswith(".version") or k == "version":
            continue
        if not hasattr(v, "detach"):
            raise Refused(f"state dict entry '{k}' is not a tensor")
        v = v.detach().cpu()
        # integer buffers (batchnorm's num_batches_tracked) stay integers; the rest float32
        tensors[k] = (v if not v.is_floating_point() else v.float()).numpy()
    return tensors


def lra_image_meta(a, classes):
    """the metadata an image classifier of this project carries (mega train --task classify with
    --embedding real: the pixel vocabulary with its normalisation) for an lra-image checkpoint:
    LRAImageTask.__init__ (fairseq/tasks/long_range_arena.py) normalises each pixel p to
    (p / 255 - mean) / std with --pixel-normalization, (0.5, 0.5) when it is not given; the data
    format is the task's layout (input/SPLIT.src, label/SPLIT.label), whose integer label k is
    class k"""
    pn = a.get("pixel_normalization")
    pn = [0.5, 0.5] if pn is None else pn
    ok = isinstance(pn, (list, tuple)) and len(pn) == 2 and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in pn) and pn[1] > 0
    if not ok:
        raise Refused(f"pixel_normalization {pn!r} is not a mean and a std > 0")
    return {"vocab": json.dumps({"kind": "pixels", "size": 257, "pad": 256, "real": True, "mean": float(pn[0]),
                                 "std": float(pn[1])}), "data-format": "lra-image",
            "classes": json.dumps([str(k) for k in range(classes)])}


def convert_lra(checkpoint, ck, a, dict_path, label_dict, out):
    """an `lra` classifier (fairseq/models/lra/model.py LRAModel with MegaLRAEncoder). Text tasks
    (lra-text) index dict.txt of src-bin, to which the task appends <CLS>; the classes are the
    tokens of label-bin/dict.txt in order (the task's target is the label id minus the 4
    specials)."""
    sd = ck["model"]
    cfg, rows = lra_config(a, sd)
    meta = {"task": "classify", "format": FORMAT,
            "source": f"fairseq checkpoint {os.path.basename(checkpoint)}, arch {a.get('arch', '?')}"}
    if rows is not None:
        if not dict_path:
            raise Refused("a text LRA model needs --dict (src-bin/dict.txt of its data)")
        toks = SPECIALS + read_dict(dict_path)
        if "<CLS>" not in toks:
            toks.append("<CLS>")  # LRATextTask.setup_task: data_dict.add_symbol('<CLS>')
        if len(toks) != rows:
            raise Refused(f"the dictionary has {len(toks)} tokens (with the 4 specials and <CLS>) but the model's "
                          f"embedding has {rows} rows: is it the src-bin/dict.txt of this checkpoint?")
        meta["vocab"] = json.dumps({"kind": "fairseq", "unit": "word", "tokens": toks, "bos": 0, "pad": 1, "eos": 2,
                                    "unk": 3, "cls": toks.index("<CLS>")})
    if label_dict:
        names = read_dict(label_dict)
        if len(names) != cfg["sentence_class_num"]:
            raise Refused(f"--label-dict has {len(names)} labels but the model has {cfg['sentence_class_num']} classes")
        meta["classes"] = json.dumps(names)
    if rows is None:
        meta = {**lra_image_meta(a, cfg["sentence_class_num"]), **meta}  # --label-dict's class names kept
        del meta["format"]  # as sc_raw: read as a classifier of this project on its data format
    meta["config"] = json.dumps(cfg)
    tensors = weights(sd)
    os.makedirs(out, exist_ok=True)
    write_atomic(os.path.join(out, "model.safetensors"), safetensors_bytes(tensors, meta))
    return {"arch": a.get("arch", "?"), "tokens": rows or 0, "unit": "word" if rows else "pixels",
            "tensors": len(tensors), "tokens_per_sample": None}


def speech_stats(root, words, L=16000):
    """per sample index mean and std + 1e-5 of the training clips of a Speech Commands directory
    (the clips neither list names; clips shorter than L dropped), as the official normalise_data
    computes them (unbiased std) on audio in [-1, 1] (16-bit PCM / 32768)"""
    import wave
    import numpy as np
    held = set()
    for name in ("validation_list.txt", "testing_list.txt"):
        p = os.path.join(root, name)
        if os.path.exists(p):
            held.update(line.strip() for line in open(p) if line.strip())
    s1, s2, n = np.zeros(L), np.zeros(L), 0
    for w in words:
        d = os.path.join(root, w)
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if not f.lower().endswith(".wav") or f"{w}/{f}" in held:
                continue
            try:
                with wave.open(os.path.join(d, f)) as r:
                    if r.getnchannels() != 1 or r.getframerate() != 16000 or r.getsampwidth() != 2:
                        raise Refused(f"{d}/{f}: not 16 kHz mono 16-bit PCM")
                    x = np.frombuffer(r.readframes(r.getnframes()), dtype="<i2").astype(np.float64) / 32768
            except (wave.Error, EOFError) as e:
                raise Refused(f"{d}/{f}: {e}") from None
            if len(x) != L:
                continue
            s1 += x
            s2 += x * x
            n += 1
    if n < 2:
        raise Refused(f"--speech-dir '{root}': {n} training clips of {L} samples (at least 2 are needed)")
    mean = s1 / n
    std = np.sqrt(np.maximum(s2 - n * mean * mean, 0) / (n - 1)) + 1e-5
    return mean.astype(np.float32), std.astype(np.float32), n


def convert_sc(checkpoint, ck, a, speech_dir, out):
    """an `sc_raw` raw speech classifier (fairseq/models/speech_commands/model.py SCRawModel with
    MegaSCRawEncoder). Without --speech-dir the model takes its input as the official model does
    (already normalised per sample index); with it, the statistics of that directory's training
    clips are stored (input_norm.*) and the model reads raw clips."""
    sd = ck["model"]
    if not isinstance(sd, dict):
        raise Refused("the checkpoint's 'model' is not a state dict")
    cfg, rows = lra_config(a, sd)
    if rows is not None:
        raise Refused("an sc_raw checkpoint with a token embedding: not the raw speech model")
    C = cfg["sentence_class_num"]
    words = SC35 if a.get("sc_all_classes") or C == 35 else SC10
    if C != len(words):
        raise Refused(f"the model has {C} classes, neither the 10 words of SC10 nor the 35 of Speech Commands")
    tensors = weights(sd)
    n = 0
    if speech_dir:
        mean, std, n = speech_stats(speech_dir, words)
        tensors["input_norm.mean"], tensors["input_norm.std"] = mean, std
        cfg["input_norm"] = int(mean.shape[0])
    # no "format" tag: the tools then read it as a classifier trained here on --format speech (its
    # classes are the words, its inputs raw audio), not as an LRA model with a fairseq dictionary
    meta = {"task": "classify", "config": json.dumps(cfg), "classes": json.dumps(words),
            "vocab": json.dumps({"kind": "real", "size": 0, "pad": -1}), "data-format": "speech",
            "source": f"fairseq checkpoint {os.path.basename(checkpoint)}, arch {a.get('arch', '?')}"}
    os.makedirs(out, exist_ok=True)
    write_atomic(os.path.join(out, "model.safetensors"), safetensors_bytes(tensors, meta))
    return {"arch": a.get("arch", "?"), "tokens": 0, "unit": f"raw audio; input statistics of {n} clips" if n else
            "raw audio; no input statistics: inputs already normalised", "tensors": len(tensors), "tokens_per_sample": None}


# fairseq/models/mega.py base_architecture (and DEFAULT_MAX_*_POSITIONS): the translation model's
# defaults, for arguments a checkpoint leaves out; the decoder's dimensions default to the encoder's
MT_BASE = {
    "encoder_embed_dim": 512, "encoder_hidden_dim": 1024, "encoder_z_dim": 128, "encoder_n_dim": 16,
    "encoder_layers": 6, "encoder_chunk_size": -1, "decoder_layers": 6, "rel_pos_bias": "simple",
    "normalization_type": "layernorm", "normalize_before": False, "normalize_embedding": False,
    "no_scale_embedding": False, "share_decoder_input_output_embed": False, "share_all_embeddings": False,
    "activation_fn": "silu", "attention_activation_fn": "softmax", "truncation_length": 1024,
    "max_source_positions": 1024, "max_target_positions": 1024, "adaptive_softmax_cutoff": None,
    "adaptive_input": False,
}
# the block arguments each side has ("encoder_embed_dim", "decoder_embed_dim", ...)
MT_SIDE = tuple(n["fairseq"][3:] for n in OFFICIAL["block"] if (n["fairseq"] or "").startswith("%s_"))


def mt_config(a, sd):
    """the encoder-decoder config (the official argument names mega_s2s_config_from_json reads) of a
    `mega` translation checkpoint, and the source and target embedding rows"""
    g = {k: a.get(k, v) if a.get(k, v) is not None or k in NULLABLE else v for k, v in MT_BASE.items()}
    g["encoder_ffn_embed_dim"] = a.get("encoder_ffn_embed_dim", g["encoder_hidden_dim"])
    for k in MT_SIDE:  # the decoder's default to the encoder's
        g["decoder_" + k] = a.get("decoder_" + k, g["encoder_" + k])
    if g["adaptive_softmax_cutoff"] is not None or g["adaptive_input"]:
        raise Refused("a translation model with adaptive input / adaptive softmax is not supported")
    if a.get("decoder_input_dim", g["decoder_embed_dim"]) != g["decoder_embed_dim"]:
        raise Refused("decoder_input_dim != decoder_embed_dim (an input projection) is not supported")
    rows = []
    for side in ("encoder", "decoder"):
        e = sd.get(f"{side}.embed_tokens.weight")
        if e is None or not hasattr(e, "shape") or len(e.shape) != 2:
            raise Refused(f"the state dict has no {side}.embed_tokens.weight [V, D]")
        if int(e.shape[1]) != g[f"{side}_embed_dim"]:
            raise Refused(f"{side}.embed_tokens.weight is {list(e.shape)} but {side}_embed_dim is {g[side + '_embed_dim']}")
        rows.append(int(e.shape[0]))
    cfg = dict(g)
    cfg.pop("adaptive_softmax_cutoff")
    cfg.pop("adaptive_input")
    cfg.update(src_vocab_size=rows[0], tgt_vocab_size=rows[1], padding_idx=SPECIALS.index("<pad>"),
               eos_idx=SPECIALS.index("</s>"))
    return cfg, rows


def convert_mt(checkpoint, ck, a, dict_path, tgt_dict, out):
    """a `mega` translation model (fairseq/models/mega.py MegaModel: MegaEncoder + MegaDecoder with
    gated cross-attention); --dict is the source dictionary (dict.<src>.txt), --tgt-dict the target's
    (the same file for a joined dictionary)"""
    sd = ck["model"]
    if not isinstance(sd, dict):
        raise Refused("the checkpoint's 'model' is not a state dict")
    if not dict_path or not tgt_dict:
        raise Refused("a translation model needs --dict (the source dict.<src>.txt) and --tgt-dict (dict.<tgt>.txt)")
    cfg, rows = mt_config(a, sd)
    vocabs = []
    for path, n, what in ((dict_path, rows[0], "source"), (tgt_dict, rows[1], "target")):
        toks, unit = vocabulary(read_dict(path), n, "word")
        vocabs.append({"kind": "fairseq", "unit": unit, "tokens": toks, "bos": 0, "pad": 1, "eos": 2, "unk": 3})
    meta = {"config": json.dumps(cfg), "task": "translate", "format": FORMAT,
            "vocab": json.dumps(vocabs[0]), "tgt-vocab": json.dumps(vocabs[1]),
            "source": f"fairseq checkpoint {os.path.basename(checkpoint)}, arch {a.get('arch', '?')}"}
    for k in ("source_lang", "target_lang"):
        if isinstance(a.get(k), str):
            meta[k.replace("_", "-")] = a[k]
    tensors = weights(sd)
    os.makedirs(out, exist_ok=True)
    write_atomic(os.path.join(out, "model.safetensors"), safetensors_bytes(tensors, meta))
    return {"arch": a.get("arch", "?"), "tokens": rows[0], "unit": f"word -> {rows[1]} word",
            "tensors": len(tensors), "tokens_per_sample": None}


def convert(checkpoint, dict_path, out, unit="auto", label_dict=None, tgt_dict=None, speech_dir=None):
    ck = load_checkpoint(checkpoint)
    a = checkpoint_args(ck)
    arch, task = str(a.get("arch", a.get("_name", ""))), str(a.get("task", ""))
    if arch in SC_ARCH or task == "speech_commands":
        return convert_sc(checkpoint, ck, a, speech_dir, out)
    if arch == "lra" or arch.startswith("mega_lra") or task.startswith("lra-"):
        return convert_lra(checkpoint, ck, a, dict_path, label_dict, out)
    if arch == "mega" or arch.startswith("mega_wmt"):
        return convert_mt(checkpoint, ck, a, dict_path, tgt_dict, out)
    if not arch.startswith("mega_lm"):
        raise Refused(f"architecture '{arch or '?'}' (task '{task or '?'}') is not supported: this converter "
                      "handles the Mega language models (mega_lm*), the Mega translation models (mega, mega_wmt_*), "
                      "the LRA classifiers with a Mega encoder and the raw speech classifier (sc_raw)")
    if not dict_path:
        raise Refused("a language model needs --dict (its dict.txt)")
    sd = ck["model"]
    if not isinstance(sd, dict):
        raise Refused("the checkpoint's 'model' is not a state dict")
    rows, width = embedding_rows(sd, a)
    toks, unit = vocabulary(read_dict(dict_path), rows, unit)
    cfg = lm_config(a, rows)
    if width != cfg["decoder_embed_dim"]:
        raise Refused(f"the token embedding is {width} wide but decoder_embed_dim is {cfg['decoder_embed_dim']}")
    tensors = weights(sd)
    drop_tied(tensors, cfg)
    meta = {
        "config": json.dumps(cfg), "task": "lm", "format": FORMAT,
        "vocab": json.dumps({"kind": "fairseq", "unit": unit, "tokens": toks, "bos": 0, "pad": 1, "eos": 2, "unk": 3}),
        "source": f"fairseq checkpoint {os.path.basename(checkpoint)}, arch {arch}",
    }
    tps = a.get("tokens_per_sample")
    if isinstance(tps, int) and tps > 0:
        meta["tokens-per-sample"] = str(tps)
    data = safetensors_bytes(tensors, meta)
    os.makedirs(out, exist_ok=True)
    write_atomic(os.path.join(out, "model.safetensors"), data)
    return {"arch": arch, "tokens": len(toks), "unit": unit, "tensors": len(tensors), "tokens_per_sample": tps}


def main(argv=None):
    p = argparse.ArgumentParser(prog="convert_fairseq.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="the fairseq checkpoint (.pt)")
    p.add_argument("--dict", help="its fairseq dictionary (dict.txt; for an LRA text model src-bin/dict.txt); "
                                  "not needed for an LRA image model")
    p.add_argument("--label-dict", help="LRA: label-bin/dict.txt, whose tokens name the classes in order")
    p.add_argument("--tgt-dict", help="translation: the target dictionary dict.<tgt>.txt (--dict is the source's)")
    p.add_argument("--speech-dir", help="sc_raw: a Speech Commands directory whose training clips give the per-index "
                                        "input statistics stored in the model (without it the model takes inputs "
                                        "already normalised, as the official one)")
    p.add_argument("--out", required=True, help="output directory (model.safetensors is written there)")
    p.add_argument("--unit", default="auto", choices=["auto", "byte", "word"],
                   help="how text maps to tokens: byte (enwik8: decimal byte tokens), word (whitespace words); "
                        "auto: byte when every token is a byte value")
    o = p.parse_args(argv)
    try:
        r = convert(o.checkpoint, o.dict, o.out, o.unit, o.label_dict, o.tgt_dict, o.speech_dir)
    except Refused as e:
        print(f"convert_fairseq: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"convert_fairseq: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {os.path.join(o.out, 'model.safetensors')}: {r['arch']}, {r['tensors']} tensors, "
          f"{r['tokens']} tokens ({r['unit']} unit), tokens-per-sample {r['tokens_per_sample']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
