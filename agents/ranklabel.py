"""The one rank-label rule: how a rank is named wherever it is seen (process titles, log prefixes, per-rank file
names) and how ranks sort. The agent, ``replay`` and ``eval`` all label through here, so the rank a live server
stores for a line is the rank replay gives the same line.

A label is the engine's own tags in the engine's own order, one space apart: ``TP3``, ``DP0 TP1``,
``ATTN_CP1 MOE_DP0 TP3``. SGLang prints a tag only for a dimension larger than one and changed their order
across releases, so the order is kept as seen, never re-sorted; only :func:`sort_key` puts ranks in a
canonical order for display.

A plain torch.distributed worker (torchrun, torch.multiprocessing, deepspeed, accelerate, mpirun) has no tags:
it is ``rank<N>``, its global ``RANK``, as PyTorch's own ``[rank3]:`` log prefix names it. The agent reads it
from the worker's environment (:func:`torch_rank`); the server maps PyTorch's global rank N to the label the
launch knows (:func:`label_for_global`: ``rankN``, ``TPN``, or the one label whose TP tag is N).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
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
    """Ranks in the engines' layout order (``TP2`` before ``TP10``; ``DP0 TP1`` before ``DP1 TP0``); torch
    workers by global rank (``rank2`` before ``rank10``)."""
    m = _TORCH.match(label)
    tags = {"TP": int(m.group(1))} if m else {kind: int(n) for kind, n in TAG.findall(label)}
    return (host or "", *(tags.get(kind, -1) for kind in SORT_ORDER), label)


_TORCH = re.compile(r"^rank(\d{1,7})$")
_TP_TAG = re.compile(r"(?:^|\s)TP(\d+)(?:\s|$)")
# Environment variables a torch.distributed worker carries, by launcher. The rank variables are tried in order.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
JOB_VARS = (
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
    "GROUP_RANK",
)


# The one rank of an engine whose world is one process (vLLM's untagged ``VLLM::Worker``, an SGLang scheduler at
# TP=1): TP rank 0, as the engine's own "rank 0 in world size 1 is assigned as ... TP rank 0" line has it.
SOLE = "TP0"


def torch_label(rank: int) -> str:
    """A torch.distributed worker's label: ``rank3``, as PyTorch prefixes its lines (``[rank3]:``)."""
    return f"rank{rank}"


def is_torch(label: str) -> bool:
    """A plain torch.distributed worker's label (``rank3``), as opposed to an engine's (``TP3``)."""
    return _TORCH.match(label) is not None


def _int_var(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        v = env.get(name, "").strip()
        if v.isdigit():
            return int(v)
    return None


def torch_world(env: Mapping[str, str]) -> int | None:
    """How many ranks the job has: ``WORLD_SIZE`` (or an MPI launcher's), else torchelastic's nodes times the
    ranks per node (``GROUP_WORLD_SIZE`` x ``LOCAL_WORLD_SIZE``)."""
    world = _int_var(env, *WORLD_VARS)
    if (
        world is None
        and (nodes := _int_var(env, "GROUP_WORLD_SIZE"))
        and (per := _int_var(env, "LOCAL_WORLD_SIZE"))
    ):
        world = nodes * per
    return world


def torch_rank(env: Mapping[str, str]) -> int | None:
    """The global rank of a torch.distributed worker from its environment, or None when it is not one.

    ``RANK`` (or an MPI launcher's), else torchelastic's node rank and local rank on a homogeneous job
    (``GROUP_RANK`` x ``LOCAL_WORLD_SIZE`` + ``LOCAL_RANK``), so a worker is named by its place in the whole job
    on every node. A worker has a rank, a world size and at least one of the rendezvous variables (so a stray
    ``RANK`` in some unrelated program's environment is not enough)."""
    rank = _int_var(env, *RANK_VARS)
    if rank is None:
        node, local, per = (_int_var(env, v) for v in ("GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
        if node is not None and local is not None and per is not None and local < per:
            rank = node * per + local
    world = torch_world(env)
    if rank is None or world is None or not any(env.get(v) for v in JOB_VARS):
        return None
    return rank if rank < world else None


def torch_place(env: Mapping[str, str]) -> str:
    """Where a worker sits in its job, for a person: ``rank 5 of 8, node 1, local rank 1`` (what is known)."""
    parts = []
    rank, world = torch_rank(env), torch_world(env)
    if rank is not None:
        parts.append(f"rank {rank} of {world}")
    if (node := _int_var(env, "GROUP_RANK")) is not None:
        parts.append(f"node {node}")
    if (local := _int_var(env, "LOCAL_RANK")) is not None:
        parts.append(f"local rank {local}")
    restarts = _int_var(env, "TORCHELASTIC_RESTART_COUNT")
    if restarts:
        parts.append(f"restart {restarts}")
    return ", ".join(parts)


def job_id(env: Mapping[str, str]) -> str | None:
    """Which job a worker belongs to, the same on every host: torchrun's run id, else the rendezvous address."""
    run = env.get("TORCHELASTIC_RUN_ID", "")
    if run and run != "none":
        return run[:64]
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"[:64]
    return None


def label_for_global(labels: Collection[str], global_rank: int) -> str | None:
    """The label PyTorch's global rank ``N`` has among a launch's labels: ``rankN`` (a torch job), ``TPN``
    (plain TP), or the only label whose TP tag is N (``DP0 TP3``)."""
    for label in (torch_label(global_rank), f"TP{global_rank}"):
        if label in labels:
            return label
    for lab in labels:
        m = _TP_TAG.search(lab)
        if m and int(m.group(1)) == global_rank and len(lab.split()) > 1:
            return lab
    return None


_PROCESS = re.compile(r"^pid(\d{1,10})$")


def process_label(pid: int) -> str:
    """A process that no line names a rank for (NCCL's own lines, a vLLM V0 worker): ``pid166``, as it stands
    in for a rank while nothing else names one (app/rankstate/unnamed.py)."""
    return f"pid{pid}"


# the log itself, standing in where no line names a rank or a process (app/rankstate/unnamed.py)
LOG = "log"


def is_process(label: str) -> bool:
    """A stand-in, not a rank: a process by its pid, or the log itself."""
    return label == LOG or _PROCESS.match(label) is not None


def canonical(label: str, labels: Collection[str]) -> str:
    """A label as the launch knows it: PyTorch's ``rank3`` is ``TP3`` in an engine whose ranks are TP-tagged."""
    m = _TORCH.match(label)
    if m is None or label in labels or not labels:
        return label
    return label_for_global(labels, int(m.group(1))) or label
