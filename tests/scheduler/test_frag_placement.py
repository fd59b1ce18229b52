"""The fragmentation-aware placement (``scheduler/plugins/frag.py``): cases worked by hand on a
2-node cluster, and properties over random clusters (hypothesis)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.jobs import Placement
from gpupool.domain.nodes import Node
from gpupool.domain.resources import fraction_steps
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler import registry, schedule
from gpupool.scheduler.cluster import ClusterState, NodeFree
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.cycle import open_session
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.fit import build, can_fit
from gpupool.scheduler.plugins import frag
from tests.support.builders import clusters, node, pending, running, snapshot

# Half the typical workers want one whole GPU and 2 CPUs, half want half a GPU and 1 CPU.
MIX = frag.Mix([frag.PodShape(2000, 1, 1000, None, 1.0), frag.PodShape(1000, 1, 500, None, 1.0)])
SHARE = WorkerDemand(0, 300, 1000, 0, None)  # 0.3 of a GPU, 1 CPU
WHOLE = WorkerDemand(1, 0, 2000, 0, None)


def two_nodes(n2_cpus: int = 8) -> dict[str, NodeFree]:
    """n1: GPU 0 shared, 0.7 of it taken (0.3 left), GPU 1 free; n2: both GPUs free."""
    snap = snapshot([node("n1", 2, cpus=8), node("n2", 2, cpus=n2_cpus)], [], [running(1, ("n1", (0,)), share=0.7)])
    return ClusterState(snap).nodes


def test_fragmentation_by_hand() -> None:
    nodes = two_nodes()
    plugin = frag.FragPlacement(MIX)
    n1, n2 = frag.node_key(nodes["n1"]), frag.node_key(nodes["n2"])
    assert n1 == ("Sim", 8000, (1000, 300)) and n2 == ("Sim", 8000, (1000, 1000))
    # n1: both shapes fit on GPU 1; for both, the 300 left on GPU 0 is a sliver: 0.5*300 + 0.5*300.
    assert plugin.fragmentation(n1) == pytest.approx(300)
    assert plugin.fragmentation(n2) == 0
    # The whole-GPU shape cannot run where only slivers are left: all 300 + 0 count for both shapes.
    assert plugin.fragmentation(("Sim", 8000, (300, 0))) == pytest.approx(300)
    # 0.3 on n2 leaves 700: too small for a whole GPU (0.5*700), room for a half (0).
    assert plugin.fragmentation(("Sim", 8000, (1000, 700))) == pytest.approx(350)
    # Too few CPUs for the whole-GPU shape: all free capacity counts for it.
    assert plugin.fragmentation(("Sim", 1000, (1000, 1000))) == pytest.approx(1000)


# The chance that a room is filled when shapes of weight w fit it: w / (w + 0.001).
BOTH = 1 / (1 + frag.COMPETITION)  # both shapes fit
HALF = 0.5 / (0.5 + frag.COMPETITION)  # only the half-GPU shape fits


def test_expected_waste_by_hand() -> None:
    plugin = frag.FragPlacement(MIX)
    assert frag.COMPETITION == 0.001
    # Nothing fits 300 (the smaller shape wants 500): all of it is waste; an empty room none.
    assert plugin.expected_waste(300, 8) == 300
    assert plugin.expected_waste(0, 8) == 0
    # 500: only the half fits (w 0.5): filled to 0 with chance HALF, else left at 500.
    half_room = (1 - HALF) * 500
    assert plugin.expected_waste(500, 7) == pytest.approx(half_room)
    assert half_room == pytest.approx(0.998, abs=1e-3)
    # 1000 with 8 cores: both fit; the whole one leaves 0, the half one 500 (on 7 cores).
    whole_room = (1 - BOTH) * 1000 + BOTH * (0.5 * 0 + 0.5 * half_room)
    assert plugin.expected_waste(1000, 8) == pytest.approx(whole_room)
    assert whole_room == pytest.approx(1.4975, abs=1e-4)
    # 700: the half takes 500 and leaves 200, which nothing fits.
    assert plugin.expected_waste(700, 7) == pytest.approx((1 - HALF) * 700 + HALF * 200)
    # 1000 with 1 core: only the half fits (the whole one wants 2), and after it no core is left
    # for the other half: 500 stays.
    assert plugin.expected_waste(1000, 1) == pytest.approx((1 - HALF) * 1000 + HALF * 500)
    # A node's expected waste is its rooms', with its free cores.
    nodes = two_nodes()
    assert plugin.node_waste(frag.node_key(nodes["n1"])) == pytest.approx(300 + whole_room)
    assert plugin.node_waste(frag.node_key(nodes["n2"])) == pytest.approx(2 * whole_room)


def test_a_share_goes_where_it_fills_the_sliver() -> None:
    nodes = two_nodes()
    plugin = frag.FragPlacement(MIX)
    # n1: the 0.3 fills GPU 0 (best fit), whose 300 no shape would have filled: growth -300.
    # n2: a free GPU left with 700, which a half takes (chance HALF) down to 200 nothing fits:
    # growth about +199.5. Scores count tenths of a GPU; no CPU shortfall on either (8 CPUs feed
    # 16 GPUs at this mix). FGD's snapshot would count the 700 as 350 (fragmented for the whole
    # GPU shape only); the look-ahead sees the 200 the half will leave.
    assert plugin.score(nodes["n1"], SHARE)[0] == -3
    assert plugin.score(nodes["n2"], SHARE)[0] == 2
    assert frag.place(frag.node_key(nodes["n1"]), frag.demand_key(SHARE)) == ("Sim", 7000, (1000, 0))


def test_a_whole_gpu_keeps_off_the_node_that_shares_when_fragmentation_ties() -> None:
    nodes = two_nodes()
    plugin = frag.FragPlacement(MIX)
    # n1 after: (300, 0), expected waste 300, growth -1.5. n2 after: (1000, 0), growth -1.5 too
    # (one of its two free rooms is gone). A tie, which the second key settles: n1 would mix
    # whole-GPU work with its shares.
    s1, s2 = plugin.score(nodes["n1"], WHOLE), plugin.score(nodes["n2"], WHOLE)
    assert s1 == (0, 1, 300) and s2 == (0, 0, 1000)


def test_cpu_bound_node_counts_its_stranded_gpus() -> None:
    nodes = two_nodes(n2_cpus=3)
    plugin = frag.FragPlacement(MIX)
    # n2 has 3 CPUs; a whole-GPU worker with 2 leaves 1: the whole-GPU shape (2 CPUs) cannot run
    # there any more, so the GPU left free counts whole for it (0.5*1000); the half-GPU shape
    # (1 CPU) still can (0). It was 0 before: growth 500.
    demand = WorkerDemand(1, 0, 2000, 0, None)
    after = frag.place(frag.node_key(nodes["n2"]), frag.demand_key(demand))
    assert after == ("Sim", 1000, (1000, 0))
    assert plugin.fragmentation(after) == pytest.approx(500)
    # The mix asks 750 thousandths of a GPU for 1,500 millicores: 0.5 a millicore. 3 CPUs feed 1,500 of the 2,000
    # free (500 short); after, 1 CPU feeds 500 of the 1,000 left (500 short): no growth there.
    assert MIX.gpu_per_cpu == pytest.approx(0.5)
    assert plugin.cpu_shortfall(frag.node_key(nodes["n2"])) == pytest.approx(500)
    assert plugin.cpu_shortfall(after) == pytest.approx(500)
    # Expected waste: the free GPU with 1 core left takes only a half, and then no core is left
    # for the other half: about 501 after, against about 3 before (two rooms both shapes fit).
    grown = plugin.node_waste(after) - plugin.node_waste(frag.node_key(nodes["n2"]))
    assert grown == pytest.approx(498, abs=0.5)
    assert plugin.score(nodes["n2"], demand)[0] == 5


def test_cpu_shortfall_sends_cpu_heavy_work_to_the_cpu_rich_node() -> None:
    """Two idle 2-GPU nodes, 4 and 16 CPUs; a 1-GPU worker with 3 CPUs. On the 4-CPU node 1 CPU
    is left: only a half can use the other GPU any more (expected waste about 3 -> 501), and that
    CPU feeds 500 of its 1,000 (shortfall 0 -> 500, counted twice): 498 + 1,000 = 15 tenths. On
    the 16-CPU node expected waste drops by a room's 1.5: 0."""
    snap = snapshot([node("a", 2, cpus=4), node("b", 2, cpus=16)], [])
    nodes = ClusterState(snap).nodes
    plugin = frag.FragPlacement(MIX)
    demand = WorkerDemand(1, 0, 3000, 0, None)
    assert plugin.score(nodes["a"], demand) == (15, 0, 1000)
    assert plugin.score(nodes["b"], demand) == (0, 0, 1000)


