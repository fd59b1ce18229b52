"""Choose the fewest, most recently started running jobs whose GPUs let a waiting job fit.

Shared by reclaim and preempt. Works on the cycle's cluster state by releasing candidates'
placements tentatively and always restores it: victims keep their GPUs until their processes
exit, and the waiting job starts in a later cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gpupool.domain.decisions import Preempt
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.session import Session

Enough = Callable[[list[RunningJob]], bool]


def victims_for(
    session: Session,
    job: PendingJob,
    candidates: Iterable[RunningJob],
    allowed: Callable[[list[RunningJob], RunningJob], bool],
    *,
    purpose: str,
    enough: Enough | None = None,
) -> list[RunningJob] | None:
    """``choose_victims``, with the GPUs kept for ``job`` (the reservation, when it is its own)
    counted as its own: they are idle, and free for it once the victims stop."""
    reservation = session.reservation
    mine = reservation is not None and reservation.job_id == job.id
    if mine:
        session.release_reserved()
    try:
        return choose_victims(session, job, candidates, allowed, purpose=purpose, enough=enough)
    finally:
        if mine and reservation is not None:
            session.keep_reserved(reservation)


def choose_victims(
    session: Session,
    job: PendingJob,
    candidates: Iterable[RunningJob],
    allowed: Callable[[list[RunningJob], RunningJob], bool] = lambda chosen, victim: True,
    *,
    purpose: str,
    enough: Enough | None = None,
) -> list[RunningJob] | None:
    """None when no set of candidates makes room; else the new victims, possibly none when jobs
    already stopping will do. Every job whose GPUs are promised to ``job`` (new victims and
    stopping ones) is added to ``session.claimed``, so the next waiting job cannot count on them.

    ``candidates`` come in order of preference (youngest first); ``allowed(chosen, v)`` says
    whether ``v`` may join the new victims already chosen (e.g. without taking its project below quota).
    ``purpose`` names the action: each draws on its own candidates, so each remembers its own failures.
    ``enough(released)``, where given, must hold of the jobs released as well as the fit: e.g. they
    free the GPUs a unit at its limit needs (issue 34), which idle GPUs elsewhere do not.
    """
    if already_failed(session, job, purpose):
        return None
    stopping = [r for r in session.stopping() if r.id not in session.claimed]
    released: list[RunningJob] = []
    shape = _shape(session, job, purpose)
    need = job.spec.total_gpus if job.spec.gpus >= 1 else 0.0
    try:
        for r in stopping:
            if session.fits(job) and (enough is None or enough(released)):
                break
            _give_back(session, r)
            released.append(r)
        new: list[RunningJob] = []
        if not session.fits(job) or (enough is not None and not enough(released)):
            for victim in candidates:
                if victim.id in session.claimed or not allowed(new, victim):
                    continue
                _give_back(session, victim)
                released.append(victim)
                new.append(victim)
                if (
                    session.cluster.total_free_gpus() >= need
                    and session.fits(job)
                    and (enough is None or enough(released))
                ):
                    break
            else:
                # Candidates only shrink within a cycle: the same shape from the same project fails too.
                session.no_victims.add(shape)
                return None
        needed = _fewest(session, job, released, enough)
        session.claimed.update(r.id for r in needed)
        return [r for r in needed if not r.stopping]
    finally:  # everything released is taken back (the generation moved on: memos of the excursion expire)
        for r in reversed(released):
            _take(session, r)


def stop_for(
    session: Session, job: PendingJob, victims: Sequence[RunningJob], why: Callable[[RunningJob], str]
) -> None:
    """Record ``victims`` as stopped for ``job`` (each told ``why(victim)``), and their GPUs as the job's
    from now on in this cycle's accounting: what reclaim, preempt and displace each do once their
    victims are chosen."""
    for victim in victims:
        session.allocated[victim.spec.project] -= victim.spec.total_gpus
        if session.per_model is not None:
            session.per_model.release(victim)
        session.preemptions.append(Preempt(victim.id, why(victim), for_job=job.id))
    session.allocated[job.spec.project] = session.allocated.get(job.spec.project, 0.0) + job.spec.total_gpus
    mine = (job.spec.project, job.owner)
    session.user_promised[mine] = session.user_promised.get(mine, 0.0) + job.spec.total_gpus


def saying(why: str) -> Callable[[RunningJob], str]:
    """``stop_for``'s message when every victim is told the same."""
    return lambda _victim: why


def already_failed(session: Session, job: PendingJob, purpose: str) -> bool:
    """A job of the same shape from the same project found no victims earlier this cycle."""
    return _shape(session, job, purpose) in session.no_victims


def _shape(session: Session, job: PendingJob, purpose: str) -> tuple[object, ...]:
    return (purpose, session.demand(job), job.spec.workers, job.spec.project, job.spec.priority)


def _fewest(session: Session, job: PendingJob, chosen: list[RunningJob], enough: Enough | None) -> list[RunningJob]:
    """Spare every released job the waiting one does not need after all: new victims before
    stopping ones, the oldest-started first, so the victims left are the fewest and the most
    recently started."""
    kept = list(chosen)
    for victim in reversed(chosen):
        _take(session, victim)
        if session.fits(job) and (enough is None or enough([r for r in kept if r is not victim])):
            kept.remove(victim)  # spared: it keeps its GPUs for the next checks
        else:
            _give_back(session, victim)
    for victim in chosen:
        if victim not in kept:
            _give_back(session, victim)  # back to "every chosen released", as the caller's restore expects
    return kept


def _take(session: Session, job: RunningJob) -> None:
    for p in job.placements:
        session.cluster.take(p)


def _give_back(session: Session, job: RunningJob) -> None:
    for p in job.placements:
        session.cluster.give_back(p)
