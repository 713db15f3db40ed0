"""Which engine processes this agent owns, and which launch (engine world) each belongs to.

Ownership. The agent watches what it launched (``--launch``: the command's descendants), what an explicit
selector names (``--select``, repeatable, any one matching is enough):

    pid:N          the process N and its descendants
    unit:NAME      a systemd unit (``vllm.service``): its cgroup
    cgroup:TEXT    any process whose cgroup path contains TEXT
    container:ID   a container (docker, podman, containerd, Kubernetes): its cgroup names the id
    cmd:REGEX      a process whose command line, or an ancestor's, matches REGEX
    env:KEY=VALUE  a process whose environment has KEY=VALUE (children inherit it)

or, with neither, every engine on the host when the agent runs as root (a dedicated GPU host's service), and
the engines of the agent's own user otherwise (a user's agent on a shared machine never claims a colleague's
vLLM). A process it does not own is never sampled, its output never followed, its draft never checked and
its stack never dumped.

The world. Each owned engine process belongs to one launch, named by the engine's own world, in this order:
the rendezvous a torchrun/torchelastic job was given (``--rdzv-id`` / ``--rdzv-endpoint``, or the
``TORCHELASTIC_RUN_ID`` of its workers), ``MASTER_ADDR:MASTER_PORT``, SGLang's ``--dist-init-addr``; a
loopback address is qualified by the host. Where the engine names no world, its process tree on this host is
the world: the topmost engine process (its entry point), or, for engine children of a script that is no engine
entry point, the process that spawned them. So two TP8 replicas, or 2 x TP4 on one host, are two launches
without the user naming them, and the ranks of a multi-node job share the one world its hosts all name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from agents import wire
from agents.logparse.engine import engine_of

SELECTOR_KINDS = ("pid", "unit", "cgroup", "container", "cmd", "env")
_LOOPBACK = re.compile(r"^(?:127\.|localhost$|::1$|0\.0\.0\.0$|\[::1\]$)")
# (flag, env key) pairs that name a rendezvous on a command line, as engines spell them
_FLAGS = {
    "rdzv_id": ("--rdzv-id", "--rdzv_id"),
    "rdzv_endpoint": ("--rdzv-endpoint", "--rdzv_endpoint"),
    "master_addr": ("--master-addr", "--master_addr"),
    "master_port": ("--master-port", "--master_port"),
    "dist_init_addr": ("--dist-init-addr", "--dist_init_addr", "--nccl-init-addr"),
}


class SelectorError(ValueError):
    """A ``--select`` that cannot be read: the message says which and how to write it."""


@dataclass(frozen=True, slots=True)
class Selector:
    kind: str
    value: str

    @staticmethod
    def parse(spec: str) -> Selector:
        kind, sep, value = spec.partition(":")
        if not sep or kind not in SELECTOR_KINDS or not value:
            raise SelectorError(
                f"--select {spec!r}: expected KIND:VALUE with KIND one of {', '.join(SELECTOR_KINDS)} "
                "(e.g. pid:4242, unit:vllm.service, container:3f2a9c, cmd:'--port 30001', env:JOB=alice)"
            )
        if kind == "pid" and not value.isdigit():
            raise SelectorError(f"--select {spec!r}: a pid is a number")
        if kind == "env" and "=" not in value:
            raise SelectorError(f"--select {spec!r}: expected env:KEY=VALUE")
        if kind == "cmd":
            try:
                re.compile(value)
            except re.error as exc:
                raise SelectorError(f"--select {spec!r}: not a regular expression ({exc})") from exc
        return Selector(kind, value)

    def describe(self) -> str:
        return f"{self.kind}:{self.value}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the collector read of a process and its ancestors (nearest first), for the ownership rule."""

    pid: int
    uid: int | None
    cmdline: Sequence[str]
    env: Mapping[str, str]
    cgroup: str
    ancestors: Sequence[tuple[int, Sequence[str]]] = ()  # (pid, cmdline)
    # the ancestors' environments (read for an env selector only): a child that renames itself
    # (setproctitle) may overwrite its own copy, its parent's still says who started it
    ancestor_envs: Sequence[Mapping[str, str]] = ()


