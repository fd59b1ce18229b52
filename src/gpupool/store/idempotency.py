"""Idempotency keys of submissions: a client that lost the answer to ``POST /jobs`` sends the same
request with the same key and gets the job it made, not a second one."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.errors import Conflict
from gpupool.store.orm import IdempotencyKeyRow

KEEP = timedelta(hours=24)


class KeyTaken(Conflict):
    """Another request with this key committed first: read what it made."""

    default_code = "idempotency_key_taken"


def find(session: Session, owner: str, key: str, now: datetime) -> tuple[int, str] | None:
    """(job id, fingerprint) of ``owner``'s submission with ``key`` within the last 24 hours."""
    row = session.scalars(
        select(IdempotencyKeyRow).where(
            IdempotencyKeyRow.owner == owner, IdempotencyKeyRow.key == key, IdempotencyKeyRow.created_at > now - KEEP
        )
    ).first()
    return None if row is None else (row.job_id, row.fingerprint)


def remember(session: Session, owner: str, key: str, fingerprint: str, job_id: int, now: datetime) -> None:
    """Keep the key with the job it made, in the submission's transaction; ``KeyTaken`` (the whole
    transaction rolls back) when a concurrent request with the key got there first. Keys older than
    24 hours go, so a key may be used again after that."""
    session.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.created_at <= now - KEEP))
    session.add(IdempotencyKeyRow(owner=owner, key=key, fingerprint=fingerprint, job_id=job_id, created_at=now))
    try:
        session.flush()
    except IntegrityError:
        raise KeyTaken(f"idempotency key {key!r} was used by a request at the same time") from None
