"""What ``specwatch replay`` and ``specwatch eval`` share: driving the same reducer and detector the server
runs over records on a virtual clock, and collecting the incidents it decides into a readable history."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agents import wire
from agents.collectors.stacks import stacks_event
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
    """The detector's series from one recorded /metrics scrape, as the agent would have sent them."""
    from agents.collectors.engine_metrics import exposition_samples

    out: list[wire.MetricSample] = []
    try:
        out.extend(exposition_samples(text, ts, DETECTOR_METRICS.__contains__))
    except ValueError:
        return out  # a truncated scrape: keep what parsed
    return out


class OfflineRun:
    """A fleet, a detector and the incident history, advanced record by record on the records' own clock."""

    def __init__(
        self,
        cfg: DetectConfig | None = None,
        tick_s: float = 2.0,
        stacks: Callable[[str, int, float], str | None] | None = None,
    ) -> None:
        self.fleet = Fleet()
        # ``stacks`` answers the detector's stack requests as an agent would (eval: the simulator's py-spy
        # output); without it nobody answers (replay of a log): nothing to wait for
        cfg = cfg or DetectConfig()
        self.detector = Detector(cfg if stacks else cfg.model_copy(update={"stack_wait_s": 0.0}))
        self.stacks = stacks
        self._asked: dict[tuple[str, int], float] = {}
        self.tick_s = tick_s
        self.next_tick: float | None = None
        self.until: float | None = None  # where the virtual clock stopped (replay: past the last line)
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
            if self.stacks is not None:
                self._answer(self.next_tick)
            self.next_tick += self.tick_s

    def _answer(self, now: float) -> None:
        """The stack dumps the detector asks for, paced as the server paces them, one answer per pid."""
        repeat = self.detector.cfg.stack_repeat_s
        for host, pid in dict.fromkeys(self.detector.stack_wishes()):
            if now - self._asked.get((host, pid), -1e18) < repeat or self.stacks is None:
                continue
            self._asked[(host, pid)] = now
            dump = self.stacks(host, pid, now)
            if dump:
                apply_event(self.fleet, LAUNCH, host, stacks_event(pid, now, dump))

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
