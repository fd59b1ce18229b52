"""The head's steady state: a cycle with the carried ``CycleMemory`` on a snapshot read afresh
(new, equal node, job and placement objects, as ``load_snapshot`` builds them) decides exactly
what a cold cycle decides on the same snapshot; and a queue of identical jobs costs about what
one job costs (issue 16: the tasks of an array are one shape to the scheduler)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.jobs import JobSpec
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.scheduler import CycleMemory, SchedulerConfig, registry, schedule
from gpupool.scheduler.config import LasConfig
from gpupool.scheduler.hooks import JobOrder
from gpupool.scheduler.policies import preset
from gpupool.scheduler.session import Session
from tests.support.builders import T0, node, running, snapshot

# fifo-isolated confines projects to their own nodes (partition "nodes", which the memory keeps);
# ":gpus" is its quota in GPUs anywhere. "las:fast" is las with queues of a minute and ten, and no
# minimum run, so that cycles a minute apart displace jobs.
POLICIES = ["default", "greedy", "fifo", "fifo-isolated", "fifo-isolated:gpus", "las", "las:fast"]
FAST_LAS = LasConfig(thresholds=(60.0, 600.0), min_run_s=0.0, checkpointed_only=False)
PROJECTS = (Project("a", quota=6), Project("b", quota=4, limit=10), Project("c", quota=0, weight=2))


def config_of(name: str) -> SchedulerConfig:
    policy, _, partition = name.partition(":")
    if partition == "fast":
        return replace(preset(policy), las=FAST_LAS)
    return preset(policy, partition=partition or None)


@st.composite
def specs(draw: st.DrawFn) -> JobSpec:
    gpus = draw(st.sampled_from([0.25, 0.5, 1, 1, 2, 4, 8]))
    return JobSpec.create(
        command=("true",),
        project=draw(st.sampled_from(["a", "b", "c"])),
        gpus=gpus,
        workers=1 if gpus < 1 else draw(st.sampled_from([1, 1, 2])),
        cpus=draw(st.integers(0, 4)),
        priority=draw(st.sampled_from(["train", "train", "interactive", "inference"])),
        max_runtime_s=draw(st.sampled_from([None, 600, 7200])),
    )


def arrivals(draw: Callable[..., Any], first_id: int, now: float) -> list[PendingJob]:
    """New jobs, some as runs of identical ones (an array's tasks)."""
    jobs: list[PendingJob] = []
    for _ in range(draw(st.integers(0, 4))):
        spec, owner = draw(specs()), draw(st.sampled_from(["u1", "u2"]))
        for _ in range(draw(st.sampled_from([1, 1, 5]))):
            jobs.append(PendingJob(first_id + len(jobs), spec, T0 + timedelta(seconds=now), owner=owner))
    return jobs


def read_afresh(snap: Snapshot) -> Snapshot:
    """The same snapshot as new objects: what the head's next database read gives."""
    return replace(
        snap,
        nodes=tuple(replace(n, gpus=tuple(replace(g) for g in n.gpus)) for n in snap.nodes),
        running=tuple(replace(r, placements=tuple(replace(p) for p in r.placements)) for r in snap.running),
        pending=tuple(replace(j) for j in snap.pending),
    )


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(POLICIES), st.data())
def test_a_steady_cycle_decides_what_a_cold_one_does(policy: str, data: st.DataObject) -> None:
    config = config_of(policy)
    nodes = [node(f"n{i}", gpus, cpus=16, memory_mib=65536) for i, gpus in enumerate([8, 8, 4])]
    busy = [running(1, ("n0", (0, 1, 2, 3)), project="a", max_runtime_s=3600), running(2, ("n2", (0,)), project="b")]
    snap = replace(snapshot(nodes, arrivals(data.draw, 10, 0.0), busy), projects=PROJECTS)
    memory = CycleMemory()
    next_id = 1000
    for cycle in range(6):
        snap = read_afresh(snap)
        result = schedule(snap, config, memory=memory)
        assert result == schedule(snap, config), f"cycle {cycle}"
        now = snap.now + timedelta(seconds=60)
        waiting = {j.id: j for j in snap.pending}
        jobs = {r.id: r for r in snap.running if not r.stopping}  # stopping ones have exited
        for victim in result.preemptions:
            jobs[victim.job_id] = replace(jobs[victim.job_id], stopping=True)
        for start in result.starts:
            job = waiting.pop(start.job_id)
            jobs[job.id] = RunningJob(job.id, job.spec, start.placements, snap.now, owner=job.owner)
        ending = sorted(i for i, r in jobs.items() if not r.stopping)
        for job_id in data.draw(st.lists(st.sampled_from(ending), max_size=2, unique=True)) if ending else ():
            del jobs[job_id]
        new = arrivals(data.draw, next_id, (now - T0).total_seconds())
        next_id += len(new)
        waiting.update((j.id, j) for j in new)
        snap = replace(snap, now=now, running=tuple(jobs.values()), pending=tuple(waiting.values()))
    assert memory.rebuilds == 1  # the nodes never changed: every later cycle was incremental


