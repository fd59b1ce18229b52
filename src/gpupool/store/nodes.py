"""Node and GPU rows: what the executor reports, and what is free on each."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain.errors import NotFound
from gpupool.domain.nodes import GpuInfo, Node, NodeState
from gpupool.domain.power import show_watts
from gpupool.domain.records import LIVE_WORKER_STATES, NodeRecord
from gpupool.store.drain import comeback_state
from gpupool.store.orm import EventRow, GpuRow, NodeRow, WorkerRow
from gpupool.store.transitions import add_event, transition_node


def register_nodes(session: Session, nodes: Iterable[Node], now: datetime) -> None:
    """Upsert what the executor serves; nodes it no longer serves are marked down. A node that is
    back comes back up, or drained if an admin drained it meanwhile."""
    seen: set[str] = set()
    for node in nodes:
        seen.add(node.name)
        row = session.get(NodeRow, node.name, with_for_update=True)
        if node.state is NodeState.DOWN:  # the executor saw it die (Ray backend)
            if row is not None and row.state != NodeState.DOWN.value:
                why = node.labels.get("reason", "it stopped answering")
                transition_node(session, row, NodeState.DOWN, now, f"node {node.name} is down: {why}")
            continue
        if row is None:
            row = NodeRow(
                name=node.name,
                state=NodeState.UP.value,
                address=node.address,
                cpus=node.cpus,
                memory_mib=node.memory_mib,
                labels=dict(node.labels),
                updated_at=now,
                drain_requested=False,
                isolation=dict(node.isolation) or None,
            )
            session.add(row)
            add_event(session, now, kind="node_up", node=node.name, message=f"node {node.name} joined")
        else:
            if row.state == NodeState.DOWN.value:
                target = comeback_state(session, row)
                kept = "" if target is NodeState.UP else f", {target.value} as an admin asked while it was down"
                transition_node(session, row, target, now, f"node {node.name} is back{kept}")
            row.address, row.cpus, row.memory_mib, row.updated_at = node.address, node.cpus, node.memory_mib, now
            if node.isolation:
                row.isolation = dict(node.isolation)
        _sync_gpus(session, node)
    session.flush()
    for row in session.scalars(select(NodeRow).where(NodeRow.name.not_in(seen) if seen else NodeRow.name.is_not(None))):
        if row.state != NodeState.DOWN.value:
            transition_node(session, row, NodeState.DOWN, now, f"node {row.name} is not served by this head any more")


def _sync_gpus(session: Session, node: Node) -> None:
    existing = {g.index: g for g in session.scalars(select(GpuRow).where(GpuRow.node == node.name))}
    for gpu in node.gpus:
        row = existing.pop(gpu.index, None)
        if row is None:
            session.add(
                GpuRow(
                    node=node.name,
                    index=gpu.index,
                    uuid=gpu.uuid,
                    model=gpu.model,
                    memory_mib=gpu.memory_mib,
                    simulated=gpu.simulated,
                    healthy=gpu.healthy,
                    nvlink_group=gpu.nvlink_group,
                    disabled=False,
                    power_min_w=gpu.power_min_w,
                    power_max_w=gpu.power_max_w,
                    power_default_w=gpu.power_default_w,
                )
            )
        else:
            row.uuid, row.model, row.memory_mib, row.simulated = gpu.uuid, gpu.model, gpu.memory_mib, gpu.simulated
            row.healthy, row.nvlink_group = gpu.healthy, gpu.nvlink_group
            row.power_min_w, row.power_max_w, row.power_default_w = (
                gpu.power_min_w,
                gpu.power_max_w,
                gpu.power_default_w,
            )
    for stale in existing.values():
        session.delete(stale)


def nodes_stamp(session: Session) -> tuple[object, ...]:
    """What changes whenever a node joins, leaves, changes state or is registered again (its
    GPUs with it): one cheap query that tells whether ``load_nodes`` would answer differently
    for what a submission is checked against (models, memory, sizes)."""
    # A node's GPUs are written only with the node (register_nodes sets its updated_at).
    row = session.execute(select(func.count(NodeRow.name), func.max(NodeRow.updated_at))).one()
    return tuple(row)


def load_nodes(session: Session) -> list[Node]:
    """Nodes as the scheduler sees them: a GPU is healthy when its probe says so and no admin
    took it out of service."""
    return [node for node, _, _ in _load(session)]


def node_state(session: Session, name: str) -> NodeState | None:
    """The node's state, or None if no node of that name ever registered."""
    state = session.scalars(select(NodeRow.state).where(NodeRow.name == name)).first()
    return NodeState(state) if state is not None else None


