"""What this process's ingest has done, for /metrics: a per-process view, which is what Prometheus expects of
each target (every server process is scraped on its own)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents import wire
from app.ingest.batches import IngestResult


@dataclass
class IngestStats:
    batches: int = 0
    duplicates: int = 0
    records: dict[str, int] = field(default_factory=dict)
    latency_sum_s: float = 0.0

    def observe(self, batch: wire.IngestBatch, result: IngestResult, seconds: float) -> None:
        self.batches += 1
        self.duplicates += int(result.duplicate)
        for k, v in result.stored.items():
            self.records[k] = self.records.get(k, 0) + v
        self.latency_sum_s += seconds