@pytest.mark.parametrize("policy", ["default", "greedy", "fifo-isolated", "las"])
def test_a_queue_of_identical_jobs_costs_about_one(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"quota": 0, "nodes": 0}
    config = preset(policy)
    check = registry.QUOTA_CHECKS[config.quota_check]
    best_node = Session._best_node

    def counted_check(session: Session, job: PendingJob) -> object:
        calls["quota"] += 1
        return check(session, job)

    def counted_best_node(self: Session, *args: object, **kwargs: object) -> object:
        calls["nodes"] += 1
        return best_node(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setitem(registry.QUOTA_CHECKS, config.quota_check, counted_check)
    monkeypatch.setattr(Session, "_best_node", counted_best_node)
    spec = JobSpec.create(command=("train",), project="a", gpus=2, max_runtime_s=3600)
    tasks = [PendingJob(100 + i, spec, T0) for i in range(2000)]
    full = [running(1, ("n0", (0, 1, 2, 3)), project="a", max_runtime_s=7200), running(2, ("n1", (0, 1)), project="a")]
    snap = replace(snapshot([node("n0", 4), node("n1", 4)], tasks, full), projects=(Project("a", quota=8),))
    result = schedule(snap, config)
    assert len(result.starts) == 1  # n1's two free GPUs
    # The other 1,999 wait alike (under fifo-isolated the first for its quota, the rest behind it).
    assert len(set(result.pending.values())) <= 2
    assert calls["quota"] <= 4, calls
    assert calls["nodes"] <= 6, calls


def test_steady_and_cold_agree_on_a_config_change() -> None:
    """A caller may schedule one memory under another policy: nothing remembered is per policy."""
    nodes = [node("n0", 8), node("n1", 4)]
    jobs = [PendingJob(10 + i, JobSpec.create(command=("t",), project="a", gpus=4), T0) for i in range(4)]
    snap = replace(snapshot(nodes, jobs), projects=PROJECTS)
    memory = CycleMemory()
    for name in POLICIES:
        config: SchedulerConfig = config_of(name)
        assert schedule(snap, config, memory=memory) == schedule(snap, config)


def test_the_carried_queue_order_follows_what_changed() -> None:
    """Jobs still waiting keep their place, new ones are merged in, a job read back with another
    spec (or submit time) is ordered afresh, and another job order starts over."""
    memory = CycleMemory()
    fifo, by_class = registry.job_order("fifo"), registry.job_order("priority_fifo")
    jobs = [PendingJob(i, JobSpec.create(command=("t",)), T0 + timedelta(seconds=10 * i)) for i in range(1, 6)]

    def ids(pending: list[PendingJob], order: JobOrder = fifo) -> list[int]:
        ranked = memory.in_order(pending, order)
        assert ranked == sorted(((order(j), j) for j in pending), key=lambda pair: pair[0])
        return [job.id for _, job in ranked]

    assert ids(jobs) == [1, 2, 3, 4, 5]
    urgent = JobSpec.create(command=("t",), priority="interactive")
    early = PendingJob(9, JobSpec.create(command=("t",)), T0)
    assert ids([replace(j) for j in jobs[1:]] + [early]) == [9, 2, 3, 4, 5]
    assert ids([early, *jobs[1:3], replace(jobs[4], submitted_at=T0 - timedelta(1))]) == [5, 9, 2, 3]
    assert ids([early, *jobs[1:3], jobs[4]], by_class) == [9, 2, 3, 5]  # another order: all keyed afresh
    assert ids([early, *jobs[1:3], replace(jobs[4], spec=urgent)], by_class) == [5, 9, 2, 3]
