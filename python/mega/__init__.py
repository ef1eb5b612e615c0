"""mega: Mega sequence models from Python, over the C library libmega (ctypes; numpy in and out).

    import mega
    lm = mega.load("runs/gcide")                       # a run directory or a model .safetensors
    lm.generate(b"The ", 200, temperature=0.8, top_p=0.95, seed=1)   # bytes, as `mega generate`
    lm.logits(np.array([[84, 104, 101]]))              # float32 [B, T, V]

See docs/python.md. The library is found through MEGA_LIB, else build/libmega.so of this source
tree, else the installed libmega.so.0. Failures raise MegaError with the library's message.
"""
import ctypes
import functools
import json
import math
import os
import threading
from ctypes import byref, c_double, c_int, c_int32, c_int64, c_size_t, c_uint, c_void_p

import numpy as np

from . import _lib
from ._lib import MegaError, lib

__all__ = ["MegaError", "load", "create_lm", "LM", "Classifier", "Translator", "AdamW", "Apollo", "set_threads", "get_threads",
           "build_info", "data_rng_seed", "text_windows", "lr_schedule", "LIB_PATH"]
__version__ = "0.1.0"
LIB_PATH = _lib.LIB_PATH
_I32P = ctypes.POINTER(c_int32)
_F32P = ctypes.POINTER(ctypes.c_float)
_INT_MAX = 2**31 - 1


def _cint(name, v, lo=0):
    """v as a Python int for a C `int` parameter: [lo, INT_MAX], else MegaError (ctypes would wrap
    2**32 + 3 into 3 without a word)"""
    v = int(v)
    if not lo <= v <= _INT_MAX:
        raise MegaError(f"{name} must be in [{lo}, {_INT_MAX}], got {v}", -1, "invalid argument")
    return v


def set_threads(n):
    """threads of the library's parallel regions started from this thread (0 = all cores)"""
    lib.mega_set_threads(_cint("threads", n, -_INT_MAX - 1))


def get_threads():
    return lib.mega_get_threads()


def build_info():
    return lib.mega_build_info().decode()


def _path(p):
    return os.fsencode(os.fspath(p))


def _model_file(path, which="best"):
    """the .safetensors a path names: the file, or of a run directory its best model
    (best.safetensors, when mega train kept one) with which="best", its newest with which="last"
    (the library's rule, mega_model_file_which)"""
    buf = ctypes.create_string_buffer(4096)
    _lib.check(lib.mega_model_file_which(_path(path), which.encode(), buf, len(buf)))
    return buf.value


def _metadata(file, keys):
    """__metadata__ values of a safetensors file (None when absent)"""
    f = c_void_p()
    _lib.check(lib.mega_st_open(file, byref(f)))
    try:
        out = {}
        for k in keys:
            v = lib.mega_st_meta(f, k.encode())
            out[k] = v.decode() if v is not None else None
        return out
    finally:
        lib.mega_st_close(f)


def _kind(cfg):
    """the model kind ("mega_lm", "mega_cls", "mega_s2s") of a config JSON, by the library's rule
    (mega_model_kind_of_json); no config: "mega_lm", whose load then says what is missing"""
    if cfg is None:
        return "mega_lm"
    k = c_int()
    _lib.check(lib.mega_model_kind_of_json(cfg.encode(), byref(k)))
    return lib.mega_model_kind_name(k.value).decode()


def load(path, training=False, which="best"):
    """Load a model: a run directory of `mega train` or a model .safetensors file.

    which: of a run directory, "best" (the model of the best validation figure, best.safetensors,
    when the run kept one; else the newest) or "last" (the newest checkpoint), as the CLI's --which.

    Returns an LM (causal language model), a Classifier or a Translator (encoder-decoder), from
    the kind stored in the file. training=False loads without gradient buffers (half the memory;
    forward, logits, generate, predict, translate); training=True allows backward / train_step
    (LM and Classifier; a Translator is for inference only)."""
    file = _model_file(path, which)
    meta = _metadata(file, ["config", "vocab", "classes", "data-format"])
    kind = _kind(meta["config"])
    opts = _lib.LoadOpts(0 if training else 1, 0)
    h = c_void_p()
    if kind == "mega_s2s":
        if training:
            raise MegaError(f"{os.fsdecode(file)}: an encoder-decoder loads for translation only (training=False); "
                            "train it with `mega train --task translate`", -1, "invalid argument")
        _lib.check(lib.mega_s2s_load_ex(file, byref(opts), byref(h)))
        t = Translator(h)
        try:
            t._vocab(file)
        except MegaError:
            t.close()
            raise
        return t
    if kind == "mega_cls":
        _lib.check(lib.mega_cls_load_ex(file, byref(opts), byref(h)))
        return Classifier(h, training, meta)
    _lib.check(lib.mega_lm_load_ex(file, byref(opts), byref(h)))
    lm = LM(h, training)
    if meta["vocab"] and '"fairseq"' in meta["vocab"]:
        d = c_void_p()
        try:
            _lib.check(lib.mega_fdict_from_json(meta["vocab"].encode(), byref(d)))
        except MegaError:
            lm.close()
            raise
        lm._dict = d
        if lib.mega_fdict_size(d) != lm.vocab_size:  # as the CLI checks
            lm.close()
            raise MegaError(f"{os.fsdecode(file)}: the fairseq dictionary has {lib.mega_fdict_size(d)} tokens but the "
                            f"model's vocabulary has {lm.vocab_size}", -3, "malformed file")
    return lm


