"""Request dependencies: the injected head context and the caller's identity."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpupool.domain.errors import Forbidden, Unauthorized
from gpupool.domain.users import JOIN_ROLE, Scope
from gpupool.services.context import HeadContext
from gpupool.store.tokens import Principal, principal_for


class _PrincipalCache:
    """Valid tokens seen recently, so a burst of requests costs one token query a second, not
    one each. Short-lived on purpose: a revoked or expired token, or a disabled user's, stops
    working within ``ttl_s``."""

    def __init__(self, ttl_s: float = 1.0, size: int = 1024) -> None:
        self._ttl, self._size = ttl_s, size
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, token: str) -> Principal | None:
        entry = self._entries.get(token)
        if entry is None or time.monotonic() - entry[0] > self._ttl:
            return None
        return entry[1]

    def put(self, token: str, who: Principal) -> None:
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[token] = (time.monotonic(), who)


_cache = _PrincipalCache()
JOIN_PATH = "/api/v1/cluster/join"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
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
    who = _cache.get(credentials.credentials)
    if who is None:
        with ctx.db.tx() as s:
            who = principal_for(s, credentials.credentials, ctx.clock.now())
        if who is not None:
            _cache.put(credentials.credentials, who)
    if who is None:
        raise Unauthorized(
            "invalid token (unknown, expired or revoked, or its user is disabled): check GPUPOOL_TOKEN"
            " (or the admin-token file of the head's data dir)"
        )
    if who.role == JOIN_ROLE:
        if request.url.path != JOIN_PATH:
            raise Forbidden("a join token only lets a node join (gpupool join); use a user token for the API")
        return who
    if request.method not in READ_METHODS and not who.may(Scope.SUBMIT):
        # Until every route has its rule in the permission table, a read-only token (a viewer's,
        # or one made with --scope read) is held to what reads: it can change nothing.
        raise Forbidden(
            f"{who.user}'s token is read-only (scope read): it can list and show, not change anything; "
            "use a token with scope submit or admin",
            code="read_only_token",
        )
    return who


Ctx = Annotated[HeadContext, Depends(context)]
Caller = Annotated[Principal, Depends(principal)]
