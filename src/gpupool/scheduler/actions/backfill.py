"""Backfill: start jobs behind the reserved one when that cannot delay it: either they fit in
GPUs the reservation does not need, or their --max-runtime ends before the reserved job's
expected start."""

from __future__ import annotations

from datetime import timedelta

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.reservation import Reservation
from gpupool.scheduler.session import Session


def run(session: Session) -> None:
    reservation = session.reservation
    if reservation is None:
        return
    waiting: list[PendingJob] = []
    # Whether a shape would fit without the reservation, valid while nothing is given back.
    blocked_by_shape: dict[tuple[object, int], tuple[int, bool]] = {}
    blocked_reason = Reason(ReasonCode.BACKFILL, _message(reservation))
    for job in session.queue:
        if session.policy_refused(job.id) or job.id == reservation.job_id:
            waiting.append(job)
            continue
        placements = session.try_place_gang(job)
        if placements is None and _ends_in_time(session, job, reservation):
            session.release_reserved()
            placements = session.try_place_gang(job)
            session.keep_reserved(reservation)
        if placements is not None:
            session.record_start(job, placements)
            continue
        waiting.append(job)
        shape = (session.demand(job), job.spec.workers)
        known = blocked_by_shape.get(shape)
        if known is not None and known[0] == session.cluster.generation:
            blocked = known[1]
        else:
            session.release_reserved()
            blocked = session.fits(job)
            session.keep_reserved(reservation)
            blocked_by_shape[shape] = (session.cluster.generation, blocked)
        if blocked:
            session.reasons[job.id] = blocked_reason
    session.queue = waiting


def _ends_in_time(session: Session, job: PendingJob, reservation: Reservation) -> bool:
    if reservation.until is None or job.spec.max_runtime_s is None:
        return False
    return session.snapshot.now + timedelta(seconds=job.spec.max_runtime_s) <= reservation.until


def _message(reservation: Reservation) -> str:
    when = (
        f"expected to start by {reservation.until:%Y-%m-%d %H:%M:%S} UTC"
        if reservation.until
        else "it starts when running jobs end, and they have no --max-runtime"
    )
    return (
        f"backfill: the free GPUs are held for job {reservation.job_id}, first in line ({when}); "
        "a --max-runtime that ends before then lets this job use them meanwhile"
    )
