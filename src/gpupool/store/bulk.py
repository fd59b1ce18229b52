"""Many submissions in one transaction: a batch of jobs, or the tasks of an array.

Core ``INSERT ... RETURNING`` statements with many parameter sets, not one ORM object per job:
a thousand tasks are one statement for their rows and one for their events. An array is accepted
as one record and its tasks written just after (``make_tasks``). A single submission
(``jobs.insert_job``) comes through here too: every job starts pending, with reason ``new`` and a
``submitted`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert, select, update
from sqlalchemy.orm import Session

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.records import JobRecord
from gpupool.store.convert import spec_columns, spec_of
from gpupool.store.orm import EventRow, JobRow

log = logging.getLogger("gpupool.events")
NEW_CODE, NEW_REASON = "new", "waiting for the next scheduling cycle"


def insert_jobs(session: Session, jobs: Sequence[tuple[JobSpec, str, str | None]], now: datetime) -> list[JobRecord]:
    """Each (spec, owner, Unix account) a job of its own, in order."""
    if not jobs:
        return []
    ids = _insert(session, [_row(spec, owner, now, run_as) for spec, owner, run_as in jobs])
    messages = [
        (i, f"submitted by {owner}: {_size(spec)} to project {spec.project}")
        for i, (spec, owner, _) in zip(ids, jobs, strict=True)
    ]
    _submitted(session, now, messages)
    for job_id, message in messages:
        log.info("job %s submitted: %s", job_id, message)
    return [_record(i, spec, owner, now, run_as) for i, (spec, owner, run_as) in zip(ids, jobs, strict=True)]


def insert_array(
    session: Session, spec: JobSpec, array: ArraySpec, owner: str, now: datetime, run_as: str | None
) -> JobRecord:
    """The array as one record: its first task, whose id is the array's (every task, the first
    too, carries it in ``array_id``), holding the indices of the others in ``array_unmade``.
    ``make_tasks`` writes those: the controller before its next cycle, or the first request that
    lists them, whichever comes first. As Slurm keeps an array as one record until its tasks run,
    the submitter waits for one row, not a thousand (~100 ms for 1,000 tasks)."""
    first, *rest = array.indices
    unmade = ArraySpec(tuple(rest)).folded() if rest else None
    base = _row(spec, owner, now, run_as) | {"array_max_running": array.max_running}
    (array_id,) = _insert(session, [base | {"array_index": first, "array_unmade": unmade}])
    session.execute(update(JobRow).where(JobRow.id == array_id).values(array_id=array_id))
    _submitted(session, now, [(array_id, _as_task(owner, first, array_id, spec))])
    log.info("array %s submitted by %s: %d tasks (%s)", array_id, owner, len(array.indices), array)
    return _record(array_id, spec, owner, now, run_as, array_id=array_id, array_index=first)


def make_tasks(session: Session) -> int:
    """Write the tasks of every array accepted as one record (``insert_array``); how many.

    Each task is a row of its own, as if written at the array's submission: the first task's
    spec, owner, account and submission time, its own ``submitted`` event. The guarded clear of
    ``array_unmade`` comes first, so two makers at once (the controller and a reader) cannot
    both write an array's tasks: the second finds it cleared and leaves it."""
    made = 0
    for first in list(session.scalars(select(JobRow).where(JobRow.array_unmade.is_not(None)).order_by(JobRow.id))):
        unmade = first.array_unmade
        assert unmade is not None and first.array_id is not None
        clear = update(JobRow).where(JobRow.id == first.id, JobRow.array_unmade == unmade).values(array_unmade=None)
        if session.connection().execute(clear).rowcount != 1:
            continue
        session.expire(first, ["array_unmade"])  # a later read in this transaction sees it cleared
        indices, spec = ArraySpec.parse(unmade).indices, spec_of(first)
        base = _row(spec, first.owner, first.submitted_at, first.run_as) | {
            "array_id": first.array_id,
            "array_max_running": first.array_max_running,
        }
        ids = _insert(session, [base | {"array_index": i} for i in indices])
        _submitted(
            session,
            first.submitted_at,
            [(job_id, _as_task(first.owner, i, first.array_id, spec)) for job_id, i in zip(ids, indices, strict=True)],
        )
        made += len(ids)
    return made


def _row(spec: JobSpec, owner: str, now: datetime, run_as: str | None) -> dict[str, Any]:
    return spec_columns(spec) | {
        "owner": owner,
        "run_as": run_as,
        "state": JobState.PENDING.value,
        "reason_code": NEW_CODE,
        "reason": NEW_REASON,
        "starts": 0,
        "restarts": 0,
        "submitted_at": now,
    }


def _insert(session: Session, rows: list[dict[str, Any]]) -> list[int]:
    if not rows:
        return []
    jobs = cast(Table, JobRow.__table__)  # Core, not the ORM's bulk path: a third of the cost
    statement = insert(jobs).returning(jobs.c.id, sort_by_parameter_order=True)
    return list(session.scalars(statement, rows))


def _submitted(session: Session, now: datetime, messages: list[tuple[int, str]]) -> None:
    session.execute(
        insert(cast(Table, EventRow.__table__)),
        [{"time": now, "job_id": job_id, "node": None, "kind": "submitted", "message": m} for job_id, m in messages],
    )


def _as_task(owner: str, index: int, array_id: int, spec: JobSpec) -> str:
    """A task's ``submitted`` event, the first task's (at the submission) as the others'."""
    return f"submitted by {owner} as task {index} of array {array_id}: {_size(spec)} to project {spec.project}"


def _size(spec: JobSpec) -> str:
    return f"{spec.workers} × {spec.gpus:g} GPU"


def _record(
    job_id: int,
    spec: JobSpec,
    owner: str,
    now: datetime,
    run_as: str | None,
    array_id: int | None = None,
    array_index: int | None = None,
) -> JobRecord:
    return JobRecord(
        id=job_id,
        spec=spec,
        owner=owner,
        state=JobState.PENDING,
        placements=(),
        reason_code=NEW_CODE,
        reason=NEW_REASON,
        exit_code=None,
        starts=0,
        restarts=0,
        stop_reason=None,
        submitted_at=now,
        started_at=None,
        finished_at=None,
        run_as=run_as,
        array_id=array_id,
        array_index=array_index,
    )
