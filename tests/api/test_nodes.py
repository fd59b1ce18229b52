"""The nodes API over a real store: drain and undrain a node or one GPU, admins only, and every
refusal is a ``{code, message}`` with the right status."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient


@dataclass
class Api:
    client: TestClient
    admin: dict[str, str]  # headers of an admin
    member: dict[str, str]  # and of a member
    wakes: list[None]  # one per wake of the controller


@pytest.fixture
def api(db: Database, now: datetime) -> Iterator[Api]:
    """The app over a store of two nodes with two GPUs each."""
    executor = FakeExecutor(uniform(2, 2))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        admin = create_token(s, "root", "admin", now)
        member = create_token(s, "alice", "user", now)
    wakes: list[None] = []
    ctx = HeadContext(db, FakeClock(now), executor, lambda: wakes.append(None))
    with TestClient(create_app(ctx)) as client:
        yield Api(client, {"Authorization": f"Bearer {admin}"}, {"Authorization": f"Bearer {member}"}, wakes)


def test_drain_and_undrain_a_node_and_a_gpu(api: Api) -> None:
    client, admin = api.client, api.admin
    drained = client.post("/api/v1/nodes/node-1/drain", headers=admin, json={"reason": "PSU"})
    assert drained.status_code == 200, drained.text
    body = drained.json()
    assert (body["name"], body["state"], body["drain_requested"], body["gpus_free"]) == ("node-1", "drained", True, 0)
    assert body["jobs"] == []

    gpu = client.post("/api/v1/nodes/node-2/drain", headers=admin, json={"gpu": 1})
    assert gpu.status_code == 200, gpu.text
    gpus = gpu.json()["gpus"]
    assert [(g["index"], g["healthy"], g["disabled"]) for g in gpus] == [(0, True, False), (1, False, True)]
    assert gpu.json()["state"] == "up" and gpu.json()["gpus_free"] == 1

    listing = {n["name"]: n for n in client.get("/api/v1/nodes", headers=admin).json()}
    assert listing["node-1"]["state"] == "drained" and listing["node-2"]["gpus"][1]["disabled"] is True

    assert client.post("/api/v1/nodes/node-1/undrain", headers=admin).json()["state"] == "up"  # no body at all
    back = client.post("/api/v1/nodes/node-2/undrain", headers=admin, json={"gpu": 1}).json()
    assert [g["disabled"] for g in back["gpus"]] == [False, False] and back["gpus_free"] == 2
    assert len(api.wakes) == 4  # the controller hears of every change at once


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "message"),
    [
        ("/api/v1/nodes/nope/drain", None, 404, "node_not_found", "no node nope: list nodes with gpupool nodes"),
        ("/api/v1/nodes/nope/undrain", {"gpu": 0}, 404, "node_not_found", "no node nope"),
        ("/api/v1/nodes/node-1/drain", {"gpu": 9}, 404, "gpu_not_found", "node node-1 has no GPU 9: its GPUs are 0, 1"),
        ("/api/v1/nodes/node-1/undrain", {"gpu": 9}, 404, "gpu_not_found", "node node-1 has no GPU 9"),
        ("/api/v1/nodes/node-1/drain", {"gpu": -1}, 422, "invalid_argument", "gpu:"),
        ("/api/v1/nodes/node-1/drain", {"gpus": 1}, 422, "invalid_argument", "gpus:"),
        ("/api/v1/nodes/node-1/drain", {"reason": "x" * 201}, 422, "invalid_argument", "reason:"),
    ],
)
def test_bad_drains_are_refused_with_a_code_and_a_message(
    api: Api,
    path: str,
    body: dict[str, object] | None,
    status: int,
    code: str,
    message: str,
) -> None:
    response = api.client.post(path, headers=api.admin, json=body)
    assert response.status_code == status, response.text
    assert response.json()["code"] == code and message in response.json()["message"]
    assert api.wakes == []


def test_only_an_admin_may_drain(api: Api) -> None:
    client, member = api.client, api.member
    for path, body in [
        ("/api/v1/nodes/node-1/drain", None),
        ("/api/v1/nodes/node-1/undrain", None),
        ("/api/v1/nodes/node-1/drain", {"gpu": 0}),
        ("/api/v1/nodes/nope/drain", None),  # no peeking at which nodes exist
    ]:
        response = client.post(path, headers=member, json=body)
        assert response.status_code == 403, response.text
        assert response.json() == {
            "code": "forbidden",
            "message": f"alice may not POST {path}: this needs an admin, with a token of scope admin; a user may not",
        }
    assert client.post("/api/v1/nodes/node-1/drain").status_code == 401
    nodes = client.get("/api/v1/nodes", headers=member).json()
    assert [n["state"] for n in nodes] == ["up", "up"]  # nothing changed
    assert api.wakes == []
