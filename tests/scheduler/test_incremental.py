"""The scheduler's carried-over state (``CycleMemory``) against a fresh index built every cycle:
over random traces, every policy and placement plugin, the index matches after every cycle and
the replay makes exactly the same decisions."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.jobs import JobSpec
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler import CycleMemory, SchedulerConfig, schedule
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.config import LasConfig
from gpupool.scheduler.policies import preset
from gpupool.sim.engine import simulate
from gpupool.sim.trace import TraceJob
from tests.support.builders import node, pending, running, snapshot

POLICIES = [
    preset("default"),
    preset("greedy"),
    preset("fifo"),
    preset("default", placement="spread"),
    preset("fifo-isolated"),
    preset("fifo-isolated", partition="gpus"),
    preset("las"),
    # las with minute-long queues, displacing any job: it displaces within the traces' minutes.
    replace(preset("las"), las=LasConfig(thresholds=(60.0, 600.0), min_run_s=0.0, checkpointed_only=False)),
]
PROJECTS = [Project("a", quota=4), Project("b", quota=2, limit=6), Project("c", quota=0, weight=2)]


def index_of(cluster: ClusterState) -> dict[str, object]:
    """Everything a placement reads, in a comparable form."""
    return {
        "nodes": {
            name: (
                sorted(f.free_gpus),
                sorted(f.shared.items()),
                sorted(f.free_cpus),
                f.free_memory,
                sorted((k, v) for k, v in f.shared_memory.items() if v),
            )
            for name, f in cluster.nodes.items()
        },
        "by_free": [sorted(level) for level in cluster.by_free],
        "by_room": {room: sorted(b) for room, b in cluster.by_room.items()},
        "with_shares": sorted(cluster.with_shares),
        "shared_with_free": sorted(cluster.shared_with_free),
        "capacity": cluster.capacity,
    }


class CheckedMemory(CycleMemory):
    """Compares the carried-over index with one built from scratch before every cycle."""

    def __init__(self) -> None:
        super().__init__()
        self.checked = 0

    def open(self, snapshot: Snapshot):  # type: ignore[no-untyped-def]
        cluster, allocated, bound = super().open(snapshot)
        assert index_of(cluster) == index_of(ClusterState(snapshot))
        reference = CycleMemory()
        fresh = reference.open(snapshot)
        assert (dict(allocated), dict(bound)) == (dict(fresh[1]), dict(fresh[2]))
        assert self.held_by_user() == reference.held_by_user()  # the user order reads these
        self.checked += 1
        return cluster, allocated, bound


class Forgetful(CycleMemory):
    """Builds the index from the snapshot alone every cycle: the reference behaviour."""

    def open(self, snapshot: Snapshot):  # type: ignore[no-untyped-def]
        self.forget()
        return super().open(snapshot)


@st.composite
def traces(draw: st.DrawFn) -> list[TraceJob]:
    jobs = []
    for i in range(draw(st.integers(1, 40))):
        gpus = draw(st.sampled_from([0, 0.25, 0.5, 1, 1, 2, 4, 8]))
        workers = 1 if gpus < 1 else draw(st.sampled_from([1, 1, 1, 2, 3]))
        spec = JobSpec.create(
            command=("sim",),
            name=f"j{i}",
            project=draw(st.sampled_from(["a", "b", "c", "d"])),
            gpus=gpus,
            workers=workers,
            cpus=draw(st.integers(0, 6)),
            memory=draw(st.sampled_from([0, 1024, 16384])),
            priority=draw(st.sampled_from(["train", "train", "train", "interactive", "inference"])),
        )
        duration = draw(st.sampled_from([None, 5.0, 10.0, 30.0, 100.0]))
        user = draw(st.sampled_from(["u1", "u2", "u3"]))  # within a project, the one holding less goes first
        jobs.append(TraceJob(f"j{i}", float(draw(st.integers(0, 60))), duration, spec, user))
    return sorted(jobs, key=lambda j: j.submit_time)


def decisions(jobs: list[TraceJob], config: SchedulerConfig, memory: CycleMemory) -> dict[str, tuple[object, ...]]:
    nodes = [node(f"n{i}", gpus, cpus=16, memory_mib=32768) for i, gpus in enumerate([8, 8, 4, 2])]
    result = simulate(jobs, nodes, PROJECTS, config, memory)
    return {r.trace.job_id: (r.first_start, r.finish, r.preemptions) for r in result.runs.values()}


@settings(max_examples=60, deadline=None)
@given(traces(), st.sampled_from(POLICIES))
def test_the_carried_index_matches_a_fresh_one_and_decides_the_same(
    jobs: list[TraceJob], config: SchedulerConfig
) -> None:
    checked = CheckedMemory()
    assert decisions(jobs, config, checked) == decisions(jobs, config, Forgetful())
    assert checked.rebuilds == 1  # the nodes never changed: built once, then carried


def test_other_nodes_rebuild_the_index() -> None:
    memory = CycleMemory()
    first = snapshot([node("n1", 4)], pending_jobs=[pending(1, gpus=2)])
    started = schedule(first, memory=memory).starts
    assert len(started) == 1 and memory.rebuilds == 1
    drained = replace(first, nodes=(node("n1", 4, unhealthy=(0,)),), pending=())
    cluster, _, _ = memory.open(drained)
    assert memory.rebuilds == 2 and cluster.capacity == 3


def test_a_failed_cycle_forgets_its_half_made_changes() -> None:
    memory = CycleMemory()
    snap = snapshot([node("n1", 4)], pending_jobs=[pending(1, gpus=2)])
    try:
        schedule(snap, SchedulerConfig(actions=("allocate", "no-such-action")), memory=memory)
    except Exception:
        pass
    else:
        raise AssertionError("an unknown action must raise")
    assert schedule(snap, memory=memory).starts[0].placements[0].gpus == (0, 1)
    assert memory.rebuilds == 2


def test_jobs_the_cycle_did_not_start_are_taken_and_given_back() -> None:
    """The head adopts running workers no cycle of this process started (after a restart), and
    jobs end between cycles: both show up only as a difference between snapshots."""
    memory = CycleMemory()
    adopted = snapshot([node("n1", 4)], running_jobs=[running(7, ("n1", (0, 1, 2)))], pending_jobs=[pending(1, gpus=2)])
    assert schedule(adopted, memory=memory).starts == ()  # only GPU 3 is free
    ended = snapshot([node("n1", 4)], pending_jobs=[pending(1, gpus=2)])  # job 7 ended
    assert schedule(ended, memory=memory).starts[0].placements[0].gpus == (0, 1)
    moved = snapshot([node("n1", 4)], running_jobs=[running(1, ("n1", (2, 3)))], pending_jobs=[pending(2, gpus=2)])
    assert schedule(moved, memory=memory).starts[0].placements[0].gpus == (0, 1)  # job 1 is elsewhere now
    assert memory.rebuilds == 1
