"""Start-up after a crash: re-adopt workers that still run, finish half-done launches.

Workers are adopted through the handles in the store (their supervisors outlive the head);
a worker that was written as launching but never recorded is looked up by its run directory.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from gpupool.clock import Clock
from gpupool.domain.jobs import JobState
from gpupool.executors.base import Executor
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database
from gpupool.store.orm import JobRow
from gpupool.store.transitions import add_event, transition_job

log = logging.getLogger("gpupool.controller")


def recover(db: Database, executor: Executor, clock: Clock) -> set[int]:
    """Returns the ids of active jobs, for the monitor to judge once."""
    now = clock.now()
    with db.tx() as s:
        live = worker_repo.live_workers(s)
    adopted = lost = 0
    for w in live:
        if w.handle is not None:
            adopted += 1
            continue
        try:
            handle = executor.find(w.placement.node, w.job_id, w.attempt, w.placement.worker)
        except Exception:  # its node is gone: the worker never ran, or was fenced with its node
            log.exception("looking up worker %s of job %s failed; counting it lost", w.placement.worker, w.job_id)
            handle = None
        with db.tx() as s:
            if handle is not None:
                worker_repo.mark_launched(s, w.id, handle, now)
                adopted += 1
            else:
                worker_repo.record_exit(s, w.id, None, True, now, reason="never launched: the head restarted first")
                lost += 1
    with db.tx() as s:
        active = list(s.scalars(select(JobRow).where(JobRow.state.in_(("starting", "running")))))
        for row in active:
            if row.state == JobState.STARTING.value:
                attempt = worker_repo.attempt_workers(s, row.id, row.starts)
                if attempt and all(w.status.value == "lost" and w.handle is None for w in attempt):
                    # Nothing was launched: give the job back to the queue without counting a restart.
                    message = "the head restarted before launching; requeued"
                    transition_job(s, row, JobState.PENDING, now, message, kind="requeued")
                    continue
                transition_job(s, row, JobState.RUNNING, now, "re-adopted after a head restart")
            else:
                add_event(
                    s,
                    now,
                    kind="readopted",
                    job_id=row.id,
                    message="re-adopted after a head restart: its workers kept running",
                )
        ids = {r.id for r in active}
    if live:
        log.info("recovery: %d workers re-adopted, %d never launched", adopted, lost)
    return ids
