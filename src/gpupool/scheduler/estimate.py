"""When will a pending job start? Replay the running jobs' expected ends through ``schedule``.

The same function the head runs decides at each expected end what starts next, so the estimate
honours gangs, quotas, fair share and backfill. A job ends at ``started_at + max_runtime_s``;
when the jobs in the way have no max runtime, there is no estimate (None), said plainly.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from datetime import datetime

from gpupool.domain.snapshot import RunningJob, Snapshot
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import schedule
from gpupool.scheduler.reservation import expected_end

MAX_STEPS = 200


def estimate_start(snapshot: Snapshot, job_id: int, config: SchedulerConfig | None = None) -> datetime | None:
    config = config or SchedulerConfig()
    now = snapshot.now
    running = {r.id: r for r in snapshot.running if not r.stopping}
    pending = {p.id: p for p in snapshot.pending}
    for _ in range(MAX_STEPS):
        current = replace(snapshot, now=now, running=tuple(running.values()), pending=tuple(pending.values()))
        result = schedule(current, config)
        for start in result.starts:
            if start.job_id == job_id:
                return now
            job = pending.pop(start.job_id)
            running[job.id] = RunningJob(job.id, job.spec, start.placements, now, owner=job.owner)
        ends = [(end, r.id) for r in running.values() if (end := expected_end(r)) is not None]
        if not ends:
            return None
        heapq.heapify(ends)
        now = max(now, ends[0][0])
        while ends and ends[0][0] <= now:
            _, ended = heapq.heappop(ends)
            running.pop(ended, None)
    return None
