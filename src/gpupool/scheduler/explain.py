"""A reason a person understands for every job a cycle leaves pending.

Computed against the free resources as the cycle leaves them, so the message names the
numbers the user would see in ``gpupool nodes`` right now. A job that the nodes that are up could
not run even idle is ``unsatisfiable``, and its reason names the nodes it waits for (down,
draining, drained, or with GPUs out of service): "waiting for 2 slots" would be a promise the
cluster as it is cannot keep.
"""

from __future__ import annotations

from typing import Any

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.nodes import NodeState
from gpupool.domain.resources import CPU_MILLI, show_cpus
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.capacity import idle_slots, room_for, shape, such
from gpupool.scheduler.cluster import ClusterState, NodeFree
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.fit import gpu_ok, gpu_slots, pick_shared_gpu, slots_on, slots_with
from gpupool.scheduler.partition import describe

Known = dict[tuple[object, ...], list[Any]]  # node lists (and node, GPU slots pairs) by what they depend on


def explain_partition(
    job: PendingJob, cluster: ClusterState, demand: WorkerDemand, members: frozenset[str], owned: int
) -> Reason:
    """Why a job confined to its project's own nodes waits: they cannot hold it even idle, or
    they are busy (with its project's jobs, or others' that started before the partition moved)."""
    where = describe(job.spec.project, members, owned)
    up = [cluster.nodes[n] for n in sorted(members) if n in cluster.nodes]
    workers = job.spec.workers
    most = room_for(demand, (f.node for f in up), workers, in_service_only=True)
    if most < workers:
        return Reason(
            ReasonCode.UNSATISFIABLE,
            f"partition: needs {shape(demand, workers)}; {where}, up and idle, hold {such(most)}",
        )
    free_gpus = sum(len(f.free_gpus) for f in up)
    slots = sum(slots_on(f, demand) for f in up)
    if slots >= workers:
        return Reason(ReasonCode.PRIORITY, f"partition: waits behind earlier jobs of its project on {where}")
    return Reason(
        ReasonCode.RESOURCES,
        f"partition: waits for {where}: {free_gpus} of their GPUs free, it needs {shape(demand, workers)}",
    )


def explain(
    job: PendingJob, cluster: ClusterState, demand: WorkerDemand | None = None, known: Known | None = None
) -> Reason:
    """``known``: node lists found for earlier shapes against the same free resources (one dict
    per cycle): the cycle explains dozens of shapes that differ in cores and memory but ask for
    the same GPUs, and the GPU checks are what costs."""
    demand = demand or WorkerDemand.of(job.spec)
    known = {} if known is None else known
    workers = job.spec.workers
    if not cluster.nodes:
        return Reason(ReasonCode.NO_NODES, "no node is up: start or undrain a node (gpupool nodes)")
    never = _never_fits(demand, cluster)
    if never is not None:
        return Reason(never.code, never.message + waits_for(demand, workers, cluster, known))
    total_slots = 0
    for free, gpus in _gpu_slots(demand, cluster, known):
        total_slots += slots_with(free, demand, gpus)
        if total_slots >= workers:  # enough said: the count is only shown when it falls short
            break
    if total_slots >= workers:
        return Reason(ReasonCode.PRIORITY, "resources were given to jobs ahead in the queue this cycle")
    most = _room_when_idle(demand, workers, cluster, known)
    if most < workers:
        return Reason(
            ReasonCode.UNSATISFIABLE,
            f"needs {shape(demand, workers)}; the nodes that are up hold {such(most)} even when idle"
            + waits_for(demand, workers, cluster, known),
        )
    if total_slots > 0 and workers > 1:
        return Reason(
            ReasonCode.GANG,
            f"gang: {workers} workers × {demand.describe_gpus()}, only {total_slots} such slot"
            f"{'' if total_slots == 1 else 's'} free",
        )
    return _why_no_slot(demand, workers, cluster, known)


NAMED = 5  # nodes a reason names at most, then how many more


def waits_for(demand: WorkerDemand, workers: int, cluster: ClusterState, known: Known) -> str:
    """``; it waits for node-3 (down), node-4 (drained)``: the nodes whose return would add room
    for this shape, or, when even all of them back would not do, that it never can run here."""
    key = ("waits for", demand, workers)
    found = known.get(key)
    if found is not None:
        return str(found[0])
    named = []
    for node in cluster.all_nodes:
        if node.state is not NodeState.UP and idle_slots(node, demand) > 0:
            named.append(f"{node.name} ({node.state.value})")
        elif any(not g.healthy for g in node.gpus) and idle_slots(node, demand) > idle_slots(
            node, demand, in_service_only=True
        ):
            named.append(f"{node.name} (GPUs out of service)")
    if room_for(demand, cluster.all_nodes, workers) < workers:
        note = "; even with every node back and idle it could not run: cancel it and ask for less"
    elif named:
        more = f" and {len(named) - NAMED} more" if len(named) > NAMED else ""
        note = f"; it waits for {', '.join(named[:NAMED])}{more} to be back in service"
    else:
        note = ""
    known[key] = [note]
    return note