def create_lm(config=None, seed=0, **fields):
    """A new language model with the official initialisation (seed), for training.

    config: a dict (or JSON text) of the checkpoint config's fields; keyword arguments add to it
    with '_' for '-' (create_lm(layers=2, embed_dim=32, chunk_size=16)). Fields left out take
    the defaults of `mega train`."""
    cfg = json.loads(config) if isinstance(config, str) else dict(config or {})
    cfg.update({k.replace("_", "-"): v for k, v in fields.items()})
    # the library's JSON reader skips keys it does not know (checkpoints of other versions); a
    # new model's config is the user's typing, so an unknown name is refused here
    known = {n for n, _ in _lib._fields(lib.mega_lm_config_fields, 0) + _lib._fields(lib.mega_block_config_fields, 0)}
    unknown = sorted(set(cfg) - known - {"model"})
    if unknown:
        raise MegaError(f"unknown config field {unknown[0]!r} (the fields are those of `mega train --help`: "
                        f"{', '.join(sorted(known))})", -1, "invalid argument")
    c = _lib.LMConfig()
    _lib.check(lib.mega_lm_config_from_json(json.dumps(cfg).encode(), byref(c)))
    opts = _lib.LoadOpts(0, 1)  # gradients; the weights are drawn next with the seed
    h = c_void_p()
    _lib.check(lib.mega_lm_create_ex(byref(c), byref(opts), byref(h)))
    lib.mega_lm_init_params(h, int(seed) & (2**64 - 1))
    m = LM(h, True)
    m.dropout_seed = int(seed)  # `mega train --seed` seeds the initialisation and the dropout keys
    return m


def data_rng_seed(seed):
    """the initial data-order state of `mega train --seed seed`"""
    return lib.mega_data_rng_seed(int(seed) & (2**64 - 1))


def text_windows(text, batch, seq_len, state):
    """B random windows of T bytes of text, as `mega train --task lm` draws them (the library's
    mega_text_windows): returns (tokens [B, T] int32, targets [B, T] int32 = the next bytes, the
    new state). Start from data_rng_seed(seed) to get the tool's data order for that seed."""
    buf = np.frombuffer(bytes(text), dtype=np.uint8)
    batch, seq_len = _cint("batch", batch, 1), _cint("seq_len", seq_len, 1)
    tok = np.empty((batch, seq_len), dtype=np.int32)
    tgt = np.empty_like(tok)
    st = ctypes.c_uint64(int(state) & (2**64 - 1))
    _lib.check(lib.mega_text_windows(buf.ctypes.data, len(buf), int(batch), int(seq_len), byref(st),
                                     _ptr(tok, _I32P), _ptr(tgt, _I32P)))
    return tok, tgt, st.value


def lr_schedule(step, steps, lr, min_lr=1e-4, warmup=100, schedule="cosine", warmup_init_lr=-1.0, end_lr=0.0):
    """the learning rate of 0-based step `step` under `mega train`'s schedule (the library's
    mega_lr_at): cosine, linear or constant: linear warm-up to lr over `warmup` steps, then cosine
    or linear decay to min_lr at `steps`, or constant; or one of fairseq's linear_decay,
    inverse_sqrt, cosine_fairseq (warmup_init_lr, end_lr: their --warmup-init-lr and
    --end-learning-rate; docs/training.md)"""
    k = lib.mega_sched_find(str(schedule).encode())
    if k < 0:
        raise MegaError(f"schedule must be cosine, linear, constant, linear_decay, inverse_sqrt or cosine_fairseq, got {schedule!r}", -1, "invalid argument")
    s = _lib.SchedInputs(kind=k, lr=float(lr), min_lr=float(min_lr), warmup=int(warmup), steps=int(steps),
                         warmup_init_lr=float(warmup_init_lr), end_lr=float(end_lr))
    _lib.check(lib.mega_sched_check(byref(s)))
    return lib.mega_lr_at(byref(s), int(step), 0.0)


def _ptr(a, typ):
    return a.ctypes.data_as(typ) if a is not None else None


class _Model:
    """What every model kind shares: the C handle, its parameter set, training steps."""
    _free = None

    def __init__(self, handle, training):
        self._h = handle
        self.training = bool(training)
        self._ps = None
        self._last = None  # the batch shape of the last forward (for last_logits)
        # the library's model holds one forward's activations: calls on one model take turns
        # (_serialised; reentrant: logits calls forward)
        self._lock = threading.RLock()
        self.steps = 0  # train_step calls: the dropout key of each (as `mega train`)
        self.dropout_seed = 0

    # ---- lifetime
    def close(self):
        """free the C model (also done when the object is collected); idempotent"""
        h, self._h = getattr(self, "_h", None), None
        if h:
            type(self)._free(h)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down the module
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise MegaError("the model is closed", -1, "invalid argument")
        return self._h

    def _paramset(self):
        return self._paramset_fn(self._handle())

    # ---- parameters
    @property
    def num_params(self):
        """trainable parameters"""
        return lib.mega_ps_trainable(self._paramset())

    def parameters(self):
        """{official name: float32 array} (copies of the weights, non-trainable buffers included)"""
        ps = self._paramset()
        data = lib.mega_ps_data(ps)
        out = {}
        off, n, fl = c_size_t(), c_size_t(), c_uint()
        for i in range(lib.mega_ps_count(ps)):
            name = lib.mega_ps_info(ps, i, byref(off), byref(n), byref(fl)).decode()
            out[name] = np.ctypeslib.as_array(data, shape=(off.value + n.value,))[off.value:].copy()
        return out

    # ---- training
    def _need_grads(self):
        if not self.training:
            raise MegaError("this model was loaded for inference (no gradients); use mega.load(path, training=True)",
                            -1, "invalid argument")

    def zero_grad(self):
        self._need_grads()
        lib.mega_ps_zero_grad(self._paramset())

    def grad_norm(self):
        """global L2 norm of the trainable gradients"""
        self._need_grads()
        return lib.mega_ps_grad_norm(self._paramset())

    def clip_grad_norm(self, max_norm):
        """scale the gradients to a global norm of at most max_norm (as `mega train --clip`);
        returns the norm before clipping"""
        gn = self.grad_norm()
        if max_norm > 0 and gn > max_norm:
            lib.mega_ps_scale_grad(self._paramset(), max_norm / (gn + 1e-12))
        return gn

    def backward(self, scale=1.0):
        """gradients of scale x the last forward's mean loss, accumulated (zero_grad first)"""
        self._need_grads()
        _lib.check(self._backward_fn(self._handle(), float(scale)))

    def train_step(self, inputs, targets, optimizer, lr, clip=1.0, key=None, **kw):
        """One step of `mega train`: zero the gradients, forward with dropout on, backward, clip
        the global gradient norm (0 = off), AdamW update. Returns the loss before the update.
        key: the dropout key; None = the tool's key for step number self.steps (counted by this
        method) and seed self.dropout_seed, so a loop can reproduce `mega train` exactly."""
        self.zero_grad()
        if key is None:
            key = lib.mega_dropout_key(self.dropout_seed & (2**64 - 1), self.steps)
        loss = self.forward(inputs, targets, train=True, key=key, **kw)
        if not math.isfinite(loss):
            raise MegaError(f"the loss is not finite ({loss}); lower the learning rate", -8, "non-finite values")
        self.backward()
        self.clip_grad_norm(clip)
        optimizer.step(lr)
        self.steps += 1
        return loss

    def config_json(self):
        return json.loads(_lib.take_string(self._to_json(self._cfg_ptr())))

    @property
    def config(self):
        """the model's config as a dict (the checkpoint's config JSON)"""
        return self.config_json()

    def _cfg_ptr(self):
        return self._get_config(self._handle())


