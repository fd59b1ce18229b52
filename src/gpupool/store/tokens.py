"""API tokens, stored only as SHA-256 hashes; who a token speaks for, and whether it still may.

A token works while it is not revoked, not expired, and its user (if it has a row in ``users``)
is not disabled. Tokens made before users existed, and the join token, may name no user row:
they keep the role they were made with.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpupool.domain.errors import NotFound
from gpupool.domain.users import JOIN_ROLE, Scope, TokenInfo, effective_scope
from gpupool.store.orm import TokenRow, UserRow
from gpupool.store.transitions import add_event

LAST_USED_EVERY = timedelta(seconds=60)  # a token's last use is written at most this often


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request speaks for. ``role`` is the user's role (what existing routes check);
    ``scope`` is what this token may do (what the users and tokens routes check)."""

    user: str
    role: str
    scope: Scope | None = field(default=None, compare=False)  # None: the widest the role allows
    token_id: int | None = field(default=None, compare=False)
    unix_user: str | None = field(default=None, compare=False)  # the account their jobs run as, if mapped

    @property
    def is_admin(self) -> bool:
        """An admin acting through a token with admin scope: an admin's narrower token is not."""
        return self.role == "admin" and self.may(Scope.ADMIN)

    def may(self, scope: Scope) -> bool:
        """Whether this token's scope, narrowed to the user's role, covers ``scope``."""
        return effective_scope(self.role, self.scope).covers(scope)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "gp_" + secrets.token_urlsafe(32)


def create_token(
    session: Session,
    user: str,
    role: str,
    now: datetime,
    *,
    name: str | None = None,
    scope: Scope | None = None,
    expires_at: datetime | None = None,
) -> str:
    """A new token for ``user``; the plain token is returned once and only its hash is kept."""
    return _insert(session, user, role, now, name, scope, expires_at)[1]


def issue_token(
    session: Session,
    user: str,
    role: str,
    now: datetime,
    *,
    name: str | None = None,
    scope: Scope | None = None,
    expires_at: datetime | None = None,
) -> tuple[TokenInfo, str]:
    """A token asked for by a person: ``create_token``, recorded as an event, with what may be
    shown of it."""
    row, token = _insert(session, user, role, now, name, scope, expires_at)
    add_event(session, now, kind="token_created", message=f"token {row.id} created for {user}")
    return _info(row), token


def has_admin(session: Session) -> bool:
    return has_role(session, "admin")


def has_role(session: Session, role: str) -> bool:
    """Whether a token of this role that was not revoked exists (the head makes one if not)."""
    query = select(TokenRow.id).where(TokenRow.role == role, TokenRow.revoked_at.is_(None))
    return session.scalars(query).first() is not None


def principal_for(session: Session, token: str, now: datetime) -> Principal | None:
    """The principal of a working token, or ``None``. Notes the token's use at most once a minute,
    so that authenticating costs no write per request."""
    found = session.execute(
        select(TokenRow, UserRow)
        .outerjoin(UserRow, UserRow.name == TokenRow.user)
        .where(TokenRow.token_hash == hash_token(token))
    ).first()
    if found is None:
        return None
    row, user = found
    if row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        return None
    if row.role == JOIN_ROLE:
        return Principal(row.user, JOIN_ROLE, Scope.READ, row.id)  # no use of the API but joining
    if user is not None and user.disabled:
        return None
    role = user.role if user is not None else row.role
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_EVERY:
        session.execute(update(TokenRow).where(TokenRow.id == row.id).values(last_used_at=now))
    unix_user = user.unix_user if user is not None else None
    return Principal(row.user, role, Scope(row.scope) if row.scope else None, row.id, unix_user)


def list_tokens(session: Session, user: str | None) -> list[TokenInfo]:
    """Tokens not revoked, oldest first; of one user, or of everyone."""
    query = select(TokenRow).where(TokenRow.revoked_at.is_(None)).order_by(TokenRow.id)
    if user is not None:
        query = query.where(TokenRow.user == user)
    return [_info(r) for r in session.scalars(query)]


def get_token(session: Session, token_id: int) -> TokenInfo:
    row = session.get(TokenRow, token_id)
    if row is None or row.revoked_at is not None:
        raise NotFound(f"no token {token_id}: list tokens with gpupool token list", code="token_not_found")
    return _info(row)


def token_scope(session: Session, token_id: int) -> Scope:
    """What the token may do now: its scope, narrowed to its user's current role."""
    row = session.get(TokenRow, token_id)
    if row is None:
        raise NotFound(f"no token {token_id}: list tokens with gpupool token list", code="token_not_found")
    user = session.get(UserRow, row.user)
    return effective_scope(user.role if user is not None else row.role, row.scope)


def revoke_token(session: Session, token_id: int, now: datetime) -> TokenInfo:
    row = session.get(TokenRow, token_id)
    if row is None or row.revoked_at is not None:
        raise NotFound(f"no token {token_id}: list tokens with gpupool token list", code="token_not_found")
    row.revoked_at = now
    add_event(session, now, kind="token_revoked", message=f"token {token_id} of {row.user} revoked")
    return _info(row)


def _insert(
    session: Session,
    user: str,
    role: str,
    now: datetime,
    name: str | None,
    scope: Scope | None,
    expires_at: datetime | None,
) -> tuple[TokenRow, str]:
    token = new_token()
    row = TokenRow(
        user=user,
        role=role,
        token_hash=hash_token(token),
        created_at=now,
        name=name,
        scope=scope.value if scope is not None else None,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return row, token


def _info(row: TokenRow) -> TokenInfo:
    return TokenInfo(row.id, row.name, row.user, row.scope, row.created_at, row.expires_at, row.last_used_at)
