"""What ``specwatch replay`` and ``specwatch eval`` share: driving the same reducer and detector the server
runs over records on a virtual clock, and collecting the incidents it decides into a readable history."""

from __future__ import annotations

from collections.abc import Iterable

from agents import wire
from app.detect import Decision, DetectConfig, Detector
from app.detect.ledger import IncidentRecord, Ledger
from app.rankstate import (
    DETECTOR_METRICS,
    Fleet,
    LaunchState,
    apply_event,
    apply_gpu,
    apply_metric,
    apply_process,
)

LAUNCH = "offline"


def metric_samples(text: str, ts: float) -> list[wire.MetricSample]:
    """The detector's series from one /metrics scrape (Prometheus text exposition)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name in DETECTOR_METRICS:
                    out.append(
                        wire.MetricSample(ts=ts, name=s.name, value=float(s.value), labels=dict(s.labels))
                    )
    except ValueError:
        return out  # a truncated scrape: keep what parsed
    return out


class OfflineRun:
    """A fleet, a detector and the incident history, advanced record by record on the records' own clock."""

    def __init__(self, cfg: DetectConfig | None = None, tick_s: float = 2.0) -> None:
        self.fleet = Fleet()
        # offline, no agent answers stack requests: nothing to wait for
        self.detector = Detector((cfg or DetectConfig()).model_copy(update={"stack_wait_s": 0.0}))
        self.tick_s = tick_s
        self.next_tick: float | None = None
        self.ledger = Ledger()

    @property
    def incidents(self) -> list[IncidentRecord]:
        """Every incident opened so far, in opening order, as the server would have stored it."""
        return self.ledger.history

    @property
    def launch(self) -> LaunchState:
        return self.fleet.launch(LAUNCH)

    def advance(self, now: float) -> None:
        """Run every detector tick due up to ``now`` (long gaps are time passing, in ticks)."""
        if self.next_tick is None:
            self.next_tick = now
        while self.next_tick <= now:
            self._record(self.detector.step(self.fleet, self.next_tick))
            self.next_tick += self.tick_s

    def events(self, host: str, events: Iterable[wire.Event]) -> None:
        for ev in events:
            apply_event(self.fleet, LAUNCH, host, ev)

    def gpus(self, host: str, samples: Iterable[wire.GpuSample]) -> None:
        for g in samples:
            apply_gpu(self.fleet, host, g)

    def processes(self, host: str, samples: Iterable[wire.ProcessSample]) -> None:
        for p in samples:
            apply_process(self.fleet, LAUNCH, host, p)

    def metrics(self, host: str, samples: Iterable[wire.MetricSample]) -> None:
        for m in samples:
            apply_metric(self.fleet, LAUNCH, host, m)

    def _record(self, decisions: list[Decision]) -> None:
        for d in decisions:
            self.ledger.apply(d)
