"""The engine processes that serve ranks without being one (vLLM's API server and EngineCore, SGLang's main
process), and what the detector asks of every engine process, rank or not: is it stopped, has it died.

vLLM's ``/health`` is answered by the API server alone: with EngineCore stopped (SIGSTOP, a debugger, job
control) it stays 200 and ``/metrics`` keeps answering, while nothing is generated. Only the process state says
why. Pure: records in, state out, every time the record's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents import wire
from app.rankstate.model import (
    CLEAN_EXIT_CODES,
    CPU_BUSY_PCT,
    SIGNAL_HISTORY,
    EngineProc,
    Fleet,
    LaunchState,
    Signal,
    _remember,
    set_phase,
)
from app.rankstate.phases import TERMINAL_PHASES

# roles of an engine process that is not a rank (wire.ProcessSample.role)
SERVING_ROLES = frozenset({"main", "scheduler"})
# a process stopped by a signal (SIGSTOP/SIGTSTP). Not "t" (tracing stop): py-spy pauses a process for the
# instant of a dump, and a debugger's breakpoint is someone at work
STOPPED = "T"
EXITED = frozenset({"exited", "Z", "X"})


def proc_key(host: str, pid: int) -> str:
    return f"{host}:{pid}"


def note_proc(st: LaunchState, host: str, p: wire.ProcessSample) -> EngineProc:
    key = proc_key(host, p.pid)
    e = st.procs.get(key)
    if e is None:
        e = st.procs[key] = EngineProc(p.pid, host, p.name, p.role, p.ts)
        if len(st.procs) > 64:  # a restarting engine's old pids: keep the newest
            for old in sorted(st.procs, key=lambda k: st.procs[k].seen_at)[: len(st.procs) - 64]:
                del st.procs[old]
    if p.ts < e.seen_at:
        return e
    e.seen_at, e.state = p.ts, p.state
    e.stopped_since = stopped_since(e.stopped_since, p.state, p.ts)
    if p.cpu_pct is not None:
        e.cpu_pct = p.cpu_pct
        if p.cpu_pct >= CPU_BUSY_PCT:
            e.cpu_busy_at = p.ts
    if p.state in EXITED and e.exited_at is None:
        e.exited_at, e.exit_code = p.ts, p.exit_code
    return e


def stopped_since(before: float | None, state: str, ts: float) -> float | None:
    """The start of an unbroken run of samples in the stopped state, or None once a sample shows it running."""
    if state != STOPPED:
        return None
    return before if before is not None else ts


def _procs_gone(st: LaunchState, host: str, listed_at: float, now: float, grace_s: float) -> None:
    """An engine process missing from its host's newer listings without an exit record: gone (killed, or the
    agent missed its exit)."""
    for e in st.procs.values():
        if e.host == host and e.live and listed_at - e.seen_at > grace_s and now - e.seen_at > grace_s:
            e.exited_at, e.state = e.seen_at, "gone"


@dataclass(frozen=True, slots=True)
class Stopped:
    """A process of the launch that has been stopped since ``since``: the rank it is, or the ranks it serves."""

    what: str  # "VLLM::EngineCore (pid 4242)"
    pid: int
    host: str
    since: float
    rank: str | None  # the rank it is (a worker), or None for a process serving every rank


def stopped(st: LaunchState) -> list[Stopped]:
    out = [
        Stopped(f"{e.name} (pid {e.pid})", e.pid, e.host, e.stopped_since, None)
        for e in st.procs.values()
        if e.live and e.stopped_since is not None
    ]
    out += [
        Stopped(f"{r.label}'s process (pid {r.pid})", r.pid or 0, r.host, r.stopped_since, r.label)
        for r in st.ranks.values()
        if r.phase not in TERMINAL_PHASES and r.stopped_since is not None
    ]
    return sorted(out, key=lambda s: s.since)


def died(e: EngineProc) -> bool:
    """Exited other than by a requested stop (0, SIGTERM, SIGINT), or vanished without an exit code."""
    return e.exited_at is not None and e.exit_code not in CLEAN_EXIT_CODES


def exit_words(e: EngineProc) -> str:
    if e.state == "gone":
        return "vanished from the process list (killed; its exit code is its parent's to see)"
    if e.exit_code is None:
        return "exited (its exit code is its parent's to see, not the agent's)"
    if e.exit_code < 0:
        return f"was killed by signal {-e.exit_code} (exit code {e.exit_code})"
    return f"exited with code {e.exit_code}"


def note_gone(fleet: Fleet, now: float, grace_s: float) -> None:
    """Ranks whose process vanished from their host's newer listings without an exit record: gone."""
    for st in fleet.launches.values():
        for host in {e.host for e in st.procs.values() if e.live}:
            h = fleet.hosts.get(host)
            if h is not None and h.procs_listed_at is not None:
                _procs_gone(st, host, h.procs_listed_at, now, grace_s)
        for r in st.ranks.values():
            if r.phase in TERMINAL_PHASES or r.proc_seen_at is None:
                continue
            h = fleet.hosts.get(r.host)
            if h is None or h.procs_listed_at is None:
                continue
            if h.procs_listed_at - r.proc_seen_at > grace_s and now - r.proc_seen_at > grace_s:
                r.exited_at = r.proc_seen_at
                _remember(
                    r.signals,
                    Signal(
                        h.procs_listed_at, "process_gone", f"process {r.pid} no longer listed on {r.host}"
                    ),
                    SIGNAL_HISTORY,
                )
                set_phase(r, "crashed", r.proc_seen_at)
                st.dirty.add(r.label)
