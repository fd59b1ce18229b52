"""One request's trip through the gateway to a replica and back: pick a replica (or wait, or be
refused), send, stream the answer to the client as it arrives, and on failure decide whether
another replica gets it (``balance.may_retry``).

No request outlives its route's timeout without progress: a timer bounds the wait for the answer's
head (queue, connection and the replica's first byte together), and then each gap between pieces
of the body; a stream that keeps sending may run as long as it sends. A tunnel (WebSocket) is
bounded by neither: it ends when one side closes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from gpupool.gateway import headers as h
from gpupool.gateway.balance import may_retry
from gpupool.gateway.pool import Refused, Replica, RouteState
from gpupool.gateway.request import Request
from gpupool.gateway.upstream import UpstreamConnection, connect


class Downstream(Protocol):
    """The client's connection, as an exchange writes to it."""

    def write(self, data: bytes) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def start_tunnel(self, conn: UpstreamConnection) -> None: ...
    def bind(self, conn: UpstreamConnection | None) -> None: ...


@dataclass(frozen=True)
class Limits:
    eject_s: float = 1.0  # a replica that refused a connection rests this long, doubling
    eject_most_s: float = 10.0


class Truncated(Exception):
    """The answer broke after its head reached the client: only closing the connection tells it."""


class Failed(Exception):
    def __init__(self, answered: bool, kind: str, error: str) -> None:
        super().__init__(error)
        self.answered, self.kind = answered, kind


class Exchange:
    """One attempt: receives a replica's answer (``upstream.Receiver``) and writes it on."""

    def __init__(self, req: Request, client: Downstream, conn: UpstreamConnection, idle_s: float) -> None:
        self.req, self.client, self.conn = req, client, conn
        self.done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.status = 0
        self.head_at = 0.0
        self.started = False  # the head went to the client
        self.framing = h.Framing.NONE
        self._idle_s = idle_s
        self._progress = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._tunnel = False
        self._out: list[bytes] = []  # written to the client at the end of the replica's read

    def flush(self) -> None:
        """One write (one system call) for all a read from the replica brought: the head and the
        body of a small answer leave together."""
        if self._out:
            self.client.write(b"".join(self._out) if len(self._out) > 1 else self._out[0])
            self._out.clear()

    def arm(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, deadline - time.monotonic()), self._expire)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def on_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], chunked: bool) -> None:
        if 100 <= status < 200 and status != 101:
            self._out.append(b"HTTP/1.1 %d %s\r\n\r\n" % (status, reason))
            return
        self.status, self.head_at = status, time.monotonic()
        self._progress = self.head_at
        req = self.req
        if status == 101:
            self._out.append(
                h.downstream_head(status, reason, headers, framing=h.Framing.NONE, keep_alive=False, upgrade=True)
            )
            self.started = True
            return
        up = h.response_framing(status, headers, head_request=req.method == b"HEAD", chunked=chunked)
        self.framing = h.client_framing(up, req.http11)
        keep = req.keep_alive and self.framing is not h.Framing.CLOSE
        self._out.append(
            h.downstream_head(status, reason, headers, framing=self.framing, keep_alive=keep, http11=req.http11)
        )
        self.started = True

    def on_body(self, data: bytes) -> None:
        self._progress = time.monotonic()
        if self._tunnel or self.framing is not h.Framing.CHUNKED:
            self._out.append(data)
        elif data:
            self._out.append(h.chunk(data))

    def on_complete(self, keep_alive: bool) -> None:
        if self.framing is h.Framing.CHUNKED:
            self._out.append(h.LAST_CHUNK)
        if not self.done.done():
            self.done.set_result(keep_alive and self.req.complete)

    def on_upgrade(self, rest: bytes) -> None:
        self._tunnel = True
        self.disarm()
        self.flush()  # the 101 before anything tunnelled
        self.client.start_tunnel(self.conn)
        if rest:
            self.client.write(rest)

    def on_lost(self, answered: bool, error: str) -> None:
        if self.done.done():
            return
        if self._tunnel:
            self.done.set_result(False)
        elif self.started and self.framing is h.Framing.CLOSE:
            self.done.set_result(False)  # the end of a close-delimited body
        else:
            self.done.set_exception(Failed(answered or self.started, "reset", error))

    def pause_client(self) -> None:
        self.client.pause_reading()

    def resume_client(self) -> None:
        self.client.resume_reading()

    def _expire(self) -> None:
        if self.done.done():
            return
        if self.started:
            quiet = time.monotonic() - self._progress
            if quiet < self._idle_s:
                self._timer = asyncio.get_running_loop().call_later(self._idle_s - quiet, self._expire)
                return
        self.done.set_exception(Failed(self.started, "timeout", "the replica did not answer in time"))


