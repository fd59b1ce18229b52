"""A real controller over a real store, with a scripted executor and a virtual clock: a node it
drains ends drained once its job ends, and a job's history shows where it was placed, the worker
it lost, its requeue and its resume."""

from __future__ import annotations

import math
from datetime import datetime

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.decisions import CycleResult
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.launch import WorkerExit, WorkerHandle
from gpupool.domain.nodes import Node, NodeState
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.usecases import jobs as job_service
from gpupool.usecases import nodes as node_service
from gpupool.usecases.context import HeadContext
from tests.support.executor import ADMIN, USER, FakeExecutor

SETTINGS = ControllerSettings(full_cycle_s=0.0, usage_every_s=math.inf)


class ScriptedExecutor(FakeExecutor):
    """The test says which nodes it serves, and when each worker ends, and how."""

    def __init__(self, nodes: int, gpus: int) -> None:
        super().__init__(uniform(nodes, gpus))
        self.served = uniform(nodes, gpus)
        self.ended: dict[tuple[int, int, int], WorkerExit] = {}

    def serve(self, db: Database, nodes: list[Node], now: datetime) -> None:
        """Serve ``nodes`` from now on, and register them as the controller's start would."""
        self.served = nodes
        with db.tx() as s:
            node_repo.register_nodes(s, nodes, now)

    def nodes(self) -> list[Node]:
        return list(self.served)

    def end(self, job_id: int, attempt: int, worker: int, how: WorkerExit) -> None:
        self.ended[(job_id, attempt, worker)] = how

    def poll(self, node: str, handle: WorkerHandle) -> WorkerExit | None:
        return self.ended.get(self.key(handle))


class Ticking(Controller):
    """A controller whose every cycle happens a second after the one before."""

    def __init__(self, db: Database, executor: ScriptedExecutor, clock: FakeClock) -> None:
        super().__init__(db, executor, clock, SchedulerConfig(), SETTINGS)
        self.clock = clock

    def tick(self) -> CycleResult | None:
        self.clock.advance(1)
        return super().tick()


def harness(db: Database, nodes: int = 2, gpus: int = 4) -> tuple[Controller, HeadContext, ScriptedExecutor]:
    clock = FakeClock()
    executor = ScriptedExecutor(nodes, gpus)
    controller = Ticking(db, executor, clock)
    with db.tx() as s:  # what Controller.start() does before its thread runs the ticks
        node_repo.register_nodes(s, executor.nodes(), clock.now())
    return controller, HeadContext(db, clock, executor, controller.wake), executor


def state(ctx: HeadContext, name: str) -> NodeState:
    return node_service.show(ctx, name).node.state


def test_a_drained_node_runs_its_job_to_the_end_takes_no_new_one_and_then_is_drained(db: Database) -> None:
    controller, ctx, executor = harness(db, nodes=2, gpus=2)
    first = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=2), USER).id
    controller.tick()
    (on,) = {p.node for p in job_service.get(ctx, first).placements}
    node_service.drain(ctx, on, ADMIN, reason="firmware")
    second = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=2), USER).id
    third = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=2), USER).id
    controller.tick()
    assert state(ctx, on) is NodeState.DRAINING
    assert job_service.get(ctx, first).state is JobState.RUNNING
    assert {p.node for p in job_service.get(ctx, second).placements} != {on}
    assert job_service.get(ctx, third).state is JobState.PENDING  # the drained node's GPUs are not offered

    executor.end(first, 1, 0, WorkerExit(0))
    controller.tick()
    assert state(ctx, on) is NodeState.DRAINED
    assert job_service.get(ctx, first).state is JobState.SUCCEEDED
    assert job_service.get(ctx, third).state is JobState.PENDING

    node_service.undrain(ctx, on, ADMIN)
    controller.tick()
    assert state(ctx, on) is NodeState.UP
    assert {p.node for p in job_service.get(ctx, third).placements} == {on}


