"""What the gateway tells: Prometheus series at ``/metrics``, and the load it reports to the head
every interval (the autoscaler's input).

The counters are plain integers on the replicas' state (``pool.Stats``), read when scraped by a
custom collector: a request pays for a few additions, not for a metrics library's locks and label
lookups. Series (requests per second is ``rate()`` of the totals):

- ``gpupool_gateway_requests_total{route,replica,code}``: answers by status class (``2xx``...);
  ``replica=""`` holds the gateway's own answers (429, 503, 401/403...)
- ``gpupool_gateway_errors_total{route,replica,kind}``: ``connect`` refused, ``reset`` before or
  during an answer, ``timeout``
- ``gpupool_gateway_in_flight{route,replica}``, ``gpupool_gateway_queue_length{route}``
- ``gpupool_gateway_request_duration_seconds{route,replica}``: from the request's arrival to the
  replica's response head (queueing included; a stream's length is not)
- ``gpupool_gateway_retries_total{route}``, ``gpupool_gateway_unrouted_total``
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.gateway.gather import Gathered
from gpupool.gateway.pool import BUCKETS, RouteState, Stats, Table

log = logging.getLogger("gpupool.gateway")
STATS_PATH = "/api/v1/gateway/stats"
_CLASSES = ("none", "1xx", "2xx", "3xx", "4xx", "5xx")


def registry(table: Table, unrouted: Any) -> CollectorRegistry:
    """``unrouted``: an object with an ``unrouted`` count (the ``server.Gateway``)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(table, unrouted))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)


class _Collector(Collector):
    def __init__(self, table: Table, unrouted: Any) -> None:
        self._table, self._unrouted = table, unrouted

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "gpupool_gateway_requests", "answers by status class", labels=["route", "replica", "code"]
        )
        errors = CounterMetricFamily(
            "gpupool_gateway_errors", "failed tries at a replica", labels=["route", "replica", "kind"]
        )
        in_flight = GaugeMetricFamily(
            "gpupool_gateway_in_flight", "requests at the replica now", labels=["route", "replica"]
        )
        queue = GaugeMetricFamily("gpupool_gateway_queue_length", "requests waiting for a slot", labels=["route"])
        retries = CounterMetricFamily("gpupool_gateway_retries", "requests sent to another replica", labels=["route"])
        latency = HistogramMetricFamily(
            "gpupool_gateway_request_duration_seconds",
            "arrival to the replica's response head",
            labels=["route", "replica"],
        )
        for name, state in sorted(self._table.routes.items()):
            queue.add_metric([name], len(state.queue))
            retries.add_metric([name], state.retries)
            _counts(requests, errors, [name, ""], state.own)
            for replica in [*state.replicas, *state.retired]:
                labels = [name, replica.endpoint.replica]
                in_flight.add_metric(labels, replica.in_flight)
                _counts(requests, errors, labels, replica.stats)
                latency.add_metric(labels, _buckets(replica.stats), replica.stats.latency_sum)
        unrouted = CounterMetricFamily("gpupool_gateway_unrouted", "requests that named no route")
        unrouted.add_metric([], self._unrouted.unrouted)
        yield from (requests, errors, in_flight, queue, retries, latency, unrouted)


def _counts(requests: CounterMetricFamily, errors: CounterMetricFamily, labels: list[str], stats: Stats) -> None:
    for i, count in enumerate(stats.codes):
        if count:
            requests.add_metric([*labels, _CLASSES[i]], count)
    for kind, count in sorted(stats.errors.items()):
        errors.add_metric([*labels, kind], count)


def _buckets(stats: Stats) -> list[tuple[str, float]]:
    out, total = [], 0
    for bound, count in zip([*(str(b) for b in BUCKETS), "+Inf"], stats.buckets, strict=True):
        total += count
        out.append((bound, float(total)))
    return out


def load_report(table: Table, window_s: float) -> dict[str, Any]:
    """The body of ``POST /api/v1/gateway/stats``: per replica, what runs and waits now and what
    was answered since the last report, with those answers' latency histogram (counts per bucket of
    ``latency_bounds``, the last bucket past them, and their sum): the head shows latency per
    replica and exports it without scraping this process. A route's queue is shared by its
    replicas: it is split among them so that the sum over a service is the route's queue."""
    replicas: list[dict[str, Any]] = []
    for state in table.routes.values():
        if state.route.kind != "service":
            continue
        replicas.extend(_replica_reports(state))
    return {"window_s": round(window_s, 3), "latency_bounds": list(BUCKETS), "replicas": replicas}


