"""Alert rows: what is active, what the rules decided, and the counts ``/metrics`` shows."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpupool.domain.alerts import Alert, AlertKind, Verdicts
from gpupool.domain.telemetry import GpuKey
from gpupool.store.orm_telemetry import AlertRow
from gpupool.store.transitions import add_event

CLEARED_KEPT = timedelta(days=30)


def active(session: Session) -> list[Alert]:
    return [_alert(r) for r in session.scalars(select(AlertRow).where(AlertRow.cleared_at.is_(None)))]


def listing(session: Session, include_cleared: bool = False, limit: int = 200) -> list[Alert]:
    """Active alerts, newest first; with ``include_cleared``, recent cleared ones too."""
    query = select(AlertRow).order_by(AlertRow.raised_at.desc(), AlertRow.id.desc()).limit(limit)
    if not include_cleared:
        query = query.where(AlertRow.cleared_at.is_(None))
    return [_alert(r) for r in session.scalars(query)]


def xid_seen(session: Session) -> dict[GpuKey, float]:
    """Each GPU's XID count at its newest XID alert, active or cleared: after a head restart, the
    errors already alerted on are not raised again."""
    newest = (
        select(AlertRow.node, AlertRow.gpu, func.max(AlertRow.id).label("id"))
        .where(AlertRow.kind == AlertKind.GPU_XID.value, AlertRow.gpu.is_not(None))
        .group_by(AlertRow.node, AlertRow.gpu)
        .subquery()
    )
    rows = session.execute(select(AlertRow.node, AlertRow.gpu, AlertRow.value).join(newest, AlertRow.id == newest.c.id))
    return {(node, int(gpu or 0)): float(value or 0.0) for node, gpu, value in rows}


def apply(session: Session, verdicts: Verdicts, now: datetime) -> None:
    """Store what the rules decided; each raise and clear is an event on the node, and on the
    job using the GPU. Cleared alerts older than 30 days are forgotten."""
    for alert in verdicts.raised:
        session.add(
            AlertRow(
                kind=alert.kind.value,
                node=alert.node,
                gpu=alert.gpu,
                job_id=alert.job_id,
                message=alert.message,
                value=alert.value,
                raised_at=alert.raised_at,
                updated_at=alert.raised_at,
            )
        )
        _events(session, now, f"alert_{alert.kind.value}", alert.message, alert)
    for clear in verdicts.cleared:
        row = session.get(AlertRow, clear.alert.id)
        if row is not None and row.cleared_at is None:
            row.cleared_at = now
            _events(session, now, "alert_cleared", clear.message, clear.alert)
    for alert in verdicts.refreshed:
        row = session.get(AlertRow, alert.id)
        if row is not None:
            row.value, row.updated_at = alert.value, alert.updated_at or now
    session.execute(delete(AlertRow).where(AlertRow.cleared_at < now - CLEARED_KEPT))


def counts(session: Session) -> tuple[Counter[str], Counter[str]]:
    """Active alerts by kind, and every alert kept (raised, active or not) by kind."""
    now_active: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    rows = session.execute(
        select(AlertRow.kind, AlertRow.cleared_at.is_(None), func.count(AlertRow.id)).group_by(
            AlertRow.kind, AlertRow.cleared_at.is_(None)
        )
    )
    for kind, is_active, n in rows:
        kept[kind] += n
        if is_active:
            now_active[kind] += n
    return now_active, kept


def _events(session: Session, now: datetime, kind: str, message: str, alert: Alert) -> None:
    add_event(session, now, kind=kind, message=message, node=alert.node)
    if alert.job_id is not None:
        add_event(session, now, kind=kind, message=message, job_id=alert.job_id, node=alert.node)


def _alert(r: AlertRow) -> Alert:
    return Alert(
        AlertKind(r.kind),
        r.node,
        r.gpu,
        r.message,
        r.raised_at,
        r.value,
        r.job_id,
        r.id,
        r.updated_at,
        r.cleared_at,
    )
