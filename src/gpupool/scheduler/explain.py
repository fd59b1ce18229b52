"""A reason a person understands for every job a cycle leaves pending.

Computed against the free resources as the cycle leaves them, so the message names the
numbers the user would see in ``gpupool nodes`` right now.
"""

from __future__ import annotations

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.cluster import ClusterState, NodeFree, share_fits
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.plugins.fit import model_ok, slots_on


def explain(job: PendingJob, cluster: ClusterState) -> Reason:
    demand = WorkerDemand.of(job.spec)
    workers = job.spec.workers
    if not cluster.nodes:
        return Reason(ReasonCode.NO_NODES, "no node is up: start or undrain a node (gpupool nodes)")
    never = _never_fits(demand, cluster)
    if never is not None:
        return never
    slots = {name: slots_on(free, demand) for name, free in cluster.nodes.items()}
    total_slots = sum(slots.values())
    if total_slots >= workers:
        return Reason(ReasonCode.PRIORITY, "resources were given to jobs ahead in the queue this cycle")
    if total_slots > 0 and workers > 1:
        return Reason(
            ReasonCode.GANG,
            f"gang: {workers} workers × {demand.describe_gpus()}, only {total_slots} such slot"
            f"{'' if total_slots == 1 else 's'} free",
        )
    return _why_no_slot(demand, workers, cluster)


def _never_fits(demand: WorkerDemand, cluster: ClusterState) -> Reason | None:
    nodes = [f.node for f in cluster.nodes.values()]
    if demand.models is not None and not any(g.model in demand.models for n in nodes for g in n.gpus):
        return Reason(ReasonCode.GPU_MODEL, f"no node that is up has a GPU of model {'|'.join(sorted(demand.models))}")
    most_gpus = max(len(n.gpus) for n in nodes)
    if demand.whole_gpus > most_gpus:
        return Reason(
            ReasonCode.UNSATISFIABLE,
            f"needs {demand.whole_gpus} GPUs on one node; the largest node that is up has {most_gpus}",
        )
    if demand.cpus > max(n.cpus for n in nodes):
        return Reason(
            ReasonCode.UNSATISFIABLE, f"needs {demand.cpus} CPU cores on one node; no node that is up has as many"
        )
    if demand.memory_mib > max(n.memory_mib for n in nodes):
        return Reason(
            ReasonCode.UNSATISFIABLE,
            f"needs {demand.memory_mib} MiB memory on one node; no node that is up has as much",
        )
    return None


def _why_no_slot(demand: WorkerDemand, workers: int, cluster: ClusterState) -> Reason:
    frees = list(cluster.nodes.values())
    gpu_ok = [f for f in frees if _gpu_fits(f, demand)]
    if demand.needs_gpu and not gpu_ok:
        total_free = cluster.total_free_gpus()
        need = demand.whole_gpus * workers
        if demand.share or total_free < need:
            capacity = sum(len([g for g in f.node.gpus if g.healthy]) for f in frees)
            return Reason(
                ReasonCode.RESOURCES,
                f"needs {demand.describe_gpus()}"
                + (f" × {workers} workers" if workers > 1 else "")
                + f"; {total_free} of {capacity} GPUs are free",
            )
        best = max(frees, key=lambda f: (len(f.free_gpus), f.name))
        return Reason(
            ReasonCode.FRAGMENTED,
            f"fragmented: needs {demand.whole_gpus} GPUs on one node, the most free on any node is "
            f"{len(best.free_gpus)} ({best.name}); {total_free} are free in all",
        )
    candidates = gpu_ok or frees
    if demand.cpus and all(len(f.free_cpus) < demand.cpus for f in candidates):
        most = max(len(f.free_cpus) for f in candidates)
        return Reason(ReasonCode.CPUS, f"needs {demand.cpus} free CPU cores on one node; the most free is {most}")
    most_mem = max(f.free_memory for f in candidates)
    return Reason(
        ReasonCode.MEMORY, f"needs {demand.memory_mib} MiB memory on one node; the most free is {most_mem} MiB"
    )


def _gpu_fits(free: NodeFree, demand: WorkerDemand) -> bool:
    if demand.share:
        return any(share_fits(u, demand.share) and model_ok(free, i, demand) for i, u in free.shared.items()) or any(
            model_ok(free, i, demand) for i in free.free_gpus
        )
    return sum(1 for i in free.free_gpus if model_ok(free, i, demand)) >= demand.whole_gpus
