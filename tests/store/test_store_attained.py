"""A job's attained GPU time in the head's snapshot: the GPU-seconds its earlier attempts' workers
held, read from their rows, which stay as history when it is requeued (the ``las`` order)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpupool.domain.jobs import JobState, Placement
from gpupool.domain.launch import WorkerHandle
from gpupool.store import workers
from gpupool.store.db import Database
from gpupool.store.snapshot import SpecCache, load_snapshot
from tests.support.store import move, submit

GANG = (
    Placement(worker=0, node="n1", gpus=(0, 1), cpus=(0,), memory_mib=1024),
    Placement(worker=1, node="n2", gpus=(0, 1), cpus=(0,), memory_mib=1024),
)


def run_attempt(db: Database, job_id: int, attempt: int, start: datetime, end: datetime | None) -> None:
    with db.tx() as session:
        workers.begin_start(session, job_id, GANG, start)
    with db.tx() as session:
        for w in workers.attempt_workers(session, job_id, attempt):
            workers.mark_launched(session, w.id, WorkerHandle(1, f"/runs/{w.id}"), start)
    move(db, job_id, start, JobState.RUNNING)
    if end is None:
        return
    with db.tx() as session:
        for w in workers.attempt_workers(session, job_id, attempt):
            workers.record_exit(session, w.id, -15, False, end)
    move(db, job_id, end, JobState.PREEMPTED, JobState.PENDING)


def test_a_requeued_job_keeps_the_gpu_seconds_of_its_earlier_attempts(db: Database, now: datetime) -> None:
    job_id = submit(db, now, gpus=2, workers=2)
    hour = timedelta(hours=1)
    run_attempt(db, job_id, 1, now, now + hour)  # 4 GPUs for an hour
    cache = SpecCache()
    with db.tx() as session:
        (job,) = load_snapshot(session, now + 2 * hour, cache).pending
    assert (job.attained, job.waiting_since) == (4 * 3600.0, now + hour)
    run_attempt(db, job_id, 2, now + 2 * hour, None)
    with db.tx() as session:
        snap = load_snapshot(session, now + 3 * hour, cache)
    (running,) = snap.running
    assert snap.pending == ()
    assert running.attained == 4 * 3600.0  # the first attempt's; the current one's counts from started_at
    assert running.started_at == now + 2 * hour


def test_a_job_that_never_ran_has_received_nothing(db: Database, now: datetime) -> None:
    submit(db, now, gpus=1)
    with db.tx() as session:
        (job,) = load_snapshot(session, now).pending
    assert (job.attained, job.waiting_since) == (0.0, None)
