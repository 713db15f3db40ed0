"""A log that ends in an uncaught exception: the process it was raised in is gone, whatever the words.

Engines word their deaths in as many ways as there are engines and versions (``Scheduler hit an exception``,
``EngineCore failed to start``, ``Exception in ControllerSingle``, a launcher's summary ...), and each wording
the rules know is read as a crash where it is printed. The structure underneath is the same in all of them:
a Python exception raised out of the engine's own code, after which the log shows the launch get nowhere
further: no start-up step, no ready line, no request served, no decode batch, no training step. Read from a log
alone (nothing watches the process: a replay, a pasted excerpt), that is a death: a process that survives its
exception goes on printing what it does. What is not a death:

- an exception a request raised, handled by the HTTP server around it (its frames run through the ASGI stack);
  the server answers 500 and goes on (an engine that died behind it is ``engine_dead``'s, read elsewhere);
- an interrupt or an exit (``KeyboardInterrupt``, ``SystemExit``, a cancelled task): somebody stopped it;
- a warning raised as an exception type (``...Warning``);
- an exception that ended a thread, not the process (its outermost frame is the thread's ``run``): whatever
  waited on that thread is stalled, which the stall rules read (TensorRT-LLM#3321's result thread);
- what the log shows after somebody stopped the launch (a launcher's stop, the terminal's ``^C``);
- an exception raised in the seconds the engine reported a collective's timeout: the wait that failed on it
  (Ascend/pytorch#43's barrier beside HCCL's task timeout), the timeout's consequence, not a death of its own.

With the agent watching the processes none of this is needed: the process's exit says it (app/detect/faults.py),
so the rule holds only where no process or device was ever seen. Pure: launch state in, the signal out.
"""

from __future__ import annotations

import re

from agents import wire
from app.detect.crashplace import crash_phase, nearby_tracebacks, traceback_row
from app.detect.findings import ABORT_AFTER_S, Finding, excerpt, waited_out
from app.rankstate import LaunchState, Signal
from app.rankstate.reached import SAME_INSTANT_S, seen_only_in_logs

# the frames of the HTTP stack that catches a request's exception and answers it
_REQUEST_FRAMES = ("/starlette/", "/uvicorn/", "/fastapi/", "/aiohttp/", "/grpc/")
# exception types that say somebody stopped the process, not that it failed
_STOPS = frozenset({"KeyboardInterrupt", "SystemExit", "CancelledError", "GeneratorExit"})


# a thread's outermost frame: threading's own, or a thread class's run (a process's is multiprocessing's)
_THREAD_START = re.compile(
    r'File "[^"\n]{0,400}?(threading\.py", line \d+, in _bootstrap|", line \d+, in run\n)'
)


def raised(s: Signal) -> bool:
    """An exception raised out of the engine's own code (not a request's, not an interrupt, not a warning, not
    one that ended a thread)."""
    if s.kind != wire.EventKind.TRACEBACK:
        return False
    outermost = s.message.find('File "')
    if outermost >= 0 and _THREAD_START.match(s.message, outermost, outermost + 500):
        return False  # the outermost frame is a thread's: the thread ended, the process did not
    # (an excerpt may keep the frames and lose the exception's line: frames alone are still one raised)
    exc = str(s.fields.get("exc_type") or "Error").rsplit(".", 1)[-1]
    if not exc.endswith(("Error", "Exception", "Failure", "Exit")) or exc in _STOPS:
        return False
    return not any(f in s.message for f in _REQUEST_FRAMES)


def ended_in_exception(st: LaunchState) -> tuple[str | None, Signal] | None:
    """(rank or None, traceback): the first exception after which the launch's log showed no further phase,
    when only its log is known."""
    if not seen_only_in_logs(st) or not st.raised_since_shown:
        return None
    stopped = min((s.ts for _, s in st.signals if s.kind == wire.EventKind.LAUNCHER_STOPPING), default=None)
    since = {t for t in st.raised_since_shown if stopped is None or t < stopped}
    timeouts = [x.ts for x in st.all_signals() if waited_out(x.kind, x.fields)]
    since -= {t for t in since if any(abs(t - x) <= ABORT_AFTER_S for x in timeouts)}
    found = [(s.ts, lab, s) for lab, s in st.signals if s.ts in since and raised(s)]
    found += [(s.ts, r.label, s) for r in st.ranks.values() for s in r.signals if s.ts in since and raised(s)]
    return min(found, key=lambda x: x[0])[1:] if found else None


def uncaught(st: LaunchState) -> Finding | None:
    """The log ends in an exception the engine raised and nothing after it got anywhere (app/detect/uncaught.py):
    suspected, since the log alone cannot show the process go."""
    hit = ended_in_exception(st)
    if hit is None:
        return None
    rank, s = hit
    said = excerpt(f"{s.fields.get('exc_type') or 'exception'}: {s.fields.get('exc_message') or ''}", 160)
    return Finding(
        key=f"crash:{st.key}",
        kind="rank_crashed",
        launch=st.key,
        summary=f"{rank or 'A process'} raised {said}, and the log shows nothing get further after it.",
        culprit=rank,
        ranks=[rank] if rank else [],
        evidence=traceback_row([s], rank),
        confidence="suspected",
        since=s.ts,
        # (its own frames first, then the other tracebacks of its instant: a process's own report of the
        # same exception, printed beside the worker's, may keep the frames the worker's cut, vllm#7699)
        phase=crash_phase(
            st,
            s.ts,
            [
                s,
                *(
                    x
                    for x in nearby_tracebacks(st, s.ts, rank)
                    if x is not s and abs(x.ts - s.ts) <= SAME_INSTANT_S
                ),
            ],
        ),
    )
