"""Start-up after a crash: re-adopt workers that still run, finish half-done launches.

Workers are adopted through the handles in the store (their supervisors outlive the head);
a worker that was written as launching but never recorded is looked up by its run directory.
"""

from __future__ import annotations

import logging

from gpupool.clock import Clock
from gpupool.executors.base import Executor
from gpupool.store import recovery as recovery_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database

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
        ids = recovery_repo.settle_active_jobs(s, now)
    if live:
        log.info("recovery: %d workers re-adopted, %d never launched", adopted, lost)
    return ids
