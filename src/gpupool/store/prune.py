"""Finished jobs leave: after ``--keep-finished`` a job that ended goes with its workers, events,
idle spells and idempotency keys (alerts keep their history, without the job). The nodes delete
its run directories and logs (``Executor.forget``). Oldest first, a batch at a time."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from gpupool.domain.jobs import TERMINAL_STATES
from gpupool.store.orm import EventRow, IdempotencyKeyRow, JobRow, WorkerRow
from gpupool.store.orm_telemetry import AlertRow, IdleSpellRow
from gpupool.store.transitions import add_event

BATCH = 500


def prune_finished(session: Session, before: datetime, now: datetime) -> dict[str, list[int]]:
    """Delete up to ``BATCH`` jobs that finished before ``before``; the ids removed, by the nodes
    their workers ran on (a job that never ran is under the empty name)."""
    ids = list(
        session.scalars(
            select(JobRow.id)
            .where(JobRow.state.in_([s.value for s in TERMINAL_STATES]), JobRow.finished_at < before)
            .order_by(JobRow.finished_at)
            .limit(BATCH)
        )
    )
    if not ids:
        return {}
    by_node: dict[str, list[int]] = {}
    ran_on = select(WorkerRow.node, WorkerRow.job_id).where(WorkerRow.job_id.in_(ids)).distinct()
    for node, job_id in session.execute(ran_on):
        by_node.setdefault(node, []).append(job_id)
    ran = {j for jobs in by_node.values() for j in jobs}
    if len(ran) < len(ids):
        by_node[""] = [j for j in ids if j not in ran]
    session.execute(update(AlertRow).where(AlertRow.job_id.in_(ids)).values(job_id=None))
    for table in (EventRow, WorkerRow, IdleSpellRow):
        session.execute(delete(table).where(table.job_id.in_(ids)))
    session.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.job_id.in_(ids)))
    session.execute(delete(JobRow).where(JobRow.id.in_(ids)))
    add_event(
        session,
        now,
        kind="jobs_pruned",
        message=f"{len(ids)} job(s) finished before {before:%Y-%m-%d %H:%M} UTC deleted",
    )
    return by_node


def log_owners(session: Session, job_ids: list[int]) -> dict[int, tuple[str, datetime | None]]:
    """Each known job's owner, and when it finished (None while it has not): ``--max-user-logs``."""
    found: dict[int, tuple[str, datetime | None]] = {}
    terminal = {s.value for s in TERMINAL_STATES}
    for start in range(0, len(job_ids), BATCH):
        chunk = job_ids[start : start + BATCH]
        rows = session.execute(
            select(JobRow.id, JobRow.owner, JobRow.state, JobRow.finished_at).where(JobRow.id.in_(chunk))
        )
        for job_id, owner, state, finished_at in rows:
            found[job_id] = (owner, finished_at if state in terminal else None)
    return found
