"""Reading safetensors headers: an 8-byte little-endian length, then a JSON object
``{name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}``. Only the header is read, so a 1 TB
checkpoint costs one small read per shard and needs no torch."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import orjson

# The format's own cap; a larger "length" means the file is not safetensors (or is corrupt).
MAX_HEADER_BYTES = 100 * 1024 * 1024

DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}  # fmt: skip
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4"})


class HeaderError(ValueError):
    """A file that is not a readable safetensors file; the message is one sentence naming it."""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str  # file name inside the checkpoint directory
    nbytes: int


@dataclass(frozen=True, slots=True)
class Header:
    file: str
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    file_bytes: int
    # bytes the header says the file holds; more than file_bytes means an interrupted download
    expected_bytes: int


def read_header(path: Path) -> Header:
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            raw_len = f.read(8)
            if len(raw_len) < 8:
                raise HeaderError(f"{path} is too short to be a safetensors file ({size} bytes)")
            (n,) = struct.unpack("<Q", raw_len)
            if n > MAX_HEADER_BYTES or n > size - 8:
                raise HeaderError(
                    f"{path} is not a safetensors file (header length {n} does not fit a {size}-byte file)"
                )
            blob = f.read(n)
    except OSError as exc:
        raise HeaderError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        doc = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise HeaderError(f"{path} has a corrupt safetensors header ({exc})") from exc
    if not isinstance(doc, dict):
        raise HeaderError(f"{path} has a safetensors header that is not a JSON object")
    meta = doc.pop("__metadata__", None) or {}
    tensors: dict[str, TensorInfo] = {}
    data_end = 0
    fname = path.name
    # a 1 TB MoE checkpoint has ~70k entries: this loop is the whole cost of a check, so it stays plain
    for name, spec in doc.items():
        try:
            dtype = spec["dtype"]
            shape = tuple(spec["shape"])
            start, end = spec["data_offsets"]
            nbytes = end - start
        except (KeyError, TypeError, ValueError) as exc:
            raise HeaderError(f"{path}: tensor {name!r} has a malformed header entry") from exc
        tensors[name] = TensorInfo(name, dtype, shape, fname, nbytes)
        if end > data_end:
            data_end = end
    return Header(
        file=path.name,
        tensors=tensors,
        metadata={str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {},
        file_bytes=size,
        expected_bytes=8 + n + data_end,
    )


def numel(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out
