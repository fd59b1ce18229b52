"""User rows, and the rules that keep a head administrable: names are unique, and the last
enabled admin can be neither disabled, demoted nor deleted."""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from gpupool.domain.errors import Conflict, NotFound
from gpupool.domain.jobs import ACTIVE_JOB_STATES
from gpupool.domain.users import Role, User
from gpupool.store import members, registry_logins
from gpupool.store.orm import IdempotencyKeyRow, JobRow, ServiceRow, TokenRow, UserRow, UserUsageRow
from gpupool.store.transitions import add_event


def add_user(session: Session, name: str, role: Role, unix_user: str | None, now: datetime) -> User:
    if session.get(UserRow, name) is not None:
        raise Conflict(f"user {name} already exists: list users with gpupool user list", code="user_exists")
    row = UserRow(name=name, role=role.value, unix_user=unix_user, disabled=False, created_at=now)
    session.add(row)
    add_event(session, now, kind="user_added", message=f"user {name} added as {role.value}")
    return _user(row)


def ensure_user(session: Session, name: str, role: Role, now: datetime) -> None:
    """The built-in admin user: made at the first start, left as it is afterwards."""
    if session.get(UserRow, name) is None:
        session.add(UserRow(name=name, role=role.value, unix_user=None, disabled=False, created_at=now))


def get_user(session: Session, name: str) -> User:
    return _user(_row(session, name))


def list_users(session: Session) -> list[User]:
    return [_user(r) for r in session.scalars(select(UserRow).order_by(UserRow.name))]


def set_disabled(session: Session, name: str, disabled: bool, now: datetime) -> User:
    """Disable (or enable again) a user: their tokens stop working, their running jobs go on."""
    row = _row(session, name, lock=True)
    if disabled and not row.disabled and row.role == Role.ADMIN.value:
        _keep_an_admin(session, name, "disable")
    row.disabled = disabled
    add_event(
        session,
        now,
        kind="user_disabled" if disabled else "user_enabled",
        message=f"user {name} " + ("disabled" if disabled else "enabled"),
    )
    return _user(row)


def set_role(session: Session, name: str, role: Role, now: datetime) -> User:
    row = _row(session, name, lock=True)
    if row.role == Role.ADMIN.value and role is not Role.ADMIN:
        _keep_an_admin(session, name, "demote")
    row.role = role.value
    add_event(session, now, kind="user_role_set", message=f"user {name} is now {role.value}")
    return _user(row)


def set_unix_user(session: Session, name: str, unix_user: str | None, now: datetime) -> User:
    """Map a user to a Unix account (None: the account of the same name). Jobs already submitted
    keep the account they were submitted with."""
    row = _row(session, name, lock=True)
    row.unix_user = unix_user
    what = f"the Unix account {unix_user}" if unix_user else "the Unix account of the same name"
    add_event(session, now, kind="user_unix_user_set", message=f"user {name}'s jobs now run as {what}")
    return _user(row)


def delete_user(session: Session, name: str, now: datetime) -> None:
    """Refused while the user owns pending or running jobs; their tokens, memberships, usage,
    registry logins and idempotency keys go with them, and what they owned that stays (finished jobs, idle services)
    is handed to a name no one can take (``alice~3f9a1c2e``): a user added later under the same
    name starts with nothing of theirs (their logs, their services, their submissions' keys)."""
    row = _row(session, name, lock=True)
    if row.role == Role.ADMIN.value:
        _keep_an_admin(session, name, "delete")
    active = session.scalar(
        select(func.count(JobRow.id)).where(JobRow.owner == name, JobRow.state.in_(ACTIVE_JOB_STATES))
    )
    if active:
        raise Conflict(
            f"user {name} still owns {active} pending or running job(s); cancel them or let them finish first",
            code="user_in_use",
        )
    session.execute(delete(TokenRow).where(TokenRow.user == name))
    members.forget_user(session, name)
    session.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.owner == name))
    session.execute(delete(UserUsageRow).where(UserUsageRow.user == name))
    registry_logins.remove_user(session, name)  # their registry secrets are theirs alone
    gone = f"{name[:54]}{GONE}{secrets.token_hex(4)}"
    session.execute(update(JobRow).where(JobRow.owner == name).values(owner=gone))
    session.execute(update(ServiceRow).where(ServiceRow.owner == name).values(owner=gone))
    session.delete(row)
    add_event(session, now, kind="user_deleted", message=f"user {name} deleted; what they owned is now {gone}'s")


GONE = "~"  # in a deleted user's name for what they owned: no user name has it


def _keep_an_admin(session: Session, name: str, what: str) -> None:
    others = session.scalar(
        select(func.count())
        .select_from(UserRow)
        .where(UserRow.role == Role.ADMIN.value, UserRow.disabled.is_(False), UserRow.name != name)
    )
    if not others:
        raise Conflict(f"cannot {what} {name}: they are the last admin; make another admin first", code="last_admin")


def _row(session: Session, name: str, lock: bool = False) -> UserRow:
    query = select(UserRow).where(UserRow.name == name)
    row = session.scalars(query.with_for_update() if lock else query).first()
    if row is None:
        raise NotFound(f"no user {name}: list users with gpupool user list", code="user_not_found")
    return row


def _user(row: UserRow) -> User:
    return User(row.name, Role(row.role), row.unix_user, row.disabled, row.created_at)
