"""API tokens, stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.store.orm import TokenRow


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "gp_" + secrets.token_urlsafe(32)


def create_token(session: Session, user: str, role: str, now: datetime) -> str:
    token = new_token()
    session.add(TokenRow(user=user, role=role, token_hash=hash_token(token), created_at=now))
    return token


def has_admin(session: Session) -> bool:
    return has_role(session, "admin")


def has_role(session: Session, role: str) -> bool:
    return session.scalars(select(TokenRow.id).where(TokenRow.role == role)).first() is not None


def principal_for(session: Session, token: str) -> Principal | None:
    row = session.scalars(select(TokenRow).where(TokenRow.token_hash == hash_token(token))).first()
    return Principal(row.user, row.role) if row else None
