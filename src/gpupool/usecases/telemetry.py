"""Telemetry use cases: a node's GPU history, for any authenticated user (read-only)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput, NotFound
from gpupool.domain.telemetry import GpuSample, Resolution, TelemetryPoint
from gpupool.store import telemetry as telemetry_repo
from gpupool.usecases import nodes as node_service
from gpupool.usecases.context import HeadContext

DEFAULT_WINDOW = timedelta(minutes=15)
_AGO_RE = re.compile(r"^\s*\d+(?:\.\d+)?\s*[smhd]?\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class History:
    node: str
    gpu: int | None
    since: datetime
    until: datetime
    resolution: Resolution
    points: list[TelemetryPoint]


def history(
    ctx: HeadContext,
    name: str,
    gpu: int | None = None,
    since: str | None = None,
    until: str | None = None,
    resolution: Resolution = Resolution.AUTO,
) -> History:
    """``since`` and ``until``: an ISO 8601 time, or a duration ago (``15m``, ``2h``, ``1d``);
    by default the last 15 minutes."""
    now = ctx.clock.now()
    start = parse_when(since, now, now - DEFAULT_WINDOW)
    end = parse_when(until, now, now)
    if start >= end:
        raise InvalidInput(f"since ({start.isoformat()}) must be before until ({end.isoformat()})")
    record = node_service.show(ctx, name)
    indices = [g.index for g in record.node.gpus]
    if gpu is not None and gpu not in indices:
        has = f"its GPUs are {', '.join(map(str, indices))}" if indices else "it has no GPU"
        raise NotFound(f"node {name} has no GPU {gpu}: {has}", code="gpu_not_found")
    with ctx.db.read() as s:
        used, points = telemetry_repo.history(s, name, gpu, start, end, resolution)
    return History(name, gpu, start, end, used, points)


def latest(ctx: HeadContext, since: str | None = None) -> list[GpuSample]:
    """The newest reading of every GPU, by node and index; with ``since`` (an ISO 8601 time or a
    duration ago), only readings at least that recent."""
    now = ctx.clock.now()
    start = None if since is None or not since.strip() else parse_when(since, now, now)
    with ctx.db.read() as s:
        samples = telemetry_repo.latest(s, start)
    return sorted(samples, key=lambda x: (x.node, x.index))


def parse_when(value: str | None, now: datetime, default: datetime) -> datetime:
    """An aware UTC time from an ISO 8601 time (naive means UTC) or a duration before ``now``."""
    if value is None or not value.strip():
        return default
    if _AGO_RE.match(value):
        return now - timedelta(seconds=parse_duration(value))
    try:
        when = datetime.fromisoformat(value.strip()) if len(value) <= 64 else None
    except ValueError:
        when = None
    if when is None:
        raise InvalidInput(
            f"malformed time {value[:64]!r}: use an ISO 8601 time (2026-11-23T02:00:00Z)"
            " or a duration ago (15m, 2h, 1d)"
        )
    if not EARLIEST.year <= when.year <= LATEST.year:
        raise InvalidInput(f"time {value!r} is out of range: from {EARLIEST.year} to {LATEST.year}")
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)  # times outside these cannot be moved by a day or a window
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
