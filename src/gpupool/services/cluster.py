"""Joining a node to the head's Ray cluster: the head hands out the Ray address and token to
holders of the join token, so a worker machine needs only the head's URL and that token."""

from __future__ import annotations

from gpupool.domain.errors import Conflict, Forbidden
from gpupool.services.context import HeadContext, RayCluster
from gpupool.store.tokens import Principal


def join(ctx: HeadContext, who: Principal, name: str) -> RayCluster:
    if who.role not in ("join", "admin"):
        raise Forbidden("joining a node needs the join token of the head's data dir (file join-token)")
    if ctx.ray is None:
        raise Conflict(
            "this head runs the local backend; start it with gpupool up --backend ray to let nodes join",
            code="not_ray_backend",
        )
    return ctx.ray
