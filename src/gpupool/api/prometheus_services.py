"""The services' series of ``GET /metrics``, read at scrape time.

Replica counts come from the store (one short read, like ``StoreCollector``'s); the load comes
from the gateway's reports the head keeps in memory (``usecases/load.py``), so the head's one
scrape target shows both, and nobody needs to scrape the gateway to see a service's traffic
(the gateway's own ``/metrics`` has more: status classes, error kinds, retries, per route).

- ``gpupool_service_replicas{service,state}``: ready, starting, stopping
- ``gpupool_service_desired_replicas{service}``
- ``gpupool_service_requests_total{service,replica}``, ``gpupool_service_errors_total{service,replica}``:
  answers and failed tries the gateway reported since this head started (requests a second is
  ``rate()`` of them; a replaced replica's series ends)
- ``gpupool_service_in_flight{service,replica}``, ``gpupool_service_queued{service}``: as of the
  newest report
- ``gpupool_service_request_duration_seconds{service,replica}``: a histogram, where the gateway
  reports latency
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpupool.usecases.load import LoadBoard, Totals

ReplicaStates = Callable[[], list[tuple[str, int, dict[str, int]]]]


class ServiceCollector(Collector):
    """``states``: ``services.services.replica_states`` bound to the head's context."""

    def __init__(self, states: ReplicaStates, load: LoadBoard) -> None:
        self._states, self._load = states, load

    def collect(self) -> Iterator[Metric]:
        replicas = GaugeMetricFamily(
            "gpupool_service_replicas", "Replicas of each service by state", labels=["service", "state"]
        )
        desired = GaugeMetricFamily(
            "gpupool_service_desired_replicas", "Replicas each service should have now", labels=["service"]
        )
        names = []
        for name, want, states in self._states():
            names.append(name)
            desired.add_metric([name], want)
            for state, count in states.items():
                replicas.add_metric([name, state], count)
        yield replicas
        yield desired
        yield from self._load_families(set(names))

    def _load_families(self, services: set[str]) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "gpupool_service_requests",
            "Answers a replica gave through the gateway, as the gateway reported (since the head started)",
            labels=["service", "replica"],
        )
        errors = CounterMetricFamily(
            "gpupool_service_errors",
            "Failed tries at a replica (refused, reset, timed out), as the gateway reported",
            labels=["service", "replica"],
        )
        in_flight = GaugeMetricFamily(
            "gpupool_service_in_flight",
            "Requests at the replica, as of the newest report",
            labels=["service", "replica"],
        )
        queued = GaugeMetricFamily(
            "gpupool_service_queued", "Requests the gateway holds for a free replica", labels=["service"]
        )
        latency = HistogramMetricFamily(
            "gpupool_service_request_duration_seconds",
            "From a request's arrival at the gateway to the replica's response head",
            labels=["service", "replica"],
        )
        for service, replica, t in self._load.totals():
            if service not in services:
                continue
            requests.add_metric([service, replica], t.requests)
            errors.add_metric([service, replica], t.errors)
            if t.counts:
                latency.add_metric([service, replica], _buckets(t), t.latency_sum_s)
        for service in sorted(services):
            lines = self._load.latest(service)
            for line in lines:
                in_flight.add_metric([service, line.replica], line.in_flight)
            if lines:
                queued.add_metric([service], sum(line.queued for line in lines))
        yield from (requests, errors, in_flight, queued, latency)

    def describe(self) -> Iterable[Metric]:
        return ()  # describing by collecting would read the store at registration


def _buckets(t: Totals) -> list[tuple[str, float]]:
    out, total = [], 0
    for bound, count in zip([*(f"{b:g}" for b in t.bounds), "+Inf"], t.counts, strict=True):
        total += count
        out.append((bound, float(total)))
    return out
