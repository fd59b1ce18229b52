"""The controller's telemetry step: every ``every_s`` of clock time, ask the executor for a reading
of every node that is not down, and write them all to the store (which downsamples and prunes);
with it, each live worker's memory and CPU use from its cgroup (``gpupool show``, ``top``, /metrics).

Load → process → apply: one short read (which nodes, which GPUs their live workers hold), the
executor calls with no session open, one short write. A node that cannot be read is logged (once
until it can be read again) and skipped; nothing here may stop the loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from gpupool.clock import Clock
from gpupool.domain.launch import WorkerHandle
from gpupool.domain.records import UsageReading
from gpupool.domain.telemetry import GpuKey, GpuSample, TelemetryRetention
from gpupool.executors.base import Executor
from gpupool.store import telemetry as telemetry_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database

log = logging.getLogger("gpupool.controller")


@dataclass(frozen=True, slots=True)
class Round:
    """One round of readings, and which job held each GPU when it was read: the idle and alert
    steps that follow use the same view instead of reading the workers again."""

    samples: list[GpuSample]
    holders: dict[GpuKey, int]


class TelemetrySampler:
    def __init__(
        self, db: Database, executor: Executor, clock: Clock, every_s: float, retention: TelemetryRetention
    ) -> None:
        self._db = db
        self._executor = executor
        self._clock = clock
        self._every_s = every_s
        self._retention = retention
        self._last: datetime | None = None
        self._failing: set[str] = set()

    def maybe_sample(self) -> Round | None:
        """Sample when due; the round written (None when not due or on failure)."""
        now = self._clock.now()
        if self._last is not None and 0 <= (now - self._last).total_seconds() < self._every_s:
            return None
        self._last = now
        try:
            return self.sample()
        except Exception:
            log.exception("writing GPU telemetry failed; trying again at the next sampling")
            return None

    def sample(self) -> Round:
        with self._db.tx() as s:
            holders = telemetry_repo.holders(s)
            busy = telemetry_repo.busy_gpus(s, holders)
            live = worker_repo.live_handles(s)
        samples: list[GpuSample] = []
        for node, held in sorted(busy.items()):
            samples.extend(self._read(node, held))
        usage: dict[int, UsageReading] = {}
        for node, workers in sorted(live.items()):
            usage.update(self._usage(node, workers))
        with self._db.tx() as s:
            now = self._clock.now()
            telemetry_repo.write_samples(s, samples, now, self._retention)
            worker_repo.write_usage(s, usage, now)
        return Round(samples, holders)

    def _usage(self, node: str, workers: list[tuple[int, WorkerHandle]]) -> dict[int, UsageReading]:
        """Each live worker's cgroup reading on ``node`` (those without a cgroup left out)."""
        try:
            stats = self._executor.usage(node, [handle for _, handle in workers])
        except Exception as exc:
            log.debug("cannot read the workers' use on node %s: %s", node, exc)
            return {}
        return {
            worker_id: (s.memory_bytes, s.memory_peak_bytes, s.cpu_seconds)
            for (worker_id, _), s in zip(workers, stats, strict=False)
            if s is not None
        }

    def _read(self, node: str, held: frozenset[int]) -> list[GpuSample]:
        try:
            samples = self._executor.telemetry(node, held)
        except Exception as exc:
            if node not in self._failing:
                log.warning("cannot read the GPUs of node %s: %s", node, exc)
                self._failing.add(node)
            return []
        if node in self._failing:
            log.info("reading the GPUs of node %s works again", node)
            self._failing.discard(node)
        # A node reports only its own GPUs; anything else is dropped rather than misfiled.
        return [s for s in samples if s.node == node]
