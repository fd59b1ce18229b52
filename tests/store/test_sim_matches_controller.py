"""The simulator and the live controller make the same decisions for the same snapshot sequence.

Both call the one ``schedule()``; what could differ is the input each builds (the simulator from
its event queue, the controller from the store) and what each does with the result (the simulator
updates its dicts, the controller writes placements, launches workers and marks victims). So:

1. The simulator replays a small trace (three projects with quotas, so borrowing, reclaim and
   priority preemption all happen; gangs, fractional GPUs, pinned cores, jobs preempted and
   restarted). A spy on its ``schedule`` records every snapshot and decision.
2. A real store and a real ``Controller`` then live through the same history. Between two of the
   simulator's cycles the test does only what the outside world does to a head: it submits the
   jobs that arrived (through the job service, as the API does) and reports the exits of workers
   (exit 0 for a job the simulator finished, killed for one it preempted) through a fake
   executor. Everything else (placements, requeues, start times) is the controller's own work.
3. At every cycle the snapshot the controller loaded from the store must equal the simulator's,
   it must schedule with the same config, and it must decide, and apply, the same starts and
   preemptions.

Where the two are meant to differ, the controller is set up to match the simulator's model:
the simulator requeues a victim at once (no kill grace: the fake executor reports its workers
gone before the next cycle), keeps no usage history for fair share (the controller's usage
accrual is off), and schedules at every event (every controller tick is a full cycle).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from gpupool.clock import Clock, FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.controller.steps import cycle as live_cycle
from gpupool.domain.decisions import CycleResult
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.launch import LaunchRequest, Stats, WorkerExit, WorkerHandle
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import Snapshot
from gpupool.domain.telemetry import GpuSample
from gpupool.domain.worker_env import Rendezvous
from gpupool.node.gpu.simulated import SimulatedSensors
from gpupool.scheduler import SchedulerConfig
from gpupool.scheduler.config import LasConfig
from gpupool.scheduler.policies import preset
from gpupool.sim import engine
from gpupool.sim.cluster import uniform
from gpupool.sim.trace import TraceJob
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext

ADMIN = Principal("admin", "admin")
USER = Principal("alice", "user")
KILLED = -15  # what a worker stopped by SIGTERM reports


def job(name: str, at: float, duration: float, project: str, **spec: Any) -> TraceJob:
    """Every job is submitted by ``USER``: the simulator's owner is the trace's user."""
    return TraceJob(name, at, duration, JobSpec.create(command=("sim",), name=name, project=project, **spec), USER.user)


@dataclass(frozen=True, slots=True)
class Scenario:
    trace: list[TraceJob]  # sorted by submit time, so the simulator's ids (1, 2, ... in list order) are the store's
    projects: list[Project]  # by name, as the store lists them
    nodes: list[Node]  # by name, as the store lists them
    config: SchedulerConfig = field(default_factory=SchedulerConfig)


MIXED = Scenario(
    trace=[
        job("a1", 0, 600, "a", gpus=2, cpus=2, memory="4G"),
        job("a2", 0, 600, "a", gpus=2),
        job("a3", 5, 600, "a", gpus=2),
        job("a4", 5, 600, "a", gpus=2, workers=2),  # a gang across two nodes, borrowing beyond a's quota
        job("b1", 10, 100, "b", gpus=3, cpus=4),  # b reclaims its quota from a
        job("c1", 20, 40, "c", gpus=0.25, cpus=1),  # fractions share one GPU
        job("c2", 20, 40, "c", gpus=0.5),
        job("c3", 20, 80, "c", gpus=0.25),
        job("a5", 30, 60, "a", gpus=1, priority="interactive"),
        job("b2", 40, 200, "b", gpus=2, workers=2, max_runtime_s=400),  # a gang that waits
        job("a6", 45, 30, "a", gpus=1, max_runtime_s=100),
        job("c4", 50, 30, "c", gpus=1, priority="inference"),  # displaces c's own train jobs
        job("b3", 60, 50, "b", gpus=0.5, priority="interactive"),
        job("a7", 70, 20, "a", gpus=4),
    ],
    projects=[Project.create("a", 4), Project.create("b", 6, limit=8), Project.create("c", 2, weight=2)],
    nodes=uniform(3, 4),
)
# Two borrowers start in the same cycle, b's job (id 3) before a's (id 2) by fair share; then c
# reclaims one GPU. Both are "the most recently started", and the scheduler breaks the tie by the
# order of ``snapshot.running``: the simulator's is start order (3, 2), the store's is by id (2, 3).
SAME_START = Scenario(
    trace=[
        job("a1", 0, 1000, "a", gpus=2),
        job("a2", 10, 1000, "a", gpus=1),
        job("b1", 10, 1000, "b", gpus=1),
        job("c1", 20, 100, "c", gpus=1),
    ],
    projects=[Project.create("a", 0), Project.create("b", 0), Project.create("c", 2)],
    nodes=uniform(1, 4),
)
# fifo-isolated with partitions: a, b and c own node-1, node-2 and node-3 (4 GPUs each), so the
# live head must place each project's jobs on its own node as the simulator does.
PARTITIONED = replace(
    MIXED,
    projects=[Project.create("a", 4), Project.create("b", 4), Project.create("c", 4)],
    config=preset("fifo-isolated"),
)
# The simulator keeps no fair-share usage history, and runs a cycle at every event.
SETTINGS = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf)


@dataclass(frozen=True, slots=True)
class Call:
    snapshot: Snapshot
    config: SchedulerConfig | None
    result: CycleResult


def spy_on_schedule(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[Call]:
    """Record every call ``module`` makes to ``schedule``; the real function still decides."""
    calls: list[Call] = []
    real: Callable[..., CycleResult] = module.schedule

    def recording(snapshot: Snapshot, config: SchedulerConfig | None = None, **kwargs: Any) -> CycleResult:
        result = real(snapshot, config, **kwargs)
        calls.append(Call(snapshot, config, result))
        return result

    monkeypatch.setattr(module, "schedule", recording)
    return calls


class FakeExecutor:
    """Serves fixed nodes and launches nothing: a worker runs until the test says it exited."""

    def __init__(self, nodes: Iterable[Node], clock: Clock | None = None) -> None:
        self._nodes = list(nodes)
        self.launched: list[tuple[str, LaunchRequest]] = []
        self._exits: dict[tuple[int, int, int], WorkerExit] = {}
        self.clock = clock  # with a clock, telemetry is simulated readings at its time; without, none
        self.sensors = SimulatedSensors()
        self.sampled: list[tuple[str, frozenset[int]]] = []
        self.forgotten: list[tuple[str, tuple[int, ...]]] = []
        self.protected: dict[str, tuple[tuple[str, int, int], ...]] = {}  # the ports walled from each node
        self.taken_ports: set[int] = set()
        self.logs: dict[str, dict[int, int]] = {}  # node -> job id -> bytes of its logs there (the test sets them)
        self.emptied: list[tuple[str, tuple[int, ...], str]] = []  # ports something else listens on: no node walls them
        self.started_at: dict[str, float] = {}  # run dir -> when its worker was launched (its CPU time)

    def exit(self, job_id: int, exit_code: int) -> None:
        """Every worker of the job's latest attempt exits with ``exit_code``."""
        attempt = max(r.attempt for _, r in self.launched if r.job_id == job_id)
        for _, r in self.launched:
            if (r.job_id, r.attempt) == (job_id, attempt):
                self._exits[(r.job_id, r.attempt, r.worker)] = WorkerExit(exit_code)

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def rendezvous(self, node: str) -> Rendezvous:
        return Rendezvous(master_addr=node, master_port=29500)

    @staticmethod
    def key(handle: WorkerHandle) -> tuple[int, int, int]:
        """(job id, attempt, worker) of a handle this executor gave: its run dir says them, as a
        node's does (``.../job-J/attempt-A/worker-W``)."""
        job, attempt, worker = (int(p.split("-")[1]) for p in handle.run_dir.split("/")[-3:])
        return job, attempt, worker

    def launch(self, node: str, request: LaunchRequest) -> WorkerHandle:
        self.launched.append((node, request))
        run_dir = f"fake/job-{request.job_id}/attempt-{request.attempt}/worker-{request.worker}"
        self.started_at[run_dir] = self.clock.now().timestamp() if self.clock is not None else 0.0
        # A port is said as a node's runtime says one it walled for the job.
        port = request.port if request.port and request.port not in self.taken_ports else None
        return WorkerHandle(0, run_dir, job=request.job_id if port else None, port=port)

    def find(self, node: str, job_id: int, attempt: int, worker: int) -> WorkerHandle | None:
        return None

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None:
        return self._exits.get(self.key(handle))

    def kill(self, node: str, handle: WorkerHandle) -> None:
        pass  # the test reports a victim's exit itself: the simulator stops victims at once

    def read_log(self, node: str, job_id: int, worker: int, offset: int) -> bytes:
        return b""

    def telemetry(self, node: str, busy: Collection[int]) -> list[GpuSample]:
        self.sampled.append((node, frozenset(busy)))
        if self.clock is None:
            return []
        gpus = next((n.gpus for n in self.nodes() if n.name == node), ())
        return self.sensors.read(node, gpus, busy, self.clock.now())

    def usage(self, node: str, handles: Sequence[WorkerHandle]) -> list[Stats | None]:
        """With a clock: each worker holds 256 MiB (512 at its peak) and keeps one core busy."""
        if self.clock is None:
            return [None] * len(handles)
        now = self.clock.now().timestamp()
        return [Stats(256 * 2**20, 512 * 2**20, now - self.started_at.get(h.run_dir, now)) for h in handles]

    def log_sizes(self, node: str) -> dict[int, int]:
        return dict(self.logs.get(node, {}))

    def empty_logs(self, node: str, job_ids: Sequence[int], note: str) -> int:
        kept = self.logs.setdefault(node, {})
        freed = sum(max(0, kept.get(j, 0) - len(note)) for j in job_ids if j in kept)
        kept.update({j: min(kept[j], len(note)) for j in job_ids if j in kept})
        self.emptied.append((node, tuple(job_ids), note))
        return freed

    def protect(self, node: str, endpoints: Sequence[tuple[str, int, int]]) -> bool:
        self.protected[node] = tuple(endpoints)
        return True

    def forget(self, node: str, job_ids: Sequence[int]) -> int:
        self.forgotten.append((node, tuple(job_ids)))
        return len(job_ids)

    def close(self) -> None:
        pass


