"""Could a job ever fit this cluster, with nothing else running?

A strict queue (``fifo``) lets the first job that does not fit block those behind it, but a job
that would not fit even an empty cluster (too big, a model nobody has) must not block the queue
forever: it waits with its own reason and the rest go on. Answered from node totals by counting
how many workers each node could hold, so it costs one pass over the nodes per job shape, and the
answer is remembered for as long as the nodes stay the same.
"""

from __future__ import annotations

from gpupool.domain.resources import GPU_FRACTION_STEPS
from gpupool.scheduler.cluster import ClusterState, NodeFree
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.plugins.fit import gpu_ok


def ever_fits(cluster: ClusterState, demand: WorkerDemand, workers: int) -> bool:
    slots = 0
    for free in cluster.nodes.values():
        slots += _workers_per_node(free, demand)
        if slots >= workers:
            return True
    return False


def _workers_per_node(free: NodeFree, demand: WorkerDemand) -> int:
    node = free.node
    limits = [workers_by(node.cpus, demand.cpus), workers_by(node.memory_mib, demand.memory_mib)]
    if demand.needs_gpu:
        usable = sum(1 for g in node.gpus if g.healthy and _usable(free, g.index, g.memory_mib, demand))
        per_gpu = GPU_FRACTION_STEPS // demand.share if demand.share else 0
        limits.append(usable * per_gpu if demand.share else usable // demand.whole_gpus)
    return min(limits)


def workers_by(total: int, each: int) -> int:
    return total // each if each else 1 << 30


def _usable(free: NodeFree, index: int, memory_mib: int, demand: WorkerDemand) -> bool:
    if demand.share and demand.gpu_memory_mib > memory_mib:
        return False
    return gpu_ok(free, index, demand)
