"""One request's trip through the gateway to a replica and back: pick a replica (or wait, or be
refused), send, stream the answer to the client as it arrives, and on failure decide whether
another replica gets it (``balance.may_retry``).

The common trip runs on callbacks alone: a replica with a free slot and an idle keep-alive
connection is taken at once, the head is written, and the replica's answer, read in the upstream
connection's callbacks, finishes the trip there. Only a trip that must wait (the route's queue, a
new connection) runs a task for that part. A task, its coroutines and a future per request were
most of a trivial request's cost in the gateway.

No request outlives its route's timeout without progress: the sweeper (``sweep.Sweeper``) bounds
the wait for the answer's head (queue, connection and the replica's first byte together), and
then each gap between pieces of the body; a stream that keeps sending may run as long as it sends.
A tunnel (WebSocket) is bounded by neither: it ends when one side closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from gpupool.gateway import headers as h
from gpupool.gateway.balance import may_retry
from gpupool.gateway.lasthead import RequestHeads
from gpupool.gateway.pool import Refused, Replica, RouteState
from gpupool.gateway.request import Request
from gpupool.gateway.sweep import Sweeper
from gpupool.gateway.upstream import UpstreamConnection, connect

log = logging.getLogger("gpupool.gateway")


class Downstream(Protocol):
    """The client's connection, as a trip writes to it and tells it how the request ended."""

    heads: RequestHeads

    def write(self, data: bytes) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def start_tunnel(self, conn: UpstreamConnection) -> None: ...
    def bind(self, conn: UpstreamConnection | None) -> None: ...
    def finished(self, keep: bool) -> None:
        """The request is answered; ``keep``: the connection may carry another."""

    def refused(self, error: Refused) -> None:
        """The gateway answers the request itself (nothing of a replica's answer was written)."""


@dataclass(frozen=True)
class Limits:
    eject_s: float = 1.0  # a replica that refused a connection rests this long, doubling
    eject_most_s: float = 10.0


class Failed(Exception):
    def __init__(self, answered: bool, kind: str, error: str) -> None:
        super().__init__(error)
        self.answered, self.kind = answered, kind


