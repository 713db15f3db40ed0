"""The detector's input, read from the DATABASE (not from in-process ingest hooks), so that with several
servers on one PostgreSQL the one holding the leader lease sees every batch whichever server stored it.

Each time-series table is read by id from a cursor. PostgreSQL hands out sequence ids at INSERT but makes rows
visible at COMMIT, so a row with a lower id can appear after a higher one was read. The feed therefore re-reads
the ids it skipped (gaps below the newest id read) by id for ``rescan_s`` seconds, with the new rows; a gap
that stays empty that long was rolled back. SQLite takes its write lock at BEGIN (app/store/db.py), so there ids
become visible in order and no re-check is needed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any

from sqlalchemy import String, or_, select, type_coerce
from sqlalchemy.orm import Session

from agents import wire
from app.rankstate import DETECTOR_METRICS
from app.store import models
from app.store.db import json_loads

TABLES = ("events", "process_samples", "gpu_samples", "metric_samples")


@dataclass(slots=True)
class Record:
    ts: float
    source: str  # process | event | gpu | metric
    host: str
    launch: str | None
    item: Any


# Gaps tracked below the newest id read: beyond this many, the oldest are forgotten (a sequence that jumped)
MAX_GAPS = 20_000
# Process rows kept by the feed at most (a few per GPU; restarts add more over the months)
MAX_PROCESSES = 200_000


@dataclass
class _Cursor:
    hwm: int = 0  # highest id applied
    # ids below hwm not seen yet (allocated by a transaction still open, or rolled back): id -> when noticed
    gaps: dict[int, float] = field(default_factory=dict)


@dataclass
class Feed:
    rescan_s: float = 0.0
    chunk: int = 50_000
    cursors: dict[str, _Cursor] = field(default_factory=lambda: {t: _Cursor() for t in TABLES})
    hosts: dict[int, str] = field(default_factory=dict)
    host_ids: dict[str, int] = field(
        default_factory=dict
    )  # the reverse of hosts: the writes look ids up by name
    caught_up: bool = True  # False while a read hit the chunk limit (old backlog still being read)
    # process id -> (host id, launch key, pid, create_time, name, rank, role, engine): see _processes
    processes: dict[int, tuple[Any, ...]] = field(default_factory=dict)

    def positions(self) -> dict[str, int]:
        return {t: c.hwm for t, c in self.cursors.items()}

    def restore(self, positions: dict[str, Any]) -> None:
        for t, hwm in positions.items():
            if t in self.cursors and isinstance(hwm, int):
                self.cursors[t] = _Cursor(hwm=hwm)

    def start_recent(self, session: Session, since_ts: float) -> None:
        """First start (no saved cursors): read from the first row stamped at or after ``since_ts``, so a
        launch already under way when the detector first runs is seen from its start, while months of
        history on an existing database are not replayed."""
        from sqlalchemy import func

        for t, table in _TABLE_MODELS.items():
            lo, hi = session.execute(
                select(func.coalesce(func.min(table.id), 0), func.coalesce(func.max(table.id), 0))
            ).one()
            self.cursors[t] = _Cursor(hwm=_first_id_at(session, table, since_ts, lo, hi + 1) - 1 if hi else 0)

    def _recheck(self, cur: _Cursor, wall: float) -> list[int]:
        """Gaps still young enough to be filled by a commit: re-read by id, with the new rows."""
        if self.rescan_s <= 0:
            return []
        cur.gaps = {i: t for i, t in cur.gaps.items() if t >= wall - self.rescan_s}
        return sorted(cur.gaps)

    def _advance(self, cur: _Cursor, ids: list[int], wall: float) -> None:
        if not ids:
            return
        top = max(ids)
        if self.rescan_s > 0:
            got = set(ids)
            for i in got:
                cur.gaps.pop(i, None)
            for i in range(max(cur.hwm + 1, top - MAX_GAPS), top):
                if i not in got:
                    cur.gaps[i] = wall
        cur.hwm = max(cur.hwm, top)

    def read(self, session: Session, wall: float | None = None) -> list[Record]:
        """New rows of every table since the last call, as wire records in time order."""
        wall = time.monotonic() if wall is None else wall
        H = models.Host
        # read before the records: everything a host reported up to ``reported_until`` is in what follows
        known = session.execute(select(H.id, H.name, H.last_seen, H.interval_s, H.reported_until)).all()
        self.hosts = {hid: name for hid, name, *_ in known}
        self.host_ids = {name: hid for hid, name, *_ in known}
        self.heartbeats = [(name, seen, interval_s, until) for _, name, seen, interval_s, until in known]
        out: list[Record] = []
        self.caught_up = True
        for name, reader in (
            ("process_samples", self._processes),
            ("events", self._events),
            ("gpu_samples", self._gpus),
            ("metric_samples", self._metrics),
        ):
            cur = self.cursors[name]
            rows = reader(session, cur.hwm, self._recheck(cur, wall))
            if len(rows) >= self.chunk:
                self.caught_up = False
            self._advance(cur, [i for i, _ in rows], wall)
            out += [rec for _, rec in rows if rec is not None]
        # records of one timestamp are applied in the order the tables were read (the sort is stable): processes
        # first, so pids map to ranks before GPUs need them
        out.sort(key=attrgetter("ts"))
        return out

    def _launch(self, launch_id: int | None) -> str | None:
        return None if launch_id is None else str(launch_id)

    def _new_rows(
        self, s: Session, stmt: Any, id_col: Any, after: int, recheck: list[int], raw: bool = False
    ) -> list[Any]:
        """Rows above the cursor, and the skipped ids being re-checked, oldest first, at most ``chunk``; through
        Core (no ORM row loading for the bulk of the feed). ``raw``: the driver's own tuples, for columns that
        need no result processing (numbers, text): SQLAlchemy's Row per fetched row was a sixth of the read."""
        new = id_col > after if not recheck else or_(id_col > after, id_col.in_(recheck))
        result = s.connection().execute(stmt.where(new).order_by(id_col).limit(self.chunk))
        if not raw:
            return list(result.all())
        try:
            return list(result.cursor.fetchall())
        finally:
            result.close()

    def _events(self, s: Session, after: int, recheck: list[int]) -> list[tuple[int, Record]]:
        E = models.Event
        rows = self._new_rows(
            s,
            select(
                E.id,
                E.host_id,
                E.launch_id,
                E.rank_label,
                E.ts,
                E.kind,
                E.severity,
                E.source,
                E.message,
                E.fields,
            ),
            E.id,
            after,
            recheck,
        )
        hosts, launch_key = self.hosts, self._launch
        # positional unpacking: attribute access on each Row costs more than building the record
        return [
            (
                id_,
                Record(
                    ts,
                    "event",
                    hosts.get(host_id, "?"),
                    launch_key(launch_id),
                    wire.Event(
                        ts=ts,
                        kind=kind,
                        message=message,
                        rank=rank,
                        severity=severity,
                        source=source,
                        fields=fields or {},
                    ),
                ),
            )
            for id_, host_id, launch_id, rank, ts, kind, severity, source, message, fields in rows
        ]

    def _processes(self, s: Session, after: int, recheck: list[int]) -> list[tuple[int, Record]]:
        """Process samples, without their process row: what a process row says (pid, name, rank, launch...)
        never changes once written but its exit code, so it is read once per process and kept, not joined and
        fetched again with each of its samples (half the columns of the detector's busiest read)."""
        S = models.ProcessSample
        rows = self._new_rows(
            s,
            select(
                S.id,
                S.process_id,
                S.ts,
                S.state,
                S.threads,
                S.rss_bytes,
                S.cpu_time_s,
                S.cpu_pct,
                S.io_read_bytes,
            ),
            S.id,
            after,
            recheck,
            raw=True,
        )
        known = self._process_rows(s, {r[1] for r in rows})
        # an exit code is written with the process's "exited" sample, so it is read with it, never kept
        exits = self._exit_codes(s, {r[1] for r in rows if r[3] == "exited"})
        hosts, make = self.hosts, wire.ProcessSample
        out = []
        for id_, process_id, ts, state, threads, rss, cpu_time, cpu_pct, io_read in rows:
            host_id, launch, pid, create_time, name, rank, role, engine = known[process_id]
            # positional, in the dataclass's field order: 14 keywords took 2.5 times as long to pass (the
            # feed test compares every field with what was sent)
            item = make(
                ts,
                pid,
                create_time,
                name,
                rank,
                role,
                engine,
                state,
                threads,
                rss,
                cpu_time,
                cpu_pct,
                io_read,
                exits.get(process_id) if state == "exited" else None,
            )
            out.append((id_, Record(ts, "process", hosts.get(host_id, "?"), launch, item)))
        return out

    def _process_rows(self, s: Session, ids: set[int]) -> dict[int, tuple[Any, ...]]:
        """What the process rows ``ids`` say, read once per process (bounded: forgotten wholesale when full)."""
        cache = self.processes
        missing = [i for i in ids if i not in cache]
        if len(cache) + len(missing) > MAX_PROCESSES:
            cache.clear()
            missing = list(ids)
        P = models.Process
        cols = (P.id, P.host_id, P.launch_id, P.pid, P.create_time, P.name, P.rank_label, P.role, P.engine)
        for k in range(0, len(missing), 10_000):  # within SQLite's bound-value limit
            for id_, host_id, launch_id, *rest in s.connection().execute(
                select(*cols).where(P.id.in_(missing[k : k + 10_000]))
            ):
                cache[id_] = (host_id, self._launch(launch_id), *rest)
        return cache

    def _exit_codes(self, s: Session, ids: set[int]) -> dict[int, int | None]:
        if not ids:
            return {}
        P = models.Process
        return dict(s.connection().execute(select(P.id, P.exit_code).where(P.id.in_(list(ids)))).all())

    def _gpus(self, s: Session, after: int, recheck: list[int]) -> list[tuple[int, Record]]:
        S, G = models.GpuSample, models.Gpu
        rows = self._new_rows(
            s,
            select(
                S.id,
                S.ts,
                S.util_gpu_pct,
                S.mem_used_bytes,
                S.power_w,
                # the text as stored (PostgreSQL's driver still hands over parsed JSON): SQLAlchemy's JSON
                # result processing costs several calls per row on the detector's hottest read
                type_coerce(S.processes, String),
                G.host_id,
                G.uuid,
                G.index.label("gpu_index"),
                G.power_limit_w,
                G.mem_total_bytes,
            ).join(G, G.id == S.gpu_id),
            S.id,
            after,
            recheck,
            raw=True,
        )
        hosts, make = self.hosts, wire.GpuSample
        # positional, in the dataclass's field order (keywords cost more per record); None where unread
        return [
            (
                id_,
                Record(
                    ts,
                    "gpu",
                    hosts.get(host_id, "?"),
                    None,
                    make(
                        ts,
                        index,
                        uuid,
                        None,
                        util,
                        None,
                        mem_used,
                        mem_total,
                        power,
                        power_limit,
                        None,
                        None,
                        None,
                        None,
                        _gpu_processes(procs) if procs else [],
                    ),
                ),
            )
            for id_, ts, util, mem_used, power, procs, host_id, uuid, index, power_limit, mem_total in rows
        ]

    def _metrics(self, s: Session, after: int, recheck: list[int]) -> list[tuple[int, Record | None]]:
        """Every new metric row's id (the cursor must see them all, or the rest would look like gaps), a
        record only for the series the detector reads."""
        M, S = models.MetricSample, models.MetricSeries
        rows = self._new_rows(
            s,
            select(M.id, M.ts, M.value, M.launch_id, S.host_id, S.name).join(S, S.id == M.series_id),
            M.id,
            after,
            recheck,
        )
        hosts, launch_key, wanted = self.hosts, self._launch, DETECTOR_METRICS
        return [
            (
                id_,
                Record(
                    ts,
                    "metric",
                    hosts.get(host_id, "?"),
                    launch_key(launch_id),
                    wire.MetricSample(ts=ts, name=name, value=value),
                )
                if name in wanted
                else None,
            )
            for id_, ts, value, launch_id, host_id, name in rows
        ]


