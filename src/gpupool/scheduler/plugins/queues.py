"""Queue order: which queue a pending job joins, and which queue offers its next job first.

``fair_share``: a queue per project; the project furthest below its fair share goes first.
``single``: one queue for every project, in job order alone (what FIFO means)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.session import Session


@dataclass(frozen=True, slots=True)
class QueueOrder:
    key: Callable[[PendingJob], str]  # the queue a job joins
    rank: Callable[[Session, str], tuple[float, str]]  # of a queue, now: smaller goes first


def by_project(job: PendingJob) -> str:
    return job.spec.project


def one_queue(job: PendingJob) -> str:
    return ""


def below_fair_share(session: Session, name: str) -> tuple[float, str]:
    """The project furthest below its fair share, as a fraction of it, then by name. Its load is
    the mean of what it holds now and what it held on average lately (the decayed usage), so a
    project that used much recently yields to one that did not."""
    return rank_holding(session, name, session.allocated.get(name, 0.0))


def rank_holding(session: Session, name: str, allocated: float) -> tuple[float, str]:
    """``below_fair_share`` of the project were it to hold ``allocated`` GPUs now (``displace``
    asks where a project would rank once its jobs are stopped)."""
    share = session.shares.get(name, 0.0)
    load = 0.5 * allocated + 0.5 * session.snapshot.recent_usage.get(name, 0.0)
    below = (share - load) / share if share > 0 else -1.0 - load
    return (-below, name)


def unranked(session: Session, name: str) -> tuple[float, str]:
    return (0.0, name)


FAIR_SHARE = QueueOrder(by_project, below_fair_share)
SINGLE = QueueOrder(one_queue, unranked)
