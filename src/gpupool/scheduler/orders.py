"""The job order a configuration names, and for a preemptive order the hooks the ``displace``
action and the session use.

Most job orders (``registry.JOB_ORDERS``) are a key of the job alone. A preemptive order also
depends on the configuration (its queues), may move waiting jobs up as time passes (promotion),
and ranks waiting and running jobs alike, so that a waiting job may displace running ones that
rank behind it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import registry
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.plugins import las, srtf
from gpupool.scheduler.registry import JobOrder

Ranked = list[tuple[tuple[int, float, int], PendingJob]]


def _unchanged(ranked: Ranked, now: datetime, config: SchedulerConfig) -> Ranked:
    return ranked


@dataclass(frozen=True, slots=True)
class PreemptiveOrder:
    """A waiting job's ``pending_level`` is (its level, a bound): it may displace a running job
    whose key at that level (``running_keys``, fixed while the job runs) is below the bound;
    None: it displaces nobody. ``displace_index`` keeps the keys sorted from cycle to cycle."""

    order: Callable[[SchedulerConfig], JobOrder]
    pending_level: Callable[[PendingJob, datetime, SchedulerConfig], tuple[int, float] | None]
    running_keys: Callable[[RunningJob, SchedulerConfig], tuple[float, ...]]
    promote: Callable[[Ranked, datetime, SchedulerConfig], Ranked] = _unchanged


PREEMPTIVE: dict[str, PreemptiveOrder] = {
    "las": PreemptiveOrder(las.order, las.pending_level, las.running_keys, las.promote),
    "srtf_oracle": PreemptiveOrder(srtf.order, srtf.pending_level, srtf.running_keys),
}


def job_order(config: SchedulerConfig) -> JobOrder:
    """The configuration's job order: a preemptive one's, or a plain one from ``registry``."""
    preemptive = PREEMPTIVE.get(config.job_order)
    if preemptive is not None:
        return preemptive.order(config)
    return registry.job_order(config.job_order)


def preemptive(config: SchedulerConfig) -> PreemptiveOrder | None:
    return PREEMPTIVE.get(config.job_order)
