"""Each user's logs together stay under ``--max-user-logs`` (issue 30): ten array tasks of one
person grew a head's data dir from 56 MB to 1 GB, kept for 30 days.

Past the cap, the logs of the user's oldest finished jobs are emptied first (each log then holds
one line that says why), until what is left fits. Running jobs' logs count but are never emptied:
``--max-log-size`` bounds each of those. Pure: the head gathers the sizes from the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

DEFAULT_MAX_USER_LOG_BYTES = 10 * 2**30  # gpupool up --max-user-logs 10G
LEAST_BYTES = 4096  # logs this small (one already emptied holds its note) are not worth emptying


@dataclass(frozen=True, slots=True)
class JobLogs:
    job_id: int
    owner: str
    size: int  # bytes of its workers' logs, on every node they ran on
    finished_at: datetime | None  # None: it has not finished


def to_empty(jobs: Iterable[JobLogs], cap: int) -> list[JobLogs]:
    """The jobs whose logs to empty so that no owner's logs pass ``cap`` bytes: per owner over
    it, finished jobs oldest first (by end, then id), only as many as it takes."""
    by_owner: dict[str, list[JobLogs]] = {}
    for job in jobs:
        by_owner.setdefault(job.owner, []).append(job)
    chosen: list[JobLogs] = []
    for owner in sorted(by_owner):
        held = by_owner[owner]
        total = sum(j.size for j in held)
        finished = sorted(
            (j for j in held if j.finished_at is not None and j.size > LEAST_BYTES),
            key=lambda j: (j.finished_at, j.job_id),
        )
        for job in finished:
            if total <= cap:
                break
            chosen.append(job)
            total -= job.size
    return chosen
