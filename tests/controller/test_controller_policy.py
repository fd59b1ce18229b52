"""The head runs the policy ``gpupool up --policy`` names: a real controller over a real store,
scheduling with the config the head builds from its settings (``Settings.scheduler_config``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.scheduler.policies import preset
from gpupool.settings import Settings
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import USER, FakeExecutor


@pytest.mark.parametrize(
    ("policy", "starts"),
    [
        ("default", "interactive"),  # priority classes first
        ("fifo", "train"),  # submit order alone
    ],
)
def test_the_controller_schedules_with_the_policy_the_settings_name(
    db: Database, tmp_path: Path, policy: str, starts: str
) -> None:
    settings = Settings(data_dir=tmp_path, policy=policy)
    assert settings.scheduler_config == preset(policy)
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, 1))
    controller = Controller(
        db, executor, clock, settings.scheduler_config, ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf)
    )
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    ctx = HeadContext(db, clock, executor, controller.wake)
    ids = {
        priority: job_service.submit(ctx, JobSpec.create(command=["x"], priority=priority), USER).id
        for priority in ("train", "interactive")  # one GPU, two jobs: the train job was first
    }
    controller.tick()
    states = {priority: job_service.get(ctx, job_id).state for priority, job_id in ids.items()}
    assert states == {p: JobState.RUNNING if p == starts else JobState.PENDING for p in ids}
