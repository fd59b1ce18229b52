"""Reclaim: a project below its quota with work waiting takes GPUs back from projects that
borrowed beyond theirs, preempting the fewest, most recently started over-quota train jobs,
and never taking a lender below its own quota.

In a tree of projects (issue 34, ``Levels.lenders``) GPUs go back to the level that lent them,
and the claim is made at every level of the waiting job's path, its project's first: each level
takes back from the branches beside it that hold beyond their quota, only what it is owed (it
holds no more than its quota once the job holds its GPUs, what was taken inside it given back),
and no level of a lender's branch is taken below its quota. A job within its project's quota that
only a unit's limit holds back (a sibling borrowed the unit's quota) also takes back enough of
its siblings' GPUs to bring the unit back under its limit. A flat list is the one-level case:
exactly the rule above."""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import timedelta

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.durations import format_duration
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import user_limit
from gpupool.scheduler.actions import fair_reclaim, shrink
from gpupool.scheduler.session import Session
from gpupool.scheduler.victims import Enough, already_failed, stop_for, victims_for

Allowed = Callable[[list[RunningJob], RunningJob], bool]


def run(session: Session) -> None:
    # Candidates per reclaiming project, and those of them that ran the minimum: built once,
    # rebuilt only after victims change who borrows.
    candidates_of: dict[object, tuple[list[RunningJob], list[RunningJob]]] = {}
    allocated = session.allocated
    min_run_s = session.config.reclaim_min_run_s
    for job in session.queue:
        project = session.project(job.spec.project)
        if allocated.get(project.name, 0.0) + job.spec.total_gpus > project.quota + 1e-9:
            continue  # only GPUs within the quota are taken back (most of a queue: checked first)
        units = None  # the units at their limit that alone hold it back (issue 34), and by how much
        if session.policy_refused(job.id) and (units := _held_by_units(session, job)) is None:
            continue  # reclaim cannot help
        if user_limit.held_back(session, job):
            continue
        purpose = "reclaim" if units is None else "reclaim:unit"
        if already_failed(session, job, purpose) and not min_run_s:
            continue  # (with a minimum run, the job may still be told when young borrowers can go)
        owed = None
        if session.per_model is not None:  # issue 34 item 2: only GPUs of a model it is owed
            models, need = session.demand(job).models, job.spec.total_gpus
            owed = session.per_model.owed(project.name, models, need, session.cluster.models)
            if owed is not None and not owed:
                continue
        candidates, grown, keeps_quota, owes = _candidates(session, job, candidates_of, owed)
        enough = _both(None if units is None else _frees(session, units), owes)
        # (the GPUs its reservation keeps count as its own)
        victims, note = shrink.extras_first(  # elastic jobs' extra workers go first (issue 35)
            session,
            job,
            grown,
            keeps_quota,
            purpose=purpose,
            enough=enough,
            own_reservation=True,
        )
        if victims is None:
            if len(grown) < len(candidates):
                _wait_for_young(session, job, candidates, keeps_quota, enough)
            continue
        if victims:
            candidates_of.clear()
        lenders = sorted({v.spec.project for v in victims})
        stop_for(session, job, victims, _told(project.name, job.id))
        at = "" if not units else f" (unit {next(iter(units))} is at its limit)"
        message = (
            f"reclaim: stopping {len(victims)} job(s) of {', '.join(lenders)} that borrowed beyond "
            f"quota{at}{note}; starts when their GPUs are free"
            if victims
            else f"reclaim: waiting for jobs being stopped to free their GPUs{note}"
        )
        session.reasons[job.id] = Reason(ReasonCode.RECLAIM, message)
    fair_reclaim.run(session)  # beyond quotas, where --fair-reclaim asks (off by default)


def _candidates(
    session: Session,
    job: PendingJob,
    known_by: dict[object, tuple[list[RunningJob], list[RunningJob]]],
    owed: frozenset[str] | None = None,
) -> tuple[list[RunningJob], list[RunningJob], Allowed, Enough | None]:
    """The borrowers' running jobs ``job`` may take back (and those that ran the minimum), and
    the rule that keeps each lender at its quota; remembered in ``known_by`` per project (per
    project and size in a tree, where the level owed depends on the size). With per-model
    figures (``session.per_model``), ``owed``: the models whose GPUs it may take (None: any).
    In a tree, also what keeps every level that takes from outside it owed what it takes."""
    name, levels, min_run_s = job.spec.project, session.levels, session.config.reclaim_min_run_s
    per_model = session.per_model
    key: object = name if per_model is None else (name, owed)
    claims: dict[str, str] = {}  # in a tree: each lender, with the level of the path that claims from it
    borrowing: Collection[str] = ()
    if levels is not None:
        borrowing = claims = levels.lenders(name, job.spec.total_gpus, session.allocated)
        key = (name, job.spec.total_gpus, owed)
    known = known_by.get(key)
    if known is None:
        if levels is None:
            borrowing = {other for other in session.allocated if other != name and _borrowing(session, other)}
        every = [r for r in session.preemptible() if r.spec.project in borrowing] if borrowing else []
        if (
            levels is not None and claims
        ):  # the project's own level first, then up the path: a claim above needs those below
            depth = {level: i for i, level in enumerate((name, *levels.units_of(name)))}
            every.sort(key=lambda r: depth[claims[r.spec.project]])
        if per_model is not None and owed is not None:
            every = [r for r in every if per_model.holds_any(r, owed)]
        grown = [r for r in every if _ran_enough(session, r)] if min_run_s else every
        known = known_by[key] = (every, grown)

    def keeps_quota(chosen: list[RunningJob], victim: RunningJob) -> bool:
        lender = victim.spec.project
        if per_model is not None and not per_model.keeps(
            lender, [*(r for r in chosen if r.spec.project == lender), victim]
        ):
            return False
        if per_model is not None and levels is not None and not per_model.keeps_units(name, [*chosen, victim]):
            return False  # a unit above the lender, not above the claimer, keeps its per-model quota
        if per_model is not None and levels is None and lender in per_model.quotas:
            return True  # its per-model quotas are its guarantee (checked above), not the total
        if levels is not None:
            taken = _taken([*chosen, victim])
            claim = claims.get(lender)
            if claim is None:
                return False  # (a candidate remembered before this job's GPUs were counted)
            scope = levels.projects[claim].parent
            return levels.owes(claim, job.spec.total_gpus, taken, session.allocated) and levels.keeps_quotas(
                lender, taken, session.allocated, scope
            )
        took = sum(r.spec.total_gpus for r in chosen if r.spec.project == lender) + victim.spec.total_gpus
        return session.allocated.get(lender, 0.0) - took >= session.project(lender).quota - 1e-9

    return known[0], known[1], keeps_quota, None if not claims else _still_owed(session, job, claims)


