"""/api/v1/report: accounting per project, user or job, for any authenticated user."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from gpupool.api.deps import Caller, Ctx
from gpupool.usecases import accounting as accounting_service

router = APIRouter(prefix="/api/v1", tags=["accounting"])


@router.get("/report")
def report(
    ctx: Ctx,
    who: Caller,
    since: str | None = Query(
        None, max_length=64, description="ISO 8601 time or a duration ago (7d); default 7 days ago"
    ),
    until: str | None = Query(None, max_length=64, description="ISO 8601 time or a duration ago; default now"),
    by: str = Query("project", max_length=64, description="project, user or job"),
) -> dict[str, Any]:
    """GPU-hours allocated and used (utilisation-weighted; ``coverage`` is the part of the allocated
    GPU-hours with utilisation readings), energy in kWh and queue times, per group. Every
    authenticated user sees every group."""
    return accounting_service.report(ctx, since, until, by).to_dict()
