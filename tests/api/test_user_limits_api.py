"""Per-user limits inside a project (issue 34 item 4) below the scheduler: the domain's checks and
``--user-limit``'s syntax, the store's round trip into the scheduler's snapshot (SQLite and
PostgreSQL), and the API, where a user limit above the project's own limit is a 400 naming both."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import datetime

import pytest

from gpupool.api.app import create_app
from gpupool.clock import FakeClock
from gpupool.domain.errors import InvalidInput
from gpupool.domain.projects import Project, parse_user_limits
from gpupool.domain.users import Role
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import projects, users
from gpupool.store.db import Database
from gpupool.store.snapshot import load_snapshot
from gpupool.store.tokens import create_token
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 6, "user_limit": 8}, "a user limit of 8 is above project vision's limit of 6"),
        ({"limit": 6, "user_limits": {"ann": 6.5}}, "ann's user limit of 6.5 is above project vision's limit of 6"),
        ({"user_limit": 0}, "a user limit must be a number above 0"),
        ({"user_limit": float("nan")}, "a user limit must be a number"),
        ({"user_limits": {"ann": 2e6}}, "at most 1000000"),
        ({"user_limits": {"bad name": 1}}, "invalid user name 'bad name'"),
        ({"user_limits": {"": 1}}, "invalid user name ''"),
    ],
)
def test_bad_user_limits_are_refused_naming_the_numbers(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        Project.create("vision", **kwargs)  # type: ignore[arg-type]


def test_a_users_figure_overrides_the_projects_and_none_exempts_them() -> None:
    p = Project.create("vision", limit=6, user_limit=2, user_limits={"cy": None, "ann": 6})
    assert p.user_limits == (("ann", 6.0), ("cy", None))  # sorted, so equal settings compare equal
    assert (p.limit_for("ann"), p.limit_for("bob"), p.limit_for("cy")) == (6.0, 2.0, None)
    assert p.describe_user_limits() == "2, ann=6, cy=none"
    assert not Project.create("vision").has_user_limits


def test_user_limit_syntax() -> None:
    assert parse_user_limits([]) == (None, {})
    assert parse_user_limits(["4", "ann=8", "cy=none"]) == (4.0, {"ann": 8.0, "cy": None})
    assert parse_user_limits(["none", "ann=0.5"]) == (None, {"ann": 0.5})
    with pytest.raises(InvalidInput, match="given twice"):
        parse_user_limits(["ann=1", "ann=2"])
    with pytest.raises(InvalidInput, match="give GPUs"):
        parse_user_limits(["ann=lots"])


def test_user_limits_round_trip_through_the_store_into_the_snapshot(db: Database, now: datetime) -> None:
    limited = Project.create("vision", quota=4, limit=6, user_limit=2, user_limits={"ann": 6, "cy": None})
    with db.tx() as s:
        projects.set_project(s, limited, now)
        projects.set_project(s, Project.create("nlp", quota=2), now)
    with db.read() as s:
        snap = load_snapshot(s, now)
    assert snap.projects == (Project.create("nlp", quota=2), limited)
    with db.tx() as s:  # every setting is replaced: left out, the user limits are gone
        projects.set_project(s, Project.create("vision", quota=4), now)
    with db.read() as s:
        assert projects.list_projects(s)[1] == Project.create("vision", quota=4)


@pytest.fixture
def api(db: Database, now: datetime) -> Iterator[tuple[TestClient, dict[str, str]]]:
    nodes = uniform(1, 8, "H100")
    executor = FakeExecutor(nodes)
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, now)
        users.ensure_user(s, "root", Role.ADMIN, now)
        admin = create_token(s, "root", "admin", now)
    with TestClient(create_app(HeadContext(db, FakeClock(now), executor, lambda: None))) as client:
        yield client, {"Authorization": f"Bearer {admin}"}


def test_the_api_sets_and_shows_user_limits_and_refuses_one_above_the_limit(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    client, admin = api
    body = {"quota": 2, "limit": 6, "user_limit": 4, "user_limits": {"ann": 6, "cy": None}}
    got = client.put("/api/v1/projects/vision", json=body, headers=admin)
    assert got.status_code == 200, got.text
    assert (got.json()["user_limit"], got.json()["user_limits"]) == (4.0, {"ann": 6.0, "cy": None})
    listed = {p["name"]: p for p in client.get("/api/v1/projects", headers=admin).json()}
    assert listed["vision"]["user_limits"] == {"ann": 6.0, "cy": None}
    assert (listed["default"]["user_limit"], listed["default"]["user_limits"]) == (None, {})
    bad = client.put("/api/v1/projects/vision", json={**body, "user_limits": {"ann": 8}}, headers=admin)
    assert bad.status_code == 400
    assert bad.json()["message"] == "ann's user limit of 8 is above project vision's limit of 6"
