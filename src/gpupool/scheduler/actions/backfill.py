"""Backfill: start jobs behind the reserved one when that cannot delay it: either they fit in
GPUs the reservation does not need, or their --max-runtime ends before the reserved job's
expected start."""

from __future__ import annotations

from datetime import timedelta

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler import user_limit
from gpupool.scheduler.reservation import Reservation
from gpupool.scheduler.session import Session


def run(session: Session) -> None:
    reservation = session.reservation
    if reservation is None:
        return
    waiting: list[PendingJob] = []
    # Whether a shape would fit without the reservation, valid while nothing is given back.
    blocked_by_shape: dict[tuple[object, int], tuple[int, bool]] = {}
    # Jobs alike in all backfill reads (shape, --max-runtime) that failed: the next one fails
    # too, and is blocked or not alike, while nothing is given back and the reservation holds
    # GPUs as it did. A queue of thousands of similar jobs then costs a look-up each.
    failed_alike: dict[tuple[object, int, int | None], tuple[int, bool, bool]] = {}
    blocked_reason = Reason(ReasonCode.BACKFILL, _message(reservation))
    cluster, reasons = session.cluster, session.reasons
    limited = user_limit.any_user_limits(session)
    for job in session.queue:
        if job.id == reservation.job_id or session.policy_refused(job.id):
            waiting.append(job)
            continue
        if limited and (mine := user_limit.refusal(session, job)) is not None:  # this cycle's starts count
            reasons[job.id] = mine
            waiting.append(job)
            continue
        demand, workers = session.demand(job), job.spec.workers
        alike = (demand, workers, job.spec.max_runtime_s)
        known_alike = failed_alike.get(alike)
        if known_alike is not None and known_alike[:2] == (cluster.generation, bool(session.reserved_gpus)):
            waiting.append(job)
            if known_alike[2]:
                reasons[job.id] = blocked_reason
            continue
        placements = session.try_place_gang(job)
        if (
            placements is None
            and not session.failed(demand, workers, False)  # it would fail without the reservation too
            and _ends_in_time(session, job, reservation)
        ):
            session.release_reserved()
            placements = session.try_place_gang(job)
            session.keep_reserved(reservation)
        if placements is not None:
            if session.start(job, placements) is not None:  # waits for power, its reason given
                waiting.append(job)
            continue
        waiting.append(job)
        shape = (demand, workers)
        known = blocked_by_shape.get(shape)
        if known is not None and known[0] == cluster.generation:
            blocked = known[1]
        else:
            session.release_reserved()
            blocked = session.fits(job)
            session.keep_reserved(reservation)
            blocked_by_shape[shape] = (cluster.generation, blocked)
        if blocked:
            reasons[job.id] = blocked_reason
        failed_alike[alike] = (cluster.generation, bool(session.reserved_gpus), blocked)
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
