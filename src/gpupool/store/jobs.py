"""Job rows: insert a submission, read jobs and their events, request a cancel, record reasons."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from gpupool.domain import exit_reasons
from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.durations import format_duration
from gpupool.domain.errors import Conflict, NotFound
from gpupool.domain.jobs import ACTIVE_JOB_STATES, REQUEUING_STOPS, JobSpec, JobState, StopReason, may_replace
from gpupool.domain.outcome import JobFacts, failures_in_a_row, restart_delay, settle
from gpupool.domain.records import LIVE_WORKER_STATES, Event, JobRecord, WorkerRecord
from gpupool.store import bulk
from gpupool.store.convert import job_record, worker_record
from gpupool.store.image_waits import image_wait
from gpupool.store.orm import EventRow, JobRow, WorkerRow
from gpupool.store.transitions import add_event, job_changes, transition_job, write_job
from gpupool.store.worker_rows import update_worker

_JOBS = cast(Table, JobRow.__table__)
_WORKERS = cast(Table, WorkerRow.__table__)
_ATTEMPT_ROWS = (  # an attempt's workers as plain rows, columns by name, that the session does not track
    select(_WORKERS)
    .where(_WORKERS.c.job_id == bindparam("jid"), _WORKERS.c.attempt == bindparam("attempt"))
    .order_by(_WORKERS.c.worker)
)
# What ``settle_job`` reads of a job, and may write back.
_SETTLE_READS = (
    "state", "starts", "image", "stop_reason", "restarts", "max_restarts", "max_runtime_s", "exit_code",
    "exit_reason", "workers", "max_workers", "not_before", "reason_code", "reason",
)  # fmt: skip


def insert_job(session: Session, spec: JobSpec, owner: str, now: datetime, run_as: str | None = None) -> JobRecord:
    """One submission: ``bulk.insert_jobs`` of one, so every job starts the same way."""
    return bulk.insert_jobs(session, [(spec, owner, run_as)], now)[0]


def job_row(session: Session, job_id: int, *, lock: bool = False) -> JobRow:
    query = select(JobRow).where(JobRow.id == job_id)
    if lock:
        query = query.with_for_update()
    row = session.scalars(query).first()
    if row is None:
        raise NotFound(f"no job {job_id}: list jobs with gpupool jobs --all", code="job_not_found")
    return row


def job_for_update(session: Session, job_id: int, *columns: str) -> tuple[Any, ...]:
    """``job_row``'s Core form, for the writes of every job's start (issue 36): those columns of
    the job, read for update, as a plain row the session does not track. What the session holds
    is flushed first, as ``job_row``'s query would; write with ``transitions.move_job``."""
    session.flush()
    found = session.connection().execute(_job_for_update_query(columns), {"jid": job_id}).first()
    if found is None:
        raise NotFound(f"no job {job_id}: list jobs with gpupool jobs --all", code="job_not_found")
    return tuple(found)


@functools.cache
def _job_for_update_query(columns: tuple[str, ...]) -> Select[Any]:
    """Built once for each set of columns (a handful in all): making a statement and its cache
    key is a good part of a small query's cost on the controller's thread (issue 36)."""
    return select(*(_JOBS.c[name] for name in columns)).where(_JOBS.c.id == bindparam("jid")).with_for_update()


def get_job(session: Session, job_id: int) -> JobRecord:
    row = job_row(session, job_id)
    return job_record(row, workers_of(session, [row.id]).get(row.id, []))


def count_jobs(session: Session, *, include_finished: bool, owner: str | None = None, tasks: bool = True) -> int:
    query = select(func.count(JobRow.id))
    if not include_finished:
        query = query.where(JobRow.state.in_(ACTIVE_JOB_STATES))
    if owner is not None:
        query = query.where(JobRow.owner == owner)
    if not tasks:
        query = query.where(JobRow.array_id.is_(None))
    return int(session.scalar(query) or 0)


