"""The client side: an asyncio protocol per client connection that parses requests with
``httptools``, and the ``Gateway`` that answers each one (its own pages, or a route's replicas).

Requests on one connection are answered in order (a pipelined request waits, with reading paused,
until the one before it is answered). Every limit is checked at the door: the size of a request's
head and body, and whether the caller may use the route.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import cast

import httptools

from gpupool.gateway import headers as h
from gpupool.gateway.access import Access
from gpupool.gateway.exchange import Limits, Truncated, forward
from gpupool.gateway.pool import Refused, RouteState, Table
from gpupool.gateway.request import Request
from gpupool.gateway.routes import Route, route_name
from gpupool.gateway.upstream import UpstreamConnection

log = logging.getLogger("gpupool.gateway")

LINGER_S = 2.0  # how long a refused client's remaining bytes are read and dropped
MAX_HEAD = 64 * 1024  # a request line and headers beyond this get 431
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
    ) -> None:
        self.table, self.access, self.limits, self.max_body = table, access, limits or Limits(), max_body
        self._metrics = metrics
        self.unrouted = 0  # requests that named no route

    async def handle(self, req: Request, client: ClientConnection) -> bool:
        """Answer ``req``; True when the connection may carry another request."""
        path, _, query = req.url.partition(b"?")
        state: RouteState | None = None
        try:
            if path == b"/-/healthz":
                return self._local(client, req, 200, json.dumps({"status": "ok", "routes": len(self.table.routes)}))
            if path == b"/metrics":
                if self.access is not None:
                    await self.access.check(h.bearer(req.headers), None)
                keep = req.keep_alive and req.complete
                text = "text/plain; version=0.0.4; charset=utf-8"
                client.write(_page(self._metrics(), text, _connection(req, keep)))
                return keep
            state = self.table.routes.get(route_name(path.decode("latin-1")))
            if state is None or not path.startswith(b"/"):
                self.unrouted += 1
                raise Refused(404, "no_route", f"no service or job answers {path.decode('latin-1')[:200]}")
            route = state.route
            if not route.public:
                if self.access is None:
                    raise Refused(403, "not_public", f"{route.name} is not public and this gateway has no head")
                await self.access.check(h.bearer(req.headers), route)
            target = _target(route, path) + (b"?" + query if query else b"")
            return await forward(state, req, client, target, self.limits)
        except Refused as e:
            if state is not None:
                state.own.answered(e.status)
            if client.responded:
                return False
            keep = req.keep_alive and req.complete and not req.upgrade
            extra = [("Retry-After", str(e.retry_after))] if e.retry_after is not None else []
            body = json.dumps({"code": e.code, "message": e.message})
            client.write(h.simple_response(e.status, _REASONS[e.status], body, extra=extra + _connection(req, keep)))
            return keep
        except Truncated:
            return False

    def _local(self, client: ClientConnection, req: Request, status: int, body: str) -> bool:
        keep = req.keep_alive and req.complete
        client.write(h.simple_response(status, _REASONS[status], body, extra=_connection(req, keep)))
        return keep


class ClientConnection(asyncio.Protocol):
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.transport: asyncio.Transport | None = None
        self.responded = False  # a byte of the active request's answer was written
        self._peer = ""
        self._parser = httptools.HttpRequestParser(self)
        self._building: Request | None = None
        self._head_bytes = 0
        self._active: Request | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiting: deque[Request] = deque()
        self._upstream: UpstreamConnection | None = None
        self._write_paused = False
        self._upgrading: Request | None = None
        self._tunnel: UpstreamConnection | None = None

    # the exchange's side (exchange.Downstream)

    def write(self, data: bytes) -> None:
        self.responded = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def bind(self, conn: UpstreamConnection | None) -> None:
        self._upstream = conn
        if conn is not None and self._write_paused:
            conn.pause()

    def start_tunnel(self, conn: UpstreamConnection) -> None:
        self._tunnel = conn
        if self._upgrading is not None:
            for piece in self._upgrading.tunnel:
                conn.send_raw(piece)
            self._upgrading.tunnel.clear()

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports only quack like one
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) else "unix"

    def data_received(self, data: bytes) -> None:
        if self.transport is None:
            return  # refused and closing
        if self._tunnel is not None:
            self._tunnel.send_raw(data)
            return
        if self._upgrading is not None:
            self._upgrading.tunnel.append(data)
            return
        if self._building is not None and self._head_bytes >= 0:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD:
                return self._refuse(431, "head_too_large", f"a request head is at most {MAX_HEAD} bytes")
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as e:
            req = self._building
            if req is not None:
                self._upgrading, req.upgrade = req, True
                rest = data[e.args[0] :]
                if rest:
                    req.tunnel.append(rest)
        except httptools.HttpParserError as e:
            self._refuse(400, "bad_request", f"malformed request: {e}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._task is not None:
            self._task.cancel()
        if self._tunnel is not None:
            self._tunnel.close()
        self._waiting.clear()

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._upstream is not None:
            self._upstream.pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._upstream is not None:
            self._upstream.resume()

    # httptools' callbacks

    def on_message_begin(self) -> None:
        self._building = Request(self._peer, self.pause_reading, self.resume_reading)
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        assert self._building is not None
        self._building.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self._building is not None
        self._building.headers.append((name, value))

    def on_headers_complete(self) -> None:
        req = self._building
        assert req is not None
        self._head_bytes = -1
        req.method = self._parser.get_method()
        req.http11 = self._parser.get_http_version() == "1.1"
        req.keep_alive = self._parser.should_keep_alive()
        length = h.content_length(req.headers)
        if length is not None and length > self.gateway.max_body:
            return self._too_large()
        if self._active is None:
            self._start(req)
        else:
            self._waiting.append(req)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        req = self._building
        if req is None or self.transport is None:
            return
        if req.size + len(body) > self.gateway.max_body:
            return self._too_large()
        req.feed(body)

    def on_message_complete(self) -> None:
        if self._building is not None:
            self._building.finish()

    # the rest

    def _start(self, req: Request) -> None:
        self._active, self.responded = req, False
        self._task = asyncio.get_running_loop().create_task(self._serve(req))

    async def _serve(self, req: Request) -> None:
        try:
            keep = await self.gateway.handle(req, self)
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("gateway: request %s %s failed", req.method, req.url[:200])
            keep = False
            if not self.responded:
                self.write(
                    h.simple_response(500, "Internal Server Error", '{"code": "internal", "message": "gateway error"}')
                )
        self._active, self._task = None, None
        if not keep or self.transport is None:
            if self.transport is not None:
                self.transport.close()
            return
        if self._waiting:
            self._start(self._waiting.popleft())
        else:
            self.resume_reading()

    def _too_large(self) -> None:
        self._refuse(413, "body_too_large", f"a request body is at most {self.gateway.max_body} bytes")

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer (when nothing was answered yet) and close: the connection's framing is lost.
        What the client still sends is read and dropped for a moment first (a lingering close):
        closing with its data unread would reset the connection, and the answer with it."""
        transport = self.transport
        if transport is None:
            return
        if self._active is None or not self.responded:  # else an answer is half-written: just close
            body = json.dumps({"code": code, "message": message})
            self.write(h.simple_response(status, _REASONS[status], body, extra=[("Connection", "close")]))
        self.transport = None  # reads are dropped, nothing more is written
        if self._task is not None:
            self._task.cancel()
        if transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)


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


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
