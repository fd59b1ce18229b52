"""Table-driven scenarios: a cluster, a queue, the expected placements and reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.nodes import Node, NodeState
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.scheduler.policies import preset
from tests.support.builders import node, pending, running, snapshot


@dataclass
class Case:
    name: str
    nodes: list[Node]
    queue: list[PendingJob]
    running: list[RunningJob] = field(default_factory=list)
    # job id -> list of (node, gpu indices) per worker
    starts: dict[int, list[tuple[str, tuple[int, ...]]]] = field(default_factory=dict)
    reasons: dict[int, tuple[ReasonCode, str]] = field(default_factory=dict)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)


CASES = [
    Case(
        "two 4-GPU jobs fill two nodes; the third waits",
        [node("n1"), node("n2")],
        [pending(1, gpus=4), pending(2, gpus=4), pending(3, gpus=4)],
        starts={1: [("n1", (0, 1, 2, 3))], 2: [("n2", (0, 1, 2, 3))]},
        reasons={3: (ReasonCode.RESOURCES, "0 of 8 GPUs are free")},
    ),
    Case(
        "bin-pack: a 1-GPU job goes to the partly used node",
        [node("n1"), node("n2")],
        [pending(1, gpus=1)],
        running=[running(9, ("n2", (0,)))],
        starts={1: [("n2", (1,))]},
    ),
    Case(
        "spread: a 1-GPU job goes to the emptiest node",
        [node("n1"), node("n2")],
        [pending(1, gpus=1)],
        running=[running(9, ("n2", (0,)))],
        starts={1: [("n1", (0,))]},
        config=SchedulerConfig(placement="spread"),
    ),
    Case(
        "fragmented: 4 free GPUs in all, but at most 2 on one node",
        [node("n1"), node("n2")],
        [pending(1, gpus=4)],
        running=[running(8, ("n1", (0, 1))), running(9, ("n2", (0, 1)))],
        reasons={1: (ReasonCode.FRAGMENTED, "needs 4 GPUs on one node, the most free on any node is 2")},
    ),
    Case(
        "gang: 2 workers x 4 GPUs with one free slot starts nothing",
        [node("n1"), node("n2")],
        [pending(1, gpus=4, workers=2)],
        running=[running(9, ("n2", (0,)))],
        reasons={1: (ReasonCode.GANG, "only 1 such slot")},
    ),
    Case(
        "gang: 2 workers x 4 GPUs across two nodes",
        [node("n1"), node("n2")],
        [pending(1, gpus=4, workers=2)],
        starts={1: [("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3))]},
    ),
    Case(
        "a gang of 2x2 may share one node",
        [node("n1")],
        [pending(1, gpus=2, workers=2)],
        starts={1: [("n1", (0, 1)), ("n1", (2, 3))]},
    ),
    Case(
        "priority: inference before interactive before train, whatever the submit order",
        [node("n1", 2)],
        [pending(1, priority="train"), pending(2, priority="interactive"), pending(3, priority="inference")],
        starts={3: [("n1", (0,))], 2: [("n1", (1,))]},
        reasons={1: (ReasonCode.RESOURCES, "")},
    ),
    Case(
        "greedy (no backfill): a small job passes a big one that does not fit",
        [node("n1", 4)],
        [pending(1, gpus=4), pending(2, gpus=2), pending(3, gpus=1)],
        running=[running(9, ("n1", (0, 1)))],
        starts={2: [("n1", (2, 3))]},
        reasons={1: (ReasonCode.RESOURCES, ""), 3: (ReasonCode.RESOURCES, "")},
        config=preset("greedy"),
    ),
    Case(
        "backfill: the free GPUs are held for the big job first in line",
        [node("n1", 4)],
        [pending(1, gpus=4), pending(2, gpus=2)],
        running=[running(9, ("n1", (0, 1)))],
        reasons={
            1: (ReasonCode.RESOURCES, "needs 4 GPUs; 2 of 4 GPUs are free"),
            2: (ReasonCode.BACKFILL, "held for job 1, first in line"),
        },
    ),
    Case(
        "backfill: a job that ends before the reservation starts uses the held GPUs",
        [node("n1", 4)],
        [pending(1, gpus=4), pending(2, gpus=2, max_runtime_s=600), pending(3, gpus=2, max_runtime_s=7200)],
        running=[running(9, ("n1", (0, 1)), max_runtime_s=3600)],  # ends at T0+1h: job 1 starts then
        starts={2: [("n1", (2, 3))]},
        reasons={1: (ReasonCode.RESOURCES, ""), 3: (ReasonCode.RESOURCES, "")},
    ),
    Case(
        "backfill: GPUs the reservation does not need are free for anyone",
        [node("n1", 4), node("n2", 4)],
        [pending(1, gpus=4), pending(2, gpus=1)],
        running=[running(8, ("n1", (0, 1))), running(9, ("n2", (0,)))],
        starts={2: [("n2", (1,))]},
        reasons={1: (ReasonCode.FRAGMENTED, "")},
    ),
    Case(
        "fractions share one GPU up to 100%",
        [node("n1", 2)],
        [pending(1, gpus=0.5), pending(2, gpus=0.5), pending(3, gpus=0.5)],
        starts={1: [("n1", (0,))], 2: [("n1", (0,))], 3: [("n1", (1,))]},
    ),
    Case(
        "a fraction never lands on a GPU held whole",
        [node("n1", 1)],
        [pending(1, gpus=0.25)],
        running=[running(9, ("n1", (0,)))],
        reasons={1: (ReasonCode.RESOURCES, "0.25 of a GPU")},
    ),
    Case(
        "a fraction fills the most used shared GPU first",
        [node("n1", 2)],
        [pending(1, gpus=0.25)],
        running=[running(8, ("n1", (0,)), share=0.25), running(9, ("n1", (1,)), share=0.5)],
        starts={1: [("n1", (1,))]},
    ),
    Case("CPU-only jobs need no GPU", [node("n1", 0, cpus=4)], [pending(1, gpus=0, cpus=2)], starts={1: [("n1", ())]}),
    Case(
        "cpus: GPUs are free but cores are not",
        [node("n1", 4, cpus=4)],
        [pending(1, gpus=1, cpus=4)],
        running=[running(9, ("n1", (0,)), cpus=2)],
        reasons={1: (ReasonCode.CPUS, "needs 4 free CPU cores")},
    ),
    Case(
        "memory: needs more than any node has",
        [node("n1", 4, memory_mib=1024)],
        [pending(1, gpus=1, memory="2G")],
        reasons={1: (ReasonCode.UNSATISFIABLE, "2048 MiB memory")},
    ),
    Case(
        "more GPUs per worker than any node has",
        [node("n1", 4)],
        [pending(1, gpus=8)],
        reasons={1: (ReasonCode.UNSATISFIABLE, "largest node that is up has 4")},
    ),
    Case(
        "drained and down nodes take nothing",
        [node("n1", state=NodeState.DRAINED), node("n2", state=NodeState.DOWN)],
        [pending(1)],
        reasons={1: (ReasonCode.NO_NODES, "no node is up")},
    ),
    Case(
        "an unhealthy GPU is never handed out",
        [node("n1", 2, unhealthy=(0,))],
        [pending(1), pending(2)],
        starts={1: [("n1", (1,))]},
        reasons={2: (ReasonCode.RESOURCES, "0 of 1 GPUs are free")},
    ),
    Case(
        "GPU model constraint",
        [node("n1", 2, model="A100"), node("n2", 2, model="H100")],
        [pending(1, gpu_model="H100|B200")],
        starts={1: [("n2", (0,))]},
    ),
    Case(
        "GPU model nobody has",
        [node("n1", 2, model="A100")],
        [pending(1, gpu_model="H100")],
        reasons={1: (ReasonCode.GPU_MODEL, "H100")},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario(case: Case) -> None:
    result = schedule(snapshot(case.nodes, case.queue, case.running), case.config)
    got = {s.job_id: [(p.node, p.gpus) for p in s.placements] for s in result.starts}
    assert got == case.starts
    assert set(result.pending) == {j.id for j in case.queue} - set(got)
    for job_id, (code, fragment) in case.reasons.items():
        reason = result.pending[job_id]
        assert reason.code is code, reason
        assert fragment in reason.message


def test_every_pending_job_gets_a_reason() -> None:
    result = schedule(snapshot([node("n1", 1)], [pending(i) for i in range(1, 6)]))
    assert len(result.starts) == 1
    assert set(result.pending) == {2, 3, 4, 5}
    assert all(r.message for r in result.pending.values())


def test_unknown_placement_or_action_is_a_clear_error() -> None:
    from gpupool.domain.errors import InvalidInput

    with pytest.raises(InvalidInput, match="unknown placement"):
        schedule(snapshot([node("n1")], [pending(1)]), SchedulerConfig(placement="magic"))
    with pytest.raises(InvalidInput, match="unknown scheduler action"):
        schedule(snapshot([node("n1")], [pending(1)]), SchedulerConfig(actions=("allocate", "teleport")))


def grouped_node(name: str, used: tuple[int, ...] = ()) -> Node:
    """8 GPUs in two NVLink groups: 0-3 and 4-7."""
    from dataclasses import replace

    base = node(name, 8)
    return replace(base, gpus=tuple(replace(g, nvlink_group=g.index // 4) for g in base.gpus))


def test_topology_keeps_a_worker_inside_one_nvlink_group() -> None:
    held = [running(9, ("n1", (0, 1, 5)))]  # group 0 has 2,3 free; group 1 has 4,6,7 free
    binpack = schedule(snapshot([grouped_node("n1")], [pending(1, gpus=3)], held))
    assert binpack.starts[0].placements[0].gpus == (2, 3, 4)  # lowest indices, across groups
    topo = schedule(snapshot([grouped_node("n1")], [pending(1, gpus=3)], held), SchedulerConfig(placement="topology"))
    assert topo.starts[0].placements[0].gpus == (4, 6, 7)
    small = schedule(snapshot([grouped_node("n1")], [pending(1, gpus=2)], held), SchedulerConfig(placement="topology"))
    assert small.starts[0].placements[0].gpus == (2, 3)  # the fullest group that still fits


def test_topology_prefers_a_node_where_the_worker_fits_in_one_group() -> None:
    held = [running(8, ("a", (0, 1, 4, 5))), running(9, ("b", (0, 1, 2, 4)))]  # a: 2+2 free, b: 1+3 free
    result = schedule(
        snapshot([grouped_node("a"), grouped_node("b")], [pending(1, gpus=3)], held),
        SchedulerConfig(placement="topology"),
    )
    assert [(p.node, p.gpus) for p in result.starts[0].placements] == [("b", (5, 6, 7))]


def test_shares_never_exceed_the_memory_of_their_gpu() -> None:
    queue = [pending(1, gpus=0.25, gpu_memory="50G"), pending(2, gpus=0.25, gpu_memory="50G"), pending(3, gpus=0.25)]
    result = schedule(snapshot([node("n1", 2)], queue))  # 80 GiB GPUs
    placed = {s.job_id: s.placements[0] for s in result.starts}
    assert (placed[1].gpus, placed[2].gpus) == ((0,), (1,))  # 50G + 50G would overflow one GPU
    assert placed[1].gpu_memory_mib == 51200
    assert placed[3].gpus == (0,) and placed[3].gpu_memory_mib == 20480  # a quarter of 80 GiB, beside job 1


def test_gpu_memory_for_whole_gpus_picks_big_enough_gpus() -> None:
    nodes = [node("small", 4, gpu_memory_mib=16384), node("big", 4, gpu_memory_mib=81920)]
    result = schedule(snapshot(nodes, [pending(1, gpus=2, gpu_memory="40G"), pending(2, gpu_memory="100G")]))
    assert [(p.node, p.gpus) for p in result.starts[0].placements] == [("big", (0, 1))]
    assert result.pending[2].code is ReasonCode.UNSATISFIABLE
    assert "GPU memory" in result.pending[2].message
