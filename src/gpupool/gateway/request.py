"""One client request as the gateway holds it: its head, and its body on the way through.

The body streams: each piece the client sends goes to the replica's connection as it arrives.
Until a replica is chosen (the request may wait in the queue) pieces are held, and the client is
asked to pause past ``HOLD_BYTES``. A copy is kept while the body is at most ``REPLAY_BYTES``, so
that an idempotent request whose replica died can be sent again; past that it cannot be.
"""

from __future__ import annotations

import time
from typing import Protocol

from gpupool.gateway.headers import Framing

HOLD_BYTES = 256 * 1024
REPLAY_BYTES = 64 * 1024


class Reader(Protocol):
    """The client connection, asked to stop and resume reading while a body is held."""

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class BodySink(Protocol):
    def send_body(self, data: bytes) -> None: ...
    def end_body(self) -> None: ...


class Request:
    __slots__ = (
        "_held",
        "_held_bytes",
        "_kept",
        "_reader",
        "_sink",
        "client",
        "complete",
        "framing",
        "headers",
        "http11",
        "keep_alive",
        "method",
        "size",
        "started",
        "tunnel",
        "upgrade",
        "url",
    )

    def __init__(self, client: str, reader: Reader) -> None:
        self.client = client  # the peer's address, for X-Forwarded-For
        self.started = time.monotonic()
        self.method = b""
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.http11 = True
        self.keep_alive = True
        self.framing = Framing.NONE  # of the body, from the head (headers.request_body)
        self.upgrade = False  # asks for a protocol switch (WebSocket)
        self.tunnel: list[bytes] = []  # bytes after an upgrade request's head
        self.complete = False  # the whole body arrived
        self.size = 0
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._kept: list[bytes] | None = []
        self._sink: BodySink | None = None
        self._reader = reader

    @property
    def replayable(self) -> bool:
        return self._kept is not None

    def feed(self, data: bytes) -> None:
        """A piece of the body from the client."""
        self.size += len(data)
        if self._kept is not None:
            if self.size <= REPLAY_BYTES:
                self._kept.append(data)
            else:
                self._kept = None
        if self._sink is not None:
            self._sink.send_body(data)
            return
        self._held.append(data)
        self._held_bytes += len(data)
        if self._held_bytes > HOLD_BYTES:
            self._reader.pause_reading()

    def finish(self) -> None:
        self.complete = True
        if self._sink is not None:
            self._sink.end_body()

    def attach(self, sink: BodySink, *, again: bool) -> None:
        """Send the body so far to ``sink`` and the rest as it comes; ``again``: a retry, which
        sends the kept copy (only called when ``replayable``)."""
        self._sink = sink
        pieces = (self._kept or []) if again else self._held
        for piece in pieces:
            sink.send_body(piece)
        if self._held_bytes > HOLD_BYTES:
            self._reader.resume_reading()
        self._held, self._held_bytes = [], 0
        if self.complete:
            sink.end_body()

    def detach(self) -> None:
        self._sink = None
