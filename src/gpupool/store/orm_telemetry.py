"""The telemetry tables (0005, 0006, 0024): GPU samples and their per-minute aggregates, idle spells
and alerts; and the calibrated power curves (0022). Apart from ``orm.py`` only to keep each
module small; ``orm.py`` imports this one, so ``Base.metadata`` always holds them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpupool.store.orm_base import Base


class GpuSampleRow(Base):
    """Raw telemetry, every reading, kept for the recent window (0005). No foreign key to the
    node: the history outlives a node's rows, and samples are written in bulk, unchecked."""

    __tablename__ = "gpu_samples"
    __table_args__ = (Index("ix_gpu_samples_node_gpu_time", "node", "gpu", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(128))
    gpu: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str] = mapped_column(String(128))
    time: Mapped[datetime] = mapped_column(index=True)
    memory_used_mib: Mapped[int] = mapped_column(Integer)
    memory_total_mib: Mapped[int] = mapped_column(Integer)
    simulated: Mapped[bool] = mapped_column(Boolean)
    utilization_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    temperature_c: Mapped[float | None] = mapped_column(Float, nullable=True)
    power_w: Mapped[float | None] = mapped_column(Float, nullable=True)
    energy_j: Mapped[float | None] = mapped_column(Float, nullable=True)
    ecc_errors: Mapped[int | None] = mapped_column(Integer, nullable=True)
    xid_errors: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_xid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    power_limit_w: Mapped[float | None] = mapped_column(Float, nullable=True)  # the enforced limit (0024)


class GpuMinuteRow(Base):
    """One GPU's minute, aggregated from its raw samples as they age out; kept for days (0005)."""

    __tablename__ = "gpu_minutes"

    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu: Mapped[int] = mapped_column(Integer, primary_key=True)
    minute: Mapped[datetime] = mapped_column(primary_key=True, index=True)
    samples: Mapped[int] = mapped_column(Integer)
    memory_used_mib: Mapped[float] = mapped_column(Float)  # average
    memory_total_mib: Mapped[int] = mapped_column(Integer)
    utilization_pct: Mapped[float | None] = mapped_column(Float, nullable=True)  # average
    utilization_max_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    temperature_c: Mapped[float | None] = mapped_column(Float, nullable=True)  # peak
    power_w: Mapped[float | None] = mapped_column(Float, nullable=True)  # average
    energy_j: Mapped[float | None] = mapped_column(Float, nullable=True)  # the counter at the last sample
    power_limit_w: Mapped[float | None] = mapped_column(Float, nullable=True)  # the lowest in force (0024)
    # How many samples each average is over: a reading the GPU refused (None) is not a zero.
    utilization_samples: Mapped[int] = mapped_column(Integer)
    power_samples: Mapped[int] = mapped_column(Integer)


class IdleSpellRow(Base):
    """A held GPU's current run of low-utilisation readings (0006): one row per GPU at most,
    kept across head restarts so an idle timeout is not reset by one."""

    __tablename__ = "idle_spells"

    node: Mapped[str] = mapped_column(String(128), primary_key=True)
    gpu: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    since: Mapped[datetime] = mapped_column()
    utilization_pct: Mapped[float] = mapped_column(Float)


class AlertRow(Base):
    """An alert (0006): active while ``cleared_at`` is null. Cleared ones are kept a while as
    history (and for the ``gpupool_alerts_total`` counter)."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    node: Mapped[str] = mapped_column(String(128))
    gpu: Mapped[int | None] = mapped_column(Integer, nullable=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), nullable=True)
    message: Mapped[str] = mapped_column(Text)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    raised_at: Mapped[datetime] = mapped_column()
    updated_at: Mapped[datetime] = mapped_column()
    cleared_at: Mapped[datetime | None] = mapped_column(nullable=True, index=True)


class PowerCurveRow(Base):
    """A GPU model's calibrated power curve (0022, issue 33): what ``gpupool node calibrate-power``
    measured last, on one node; the model's jobs in ``efficient`` mode follow it everywhere."""

    __tablename__ = "power_curves"

    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    node: Mapped[str] = mapped_column(String(128))
    # [{kind, value, speed, energy, watts, rate}]: the first is the default (speed 1, energy 1)
    points: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    measured_at: Mapped[datetime] = mapped_column()