def set_clock(clock: FakeClock, when: datetime) -> None:
    clock.advance((when - clock.now()).total_seconds())
    assert clock.now() == when


def by_id(snapshot: Snapshot) -> Snapshot:
    """The store lists running and pending jobs by id and projects by name; the simulator in the
    order it met them. The scheduler sorts the queue (priority, submit time, id) and the projects
    itself; running jobs it sorts by start time, so there the orders agree but for jobs started at
    the same instant (see ``test_a_tie_in_start_time_is_broken_alike``). The oracle fields (a
    job's remaining time) are the one thing only the simulator knows, and only ``srtf-oracle``
    reads them: they are left out."""
    return replace(
        snapshot,
        running=tuple(sorted((replace(r, oracle_end=None) for r in snapshot.running), key=lambda r: r.id)),
        pending=tuple(sorted((replace(p, oracle_remaining_s=None) for p in snapshot.pending), key=lambda p: p.id)),
        projects=tuple(sorted(snapshot.projects, key=lambda p: p.name)),
    )


def simulate_recording(monkeypatch: pytest.MonkeyPatch, scenario: Scenario) -> list[Call]:
    calls = spy_on_schedule(monkeypatch, engine)
    engine.simulate(scenario.trace, scenario.nodes, scenario.projects, scenario.config)
    return calls