async def forward(state: RouteState, req: Request, client: Downstream, target: bytes, limits: Limits) -> bool:
    """Carry ``req`` to one of the route's replicas; True when the client connection may carry
    another request. Raises ``Refused`` for an answer the gateway gives itself (nothing was
    written yet), ``Truncated`` when the answer broke after its head was sent."""
    route = state.route
    deadline = req.started + route.timeout_s
    head_request = req.method == b"HEAD"
    framing = h.request_framing(req.headers)
    head = h.upstream_head(
        req.method,
        target,
        req.headers,
        client=req.client,
        prefix=b"" if route.kind == "job" else route.prefix.encode(),  # a job's path keeps its prefix
        framing=framing,
        drop_auth=not route.public,
        upgrade=req.upgrade,
    )
    attempt = 0
    while True:
        replica = await state.acquire(deadline)
        try:
            conn = await _connection(replica, deadline)
        except (OSError, TimeoutError) as e:
            state.release(replica)
            state.failed(replica, "connect", limits.eject_s, limits.eject_most_s)
            if may_retry("", attempt, sent=False, answered=False, body_replayable=True) and time.monotonic() < deadline:
                attempt, state.retries = attempt + 1, state.retries + 1
                continue
            raise Refused(502, "replica_unreachable", f"no replica of {route.name} could be reached: {e!r}") from None
        ex = Exchange(req, client, conn, route.timeout_s)
        conn.begin(ex, head, head_request=head_request, chunked_body=framing is h.Framing.CHUNKED)
        req.attach(conn, again=attempt > 0)
        client.bind(conn)
        ex.arm(deadline)
        try:
            keep = await ex.done
        except Failed as e:
            if e.kind == "timeout":
                replica.stats.error("timeout")
            else:
                state.failed(replica, e.kind, limits.eject_s, limits.eject_most_s)
            if may_retry(
                req.method.decode("latin-1"), attempt, sent=True, answered=e.answered, body_replayable=req.replayable
            ):
                attempt, state.retries = attempt + 1, state.retries + 1
                continue
            if ex.started:
                raise Truncated(str(e)) from None
            if e.kind == "timeout":
                raise Refused(
                    504, "replica_timeout", f"{route.name}: the replica did not answer within {route.timeout_s:g}s"
                ) from None
            raise Refused(502, "replica_failed", f"{route.name}: the replica failed before answering ({e})") from None
        finally:
            ex.disarm()
            req.detach()
            client.bind(None)
            conn.release()
            if not ex.done.done() or ex.done.cancelled() or ex.done.exception() is not None:
                conn.close()
            state.release(replica)
            if ex.status:
                replica.stats.answered(ex.status)
                replica.stats.latency(ex.head_at - req.started)
        state.succeeded(replica)
        replica.give_back(conn, route.max_concurrency) if keep else conn.close()
        return keep and req.keep_alive and ex.framing is not h.Framing.CLOSE


async def _connection(replica: Replica, deadline: float) -> UpstreamConnection:
    conn = replica.take_idle()
    if conn is not None:
        return conn
    endpoint = replica.endpoint
    async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
        return await connect(endpoint.host, endpoint.port)