def _gpu_processes(procs: str | list[Any]) -> list[wire.GpuProcess]:
    """A GPU's processes as the detector reads them (pids only) from their stored ``[[pid, mem, sm], …]``."""
    rows = json_loads(procs) if isinstance(procs, str) else procs
    return [_gpu_process(p[0]) for p in rows if p and p[0] is not None]


@lru_cache(maxsize=65536)
def _gpu_process(pid: int) -> wire.GpuProcess:
    """The detector reads only the pid of a GPU's processes: one shared, never-mutated object per pid."""
    return wire.GpuProcess(pid=pid)


_TABLE_MODELS: dict[str, Any] = {
    "events": models.Event,
    "process_samples": models.ProcessSample,
    "gpu_samples": models.GpuSample,
    "metric_samples": models.MetricSample,
}


def _first_id_at(session: Session, table: Any, ts: float, lo: int, hi: int) -> int:
    """The first id in [lo, hi) whose row is stamped at or after ``ts`` (``hi`` when none is), by bisection over the primary key (ids grow with
    time closely enough): a handful of index lookups instead of a scan of the whole history."""
    while lo < hi:
        mid = (lo + hi) // 2
        row = session.execute(
            select(table.id, table.ts).where(table.id >= mid).order_by(table.id).limit(1)
        ).first()
        if row is None or row.ts >= ts:
            hi = mid
        else:
            lo = row.id + 1
    return lo
