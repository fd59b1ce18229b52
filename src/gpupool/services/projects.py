"""Project use cases: list with usage and fair share, set, delete."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.projects import Project, effective_projects
from gpupool.scheduler.fair_share import fair_shares
from gpupool.services.access import require_admin
from gpupool.services.context import HeadContext
from gpupool.store import nodes as node_repo
from gpupool.store import projects as project_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal


@dataclass(frozen=True, slots=True)
class ProjectView:
    project: Project
    allocated: float
    pending: float
    pending_jobs: int
    fair_share: float
    recent_usage: float

    @property
    def borrowed(self) -> float:
        """GPUs held beyond the quota: the part another project may reclaim."""
        return max(0.0, self.allocated - self.project.quota)


def listing(ctx: HeadContext) -> list[ProjectView]:
    with ctx.db.tx() as s:
        return views(s)


def views(session: Tx) -> list[ProjectView]:
    """Every project with its usage and fair share, read in the caller's transaction (``/metrics``
    reads them together with jobs and nodes)."""
    configured = project_repo.list_projects(session)
    allocated, pending, pending_jobs = project_repo.usage(session)
    recent = project_repo.recent_usage(session)
    capacity = sum(1 for n in node_repo.load_nodes(session) if n.schedulable for g in n.gpus if g.healthy)
    projects = effective_projects(configured, capacity)
    shares = fair_shares(projects, capacity)
    return [
        ProjectView(
            p,
            allocated.get(p.name, 0.0),
            pending.get(p.name, 0.0),
            pending_jobs.get(p.name, 0),
            shares.get(p.name, 0.0),
            recent.get(p.name, 0.0),
        )
        for p in projects
    ]


def set_project(ctx: HeadContext, project: Project, who: Principal) -> ProjectView:
    require_admin(who, "set projects")
    with ctx.db.tx() as s:
        project_repo.set_project(s, project, ctx.clock.now())
    ctx.wake_controller()
    return next(v for v in listing(ctx) if v.project.name == project.name)


def delete_project(ctx: HeadContext, name: str, who: Principal) -> None:
    require_admin(who, "delete projects")
    with ctx.db.tx() as s:
        project_repo.delete_project(s, name, ctx.clock.now())
    ctx.wake_controller()
