"""/api/v1/services: serve (create or update), list, show, scale, delete; /api/v1/gateway: what the
gateway reads (routes to ready replicas) and writes (load reports, for the autoscaler)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.services import RouteOut, RoutesOut, ScaleRequest, ServeRequest, ServiceOut, StatsIn, StatsOut
from gpupool.usecases import services as service_layer

router = APIRouter(prefix="/api/v1/services", tags=["services"])
gateway_router = APIRouter(prefix="/api/v1/gateway", tags=["gateway"])


@router.post(
    "",
    response_model=ServiceOut,
    status_code=200,
    responses={201: {"model": ServiceOut, "description": "the service was created"}},
)
def serve(body: ServeRequest, request: Request, response: Response, ctx: Ctx, who: Caller) -> ServiceOut:
    """Create the service (201), or update it (200): a changed replica job rolls its replicas one
    at a time, a new one ready before an old one stops."""
    view, created = service_layer.serve(ctx, body.spec(), who)
    if created:
        response.status_code = 201
    return ServiceOut.of(view, str(request.base_url), ctx.gateway)


@router.get("", response_model=list[ServiceOut])
def listing(request: Request, ctx: Ctx, who: Caller) -> list[ServiceOut]:
    return [ServiceOut.of(v, str(request.base_url), ctx.gateway) for v in service_layer.listing(ctx, who)]


@router.get("/{name}", response_model=ServiceOut)
def show(name: str, request: Request, ctx: Ctx, who: Caller) -> ServiceOut:
    return ServiceOut.of(service_layer.show(ctx, name, who), str(request.base_url), ctx.gateway)


@router.post("/{name}/scale", response_model=ServiceOut)
def scale(name: str, body: ScaleRequest, request: Request, ctx: Ctx, who: Caller) -> ServiceOut:
    return ServiceOut.of(service_layer.scale(ctx, name, body.replicas, who), str(request.base_url), ctx.gateway)


@router.delete("/{name}", status_code=204, response_class=Response)
def delete(name: str, ctx: Ctx, who: Caller) -> Response:
    service_layer.delete(ctx, name, who)
    return Response(status_code=204)


@gateway_router.get("/routes", response_model=RoutesOut)
def routes(ctx: Ctx, who: Caller) -> RoutesOut:
    """Every service with its ready replicas' endpoints (a service scaled to zero too, with none),
    and every running job's published port (``--expose``)."""
    services, jobs = service_layer.routes(ctx), service_layer.job_routes(ctx)
    return RoutesOut(routes=[*(RouteOut.of(r) for r in services), *(RouteOut.of_job(j) for j in jobs)])


@gateway_router.post("/stats", response_model=StatsOut)
def stats(body: StatsIn, ctx: Ctx, who: Caller) -> StatsOut:
    """The gateway's load report, kept in memory for the autoscaler."""
    lines = [r.line() for r in body.replicas]
    return StatsOut(kept=service_layer.record_load(ctx, body.window_s, lines, body.latency_bounds or ()))