def test_the_registered_plugin_in_a_cycle() -> None:
    snap = snapshot(
        [node("n1", 2, cpus=64), node("n2", 2, cpus=64)],
        [pending(2, gpus=0.3, cpus=1), pending(3, gpus=1, cpus=2)],
        [running(1, ("n1", (0,)), share=0.7)],
    )
    result = schedule(snap, SchedulerConfig(placement="frag"))
    where = {s.job_id: s.placements[0] for s in result.starts}
    # With the openb mix: the 0.3 fills n1's shared GPU (the 300 left was a room only rare shapes
    # fit, expected to stay mostly empty). The whole GPU then takes a free room on either node,
    # the same change of expected waste, so bin-pack settles it: n1's last GPU, and n2 keeps its two.
    assert (where[2].node, where[2].gpus) == ("n1", (0,))
    assert (where[3].node, where[3].gpus) == ("n1", (1,))


CPU_CHOICES: list[float | str] = [0, 0, 1, 2, 4, 0.5, 1.5, "250m"]


@st.composite
def fractional_cpus(draw: st.DrawFn) -> tuple[list, list[PendingJob]]:  # type: ignore[type-arg]
    """``clusters()`` with some workers asking for a fraction of a core, or a core and a half."""
    nodes, jobs = draw(clusters())
    return nodes, [
        pending(
            j.id,
            gpus=j.spec.gpus,
            workers=j.spec.workers,
            cpus=draw(st.sampled_from(CPU_CHOICES)),
            memory=f"{j.spec.memory_mib}M" if j.spec.memory_mib else None,
            gpu_memory=f"{j.spec.gpu_memory_mib}M" if j.spec.gpu_memory_mib else None,
        )
        for j in jobs
    ]


