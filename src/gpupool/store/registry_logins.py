"""Users' registry logins (issue 32): one row per user and registry, the secret sealed by the
caller (``store/sealing.py``); nothing here ever sees it plain."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpupool.domain.launch import RegistryAuth
from gpupool.domain.registries import RegistryLogin, registry_of
from gpupool.store.orm import RegistryLoginRow
from gpupool.store.sealing import Sealer


def save(session: Session, user: str, registry: str, username: str, sealed: str, now: datetime) -> RegistryLogin:
    """Keep ``user``'s login to ``registry``, replacing the one they had."""
    row = session.get(RegistryLoginRow, (user, registry))
    if row is None:
        row = RegistryLoginRow(user=user, host=registry)
        session.add(row)
    row.username, row.sealed, row.saved_at = username, sealed, now
    session.flush()
    return _login(row)


def listing(session: Session, user: str) -> list[RegistryLogin]:
    rows = session.scalars(select(RegistryLoginRow).where(RegistryLoginRow.user == user))
    return sorted((_login(r) for r in rows), key=lambda login: login.registry)


def remove(session: Session, user: str, registry: str) -> bool:
    """Forget ``user``'s login to ``registry``; whether there was one."""
    gone = session.execute(
        delete(RegistryLoginRow).where(RegistryLoginRow.user == user, RegistryLoginRow.host == registry)
    )
    return bool(getattr(gone, "rowcount", 0))


def remove_user(session: Session, user: str) -> None:
    """A deleted user's logins go with them."""
    session.execute(delete(RegistryLoginRow).where(RegistryLoginRow.user == user))


def sealed_for(session: Session, user: str, registry: str) -> tuple[str, str] | None:
    """``user``'s user name and sealed secret for ``registry``, if they logged in to it."""
    row = session.get(RegistryLoginRow, (user, registry))
    return None if row is None else (row.username, row.sealed)


def auth_for(session: Session, sealer: Sealer, owner: str, image: str | None) -> RegistryAuth | None:
    """What a node's pull of ``image`` for ``owner``'s job uses: their login to its registry, if any."""
    registry = registry_of(image)
    found = None if registry is None else sealed_for(session, owner, registry)
    if registry is None or found is None:
        return None
    username, sealed = found
    return RegistryAuth(owner, registry, username, sealer.open(sealed, f"{owner}'s login to {registry}"))


def _login(row: RegistryLoginRow) -> RegistryLogin:
    return RegistryLogin(row.host, row.username, row.saved_at)
