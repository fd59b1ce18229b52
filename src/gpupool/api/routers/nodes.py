"""/api/v1/nodes."""

from __future__ import annotations

from fastapi import APIRouter

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.nodes import NodeOut
from gpupool.domain.errors import NotFound
from gpupool.services import nodes as node_service

router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"])


@router.get("", response_model=list[NodeOut])
def listing(ctx: Ctx, who: Caller) -> list[NodeOut]:
    return [NodeOut.of(r) for r in node_service.listing(ctx)]


@router.get("/{name}", response_model=NodeOut)
def show(name: str, ctx: Ctx, who: Caller) -> NodeOut:
    for r in node_service.listing(ctx):
        if r.node.name == name:
            return NodeOut.of(r)
    raise NotFound(f"no node {name}: list nodes with gpupool nodes", code="node_not_found")