def count_by_state_and_project(session: Session) -> dict[tuple[str, str], int]:
    """How many jobs are in each (state, project): every job the store holds, finished ones too."""
    query = select(JobRow.state, JobRow.project, func.count(JobRow.id)).group_by(JobRow.state, JobRow.project)
    return {(state, project): int(n) for state, project, n in session.execute(query)}


def list_jobs(
    session: Session, *, include_finished: bool, limit: int = 1000, owner: str | None = None, tasks: bool = True
) -> list[JobRecord]:
    """The newest ``limit`` jobs (of ``owner`` only, if given; without arrays' tasks unless
    ``tasks``), oldest first."""
    query = select(JobRow).order_by(JobRow.id.desc()).limit(limit)
    if not include_finished:
        query = query.where(JobRow.state.in_(ACTIVE_JOB_STATES))
    if owner is not None:
        query = query.where(JobRow.owner == owner)
    if not tasks:
        query = query.where(JobRow.array_id.is_(None))
    rows = list(session.scalars(query))
    workers = workers_of(session, [r.id for r in rows])
    return [job_record(r, workers.get(r.id, [])) for r in reversed(rows)]


def job_events(session: Session, job_id: int, after: int = 0, limit: int | None = None) -> list[Event]:
    """The job's events in order, those after event ``after`` (an id), at most ``limit``."""
    query = select(EventRow).where(EventRow.job_id == job_id, EventRow.id > after).order_by(EventRow.id)
    rows = session.scalars(query if limit is None else query.limit(limit))
    return [Event(time=r.time, kind=r.kind, message=r.message, job_id=r.job_id, node=r.node, id=r.id) for r in rows]


def newest_events(session: Session, job_id: int, limit: int) -> tuple[list[Event], int]:
    """The job's newest ``limit`` events in order, and how many it has in all."""
    total = session.scalar(select(func.count(EventRow.id)).where(EventRow.job_id == job_id)) or 0
    skip = select(EventRow.id).where(EventRow.job_id == job_id).order_by(EventRow.id.desc()).offset(limit).limit(1)
    after = session.scalar(skip) or 0
    return job_events(session, job_id, after=after), total


def request_cancel(session: Session, job_id: int, now: datetime, by: str) -> JobRecord:
    """Pending jobs are cancelled at once; running ones are marked, and the controller kills them."""
    row = job_row(session, job_id, lock=True)
    state = JobState(row.state)
    if state.terminal:
        raise Conflict(f"job {job_id} already {state.value}; nothing to cancel", code="job_finished")
    cancel_row(session, row, now, by, holds_workers=_holds_workers(session, row))
    return get_job(session, job_id)


def cancel_row(session: Session, row: JobRow, now: datetime, by: str, *, holds_workers: bool) -> None:
    """Cancel an unfinished job read for update: at once when nothing of it runs, else ask its
    workers to stop. For ``request_cancel`` and for every task of an array."""
    state = JobState(row.state)
    if state in (JobState.PENDING, JobState.PREEMPTED, JobState.LOST) and not holds_workers:
        row.stop_reason = StopReason.CANCEL.value
        if state is not JobState.PENDING:
            transition_job(session, row, JobState.PENDING, now, f"cancel requested by {by}")
        transition_job(session, row, JobState.CANCELLED, now, f"cancelled by {by}")
    else:
        _ask_to_stop(
            session,
            row,
            StopReason.CANCEL,
            now,
            "cancel_requested",
            f"cancel requested by {by}: stopping its workers (SIGTERM, then SIGKILL)",
        )


def request_preempt(
    session: Session,
    job_id: int,
    now: datetime,
    message: str,
    not_before: datetime | None = None,
    reason: StopReason = StopReason.PREEMPT,
) -> bool:
    """Ask to stop a running job and requeue it (``reason``: preempt or idle), to be scheduled
    again from ``not_before`` (default: at once). False if it is no longer running or already
    being stopped."""
    row = job_row(session, job_id, lock=True)
    if row.state != JobState.RUNNING.value:
        return False
    if not _ask_to_stop(session, row, reason, now, "preempt_requested", message):
        return False
    row.not_before = not_before
    return True


