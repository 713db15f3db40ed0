"""The tables the periodic jobs keep: the leader lease and the one-minute rollups. Imported through app.store.models, the one
name for the schema."""

from __future__ import annotations

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.store.base import Base


class Lease(Base):
    """Leader election among several servers: whoever holds an unexpired lease runs the detector/sender."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    expires_at: Mapped[float] = mapped_column(Float)


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
