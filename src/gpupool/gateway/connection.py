"""The client side: an asyncio protocol per client connection that parses requests with
``httptools`` and hands each to the ``Gateway`` (``gateway/server.py``).

Requests on one connection are answered in order (a pipelined request waits, with reading paused,
until the one before it is answered). Every limit is checked at the door: the size of a request's
head and body, how long the client takes to send them, how many connections are open
(``gateway/door.py``), and, in the gateway, whether the caller may use the route.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any, cast

import httptools

from gpupool.gateway import headers as h
from gpupool.gateway.exchange import Trip
from gpupool.gateway.lasthead import RequestHeads
from gpupool.gateway.pool import Refused
from gpupool.gateway.request import Request
from gpupool.gateway.server import Gateway, answer_refused
from gpupool.gateway.upstream import UpstreamConnection

log = logging.getLogger("gpupool.gateway")

LINGER_S = 2.0  # how long a refused client's remaining bytes are read and dropped
MAX_HEAD = 64 * 1024  # a request line and headers beyond this get 431


class ClientConnection(asyncio.Protocol):
    """One client's connection. A request is handled once the bytes read with its head are parsed
    (so a bodyless request is complete when it is answered), in order: the next waits, with
    reading paused, until the one before is answered (``finished``)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.transport: asyncio.Transport | None = None
        self.responded = False  # a byte of the active request's answer was written
        self.trip: Trip | None = None  # the active request's, while it runs
        self.heads = RequestHeads()
        self._peer = ""
        self._parser = httptools.HttpRequestParser(self)
        self._building: Request | None = None
        self._head_bytes = 0
        self._active: Request | None = None
        self._ready: Request | None = None  # its head just parsed: handled when the read is parsed
        self._task: asyncio.Task[None] | None = None
        self._waiting: deque[Request] = deque()
        self._upstream: UpstreamConnection | None = None
        self._paused = False
        self._write_paused = False
        self._upgrading: Request | None = None
        self._tunnel: UpstreamConnection | None = None
        self._timer: asyncio.TimerHandle | None = None  # the door's: a head or a body that is late
        self._timing: str | None = None  # what the timer waits for: "head" or "body"
        self._body_held = False  # the body's clock, stopped while reading is paused
        self._admitted = False

    # the trip's side (exchange.Downstream)

    def write(self, data: bytes) -> None:
        self.responded = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def pause_reading(self) -> None:
        """Stop reading (a body held or a replica slow to take it): the body's clock stops too,
        since the wait is the gateway's, not the client's."""
        if self.transport is None or self.transport.is_closing():
            return
        if not self._paused:
            self._paused = True
            self.transport.pause_reading()
        if self._timing == "body":
            self._wait_for(None)
            self._body_held = True

    def resume_reading(self) -> None:
        if self._paused and self.transport is not None and not self.transport.is_closing():
            self._paused = False
            self.transport.resume_reading()
            if self._body_held:
                self._wait_for("body")

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

    def finished(self, keep: bool) -> None:
        self._active, self.trip = None, None
        if not keep or self.transport is None:
            if self.transport is not None:
                self.transport.close()
            return
        if self._waiting:  # a pipelined request: started from the loop, not from inside a callback
            self._active = self._waiting.popleft()
            asyncio.get_running_loop().call_soon(self._start, self._active)
            if not self._waiting:  # reading was paused behind it: the rest of its body may still come
                self.resume_reading()
        else:
            self._wait_for("head")  # the next request's head, as on a new connection
            self.resume_reading()

    def refused(self, error: Refused) -> None:
        req = self._active
        if req is not None:
            self.finished(answer_refused(error, req, self))

    def run(self, work: Coroutine[Any, Any, bool | None]) -> None:
        """Handle the active request in a task (a token the head must be asked about)."""
        self._task = asyncio.get_running_loop().create_task(self._serve(work))

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports only quack like one
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) else "unix"
        if not self.gateway.door.admit():
            cap = self.gateway.door.max_connections
            return self._refuse(503, "overloaded", f"the gateway serves {cap} connections at once; try again")
        self._admitted = True
        self._wait_for("head")

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
            return self._refuse(400, "bad_request", f"malformed request: {e}")
        ready, self._ready = self._ready, None
        if ready is not None and self.transport is not None:
            self._start(ready)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._wait_for(None)
        if self._admitted:
            self._admitted = False
            self.gateway.door.left()
        self._stop()
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
        self._building = Request(self._peer, self)
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
        self._wait_for(None)
        parser = self._parser
        req.method = parser.get_method()
        req.http11 = parser.get_http_version() == "1.1"
        req.keep_alive = parser.should_keep_alive()
        req.framing, length = h.request_body(req.headers)
        if length is not None and length > self.gateway.max_body:
            return self._too_large()
        if req.framing is not h.Framing.NONE:
            self._wait_for("body")
        if self._active is None:
            self._active = self._ready = req
        else:
            self._waiting.append(req)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        req = self._building
        if req is None or self.transport is None:
            return
        if req.size + len(body) > self.gateway.max_body:
            return self._too_large()
        if self._timing == "body":  # an idle timeout: a long upload that keeps coming is not cut
            self._wait_for("body")
        req.feed(body)

    def on_message_complete(self) -> None:
        if self._timing == "body" or self._body_held:  # the body's clock, not a next head's
            self._wait_for(None)
        if self._building is not None:
            self._building.finish()

    # the rest

    def _start(self, req: Request) -> None:
        if self.transport is None:
            return
        self._active, self.responded = req, False
        try:
            keep = self.gateway.handle(req, self)
        except Exception:
            keep = self._crashed(req)
        if keep is not None:
            self.finished(keep)

    async def _serve(self, work: Coroutine[Any, Any, bool | None]) -> None:
        req = self._active
        try:
            keep = await work
        except asyncio.CancelledError:
            return
        except Exception:
            keep = self._crashed(req)
        self._task = None
        if keep is not None:
            self.finished(keep)

    def _crashed(self, req: Request | None) -> bool:
        log.exception("gateway: request %s %s failed", req.method if req else b"", req.url[:200] if req else b"")
        if not self.responded:
            self.write(
                h.simple_response(500, "Internal Server Error", '{"code": "internal", "message": "gateway error"}')
            )
        return False

    def _stop(self) -> None:
        """The client is gone or refused: the active request's work stops."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.trip is not None:
            self.trip.abort()
            self.trip = None

    def _wait_for(self, what: str | None) -> None:
        """Start the door's clock for a request's ``head`` or ``body`` (again: the body's restarts
        with each piece of it, so it bounds a silence, not the whole upload); None stops it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timing, self._body_held = None, False
        if what is not None and self.transport is not None:
            self._timing = what
            door = self.gateway.door
            self._timer = door.arm(door.header_s if what == "head" else door.body_s, lambda: self._late(what))

    def _late(self, what: str) -> None:
        """A head or body did not come in time: an idle connection is closed, a request cut off."""
        self._timer, self._timing = None, None
        if self.transport is None:
            return
        self.gateway.door.timed_out += 1
        if what == "head" and self._active is None and (self._building is None or self._head_bytes <= 0):
            self.transport.close()  # idle between requests: nothing to answer
            return
        if what == "head":
            said = f"the request's head did not arrive within {self.gateway.door.header_s:g}s"
        else:
            said = f"the request's body stopped coming for {self.gateway.door.body_s:g}s"
        self._refuse(408, f"{what}_timeout", said)

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
            self.write(h.simple_response(status, h.REASONS[status], body, extra=[("Connection", "close")]))
        self.transport = None  # reads are dropped, nothing more is written
        self._stop()
        if transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)