def stop_overdue(session: Session, now: datetime) -> list[int]:
    """Ask running jobs past their max runtime to stop; the cancel machinery does the rest."""
    rows = session.scalars(
        select(JobRow).where(
            JobRow.state == JobState.RUNNING.value,
            JobRow.max_runtime_s.is_not(None),
            or_(JobRow.stop_reason.is_(None), JobRow.stop_reason.in_(REQUEUING_STOPS)),
        )
    )
    overdue = []
    for row in rows:
        limit = row.max_runtime_s or 0
        if row.started_at is not None and (now - row.started_at).total_seconds() >= limit:
            message = f"ran longer than its max runtime of {row.max_runtime_s}s; stopping it"
            if _ask_to_stop(session, row, StopReason.TIMEOUT, now, "timeout", message):
                overdue.append(row.id)
    return overdue


# Reasons of a job that waits for GPUs to come free, which an elastic job's growth would take.
_WAITING_FOR_GPUS = tuple(
    c.value
    for c in (
        ReasonCode.RESOURCES, ReasonCode.FRAGMENTED, ReasonCode.GANG, ReasonCode.CPUS, ReasonCode.MEMORY,
        ReasonCode.BACKFILL, ReasonCode.RECLAIM, ReasonCode.PREEMPTING,
    )
)  # fmt: skip


def first_waiting_for_gpus(session: Session, priorities: Iterable[str]) -> int | None:
    """The oldest pending job of one of ``priorities`` that waits for GPUs (issue 35: what keeps an
    elastic job from growing), or None."""
    query = select(func.min(JobRow.id)).where(
        JobRow.state == JobState.PENDING.value,
        JobRow.priority.in_(list(priorities)),
        JobRow.reason_code.in_(_WAITING_FOR_GPUS),
    )
    return session.scalar(query)


def stopping(session: Session) -> set[int]:
    """Starting or running jobs asked to stop, and elastic jobs with workers a shrink is stopping
    (issue 35): the monitor settles each of them every cycle, so a SIGTERM that failed is sent again."""
    query = select(JobRow.id).where(
        JobRow.state.in_((JobState.STARTING.value, JobState.RUNNING.value)), JobRow.stop_reason.is_not(None)
    )
    shrinking = select(WorkerRow.job_id).where(WorkerRow.released.is_(True), WorkerRow.status.in_(LIVE_WORKER_STATES))
    return set(session.scalars(query)) | set(session.scalars(shrinking))


