"""Lend limits in the store, on SQLite and PostgreSQL (issue 34 item 3): kept, replaced like every
other setting, shown in the listing, and read into the scheduler's snapshot."""

from __future__ import annotations

from datetime import datetime

from gpupool.clock import FakeClock
from gpupool.domain.projects import Project
from gpupool.domain.users import Role
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store import projects, users
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

ADMIN = Principal("root", "admin")


def test_a_lend_limit_is_kept_replaced_and_listed(db: Database, now: datetime) -> None:
    executor = FakeExecutor(uniform(2, 8))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.add_user(s, ADMIN.user, Role.ADMIN, None, now)
    ctx = HeadContext(db, FakeClock(now), executor, lambda: None)
    view = project_service.set_project(ctx, Project.create("vision", quota=8, lend_limit=2), ADMIN)
    assert view.project.lend_limit == 2.0
    with db.read() as s:
        assert {p.name: p.lend_limit for p in projects.list_projects(s)} == {"vision": 2.0}
    # Every setting is replaced: one left out gets its default, lending all.
    project_service.set_project(ctx, Project.create("vision", quota=8), ADMIN)
    assert {v.project.name: v.project.lend_limit for v in project_service.listing(ctx)}["vision"] is None
