"""ctypes binding of libmega: finding the library, the C structs mirrored, the prototypes, errors.

Everything here is private; the public API is in mega/__init__.py. The structs below mirror
include/mega.h field for field; check_layout() compares them at load time with the offsets the
library itself publishes in its config field tables (mega_*_config_fields), so a header change
that this file missed fails loudly instead of corrupting memory.
"""
import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t, c_uint,
                    c_uint64, c_void_p)


class MegaError(RuntimeError):
    """A failure reported by libmega: .status is the mega_status code (negative), .code its name
    ("invalid argument", ...), str(e) the library's one-line message (mega_last_error)."""

    def __init__(self, message, status=-1, code=""):
        super().__init__(message)
        self.status = status
        self.code = code


# ---- the C structs (include/mega.h) ----------------------------------------------------------
# Every field of the config structs is 4 bytes (int, float or an enum), so there is no padding.
class BlockConfig(Structure):
    _fields_ = [("mixer", c_int), ("embed_dim", c_int), ("z_dim", c_int), ("hidden_dim", c_int), ("n_dim", c_int),
                ("ffn_dim", c_int), ("chunk_size", c_int), ("truncation", c_int), ("max_positions", c_int),
                ("attention_activation", c_int), ("rel_pos_bias", c_int), ("norm_type", c_int), ("prenorm", c_int),
                ("norm_affine", c_int), ("activation", c_int), ("dropout", c_float), ("attention_dropout", c_float),
                ("hidden_dropout", c_float), ("activation_dropout", c_float), ("bidirectional", c_int),
                ("heads", c_int), ("window", c_int), ("memory_size", c_int), ("max_len", c_int), ("pos", c_int),
                ("attn_window", c_int), ("log_n_scaling", c_int), ("train_len", c_int),
                ("norm_num_groups", c_int), ("swiglu", c_int), ("rescale_nffn", c_int)]


class LMConfig(Structure):
    _fields_ = [("vocab_size", c_int), ("padding_idx", c_int), ("layers", c_int), ("block", BlockConfig),
                ("final_norm_affine", c_int), ("scale_embedding", c_int), ("tie_embeddings", c_int),
                ("adaptive_input", c_int), ("adaptive_input_factor", c_float), ("adaptive_input_cutoff", c_int * 8),
                ("adaptive_softmax_cutoff", c_int * 8), ("adaptive_softmax_factor", c_float),
                ("adaptive_softmax_dropout", c_float), ("tie_adaptive_weights", c_int), ("tie_adaptive_proj", c_int)]


class ClsConfig(Structure):
    _fields_ = [("layers", c_int), ("block", BlockConfig), ("final_norm_affine", c_int), ("embedding", c_int),
                ("vocab_size", c_int), ("padding_idx", c_int), ("pool", c_int), ("classifier_layers", c_int),
                ("classifier_dim", c_int), ("classifier_activation", c_int), ("classes", c_int),
                ("two_tower", c_int), ("patch", c_int), ("image_width", c_int), ("input_norm", c_int), ("mlm", c_int)]


class Field(Structure):  # mega_field
    _fields_ = [("name", c_char_p), ("type", c_int), ("offset", c_size_t), ("lo", c_double), ("hi", c_double),
                ("choices", POINTER(c_char_p)), ("nchoices", c_int), ("flags", c_uint), ("mixers", c_uint),
                ("help", c_char_p)]


class LoadOpts(Structure):  # mega_load_opts
    _fields_ = [("inference", c_int), ("no_init", c_int)]


class Run(Structure):  # mega_lm_run
    _fields_ = [("training", c_int), ("key", c_uint64)]


class SampleParams(Structure):  # mega_sample_params
    _fields_ = [("temperature", c_double), ("top_k", c_int), ("top_p", c_double), ("seed", c_uint64)]


class AdamWHP(Structure):  # mega_adamw_hp
    _fields_ = [("beta1", c_double), ("beta2", c_double), ("eps", c_double), ("weight_decay", c_double),
                ("decay_all", c_int)]


