"""Shrink (issue 35): a waiting job that does not fit takes running elastic jobs' workers above
their minimum before reclaim, preempt or displace stop any whole job for it.

Whose extra workers a waiting job may take: those of its own project's elastic jobs of its
priority class or below (extras yield to any job of equal standing, as they grew only while none
waited), and, for a job within its project's quota, those of other projects beyond their quota
counting their extras, never taking one below it (``reclaimed for project nlp``). The highest
worker numbers go first, never worker 0 nor one that would leave a job below its minimum. Workers
already leaving (a shrink of an earlier cycle) and jobs being stopped count as GPUs on their way
back, before any new worker is taken; only if all this lets the waiting job fit is anything
stopped, and then the fewest. Their GPUs are the waiting job's: the shrunk job is claimed (no other
action stops it whole this cycle), and the waiting job is served (``Session.shrunk_for``), so no
whole job is stopped for it as well. Where they are not enough alone, reclaim and preempt count
them as freed first and stop whole jobs only for the rest (``extras_first``). Without elastic jobs
it returns at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpupool.domain.decisions import Reason, ReasonCode, ShrinkJob
from gpupool.domain.jobs import Placement
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import extras_limits as limits
from gpupool.scheduler import user_limit
from gpupool.scheduler.actions.grow import in_job_order
from gpupool.scheduler.extras import Extras
from gpupool.scheduler.extras_limits import Scope
from gpupool.scheduler.session import Session
from gpupool.scheduler.victims import Enough, choose_victims, victims_for

EPS = 1e-9
Allowed = Callable[[list[RunningJob], RunningJob], bool]


@dataclass(frozen=True, slots=True)
class _Freed:
    kind: str  # "stopping" (a whole job already stopping), "leaving" or "extra" (a worker)
    job: RunningJob
    placements: tuple[Placement, ...]


def run(session: Session) -> None:
    extras = session.extras
    if extras is None or not extras.busy() or not session.queue:
        return
    failed: set[tuple[object, ...]] = set()
    for job in session.queue:
        scope = None
        if session.policy_refused(job.id):
            scope = limits.scope(session, extras, job)  # only a limit its level's extras fill may be cured
            if not scope or user_limit.refusal(session, job) is not None or not session.ever_fits(job):
                continue
        elif user_limit.held_back(session, job) or not session.ever_fits(job):
            continue
        shape = (session.demand(job), job.spec.workers, job.spec.project, job.spec.priority, scope is not None)
        if shape in failed:
            continue
        if not _serve(session, extras, job, scope):
            failed.add(shape)


def _serve(session: Session, extras: Extras, job: PendingJob, scope: Scope | None) -> bool:
    """Free what ``job`` needs from extra and leaving workers, if they suffice; the GPUs kept for it
    (the reservation, when it is its own) count as its own, as for reclaim's victims. ``scope``:
    the job waits for a limit, which the extra workers of those projects, of its standing or
    below, count against: it is served only if it then passes its quota check and fits."""
    reservation = session.reservation
    mine = reservation is not None and reservation.job_id == job.id
    if mine:
        session.release_reserved()

    def ready() -> bool:
        return session.fits(job) and (scope is None or session.hooks.quota_check(session, job) is None)

    try:
        if ready():
            return False  # it waits for something else (the reservation of another job)
        return _free_for(session, extras, job, scope, ready)
    finally:
        if mine and reservation is not None:
            session.keep_reserved(reservation)


def _free_for(
    session: Session, extras: Extras, job: PendingJob, scope: Scope | None, ready: Callable[[], bool]
) -> bool:
    out: list[_Freed] = []  # what is given back in the cluster state now, restored at the end
    try:
        offers = [*_on_their_way(session, extras), *_extras_for(session, extras, job)]
        if scope is not None:  # first what brings the levels at their limit back within it
            first = [f for f in offers if f.kind == "leaving" and limits.inside(scope, job, f.job)]
            first += _scope_extras(session, extras, job, scope)
            keys = set(map(_key, first))
            offers = [*first, *(f for f in offers if _key(f) not in keys)]
        for freed in offers:
            _release(session, extras, freed)
            out.append(freed)
            if ready():
                break
        else:
            return False
        needed = _fewest(session, extras, out, ready)
        if not any(f.kind != "stopping" for f in needed):
            return False  # only jobs being stopped: reclaim and preempt count on them as before
        for freed in reversed(out):
            _restore(session, extras, freed)
        out = []
        _record(session, extras, job, needed, scope)
        return True
    finally:
        for freed in reversed(out):
            _restore(session, extras, freed)


def _on_their_way(session: Session, extras: Extras) -> list[_Freed]:
    """Jobs being stopped and leaving workers that no waiting job counts on yet."""
    stopping = [_Freed("stopping", r, r.placements) for r in session.stopping() if r.id not in session.claimed]
    return [*stopping, *(_Freed("leaving", r, (p,)) for r, p in extras.leaving())]


def _extras_for(session: Session, extras: Extras, job: PendingJob) -> list[_Freed]:
    """The extra workers ``job`` may take, in the order to take them: the elastic jobs that would
    grow last first, each's highest numbers first, a lender's only down to its quota."""
    found: list[_Freed] = []
    within = _within_quota(session, job)
    left = {name: session.allocated.get(name, 0.0) + gpus for name, gpus in extras.gpus.items()}  # widths
    for running in reversed(in_job_order(session, list(extras.jobs.values()))):
        if running.id in session.claimed and not extras.gone.get(running.id):
            continue  # stopped whole this cycle
        project = running.spec.project
        if project == job.spec.project:
            if running.spec.priority.rank > job.spec.priority.rank:
                continue
        elif not within:
            continue
        where = {p.worker: p for p in running.placements}
        for worker in extras.extra_workers(running):
            if project != job.spec.project:  # reclaim: only what its project holds beyond its quota
                if left.get(project, 0.0) - running.spec.gpus < session.project(project).quota - EPS:
                    break
                left[project] -= running.spec.gpus
            found.append(_Freed("extra", running, (where[worker],)))
    return found


def _scope_extras(session: Session, extras: Extras, job: PendingJob, scope: Scope) -> list[_Freed]:
    """The extra workers inside the levels at their limit that give way to ``job``, in the order
    ``_extras_for`` takes them."""
    found: list[_Freed] = []
    for running in reversed(in_job_order(session, list(extras.jobs.values()))):
        if (running.id in session.claimed and not extras.gone.get(running.id)) or not limits.inside(
            scope, job, running
        ):
            continue
        where = {p.worker: p for p in running.placements}
        found.extend(_Freed("extra", running, (where[w],)) for w in extras.extra_workers(running))
    return found


def _key(freed: _Freed) -> tuple[str, int, int]:
    return (freed.kind, freed.job.id, freed.placements[0].worker)


def _within_quota(session: Session, job: PendingJob) -> bool:
    project = session.project(job.spec.project)
    return session.allocated.get(project.name, 0.0) + job.spec.total_gpus <= project.quota + EPS


def _fewest(session: Session, extras: Extras, out: list[_Freed], ready: Callable[[], bool]) -> list[_Freed]:
    """Spare what the waiting job does not need after all, the last given back first (extra
    workers before leaving ones and stopping jobs); what is spared is taken back at once."""
    needed = list(out)
    for freed in reversed(needed[:]):
        _restore(session, extras, freed)
        if ready():
            needed.remove(freed)
            out.remove(freed)
        else:
            _release(session, extras, freed)
    return needed


def _release(session: Session, extras: Extras, freed: _Freed) -> None:
    """Give ``freed`` back for now: its GPUs free, and no longer counted against the limits."""
    for p in freed.placements:
        session.cluster.give_back(p)
    if freed.kind == "extra":
        extras.drop(freed.job, freed.placements[0].worker)
    elif freed.kind == "leaving":
        extras.promise(freed.job, freed.placements[0].worker)


def _restore(session: Session, extras: Extras, freed: _Freed) -> None:
    _take(session, freed)
    if freed.kind == "extra":
        extras.undrop(freed.job, freed.placements[0].worker)
    elif freed.kind == "leaving":
        extras.unpromise(freed.job, freed.placements[0].worker)


def _record(session: Session, extras: Extras, job: PendingJob, needed: list[_Freed], scope: Scope | None) -> None:
    """``needed`` is ``job``'s now: stopping jobs and shrunk elastic jobs claimed, leaving workers
    promised, new ShrinkJobs, its GPUs counted as its own (as ``victims.stop_for``) and its reason."""
    within = _within_quota(session, job)
    by_job: dict[int, list[int]] = {}
    shrunk: dict[int, RunningJob] = {}
    for freed in needed:
        if freed.kind == "stopping":
            session.claimed.add(freed.job.id)
        elif freed.kind == "leaving":
            extras.promise(freed.job, freed.placements[0].worker)
        else:
            by_job.setdefault(freed.job.id, []).append(freed.placements[0].worker)
            shrunk[freed.job.id] = freed.job
    reclaimed = False
    for job_id, workers in by_job.items():
        running = shrunk[job_id]
        for worker in workers:
            extras.drop(running, worker)
        session.claimed.add(job_id)
        limited = scope is not None and limits.inside(scope, job, running)
        other = running.spec.project != job.spec.project and not limited
        reclaimed = reclaimed or other
        why = (
            f"reclaimed for project {job.spec.project}"
            if other
            else f"GPUs for job {job.id} of project {job.spec.project}"
            + (f", within {scope.within}" if scope is not None and limited else "")
        )
        left = extras.width(running)
        message = f"shrank to {left} worker{'' if left == 1 else 's'}: {why}"
        session.shrinks.append(ShrinkJob(job_id, tuple(sorted(workers)), message, for_job=job.id))
    project, gpus = job.spec.project, job.spec.total_gpus
    session.allocated[project] = session.allocated.get(project, 0.0) + gpus
    mine = (project, job.owner)
    session.user_promised[mine] = session.user_promised.get(mine, 0.0) + gpus
    session.shrunk_for.add(job.id)
    stopped = sum(len(w) for w in by_job.values())
    if stopped:
        names = ", ".join(f"{i} ({shrunk[i].spec.project})" for i in sorted(by_job))
        said = f"stopping {stopped} worker(s) above the minimum of elastic job(s) {names}"
    else:
        said = "waiting for workers being stopped to free their GPUs"
    if scope is not None and not reclaimed:
        session.reasons[job.id] = Reason(
            ReasonCode.PREEMPTING, f"preempting: {said}, within {_named(scope, job)}; starts when their GPUs are free"
        )
    elif reclaimed or (not by_job and within):
        session.reasons[job.id] = Reason(ReasonCode.RECLAIM, f"reclaim: {said}; starts when their GPUs are free")
    else:
        session.reasons[job.id] = Reason(ReasonCode.PREEMPTING, f"preempting: {said}; starts when their GPUs are free")


def _named(scope: Scope, job: PendingJob) -> str:
    return f"project {job.spec.project}'s limit" if scope.within == "its limit" else scope.within


def _take(session: Session, freed: _Freed) -> None:
    for p in freed.placements:
        session.cluster.take(p)


def extras_first(
    session: Session,
    job: PendingJob,
    candidates: list[RunningJob],
    allowed: Allowed = lambda chosen, victim: True,
    *,
    purpose: str,
    enough: Enough | None = None,
    own_reservation: bool,
) -> tuple[list[RunningJob] | None, str]:
    """Reclaim's or preempt's victims for ``job`` among ``candidates`` (``victims_for``, or
    ``choose_victims`` where its reservation's GPUs are not its own: ``own_reservation``), with the
    extra and leaving workers ``run`` would have offered it counted as freed first: whole jobs are
    chosen only for what those workers leave short, and the extras needed are shrunk for it
    (``ShrinkJob``s, their jobs claimed, leaving ones promised); with the note its reason adds. A
    job whose workers are offered is not stopped whole meanwhile. Where no whole-job set completes
    the need, nothing is shrunk and whole jobs are chosen as before (so without elastic jobs,
    exactly as before)."""

    def pick(chosen_for: str) -> list[RunningJob] | None:
        choose = victims_for if own_reservation else choose_victims
        return choose(session, job, candidates, allowed, purpose=chosen_for, enough=enough)

    extras = session.extras
    offers = (
        []
        if extras is None or not extras.busy()
        else [*_on_their_way(session, extras), *_extras_for(session, extras, job)]
    )
    offers = [f for f in offers if f.kind != "stopping"]  # ``pick`` counts on jobs being stopped itself
    if extras is None or not any(f.kind == "extra" for f in offers):
        return pick(purpose), ""
    reservation = session.reservation
    mine = own_reservation and reservation is not None and reservation.job_id == job.id
    if mine:
        session.release_reserved()
        session.reservation = None  # counted as its own here, not kept again inside ``pick``
    before = set(session.claimed)
    hidden = {f.job.id for f in offers} - before
    needed: list[_Freed] = []
    try:
        for freed in offers:
            _release(session, extras, freed)
        session.claimed |= hidden
        try:
            victims = pick(f"{purpose}:extras")
        finally:
            session.claimed -= hidden
        if victims is not None:
            whole = [r for r in (*session.stopping(), *victims) if r.id in session.claimed - before]
            needed = _spare(session, extras, job, offers, whole)
    finally:
        for freed in reversed(offers):
            _restore(session, extras, freed)
        if mine and reservation is not None:
            session.reservation = reservation
            session.keep_reserved(reservation)
    if victims is None:
        return pick(purpose), ""
    return victims, _shrink_for(session, extras, job, needed)


def _spare(
    session: Session, extras: Extras, job: PendingJob, offers: list[_Freed], whole: list[RunningJob]
) -> list[_Freed]:
    """The offers ``job`` still needs beside the ``whole`` jobs chosen (all released now), the last
    offered spared first; each spared one is restored (and released again by the caller's restore
    order: ``offers`` stay all released when this returns)."""
    for r in whole:
        for p in r.placements:
            session.cluster.give_back(p)
    needed = list(offers)
    try:
        for freed in reversed(offers):
            _restore(session, extras, freed)
            if session.fits(job):
                needed.remove(freed)
            else:
                _release(session, extras, freed)
    finally:
        for freed in offers:
            if freed not in needed:
                _release(session, extras, freed)
        for r in reversed(whole):
            for p in r.placements:
                session.cluster.take(p)
    return needed


def _shrink_for(session: Session, extras: Extras, job: PendingJob, needed: list[_Freed]) -> str:
    """Record ``needed`` (leaving workers promised, extras shrunk) as ``job``'s; the note for its reason."""
    by_job: dict[int, list[int]] = {}
    shrunk: dict[int, RunningJob] = {}
    for freed in needed:
        worker = freed.placements[0].worker
        if freed.kind == "leaving":
            extras.promise(freed.job, worker)
        else:
            extras.drop(freed.job, worker)
            by_job.setdefault(freed.job.id, []).append(worker)
            shrunk[freed.job.id] = freed.job
    for job_id, workers in by_job.items():
        running = shrunk[job_id]
        session.claimed.add(job_id)
        other = running.spec.project != job.spec.project
        why = (
            f"reclaimed for project {job.spec.project}"
            if other
            else f"GPUs for job {job.id} of project {job.spec.project}"
        )
        left = extras.width(running)
        message = f"shrank to {left} worker{'' if left == 1 else 's'}: {why}"
        session.shrinks.append(ShrinkJob(job_id, tuple(sorted(workers)), message, for_job=job.id))
    if not by_job:
        return ""
    names = ", ".join(f"{i} ({shrunk[i].spec.project})" for i in sorted(by_job))
    return f", and stopping {sum(map(len, by_job.values()))} worker(s) above the minimum of elastic job(s) {names}"
