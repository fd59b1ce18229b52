"""Idempotency keys of submissions: a client that lost the answer to ``POST /jobs`` sends the same
request with the same key and gets the job it made, not a second one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain.errors import Conflict
from gpupool.store.orm import IdempotencyKeyRow

KEEP = timedelta(hours=24)
PRUNE_EVERY = timedelta(minutes=1)
_pruned: datetime | None = None  # when remember_many last deleted expired keys (a per-process pace)


class KeyTaken(Conflict):
    """Another request with this key committed first: read what it made."""

    default_code = "idempotency_key_taken"


def fingerprint(request: Mapping[str, Any]) -> str:
    """What a key is remembered with: a digest of the request it came with."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()


def reused(key: str, job_id: int) -> Conflict:
    """The answer to a key sent again with a different request."""
    return Conflict(
        f"idempotency key {key!r} was used for a different submission (job {job_id}): use a new key",
        code="idempotency_key_reused",
    )


def find(session: Session, owner: str, key: str, now: datetime) -> tuple[int, str] | None:
    """(job id, fingerprint) of ``owner``'s submission with ``key`` within the last 24 hours."""
    row = session.scalars(
        select(IdempotencyKeyRow).where(
            IdempotencyKeyRow.owner == owner, IdempotencyKeyRow.key == key, IdempotencyKeyRow.created_at > now - KEEP
        )
    ).first()
    return None if row is None else (row.job_id, row.fingerprint)


def find_many(session: Session, keys: list[tuple[str, str]], now: datetime) -> dict[tuple[str, str], tuple[int, str]]:
    """``find`` for many (owner, key) pairs in one query: those used within 24 hours."""
    found: dict[tuple[str, str], tuple[int, str]] = {}
    wanted = set(keys)
    for start in range(0, len(keys), 500):
        chunk = {key for _, key in keys[start : start + 500]}
        rows = session.execute(
            select(
                IdempotencyKeyRow.owner, IdempotencyKeyRow.key, IdempotencyKeyRow.job_id, IdempotencyKeyRow.fingerprint
            ).where(IdempotencyKeyRow.key.in_(chunk), IdempotencyKeyRow.created_at > now - KEEP)
        )
        for owner, key, job_id, fingerprint in rows:
            if (owner, key) in wanted:
                found[(owner, key)] = (job_id, fingerprint)
    return found


def remember_many(session: Session, made: list[tuple[str, str, str, int]], now: datetime) -> None:
    """``remember`` for many (owner, key, fingerprint, job id): one statement. Keys of one group
    are distinct (the group commit answers a repeated key from its first use)."""
    if not made:
        return
    global _pruned
    if _pruned is None or abs(now - _pruned) >= PRUNE_EVERY:  # expired keys go in one sweep a minute
        session.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.created_at <= now - KEEP))
        _pruned = now
    try:
        session.execute(
            insert(IdempotencyKeyRow),
            [{"owner": o, "key": k, "fingerprint": f, "job_id": j, "created_at": now} for o, k, f, j in made],
        )
    except IntegrityError:
        raise KeyTaken("an idempotency key was used by a request at the same time") from None


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