@dataclass(frozen=True, slots=True)
class Ownership:
    """The rule: ``scope_pid`` (``--launch``), else ``selectors``, else every engine of ``uid`` (None: all)."""

    selectors: tuple[Selector, ...] = ()
    scope_pid: int | None = None
    uid: int | None = None

    @staticmethod
    def default(selectors: Sequence[Selector] = (), scope_pid: int | None = None) -> Ownership:
        """Root (a dedicated host's service) owns every engine; anyone else owns their own."""
        uid = os.getuid() if hasattr(os, "getuid") else 0
        return Ownership(tuple(selectors), scope_pid, None if uid == 0 else uid)

    @property
    def needs_env(self) -> bool:
        return any(s.kind == "env" for s in self.selectors)

    def owns(self, c: Candidate) -> bool:
        if self.scope_pid is not None:
            return c.pid == self.scope_pid or any(pid == self.scope_pid for pid, _ in c.ancestors)
        if self.selectors:
            return any(_matches(s, c) for s in self.selectors)
        return self.uid is None or c.uid is None or c.uid == self.uid

    def describe(self) -> str:
        if self.scope_pid is not None:
            return f"the launched command (pid {self.scope_pid}) and its descendants"
        if self.selectors:
            return "processes selected by " + ", ".join(s.describe() for s in self.selectors)
        if self.uid is None:
            return "every engine on this host (running as root), each as its own launch"
        return (
            f"the engines of uid {self.uid} (this agent's user), each as its own launch; --select for others"
        )


def _matches(s: Selector, c: Candidate) -> bool:
    if s.kind == "pid":
        pid = int(s.value)
        return c.pid == pid or any(p == pid for p, _ in c.ancestors)
    if s.kind in ("cgroup", "container"):
        return s.value in c.cgroup
    if s.kind == "unit":
        unit = s.value if "." in s.value else f"{s.value}.service"
        return f"/{unit}" in c.cgroup
    if s.kind == "cmd":
        rx = re.compile(s.value)
        return any(rx.search(" ".join(cmd)) for cmd in (c.cmdline, *(a for _, a in c.ancestors)))
    key, _, value = s.value.partition("=")
    return any(env.get(key) == value for env in (c.env, *c.ancestor_envs))


def environ(proc: psutil.Process) -> dict[str, str]:
    """The environment, where this agent may read it (another user's is closed to a non-root agent)."""
    try:
        env: dict[str, str] = proc.environ()
        return env
    except (psutil.Error, OSError):
        return {}


def candidate(
    rule: Ownership,
    proc_root: str,
    proc: psutil.Process,
    cmd: list[str],
    env: dict[str, str],
    parents: list[psutil.Process],
) -> Candidate:
    """What the rule needs of a live process: ancestors' command lines (and environments) only when a
    selector reads them."""
    ancestors: list[tuple[int, Sequence[str]]] = []
    for q in parents:
        try:
            ancestors.append((q.pid, q.cmdline() if rule.selectors else []))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            ancestors.append((q.pid, []))
    try:
        uid: int | None = proc.uids().real
    except (psutil.AccessDenied, AttributeError):
        uid = None
    envs = [environ(q) for q in parents] if rule.needs_env else []
    return Candidate(proc.pid, uid, cmd, env, read_cgroup(proc_root, proc.pid), ancestors, envs)


def read_cgroup(proc_root: str, pid: int) -> str:
    try:
        return Path(f"{proc_root}/{pid}/cgroup").read_text(errors="replace")
    except OSError:
        return ""


