"""/api/v1/nodes: list, show, and (admin) drain and undrain a node or one GPU."""

from __future__ import annotations

from fastapi import APIRouter

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.nodes import DrainRequest, NodeOut
from gpupool.services import nodes as node_service

router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"])


@router.get("", response_model=list[NodeOut])
def listing(ctx: Ctx, who: Caller) -> list[NodeOut]:
    return [NodeOut.of(r) for r in node_service.listing(ctx)]


@router.get("/{name}", response_model=NodeOut)
def show(name: str, ctx: Ctx, who: Caller) -> NodeOut:
    return NodeOut.of(node_service.show(ctx, name))


@router.post("/{name}/drain", response_model=NodeOut)
def drain(name: str, ctx: Ctx, who: Caller, body: DrainRequest | None = None) -> NodeOut:
    """Running jobs finish, nothing new starts: the node becomes drained once its last job ends.
    With ``gpu``, only that GPU is taken out of service."""
    body = body or DrainRequest()
    return NodeOut.of(node_service.drain(ctx, name, who, gpu=body.gpu, reason=body.reason))


@router.post("/{name}/undrain", response_model=NodeOut)
def undrain(name: str, ctx: Ctx, who: Caller, body: DrainRequest | None = None) -> NodeOut:
    """The node (or, with ``gpu``, that GPU) takes new jobs again."""
    body = body or DrainRequest()
    return NodeOut.of(node_service.undrain(ctx, name, who, gpu=body.gpu, reason=body.reason))