@settings(max_examples=200, deadline=None)
@given(fractional_cpus())
def test_frag_never_over_allocates_cpus_memory_or_gpu_shares(cluster: tuple[list, list[PendingJob]]) -> None:  # type: ignore[type-arg]
    nodes, jobs = cluster
    result = schedule(snapshot(nodes, jobs), SchedulerConfig(placement="frag"))
    placements = [p for s in result.starts for p in s.placements]
    whole: Counter[tuple[str, int]] = Counter()
    shares: Counter[tuple[str, int]] = Counter()
    pinned: Counter[tuple[str, int]] = Counter()
    milli: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    for p in placements:
        for g in p.gpus:
            (shares if p.gpu_share else whole)[(p.node, g)] += fraction_steps(p.gpu_share) if p.gpu_share else 1
        if p.cpu_milli:
            milli[p.node] += p.cpu_milli
        else:
            pinned.update((p.node, c) for c in p.cpus)
            milli[p.node] += 1000 * len(p.cpus)
        memory[p.node] += p.memory_mib
    by_name = {n.name: n for n in nodes}
    assert all(n == 1 for n in whole.values()), "a whole GPU given twice"
    assert not set(whole) & set(shares), "a GPU both whole and shared"
    assert all(n <= 1000 for n in shares.values()), "a GPU shared beyond 100 %"
    assert all(n == 1 for n in pinned.values()), "a core pinned twice"
    assert all(c < by_name[name].cpus for name, c in pinned), "a core the node does not have"
    assert all(used <= 1000 * by_name[name].cpus for name, used in milli.items()), "CPU over-allocated"
    assert all(used <= by_name[name].memory_mib for name, used in memory.items()), "memory over-allocated"
    by_id = {j.id: j for j in jobs}
    for start in result.starts:
        asked = by_id[start.job_id].spec.cpu_milli
        for p in start.placements:
            assert (p.cpu_milli == asked) if asked % 1000 else (len(p.cpus) == asked // 1000 and not p.cpu_milli)


@settings(max_examples=150, deadline=None)
@given(fractional_cpus(), st.data())
def test_the_key_based_choice_is_the_schedulers(cluster: tuple[list, list[PendingJob]], data: st.DataObject) -> None:  # type: ignore[type-arg]
    """What the placement study does (the best (score_key, name) over node keys, memory checked
    apart) chooses the node ``Session._best_node`` chooses, pod after pod."""
    nodes, jobs = cluster
    plugin_entry = registry.placement("frag")
    session = open_session(snapshot(nodes, []), SchedulerConfig(placement="frag"))
    for job in jobs:
        if job.spec.workers != 1 or job.spec.gpu_memory_mib:
            continue
        demand = WorkerDemand.of(job.spec)
        live = session._best_node(demand, plugin_entry)
        keyed = _keyed_choice(session.cluster, demand)
        assert (live.name if live else None) == (keyed.name if keyed else None)
        if live is not None and data.draw(st.booleans()):
            session.cluster.take(build(live, demand, 0))


def _keyed_choice(cluster: ClusterState, demand: WorkerDemand) -> NodeFree | None:
    best: tuple[tuple[int, ...], str] | None = None
    chosen = None
    for name in sorted(cluster.nodes):
        free = cluster.nodes[name]
        score = frag.DEFAULT.score_key(frag.node_key(free, demand.models is not None), frag.demand_key(demand))
        if score is None:
            assert not can_fit(free, demand)
            continue
        if free.free_memory < demand.memory_mib:
            continue
        if best is None or (score, name) < best:
            best, chosen = (score, name), free
    return chosen


@st.composite
def mixed_nodes(draw: st.DrawFn) -> list[Node]:
    """Nodes of two models, some with a GPU of the other model, some with unhealthy GPUs."""
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.integers(0, 8))
        made = node(
            f"n{i}",
            gpus,
            cpus=draw(st.integers(1, 16)),
            model=draw(st.sampled_from(["A100", "H100"])),
            unhealthy=tuple(draw(st.sets(st.integers(0, gpus - 1), max_size=2))) if gpus else (),
            gpu_memory_mib=draw(st.sampled_from([40960, 81920])),
        )
        if gpus > 1 and draw(st.booleans()):
            other = replace(made.gpus[-1], model="L4", memory_mib=24576)
            made = replace(made, gpus=(*made.gpus[:-1], other))
        nodes.append(made)
    return nodes


