"""The agent's hook: check each new launch's draft once, off the sampling path.

The agent calls ``observe(pid, create_time, cmdline)`` for engine processes it samples (cheap: a command
line is scanned once per process) and ``drain()`` when it builds a batch; finished checks come back as
``draft_preflight`` events. Checks run in one worker thread, so a slow filesystem never delays sampling.
A draft is checked again only when its files change (a fixed checkpoint at the same path).

The launch's method travels with the check, so the draft is judged by its own family's rules: a plain model
under ``method: draft_model`` is not an EAGLE-3 draft. ngram / suffix launches get one note (no checkpoint,
nothing read); an MTP launch without a draft path is checked on the target, which carries the MTP layer.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agents import wire
from agents.preflight.cmdline import SpecConfig, local_checkpoint, scan_launch
from agents.preflight.family import NO_CHECKPOINT, from_engine_config, from_method, vllm_auto_method
from agents.preflight.findings import Finding

log = logging.getLogger("specwatch.agent.preflight")
# (draft path or None, target, engine, the launch's method or None)
Runner = Callable[[str | None, str | None, str, str | None], list[Finding]]
# processes remembered so each command line is scanned once; old ones are forgotten beyond this
MAX_SEEN_PROCESSES = 4096


def _default_runner(path: str | None, target: str | None, engine: str, method: str | None) -> list[Finding]:
    from agents.preflight import run_preflight

    return run_preflight(path, target, engine, method=method)


def launch_family(spec: SpecConfig) -> str | None:
    """The family the launch itself names, or vLLM's own pick for a launch without a method."""
    fam = from_method(spec.algorithm)
    if fam is None and spec.engine == "vllm":
        fam = vllm_auto_method(spec.draft, None) if spec.draft in (None, "ngram", "[ngram]") else None
    return fam


def spec_from_config_line(fields: Mapping[str, Any]) -> SpecConfig | None:
    """A launch's speculative setup from the fields of its engine's config line, or None if it has none."""
    method = from_engine_config(fields)
    raw = str(fields.get("speculative_config") or fields.get("message") or "")
    m = re.search(r"\bmodel=['\"]?([^'\",)\s]+)", raw)
    draft = fields.get("speculative_draft_model_path") or (m.group(1) if m else None)
    if method is None and not draft:
        return None
    engine = str(fields.get("engine") or ("vllm" if "SpeculativeConfig" in raw else "sglang"))
    target = fields.get("model_path") or fields.get("model")
    return SpecConfig(engine, str(draft) if draft and draft != "None" else None,
                      str(target) if target else None, method, None, None, None)  # fmt: skip


def checked_path(spec: SpecConfig) -> str | None:
    """What the check reads: the draft, or the target for an MTP launch with no draft, or nothing."""
    fam = launch_family(spec)
    if fam in NO_CHECKPOINT:
        return None
    if spec.draft:
        return spec.draft
    return spec.target if fam == "mtp" else None


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
        self._checked: set[tuple[str, float, str | None, str, str | None]] = set()
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
        if spec is None or (checked_path(spec) is None and launch_family(spec) not in NO_CHECKPOINT):
            return spec
        self._pending.append(self._pool.submit(self._check, spec))
        return spec

    def observe_config_line(self, fields: Mapping[str, Any]) -> SpecConfig | None:
        """The same check from an engine's start-up config line (the log parser's ``engine_config`` fields:
        SGLang ``speculative_algorithm`` / ``speculative_draft_model_path`` / ``model_path``, vLLM
        ``speculative_config=SpeculativeConfig(method=..., model=...)``): a launch whose command line the agent
        never saw (another container, a wrapper script) is still checked, by its own family."""
        spec = spec_from_config_line(fields)
        if spec is None or (checked_path(spec) is None and launch_family(spec) not in NO_CHECKPOINT):
            return spec
        self._pending.append(self._pool.submit(self._check, spec))
        return spec

    def _check(self, spec: SpecConfig) -> wire.Event | None:
        from agents.preflight import preflight_event

        path = checked_path(spec)
        label = path or f"({spec.algorithm or launch_family(spec)}: no draft checkpoint)"
        where, mtime = _fingerprint(path) if path else (label, 0.0)
        ident = (where, mtime, spec.target, spec.engine, spec.algorithm)
        with self._lock:
            if ident in self._checked:
                return None
            self._checked.add(ident)
        started = time.perf_counter()
        try:
            findings = self._runner(spec.draft, spec.target, spec.engine, spec.algorithm)
        except Exception as exc:  # a bug here must never take the agent down
            log.warning("draft preflight of %s failed: %s", label, exc)
            findings = [Finding("preflight_failed", "warning", f"the preflight itself failed: {exc}")]
        log.info(
            "draft preflight of %s: %d findings in %.2f s",
            label,
            len(findings),
            time.perf_counter() - started,
        )
        return preflight_event(label, findings, self._clock())

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
