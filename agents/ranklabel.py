"""The one rank-label rule: how a rank is named wherever it is seen (process titles, log prefixes, per-rank file
names) and how ranks sort. The agent, ``replay`` and ``eval`` all label through here, so the rank a live server
stores for a line is the rank replay gives the same line.

A label is the engine's own tags in the engine's own order, one space apart: ``TP3``, ``DP0 TP1``,
``ATTN_CP1 MOE_DP0 TP3``. SGLang prints a tag only for a dimension larger than one and changed their order
across releases, so the order is kept as seen, never re-sorted; only :func:`sort_key` puts ranks in a
canonical order for display.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

# longest first, so that ``MOE_DP0`` is not read as ``DP0`` and ``ATTN_CP1`` as ``CP1``
TAG_KINDS = ("ATTN_CP", "MOE_DP", "DP", "PP", "TP", "EP")
# the order ranks are listed in: data-parallel groups outermost, as the engines lay ranks out
SORT_ORDER = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")

_KIND = "|".join(TAG_KINDS)
TAG = re.compile(rf"({_KIND})(\d{{1,5}})")
# in a file name, a run of tags with optional ``_``/``-`` inside a tag (``TP-3``) and between tags
_IN_NAME = re.compile(rf"(?<![A-Za-z])((?:(?:{_KIND})[_-]?\d{{1,5}}[_ -]?){{1,6}})(?![A-Za-z])")
_IN_NAME_TAG = re.compile(rf"({_KIND})[_-]?(\d{{1,5}})")


def from_tags(text: str | None) -> str | None:
    """``DP0_TP1`` (a process title), `` DP0 TP0`` (a log prefix) -> ``DP0 TP1`` / ``DP0 TP0``; None if no tag."""
    if not text:
        return None
    return " ".join(f"{kind}{n}" for kind, n in TAG.findall(text)) or None


def from_filename(path: str) -> str | None:
    """``sglang-TP3.log`` -> ``TP3``, ``scheduler_DP0_TP1.log`` -> ``DP0 TP1``: the rank of a per-rank file's
    untagged lines (tqdm bars on stderr). None for a file that names no rank (``launch.log``, ``STOP.log``);
    lower-case names (``pp1-tp0.log``) are not read as ranks, since words like ``step1`` would be."""
    m = _IN_NAME.search(PurePath(path).name)
    if m is None:
        return None
    return " ".join(f"{kind}{n}" for kind, n in _IN_NAME_TAG.findall(m.group(1))) or None


def sort_key(label: str, host: str | None = None) -> tuple[Any, ...]:
    """Ranks in the engines' layout order (``TP2`` before ``TP10``; ``DP0 TP1`` before ``DP1 TP0``)."""
    tags = {kind: int(n) for kind, n in TAG.findall(label)}
    return (host or "", *(tags.get(kind, -1) for kind in SORT_ORDER), label)
