"""Keep-alive connections to replicas: an asyncio protocol that parses a replica's answers with
``httptools`` and hands each piece to the exchange it carries, as it arrives (no buffering: a
chunk or a server-sent event is written to the client in the same callback that read it).

A connection carries one exchange at a time (no pipelining: a replica that dies then loses one
request, not a row of them) and goes back to its replica's idle list when the answer is complete
and both sides allow keep-alive.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

import httptools

from gpupool.gateway.headers import LAST_CHUNK, chunk
from gpupool.gateway.lasthead import ResponseHeads


class Receiver(Protocol):
    """What a connection reports to: the trip it carries (``exchange.Trip``). What a read brought
    is flushed at its end; ``on_complete`` and ``on_lost`` flush what they have themselves."""

    def on_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None: ...
    def on_body(self, data: bytes) -> None: ...
    def on_complete(self, keep_alive: bool) -> None: ...
    def on_upgrade(self, rest: bytes) -> None: ...
    def on_lost(self, answered: bool, error: str) -> None: ...
    def flush(self) -> None: ...
    def pause_client(self) -> None: ...
    def resume_client(self) -> None: ...


async def connect(host: str, port: int) -> UpstreamConnection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(UpstreamConnection, host, port)
    return conn


class UpstreamConnection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.heads = ResponseHeads()
        self._receiver: Receiver | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._clean = False  # the parser ended its last answer where the next one may begin
        self._headers: list[tuple[bytes, bytes]] = []
        self._reason = b""
        self._answered = False  # a byte of the current answer arrived
        self._head_request = False
        self._chunked_up = False  # the request body goes chunked
        self._tunnel = False
        self._lost = False

    # the gateway's side

    def begin(self, receiver: Receiver, head: bytes, *, head_request: bool, chunked_body: bool) -> None:
        """Send a request head; its answer goes to ``receiver``."""
        assert self.transport is not None
        self._receiver = receiver
        if not self._clean or self._parser is None:  # reused after a whole answer: no allocation
            self._parser = httptools.HttpResponseParser(self)
        self._clean = False
        self._headers, self._reason, self._answered = [], b"", False
        self._head_request, self._chunked_up = head_request, chunked_body
        self.transport.write(head)

    def send_body(self, data: bytes) -> None:
        if self.transport is not None and not self._lost:
            self.transport.write(chunk(data) if self._chunked_up else data)

    def end_body(self) -> None:
        if self._chunked_up and self.transport is not None and not self._lost:
            self.transport.write(LAST_CHUNK)

    def send_raw(self, data: bytes) -> None:
        """A tunnel's bytes (after 101 Switching Protocols), as they are."""
        if self.transport is not None and not self._lost:
            self.transport.write(data)

    def reusable(self) -> bool:
        return not self._lost and not self._tunnel and self.transport is not None and not self.transport.is_closing()

    def release(self) -> None:
        """The exchange is over: callbacks stop."""
        self._receiver = None

    def close(self) -> None:
        self._receiver = None
        if self.transport is not None:
            self.transport.close()

    def pause(self) -> None:
        if self.transport is not None and not self._lost:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self._lost:
            self.transport.resume_reading()

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports only quack like one

    def data_received(self, data: bytes) -> None:
        receiver = self._receiver
        if receiver is None:
            if self.transport is not None:
                self.transport.close()  # an idle connection has nothing to say
            return
        if self._tunnel:
            receiver.on_body(data)
            receiver.flush()
            return
        self._answered = True
        assert self._parser is not None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as e:
            self._tunnel = True
            receiver.on_upgrade(data[e.args[0] :])
        except httptools.HttpParserError as e:
            self._fail(f"bad answer from the replica: {e}")
        finally:
            if self._receiver is receiver:  # an answer that ended was flushed by its end
                receiver.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.on_lost(self._answered, f"{exc!r}" if exc else "connection closed")

    def pause_writing(self) -> None:
        if self._receiver is not None:
            self._receiver.pause_client()

    def resume_writing(self) -> None:
        if self._receiver is not None:
            self._receiver.resume_client()

    # httptools' callbacks

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        assert self._parser is not None and self._receiver is not None
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # interim (100 Continue): passed on, the answer follows
            self._receiver.on_head(status, self._reason, self._headers)
            self._headers, self._reason = [], b""
            return
        self._receiver.on_head(status, self._reason, self._headers)
        if self._head_request or status in (204, 304):  # no body follows, whatever the head says
            self._complete()

    def on_body(self, body: bytes) -> None:
        if self._receiver is not None:
            self._receiver.on_body(body)

    def on_message_complete(self) -> None:
        assert self._parser is not None
        if 100 <= self._parser.get_status_code() < 200:
            return
        self._clean = not self._head_request
        self._complete()

    def _complete(self) -> None:
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            assert self._parser is not None
            receiver.on_complete(self._parser.should_keep_alive())

    def _fail(self, error: str) -> None:
        receiver, self._receiver = self._receiver, None
        if self.transport is not None:
            self.transport.close()
        if receiver is not None:
            receiver.on_lost(self._answered, error)
