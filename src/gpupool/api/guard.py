"""The head's door: a request that carries a body shows a working token before a byte of its body
is read, and no body is larger than ``max_body`` or slower than ``body_timeout_s``.

Without it FastAPI reads and parses a whole body before the route's dependencies check the token,
so anyone who can reach the port could make the head hold a 100 MB body in memory. Every route with
a body needs a token (the permission table has no public one), so the door asks for it up front,
with the same rule, messages and one-second cache as the routes (``deps.authenticate``), and
closes the connection on a refusal; then it lets the body through only as far as the limit.
Answers are the API's ``{code, message}``: 401, 413 ``body_too_large`` and 408 ``body_timeout``.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gpupool.api.deps import INVALID_TOKEN, MISSING_TOKEN, authenticate, cached
from gpupool.domain.errors import GpupoolError
from gpupool.usecases.context import HeadContext

DEFAULT_MAX_BODY = 1 << 20  # 1 MiB: a job with a large environment is a few KiB
DEFAULT_BODY_TIMEOUT_S = 10.0
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BodyGuard:
    def __init__(
        self,
        app: ASGIApp,
        ctx: HeadContext,
        max_body: int = DEFAULT_MAX_BODY,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self.app, self.ctx, self.max_body, self.body_timeout_s = app, ctx, max_body, body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = _bearer(headers.get("authorization", ""))
        if token is None:
            await _answer(send, 401, "unauthorized", MISSING_TOKEN)
            return
        known = cached(token)  # in the event loop; only a token not seen this second goes to the store
        if known is None:
            try:
                known = await anyio.to_thread.run_sync(authenticate, self.ctx, token)
            except GpupoolError as exc:  # the store cannot say (its database is away): the same 503 as a route's
                await _answer(send, exc.status, exc.code, exc.message)
                return
        if known is None:
            await _answer(send, 401, "unauthorized", INVALID_TOKEN)
            return
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body:
            await _answer(send, 413, "body_too_large", self._too_large())
            return
        gate = _Gate(receive, send, self.max_body, self.body_timeout_s, self._too_large())
        await self.app(scope, gate.receive, gate.send)

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_body} bytes (gpupool up --max-body)"


def _bearer(value: str) -> str | None:
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class _Gate:
    """One request's body, counted as the app reads it. Past the limit or the timeout the door
    answers and the app is told the client left (FastAPI would turn an exception raised here into
    a 400); whatever the app sends after that is dropped."""

    def __init__(self, receive: Receive, send: Send, max_body: int, timeout_s: float, too_large: str) -> None:
        self._receive, self._send = receive, send
        self._max, self._timeout_s, self._too_large = max_body, timeout_s, too_large
        self._seen = 0
        self._answered = False

    async def send(self, message: Message) -> None:
        if not self._answered:
            await self._send(message)

    async def receive(self) -> Message:
        try:
            message = await asyncio.wait_for(self._receive(), timeout=self._timeout_s)
        except TimeoutError:
            return await self._refuse(408, "body_timeout", f"the request body took over {self._timeout_s:g}s")
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            if self._seen > self._max:
                return await self._refuse(413, "body_too_large", self._too_large)
        return message

    async def _refuse(self, status: int, code: str, message: str) -> Message:
        if not self._answered:
            self._answered = True
            await _answer(self._send, status, code, message)
        return {"type": "http.disconnect"}


async def _answer(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"code": code, "message": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def http_protocol() -> type[H11Protocol] | type[HttpToolsProtocol]:
    """uvicorn's HTTP/1.1 protocol on httptools (C) where it is installed, else on h11 (pure
    Python): parsing a request with h11 costs about as much as answering it."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return H11Protocol
    return HttpToolsProtocol


def header_timeout(seconds: float) -> type[H11Protocol] | type[HttpToolsProtocol]:
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request headers are not all there
    ``seconds`` after it opened (or after the previous response): uvicorn itself waits forever
    for a request that is sent a byte at a time, so a few such clients could hold every slot."""
    base: Any = http_protocol()

    class HeaderTimeout(base):  # type: ignore[misc]
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._timer = self.loop.call_later(seconds, self._too_slow)

        def data_received(self, data: bytes) -> None:
            if self._timer is None and (self.cycle is None or self.cycle.response_complete):
                self._timer = self.loop.call_later(seconds, self._too_slow)  # a next request begins
            super().data_received(data)
            if self._timer is not None and self.cycle is not None and not self.cycle.response_complete:
                self._timer.cancel()  # its headers are in: the body has its own timeout
                self._timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

        def _too_slow(self) -> None:
            self._timer = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

    return HeaderTimeout
