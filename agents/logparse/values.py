"""Turning ``key: value`` / ``key=value`` text into typed event fields."""

from __future__ import annotations

import re

Scalar = float | int | str | bool | None
Fields = dict[str, Scalar]

MAX_FIELDS = 64  # wire.Event.fields bound
MAX_TEXT = 512  # string field values are evidence, not payloads

_SLUG = re.compile(r"[^a-z0-9]+")
_UNIT_SUFFIX = {"GB": "_gb", "GiB": "_gb", "MB": "_mb", "MiB": "_mb", "s": "_s", "ms": "_ms", "%": "_pct"}


def slug(key: str) -> str:
    """``"#running-req"`` -> ``"running_req"``; cached, since a log repeats the same few keys endlessly."""
    k = _SLUGS.get(key)
    if k is None:
        k = _SLUG.sub("_", key.lower()).strip("_")[:64]
        if len(_SLUGS) < 4096:
            _SLUGS[key] = k
    return k


_SLUGS: dict[str, str] = {}


def number(text: str) -> float | int | None:
    """``"12"`` -> 12, ``"0.71"`` -> 0.71, anything else None (never raises)."""
    t = text.strip()
    if not t or len(t) > 40 or not t.isascii():
        return None
    if t.isdigit():
        return int(t)
    if t[0] not in "-+.0123456789":
        return None
    try:
        return int(t) if "." not in t and "e" not in t.lower() else _finite(float(t))
    except ValueError:
        return None


def _finite(v: float) -> float | None:
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def scalar(text: str) -> Scalar:
    t = text.strip()
    if t == "True" or t == "true":
        return True
    if t == "False" or t == "false":
        return False
    n = number(t)
    return n if n is not None else t[:MAX_TEXT]


def put(fields: Fields, key: str, raw: str, renames: dict[str, str] | None = None) -> None:
    """Store one value; a trailing unit (``61.2 GB``, ``2.9 s``) moves into the key (``avail_mem_gb``)."""
    if len(fields) >= MAX_FIELDS:
        return
    k = slug(key)
    if not k:
        return
    if renames:
        k = renames.get(k, k)
    raw = raw.strip()
    if raw.endswith("."):
        raw = raw.rstrip(".")
    if " " in raw:
        head, _, unit = raw.rpartition(" ")
        suffix = _UNIT_SUFFIX.get(unit)
        if suffix is not None:
            n = number(head)
            if n is not None:
                fields[k + suffix] = n
                return
    elif raw.endswith("%"):
        n = number(raw[:-1])
        if n is not None:
            fields[k + "_pct"] = n
            return
    fields[k] = scalar(raw)


def colon_pairs(text: str, renames: dict[str, str] | None = None) -> Fields:
    """``#running-req: 32, token usage: 0.04, cuda graph: True`` -> typed fields."""
    out: Fields = {}
    for part in text.split(", "):
        key, sep, val = part.partition(": ")
        if sep:
            put(out, key, val, renames)
    return out


def eq_pairs(text: str, renames: dict[str, str] | None = None) -> Fields:
    """``elapsed=124.33 s, type=X, avail mem=61.20 GB`` -> typed fields."""
    out: Fields = {}
    for part in text.split(", "):
        key, sep, val = part.partition("=")
        if sep:
            put(out, key, val, renames)
    return out
