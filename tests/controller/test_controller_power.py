"""Per-job power modes at launch (issue 33): a real controller over a real store with the fake
executor; what each worker's LaunchRequest carries, and what the job's events say of it."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.controller.power import job_power, resolve_job_power
from gpupool.domain.errors import InvalidInput
from gpupool.domain.jobs import JobSpec
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import PowerCurve, PowerPoint
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import power_curves as curve_repo
from gpupool.store import projects as project_repo
from gpupool.store.db import Database
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import USER, FakeExecutor

H100 = GpuInfo(0, "GPU-0", "H100", 81559, True)
RANGED = replace(H100, power_min_w=200, power_max_w=700, power_default_w=700)
# A calibrated H100 on which the 900 MHz lock saves most within 25 % and a 400 W limit most within 35 %.
CURVE = PowerCurve(
    "H100",
    (
        PowerPoint(PowerSetting("limit", 700), 1.0, 1.0, 700),
        PowerPoint(PowerSetting("limit", 400), 0.69, 0.80, 400),
        PowerPoint(PowerSetting("clocks", 900), 0.77, 0.82, 435),
    ),
    calibrated=True,
    measured_at=datetime(2026, 11, 27, tzinfo=UTC),
    node="gpu-1",
)


def spec(gpu_power: str | None = None, gpus: float = 1) -> JobSpec:
    return JobSpec.create(command=["x"], gpus=gpus, gpu_power=gpu_power)


def test_the_mode_is_the_jobs_else_its_projects_else_max() -> None:
    assert resolve_job_power(spec(), None, RANGED, {}, 0.2) is None  # max: the GPU's default
    assert resolve_job_power(spec(), "400W", RANGED, {}, 0.2) == PowerSetting("limit", 400)
    assert resolve_job_power(spec("450W"), "400W", RANGED, {}, 0.2) == PowerSetting("limit", 450)
    assert resolve_job_power(spec("max"), "efficient", RANGED, {}, 0.2) is None


def test_efficient_follows_the_calibrated_curve_within_the_slowdown_and_says_so() -> None:
    within_25 = job_power(spec("efficient"), None, RANGED, {"H100": CURVE}, 0.25)
    assert within_25.setting == PowerSetting("clocks", 900)
    assert within_25.note is not None and "calibration on gpu-1 (2026-11-27)" in within_25.note
    assert resolve_job_power(spec("efficient"), None, RANGED, {"H100": CURVE}, 0.35) == PowerSetting("limit", 400)
    assert resolve_job_power(spec("efficient"), None, RANGED, {"H100": CURVE}, 0.1) is None  # nothing that fast saves


def test_efficient_without_a_calibration_uses_the_family_default_and_says_it_is_not_calibrated() -> None:
    got = job_power(spec("efficient"), None, RANGED, {}, 0.2)
    assert got.setting == PowerSetting("limit", 500)
    assert got.note == (
        "efficient: 500 W limit from the default curve for H100 (not calibrated: gpupool node calibrate-power),"
        " at most 20% slower"
    )
    # A GPU that reported no range: its family's default limit (an A100: 400 W) scales the curve.
    a100 = GpuInfo(0, "GPU-0", "A100", 40960, False)
    assert resolve_job_power(spec("efficient"), None, a100, {}, 0.2) == PowerSetting("limit", 286)


def test_a_limit_outside_this_gpus_range_is_taken_to_the_nearest_and_said() -> None:
    got = job_power(spec("150W"), None, RANGED, {}, 0.2)
    assert got.setting == PowerSetting("limit", 200)
    assert got.note is not None and "200-700 W" in got.note
    assert job_power(spec("900W"), None, RANGED, {}, 0.2).setting is None  # at its default or above: the default


def test_a_job_without_gpus_gets_nothing() -> None:
    with pytest.raises(InvalidInput):
        spec("efficient", gpus=0)  # refused at submit already
    assert resolve_job_power(spec(gpus=0), "efficient", None, {}, 0.2) is None


def _start(db: Database, job: JobSpec, slowdown: float = 0.2) -> tuple[FakeExecutor, HeadContext, int]:
    clock = FakeClock()
    nodes = uniform(1, 2, "Simulated-H100")
    executor = FakeExecutor(nodes)
    settings = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf, max_slowdown=slowdown)
    controller = Controller(db, executor, clock, SchedulerConfig(), settings)
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, clock.now())
    job_id = job_service.submit(ctx, job, USER).id
    clock.advance(1)
    controller.tick()
    return executor, ctx, job_id


def test_the_launch_carries_the_resolved_setting_and_the_job_says_where_it_came_from(db: Database) -> None:
    executor, ctx, job_id = _start(db, spec("efficient"))
    assert [r.gpu_power for _, r in executor.launched] == [PowerSetting("limit", 500)]
    said = [e.message for e in job_service.events(ctx, job_id, 0, 100) if e.kind == "power"]
    assert said == [
        "efficient: 500 W limit from the default curve for Simulated-H100 (not calibrated: gpupool node"
        " calibrate-power), at most 20% slower"
    ]


def test_a_projects_default_and_a_stored_curve_reach_the_launch(db: Database) -> None:
    now = datetime(2026, 11, 27, tzinfo=UTC)
    points = [{"kind": p.setting.kind, "value": p.setting.value, "speed": p.speed, "energy": p.energy,
               "watts": p.watts} for p in CURVE.points]  # fmt: skip
    with db.tx() as s:
        project_repo.set_project(s, Project.create("default", gpu_power="efficient"), now, everyone=True)
        curve_repo.save_curve(s, "Simulated-H100", "gpu-1", points, now)
    executor, _, _ = _start(db, spec(), slowdown=0.25)
    assert [r.gpu_power for _, r in executor.launched] == [PowerSetting("clocks", 900)]


def test_max_launches_at_the_default_and_says_nothing(db: Database) -> None:
    executor, ctx, job_id = _start(db, spec())
    assert [r.gpu_power for _, r in executor.launched] == [None]
    assert not [e for e in job_service.events(ctx, job_id, 0, 100) if e.kind == "power"]