@settings(max_examples=150, deadline=None)
@given(mixed_nodes(), fractional_cpus(), st.data())
def test_the_indexed_choice_is_a_scan_of_every_node(
    nodes: list[Node],
    cluster: tuple[list, list[PendingJob]],  # type: ignore[type-arg]
    data: st.DataObject,
) -> None:
    """``choose`` (each node key scored once) picks the node that scoring every node that fits
    and taking the lowest (score, name) picks, with avoid sets, model choices, GPU memory,
    unhealthy and mixed-model nodes, while placements come and go; and the key index it reads
    stays what a fresh one would be."""
    _, jobs = cluster
    plugin_entry = registry.placement("frag")
    scorer = frag.DEFAULT
    if jobs and data.draw(st.booleans()):  # measured against the jobs' own mix, as the head does
        assert plugin_entry.for_pool is not None
        plugin_entry = plugin_entry.for_pool([(WorkerDemand.of(j.spec), j.spec.workers) for j in jobs], None)
        assert isinstance(plugin_entry.learned, frag.FragPlacement)
        scorer = plugin_entry.learned
    session = open_session(snapshot(nodes, []), SchedulerConfig(placement="frag"))
    state = session.cluster
    placed: list[Placement] = []
    names = sorted(state.nodes)
    for job in jobs:
        demand = WorkerDemand.of(job.spec)
        if data.draw(st.booleans()):
            demand = replace(
                demand, models=frozenset(data.draw(st.sets(st.sampled_from(["A100", "H100", "L4"]), min_size=1)))
            )
        avoid = frozenset(data.draw(st.sets(st.sampled_from(names), max_size=2))) if names else frozenset()
        for worker in range(job.spec.workers):
            live = session._best_node(demand, plugin_entry, avoid)
            scanned = [
                (scorer.score(free, demand), name)
                for name, free in state.nodes.items()
                if name not in avoid and can_fit(free, demand)
            ]
            assert (live.name if live else None) == (min(scanned)[1] if scanned else None)
            if live is None:
                break
            p = build(live, demand, worker)
            state.take(p)
            placed.append(p)
        if len(placed) > 0 and data.draw(st.booleans()):
            state.give_back(placed.pop(data.draw(st.integers(0, len(placed) - 1))))
    fresh = ClusterState(snapshot(nodes, []))
    for p in placed:
        fresh.take(p)
    assert state.keys() == fresh.keys()
