"""Aging (issue 34 item 5): a job that has waited ``--max-wait`` goes before every job that has
not, whatever its queue's rank or its user's load, the longest waiting first; so a stream of
favoured jobs cannot hold one back for ever (KAI #1970).

Only the order changes. Quotas and limits still refuse an aged job, and it stops nobody: once it
is first in line and does not fit, the GPUs it needs are reserved for it as they come free (the
default policy's reservation, which later jobs may only backfill around; under every policy, or
the stream it waited behind would take them again). A job's wait runs from when it last began waiting (its
requeue after a preemption, else its submission), as the least-attained order's promotion reads it.

Off when ``max_wait_s`` is 0, the default: nothing here is called and every decision is as before."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from gpupool.domain.snapshot import PendingJob


def waited_s(job: PendingJob, now: datetime) -> float:
    return (now - (job.waiting_since or job.submitted_at)).total_seconds()


def overdue(queue: Iterable[PendingJob], now: datetime, max_wait_s: float) -> tuple[list[PendingJob], datetime | None]:
    """The jobs of ``queue`` that have waited ``max_wait_s`` or longer, the longest waiting first
    (the id settles ties), and when the next of the others will have (None: no other), so that a
    cycle runs then (``CycleResult.wake_at``): aging changes the order by time alone."""
    aged: list[tuple[datetime, int, PendingJob]] = []
    wait = timedelta(seconds=max_wait_s)
    next_at: datetime | None = None
    for job in queue:
        since = job.waiting_since or job.submitted_at
        if now - since >= wait:
            aged.append((since, job.id, job))
        elif next_at is None or since + wait < next_at:
            next_at = since + wait
    aged.sort(key=lambda entry: entry[:2])
    return [job for _, _, job in aged], next_at


def note(waited: float, max_wait_s: float) -> str:
    """The clause ``gpupool why`` adds to an aged job's reason. The wait is said in whole units, so
    the clause changes at most once a minute (once an hour past an hour): the controller writes
    only reasons that changed."""
    return f"; waited {_floor(waited)}, over --max-wait {_exact(max_wait_s)}: it goes first"


def _floor(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _exact(seconds: float) -> str:
    """``--max-wait`` as typed, in the largest unit that divides it (6h, 90m, 45s)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