def _flag(cmdline: Sequence[str], names: Sequence[str]) -> str | None:
    for i, arg in enumerate(cmdline):
        for name in names:
            if arg == name and i + 1 < len(cmdline):
                return cmdline[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _address(host: str, addr: str, port: str | None = None) -> str:
    where = f"{addr}:{port}" if port else addr
    return f"{host}/{where}" if _LOOPBACK.match(addr) else where


def named_world(host: str, cmdline: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The world the engine itself names (a rendezvous, a run id, a master address), or None."""
    rdzv_id = _flag(cmdline, _FLAGS["rdzv_id"])
    endpoint = _flag(cmdline, _FLAGS["rdzv_endpoint"])
    if rdzv_id and rdzv_id != "none" and endpoint:
        return f"torchelastic:{rdzv_id}@{_address(host, endpoint.rsplit(':', 1)[0], endpoint.rpartition(':')[2])}"
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torchelastic:{run_id}" + (f"@{host}" if _LOOPBACK.match(env.get("MASTER_ADDR", "")) else "")
    addr = _flag(cmdline, _FLAGS["master_addr"]) or env.get("MASTER_ADDR")
    port = _flag(cmdline, _FLAGS["master_port"]) or env.get("MASTER_PORT")
    if addr and port:
        return f"torch:{_address(host, addr, port)}"
    init = _flag(cmdline, _FLAGS["dist_init_addr"])
    if init:
        a, _, p = init.rpartition(":")
        return f"dist:{_address(host, a, p) if a else _address(host, init)}"
    return None


def tree_world(host: str, pid: int, create_time: float) -> str:
    """A world no engine flag names: one process tree on one host (its start time tells a reused pid apart)."""
    return f"{host}/pid{pid}@{create_time:.0f}"


class Worlds:
    """The world of every tracked engine process on this host (decided once, when the process is found)."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._world: dict[int, str] = {}
        self.outputs: dict[str, str] = {}  # a followed output file -> the world of the process writing it
        self.file_engine: dict[str, str] = {}  # a followed file -> the engine its lines say wrote them

    def place(
        self,
        pid: int,
        create_time: float,
        role: str,
        cmdline: Sequence[str],
        env: Mapping[str, str],
        parents: Sequence[tuple[int, float]],
    ) -> str:
        """The world of a newly found engine process; ``parents`` nearest first, as (pid, create time)."""
        world = next((self._world[p] for p, _ in reversed(parents) if p in self._world), None)
        if world is None:
            world = named_world(self.host, cmdline, env)
        if world is None:
            # an entry point is its own tree; engine children of a script that is none share their spawner
            root = (pid, create_time) if role == "main" or not parents else parents[0]
            world = tree_world(self.host, *root)
        self._world[pid] = world
        return world

    def world_of(self, pid: int) -> str | None:
        return self._world.get(pid)

    def forget(self, pid: int) -> None:
        self._world.pop(pid, None)


class WorldOf(Protocol):
    """What the agent asks of its process collector to place a batch's records in their launches."""

    outputs: dict[str, str]
    file_engine: dict[str, str]

    def world_of(self, pid: int) -> str | None: ...


class OneWorld:
    """A collector whose processes are all one launch (the simulator's hosts)."""

    def __init__(self, world: str) -> None:
        self.world = world
        self.outputs: dict[str, str] = {}
        self.file_engine: dict[str, str] = {}

    def world_of(self, pid: int) -> str | None:
        return self.world


@dataclass(slots=True)
class Part:
    """The records of one launch in one batch interval (``world`` None: records no process claims)."""

    world: str | None
    processes: list[wire.ProcessSample] = field(default_factory=list)
    events: list[wire.Event] = field(default_factory=list)
    metrics: list[wire.MetricSample] = field(default_factory=list)


def by_world(
    worlds: WorldOf | None,
    processes: list[wire.ProcessSample],
    events: list[wire.Event],
    metrics: list[wire.MetricSample],
) -> list[Part]:
    """One part per launch, the host's own records (GPU samples go with the first part) in the first.

    A process is in its world; a log line in the world of the process writing that file; a stack dump or a
    draft check in its pid's. What none claims (a ``--log`` file, the engine's /metrics, the agent's own
    events) joins the one launch of this interval when there is one, and otherwise rides in a part of its
    own, which the server places as before worlds existed (the newest launch of the deployment on this host)."""
    if worlds is None:
        return [Part(None, processes, events, metrics)]
    of_proc = [worlds.world_of(p.pid) for p in processes]
    # a --log file no process claims goes to the one launch of the engine its lines name (a vLLM log beside
    # a torch job is the vLLM's, never the job's)
    engines: dict[str, set[str]] = {}
    for p, w in zip(processes, of_proc, strict=True):
        if w is not None:
            engines.setdefault(p.engine, set()).add(w)
    for e in events:
        if e.source and e.source.startswith("log:") and (named := engine_of(e.kind, e.fields)):
            worlds.file_engine[e.source[4:]] = named
    of_event = [_event_world(worlds, e, engines) for e in events]
    placed = {w for w in (*of_proc, *of_event) if w is not None}
    if len(placed) <= 1:  # one launch (or none): the batch as it was, in its order
        return [Part(next(iter(placed), None), processes, events, metrics)]
    parts: dict[str | None, Part] = {None: Part(None, metrics=metrics)}
    for p, w in zip(processes, of_proc, strict=True):
        parts.setdefault(w, Part(w)).processes.append(p)
    for e, w in zip(events, of_event, strict=True):
        parts.setdefault(w, Part(w)).events.append(e)
    return list(parts.values())


def _event_world(worlds: WorldOf, e: wire.Event, engines: dict[str, set[str]]) -> str | None:
    if e.source and e.source.startswith("log:"):
        path = e.source[4:]
        if path in worlds.outputs:
            return worlds.outputs[path]
        of_engine = engines.get(worlds.file_engine.get(path, ""), set())
        return next(iter(of_engine)) if len(of_engine) == 1 else None
    pid = e.fields.get("pid")
    if isinstance(pid, int) and e.kind in (wire.EventKind.STACKS, wire.EventKind.DRAFT_PREFLIGHT):
        return worlds.world_of(pid)
    return None
