"""Calibrated power curves (issue 33), one per GPU model: the latest ``gpupool node
calibrate-power`` measured, on whichever node; ``efficient`` jobs of that model follow it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.launch import PowerSetting
from gpupool.domain.power import PowerCurve, PowerPoint
from gpupool.store.orm_telemetry import PowerCurveRow


def save_curve(session: Session, model: str, node: str, points: Sequence[Mapping[str, Any]], now: datetime) -> None:
    """Keep ``points`` (the calibration's, the default first) as ``model``'s curve, replacing the last."""
    row = session.get(PowerCurveRow, model, with_for_update=True)
    if row is None:
        row = PowerCurveRow(model=model)
        session.add(row)
    row.node, row.points, row.measured_at = node, [dict(p) for p in points], now


def curves(session: Session) -> dict[str, PowerCurve]:
    """Every calibrated curve, by GPU model."""
    return {row.model: _curve(row) for row in session.scalars(select(PowerCurveRow).order_by(PowerCurveRow.model))}


def curve_rows(session: Session) -> list[dict[str, Any]]:
    """The stored curves as plain data (``gpupool power curves``): model, node, measured_at, points."""
    return [
        {"model": r.model, "node": r.node, "measured_at": r.measured_at, "points": list(r.points)}
        for r in session.scalars(select(PowerCurveRow).order_by(PowerCurveRow.model))
    ]


def _curve(row: PowerCurveRow) -> PowerCurve:
    points = tuple(
        PowerPoint(PowerSetting(p["kind"], int(p["value"])), float(p["speed"]), float(p["energy"]), float(p["watts"]))
        for p in row.points
    )
    return PowerCurve(row.model, points, calibrated=True, measured_at=row.measured_at, node=row.node)