def _tokens2d(tokens, V, what="tokens"):
    """int32 C-contiguous [B, T] from an integer array, checked against the vocabulary [0, V)"""
    a = np.asarray(tokens)
    if a.dtype.kind not in "iu":
        raise MegaError(f"{what} must be integers, got dtype {a.dtype}", -4, "shape mismatch")
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise MegaError(f"{what} must be a non-empty [B, T] array, got shape {a.shape}", -4, "shape mismatch")
    if a.size and (a.min() < 0 or a.max() >= V):
        bad = np.argwhere((a < 0) | (a >= V))[0]
        raise MegaError(f"{what}: token {a[tuple(bad)]} at {list(bad)} is outside the vocabulary [0, {V})", -1,
                        "invalid argument")
    return np.ascontiguousarray(a, dtype=np.int32)


class LM(_Model):
    """A causal language model (mega_lm). Made by mega.load or mega.create_lm."""
    _free = lib.mega_lm_free
    _paramset_fn = lib.mega_lm_paramset
    _backward_fn = lib.mega_lm_backward
    _to_json = lib.mega_lm_config_to_json
    _get_config = lib.mega_lm_get_config
    kind = "mega_lm"

    _dict = None  # a fairseq dictionary (models converted from official checkpoints), else bytes

    def close(self):
        d, self._dict = self._dict, None
        if d:
            lib.mega_fdict_free(d)
        super().close()

    @property
    def vocab_size(self):
        return self._cfg_ptr().contents.vocab_size

    def encode(self, text, final_eos=True):
        """int32 token ids of text (str or bytes): its bytes for byte models; for a model with a
        fairseq dictionary the ids fairseq-preprocess gives (each line's tokens then </s>; the
        last line's </s> only with final_eos), see docs/interop.md"""
        if isinstance(text, str):
            text = text.encode()
        text = bytes(text)
        if self._dict is None:
            return np.frombuffer(text, dtype=np.uint8).astype(np.int32)
        n, unk = c_size_t(), c_size_t()
        _lib.check(lib.mega_fdict_encode(self._dict, text, len(text), int(final_eos), None, byref(n), None))
        out = np.empty(n.value, dtype=np.int32)
        _lib.check(lib.mega_fdict_encode(self._dict, text, len(text), int(final_eos), _ptr(out, _I32P), byref(n),
                                         byref(unk)))
        return out

    def decode(self, ids, line_start=True):
        """bytes of generated ids: the bytes themselves for byte models; for a fairseq dictionary
        the bytes or words (space-separated, </s> = newline, <s>/<pad>/fillers dropped)"""
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        if self._dict is None:
            return bytes(ids)
        ls, buf, out = c_int(1 if line_start else 0), ctypes.create_string_buffer(4096), bytearray()
        for i in ids:
            k = lib.mega_fdict_decode(self._dict, i, byref(ls), buf, len(buf))
            out += buf.raw[:k]
        return bytes(out)

    @property
    def padding_idx(self):
        return self._cfg_ptr().contents.padding_idx

    def forward(self, tokens, targets=None, train=False, key=0):
        """Full forward over tokens [B, T]. With targets [B, T] (negative entries ignored) returns
        the mean cross-entropy (nats) and keeps what backward needs; else None. train: dropout on
        (with dropout key `key`). The logits are then available from last_logits()."""
        V = self.vocab_size
        tok = _tokens2d(tokens, V)
        tgt = None
        if targets is not None:
            t = np.asarray(targets)
            if t.shape != tok.shape or t.dtype.kind not in "iu":
                raise MegaError(f"targets must be an integer array of the tokens' shape {tok.shape}, got "
                                f"{t.dtype} {t.shape}", -4, "shape mismatch")
            if t.size and t.max() >= V:
                raise MegaError(f"targets: {t.max()} is outside the vocabulary [0, {V})", -1, "invalid argument")
            if t.size and t.min() < -_INT_MAX - 1:  # int32 would wrap it into an id
                raise MegaError(f"targets: {t.min()} is below -2**31 (negative targets are ignored: use -1)", -1,
                                "invalid argument")
            tgt = np.ascontiguousarray(t, dtype=np.int32)
        B, T = _cint("batch size", tok.shape[0], 1), _cint("sequence length", tok.shape[1], 1)
        run = _lib.Run(1 if train else 0, int(key) & (2**64 - 1))
        loss, cnt = c_double(), c_int64()
        _lib.check(lib.mega_lm_forward(self._handle(), _ptr(tok, _I32P), _ptr(tgt, _I32P), B, T, byref(run),
                                       byref(loss), byref(cnt)))
        self._last = (B, T)
        return loss.value if tgt is not None else None

    def last_logits(self):
        """float32 [B, T, V] copy of the last forward's logits (valid until backward, which reuses
        their buffer)"""
        if self._last is None:
            raise MegaError("no forward yet", -1, "invalid argument")
        B, T = self._last
        p = lib.mega_lm_logits(self._handle())
        return np.ctypeslib.as_array(p, shape=(B, T, self.vocab_size)).copy()

    def logits(self, tokens):
        """float32 [B, T, V]: the next-token logits at every position of tokens [B, T] (evaluation
        mode: no dropout). A 1-D sequence gives [T, V]."""
        a = np.asarray(tokens)
        one = a.ndim == 1
        self.forward(a[None] if one else a)
        out = self.last_logits()
        return out[0] if one else out

    def loss(self, tokens, targets):
        """mean cross-entropy (nats) of targets given tokens, evaluation mode"""
        return self.forward(tokens, targets)

    def generate(self, prompt, tokens, temperature=1.0, top_p=1.0, top_k=0, seed=0):
        """Continue prompt (bytes, non-empty) by `tokens` sampled tokens, as `mega generate --quiet`
        does with the same settings (the same bytes): the prompt is streamed in chunk-sized
        blocks, then each token is drawn by the library's sampler (temperature 0 = greedy; top_k 0
        = all; top_p in (0, 1], 1 = off; the padding token is never drawn) and fed back.
        Returns the generated bytes (without the prompt). A model with a fairseq dictionary
        encodes the prompt and decodes the tokens as `mega generate` does (encode, decode)."""
        if isinstance(prompt, str):
            prompt = prompt.encode()
        prompt = bytes(prompt)
        if not prompt:
            raise MegaError("the prompt must not be empty (Mega has no start token; use e.g. b'\\n')", -1,
                            "invalid argument")
        tokens = int(tokens)
        if tokens < 0:
            raise MegaError(f"tokens must be >= 0, got {tokens}", -1, "invalid argument")
        _cint("tokens (with the prompt's)", len(prompt) + tokens + 1)  # the stream's capacity is a C int
        top_k = _cint("top_k", top_k)
        if not (0 < top_p <= 1):
            raise MegaError(f"top_p must be in (0, 1], got {top_p} (1 = off; greedy is temperature 0)", -1,
                            "invalid argument")
        c = self._cfg_ptr().contents
        V, pad = c.vocab_size, c.padding_idx
        fd = self._dict
        if V < 256 and fd is None:
            raise MegaError(f"generate works on bytes; this model's vocabulary has {V} tokens", -7, "unsupported")
        pt = self.encode(prompt, final_eos=False)
        if not len(pt):
            raise MegaError("the prompt has no token (a word model needs a word or a newline)", -1, "invalid argument")
        # ids a fairseq dictionary never generates (<s>, <pad>, fillers; non-byte tokens of byte models)
        banned = None if fd is None else np.array([not lib.mega_fdict_generable(fd, v) for v in range(V)])
        h = self._handle()
        stream, smp = c_void_p(), c_void_p()
        try:
            _lib.check(lib.mega_lm_stream_new(h, 1, len(pt) + tokens + 1, byref(stream)))
            sp = _lib.SampleParams(float(temperature), int(top_k), float(top_p), int(seed) & (2**64 - 1))
            _lib.check(lib.mega_sampler_new(V, byref(sp), byref(smp)))
            blk = c.block.chunk_size if c.block.chunk_size > 0 else 256  # the CLI's prompt blocks
            lg = np.empty((blk, V), dtype=np.float32)
            for p in range(0, len(pt), blk):
                piece = np.ascontiguousarray(pt[p:p + blk])
                _lib.check(lib.mega_lm_stream_feed(stream, _ptr(piece, _I32P), len(piece), _ptr(lg, _F32P)))
                last = lg[len(piece) - 1].copy()
            out = []
            tok = np.zeros(1, dtype=np.int32)
            for i in range(tokens):
                if banned is not None:
                    last[banned] = -np.inf
                b = _lib.check(lib.mega_sampler_next(smp, _ptr(last, _F32P), pad))
                if fd is None and b > 255:  # byte models: ids 0..255 are the bytes (the pad is never drawn)
                    raise MegaError(f"generated token {b} is not a byte (vocabulary of {V})", -7, "unsupported")
                out.append(b)
                if i + 1 < tokens:
                    tok[0] = b
                    _lib.check(lib.mega_lm_stream_feed(stream, _ptr(tok, _I32P), 1, _ptr(last, _F32P)))
            return self.decode(out, line_start=prompt.endswith(b"\n"))
        finally:
            lib.mega_sampler_free(smp)
            lib.mega_lm_stream_free(stream)

    def save(self, path):
        """write the model (model.safetensors with its config) atomically; a directory gets
        model.safetensors inside it. `mega eval/generate/info` read it."""
        if os.path.isdir(path):
            path = os.path.join(path, "model.safetensors")
        _lib.check(lib.mega_lm_save(self._handle(), _path(path)))


