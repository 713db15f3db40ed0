"""A launcher that tore its workers down, read from its log alone: one of them failed.

torchrun sends each worker a closing signal (``Sending process 4512 closing signal SIGTERM``) and DeepSpeed's
launcher kills each one (``[launch.py:315:sigkill_handler] Killing subprocess 44150``) for one of two reasons:
a worker exited non-zero, or the launcher itself was asked to stop. A clean end sends nothing. So where the log
shows the teardown and nothing that asked for it (the terminal's ``^C``, the launcher's own "Received SIGINT
death signal"), a worker failed: a crash, though the line that said which one is not in the log (the stored
copy cut it, LLaMA-Factory#1194; DeepSpeed-Chat's paste ends at the kill, deepspeed#3160).

Only where nothing but the log is known: an agent watching the processes sees the worker's own exit
(app/detect/faults.py). Pure: launch state in, a finding out.
"""

from __future__ import annotations

from agents import wire
from app.detect.crashplace import crash_phase, nearby_tracebacks, traceback_row
from app.detect.findings import Finding, evidence
from app.rankstate import LaunchState
from app.rankstate.exits import STOP_LAG_S, STOP_WINDOW_S
from app.rankstate.reached import seen_only_in_logs

_TEARDOWN = wire.EventKind.CLOSING_SIGNAL
_STOPPING = wire.EventKind.LAUNCHER_STOPPING


def torn_down(st: LaunchState) -> Finding | None:
    """The launcher's teardown of its workers with no stop asked for around it: a worker failed, unnamed."""
    if not seen_only_in_logs(st):
        return None
    lines = sorted(st.all_signals(), key=lambda s: s.ts)
    downs = [s for s in lines if s.kind == _TEARDOWN]
    if not downs:
        return None
    first = downs[0]
    if any(s.kind == _STOPPING and first.ts - STOP_WINDOW_S <= s.ts <= first.ts + STOP_LAG_S for s in lines):
        return None  # somebody stopped it: the teardown is the stop's
    tb = nearby_tracebacks(st, first.ts)
    ev = [evidence(s.ts, None, "launcher teardown", s.message[:400]) for s in downs[:8]] + traceback_row(
        tb, None
    )
    return Finding(
        key=f"crash:{st.key}",
        kind="rank_crashed",
        launch=st.key,
        summary=(
            f"The launcher tore its {len(downs)} worker(s) down and nothing asked it to stop: one of them failed "
            "(the line that says which is not in the log)."
        ),
        culprit=None,
        ranks=[],
        evidence=ev,
        confidence="suspected",
        since=first.ts,
        phase=crash_phase(st, first.ts, tb),
    )
