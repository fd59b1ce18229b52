"""What the gateway last told the head about each replica's load, kept in memory.

The gateway posts a report every few seconds (``POST /api/v1/gateway/stats``); the service
reconciler reads the recent ones and hands them to the pure autoscaler. Nothing here is durable on
purpose: after a restart the autoscaler holds its count until reports come in again. Bounded: so
many reports per service, so many services.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.autoscale import LoadSample

REPORTS_KEPT = 256  # per service
SERVICES_KEPT = 4096


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One line of a gateway report."""

    service: str
    replica: str
    in_flight: int
    queued: int
    requests: int
    errors: int


class LoadBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[str, deque[tuple[datetime, tuple[ReplicaLoad, ...]]]] = {}
        self._window_s: float = 0.0

    def record(self, at: datetime, window_s: float, lines: Sequence[ReplicaLoad]) -> int:
        """Keep one report, stamped ``at`` (the head's time); how many lines were kept."""
        by_service: dict[str, list[ReplicaLoad]] = {}
        for line in lines:
            by_service.setdefault(line.service, []).append(line)
        kept = 0
        with self._lock:
            self._window_s = window_s
            for service, mine in by_service.items():
                reports = self._reports.get(service)
                if reports is None:
                    if len(self._reports) >= SERVICES_KEPT:
                        continue
                    reports = self._reports[service] = deque(maxlen=REPORTS_KEPT)
                reports.append((at, tuple(mine)))
                kept += len(mine)
        return kept

    def samples(self, service: str) -> list[LoadSample]:
        with self._lock:
            reports = list(self._reports.get(service, ()))
        return [LoadSample(at, line.replica, line.in_flight, line.queued) for at, lines in reports for line in lines]

    def latest(self, service: str) -> tuple[ReplicaLoad, ...]:
        with self._lock:
            reports = self._reports.get(service)
            return reports[-1][1] if reports else ()

    def keep_only(self, services: Iterable[str]) -> None:
        """Forget services that no longer exist."""
        keep = set(services)
        with self._lock:
            for gone in set(self._reports) - keep:
                del self._reports[gone]