def down_nodes(session: Session) -> dict[str, str]:
    """Nodes that are down, each with the reason its labels record (empty if none)."""
    rows = session.execute(select(NodeRow.name, NodeRow.labels).where(NodeRow.state == NodeState.DOWN.value))
    return {name: str((labels or {}).get("reason", "")) for name, labels in rows}


def node_records(session: Session) -> list[NodeRecord]:
    used: dict[str, dict[int, list[int]]] = {}
    jobs: dict[str, set[int]] = {}
    for w in session.scalars(select(WorkerRow).where(WorkerRow.status.in_(LIVE_WORKER_STATES))):
        jobs.setdefault(w.node, set()).add(w.job_id)
        for index in w.gpus:
            used.setdefault(w.node, {}).setdefault(index, []).append(w.job_id)
    out = []
    for node, drain_requested, disabled in _load(session):
        node_used = used.get(node.name, {})
        # Free means a new job could get it: nothing on a node that is not up.
        free = sum(1 for g in node.gpus if g.healthy and g.index not in node_used) if node.schedulable else 0
        out.append(
            NodeRecord(
                node=node,
                gpus_free=free,
                simulated=any(g.simulated for g in node.gpus),
                used_gpus=node_used,
                drain_requested=drain_requested,
                disabled_gpus=disabled,
                jobs=tuple(sorted(jobs.get(node.name, ()))),
            )
        )
    return out


def _load(session: Session) -> list[tuple[Node, bool, frozenset[int]]]:
    """Each node, whether an admin asked to drain it, and the GPUs an admin took out of service."""
    gpus: dict[str, list[GpuInfo]] = {}
    disabled: dict[str, set[int]] = {}
    for g in session.scalars(select(GpuRow).order_by(GpuRow.node, GpuRow.index)):
        if g.disabled:
            disabled.setdefault(g.node, set()).add(g.index)
        gpus.setdefault(g.node, []).append(
            GpuInfo(
                index=g.index,
                uuid=g.uuid,
                model=g.model,
                memory_mib=g.memory_mib,
                simulated=g.simulated,
                healthy=g.healthy and not g.disabled,
                nvlink_group=g.nvlink_group,
                power_min_w=g.power_min_w,
                power_max_w=g.power_max_w,
                power_default_w=g.power_default_w,
            )
        )
    return [
        (
            Node(
                name=r.name,
                state=NodeState(r.state),
                address=r.address,
                gpus=tuple(gpus.get(r.name, [])),
                cpus=r.cpus,
                memory_mib=r.memory_mib,
                labels=dict(r.labels),
                isolation=dict(r.isolation or {}),
            ),
            r.drain_requested,
            frozenset(disabled.get(r.name, ())),
        )
        for r in session.scalars(select(NodeRow).order_by(NodeRow.name))
    ]


def set_power_budget(session: Session, name: str, watts: float | None, now: datetime, by: str) -> Node:
    """Give a node a power budget of its own (a rack's circuit), or take it away (None); an event
    says who and what. The node as loaded, for the caller's checks."""
    row = session.get(NodeRow, name, with_for_update=True)
    if row is None:
        raise NotFound(f"no node {name}: list nodes with gpupool nodes", code="node_not_found")
    row.power_budget_w = watts
    what = "no power budget of its own" if watts is None else f"a power budget of {show_watts(watts)}"
    add_event(session, now, kind="power", node=name, message=f"node {name} has {what} (set by {by})")
    return next(node for node, _, _ in _load(session) if node.name == name)


def power_budgets(session: Session) -> dict[str, float]:
    """The nodes' own power budgets, by name (nodes without one are left out)."""
    rows = session.execute(select(NodeRow.name, NodeRow.power_budget_w).where(NodeRow.power_budget_w.is_not(None)))
    return {name: float(watts) for name, watts in rows if watts}


def power_events(session: Session, begins: str) -> int:
    """How many power events the store keeps whose message begins so (the throttle's caps)."""
    found = session.scalar(
        select(func.count(EventRow.id)).where(EventRow.kind == "power", EventRow.message.like(f"{begins}:%"))
    )
    return int(found or 0)
