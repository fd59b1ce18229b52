"""A job whose image no node can get now waits for it, each minute tried again without using a
restart, but only for ``--image-wait`` (issue 32): counted from the first exit of the wait, on the
controller's clock, and started over by an attempt that ended for any other reason. Through a
real controller and store and a fake executor, on a fake clock."""

from __future__ import annotations

import math

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain import exit_reasons
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import ADMIN, FakeExecutor

REF = "registry.example/team/train:1"
GONE = "registry.example did not answer"


def start(db: Database, image_wait_s: float) -> tuple[FakeClock, FakeExecutor, Controller, HeadContext, int]:
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, 2))
    settings = ControllerSettings(full_cycle_s=3600.0, usage_every_s=math.inf, image_wait_s=image_wait_s)
    controller = Controller(db, executor, clock, SchedulerConfig(), settings)
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    ctx = HeadContext(db, clock, executor, controller.wake)
    job = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=1, image=REF, max_restarts=1), ADMIN).id
    controller.tick()
    return clock, executor, controller, ctx, job


def unavailable(executor: FakeExecutor, controller: Controller, job: int) -> None:
    executor.exit(job, 125, exit_reasons.IMAGE_UNAVAILABLE, GONE)
    controller.tick()


def test_a_job_waits_for_its_image_for_image_wait_then_fails(db: Database) -> None:
    clock, executor, controller, ctx, job = start(db, 120.0)
    for attempt in (1, 2, 3):  # an exit at 0 s, 61 s and 122 s of the wait
        assert len(executor.launched) == attempt
        unavailable(executor, controller, job)
        if attempt == 3:
            break
        record = job_service.get(ctx, job)
        assert record.state is JobState.PENDING and record.reason_code == "image" and record.restarts == 0
        assert record.reason is not None and "from 00:02:00 UTC (--image-wait 2m)" in record.reason
        clock.advance(61)
        controller.tick()  # its minute is up: launched again
    record = job_service.get(ctx, job)
    assert (record.state, record.exit_reason, record.restarts) == (JobState.FAILED, exit_reasons.IMAGE, 0)
    with db.read() as s:
        said = [e.message for e in job_repo.job_events(s, job) if e.kind == "failed"]
    last = executor.launched[-1][0]  # the node of the last try
    assert said == [f"could not get image {REF} for 2m (last: {GONE}, on {last}); gave up (gpupool up --image-wait 2m)"]


def test_image_wait_zero_fails_the_job_at_its_first_exit_for_want_of_the_image(db: Database) -> None:
    _, executor, controller, ctx, job = start(db, 0.0)
    unavailable(executor, controller, job)
    record = job_service.get(ctx, job)
    assert (record.state, record.exit_reason, len(executor.launched)) == (JobState.FAILED, exit_reasons.IMAGE, 1)


def test_an_attempt_that_ended_otherwise_starts_the_count_over(db: Database) -> None:
    clock, executor, controller, ctx, job = start(db, 100.0)
    unavailable(executor, controller, job)
    clock.advance(61)
    controller.tick()
    executor.exit(job, 1)  # this attempt got its image and failed on its own: a restart, and a new wait after
    controller.tick()
    assert job_service.get(ctx, job).restarts == 1
    clock.advance(61)
    controller.tick()
    unavailable(executor, controller, job)  # 122 s after the first exit, but the first of this wait
    record = job_service.get(ctx, job)
    assert (record.state, record.reason_code, len(executor.launched)) == (JobState.PENDING, "image", 3)
