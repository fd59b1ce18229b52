"""Oracle shortest-remaining-time-first: the bound the least-attained order is measured
against. It reads the seconds of work each job has left, which only a simulator replaying a
trace knows (``PendingJob.oracle_remaining_s``, ``RunningJob.oracle_end``); the head refuses the
policy (``policies.SIM_ONLY``) and the order refuses a job without them."""

from __future__ import annotations

from datetime import datetime

from gpupool.domain.errors import InvalidInput
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.hooks import JobOrder


def order(config: SchedulerConfig) -> JobOrder:
    return _key


def pending_level(job: PendingJob, now: datetime, config: SchedulerConfig) -> tuple[int, float] | None:
    """It displaces running jobs that end later than it would if it started now."""
    return (0, -(now.timestamp() + _remaining(job)))


def running_keys(job: RunningJob, config: SchedulerConfig) -> tuple[float, ...]:
    if job.oracle_end is None:
        raise InvalidInput(f"job {job.id}: the oracle order needs its end, which only a simulator knows")
    return (-job.oracle_end.timestamp(),)


def _key(job: PendingJob) -> tuple[int, float, int]:
    return (-job.spec.priority.rank, _remaining(job), job.id)


def _remaining(job: PendingJob) -> float:
    if job.oracle_remaining_s is None:
        raise InvalidInput(f"job {job.id}: the oracle order needs its duration, which only a simulator knows")
    return job.oracle_remaining_s
