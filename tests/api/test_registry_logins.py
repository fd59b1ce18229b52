"""Users' own registry logins (issue 32, ``gpupool login --registry``) over a real store: each user
keeps, lists and forgets only their own; the secret goes in and never comes out (not in a listing,
not in the audit log, not in the database as given); bad input is a ``{code, message}`` 4xx; and a
job in an image from that registry is launched with its owner's login for the node's pull, and no
one else's job is."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest
from sqlalchemy import select

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec
from gpupool.domain.launch import RegistryAuth
from gpupool.domain.users import Role, Scope
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import registry_logins as login_repo
from gpupool.store import users
from gpupool.store.db import Database
from gpupool.store.orm import RegistryLoginRow
from gpupool.store.sealing import Sealer
from gpupool.store.tokens import Principal, create_token
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():  # this starlette asks for httpx2 in its test client; httpx still works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

SECRET = "nvapi-s3cr3t-Token"
LAB = "registry.lab:5000"


@dataclass
class Api:
    client: TestClient
    ctx: HeadContext
    executor: FakeExecutor
    headers: dict[str, dict[str, str]]

    def call(self, who: str, method: str, path: str, body: object = None) -> object:
        return self.client.request(method, path, headers=self.headers[who], json=body)


@pytest.fixture
def api(db: Database, now: datetime) -> Iterator[Api]:
    executor = FakeExecutor(uniform(1, 2))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "root", Role.ADMIN, now)
        users.ensure_user(s, "alice", Role.MEMBER, now)
        users.ensure_user(s, "bob", Role.MEMBER, now)
        tokens = {
            "root": create_token(s, "root", "admin", now),
            "alice": create_token(s, "alice", "user", now),
            "bob": create_token(s, "bob", "user", now),
            "alice_read": create_token(s, "alice", "wall", now, scope=Scope.READ),
        }
    ctx = HeadContext(db, FakeClock(now), executor, lambda: None, sealer=Sealer.ephemeral())
    with TestClient(create_app(ctx)) as client:
        yield Api(client, ctx, executor, {k: {"Authorization": f"Bearer {v}"} for k, v in tokens.items()})


def _put(api: Api, who: str, registry: str, username: str = "ann", password: str = SECRET):  # type: ignore[no-untyped-def]
    return api.client.put(
        f"/api/v1/registries/{registry}",
        headers=api.headers[who],
        json={"username": username, "password": password},
    )


def test_each_user_keeps_and_sees_only_their_own_logins_and_never_the_secret(api: Api) -> None:
    saved = _put(api, "alice", "nvcr.io", "$oauthtoken")
    assert saved.status_code == 200, saved.text
    assert set(saved.json()) == {"registry", "username", "saved_at"}
    assert _put(api, "alice", "index.docker.io", "ann").json()["registry"] == "docker.io"  # Hub's spellings are one
    assert _put(api, "bob", "nvcr.io", "$oauthtoken", "bobs").status_code == 200
    assert _put(api, "alice", "NVCR.io", "$oauthtoken", "rotated").status_code == 200  # replaces hers

    mine = api.client.get("/api/v1/registries", headers=api.headers["alice"])
    assert mine.status_code == 200 and SECRET not in mine.text and "rotated" not in mine.text
    assert [(e["registry"], e["username"]) for e in mine.json()] == [("docker.io", "ann"), ("nvcr.io", "$oauthtoken")]
    assert [e["registry"] for e in api.client.get("/api/v1/registries", headers=api.headers["root"]).json()] == []
    with api.ctx.db.read() as s:
        sealed = [r.sealed for r in s.scalars(select(RegistryLoginRow))]
    assert len(sealed) == 3 and not any(SECRET in v or "rotated" in v or "bobs" in v for v in sealed)

    gone = api.client.delete("/api/v1/registries/nvcr.io", headers=api.headers["alice"])
    assert gone.status_code == 204
    again = api.client.delete("/api/v1/registries/nvcr.io", headers=api.headers["alice"])
    assert again.status_code == 404 and "alice has no login to nvcr.io" in again.json()["message"]
    with api.ctx.db.read() as s:
        assert login_repo.sealed_for(s, "bob", "nvcr.io") is not None  # hers went, not his


@pytest.mark.parametrize(
    ("registry", "username", "password", "status", "said"),
    [
        ("a..b", "u", "p", 400, "is not a registry host"),
        ("not_a_host!", "u", "p", 400, "is not a registry host"),
        ("nvcr.io", "a:b", "p", 400, "without ':'"),
        ("nvcr.io", "u", "two\nlines", 400, "on one line"),
        ("nvcr.io", "", "p", 422, "username"),
        ("nvcr.io", "u", "x" * 16385, 422, "password"),
    ],
)
def test_bad_logins_are_refused_with_one_line(
    api: Api, registry: str, username: str, password: str, status: int, said: str
) -> None:
    refused = _put(api, "alice", registry, username, password)
    assert refused.status_code == status, refused.text
    body = refused.json()
    assert set(body) == {"code", "message"} and said in body["message"] and "\n" not in body["message"]
    assert api.client.get("/api/v1/registries", headers=api.headers["alice"]).json() == []


def test_a_read_only_token_lists_but_cannot_change_and_the_audit_log_holds_no_secret(api: Api) -> None:
    assert _put(api, "alice_read", "nvcr.io").status_code == 403
    assert api.client.get("/api/v1/registries", headers=api.headers["alice_read"]).status_code == 200
    assert api.client.get("/api/v1/registries").status_code == 401
    assert _put(api, "alice", LAB).status_code == 200
    entries = api.client.get("/api/v1/audit", headers=api.headers["root"])
    assert SECRET not in entries.text
    mine = [e for e in reversed(entries.json()) if e["action"].startswith("registries.")]
    assert [(e["user"], e["action"], e["result"]) for e in mine] == [
        ("alice", "registries.login", "denied"),
        ("alice", "registries.login", "ok"),
    ]


def test_a_job_in_an_image_from_that_registry_is_launched_with_its_owners_login_only(api: Api) -> None:
    assert _put(api, "alice", LAB, "ann").status_code == 200
    ctx = api.ctx
    controller = Controller(
        ctx.db,
        api.executor,
        ctx.clock,
        SchedulerConfig(),
        ControllerSettings(usage_every_s=math.inf),
        sealer=ctx.sealer,
    )
    commit, alice, bob = GroupCommit(ctx), Principal("alice", "member"), Principal("bob", "member")
    image = f"{LAB}/team/img:v1"
    jobs = {
        "hers": commit.submit(JobSpec.create(command=["x"], gpus=0, image=image), alice, "k1")[0].id,
        "elsewhere": commit.submit(JobSpec.create(command=["x"], gpus=0, image="nvcr.io/x:1"), alice, "k2")[0].id,
        "bare": commit.submit(JobSpec.create(command=["x"], gpus=0), alice, "k3")[0].id,
        "his": commit.submit(JobSpec.create(command=["x"], gpus=0, image=image), bob, "k4")[0].id,
    }
    controller.tick()
    launched = {request.job_id: request for _, request in api.executor.launched}
    assert set(launched) == set(jobs.values())
    assert launched[jobs["hers"]].registry_auth == RegistryAuth("alice", LAB, "ann", SECRET)
    assert SECRET not in repr(launched[jobs["hers"]])  # never in a log line
    assert SECRET not in str(launched[jobs["hers"]].env)
    assert [launched[jobs[k]].registry_auth for k in ("elsewhere", "bare", "his")] == [None, None, None]


def test_a_deleted_user_takes_their_logins_along(api: Api, now: datetime) -> None:
    assert _put(api, "bob", "nvcr.io").status_code == 200
    with api.ctx.db.tx() as s:
        users.delete_user(s, "bob", now)
    with api.ctx.db.read() as s:
        assert login_repo.listing(s, "bob") == []
