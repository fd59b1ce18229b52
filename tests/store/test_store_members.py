"""Project membership on both engines: who may submit where, who may act on which job, and who
sees what runs inside a job; refusals name the rule and say what to do."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpupool.clock import FakeClock
from gpupool.domain.errors import Forbidden, NotFound
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.permissions import ProjectRole
from gpupool.domain.projects import Project
from gpupool.domain.users import Role, Scope
from gpupool.sim.cluster import uniform
from gpupool.store import members, projects, users
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import FakeExecutor

ADMIN = Principal("root", "admin")
MIA, MAX, KIM, VAL = (
    Principal(n, r) for n, r in [("mia", "member"), ("max", "member"), ("kim", "member"), ("val", "viewer")]
)


@pytest.fixture
def ctx(db: Database, now: datetime) -> HeadContext:
    executor = FakeExecutor(uniform(1, 2))
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), now)
        for who in (ADMIN, MIA, MAX, KIM, VAL):
            users.add_user(s, who.user, Role(who.role), None, now)
    context = HeadContext(db, FakeClock(now), executor, lambda: None)
    project_service.set_project(context, Project.create("lab", quota=1), ADMIN)
    project_service.set_project(context, Project.create("vision", quota=1), ADMIN)
    project_service.set_member(context, ADMIN, "lab", "mia", ProjectRole.MANAGER)
    project_service.set_member(context, ADMIN, "lab", "max", ProjectRole.MEMBER)
    project_service.set_member(context, ADMIN, "vision", "kim", ProjectRole.MEMBER)
    return context


def _submit(ctx: HeadContext, who: Principal, project: str) -> int:
    return job_service.submit(ctx, JobSpec.create(command=["train"], project=project, gpus=0), who).id


def test_members_submit_to_their_projects_only_and_default_takes_everyone(ctx: HeadContext) -> None:
    assert _submit(ctx, MAX, "lab") and _submit(ctx, MIA, "lab") and _submit(ctx, KIM, "vision")
    assert _submit(ctx, KIM, "default") and _submit(ctx, ADMIN, "vision")
    with pytest.raises(Forbidden) as refused:
        _submit(ctx, KIM, "lab")
    assert refused.value.code == "not_a_member"
    assert "gpupool project add-member lab kim" in str(refused.value)
    with pytest.raises(NotFound) as unknown:
        _submit(ctx, ADMIN, "made-up")
    assert unknown.value.code == "project_not_found" and "gpupool project set made-up" in str(unknown.value)

    project_service.set_project(ctx, Project.create("default"), ADMIN, everyone=False)  # an admin closes it
    with pytest.raises(Forbidden):
        _submit(ctx, KIM, "default")
    project_service.set_project(ctx, Project.create("default", quota=1), ADMIN)  # as it was: still closed
    with pytest.raises(Forbidden):
        _submit(ctx, KIM, "default")
    project_service.set_project(ctx, Project.create("vision", quota=2), ADMIN, everyone=True)
    assert _submit(ctx, MAX, "vision")
    views = {v.project.name: v.everyone for v in project_service.listing(ctx)}
    assert views == {"default": False, "lab": False, "vision": True}


def test_owners_managers_and_admins_act_on_a_job_and_others_are_refused(ctx: HeadContext) -> None:
    for who in (MAX, MIA, ADMIN):
        job = _submit(ctx, MAX, "lab")
        assert job_service.cancel(ctx, job, who).state is JobState.CANCELLED
    job = _submit(ctx, MAX, "lab")
    narrow_admin = Principal("root", "admin", scope=Scope.SUBMIT)  # an admin's token of scope submit
    for who in (KIM, VAL, narrow_admin):
        with pytest.raises(Forbidden) as refused:
            job_service.cancel(ctx, job, who)
        assert refused.value.code == "not_your_job" and "it is max's" in str(refused.value), who
        with pytest.raises(Forbidden):
            job_service.logs(ctx, job, who, 0, 0)
    assert job_service.get(ctx, job).state is JobState.PENDING
    assert job_service.logs(ctx, job, MIA, 0, 0).data == b""


def test_only_owners_managers_and_admins_see_what_runs_inside(ctx: HeadContext) -> None:
    mine, theirs = _submit(ctx, MAX, "lab"), _submit(ctx, KIM, "vision")
    for who, expected in [
        (ADMIN, {mine: True, theirs: True}),
        (MIA, {mine: True, theirs: False}),
        (MAX, {mine: True, theirs: False}),
        (KIM, {mine: False, theirs: True}),
        (VAL, {mine: False, theirs: False}),
    ]:
        listed, total = job_service.listing(ctx, who, include_finished=True)
        assert total == 2 and {j.id: sees for j, sees in listed} == expected, who.user
        assert job_service.show(ctx, mine, who)[1] is expected[mine]


def test_membership_is_listed_changed_removed_and_forgotten_with_its_user_or_project(
    db: Database, ctx: HeadContext, now: datetime
) -> None:
    listed = project_service.members(ctx, "lab")
    assert [(m.user, m.role) for m in listed] == [("max", ProjectRole.MEMBER), ("mia", ProjectRole.MANAGER)]
    project_service.set_member(ctx, ADMIN, "lab", "max", ProjectRole.MANAGER)
    with db.tx() as s:
        assert members.role_in(s, "lab", "max") is ProjectRole.MANAGER
        assert members.projects_by_user(s) == {"kim": ["vision"], "max": ["lab"], "mia": ["lab"]}
        assert members.roles_of(s, "mia") == {"lab": ProjectRole.MANAGER}
    for call, code in [
        (lambda: project_service.set_member(ctx, ADMIN, "nope", "max", ProjectRole.MEMBER), "project_not_found"),
        (lambda: project_service.set_member(ctx, ADMIN, "lab", "nobody", ProjectRole.MEMBER), "user_not_found"),
        (lambda: project_service.remove_member(ctx, ADMIN, "vision", "max"), "member_not_found"),
        (lambda: project_service.members(ctx, "nope"), "project_not_found"),
    ]:
        with pytest.raises(NotFound) as missing:
            call()
        assert missing.value.code == code
    with pytest.raises(Forbidden):
        project_service.set_member(ctx, MIA, "lab", "kim", ProjectRole.MEMBER)  # a manager manages jobs, not people
    project_service.remove_member(ctx, ADMIN, "lab", "max")
    with db.tx() as s:
        users.delete_user(s, "mia", now)
        projects.delete_project(s, "vision", now)
    with db.tx() as s:
        assert members.projects_by_user(s) == {}
