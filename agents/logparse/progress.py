"""tqdm progress bars (stderr, no prefix): safetensors shards, CUDA-graph capture, anything else."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .values import Fields

# Bounded repeats everywhere: a bar is short, and a 100k-character line must not make this quadratic.
_BAR = re.compile(
    r"(?:(?P<desc>[^\r|]{0,300}?):)?\s{0,40}(?P<pct>\d{1,3})%"
    # the bar itself, vLLM's "Completed |", or none where tqdm had no room for it ("57% 4/7 [00:40<00:29, ...]")
    r"(?:\|[^|]{0,400}\||\s{0,20}Completed\s{0,20}\||\s{1,4}(?=\d{1,9}/\d{1,9}\s{0,4}\[\d))"
    r"\s{0,40}(?P<done>\d{1,9})/(?P<total>\d{1,9})"
    # (the bracket may be cut where another process's line was written into the bar: "158.06s/i[rank0]:[E ...")
    r"(?:\s{0,4}\[(?P<el>\d{1,4}(?::\d\d){1,2})(?:<[\d:?]{0,12})?[^\]\[]{0,80}(?:\]|(?=\[)))?"
)
_DESC_BS = re.compile(r"bs=(\d+)")
_DESC_AVAIL = re.compile(r"avail_mem=([\d.]+)\s*GB")


@dataclass(slots=True)
class Bar:
    kind: str
    desc: str
    fields: Fields
    elapsed_s: float | None
    rest: str  # a log line glued after the bar (no newline in between)


_BARLESS = re.compile(r"\d%\s{1,4}\d{1,9}/\d{1,9}\s{0,4}\[\d")


def looks_like_bar(s: str) -> bool:
    return "%|" in s or "% Completed" in s or ("% " in s and _BARLESS.search(s, 0, 600) is not None)


def _clock(text: str) -> float:
    total = 0.0
    for part in text.split(":"):
        total = total * 60 + int(part)
    return total


_WARMUP = re.compile(r"warm[- ]?up", re.IGNORECASE)


def parse_bar(s: str) -> Bar | None:
    m = _BAR.match(s)
    if not m:
        return None
    desc = (m.group("desc") or "").strip()  # (a bare bar: tqdm with no description)
    fields: Fields = {"done": int(m.group("done")), "total": int(m.group("total"))}
    if desc.startswith("Capturing"):
        kind = "capture_progress"
        bs = _DESC_BS.search(desc)
        if bs:
            fields["bs"] = int(bs.group(1))
        avail = _DESC_AVAIL.search(desc)
        if avail:
            fields["avail_mem_gb"] = float(avail.group(1))
    elif "checkpoint shards" in desc or "loading shards" in desc.lower():
        kind = "shard_progress"
    else:
        # a bar that counts a warm-up's steps is the warm-up (SGLang's "DeepGEMM warmup", JIT kernels)
        kind = "warmup_progress" if _WARMUP.search(desc) else "progress"
        fields["desc"] = desc[:128]
    el = m.group("el")
    elapsed = _clock(el) if el else None
    if elapsed is not None:
        fields["elapsed_s"] = elapsed
    return Bar(kind, desc, fields, elapsed, s[m.end() :])
