"""What the head keeps of the node side of GPU power (issue 33): a node's sentence on what it did
with a job's GPUs' power becomes a "power" event of the job, and each GPU's power range reaches the
store and ``GET /api/v1/nodes`` (``gpupool nodes -o json``)."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import Node
from gpupool.node.gpu.fake import FakeProbe
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from tests.support.executor import USER, FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

REFUSED = "GPU 0 of node-1: could not set a 400 W limit (NVML: Insufficient Permissions); it runs at its default 700 W"


def test_what_a_node_says_of_a_jobs_gpu_power_is_an_event_of_the_job(db: Database) -> None:
    clock = FakeClock()
    nodes = uniform(1, 2)
    executor = FakeExecutor(nodes, clock)
    controller = Controller(db, executor, clock, SchedulerConfig(), ControllerSettings(usage_every_s=math.inf))
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, clock.now())
    capped = GroupCommit(ctx).submit(JobSpec.create(command=["x"], gpus=1), USER, "key-1")[0].id
    plain = GroupCommit(ctx).submit(JobSpec.create(command=["y"], gpus=1), USER, "key-2")[0].id
    executor.power_notes[capped] = REFUSED
    controller.tick()

    def said(job: int) -> list[str]:
        with db.read() as s:
            return [e.message for e in job_repo.job_events(s, job) if e.kind == "power"]

    assert said(capped) == [REFUSED]
    assert said(plain) == []  # nothing done with its GPUs' power: nothing said


def test_each_gpus_power_range_is_kept_and_listed(db: Database) -> None:
    clock = FakeClock()
    probed = FakeProbe("node-1", 2).gpus()
    described = Node("node-1", uniform(1, 2)[0].state, "127.0.0.1", tuple(probed), 8, 64000)
    unknown = replace(described, name="node-2", gpus=tuple(replace(g, power_min_w=None) for g in probed[:1]))
    with db.tx() as s:
        node_repo.register_nodes(s, [described, unknown], clock.now())
        token = create_token(s, "alice", "user", clock.now())
    with db.read() as s:
        loaded = {n.name: n for n in node_repo.load_nodes(s)}
    assert loaded["node-1"].gpus == tuple(probed)
    with db.tx() as s:  # registered again with a new range: the new one is kept
        node_repo.register_nodes(s, [replace(described, gpus=(replace(probed[0], power_max_w=650),))], clock.now())
    with db.read() as s:
        assert [g.power_max_w for g in node_repo.load_nodes(s)[0].gpus] == [650]
    ctx = HeadContext(db, clock, FakeExecutor([]), lambda: None)
    with TestClient(create_app(ctx)) as client:
        listed = client.get("/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}).json()
    gpus = {(n["name"], g["index"]): g for n in listed for g in n["gpus"]}
    assert {k: gpus[("node-1", 0)][k] for k in ("power_min_w", "power_max_w", "power_default_w")} == {
        "power_min_w": 200,
        "power_max_w": 650,
        "power_default_w": 700,
    }
    assert gpus[("node-2", 0)]["power_min_w"] is None and gpus[("node-2", 0)]["power_default_w"] == 700


def test_the_fake_executors_throttle_is_recorded_and_its_readings_obey_it() -> None:
    """The controller tests' executor (tests/support/executor.py) as the budget's tests use it."""
    clock = FakeClock()
    executor = FakeExecutor(uniform(1, 2), clock)
    assert executor.set_gpu_power("node-1", [1], PowerSetting("limit", 150)) == ["GPU 1 of node-1: at 150 W limit"]
    readings = executor.telemetry("node-1", {0, 1})  # GPUs of an unnamed model: 300 W by default
    assert [r.power_limit_w for r in readings] == [300, 150] and (readings[1].power_w or 0) <= 150
    executor.power_refused = "Insufficient Permissions"
    assert executor.set_gpu_power("node-1", [1], None) == [
        "GPU 1 of node-1: could not set it (Insufficient Permissions)"
    ]
    assert executor.power_set == [("node-1", (1,), PowerSetting("limit", 150)), ("node-1", (1,), None)]
    assert executor.telemetry("node-1", {1})[1].power_limit_w == 150
