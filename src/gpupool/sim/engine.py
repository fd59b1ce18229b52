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

Elastic jobs (issue 35) start at whatever width the cycle placed them on; a cycle's ``GrowJob``
adds workers to a running one and its ``ShrinkJob`` takes some away at once (no grace, as a
preemption here). Each running job's progress is kept in segments of constant rate
(``elastic.Progress``), so a resize recomputes its end from the work left at the speed of its
new width (``elastic.speed``); its GPU-seconds, and the pool's utilisation, follow its width.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from gpupool.domain.decisions import CycleResult, StartJob
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.domain.tree import ancestors
from gpupool.scheduler import CycleMemory, SchedulerConfig, schedule
from gpupool.scheduler.fair_share import fair_shares
from gpupool.sim import elastic
from gpupool.sim.power import PowerConfig, PowerSim
from gpupool.sim.trace_job import TraceJob

Schedule = Callable[..., CycleResult]  # ``schedule(snapshot, config, memory=..., explain_pending=...)``

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
    elastic_alpha: float = elastic.DEFAULT_ALPHA,
    decide: Schedule | None = None,
) -> SimResult:
    """``memory``: the scheduler's carried-over state (tests pass one that checks itself).
    ``give_up=(wait_s, jobs)``: stop as soon as that many jobs have waited longer than ``wait_s``
    (the answer to "is a queue-time percentile below the target?" is then known to be no).
    ``elastic_alpha``: the exponent of an elastic job's speed at a width below its maximum
    (``elastic.speed``). ``decide``: what makes the decisions, ``schedule`` when None (tests
    hand in scripted cycles)."""
    replay = _Replay(jobs, nodes, projects, config or SchedulerConfig(), memory or CycleMemory(), give_up)
    replay.alpha = elastic_alpha
    replay.decide = decide
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
        self.progress: dict[int, elastic.Progress] = {}  # per running job: its current run's work
        self.alpha = elastic.DEFAULT_ALPHA
        self.narrow: set[int] = set()  # running elastic jobs below their maximum: a cycle may grow them
        self.decide: Schedule | None = None
        self.nodes = tuple(nodes)
        self.projects = tuple(projects)
        self.config = config
        self.memory = memory
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.ends: list[tuple[float, int]] = []  # (end time, job id); entries of preempted runs go stale
        self.end_of: dict[int, float] = {}  # the current run's end, per running job
        self.moved: set[tuple[float, int]] = set()  # ends a resize moved: no event (a preempted run's still are)
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
        while self._more(next_arrival):
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
                    self.progress.pop(job_id, None)
                    runs[job_id].finish = now
                    self.wanted[runs[job_id].trace.spec.project] -= asked(runs[job_id].trace.spec)
            while next_arrival < len(arrivals) and arrive[arrivals[next_arrival]] <= now:
                job_id = arrivals[next_arrival]
                trace = runs[job_id].trace
                at = EPOCH + timedelta(seconds=trace.submit_time)
                self.pending[job_id] = PendingJob(
                    job_id, trace.spec, at, owner=trace.user, oracle_remaining_s=trace.duration
                )
                self.wanted[trace.spec.project] += asked(trace.spec)
                next_arrival += 1
            for _ in range(ROUNDS_PER_EVENT):
                if not self._cycle(now):
                    break
            self.result.timeline.append((now, sum(self.held.values()), len(self.pending)))
            if self.give_up is not None and self._hopeless(now, len(self.result.timeline)):
                self.result.stopped_early = True
                break
        return self.result

    def _more(self, next_arrival: int) -> bool:
        """Whether an event is left, once the ends that resizes moved are dropped from the front."""
        ends = self.ends
        while ends and ends[0] in self.moved:
            self.moved.discard(heapq.heappop(ends))
        return next_arrival < len(self.arrivals) or bool(ends) or bool(self.wakes)

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
        """One scheduling cycle at ``now``; True when it preempted or shrank (so GPUs came free
        this instant). With nothing waiting, one runs only while an elastic job may grow."""
        if not self.pending and not self.narrow:
            return False
        at = EPOCH + timedelta(seconds=now)
        snapshot = Snapshot(at, self.nodes, tuple(self.running.values()), tuple(self.pending.values()), self.projects)
        decide = schedule if self.decide is None else self.decide  # (looked up now: tests spy on it)
        result = decide(snapshot, self.config, memory=self.memory, explain_pending=False)
        if result.wake_at is not None:
            wake = (result.wake_at - EPOCH).total_seconds()
            if wake > now and wake not in self.wakes:  # (a handful at most)
                heapq.heappush(self.wakes, wake)
        for start in result.starts:
            self._start(start, now, at)
        for grow in result.grows:
            if (grown := self.running.get(grow.job_id)) is not None:
                self._resize(grown, grown.placements + grow.placements, now)
        for shrink in result.shrinks:
            if (shrunk := self.running.get(shrink.job_id)) is not None:
                leaving = set(shrink.workers)
                self._resize(shrunk, tuple(p for p in shrunk.placements if p.worker not in leaving), now)
        for victim in result.preemptions:
            self._requeue(victim.job_id, now, at)
        # An elastic job started below its most may grow into GPUs still free: the next cycle, as
        # at the head, where it comes a cycle later; here at the same instant.
        started_narrow = any(s.job_id in self.narrow for s in result.starts)
        return bool(result.preemptions or result.shrinks or started_narrow)

    def _start(self, start: StartJob, now: float, at: datetime) -> None:
        speed = 1.0
        if self.power is not None:
            admitted = self.power.admit(start.job_id, self.pending[start.job_id].spec, start.placements)
            if admitted is None:
                return  # waits for power: offered again at the next event
            speed = admitted
        job = self.pending.pop(start.job_id)
        run = self.runs[start.job_id]
        run.start = now
        if run.first_start is None:
            run.first_start = now
            if self.give_up is not None and now - run.trace.submit_time > self.give_up[0]:
                self.late += 1
        width = len(start.placements)
        gpus = job.spec.gpus * width
        rate = speed * elastic.speed(job.spec, width, self.alpha)
        self.progress[job.id] = elastic.Progress(now, speed, rate, gpus)
        self.running[job.id] = RunningJob(
            job.id,
            job.spec,
            start.placements,
            at,
            owner=job.owner,
            attained=run.attained,
            oracle_end=None,
            next_worker=width if job.spec.elastic else 0,  # as the store counts its workers' numbers
        )
        self.held[job.spec.project] += gpus
        self._reckon_end(job.id, now)
        if width < job.spec.most_workers:
            self.narrow.add(job.id)

    def _requeue(self, job_id: int, now: float, at: datetime) -> None:
        """A preempted job back in the queue, with what its run did (its GPU-seconds, and its work
        if it checkpoints)."""
        stopped = self._stop(job_id)
        if stopped is None:
            return
        run = self.runs[job_id]
        run.preemptions += 1
        run.start = None
        progress = self.progress.pop(job_id)
        progress.advance(now)
        run.attained += progress.gpu_s
        work = progress.work
        run.done = run.done + max(0.0, work - RESUME_LOSS_S) if stopped.spec.checkpoint_dir else 0.0
        duration = run.trace.duration
        self.pending[job_id] = PendingJob(
            job_id,
            stopped.spec,
            EPOCH + timedelta(seconds=run.trace.submit_time),
            owner=stopped.owner,
            attained=run.attained,
            waiting_since=at,
            oracle_remaining_s=None if duration is None else duration - run.done,
        )

    def _resize(self, job: RunningJob, placements: tuple[Placement, ...], now: float) -> None:
        """A running elastic job on ``placements`` from ``now``: its GPUs, speed and end follow."""
        spec, width = job.spec, len(placements)
        if not spec.workers <= width <= spec.most_workers or width == len(job.placements):
            raise ValueError(
                f"job {job.id} ({spec.workers_text} workers) cannot go from {len(job.placements)} to {width}"
            )
        progress = self.progress[job.id]
        progress.advance(now)
        gpus = spec.gpus * width
        self.held[spec.project] += gpus - progress.gpus
        progress.gpus = gpus
        progress.rate = progress.power * elastic.speed(spec, width, self.alpha)
        numbered = max(job.next_worker, 1 + max(p.worker for p in placements))  # a stopped one's stays used
        self.running[job.id] = replace(job, placements=placements, next_worker=numbered)
        self._reckon_end(job.id, now)
        if width < spec.most_workers:
            self.narrow.add(job.id)
        else:
            self.narrow.discard(job.id)

    def _reckon_end(self, job_id: int, now: float) -> None:
        """A running job's end from the work it has left at its rate now (none: it never ends)."""
        run, progress, job = self.runs[job_id], self.progress[job_id], self.running[job_id]
        if run.trace.duration is None:
            return
        left = max(0.0, run.trace.duration - run.done - progress.work) / progress.rate
        end = now + left
        if job_id in self.end_of:
            self.moved.add((self.end_of[job_id], job_id))
        self.running[job_id] = replace(job, oracle_end=EPOCH + timedelta(seconds=now) + timedelta(seconds=left))
        self.end_of[job_id] = end
        heapq.heappush(self.ends, (end, job_id))

    def _stop(self, job_id: int) -> RunningJob | None:
        stopped = self.running.pop(job_id, None)
        if stopped is not None:
            self.end_of.pop(job_id, None)
            self.narrow.discard(job_id)
            self.held[stopped.spec.project] -= stopped.spec.gpus * len(stopped.placements)
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


def asked(spec: JobSpec) -> float:
    """GPUs a job asks for at most (an elastic job's maximum): its part of its project's demand."""
    return spec.gpus * spec.most_workers


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
