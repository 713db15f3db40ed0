"""The incident tables: incidents and their change rows, the stack dumps the detector asks for, the
detector's saved state, and the alerting outbox (receivers, deliveries, attempts, silences). Imported through app.store.models, the one
name for the schema."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.store.base import Base, BigId


class Incident(Base):
    __tablename__ = "incidents"
    __table_args__ = (Index("ix_incidents_status_opened", "status", "opened_at"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    launch_id: Mapped[int | None] = mapped_column(ForeignKey("launches.id"), index=True)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id"))
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(
        String(16), default="open"
    )  # open | resolved | ended (with its launch)
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
