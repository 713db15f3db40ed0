"""Engine process collector: finds SGLang / vLLM processes and torch.distributed workers and reports their
state each cycle.

Real backend: psutil over a ``/proc`` root given as a parameter. Engine children are spawned under a generic
``python -c ...spawn_main`` command line and rename themselves (setproctitle) a moment later, so a process
that does not look like an engine yet is looked at again while it is young, and now and then afterwards.
A torch.distributed worker is known by its environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` ...,
``/proc/PID/environ``) however it was started (torchrun, torch.multiprocessing, deepspeed, accelerate, mpirun);
its label is PyTorch's (``rank3``, agents/ranklabel.py). Only engine processes are read in full each cycle;
the rest of the host costs one directory listing.

With ``--launch`` only the launched command's descendants are watched (``scope_pid``): two agents on one host,
each with its own launch, never report each other's ranks. Where an engine process writes its output to a
regular file (``/proc/PID/fd/1`` or ``2``), that file is handed to the log tailer (``on_output``).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import psutil

from agents import ranklabel, wire
from agents.collectors.ownership import OneWorld, Ownership, Worlds, candidate, environ
from agents.commands import launcher_of

log = logging.getLogger("specwatch.agent.procs")

Role = Literal["scheduler", "main", "tokenizer", "detokenizer", "worker", "other"]
Engine = Literal["sglang", "vllm", "torch", "unknown"]

_SGLANG_TITLE = re.compile(r"^sglang::(\w+?)(?:_((?:(?:ATTN_CP|MOE_DP|DP|PP|TP|EP)\d+_?)+))?(?:\s|$)")
_VLLM_TITLE = re.compile(r"^VLLM::(\w+?)(?:_((?:(?:DP|PP|TP|EP)\d+_?)+))?(?:\s|$)")
_STATES = {
    psutil.STATUS_RUNNING: "R",
    psutil.STATUS_SLEEPING: "S",
    psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_ZOMBIE: "Z",
    psutil.STATUS_STOPPED: "T",
    psutil.STATUS_TRACING_STOP: "t",
    psutil.STATUS_IDLE: "I",
    psutil.STATUS_DEAD: "X",
}
YOUNG_S = 60.0  # re-read the command line of unknown processes this young every cycle
RECHECK_S = 30.0  # and of older unknown ones this often
# A child caught between fork and exec still shows its parent's command line: a worker torchrun is starting reads
# as a second torchrun (seen beside a CPU hog, where that window widens), and once tracked it would stay one.
# Such a child is looked at again each cycle for this long before it is taken as what its command line says.
FORK_WAIT_S = 5.0
CMDLINE_EVERY_S = 300.0


@dataclass(frozen=True, slots=True)
class EngineProcess:
    """What a command line says about a process: its role, engine and rank label."""

    name: str
    role: Role
    engine: Engine
    rank: str | None


def classify_env(env: dict[str, str], cmdline: list[str]) -> EngineProcess | None:
    """A torch.distributed worker, from its environment: role ``worker``, engine ``torch``, label ``rankN`` (its
    global rank, from RANK or torchelastic's GROUP_RANK/LOCAL_RANK), its world and node in the name."""
    rank = ranklabel.torch_rank(env)
    if rank is None:
        return None
    args = [Path(a).name for a in cmdline[:4] if a]
    # where it sits in the job (world, node, local rank) rides in the name: the label is the global rank alone
    place = f" ({ranklabel.torch_place(env)})"
    name = (" ".join(args) or "python")[: 128 - len(place)] + place
    return EngineProcess(name, "worker", "torch", ranklabel.torch_label(rank))


def _looks_python(cmdline: list[str]) -> bool:
    """Worth reading the environment of: a Python interpreter (every torch.distributed worker is one)."""
    return bool(cmdline) and "python" in Path(cmdline[0].split()[0] if cmdline[0] else "").name


def classify(cmdline: list[str]) -> EngineProcess | None:
    """Recognise an engine process from its command line (as psutil returns it), or None."""
    if not cmdline:
        return None
    title = cmdline[0].strip()
    m = _SGLANG_TITLE.match(title)
    if m:
        kind = m.group(1)
        role: Role = {
            "scheduler": "scheduler",
            "detokenizer": "detokenizer",
            "tokenizer": "tokenizer",
        }.get(kind, "other")  # type: ignore[assignment]
        return EngineProcess(title.split()[0][:128], role, "sglang", ranklabel.from_tags(m.group(2)))
    m = _VLLM_TITLE.match(title)
    if m:
        kind = m.group(1)
        vrole: Role = {"Worker": "worker", "EngineCore": "scheduler", "APIServer": "main"}.get(kind, "other")  # type: ignore[assignment]
        return EngineProcess(title.split()[0][:128], vrole, "vllm", _vllm_rank(vrole, m.group(2)))
    launcher = launcher_of(cmdline)
    return None if launcher is None else EngineProcess(launcher[0], "main", launcher[1], None)


def _vllm_rank(role: Role, tags: str | None) -> str | None:
    """A vLLM worker is a rank: ``VLLM::Worker_TP1`` is TP1. An untagged ``VLLM::Worker`` is either the only
    rank (TP=1) or a worker not yet renamed (vLLM sets the tags after its distributed init): its own log lines
    name it, and the server ties the pid to that rank. EngineCore (``_DP1`` at DP > 1) and the API server serve
    ranks without being one: they are the launch's engine processes (their state and exit still count)."""
    if role != "worker":
        return None
    return ranklabel.from_tags(tags)


class ProcessBackend(Protocol):
    def sample(self, now: float, gpu_pids: dict[int, list[str]]) -> list[wire.ProcessSample]: ...

    def describe(self) -> str: ...


@dataclass(slots=True)
class _Tracked:
    proc: psutil.Process
    info: EngineProcess
    create_time: float
    cmdline: str
    last_cpu_s: float | None = None
    last_ts: float | None = None
    cmdline_sent_at: float = -1e18
    last: wire.ProcessSample | None = None


class PsutilProcesses:
    """The real backend."""

    def __init__(
        self,
        proc_root: str = "/proc",
        clock: Any = time.monotonic,
        scope_pid: int | None = None,
        on_output: Callable[[str], None] | None = None,
        ownership: Ownership | None = None,
        host: str = "localhost",
    ) -> None:
        if proc_root != "/proc":
            psutil.PROCFS_PATH = proc_root
        self.proc_root = proc_root
        self._clock = clock
        # which engines are this agent's (agents/collectors/ownership.py); --launch sets scope_pid later
        self.ownership = ownership if ownership is not None else Ownership.default(scope_pid=scope_pid)
        self.worlds = Worlds(host)  # the launch (engine world) of each tracked process
        self.on_output = on_output  # called with the regular file an engine process writes its output to
        self._outputs: set[str] = set()
        self._tracked: dict[int, _Tracked] = {}
        # not (yet) an engine: pid -> (process, born, last checked), monotonic seconds
        self._unknown: dict[int, tuple[psutil.Process, float, float]] = {}
        self._me = os.getpid()

    def describe(self) -> str:
        whose = f"; watching {self.ownership.describe()}"
        if not self._tracked:
            return (
                "engine processes: none yet (watching for sglang::* / vllm titles, torch.distributed workers)"
                + whose
            )
        ranks = sorted(t.info.rank or t.info.role for t in self._tracked.values())
        return f"engine processes: {len(self._tracked)} ({', '.join(ranks)}){whose}"

    def _discover(self) -> None:
        pids = set(psutil.pids())
        mono = self._clock()
        wall = time.time()
        for pid in list(self._unknown):
            if pid not in pids:
                del self._unknown[pid]
        for pid in sorted(pids):  # parents before their children (mostly): a child joins its parent's world
            if pid in self._tracked or pid == self._me:
                continue
            try:
                known = self._unknown.get(pid)
                if known is None:
                    proc = psutil.Process(pid)
                    born = mono - max(0.0, wall - proc.create_time())
                else:
                    proc, born, checked = known
                    young = mono - born < YOUNG_S
                    if mono - checked < (0.0 if young else RECHECK_S):
                        continue
                self._unknown[pid] = (proc, born, mono)
                cmd = proc.cmdline()
                env: dict[str, str] | None = None
                info = classify(cmd)
                if info is None and _looks_python(cmd):
                    env = proc.environ()
                    info = classify_env(env, cmd)
                if info is None:
                    continue
                create = proc.create_time()
                parents = proc.parents()
                if parents and mono - born < FORK_WAIT_S and parents[0].cmdline() == cmd:
                    continue  # not yet exec'd: the next cycle sees what it becomes
                if env is None:
                    env = environ(proc)
                if not self.ownership.owns(
                    candidate(self.ownership, self.proc_root, proc, cmd, env, parents)
                ):
                    continue
                world = self.worlds.place(
                    pid, create, info.role, cmd, env, [(q.pid, q.create_time()) for q in parents]
                )
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            del self._unknown[pid]
            self._follow_output(pid, world)
            self._tracked[pid] = _Tracked(proc, info, create, " ".join(cmd)[:8192])
            log.info(
                "found %s %s process pid=%d%s",
                info.engine,
                info.role,
                pid,
                f" rank {info.rank}" if info.rank else "",
            )

    @property
    def scope_pid(self) -> int | None:
        return self.ownership.scope_pid

    @scope_pid.setter
    def scope_pid(self, pid: int | None) -> None:  # --launch: only the launched command's descendants
        self.ownership = Ownership(self.ownership.selectors, pid, self.ownership.uid)

    def owns(self, pid: int) -> bool:
        """A process this agent tracks: py-spy and the draft preflight are for these only."""
        return pid in self._tracked

    def _follow_output(self, pid: int, world: str) -> None:
        """Hand the file behind the process's stdout/stderr to the log tailer, when it is a regular file."""
        if self.on_output is None:
            return
        for fd in (1, 2):
            try:
                target = str(Path(f"{self.proc_root}/{pid}/fd/{fd}").readlink())
            except OSError:
                continue
            if target in self._outputs or not target.startswith("/") or target.endswith(" (deleted)"):
                continue
            try:
                if not Path(target).is_file():
                    continue  # a pipe, a socket, a terminal: nothing to tail
            except OSError:
                continue
            self._outputs.add(target)
            self.worlds.outputs[target] = world
            log.info("following the output of pid %d: %s", pid, target)
            self.on_output(target)

    def sample(self, now: float, gpu_pids: dict[int, list[str]]) -> list[wire.ProcessSample]:
        self._discover()
        out: list[wire.ProcessSample] = []
        for pid, t in list(self._tracked.items()):
            s = self._read(pid, t, now, gpu_pids)
            if s is None:
                del self._tracked[pid]
                log.warning(
                    "%s process pid=%d%s exited",
                    t.info.engine,
                    pid,
                    f" ({t.info.rank})" if t.info.rank else "",
                )
                out.append(self._exited(pid, t, now))
                continue
            out.append(s)
        return out

    def _exited(self, pid: int, t: _Tracked, now: float) -> wire.ProcessSample:
        return wire.ProcessSample(
            ts=now,
            pid=pid,
            create_time=t.create_time,
            name=t.info.name,
            rank=t.info.rank,
            role=t.info.role,
            engine=t.info.engine,
            state="exited",
            threads=0,
            rss_bytes=0,
            cpu_time_s=t.last_cpu_s,
            cpu_pct=0.0,
            io_read_bytes=t.last.io_read_bytes if t.last else None,
            gpu_uuids=t.last.gpu_uuids if t.last else [],
        )

    def _read(
        self, pid: int, t: _Tracked, now: float, gpu_pids: dict[int, list[str]]
    ) -> wire.ProcessSample | None:
        p = t.proc
        try:
            with p.oneshot():
                if p.create_time() != t.create_time:
                    return None  # pid reused: the process we knew is gone
                status = p.status()
                threads = p.num_threads()
                rss = p.memory_info().rss
                cpu = p.cpu_times()
                try:
                    io_read: int | None = p.io_counters().read_bytes
                except (psutil.AccessDenied, AttributeError):
                    io_read = None
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            log.debug("pid %d: access denied", pid)
            return t.last
        cpu_s = cpu.user + cpu.system
        cpu_pct = None
        if t.last_cpu_s is not None and t.last_ts is not None and now > t.last_ts:
            cpu_pct = max(0.0, (cpu_s - t.last_cpu_s) / (now - t.last_ts) * 100.0)
        t.last_cpu_s, t.last_ts = cpu_s, now
        send_cmdline = now - t.cmdline_sent_at >= CMDLINE_EVERY_S
        if send_cmdline:
            t.cmdline_sent_at = now
        t.last = wire.ProcessSample(
            ts=now,
            pid=pid,
            create_time=t.create_time,
            name=t.info.name,
            rank=t.info.rank,
            role=t.info.role,
            engine=t.info.engine,
            state=_STATES.get(status, status[:16]),
            threads=threads,
            rss_bytes=rss,
            cpu_time_s=cpu_s,
            cpu_pct=cpu_pct,
            io_read_bytes=io_read,
            gpu_uuids=gpu_pids.get(pid, [])[:64],
            cmdline=t.cmdline if send_cmdline else None,
        )
        return t.last


class SimProcesses:
    """The simulated backend: engine processes of one SimCluster host."""

    def __init__(self, cluster: Any, host: str, seed: int = 0) -> None:
        self.cluster = cluster
        self.host = host
        self._seen = 0
        # every host of one simulated run is one engine world; another seed is another replica
        self.worlds = OneWorld(f"sim:{cluster.sc.name}:{seed}")

    def sample(self, now: float, gpu_pids: dict[int, list[str]]) -> list[wire.ProcessSample]:
        # psutil cannot show a process before it starts: keep the simulation to what a real host would show
        samples = [s for s in self.cluster.process_samples(self.host, now) if s.create_time <= now]
        self._seen = len(samples)
        return samples

    def describe(self) -> str:
        return f"engine processes: simulated ({self.host})"
