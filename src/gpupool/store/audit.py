"""The audit log's rows: written in batches, read newest first, pruned by age."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.orm import Session

from gpupool.domain.audit import AuditEntry, AuditResult, printable
from gpupool.store.orm import AuditRow

_TABLE = cast(Table, AuditRow.__table__)
# The columns' widths (migration 0009): longer values are cut, never refused; every text is made
# printable first (domain/audit.printable), so nothing a caller sent can break a write or a terminal.
_WIDTHS = {"user": 64, "action": 64, "target": 256, "client": 64}


def add(session: Session, entries: Sequence[AuditEntry]) -> None:
    """Store ``entries`` in one statement (a Core executemany: no ORM bookkeeping per row)."""
    if entries:
        session.execute(insert(_TABLE), [_row(e) for e in entries])


def listing(
    session: Session, since: datetime | None = None, user: str | None = None, limit: int = 1000
) -> list[AuditEntry]:
    """The newest ``limit`` entries at or after ``since`` (of ``user`` if given), newest first."""
    query = select(AuditRow).order_by(AuditRow.at.desc(), AuditRow.id.desc()).limit(limit)
    if since is not None:
        query = query.where(AuditRow.at >= since)
    if user is not None:
        query = query.where(AuditRow.user == user)
    return [_entry(r) for r in session.scalars(query)]


def prune(session: Session, before: datetime) -> int:
    """Forget entries older than ``before``; how many were."""
    result = session.execute(delete(AuditRow).where(AuditRow.at < before))
    return int(getattr(result, "rowcount", 0) or 0)


def _row(e: AuditEntry) -> dict[str, object]:
    return {
        "at": e.at,
        "user": _cut(e.user, "user"),
        "token_id": e.token_id,
        "action": _cut(e.action, "action"),
        "target": _cut(e.target, "target"),
        "result": e.result.value,
        "status": e.status,
        "client": _cut(e.client, "client"),
    }


def _cut(value: str | None, column: str) -> str | None:
    return printable(value, _WIDTHS[column])


def _entry(r: AuditRow) -> AuditEntry:
    return AuditEntry(
        at=r.at,
        user=r.user,
        token_id=r.token_id,
        action=r.action,
        target=r.target,
        result=AuditResult(r.result),
        status=r.status,
        client=r.client,
        id=r.id,
    )
