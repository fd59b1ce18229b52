"""``frag`` measured against the pool's own mix of workers (``frag.for_pool``), as the head's
default placement: the mix learned from running and waiting jobs, kept while it drifts little."""

from __future__ import annotations

import pytest

from gpupool.scheduler import schedule
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.incremental import CycleMemory
from gpupool.scheduler.plugins import frag
from tests.support.builders import node, pending, running, snapshot

ONE = WorkerDemand(1, 0, 0, 0, None)
TWO = WorkerDemand(2, 0, 0, 0, None)
SHARE = WorkerDemand(0, 500, 4000, 0, None)


def test_the_default_placement_is_frag() -> None:
    assert SchedulerConfig().placement == "frag"


def test_gangs_on_cpu_poor_nodes_pack_as_under_binpack() -> None:
    """Two nodes of 4 GPUs and 2 cores, jobs of 2, 2, 3 and 1 GPUs asking no CPUs: all four run
    at once only if the two 2-GPU jobs share a node. Measured against openb's mix (3 to 19 cores
    a GPU), every GPU here is short of CPUs and the empty node strands the most, so the second
    2-GPU job would go there and the 3-GPU job wait; against the pool's own mix (no CPUs asked),
    no GPU is short of CPUs and the tie goes to the fuller node."""
    nodes = [node("a", 4, cpus=2), node("b", 4, cpus=2)]
    jobs = [pending(i + 1, gpus=g, at=float(i)) for i, g in enumerate((2, 2, 3, 1))]
    result = schedule(snapshot(nodes, jobs), SchedulerConfig())
    assert sorted((s.job_id, s.placements[0].node) for s in result.starts) == [(1, "a"), (2, "a"), (3, "b"), (4, "b")]
    # What openb's mix would have said for the second 2-GPU job (the first on "a").
    after_first = ClusterState(snapshot(nodes, [], [running(1, ("a", (0, 1)))])).nodes
    assert frag.DEFAULT.score(after_first["b"], TWO) < frag.DEFAULT.score(after_first["a"], TWO)
    pool = frag.for_pool([(TWO, 2), (WorkerDemand(3, 0, 0, 0, None), 1), (ONE, 1)])
    assert pool.mix.gpu_per_cpu is None and pool.cpu_shortfall(frag.node_key(after_first["b"])) == 0
    assert pool.score(after_first["a"], TWO) < pool.score(after_first["b"], TWO)


def test_the_pool_mix_counts_workers_and_keeps_the_commonest_in_hundredths() -> None:
    """Each job's workers count; the commonest shapes that make 95 % of the workers are kept,
    weighed in hundredths of all workers."""
    rare = WorkerDemand(1, 0, 1000, 0, None)
    plugin = frag.for_pool([(ONE, 3), (TWO, 60), (ONE, 897), (SHARE, 36), (rare, 4)])
    # 1,000 workers: ONE 900 and TWO 60 make 96 %, so SHARE and rare are left out; 90 and 6 hundredths.
    weights = {(s.gpus, s.milli, s.cpu_milli): s.weight for s in plugin.mix.shapes}
    assert weights == pytest.approx({(1, 1000, 0): 90 / 96, (2, 1000, 0): 6 / 96})
    assert frag.for_pool([]) is frag.DEFAULT


def test_shapes_that_round_to_nothing_are_left_out() -> None:
    counts = {(0, 1, 1000, None): 900} | {(1000 * i, 1, 1000, None): 1 for i in range(1, 61)}
    # 900 of 960 is 93.75 %: twelve of the single workers come in before 95 %, each 0.1 of a hundredth.
    assert [(s.cpu_milli, s.weight) for s in frag.Mix.of_counts(counts, resolution=100).shapes] == [(0, 1.0)]
    assert len(frag.Mix.of_counts(counts).shapes) == 13


def test_a_mix_asking_no_cpus_strands_no_gpus_and_multi_gpu_shapes_count_cpus_per_gpu() -> None:
    no_cpus = frag.Mix([frag.PodShape(0, 1, 1000, None, 1.0)])
    assert no_cpus.gpu_per_cpu is None
    assert frag.FragPlacement(no_cpus).cpu_shortfall(("Sim", 0, (1000, 1000))) == 0
    gang = frag.Mix([frag.PodShape(8000, 4, 1000, None, 1.0)])
    assert gang.fillers == ((1000, 2000, 1.0),)  # a room takes one GPU and its quarter of the cores
    assert gang.gpu_per_cpu == pytest.approx(0.5)  # 4,000 thousandths for 8,000 millicores


def test_the_pool_keeps_its_mix_until_it_drifts_a_tenth() -> None:
    first = frag.for_pool([(ONE, 50), (SHARE, 50)])
    assert frag.for_pool([(ONE, 55), (SHARE, 45)], first) is first  # 5 % moved
    moved = frag.for_pool([(ONE, 65), (SHARE, 35)], first)  # 15 % moved
    assert moved is not first
    assert {s.milli: s.weight for s in moved.mix.shapes} == pytest.approx({1000: 0.65, 500: 0.35})
    assert first.mix.distance(moved.mix) == pytest.approx(0.15)
    # Without a last one, the same mix is the same placement (its memos kept).
    assert frag.for_pool([(ONE, 13), (SHARE, 7)]) is moved


def test_a_cycle_hands_the_mix_it_used_to_the_next() -> None:
    memory = CycleMemory()
    nodes = [node("a", 4, cpus=64), node("b", 4, cpus=64)]
    schedule(snapshot(nodes, [pending(1, gpus=1, cpus=4), pending(2, gpus=0.5, cpus=4)]), memory=memory)
    first = memory.placement
    assert isinstance(first, frag.FragPlacement)
    assert {s.milli for s in first.mix.shapes} == {1000, 500}
    # Job 1 runs, job 2 runs; a third like job 1 waits: the pool is 2/3 whole GPUs, 1/6 moved.
    held = [running(1, ("a", (0,)), cpus=4), running(2, ("a", (1,)), share=0.5, cpus=4)]
    schedule(snapshot(nodes, [pending(3, gpus=1, cpus=4)], held), memory=memory)
    assert memory.placement is not first
    assert isinstance(memory.placement, frag.FragPlacement)
    assert {s.milli: s.weight for s in memory.placement.mix.shapes} == pytest.approx({1000: 0.67, 500: 0.33})
