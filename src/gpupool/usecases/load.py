"""What the gateway last told the head about each replica's load, kept in memory.

The gateway posts a report every second or so (``POST /api/v1/gateway/stats``); the service
reconciler reads the recent ones and hands them to the pure autoscaler, and the faces read them
too: ``figures`` (requests a second, in flight, queued, errors, latency percentiles over the last
half minute) for ``gpupool service show``, ``top`` and the dashboard, ``totals`` (counters since
the head started) for ``/metrics``. Nothing here is durable on purpose: after a restart the
autoscaler holds its count until reports come in again, and the counters start from zero as any
Prometheus counter may. Bounded: so many reports per service, so many services, and counters only
for the replicas of each service's newest report.

A report's latency (a histogram: counts per bucket of its ``latency_bounds``) is optional: a
gateway that sends none still feeds everything else, and its replicas show no percentiles.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpupool.domain.autoscale import LoadSample

REPORTS_KEPT = 256  # per service
SERVICES_KEPT = 4096
RECENT_S = 30.0  # the span ``figures`` averages over
STALE_S = 15.0  # a newest report older than this says nothing about what is in flight now


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One line of a gateway report; ``latency_counts`` is empty where the gateway sent none."""

    service: str
    replica: str
    in_flight: int
    queued: int
    requests: int
    errors: int
    latency_counts: tuple[int, ...] = ()
    latency_sum_s: float = 0.0


@dataclass(frozen=True, slots=True)
class LoadFigures:
    """A replica's (or a whole service's) recent load; percentiles are None without latency data."""

    requests_per_s: float
    errors_per_s: float
    in_flight: int
    queued: int
    latency_p50_s: float | None
    latency_p99_s: float | None


@dataclass(frozen=True, slots=True)
class ServiceLoad:
    window_s: float  # the span the rates cover
    age_s: float  # since the newest report
    total: LoadFigures
    replicas: dict[str, LoadFigures]


@dataclass(slots=True)
class Totals:
    """Counters of one replica since the head started: ``/metrics`` exports them."""

    requests: int = 0
    errors: int = 0
    bounds: tuple[float, ...] = ()
    counts: list[int] = field(default_factory=list)
    latency_sum_s: float = 0.0


@dataclass(frozen=True, slots=True)
class _Report:
    at: datetime
    window_s: float
    bounds: tuple[float, ...]
    lines: tuple[ReplicaLoad, ...]


class LoadBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[str, deque[_Report]] = {}
        self._totals: dict[str, dict[str, Totals]] = {}

    def record(self, at: datetime, window_s: float, lines: Sequence[ReplicaLoad], bounds: Sequence[float] = ()) -> int:
        """Keep one report, stamped ``at`` (the head's time); how many lines were kept."""
        by_service: dict[str, list[ReplicaLoad]] = {}
        for line in lines:
            by_service.setdefault(line.service, []).append(line)
        kept = 0
        with self._lock:
            for service, mine in by_service.items():
                reports = self._reports.get(service)
                if reports is None:
                    if len(self._reports) >= SERVICES_KEPT:
                        continue
                    reports = self._reports[service] = deque(maxlen=REPORTS_KEPT)
                reports.append(_Report(at, window_s, tuple(bounds), tuple(mine)))
                self._add(service, mine, tuple(bounds))
                kept += len(mine)
        return kept

    def samples(self, service: str) -> list[LoadSample]:
        with self._lock:
            reports = list(self._reports.get(service, ()))
        return [LoadSample(r.at, line.replica, line.in_flight, line.queued) for r in reports for line in r.lines]

    def routed(self, service: str) -> tuple[datetime, frozenset[str]] | None:
        """When the gateway last reported the service, and the replicas it routed to then (every
        replica in its table is in each report); None before its first report."""
        with self._lock:
            reports = self._reports.get(service)
            if not reports:
                return None
            return reports[-1].at, frozenset(line.replica for line in reports[-1].lines)

    def latest(self, service: str) -> tuple[ReplicaLoad, ...]:
        with self._lock:
            reports = self._reports.get(service)
            return reports[-1].lines if reports else ()

    def figures(self, service: str, now: datetime, span_s: float = RECENT_S) -> ServiceLoad | None:
        """The service's load over the reports of the last ``span_s`` seconds; None without any."""
        with self._lock:
            reports = [r for r in self._reports.get(service, ()) if (now - r.at).total_seconds() <= span_s]
        if not reports:
            return None
        newest = reports[-1]
        age = max(0.0, (now - newest.at).total_seconds())
        window = sum(r.window_s for r in reports)
        current = {line.replica: line for line in newest.lines} if age <= STALE_S else {}
        names = list(dict.fromkeys(line.replica for r in reports for line in r.lines))
        replicas = {name: _figures(reports, window, current, {name}) for name in names}
        return ServiceLoad(window, age, _figures(reports, window, current, set(names)), replicas)

    def totals(self) -> list[tuple[str, str, Totals]]:
        """(service, replica, counters) for every replica of every service's newest report."""
        with self._lock:
            return [
                (service, replica, Totals(t.requests, t.errors, t.bounds, list(t.counts), t.latency_sum_s))
                for service, mine in sorted(self._totals.items())
                for replica, t in sorted(mine.items())
            ]

    def keep_only(self, services: Iterable[str]) -> None:
        """Forget services that no longer exist."""
        keep = set(services)
        with self._lock:
            for gone in set(self._reports) - keep:
                del self._reports[gone]
                self._totals.pop(gone, None)

    def _add(self, service: str, lines: Sequence[ReplicaLoad], bounds: tuple[float, ...]) -> None:
        """Add a report's counts to the counters; replicas it no longer lists are forgotten (their
        series end, as a replaced replica's should)."""
        before = self._totals.get(service, {})
        now: dict[str, Totals] = {}
        for line in lines:
            t = now[line.replica] = before.get(line.replica) or Totals()
            t.requests += line.requests
            t.errors += line.errors
            if not line.latency_counts:
                continue
            if t.bounds != bounds:  # a gateway with other buckets: a fresh histogram
                t.bounds, t.counts, t.latency_sum_s = bounds, [0] * len(line.latency_counts), 0.0
            t.counts = [a + b for a, b in zip(t.counts, line.latency_counts, strict=True)]
            t.latency_sum_s += line.latency_sum_s
        self._totals[service] = now


def _figures(reports: list[_Report], window: float, current: dict[str, ReplicaLoad], names: set[str]) -> LoadFigures:
    requests = errors = 0
    counts: list[int] = []
    bounds: tuple[float, ...] = ()
    for r in reports:
        for line in r.lines:
            if line.replica not in names:
                continue
            requests += line.requests
            errors += line.errors
            if line.latency_counts and (not counts or r.bounds == bounds):
                bounds = r.bounds
                counts = [
                    a + b for a, b in zip(counts or [0] * len(line.latency_counts), line.latency_counts, strict=True)
                ]
    now = [line for name, line in current.items() if name in names]
    return LoadFigures(
        requests_per_s=requests / window if window > 0 else 0.0,
        errors_per_s=errors / window if window > 0 else 0.0,
        in_flight=sum(line.in_flight for line in now),
        queued=sum(line.queued for line in now),
        latency_p50_s=quantile(bounds, counts, 0.5),
        latency_p99_s=quantile(bounds, counts, 0.99),
    )


def quantile(bounds: Sequence[float], counts: Sequence[int], q: float) -> float | None:
    """The q-quantile of a histogram (``counts[i]`` observations at most ``bounds[i]``, the last
    past every bound), interpolated inside its bucket as Prometheus's ``histogram_quantile``
    does; past the last bound, the last bound. None without observations."""
    total = sum(counts)
    if total <= 0 or len(counts) != len(bounds) + 1:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(counts):
        if count and seen + count >= rank:
            if i == len(bounds):
                return float(bounds[-1]) if bounds else None
            low = bounds[i - 1] if i else 0.0
            return low + (bounds[i] - low) * (rank - seen) / count
        seen += count
    return float(bounds[-1]) if bounds else None