def _taken(jobs: list[RunningJob]) -> dict[str, float]:
    taken: dict[str, float] = {}
    for r in jobs:
        taken[r.spec.project] = taken.get(r.spec.project, 0.0) + r.spec.total_gpus
    return taken


def _still_owed(session: Session, job: PendingJob, claims: dict[str, str]) -> Enough:
    """Whether every level that takes from outside it among the jobs released is still owed
    what it takes: sparing a victim below it (``choose_victims`` keeps the fewest) must not leave
    it beyond its quota once the job holds its GPUs."""
    levels = session.levels
    assert levels is not None

    def enough(released: list[RunningJob]) -> bool:
        victims = [r for r in released if not r.stopping and r.spec.project in claims]
        taken = _taken(victims)
        return all(
            levels.owes(claim, job.spec.total_gpus, taken, session.allocated)
            for claim in {claims[r.spec.project] for r in victims}
        )

    return enough


def _told(borrower: str, job_id: int) -> Callable[[RunningJob], str]:
    """What each victim is told: whose quota it gave way to."""
    return lambda victim: (
        f"preempted: project {victim.spec.project} borrowed beyond its quota and project "
        f"{borrower} reclaims GPUs for job {job_id}"
    )


def _ran_enough(session: Session, job: RunningJob) -> bool:
    """Whether a borrower's job has run the minimum in its current run; one still starting has
    lost no work yet and may be taken back at once."""
    if job.started_at is None:
        return True
    return (session.snapshot.now - job.started_at).total_seconds() >= session.config.reclaim_min_run_s


def _wait_for_young(
    session: Session, job: PendingJob, candidates: list[RunningJob], keeps_quota: Allowed, enough: Enough | None
) -> None:
    """The borrowers' jobs that would make room have not run the minimum yet: none is stopped, but
    their GPUs are promised to ``job`` (no later job counts on them) and its reason says when."""
    victims = victims_for(session, job, candidates, keeps_quota, purpose="reclaim-later", enough=enough)
    if not victims:
        return
    min_run_s, now = session.config.reclaim_min_run_s, session.snapshot.now
    young = [r.started_at for r in victims if r.started_at is not None and not _ran_enough(session, r)]
    ran = (now - min(young)).total_seconds() if young else 0.0  # the oldest of them reaches it first
    lenders = ", ".join(sorted({v.spec.project for v in victims}))
    wait_s = max(1.0, min_run_s - ran)
    wake = now + timedelta(seconds=wait_s)
    session.wake_at = wake if session.wake_at is None else min(session.wake_at, wake)
    wait = format_duration(wait_s)
    session.reasons[job.id] = Reason(
        ReasonCode.RECLAIM,
        f"reclaim: {len(victims)} job(s) of {lenders} borrowed beyond quota, taken back once they have run "
        f"{format_duration(min_run_s)} (the first in {wait})",
    )


def _held_by_units(session: Session, job: PendingJob) -> dict[str, float] | None:
    """Where the only thing that holds ``job`` back is the limit of units above its project: each
    such unit with the GPUs its projects must give up first; else None (a flat list: always).
    The policy's quota check is asked again with the tree left out, so a project's own limit, a
    lend limit or a per-model limit still keeps reclaim away."""
    levels, reason = session.levels, session.reasons.get(job.id)
    if levels is None or reason is None or reason.code is not ReasonCode.LIMIT:
        return None
    units = levels.excess(job.spec.project, job.spec.total_gpus, session.allocated)
    if not units:
        return None
    session.levels = None
    try:
        other = session.hooks.quota_check(session, job)
    finally:
        session.levels = levels
    return units if other is None else None


def _frees(session: Session, units: dict[str, float]) -> Enough:
    """Whether the jobs released free, below every unit in ``units``, the GPUs it must give up."""
    levels = session.levels
    assert levels is not None

    def enough(released: list[RunningJob]) -> bool:
        return all(
            sum(r.spec.total_gpus for r in released if unit in levels.units_of(r.spec.project)) >= over - 1e-9
            for unit, over in units.items()
        )

    return enough


def _both(a: Enough | None, b: Enough | None) -> Enough | None:
    if a is None or b is None:
        return a or b
    return lambda released: a(released) and b(released)


def _borrowing(session: Session, name: str) -> bool:
    if session.per_model is not None:  # beyond its total, or beyond any of its per-model quotas
        return session.per_model.borrowing(name, session.allocated.get(name, 0.0))
    return session.allocated.get(name, 0.0) > session.project(name).quota + 1e-9
