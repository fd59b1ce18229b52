"""Topology: keep a worker's GPUs in one NVLink group where the node reports groups, filling the
fullest group that still fits (bin-pack inside the node), and prefer nodes where that is possible."""

from __future__ import annotations

from collections import defaultdict

from gpupool.scheduler.cluster import NodeFree
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.fit import gpu_ok


def score(free: NodeFree, demand: WorkerDemand) -> tuple[int, ...]:
    """Lower is better: fits inside one group first, then the node with the fewest free GPUs."""
    split = 0 if demand.whole_gpus <= 1 or _best_group(free, demand) is not None else 1
    return (split, len(free.free_gpus), free.free_milli)


def pick_gpus(free: NodeFree, demand: WorkerDemand) -> tuple[int, ...]:
    group = _best_group(free, demand)
    usable = sorted(i for i in free.free_gpus if gpu_ok(free, i, demand))
    if group is not None:
        usable = [i for i in usable if _group_of(free, i) == group] + [i for i in usable if _group_of(free, i) != group]
    return tuple(usable[: demand.whole_gpus])


def _best_group(free: NodeFree, demand: WorkerDemand) -> int | None:
    """The group with the fewest free GPUs that still holds the whole worker, if the node has groups."""
    counts: dict[int, int] = defaultdict(int)
    for index in free.free_gpus:
        group = _group_of(free, index)
        if group is not None and gpu_ok(free, index, demand):
            counts[group] += 1
    fitting = [(n, g) for g, n in counts.items() if n >= demand.whole_gpus]
    return min(fitting)[1] if fitting else None


def _group_of(free: NodeFree, index: int) -> int | None:
    return free.node.gpus[index].nvlink_group if index < len(free.node.gpus) else None
