"""Many submissions in one transaction: a batch of jobs, or the tasks of an array.

Core ``INSERT ... RETURNING`` statements with many parameter sets, not one ORM object per job:
a thousand tasks are two statements for their rows and one for their events, which is what keeps
a 1,000-task array well under a second. A single submission (``jobs.insert_job``) comes through
here too: every job starts pending, with reason ``new`` and a ``submitted`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert, update
from sqlalchemy.orm import Session

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.records import JobRecord
from gpupool.store.convert import spec_columns
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
) -> list[JobRecord]:
    """One job per index. The first task is written first, for its id: that is the array's id,
    which every task (the first one too) carries in ``array_id``."""
    base = _row(spec, owner, now, run_as) | {"array_max_running": array.max_running}
    first, *rest = array.indices
    (array_id,) = _insert(session, [base | {"array_index": first}])
    ids = [array_id, *_insert(session, [base | {"array_id": array_id, "array_index": i} for i in rest])]
    session.execute(update(JobRow).where(JobRow.id == array_id).values(array_id=array_id))
    what = f"{_size(spec)} to project {spec.project}"
    _submitted(
        session,
        now,
        [
            (job_id, f"submitted by {owner} as task {i} of array {array_id}: {what}")
            for job_id, i in zip(ids, array.indices, strict=True)
        ],
    )
    log.info("array %s submitted by %s: %d tasks (%s)", array_id, owner, len(ids), array)
    return [
        _record(job_id, spec, owner, now, run_as, array_id=array_id, array_index=i)
        for job_id, i in zip(ids, array.indices, strict=True)
    ]


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
