"""The tree of projects in the store, on SQLite and PostgreSQL (issue 34): parents kept or changed,
units that take no jobs and cannot be deleted under their children, and managers of a unit who
manage everything below it."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpupool.clock import FakeClock
from gpupool.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.permissions import ProjectRole
from gpupool.domain.projects import Project
from gpupool.domain.users import Role
from gpupool.sim.cluster import uniform
from gpupool.store import members, projects, users
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

ADMIN, MIA, MAX = Principal("root", "admin"), Principal("mia", "member"), Principal("max", "member")


@pytest.fixture
def ctx(db: Database, now: datetime) -> HeadContext:
    executor = FakeExecutor(uniform(2, 8))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        for who in (ADMIN, MIA, MAX):
            users.add_user(s, who.user, Role(who.role), None, now)
    context = HeadContext(db, FakeClock(now), executor, lambda: None)
    for project in (
        Project.create("cs", quota=12),
        Project.create("vision", quota=4, parent="cs"),
        Project.create("nlp", quota=8, parent="cs"),
        Project.create("lab3", quota=2, parent="vision"),
    ):
        project_service.set_project(context, project, ADMIN)
    project_service.set_member(context, ADMIN, "cs", "mia", ProjectRole.MANAGER)
    project_service.set_member(context, ADMIN, "lab3", "max", ProjectRole.MEMBER)
    project_service.set_member(context, ADMIN, "nlp", "max", ProjectRole.MEMBER)
    return context


def _submit(ctx: HeadContext, who: Principal, project: str, gpus: int = 0) -> int:
    return job_service.submit(ctx, JobSpec.create(command=["x"], project=project, gpus=gpus), who).id


def test_parents_are_kept_unless_given_and_detached_with_none(ctx: HeadContext) -> None:
    view = project_service.set_project(ctx, Project.create("nlp", quota=6), ADMIN, keep_parent=True)
    assert view.project.parent == "cs"
    view = project_service.set_project(ctx, Project.create("nlp", quota=6), ADMIN)  # parent None: detached
    assert view.project.parent is None
    parents = {v.project.name: v.project.parent for v in project_service.listing(ctx)}
    assert parents == {"cs": None, "default": None, "lab3": "vision", "nlp": None, "vision": "cs"}


def test_bad_trees_are_refused_and_nothing_is_written(ctx: HeadContext) -> None:
    for project, error, message in [
        (
            Project.create("nlp", quota=9, parent="cs"),
            InvalidInput,
            "cs has quota 12; its children's quotas would sum to 13",
        ),
        (Project.create("cs", quota=10), InvalidInput, "cs has quota 10; its children's quotas would sum to 12"),
        (Project.create("cs", quota=12, parent="lab3"), InvalidInput, "a cycle (cs under lab3 under vision under cs)"),
        (Project.create("x", parent="nowhere"), NotFound, "no project nowhere to be x's parent"),
    ]:
        with pytest.raises(error) as refused:
            project_service.set_project(ctx, project, ADMIN)
        assert message in str(refused.value)
    views = {v.project.name: (v.project.quota, v.project.parent) for v in project_service.listing(ctx)}
    assert views["cs"] == (12, None) and views["nlp"] == (8, "cs") and "x" not in views


def test_jobs_go_to_leaves_only_and_a_unit_with_jobs_gets_no_child(ctx: HeadContext) -> None:
    with pytest.raises(Conflict) as refused:
        _submit(ctx, ADMIN, "cs")
    assert refused.value.code == "project_has_children" and "(nlp, vision)" in str(refused.value)
    _submit(ctx, MAX, "nlp")
    with pytest.raises(Conflict) as busy:
        project_service.set_project(ctx, Project.create("nlp-a", parent="nlp"), ADMIN)
    assert "project nlp still has 1 pending or running job(s)" in str(busy.value)


def test_a_unit_is_not_deleted_under_its_children(ctx: HeadContext, db: Database, now: datetime) -> None:
    with pytest.raises(Conflict) as refused:
        project_service.delete_project(ctx, "vision", ADMIN)
    assert refused.value.code == "project_has_children" and "1 child project(s) (lab3)" in str(refused.value)
    project_service.delete_project(ctx, "lab3", ADMIN)
    project_service.delete_project(ctx, "vision", ADMIN)
    with db.read() as s:
        assert "vision" not in {p.name for p in projects.list_projects(s)}


def test_a_manager_of_a_unit_manages_everything_below_it(ctx: HeadContext, db: Database) -> None:
    deep, other = _submit(ctx, MAX, "lab3"), _submit(ctx, MAX, "nlp")
    with db.read() as s:
        assert members.role_in(s, "lab3", "mia") is ProjectRole.MANAGER
        assert members.role_in(s, "lab3", "max") is ProjectRole.MEMBER
        assert members.managed_by(s, "mia") == {"cs", "vision", "nlp", "lab3"}
        assert members.managed_by(s, "max") == set()
    assert _submit(ctx, MIA, "lab3")  # a manager above may submit below
    assert job_service.cancel(ctx, deep, MIA).state is JobState.CANCELLED
    listed, _ = job_service.listing(ctx, MIA, include_finished=True)
    assert all(sees for _, sees in listed)
    with pytest.raises(Forbidden):
        job_service.cancel(ctx, other, Principal("root2", "member"))


def test_a_unit_lists_what_its_projects_hold_and_wait_for(ctx: HeadContext) -> None:
    _submit(ctx, MAX, "lab3", gpus=2)
    _submit(ctx, MAX, "nlp", gpus=1)
    views = {v.project.name: v for v in project_service.listing(ctx)}
    assert (views["cs"].pending, views["cs"].pending_jobs) == (3, 2)
    assert (views["vision"].pending, views["lab3"].pending, views["nlp"].pending) == (2, 2, 1)
    assert views["default"].project.quota == 4  # 16 GPUs - cs 12: children's quotas are inside cs's
    assert views["cs"].fair_share == 12 and views["vision"].fair_share + views["nlp"].fair_share == 12
