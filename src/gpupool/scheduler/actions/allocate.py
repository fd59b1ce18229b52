"""Allocate: walk the queue in order and start every job whose whole gang fits now."""

from __future__ import annotations

from gpupool.domain.decisions import StartJob
from gpupool.scheduler.session import Session


def run(session: Session) -> None:
    still_waiting = []
    for job in session.queue:
        placements = session.try_place_gang(job)
        if placements is None:
            still_waiting.append(job)
            continue
        session.starts.append(StartJob(job.id, placements))
    session.queue = still_waiting
