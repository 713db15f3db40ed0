"""Processes that log but that no line names a rank for, standing in for ranks while nothing names one.

A paste of NCCL's own lines (nccl#1808: ``:166:1233 [0] NCCL INFO Connected all trees``, one line per process
and GPU, no rank anywhere) or of a vLLM V0 launch whose worker's wrapper says only its pid (vllm#8087:
``(VllmWorkerProcess pid=1153488) INFO ... vLLM is using nccl==2.21.5``) still shows processes that stopped.
Each such process is kept by its pid; while the launch has no named rank at all (no tagged line, no process
sample with a rank), the detector's start-up stall rule judges them as it would ranks. The moment any line
or process names a rank, the named ranks speak for the launch and these are ignored.

With no rank named the log as a whole is the only clock: a line of any kind (an untagged driver line, a
training script's print) is a sign that something still moves, so a process counts as quiet only from the
launch's latest line, never from its own alone.
"""

from __future__ import annotations

from agents import ranklabel, wire
from app.rankstate.infer import phase_hint
from app.rankstate.model import LaunchState, PhaseSpan, RankState, Unnamed
from app.rankstate.phases import STARTUP_PHASES

MAX_UNNAMED = 256  # processes kept per launch (a big NCCL job logs one line per rank and channel)
_NCCL_LOG = wire.EventKind.NCCL_LOG
# the agent's own reports are not the log moving (a dropped-noise notice stands for lines that were there)
_NOT_LINES = wire.AGENT_EVENT_KINDS - {wire.EventKind.LOG_SUPPRESSED}


def unnamed_pid(ev: wire.Event) -> int | None:
    """The pid of a line from a process that has no rank label: NCCL's own line, or a worker's wrapper."""
    pid = ev.fields.get("pid")
    if not isinstance(pid, int):
        return None
    if ev.kind == _NCCL_LOG or "Worker" in str(ev.fields.get("process", "")):
        return pid
    return None


def note_line(st: LaunchState, host: str, ev: wire.Event, label: str | None) -> None:
    """Every log event of the launch moves its latest line; one that no rank took (``label`` None) from a
    process with a pid is remembered as that process's, while no rank is named."""
    if (st.last_line_at is None or ev.ts > st.last_line_at) and ev.kind not in _NOT_LINES:
        st.last_line_at = ev.ts
    if label is not None or st.ranks:
        return
    pid = unnamed_pid(ev)
    if pid is None:
        return
    u = st.unnamed.get((host, pid))
    if u is None:
        if len(st.unnamed) >= MAX_UNNAMED:
            return
        dev = ev.fields.get("device")
        u = st.unnamed[(host, pid)] = Unnamed(
            pid, host, ev.ts, ev.ts, device=dev if isinstance(dev, int) else None
        )
    if ev.ts >= u.last_at:
        u.last_at, u.last_line = ev.ts, ev.message[:500]
    hint = phase_hint(st, ev)
    if hint in STARTUP_PHASES:
        u.phase = hint


def stand_ins(st: LaunchState) -> list[RankState]:
    """The unnamed processes as ranks for the start-up stall rule; none once a rank is named or the launch
    serves (a ready line, a decode line: the serving rules judge it by its requests, not its processes)."""
    if st.ranks or st.ready_at is not None or st.last_decode_at is not None:
        return []
    if not st.unnamed:
        return _the_log(st)
    seen = {u.pid for u in st.unnamed.values()}
    clash = len(seen) < len(st.unnamed)  # the same pid on two hosts: say which host
    out = []
    for u in sorted(st.unnamed.values(), key=lambda u: (u.host, u.pid)):
        label = ranklabel.process_label(u.pid) + (f"@{u.host}" if clash else "")
        moved = max(u.last_at, st.last_line_at or u.last_at)
        r = RankState(
            label=label,
            host=u.host,
            first_seen=u.first_seen,
            phase=u.phase,
            phase_since=u.first_seen,
            last_progress_at=moved,
            last_progress_what="its last line" if moved == u.last_at else "the log's last line",
            last_seen=moved,
            last_log=u.last_line,
            last_log_at=u.last_at,
        )
        r.phases.append(PhaseSpan(u.phase, u.first_seen))
        out.append(r)
    return out


# the phases in which the log's own lines are its only pace: a start-up step, a job's training steps (a
# script's step prints or its "Training" bar, accelerate#2375), or the save it said it began (its own limit,
# checkpoint_first_s, as a start-up step's); a server's quiet is judged by its requests
_LOG_STANDS_IN = STARTUP_PHASES | {"training", "checkpoint"}


def _the_log(st: LaunchState) -> list[RankState]:
    """No line names a rank or a process (DeepSpeed's "[comm.py:637:init_distributed] ..." lines, onlinerlhf#11):
    the log itself stands in, in the start-up step or the training its lines last showed, quiet from its last
    line."""
    if st.last_line_at is None or not st.reached or st.reached[-1][1] not in _LOG_STANDS_IN:
        return []
    if st.reached[-1][1] == "training" and not st.shown_again:
        return []  # one step line is no pace: two pasted runs' lines days apart are not a stall (megatron#3067)
    at, phase = st.reached[-1]
    first = st.reached[0][0]
    r = RankState(
        label=ranklabel.LOG,
        host="",
        first_seen=first,
        phase=phase,
        phase_since=at,
        last_progress_at=st.last_line_at,
        last_progress_what="the log's last line",
        last_seen=st.last_line_at,
    )
    r.phases.append(PhaseSpan(phase, at))
    return [r]
