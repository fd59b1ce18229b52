"""Build the scheduler's frozen snapshot in one short read transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.store.convert import placement_of, spec_of
from gpupool.store.nodes import load_nodes
from gpupool.store.orm import JobRow, WorkerRow

LIVE = ("launching", "running")


def load_snapshot(session: Session, now: datetime) -> Snapshot:
    """Resources are held by live worker rows, not by job states: a cancelled job whose process
    has not died yet still holds its GPUs, so nothing is handed out twice."""
    nodes = tuple(load_nodes(session))
    by_job: dict[int, list[WorkerRow]] = {}
    for w in session.scalars(select(WorkerRow).where(WorkerRow.status.in_(LIVE))):
        by_job.setdefault(w.job_id, []).append(w)
    holding = {r.id: r for r in session.scalars(select(JobRow).where(JobRow.id.in_(list(by_job))))} if by_job else {}
    running = tuple(
        RunningJob(
            id=job_id,
            spec=spec_of(holding[job_id]),
            placements=tuple(placement_of(w) for w in sorted(ws, key=lambda w: w.worker)),
            started_at=holding[job_id].started_at,
        )
        for job_id, ws in sorted(by_job.items())
    )
    pending = tuple(
        PendingJob(id=r.id, spec=spec_of(r), submitted_at=r.submitted_at, restarts=r.restarts)
        for r in session.scalars(select(JobRow).where(JobRow.state == "pending").order_by(JobRow.id))
    )
    return Snapshot(now=now, nodes=nodes, running=running, pending=pending)
