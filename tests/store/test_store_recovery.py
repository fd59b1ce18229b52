"""A restarted head settles the jobs it left starting or running (``store/recovery.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpupool.domain.jobs import JobSpec, JobState, Placement
from gpupool.domain.launch import WorkerHandle
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.store import jobs, nodes, recovery, workers
from gpupool.store.db import Database
from tests.support.store import move

HANDLE = WorkerHandle(31337, "/data/runs/job-1/attempt-1/worker-0")


def test_settle_active_jobs_after_a_restart(db: Database, now: datetime) -> None:
    never_launched, launched, running, finished = (start(db, now, gpu=i) for i in range(4))
    with db.tx() as session:
        (w,) = workers.attempt_workers(session, never_launched, 1)
        workers.record_exit(session, w.id, None, True, now, reason="never launched: the head restarted first")
        for job_id in (launched, running, finished):
            (w,) = workers.attempt_workers(session, job_id, 1)
            workers.mark_launched(session, w.id, HANDLE, now)
    move(db, running, now, JobState.RUNNING)
    move(db, finished, now, JobState.RUNNING, JobState.SUCCEEDED)

    later = now + timedelta(minutes=1)
    with db.tx() as session:
        active = recovery.settle_active_jobs(session, later)
    with db.tx() as session:
        states = {j: jobs.get_job(session, j).state for j in (never_launched, launched, running, finished)}
        kinds = {j: [e.kind for e in jobs.job_events(session, j)][-1] for j in (never_launched, launched, running)}

    assert active == {never_launched, launched, running}
    assert states == {
        never_launched: JobState.PENDING,
        launched: JobState.RUNNING,
        running: JobState.RUNNING,
        finished: JobState.SUCCEEDED,
    }
    assert kinds == {never_launched: "requeued", launched: "running", running: "readopted"}


def start(db: Database, now: datetime, gpu: int) -> int:
    """A one-worker job, written as starting on GPU ``gpu`` of n1 (its worker launching)."""
    gpus = tuple(GpuInfo(index=i, uuid=f"n1-{i}", model="L4", memory_mib=24_000, simulated=True) for i in range(4))
    with db.tx() as session:
        nodes.register_nodes(
            session, [Node(name="n1", state=NodeState.UP, address="n1", gpus=gpus, cpus=16, memory_mib=64_000)], now
        )
        job_id = jobs.insert_job(session, JobSpec.create(command=["train"], gpus=1), "alice", now).id
    with db.tx() as session:
        workers.begin_start(session, job_id, (Placement(worker=0, node="n1", gpus=(gpu,)),), now)
    return job_id
