"""The service layer and the reconciler over a real store (SQLite and PostgreSQL): serve creates
or updates, a taken name and someone else's service are refused, scale pins the count, the
reconciler submits replica jobs and records readiness, delete cancels the replicas."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpupool.controller.services import ServiceReconciler
from gpupool.domain.errors import Conflict, Forbidden, NotFound
from gpupool.domain.projects import Project
from gpupool.domain.services import Replica, ServiceSpec
from gpupool.domain.users import Role
from gpupool.store import jobs as job_repo
from gpupool.store import services as service_repo
from gpupool.store import users as user_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import projects as project_service
from gpupool.usecases import services as service_layer
from gpupool.usecases.context import HeadContext

ADMIN = Principal("admin", "admin")
ALICE = Principal("alice", "member")


def web(**kw: object) -> ServiceSpec:
    return ServiceSpec.create(**{"name": "web", "command": ["serve"], "gpus": 0, **kw})  # type: ignore[arg-type]


def replicas(db: Database, name: str = "web") -> list[Replica]:
    with db.read() as s:
        record = service_repo.get_service(s, name)
        return service_repo.replicas(s, {name: record.spec.replica_spec()})[name]


def test_serve_creates_then_updates(ctx: HeadContext) -> None:
    view, created = service_layer.serve(ctx, web(replicas=2), ADMIN)
    assert created and view.record.desired == 2 and view.record.owner == "admin"
    view, created = service_layer.serve(ctx, web(replicas=3, max_concurrency=8), ADMIN)
    assert not created and (view.record.desired, view.record.spec.max_concurrency) == (3, 8)
    assert [v.record.spec.name for v in service_layer.listing(ctx, ADMIN)] == ["web"]


def test_a_taken_name_and_someone_elses_service_are_refused(ctx: HeadContext, now: datetime) -> None:
    service_layer.serve(ctx, web(), ADMIN)
    project_service.set_project(ctx, Project("other", quota=1), ADMIN)
    with pytest.raises(Conflict) as taken:
        service_layer.serve(ctx, web(project="other"), ADMIN)
    assert taken.value.code == "service_exists"
    with ctx.db.tx() as s:
        user_repo.ensure_user(s, "alice", Role.MEMBER, now)
    for act in (
        lambda: service_layer.serve(ctx, web(replicas=5), ALICE),
        lambda: service_layer.scale(ctx, "web", 5, ALICE),
        lambda: service_layer.delete(ctx, "web", ALICE),
    ):
        with pytest.raises(Forbidden) as refused:
            act()
        assert refused.value.code == "not_your_service"


def test_the_reconciler_keeps_the_count_and_delete_cancels(ctx: HeadContext) -> None:
    service_layer.serve(ctx, web(replicas=2), ADMIN)
    reconciler = ServiceReconciler(ctx.db, ctx.clock, ctx.load, lambda: None, probe=lambda *_: None)
    try:
        assert reconciler.step() == 2
        assert reconciler.step() == 0  # two pending replicas are two replicas: nothing more
        made = replicas(ctx.db)
        assert [(r.state, r.current, r.ready) for r in made] == [("pending", True, False)] * 2
        view = service_layer.scale(ctx, "web", 1, ADMIN)
        assert (view.record.spec.min_replicas, view.record.spec.max_replicas, view.record.desired) == (1, 1, 1)
        assert reconciler.step() == 1  # the newer one is cancelled
        assert [r.job_id for r in replicas(ctx.db)] == [made[0].job_id]
        service_layer.delete(ctx, "web", ADMIN)
        with pytest.raises(NotFound):
            service_layer.show(ctx, "web", ADMIN)
        assert reconciler.step() == 0
    finally:
        reconciler.stop()
    with ctx.db.read() as s:
        assert {job_repo.get_job(s, r.job_id).state.value for r in made} == {"cancelled"}
