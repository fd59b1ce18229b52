"""Per-GPU-model quotas and limits in the store, on SQLite and PostgreSQL (issue 34 item 2):
kept and replaced like every other setting, and refused for a model no node has."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from gpupool.clock import FakeClock
from gpupool.domain.errors import InvalidInput
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


@pytest.fixture
def ctx(db: Database, now: datetime) -> HeadContext:
    a100 = [replace(n, name="a100-1") for n in uniform(1, 4, "A100")]
    executor = FakeExecutor(uniform(1, 4, "H100") + a100)
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        users.add_user(s, ADMIN.user, Role(ADMIN.role), None, now)
    return HeadContext(db, FakeClock(now), executor, lambda: None)


def test_per_model_figures_are_kept_replaced_and_checked_against_the_nodes(ctx: HeadContext) -> None:
    vision = Project.create("vision", quota=6, quota_by_model={"H100": 2, "A100": 4}, limit_by_model={"H100": 3})
    view = project_service.set_project(ctx, vision, ADMIN)
    assert (view.project.quota_by_model, view.project.limit_by_model) == ({"A100": 4.0, "H100": 2.0}, {"H100": 3.0})
    with ctx.db.read() as s:
        stored = {p.name: p for p in projects.list_projects(s)}["vision"]
    assert stored == vision
    project_service.set_project(ctx, Project.create("vision", quota=6), ADMIN)  # every setting replaced
    with ctx.db.read() as s:
        plain = {p.name: p for p in projects.list_projects(s)}["vision"]
    assert (plain.quota_by_model, plain.limit_by_model) == ({}, {})
    with pytest.raises(InvalidInput, match="no node has a GPU of model H200; models here: A100, H100"):
        project_service.set_project(ctx, Project.create("vision", limit_by_model={"H200": 1}), ADMIN)
