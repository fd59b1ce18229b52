"""The live state behind the route table: each route's replicas (in-flight counts, idle keep-alive
connections, ejection), its waiting queue, and the counters ``/metrics`` and the head read.

A new table replaces routes and replicas by identity (route name; replica, host and port), so a
replica listed again keeps its counters and its open connections, and requests in flight to a
replica that left the table finish there. Everything here runs on the event loop's one thread.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpupool.gateway.balance import Overflow, ejection_s, overflow, pick_two, retry_after_s, share
from gpupool.gateway.routes import Endpoint, Route

if TYPE_CHECKING:
    from gpupool.gateway.upstream import UpstreamConnection

# Latency to a replica's response head, in seconds (a stream's whole length would say nothing).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Refused(Exception):
    """An answer the gateway gives itself instead of a replica's: status, code, message."""

    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


class Stats:
    """Counters of one replica (or of a route's own answers): plain integers, read at scrape."""

    __slots__ = ("buckets", "codes", "errors", "latency_sum", "reported", "reported_latency")

    def __init__(self) -> None:
        self.codes = [0] * 6  # by status // 100; 0: no status (client went away)
        self.errors: dict[str, int] = {}
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.latency_sum = 0.0
        self.reported = (0, 0)  # requests and errors at the last report to the head
        self.reported_latency: tuple[tuple[int, ...], float] = ((0,) * len(self.buckets), 0.0)  # the same, latency

    def answered(self, status: int) -> None:
        self.codes[min(status // 100, 5)] += 1

    def latency(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.latency_sum += seconds

    def replied(self, status: int, seconds: float) -> None:
        """``answered`` and ``latency`` in one call: a replica's answer."""
        self.codes[min(status // 100, 5)] += 1
        self.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.latency_sum += seconds

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def totals(self) -> tuple[int, int]:
        return sum(self.codes), sum(self.errors.values())


class Replica:
    __slots__ = ("ejected_until", "endpoint", "failures", "gone", "idle", "in_flight", "slack", "stats")

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.in_flight = 0
        # The route's cap less this process's share of it (``Part``): 0 with one gateway process.
        # Counted as in flight when choosing, so that a replica is full at its share.
        self.slack = 0
        self.idle: list[UpstreamConnection] = []
        self.ejected_until = 0.0
        self.failures = 0
        self.gone = False  # left the table: finish what runs, keep no connection
        self.stats = Stats()

    def take_idle(self) -> UpstreamConnection | None:
        while self.idle:
            conn = self.idle.pop()  # the most recently used: least likely to have timed out
            if conn.reusable():
                return conn
        return None

    def give_back(self, conn: UpstreamConnection, most: int) -> None:
        if self.gone or len(self.idle) >= most or not conn.reusable():
            conn.close()
        else:
            self.idle.append(conn)

    def close_idle(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


class Part:
    """Which of the gateway's processes this is (``index`` of ``count``, ``--processes``). Each
    holds its share (``balance.share``) of every replica's cap and of every route's queue, so the
    processes together never send a replica more than its ``max_concurrency`` at once, nor keep
    more than ``queue_limit`` waiting, without sharing any state."""

    __slots__ = ("count", "index")

    def __init__(self, index: int = 0, count: int = 1) -> None:
        self.index, self.count = index, count

    def of(self, total: int, key: str) -> int:
        return share(total, key, self.index, self.count)


class RouteState:
    """One route: its replicas, its queue of requests waiting for a slot, its own answers' stats."""

    def __init__(self, route: Route, draw: Callable[[int], int], part: Part | None = None) -> None:
        self.route = route
        self.prefix = route.prefix.encode()  # Route.prefix builds a string at each call
        self.part = part or Part()
        self.queue_limit = self.part.of(route.queue_limit, route.name)
        self.replicas: list[Replica] = [self._share(Replica(e)) for e in route.endpoints]
        self.retired: list[Replica] = []  # left the table with requests still in flight
        self.queue: deque[asyncio.Future[Replica]] = deque()
        self.own = Stats()  # answers no replica gave: 429, 503, 504 while queued, 401/403
        self.retries = 0
        self._draw = draw

    def try_acquire(self, now: float) -> Replica | None:
        """A replica with a free slot (its in-flight count taken), or None."""
        ready = [r for r in self.replicas if r.ejected_until <= now]
        if not ready:
            return None
        chosen = pick_two([r.in_flight + r.slack for r in ready], self.route.max_concurrency, self._draw)
        if chosen is None:
            return None
        replica = ready[chosen]
        replica.in_flight += 1
        return replica

    async def acquire(self, deadline: float) -> Replica:
        """A replica's slot, waiting in the queue (FIFO) until ``deadline`` if all are taken."""
        now = time.monotonic()
        replica = self.try_acquire(now)
        if replica is not None:
            return replica
        cap = self.route.max_concurrency  # a replica of which this process holds no slot is not counted
        ready = sum(1 for r in self.replicas if r.ejected_until <= now and r.slack < cap)
        waking = self.route.scale_to_zero and not self.replicas
        verdict = overflow(ready, len(self.queue), self.queue_limit, waking=waking)
        if verdict is Overflow.UNAVAILABLE:
            raise Refused(503, "no_replica", f"{self.route.name} has no ready replica", retry_after=1)
        if verdict is Overflow.REJECT:
            after = retry_after_s(len(self.queue), ready, self.route.max_concurrency, self.route.timeout_s)
            raise Refused(429, "overloaded", f"{self.route.name} is at capacity and its queue is full", after)
        waiter: asyncio.Future[Replica] = asyncio.get_running_loop().create_future()
        self.queue.append(waiter)
        got = False
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                replica = await waiter
            got = True
            return replica
        except TimeoutError:
            raise Refused(503, "queue_timeout", f"no replica of {self.route.name} was free in time") from None
        finally:
            if not got:
                self._abandon(waiter)

    def release(self, replica: Replica) -> None:
        """Free a slot: hand the longest waiting request a replica, if any is free now."""
        replica.in_flight -= 1
        if self.queue:
            self.wake()

    def wake(self) -> None:
        now = time.monotonic()
        while self.queue:
            replica = self.try_acquire(now)
            if replica is None:
                return
            waiter = self.queue.popleft()
            if waiter.done():
                replica.in_flight -= 1
                continue
            waiter.set_result(replica)

    def _abandon(self, waiter: asyncio.Future[Replica]) -> None:
        """A waiter that gave up (timed out, or its client left): out of the queue, and a slot it
        was handed as it gave up goes back."""
        if waiter in self.queue:
            self.queue.remove(waiter)
        if not waiter.done():
            waiter.cancel()
        elif not waiter.cancelled() and waiter.exception() is None:
            self.release(waiter.result())

    def failed(self, replica: Replica, kind: str, base_s: float, most_s: float) -> None:
        """A connection to ``replica`` was refused or dropped: leave it out for a while."""
        replica.stats.error(kind)
        replica.failures += 1
        replica.ejected_until = time.monotonic() + ejection_s(replica.failures, base_s, most_s)
        replica.close_idle()

    def succeeded(self, replica: Replica) -> None:
        replica.failures = 0

    def update(self, route: Route) -> None:
        """Take a new table's version of this route, keeping replicas listed in both."""
        old = {r.endpoint: r for r in self.replicas}
        self.route, self.prefix = route, route.prefix.encode()
        self.queue_limit = self.part.of(route.queue_limit, route.name)
        self.replicas = [self._share(old.pop(e) if e in old else Replica(e)) for e in route.endpoints]
        for gone in old.values():
            gone.gone = True
            gone.close_idle()
            if gone.in_flight:
                self.retired.append(gone)
        self.retired = [r for r in self.retired if r.in_flight]
        self.wake()

    def _share(self, replica: Replica) -> Replica:
        cap = self.route.max_concurrency
        endpoint = replica.endpoint
        replica.slack = cap - self.part.of(cap, f"{endpoint.replica}@{endpoint.host}:{endpoint.port}")
        return replica

    def close(self) -> None:
        for replica in self.replicas:
            replica.gone = True
            replica.close_idle()
        while self.queue:
            waiter = self.queue.popleft()
            if not waiter.done():
                waiter.set_exception(Refused(503, "route_gone", f"{self.route.name} was removed"))


class Table:
    """Every route's state, by name."""

    def __init__(self, draw: Callable[[int], int] | None = None, part: Part | None = None) -> None:
        self.routes: dict[str, RouteState] = {}
        self._draw = draw or _draw_from(random.Random().random)
        self.part = part or Part()

    def apply(self, table: dict[str, Route]) -> None:
        for name in list(self.routes):
            if name not in table:
                self.routes.pop(name).close()
        for name, route in table.items():
            state = self.routes.get(name)
            if state is None:
                self.routes[name] = RouteState(route, self._draw, self.part)
            elif state.route != route:
                state.update(route)


def _draw_from(rand: Callable[[], float]) -> Callable[[int], int]:
    """A random index below ``n`` from one C call (``Random.randrange`` runs three Python frames
    per draw, twice per request)."""

    def draw(n: int) -> int:
        return int(rand() * n)  # below n: random() < 1

    return draw


def _loop_time(deadline: float) -> float:
    """``deadline`` (time.monotonic) on the loop's clock, which may differ (uvloop)."""
    loop = asyncio.get_running_loop()
    return loop.time() + (deadline - time.monotonic())