def test_a_job_history_shows_placement_loss_requeue_and_resume(db: Database) -> None:
    controller, ctx, executor = harness(db, nodes=2, gpus=2)
    job = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=2, workers=2, max_restarts=2), USER).id
    controller.tick()
    assert job_service.get(ctx, job).state is JobState.RUNNING

    # node-2 goes away with worker 1 on it; worker 0 is stopped (the gang lives and dies whole).
    executor.serve(db, uniform(1, 2), ctx.clock.now())
    executor.end(job, 1, 1, WorkerExit(None, lost=True))
    controller.tick()
    executor.end(job, 1, 0, WorkerExit(-15))
    controller.tick()  # requeued; node-2 is down, so it waits
    assert job_service.get(ctx, job).state is JobState.PENDING
    executor.serve(db, uniform(2, 2), ctx.clock.now())
    controller.tick()
    assert job_service.get(ctx, job).state is JobState.RUNNING

    events = [(e.kind, e.message) for e in job_service.show(ctx, job, ADMIN)[2]]
    kinds = [k for k, _ in events]
    assert kinds == [
        "submitted",
        "starting",
        "placed",
        "running",
        "lost",
        "worker_exit",
        "lost",  # the job itself: lost, then requeued
        "requeued",
        "starting",
        "placed",
        "resumed",
        "running",
    ]
    by_kind: dict[str, list[str]] = {}
    for kind, message in events:
        by_kind.setdefault(kind, []).append(message)
    assert by_kind["placed"] == [
        "attempt 1: worker 0 on node-1 GPUs 0,1; worker 1 on node-2 GPUs 0,1",
        "attempt 2: worker 0 on node-1 GPUs 0,1; worker 1 on node-2 GPUs 0,1",
    ]
    assert by_kind["lost"] == ["worker 1 on node-2 was lost (node down)", "job lost: worker 1 on node-2 was lost"]
    assert by_kind["worker_exit"] == ["worker 0 on node-1 exited with code -15"]
    assert by_kind["requeued"] == ["worker 1 on node-2 was lost; requeued (restart 1 of 2)"]
    assert by_kind["resumed"] == ["resuming: attempt 2, GPUPOOL_RESTARTS=1"]
    relaunched = [r for _, r in executor.launched if r.attempt == 2]
    assert {r.env["GPUPOOL_RESTARTS"] for r in relaunched} == {"1"}  # what the event says the workers were told


def test_a_preempted_job_is_requeued_and_resumes_with_the_preempted_flag(db: Database) -> None:
    controller, ctx, executor = harness(db, nodes=1, gpus=2)
    job = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=2, priority="train"), USER).id
    controller.tick()
    urgent = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=2, priority="inference"), USER).id
    controller.tick()  # the inference job displaces the train job of the same project
    executor.end(job, 1, 0, WorkerExit(-15))
    controller.tick()
    assert job_service.get(ctx, urgent).state is JobState.RUNNING
    executor.end(urgent, 1, 0, WorkerExit(0))
    controller.tick()
    controller.tick()
    assert job_service.get(ctx, job).state is JobState.RUNNING
    events = [(e.kind, e.message) for e in job_service.show(ctx, job, ADMIN)[2]]
    kinds = [k for k, _ in events]
    assert kinds[kinds.index("preempted") :] == ["preempted", "requeued", "starting", "placed", "resumed", "running"]
    messages = dict(events)
    assert messages["requeued"] == "requeued after preemption (restarts stay 0 of 0: a preemption does not count)"
    assert messages["resumed"] == "resuming: attempt 2, GPUPOOL_RESTARTS=1, GPUPOOL_PREEMPTED=1"


def test_every_worker_of_every_attempt_gets_the_job_checkpoint_dir(db: Database) -> None:
    controller, ctx, executor = harness(db, nodes=2, gpus=2)
    spec = JobSpec.create(command=["x"], gpus=2, workers=2, max_restarts=1, checkpoint_dir="/data/ck/run1")
    job = job_service.submit(ctx, spec, USER).id
    plain = job_service.submit(ctx, JobSpec.create(command=["x"], gpus=0), USER).id
    controller.tick()
    executor.end(job, 1, 0, WorkerExit(1))  # fails: the gang stops and is requeued
    controller.tick()
    executor.end(job, 1, 1, WorkerExit(-15))
    controller.tick()
    controller.tick()
    assert job_service.get(ctx, job).state is JobState.RUNNING and job_service.get(ctx, job).starts == 2
    launched = [
        (r.attempt, r.worker, r.env.get("GPUPOOL_CHECKPOINT_DIR")) for _, r in executor.launched if r.job_id == job
    ]
    assert sorted(launched) == [(a, w, "/data/ck/run1") for a in (1, 2) for w in (0, 1)]
    assert [r.env.get("GPUPOOL_CHECKPOINT_DIR", "-") for _, r in executor.launched if r.job_id == plain] == ["-"]
