"""Node use cases: list, show, and the admin's drain and undrain of a node or one GPU."""

from __future__ import annotations

from gpupool.domain.errors import NotFound
from gpupool.domain.power import parse_watts
from gpupool.domain.power_budget import check_budget
from gpupool.domain.records import NodeRecord
from gpupool.store import drain as drain_repo
from gpupool.store import nodes as node_repo
from gpupool.store.tokens import Principal
from gpupool.usecases.access import require_admin
from gpupool.usecases.context import HeadContext


def listing(ctx: HeadContext) -> list[NodeRecord]:
    with ctx.db.read() as s:
        return node_repo.node_records(s)


def show(ctx: HeadContext, name: str) -> NodeRecord:
    for record in listing(ctx):
        if record.node.name == name:
            return record
    raise NotFound(f"no node {name}: list nodes with gpupool nodes", code="node_not_found")


def drain(ctx: HeadContext, name: str, who: Principal, gpu: int | None = None, reason: str | None = None) -> NodeRecord:
    """Drain a node (its jobs finish, nothing new starts there), or take one GPU out of service."""
    require_admin(who, "drain nodes or GPUs")
    with ctx.db.tx() as s:
        if gpu is None:
            drain_repo.drain_node(s, name, ctx.clock.now(), who.user, reason)
        else:
            drain_repo.set_gpu_disabled(s, name, gpu, True, ctx.clock.now(), who.user, reason)
    ctx.wake_controller()
    return show(ctx, name)


def undrain(
    ctx: HeadContext, name: str, who: Principal, gpu: int | None = None, reason: str | None = None
) -> NodeRecord:
    """Open a node to new jobs again, or put one GPU back in service."""
    require_admin(who, "undrain nodes or GPUs")
    with ctx.db.tx() as s:
        if gpu is None:
            drain_repo.undrain_node(s, name, ctx.clock.now(), who.user, reason)
        else:
            drain_repo.set_gpu_disabled(s, name, gpu, False, ctx.clock.now(), who.user, reason)
    ctx.wake_controller()
    return show(ctx, name)


def set_power_budget(ctx: HeadContext, name: str, budget: str | None, who: Principal) -> float | None:
    """Give a node a power budget of its own (a rack's circuit: ``3kW``), or none (None, ``none``,
    0). One below what the node's GPUs draw idle is refused: it could never be kept."""
    require_admin(who, "set nodes' power budgets")
    text = (budget or "").strip()
    watts = None if text.lower() in ("", "none") else parse_watts(text, "power budget") or None
    with ctx.db.tx() as s:
        node = node_repo.set_power_budget(s, name, watts, ctx.clock.now(), who.user)
        check_budget(watts or 0.0, [node], f"{name}'s power budget")  # refused: the transaction rolls back
    ctx.wake_controller()
    return watts
