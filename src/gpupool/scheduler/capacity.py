"""Could a job ever fit, with nothing else running? How many workers of its shape idle nodes hold.

Three questions share the count. At submit: could any state of this cluster run the job (every
node back up and idle, every GPU in service)? If not, it is refused rather than left waiting
forever (issue 19). In a cycle: could the nodes that are up run it once idle (``ever_fits``)? If
not, a strict queue (``fifo``) must not let it block the jobs behind it, and it waits as
``unsatisfiable`` for the nodes that are down or drained, its reason naming them. All count from
node totals (no placement search): an idle node holds the fewest of its GPUs, cores and memory
divided by what one worker needs; a pass over the nodes per job shape, stopped as soon as the
gang fits, and remembered by the cycle for as long as the nodes stay the same.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpupool.domain.nodes import Node
from gpupool.domain.resources import CPU_MILLI, GPU_FRACTION_STEPS
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.demand import WorkerDemand

UNBOUNDED = 1_000_000  # a worker that needs nothing countable fits any number of times


def ever_fits(cluster: ClusterState, demand: WorkerDemand, workers: int) -> bool:
    """Would the gang fit the nodes that are up, idle, on the GPUs in service?"""
    nodes = (free.node for free in cluster.nodes.values())
    return room_for(demand, nodes, workers, in_service_only=True) >= workers


def idle_slots(node: Node, demand: WorkerDemand, *, in_service_only: bool = False) -> int:
    """Workers of ``demand`` that ``node`` holds at once when idle; with ``in_service_only``, on
    its healthy GPUs alone (as a cycle sees it), else on all of them (a GPU may come back)."""
    limits: list[int] = []
    if demand.needs_gpu:
        gpus = [
            g
            for g in node.gpus
            if (g.healthy or not in_service_only)
            and (demand.models is None or g.model in demand.models)
            and (demand.share > 0 or g.memory_mib >= demand.gpu_memory_mib)
        ]
        if demand.whole_gpus:
            limits.append(len(gpus) // demand.whole_gpus)
        else:
            limits.append(sum(_shares_on(g.memory_mib, demand) for g in gpus))
    if demand.cpu_milli:
        limits.append(node.cpus * CPU_MILLI // demand.cpu_milli)
    if demand.memory_mib:
        limits.append(node.memory_mib // demand.memory_mib)
    return min(limits) if limits else UNBOUNDED


def room_for(demand: WorkerDemand, nodes: Iterable[Node], need: int, *, in_service_only: bool = False) -> int:
    """How many workers of ``demand`` the idle ``nodes`` hold together, counted only up to
    ``need``: a gang that fits stops the count early, so a large cluster costs little."""
    total = 0
    for node in nodes:
        total += idle_slots(node, demand, in_service_only=in_service_only)
        if total >= need:
            return total
    return total


def shape(demand: WorkerDemand, workers: int) -> str:
    """``3 workers x 4 GPUs``, with cores and memory when asked for: what one placement must hold."""
    parts = [demand.describe_gpus()] if demand.needs_gpu else []
    parts += [demand.describe_cpus()] if demand.cpu_milli else []
    parts += [f"{demand.memory_mib} MiB memory"] if demand.memory_mib else []
    each = ", ".join(parts) or "nothing countable"
    return f"{workers} worker{'' if workers == 1 else 's'} × {each}"


def such(count: int) -> str:
    """``not one such worker``, ``1 such worker``, ``2 such workers``."""
    return "not one such worker" if not count else f"{count} such worker{'' if count == 1 else 's'}"


def _shares_on(gpu_memory_mib: int, demand: WorkerDemand) -> int:
    """Fractional workers one idle GPU takes: by their share of it, and by the GPU memory each
    asked for (a share without a figure takes its share of the memory, which the share bounds)."""
    by_share = GPU_FRACTION_STEPS // demand.share
    if not demand.gpu_memory_mib:
        return by_share
    return min(by_share, gpu_memory_mib // demand.gpu_memory_mib)
