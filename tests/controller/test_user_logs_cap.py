"""--max-user-logs through the controller, on both engines: the nodes' log sizes are added up per
owner over every node, the oldest finished jobs' logs of an owner over the cap are emptied on each
node they ran on, each said in its job's events; running jobs and other owners are left alone."""

from __future__ import annotations

import math

from gpupool.clock import FakeClock
from gpupool.controller.loop import Controller, ControllerSettings
from gpupool.domain.jobs import JobSpec
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.cluster import uniform
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases.context import HeadContext
from gpupool.usecases.group_commit import GroupCommit
from tests.support.executor import USER, FakeExecutor

MB = 2**20
BO = Principal("bo", "user")


def test_an_owner_over_the_cap_loses_the_oldest_finished_logs_first(db: Database) -> None:
    clock = FakeClock()
    nodes = uniform(2, 2)
    executor = FakeExecutor(nodes, clock)
    settings = ControllerSettings(usage_every_s=math.inf, max_user_log_bytes=10 * MB, user_logs_every_s=0.0)
    controller = Controller(db, executor, clock, SchedulerConfig(), settings)
    ctx = HeadContext(db, clock, executor, controller.wake)
    with db.tx() as s:
        node_repo.register_nodes(s, nodes, clock.now())

    def submit(name: str, who: Principal = USER, workers: int = 1) -> int:
        spec = JobSpec.create(command=["train"], name=name, gpus=1, workers=workers)
        return GroupCommit(ctx).submit(spec, who, f"key-{name}")[0].id

    old, gang = submit("old"), submit("gang", workers=2)  # the gang: a worker on each node
    controller.tick()
    executor.exit(old, 0)
    clock.advance(60)
    controller.tick()
    executor.exit(gang, 0)
    clock.advance(60)
    controller.tick()
    running, theirs = submit("running"), submit("theirs", who=BO)
    controller.tick()
    where = {r.job_id: node for node, r in executor.launched}
    gang_nodes = sorted(node for node, r in executor.launched if r.job_id == gang)
    assert gang_nodes == ["node-1", "node-2"]
    executor.logs = {"node-1": {}, "node-2": {}}
    executor.logs[where[old]][old] = 4 * MB
    for node in gang_nodes:
        executor.logs[node][gang] = 3 * MB  # 6 MB on two nodes
    executor.logs[where[running]][running] = 5 * MB
    executor.logs[where[theirs]][theirs] = 20 * MB  # bo's: running, never emptied
    controller.tick()
    # alice: 4 + 6 + 5 = 15 MB > 10: the oldest finished (old) goes, 11 MB still over: the gang too
    # one call per node and owner, the oldest first within it
    emptied = {node: jobs for node, jobs, _ in executor.emptied}
    assert len(executor.emptied) == len(emptied) == 2, executor.emptied
    other = "node-2" if where[old] == "node-1" else "node-1"
    assert emptied == {where[old]: (old, gang), other: (gang,)}
    assert all("alice's logs passed --max-user-logs (10M)" in note for _, _, note in executor.emptied)
    with db.read() as s:
        said = [e.message for e in job_repo.job_events(s, old) if e.kind == "logs_emptied"]
        assert said and said[0].startswith("its logs (4M) were emptied: alice's logs passed --max-user-logs (10M)")
        assert [e for e in job_repo.job_events(s, running) if e.kind == "logs_emptied"] == []
    clock.advance(120)
    controller.tick()  # a minute on: all under the cap (emptied logs hold their note), nothing more
    assert len(executor.emptied) == 2
