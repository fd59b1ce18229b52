"""Power modes and calibration over the API (issue 33), a real store and the fake executor: only an
admin calibrates, within bounds; a node's curve is kept and shown with its efficient point; a
project's default mode round-trips; a watts value no GPU here allows is a 4xx naming the ranges."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime

import pytest

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.domain.users import Role
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import projects as project_repo
from gpupool.store import users
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

MEASURED = {
    "model": "H100",
    "gpu": 1,
    "simulated": True,
    "unit": "work",
    "default_w": 700,
    "bound_s": 20.0,
    "elapsed_s": 19.5,
    "refused": None,
    "skipped": [],
    "points": [
        {"kind": "limit", "value": 700, "speed": 1.0, "energy": 1.0, "watts": 700.0, "rate": 1.0},
        {"kind": "limit", "value": 490, "speed": 0.82, "energy": 0.86, "watts": 490.0, "rate": 0.82},
        {"kind": "clocks", "value": 900, "speed": 0.77, "energy": 0.81, "watts": 435.0, "rate": 0.77},
    ],
}


@dataclass
class Api:
    client: TestClient
    executor: FakeExecutor
    admin: dict[str, str]
    member: dict[str, str]


@pytest.fixture
def api(db: Database, now: datetime) -> Iterator[Api]:
    """Two nodes of two H100s that reported their range (200-700 W)."""
    nodes = [
        replace(n, gpus=tuple(replace(g, power_min_w=200, power_max_w=700, power_default_w=700) for g in n.gpus))
        for n in uniform(2, 2, "H100")
    ]
    executor = FakeExecutor(nodes)
    executor.curves["node-1"] = [MEASURED]
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, now)
        users.ensure_user(s, "root", Role.ADMIN, now)
        users.ensure_user(s, "alice", Role.MEMBER, now)
        admin = create_token(s, "root", "admin", now)
        member = create_token(s, "alice", "user", now)
    ctx = HeadContext(db, FakeClock(now), executor, lambda: None)
    with TestClient(create_app(ctx)) as client:
        yield Api(client, executor, {"Authorization": f"Bearer {admin}"}, {"Authorization": f"Bearer {member}"})


def test_only_an_admin_calibrates_and_the_curve_is_kept_with_its_efficient_point(api: Api) -> None:
    path = "/api/v1/nodes/node-1/calibrate-power"
    refused = api.client.post(path, json={"bound_s": 20}, headers=api.member)
    assert refused.status_code == 403 and not api.executor.calibrated
    got = api.client.post(path, json={"bound_s": 20}, headers=api.admin)
    assert got.status_code == 200, got.text
    assert api.executor.calibrated == [("node-1", 20.0, ())]
    (curve,) = got.json()
    assert [p["efficient"] for p in curve["points"]] == [False, True, False]  # least energy within 20 %
    kept = api.client.get("/api/v1/power-curves", headers=api.member).json()
    assert [(c["model"], c["node"], len(c["points"])) for c in kept] == [("H100", "node-1", 3)]
    assert kept[0]["points"][1]["efficient"] is True


@pytest.mark.parametrize("bound", [0, 4.9, 601, 1e9])
def test_a_bound_out_of_range_is_a_400_naming_the_range(api: Api, bound: float) -> None:
    got = api.client.post("/api/v1/nodes/node-1/calibrate-power", json={"bound_s": bound}, headers=api.admin)
    assert got.status_code == 400 and "5s to 600s" in got.json()["message"]
    assert not api.executor.calibrated


def test_an_unknown_node_is_a_404_and_a_node_that_does_not_answer_is_said(api: Api) -> None:
    assert api.client.post("/api/v1/nodes/nope/calibrate-power", headers=api.admin).status_code == 404
    api.executor.silent.add("node-2")
    (said,) = api.client.post("/api/v1/nodes/node-2/calibrate-power", json={"bound_s": 5}, headers=api.admin).json()
    assert "did not answer" in said["refused"] and not api.client.get("/api/v1/power-curves", headers=api.admin).json()


def test_a_projects_default_mode_round_trips_and_a_bad_one_is_a_400(api: Api, db: Database) -> None:
    got = api.client.put("/api/v1/projects/lab", json={"quota": 1, "gpu_power": "Efficient"}, headers=api.admin)
    assert got.status_code == 200 and got.json()["gpu_power"] == "efficient"
    with db.read() as s:
        assert project_repo.gpu_power_default(s, "lab") == "efficient"
    bad = api.client.put("/api/v1/projects/lab", json={"quota": 1, "gpu_power": "turbo"}, headers=api.admin)
    assert bad.status_code == 400 and "max, efficient" in bad.json()["message"]


def test_a_limit_no_gpu_here_allows_is_refused_at_submit_naming_the_range(api: Api, db: Database) -> None:
    with db.read() as s:
        assert node_repo.load_nodes(s)[0].gpus[0].power_min_w == 200  # the range the nodes reported is kept
    body = {"command": ["x"], "gpus": 1, "gpu_power": "150W"}
    refused = api.client.post("/api/v1/jobs", json=body, headers=api.admin)
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"] == "--gpu-power 150W is outside what the GPUs here allow: H100 200-700 W"
    ok = api.client.post("/api/v1/jobs", json={**body, "gpu_power": "400W"}, headers=api.admin)
    assert ok.status_code in (200, 201) and ok.json()["gpu_power"] == "400W"
