"""Stack dumps grouped across ranks: where each rank is, as evidence a person reads in one line.

"3 of 4 ranks in all_reduce (distributed_c10d.py:3252); rank2 in <module> (hang.py:14)". A rank is placed by the
innermost *meaningful* frame of its main thread (wrappers such as c10d's exception logger, contextlib and
threading are looked through), and each group says whether it waits in torch.distributed (a collective, a
barrier, the rendezvous) and whether the thread was on the CPU. A majority waiting in one place while a few
ranks are elsewhere names those few; every rank idle in the same frame outside torch.distributed is a job
waiting by design (a ready worker), not a hang.

Pure: dumps (py-spy text, or the agent's ``/proc`` fallback) in, groups and sentences out. The detector, the
incident page, the webhook payload and ``specwatch replay`` all read these same groups.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from agents import ranklabel

_THREAD = re.compile(r'^Thread (?:0x)?[0-9a-fA-F]+ \(([\w+]+)\)(?:: "(.*)")?')
_FRAME = re.compile(r"^\s+(\S.*?) \((.+?)(?::(\d+))?\)\s*$")
# frames that wrap the call that matters: looked through to the one inside
_WRAPPERS = (
    "torch/distributed/c10d_logger.py",
    "torch/utils/_contextlib.py",
    "torch/nn/modules/module.py",
    "/contextlib.py",
    "/functools.py",
    "/threading.py",
)
_DIST_PATHS = ("torch/distributed/", "/distributed/parallel_state.py", "deepspeed/comm/")
_DIST_FUNCTIONS = frozenset(
    {"all_reduce", "barrier", "broadcast", "all_gather", "reduce_scatter", "init_process_group", "all_to_all"}
)
_IMPORTING = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")

Verdict = Literal["split", "together", "parked", "mixed"]


@dataclass(slots=True)
class Place:
    """Where one rank's main thread is."""

    key: str  # function and file: ranks a line apart in the same loop are in the same place
    where: str  # "all_reduce (distributed_c10d.py:3252)"
    waiting: bool  # inside torch.distributed: a collective, a barrier, the rendezvous
    active: bool | None  # on the CPU when dumped (None: not known)
    importing: bool = False  # still importing modules: a rank starting, not stuck
    frames: list[str] = field(default_factory=list)  # innermost first, a few


@dataclass(slots=True)
class StackGroup:
    where: str
    ranks: list[str]
    waiting: bool
    active: bool | None
    ts: float
    dump: str = ""
    frames: list[str] = field(default_factory=list)
    active_ranks: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "ranks": self.ranks,
            "waiting": self.waiting,
            "active": self.active,
            "frames": self.frames,
        }


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def place(dump: str, fields: dict[str, Any] | None = None) -> Place | None:
    """The main thread's innermost meaningful frame in a py-spy dump (or the agent's /proc fallback)."""
    threads: list[tuple[str, str, list[tuple[str, str, str | None]]]] = []
    for line in dump.splitlines()[:400]:
        if line.startswith("Thread "):
            m = _THREAD.match(line)
            threads.append((m.group(1) if m else "", (m.group(2) or "") if m else "", []))
            continue
        if threads:
            fm = _FRAME.match(line)
            if fm and not line.lstrip().startswith("kernel "):
                threads[-1][2].append((fm.group(1), fm.group(2), fm.group(3)))
    threads = [t for t in threads if t[2]]
    if not threads:
        top = (fields or {}).get("top_frame")
        return Place(str(top), str(top), False, None) if top else None
    state, _, frames = next((t for t in threads if t[1] == "MainThread"), threads[0])
    i = 0
    while i < len(frames) - 1 and any(w in frames[i][1] for w in _WRAPPERS):
        i += 1
    fn, path, lineno = frames[i]
    where = f"{fn} ({_short(path)}:{lineno})" if lineno else f"{fn} ({_short(path)})"
    near = frames[i : i + 4]
    waiting = any(any(d in p for d in _DIST_PATHS) or f in _DIST_FUNCTIONS for f, p, _ in near)
    importing = any(p in _IMPORTING for _, p, _ in frames[:12])
    active = None
    if state:
        active = state.startswith("active") or state in ("R", "gil")
    shown = [f"{f} ({p}:{n})" if n else f"{f} ({p})" for f, p, n in frames[:6]]
    return Place(f"{fn} ({path})", where, waiting and not importing, active, importing, shown)


