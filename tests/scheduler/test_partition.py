"""Partitions: each project's own nodes under fifo-isolated (``partition="nodes"``), worked by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.errors import InvalidInput
from gpupool.domain.nodes import NodeState
from gpupool.domain.projects import Project
from gpupool.scheduler import CycleMemory, schedule
from gpupool.scheduler.partition import assign
from gpupool.scheduler.policies import preset
from tests.support.builders import node, pending, running, snapshot

# n0..n3: 8, 8, 4, 2 GPUs; n4 has none.
NODES = [node("n0", 8), node("n1", 8), node("n2", 4), node("n3", 2), node("n4", 0)]


@pytest.mark.parametrize(
    ("quotas", "expected"),
    [
        # Largest quota first, nodes in name order: a (12) takes n0+n1 (rounded up to 16 GPUs),
        # b (4) takes n2; the rest (n3 and the GPU-less n4) are default's.
        ({"a": 12, "b": 4}, {"a": {"n0", "n1"}, "b": {"n2"}, "default": {"n3", "n4"}}),
        # Ties by name: a before b, each one 8-GPU node.
        ({"b": 8, "a": 8}, {"a": {"n0"}, "b": {"n1"}, "default": {"n2", "n3", "n4"}}),
        # Quotas beyond the cluster's 22 GPUs: big takes everything with GPUs, small gets none.
        ({"big": 30, "small": 2}, {"big": {"n0", "n1", "n2", "n3"}, "small": set(), "default": {"n4"}}),
        # A quota of 0 claims nothing.
        ({"a": 0}, {"default": {"n0", "n1", "n2", "n3", "n4"}}),
    ],
)
def test_projects_take_whole_nodes_largest_quota_first(quotas: dict[str, float], expected: dict[str, set[str]]) -> None:
    sets = assign(NODES, [Project(name, quota=q) for name, q in quotas.items()])
    assert {k: set(v) for k, v in sets.items()} == expected


def test_the_assignment_ignores_node_order_and_state() -> None:
    """The same sets every cycle: listing order and a node going down change nothing."""
    projects = [Project("a", quota=12), Project("b", quota=4)]
    down = [node("n1", 8, state=NodeState.DOWN), *NODES[2:], NODES[0]]
    assert assign(down, projects) == assign(NODES, projects)


def test_a_job_starts_only_on_its_projects_nodes_and_why_says_so() -> None:
    projects = [Project("a", quota=8), Project("b", quota=8)]  # a: n0, b: n1
    nodes = [node("n0", 8), node("n1", 8)]
    busy = running(1, ("n0", tuple(range(8))), project="a")
    jobs = [pending(10, gpus=2, project="a"), pending(11, gpus=2, project="b")]
    result = schedule(snapshot(nodes, jobs, [busy], projects), preset("fifo-isolated"))
    assert [(s.job_id, s.placements[0].node) for s in result.starts] == [(11, "n1")]
    reason = result.pending[10]
    assert reason.code is ReasonCode.RESOURCES
    assert reason.message == (
        "partition: waits for project a's 1 node (8 GPUs: n0): 0 of their GPUs free, it needs 1 worker × 2 GPUs"
    )
    # Quota in GPUs anywhere (today's reading): a's job takes b's idle node.
    gpus = schedule(snapshot(nodes, jobs[:1], [], projects), preset("fifo-isolated", partition="gpus"))
    assert [s.job_id for s in gpus.starts] == [10]


def test_a_job_larger_than_its_partition_is_refused_and_blocks_nothing() -> None:
    projects = [Project("a", quota=12), Project("b", quota=4)]  # a: n0+n1 (16 GPUs), b: n2 (4)
    jobs = [pending(10, gpus=8, project="b"), pending(11, gpus=4, project="b"), pending(12, gpus=16, project="a")]
    result = schedule(snapshot(NODES, jobs, [], projects), preset("fifo-isolated"))
    # b's 8-GPU job could never fit its 4 GPUs: refused, and b's next job starts behind it on n2.
    # a's 16-GPU job takes its two nodes whole: the partition, not the quota of 12, bounds it.
    assert sorted((s.job_id, tuple(p.node for p in s.placements)) for s in result.starts) == [(11, ("n2",))]
    assert result.pending[10].code is ReasonCode.QUOTA
    assert "project b's 1 node (4 GPUs: n2)" in result.pending[10].message
    gang = [pending(12, gpus=8, workers=2, project="a")]
    started = schedule(snapshot(NODES, gang, [], projects), preset("fifo-isolated")).starts
    assert [sorted(p.node for p in s.placements) for s in started] == [["n0", "n1"]]


def test_a_project_without_nodes_waits_with_the_reason() -> None:
    projects = [Project("big", quota=30), Project("small", quota=2)]
    result = schedule(snapshot(NODES, [pending(10, gpus=1, project="small")], [], projects), preset("fifo-isolated"))
    assert result.starts == ()
    assert result.pending[10].code is ReasonCode.QUOTA
    assert "project small owns no nodes" in result.pending[10].message


def test_partition_nodes_is_refused_for_a_policy_that_does_not_isolate() -> None:
    with pytest.raises(InvalidInput, match="applies only to a policy that isolates projects"):
        preset("default", partition="nodes")
    with pytest.raises(InvalidInput, match="unknown partition 'racks': use one of gpus, nodes"):
        preset("fifo-isolated", partition="racks")
    assert preset("default", partition="gpus") == preset("default")


def test_a_carried_memory_follows_nodes_and_quotas_that_change() -> None:
    """The memory keeps each cycle's partitions; a node leaving or a quota changing must not
    leave it answering with the old sets (a cold cycle is the reference)."""
    memory = CycleMemory()
    config = preset("fifo-isolated")
    jobs = [pending(10, gpus=4, project="b")]
    first = snapshot(NODES, jobs, [], [Project("a", quota=12), Project("b", quota=4)])  # b: n2
    assert [s.placements[0].node for s in schedule(first, config, memory=memory).starts] == ["n2"]
    # n1 leaves: a takes n0 and n2 (8 + 4 = 12), b gets n3 (2 GPUs): its 4-GPU job cannot start.
    smaller = replace(first, nodes=tuple(n for n in NODES if n.name != "n1"))
    assert schedule(smaller, config, memory=memory) == schedule(smaller, config)
    assert schedule(smaller, config).starts == ()
    # b's quota grows past a's: b now takes n0 first.
    bigger = replace(first, projects=(Project("a", quota=4), Project("b", quota=8)))
    assert schedule(bigger, config, memory=memory) == schedule(bigger, config)
    assert [s.placements[0].node for s in schedule(bigger, config).starts] == ["n0"]
