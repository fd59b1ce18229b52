"""Accounting use case: who used how many GPU-hours and how much energy, and how long jobs queued.

Any authenticated user sees every group (projects, users and jobs alike): usage is not secret in a
shared pool, and the figures carry no job commands or environments."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpupool.domain.accounting import GroupBy, GroupReport, compute
from gpupool.domain.errors import InvalidInput
from gpupool.store import accounting as accounting_repo
from gpupool.usecases.context import HeadContext
from gpupool.usecases.telemetry import parse_when

DEFAULT_WINDOW = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class Report:
    since: datetime
    until: datetime
    by: GroupBy
    groups: list[GroupReport]

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "by": self.by.value,
            "groups": [group_dict(g) for g in self.groups],
        }


def group_dict(g: GroupReport) -> dict[str, Any]:
    return {
        "key": g.key,
        "gpu_hours": g.gpu_hours,
        "used_gpu_hours": g.used_gpu_hours,
        "coverage": g.coverage,
        "energy_kwh": g.energy_kwh,
        "avg_power_w": g.avg_power_w,
        "kwh_per_gpu_hour": g.kwh_per_gpu_hour,
        "energy_saved_kwh": g.energy_saved_kwh,
        "queue_count": g.queue.count,
        "queue_mean_s": g.queue.mean_s,
        "queue_p50_s": g.queue.p50_s,
        "queue_p95_s": g.queue.p95_s,
        "queue_max_s": g.queue.max_s,
    }


def report(ctx: HeadContext, since: str | None = None, until: str | None = None, by: str = "project") -> Report:
    """``since``/``until``: ISO 8601 times or durations ago (``7d``); by default the last 7 days."""
    now = ctx.clock.now()
    start = parse_when(since, now, now - DEFAULT_WINDOW)
    end = parse_when(until, now, now)
    if start >= end:
        raise InvalidInput(f"since ({start.isoformat()}) must be before until ({end.isoformat()})")
    try:
        group_by = GroupBy(by)
    except ValueError:
        raise InvalidInput(f"unknown grouping {by!r}: use project, user or job") from None
    with ctx.db.read() as s:
        spans = accounting_repo.worker_spans(s, start, end)
        starts = accounting_repo.job_starts(s, start, end)
        readings = accounting_repo.readings(s, spans, start, end)
        curves = accounting_repo.power_curves(s, spans)
    return Report(start, end, group_by, compute(spans, starts, readings, start, end, now, group_by, curves))