class Classifier(_Model):
    """A sequence classifier (mega_cls, the LRA model). Made by mega.load.

    Inputs are either a list of texts (str or bytes; encoded with the vocabulary stored in the
    checkpoint: ListOps tokens, bytes, or the words of a fairseq dictionary) or an integer array [B, T] of token ids with optional
    lengths [B] (positions past a row's length are padding). Two-tower (pairs) models take the
    second documents as inputs2."""
    _free = lib.mega_cls_free
    _paramset_fn = lib.mega_cls_paramset
    _backward_fn = lib.mega_cls_backward
    _to_json = lib.mega_cls_config_to_json
    _get_config = lib.mega_cls_get_config
    kind = "mega_cls"

    def __init__(self, handle, training, meta):
        super().__init__(handle, training)
        self._meta = {k: v for k, v in meta.items() if k != "config" and v is not None}
        c = self._cfg_ptr().contents
        try:
            names = json.loads(meta["classes"]) if meta.get("classes") else None
            self.vocab = json.loads(meta["vocab"]) if meta.get("vocab") else None
        except ValueError as e:
            raise MegaError(f"unreadable classes/vocabulary in the metadata: {e}", -3, "malformed file") from e
        # without stored names (not written by `mega train --task classify`) the classes are their ids
        self.classes = [str(x) for x in names] if names else [str(i) for i in range(c.classes)]
        self.classes += [str(i) for i in range(len(self.classes), c.classes)]  # unnamed extra outputs

    @property
    def num_classes(self):
        return self._cfg_ptr().contents.classes

    def encode(self, text):
        """token ids of one input text with the checkpoint's vocabulary (as the data loaders)"""
        v = self.vocab or {"kind": "bytes"}
        if isinstance(text, str):
            text = text.encode()
        if v.get("kind") == "fairseq":
            # a classifier converted from an official LRA checkpoint (scripts/convert_fairseq.py): as
            # fairseq-preprocess and the lra-text task give the ids: whitespace tokens of the
            # dictionary (others <unk>), then </s>; <CLS> first when the model pools position 0
            ids = {}
            for i, t in enumerate(v["tokens"]):
                ids.setdefault(t, i)
            out = [ids.get(w, v.get("unk", 3)) for w in text.decode("utf-8").split()] + [v.get("eos", 2)]
            if self._cfg_ptr().contents.pool == 1 and "cls" in v:
                out = [v["cls"]] + out
            return out
        if v.get("kind") == "listops":
            # as mega_listops_id: the table's tokens after <pad> and <unk>; anything else is <unk>
            ids = {t: i for i, t in enumerate(v["tokens"]) if i not in (v.get("pad", 0), v.get("unk", 1))}
            keep = v.get("keep_parens", False)
            out = []
            for w in text.split():  # bytes.split(): C isspace, as the loader
                i = ids.get(w.decode(errors="replace"), v.get("unk", 1))
                if not keep and w in (b"(", b")"):
                    continue
                out.append(i)
            return out
        return list(text)  # bytes and pixels: the values are the ids

    def _batch(self, inputs, lengths):
        """(ids [B, T] int32, lengths [B] int32) from texts or an id array"""
        c = self._cfg_ptr().contents
        if isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], (str, bytes, bytearray)):
            seqs = [self.encode(t) for t in inputs]
            if any(len(s) == 0 for s in seqs):
                raise MegaError("an input has no tokens", -1, "invalid argument")
            L = max(len(s) for s in seqs)
            pad = c.padding_idx if c.embedding == 0 else 0
            a = np.full((len(seqs), L), pad, dtype=np.int32)
            for i, s in enumerate(seqs):
                a[i, :len(s)] = s
            lens = np.array([len(s) for s in seqs], dtype=np.int32)
        elif (self.vocab or {}).get("kind") == "real":
            # real-valued sequences (raw speech): the model's own input, floats [B, T]; a model with
            # stored input statistics normalises them itself
            a = np.asarray(inputs, dtype=np.float32)
            if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1 or not np.isfinite(a).all():
                raise MegaError("inputs must be a finite float array [batch, samples]", -4, "shape mismatch")
            a = np.ascontiguousarray(a)
            lens = np.full(a.shape[0], a.shape[1], dtype=np.int32) if lengths is None else np.asarray(lengths)
            if lens.shape != (a.shape[0],) or lens.dtype.kind not in "iu" or lens.min() < 1 or lens.max() > a.shape[1]:
                raise MegaError(f"lengths must be [B] = [{a.shape[0]}] integers in [1, {a.shape[1]}]", -4,
                                "shape mismatch")
            lens = np.ascontiguousarray(lens, dtype=np.int32)
        else:
            V = c.vocab_size if c.embedding == 0 else 256
            a = _tokens2d(inputs, V, "inputs")
            lens = np.full(a.shape[0], a.shape[1], dtype=np.int32) if lengths is None else np.asarray(lengths)
            if lens.shape != (a.shape[0],) or lens.dtype.kind not in "iu" or lens.min() < 1 or lens.max() > a.shape[1]:
                raise MegaError(f"lengths must be [B] = [{a.shape[0]}] integers in [1, {a.shape[1]}]", -4,
                                "shape mismatch")
            lens = np.ascontiguousarray(lens, dtype=np.int32)
        return a, lens

    def _input(self, a, lens, keep):
        c = self._cfg_ptr().contents
        if c.embedding == 1 and a.dtype == np.float32:  # real values as given (raw speech)
            return _lib.ClsInput(None, _ptr(a, _F32P), _ptr(lens, _I32P), a.shape[1])
        if c.embedding == 1:  # real-valued inputs (pixels): (x/255 - mean)/std, padding 0
            v = self.vocab or {}
            mean, std = v.get("mean", 0.5) or 0.5, v.get("std", 0.5) or 0.5
            vals = ((a / 255.0 - mean) / std).astype(np.float32)
            vals[np.arange(a.shape[1])[None, :] >= lens[:, None]] = 0
            keep.append(vals)
            return _lib.ClsInput(None, _ptr(vals, _F32P), _ptr(lens, _I32P), a.shape[1])
        return _lib.ClsInput(_ptr(a, _I32P), None, _ptr(lens, _I32P), a.shape[1])

    def forward(self, inputs, targets=None, train=False, key=0, lengths=None, inputs2=None, lengths2=None):
        """Forward over one batch. With targets [B] (class ids) returns the mean cross-entropy
        and keeps what backward needs; else None. last_logits() gives [B, C]."""
        c = self._cfg_ptr().contents
        a, lens = self._batch(inputs, lengths)
        keep = [a, lens]
        in1 = self._input(a, lens, keep)
        in2 = None
        if c.two_tower:
            if inputs2 is None:
                raise MegaError("this is a two-tower (pairs) model: give the second inputs as inputs2", -1,
                                "invalid argument")
            a2, l2 = self._batch(inputs2, lengths2)
            if a2.shape[0] != a.shape[0]:
                raise MegaError("inputs and inputs2 have different batch sizes", -4, "shape mismatch")
            keep += [a2, l2]
            in2 = self._input(a2, l2, keep)
        B = _cint("batch size", a.shape[0], 1)
        tgt = None
        if targets is not None:
            t = np.asarray(targets)
            if t.shape != (B,) or t.dtype.kind not in "iu" or t.min() < 0 or t.max() >= c.classes:
                raise MegaError(f"targets must be [B] = [{B}] class ids in [0, {c.classes})", -4, "shape mismatch")
            tgt = np.ascontiguousarray(t, dtype=np.int32)
        run = _lib.Run(1 if train else 0, int(key) & (2**64 - 1))
        loss, correct = c_double(), c_int64()
        _lib.check(lib.mega_cls_forward(self._handle(), byref(in1), byref(in2) if in2 is not None else None, B,
                                        _ptr(tgt, _I32P), byref(run), byref(loss), byref(correct)))
        self._last = B
        return loss.value if tgt is not None else None

    def last_logits(self):
        """float32 [B, C] copy of the last forward's logits"""
        if self._last is None:
            raise MegaError("no forward yet", -1, "invalid argument")
        p = lib.mega_cls_logits(self._handle())
        return np.ctypeslib.as_array(p, shape=(self._last, self.num_classes)).copy()

    def logits(self, inputs, lengths=None, inputs2=None, lengths2=None, batch=32):
        """float32 [N, C] class logits, evaluation mode, in batches of `batch` inputs (each padded
        to its longest, as `mega predict`)"""
        batch = _cint("batch", batch, 1)
        if isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], (str, bytes, bytearray)):
            n = len(inputs)
            parts = [(inputs[i:i + batch], None, inputs2[i:i + batch] if inputs2 is not None else None, None)
                     for i in range(0, n, batch)]
        else:
            a = np.asarray(inputs)
            n = a.shape[0] if a.ndim else 0
            sl = lambda x, i: None if x is None else np.asarray(x)[i:i + batch]  # noqa: E731
            parts = [(a[i:i + batch], sl(lengths, i), sl(inputs2, i), sl(lengths2, i)) for i in range(0, n, batch)]
        if not parts:
            raise MegaError("no inputs", -1, "invalid argument")
        out = []
        for x, lx, x2, l2 in parts:
            self.forward(x, lengths=lx, inputs2=x2, lengths2=l2)
            out.append(self.last_logits())
        return np.concatenate(out)

    def predict(self, inputs, **kw):
        """int array [N]: the class id of each input (the first largest logit)"""
        return np.argmax(self.logits(inputs, **kw), axis=1)

    def predict_labels(self, inputs, **kw):
        """the class names of predict(), as `mega predict` prints them"""
        return [self.classes[i] for i in self.predict(inputs, **kw)]

    def save(self, path):
        """write the model with its vocabulary/classes metadata (so `mega predict` reads it)"""
        if os.path.isdir(path):
            path = os.path.join(path, "model.safetensors")
        kv = []
        for k, v in self._meta.items():
            kv += [k.encode(), v.encode()]
        arr = (ctypes.c_char_p * (len(kv) + 1))(*kv, None)
        _lib.check(lib.mega_cls_save_ex(self._handle(), _path(path), arr))


