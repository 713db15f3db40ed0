"""``GET /metrics``: Prometheus exposition built from the database on every scrape.

A custom collector reads current state (a handful of indexed queries), so every server process behind a load
balancer answers the same for the cluster-wide series; only the ingest counters are per process (they count
what this process received, which is what Prometheus expects of each target). docs/metrics.md lists every
series and the PromQL that goes with it.

Choices: base units (ratios 0-1, bytes, watts, seconds); the rank phase is one series per rank carrying its
current phase (``specwatch_rank_phase{phase="cuda_graph_capture"} 1``) rather than a one-hot set of eleven:
8,192 ranks stay 8,192 series, and a phase change makes the old series vanish (Prometheus marks it stale at
once), so ``specwatch_rank_phase{phase="stalled"}`` and ``count by (phase) (specwatch_rank_phase)`` are exact.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.process_collector import ProcessCollector
from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session, sessionmaker

from agents.cleantext import clean_text
from agents.wire import INCIDENT_KINDS
from app import __version__
from app.ingest.queue import IngestWriter
from app.ingest.stats import IngestStats
from app.store import models
from app.store.locate import gpu_ranks, rank_location

GPU_STALE_S = 600.0  # a GPU not sampled for this long is no longer exported (its host is gone or idle)
ACCEPT_WINDOW_S = 900.0  # acceptance older than this is not "current"
DELIVERY_OUTCOMES = ("delivered", "failed", "suppressed")


def _gauge(name: str, doc: str, labels: list[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels, unit=unit)


def gpu_metrics(s: Session, now: float) -> Iterator[Metric]:
    G, H, S = models.Gpu, models.Host, models.GpuSample
    rows = s.execute(
        select(
            H.name,
            G.index,
            G.uuid,
            G.mem_total_bytes,
            G.power_limit_w,
            S.ts,
            S.util_gpu_pct,
            S.mem_used_bytes,
            S.power_w,
            S.temp_c,
        )
        .join(H, H.id == G.host_id)
        .join(S, and_(S.gpu_id == G.id, S.ts == G.last_seen))
        .where(G.last_seen > now - GPU_STALE_S)
        .order_by(H.name, G.index)
        # one index probe per GPU; unanalysed SQLite would otherwise scan every sample
        .with_hint(S, "INDEXED BY ix_gpu_samples_gpu_ts", "sqlite")
    ).all()
    # "rank": the running launch's rank holding the GPU ("" when none), so an alert on a GPU names the rank
    labels = ["host", "gpu", "uuid", "rank"]
    held_by = gpu_ranks(s)
    util = _gauge(
        "specwatch_gpu_utilization_ratio", "GPU busy fraction (NVML utilization.gpu / 100).", labels
    )
    mem = _gauge("specwatch_gpu_memory_used_bytes", "GPU memory in use.", labels)
    mem_total = _gauge("specwatch_gpu_memory_total_bytes", "GPU memory size.", labels)
    power = _gauge("specwatch_gpu_power_watts", "GPU power draw.", labels)
    limit = _gauge("specwatch_gpu_power_limit_watts", "GPU power limit.", labels)
    temp = _gauge("specwatch_gpu_temperature_celsius", "GPU temperature.", labels)
    ts = _gauge("specwatch_gpu_sample_timestamp_seconds", "When the exported GPU sample was taken.", labels)
    seen: set[str] = set()
    for host, index, uuid, total, power_limit, sample_ts, util_pct, mem_used, power_w, temp_c in rows:
        if uuid in seen:  # two samples with one timestamp: either is the latest
            continue
        seen.add(uuid)
        lv = [host, str(index), uuid, held_by.get(uuid, "")]
        if util_pct is not None:
            util.add_metric(lv, util_pct / 100.0)
        if mem_used is not None:
            mem.add_metric(lv, float(mem_used))
        if total is not None:
            mem_total.add_metric(lv, float(total))
        if power_w is not None:
            power.add_metric(lv, power_w)
        if power_limit is not None:
            limit.add_metric(lv, power_limit)
        if temp_c is not None:
            temp.add_metric(lv, temp_c)
        ts.add_metric(lv, sample_ts)
    yield from (util, mem, mem_total, power, limit, temp, ts)


def rank_metrics(s: Session, now: float) -> Iterator[Metric]:
    R, L, D, H = models.Rank, models.Launch, models.Deployment, models.Host
    rows = s.execute(
        select(D.name, L.id, R.label, H.name, R.phase, R.phase_since, R.last_progress_at)
        .join(L, L.id == R.launch_id)
        .join(D, D.id == L.deployment_id)
        .outerjoin(H, H.id == R.host_id)
        .where(L.ended_at.is_(None))
        .order_by(D.name, L.id, R.label)
    ).all()
    phase = _gauge(
        "specwatch_rank_phase",
        "1 for each rank of a running launch, labelled with its current phase.",
        ["deployment", "launch", "rank", "host", "phase"],
    )
    labels = ["deployment", "launch", "rank"]
    since = _gauge(
        "specwatch_rank_seconds_since_progress",
        "Seconds since the rank last showed progress (phase change, shard, capture step, batch, tokens).",
        labels,
    )
    last = _gauge(
        "specwatch_rank_last_progress_timestamp_seconds", "When the rank last showed progress.", labels
    )
    in_phase = _gauge(
        "specwatch_rank_phase_seconds", "Seconds the rank has been in its current phase.", labels
    )
    for dep, launch_id, label, host, ph, ph_since, progress_at in rows:
        lv = [dep, str(launch_id), label]
        phase.add_metric([*lv, host or "", ph], 1.0)
        if progress_at and progress_at > 0:  # 0: no progress recorded yet, not "stuck since 1970"
            since.add_metric(lv, max(0.0, now - progress_at))
            last.add_metric(lv, progress_at)
        in_phase.add_metric(lv, max(0.0, now - ph_since))
    yield from (phase, since, last, in_phase)


def launch_metrics(s: Session, now: float) -> Iterator[Metric]:
    L, D, E = models.Launch, models.Deployment, models.Event
    launches = s.execute(
        select(L.id, D.name, L.engine, L.status, L.started_at)
        .join(D, D.id == L.deployment_id)
        .where(L.ended_at.is_(None))
    ).all()
    status = _gauge(
        "specwatch_launch_status",
        "1 for each running launch, labelled with its one-word status.",
        ["deployment", "launch", "engine", "status"],
    )
    started = _gauge(
        "specwatch_launch_start_timestamp_seconds",
        "When the launch's first process started.",
        ["deployment", "launch"],
    )
    by_id = {}
    for launch_id, dep, engine, st, started_at in launches:
        status.add_metric([dep, str(launch_id), engine, st], 1.0)
        started.add_metric([dep, str(launch_id)], started_at)
        by_id[launch_id] = dep
    accept_len = _gauge(
        "specwatch_spec_accept_length",
        "Mean accepted tokens per verify step (drafts + bonus token), as the engine last reported it.",
        ["deployment", "launch"],
    )
    accept_rate = _gauge(
        "specwatch_spec_accept_rate",
        "Fraction of drafted tokens accepted, as last reported.",
        ["deployment", "launch"],
    )
    if by_id:
        kinds = ("decode_batch", "spec_metrics")
        latest = (
            select(E.launch_id, func.max(E.ts).label("ts"))
            .where(E.launch_id.in_(list(by_id)), E.kind.in_(kinds), E.ts > now - ACCEPT_WINDOW_S)
            .group_by(E.launch_id)
            .subquery()
        )
        rows = s.execute(
            select(E.launch_id, E.fields)
            .join(latest, and_(E.launch_id == latest.c.launch_id, E.ts == latest.c.ts))
            .where(E.kind.in_(kinds))
        ).all()
        done: set[int] = set()
        for launch_id, fields in rows:
            if launch_id in done or not fields:
                continue
            done.add(launch_id)
            lv = [by_id[launch_id], str(launch_id)]
            if isinstance(fields.get("accept_len"), int | float):
                accept_len.add_metric(lv, float(fields["accept_len"]))
            if isinstance(fields.get("accept_rate"), int | float):
                accept_rate.add_metric(lv, float(fields["accept_rate"]))
    yield from (status, started, accept_len, accept_rate)


def incident_metrics(s: Session) -> Iterator[Metric]:
    I = models.Incident  # noqa: E741
    counts: dict[str, int] = dict.fromkeys(INCIDENT_KINDS, 0)
    for kind, n in s.execute(select(I.kind, func.count()).where(I.status == "open").group_by(I.kind)):
        counts[kind] = n
    fam = _gauge("specwatch_incidents_open", "Open incidents by kind.", ["kind"])
    for kind, n in counts.items():
        fam.add_metric([kind], float(n))
    yield fam
    yield open_incident_metrics(s)


def open_incident_metrics(s: Session) -> Metric:
    """One series per open incident naming where to look, so a Prometheus alert can say which rank on which
    host: ``specwatch_incident_open{deployment,launch,kind,culprit,host,gpu,incident}`` = opened-at time."""
    I, L, D = models.Incident, models.Launch, models.Deployment  # noqa: E741
    fam = _gauge(
        "specwatch_incident_open",
        "Each open incident, labelled with its deployment, kind and culprit (rank, host, GPU); value: opened at.",
        ["deployment", "launch", "kind", "culprit", "host", "gpu", "incident"],
    )
    rows = s.execute(
        select(I.id, I.kind, I.culprit, I.launch_id, I.opened_at, D.name)
        .outerjoin(L, L.id == I.launch_id)
        .outerjoin(D, D.id == L.deployment_id)
        .where(I.status == "open")
        .order_by(I.id)
    ).all()
    for inc_id, kind, culprit, launch_id, opened_at, dep in rows:
        at = rank_location(s, launch_id, culprit) or {}
        gpus = ",".join(str(g["index"]) for g in at.get("gpus") or [] if g.get("index") is not None)
        lv = [dep or "", str(launch_id or ""), kind, culprit or "", at.get("host") or "", gpus, str(inc_id)]
        fam.add_metric(lv, opened_at)
    return fam


def agent_metrics(s: Session) -> Iterator[Metric]:
    H = models.Host
    seen = _gauge(
        "specwatch_agent_last_seen_timestamp_seconds", "When the host's agent last reported.", ["host"]
    )
    interval = _gauge("specwatch_agent_interval_seconds", "The agent's sampling interval.", ["host"])
    dropped = _gauge(
        "specwatch_agent_spool_dropped_samples",
        "Samples the host's agent spool dropped unsent at its bound (the agent's lifetime total).",
        ["host"],
    )
    rows = s.execute(select(H.name, H.last_seen, H.interval_s, H.spool_dropped_samples).order_by(H.name))
    for name, last_seen, interval_s, dropped_samples in rows:
        seen.add_metric([name], last_seen)
        interval.add_metric([name], interval_s)
        dropped.add_metric([name], float(dropped_samples or 0))
    yield from (seen, interval, dropped)


def alert_metrics(s: Session, now: float) -> Iterator[Metric]:
    D, R = models.AlertDelivery, models.AlertReceiver
    rows = s.execute(
        select(R.name, D.status, func.count(), func.min(D.created_at))
        .join(R, R.id == D.receiver_id)
        .group_by(R.name, D.status)
    ).all()
    total = CounterMetricFamily(
        "specwatch_alert_deliveries", "Webhook messages by final outcome.", labels=["receiver", "outcome"]
    )
    pending = _gauge(
        "specwatch_alert_deliveries_pending", "Webhook messages not yet delivered.", ["receiver"]
    )
    oldest = _gauge(
        "specwatch_alert_oldest_pending_age_seconds",
        "Age of the oldest undelivered webhook message.",
        ["receiver"],
    )
    by_receiver: dict[str, dict[str, tuple[int, float]]] = {}
    for name, status, n, first in rows:
        by_receiver.setdefault(name, {})[status] = (n, first)
    for name, statuses in sorted(by_receiver.items()):
        for outcome in DELIVERY_OUTCOMES:
            total.add_metric([name, outcome], float(statuses.get(outcome, (0, 0.0))[0]))
        waiting = [statuses[k] for k in ("pending", "sending") if k in statuses]
        pending.add_metric([name], float(sum(n for n, _ in waiting)))
        if waiting:
            oldest.add_metric([name], max(0.0, now - min(first for _, first in waiting)))
    yield from (total, pending, oldest)


def ingest_metrics(stats: IngestStats, writer: IngestWriter | None = None) -> Iterator[Metric]:
    yield CounterMetricFamily(
        "specwatch_ingest_batches", "Batches this server process accepted (per process).", value=stats.batches
    )
    yield CounterMetricFamily(
        "specwatch_ingest_duplicate_batches",
        "Re-sent batches this process recognised and ignored (per process).",
        value=stats.duplicates,
    )
    records = CounterMetricFamily(
        "specwatch_ingest_records", "Records stored by this process, by kind (per process).", labels=["kind"]
    )
    for kind in sorted({"gpus", "processes", "events", "metrics", *stats.records}):
        records.add_metric([kind], float(stats.records.get(kind, 0)))
    yield records
    yield SummaryMetricFamily(
        "specwatch_ingest_duration_seconds",
        "Time to store one batch, in this process.",
        count_value=stats.batches,
        sum_value=stats.latency_sum_s,
    )
    if writer is not None:
        yield CounterMetricFamily(
            "specwatch_ingest_transactions",
            "Ingest transactions committed by this process; batches ÷ transactions is the group-commit size.",
            value=writer.groups,
        )
        yield CounterMetricFamily(
            "specwatch_ingest_transaction_retries",
            "Ingest transactions the database undid to break a deadlock with another server, and run again.",
            value=writer.retries,
        )
        yield CounterMetricFamily(
            "specwatch_ingest_writer_busy_seconds",
            "Time this process's ingest writer thread spent storing groups; its rate near 1 means the "
            "process is at its ingest capacity (one writer per process).",
            value=writer.busy_s,
        )
        yield CounterMetricFamily(
            "specwatch_ingest_writer_cpu_seconds",
            "CPU time of the ingest writer thread; busy minus CPU is time it waited (the GIL, locks, disk).",
            value=writer.cpu_s,
        )


def _clean_labels(metric: Metric) -> Metric:
    """Label values come from the cluster (ranks, hosts, deployments, culprits): without control characters and
    with bidi controls shown as U+FFFD (agents/cleantext.py), as on the dashboard, so a Grafana legend or an
    alert built from them cannot be reordered."""
    if any(not v.isprintable() for s in metric.samples for v in s.labels.values()):
        metric.samples = [
            s._replace(labels={k: clean_text(v, keep="") for k, v in s.labels.items()})
            for s in metric.samples
        ]
    return metric


class StateCollector:
    """Everything above, read in one short read-only session per scrape."""

    def __init__(
        self, sessions: sessionmaker[Session], stats: IngestStats, writer: IngestWriter | None = None
    ) -> None:
        self.sessions = sessions
        self.stats = stats
        self.writer = writer

    def collect(self) -> Iterator[Metric]:
        for metric in self._collect():
            yield _clean_labels(metric)

    def _collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        now = time.time()
        info = GaugeMetricFamily("specwatch_build_info", "specwatch version.", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info
        with self.sessions() as s:
            yield from gpu_metrics(s, now)
            yield from rank_metrics(s, now)
            yield from launch_metrics(s, now)
            yield from incident_metrics(s)
            yield from agent_metrics(s)
            yield from alert_metrics(s, now)
        yield from ingest_metrics(self.stats, self.writer)
        yield GaugeMetricFamily(
            "specwatch_metrics_collect_seconds",
            "Time this process took to build the previous part of this scrape from the database.",
            value=time.perf_counter() - started,
        )


def attach(app: FastAPI, sessions: sessionmaker[Session], stats: IngestStats, writer: IngestWriter) -> None:
    """``/metrics`` on ``app``, over the store and the ingest counters (a registry per server, never the
    process-global one: two servers in one interpreter must not share series)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(sessions, stats, writer))
    registry.register(ProcessCollector(registry=None))

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        """Prometheus text exposition (format 0.0.4)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)
