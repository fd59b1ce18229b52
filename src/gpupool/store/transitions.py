"""The one function that changes a job's state: checks the table, sets the fields the new
state implies, and records an event, all in the caller's transaction."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import cast

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from gpupool.domain.jobs import JobState
from gpupool.domain.lifecycle import check_job_transition, check_node_transition
from gpupool.domain.nodes import NodeState
from gpupool.store.orm import EventRow, JobRow, NodeRow

log = logging.getLogger("gpupool.events")

# A Core statement on the session's connection, not an ORM object: the row is written at once, in
# the order events happen, without the unit of work's bookkeeping, and without ``Session.execute``'s
# autoflush, so what the caller changed on loaded rows is flushed when it was before (issue 36).
_INSERT_EVENT = insert(cast(Table, EventRow.__table__))


def transition_job(
    session: Session, row: JobRow, target: JobState, now: datetime, message: str, *, kind: str | None = None
) -> None:
    """``kind`` names the event where the target state alone would say less (``requeued``, not
    ``pending``); by default the event is named by the target state."""
    current = JobState(row.state)
    check_job_transition(row.id, current, target)
    row.state = target.value
    if target is JobState.STARTING:
        row.starts += 1
        row.reason_code = row.reason = None
        row.exit_code = row.exit_reason = None
        row.finished_at = None
    elif target is JobState.RUNNING:
        row.started_at = now
    elif target.terminal:
        row.finished_at = now
        row.reason_code = row.reason = None
    elif target is JobState.PENDING:
        row.reason_code, row.reason = "requeued", message
    add_event(session, now, kind=kind or target.value, message=message, job_id=row.id)


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
