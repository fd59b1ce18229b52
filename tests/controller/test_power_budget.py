"""The power budget on a real controller and store (issue 33), with simulated H100 readings on a
virtual clock: a capped start is launched under its cap and recorded; a job over the budget waits
with reason ``power``; measured draw over a node's budget throttles the lowest-priority job first
and the cap is lifted once there is room; /metrics shows the budget, what it counts and the
throttles; a node budget below its idle draw is refused."""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.launch import PowerSetting
from gpupool.domain.telemetry import GpuSample
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases import jobs as job_service
from gpupool.usecases import nodes as node_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import ADMIN, USER, FakeExecutor

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

MODEL = "NVIDIA H100 80GB HBM3"  # 700 W default, 70 W idle, 200 W lowest limit
BUSY_W = 650.0


class PowerProbe(FakeExecutor):
    """Every busy GPU draws 650 W, or its limit where the throttle set a lower one; idle ones 70 W."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(uniform(2, 2, MODEL), clock)
        self.limits: dict[tuple[str, int], float] = {}

    def set_gpu_power(self, node: str, gpus: object, setting: PowerSetting | None) -> list[str]:
        indices = tuple(gpus)  # type: ignore[call-overload]
        for index in indices:
            if setting is None:
                self.limits.pop((node, index), None)
            else:
                self.limits[(node, index)] = float(setting.value)
        return super().set_gpu_power(node, indices, setting)

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        return [
            replace(
                s,
                power_w=min(BUSY_W, self.limits.get((node, s.index), BUSY_W)) if s.index in busy else 70.0,
                power_limit_w=self.limits.get((node, s.index), 700.0),
            )
            for s in super().telemetry(node, busy)
        ]


class Cluster:
    def __init__(self, db: Database, budget_w: float = 0.0) -> None:
        self.db = db
        self.clock = FakeClock()
        self.executor = PowerProbe(self.clock)
        settings = ControllerSettings(
            full_cycle_s=0.0, usage_every_s=math.inf, telemetry_every_s=5.0, power_budget_w=budget_w
        )
        self.controller = Controller(db, self.executor, self.clock, SchedulerConfig(), settings)
        self.ctx = HeadContext(db, self.clock, self.executor, self.controller.wake, power_budget_w=budget_w)
        with db.tx() as s:
            node_repo.register_nodes(s, uniform(2, 2, MODEL), self.clock.now())
            self.token = create_token(s, "admin", "admin", self.clock.now())

    def submit(self, gpus: int = 1, priority: str = "train", mode: str | None = None) -> int:
        spec = JobSpec.create(command=["work"], gpus=gpus, priority=priority, gpu_power=mode)
        job = job_service.submit(self.ctx, spec, USER)
        self.run_for(1)
        return job.id

    def run_for(self, seconds: float) -> None:
        for _ in range(round(seconds)):
            self.clock.advance(1.0)
            self.controller.tick()

    def events(self, job_id: int, kind: str = "power") -> list[str]:
        return [e.message for e in job_service.show(self.ctx, job_id, ADMIN)[2] if e.kind == kind]

    def metrics(self) -> dict[tuple[str, str], float]:
        with TestClient(create_app(self.ctx)) as client:
            text = client.get("/metrics", headers={"Authorization": f"Bearer {self.token}"}).text
        return {
            (s.name, s.labels.get("scope", "")): s.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("gpupool_power")
            for s in family.samples
        }


def test_a_flexible_job_starts_capped_and_a_max_job_waits_for_power(db: Database) -> None:
    # 4 idle GPUs count 280 W. Job 1 (max, 1 GPU): 280 + 630 = 910 W.
    c = Cluster(db, budget_w=1500)
    first = c.submit()
    assert job_service.get(c.ctx, first).state is JobState.RUNNING
    # Job 2 asks for 600 W on 2 GPUs: 910 + 2 x 530 > 1500; capped to (1500 - 910 + 140) / 2 = 365 W.
    capped = c.submit(gpus=2, mode="600W")
    assert job_service.get(c.ctx, capped).state is JobState.RUNNING
    launched = [r for _, r in c.executor.launched if r.job_id == capped]
    assert [r.gpu_power for r in launched] == [PowerSetting("limit", 365)]
    # Now 910 + 2 x 295 = 1500 counted: a max job waits, and says what is free.
    waiting = c.submit()
    job = job_service.get(c.ctx, waiting)
    assert job.state is JobState.PENDING
    assert job.reason_code == "power"
    assert job.reason == (
        "needs 700 W at its GPUs' limits; the cluster's 1.5 kW budget has 70 W free"
        " (--gpu-power efficient or a value in watts would let it start capped)"
    )
    figures = c.metrics()
    assert figures[("gpupool_power_budget_watts", "cluster")] == 1500
    assert figures[("gpupool_power_counted_watts", "cluster")] == 1500
    # When job 1 ends its watts come back, and the waiting job starts.
    c.executor.exit(first, 0)
    c.run_for(2)
    assert job_service.get(c.ctx, waiting).state is JobState.RUNNING


def test_measured_draw_over_a_node_budget_throttles_the_lowest_priority_first(db: Database) -> None:
    c = Cluster(db)
    train = c.submit(priority="train")
    interactive = c.submit(priority="interactive")
    placed = {p.node for j in (train, interactive) for p in job_service.get(c.ctx, j).placements}
    assert placed == {"node-1"}
    node_service.set_power_budget(c.ctx, "node-1", "1kW", ADMIN)
    c.run_for(6)  # a round of readings: 2 x 650 = 1300 W drawn against 1000
    assert c.executor.power_set[-1] == ("node-1", (0,), PowerSetting("limit", 350))
    assert c.events(train)[0].startswith(
        "throttled: node-1's draw 1.3 kW against its 1 kW budget; lowest priority, newest first"
    )
    assert c.events(interactive) == []
    assert c.metrics()[("gpupool_power_throttles_total", "")] == 1
    c.run_for(10)  # 350 + 650 = 1000: kept, and no room to lift (under 95 %)
    assert len(c.executor.power_set) == 1
    c.executor.exit(interactive, 0)
    c.run_for(10)  # 350 + 70 drawn: room again
    assert c.executor.power_set[-1] == ("node-1", (0,), None)
    assert c.events(train)[-1] == "cap lifted: the draw is back below the budget; GPU 0 of node-1: at its default"


def test_a_node_budget_below_its_idle_draw_is_refused(db: Database) -> None:
    c = Cluster(db)
    with pytest.raises(InvalidInput, match=r"below what node node-1's GPUs draw idle \(140 W\)"):
        node_service.set_power_budget(c.ctx, "node-1", "100W", ADMIN)
    assert node_service.set_power_budget(c.ctx, "node-1", "none", ADMIN) is None
    with db.read() as s:
        assert node_repo.power_budgets(s) == {}
