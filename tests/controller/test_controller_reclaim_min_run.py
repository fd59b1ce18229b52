"""A borrower's job runs ``reclaim_min_run_s`` before reclaim stops it, and is stopped then: the
controller runs a cycle when the scheduler says the minimum is reached, not at its next full cycle
(an hour away here), and the waiting job says meanwhile when that will be."""

from __future__ import annotations

import math
from dataclasses import replace

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.projects import Project
from gpupool.scheduler.policies import preset
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import projects as project_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import KILLED, FakeExecutor

ADMIN = Principal("admin", "admin")
SETTINGS = ControllerSettings(full_cycle_s=3600.0, usage_every_s=math.inf)


def test_a_young_borrower_is_reclaimed_when_it_has_run_the_minimum(db: Database) -> None:
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, 2))
    config = replace(preset("default"), reclaim_min_run_s=600.0)
    controller = Controller(db, executor, clock, config, SETTINGS)
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
        for name in ("a", "b"):
            project_repo.set_project(s, Project.create(name, quota=1), clock.now(), everyone=True)
    ctx = HeadContext(db, clock, executor, controller.wake)

    def submit(project: str) -> int:
        return job_service.submit(ctx, JobSpec.create(command=["x"], gpus=1, project=project), ADMIN).id

    borrower = [submit("a"), submit("a")]  # a borrows b's GPU
    controller.tick()
    assert [job_service.get(ctx, j).state for j in borrower] == [JobState.RUNNING] * 2
    clock.advance(60)
    owner = submit("b")
    controller.tick()
    waiting = job_service.get(ctx, owner)
    assert waiting.state is JobState.PENDING and waiting.reason_code == "reclaim"
    assert "1 job(s) of a borrowed beyond quota, taken back once they have run 10m" in (waiting.reason or "")
    assert "(the first in 9m)" in (waiting.reason or "")
    clock.advance(539)
    assert controller.tick() is None  # 599 s: no cycle is due
    clock.advance(1)
    result = controller.tick()  # no full cycle is due and nothing changed: the minimum reached is the cause
    assert result is not None
    assert [p.job_id for p in result.preemptions] == [borrower[1]]  # the youngest (both started together)
    executor.exit(borrower[1], KILLED)
    controller.tick()
    controller.tick()
    assert job_service.get(ctx, owner).state is JobState.RUNNING
