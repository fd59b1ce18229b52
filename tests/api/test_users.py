"""The users and tokens API over a real store: a member manages their own tokens and nobody
else's, only admins manage users, and a revoked token or a disabled user's token is refused on
the first request a second later."""

from __future__ import annotations

import time
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

CACHE_S = 1.05  # a principal is cached for one second


@dataclass
class Api:
    client: TestClient
    admin: dict[str, str]

    def add_member(self, name: str, role: str = "member") -> dict[str, str]:
        made = self.client.post("/api/v1/users", headers=self.admin, json={"name": name, "role": role})
        assert made.status_code == 201, made.text
        return _bearer(made.json()["token"])


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api(db: Database, now: datetime) -> Iterator[Api]:
    executor = FakeExecutor(uniform(1, 1))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.ensure_user(s, "admin", Role.ADMIN, now)
        admin = create_token(s, "admin", "admin", now)
    ctx = HeadContext(db, FakeClock(now), executor, lambda: None)
    with TestClient(create_app(ctx)) as client:
        yield Api(client, _bearer(admin))


def test_admins_add_and_list_users_and_refusals_have_codes(api: Api) -> None:
    client, admin = api.client, api.admin
    alice = api.add_member("alice")
    assert client.get("/api/v1/whoami", headers=alice).json() == {
        "user": "alice",
        "role": "member",
        "scope": "submit",
        "is_admin": False,
        "projects": {},
    }
    listed = client.get("/api/v1/users", headers=alice).json()
    assert [(u["name"], u["role"], u["projects"], u["disabled"]) for u in listed] == [
        ("admin", "admin", [], False),
        ("alice", "member", [], False),
    ]
    cases = [
        (alice, "POST", "/api/v1/users", {"name": "bob"}, 403),
        (alice, "POST", "/api/v1/users/admin/disable", None, 403),
        (admin, "POST", "/api/v1/users", {"name": "alice"}, 409),
        (admin, "POST", "/api/v1/users", {"name": "bad name"}, 400),
        (admin, "POST", "/api/v1/users", {"name": "x" * 64}, 422),
        (admin, "POST", "/api/v1/users", {"name": "bob", "role": "root"}, 422),
        (admin, "POST", "/api/v1/users/nobody/disable", None, 404),
        (admin, "POST", "/api/v1/users/admin/disable", None, 409),
        (admin, "DELETE", "/api/v1/users/admin", None, 409),
        (admin, "PUT", "/api/v1/users/admin/role", {"role": "viewer"}, 409),
    ]
    for headers, method, path, body, status in cases:
        got = client.request(method, path, headers=headers, json=body)
        assert got.status_code == status, (method, path, body, got.text)
        if status != 422:
            assert set(got.json()) == {"code", "message"}


