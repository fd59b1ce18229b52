"""/api/v1/nodes: list, show, GPU telemetry, and (admin) drain and undrain a node or one GPU, and
calibrate its GPUs' power, set its own power budget; /api/v1/power-curves: the curves calibration measured."""

from __future__ import annotations

from fastapi import APIRouter, Query

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.nodes import (
    CalibrateRequest,
    DrainRequest,
    NodeOut,
    PowerBudgetOut,
    PowerBudgetRequest,
    PowerCurveOut,
    TelemetryOut,
)
from gpupool.domain import bounds
from gpupool.domain.telemetry import Resolution
from gpupool.usecases import nodes as node_service
from gpupool.usecases import power as power_service
from gpupool.usecases import telemetry as telemetry_service

router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"])
power_router = APIRouter(prefix="/api/v1/power-curves", tags=["nodes"])


@router.get("", response_model=list[NodeOut])
def listing(ctx: Ctx, who: Caller) -> list[NodeOut]:
    return [NodeOut.of(r) for r in node_service.listing(ctx)]


@router.get("/{name}", response_model=NodeOut)
def show(name: str, ctx: Ctx, who: Caller) -> NodeOut:
    return NodeOut.of(node_service.show(ctx, name))


@router.get("/{name}/telemetry", response_model=TelemetryOut)
def telemetry(
    name: str,
    ctx: Ctx,
    who: Caller,
    gpu: int | None = Query(None, ge=0, le=bounds.MAX_GPU_INDEX, description="only this GPU (its index on the node)"),
    since: str | None = Query(
        None, max_length=64, description="ISO 8601 time, or a duration ago (15m, 2h, 1d); default 15m"
    ),
    until: str | None = Query(None, max_length=64, description="ISO 8601 time, or a duration ago; default now"),
    resolution: Resolution = Query(
        Resolution.AUTO, description="raw, minute, or auto: raw unless part of the window is downsampled"
    ),
) -> TelemetryOut:
    """The GPUs' history: utilisation, memory, temperature, power and the energy counter."""
    return TelemetryOut.of(telemetry_service.history(ctx, name, gpu, since, until, resolution))


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


@router.post("/{name}/calibrate-power", response_model=list[PowerCurveOut])
def calibrate_power(name: str, ctx: Ctx, who: Caller, body: CalibrateRequest | None = None) -> list[PowerCurveOut]:
    """Measure each GPU model's power curve on the node (one GPU no job holds, within ``bound_s``
    a model) and keep it: ``--gpu-power efficient`` follows it from then on."""
    body = body or CalibrateRequest()
    return [PowerCurveOut.model_validate(r) for r in power_service.calibrate(ctx, who, name, body.bound_s)]


@power_router.get("", response_model=list[PowerCurveOut])
def power_curves(ctx: Ctx, who: Caller) -> list[PowerCurveOut]:
    """Every GPU model's calibrated curve, each point marked where efficient picks it."""
    return [PowerCurveOut.model_validate(r) for r in power_service.curves(ctx)]


@router.post("/{name}/power-budget", response_model=PowerBudgetOut)
def set_power_budget(name: str, body: PowerBudgetRequest, ctx: Ctx, who: Caller) -> PowerBudgetOut:
    """The node's own GPU power budget (a rack's circuit), kept with the pool's (issue 33)."""
    return PowerBudgetOut(node=name, power_budget_w=node_service.set_power_budget(ctx, name, body.budget, who))
