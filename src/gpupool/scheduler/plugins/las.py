"""Attained-service order: Tiresias' discretised two-dimensional LAS, with no durations known.

A job's service is the GPU-seconds it has received so far (GPUs x seconds, summed over its runs:
a job requeued after a preemption keeps what it had). Jobs fall into a few queues by the
thresholds they have passed (``LasConfig.thresholds``); queue 0 goes first and, within a queue,
the earlier submitted. A job that has never run is in queue 0: a short job no longer waits behind
long ones that came first, because long ones sink as they run and a waiting job of a lower queue
may displace them (the ``displace`` action).

Bounds, so that no job is thrashed or starved: a running job may be displaced only after
``min_run_s`` of its current run, and a waiting job that has waited ``promote_after`` times as
long as it ran goes back to queue 0. A ``--max-runtime`` puts a ceiling on a job's queue: a job
that will end before it passes a threshold never sinks below it.

Only a job with a checkpoint directory is displaced (``checkpointed_only``, the default): it
resumes where it was (``GPUPOOL_PREEMPTED=1``); one without would start over each time.

The queue sits in the job order's first key, after the priority class (``-rank * 16 + queue``),
so the user order and the fair share between projects apply as with the FIFO order."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from datetime import datetime
from functools import lru_cache
from operator import itemgetter

from gpupool.domain.errors import InvalidInput
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.config import LasConfig, SchedulerConfig
from gpupool.scheduler.hooks import JobOrder, Ranked

QUEUES = 16  # at most this many queues: the class and the queue share the key's first element
_KEY = itemgetter(0)


def queue_of(attained: float, gpus: float, max_runtime_s: int | None, las: LasConfig) -> int:
    """How many thresholds ``attained`` GPU-seconds have passed, at most as many as the job's
    whole ``--max-runtime`` would pass (a job that stops before a threshold never passes it)."""
    queue = bisect_right(las.thresholds, attained)
    if max_runtime_s is not None:
        queue = min(queue, bisect_left(las.thresholds, max_runtime_s * gpus))
    return queue


def order(config: SchedulerConfig) -> JobOrder:
    return _order(config.las)


def promote(ranked: Ranked, now: datetime, config: SchedulerConfig) -> Ranked:
    """``ranked`` with every starving job moved up to queue 0 of its class (a new list where one
    moved). Only jobs past queue 0 are looked at: they sit at the end of each class's run."""
    las = config.las
    moved: Ranked = []
    for start, end in _sunk_runs(ranked):
        for key, job in ranked[start:end]:
            if _starving(job, now, las):
                moved.append(((key[0] - key[0] % QUEUES, key[1], key[2]), job))
    if not moved:
        return ranked
    ids = {job.id for _, job in moved}
    out = [entry for entry in ranked if entry[1].id not in ids]
    out.extend(moved)
    out.sort(key=_KEY)
    return out


def pending_level(job: PendingJob, now: datetime, config: SchedulerConfig) -> tuple[int, float] | None:
    """A waiting job displaces from its queue (0 when it starves) running jobs whose key at that
    queue (``running_keys``) has come: now. In the last queue it displaces nobody."""
    las = config.las
    queue = 0 if _starving(job, now, las) else queue_of(job.attained, job.spec.total_gpus, job.spec.max_runtime_s, las)
    if queue >= len(las.thresholds):
        return None
    return (queue, now.timestamp())


def running_keys(job: RunningJob, config: SchedulerConfig) -> tuple[float, ...]:
    """Per queue q, when a waiting job of queue q may displace ``job``: once it has passed the
    threshold that puts it below q, and has run ``min_run_s`` (never, where its ``--max-runtime``
    keeps it above that threshold, or where it has no checkpoint and ``checkpointed_only``)."""
    las = config.las
    assert job.started_at is not None
    start, gpus = job.started_at.timestamp(), job.spec.total_gpus
    ceiling = len(las.thresholds)
    if las.checkpointed_only and job.spec.checkpoint_dir is None:
        ceiling = 0  # it would start over: never displaced
    if job.spec.max_runtime_s is not None:  # it never passes a threshold its whole run stays below
        ceiling = min(ceiling, bisect_left(las.thresholds, job.spec.max_runtime_s * gpus))
    ran_before = job.attained / gpus if gpus > 0 else 0.0
    earliest = start + max(las.min_run_s, las.min_run_share * ran_before)
    keys = []
    for queue, threshold in enumerate(las.thresholds):
        if queue >= ceiling or gpus <= 0:
            keys.append(math.inf)
        else:
            keys.append(max(earliest, start + max(0.0, threshold - job.attained) / gpus))
    return tuple(keys)


@lru_cache(maxsize=32)
def _order(las: LasConfig) -> JobOrder:
    """One function per configuration, so the queue's order is kept from cycle to cycle
    (``CycleMemory.in_order`` keeps keys while the order is the same object)."""
    if len(las.thresholds) >= QUEUES or list(las.thresholds) != sorted(las.thresholds):
        raise InvalidInput(f"las thresholds must be ascending and fewer than {QUEUES}: {las.thresholds}")

    def key(job: PendingJob) -> tuple[int, float, int]:
        spec = job.spec
        queue = queue_of(job.attained, spec.total_gpus, spec.max_runtime_s, las)
        return (-spec.priority.rank * QUEUES + queue, job.submitted_at.timestamp(), job.id)

    return key


def _starving(job: PendingJob, now: datetime, las: LasConfig) -> bool:
    if job.attained <= 0:
        return False
    since = job.waiting_since or job.submitted_at
    ran = job.attained / max(job.spec.total_gpus, 1e-9)
    return (now - since).total_seconds() > las.promote_after * ran


def _sunk_runs(ranked: Ranked) -> list[tuple[int, int]]:
    """(start, end) of each class's entries past queue 0, found by bisection on the sorted keys."""
    runs = []
    start = 0
    while start < len(ranked):
        first = ranked[start][0][0]
        base = first - first % QUEUES  # this class's queue 0
        end = bisect_left(ranked, base + QUEUES, lo=start, key=lambda e: e[0][0])
        sunk = bisect_left(ranked, base + 1, lo=start, hi=end, key=lambda e: e[0][0])
        if sunk < end:
            runs.append((sunk, end))
        start = end
    return runs