def _serialised(fn):
    """fn, run holding its model's lock"""
    @functools.wraps(fn)
    def run(self, *args, **kw):
        with self._lock:
            return fn(self, *args, **kw)
    return run


# The calls that use a model's C state (its activations, gradients, weights, handle) take turns
# on that model: the library runs without the GIL, and two threads in one model's forward would
# each read back the other's logits. Other models, and other calls, run in parallel.
for _cls, _names in ((_Model, ("close", "parameters", "zero_grad", "grad_norm", "clip_grad_norm", "backward",
                               "train_step", "config_json")),
                     (LM, ("close", "forward", "last_logits", "logits", "generate", "save")),
                     (Classifier, ("forward", "last_logits", "logits", "save"))):
    for _n in _names:
        setattr(_cls, _n, _serialised(_cls.__dict__[_n]))
del _cls, _names, _n


class AdamW:
    """AdamW over a model's parameters (the library's mega_adamw; decoupled weight decay on the
    matrices and embeddings, or on everything with decay_all). Defaults: those of `mega train`."""

    def __init__(self, model, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.01, decay_all=False):
        model._need_grads()
        self.model = model  # kept alive: the step reads its parameter set
        self.hp = _lib.AdamWHP(float(betas[0]), float(betas[1]), float(eps), float(weight_decay), int(bool(decay_all)))
        self._h = None
        h = c_void_p()
        _lib.check(lib.mega_adamw_new(lib.mega_ps_total(model._paramset()), byref(h)))
        self._h = h

    def step(self, lr):
        """one update from the accumulated gradients with learning rate lr"""
        if not self._h:
            raise MegaError("the optimizer is closed", -1, "invalid argument")
        lib.mega_adamw_step(self._h, self.model._paramset(), byref(self.hp), float(lr))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            _lib.lib.mega_adamw_free(h)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down the module
            pass


