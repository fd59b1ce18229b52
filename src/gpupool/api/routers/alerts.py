"""/api/v1/alerts and /api/v1/gpus/idle: what needs an admin's attention."""

from __future__ import annotations

from fastapi import APIRouter, Query

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.alerts import AlertOut, IdleGpuOut
from gpupool.usecases import alerts as alert_service

router = APIRouter(prefix="/api/v1", tags=["alerts"])


@router.get("/alerts", response_model=list[AlertOut])
def alerts(
    ctx: Ctx, who: Caller, all: bool = Query(False, description="include cleared alerts of the last 30 days")
) -> list[AlertOut]:
    """Active alerts, newest first: GPUs over the temperature threshold, XID errors, nodes down."""
    return [AlertOut.of(a) for a in alert_service.alerts(ctx, all)]


@router.get("/gpus/idle", response_model=list[IdleGpuOut])
def idle_gpus(ctx: Ctx, who: Caller) -> list[IdleGpuOut]:
    """GPUs allocated to a job but idle: below the head's idle threshold for its idle time."""
    return [IdleGpuOut.of(g) for g in alert_service.idle_gpus(ctx)]
