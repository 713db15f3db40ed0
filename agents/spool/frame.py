"""Agent-local metadata inside a spooled batch file, in the gzip header's FEXTRA field (RFC 1952 §2.3.1).

A spool file is the request body, so anything the agent must remember *together with* a batch (the log
tailer's offsets after that batch's lines) has to live in the same file to be written by the same atomic
rename; a second file could survive a crash without the first. The gzip header has room for application
data that every decompressor skips; the shipper strips it before sending, so the server receives exactly
the body it always did (the wire contract is the JSON, not this header).
"""

from __future__ import annotations

import logging
import struct
import zlib
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("specwatch.agent.spool")

_FEXTRA = 0x04
_SUBFIELD = b"SW"  # specwatch
_MAX_EXTRA = 0xFFFF


def frame(gz: bytes, meta: dict[str, Any] | None) -> bytes:
    """``gz`` (a gzip member without optional header fields, as ``gzip.compress`` makes) with ``meta`` in
    its header. Metadata too large for the field is left out (the caller's fallback: the state file)."""
    if meta is None:
        return gz
    if gz[3] != 0:
        raise ValueError("gzip header already carries optional fields")
    payload = zlib.compress(orjson.dumps(meta), 6)
    if len(payload) + 4 > _MAX_EXTRA:
        log.warning("spool metadata of %d bytes does not fit a gzip header: not kept", len(payload))
        return gz
    sub = _SUBFIELD + struct.pack("<H", len(payload)) + payload
    return gz[:3] + bytes([_FEXTRA]) + gz[4:10] + struct.pack("<H", len(sub)) + sub + gz[10:]


def strip(data: bytes) -> bytes:
    """The plain gzip body the server gets: the header's extra field removed, nothing re-encoded."""
    if len(data) < 12 or not data[3] & _FEXTRA:
        return data
    (xlen,) = struct.unpack_from("<H", data, 10)
    return data[:3] + bytes([data[3] & ~_FEXTRA]) + data[4:10] + data[12 + xlen :]


def read_meta(path: Path) -> dict[str, Any] | None:
    """The metadata of a spool file, reading only its header; None when absent or unreadable."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or not head[3] & _FEXTRA:
                return None
            (xlen,) = struct.unpack_from("<H", head, 10)
            return read_meta_bytes(head + f.read(xlen))
    except OSError:
        return None


def read_meta_bytes(data: bytes) -> dict[str, Any] | None:
    """The metadata in the header of a framed gzip member held in memory; None when absent or unreadable."""
    if len(data) < 12 or data[:2] != b"\x1f\x8b" or not data[3] & _FEXTRA:
        return None
    (xlen,) = struct.unpack_from("<H", data, 10)
    extra = data[12 : 12 + xlen]
    pos = 0
    while pos + 4 <= len(extra):
        (n,) = struct.unpack_from("<H", extra, pos + 2)
        if extra[pos : pos + 2] == _SUBFIELD:
            try:
                meta = orjson.loads(zlib.decompress(extra[pos + 4 : pos + 4 + n]))
            except (zlib.error, orjson.JSONDecodeError):
                return None
            return meta if isinstance(meta, dict) else None
        pos += 4 + n
    return None