class OptimHP(Structure):  # mega_optim_hp
    _fields_ = [("weight_decay", c_double), ("decay_all", c_int), ("beta1", c_double), ("beta2", c_double),
                ("eps", c_double), ("apollo_beta", c_double), ("apollo_eps", c_double), ("apollo_rebound", c_int),
                ("weight_decay_type", c_int)]


class SchedInputs(Structure):  # mega_sched_inputs
    _fields_ = [("kind", c_int), ("lr", c_double), ("min_lr", c_double), ("warmup", c_int64), ("steps", c_int64),
                ("warmup_init_lr", c_double), ("end_lr", c_double), ("time_budget", c_double), ("sched_from", c_int64),
                ("sched_lr", c_double)]


class ClsInput(Structure):  # mega_cls_input
    _fields_ = [("tokens", POINTER(c_int32)), ("values", POINTER(c_float)), ("lengths", POINTER(c_int32)),
                ("T", c_int)]


class S2SConfigHead(Structure):  # the first fields of mega_s2s_config (all that the binding reads)
    _fields_ = [("src_vocab_size", c_int), ("tgt_vocab_size", c_int), ("padding_idx", c_int), ("eos_idx", c_int),
                ("encoder_layers", c_int), ("decoder_layers", c_int), ("encoder", BlockConfig)]


class S2SSearch(Structure):  # mega_s2s_search
    _fields_ = [("beam", c_int), ("lenpen", c_double), ("max_len_a", c_double), ("max_len_b", c_int),
                ("limit_src_len", POINTER(c_int))]


class BlockContext(Structure):  # mega_block_context
    _fields_ = [("segment", c_int), ("cache", c_int), ("cache_full", c_int), ("carry", c_int), ("eval_len", c_int),
                ("positions", c_int), ("cross_attention", c_char_p)]


P = c_void_p
PP = POINTER(c_void_p)
I32P = POINTER(c_int32)
F32P = POINTER(c_float)
DP = POINTER(c_double)
I64P = POINTER(c_int64)

