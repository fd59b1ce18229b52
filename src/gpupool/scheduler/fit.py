"""Node predicate and GPU/CPU choice for one worker on one node."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain.jobs import Placement
from gpupool.domain.resources import GPU_FRACTION_STEPS
from gpupool.scheduler.cluster import NodeFree, share_fits
from gpupool.scheduler.demand import WorkerDemand


def gpu_ok(free: NodeFree, index: int, demand: WorkerDemand) -> bool:
    """The GPU is in service, its model is allowed and, for a whole-GPU worker, it has the memory
    asked for. (An unhealthy GPU is never free, but a share of a running job may still sit on one.)"""
    if index in free.unhealthy:
        return False
    if demand.models is not None and free.models.get(index) not in demand.models:
        return False
    return demand.share > 0 or free.gpu_memory.get(index, 0) >= demand.gpu_memory_mib


def share_memory(free: NodeFree, index: int, demand: WorkerDemand) -> int:
    """The memory a fractional worker takes on a GPU: what it asked for, else its share of it."""
    return demand.gpu_memory_mib or demand.share * free.gpu_memory.get(index, 0) // GPU_FRACTION_STEPS


def can_fit(free: NodeFree, demand: WorkerDemand) -> bool:
    """Cheap test from counts: would one worker of this demand fit on the node now?"""
    if demand.cpu_milli > free.free_milli or demand.memory_mib > free.free_memory:
        return False
    if demand.share:
        return pick_shared_gpu(free, demand) is not None
    if demand.whole_gpus:
        if len(free.free_gpus) < demand.whole_gpus:
            return False
        if demand.models is not None or demand.gpu_memory_mib:
            return sum(1 for i in free.free_gpus if gpu_ok(free, i, demand)) >= demand.whole_gpus
    return True


def build(
    free: NodeFree,
    demand: WorkerDemand,
    worker: int,
    pick_gpus: Callable[[NodeFree, WorkerDemand], tuple[int, ...]] | None = None,
) -> Placement:
    """Where the worker goes on a node ``can_fit`` accepted: the GPUs ``pick_gpus`` chooses (by
    default the lowest free indices) and the lowest free cores, or, for a fraction of a core, the
    node's unpinned cores to share."""
    gpus: tuple[int, ...] = ()
    share = 0.0
    shared_mib = 0
    if demand.share:
        index = pick_shared_gpu(free, demand)
        assert index is not None
        gpus, share = (index,), demand.share / GPU_FRACTION_STEPS
        shared_mib = share_memory(free, index, demand)
    elif demand.whole_gpus and pick_gpus is not None:
        gpus = pick_gpus(free, demand)
    elif demand.whole_gpus:
        candidates = sorted(i for i in free.free_gpus if gpu_ok(free, i, demand))
        gpus = tuple(candidates[: demand.whole_gpus])
    pinned = demand.pinned_cores
    shared_milli = 0 if pinned else demand.cpu_milli
    cpus = tuple(sorted(free.free_cpus)[:pinned]) if pinned else tuple(sorted(free.free_cpus)) if shared_milli else ()
    return Placement(
        worker=worker,
        node=free.name,
        gpus=gpus,
        gpu_share=share,
        cpus=cpus,
        memory_mib=demand.memory_mib,
        gpu_memory_mib=shared_mib,
        cpu_milli=shared_milli,
    )


def fit_worker(free: NodeFree, demand: WorkerDemand, worker: int) -> Placement | None:
    """Return where ``worker`` would go on this node now, or None if it does not fit."""
    return build(free, demand, worker) if can_fit(free, demand) else None


def pick_shared_gpu(free: NodeFree, demand: WorkerDemand) -> int | None:
    """Best fit among GPUs already shared (fill them up first; of equals, the lowest index, so
    that the choice does not hang on the order the shares were recorded in, which differs between
    a cold cycle and one with the carried CycleMemory), else the lowest free GPU."""
    best: tuple[int, int] | None = None
    for index, used in free.shared.items():
        if (
            share_fits(used, demand.share)
            and gpu_ok(free, index, demand)
            and _memory_left(free, index) >= share_memory(free, index, demand)
            and (best is None or used > best[1] or (used == best[1] and index < best[0]))
        ):
            best = (index, used)
    if best is not None:
        return best[0]
    whole = [
        i
        for i in free.free_gpus
        if gpu_ok(free, i, demand) and free.gpu_memory.get(i, 0) >= share_memory(free, i, demand)
    ]
    return min(whole) if whole else None


def _memory_left(free: NodeFree, index: int) -> int:
    return free.gpu_memory.get(index, 0) - free.shared_memory.get(index, 0)


def slots_on(free: NodeFree, demand: WorkerDemand) -> int:
    """How many workers of this demand fit on the node now (for explanations)."""
    if demand.cpu_milli > free.free_milli or (demand.memory_mib and demand.memory_mib > free.free_memory):
        return 0  # not one, whatever its GPUs (the common case on a busy cluster: no need to count them)
    return slots_with(free, demand, gpu_slots(free, demand))


def gpu_slots(free: NodeFree, demand: WorkerDemand) -> int | None:
    """How many workers' GPUs the node has free now; None for a worker without GPUs. Reads only
    the demand's GPU part (whole GPUs, share, models, GPU memory)."""
    if demand.whole_gpus:
        return sum(1 for i in free.free_gpus if gpu_ok(free, i, demand)) // demand.whole_gpus
    if demand.share:
        return sum(
            (GPU_FRACTION_STEPS - u) // demand.share for i, u in free.shared.items() if gpu_ok(free, i, demand)
        ) + sum(1 for i in free.free_gpus if gpu_ok(free, i, demand)) * (GPU_FRACTION_STEPS // demand.share)
    return None


def slots_with(free: NodeFree, demand: WorkerDemand, gpus: int | None) -> int:
    """``slots_on`` given the node's ``gpu_slots`` for this demand."""
    limits = [] if gpus is None else [gpus]
    if demand.cpu_milli:
        limits.append(max(free.free_milli, 0) // demand.cpu_milli)
    if demand.memory_mib:
        limits.append(max(free.free_memory, 0) // demand.memory_mib)
    return min(limits) if limits else 1_000_000
