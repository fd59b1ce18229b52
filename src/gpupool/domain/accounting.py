"""Accounting arithmetic: GPU-hours allocated and used, energy and queue times, per group.

Pure: it takes worker intervals, job submit/start times and GPU readings, and returns figures,
so it can be checked by hand. Rules:

* allocated GPU-hours: each worker's GPUs (a shared GPU counted by its share) times the overlap
  of [started, finished or now] with the window;
* used GPU-hours: each GPU's allocated hours times its mean utilisation / 100 over the overlap;
  a GPU with no utilisation reading in the overlap is unknown, not guessed: it counts in neither
  ``used`` nor ``covered`` (``coverage`` = covered / allocated GPU-hours);
* energy: the growth of the GPU's energy counter over the overlap (last reading minus first),
  times the worker's share of the GPU;
* queue time: started - submitted for jobs that started in the window;
* average power and energy per GPU-hour: the energy over the allocated GPU-hours that had energy
  readings (``energy_gpu_hours``), so hours without a counter do not dilute them;
* energy saved by power modes (issue 33), an estimate: a job whose mode is not ``max`` used
  ``E`` kWh at a setting whose energy per unit of work is ``e`` relative to ``max`` on its GPU
  model's curve (calibrated where measured, else the family's documented default); the same work
  at ``max`` would have used ``E / e``, so it saved ``E / e - E``. The curve was measured on
  compute-bound work, so for a job that was not, this overstates the saving a little; a watts mode
  on a GPU whose default limit is not known is not estimated (counted as no saving).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from gpupool.domain.errors import InvalidInput
from gpupool.domain.power import MAX, PowerCurve, parse_mode

HOUR_S = 3600.0
J_PER_KWH = 3.6e6


class GroupBy(StrEnum):
    PROJECT = "project"
    USER = "user"
    JOB = "job"


@dataclass(frozen=True, slots=True)
class WorkerSpan:
    job_id: int
    project: str
    user: str
    node: str
    gpus: tuple[int, ...]
    share: float  # the fraction of each GPU held; 1.0 for whole GPUs
    started: datetime
    finished: datetime | None  # None: still running
    gpu_power: str | None = None  # the job's power mode ("max", "efficient", "400W"); None: max


@dataclass(frozen=True, slots=True)
class JobStart:
    job_id: int
    project: str
    user: str
    submitted: datetime
    started: datetime


@dataclass(frozen=True, slots=True)
class Reading:
    """One sample (``span_s`` 0) or one minute aggregate (stamped at its start, ``span_s`` 60: it
    counts for any interval it overlaps; its energy is the minute's last counter value)."""

    time: datetime
    utilization_pct: float | None
    energy_j: float | None
    span_s: float = 0.0


@dataclass(frozen=True, slots=True)
class QueueStats:
    count: int = 0
    mean_s: float | None = None
    p50_s: float | None = None
    p95_s: float | None = None
    max_s: float | None = None


@dataclass(slots=True)
class GroupReport:
    key: str
    gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    covered_gpu_hours: float = 0.0
    energy_kwh: float = 0.0
    energy_gpu_hours: float = 0.0  # the allocated GPU-hours with energy readings
    energy_saved_kwh: float = 0.0  # by power modes, against max (an estimate: see the module)
    queue: QueueStats = field(default_factory=QueueStats)

    @property
    def coverage(self) -> float | None:
        """The part of the allocated GPU-hours with utilisation readings; None with none allocated."""
        return self.covered_gpu_hours / self.gpu_hours if self.gpu_hours > 0 else None

    @property
    def kwh_per_gpu_hour(self) -> float | None:
        """Energy per GPU-hour over the hours with energy readings; None without any."""
        return self.energy_kwh / self.energy_gpu_hours if self.energy_gpu_hours > 0 else None

    @property
    def avg_power_w(self) -> float | None:
        """The mean draw of one GPU (a share counted by its share) while held, in watts."""
        per_hour = self.kwh_per_gpu_hour
        return None if per_hour is None else per_hour * 1000.0


def group_key(by: GroupBy, job_id: int, project: str, user: str) -> str:
    if by is GroupBy.PROJECT:
        return project
    return user if by is GroupBy.USER else str(job_id)


def compute(
    workers: Iterable[WorkerSpan],
    starts: Iterable[JobStart],
    readings: Mapping[tuple[str, int], Sequence[Reading]],
    since: datetime,
    until: datetime,
    now: datetime,
    by: GroupBy = GroupBy.PROJECT,
    curves: Mapping[tuple[str, int], PowerCurve] | None = None,
) -> list[GroupReport]:
    """Figures per group, sorted by key. ``readings`` by (node, GPU index), each sorted by time;
    ``curves``: each GPU's model's power curve, for the energy saved (a GPU without one: none)."""
    groups: dict[str, GroupReport] = {}
    for w in workers:
        start = max(w.started, since)
        end = min(w.finished or now, until, now)
        if end <= start:
            continue
        hours = (end - start).total_seconds() / HOUR_S
        g = groups.setdefault(group_key(by, w.job_id, w.project, w.user), GroupReport(""))
        for index in w.gpus:
            allocated = hours * w.share
            g.gpu_hours += allocated
            inside = [r for r in readings.get((w.node, index), ()) if _overlaps(r, start, end)]
            utils = [r.utilization_pct for r in inside if r.utilization_pct is not None]
            if utils:
                g.covered_gpu_hours += allocated
                g.used_gpu_hours += allocated * (sum(utils) / len(utils)) / 100.0
            energy = [r.energy_j for r in inside if r.energy_j is not None]
            if len(energy) >= 2:
                used_kwh = max(0.0, energy[-1] - energy[0]) * w.share / J_PER_KWH
                g.energy_kwh += used_kwh
                g.energy_gpu_hours += allocated
                curve = (curves or {}).get((w.node, index))
                relative = 1.0 if curve is None else relative_energy(w.gpu_power, curve)
                g.energy_saved_kwh += used_kwh / relative - used_kwh if relative > 0 else 0.0
    waits: dict[str, list[float]] = {}
    for j in starts:
        if since <= j.started <= until:
            key = group_key(by, j.job_id, j.project, j.user)
            groups.setdefault(key, GroupReport(""))
            waits.setdefault(key, []).append(max(0.0, (j.started - j.submitted).total_seconds()))
    for key, g in groups.items():
        g.key = key
        g.queue = queue_stats(waits.get(key, []))
    return [groups[k] for k in sorted(groups)]


def relative_energy(mode_text: str | None, curve: PowerCurve) -> float:
    """Energy per unit of work under ``mode_text`` relative to ``max`` on ``curve`` (1: no saving).
    A watts mode is interpolated between the curve's power-limit points (its first point is the
    default limit); a mode the curve cannot place, or one no longer valid, counts as 1."""
    try:
        mode = parse_mode(mode_text)
    except InvalidInput:
        return 1.0
    if mode.kind == MAX:
        return 1.0
    if mode.kind == "efficient":
        return curve.efficient().energy
    limits = sorted((p.setting.value, p.energy) for p in curve.points if p.setting.kind == "limit")
    if not limits or mode.watts >= limits[-1][0]:
        return 1.0
    if mode.watts <= limits[0][0]:
        return limits[0][1]
    for (w0, e0), (w1, e1) in itertools.pairwise(limits):
        if mode.watts <= w1:
            return e0 + (e1 - e0) * (mode.watts - w0) / (w1 - w0)
    return 1.0


def _overlaps(r: Reading, start: datetime, end: datetime) -> bool:
    if r.span_s <= 0:
        return start <= r.time <= end
    return r.time <= end and (r.time - start).total_seconds() > -r.span_s


def queue_stats(waits: Sequence[float]) -> QueueStats:
    if not waits:
        return QueueStats()
    ordered = sorted(waits)
    return QueueStats(
        count=len(ordered),
        mean_s=sum(ordered) / len(ordered),
        p50_s=percentile(ordered, 50),
        p95_s=percentile(ordered, 95),
        max_s=ordered[-1],
    )


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest rank: the smallest value with at least ``pct``% of the values at or below it."""
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]
