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
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments INTEGER PRIMARY KEY; BigInteger there would break row ids.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


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


class AgentToken(Base):
    """Agent credentials, one host each. Only a SHA-256 of the token is kept; ``prefix`` lets a person tell
    tokens apart in listings without it being usable."""

    __tablename__ = "agent_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    host_name: Mapped[str] = mapped_column(String(128), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)


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
    """One start of a deployment, from its first process start to its exit."""

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


class Incident(Base):
    __tablename__ = "incidents"
    __table_args__ = (Index("ix_incidents_status_opened", "status", "opened_at"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    launch_id: Mapped[int | None] = mapped_column(ForeignKey("launches.id"), index=True)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id"))
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default="open")  # open | resolved
    confidence: Mapped[str] = mapped_column(String(16), default="suspected")  # suspected | confirmed
    severity: Mapped[str] = mapped_column(String(16), default="critical")
    culprit: Mapped[str | None] = mapped_column(String(64))
    # the rank named when it opened (the culprit may be refined later): what a page at 2 a.m. acted on
    culprit_at_open: Mapped[str | None] = mapped_column(String(64))
    ranks: Mapped[list[Any]] = mapped_column(default=list)
    # signals of other kinds that confirmed it (the NCCL watchdog confirming a suspected deadlock)
    confirmed_by: Mapped[list[Any]] = mapped_column(default=list)
    summary: Mapped[str] = mapped_column(Text)
    evidence: Mapped[list[Any]] = mapped_column(default=list)
    # stable identity of "the same problem" so the detector updates rather than re-opens
    key: Mapped[str] = mapped_column(String(256), index=True)
    opened_at: Mapped[float] = mapped_column(Float)
    resolved_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class IncidentChange(Base):
    """Each status change of an incident is a row; alerts are created from these in the same transaction."""

    __tablename__ = "incident_changes"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id"), index=True)
    ts: Mapped[float] = mapped_column(Float)
    change: Mapped[str] = mapped_column(String(16))  # opened | upgraded | resolved | reminder
    summary: Mapped[str] = mapped_column(Text)
    evidence: Mapped[list[Any]] = mapped_column(default=list)


class AlertReceiver(Base):
    __tablename__ = "alert_receivers"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    url: Mapped[str] = mapped_column(Text)
    format: Mapped[str] = mapped_column(String(16))  # generic | slack | alertmanager
    # needed in clear to sign; never returned by the API or written to logs
    secret: Mapped[str | None] = mapped_column(String(256))
    kinds: Mapped[list[Any]] = mapped_column(default=list)  # empty: every kind
    enabled: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[float] = mapped_column(Float)
    # removed receivers stay (their delivery history refers to them) but are hidden and never sent to
    removed_at: Mapped[float | None] = mapped_column(Float)


class AlertDelivery(Base):
    """The outbox: one row per (receiver, message), written with the change that caused it."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (Index("ix_alert_deliveries_status_next", "status", "next_attempt_at"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(64), unique=True)
    receiver_id: Mapped[int] = mapped_column(ForeignKey("alert_receivers.id"), index=True)
    change_id: Mapped[int | None] = mapped_column(ForeignKey("incident_changes.id"), index=True)
    # the incident snapshots the message is rendered from (stable across retries; see app/alerts/outbox.py)
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # opened | upgraded | resolved | reminder: what the message announces
    event: Mapped[str] = mapped_column(String(16), default="opened")
    # incidents of one launch that open together share one message: the grouping key
    launch_id: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(
        String(16), default="pending"
    )  # pending | sending | delivered | failed | suppressed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    claimed_until: Mapped[float | None] = mapped_column(Float)
    # which server process holds the claim (several may share one database)
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float)
    last_error: Mapped[str | None] = mapped_column(Text)


class AlertAttempt(Base):
    __tablename__ = "alert_attempts"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("alert_deliveries.id"), index=True)
    at: Mapped[float] = mapped_column(Float)
    http_status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[float] = mapped_column(Float)


class Silence(Base):
    __tablename__ = "silences"
    id: Mapped[int] = mapped_column(primary_key=True)
    # what is muted: any of these that is set must match (an all-empty silence is refused by the API)
    kind: Mapped[str | None] = mapped_column(String(32))
    launch_id: Mapped[int | None] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(128))
    rank: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float] = mapped_column(Float)


class Lease(Base):
    """Leader election among several servers: whoever holds an unexpired lease runs the detector/sender."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[float] = mapped_column(Float)


class StackRequest(Base):
    """A py-spy dump the detector wants of a suspect pid; handed to that host's agent in its next ingest ack."""

    __tablename__ = "stack_requests"
    __table_args__ = (Index("ix_stack_requests_host_sent", "host_id", "sent_at"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    pid: Mapped[int] = mapped_column(Integer)
    requested_at: Mapped[float] = mapped_column(Float)
    incident_id: Mapped[int | None] = mapped_column(ForeignKey("incidents.id"))
    sent_at: Mapped[float | None] = mapped_column(Float)


class DetectorState(Base):
    """The detector's own bookkeeping (read cursors, XIDs seen), written with the rank state it belongs to."""

    __tablename__ = "detector_state"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(default=dict)
    updated_at: Mapped[float] = mapped_column(Float)


class GpuRollup(Base):
    """One-minute aggregates of gpu_samples, kept far longer than raw samples: what wide-range charts read,
    so their cost depends on the range shown, not on how much history is stored."""

    __tablename__ = "gpu_rollups"
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"), primary_key=True)
    bucket_ts: Mapped[float] = mapped_column(Float, primary_key=True)  # start of the minute
    n: Mapped[int] = mapped_column(Integer)
    util_gpu_min: Mapped[float | None] = mapped_column(Float)
    util_gpu_mean: Mapped[float | None] = mapped_column(Float)
    util_gpu_max: Mapped[float | None] = mapped_column(Float)
    mem_used_mean: Mapped[float | None] = mapped_column(Float)
    mem_used_max: Mapped[float | None] = mapped_column(Float)
    power_min: Mapped[float | None] = mapped_column(Float)
    power_mean: Mapped[float | None] = mapped_column(Float)
    power_max: Mapped[float | None] = mapped_column(Float)
    temp_max: Mapped[float | None] = mapped_column(Float)


class MetricRollup(Base):
    """One-minute aggregates of metric_samples (the engine's acceptance, throughput, request series): what the
    launch view's engine charts read for wide ranges, as gpu_rollups are for the GPU lines."""

    __tablename__ = "metric_rollups"
    __table_args__ = (Index("ix_metric_rollups_launch_bucket", "launch_id", "bucket_ts"),)
    series_id: Mapped[int] = mapped_column(ForeignKey("metric_series.id"), primary_key=True)
    bucket_ts: Mapped[float] = mapped_column(Float, primary_key=True)  # start of the minute
    launch_id: Mapped[int | None] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    v_min: Mapped[float] = mapped_column(Float)
    v_mean: Mapped[float] = mapped_column(Float)
    v_max: Mapped[float] = mapped_column(Float)


class UserToken(Base):
    """Credentials of people and tools reading the dashboard and API when access control is on.
    Only a SHA-256 of the token is kept, like agent tokens."""

    __tablename__ = "user_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), index=True)
    role: Mapped[str] = mapped_column(String(16))  # viewer | admin
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class UserSession(Base):
    """One browser login (auth=token): the cookie names it, and it lasts while the user token behind it is
    live, until logout (``ended_at``) or ``expires_at``."""

    __tablename__ = "user_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # SHA-256 of the cookie's session id
    user_token_id: Mapped[int] = mapped_column(ForeignKey("user_tokens.id"))
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    ended_at: Mapped[float | None] = mapped_column(Float)


class ServerSecret(Base):
    """Secrets every server behind one database must share (the session-cookie signing key)."""

    __tablename__ = "server_secrets"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))