class Apollo(AdamW):
    """Apollo over a model's parameters (the library's optimizer table, mega_optim; class Apollo of
    the official fairseq/optim/apollo.py, docs/training.md). rebound: "constant" or "belief";
    weight_decay_type: "auto" (L2 with constant, decoupled with belief), "L2", "decoupled" or
    "stable"; the decay applies to the matrices and embeddings, or to everything with decay_all."""

    def __init__(self, model, beta=0.9, eps=1e-4, rebound="constant", weight_decay=0.01, weight_decay_type="auto",
                 decay_all=False):
        model._need_grads()
        self.model = model
        self._h = None
        hp = _lib.OptimHP()
        lib.mega_optim_hp_default(byref(hp))
        rebounds, types = ["constant", "belief"], ["auto", "L2", "decoupled", "stable"]
        if rebound not in rebounds or weight_decay_type not in types:
            raise MegaError(f"rebound must be one of {rebounds} and weight_decay_type one of {types}", -1, "invalid argument")
        hp.apollo_beta, hp.apollo_eps, hp.weight_decay, hp.decay_all = float(beta), float(eps), float(weight_decay), int(bool(decay_all))
        hp.apollo_rebound, hp.weight_decay_type = rebounds.index(rebound), types.index(weight_decay_type)
        self._kind = lib.mega_optim_find(b"apollo")
        _lib.check(lib.mega_optim_hp_check(self._kind, byref(hp)))
        self.hp = hp
        h = c_void_p()
        _lib.check(lib.mega_optim_new(self._kind, lib.mega_ps_total(model._paramset()), byref(h)))
        self._h = h

    def step(self, lr):
        """one update from the accumulated gradients with learning rate lr"""
        if not self._h:
            raise MegaError("the optimizer is closed", -1, "invalid argument")
        lib.mega_optim_step(self._h, self.model._paramset(), byref(self.hp), float(lr))

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            _lib.lib.mega_optim_free(h)


