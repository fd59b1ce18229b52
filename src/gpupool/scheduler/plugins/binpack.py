"""Bin-pack: fill partly used nodes first, keep whole nodes free for big jobs."""

from __future__ import annotations

from gpupool.scheduler.cluster import NodeFree
from gpupool.scheduler.demand import WorkerDemand


def score(free: NodeFree, demand: WorkerDemand) -> tuple[int, ...]:
    """Lower is better: the node with the fewest free GPUs that still fits, then by name."""
    if not demand.needs_gpu:
        # CPU-only work goes where GPUs are busiest, so it does not block a free GPU node.
        return (len(free.free_gpus), free.free_milli)
    partly_shared = 0 if (demand.share and free.shared) else 1
    return (partly_shared, len(free.free_gpus), free.free_milli)
