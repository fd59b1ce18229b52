"""Workers starting in an image say where they are (issue 32): the controller's images step turns
each new thing a worker's supervisor says (pulling, unpacking, running in it) into an event of the
job, sets the job's image_digest once it runs in the image, stops asking then, and ``why`` says
the phase while the image is being got. On both engines, through a fake executor."""

from __future__ import annotations

import math

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.controller.steps.images import WatchImages
from gpupool.domain.jobs import JobSpec
from gpupool.domain.launch import ImagePhase
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.snapshot import load_snapshot
from gpupool.usecases import jobs as job_service
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from tests.support.executor import USER, FakeExecutor

DIGEST = "sha256:" + "ab" * 32


class Counting(FakeExecutor):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.asked = 0

    def image_phases(self, node, handles):  # type: ignore[no-untyped-def]
        self.asked += len(handles)
        return super().image_phases(node, handles)


def test_each_new_phase_is_an_event_the_digest_is_kept_and_a_running_worker_is_left_alone(db: Database) -> None:
    clock = FakeClock()
    nodes = uniform(1, 2)
    executor = Counting(nodes, clock)
    controller = Controller(db, executor, clock, SchedulerConfig(), ControllerSettings(usage_every_s=math.inf))
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, clock.now())
    spec = JobSpec.create(command=["python", "train.py"], gpus=1, image="nvcr.io/nvidia/pytorch:24.10-py3")
    job = GroupCommit(ctx).submit(spec, USER, "key-1")[0].id
    bare = GroupCommit(ctx).submit(JobSpec.create(command=["x"], gpus=1), USER, "key-2")[0].id
    controller.tick()
    step = WatchImages(controller._parts)  # the table's row, run at will here (its interval is a second)

    def said() -> list[str]:
        with db.read() as s:
            return [e.message for e in job_repo.job_events(s, job) if e.kind == "image"]

    assert job_service.get(ctx, job).state.value == "starting"  # launched: its clock waits for its image
    assert job_service.get(ctx, bare).state.value == "running"
    step.run(0.0)
    assert said() == [] and executor.asked == 1  # nothing said yet; the job without an image is never asked
    executor.phases[job] = ImagePhase("unpacking layer 1/3 (12.0 MB)")
    step.run(1.0)
    step.run(2.0)  # the same phase again: no second event
    assert said() == ["worker 0 on node-1: unpacking layer 1/3 (12.0 MB)"]
    assert "getting its image: worker 0 on node-1: unpacking layer 1/3" in job_service.why(ctx, job).message
    executor.phases[job] = ImagePhase("running in image nvcr.io/nvidia/pytorch:24.10-py3 (sha256:abab...)", DIGEST)
    step.run(3.0)
    asked = executor.asked
    step.run(4.0)
    assert executor.asked == asked  # it runs in its image: not asked again
    assert said()[-1].startswith("worker 0 on node-1: running in image")
    assert job_service.get(ctx, job).image_digest == DIGEST
    assert job_service.get(ctx, job).state.value == "running"  # it runs in its image: its clock starts
    assert "getting its image" not in job_service.why(ctx, job).message
    assert job_service.get(ctx, bare).image_digest is None


def test_the_nodes_a_job_ran_its_image_on_reach_the_next_snapshot(db: Database) -> None:
    clock = FakeClock()
    nodes = uniform(2, 1)
    executor = FakeExecutor(nodes, clock)
    controller = Controller(db, executor, clock, SchedulerConfig(), ControllerSettings(usage_every_s=math.inf))
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, clock.now())
    image = "python:3.11"
    first = GroupCommit(ctx).submit(JobSpec.create(command=["x"], gpus=1, image=image), USER, "k1")[0].id
    controller.tick()
    executor.phases[first] = ImagePhase("running in image python:3.11 (sha256:abab...)", DIGEST)
    WatchImages(controller._parts).run(0.0)
    where = job_service.get(ctx, first).placements[0].node
    GroupCommit(ctx).submit(JobSpec.create(command=["y"], gpus=1, image=image), USER, "k2")
    GroupCommit(ctx).submit(JobSpec.create(command=["z"], gpus=1, image="other:1"), USER, "k3")
    with db.read() as s:
        snap = load_snapshot(s, clock.now())
    assert snap.image_nodes == {image: frozenset({where})}  # "other:1" never ran anywhere
