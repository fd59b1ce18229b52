"""The one function that changes a job's state: checks the table, sets the fields the new
state implies, and records an event, all in the caller's transaction."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, insert, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.orm.util import identity_key

from gpupool.domain.jobs import JobState
from gpupool.domain.lifecycle import check_job_transition, check_node_transition
from gpupool.domain.nodes import NodeState
from gpupool.store.orm import EventRow, JobRow, NodeRow

log = logging.getLogger("gpupool.events")

# A Core statement on the session's connection, not an ORM object: the row is written at once, in
# the order events happen, without the unit of work's bookkeeping, and without ``Session.execute``'s
# autoflush, so what the caller changed on loaded rows is flushed when it was before (issue 36).
_INSERT_EVENT = insert(cast(Table, EventRow.__table__))
_JOBS = cast(Table, JobRow.__table__)
# Executed on the session's connection: the columns set are the parameters' keys.
_MOVE_JOB = update(_JOBS).where(_JOBS.c.id == bindparam("jid"), _JOBS.c.state == bindparam("was"))


def transition_job(
    session: Session, row: JobRow, target: JobState, now: datetime, message: str, *, kind: str | None = None
) -> None:
    """``kind`` names the event where the target state alone would say less (``requeued``, not
    ``pending``); by default the event is named by the target state."""
    for name, value in job_changes(row.id, JobState(row.state), row.starts, target, now, message).items():
        setattr(row, name, value)
    add_event(session, now, kind=kind or target.value, message=message, job_id=row.id)


def move_job(
    session: Session,
    job_id: int,
    current: JobState,
    starts: int,
    target: JobState,
    now: datetime,
    message: str,
    **also: object,
) -> None:
    """``transition_job`` for a job read with Core (``state``, ``starts``) in this transaction: one
    ``UPDATE`` guarded by the state it was read in, as the ORM's version column guards a loaded
    row (a row moved meanwhile raises what a flush would, ``Database.tx`` makes it ``Stale``),
    without the unit of work (issue 36). ``also``: other fields written in the same statement. A
    copy of the row the session holds forgets it all."""
    write_job(session, job_id, current, job_changes(job_id, current, starts, target, now, message) | also)
    add_event(session, now, kind=target.value, message=message, job_id=job_id)


def write_job(session: Session, job_id: int, was: JobState, changes: Mapping[str, object]) -> None:
    """Set these columns of a job read with Core in state ``was``: one ``UPDATE`` guarded by that
    state, raising what a flush of a loaded row would when it moved meanwhile. The session's copy
    of the row, if it holds one, forgets what it knew."""
    moved = session.connection().execute(_MOVE_JOB, {"jid": job_id, "was": was.value, **changes})
    if moved.rowcount != 1:
        raise StaleDataError(f"job {job_id} is no longer {was.value}")
    held = session.identity_map.get(identity_key(JobRow, job_id))
    if held is not None:
        session.expire(held)


def job_changes(
    job_id: int, current: JobState, starts: int, target: JobState, now: datetime, message: str
) -> dict[str, object]:
    """The fields a job's move to ``target`` sets, checked against the transition table: what
    ``transition_job`` sets on a loaded row, for a caller that writes with ``write_job``."""
    check_job_transition(job_id, current, target)
    changes: dict[str, object] = {"state": target.value}
    if target is JobState.STARTING:
        changes.update(starts=starts + 1, reason_code=None, reason=None, exit_code=None, exit_reason=None)
        changes["finished_at"] = None
    elif target is JobState.RUNNING:
        changes["started_at"] = now
    elif target.terminal:
        changes.update(finished_at=now, reason_code=None, reason=None)
    elif target is JobState.PENDING:
        changes.update(reason_code="requeued", reason=message)
    return changes


def transition_node(session: Session, row: NodeRow, target: NodeState, now: datetime, message: str) -> None:
    """The one function that changes a node's state, checked against the node table."""
    check_node_transition(row.name, NodeState(row.state), target)
    row.state, row.updated_at = target.value, now
    add_event(session, now, kind=f"node_{target.value}", message=message, node=row.name)


def add_event(
    session: Session, now: datetime, *, kind: str, message: str, job_id: int | None = None, node: str | None = None
) -> None:
    """Record an event in the caller's transaction, and log it (``gpupool.events``, INFO). Every
    event is written here or by ``bulk`` (Core both), so their ids keep the order they happened in."""
    row = {"time": now, "job_id": job_id, "node": node, "kind": kind, "message": message}
    session.connection().execute(_INSERT_EVENT, row)
    subject = f"job {job_id}" if job_id is not None else f"node {node}" if node is not None else "head"
    log.info("%s %s: %s", subject, kind, message)