# name: (restype, argtypes)
PROTOTYPES = {
    "mega_status_str": (c_char_p, [c_int]),
    "mega_last_error": (c_char_p, []),
    "mega_clear_error": (None, []),
    "mega_set_threads": (None, [c_int]),
    "mega_get_threads": (c_int, []),
    "mega_build_info": (c_char_p, []),
    "mega_model_file": (c_int, [c_char_p, c_char_p, c_size_t]),
    "mega_model_file_which": (c_int, [c_char_p, c_char_p, c_char_p, c_size_t]),
    "mega_st_open": (c_int, [c_char_p, PP]),
    "mega_st_meta": (c_char_p, [P, c_char_p]),
    "mega_st_close": (None, [P]),
    "mega_model_kind_of_json": (c_int, [c_char_p, POINTER(c_int)]),
    "mega_model_kind_name": (c_char_p, [c_int]),
    "mega_block_config_fields": (POINTER(Field), [POINTER(c_int)]),
    "mega_lm_config_fields": (POINTER(Field), [POINTER(c_int)]),
    "mega_cls_config_fields": (POINTER(Field), [POINTER(c_int)]),
    # language model
    "mega_lm_config_from_json": (c_int, [c_char_p, POINTER(LMConfig)]),
    "mega_lm_config_to_json": (c_void_p, [POINTER(LMConfig)]),  # malloc'd: freed with libc free
    "mega_lm_create_ex": (c_int, [POINTER(LMConfig), POINTER(LoadOpts), PP]),
    "mega_lm_load_ex": (c_int, [c_char_p, POINTER(LoadOpts), PP]),
    "mega_lm_free": (None, [P]),
    "mega_lm_get_config": (POINTER(LMConfig), [P]),
    "mega_lm_init_params": (None, [P, c_uint64]),
    "mega_lm_num_params": (c_size_t, [P]),
    "mega_lm_save": (c_int, [P, c_char_p]),
    "mega_lm_forward": (c_int, [P, I32P, I32P, c_int, c_int, POINTER(Run), DP, I64P]),
    "mega_lm_backward": (c_int, [P, c_double]),
    "mega_lm_logits": (F32P, [P]),
    "mega_lm_paramset": (P, [P]),
    "mega_lm_stream_new": (c_int, [P, c_int, c_int, PP]),
    "mega_lm_stream_free": (None, [P]),
    "mega_lm_stream_feed": (c_int, [P, I32P, c_int, F32P]),
    # fairseq dictionaries (converted official models)
    "mega_fdict_from_json": (c_int, [c_char_p, PP]),
    "mega_fdict_free": (None, [P]),
    "mega_fdict_size": (c_int, [P]),
    "mega_fdict_encode": (c_int, [P, c_char_p, c_size_t, c_int, I32P, POINTER(c_size_t), POINTER(c_size_t)]),
    "mega_fdict_generable": (c_int, [P, c_int]),
    "mega_fdict_decode": (c_size_t, [P, c_int, POINTER(c_int), c_char_p, c_size_t]),
    # sampler
    "mega_sampler_new": (c_int, [c_int, POINTER(SampleParams), PP]),
    "mega_sampler_free": (None, [P]),
    "mega_sampler_next": (c_int, [P, F32P, c_int]),
    # classifier
    "mega_cls_config_to_json": (c_void_p, [POINTER(ClsConfig)]),
    "mega_cls_load_ex": (c_int, [c_char_p, POINTER(LoadOpts), PP]),
    "mega_cls_free": (None, [P]),
    "mega_cls_get_config": (POINTER(ClsConfig), [P]),
    "mega_cls_save_ex": (c_int, [P, c_char_p, POINTER(c_char_p)]),
    "mega_cls_forward": (c_int, [P, POINTER(ClsInput), POINTER(ClsInput), c_int, I32P, POINTER(Run), DP, I64P]),
    "mega_cls_backward": (c_int, [P, c_double]),
    "mega_cls_logits": (F32P, [P]),
    "mega_cls_paramset": (P, [P]),
    # encoder-decoder: translation with the search of `mega translate`
    "mega_s2s_load_ex": (c_int, [c_char_p, POINTER(LoadOpts), PP]),
    "mega_s2s_free": (None, [P]),
    "mega_s2s_get_config": (POINTER(S2SConfigHead), [P]),
    "mega_s2s_paramset": (P, [P]),
    "mega_s2s_search_default": (None, [POINTER(S2SSearch)]),
    "mega_s2s_translate": (c_int, [P, I32P, c_int, c_int, POINTER(S2SSearch), I32P, POINTER(c_int), c_int, DP]),
    "mega_s2s_tokenize_bpe": (c_int, [P, c_char_p, c_size_t, c_int, I32P, POINTER(c_int)]),
    "mega_block_context_of": (None, [POINTER(BlockConfig), c_int, POINTER(BlockContext)]),
    "mega_bpe_from_string": (c_int, [c_char_p, c_size_t, PP]),
    "mega_bpe_free": (None, [P]),
    "mega_bpe_vocab_size": (c_int, [P]),
    "mega_bpe_token": (c_void_p, [P, c_int, POINTER(c_size_t)]),
    "mega_bpe_decode": (c_size_t, [P, I32P, c_size_t, c_void_p]),
    "mega_utf8_check": (c_size_t, [c_void_p, c_size_t]),
    "mega_fdict_token": (c_char_p, [P, c_int]),
    # the data order of `mega train --task lm` (mega_data.h)
    "mega_data_rng_seed": (c_uint64, [c_uint64]),
    "mega_text_windows": (c_int, [c_void_p, c_size_t, c_int, c_int, POINTER(c_uint64), I32P, I32P]),
    # parameter sets and AdamW
    "mega_ps_data": (F32P, [P]),
    "mega_ps_grad": (F32P, [P]),
    "mega_ps_total": (c_size_t, [P]),
    "mega_ps_trainable": (c_size_t, [P]),
    "mega_ps_count": (c_int, [P]),
    "mega_ps_info": (c_char_p, [P, c_int, POINTER(c_size_t), POINTER(c_size_t), POINTER(c_uint)]),
    "mega_ps_zero_grad": (None, [P]),
    "mega_ps_grad_norm": (c_double, [P]),
    "mega_ps_scale_grad": (None, [P, c_double]),
    "mega_adamw_new": (c_int, [c_size_t, PP]),
    "mega_adamw_free": (None, [P]),
    "mega_adamw_step": (None, [P, P, POINTER(AdamWHP), c_double]),
    # the optimizer table, schedules and training keys (mega_train.h)
    "mega_optim_find": (c_int, [c_char_p]),
    "mega_optim_hp_default": (None, [POINTER(OptimHP)]),
    "mega_optim_hp_check": (c_int, [c_int, POINTER(OptimHP)]),
    "mega_optim_new": (c_int, [c_int, c_size_t, PP]),
    "mega_optim_free": (None, [P]),
    "mega_optim_step": (None, [P, P, POINTER(OptimHP), c_double]),
    "mega_sched_find": (c_int, [c_char_p]),
    "mega_sched_check": (c_int, [POINTER(SchedInputs)]),
    "mega_lr_at": (c_double, [POINTER(SchedInputs), c_int64, c_double]),
    "mega_dropout_key": (c_uint64, [c_uint64, c_int64]),
}


