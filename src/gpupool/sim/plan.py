"""Capacity planning: the smallest uniform cluster whose replay meets a queue-time target.

Queue time falls as nodes are added (not strictly, but near enough for sizing), so the search
brackets the answer by doubling from the mean load and then bisects. A replay that has already
seen more than 5% of jobs wait longer than the target stops there: the undersized clusters, whose
queues grow without bound, would otherwise cost most of the search.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig
from gpupool.sim import elastic
from gpupool.sim.cluster import uniform
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import summarize
from gpupool.sim.power import PowerConfig
from gpupool.sim.trace_job import TraceJob

PERCENTILE = 95


@dataclass(frozen=True, slots=True)
class Probe:
    nodes: int
    gpus: int
    p95_queue_s: float  # inf when the replay gave up early (known to exceed the target)
    avg_queue_s: float
    gpu_utilization: float
    meets: bool
    stopped_early: bool
    wall_s: float


def search(
    jobs: Sequence[TraceJob],
    target_s: float,
    gpus_per_node: int,
    gpu_model: str,
    projects: Sequence[Project],
    config: SchedulerConfig,
    max_nodes: int,
    progress: Callable[[str], None] = lambda _: None,
    power: Callable[[list[Node]], PowerConfig] | None = None,
    elastic_alpha: float = elastic.DEFAULT_ALPHA,
) -> tuple[int | None, list[Probe]]:
    """The smallest node count that meets the target (None if even ``max_nodes`` does not),
    and every probe made, by node count. ``power``: each probed cluster's power plan (a budget
    given as a share of peak grows with the cluster; one in watts does not)."""
    probes: dict[int, Probe] = {}

    def probe(nodes: int) -> Probe:
        if nodes not in probes:
            progress(f"replaying {len(jobs):,} jobs on {nodes} nodes × {gpus_per_node} GPUs…")
            probes[nodes] = _replay(
                jobs, nodes, target_s, gpus_per_node, gpu_model, projects, config, power, elastic_alpha
            )
        return probes[nodes]

    low = max([1, *(j.spec.workers for j in jobs if j.spec.gpus >= gpus_per_node)])  # the widest gang fits
    high = max(low, min(max_nodes, _mean_load_nodes(jobs, gpus_per_node)))
    while not probe(high).meets:
        if high >= max_nodes:
            return None, sorted(probes.values(), key=lambda p: p.nodes)
        low, high = high + 1, min(max_nodes, high * 2)
    while low < high:
        middle = (low + high) // 2
        if probe(middle).meets:
            high = middle
        else:
            low = middle + 1
    return high, sorted(probes.values(), key=lambda p: p.nodes)


def _replay(
    jobs: Sequence[TraceJob],
    nodes: int,
    target_s: float,
    gpus_per_node: int,
    gpu_model: str,
    projects: Sequence[Project],
    config: SchedulerConfig,
    power: Callable[[list[Node]], PowerConfig] | None = None,
    elastic_alpha: float = elastic.DEFAULT_ALPHA,
) -> Probe:
    # p95 is the value at rank ceil(0.95 n): it exceeds the target once this many jobs waited longer.
    late = len(jobs) - math.ceil(PERCENTILE / 100 * len(jobs)) + 1
    started = time.perf_counter()
    cluster = uniform(nodes, gpus_per_node, gpu_model)
    plan = None if power is None else power(cluster)
    result = simulate(
        jobs, cluster, projects, config, give_up=(target_s, late), power=plan, elastic_alpha=elastic_alpha
    )
    figures = summarize(result, time.perf_counter() - started)
    never = sum(1 for r in result.runs.values() if r.first_start is None)
    p95 = math.inf if result.stopped_early or never >= late else figures["p95_queue_s"]
    return Probe(
        nodes,
        nodes * gpus_per_node,
        p95,
        figures["avg_queue_s"],
        figures["gpu_utilization"],
        p95 <= target_s,
        result.stopped_early,
        figures["wall_s"],
    )


def _mean_load_nodes(jobs: Sequence[TraceJob], gpus_per_node: int) -> int:
    """Nodes the trace keeps busy on average: fewer can never keep queues short."""
    if not jobs:
        return 1
    span = max(j.submit_time + (j.duration or 0.0) for j in jobs) - min(j.submit_time for j in jobs)
    work = sum(j.spec.gpus * j.spec.most_workers * (j.duration or 0.0) for j in jobs)  # at full width
    return max(1, math.ceil(work / span / gpus_per_node)) if span > 0 else 1
