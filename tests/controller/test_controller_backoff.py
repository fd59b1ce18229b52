"""A job backing off after a failure starts again when its back-off ends: the controller runs a
cycle then, rather than at its next full cycle (an hour away here; 5 s in the head, which made a
restart told to wait 0.5 s wait up to 5)."""

from __future__ import annotations

import math

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
SETTINGS = ControllerSettings(full_cycle_s=3600.0, usage_every_s=math.inf, restart_backoff_s=30.0)


def test_a_job_backing_off_is_started_when_its_back_off_ends(db: Database) -> None:
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, 2))
    controller = Controller(db, executor, clock, SchedulerConfig(), SETTINGS)
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    ctx = HeadContext(db, clock, executor, controller.wake)
    job = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=1, max_restarts=1), ADMIN).id
    controller.tick()
    assert job_service.get(ctx, job).state is JobState.RUNNING

    executor.exit(job, 3)
    controller.tick()  # reaped and requeued, to wait 30 s
    assert job_service.get(ctx, job).state is JobState.PENDING
    clock.advance(29)
    controller.tick()
    assert job_service.get(ctx, job).state is JobState.PENDING and len(executor.launched) == 1
    clock.advance(2)
    controller.tick()  # nothing else changed and no full cycle is due: the back-off's end is the cause
    assert job_service.get(ctx, job).state is JobState.RUNNING and len(executor.launched) == 2
