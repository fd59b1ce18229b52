"""Real servers on 127.0.0.1 for the gateway's tests: replicas that answer as a test scripts them,
a fake head that says whether a token may call a route, and the gateway itself, all in one event
loop so that a test can hold an answer, look, and let it go (no sleeps, no timed assertions).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httptools
import httpx

from gpupool.domain.signins import LIMIT as SIGN_IN_LIMIT
from gpupool.gateway.access import Access
from gpupool.gateway.connection import ClientConnection
from gpupool.gateway.door import Door
from gpupool.gateway.exchange import Limits
from gpupool.gateway.pool import Table
from gpupool.gateway.routes import parse_table
from gpupool.gateway.server import Gateway


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[["Call"], Awaitable[None]]


@dataclass
class Call:
    """One request a replica received, and the means to answer it piece by piece."""

    seen: Seen
    writer: asyncio.StreamWriter
    replica: Replica

    def respond(self, status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.writer.write(head.encode() + b"\r\n" + body)

    def start_chunks(self, content_type: str = "text/plain") -> None:
        self.writer.write(
            f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )

    def chunk(self, data: bytes) -> None:
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunks(self) -> None:
        self.writer.write(b"0\r\n\r\n")

    def die(self) -> None:
        self.writer.transport.abort()


async def echo(call: Call) -> None:
    s = call.seen
    doc = {"replica": call.replica.name, "method": s.method, "target": s.target, "headers": s.headers}
    call.respond(200, json.dumps({**doc, "body": s.body.decode()}).encode(), {"Content-Type": "application/json"})


@dataclass
class Replica:
    name: str
    handler: Handler = echo
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    server: asyncio.Server | None = None
    port: int = 0
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set at each request (tests clear it)

    async def start(self) -> Replica:
        _opened.append(self)
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def endpoint(self) -> dict[str, Any]:
        return {"replica": self.name, "host": "127.0.0.1", "port": self.port}

    def kill(self) -> None:
        """As a SIGKILL looks from outside: the port closes and every connection drops."""
        if self.server is not None:
            self.server.close()
        for w in list(self.writers):
            w.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            while (seen := await _read_request(reader)) is not None:
                self.seen.append(seen)
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                self.arrived.set()
                try:
                    await self.handler(Call(seen, writer, self))
                    await writer.drain()
                finally:
                    self.in_flight -= 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Seen | None:
    parts: dict[str, Any] = {"url": b"", "headers": {}, "body": b"", "done": False}

    class P:
        def on_url(self, url: bytes) -> None:
            parts["url"] += url

        def on_header(self, name: bytes, value: bytes) -> None:
            parts["headers"][name.decode().lower()] = value.decode()

        def on_body(self, body: bytes) -> None:
            parts["body"] += body

        def on_message_complete(self) -> None:
            parts["done"] = True

    parser = httptools.HttpRequestParser(P())
    while not parts["done"]:
        data = await reader.read(65536)
        if not data:
            return None
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            break  # what follows is the tunnel's
    return Seen(parser.get_method().decode(), parts["url"].decode(), parts["headers"], parts["body"])


def route(name: str, replicas: list[Replica], **overrides: Any) -> dict[str, Any]:
    doc = {
        "name": name,
        "kind": "job" if name.startswith("jobs/") else "service",
        "project": "lab",
        "public": True,
        "max_concurrency": 8,
        "queue_limit": 16,
        "timeout_s": 10.0,
        "endpoints": [r.endpoint() for r in replicas],
    }
    return {**doc, **overrides}


@dataclass
class Running:
    gateway: Gateway
    table: Table
    server: asyncio.Server
    url: str
    http: httpx.AsyncClient

    def apply(self, *routes: dict[str, Any]) -> None:
        self.table.apply(parse_table({"routes": list(routes)}))

    async def close(self) -> None:
        await self.http.aclose()
        self.server.close()
        self.table.apply({})


async def gateway(
    *routes: dict[str, Any],
    access: Access | None = None,
    max_body: int = 1 << 20,
    first: bool = False,
    door: Door | None = None,
    sign_in_limit: int = SIGN_IN_LIMIT,
) -> Running:
    """A gateway on an ephemeral port serving ``routes``; ``first``: two random choices always
    draw the first replica listed first (so a test knows where a request goes)."""
    table = Table(draw=(lambda n: 0) if first else None)
    table.apply(parse_table({"routes": list(routes)}))
    gw = Gateway(
        table,
        access,
        lambda: b"",
        limits=Limits(eject_s=30.0),
        max_body=max_body,
        door=door,
        sign_in_limit=sign_in_limit,
    )
    server = await asyncio.get_running_loop().create_server(lambda: ClientConnection(gw), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    running = Running(gw, table, server, url, httpx.AsyncClient(base_url=url, timeout=20.0))
    _opened.append(running)
    return running


async def until(check: Callable[[], bool]) -> None:
    """Yield to the loop until ``check()`` holds (the caller's asyncio.timeout bounds it)."""
    while not check():
        await asyncio.sleep(0.001)


def run(scenario: Callable[[], Awaitable[None]], limit_s: float = 30.0) -> None:
    """Run a scenario; one that hangs fails after ``limit_s`` instead of hanging the suite."""

    async def bounded() -> None:
        try:
            async with asyncio.timeout(limit_s):
                await scenario()
        finally:
            await _close_all()

    asyncio.run(bounded())


_opened: list[Replica | Running] = []


async def _close_all() -> None:
    """Close every server and connection a scenario opened, and let their callbacks run."""
    while _opened:
        thing = _opened.pop()
        if isinstance(thing, Running):
            await thing.close()
        else:
            thing.kill()
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