def _room_when_idle(demand: WorkerDemand, workers: int, cluster: ClusterState, known: Known) -> int:
    """Workers of this shape the nodes that are up hold when idle, counted up to ``workers``."""
    key = ("room when idle", demand, workers)
    found = known.get(key)
    if found is None:
        up = (free.node for free in cluster.nodes.values())
        found = known[key] = [room_for(demand, up, workers, in_service_only=True)]
    return int(found[0])


def _could_host(demand: WorkerDemand, cluster: ClusterState, known: Known) -> list[NodeFree]:
    """The nodes with enough free GPUs for one worker, from the cluster's index."""
    key = ("could host", bool(demand.share), demand.whole_gpus)
    found = known.get(key)
    if found is not None:
        return found
    if demand.share:
        nodes = {**cluster.with_shares}
        for level in cluster.levels(1, True):
            nodes.update(level)
        found = known[key] = list(nodes.values())
    else:
        found = known[key] = [free for level in cluster.levels(demand.whole_gpus, True) for free in level.values()]
    return found


def _gpu_slots(demand: WorkerDemand, cluster: ClusterState, known: Known) -> list[tuple[NodeFree, int | None]]:
    """The nodes that could host a worker with their ``gpu_slots``, counted once per GPU part."""
    key = ("gpu slots", demand.whole_gpus, demand.share, demand.models, demand.gpu_memory_mib)
    found = known.get(key)
    if found is None:
        found = known[key] = [(free, gpu_slots(free, demand)) for free in _could_host(demand, cluster, known)]
    return found


def _never_fits(demand: WorkerDemand, cluster: ClusterState) -> Reason | None:
    if demand.models is not None and not demand.models & cluster.models:
        return Reason(ReasonCode.GPU_MODEL, f"no node that is up has a GPU of model {'|'.join(sorted(demand.models))}")
    if demand.gpu_memory_mib > cluster.max_gpu_memory:
        return Reason(
            ReasonCode.UNSATISFIABLE,
            f"needs {demand.gpu_memory_mib} MiB of GPU memory; the largest GPU that is up has {cluster.max_gpu_memory}",
        )
    if demand.whole_gpus > cluster.max_gpus:
        return Reason(
            ReasonCode.UNSATISFIABLE,
            f"needs {demand.whole_gpus} GPUs on one node; the largest node that is up has {cluster.max_gpus}",
        )
    if demand.cpu_milli > cluster.max_cpus * CPU_MILLI:
        return Reason(
            ReasonCode.UNSATISFIABLE, f"needs {demand.describe_cpus()} on one node; no node that is up has as many"
        )
    if demand.memory_mib > cluster.max_memory:
        return Reason(
            ReasonCode.UNSATISFIABLE,
            f"needs {demand.memory_mib} MiB memory on one node; no node that is up has as much",
        )
    return None


def _why_no_slot(demand: WorkerDemand, workers: int, cluster: ClusterState, known: Known) -> Reason:
    key = ("gpus fit", demand.whole_gpus, demand.share, demand.models, demand.gpu_memory_mib)  # what _gpu_fits reads
    gpu_ok = known.get(key)
    if gpu_ok is None:
        gpu_ok = known[key] = [f for f in _could_host(demand, cluster, known) if _gpu_fits(f, demand)]
    if demand.needs_gpu and not gpu_ok:
        total_free = cluster.total_free_gpus()
        need = demand.whole_gpus * workers
        if demand.share or total_free < need:
            return Reason(
                ReasonCode.RESOURCES,
                f"needs {demand.describe_gpus()}"
                + (f" × {workers} workers" if workers > 1 else "")
                + f"; {total_free} of {cluster.capacity} GPUs are free",
            )
        most = next(level for level in cluster.levels(0, False) if level)
        best = min(most.values(), key=lambda f: f.name)
        return Reason(
            ReasonCode.FRAGMENTED,
            f"fragmented: needs {demand.whole_gpus} GPUs on one node, the most free on any node is "
            f"{len(best.free_gpus)} ({best.name}); {total_free} are free in all",
        )
    candidates = gpu_ok or list(cluster.nodes.values())
    if demand.cpu_milli and all(f.free_milli < demand.cpu_milli for f in candidates):
        most_free = show_cpus(max(f.free_milli for f in candidates))
        needs = show_cpus(demand.cpu_milli)
        return Reason(ReasonCode.CPUS, f"needs {needs} free CPU cores on one node; the most free is {most_free}")
    most_mem = max(f.free_memory for f in candidates)
    return Reason(
        ReasonCode.MEMORY, f"needs {demand.memory_mib} MiB memory on one node; the most free is {most_mem} MiB"
    )


def _gpu_fits(free: NodeFree, demand: WorkerDemand) -> bool:
    if demand.share:
        return pick_shared_gpu(free, demand) is not None
    return sum(1 for i in free.free_gpus if gpu_ok(free, i, demand)) >= demand.whole_gpus
