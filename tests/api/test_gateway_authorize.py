"""GET /api/v1/gateway/authorize over a real store: the gateway's question "may this token use
this route?" answered with the rules of issue 13 (a service: its project's members; a job's port:
its owner, a manager of its project, an admin; a viewer only looks)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import datetime

import pytest

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.domain.users import Role
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import users
from gpupool.store.db import Database
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

PATH = "/api/v1/gateway/authorize"


@pytest.fixture
def world(db: Database, now: datetime) -> Iterator[tuple[TestClient, dict[str, dict[str, str]], int]]:
    executor = FakeExecutor(uniform(1, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "admin", Role.ADMIN, now)
        admin = {"Authorization": f"Bearer {create_token(s, 'admin', 'admin', now)}"}
    ctx = HeadContext(db, FakeClock(now), executor, lambda: None)
    with TestClient(create_app(ctx)) as client:
        tokens = {"admin": admin, "nobody": {}, "forged": {"Authorization": "Bearer gp_not-a-token"}}
        for project in ("lab", "vision"):
            assert client.put(f"/api/v1/projects/{project}", headers=admin, json={"quota": 0}).status_code == 200
        for name, role in [("mia", "member"), ("max", "member"), ("kim", "member"), ("val", "viewer")]:
            made = client.post("/api/v1/users", headers=admin, json={"name": name, "role": role})
            tokens[name] = {"Authorization": f"Bearer {made.json()['token']}"}
        for project, name, role in [("lab", "mia", "manager"), ("lab", "max", "member"), ("vision", "kim", "member")]:
            client.put(f"/api/v1/projects/{project}/members/{name}", headers=admin, json={"role": role})
        job = client.post(
            "/api/v1/jobs", headers=tokens["max"], json={"command": ["true"], "gpus": 0, "project": "lab"}
        )
        assert job.status_code == 201, job.text
        yield client, tokens, int(job.json()["id"])


def test_who_may_use_which_route(world: tuple[TestClient, dict[str, dict[str, str]], int]) -> None:
    client, tokens, job = world
    cases = [
        # (caller, query, status, code)
        ("max", "", 204, None),  # any user's token: the gateway's /metrics
        ("val", "", 204, None),
        ("nobody", "", 401, "unauthorized"),
        ("forged", "?project=lab", 401, "unauthorized"),
        ("admin", "?project=lab", 204, None),
        ("mia", "?project=lab", 204, None),
        ("max", "?project=lab", 204, None),
        ("kim", "?project=lab", 403, "not_a_member"),
        ("val", "?project=lab", 403, "forbidden"),
        ("kim", "?project=default", 204, None),  # open to everyone until an admin closes it
        ("max", "?project=nope", 404, "project_not_found"),
        ("max", f"?project=lab&job={job}", 204, None),
        ("mia", f"?project=lab&job={job}", 204, None),  # a manager of the job's project
        ("admin", f"?project=lab&job={job}", 204, None),
        ("kim", f"?project=lab&job={job}", 403, "not_your_job"),
        ("max", "?project=lab&job=999999", 404, None),
        ("max", "?job=0", 422, None),
    ]
    wrong = []
    for caller, query, status, code in cases:
        got = client.get(PATH + query, headers=tokens[caller])
        if got.status_code != status or (code is not None and got.json().get("code") != code):
            wrong.append(f"{caller} {query}: {got.status_code} {got.text[:120]}")
    assert not wrong, "\n".join(wrong)
