"""/api/v1/cluster: joining worker nodes (Ray backend)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from gpupool.api.auditing import set_target
from gpupool.api.deps import Caller, Ctx
from gpupool.usecases import cluster as cluster_service

router = APIRouter(prefix="/api/v1/cluster", tags=["cluster"])


class JoinIn(BaseModel):
    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class JoinOut(BaseModel):
    ray_address: str
    ray_token: str
    node_timeout_s: float


@router.post("/join", response_model=JoinOut)
def join(body: JoinIn, ctx: Ctx, who: Caller, request: Request) -> JoinOut:
    set_target(request, f"node {body.name}")
    ray = cluster_service.join(ctx, who, body.name)
    return JoinOut(ray_address=ray.address, ray_token=ray.token, node_timeout_s=ray.node_timeout_s)
