"""Bounded disk (issue 15, part 5), on both engines: jobs that finished longer ago than
keep_finished_s leave with their workers, events and idempotency keys, and their nodes are told
to delete their run directories and logs; running, waiting and recent jobs stay."""

from __future__ import annotations

import math

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from tests.support.executor import USER, FakeExecutor

DAY = 86400.0


def test_finished_jobs_older_than_the_keep_time_go_with_their_files(db: Database) -> None:
    clock = FakeClock()
    executor = FakeExecutor(uniform(2, 1), clock)
    settings = ControllerSettings(
        full_cycle_s=0.0, usage_every_s=math.inf, audit_prune_every_s=0.0, keep_finished_s=30 * DAY
    )
    controller = Controller(db, executor, clock, SchedulerConfig(), settings)
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        node_repo.register_nodes(s, uniform(2, 1), clock.now())

    def submit(name: str, gpus: float = 1) -> int:
        spec = JobSpec.create(command=["train"], name=name, gpus=gpus)
        return GroupCommit(ctx).submit(spec, USER, f"key-{name}")[0].id

    old_ok, old_cancelled = submit("old-ok"), submit("old-cancelled", gpus=0)
    job_service.cancel(ctx, old_cancelled, USER)  # never ran: pending, cancelled at once
    controller.tick()
    executor.exit(old_ok, 0)
    controller.tick()
    clock.advance(20 * DAY)
    recent = submit("recent")
    controller.tick()
    executor.exit(recent, 0)
    running = submit("running")
    controller.tick()
    assert job_service.get(ctx, running).state is JobState.RUNNING
    clock.advance(11 * DAY)  # old jobs finished 31 days ago; the recent one 11
    controller.tick()

    with db.read() as s:
        left = {j.spec.name for j in job_repo.list_jobs(s, include_finished=True, limit=100)}
    assert left == {"recent", "running"}
    (node, forgotten), *rest = executor.forgotten
    assert forgotten == (old_ok,) and rest == [] and node.startswith("node-")
    assert GroupCommit(ctx).submit(JobSpec.create(command=["train"], name="old-ok"), USER, "key-old-ok")[1] is False
    events = job_service.show(ctx, recent, USER)[2]
    assert events and all(e.kind != "jobs_pruned" for e in events)
