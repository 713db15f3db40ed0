"""The schema: the vocabulary of docs/architecture.md as SQLAlchemy 2 tables.

Times are Unix epoch seconds (double precision) everywhere: compact, index-friendly, identical on SQLite and
PostgreSQL, and what the agent sends. Time-series tables carry only what a range query needs to be fast.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.store.base import NAMING, Base, BigId

# the other domains' tables, re-exported: callers write models.Incident or models.UserToken whichever module
# holds it, and importing this module registers every table on Base.metadata (alembic and create_all read it)
from app.store.credentials import AgentToken, ServerSecret, UserSession, UserToken
from app.store.incidents import (
    AlertAttempt,
    AlertDelivery,
    AlertReceiver,
    DetectorState,
    Incident,
    IncidentChange,
    Silence,
    StackRequest,
)
from app.store.jobs import GpuRollup, Lease, MetricRollup


class Host(Base):
    __tablename__ = "hosts"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    first_seen: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    agent_version: Mapped[str | None] = mapped_column(String(64))
    agent_id: Mapped[str | None] = mapped_column(String(64))
    interval_s: Mapped[float] = mapped_column(Float, default=1.0)
    # what the host's agent spool dropped unsent, as its latest batch reported (lifetime totals)
    spool_dropped_batches: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    spool_dropped_samples: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # the newest time its agent has reported up to (its newest stored batch's sent_at, on the server's clock)
    reported_until: Mapped[float | None] = mapped_column(Float)


class ClockRefusal(Base):
    """A host whose batches the server refuses for its clock (app/ingest/clock.py), by the token's host name: such
    a host may never have had a batch stored, so it has no hosts row to hang this on. It stays until a batch is
    stored after it (``hosts.last_seen`` newer than ``refused_at``), which costs the accepted batches nothing."""

    __tablename__ = "clock_refusals"
    host_name: Mapped[str] = mapped_column(String(128), primary_key=True)
    refused_at: Mapped[float] = mapped_column(Float)
    # server clock minus the agent's, as measured; the limit it was over (max_clock_skew_s then)
    offset_s: Mapped[float] = mapped_column(Float)
    limit_s: Mapped[float] = mapped_column(Float)


class IngestedBatch(Base):
    """One row per acknowledged batch: the idempotency key that makes re-sends harmless."""

    __tablename__ = "ingested_batches"
    # per host: one host's token must not claim (and so suppress) another host's batches
    __table_args__ = (UniqueConstraint("host_id", "agent_id", "seq"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(BigInteger)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    received_at: Mapped[float] = mapped_column(Float, index=True)
    n_gpus: Mapped[int] = mapped_column(Integer, default=0)
    n_processes: Mapped[int] = mapped_column(Integer, default=0)
    n_events: Mapped[int] = mapped_column(Integer, default=0)
    n_metrics: Mapped[int] = mapped_column(Integer, default=0)


class Gpu(Base):
    __tablename__ = "gpus"
    # per host: one host's samples must never land in another host's GPU
    __table_args__ = (UniqueConstraint("host_id", "uuid"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"), index=True)
    uuid: Mapped[str] = mapped_column(String(128))
    index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str | None] = mapped_column(String(128))
    mem_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    power_limit_w: Mapped[float | None] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)


class Deployment(Base):
    __tablename__ = "deployments"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class Launch(Base):
    """One engine instance of a deployment (its ranks and their hosts), from its first process start to its
    exit. Replicas of one deployment are sibling launches, told apart by ``world``."""

    __tablename__ = "launches"
    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id"), index=True)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    engine: Mapped[str] = mapped_column(String(16), default="unknown")
    # one-word summary for the overview: starting, loading, capturing, serving, stalled, crashed, exited
    status: Mapped[str] = mapped_column(String(32), default="starting")
    draft_path: Mapped[str | None] = mapped_column(Text)
    info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # the engine's world key as the agent reports it (wire.AgentInfo.launch); None: data no agent could place
    world: Mapped[str | None] = mapped_column(String(256))
    # the host whose batch opened the launch
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id"))
    # a person acknowledged how it ended: the overview stops showing its cause
    acknowledged_at: Mapped[float | None] = mapped_column(Float)


class Rank(Base):
    """One engine worker of a launch, as the engine labels it (``TP3``, ``DP0 TP3``)."""

    __tablename__ = "ranks"
    __table_args__ = (UniqueConstraint("launch_id", "label"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    launch_id: Mapped[int] = mapped_column(ForeignKey("launches.id"), index=True)
    label: Mapped[str] = mapped_column(String(64))
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id"))
    pid: Mapped[int | None] = mapped_column(Integer)
    gpu_uuids: Mapped[list[Any]] = mapped_column(default=list)
    phase: Mapped[str] = mapped_column(String(32), default="starting")
    phase_since: Mapped[float] = mapped_column(Float)
    last_progress_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    last_log: Mapped[str | None] = mapped_column(Text)
    # progress markers and the latest signature, as the rank-state code keeps them (shards, capture steps, ...)
    state: Mapped[dict[str, Any]] = mapped_column(default=dict)


class RankPhase(Base):
    """Phase history of a rank: the bands of the launch timeline."""

    __tablename__ = "rank_phases"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    rank_id: Mapped[int] = mapped_column(ForeignKey("ranks.id"), index=True)
    phase: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    # "draft": the draft model's own load / KV pool / graph capture (app/rankstate/phaselabels.py, phase_label)
    subject: Mapped[str | None] = mapped_column(String(16))


class Process(Base):
    """The identity of an engine process (a pid is only unique together with its start time)."""

    __tablename__ = "processes"
    __table_args__ = (UniqueConstraint("host_id", "pid", "create_time"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    pid: Mapped[int] = mapped_column(Integer)
    create_time: Mapped[float] = mapped_column(Float)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    engine: Mapped[str] = mapped_column(String(16))
    rank_label: Mapped[str | None] = mapped_column(String(64))
    launch_id: Mapped[int | None] = mapped_column(ForeignKey("launches.id"), index=True)
    cmdline: Mapped[str | None] = mapped_column(Text)
    exited_at: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    last_seen: Mapped[float] = mapped_column(Float)


class GpuSample(Base):
    __tablename__ = "gpu_samples"
    __table_args__ = (Index("ix_gpu_samples_gpu_ts", "gpu_id", "ts"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    ts: Mapped[float] = mapped_column(Float)
    util_gpu_pct: Mapped[float | None] = mapped_column(Float)
    util_mem_pct: Mapped[float | None] = mapped_column(Float)
    mem_used_bytes: Mapped[int | None] = mapped_column(BigInteger)
    power_w: Mapped[float | None] = mapped_column(Float)
    temp_c: Mapped[float | None] = mapped_column(Float)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Float)
    pcie_tx_bytes_s: Mapped[float | None] = mapped_column(Float)
    pcie_rx_bytes_s: Mapped[float | None] = mapped_column(Float)
    # [[pid, used_mem_bytes, sm_util_pct], ...] as NVML reported them
    processes: Mapped[list[Any] | None] = mapped_column(JSON)


class ProcessSample(Base):
    __tablename__ = "process_samples"
    __table_args__ = (Index("ix_process_samples_process_ts", "process_id", "ts"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    process_id: Mapped[int] = mapped_column(ForeignKey("processes.id"))
    ts: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    threads: Mapped[int | None] = mapped_column(Integer)
    rss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    cpu_time_s: Mapped[float | None] = mapped_column(Float)
    cpu_pct: Mapped[float | None] = mapped_column(Float)
    io_read_bytes: Mapped[int | None] = mapped_column(BigInteger)


class Event(Base):
    """Parsed engine log lines and agent/hardware events."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_launch_ts", "launch_id", "ts"),
        Index("ix_events_host_ts", "host_id", "ts"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    launch_id: Mapped[int | None] = mapped_column(ForeignKey("launches.id"))
    rank_label: Mapped[str | None] = mapped_column(String(64))
    ts: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    source: Mapped[str | None] = mapped_column(String(512))
    message: Mapped[str] = mapped_column(Text)
    fields: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class MetricSeries(Base):
    __tablename__ = "metric_series"
    __table_args__ = (UniqueConstraint("host_id", "name", "labels_key"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    name: Mapped[str] = mapped_column(String(128))
    # canonical "k=v,k=v" of the sorted labels: the uniqueness key (JSON columns cannot be compared portably)
    labels_key: Mapped[str] = mapped_column(String(2048))
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)


class MetricSample(Base):
    __tablename__ = "metric_samples"
    __table_args__ = (
        Index("ix_metric_samples_series_ts", "series_id", "ts"),
        Index("ix_metric_samples_launch_ts", "launch_id", "ts"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    series_id: Mapped[int] = mapped_column(ForeignKey("metric_series.id"))
    launch_id: Mapped[int | None] = mapped_column(ForeignKey("launches.id"))
    ts: Mapped[float] = mapped_column(Float)
    value: Mapped[float] = mapped_column(Float)


__all__ = [
    "NAMING",
    "AgentToken",
    "AlertAttempt",
    "AlertDelivery",
    "AlertReceiver",
    "Base",
    "BigId",
    "Deployment",
    "DetectorState",
    "Event",
    "Gpu",
    "GpuRollup",
    "GpuSample",
    "Host",
    "Incident",
    "IncidentChange",
    "IngestedBatch",
    "Launch",
    "Lease",
    "MetricRollup",
    "MetricSample",
    "MetricSeries",
    "Process",
    "ProcessSample",
    "Rank",
    "RankPhase",
    "ServerSecret",
    "Silence",
    "StackRequest",
    "UserSession",
    "UserToken",
]
