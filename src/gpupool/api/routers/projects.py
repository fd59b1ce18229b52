"""/api/v1/projects: list, set (admin), delete (admin), and their members."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gpupool.api.deps import Caller, Ctx
from gpupool.api.schemas.projects import MemberOut, MemberSet, ProjectOut, ProjectSet
from gpupool.domain.errors import NotFound
from gpupool.domain.projects import Project
from gpupool.usecases import projects as project_service

router = APIRouter(prefix="/api/v1/projects", tags=["projects"])


@router.get("", response_model=list[ProjectOut])
def listing(ctx: Ctx, who: Caller) -> list[ProjectOut]:
    return [ProjectOut.of(v) for v in project_service.listing(ctx)]


@router.get("/{name}", response_model=ProjectOut)
def show(name: str, ctx: Ctx, who: Caller) -> ProjectOut:
    for v in project_service.listing(ctx):
        if v.project.name == name:
            return ProjectOut.of(v)
    raise NotFound(f"no project {name}: list projects with gpupool projects", code="project_not_found")


@router.put("/{name}", response_model=ProjectOut)
def set_project(name: str, body: ProjectSet, ctx: Ctx, who: Caller) -> ProjectOut:
    project = Project.create(
        name,
        quota=sum(body.quota_by_model.values()) if body.quota is None else body.quota,
        limit=body.limit,
        weight=body.weight,
        idle_timeout_s=body.idle_timeout_s,
        gpu_power=body.gpu_power,
        parent=body.parent or None,
        user_limit=body.user_limit,
        user_limits=body.user_limits,
        lend_limit=body.lend_limit,
        quota_by_model=body.quota_by_model,
        limit_by_model=body.limit_by_model,
    )
    keep_parent = body.parent is None  # null: as it was; "": a child of the root
    return ProjectOut.of(project_service.set_project(ctx, project, who, body.everyone, keep_parent))


@router.delete("/{name}", status_code=204, response_class=Response)
def delete_project(name: str, ctx: Ctx, who: Caller) -> Response:
    project_service.delete_project(ctx, name, who)
    return Response(status_code=204)


@router.get("/{name}/members", response_model=list[MemberOut])
def members(name: str, ctx: Ctx, who: Caller) -> list[MemberOut]:
    return [MemberOut.of(m) for m in project_service.members(ctx, name)]


@router.put("/{name}/members/{user}", response_model=MemberOut)
def set_member(name: str, user: str, ctx: Ctx, who: Caller, body: MemberSet | None = None) -> MemberOut:
    """Add ``user`` to the project (or change their role in it)."""
    role = (body or MemberSet()).role
    return MemberOut.of(project_service.set_member(ctx, who, name, user, role))


@router.delete("/{name}/members/{user}", status_code=204, response_class=Response)
def remove_member(name: str, user: str, ctx: Ctx, who: Caller) -> Response:
    project_service.remove_member(ctx, who, name, user)
    return Response(status_code=204)
