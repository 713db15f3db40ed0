"""How a rank's process leaves: an exit record (with or without a code), or an error line read after it. An
exit the agent saw without a code (a launcher's worker is not the agent's child) is an end, not a crash, unless
the rank's own error line came just before it; the launcher's lines and the peers settle the rest
(app/detect/endings.py). Pure: rank state and records in; no clock."""

from __future__ import annotations

from agents import wire
from app.rankstate.model import (
    CLEAN_EXIT_CODES,
    SIGNAL_HISTORY,
    LaunchState,
    RankState,
    Signal,
    _remember,
    exit_unknown,
    set_phase,
)

# a rank's own error line this soon before an exit without a code: it went down with that error (a line of its
# teardown, its launcher's closing signal or a peer going away, is a consequence: faults.py's _first_to_go)
OWN_ERROR_BEFORE_S = 30.0
_CONSEQUENCES = frozenset({"closing_signal", "peer_lost", "collective_timeout"})
# how long before an error line a requested stop makes it the stop's, and how far a stop's own report may lag the
# lines it caused (a log stamped to the second, the agent's notice stamped to the millisecond)
STOP_WINDOW_S, STOP_LAG_S = 60.0, 5.0
_STOPPING = wire.EventKind.LAUNCHER_STOPPING


def asked_to_stop(st: LaunchState, r: RankState, ts: float) -> bool:
    """The launch was asked to stop just before ``ts`` (the agent passing on SIGTERM, the engine's own "received
    signal=SIGTERM"), as far as the lines so far say: the errors of that teardown are the stop's doing."""
    return any(
        s.kind == _STOPPING and ts - STOP_WINDOW_S <= s.ts <= ts + STOP_LAG_S
        for s in (*(x for _, x in st.signals[-16:]), *r.signals[-8:])
    )


def _own_error(r: RankState, exited_at: float) -> bool:
    return (
        r.last_error_at is not None
        and exited_at - OWN_ERROR_BEFORE_S <= r.last_error_at <= exited_at + 2.0
        and not any(s.kind in _CONSEQUENCES for s in r.signals[-3:])
    )


def note_exit(r: RankState, p: wire.ProcessSample) -> None:
    """The rank's process exited (its first exit record)."""
    r.exited_at, r.exit_code = p.ts, p.exit_code
    clean = p.exit_code in CLEAN_EXIT_CODES or (p.exit_code is None and not _own_error(r, p.ts))
    _remember(
        r.signals,
        Signal(
            p.ts,
            "process_exit",
            f"process {p.pid} exited with code {p.exit_code}"
            if p.exit_code is not None
            else f"process {p.pid} exited (its exit code is its parent's to see, not the agent's)",
            {"exit_code": p.exit_code},
        ),
        SIGNAL_HISTORY,
    )
    if r.phase != "crashed":  # a crash line that came first is not undone by the exit that follows
        set_phase(r, "exited" if clean else "crashed", p.ts)


def error_after_exit(r: RankState, ev: wire.Event) -> None:
    """An error line of a rank whose exit was seen without a code, read after that exit: it went down with it."""
    if exit_unknown(r) and _own_error(r, r.exited_at or ev.ts) and ev.kind not in _CONSEQUENCES:
        set_phase(r, "crashed", r.exited_at or ev.ts)
