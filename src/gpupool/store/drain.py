"""Admins take nodes and GPUs out of service, gracefully.

A drained node keeps its running jobs until they end; the scheduler offers only ``up`` nodes, so
nothing new lands on it. The wish is kept apart from the state (``drain_requested``): a node
drained while it is down comes back drained, not up. A GPU an admin marks (``disabled``) is kept
apart from the probe's health, which every registration overwrites; the scheduler sees a GPU as
healthy only when both say so.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain.errors import NotFound
from gpupool.domain.nodes import NodeState
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.store.orm import GpuRow, NodeRow, WorkerRow
from gpupool.store.transitions import add_event, transition_node


def drain_node(session: Session, name: str, now: datetime, by: str, reason: str | None = None) -> None:
    """Up -> draining (-> drained at once when nothing runs there). Draining or drained: nothing
    to do. Down: the wish is recorded, and the node comes back drained."""
    row = node_row(session, name, lock=True)
    why = f" ({reason})" if reason else ""
    state = NodeState(row.state)
    if state is NodeState.DOWN:
        if not row.drain_requested:
            add_event(
                session,
                now,
                kind="drain_requested",
                node=name,
                message=f"drain requested by {by}{why} while node {name} is down; it comes back drained",
            )
        row.drain_requested = True
        return
    row.drain_requested = True
    if state is not NodeState.UP:
        return
    message = f"drain requested by {by}{why}: running jobs finish, nothing new starts on node {name}"
    transition_node(session, row, NodeState.DRAINING, now, message)
    _settle(session, row, now)


def undrain_node(session: Session, name: str, now: datetime, by: str, reason: str | None = None) -> None:
    """Draining or drained -> up. Down: the wish is cleared, and the node comes back up."""
    row = node_row(session, name, lock=True)
    why = f" ({reason})" if reason else ""
    wished, row.drain_requested = row.drain_requested, False
    state = NodeState(row.state)
    if state in (NodeState.DRAINING, NodeState.DRAINED):
        transition_node(session, row, NodeState.UP, now, f"undrained by {by}{why}: node {name} takes new jobs again")
    elif state is NodeState.DOWN and wished:
        add_event(
            session,
            now,
            kind="undrain_requested",
            node=name,
            message=f"undrained by {by}{why} while node {name} is down; it comes back up",
        )


def set_gpu_disabled(
    session: Session, name: str, index: int, disabled: bool, now: datetime, by: str, reason: str | None = None
) -> None:
    """Take one GPU out of service (or put it back). A job on it keeps running."""
    node_row(session, name, lock=True)
    gpu = session.get(GpuRow, (name, index))
    if gpu is None:
        indices = sorted(session.scalars(select(GpuRow.index).where(GpuRow.node == name)))
        has = f"its GPUs are {', '.join(map(str, indices))}" if indices else "it has no GPU"
        raise NotFound(f"node {name} has no GPU {index}: {has}", code="gpu_not_found")
    if gpu.disabled == disabled:
        return
    gpu.disabled = disabled
    why = f" ({reason})" if reason else ""
    if disabled:
        kind, message = "gpu_disabled", f"GPU {index} marked unhealthy by {by}{why}: nothing new starts on it"
    else:
        probe = "" if gpu.healthy else "; its probe still reports it unhealthy, so it stays out of service"
        kind, message = "gpu_enabled", f"GPU {index} back in service, mark cleared by {by}{why}{probe}"
    add_event(session, now, kind=kind, node=name, message=message)


def settle_drains(session: Session, now: datetime) -> list[str]:
    """Draining nodes with no live worker left become drained; the controller calls this every
    cycle. Returns their names."""
    query = select(NodeRow).where(NodeRow.state == NodeState.DRAINING.value).order_by(NodeRow.name)
    rows = list(session.scalars(query.with_for_update()))
    return [row.name for row in rows if _settle(session, row, now)]


def comeback_state(session: Session, row: NodeRow) -> NodeState:
    """The state a node that was down takes when it is served again."""
    if not row.drain_requested:
        return NodeState.UP
    return NodeState.DRAINING if live_workers_on(session, row.name) else NodeState.DRAINED


def live_workers_on(session: Session, name: str) -> int:
    query = select(func.count(WorkerRow.id)).where(WorkerRow.node == name, WorkerRow.status.in_(LIVE_WORKER_STATES))
    return int(session.scalar(query) or 0)


def node_row(session: Session, name: str, *, lock: bool = False) -> NodeRow:
    query = select(NodeRow).where(NodeRow.name == name)
    if lock:
        query = query.with_for_update()
    row = session.scalars(query).first()
    if row is None:
        raise NotFound(f"no node {name}: list nodes with gpupool nodes", code="node_not_found")
    return row


def _settle(session: Session, row: NodeRow, now: datetime) -> bool:
    if live_workers_on(session, row.name):
        return False
    transition_node(session, row, NodeState.DRAINED, now, f"node {row.name} drained: no job runs on it any more")
    return True
