"""Project membership: who may submit to a project, and who manages it."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.errors import Conflict, NotFound
from gpupool.domain.permissions import Member, ProjectRole
from gpupool.domain.projects import DEFAULT_PROJECT
from gpupool.store.orm import ProjectMemberRow, ProjectRow, UserRow
from gpupool.store.transitions import add_event


def project_access(
    session: Session, project: str, user: str, *, admin: bool = False
) -> tuple[bool, ProjectRole | None]:
    """Whether ``project`` is open to everyone, and ``user``'s role in it (not looked up when
    it does not matter: for an admin, or where everyone may submit). A project that does not
    exist is refused (``default`` exists until an admin sets it up: open to everyone)."""
    # FOR SHARE (PostgreSQL): a project being deleted is not submitted to at the same time.
    row = session.get(ProjectRow, project, with_for_update={"read": True})
    if row is None and project != DEFAULT_PROJECT:
        raise NotFound(
            f"no project {project}: an admin creates it with gpupool project set {project}; "
            "list projects with gpupool projects",
            code="project_not_found",
        )
    if row is not None and (kids := _children(session, project)):
        raise Conflict(
            f"project {project} is a unit with child projects ({', '.join(kids)}): jobs go to leaf projects only;"
            f" submit to one of them",
            code="project_has_children",
        )
    everyone = row is None or row.everyone
    return everyone, None if admin or everyone else role_in(session, project, user)


def role_in(session: Session, project: str, user: str) -> ProjectRole | None:
    """``user``'s role in ``project``: a manager of a unit above it manages it too (issue 34)."""
    member = session.get(ProjectMemberRow, (project, user))
    role = None if member is None else ProjectRole(member.role)
    if role is ProjectRole.MANAGER:
        return role
    for unit in _units_above(session, project):
        above = session.get(ProjectMemberRow, (unit, user))
        if above is not None and above.role == ProjectRole.MANAGER.value:
            return ProjectRole.MANAGER
    return role


def roles_of(session: Session, user: str) -> dict[str, ProjectRole]:
    query = select(ProjectMemberRow).where(ProjectMemberRow.user == user).order_by(ProjectMemberRow.project)
    return {r.project: ProjectRole(r.role) for r in session.scalars(query)}


def managed_by(session: Session, user: str) -> set[str]:
    """The projects ``user`` manages: whose jobs they may act on."""
    query = select(ProjectMemberRow.project).where(
        ProjectMemberRow.user == user, ProjectMemberRow.role == ProjectRole.MANAGER.value
    )
    managed = set(session.scalars(query))
    if managed:  # and everything below the units they manage (issue 34)
        below: dict[str | None, list[str]] = defaultdict(list)
        for name, parent in session.execute(
            select(ProjectRow.name, ProjectRow.parent).where(ProjectRow.parent.is_not(None))
        ):
            below[parent].append(name)
        todo = list(managed)
        while todo:
            for child in below.get(todo.pop(), []):
                if child not in managed:
                    managed.add(child)
                    todo.append(child)
    return managed


def list_members(session: Session, project: str) -> list[Member]:
    _require_project(session, project)
    query = select(ProjectMemberRow).where(ProjectMemberRow.project == project).order_by(ProjectMemberRow.user)
    return [_member(r) for r in session.scalars(query)]


def projects_by_user(session: Session) -> dict[str, list[str]]:
    """Each user's projects, by name (the ``projects`` column of ``gpupool user list``)."""
    found: dict[str, list[str]] = defaultdict(list)
    query = select(ProjectMemberRow.user, ProjectMemberRow.project).order_by(ProjectMemberRow.project)
    for user, project in session.execute(query):
        found[user].append(project)
    return dict(found)


def set_member(session: Session, project: str, user: str, role: ProjectRole, now: datetime) -> Member:
    """Add ``user`` to ``project``, or change their role there."""
    _require_project(session, project)
    if session.get(UserRow, user) is None:
        raise NotFound(f"no user {user}: list users with gpupool user list", code="user_not_found")
    row = session.get(ProjectMemberRow, (project, user))
    if row is None:
        row = ProjectMemberRow(project=project, user=user, role=role.value, created_at=now)
        session.add(row)
    row.role = role.value
    add_event(session, now, kind="member_set", message=f"{user} is a {role.value} of project {project}")
    session.flush()
    return _member(row)


def remove_member(session: Session, project: str, user: str, now: datetime) -> None:
    _require_project(session, project)
    row = session.get(ProjectMemberRow, (project, user))
    if row is None:
        raise NotFound(
            f"{user} is not a member of project {project}: list them with gpupool project members {project}",
            code="member_not_found",
        )
    session.delete(row)
    add_event(session, now, kind="member_removed", message=f"{user} is no longer a member of project {project}")


def forget_user(session: Session, user: str) -> None:
    """A deleted user belongs to no project any more."""
    for row in session.scalars(select(ProjectMemberRow).where(ProjectMemberRow.user == user)):
        session.delete(row)


def forget_project(session: Session, project: str) -> None:
    for row in session.scalars(select(ProjectMemberRow).where(ProjectMemberRow.project == project)):
        session.delete(row)


def _children(session: Session, project: str) -> list[str]:
    query = select(ProjectRow.name).where(ProjectRow.parent == project).order_by(ProjectRow.name)
    return list(session.scalars(query))


def _units_above(session: Session, project: str) -> list[str]:
    """The units above ``project``, nearest first (stops at a cycle, which the store never writes)."""
    found: list[str] = []
    row = session.get(ProjectRow, project)
    while row is not None and row.parent is not None and row.parent not in found:
        found.append(row.parent)
        row = session.get(ProjectRow, row.parent)
    return found


def _require_project(session: Session, project: str) -> None:
    if project != DEFAULT_PROJECT and session.get(ProjectRow, project) is None:
        raise NotFound(f"no project {project}: list projects with gpupool projects", code="project_not_found")


def _member(row: ProjectMemberRow) -> Member:
    return Member(row.project, row.user, ProjectRole(row.role), row.created_at)
