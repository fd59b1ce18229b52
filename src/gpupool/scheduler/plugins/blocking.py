"""Blocking: what the first job of a queue that cannot start now blocks behind it.

Called by allocate with the job's quota refusal (None when it passed the quota check but did not
fit the free resources); returns the queues that must wait behind it. A job that could never
start (more than the cluster, or than its quota) blocks nothing.

``reserve``: the first job that does not fit gets a reservation of the GPUs it will need; allocate
then leaves every job behind it to the backfill action, which starts only what cannot delay it
(without that action, none).
``all``: every queue waits behind it (strict FIFO).
``project``: only its own queue waits, also behind a job its project's quota holds back for now
(FIFO per project: static partitions).
``none``: nothing waits; every job that fits starts (greedy)."""

from __future__ import annotations

from collections.abc import Collection

from gpupool.domain.decisions import Reason
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.reservation import reserve
from gpupool.scheduler.session import Session


def reservation(
    session: Session, job: PendingJob, queue: str, queues: Collection[str], refusal: Reason | None
) -> Collection[str]:
    if refusal is None and session.reservation is None:
        session.reservation = reserve(session, job)
        if session.reservation is not None:
            session.keep_reserved(session.reservation)
    return ()


def every_queue(
    session: Session, job: PendingJob, queue: str, queues: Collection[str], refusal: Reason | None
) -> Collection[str]:
    return queues if refusal is None and session.ever_fits(job) else ()


def own_queue(
    session: Session, job: PendingJob, queue: str, queues: Collection[str], refusal: Reason | None
) -> Collection[str]:
    if refusal is not None:  # its partition is full for now: first in line there
        bound = session.project(job.spec.project).quota
        if session.nodes_of(job.spec.project) is not None:
            bound = session.partition_gpus.get(job.spec.project, 0)
        return (queue,) if job.spec.total_gpus <= bound + 1e-9 else ()
    return (queue,) if session.ever_fits(job) else ()


def nothing(
    session: Session, job: PendingJob, queue: str, queues: Collection[str], refusal: Reason | None
) -> Collection[str]:
    return ()
