"""GET /metrics per unit of a tree of projects (issue 34 item 6): ``gpupool_unit_*{unit,parent}``
over a real store and controller, every figure checked against hand arithmetic; a flat list has
none of their samples."""

from __future__ import annotations

import math
import warnings
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

from gpupool.api.app import create_app
from gpupool.api.prometheus import SchedulerMetrics
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store.db import Database
from gpupool.store.tokens import Principal, create_token
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

ADMIN = Principal("root", "admin")
ALICE = Principal("alice", "user")
UNIT_SERIES = (
    "gpupool_unit_gpus_allocated",
    "gpupool_unit_gpus_pending",
    "gpupool_unit_gpu_quota",
    "gpupool_unit_gpu_limit",
    "gpupool_unit_gpu_fair_share",
)


def scrape(db: Database, now: datetime, projects: list[Project], jobs: list[tuple[str, float]]) -> dict[str, dict]:  # type: ignore[type-arg]
    """2 nodes x 4 GPUs, the projects set in order, the jobs submitted and one cycle run:
    every sample by series, keyed by its labels."""
    clock = FakeClock(now)
    executor = FakeExecutor(uniform(2, 4))
    metrics = SchedulerMetrics()
    controller = Controller(
        db, executor, clock, SchedulerConfig(), ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf)
    )
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        token = create_token(s, "alice", "user", now)
    controller.tick()
    for project in projects:
        project_service.set_project(ctx, project, ADMIN, everyone=True)
    for project, gpus in jobs:
        job_service.submit(ctx, JobSpec.create(command=("sleep", "1"), project=project, gpus=gpus), ALICE)
    clock.advance(5)
    controller.tick()
    with TestClient(create_app(ctx, metrics)) as client:
        response = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    found: dict[str, dict] = {}  # type: ignore[type-arg]
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_each_unit_shows_its_subtree_against_its_quota_limit_and_share(db: Database, now: datetime) -> None:
    """uni (quota 6, limit 7) over lab (quota 4, limit 4) and c (2); lab over a (2) and b (2).
    a runs 2 GPUs, b 1, c 3; b's second job (2) waits: lab would hold 5, beyond its limit 4.
    Fair share on 8 GPUs: uni 6 and default 2 (what no quota claims) at the root, nothing beyond;
    uni's 6 split as lab 4 and c 2."""
    tree = [
        Project.create("uni", 6, limit=7),
        Project.create("lab", 4, limit=4, parent="uni"),
        Project.create("a", 2, parent="lab"),
        Project.create("b", 2, parent="lab"),
        Project.create("c", 2, parent="uni"),
    ]
    got = scrape(db, now, tree, [("a", 2), ("b", 1), ("c", 3), ("b", 2)])
    uni, lab = (("parent", ""), ("unit", "uni")), (("parent", "uni"), ("unit", "lab"))
    assert got["gpupool_unit_gpus_allocated"] == {uni: 6.0, lab: 3.0}
    assert got["gpupool_unit_gpus_pending"] == {uni: 2.0, lab: 2.0}
    assert got["gpupool_unit_gpu_quota"] == {uni: 6.0, lab: 4.0}
    assert got["gpupool_unit_gpu_limit"] == {uni: 7.0, lab: 4.0}
    assert got["gpupool_unit_gpu_fair_share"] == {uni: 6.0, lab: 4.0}
    # The per-project series are unchanged in shape: every project and unit by name.
    allocated = {dict(k)["project"]: v for k, v in got["gpupool_gpus_allocated"].items()}
    assert allocated == {"uni": 6.0, "lab": 3.0, "a": 2.0, "b": 1.0, "c": 3.0, "default": 0.0}


def test_a_flat_list_has_no_unit_samples(db: Database, now: datetime) -> None:
    got = scrape(db, now, [Project.create("a", 2), Project.create("b", 2)], [("a", 1)])
    assert [name for name in UNIT_SERIES if name in got] == []
    assert got["gpupool_gpus_allocated"][(("project", "a"),)] == 1.0
