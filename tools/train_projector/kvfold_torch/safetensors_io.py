"""Minimal safetensors reader/writer (the format: 8-byte little-endian header length,
JSON header {name: {dtype, shape, data_offsets}}, then raw little-endian data).

Only numpy and torch are used; F32, F16 and BF16 are supported (plus the integer types
numpy knows), which is what kvfold's model and projector files use.
"""
import json
import struct

import numpy as np
import torch

_NP_DTYPES = {
    "F32": np.float32, "F16": np.float16, "F64": np.float64,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
}


def _to_float32(raw: bytes, dtype: str, shape):
    if dtype == "BF16":
        u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        arr = u16.view(np.float32)
    elif dtype in _NP_DTYPES:
        arr = np.frombuffer(raw, dtype=np.dtype(_NP_DTYPES[dtype]).newbyteorder("<"))
    else:
        raise ValueError(f"unsupported safetensors dtype {dtype}")
    return arr.reshape(shape)


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n).decode("utf-8"))
    return header, 8 + n


def load(path, as_float32=True):
    """Returns ({name: torch.Tensor}, metadata dict). Floats become float32 when
    as_float32 (the default)."""
    header, base = read_header(path)
    meta = header.pop("__metadata__", {}) or {}
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    for name, info in header.items():
        lo, hi = info["data_offsets"]
        raw = data[base + lo: base + hi]
        arr = _to_float32(raw, info["dtype"], info["shape"])
        if as_float32 and arr.dtype != np.float32 and arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        out[name] = torch.from_numpy(np.array(arr))  # copy: writable, owned
    return out, meta


def save(path, tensors, metadata=None):
    """Writes {name: tensor} as F32 safetensors, names sorted, offsets contiguous."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = tensors[name].detach().cpu().contiguous().to(torch.float32).numpy()
        raw = arr.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # align data to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
