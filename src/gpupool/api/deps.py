"""Request dependencies: the injected head context and the caller's identity."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpupool.domain.errors import Unauthorized
from gpupool.services.context import HeadContext
from gpupool.store.tokens import Principal, principal_for

_bearer = HTTPBearer(auto_error=False, description="a gpupool token (the admin token is in the data dir)")


def context(request: Request) -> HeadContext:
    ctx: HeadContext = request.app.state.ctx
    return ctx


def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None:
        raise Unauthorized("missing token: set GPUPOOL_TOKEN, or GPUPOOL_DATA_DIR to the head's data dir")
    ctx = context(request)
    with ctx.db.tx() as s:
        who = principal_for(s, credentials.credentials)
    if who is None:
        raise Unauthorized("invalid token: check GPUPOOL_TOKEN (or the admin-token file of the head's data dir)")
    return who


Ctx = Annotated[HeadContext, Depends(context)]
Caller = Annotated[Principal, Depends(principal)]
