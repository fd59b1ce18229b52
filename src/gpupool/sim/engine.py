"""The discrete-event engine: arrivals and completions on a virtual clock, and at every event
the same ``schedule()`` the head runs. There is no ``if simulating`` in the scheduler: only the
snapshot's source differs.

A preempted job goes back to the queue at once (the head would give it a grace period) and, as no
checkpoint is modelled, later runs its whole duration again.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.sim.trace import TraceJob

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
ROUNDS_PER_EVENT = 3  # preemptions free GPUs at once: schedule again at the same instant


@dataclass(slots=True)
class JobRun:
    trace: TraceJob
    first_start: float | None = None
    start: float | None = None
    finish: float | None = None
    preemptions: int = 0


@dataclass(slots=True)
class SimResult:
    runs: dict[int, JobRun]
    timeline: list[tuple[float, float, int]] = field(default_factory=list)  # (t, GPUs allocated, queue length)
    capacity: int = 0
    projects: tuple[Project, ...] = ()
    allocation_by_project: dict[str, float] = field(default_factory=dict)  # GPU-seconds held


def simulate(
    jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    projects: Sequence[Project] = (),
    config: SchedulerConfig | None = None,
) -> SimResult:
    config = config or SchedulerConfig()
    runs = {i + 1: JobRun(job) for i, job in enumerate(jobs)}
    arrivals = sorted(runs, key=lambda i: (runs[i].trace.submit_time, i))
    pending: dict[int, PendingJob] = {}
    running: dict[int, RunningJob] = {}
    ends: list[tuple[float, int]] = []  # (end time, job id); entries of preempted runs go stale
    end_of: dict[int, float] = {}  # the current run's end, per running job
    result = SimResult(runs, capacity=sum(len(n.gpus) for n in nodes), projects=tuple(projects))
    next_arrival = 0
    now = runs[arrivals[0]].trace.submit_time if arrivals else 0.0
    while next_arrival < len(arrivals) or ends:
        upcoming = [
            t
            for t in (
                runs[arrivals[next_arrival]].trace.submit_time if next_arrival < len(arrivals) else None,
                ends[0][0] if ends else None,
            )
            if t is not None
        ]
        t = min(upcoming)
        _account(result, running, now, t)
        now = t
        while ends and ends[0][0] <= now:
            end, job_id = heapq.heappop(ends)
            if end_of.get(job_id) == end:  # else the entry of a run that was preempted: stale
                del end_of[job_id], running[job_id]
                runs[job_id].finish = now
        while next_arrival < len(arrivals) and runs[arrivals[next_arrival]].trace.submit_time <= now:
            job_id = arrivals[next_arrival]
            trace = runs[job_id].trace
            pending[job_id] = PendingJob(job_id, trace.spec, EPOCH + timedelta(seconds=trace.submit_time))
            next_arrival += 1
        for _ in range(ROUNDS_PER_EVENT):
            if not _cycle(runs, pending, running, ends, end_of, nodes, projects, config, now):
                break
        held = sum(r.spec.total_gpus for r in running.values())
        result.timeline.append((now, held, len(pending)))
    return result


def _cycle(
    runs: dict[int, JobRun],
    pending: dict[int, PendingJob],
    running: dict[int, RunningJob],
    ends: list[tuple[float, int]],
    end_of: dict[int, float],
    nodes: Sequence[Node],
    projects: Sequence[Project],
    config: SchedulerConfig,
    now: float,
) -> bool:
    """One scheduling cycle at ``now``; True when it preempted (so GPUs came free this instant)."""
    snapshot = Snapshot(
        EPOCH + timedelta(seconds=now), tuple(nodes), tuple(running.values()), tuple(pending.values()), tuple(projects)
    )
    result = schedule(snapshot, config)
    for start in result.starts:
        job = pending.pop(start.job_id)
        run = runs[start.job_id]
        run.start = now
        run.first_start = now if run.first_start is None else run.first_start
        running[job.id] = RunningJob(job.id, job.spec, start.placements, EPOCH + timedelta(seconds=now))
        if run.trace.duration is not None:
            end_of[job.id] = now + run.trace.duration
            heapq.heappush(ends, (end_of[job.id], job.id))
    for victim in result.preemptions:
        stopped = running.pop(victim.job_id, None)
        if stopped is None:
            continue
        end_of.pop(victim.job_id, None)
        run = runs[victim.job_id]
        run.preemptions += 1
        run.start = None
        pending[victim.job_id] = PendingJob(
            victim.job_id, stopped.spec, EPOCH + timedelta(seconds=run.trace.submit_time)
        )
    return bool(result.preemptions)


def _account(result: SimResult, running: dict[int, RunningJob], since: float, until: float) -> None:
    span = until - since
    if span <= 0:
        return
    for job in running.values():
        result.allocation_by_project[job.spec.project] = (
            result.allocation_by_project.get(job.spec.project, 0.0) + job.spec.total_gpus * span
        )