def replay_on_controller(monkeypatch: pytest.MonkeyPatch, db: Database, scenario: Scenario) -> list[Call]:
    """Live through the simulator's history with a real controller over ``db``; check every cycle."""
    sim_calls = simulate_recording(monkeypatch, scenario)
    live_calls = spy_on_schedule(monkeypatch, live_cycle)
    trace = scenario.trace

    clock = FakeClock(engine.EPOCH)
    executor = FakeExecutor(scenario.nodes)
    controller = Controller(db, executor, clock, scenario.config, SETTINGS)
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:  # what Controller.start() does before its thread runs the ticks
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    for project in scenario.projects:  # open to everyone: who may submit is not what this compares
        project_service.set_project(ctx, project, ADMIN, everyone=True)

    submitted = 0
    previous: Call | None = None
    for cycle, sim in enumerate(sim_calls):
        now = sim.snapshot.now
        # The world between two cycles: workers of jobs the simulator no longer runs exited ...
        if previous is not None:
            held = {r.id for r in previous.snapshot.running} | {s.job_id for s in previous.result.starts}
            victims = {p.job_id for p in previous.result.preemptions}
            for job_id in sorted(held - {r.id for r in sim.snapshot.running}):
                executor.exit(job_id, KILLED if job_id in victims else 0)
        # ... and the jobs that arrived were submitted, each at its own time.
        while submitted < len(trace) and engine.EPOCH + timedelta(seconds=trace[submitted].submit_time) <= now:
            set_clock(clock, engine.EPOCH + timedelta(seconds=trace[submitted].submit_time))
            by = Principal(trace[submitted].user, USER.role)  # the simulator's owner
            record = job_service.submit(ctx, trace[submitted].spec, by)
            submitted += 1
            assert record.id == submitted, "the store numbers jobs as the simulator does"
        set_clock(clock, now)
        launched_before = len(executor.launched)

        result = controller.tick()

        where = f"cycle {cycle} at t={(now - engine.EPOCH).total_seconds():g}s"
        assert result is not None and len(live_calls) == cycle + 1, f"{where}: the controller did not schedule"
        live = live_calls[-1]
        assert live.config == sim.config == scenario.config, f"{where}: scheduled with another config"
        assert by_id(live.snapshot) == by_id(sim.snapshot), f"{where}: the store's snapshot differs"
        assert live.result.starts == sim.result.starts, f"{where}: different starts: {ids(live)} vs {ids(sim)}"
        assert live.result.preemptions == sim.result.preemptions, (
            f"{where}: different preemptions: {ids(live)} vs {ids(sim)}"
        )
        assert_applied(db, executor, launched_before, sim.result, where)
        previous = sim
    assert len(live_calls) == len(sim_calls)
    return sim_calls


