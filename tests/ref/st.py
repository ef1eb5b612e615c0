"""Minimal safetensors reader/writer (numpy + json only, no external package).

Format: u64 little-endian header length N, N bytes of UTF-8 JSON (space padded), then the raw
little-endian row-major data. Offsets in the header are relative to the start of the data section.
"""
import json
import struct

import numpy as np

_ST2NP = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_NP2ST = {v.str.lstrip("<|="): k for k, v in _ST2NP.items()}
_NP2ST.update({"f8": "F64", "f4": "F32", "f2": "F16", "i8": "I64", "i4": "I32", "i2": "I16",
               "i1": "I8", "u1": "U8", "b1": "BOOL"})


def load(path):
    """Return (tensors: dict name -> np.ndarray, metadata: dict or None), in header order."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        dt = _ST2NP[info["dtype"]]
        b, e = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape)) if shape else 1
        if e - b != count * dt.itemsize:
            raise ValueError(f"{path}: bad size for {name}")
        arr = np.frombuffer(raw, dtype=dt, count=count, offset=base + b).reshape(shape)
        out[name] = arr.copy()
    return out, meta


def save(path, tensors, metadata=None):
    """Write an ordered dict name -> np.ndarray (kept in the given order)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    off = 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        key = arr.dtype.newbyteorder("<").str.lstrip("<|=") if arr.dtype.byteorder == ">" else arr.dtype.str.lstrip("<|=")
        st = _NP2ST[key]
        data = np.ascontiguousarray(arr.astype(_ST2NP[st], copy=False)).tobytes()
        header[name] = {"dtype": st, "shape": list(arr.shape), "data_offsets": [off, off + len(data)]}
        chunks.append(data)
        off += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for c in chunks:
            f.write(c)