def group(dumps: Iterable[tuple[str, float, str, dict[str, Any]]]) -> list[StackGroup]:
    """Groups of ranks in the same place, from (rank, ts, dump, fields); the newest dump of each rank counts.
    Largest group first; ranks in PyTorch's order."""
    newest: dict[str, tuple[float, str, dict[str, Any]]] = {}
    for rank, ts, dump, fields in dumps:
        if fields.get("ok") is False:
            continue
        if rank not in newest or ts >= newest[rank][0]:
            newest[rank] = (ts, dump, fields)
    groups: dict[str, StackGroup] = {}
    lines: dict[str, list[str]] = {}
    for rank, (ts, dump, fields) in newest.items():
        p = place(dump, fields)
        if p is None:
            continue
        g = groups.get(p.key)
        if g is None:
            g = groups[p.key] = StackGroup(p.where, [], p.waiting, p.active, ts, dump, p.frames)
        g.ranks.append(rank)
        lines.setdefault(p.key, []).append(p.where)
        g.ts = max(g.ts, ts)
        if p.active:
            g.active = True
            g.active_ranks.append(rank)
    for key, g in groups.items():
        g.where = max(set(lines[key]), key=lines[key].count)  # the line most of its ranks are on
    out = sorted(groups.values(), key=lambda g: (-len(g.ranks), g.where))
    for g in out:
        g.ranks.sort(key=ranklabel.sort_key)
    return out


def sentence(groups: list[StackGroup], total: int | None = None) -> str:
    """ "3 of 4 ranks in all_reduce (distributed_c10d.py:3252); rank2 in <module> (hang.py:14)" """
    n_all = total if total is not None else sum(len(g.ranks) for g in groups)
    parts = []
    for g in groups:
        n = len(g.ranks)
        if n == 1:
            who = g.ranks[0]
        elif n == n_all:
            who = f"all {n} ranks"
        else:
            who = f"{n} of {n_all} ranks"
        how = "" if g.active is None else (", on CPU" if g.active else "")
        parts.append(f"{who} in {g.where}{how}")
    return "; ".join(parts)


def verdict(groups: list[StackGroup], labels: list[str]) -> tuple[Verdict | None, list[str]]:
    """What the stacks of every rank in ``labels`` say, with the odd ranks of a split.

    split: most ranks wait in torch.distributed in one place and the rest are elsewhere (the odd ones).
    together: every rank in the same place outside torch.distributed (working or idle by design).
    parked: every rank waiting in the same torch.distributed place (a collective nobody completes, or a
    slow rendezvous: the stacks alone cannot tell which, nor who).
    mixed: none of these. None: not every rank has a dump yet."""
    covered = {r for g in groups for r in g.ranks}
    if not labels or not set(labels) <= covered:
        return None, []
    mine = [
        StackGroup(g.where, [r for r in g.ranks if r in labels], g.waiting, g.active, g.ts) for g in groups
    ]
    mine = [g for g in mine if g.ranks]
    if len(mine) == 1:
        return ("together" if not mine[0].waiting else "parked"), []
    biggest = mine[0]
    odd = sorted((r for g in mine[1:] for r in g.ranks), key=ranklabel.sort_key)
    if biggest.waiting and len(odd) * 2 < len(labels) and len(biggest.ranks) > len(mine[1].ranks):
        return "split", odd
    return "mixed", []


def rounds(
    stack_signals: Iterable[tuple[str | None, Any]], since: float, labels: list[str], gap_s: float = 1.0
) -> tuple[list[StackGroup], list[StackGroup], float | None]:
    """Groups of the newest dump of each rank in ``labels`` taken at or after ``since``, and of the dump
    before it (at least ``gap_s`` older): a split seen in both rounds is a state, not a moment caught. The
    third value is the time of the oldest of the newest dumps (how fresh the picture is)."""
    wanted = set(labels)
    per: dict[str, list[Any]] = {}
    for rank, sig in stack_signals:
        if rank is not None and rank in wanted and sig.ts >= since and sig.fields.get("ok") is not False:
            per.setdefault(rank, []).append(sig)
    newest, before = [], []
    for rank, sigs in per.items():
        sigs.sort(key=lambda x: x.ts)
        last = sigs[-1]
        newest.append((rank, last.ts, last.message, last.fields))
        prior = [x for x in sigs[:-1] if x.ts <= last.ts - gap_s]
        if prior:
            before.append((rank, prior[-1].ts, prior[-1].message, prior[-1].fields))
    return group(newest), group(before), min((ts for _, ts, _, _ in newest), default=None)


def depth(stack_signals: Iterable[tuple[str | None, Any]], since: float, labels: list[str]) -> int:
    """How many dumps the least-dumped rank in ``labels`` has had since ``since``: rounds taken."""
    counts = dict.fromkeys(labels, 0)
    for rank, sig in stack_signals:
        if rank in counts and sig.ts >= since and sig.fields.get("ok") is not False:
            counts[rank] += 1
    return min(counts.values(), default=0)


def evidence_rows(groups: list[StackGroup], total: int) -> list[dict[str, Any]]:
    """The groups as evidence rows: the sentence, then each group's innermost frames."""
    if not groups:
        return []
    rows = [
        {"ts": max(g.ts for g in groups), "rank": None, "what": "stacks", "value": sentence(groups, total)}
    ]
    for g in groups[:4]:
        rows.append(
            {
                "ts": g.ts,
                "rank": g.ranks[0] if len(g.ranks) == 1 else None,
                "what": f"stack of {', '.join(g.ranks[:8])}{' ...' if len(g.ranks) > 8 else ''}",
                "value": " <- ".join(g.frames[:4]) or g.where,
            }
        )
    return rows
