"""Queue order: which queue a pending job joins, and which queue offers its next job first.

``fair_share``: a queue per project; the project furthest below its fair share goes first.
``single``: one queue for every project, in job order alone (what FIFO means)."""

from __future__ import annotations

from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler import fair_share
from gpupool.scheduler.hooks import QueueOrder, one_queue
from gpupool.scheduler.session import Session


def by_project(job: PendingJob) -> str:
    return job.spec.project


def below_fair_share(session: Session, name: str) -> tuple[float, str]:
    """The project furthest below its fair share, by what it holds now (``fair_share.rank_holding``)."""
    return fair_share.rank_holding(
        session.shares, session.snapshot.recent_usage, name, session.allocated.get(name, 0.0)
    )


def unranked(session: Session, name: str) -> tuple[float, str]:
    return (0.0, name)


FAIR_SHARE: QueueOrder[Session] = QueueOrder(by_project, below_fair_share)
SINGLE: QueueOrder[Session] = QueueOrder(one_queue, unranked)
