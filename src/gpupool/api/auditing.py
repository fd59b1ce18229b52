"""Recording the audit log: a middleware that notes every request that changes something (any
method but GET, HEAD and OPTIONS, on a route of the API) and every failed sign-in (a 401 on any
route), after it is answered.

What is noted comes from the request's route and answer, never from its body:

- the action, named after the route: its resource (the first part of its path under
  ``/api/v1``) and its name (the endpoint function's, less the resource's singular), so
  ``POST /api/v1/jobs/{job_id}/cancel`` (``cancel``) is ``jobs.cancel`` and ``PUT
  /api/v1/projects/{name}`` (``set_project``) is ``projects.set``; a new route is named the same
  way without a list to keep. A failed sign-in is ``auth.failed``, its target the method and path.
- the target: what a route names with ``set_target``; else, for a 2xx with a ``Location`` header
  (a submitted job, a new user or token), what that names; else the route's path parameters
  (``job 12``, ``node n1``, ``project ml, member bob``); else the resource (``users``).
- who (the ``Principal`` that ``deps.principal`` leaves in the request's state), the result from
  the HTTP status, and the client's address.

Entries go to an ``AuditLog`` (``usecases/audit.py``), which writes them in batches from a
thread of its own. The entry of a request that changed something is written before its answer
leaves (requests answered together share the write), so a head killed right after it answered
still has it; a failed sign-in's is written within half a second. A submission that makes (or
replays) its job is the exception: its entry, the same one, is written by the group commit in the
job's own transaction (``in_transaction``), so the two are committed together or not at all, with
one commit and one fsync instead of two (at 1,000 submissions a second the audit writer's own
transactions were a tenth of the head's CPU). The client's address is the
socket's: the head trusts ``X-Forwarded-For`` only from the proxies it was told of (``gpupool up
--trusted-proxy``), never by default (a job on the head's own machine could send one).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.api.throttle import UNTHROTTLED
from gpupool.clock import Clock
from gpupool.domain.audit import AUTH_FAILED, AuditEntry, AuditResult, result_of
from gpupool.domain.records import JobRecord
from gpupool.domain.signins import BurstSummary, SignInBursts
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases.audit import AuditLog

logger = logging.getLogger("gpupool.audit")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
API_PREFIX = "/api/v1/"
_TARGET = "audit_target"  # the request-state key ``set_target`` writes
_AT = "audit_at"  # when the request came in: the time of its entry
_WRITTEN = "audit_written"  # its entry went into the transaction of what it changed


def install(app: FastAPI, db: Database, clock: Clock, signins: SignInBursts | None = None) -> AuditLog:
    """Record ``app``'s requests into a new ``AuditLog`` on ``db``, closed when the app shuts
    down (a head served without the ASGI lifespan calls ``close``). ``signins``: the bursts of
    failed sign-ins, each written once with its count (shared with ``api/throttle.py``)."""
    log = AuditLog(db)
    bursts = signins or SignInBursts()
    app.state.audit, app.state.signins = log, bursts
    app.add_middleware(AuditMiddleware, log=log, clock=clock, bursts=bursts)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[Any]:
        async with inner(a) as state:
            try:
                yield state
            finally:
                close(app)

    app.router.lifespan_context = lifespan
    return log


# Posts that change nothing a person did: the gateway's load reports, every few seconds, kept in memory.
UNAUDITED = frozenset({("POST", "/api/v1/gateway/stats")})


def audit_log(app: Any) -> AuditLog:
    log: AuditLog = app.state.audit
    return log


def close(app: FastAPI) -> None:
    """Write what is pending (bursts of failed sign-ins still going included) and stop the writer:
    at shutdown."""
    log, bursts = audit_log(app), app.state.signins
    for summary in bursts.ended(datetime.now(UTC), everything=True):
        log.record(_summary_entry(summary))
    log.close()


def set_target(request: Request, target: str) -> None:
    """Name the request's target for the audit log, where the path does not (``node n1`` joining)."""
    request.state.audit_target = target


