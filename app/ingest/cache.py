"""The ids ingest learns once per row (hosts, GPUs, processes, metric series), shared by the batch bookkeeping
(batches.py) and the row writers (tables.py). A module of its own so neither imports the other for it."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class IngestCache:
    """Ids of rows that are created once and never change identity (hosts, GPUs, processes, metric series),
    plus the last metadata written, so a steady-state batch costs a handful of INSERTs instead of dozens of
    look-ups. Safe with several servers: a miss falls back to insert-if-absent + select.

    Ids learnt inside a transaction are only shared once it commits (``overlay`` / ``absorb``): another
    request must never reference a row that may still roll back."""

    hosts: MutableMapping[str, int] = field(default_factory=dict)
    gpus: MutableMapping[tuple[int, str], int] = field(default_factory=dict)  # (host id, uuid)
    gpu_meta: MutableMapping[int, tuple[Any, ...]] = field(default_factory=dict)
    processes: MutableMapping[tuple[int, int, float], int] = field(default_factory=dict)
    process_seen: MutableMapping[int, float] = field(default_factory=dict)
    series: MutableMapping[tuple[int, str, str], int] = field(default_factory=dict)
    deployments: MutableMapping[str, int] = field(default_factory=dict)

    def _maps(self) -> tuple[MutableMapping[Any, Any], ...]:
        return (
            self.hosts,
            self.gpus,
            self.gpu_meta,
            self.processes,
            self.process_seen,
            self.series,
            self.deployments,
        )

    def overlay(self) -> IngestCache:
        """A view for one transaction: reads fall through to this cache, writes stay local."""
        return IngestCache(*(Overlay(m) for m in self._maps()))

    def absorb(self, overlay: IngestCache) -> None:
        """Publish what a committed transaction learnt."""
        for mine, theirs in zip(self._maps(), overlay._maps(), strict=True):
            assert isinstance(theirs, Overlay)
            mine.update(theirs)  # its own entries: what this transaction wrote


class Overlay(dict[Any, Any]):
    """A dict of this transaction's writes over a shared base it reads through to. Not ``ChainMap``: that one
    runs Python code (a generator) for every look-up, and ingest makes several per record."""

    __slots__ = ("base",)

    def __init__(self, base: MutableMapping[Any, Any]) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, key: Any) -> Any:
        return self.base[key]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self.base

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.base.get(key, default)
