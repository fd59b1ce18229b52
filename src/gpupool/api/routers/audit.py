"""/api/v1/audit: who changed what (admins)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from gpupool.api.auditing import audit_log
from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.audit import AuditOut
from gpupool.usecases import audit as audit_service

router = APIRouter(prefix="/api/v1", tags=["audit"])


@router.get("/audit", response_model=list[AuditOut])
def audit(
    request: Request,
    ctx: Ctx,
    who: Caller,
    since: str | None = Query(
        None,
        max_length=64,
        description="only entries this recent: ISO 8601 time, or a duration ago (1d); default all kept (90 days)",
    ),
    user: str | None = Query(None, max_length=64, description="only this user's requests"),
    limit: int = Query(1000, ge=1, le=audit_service.MAX_LIMIT, description="at most this many, the newest"),
) -> list[AuditOut]:
    """Requests that changed something, and failed sign-ins, newest first."""
    audit_log(request.app).flush()  # every request answered before this one is in the answer
    return [AuditOut.of(e) for e in audit_service.listing(ctx, who, since, user, limit)]