class InTransaction:
    """A submission's audit entry for the group commit to write with its job (``GroupCommit
    .submit_async``): the entry the middleware would write after the answer, made from the same
    request and the ``Location`` the answer will carry. ``written`` tells the middleware not to
    write it again."""

    __slots__ = ("at", "path", "scope", "written")

    def __init__(self, scope: Scope, at: datetime, path: str) -> None:
        self.scope, self.at, self.path, self.written = scope, at, path, False

    def __call__(self, job: JobRecord) -> AuditEntry | None:
        try:
            entry = change_entry(self.scope, self.at, 201, f"{self.path}/{job.id}")
        except Exception:
            logger.exception("could not make an audit entry of %s %s", self.scope.get("method"), self.path)
            entry = None
        self.written = entry is not None
        return entry


def in_transaction(scope: Scope) -> InTransaction | None:
    """The entry-maker of a submission's request, for ``submit_async``; None where nothing audits
    the app (no ``AuditMiddleware`` in front of it)."""
    at = (scope.get("state") or {}).get(_AT)
    return None if at is None else InTransaction(scope, at, scope["path"])


def written(scope: Scope, noted: InTransaction | None) -> None:
    """After a committed submission: its entry is in the store if ``noted`` made one."""
    if noted is not None and noted.written:
        scope["state"][_WRITTEN] = True


class AuditMiddleware:
    def __init__(self, app: ASGIApp, log: AuditLog, clock: Clock, bursts: SignInBursts) -> None:
        self.app, self.log, self.clock, self.bursts = app, log, clock, bursts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        at = self.clock.now()
        state = scope.setdefault("state", {})
        state[_AT] = at
        status, location, noted = 0, None, False

        async def noting(message: Message) -> None:
            nonlocal status, location, noted
            if message["type"] == "http.response.start":
                status = message["status"]
                for key, value in message.get("headers", ()):
                    if key == b"location":
                        location = value.decode("latin-1")
                if state.get(_WRITTEN):
                    noted = True  # committed with what it changed
                elif status != 401 and scope["method"] not in READ_METHODS:
                    entry = self._safe_entry(scope, at, status, location)
                    if entry is not None:  # a change: in the log before the answer leaves
                        noted = True
                        await self.log.durable(entry)
            await send(message)

        try:
            await self.app(scope, receive, noting)
        except Exception:
            if not noted:
                self._note(scope, at, status or 500, None)
            raise
        if not noted:
            self._note(scope, at, status, location)

    def _note(self, scope: Scope, at: datetime, status: int, location: str | None) -> None:
        """Record the request, if it is one to record, and the bursts of failed sign-ins that are
        over; never fails the request."""
        entry = self._safe_entry(scope, at, status, location)
        if entry is not None:
            self.log.record(entry)
        for summary in self.bursts.ended(at):
            self.log.record(_summary_entry(summary))

    def _safe_entry(self, scope: Scope, at: datetime, status: int, location: str | None) -> AuditEntry | None:
        try:
            return self._entry(scope, at, status, location)
        except Exception:
            logger.exception("could not make an audit entry of %s %s", scope.get("method"), scope.get("path"))
            return None

    def _entry(self, scope: Scope, at: datetime, status: int, location: str | None) -> AuditEntry | None:
        method: str = scope["method"]
        if status == 401:
            action, target = AUTH_FAILED, f"{method} {scope['path']}"
            client = scope.get("client")
            address = str(client[0]) if client else "-"
            if scope["path"] in UNTHROTTLED:
                # The gateway asking about its callers' tokens, from its own (loopback) address: counted
                # apart, so that they never get that address 429 (the gateway throttles its callers itself).
                address = f"{address} (gateway)"
            if not self.bursts.failed(address, at, target):
                return None  # counted in its burst: one entry says how many once it is over
            return _made(scope, at, status, action, target)
        return change_entry(scope, at, status, location)