def settle_job(
    session: Session, job_id: int, now: datetime, backoff_s: float = 0.0, image_wait_s: float | None = None
) -> tuple[WorkerRecord, ...]:
    """Apply ``domain.outcome.settle`` to an active job: walk its transitions, or return the live
    workers to stop first. The job's row is read, decided on and written in this one transaction.
    A job requeued after it failed (not after its node was lost) waits ``restart_delay`` (from
    ``backoff_s``) before it is scheduled again, with reason ``backoff``; one whose image a node
    could not get now waits ``IMAGE_RETRY_S``, until it has waited ``image_wait_s`` (None: for ever).

    Read and written with Core statements, not a loaded row and the unit of work (issue 36: every
    job is settled once, on the controller's thread): the same events in the same order, and one
    ``UPDATE`` of the job guarded by the state it was read in (``transitions.write_job``)."""
    job = dict(zip(_SETTLE_READS, job_for_update(session, job_id, *_SETTLE_READS), strict=True))
    state, starts = JobState(job["state"]), int(job["starts"])
    if not state.active:
        return ()
    rows: list[Any] = list(session.connection().execute(_ATTEMPT_ROWS, {"jid": job_id, "attempt": starts}))
    workers = [worker_record(w) for w in rows]
    unavailable = any(w.exit_reason == exit_reasons.IMAGE_UNAVAILABLE for w in workers)
    waited = image_wait(session, job_id, starts, job["image"], now, image_wait_s) if unavailable else None
    facts = JobFacts(
        id=job_id,
        state=state,
        stop=StopReason(job["stop_reason"]) if job["stop_reason"] else None,
        restarts=job["restarts"],
        max_restarts=job["max_restarts"],
        max_runtime_s=job["max_runtime_s"],
        exit_code=job["exit_code"],
        exit_reason=job["exit_reason"],
        image_wait=waited,
        least=job["workers"] if job["max_workers"] is not None else None,
        released=frozenset(w.id for w in rows if w.released),
    )
    plan = settle(facts, workers)
    if plan is None:
        return ()
    for w in rows:  # an elastic job runs on without these (issue 35): their exits are judged no more
        if not w.released and w.id in plan.released:
            update_worker(session, w.id, {"released": True})
    if plan.note:
        add_event(session, now, kind="ran_on", job_id=job_id, message=plan.note)
    # Its own failure, not its node's: a job lost with its node is requeued at once.
    failed_again = plan.restarts > job["restarts"] and not any(step.state is JobState.LOST for step in plan.steps)
    changes: dict[str, Any] = {"restarts": plan.restarts, "exit_code": plan.exit_code, "exit_reason": plan.exit_reason}
    current = state
    for step in plan.steps:
        changes |= job_changes(job_id, current, starts, step.state, now, step.message)
        add_event(session, now, kind=step.kind or step.state.value, message=step.message, job_id=job_id)
        current = step.state
    delay = 0.0
    if failed_again and current is JobState.PENDING and backoff_s > 0:
        delay = restart_delay(failures_in_a_row(_recent_runs(session, job_id, starts)), backoff_s)
    if delay:
        changes["not_before"] = now + timedelta(seconds=delay)
        changes["reason_code"], changes["reason"] = backoff_reason(changes["not_before"], delay, plan.restarts)
        add_event(session, now, kind="backoff", job_id=job_id, message=changes["reason"])
    if plan.waits_for_image and current is JobState.PENDING:
        not_before = now + timedelta(seconds=IMAGE_RETRY_S)  # not a tight loop on a registry that is down
        reason = f"a node could not get its image now (its events say why); tried again from {not_before:%H:%M:%S} UTC"
        if waited is not None and waited.limit_s is not None:
            ends = now + timedelta(seconds=waited.limit_s - waited.waited_s)
            bound = format_duration(waited.limit_s)
            reason += f"; it fails if it still cannot from {ends:%H:%M:%S} UTC (--image-wait {bound})"
        changes.update(not_before=not_before, reason_code=ReasonCode.IMAGE.value, reason=reason)
        add_event(session, now, kind="image", job_id=job_id, message=f"waits for its image: {reason}")
    # As the unit of work would: only what differs from the row as read, and no write if nothing does.
    changed = {name: value for name, value in changes.items() if name not in job or job[name] != value}
    if changed:
        write_job(session, job_id, state, changed)
    return plan.stop_workers


IMAGE_RETRY_S = 60.0  # a job whose image a node could not get now is tried again after this


def backoff_reason(until: datetime, delay: float, restarts: int) -> tuple[str, str]:
    return (
        ReasonCode.BACKOFF.value,
        f"restart {restarts} waits {delay:g}s after the failure (--restart-backoff, doubling per quick failure"
        " in a row, at most 5m): "
        f"scheduled again from {until:%H:%M:%S} UTC",
    )


