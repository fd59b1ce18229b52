"""The FastAPI application, built around an injected ``HeadContext``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.middleware import Middleware

from gpupool import __version__
from gpupool.api import auditing, errors, fast_submit, guard, permissions, throttle
from gpupool.api.deps import Caller, Ctx
from gpupool.api.prometheus import SchedulerMetrics, build_registry
from gpupool.api.prometheus_services import ServiceCollector
from gpupool.api.routers import (
    accounting,
    alerts,
    arrays,
    cluster,
    dashboard,
    gateway_auth,
    images,
    jobs,
    metrics,
    nodes,
    projects,
    registries,
    services,
    telemetry,
    users,
)
from gpupool.api.routers import audit as audit_router
from gpupool.api.schemas.users import WhoAmI
from gpupool.domain.signins import LIMIT as SIGN_IN_LIMIT
from gpupool.domain.signins import SignInBursts
from gpupool.usecases import nodes as node_service
from gpupool.usecases import services as service_layer
from gpupool.usecases import users as user_service
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit


def create_app(
    ctx: HeadContext,
    scheduler_metrics: SchedulerMetrics | None = None,
    max_body: int = guard.DEFAULT_MAX_BODY,
    body_timeout_s: float = guard.DEFAULT_BODY_TIMEOUT_S,
    sign_in_limit: int = SIGN_IN_LIMIT,
) -> FastAPI:
    """``scheduler_metrics``: what the head's controller observes (cycle and pending times), shown
    at ``/metrics``; without it, those histograms stay empty. ``max_body``, ``body_timeout_s``: the
    door's limits (``api/guard.py``)."""
    app = FastAPI(
        title="gpupool", version=__version__, description="Pool the GPUs of many machines into one shared cluster."
    )
    app.state.ctx = ctx
    app.state.submissions = GroupCommit(ctx)  # POST /jobs: requests arriving together share a commit
    app.state.metrics = build_registry(
        ctx.db, scheduler_metrics or SchedulerMetrics(), ctx.clock, ctx.idle.after_s, ctx.power_budget_w
    )
    app.state.metrics.register(ServiceCollector(lambda: service_layer.replica_states(ctx), ctx.load))
    errors.install(app)
    # The door inside the audit log: a request it refuses (401) is still noted as a failed sign-in;
    # outside the door, an address with too many failed sign-ins is slowed down (429).
    signins = SignInBursts(limit=sign_in_limit)
    app.add_middleware(guard.BodyGuard, ctx=ctx, max_body=max_body, body_timeout_s=body_timeout_s)
    app.add_middleware(throttle.SignInThrottle, bursts=signins, clock=ctx.clock)
    auditing.install(app, ctx.db, ctx.clock, signins)  # every change and failed sign-in, to the audit log
    app.include_router(jobs.router)
    app.include_router(arrays.router)
    app.include_router(nodes.router)
    app.include_router(nodes.power_router)
    app.include_router(projects.router)
    app.include_router(cluster.router)
    app.include_router(metrics.router)
    app.include_router(telemetry.router)
    app.include_router(accounting.router)
    app.include_router(alerts.router)
    app.include_router(users.router)
    app.include_router(audit_router.router)
    app.include_router(gateway_auth.router)
    app.include_router(services.router)
    app.include_router(services.gateway_router)
    app.include_router(images.router)
    app.include_router(registries.router)

    @app.get("/healthz", tags=["health"])
    def healthz(ctx: Ctx) -> dict[str, Any]:
        records = node_service.listing(ctx)
        return {
            "status": "ok",
            "version": __version__,
            "nodes": len(records),
            "gpus": sum(len(r.node.gpus) for r in records),
            "simulated": any(r.simulated for r in records),
        }

    @app.get("/api/v1/whoami", tags=["auth"], response_model=WhoAmI)
    def whoami(ctx: Ctx, who: Caller) -> WhoAmI:
        """Who this token speaks for and what it may do: the dashboard offers only those actions."""
        return WhoAmI.of(who, user_service.projects_of(ctx, who))

    # The innermost: POST /api/v1/jobs and /arrays without FastAPI's routing, behind the same door and audit.
    routes = {
        fast_submit.JOBS: next(r for r in jobs.router.routes if isinstance(r, APIRoute) and r.endpoint is jobs.submit),
        fast_submit.ARRAYS: next(
            r for r in arrays.router.routes if isinstance(r, APIRoute) and r.endpoint is arrays.submit
        ),
    }
    app.user_middleware.append(Middleware(fast_submit.FastSubmit, routes=routes, ctx=ctx, group=app.state.submissions))
    dashboard.mount(app)
    errors.document(app)
    permissions.check_routes(app)
    return app