def ids(call: Call) -> str:
    starts = [s.job_id for s in call.result.starts]
    victims = [(p.job_id, p.for_job) for p in call.result.preemptions]
    return f"starts {starts}, preempt (victim, for) {victims}"


def assert_applied(
    db: Database, executor: FakeExecutor, launched_before: int, decided: CycleResult, where: str
) -> None:
    """The controller carried the decisions out: placements written and launched, victims marked."""
    launched = sorted((n, r.job_id, r.worker) for n, r in executor.launched[launched_before:])
    expected = sorted((p.node, s.job_id, p.worker) for s in decided.starts for p in s.placements)
    assert launched == expected, f"{where}: launched other workers than decided"
    with db.tx() as s:
        for start in decided.starts:
            record = job_repo.get_job(s, start.job_id)
            placed = (record.state, record.placements) == (JobState.RUNNING, start.placements)
            assert placed, f"{where}: job {start.job_id} is {record.state.value} on {record.placements}"
        for victim in decided.preemptions:
            assert job_repo.job_row(s, victim.job_id).stop_reason == "preempt", (
                f"{where}: job {victim.job_id} not marked"
            )


def test_the_mixed_trace_exercises_what_the_comparison_is_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard on the trace: if a scheduler change made it trivial, the comparison would prove little."""
    calls = simulate_recording(monkeypatch, MIXED)
    starts = [s for c in calls for s in c.result.starts]
    preemptions = [p for c in calls for p in c.result.preemptions]
    project = {i + 1: j.spec.project for i, j in enumerate(MIXED.trace)}
    assert len(calls) > 10
    assert any(len(s.placements) > 1 for s in starts), "no gang started"
    assert any(p.gpu_share for s in starts for p in s.placements), "no fraction started"
    assert any(p.cpus for s in starts for p in s.placements), "no cores pinned"
    assert any(project[p.job_id] != project[p.for_job] for p in preemptions), "no reclaim"
    assert any(project[p.job_id] == project[p.for_job] for p in preemptions), "no preemption inside a project"
    assert len({s.job_id for s in starts}) < len(starts), "no preempted job restarted"
    assert any(c.snapshot.now == calls[i + 1].snapshot.now for i, c in enumerate(calls[:-1])), "no second round"


def test_the_controller_sees_and_decides_what_the_simulator_does(monkeypatch: pytest.MonkeyPatch, db: Database) -> None:
    replay_on_controller(monkeypatch, db, MIXED)


def test_a_tie_in_start_time_is_broken_alike_whatever_order_running_jobs_come_in(
    monkeypatch: pytest.MonkeyPatch, db: Database
) -> None:
    calls = replay_on_controller(monkeypatch, db, SAME_START)
    assert any(c.result.preemptions for c in calls)


def test_partitions_place_alike_on_the_controller_and_the_simulator(
    monkeypatch: pytest.MonkeyPatch, db: Database
) -> None:
    calls = replay_on_controller(monkeypatch, db, PARTITIONED)
    project = {i + 1: j.spec.project for i, j in enumerate(PARTITIONED.trace)}
    own = {"a": "node-1", "b": "node-2", "c": "node-3"}
    placed = [(project[s.job_id], p.node) for c in calls for s in c.result.starts for p in s.placements]
    assert len(placed) > 10 and all(own[name] == node for name, node in placed)


# las with a 100 GPU-second queue: the long job passes it within 25 s on 4 GPUs and, 30 s into its
# run, is displaced by each short one; requeued, the store must give it the attained GPU time and
# the time it waits since that the simulator does.
DISPLACED = Scenario(
    trace=[
        job("long", 0, 500, "a", gpus=4, checkpoint_dir="/ckpt"),
        job("short1", 60, 20, "a", gpus=2),
        job("short2", 200, 20, "a", gpus=4),
    ],
    projects=[Project.create("a", 4)],
    nodes=uniform(1, 4),
    config=replace(preset("las"), las=LasConfig(thresholds=(100.0,), min_run_s=30.0)),
)


def test_attained_service_and_displacing_alike_on_the_controller_and_the_simulator(
    monkeypatch: pytest.MonkeyPatch, db: Database
) -> None:
    calls = replay_on_controller(monkeypatch, db, DISPLACED)
    assert sum(len(c.result.preemptions) for c in calls) >= 1
    assert any(p.attained > 0 for c in calls for p in c.snapshot.pending)
