"""Steady-state cycles for ``scheduler_cycle.py``: the head's cycle after the first one.

The head keeps a ``CycleMemory`` between cycles and each snapshot differs from the last by a
handful of jobs. ``advance`` turns a snapshot and the cycle's result into the next snapshot the
way the controller's world does: started jobs run, preempted ones are stopping (and gone a cycle
later), a few running jobs end and a few new jobs arrive. ``fresh=True`` rebuilds every node,
running job and placement as new, equal objects, as the head's ``load_snapshot`` reads them from
the database each cycle (the simulator reuses its objects: ``fresh=False``).
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from gpupool.domain.decisions import CycleResult
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.scheduler import CycleMemory, SchedulerConfig, schedule

CYCLE_GAP = timedelta(seconds=10)


@dataclass
class Steady:
    cold_s: list[float]  # cold cycles on the last timed snapshot
    steady_s: list[float]  # each timed cycle, with the carried memory
    starts: list[int]  # jobs each timed cycle started
    preemptions: list[int]
    same_as_cold: bool  # the last timed cycle's result equals a cold cycle's on its snapshot
    rebuilds: int  # index rebuilds during the timed cycles (0: every one was incremental)


def advance(
    snapshot: Snapshot,
    result: CycleResult,
    rng: random.Random,
    arrivals: Callable[[int, int], list[PendingJob]],
    *,
    changes: int,
    next_id: int,
    fresh: bool,
) -> Snapshot:
    """The next cycle's snapshot: ``changes`` running jobs end and ``changes`` new ones arrive."""
    now = snapshot.now + CYCLE_GAP
    pending = {j.id: j for j in snapshot.pending}
    running = {r.id: r for r in snapshot.running if not r.stopping}  # stopping ones have exited by now
    for victim in result.preemptions:
        if victim.job_id in running:
            running[victim.job_id] = replace(running[victim.job_id], stopping=True)
    for start in result.starts:
        job = pending.pop(start.job_id)
        running[job.id] = RunningJob(job.id, job.spec, start.placements, snapshot.now, owner=job.owner)
    ending = [r.id for r in running.values() if not r.stopping]
    for job_id in rng.sample(ending, min(changes, len(ending))):
        del running[job_id]
    for job in arrivals(changes, next_id):
        pending[job.id] = replace(job, submitted_at=now)
    nodes, jobs, waiting = snapshot.nodes, tuple(running.values()), tuple(pending.values())
    if fresh:
        nodes = tuple(replace(n, gpus=tuple(replace(g) for g in n.gpus)) for n in nodes)
        jobs = tuple(replace(r, placements=tuple(replace(p) for p in r.placements)) for r in jobs)
        waiting = tuple(replace(j) for j in waiting)
    return replace(snapshot, now=now, nodes=nodes, running=jobs, pending=waiting)


def run_steady(
    snapshot: Snapshot,
    config: SchedulerConfig,
    arrivals: Callable[[int, int], list[PendingJob]],
    *,
    warmup: int,
    cycles: int,
    changes: int,
    fresh: bool,
    seed: int,
    cold_repeats: int = 3,
) -> Steady:
    """A cold first cycle and ``warmup`` cycles (the preemption wave the first one starts settles),
    then ``cycles`` timed ones. Building each snapshot is not timed."""
    rng = random.Random(seed)
    memory = CycleMemory()
    next_id = max((j.id for j in (*snapshot.pending, *snapshot.running)), default=0) + 1
    result = schedule(snapshot, config, memory=memory)
    times: list[float] = []
    starts: list[int] = []
    preemptions: list[int] = []
    rebuilds = 0
    for k in range(warmup + cycles):
        snapshot = advance(snapshot, result, rng, arrivals, changes=changes, next_id=next_id, fresh=fresh)
        next_id += changes
        if k == warmup:
            rebuilds = memory.rebuilds
        gc.collect()
        t0 = time.perf_counter()
        result = schedule(snapshot, config, memory=memory)
        if k >= warmup:
            times.append(time.perf_counter() - t0)
            starts.append(len(result.starts))
            preemptions.append(len(result.preemptions))
    rebuilds = memory.rebuilds - rebuilds
    cold: list[float] = []
    cold_result = None
    for _ in range(cold_repeats):
        gc.collect()
        t0 = time.perf_counter()
        cold_result = schedule(snapshot, config)
        cold.append(time.perf_counter() - t0)
    return Steady(cold, times, starts, preemptions, cold_result == result, rebuilds)


def summary(steady: Steady) -> dict[str, Any]:
    return {
        "steady_s": {"median": statistics.median(steady.steady_s), "min": min(steady.steady_s), "all": steady.steady_s},
        "cold_s": {"median": statistics.median(steady.cold_s), "min": min(steady.cold_s)},
        "starts_per_cycle": steady.starts,
        "preemptions_per_cycle": steady.preemptions,
        "same_as_cold": steady.same_as_cold,
        "rebuilds": steady.rebuilds,
    }