def change_entry(scope: Scope, at: datetime, status: int, location: str | None) -> AuditEntry | None:
    """The entry of a request other than a failed sign-in: None for a read, or where no route
    (or an unaudited one) answered."""
    method: str = scope["method"]
    if method in READ_METHODS:
        return None
    route = scope.get("route")
    if not isinstance(route, APIRoute) or method not in (route.methods or ()):
        return None  # no such route: nothing was changed
    if (method, route.path_format) in UNAUDITED:
        return None
    state: Mapping[str, Any] = scope.get("state") or {}
    target = (
        state.get(_TARGET)
        or _location_target(location, status)
        or route_target(route.path_format, scope.get("path_params") or {})
    )
    return _made(scope, at, status, action_name(route.path_format, route.name), target)


def _made(scope: Scope, at: datetime, status: int, action: str, target: object) -> AuditEntry:
    state: Mapping[str, Any] = scope.get("state") or {}
    who = state.get("principal") if status != 401 else None
    client = scope.get("client")
    return AuditEntry(
        at=at,
        user=who.user if isinstance(who, Principal) else None,
        token_id=who.token_id if isinstance(who, Principal) else None,
        action=action,
        target=str(target),
        result=result_of(status),
        status=status,
        client=str(client[0]) if client else None,
    )


def _summary_entry(summary: BurstSummary) -> AuditEntry:
    """The one entry of a burst's failed sign-ins past its first."""
    return AuditEntry(
        at=summary.ended,
        user=None,
        token_id=None,
        action=AUTH_FAILED,
        target=summary.target(),
        result=AuditResult.DENIED,
        status=401,
        client=summary.client,
    )


@lru_cache(maxsize=512)
def action_name(path_format: str, name: str) -> str:
    """``jobs.submit`` for the route ``/api/v1/jobs`` named ``submit``; ``users.add`` for
    ``/api/v1/users`` named ``add_user``."""
    literal = [p for p in _parts(path_format) if not p.startswith("{")]
    resource = literal[0] if literal else "app"
    return f"{resource}.{name.removesuffix('_' + _singular(resource))}"


@lru_cache(maxsize=512)
def _template(path_format: str) -> tuple[tuple[str, str], ...] | str:
    """(noun, parameter) for each path parameter; or, with none, the resource."""
    parts = _parts(path_format)
    pairs = tuple(
        (_singular(parts[i - 1]) if i > 0 else "", p[1:-1].split(":")[0])
        for i, p in enumerate(parts)
        if p.startswith("{")
    )
    return pairs or (parts[0] if parts else "app")


def route_target(path_format: str, params: Mapping[str, Any]) -> str:
    """``job 12`` for ``/api/v1/jobs/{job_id}/cancel``, ``project ml, member bob`` for
    ``/api/v1/projects/{name}/members/{user}``; the resource (``users``) for a route without
    parameters."""
    template = _template(path_format)
    if isinstance(template, str):
        return template
    return ", ".join(f"{noun} {params.get(param, '?')}".strip() for noun, param in template)


def _location_target(location: str | None, status: int) -> str | None:
    """What a 2xx's ``Location`` names: ``job 12`` for ``/api/v1/jobs/12``."""
    if location is None or not 200 <= status < 300:
        return None
    parts = _parts(urlsplit(location).path)
    pairs = [f"{_singular(parts[i])} {parts[i + 1]}" for i in range(0, len(parts) - 1, 2)]
    return ", ".join(pairs) or None


def _parts(path: str) -> list[str]:
    """The path's segments; a literal one without its custom method (``jobs:batch`` is ``jobs``)."""
    return [p if p.startswith("{") else p.split(":")[0] for p in path.removeprefix(API_PREFIX).split("/") if p]


def _singular(noun: str) -> str:
    return noun.removesuffix("s")
