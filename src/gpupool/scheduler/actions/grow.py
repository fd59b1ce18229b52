"""Grow (issue 35): running elastic jobs below their maximum take more workers, one at a time,
into the GPUs the other actions left free, once nothing of equal or higher standing waits.

It runs last, so every waiting job had its turn: a job still waiting for resources (not for a
quota, a limit or power, which free GPUs would not help) of the same or a higher priority class
holds every elastic job of that class or below at its width, and one being given GPUs back from
borrowers (``reclaim``) holds all of them. Extra workers are borrowed capacity: they may go beyond
the project's quota, never beyond its limits (the project's, its units', its owner's, per model),
which the policy's quota check judges with the extras counted. Elastic jobs take turns in the
policy's job order (least attained service first under ``las``), each growing as far as it may
before the next. Without elastic jobs it returns at once.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import count

from gpupool.domain.decisions import GrowJob, ReasonCode
from gpupool.domain.jobs import Placement
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.extras import Extras
from gpupool.scheduler.session import Session

_NOT_FOR_GPUS = frozenset({ReasonCode.QUOTA, ReasonCode.LIMIT, ReasonCode.USER_LIMIT, ReasonCode.POWER})
_ANYONE = 1_000  # a standing above every priority class's rank


def run(session: Session) -> None:
    extras = session.extras
    if extras is None:
        return
    growable = [
        r
        for r in extras.jobs.values()
        if r.may_grow and r.id not in session.claimed and extras.width(r) < r.spec.most_workers
    ]
    if not growable:
        return
    bar = waiting_standing(session)
    growable = [r for r in growable if r.spec.priority.rank > bar]
    if not growable:
        return
    allocated, promised = dict(session.allocated), dict(session.user_promised)
    # The checks count the extra workers (those on their way back too) as the job's own: folded in
    # here, the quota check reads them once (``Extras.folded``), its quota under ``isolated`` too.
    session.allocated.update(extras.with_held(allocated))
    for figures in (extras.by_user, extras.apart_by_user):
        for key, gpus in figures.items():
            session.user_promised[key] = session.user_promised.get(key, 0.0) + gpus
    extras.folded = True
    try:
        for job in in_job_order(session, growable):
            _grow(session, extras, job)
    finally:  # the session's accounting stays that of minimums, as every other action reads it
        extras.folded = False
        session.allocated.clear()
        session.allocated.update(allocated)
        session.user_promised.clear()
        session.user_promised.update(promised)


def waiting_standing(session: Session) -> int:
    """The highest priority rank among jobs still waiting for resources (-1: none; above every
    rank where one waits for GPUs taken back from borrowers)."""
    bar = -1
    for job in session.queue:
        reason = session.reasons.get(job.id)
        if reason is not None and reason.code in _NOT_FOR_GPUS and job.id not in session.shrunk_for:
            continue
        if not session.ever_fits(job):
            continue
        rank = _ANYONE if reason is not None and reason.code is ReasonCode.RECLAIM else job.spec.priority.rank
        bar = max(bar, rank)
        if bar == _ANYONE:
            break
    return bar


def in_job_order(session: Session, jobs: list[RunningJob]) -> list[RunningJob]:
    """Running jobs in the policy's job order, as if they waited: the fair turn among elastic jobs."""
    order = session.hooks.job_order
    return sorted(jobs, key=lambda r: (order(_as_waiting(session, r)), r.id))


def _as_waiting(session: Session, job: RunningJob) -> PendingJob:
    """``job`` as the job order reads a waiting job: since its start, with what this run received."""
    now = session.snapshot.now
    since = job.started_at or now
    ran = max(0.0, (now - since).total_seconds()) * job.spec.gpus * job.width
    return PendingJob(job.id, job.spec, since, owner=job.owner, attained=job.attained + ran)


def _grow(session: Session, extras: Extras, job: RunningJob) -> None:
    spec = job.spec
    one = PendingJob(
        job.id, replace(spec, workers=1, max_workers=None), job.started_at or session.snapshot.now, owner=job.owner
    )
    numbers = count(max(job.next_worker, 1 + max((p.worker for p in job.placements), default=-1)))
    added: list[Placement] = []
    while extras.width(job) + len(added) < spec.most_workers:
        if session.hooks.quota_check(session, one) is not None:
            break
        placed = session.try_place_gang(one)
        if placed is None:
            break
        if session.power is not None and session.power.admit(one, placed) != (None, None):
            for p in reversed(placed):  # no power for it (or only capped, which a grow cannot say)
                session.cluster.give_back(p)
            break
        worker = replace(placed[0], worker=next(numbers))
        added.append(worker)
        session.allocated[spec.project] = session.allocated.get(spec.project, 0.0) + spec.gpus
        mine = (spec.project, job.owner)
        session.user_promised[mine] = session.user_promised.get(mine, 0.0) + spec.gpus
        if session.per_model is not None:
            session.per_model.add(spec.project, [worker])
    if added:
        extras.count(job, len(added))
        nodes = ", ".join(sorted({p.node for p in added}))
        width = extras.width(job) + len(added)
        session.grows.append(GrowJob(job.id, tuple(added), f"grew to {width} workers: GPUs free on {nodes}"))


def grow_note(session: Session, job: RunningJob) -> str | None:
    """What ``why`` says of a running elastic job (None: not elastic): its width against its range,
    and when it would grow."""
    spec = job.spec
    if not spec.elastic:
        return None
    said = f"at {job.width} of {spec.workers_text} workers"
    if job.width >= spec.most_workers:
        return f"{said}: at its maximum"
    said += ": it grows when GPUs are free and no job of equal or higher priority waits"
    if spec.priority.rank <= waiting_standing(session):
        said += " (one waits now)"
    return said
