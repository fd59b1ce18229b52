"""/api/v1/telemetry: the cluster-wide view of GPU readings (a node's history is under /nodes)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.telemetry import GpuSampleOut
from gpupool.usecases import telemetry as telemetry_service

router = APIRouter(prefix="/api/v1/telemetry", tags=["telemetry"])


@router.get("/latest", response_model=list[GpuSampleOut])
def latest(
    ctx: Ctx,
    who: Caller,
    since: str | None = Query(
        None,
        max_length=64,
        description="only readings this recent: ISO 8601 time, or a duration ago (1m); default any kept",
    ),
) -> list[GpuSampleOut]:
    """The newest reading of every GPU of every node, ordered by node and GPU index. A GPU not read
    since ``since`` (its node is down, or has not been sampled yet) is left out."""
    return [GpuSampleOut.of(s) for s in telemetry_service.latest(ctx, since)]
