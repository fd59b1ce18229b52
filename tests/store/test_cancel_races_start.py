"""A cancel racing the controller's start of the same job, on SQLite and PostgreSQL.

The controller decides on a snapshot; the API cancels in between. Before guarded writes, on
SQLite (where a transaction begins at its first write) a job cancelled after the snapshot was
read could be started over its cancel and keep running, and a start refused as invalid took the
whole cycle's other decisions down with it. These tests race the two for real, hundreds of
times, and check that no cancelled job keeps a worker and that no cycle fails.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable

import pytest

from gpupool.clock import FakeClock, SystemClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.launch import LaunchRequest, WorkerExit, WorkerHandle
from gpupool.domain.nodes import Node
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.sim.cluster import uniform
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.snapshot import load_snapshot
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import USER, FakeExecutor

RACES = 300


class Processes(FakeExecutor):
    """Workers run until killed; a kill ends them at once with 143, as SIGTERM would."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        super().__init__(nodes)
        self.running: set[tuple[int, int, int]] = set()
        self.killed: dict[tuple[int, int, int], WorkerExit] = {}

    def launch(self, node: str, request: LaunchRequest) -> WorkerHandle:
        self.running.add((request.job_id, request.attempt, request.worker))
        return super().launch(node, request)

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None:
        return self.killed.get(self.key(handle))

    def kill(self, node: str, handle: WorkerHandle) -> None:
        key = self.key(handle)
        self.running.discard(key)
        self.killed[key] = WorkerExit(143)


class FailedCycles(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_cancels_racing_starts_never_leave_a_cancelled_job_running_nor_fail_a_cycle(db: Database) -> None:
    executor = Processes(uniform(2, 4))
    settings = ControllerSettings(interval_s=0.002, full_cycle_s=0.0, usage_every_s=3600.0, kill_grace_s=0.0)
    controller = Controller(db, executor, SystemClock(), SchedulerConfig(), settings)
    ctx = HeadContext(db, SystemClock(), executor, controller.wake)
    failures = FailedCycles()
    logging.getLogger("gpupool").addHandler(failures)
    rng = random.Random(12)
    controller.start()
    try:
        ids = []
        for _ in range(RACES):
            job = job_service.submit(ctx, JobSpec.create(command=["sleep", "60"], gpus=1), USER)
            ids.append(job.id)
            time.sleep(rng.choice((0.0, 0.0005, 0.001, 0.002, 0.004)))
            job_service.cancel(ctx, job.id, USER)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with db.tx() as s:
                if not job_repo.count_jobs(s, include_finished=False) and not executor.running:
                    break
            time.sleep(0.05)
    finally:
        controller.stop()
        logging.getLogger("gpupool").removeHandler(failures)
    with db.tx() as s:
        jobs = {j.id: j for j in job_repo.list_jobs(s, include_finished=True, limit=RACES + 10)}
        events = {i: [e.kind for e in job_repo.job_events(s, i)] for i in ids}
    assert failures.messages == []
    assert {j.state for j in jobs.values()} == {JobState.CANCELLED}
    assert executor.running == set(), "a cancelled job's worker is still running"
    for job_id, kinds in events.items():
        assert "starting" not in kinds[kinds.index("cancelled") :], f"job {job_id} started after its cancel: {kinds}"
    started = sum(1 for j in jobs.values() if j.starts)
    # Both sides of the race were exercised: cancels that found the job started, and ones that did not.
    assert 0 < started < RACES, f"{started} of {RACES} jobs started before their cancel"


def one_node(db: Database, gpus: int) -> tuple[Controller, HeadContext, Processes]:
    """A controller on a virtual clock over one node, its nodes registered, no thread running."""
    clock = FakeClock()
    executor = Processes(uniform(1, gpus))
    controller = Controller(db, executor, clock, SchedulerConfig(), ControllerSettings())
    with db.tx() as s:
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    return controller, HeadContext(db, clock, executor, controller.wake), executor


def test_a_start_decided_before_a_cancel_is_dropped_and_the_cycles_other_starts_happen(db: Database) -> None:
    controller, ctx, executor = one_node(db, gpus=2)
    clock = ctx.clock
    first, second = (job_service.submit(ctx, JobSpec.create(command=["sleep", "9"], gpus=1), USER) for _ in range(2))
    with db.tx() as s:
        snapshot = load_snapshot(s, clock.now())
    result = schedule(snapshot, SchedulerConfig())
    assert sorted(d.job_id for d in result.starts) == [first.id, second.id]

    job_service.cancel(ctx, first.id, USER)  # after the snapshot, before the start is applied
    started = controller._applier.start_all(result.starts, {j.id: j.spec for j in snapshot.pending})

    assert started == {second.id: 1}
    assert job_service.get(ctx, first.id).state is JobState.CANCELLED
    assert job_service.get(ctx, second.id).state is JobState.RUNNING
    assert {key[0] for key in executor.running} == {second.id}


@pytest.mark.parametrize("start_first", [True, False])
def test_a_cancel_and_a_start_in_either_order(db: Database, start_first: bool) -> None:
    """Started first: the cancel finds it running and its workers are stopped. Cancelled first:
    the start decided before the cancel is dropped and nothing is launched."""
    controller, ctx, executor = one_node(db, gpus=1)
    job = job_service.submit(ctx, JobSpec.create(command=["sleep", "9"], gpus=1), USER)
    with db.tx() as s:
        snapshot = load_snapshot(s, ctx.clock.now())
    (decision,) = schedule(snapshot, SchedulerConfig()).starts
    if start_first:
        controller._applier.start(decision, job.spec)
        cancelled = job_service.cancel(ctx, job.id, USER)
        assert (cancelled.state, cancelled.cancel_requested) == (JobState.RUNNING, True)
        controller.tick()
        assert executor.running == set()
    else:
        job_service.cancel(ctx, job.id, USER)
        assert controller._applier.start(decision, job.spec) is None
        assert executor.running == set()
    controller.tick()
    assert job_service.get(ctx, job.id).state is JobState.CANCELLED


def test_a_start_that_comes_while_a_cancel_decides_waits_for_it_and_is_dropped(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel reads a pending job; before it writes, the controller tries to start it. The
    start cannot slip in between: SQLite's cancel holds the write lock from its BEGIN IMMEDIATE,
    PostgreSQL's the job's row lock from its read. The start waits until the cancel commits, then
    finds the job cancelled and launches nothing."""
    controller, ctx, executor = one_node(db, gpus=1)
    job = job_service.submit(ctx, JobSpec.create(command=["sleep", "9"], gpus=1), USER)
    with db.tx() as s:
        snapshot = load_snapshot(s, ctx.clock.now())
    (decision,) = schedule(snapshot, SchedulerConfig()).starts
    real = job_repo.transition_job
    started: list[int | None] = []
    racer: list[threading.Thread] = []

    def start_tries_to_slip_in(*args: object, **kwargs: object) -> None:
        if not racer:  # the cancel's first write: the controller's start comes just before it
            racer.append(threading.Thread(target=lambda: started.append(controller._applier.start(decision, job.spec))))
            racer[0].start()
            racer[0].join(timeout=0.5)
            assert racer[0].is_alive(), "the start went through while the cancel held the job"
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(job_repo, "transition_job", start_tries_to_slip_in)
    cancelled = job_service.cancel(ctx, job.id, USER)
    racer[0].join(timeout=30)

    assert cancelled.state is JobState.CANCELLED
    assert started == [None]  # dropped as stale: the job was no longer pending
    assert executor.running == set()
    controller.tick()
    assert job_service.get(ctx, job.id).state is JobState.CANCELLED
