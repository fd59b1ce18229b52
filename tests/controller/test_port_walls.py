"""Served ports walled across nodes (issue 30, part 2), on both engines: the controller hands each
node the ports that jobs on the other nodes serve (a replica's, a job's published one), as its
node walled them, and takes them back when the job ends; a node is never handed its own."""

from __future__ import annotations

import dataclasses
import math

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from tests.support.executor import USER, FakeExecutor


def test_each_node_is_handed_the_other_nodes_served_ports_until_their_jobs_end(db: Database) -> None:
    clock = FakeClock()
    nodes = [dataclasses.replace(n, address=f"10.0.0.{i + 1}") for i, n in enumerate(uniform(2, 1))]
    executor = FakeExecutor(nodes, clock)
    executor.taken_ports.add(8000)  # the head's API, say: the job asks for it, the node walls nothing
    controller = Controller(db, executor, clock, SchedulerConfig(), ControllerSettings(usage_every_s=math.inf))
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, clock.now())

    def submit(name: str, expose: int | None) -> int:
        spec = JobSpec.create(command=["serve"], name=name, gpus=1, expose=expose)
        return GroupCommit(ctx).submit(spec, USER, f"key-{name}")[0].id

    notebook, squatter = submit("notebook", 8888), submit("squatter", 8000)
    controller.tick()
    where = {r.job_id: node for node, r in executor.launched}
    assert [r.port for _, r in executor.launched] == [8888, 8000]  # each asked its node to wall it
    elsewhere = next(n.name for n in nodes if n.name != where[notebook])
    address = next(n.address for n in nodes if n.name == where[notebook])
    assert executor.protected[elsewhere] == ((address, 8888, notebook),)  # the squatter's port is nobody's
    assert executor.protected[where[notebook]] == ()  # its own node walled it at launch
    executor.exit(notebook, 0)
    executor.exit(squatter, 0)
    controller.tick()
    assert executor.protected == {n.name: () for n in nodes}