def deferred(session: Session, now: datetime) -> dict[int, tuple[datetime, bool]]:
    """Deferred jobs: pending ones not to be scheduled yet (``not_before`` is later; left out of
    the snapshot), with until when and whether they back off after a failure (else they were
    preempted for sitting idle)."""
    rows = session.execute(
        select(JobRow.id, JobRow.not_before, JobRow.stop_reason).where(
            JobRow.state == JobState.PENDING.value, JobRow.not_before > now
        )
    )
    return {job_id: (until, stop is None) for job_id, until, stop in rows if until is not None}


def set_reasons(session: Session, reasons: Mapping[int, Reason]) -> None:
    """Write only the reasons that changed: a steady queue costs no writes."""
    ids = list(reasons)
    changed: list[dict[str, object]] = []
    for start in range(0, len(ids), 500):
        current = session.execute(
            select(JobRow.id, JobRow.reason_code, JobRow.reason).where(
                JobRow.id.in_(ids[start : start + 500]), JobRow.state == JobState.PENDING.value
            )
        )
        for job_id, code, message in current:
            reason = reasons[job_id]
            if code != reason.code.value or message != reason.message:
                changed.append({"job": job_id, "code": reason.code.value, "message": reason.message})
    if changed:  # one statement, many parameter sets: a queue of thousands changes in one round trip
        jobs = cast(Table, JobRow.__table__)
        statement = (
            update(jobs)
            .where(jobs.c.id == bindparam("job"), jobs.c.state == JobState.PENDING.value)
            .values(reason_code=bindparam("code"), reason=bindparam("message"))
        )
        session.execute(statement, changed)


def _ask_to_stop(session: Session, row: JobRow, reason: StopReason, now: datetime, kind: str, message: str) -> bool:
    """Record why the job is to stop, unless a stop that outranks it is under way
    (``may_replace``); the event says who asked and why. False if nothing changed."""
    current = StopReason(row.stop_reason) if row.stop_reason else None
    if not may_replace(current, reason):
        return False
    row.stop_reason = reason.value
    add_event(session, now, kind=kind, job_id=row.id, message=message)
    return True


def _recent_runs(session: Session, job_id: int, last: int, count: int = 12) -> list[float | None]:
    """How long each of the job's latest ``count`` attempts ran (newest first; None: it never
    started): from its workers' first start to their last end. Twelve is past the doubling's cap."""
    query = select(WorkerRow.attempt, WorkerRow.started_at, WorkerRow.finished_at).where(
        WorkerRow.job_id == job_id, WorkerRow.attempt > last - count, WorkerRow.attempt <= last
    )
    spans: dict[int, tuple[datetime | None, datetime | None]] = {}
    for attempt, started, finished in session.execute(query):
        first, end = spans.get(attempt, (None, None))
        first = started if first is None or (started is not None and started < first) else first
        end = finished if end is None or (finished is not None and finished > end) else end
        spans[attempt] = (first, end)
    runs: list[float | None] = []
    for attempt in range(last, max(0, last - count), -1):
        first, end = spans.get(attempt, (None, None))
        runs.append(None if first is None or end is None else (end - first).total_seconds())
    return runs


def _holds_workers(session: Session, row: JobRow) -> bool:
    live = select(WorkerRow.id).where(WorkerRow.job_id == row.id, WorkerRow.status.in_(LIVE_WORKER_STATES))
    return session.scalars(live).first() is not None


def workers_of(session: Session, job_ids: Iterable[int]) -> dict[int, list[WorkerRow]]:
    ids = list(job_ids)
    out: dict[int, list[WorkerRow]] = {}
    if not ids:
        return out
    for chunk_start in range(0, len(ids), 500):
        chunk = ids[chunk_start : chunk_start + 500]
        for w in session.scalars(select(WorkerRow).where(WorkerRow.job_id.in_(chunk))):
            out.setdefault(w.job_id, []).append(w)
    return out


def add_job_event(session: Session, job_id: int, now: datetime, kind: str, message: str) -> None:
    add_event(session, now, kind=kind, message=message, job_id=job_id)