def _replica_reports(state: RouteState) -> Iterable[dict[str, Any]]:
    n = len(state.replicas)
    queued = len(state.queue)
    if n == 0:  # scaled to zero: the waiting requests are what asks the autoscaler for a replica
        if queued:
            yield {
                "service": state.route.name,
                "replica": "",
                "in_flight": 0,
                "queued": queued,
                "requests": 0,
                "errors": 0,
            }
        return
    for i, replica in enumerate(state.replicas):
        stats = replica.stats
        requests, errors = stats.totals()
        before = stats.reported
        stats.reported = (requests, errors)
        counts_before, sum_before = stats.reported_latency
        stats.reported_latency = (tuple(stats.buckets), stats.latency_sum)
        yield {
            "service": state.route.name,
            "replica": replica.endpoint.replica,
            "in_flight": replica.in_flight,
            "queued": queued // n + (1 if i < queued % n else 0),
            "requests": requests - before[0],
            "errors": errors - before[1],
            "latency_counts": [now - then for now, then in zip(stats.buckets, counts_before, strict=True)],
            "latency_sum_s": round(max(0.0, stats.latency_sum - sum_before), 6),
        }


async def report_loop(
    client: httpx.AsyncClient, table: Table, interval_s: float, gathered: Gathered | None = None
) -> None:
    """Send the load to the head every ``interval_s`` until cancelled; a failed send is logged
    (once a minute at most) and the next one carries the counts since the last that arrived.
    ``gathered``: the other gateway processes' reports, merged into this one's (``gather.py``)."""
    last, warned = time.monotonic(), 0.0
    while True:
        await asyncio.sleep(interval_s)
        now = time.monotonic()
        own = load_report(table, now - last)
        body, taken = gathered.report(own) if gathered is not None else (own, {})
        try:
            response = await client.post(STATS_PATH, json=body)
            ok = response.status_code < 300
        except httpx.HTTPError:
            ok = False
        if ok:
            last = now
        else:
            _undo(table, own)
            if gathered is not None:
                gathered.give_back(taken)
            if now - warned > 60:
                log.warning("gateway: the head did not take the load report; retrying every %.1fs", interval_s)
                warned = now


def _undo(table: Table, body: dict[str, Any]) -> None:
    """A report that did not arrive: its counts go into the next one."""
    sent = {(r["service"], r["replica"]): r for r in body["replicas"]}
    for state in table.routes.values():
        for replica in state.replicas:
            got = sent.get((state.route.name, replica.endpoint.replica))
            if got is not None:
                stats = replica.stats
                before = stats.reported
                stats.reported = (before[0] - got["requests"], before[1] - got["errors"])
                counts, total = stats.reported_latency
                back = tuple(c - g for c, g in zip(counts, got["latency_counts"], strict=True))
                stats.reported_latency = (back, total - got["latency_sum_s"])


async def hand_over_loop(fd: int, table: Table, interval_s: float) -> None:
    """A forked gateway process's reports: every ``interval_s``, its load (counts since the last
    hand-over) as one JSON line on its pipe to the first process, which posts them merged. The pipe
    is non-blocking: a report it cannot take at all (full, or the first is gone) goes back into the
    counts for the next; the rest of one it took in part is written before any new one."""
    last, pending = time.monotonic(), b""
    while True:
        await asyncio.sleep(interval_s)
        if pending:
            pending = _write(fd, pending)
            if pending:  # the first has not read the last one yet: the counts wait here
                continue
        now = time.monotonic()
        body = load_report(table, now - last)
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
        rest = _write(fd, data)
        if rest == data:
            _undo(table, body)
        else:
            last, pending = now, rest


def _write(fd: int, data: bytes) -> bytes:
    """What of ``data`` the pipe did not take (all of it: full, or no reader)."""
    try:
        return data[os.write(fd, data) :]
    except OSError:  # BlockingIOError, BrokenPipeError
        return data


def read_reports(loop: asyncio.AbstractEventLoop, fds: list[int], gathered: Gathered) -> None:
    """In the first process: take each forked process's reports off its pipe as they come (one
    JSON line each) into ``gathered``; a pipe at its end (the process exited) is closed, out of
    ``fds``, and what that process ran no longer counts as in flight."""
    for fd in fds:
        loop.add_reader(fd, _Pipe(loop, fd, fds, gathered).readable)


class _Pipe:
    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, fds: list[int], gathered: Gathered) -> None:
        self.loop, self.fd, self.fds, self.gathered, self.buffer = loop, fd, fds, gathered, b""

    def readable(self) -> None:
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fds.remove(self.fd)
            self.gathered.lost(self.fd)
            return
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        for line in lines:
            try:
                self.gathered.take(self.fd, json.loads(line))
            except (ValueError, KeyError, TypeError, AttributeError) as e:  # not ours: a bug, said, not fatal
                log.warning("gateway: a gateway process's load report is unreadable: %r", e)
