"""Job arrays read and acted on as a whole: their tasks, counts by state, the ``%N`` cap, cancel."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from gpupool.domain.arrays import ArraySpec, ArrayTask
from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.errors import InvalidInput, NotFound
from gpupool.domain.jobs import ACTIVE_JOB_STATES, JobState
from gpupool.domain.records import LIVE_WORKER_STATES, ArraySummary, JobRecord
from gpupool.store.convert import job_record
from gpupool.store.jobs import cancel_row, job_row, workers_of
from gpupool.store.orm import JobRow, WorkerRow

RUNNING_STATES = (JobState.STARTING.value, JobState.RUNNING.value)


def task_of(session: Session, job_id: int) -> ArrayTask | None:
    """Where a job sits in its array, for the environment of its workers; None for a plain job."""
    row = session.execute(select(JobRow.array_id, JobRow.array_index).where(JobRow.id == job_id)).first()
    if row is None or row.array_id is None or row.array_index is None:
        return None
    count = session.scalar(select(func.count(JobRow.id)).where(JobRow.array_id == row.array_id)) or 0
    unmade = session.scalar(select(JobRow.array_unmade).where(JobRow.id == row.array_id))
    return ArrayTask(row.array_id, row.array_index, int(count) + unmade_count(unmade))


def any_unmade(session: Session) -> bool:
    """Whether an array accepted as one record has tasks not written yet (``bulk.make_tasks``)."""
    return session.scalar(select(JobRow.id).where(JobRow.array_unmade.is_not(None)).limit(1)) is not None


def unmade_by_project(session: Session) -> dict[str, int]:
    """Tasks not written yet, per project: pending, for the job counts (``/metrics``)."""
    found: dict[str, int] = {}
    for project, unmade in session.execute(
        select(JobRow.project, JobRow.array_unmade).where(JobRow.array_unmade.is_not(None))
    ):
        found[project] = found.get(project, 0) + unmade_count(unmade)
    return found


def unmade_count(unmade: str | None) -> int:
    """How many tasks ``array_unmade`` holds: each is pending, as a written task would be; 0
    for a damaged value (the controller logs it at each cycle): what reads it still answers."""
    try:
        return len(ArraySpec.parse(unmade).indices) if unmade else 0
    except InvalidInput:
        return 0


def task_id(session: Session, array_id: int, index: int) -> int:
    """The job id of task ``index`` of the array."""
    found = session.scalar(select(JobRow.id).where(JobRow.array_id == array_id, JobRow.array_index == index))
    if found is None:
        _ = summary(session, array_id)  # 404 for an array that does not exist, first
        raise NotFound(
            f"array {array_id} has no task {index}: gpupool show {array_id} lists them", code="task_not_found"
        )
    return int(found)


def summary(session: Session, array_id: int) -> ArraySummary:
    found = summaries(session, [array_id])
    if not found:
        raise NotFound(f"no array {array_id}: list arrays with gpupool jobs --all", code="array_not_found")
    return found[0]


def summaries(session: Session, array_ids: list[int]) -> list[ArraySummary]:
    """The arrays in ``array_ids`` that exist, in that order: their first task (name, owner,
    shape) with counts of their tasks by state."""
    counts: dict[int, Counter[str]] = {}
    for start in range(0, len(array_ids), 500):
        chunk = array_ids[start : start + 500]
        query = (
            select(JobRow.array_id, JobRow.state, func.count(JobRow.id))
            .where(JobRow.array_id.in_(chunk))
            .group_by(JobRow.array_id, JobRow.state)
        )
        for array_id, state, n in session.execute(query):
            if array_id is not None:
                counts.setdefault(array_id, Counter())[state] = int(n)
    firsts = {r.id: r for r in session.scalars(select(JobRow).where(JobRow.id.in_(list(counts))))}
    for i, first in firsts.items():
        if first.array_unmade:  # accepted as one record: its other tasks are pending, unwritten yet
            counts[i][JobState.PENDING.value] += unmade_count(first.array_unmade)
    return [
        ArraySummary(
            first=job_record(firsts[i], []),
            tasks=sum(counts[i].values()),
            by_state=dict(counts[i]),
            max_running=firsts[i].array_max_running,
        )
        for i in array_ids
        if i in counts and i in firsts
    ]


def array_ids(session: Session, *, include_finished: bool, owner: str | None, limit: int) -> tuple[list[int], int]:
    """The newest ``limit`` arrays (with an unfinished task unless ``include_finished``), oldest
    first, and how many there are."""
    query = select(JobRow.array_id).where(JobRow.array_id.is_not(None))
    if not include_finished:
        query = query.where(JobRow.state.in_(ACTIVE_JOB_STATES))
    if owner is not None:
        query = query.where(JobRow.owner == owner)
    ids = sorted({i for i in session.scalars(query.distinct()) if i is not None})
    return ids[-limit:], len(ids)


def count_unfinished(session: Session, owner: str) -> int:
    """How many of ``owner``'s arrays have a task not finished (``--max-user-arrays``): counted by
    the database, not gathered here (a user's arrays in flight can hold 200,000 tasks)."""
    query = select(func.count(distinct(JobRow.array_id))).where(
        JobRow.array_id.is_not(None), JobRow.owner == owner, JobRow.state.in_(ACTIVE_JOB_STATES)
    )
    return int(session.scalar(query) or 0)


def tasks(session: Session, array_id: int) -> list[JobRecord]:
    rows = list(session.scalars(select(JobRow).where(JobRow.array_id == array_id).order_by(JobRow.array_index)))
    if not rows:
        raise NotFound(f"no array {array_id}: list arrays with gpupool jobs --all", code="array_not_found")
    workers = workers_of(session, [r.id for r in rows])
    return [job_record(r, workers.get(r.id, [])) for r in rows]


def cancel(session: Session, array_id: int, now: datetime, by: str) -> int:
    """Cancel every unfinished task; how many were. Pending ones end at once, running ones are
    asked to stop (the same rule as one job's cancel, task by task)."""
    job_row(session, array_id)  # the first task: 404 for an array that does not exist
    rows = list(
        session.scalars(
            select(JobRow)
            .where(JobRow.array_id == array_id, JobRow.state.in_(ACTIVE_JOB_STATES))
            .order_by(JobRow.id)
            .with_for_update()
        )
    )
    holding = set(
        session.scalars(
            select(WorkerRow.job_id).where(
                WorkerRow.job_id.in_([r.id for r in rows]), WorkerRow.status.in_(LIVE_WORKER_STATES)
            )
        )
    )
    for row in rows:
        cancel_row(session, row, now, by, holds_workers=row.id in holding)
    return len(rows)


def capped(session: Session) -> dict[int, Reason]:
    """Pending tasks held back by their array's ``%N``: all but the first (N - running) of each
    capped array, by index. They are left out of the scheduler's snapshot, with this reason."""
    pending = [
        (job_id, array_id, cap)
        for job_id, array_id, cap in session.execute(
            select(JobRow.id, JobRow.array_id, JobRow.array_max_running)
            .where(JobRow.state == JobState.PENDING.value, JobRow.array_max_running.is_not(None))
            .order_by(JobRow.array_index)
        )
        if array_id is not None and cap is not None
    ]
    if not pending:
        return {}
    arrays = {a for _, a, _ in pending}
    running = {
        array_id: int(n)
        for array_id, n in session.execute(
            select(JobRow.array_id, func.count(JobRow.id))
            .where(JobRow.array_id.in_(list(arrays)), JobRow.state.in_(RUNNING_STATES))
            .group_by(JobRow.array_id)
        )
    }
    held: dict[int, Reason] = {}
    room: dict[int, int] = {}
    for job_id, array_id, cap in pending:
        busy = int(running.get(array_id, 0))
        left = room.setdefault(array_id, max(0, cap - busy))
        if left:
            room[array_id] = left - 1
            continue
        held[job_id] = Reason(
            ReasonCode.ARRAY_LIMIT,
            f"array {array_id} runs at most {cap} tasks at once (--array ...%{cap}) and {busy} are running",
        )
    return held
