"""Joining a node to the head's Ray cluster: the head hands out the Ray address and token to
holders of the join token, so a worker machine needs only the head's URL and that token."""

from __future__ import annotations

from gpupool.domain.errors import Conflict, Forbidden
from gpupool.domain.nodes import NodeState
from gpupool.store import nodes as node_repo
from gpupool.store.tokens import Principal
from gpupool.usecases.context import HeadContext, RayCluster


def join(ctx: HeadContext, who: Principal, name: str) -> RayCluster:
    if who.role not in ("join", "admin"):
        raise Forbidden("joining a node needs the join token of the head's data dir (file join-token)")
    if ctx.ray is None or not ctx.executor.capabilities.node_join:
        raise Conflict(
            "this head runs the local backend; start it with gpupool up --backend ray to let nodes join",
            code="not_ray_backend",
        )
    with ctx.db.tx() as s:
        state = node_repo.node_state(s, name)
    if state is not None and state is not NodeState.DOWN:
        raise Conflict(
            f"node {name} is {state}: two nodes may not share a name; pick another --name, or wait "
            f"until the head sees the old {name} down (at most the node timeout, {ctx.ray.node_timeout_s:g}s)",
            code="node_name_taken",
        )
    return ctx.ray