def library_path():
    """MEGA_LIB, else build/libmega.so of this source tree (python/..), else the installed
    libmega.so.0 (the dynamic loader's search path)."""
    env = os.environ.get("MEGA_LIB")
    if env:
        return env
    tree = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build",
                        "libmega.so")
    if os.path.exists(tree):
        return tree
    return ctypes.util.find_library("mega") or "libmega.so.0"


def _open():
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"mega: cannot load the library {path!r} ({e}); build it with `make`, or set MEGA_LIB") from e
    for name, (res, args) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if b"float32" not in lib.mega_build_info():  # mega_real must be float: the buffers are read as float32
        raise ImportError(f"mega: {path} is not a float32 build ({lib.mega_build_info().decode()})")
    return lib, path


lib, LIB_PATH = _open()
_libc = ctypes.CDLL(None)  # free() for the strings the library malloc's (same process heap)
_libc.free.argtypes, _libc.free.restype = [c_void_p], None


def take_string(ptr):
    """the text of a malloc'd char * returned by the library, which is then freed"""
    if not ptr:
        raise MegaError("out of memory", -5, "out of memory")
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        _libc.free(ptr)


def error(status):
    """the MegaError for a failed call: the library's message of this thread"""
    msg = (lib.mega_last_error() or b"").decode(errors="replace")
    code = (lib.mega_status_str(status) or b"").decode()
    return MegaError(msg or code or f"mega status {status}", status, code)


def check(status):
    """raise the library's error for a negative mega_status"""
    if status < 0:
        raise error(status)
    return status


def _fields(fn, base):
    n = c_int()
    f = fn(ctypes.byref(n))
    return [(f[i].name.decode(), base + f[i].offset) for i in range(n.value)]


def check_layout():
    """compare the mirrored config structs with the library's field tables (name -> offset)"""
    blk = LMConfig.block.offset
    cblk = ClsConfig.block.offset
    want = [(LMConfig, _fields(lib.mega_lm_config_fields, 0) + _fields(lib.mega_block_config_fields, blk), blk),
            (ClsConfig, _fields(lib.mega_cls_config_fields, 0) + _fields(lib.mega_block_config_fields, cblk), cblk)]
    for struct, fields, boff in want:
        for name, off in fields:
            attr = name.replace("-", "_")
            owner, base = (BlockConfig, boff) if off >= boff and hasattr(BlockConfig, attr) and not hasattr(
                struct, attr) else (struct, 0)
            got = getattr(owner, attr, None)
            if got is None or got.offset + base != off:
                raise ImportError(f"mega: the Python mirror of {struct.__name__} differs from {LIB_PATH} at field "
                                  f"{name!r} (library offset {off}); update python/mega/_lib.py")
    if ctypes.sizeof(LMConfig) < max(off for _, off in want[0][1]) + 4:
        raise ImportError("mega: LMConfig is smaller than the library's")


check_layout()