def test_a_member_manages_their_own_tokens_only(api: Api) -> None:
    client, admin = api.client, api.admin
    alice = api.add_member("alice")
    api.add_member("bob")
    made = client.post("/api/v1/tokens", headers=alice, json={"name": "laptop", "expires_in_s": 86400})
    assert made.status_code == 201, made.text
    token = made.json()
    assert (token["user"], token["name"], token["scope"]) == ("alice", "laptop", "submit")
    assert token["expires_at"] is not None and token["token"].startswith("gp_")
    mine = client.get("/api/v1/tokens", headers=alice).json()
    assert [t["name"] for t in mine] == ["first", "laptop"]
    assert all("token" not in t and "token_hash" not in t for t in mine)
    assert client.get("/api/v1/tokens", headers=admin).json()[0]["user"] == "admin"  # an admin sees all
    assert len(client.get("/api/v1/tokens", headers=admin).json()) == 4

    refused = [
        client.post("/api/v1/tokens", headers=alice, json={"user": "bob"}),
        client.post("/api/v1/tokens", headers=alice, json={"scope": "admin"}),
        client.get("/api/v1/tokens", headers=alice, params={"user": "bob"}),
        client.delete(f"/api/v1/tokens/{_first_token_of(api, 'bob')}", headers=alice),
    ]
    assert [r.status_code for r in refused] == [403, 400, 403, 403], [r.text for r in refused]
    bad = [
        client.post("/api/v1/tokens", headers=alice, json={"expires_in_s": 30}),
        client.post("/api/v1/tokens", headers=alice, json={"expires_in_s": 11 * 365 * 86400}),
        client.delete("/api/v1/tokens/99999", headers=alice),
        client.get("/api/v1/tokens", headers=admin, params={"user": "nobody"}),
        client.post("/api/v1/tokens", headers=admin, json={"user": "nobody"}),
    ]
    assert [r.status_code for r in bad] == [400, 400, 404, 404, 404]
    # An admin makes one for anyone; a read-scoped one cannot make or revoke tokens.
    reader = client.post("/api/v1/tokens", headers=admin, json={"user": "bob", "scope": "read"}).json()
    assert (reader["user"], reader["scope"]) == ("bob", "read")
    assert client.get("/api/v1/users", headers=_bearer(reader["token"])).status_code == 200
    assert client.post("/api/v1/tokens", headers=_bearer(reader["token"]), json={}).status_code == 403

    laptop = _bearer(token["token"])
    assert client.get("/api/v1/whoami", headers=laptop).status_code == 200
    revoked = client.delete(f"/api/v1/tokens/{token['id']}", headers=alice)
    assert revoked.status_code == 200, revoked.text
    time.sleep(CACHE_S)
    assert client.get("/api/v1/whoami", headers=laptop).status_code == 401
    assert client.get("/api/v1/whoami", headers=alice).status_code == 200


def test_a_disabled_user_s_tokens_are_refused_and_work_again_when_enabled(api: Api) -> None:
    client, admin = api.client, api.admin
    alice = api.add_member("alice")
    assert client.get("/api/v1/whoami", headers=alice).status_code == 200
    assert client.post("/api/v1/users/alice/disable", headers=admin).json()["disabled"] is True
    time.sleep(CACHE_S)
    refused = client.get("/api/v1/jobs", headers=alice)
    assert refused.status_code == 401 and refused.json()["message"].startswith("invalid token")
    client.post("/api/v1/users/alice/enable", headers=admin)
    assert client.get("/api/v1/jobs", headers=alice).status_code == 200
    assert client.delete("/api/v1/users/alice", headers=admin).status_code == 204
    time.sleep(CACHE_S)
    assert client.get("/api/v1/jobs", headers=alice).status_code == 401


def _first_token_of(api: Api, user: str) -> int:
    listed = api.client.get("/api/v1/tokens", headers=api.admin, params={"user": user}).json()
    return int(listed[0]["id"])


def test_a_read_only_token_changes_nothing_and_an_admins_narrow_token_is_no_admin(api: Api) -> None:
    """A viewer only looks; scope read holds a token to reading, and a token's scope narrows its
    user's role."""
    client, admin = api.client, api.admin
    viewer = api.add_member("vera", role="viewer")
    job = {"command": ["true"], "gpus": 0}
    assert client.get("/api/v1/jobs", headers=viewer).status_code == 200
    assert client.get("/api/v1/nodes", headers=viewer).status_code == 200
    refused = client.post("/api/v1/jobs", headers=viewer, json=job)
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden", refused.text
    assert refused.json()["message"].endswith("a viewer may only look")
    read_only_token = client.post("/api/v1/tokens", headers=admin, json={"scope": "read"}).json()["token"]
    refused = client.post("/api/v1/jobs", headers=_bearer(read_only_token), json=job)
    assert refused.status_code == 403 and refused.json()["code"] == "read_only_token", refused.text

    def token(scope: str) -> dict[str, str]:
        made = client.post("/api/v1/tokens", headers=admin, json={"name": scope, "scope": scope})
        assert made.status_code == 201, made.text
        return _bearer(made.json()["token"])

    submit_only, read_only = token("submit"), token("read")
    assert client.post("/api/v1/jobs", headers=submit_only, json=job).status_code == 201
    assert client.post("/api/v1/nodes/node-1/drain", headers=submit_only).status_code == 403
    assert client.post("/api/v1/jobs", headers=read_only, json=job).status_code == 403
    assert client.post("/api/v1/nodes/node-1/drain", headers=admin).status_code == 200
