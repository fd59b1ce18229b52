"""Accounting reads: the worker intervals, job starts and GPU readings a report needs."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpupool.domain.accounting import JobStart, Reading, WorkerSpan
from gpupool.domain.power import PowerCurve, default_curve
from gpupool.domain.telemetry import Resolution
from gpupool.store import power_curves as curve_repo
from gpupool.store import telemetry as telemetry_repo
from gpupool.store.orm import GpuRow, JobRow, ProjectRow, WorkerRow

# A GPU family's default power limit (W), for placing a watts mode on its default curve where a
# GPU reported none of its own (GpuInfo.power_default_w). Simulated GPUs are named after these.
FAMILY_DEFAULT_W = {"H200": 700, "H100": 700, "A100": 400, "L40S": 350, "L4": 72}


def worker_spans(session: Session, since: datetime, until: datetime) -> list[WorkerSpan]:
    """Every worker that held GPUs at some time in [since, until], with its job's project and owner."""
    query = (
        select(WorkerRow, JobRow.project, JobRow.owner, JobRow.gpu_power)
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .where(
            WorkerRow.started_at.is_not(None),
            WorkerRow.started_at < until,
            or_(WorkerRow.finished_at.is_(None), WorkerRow.finished_at > since),
        )
        .order_by(WorkerRow.id)
    )
    spans = []
    defaults = {name: mode for name, mode in session.execute(select(ProjectRow.name, ProjectRow.gpu_power))}
    for w, project, owner, asked in session.execute(query):
        gpu_power = asked or defaults.get(project)  # a job without a mode ran in its project's
        if not w.gpus or w.started_at is None:
            continue
        share = w.gpu_share if w.gpu_share > 0 else 1.0
        spans.append(
            WorkerSpan(w.job_id, project, owner, w.node, tuple(w.gpus), share, w.started_at, w.finished_at, gpu_power)
        )
    return spans


def job_starts(session: Session, since: datetime, until: datetime) -> list[JobStart]:
    """Jobs whose (latest) start lies in [since, until]."""
    query = select(JobRow.id, JobRow.project, JobRow.owner, JobRow.submitted_at, JobRow.started_at).where(
        JobRow.started_at.is_not(None), JobRow.started_at >= since, JobRow.started_at <= until
    )
    return [
        JobStart(job_id, project, owner, submitted, started)
        for job_id, project, owner, submitted, started in session.execute(query.order_by(JobRow.id))
        if started is not None
    ]


def readings(
    session: Session, spans: list[WorkerSpan], since: datetime, until: datetime
) -> dict[tuple[str, int], list[Reading]]:
    """The readings of every GPU the workers held, by (node, index), sorted by time: raw samples
    where the window is still at full rate, else minute aggregates (stamped at the minute's start,
    with the minute's mean utilisation and its last energy reading)."""
    wanted = {(s.node, i) for s in spans for i in s.gpus}
    out: dict[tuple[str, int], list[Reading]] = {}
    for node in sorted({n for n, _ in wanted}):
        used, points = telemetry_repo.history(session, node, None, since, until, Resolution.AUTO)
        span = 60.0 if used is Resolution.MINUTE else 0.0
        for p in points:
            if (node, p.index) in wanted:
                out.setdefault((node, p.index), []).append(Reading(p.time, p.utilization_pct, p.energy_j, span))
    for series in out.values():
        series.sort(key=lambda r: r.time)
    return out


def power_curves(session: Session, spans: list[WorkerSpan]) -> dict[tuple[str, int], PowerCurve]:
    """The power curve of each GPU a job with a power mode held, by (node, index): its model's
    calibrated curve (``gpupool node calibrate-power``), else its family's documented default
    (``default_curve``) at the default limit the GPU reported; a GPU of an unknown family that
    reported none gets none (its saving is not estimated)."""
    wanted = {(s.node, i) for s in spans if s.gpu_power is not None for i in s.gpus}
    if not wanted:
        return {}
    calibrated = curve_repo.curves(session)
    out: dict[tuple[str, int], PowerCurve] = {}
    rows = session.execute(select(GpuRow.node, GpuRow.index, GpuRow.model, GpuRow.power_default_w))
    for node, index, model, default_w in rows:
        family = next((f for f in FAMILY_DEFAULT_W if f in model.upper()), None)
        default_w = default_w or (FAMILY_DEFAULT_W[family] if family is not None else None)
        if (node, index) in wanted and (model in calibrated or default_w):
            out[(node, index)] = calibrated.get(model) or default_curve(model, int(default_w or 0))
    return out
