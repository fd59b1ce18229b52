"""What a restarted head finds in the store: the jobs that were starting or running when it
stopped. ``controller/recovery.py`` re-adopts their workers first (through the executor, with no
transaction open), then settles the jobs here in one transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobState
from gpupool.domain.records import WorkerStatus
from gpupool.store import workers as worker_repo
from gpupool.store.orm import JobRow
from gpupool.store.transitions import add_event, transition_job

ACTIVE = (JobState.STARTING.value, JobState.RUNNING.value)


def settle_active_jobs(session: Session, now: datetime) -> set[int]:
    """A starting job none of whose workers was launched goes back to the queue without counting
    a restart; another starting job is running now; a running one gets a ``readopted`` event.
    Returns the ids of all of them, for the monitor to judge once."""
    active = list(session.scalars(select(JobRow).where(JobRow.state.in_(ACTIVE))))
    for row in active:
        if row.state == JobState.STARTING.value:
            attempt = worker_repo.attempt_workers(session, row.id, row.starts)
            if attempt and all(w.status is WorkerStatus.LOST and w.handle is None for w in attempt):
                # Nothing was launched: give the job back to the queue without counting a restart.
                message = "the head restarted before launching; requeued"
                transition_job(session, row, JobState.PENDING, now, message, kind="requeued")
                continue
            transition_job(session, row, JobState.RUNNING, now, "re-adopted after a head restart")
        else:
            add_event(
                session,
                now,
                kind="readopted",
                job_id=row.id,
                message="re-adopted after a head restart: its workers kept running",
            )
    return {r.id for r in active}
