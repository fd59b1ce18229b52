"""Idle GPUs: allocated to a job, yet doing nothing.

A GPU is *idle* once its utilisation has stayed below a threshold for a while. The head tracks,
for every GPU a live worker holds, when its current run of low readings began (an *idle spell*);
the spell ends at the first busy reading, when the job lets the GPU go, or when a reading has no
utilisation (MIG): an unknown reading is never counted as idle.

A project may set an idle timeout. Its ``interactive`` jobs whose GPUs all sit idle are first
warned (an event, at half the timeout), then preempted once idle for the whole timeout, but only
while other jobs wait: an idle notebook on a quiet cluster harms nobody. Only interactive jobs:
a training job that is idle is stuck or checkpointing, and stopping it would lose work.

Pure functions over plain values, so the controller, tests and the API agree on what "idle" is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpupool.domain.durations import format_duration
from gpupool.domain.telemetry import GpuKey, GpuSample


@dataclass(frozen=True, slots=True)
class IdleSettings:
    """Below ``threshold_pct`` utilisation for ``after_s`` makes an allocated GPU idle."""

    threshold_pct: float = 5.0
    after_s: float = 600.0


@dataclass(frozen=True, slots=True)
class IdleSpell:
    """A held GPU's current run of low readings: since when, for which job, the latest reading."""

    job_id: int
    since: datetime
    utilization_pct: float

    def idle_for(self, now: datetime) -> float:
        return max(0.0, (now - self.since).total_seconds())


def update_spells(
    spells: Mapping[GpuKey, IdleSpell],
    samples: Iterable[GpuSample],
    holders: Mapping[GpuKey, int],
    threshold_pct: float,
) -> dict[GpuKey, IdleSpell]:
    """The spells after a round of readings. ``holders``: which job holds each held GPU now.
    A GPU not read this round keeps its spell (a missed reading is not a busy one), unless
    nobody (or another job) holds it any more."""
    read = {(s.node, s.index): s for s in samples}
    out: dict[GpuKey, IdleSpell] = {}
    for key, job_id in holders.items():
        spell = spells.get(key)
        if spell is not None and spell.job_id != job_id:
            spell = None  # the GPU changed hands: the new job starts with a clean slate
        sample = read.get(key)
        if sample is None:
            if spell is not None:
                out[key] = spell
            continue
        util = sample.utilization_pct
        if util is None or util >= threshold_pct:
            continue
        since = spell.since if spell is not None else sample.time
        out[key] = IdleSpell(job_id, since, util)
    return out


@dataclass(frozen=True, slots=True)
class IdleCandidate:
    """A running interactive job of a project with an idle timeout: the GPUs it holds."""

    job_id: int
    project: str
    idle_timeout_s: float
    gpus: frozenset[GpuKey]


@dataclass(frozen=True, slots=True)
class IdleWarning:
    job_id: int
    message: str


@dataclass(frozen=True, slots=True)
class IdlePreemption:
    """``not_before``: the job is requeued, but left out of scheduling until then, so the jobs
    that waited get the GPUs it gave back instead of it taking them again."""

    job_id: int
    message: str
    not_before: datetime


# Long enough for the stopped job's workers to exit (the kill grace) and the next cycles to start
# the jobs that waited; short enough that a user back at the notebook soon gets GPUs again.
YIELD_S = 60.0


def job_idle_since(gpus: Iterable[GpuKey], spells: Mapping[GpuKey, IdleSpell]) -> datetime | None:
    """When a job's GPUs were last all idle: the latest start among their spells, or None when
    any of them is busy (a job using one GPU of four is working)."""
    starts = []
    for key in gpus:
        spell = spells.get(key)
        if spell is None:
            return None
        starts.append(spell.since)
    return max(starts) if starts else None


def idle_policy(
    candidates: Iterable[IdleCandidate],
    spells: Mapping[GpuKey, IdleSpell],
    warned_since: Mapping[int, datetime],
    waiting: int,
    now: datetime,
    threshold_pct: float,
) -> list[IdleWarning | IdlePreemption]:
    """What the idle-timeout policy does now. ``warned_since``: each job's latest idle warning;
    a warning counts only for the spell it was given in. ``waiting``: pending jobs that wait for
    GPUs. A job is never preempted without a warning of its current spell first."""
    actions: list[IdleWarning | IdlePreemption] = []
    for job in sorted(candidates, key=lambda c: c.job_id):
        since = job_idle_since(job.gpus, spells)
        if since is None:
            continue
        idle_s = (now - since).total_seconds()
        warned = warned_since.get(job.job_id)
        warned_this_spell = warned is not None and warned >= since
        timeout = job.idle_timeout_s
        if not warned_this_spell and idle_s >= timeout / 2:
            deadline = since + timedelta(seconds=timeout)
            actions.append(
                IdleWarning(
                    job.job_id,
                    f"its GPUs have been idle (below {threshold_pct:g}% utilisation) for "
                    f"{format_duration(idle_s)}; project {job.project} preempts idle interactive jobs after "
                    f"{format_duration(timeout)}, so it will "
                    f"be preempted from {deadline:%H:%M:%S} UTC if other jobs are waiting. Use the GPUs, or "
                    "cancel the job to give them back",
                )
            )
        elif warned_this_spell and idle_s >= timeout and waiting > 0:
            actions.append(
                IdlePreemption(
                    job.job_id,
                    f"its GPUs were idle for {format_duration(idle_s)} (project {job.project}'s idle timeout is "
                    f"{format_duration(timeout)}) while {waiting} job(s) waited; preempted and requeued behind them",
                    now + timedelta(seconds=YIELD_S),
                )
            )
    return actions
