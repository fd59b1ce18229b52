"""An open-loop client for ``benchmarks/gateway.py --rates``: requests sent on a fixed schedule
(``rate`` a second for ``seconds``), not one after another, each on a keep-alive connection that is
free at its time (a new one is opened when none is), so a slow answer never delays the next send.

A closed loop (send, wait, send) measures only as fast as the answers come back, and hides the
waits a burst causes (coordinated omission); a proxy's p99 at a given load needs the load fixed.
Each latency runs from the moment the request is written to the moment its whole answer is read;
``late`` counts sends more than 2 ms behind their time (the client itself fell behind:
then the figures understate the waits, and the run says so).
"""

from __future__ import annotations

import asyncio
import time

import httptools
from _head import percentile

LATE_S = 0.002


class _Conn(asyncio.Protocol):
    def __init__(self, done: list[float], idle: list[_Conn]) -> None:
        self.done, self.idle = done, idle
        self.sent_at = 0.0
        self.failed: str | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self.failed = repr(e)

    def on_message_complete(self) -> None:
        if self.parser.get_status_code() != 200:
            self.failed = f"status {self.parser.get_status_code()}"
        self.done.append(time.perf_counter() - self.sent_at)
        self.idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.failed = self.failed or f"connection lost ({exc!r})"
        if self in self.idle:
            self.idle.remove(self)

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.sent_at = time.perf_counter()
        self.transport.write(request)


async def _run(port: int, request: bytes, rate: float, seconds: float, warmup_s: float) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    idle: list[_Conn] = []
    conns: list[_Conn] = []
    done: list[float] = []

    async def connect() -> _Conn:
        _, conn = await loop.create_connection(lambda: _Conn(done, idle), "127.0.0.1", port)
        conns.append(conn)
        return conn

    idle.extend([await connect() for _ in range(8)])
    late = sent = 0
    for phase_s, measured in ((warmup_s, False), (seconds, True)):
        if measured:
            done.clear()
        start = time.perf_counter()
        total = int(rate * phase_s)
        i = 0
        while i < total:
            now = time.perf_counter()
            due = start + i / rate
            if due > now:
                await asyncio.sleep(due - now)
                continue
            while i < total and start + i / rate <= now:  # every send that is due, at once
                if measured and now - (start + i / rate) > LATE_S:
                    late += 1
                conn = idle.pop() if idle else await connect()
                conn.send(request)
                sent += measured
                i += 1
        deadline = time.perf_counter() + 5
        while len(idle) < len(conns) and time.perf_counter() < deadline:
            await asyncio.sleep(0.005)
    for conn in conns:
        if conn.failed:
            raise RuntimeError(f"port {port}: {conn.failed}")
        assert conn.transport is not None
        conn.transport.close()
    if len(done) != sent:
        raise RuntimeError(f"port {port}: {sent} sent, {len(done)} answered")
    return {
        "n": len(done),
        "p50_us": percentile(done, 50) * 1e6,
        "p99_us": percentile(done, 99) * 1e6,
        "max_us": max(done) * 1e6,
        "late": late,
        "connections": len(conns),
    }


def fixed_rate(port: int, request: bytes, rate: float, seconds: float, warmup_s: float = 1.0) -> dict[str, float]:
    """p50, p99 and max latency (µs) of ``rate`` requests a second for ``seconds`` (after
    ``warmup_s`` at the same rate, not counted), on asyncio's own loop (its timers are as fine
    as uvloop's, and its cost is the same for every target)."""
    return asyncio.run(_run(port, request, rate, seconds, warmup_s))
