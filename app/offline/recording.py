"""Recordings of real runs (``specwatch agent --record``) played through the reducer and detector the server
runs, on the records' own clock, and scored against the truth written beside each: ``NAME.jsonl.gz`` and
``NAME.truth.json``::

    {"name": "...", "description": "...", "healthy": false,
     "expected": [{"kind": "stalled_serving", "culprit": "TP0", "at": 1796184000.5, "also_accept": []}],
     "consequences": ["rank_crashed"]}

``at`` is the fault's true time (when the test sent the signal), so the latency eval reports is fault ->
incident on the recorded clock. Each host's batches are applied as the server applies them: processes, GPUs,
events, then the detector's metrics, and the detector ticks every ``tick_s`` of recorded time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import wire
from agents.recording import read
from app.detect import DetectConfig
from app.offline.driver import OfflineRun
from app.rankstate import DETECTOR_METRICS

SUFFIX = ".jsonl.gz"


@dataclass(frozen=True, slots=True)
class Expected:
    kind: str
    culprit: str | None
    onset_s: float  # from the virtual epoch eval judges against (T0 + onset_s is the fault's recorded time)
    also_accept: tuple[str, ...] = ()


@dataclass(slots=True)
class RecordedCase:
    """A recording with its truth, in the shape eval's ``judge`` reads from a scenario."""

    name: str
    description: str
    healthy: bool
    path: Path
    expected: list[Expected] = field(default_factory=list)
    consequences: tuple[str, ...] = ()


def cases(directory: Path, t0: float) -> list[RecordedCase]:
    out = []
    for rec in sorted(directory.glob(f"*{SUFFIX}")):
        stem = rec.name.removesuffix(SUFFIX)
        truth_path = rec.with_name(stem + ".truth.json")
        truth: dict[str, Any] = json.loads(truth_path.read_text()) if truth_path.exists() else {}
        out.append(
            RecordedCase(
                name=f"recording:{truth.get('name', stem)}",
                description=str(truth.get("description", "")),
                healthy=bool(truth.get("healthy", not truth.get("expected"))),
                path=rec,
                expected=[
                    Expected(
                        e["kind"], e.get("culprit"), float(e["at"]) - t0, tuple(e.get("also_accept", ()))
                    )
                    for e in truth.get("expected", [])
                ],
                consequences=tuple(truth.get("consequences", ())),
            )
        )
    return out


ARRIVAL_S = 1e-6  # a tick due at a batch's very arrival runs once it is in


def play(case: RecordedCase, cfg: DetectConfig | None = None, tick_s: float = 1.0) -> OfflineRun:
    """The recording through an offline run on its own (real) clock."""
    run = OfflineRun(cfg, tick_s=tick_s)
    last = None
    for b in sorted(read(case.path), key=lambda b: float(b.get("sent_at", 0.0))):
        # the ticks due before a batch arrived see only what had arrived, as the server's detector does, and one
        # more runs as it arrives: a tick on the grid after it would see a sample from its future (an engine core
        # SIGCONTed 0.07 s after the tick that should have called its 5 s stop, a real vLLM recording)
        last = float(b["sent_at"])
        run.advance(last - ARRIVAL_S)
        host = str((b.get("agent") or {}).get("host") or "host")
        run.processes(host, [wire.ProcessSample(**p) for p in b.get("processes", [])])
        run.gpus(host, [_gpu(g) for g in b.get("gpus", [])])
        run.events(host, [wire.Event(**e) for e in b.get("events", [])])
        run.metrics(
            host, [wire.MetricSample(**m) for m in b.get("metrics", []) if m.get("name") in DETECTOR_METRICS]
        )
        run.next_tick = last
        run.advance(last)
    return run


def _gpu(data: dict[str, Any]) -> wire.GpuSample:
    d = dict(data)
    d["processes"] = [wire.GpuProcess(**p) for p in d.get("processes") or []]
    return wire.GpuSample(**d)
