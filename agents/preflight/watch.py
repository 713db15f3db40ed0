"""The agent's hook: check each new launch's draft once, off the sampling path.

The agent calls ``observe(pid, create_time, cmdline)`` for engine processes it samples (cheap: a command
line is scanned once per process) and ``drain()`` when it builds a batch; finished checks come back as
``draft_preflight`` events. Checks run in one worker thread, so a slow filesystem never delays sampling.
A draft is checked again only when its files change (a fixed checkpoint at the same path).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from agents import wire
from agents.preflight.cmdline import SpecConfig, local_checkpoint, scan_launch
from agents.preflight.findings import Finding

log = logging.getLogger("specwatch.agent.preflight")
Runner = Callable[[str, str | None, str], list[Finding]]
# processes remembered so each command line is scanned once; old ones are forgotten beyond this
MAX_SEEN_PROCESSES = 4096


def _default_runner(path: str, target: str | None, engine: str) -> list[Finding]:
    from agents.preflight import run_preflight

    return run_preflight(path, target, engine)


def _fingerprint(path: str) -> tuple[str, float]:
    """The resolved draft directory and the newest mtime of its files: a changed checkpoint is re-checked."""
    local = local_checkpoint(path)
    if local is None:
        return path, 0.0
    try:
        newest = max((p.stat().st_mtime for p in Path(local).iterdir() if p.is_file()), default=0.0)
    except OSError:
        newest = 0.0
    return str(local), newest


class DraftPreflight:
    def __init__(self, runner: Runner | None = None, clock: Callable[[], float] = time.time) -> None:
        self._runner = runner or _default_runner
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draft-preflight")
        self._lock = threading.Lock()
        self._seen_procs: dict[tuple[int, float], None] = {}
        self._checked: set[tuple[str, float, str | None, str]] = set()
        self._pending: list[Future[wire.Event | None]] = []

    def observe(self, pid: int, create_time: float, cmdline: str | Sequence[str] | None) -> SpecConfig | None:
        """Note an engine process; start a check if it names a draft not checked yet. Returns its speculative
        setup (or None), which the agent may keep for its own use."""
        key = (pid, create_time)
        if key in self._seen_procs or not cmdline:
            return None
        self._seen_procs[key] = None
        if len(self._seen_procs) > MAX_SEEN_PROCESSES:
            self._seen_procs.pop(next(iter(self._seen_procs)))
        spec = scan_launch(cmdline)
        if spec is None or not spec.draft:
            return spec
        self._pending.append(self._pool.submit(self._check, spec, pid))
        return spec

    def _check(self, spec: SpecConfig, pid: int) -> wire.Event | None:
        from agents.preflight import preflight_event

        assert spec.draft is not None
        where, mtime = _fingerprint(spec.draft)
        ident = (where, mtime, spec.target, spec.engine)
        with self._lock:
            if ident in self._checked:
                return None
            self._checked.add(ident)
        started = time.perf_counter()
        try:
            findings = self._runner(spec.draft, spec.target, spec.engine)
        except Exception as exc:  # a bug here must never take the agent down
            log.warning("draft preflight of %s failed: %s", spec.draft, exc)
            findings = [Finding("preflight_failed", "warning", f"the preflight itself failed: {exc}")]
        log.info(
            "draft preflight of %s: %d findings in %.2f s",
            spec.draft,
            len(findings),
            time.perf_counter() - started,
        )
        event = preflight_event(spec.draft, findings, self._clock())
        event.fields["pid"] = pid  # whose launch the check belongs to
        return event

    def drain(self) -> list[wire.Event]:
        """Events of the checks that finished since the last call (never blocks)."""
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        out = []
        for f in done:
            try:
                ev = f.result()
            except Exception as exc:
                log.warning("draft preflight failed: %s", exc)
                continue
            if ev is not None:
                out.append(ev)
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
