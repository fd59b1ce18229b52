"""Replaying a simulator run on a real controller and store, cycle by cycle, for the parity tests
(tests/controller/test_sim_matches_controller.py says why and how). A ``Scenario`` is a trace,
projects, nodes and a scheduler config; ``replay_on_controller`` lives through the simulator's
history with a real ``Controller`` and checks every cycle's snapshot, decisions and how they
were applied.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.controller.steps import cycle as live_cycle
from gpupool.domain.decisions import CycleResult
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler import SchedulerConfig
from gpupool.sim import engine
from gpupool.sim.trace import TraceJob
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases import jobs as job_service
from gpupool.usecases import projects as project_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import ADMIN, KILLED, USER, FakeExecutor


def job(name: str, at: float, duration: float, project: str, **spec: Any) -> TraceJob:
    """Every job is submitted by ``USER``: the simulator's owner is the trace's user."""
    return TraceJob(name, at, duration, JobSpec.create(command=("sim",), name=name, project=project, **spec), USER.user)


@dataclass(frozen=True, slots=True)
class Scenario:
    trace: list[TraceJob]  # sorted by submit time, so the simulator's ids (1, 2, ... in list order) are the store's
    projects: list[Project]  # by name, as the store lists them
    nodes: list[Node]  # by name, as the store lists them
    config: SchedulerConfig = field(default_factory=SchedulerConfig)


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
    for project in parents_first(scenario.projects):  # open to everyone: who may submit is not compared
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
            for shrink in previous.result.shrinks:  # the workers a shrink stopped (issue 35)
                if shrink.job_id in {r.id for r in sim.snapshot.running}:
                    executor.exit(shrink.job_id, KILLED, workers=shrink.workers)
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
        # Elastic jobs (issue 35): the same resizes. (Applying a shrink, the simulator drops the
        # workers at once; the fake executor would then report their exits before the next cycle.)
        assert (live.result.grows, live.result.shrinks) == (sim.result.grows, sim.result.shrinks), (
            f"{where}: different resizes"
        )
        assert_applied(db, executor, launched_before, sim.result, where)
        previous = sim
    assert len(live_calls) == len(sim_calls)
    return sim_calls


def parents_first(projects: list[Project]) -> list[Project]:
    """A tree's units before the projects below them, as ``gpupool project set --parent`` needs
    (the unit must exist); a flat list keeps its order."""
    depth: dict[str, int] = {}
    parent = {p.name: p.parent for p in projects}

    def level(name: str) -> int:
        if name not in depth:
            above = parent.get(name)
            depth[name] = 0 if above is None else level(above) + 1
        return depth[name]

    return sorted(projects, key=lambda p: level(p.name))


def ids(call: Call) -> str:
    starts = [s.job_id for s in call.result.starts]
    victims = [(p.job_id, p.for_job) for p in call.result.preemptions]
    return f"starts {starts}, preempt (victim, for) {victims}"


def assert_applied(
    db: Database, executor: FakeExecutor, launched_before: int, decided: CycleResult, where: str
) -> None:
    """The controller carried the decisions out: placements written and launched, victims marked."""
    launched = sorted((n, r.job_id, r.worker) for n, r in executor.launched[launched_before:])
    expected = sorted(
        [(p.node, s.job_id, p.worker) for s in decided.starts for p in s.placements]
        + [(p.node, g.job_id, p.worker) for g in decided.grows for p in g.placements]  # (issue 35)
    )
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
