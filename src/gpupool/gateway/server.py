"""The ``Gateway`` that answers each request a client connection (``gateway/connection.py``)
parsed: its own pages, or a route's replicas, once the caller may use the route.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol

from gpupool.domain.signins import LIMIT as SIGN_IN_LIMIT
from gpupool.domain.signins import REFUSED, SignInBursts, refusal
from gpupool.gateway import headers as h
from gpupool.gateway.access import Access
from gpupool.gateway.door import Door
from gpupool.gateway.exchange import Downstream, Limits, Trip
from gpupool.gateway.pool import Refused, RouteState, Table
from gpupool.gateway.request import Request
from gpupool.gateway.routes import Route, route_name
from gpupool.gateway.sweep import Sweeper

log = logging.getLogger("gpupool.gateway")


class ClientConnection(Downstream, Protocol):
    """What the gateway needs of a client's connection (``gateway/connection.py`` has it)."""

    trip: Trip | None
    responded: bool

    def run(self, work: Coroutine[Any, Any, bool | None]) -> None:
        """Handle the active request in a task (a token the head must be asked about)."""


DEFAULT_MAX_BODY = 64 * 1024 * 1024


class Gateway:
    """Answers requests: ``/-/healthz`` and ``/metrics`` itself, ``/<route>/...`` through the
    route's replicas. ``access`` is None when no head checks tokens (a static table): then only
    public routes are served."""

    def __init__(
        self,
        table: Table,
        access: Access | None,
        metrics: Callable[[], bytes],
        *,
        limits: Limits | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        door: Door | None = None,
        sign_in_limit: int = SIGN_IN_LIMIT,
    ) -> None:
        self.table, self.access, self.limits, self.max_body = table, access, limits or Limits(), max_body
        self.door = door or Door()
        # Failed sign-ins per client address, as the head's own door counts them (0: no limit, the head's
        # --sign-in-limit): the head sees only the gateway's address, so the gateway limits its callers.
        self.signins = SignInBursts(limit=sign_in_limit)
        self._metrics = metrics
        self.unrouted = 0  # requests that named no route
        self.sweeper = Sweeper()

    def handle(self, req: Request, client: ClientConnection) -> bool | None:
        """Answer ``req`` now, True when the connection may carry another request; or start its
        trip (or the token check before it) and return None: the trip calls ``client.finished``.
        No await on the common path: a public route, or a token the head approved a moment ago."""
        path, _, query = req.url.partition(b"?")
        state: RouteState | None = None
        try:
            if path == b"/-/healthz":
                return self._local(client, req, 200, json.dumps({"status": "ok", "routes": len(self.table.routes)}))
            if path == b"/metrics":
                if self.access is None:
                    return self._metrics_page(req, client)
                self._throttle(req, path)  # a token oracle too: the head counts the gateway's asking apart
                client.run(self._checked(None, req, client, b"", b""))
                return None
            state = self.table.routes.get(route_name(path.decode("latin-1")))
            if state is None or not path.startswith(b"/"):
                self.unrouted += 1
                raise Refused(404, "no_route", f"no service or job answers {path.decode('latin-1')[:200]}")
            route = state.route
            caller = b""  # a public route's caller is not checked, so not named
            if not route.public:
                if self.access is None:
                    raise Refused(403, "not_public", f"{route.name} is not public and this gateway has no head")
                user = self.access.approved(h.bearer(req.headers), route)
                if user is None:
                    self._throttle(req, path)
                    client.run(self._checked(state, req, client, path, query))
                    return None
                caller = h.identity(user, route.project)
            self._go(state, req, client, path, query, caller)
            return None
        except Refused as e:
            if state is not None:
                state.own.answered(e.status)
            return answer_refused(e, req, client)

    async def _checked(
        self, state: RouteState | None, req: Request, client: ClientConnection, path: bytes, query: bytes
    ) -> bool | None:
        """The head is asked about the caller's token; then on as ``handle`` (``state`` None:
        ``/metrics``, which any valid user's token may read)."""
        assert self.access is not None
        try:
            user = await self.access.check(h.bearer(req.headers), state.route if state is not None else None)
        except Refused as e:
            if e.status == 401 and self.signins.limit > 0:
                self.signins.failed(req.client, datetime.now(UTC), f"{req.method.decode()} {path.decode('latin-1')}")
            if state is not None:
                state.own.answered(e.status)
            return answer_refused(e, req, client)
        if state is None:
            return self._metrics_page(req, client)
        self._go(state, req, client, path, query, h.identity(user, state.route.project))
        return None

    def _go(
        self, state: RouteState, req: Request, client: ClientConnection, path: bytes, query: bytes, caller: bytes
    ) -> None:
        target = _target(state.route, path) + (b"?" + query if query else b"")
        trip = Trip(state, req, client, target, self.limits, self.sweeper, caller)
        client.trip = trip
        trip.start()

    def _throttle(self, req: Request, path: bytes) -> None:
        """An address past the limit of failed sign-ins waits (429) before its token is checked.
        The bursts that are over are let go here (the head writes them to its audit log; the
        gateway has none), else they would be kept for ever, a summary per address."""
        if self.signins.limit <= 0:
            return
        now = datetime.now(UTC)
        self.signins.ended(now)
        seconds = self.signins.refuse(req.client, now, f"{req.method.decode()} {path.decode('latin-1')}")
        if seconds is not None:
            raise Refused(429, REFUSED, refusal(seconds), retry_after=seconds)

    def _metrics_page(self, req: Request, client: ClientConnection) -> bool:
        keep = req.keep_alive and req.complete
        text = "text/plain; version=0.0.4; charset=utf-8"
        client.write(_page(self._metrics(), text, _connection(req, keep)))
        return keep

    def _local(self, client: ClientConnection, req: Request, status: int, body: str) -> bool:
        keep = req.keep_alive and req.complete
        client.write(h.simple_response(status, h.REASONS[status], body, extra=_connection(req, keep)))
        return keep


def answer_refused(e: Refused, req: Request, client: ClientConnection) -> bool:
    """Write the gateway's own answer (unless a replica's answer began); True: keep the connection."""
    if client.responded:
        return False
    keep = req.keep_alive and req.complete and not req.upgrade and e.status != 500
    extra = [("Retry-After", str(e.retry_after))] if e.retry_after is not None else []
    body = json.dumps({"code": e.code, "message": e.message})
    client.write(h.simple_response(e.status, h.REASONS[e.status], body, extra=extra + _connection(req, keep)))
    return keep


def _target(route: Route, path: bytes) -> bytes:
    """The path a replica is sent. A service's loses its route prefix (``/chat/v1/x`` -> ``/v1/x``):
    a model server knows nothing of the gateway. A job's published port keeps it (``/jobs/7/tree``
    as is): a notebook builds its links from its own base URL (``jupyter lab
    --ServerApp.base_url=/jobs/7/``), and a stripped prefix would send its pages' links astray."""
    if route.kind == "job":
        return path
    rest = path[len(route.prefix) :]
    return rest if rest.startswith(b"/") else b"/" + rest


def _page(body: bytes, content_type: str, extra: list[tuple[str, str]]) -> bytes:
    more = "".join(f"{k}: {v}\r\n" for k, v in extra)
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{more}Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _connection(req: Request, keep: bool) -> list[tuple[str, str]]:
    """The ``Connection`` header an answer of the gateway's own needs, if any."""
    if not keep:
        return [("Connection", "close")]
    return [] if req.http11 else [("Connection", "keep-alive")]
