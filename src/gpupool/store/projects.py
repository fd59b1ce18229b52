"""Project rows and the per-project usage the API shows (allocated, pending)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpupool.domain.errors import Conflict, NotFound
from gpupool.domain.jobs import ACTIVE_JOB_STATES, JobState
from gpupool.domain.model_quotas import flag
from gpupool.domain.projects import DEFAULT_PROJECT, Project
from gpupool.domain.records import LIVE_WORKER_STATES
from gpupool.domain.tree import validate
from gpupool.domain.usage import decayed_average
from gpupool.store import members
from gpupool.store.orm import JobRow, ProjectRow, ProjectUsageRow, WorkerRow
from gpupool.store.transitions import add_event


def _project(row: ProjectRow) -> Project:
    per_user = tuple(sorted((row.user_limits or {}).items()))
    settings = (row.quota, row.limit, row.weight, row.idle_timeout_s, row.gpu_power, row.parent)
    per_model = dict(row.quota_by_model or {}), dict(row.limit_by_model or {})
    return Project(row.name, *settings, row.user_limit, per_user, row.lend_limit, *per_model)


def list_projects(session: Session) -> list[Project]:
    """The projects an admin set up, or that jobs created (see ``effective_projects`` for the rest)."""
    return [_project(r) for r in session.scalars(select(ProjectRow).order_by(ProjectRow.name))]


def open_to_everyone(session: Session) -> set[str]:
    """The projects every user may submit to, member or not (``default`` until an admin sets it up)."""
    found = {r.name: r.everyone for r in session.scalars(select(ProjectRow))}
    found.setdefault(DEFAULT_PROJECT, True)
    return {name for name, everyone in found.items() if everyone}


def set_project(
    session: Session, project: Project, now: datetime, everyone: bool | None = None, keep_parent: bool = False
) -> Project:
    """``everyone``: every user may submit here; ``None``: as it was (a new project: members
    only, but ``default``: everyone). ``keep_parent``: its parent as it was, not ``project``'s.
    The tree is checked against every project, read FOR UPDATE so two changes cannot together
    break a sum that each alone keeps (domain/tree.py)."""
    row = session.get(ProjectRow, project.name, with_for_update=True)
    if keep_parent:
        project = replace(project, parent=None if row is None else row.parent)
    configured = [_project(r) for r in session.scalars(select(ProjectRow).with_for_update())]
    validate(project, configured)
    if project.parent is not None:
        _refuse_unit_with_jobs(session, project.parent, project.name)
    if row is None:
        row = ProjectRow(name=project.name, created_at=now, everyone=project.name == DEFAULT_PROJECT)
        session.add(row)
    if everyone is not None:
        row.everyone = everyone
    row.quota, row.limit, row.weight = project.quota, project.limit, project.weight
    row.idle_timeout_s = project.idle_timeout_s
    row.gpu_power = project.gpu_power
    row.parent = project.parent
    row.user_limit, row.user_limits = project.user_limit, dict(project.user_limits) or None
    row.lend_limit = project.lend_limit
    row.quota_by_model = dict(project.quota_by_model) or None
    row.limit_by_model = dict(project.limit_by_model) or None
    add_event(
        session,
        now,
        kind="project_set",
        message=f"project {project.name}: quota {project.quota:g}, "
        f"limit {project.describe_limit()}, weight {project.weight:g}, "
        f"idle timeout {project.describe_idle_timeout()}, "
        f"GPU power {project.gpu_power or 'max'}, "
        f"{'user limits ' + project.describe_user_limits() + ', ' if project.has_user_limits else ''}"
        f"{'open to everyone' if row.everyone else 'members only'}"
        + ("" if project.parent is None else f", under {project.parent}")
        + ("" if project.lend_limit is None else f", lends at most {project.lend_limit:g}")
        + (f", per model quota {flag(project.quota_by_model)}" if project.quota_by_model else "")
        + (f", per model limit {flag(project.limit_by_model)}" if project.limit_by_model else ""),
    )
    return project


def has_children(session: Session, name: str) -> bool:
    return session.scalar(select(ProjectRow.name).where(ProjectRow.parent == name).limit(1)) is not None


def _refuse_unit_with_jobs(session: Session, unit: str, child: str) -> None:
    """A unit takes no jobs: one that still has some may not get its first child."""
    if has_children(session, unit):
        return
    active = _active_jobs(session, unit)
    if active:
        raise Conflict(
            f"project {unit} still has {active} pending or running job(s) and a unit with children takes none;"
            f" let them finish or cancel them before putting {child} under it",
            code="project_in_use",
        )


def _active_jobs(session: Session, name: str) -> int:
    query = select(func.count(JobRow.id)).where(JobRow.project == name, JobRow.state.in_(ACTIVE_JOB_STATES))
    return session.scalar(query) or 0


def delete_project(session: Session, name: str, now: datetime) -> None:
    """Refused while it has active jobs; its row is locked first, so no submission (which reads
    it FOR SHARE) can slip a job in between the count and the delete on PostgreSQL."""
    row = session.get(ProjectRow, name, with_for_update=True)
    if row is None:
        raise NotFound(f"no project {name}: list projects with gpupool projects", code="project_not_found")
    children = session.scalars(select(ProjectRow.name).where(ProjectRow.parent == name).order_by(ProjectRow.name))
    if kids := list(children):
        raise Conflict(
            f"project {name} is a unit with {len(kids)} child project(s) ({', '.join(kids)});"
            " delete them or move them elsewhere (gpupool project set NAME --parent ...) first",
            code="project_has_children",
        )
    active = _active_jobs(session, name)
    if active:
        raise Conflict(
            f"project {name} still has {active} pending or running job(s); cancel them or let them finish first",
            code="project_in_use",
        )
    session.delete(row)
    members.forget_project(session, name)
    add_event(session, now, kind="project_deleted", message=f"project {name} deleted")


def usage(session: Session) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """GPUs held by live workers, GPUs asked for by pending jobs, and pending job counts, by project."""
    allocated: dict[str, float] = defaultdict(float)
    held = session.execute(
        select(JobRow.project, WorkerRow.gpus, WorkerRow.gpu_share)
        .join(JobRow, JobRow.id == WorkerRow.job_id)
        .where(WorkerRow.status.in_(LIVE_WORKER_STATES))
    )
    for project, gpus, share in held:
        allocated[project] += share if share else len(gpus)
    pending: dict[str, float] = defaultdict(float)
    pending_jobs: dict[str, int] = defaultdict(int)
    waiting = session.execute(
        select(JobRow.project, JobRow.gpus, JobRow.workers).where(JobRow.state == JobState.PENDING.value)
    )
    for project, per_worker, workers in waiting:
        pending[project] += per_worker * workers
        pending_jobs[project] += 1
    return dict(allocated), dict(pending), dict(pending_jobs)


def recent_usage(session: Session) -> dict[str, float]:
    return {r.name: r.recent_gpus for r in session.scalars(select(ProjectUsageRow))}


def accrue_usage(session: Session, holding: dict[str, float], now: datetime, half_life_s: float) -> None:
    """Fold what each project holds now into its recent average (called by the controller)."""
    rows = {r.name: r for r in session.scalars(select(ProjectUsageRow))}
    for name in set(rows) | set(holding):
        row = rows.get(name)
        if row is None:
            session.add(ProjectUsageRow(name=name, recent_gpus=holding.get(name, 0.0), updated_at=now))
            continue
        elapsed = (now - row.updated_at).total_seconds()
        row.recent_gpus = decayed_average(row.recent_gpus, holding.get(name, 0.0), elapsed, half_life_s)
        row.updated_at = now


def gpu_power_default(session: Session, name: str) -> str | None:
    """The power mode project ``name`` gives its jobs that name none (None: max, or no such row)."""
    return session.scalar(select(ProjectRow.gpu_power).where(ProjectRow.name == name))