class Translator(_Model):
    """An encoder-decoder (mega_s2s: `mega train --task translate`, or an official translation
    model converted with scripts/convert_fairseq.py). Made by mega.load; inference only.

    translate(sources) translates as `mega translate` does: the same tokenization (the model's
    bytes, subword units or fairseq source dictionary), the library's beam search
    (mega_s2s_translate) over batches of `batch` sources in order, and the same output text."""
    _free = lib.mega_s2s_free
    _paramset_fn = lib.mega_s2s_paramset
    kind = "mega_s2s"

    def __init__(self, handle):
        super().__init__(handle, False)
        self._src_dict = self._tgt_dict = self._src_bpe = self._tgt_bpe = None

    def close(self):
        for name, free in (("_src_dict", lib.mega_fdict_free), ("_tgt_dict", lib.mega_fdict_free)):
            d = getattr(self, name, None)
            if d:
                setattr(self, name, None)
                free(d)
        sb, tb = getattr(self, "_src_bpe", None), getattr(self, "_tgt_bpe", None)
        self._src_bpe = self._tgt_bpe = None
        if tb and tb != sb:
            lib.mega_bpe_free(tb)
        if sb:
            lib.mega_bpe_free(sb)
        super().close()

    def _cfg(self):
        return lib.mega_s2s_get_config(self._handle()).contents

    def _vocab(self, file):
        """the vocabularies in the metadata, as the tool reads them (tools/models.c load_s2s)"""
        m = _metadata(file, ["vocab", "tgt-vocab", "src-bpe", "tgt-bpe"])
        c, where = self._cfg(), os.fsdecode(file)
        if m["vocab"] and '"fairseq"' in m["vocab"]:
            for key, attr, size, what in (("vocab", "_src_dict", c.src_vocab_size, "source"),
                                          ("tgt-vocab", "_tgt_dict", c.tgt_vocab_size, "target")):
                if not m[key]:
                    raise MegaError(f"{where}: a fairseq dictionary for one side only", -3, "malformed file")
                d = c_void_p()
                _lib.check(lib.mega_fdict_from_json(m[key].encode(), byref(d)))
                setattr(self, attr, d)
                if lib.mega_fdict_size(d) != size:
                    raise MegaError(f"{where}: the {what} dictionary has {lib.mega_fdict_size(d)} tokens but the model's "
                                    f"vocabulary has {size}", -3, "malformed file")
            return
        if m["vocab"] and '"bpe"' in m["vocab"]:
            for key, attr in (("src-bpe", "_src_bpe"), ("tgt-bpe", "_tgt_bpe")):
                if m[key] and key == "tgt-bpe" and m["tgt-bpe"] == m["src-bpe"]:
                    self._tgt_bpe = self._src_bpe  # one vocabulary for both sides
                elif m[key]:
                    b = c_void_p()
                    raw = m[key].encode()
                    _lib.check(lib.mega_bpe_from_string(raw, len(raw), byref(b)))
                    setattr(self, attr, b)
        elif m["src-bpe"] or m["tgt-bpe"]:
            raise MegaError(f"{where}: a BPE merge list in a model whose vocabulary is not \"bpe\"", -3, "malformed file")
        sizes = (lib.mega_bpe_vocab_size(self._src_bpe) if self._src_bpe else 258,
                 lib.mega_bpe_vocab_size(self._tgt_bpe) if self._tgt_bpe else 258)
        if sizes != (c.src_vocab_size, c.tgt_vocab_size) or c.padding_idx != 256 or c.eos_idx != 257:
            raise MegaError(f"{where}: the vocabularies (source {sizes[0]}, target {sizes[1]} tokens; pad 256, eos 257) "
                            f"do not match the model's ({c.src_vocab_size}/{c.tgt_vocab_size}, pad {c.padding_idx}, "
                            f"eos {c.eos_idx})", -3, "malformed file")

    def _max_source(self):
        """the longest source the encoder takes (its relative-position table), as the tool's"""
        x = _lib.BlockContext()
        lib.mega_block_context_of(byref(self._cfg().encoder), 0, byref(x))
        return x.positions if x.positions > 0 else 1 << 20

    def encode(self, source):
        """the source ids of one sentence (str or bytes, no line break): its words in the fairseq
        source dictionary, its subword units or its bytes, then </s>"""
        raw = source.encode() if isinstance(source, str) else bytes(source)
        if b"\n" in raw or b"\r" in raw:
            raise MegaError("a source is one sentence without a line break", -1, "invalid argument")
        maxS = self._max_source()
        if self._src_dict:
            n = c_size_t()
            _lib.check(lib.mega_fdict_encode(self._src_dict, raw, len(raw), 1, None, byref(n), None))
            if n.value > maxS:
                raise MegaError(f"source: {n.value} tokens, more than the limit of {maxS}", -1, "invalid argument")
            ids = np.empty(n.value, dtype=np.int32)
            _lib.check(lib.mega_fdict_encode(self._src_dict, raw, len(raw), 1, _ptr(ids, _I32P), byref(n), None))
            return ids.tolist()
        ids = np.empty(len(raw) + 2, dtype=np.int32)
        k = c_int()
        _lib.check(lib.mega_s2s_tokenize_bpe(self._src_bpe, raw, len(raw), maxS, _ptr(ids, _I32P), byref(k)))
        return ids[:k.value].tolist()

    def _text(self, ids, remove_bpe):
        """one hypothesis as `mega translate` prints it"""
        if self._tgt_dict:
            eos, start, out = self._cfg().eos_idx, c_int(1), b""
            buf = ctypes.create_string_buffer(self._longest_word + 2)
            for t in ids:
                if t != eos:
                    n = lib.mega_fdict_decode(self._tgt_dict, int(t), byref(start), buf, len(buf) - 1)
                    out += buf.raw[:n]
            text = out.decode("utf-8", "surrogateescape")
            if remove_bpe:  # fairseq's --post-process subword_nmt: "@@ " joins, a final "@@" goes
                text = text.replace("@@ ", "")
                text = text[:-2] if text.endswith("@@") else text
            return text
        a = np.ascontiguousarray(ids, dtype=np.int32)
        buf = ctypes.create_string_buffer(self._longest_unit * max(len(a), 1) + 1)
        n = lib.mega_bpe_decode(self._tgt_bpe, _ptr(a, _I32P), len(a), buf)
        b, out, i = buf.raw[:n], bytearray(), 0
        while i < len(b):  # valid UTF-8 kept, each byte of an invalid sequence U+FFFD, breaks spaces
            ok = lib.mega_utf8_check(b[i:], len(b) - i)
            out += b[i:i + ok].replace(b"\n", b" ").replace(b"\r", b" ").replace(b"\t", b" ")
            i += ok
            if i < len(b):
                out += "\ufffd".encode()
                i += 1
        return out.decode()

    @property
    def _longest_word(self):  # bytes of the longest target word, computed once
        if getattr(self, "_lw", None) is None:
            d = self._tgt_dict
            self._lw = max(len(lib.mega_fdict_token(d, i) or b"") for i in range(lib.mega_fdict_size(d))) + 2
        return self._lw

    @property
    def _longest_unit(self):  # bytes of the longest target subword unit (1: bytes), computed once
        if getattr(self, "_lu", None) is None:
            n, b = c_size_t(), self._tgt_bpe
            self._lu = max(((lib.mega_bpe_token(b, i, byref(n)) and n.value) or 0
                            for i in range(lib.mega_bpe_vocab_size(b))), default=1) or 1 if b else 1
        return self._lu

    def translate(self, sources, beam=4, lenpen=1.0, max_len_a=1.2, max_len_b=10, batch=32, remove_bpe=False):
        """the translations (str) of a list of source sentences (str or bytes), as `mega translate
        --beam --lenpen --max-len-a --max-len-b --batch [--remove-bpe]` prints them for those lines:
        beam 1 is greedy; remove_bpe (fairseq dictionaries) joins subword-nmt pieces. A source the
        model cannot take (empty, not UTF-8, too long) raises MegaError."""
        if isinstance(sources, (str, bytes)):
            raise MegaError("translate takes a list of sentences", -1, "invalid argument")
        if int(batch) < 1 or int(beam) < 1:
            raise MegaError(f"batch and beam must be >= 1, got {batch} and {beam}", -1, "invalid argument")
        rows = []
        for i, s in enumerate(sources):
            try:
                rows.append(self.encode(s))
            except MegaError as e:
                raise MegaError(f"source {i}: {e}", e.status, e.code) from None
        sp = _lib.S2SSearch()
        lib.mega_s2s_search_default(byref(sp))
        sp.beam, sp.lenpen, sp.max_len_a, sp.max_len_b = int(beam), float(lenpen), float(max_len_a), int(max_len_b)
        c, out = self._cfg(), []
        bytes_limit = self._src_bpe is not None and self._tgt_bpe is None  # the tool's limit_in_bytes
        for f in range(0, len(rows), int(batch)):
            part, srcs = rows[f:f + int(batch)], sources[f:f + int(batch)]
            S = max(len(r) for r in part)
            src = np.full((len(part), S), c.padding_idx, dtype=np.int32)
            for i, r in enumerate(part):
                src[i, :len(r)] = r
            lim = [len(s.encode() if isinstance(s, str) else s) + 1 if bytes_limit else len(r) for r, s in zip(part, srcs)]
            limn = (c_int * len(part))(*lim)
            sp.limit_src_len = ctypes.cast(limn, ctypes.POINTER(c_int))
            cap = int(sp.max_len_a * max(lim) + sp.max_len_b) + 2
            hyp = np.empty((len(part), cap), dtype=np.int32)
            lens = (c_int * len(part))()
            _lib.check(lib.mega_s2s_translate(self._handle(), _ptr(src, _I32P), len(part), S, byref(sp), _ptr(hyp, _I32P),
                                              lens, cap, None))
            out += [self._text(hyp[i, :lens[i]].tolist(), remove_bpe) for i in range(len(part))]
        return out



# A Translator's searches use its model's buffers: they take turns too (see the list above).
for _n in ("close", "translate"):
    setattr(Translator, _n, _serialised(Translator.__dict__[_n]))
del _n
