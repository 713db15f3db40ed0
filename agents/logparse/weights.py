"""Warnings that weights were dropped, missing or unused: how a silently broken draft shows in the log.

Engines word these differently (transformers' ``Some weights ... were not used``, vLLM's ``Following weights
were not initialized``, loaders that print ``Parameter X not found in params_dict`` or ``Skipping ...``), so
this matches a weight word together with a dropped/missing word rather than exact sentences.
"""

from __future__ import annotations

import re

from .values import Fields

_TRIGGERS = (
    "not found",
    "not initialized",
    "newly initialized",
    "were not used",
    "not used when",
    "unexpected",
    "missing",
    "unused",
    "skipping",
    "ignored",
    "not loaded",
    "dropped",
)
_KEY = re.compile(r"[A-Za-z_][\w-]{0,80}(?:\.[\w-]{1,80}){1,12}")
_DRAFT_HINTS = ("eagle", "draft", "mtp", "nextn", "midlayer", "medusa")
_NOT_KEYS = ("sglang.", "vllm.", "torch.", "transformers.", ".py", ".cpp", ".safetensors", ".json")


def weights_warning(msg: str) -> Fields | None:
    if "eight" not in msg and "aram" not in msg and "keys" not in msg:
        return None
    low = msg[:4096].lower()
    if not any(w in low for w in ("weight", "param", "keys")):
        return None
    if not any(t in low for t in _TRIGGERS):
        return None
    keys: list[str] = []
    for m in _KEY.finditer(msg, 0, 8192):
        k = m.group(0)
        if k not in keys and not any(x in k for x in _NOT_KEYS) and not k[0].isdigit():
            keys.append(k)
        if len(keys) >= 50:
            break
    fields: Fields = {"keys": ",".join(keys)[:2000], "count": len(keys)}
    fields["draft"] = any(h in low for h in _DRAFT_HINTS)
    return fields
