"""A real controller over a real store, on a virtual clock, with the fake executor serving two nodes
of two simulated GPUs whose readings it makes up: for the tests of telemetry and of what is
reported from it (the accounting report)."""

from __future__ import annotations

import math

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.telemetry import GpuSample, TelemetryRetention
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import telemetry as telemetry_repo
from gpupool.store.db import Database
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

SETTINGS = ControllerSettings(
    full_cycle_s=0.0, usage_every_s=math.inf, telemetry_every_s=5.0, telemetry_retention=TelemetryRetention()
)


class Harness:
    def __init__(self, db: Database, executor_class: type[FakeExecutor] = FakeExecutor) -> None:
        self.db = db
        self.clock = FakeClock()
        self.executor = executor_class(uniform(2, 2), self.clock)
        self.controller = Controller(db, self.executor, self.clock, SchedulerConfig(), SETTINGS)
        self.ctx = HeadContext(db, self.clock, self.executor, self.controller.wake)
        with db.tx() as s:  # what Controller.start() does before its thread runs the ticks
            node_repo.register_nodes(s, uniform(2, 2), self.clock.now())

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.controller.tick()

    def latest(self) -> dict[tuple[str, int], GpuSample]:
        with self.db.tx() as s:
            return {(r.node, r.index): r for r in telemetry_repo.latest(s)}