class Trip:
    """Carries one request to the route's replicas until it is answered; it is also the receiver
    (``upstream.Receiver``) of each attempt's answer, which it writes on to the client."""

    __slots__ = (
        "_chunked_body",
        "_head",
        "_head_request",
        "_idle_s",
        "_out",
        "_progress",
        "_quiet_from",
        "_seen",
        "_task",
        "_tunnel",
        "attempt",
        "client",
        "conn",
        "deadline",
        "framing",
        "head_at",
        "limits",
        "replica",
        "req",
        "started",
        "state",
        "status",
        "sweeper",
    )
    # set by _reset, at the start of each attempt
    status: int
    head_at: float
    started: bool
    framing: h.Framing
    _progress: int
    _seen: int
    _quiet_from: float
    _tunnel: bool
    _out: list[bytes]

    def __init__(
        self,
        state: RouteState,
        req: Request,
        client: Downstream,
        target: bytes,
        limits: Limits,
        sweeper: Sweeper,
        caller: bytes = b"",
    ) -> None:
        route = state.route
        self.state, self.req, self.client, self.limits, self.sweeper = state, req, client, limits, sweeper
        self.deadline = req.started + route.timeout_s
        self._idle_s = route.timeout_s
        self._head_request = req.method == b"HEAD"
        self._chunked_body = req.framing is h.Framing.CHUNKED
        self._head = client.heads.head(
            req.method,
            target,
            req.headers,
            client=req.client,
            prefix=b"" if route.kind == "job" else state.prefix,  # a job's path keeps its prefix
            framing=req.framing,
            caller=caller,  # who called, where the gateway checked it; the token itself never goes on
            upgrade=req.upgrade,
        )
        self.attempt = 0
        self.replica: Replica | None = None
        self.conn: UpstreamConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self.status = 0

    def start(self) -> None:
        """Send at once when a replica has a free slot and an idle connection; else wait in a task."""
        replica = self.state.try_acquire(time.monotonic())
        if replica is not None:
            conn = replica.take_idle()
            if conn is not None:
                self._send(replica, conn)
                return
        self._task = asyncio.get_running_loop().create_task(self._wait(replica))

    def abort(self) -> None:
        """The client went away: stop waiting, drop the replica's connection mid-answer."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.conn is not None:
            self._end_attempt(close=True)

    # upstream.Receiver

    def on_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        if 100 <= status < 200 and status != 101:
            self._out.append(b"HTTP/1.1 %d %s\r\n\r\n" % (status, reason))
            return
        self.status, self.head_at = status, time.monotonic()
        req = self.req
        if status == 101:
            self._out.append(
                h.downstream_head(status, reason, headers, framing=h.Framing.NONE, keep_alive=False, upgrade=True)
            )
            self.started = True
            return
        assert self.conn is not None
        head, self.framing = self.conn.heads.head(
            status, reason, headers, head_request=self._head_request, http11=req.http11, keep_alive=req.keep_alive
        )
        self._out.append(head)
        self.started = True

    def on_body(self, data: bytes) -> None:
        self._progress += 1
        if self._tunnel or self.framing is not h.Framing.CHUNKED:
            self._out.append(data)
        elif data:
            self._out.append(h.chunk(data))

    def on_complete(self, keep_alive: bool) -> None:
        if self.framing is h.Framing.CHUNKED:
            self._out.append(h.LAST_CHUNK)
        self.flush()  # the answer leaves before the client may send its next request
        self._succeeded(keep_alive and self.req.complete)

    def on_upgrade(self, rest: bytes) -> None:
        self._tunnel = True
        self.sweeper.forget(self)
        self.flush()  # the 101 before anything tunnelled
        assert self.conn is not None
        self.client.start_tunnel(self.conn)
        if rest:
            self.client.write(rest)

    def on_lost(self, answered: bool, error: str) -> None:
        if self.conn is None:
            return
        self.flush()
        if self._tunnel or (self.started and self.framing is h.Framing.CLOSE):
            self._succeeded(False)  # a tunnel's end, or the end of a close-delimited body
        else:
            self._failed(Failed(answered or self.started, "reset", error))

    def flush(self) -> None:
        """One write (one system call) for all a read from the replica brought: the head and the
        body of a small answer leave together."""
        out = self._out
        if out:
            self.client.write(b"".join(out) if len(out) > 1 else out[0])
            out.clear()

    def pause_client(self) -> None:
        self.client.pause_reading()

    def resume_client(self) -> None:
        self.client.resume_reading()

    # sweep.Watched

    def expire(self, now: float) -> None:
        if self.conn is None:
            return
        if self.started:
            if self._progress != self._seen:  # sent something since the last sweep
                self._seen, self._quiet_from = self._progress, now
                return
            if now - max(self._quiet_from, self.head_at) < self._idle_s:
                return
        elif now < self.deadline:
            return
        self.flush()
        self._failed(Failed(self.started, "timeout", "the replica did not answer in time"))

    # the rest

    async def _wait(self, replica: Replica | None) -> None:
        """The slow part of an attempt: a slot in the queue, a new connection (each retried as
        ``forward`` always did); then the trip goes on by callbacks."""
        try:
            while True:
                if replica is None:
                    replica = await self.state.acquire(self.deadline)
                try:
                    conn = await _connection(replica, self.deadline)
                except (OSError, TimeoutError) as e:
                    self.state.release(replica)
                    self.state.failed(replica, "connect", self.limits.eject_s, self.limits.eject_most_s)
                    replica = None
                    again = may_retry("", self.attempt, sent=False, answered=False, body_replayable=True)
                    if again and time.monotonic() < self.deadline:
                        self.attempt, self.state.retries = self.attempt + 1, self.state.retries + 1
                        continue
                    route = self.state.route.name
                    raise Refused(
                        502, "replica_unreachable", f"no replica of {route} could be reached: {e!r}"
                    ) from None
                break
        except asyncio.CancelledError:
            if replica is not None:
                self.state.release(replica)
            raise
        except Refused as e:
            self._task = None
            self._refused(e)
            return
        except Exception:  # as the task-per-request gateway did: logged, 500, the connection closed
            self._task = None
            if replica is not None:
                self.state.release(replica)
            log.exception("gateway: request %s %s failed", self.req.method, self.req.url[:200])
            self.client.refused(Refused(500, "internal", "gateway error"))
            return
        self._task = None
        self._send(replica, conn)

    def _send(self, replica: Replica, conn: UpstreamConnection) -> None:
        self._reset()
        self.replica, self.conn = replica, conn
        conn.begin(self, self._head, head_request=self._head_request, chunked_body=self._chunked_body)
        req = self.req
        if req.framing is not h.Framing.NONE:  # a request without a body has nothing to attach
            req.attach(conn, again=self.attempt > 0)
        self.client.bind(conn)
        self.sweeper.watch(self)

    def _succeeded(self, keep_conn: bool) -> None:
        replica, conn, framing = self.replica, self.conn, self.framing
        assert replica is not None and conn is not None
        self._end_attempt(close=False)
        replica.failures = 0  # RouteState.succeeded
        if keep_conn:
            replica.give_back(conn, self.state.route.max_concurrency)
        else:
            conn.close()
        self.client.finished(keep_conn and self.req.keep_alive and framing is not h.Framing.CLOSE)

    def _failed(self, e: Failed) -> None:
        state, replica, req = self.state, self.replica, self.req
        assert replica is not None
        if e.kind == "timeout":
            replica.stats.error("timeout")
        else:
            state.failed(replica, e.kind, self.limits.eject_s, self.limits.eject_most_s)
        started = self.started
        self._end_attempt(close=True)
        # A timeout spends the request's whole deadline: a retry would have no time left to
        # connect and would turn the 504 into a 502 on a busy machine.
        if e.kind != "timeout" and may_retry(
            req.method.decode("latin-1"), self.attempt, sent=True, answered=e.answered, body_replayable=req.replayable
        ):
            self.attempt, state.retries = self.attempt + 1, state.retries + 1
            self.start()
            return
        if started:
            self.client.finished(False)  # the answer broke after its head went: only a close tells
            return
        route = state.route
        if e.kind == "timeout":
            error = Refused(
                504, "replica_timeout", f"{route.name}: the replica did not answer within {route.timeout_s:g}s"
            )
        else:
            error = Refused(502, "replica_failed", f"{route.name}: the replica failed before answering ({e})")
        self._refused(error)

    def _refused(self, error: Refused) -> None:
        self.state.own.answered(error.status)
        self.client.refused(error)

    def _end_attempt(self, *, close: bool) -> None:
        """What ``forward``'s ``finally`` did: stop watching, unbind, free the slot, count."""
        replica, conn = self.replica, self.conn
        assert replica is not None and conn is not None
        self.sweeper.forget(self)
        req = self.req
        if req.framing is not h.Framing.NONE:
            req.detach()
        self.client.bind(None)
        conn.release()
        if close:
            conn.close()
        self.replica = self.conn = None
        self.state.release(replica)
        if self.status:
            replica.stats.replied(self.status, self.head_at - req.started)

    def _reset(self) -> None:
        """Each attempt starts afresh (a retry after a replica failed)."""
        self.status = 0
        self.head_at = 0.0
        self.started = False  # the head went to the client
        self.framing = h.Framing.NONE
        self._progress = 0  # pieces of the body so far
        self._seen = 0  # ... at the last sweep
        self._quiet_from = 0.0
        self._tunnel = False
        self._out = []  # written to the client at the end of the replica's read


async def _connection(replica: Replica, deadline: float) -> UpstreamConnection:
    conn = replica.take_idle()
    if conn is not None:
        return conn
    endpoint = replica.endpoint
    async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
        return await connect(endpoint.host, endpoint.port)
