"""Node use cases."""

from __future__ import annotations

from gpupool.domain.records import NodeRecord
from gpupool.services.context import HeadContext
from gpupool.store import nodes as node_repo


def listing(ctx: HeadContext) -> list[NodeRecord]:
    with ctx.db.tx() as s:
        return node_repo.node_records(s)
