"""The reservation backfill protects: where and when the first job that does not fit will start.

Its start is estimated by giving back running jobs' GPUs in the order they are expected to end
(``started_at + max_runtime_s``; jobs without a max runtime last, at an unknown time).
"""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta

from gpupool.domain.jobs import Placement
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.reserved import Reservation as Reservation  # defined apart (the session holds one)
from gpupool.scheduler.session import Session


def expected_end(job: RunningJob) -> datetime | None:
    if job.started_at is None or job.spec.max_runtime_s is None:
        return None
    return job.started_at + timedelta(seconds=job.spec.max_runtime_s)


def reserve(session: Session, job: PendingJob) -> Reservation | None:
    """None when the job could not fit even on an empty cluster (or is fractional: shares are
    small and never reserved). Leaves the cluster state as it found it."""
    if job.spec.gpus < 1:
        return None
    now = session.snapshot.now
    # A heap, not a sort: the reserved job usually fits after the first few of thousands end.
    ending: list[tuple[bool, datetime, int, RunningJob]] = []
    for r in session.snapshot.running:
        end = expected_end(r)
        ending.append((end is None, end or now, r.id, r))  # ids are unique: jobs are never compared
    heapq.heapify(ending)
    released: list[RunningJob] = []
    until: datetime | None = now
    placed: tuple[Placement, ...] | None = None
    try:
        while ending:
            unknown, end, _, running = heapq.heappop(ending)
            for p in running.placements:
                session.cluster.give_back(p)
            released.append(running)
            until = None if unknown or until is None else max(until, end)
            placed = session.try_place_gang(job, commit=False)
            if placed is not None:
                break
    finally:
        for running in reversed(released):
            for p in running.placements:
                session.cluster.take(p)
    if placed is None:
        return None
    return Reservation(job.id, placed, until)
