"""The images API (issue 32) over a real store and the fake executor: anyone signed in lists what
each node holds, only an admin imports, every node that is up is asked and a down one is skipped
and said; bad input is a ``{code, message}`` 4xx (an archive no node can use: the node's sentence);
and the audit log names the image an import was for."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
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

ARCHIVE = "/shared/images/stack.tar"


@dataclass
class Api:
    client: TestClient
    executor: FakeExecutor
    admin: dict[str, str]
    member: dict[str, str]


@pytest.fixture
def api(db: Database, now: datetime) -> Iterator[Api]:
    """Three nodes; node-3 is down (the head no longer serves it)."""
    executor = FakeExecutor(uniform(3, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        node_repo.register_nodes(s, executor.nodes()[:2], now)
        users.ensure_user(s, "root", Role.ADMIN, now)
        users.ensure_user(s, "alice", Role.MEMBER, now)
        admin = create_token(s, "root", "admin", now)
        member = create_token(s, "alice", "user", now)
    ctx = HeadContext(db, FakeClock(now), executor, lambda: None)
    with TestClient(create_app(ctx)) as client:
        yield Api(client, executor, {"Authorization": f"Bearer {admin}"}, {"Authorization": f"Bearer {member}"})


def test_an_admin_imports_on_every_node_that_is_up_and_anyone_lists_them(api: Api) -> None:
    client = api.client
    empty = client.get("/api/v1/images", headers=api.member)
    assert empty.status_code == 200, empty.text
    assert empty.json() == {
        "images": [],
        "skipped": [{"node": "node-3", "reason": "down: asked again once it is back"}],
    }

    done = client.post("/api/v1/images", headers=api.admin, json={"path": ARCHIVE, "name": "stack"})
    assert done.status_code == 200, done.text
    body = done.json()
    assert (body["path"], body["name"]) == (ARCHIVE, "stack")
    results = {n["node"]: (n["result"], n["message"]) for n in body["nodes"]}
    assert results == {
        "node-1": ("imported", None),
        "node-2": ("imported", None),
        "node-3": ("skipped", "down: asked again once it is back"),
    }
    digest = body["nodes"][0]["image"]["digest"]

    listed = client.get("/api/v1/images", headers=api.member).json()
    assert [(i["node"], i["digest"], i["names"], i["busy"]) for i in listed["images"]] == [
        ("node-1", digest, ["stack:latest"], False),
        ("node-2", digest, ["stack:latest"], False),
    ]
    assert set(listed["images"][0]) == {"node", "digest", "names", "size", "last_used", "busy"}


def test_a_silent_node_is_said_and_the_others_still_import(api: Api) -> None:
    api.executor.silent.add("node-2")
    done = api.client.post("/api/v1/images", headers=api.admin, json={"path": ARCHIVE, "name": "stack:v2"})
    assert done.status_code == 200, done.text
    results = {n["node"]: (n["result"], n["message"]) for n in done.json()["nodes"]}
    assert results["node-1"] == ("imported", None)
    assert results["node-2"] == ("failed", "node node-2 did not answer")
    listed = api.client.get("/api/v1/images", headers=api.admin).json()
    assert [i["node"] for i in listed["images"]] == ["node-1"]
    # a silent node lists nothing, as telemetry: not an error, and not hidden either (its images are not there)
    api.executor.silent.add("node-1")
    refused = api.client.post("/api/v1/images", headers=api.admin, json={"path": ARCHIVE, "name": "stack"})
    assert refused.status_code == 503 and refused.json()["code"] == "node_unreachable"


def test_only_an_admin_imports(api: Api) -> None:
    refused = api.client.post("/api/v1/images", headers=api.member, json={"path": ARCHIVE, "name": "stack"})
    assert refused.status_code == 403
    assert set(refused.json()) == {"code", "message"}
    assert api.executor.held_images == {}
    assert api.client.get("/api/v1/images").status_code == 401


@pytest.mark.parametrize(
    ("body", "status", "code", "says"),
    [
        ({"path": "stack.tar", "name": "stack"}, 400, "invalid_path", "absolute path"),
        ({"path": "/x/\x07.tar", "name": "stack"}, 400, "invalid_path", "printable"),
        ({"path": ARCHIVE, "name": "Stack"}, 400, "invalid_image_name", "NAME or NAME:TAG"),
        ({"path": ARCHIVE, "name": "/abs/path"}, 400, "invalid_image_name", "no path"),
        ({"path": ARCHIVE, "name": "a@sha256:" + "0" * 64}, 400, "invalid_image_name", "no path, no @digest"),
        ({"path": ARCHIVE, "name": "a b"}, 400, "invalid_image_name", "NAME or NAME:TAG"),
        ({"path": ARCHIVE, "name": "x" * 256}, 422, "invalid_argument", "name"),
        ({"path": "/" + "x" * 5000, "name": "stack"}, 422, "invalid_argument", "path"),
        ({"path": ARCHIVE}, 422, "invalid_argument", "name"),
        ({"path": ARCHIVE, "name": "stack", "extra": 1}, 422, "invalid_argument", "extra"),
        ({"path": ARCHIVE, "name": 7}, 422, "invalid_argument", "name"),
    ],
)
def test_bad_input_is_refused_before_any_node_is_asked(
    api: Api, body: dict[str, object], status: int, code: str, says: str
) -> None:
    refused = api.client.post("/api/v1/images", headers=api.admin, json=body)
    assert refused.status_code == status, refused.text
    error = refused.json()
    assert set(error) == {"code", "message"} and error["code"] == code
    assert says in error["message"]
    assert api.executor.held_images == {}


def test_an_archive_no_node_can_use_is_refused_with_the_nodes_sentence(api: Api) -> None:
    why = "/shared/junk.tar is not an OCI image: it has no readable index.json"
    api.executor.bad_archives["/shared/junk.tar"] = why
    refused = api.client.post("/api/v1/images", headers=api.admin, json={"path": "/shared/junk.tar", "name": "junk"})
    assert refused.status_code == 400
    assert refused.json() == {"code": "bad_image", "message": why}


def test_the_audit_log_names_the_image_imported(api: Api) -> None:
    client = api.client
    assert client.post("/api/v1/images", headers=api.admin, json={"path": ARCHIVE, "name": "stack"}).status_code == 200
    assert client.post("/api/v1/images", headers=api.member, json={"path": ARCHIVE, "name": "x"}).status_code == 403
    assert client.post("/api/v1/images", headers=api.admin, json={"path": "rel", "name": "y"}).status_code == 400
    entries = client.get("/api/v1/audit", headers=api.admin).json()
    assert [(e["user"], e["action"], e["target"], e["result"]) for e in reversed(entries)] == [
        ("root", "images.import", f"image stack from {ARCHIVE}", "ok"),
        ("alice", "images.import", "images", "denied"),
        ("root", "images.import", "image y from rel", "invalid"),
    ]
