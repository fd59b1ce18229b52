"""GET /api/v1/gateway/authorize: the gateway asks whether the caller's token may use a route.

The gateway (``gateway/access.py``) sends the caller's own token, so the head's usual door checks
it; the answer is 204 (yes, naming the caller in ``X-Gpupool-User``, which the gateway tells the
replica), 401 (no such token) or 403 (not this route's). It keeps answers a few seconds, so a burst
of calls costs the head one question per token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from gpupool.api.deps import Caller, Ctx
from gpupool.usecases import gateway_access

router = APIRouter(prefix="/api/v1/gateway", tags=["gateway"])


@router.get("/authorize", status_code=204, response_class=Response)
def authorize(
    ctx: Ctx,
    who: Caller,
    project: Annotated[str | None, Query(max_length=200, description="the route's project")] = None,
    job: Annotated[int | None, Query(ge=1, le=2**62, description="a job's published port: its id")] = None,
) -> Response:
    """204 when the caller may use a route of ``project`` (or job ``job``'s port); with neither,
    when the token is any user's (the gateway's ``/metrics``)."""
    gateway_access.authorize(ctx, who, project, job)
    return Response(status_code=204, headers={"X-Gpupool-User": who.user})
