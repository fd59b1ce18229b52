"""Worker rows and the scheduler snapshot: GPUs are held by live workers, whatever the job's state."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from gpupool.domain.errors import Conflict
from gpupool.domain.jobs import JobState, Placement
from gpupool.domain.launch import WorkerHandle
from gpupool.domain.records import WorkerStatus
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.store import jobs, workers
from gpupool.store.db import Database
from gpupool.store.snapshot import load_snapshot
from tests.support.store import move, node, submit

GANG = (
    Placement(worker=1, node="n2", gpus=(0, 1), cpus=(0, 1, 2, 3), memory_mib=4096),
    Placement(worker=0, node="n1", gpus=(2, 3), cpus=(4, 5, 6, 7), memory_mib=4096),
)
SHARE = (Placement(worker=0, node="n1", gpus=(1,), gpu_share=0.25),)


def test_begin_start_writes_placements_before_launch(db: Database, now: datetime) -> None:
    job_id = submit(db, now, gpus=2, workers=2)
    with db.tx() as session:
        ticket = workers.begin_start(session, job_id, GANG, now)
    assert ticket.attempt == 1 and not ticket.preempted
    assert [p for _, p in ticket.workers] == list(GANG)
    with db.tx() as session:
        job = jobs.get_job(session, job_id)
        rows = workers.attempt_workers(session, job_id, 1)
        live = workers.live_workers(session)
        (*_, starting, placed) = jobs.job_events(session, job_id)
    assert (job.state, job.starts) == (JobState.STARTING, 1)
    assert job.placements == tuple(sorted(GANG, key=lambda p: p.worker))
    assert [r.placement for r in rows] == list(job.placements)
    assert all(r.status is WorkerStatus.LAUNCHING and r.handle is None and r.started_at is None for r in rows)
    assert sorted(live, key=lambda r: r.placement.worker) == rows
    assert (starting.kind, starting.message) == ("starting", "starting attempt 1")
    assert (placed.kind, placed.node) == ("placed", None)  # two nodes
    assert placed.message == "attempt 1: worker 0 on n1 GPUs 2,3; worker 1 on n2 GPUs 0,1"


def test_begin_start_of_a_job_that_is_not_pending_is_refused(db: Database, now: datetime) -> None:
    job_id = submit(db, now)
    with db.tx() as session:
        workers.begin_start(session, job_id, SHARE, now)
    with pytest.raises(Conflict) as info, db.tx() as session:
        workers.begin_start(session, job_id, SHARE, now)
    assert info.value.code == "invalid_state"
    with db.tx() as session:
        assert len(workers.live_workers(session)) == 1


def test_launch_and_exit_of_a_worker(db: Database, now: datetime) -> None:
    job_id = submit(db, now, gpus=0.25)
    launched, ended = now + timedelta(seconds=2), now + timedelta(hours=1)
    handle = WorkerHandle(31337, "/data/runs/job-1/attempt-1/worker-0", gpu=0, gpu_limit_mib=4000, job=1, port=8000)
    with db.tx() as session:
        workers.begin_start(session, job_id, SHARE, now)
    with db.tx() as session:
        (w,) = workers.attempt_workers(session, job_id, 1)
        workers.mark_launched(session, w.id, handle, launched)
    with db.tx() as session:
        (w,) = workers.attempt_workers(session, job_id, 1)
    assert (w.status, w.handle, w.started_at) == (WorkerStatus.RUNNING, handle, launched)
    assert w.placement == SHARE[0]

    with db.tx() as session:
        workers.record_exit(session, w.id, 137, lost=False, now=ended)
    with db.tx() as session:
        # A second report of the same exit is ignored.
        workers.record_exit(session, w.id, 0, lost=True, now=ended + timedelta(seconds=1))
    with db.tx() as session:
        (w,) = workers.attempt_workers(session, job_id, 1)
        exits = [e for e in jobs.job_events(session, job_id) if e.kind == "worker_exit"]
        assert workers.live_workers(session) == []
    assert (w.status, w.exit_code, w.finished_at) == (WorkerStatus.EXITED, 137, ended)
    assert len(exits) == 1 and "exited with code 137" in exits[0].message and exits[0].node == "n1"


def test_lost_worker(db: Database, now: datetime) -> None:
    job_id = submit(db, now)
    with db.tx() as session:
        workers.begin_start(session, job_id, SHARE, now)
    with db.tx() as session:
        (w,) = workers.live_workers(session)
        workers.record_exit(session, w.id, None, lost=True, now=now)
    with db.tx() as session:
        (w,) = workers.attempt_workers(session, job_id, 1)
        (*_, ev) = jobs.job_events(session, job_id)
    assert (w.status, w.exit_code) == (WorkerStatus.LOST, None)
    assert (ev.kind, ev.node) == ("lost", "n1")
    assert ev.message == "worker 0 on n1 was lost (its supervisor vanished)"  # its node is up


def test_a_retry_shows_only_the_current_attempt(db: Database, now: datetime) -> None:
    job_id = submit(db, now, gpus=2, workers=2)
    with db.tx() as session:
        workers.begin_start(session, job_id, GANG, now)
    with db.tx() as session:
        for w in workers.live_workers(session):
            workers.record_exit(session, w.id, None, lost=True, now=now)
    move(db, job_id, now, JobState.PENDING)
    retry = (Placement(worker=0, node="n2", gpus=(2, 3)), Placement(worker=1, node="n2", gpus=(0, 1)))
    with db.tx() as session:
        assert workers.begin_start(session, job_id, retry, now).attempt == 2
    with db.tx() as session:
        job = jobs.get_job(session, job_id)
        first = workers.attempt_workers(session, job_id, 1)
    assert job.placements == retry
    assert [w.status for w in first] == [WorkerStatus.LOST, WorkerStatus.LOST]


def test_snapshot_of_nodes_running_and_pending_jobs(db: Database, now: datetime) -> None:
    waiting = submit(db, now, gpus=4)
    gang = submit(db, now + timedelta(seconds=1), gpus=2, workers=2)
    share = submit(db, now + timedelta(seconds=2), gpus=0.25)
    with db.tx() as session:
        workers.begin_start(session, gang, GANG, now)
        workers.begin_start(session, share, SHARE, now)
    move(db, gang, now + timedelta(seconds=3), JobState.RUNNING)
    with db.tx() as session:
        snap = load_snapshot(session, now + timedelta(seconds=4))
        specs = {j: jobs.get_job(session, j).spec for j in (waiting, gang, share)}
    assert snap.now == now + timedelta(seconds=4)
    assert snap.nodes == (node("n1"), node("n2"))
    assert snap.pending == (PendingJob(id=waiting, spec=specs[waiting], submitted_at=now, restarts=0, owner="alice"),)
    assert snap.running == (
        RunningJob(
            id=gang,
            spec=specs[gang],
            placements=tuple(sorted(GANG, key=lambda p: p.worker)),
            started_at=now + timedelta(seconds=3),
            owner="alice",
        ),
        RunningJob(id=share, spec=specs[share], placements=SHARE, started_at=None, owner="alice"),
    )


def test_a_cancelled_job_holds_its_gpus_until_its_worker_exits(db: Database, now: datetime) -> None:
    job_id = submit(db, now, gpus=2, workers=2)
    with db.tx() as session:
        workers.begin_start(session, job_id, GANG, now)
    with db.tx() as session:
        for w in workers.live_workers(session):
            workers.mark_launched(session, w.id, WorkerHandle(w.id, f"/runs/{w.id}"), now)
    move(db, job_id, now, JobState.RUNNING)
    with db.tx() as session:
        assert jobs.request_cancel(session, job_id, now, by="bob").cancel_requested
    move(db, job_id, now, JobState.CANCELLED)  # the kill was sent; the processes may not be gone yet

    with db.tx() as session:
        snap = load_snapshot(session, now)
        assert jobs.get_job(session, job_id).state is JobState.CANCELLED
    assert [r.id for r in snap.running] == [job_id]
    assert {(p.node, p.gpus) for p in snap.running[0].placements} == {("n1", (2, 3)), ("n2", (0, 1))}
    assert snap.pending == ()

    with db.tx() as session:
        first, second = workers.live_workers(session)
        workers.record_exit(session, first.id, -15, lost=False, now=now)
    with db.tx() as session:
        snap = load_snapshot(session, now)
    assert [(r.id, len(r.placements)) for r in snap.running] == [(job_id, 1)]

    with db.tx() as session:
        workers.record_exit(session, second.id, -9, lost=False, now=now)
    with db.tx() as session:
        assert load_snapshot(session, now).running == ()
