"""Project use cases: list with usage and fair share, set, delete."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import InvalidInput
from gpupool.domain.model_quotas import unknown_models
from gpupool.domain.permissions import Member, ProjectRole
from gpupool.domain.projects import Project, effective_projects
from gpupool.domain.tree import ancestors
from gpupool.scheduler.fair_share import fair_shares
from gpupool.store import members as member_repo
from gpupool.store import nodes as node_repo
from gpupool.store import projects as project_repo
from gpupool.store import user_usage as user_usage_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal
from gpupool.usecases.access import require_admin
from gpupool.usecases.context import HeadContext


@dataclass(frozen=True, slots=True)
class ProjectView:
    project: Project
    allocated: float
    pending: float
    pending_jobs: int
    fair_share: float
    recent_usage: float
    # Its users, in the order their jobs go within a priority class (who used least first).
    users: tuple[user_usage_repo.UserUse, ...] = ()
    everyone: bool = False  # every user may submit here, member or not

    @property
    def borrowed(self) -> float:
        """GPUs held beyond the quota: the part another project may reclaim."""
        return max(0.0, self.allocated - self.project.quota)


def listing(ctx: HeadContext) -> list[ProjectView]:
    with ctx.db.read() as s:
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
    users = user_usage_repo.by_project(session)
    everyone = project_repo.open_to_everyone(session)
    parents = {p.name: p.parent for p in projects}
    if any(parents.values()):  # a unit holds and waits for what the projects below it do
        allocated, pending, recent = (_roll_up(f, parents) for f in (allocated, pending, recent))
        pending_jobs = {k: int(v) for k, v in _roll_up({k: float(v) for k, v in pending_jobs.items()}, parents).items()}
    return [
        ProjectView(
            p,
            allocated.get(p.name, 0.0),
            pending.get(p.name, 0.0),
            pending_jobs.get(p.name, 0),
            shares.get(p.name, 0.0),
            recent.get(p.name, 0.0),
            users.get(p.name, ()),
            p.name in everyone,
        )
        for p in projects
    ]


def _roll_up(figures: dict[str, float], parents: dict[str, str | None]) -> dict[str, float]:
    rolled = dict(figures)
    for name, value in figures.items():
        for unit in ancestors(name, parents):
            rolled[unit] = rolled.get(unit, 0.0) + value
    return rolled


def set_project(
    ctx: HeadContext, project: Project, who: Principal, everyone: bool | None = None, keep_parent: bool = False
) -> ProjectView:
    """``everyone``: every user may submit here; ``None``: as it was (a new project: members
    only, but ``default``: everyone). ``keep_parent``: its parent stays as it was."""
    require_admin(who, "set projects")
    with ctx.db.tx() as s:
        _refuse_unknown_models(s, project)
        project_repo.set_project(s, project, ctx.clock.now(), everyone, keep_parent)
        ctx.grants.forget()
    ctx.wake_controller()
    return next(v for v in listing(ctx) if v.project.name == project.name)


def _refuse_unknown_models(session: Tx, project: Project) -> None:
    """A per-model quota or limit must name a model some node has (issue 34 item 2)."""
    named = project.quota_by_model.keys() | project.limit_by_model.keys()
    if not named:
        return
    here = (g.model for n in node_repo.load_nodes(session) for g in n.gpus)
    if refusal := unknown_models(named, here):
        raise InvalidInput(refusal, code="gpu_model")


def delete_project(ctx: HeadContext, name: str, who: Principal) -> None:
    require_admin(who, "delete projects")
    with ctx.db.tx() as s:
        project_repo.delete_project(s, name, ctx.clock.now())
        ctx.grants.forget()
    ctx.wake_controller()


def members(ctx: HeadContext, project: str) -> list[Member]:
    with ctx.db.read() as s:
        return member_repo.list_members(s, project)


def set_member(ctx: HeadContext, who: Principal, project: str, user: str, role: ProjectRole) -> Member:
    require_admin(who, "add members to projects")
    with ctx.db.tx() as s:
        ctx.grants.forget()
        return member_repo.set_member(s, project, user, role, ctx.clock.now())


def remove_member(ctx: HeadContext, who: Principal, project: str, user: str) -> None:
    """Their jobs in the project go on; they submit no more there."""
    require_admin(who, "remove members from projects")
    with ctx.db.tx() as s:
        member_repo.remove_member(s, project, user, ctx.clock.now())
        ctx.grants.forget()
