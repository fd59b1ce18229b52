"""Each user's use of each project: what they hold now, what waits, and what they held lately.

Within a project the scheduler lets the jobs of whoever used less go first; the recent part is
the same decayed average as a project's (``projects.accrue_usage``), kept per (project, user)
in ``user_usage`` and folded in by the controller at the same step."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobState
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.domain.usage import decayed_average
from gpupool.store.orm import JobRow, UserUsageRow, WorkerRow

UserKey = tuple[str, str]  # (project, user)
# A user whose recent use decayed below this (and who holds nothing) is forgotten: the row would
# weigh nothing, and the table stays as small as the set of people who used a project lately.
FORGET_BELOW = 1e-3


@dataclass(frozen=True, slots=True)
class Waiting:
    gpus: float
    jobs: int


@dataclass(frozen=True, slots=True)
class UserUse:
    """One user's part of a project, as ``gpupool projects`` shows it."""

    user: str
    allocated: float  # GPUs held now
    recent_usage: float  # GPUs held on average lately
    pending: float  # GPUs asked for by pending jobs
    pending_jobs: int

    @property
    def load(self) -> float:
        """What the scheduler orders the project's users by (``plugins.users``): least first."""
        return 0.5 * self.allocated + 0.5 * self.recent_usage


def held(session: Session) -> dict[UserKey, float]:
    """GPUs held by live workers, by the project and owner of their job (a share by its size)."""
    holding: dict[UserKey, float] = defaultdict(float)
    rows = session.execute(
        select(JobRow.project, JobRow.owner, WorkerRow.gpus, WorkerRow.gpu_share)
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .where(WorkerRow.status.in_(LIVE_WORKER_STATES))
    )
    for project, owner, gpus, share in rows:
        holding[(project, owner)] += share if share else len(gpus)
    return dict(holding)


def waiting(session: Session) -> dict[UserKey, Waiting]:
    """GPUs asked for by pending jobs, and how many jobs, by project and owner."""
    gpus: dict[UserKey, float] = defaultdict(float)
    jobs: dict[UserKey, int] = defaultdict(int)
    rows = session.execute(
        select(JobRow.project, JobRow.owner, JobRow.gpus, JobRow.workers).where(JobRow.state == JobState.PENDING.value)
    )
    for project, owner, per_worker, workers in rows:
        gpus[(project, owner)] += per_worker * workers
        jobs[(project, owner)] += 1
    return {key: Waiting(gpus[key], jobs[key]) for key in gpus}


def recent(session: Session) -> dict[UserKey, float]:
    """GPUs each user held in each project on average lately (the scheduler's snapshot reads it)."""
    return {(r.project, r.user): r.recent_gpus for r in session.scalars(select(UserUsageRow))}


def accrue(session: Session, holding: dict[UserKey, float], now: datetime, half_life_s: float) -> None:
    """Fold what each user holds in each project now into their recent average (the controller
    calls it with ``held``, in the step that accrues projects' usage)."""
    rows = {(r.project, r.user): r for r in session.scalars(select(UserUsageRow))}
    for key in rows.keys() | holding.keys():
        now_held = holding.get(key, 0.0)
        row = rows.get(key)
        if row is None:
            session.add(UserUsageRow(project=key[0], user=key[1], recent_gpus=now_held, updated_at=now))
            continue
        elapsed = (now - row.updated_at).total_seconds()
        row.recent_gpus = decayed_average(row.recent_gpus, now_held, elapsed, half_life_s)
        row.updated_at = now
        if row.recent_gpus < FORGET_BELOW and not now_held:
            session.delete(row)


def by_project(session: Session) -> dict[str, tuple[UserUse, ...]]:
    """Every user who holds, waits for or lately used GPUs of a project, in the order the
    scheduler lets their jobs go within a priority class: least load first, then by name."""
    holding, queued, lately = held(session), waiting(session), recent(session)
    users: dict[str, list[UserUse]] = defaultdict(list)
    for project, user in holding.keys() | queued.keys() | lately.keys():
        wait = queued.get((project, user), Waiting(0.0, 0))
        use = UserUse(user, holding.get((project, user), 0.0), lately.get((project, user), 0.0), wait.gpus, wait.jobs)
        users[project].append(use)
    return {project: tuple(sorted(uses, key=lambda u: (u.load, u.user))) for project, uses in users.items()}
