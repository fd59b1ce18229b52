"""A controller that hears exits ring (issue 16) polls its workers only when one rings or a second
has passed, and still finds an exit that never rang (a supervisor killed outright)."""

from __future__ import annotations

import math
import time

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

ADMIN = Principal("admin", "admin")


def test_exits_are_reaped_when_they_ring_and_at_least_every_second(db: Database) -> None:
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, 2))
    controller = Controller(
        db, executor, clock, SchedulerConfig(), ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf)
    )
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    ctx = HeadContext(db, clock, executor, controller.wake)
    a, b = (job_service.submit(ctx, JobSpec.create(command=["x"], gpus=1), ADMIN).id for _ in range(2))
    controller.exit_rang()  # the backend rings: polling every cycle stops
    controller.tick()
    assert {job_service.get(ctx, j).state for j in (a, b)} == {JobState.RUNNING}

    executor.exit(a, 0)  # recorded, but it did not ring
    controller.tick()
    assert job_service.get(ctx, a).state is JobState.RUNNING
    controller.exit_rang()
    controller.tick()
    assert job_service.get(ctx, a).state is JobState.SUCCEEDED

    executor.exit(b, 0)  # never rings: found by the poll a second later
    controller.tick()
    assert job_service.get(ctx, b).state is JobState.RUNNING
    time.sleep(1.05)
    controller.tick()
    assert job_service.get(ctx, b).state is JobState.SUCCEEDED
