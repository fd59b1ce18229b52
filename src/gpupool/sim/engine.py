"""The discrete-event engine: arrivals and completions on a virtual clock, and at every event
the same ``schedule()`` the head runs. There is no ``if simulating`` in the scheduler: only the
snapshot's source differs.

A preempted job goes back to the queue at once (the head would give it a grace period). One with a
checkpoint directory resumes where it was, less ``RESUME_LOSS_S`` (the work since its last
checkpoint and the restore, as Tiresias assumes); one without runs its whole duration again. Either
way it keeps the GPU-seconds it received (its attained GPU time, which the ``las`` order reads), and
the replay tells the scheduler each job's remaining time only through the oracle fields of the
snapshot, which only the ``srtf-oracle`` policy reads.

With a ``PowerConfig`` (``sim/power.py``) the replay also keeps a power budget in its own
admission (a start the budget refuses stays pending; a capped one runs slower, its run time
stretched by ``1 / speed``), releases deferrable jobs at their chosen hour, and meters energy.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.domain.tree import ancestors
from gpupool.scheduler import CycleMemory, SchedulerConfig, schedule
from gpupool.scheduler.fair_share import fair_shares
from gpupool.sim.power import PowerConfig, PowerSim
from gpupool.sim.trace_job import TraceJob

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
ROUNDS_PER_EVENT = 3  # preemptions free GPUs at once: schedule again at the same instant
RESUME_LOSS_S = 60.0  # what a checkpointing job loses at each preemption


@dataclass(slots=True)
class JobRun:
    trace: TraceJob
    first_start: float | None = None
    start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    attained: float = 0.0  # GPU-seconds received by its runs before the current one
    done: float = 0.0  # seconds of its duration a resumed run need not do again


@dataclass(slots=True)
class SimResult:
    runs: dict[int, JobRun]
    timeline: list[tuple[float, float, int]] = field(default_factory=list)  # (t, GPUs allocated, queue length)
    capacity: int = 0
    projects: tuple[Project, ...] = ()
    allocation_by_project: dict[str, float] = field(default_factory=dict)  # GPU-seconds held
    # Per project, (time integral of allocated / min(fair share, demand), seconds it was defined):
    # demand is the GPUs its submitted, unfinished jobs ask for; spans where min(...) is 0 are skipped.
    entitled_by_project: dict[str, tuple[float, float]] = field(default_factory=dict)
    stopped_early: bool = False  # the replay gave up: enough jobs waited longer than the bound
    power: dict[str, Any] | None = None  # PowerSim.figures(), with a PowerConfig


def simulate(
    jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    projects: Sequence[Project] = (),
    config: SchedulerConfig | None = None,
    memory: CycleMemory | None = None,
    give_up: tuple[float, int] | None = None,
    power: PowerConfig | None = None,
) -> SimResult:
    """``memory``: the scheduler's carried-over state (tests pass one that checks itself).
    ``give_up=(wait_s, jobs)``: stop as soon as that many jobs have waited longer than ``wait_s``
    (the answer to "is a queue-time percentile below the target?" is then known to be no)."""
    replay = _Replay(jobs, nodes, projects, config or SchedulerConfig(), memory or CycleMemory(), give_up)
    if power is not None:
        replay.power = PowerSim(power, nodes)
        replay.arrive = {i: replay.power.release(i, r.trace) for i, r in replay.runs.items()}
        replay.arrivals.sort(key=lambda i: (replay.arrive[i], i))
    result = replay.run()
    if replay.power is not None:
        result.power = replay.power.figures()
    return result


class _Replay:
    """One replay's state. Per event it does work in proportion to what changed (jobs that
    arrived, ended, started), never to the number of running jobs: the scheduler's free-resource
    index is carried over in a ``CycleMemory``, and GPU-seconds are accounted per project."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        nodes: Sequence[Node],
        projects: Sequence[Project],
        config: SchedulerConfig,
        memory: CycleMemory,
        give_up: tuple[float, int] | None,
    ) -> None:
        self.runs = {i + 1: JobRun(job) for i, job in enumerate(jobs)}
        self.arrivals = sorted(self.runs, key=lambda i: (self.runs[i].trace.submit_time, i))
        self.arrive = {i: r.trace.submit_time for i, r in self.runs.items()}  # when each enters the queue
        self.power: PowerSim | None = None
        self.speed: dict[int, float] = {}  # a running job's speed under its power limit (1: full)
        self.nodes = tuple(nodes)
        self.projects = tuple(projects)
        self.config = config
        self.memory = memory
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.ends: list[tuple[float, int]] = []  # (end time, job id); entries of preempted runs go stale
        self.end_of: dict[int, float] = {}  # the current run's end, per running job
        self.wakes: list[float] = []  # times a cycle asked to run again (``CycleResult.wake_at``)
        self.held: dict[str, float] = defaultdict(float)  # GPUs held now, per project
        self.wanted: dict[str, float] = defaultdict(float)  # GPUs its submitted, unfinished jobs ask for
        self.shares = trace_shares(self.projects, [j.spec.project for j in jobs], sum(len(n.gpus) for n in nodes))
        self.result = SimResult(self.runs, capacity=sum(len(n.gpus) for n in nodes), projects=self.projects)
        self.give_up = give_up
        self.late = 0  # jobs that started after waiting longer than give_up's bound

    def run(self) -> SimResult:
        runs, arrivals, ends, wakes = self.runs, self.arrivals, self.ends, self.wakes
        next_arrival = 0
        arrive = self.arrive
        # From the first submission, also when deferral releases it later: every replay of a trace
        # meters the pool over the same start.
        now = min(arrive[arrivals[0]], min(r.trace.submit_time for r in runs.values())) if arrivals else 0.0
        while next_arrival < len(arrivals) or ends or wakes:
            t = ends[0][0] if ends else math.inf
            if next_arrival < len(arrivals):
                t = min(t, arrive[arrivals[next_arrival]])
            if wakes:
                t = min(t, wakes[0])
            self._account(t - now)
            if self.power is not None:
                self.power.account(now, t)
            now = t
            while wakes and wakes[0] <= now:
                heapq.heappop(wakes)
            while ends and ends[0][0] <= now:
                end, job_id = heapq.heappop(ends)
                if self.end_of.get(job_id) == end:  # else the entry of a run that was preempted: stale
                    self._stop(job_id)
                    runs[job_id].finish = now
                    self.wanted[runs[job_id].trace.spec.project] -= runs[job_id].trace.spec.total_gpus
            while next_arrival < len(arrivals) and arrive[arrivals[next_arrival]] <= now:
                job_id = arrivals[next_arrival]
                trace = runs[job_id].trace
                at = EPOCH + timedelta(seconds=trace.submit_time)
                self.pending[job_id] = PendingJob(
                    job_id, trace.spec, at, owner=trace.user, oracle_remaining_s=trace.duration
                )
                self.wanted[trace.spec.project] += trace.spec.total_gpus
                next_arrival += 1
            for _ in range(ROUNDS_PER_EVENT):
                if not self._cycle(now):
                    break
            self.result.timeline.append((now, sum(self.held.values()), len(self.pending)))
            if self.give_up is not None and self._hopeless(now, len(self.result.timeline)):
                self.result.stopped_early = True
                break
        return self.result

    def _hopeless(self, now: float, events: int) -> bool:
        """Enough jobs waited too long. Pending ones are counted every 256 events (a scan)."""
        assert self.give_up is not None
        wait_s, jobs = self.give_up
        if self.late >= jobs:
            return True
        if events % 256:
            return False
        waiting = sum(
            1
            for j in self.pending.values()
            if self.runs[j.id].first_start is None and now - self.runs[j.id].trace.submit_time > wait_s
        )
        return self.late + waiting >= jobs

    def _cycle(self, now: float) -> bool:
        """One scheduling cycle at ``now``; True when it preempted (so GPUs came free this instant)."""
        if not self.pending:
            return False
        at = EPOCH + timedelta(seconds=now)
        snapshot = Snapshot(at, self.nodes, tuple(self.running.values()), tuple(self.pending.values()), self.projects)
        result = schedule(snapshot, self.config, memory=self.memory, explain_pending=False)
        if result.wake_at is not None:
            wake = (result.wake_at - EPOCH).total_seconds()
            if wake > now and wake not in self.wakes:  # (a handful at most)
                heapq.heappush(self.wakes, wake)
        for start in result.starts:
            speed = 1.0
            if self.power is not None:
                admitted = self.power.admit(start.job_id, self.pending[start.job_id].spec, start.placements)
                if admitted is None:
                    continue  # waits for power: offered again at the next event
                speed = self.speed[start.job_id] = admitted
            job = self.pending.pop(start.job_id)
            run = self.runs[start.job_id]
            run.start = now
            if run.first_start is None:
                run.first_start = now
                if self.give_up is not None and now - run.trace.submit_time > self.give_up[0]:
                    self.late += 1
            left = None if run.trace.duration is None else (run.trace.duration - run.done) / speed
            end = None if left is None else at + timedelta(seconds=left)
            self.running[job.id] = RunningJob(
                job.id, job.spec, start.placements, at, owner=job.owner, attained=run.attained, oracle_end=end
            )
            self.held[job.spec.project] += job.spec.total_gpus
            if left is not None:
                self.end_of[job.id] = now + left
                heapq.heappush(self.ends, (self.end_of[job.id], job.id))
        for victim in result.preemptions:
            stopped = self._stop(victim.job_id)
            if stopped is None:
                continue
            run = self.runs[victim.job_id]
            run.preemptions += 1
            ran = now - run.start if run.start is not None else 0.0
            run.start = None
            run.attained += ran * stopped.spec.total_gpus
            work = ran * self.speed.pop(victim.job_id, 1.0)
            run.done = run.done + max(0.0, work - RESUME_LOSS_S) if stopped.spec.checkpoint_dir else 0.0
            duration = run.trace.duration
            self.pending[victim.job_id] = PendingJob(
                victim.job_id,
                stopped.spec,
                EPOCH + timedelta(seconds=run.trace.submit_time),
                owner=stopped.owner,
                attained=run.attained,
                waiting_since=at,
                oracle_remaining_s=None if duration is None else duration - run.done,
            )
        return bool(result.preemptions)

    def _stop(self, job_id: int) -> RunningJob | None:
        stopped = self.running.pop(job_id, None)
        if stopped is not None:
            self.end_of.pop(job_id, None)
            self.held[stopped.spec.project] -= stopped.spec.total_gpus
            if self.power is not None:
                self.power.stop(job_id)
        return stopped

    def _account(self, span: float) -> None:
        if span <= 0:
            return
        by_project = self.result.allocation_by_project
        for project, gpus in self.held.items():
            if gpus:
                by_project[project] = by_project.get(project, 0.0) + gpus * span
        entitled = self.result.entitled_by_project
        for project, wanted in self.wanted.items():
            bound = min(self.shares.get(project, 0.0), wanted)
            if bound > 1e-9:
                ratio, seconds = entitled.get(project, (0.0, 0.0))
                entitled[project] = (ratio + self.held.get(project, 0.0) / bound * span, seconds + span)


def trace_shares(projects: Sequence[Project], names: Sequence[str], capacity: int) -> dict[str, float]:
    """Fair shares among the projects a trace's jobs name (configured or not), as the fairness
    figures reckon them: a configured project without jobs takes no share, but a unit above one
    that has jobs does (issue 34), so that its share is split level by level as the scheduler's."""
    present = set(names) | units_above(projects, names)
    chosen = [p for p in projects if p.name in present]
    chosen += [Project(n) for n in sorted(present - {p.name for p in chosen})]
    return fair_shares(chosen, capacity)


def units_above(projects: Sequence[Project], names: Iterable[str]) -> set[str]:
    """The units above the named projects, at any depth (none in a flat list)."""
    parents = {p.name: p.parent for p in projects}
    if not any(parents.values()):
        return set()
    return {unit for name in set(names) for unit in ancestors(name, parents)}
