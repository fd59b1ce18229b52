"""Request dependencies: the injected head context and the caller's identity."""

from __future__ import annotations

import hmac
import time
from typing import Annotated

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpupool.api.permissions import rule_for
from gpupool.domain.errors import Forbidden, Unauthorized
from gpupool.domain.permissions import refusal
from gpupool.domain.users import GATEWAY_ROLE, Scope
from gpupool.store.tokens import Principal, principal_for
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit

GATEWAY = Principal(GATEWAY_ROLE, GATEWAY_ROLE, Scope.READ)  # the head's gateway, by its identity


class _PrincipalCache:
    """Valid tokens seen recently, so a burst of requests costs one token query a second, not
    one each. Short-lived on purpose: a revoked or expired token, or a disabled user's, stops
    working within ``ttl_s``."""

    def __init__(self, ttl_s: float = 0.5, size: int = 1024) -> None:
        self._ttl, self._size = ttl_s, size
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, token: str) -> Principal | None:
        entry = self._entries.get(token)
        if entry is None or time.monotonic() - entry[0] > self._ttl:
            return None
        return entry[1]

    def clear(self) -> None:
        self._entries.clear()

    def put(self, token: str, who: Principal) -> None:
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[token] = (time.monotonic(), who)


# Half a second, and the gateway's own half second: a revoked token fails within a second anywhere.
_cache = _PrincipalCache(ttl_s=0.5)
_bearer = HTTPBearer(auto_error=False, description="a gpupool token (the admin token is in the data dir)")


MISSING_TOKEN = "missing token: sign in with gpupool login URL, or set GPUPOOL_TOKEN"
INVALID_TOKEN = (
    "invalid token (unknown, expired or revoked, or its user is disabled): sign in again with"
    " gpupool login URL, or check GPUPOOL_TOKEN"
)


def cached(token: str) -> Principal | None:
    """Whom a token speaks for if it was checked within the last second; None if not (or unknown)."""
    return _cache.get(token)


def forget_principals() -> None:
    """A token was revoked, or a user disabled, deleted or changed: this head answers from the
    store again at once (the gateway keeps its own half second)."""
    _cache.clear()


def authenticate(ctx: HeadContext, token: str) -> Principal | None:
    """Whom a token speaks for, or None: the head's own gateway, else from the cache, else the store."""
    if ctx.gateway_secret is not None and hmac.compare_digest(token.encode(), ctx.gateway_secret.encode()):
        return GATEWAY
    who = _cache.get(token)
    if who is None:
        with ctx.db.tx() as s:
            who = principal_for(s, token, ctx.clock.now())
        if who is not None:
            _cache.put(token, who)
    return who


# The dependencies are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in its
# thread pool, a hand-over to another thread and back (a fifth of a small request's cost here).
# None of them waits on anything but, rarely, one short token query.


async def context(request: Request) -> HeadContext:
    return _context(request)


def _context(request: Request) -> HeadContext:
    ctx: HeadContext = request.app.state.ctx
    return ctx


async def principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None:
        raise Unauthorized(MISSING_TOKEN)
    who = authenticate(_context(request), credentials.credentials)  # the door checked it: from the cache
    if who is None:
        raise Unauthorized(INVALID_TOKEN)
    request.state.principal = who  # for the audit log
    route = request.scope.get("route")
    rule = rule_for(request.method, route.path_format if isinstance(route, APIRoute) else request.url.path)
    denied = refusal(rule, who.role, who.scope)
    if denied is not None:
        raise Forbidden(f"{who.user} may not {request.method} {request.url.path}: {denied.message}", code=denied.code)
    return who


async def submissions(request: Request) -> GroupCommit:
    group: GroupCommit = request.app.state.submissions
    return group


Ctx = Annotated[HeadContext, Depends(context)]
Submissions = Annotated[GroupCommit, Depends(submissions)]
Caller = Annotated[Principal, Depends(principal)]
