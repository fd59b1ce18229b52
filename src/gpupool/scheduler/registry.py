"""The explicit tables of actions and plugins a configuration may name."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpupool.domain.errors import InvalidInput
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.cluster import ClusterState, NodeFree
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.plugins import binpack, frag, order, spread, topology

NodeScore = Callable[[NodeFree, WorkerDemand], tuple[int, ...]]
JobOrder = Callable[[PendingJob], tuple[int, float, int]]
GpuPicker = Callable[[NodeFree, WorkerDemand], tuple[int, ...]]
# The best node among those a predicate (at least ``can_fit``) accepts, by (score, name); None: none.
Chooser = Callable[[ClusterState, WorkerDemand, Callable[[NodeFree], bool]], NodeFree | None]


@dataclass(frozen=True, slots=True)
class PlacementPlugin:
    """A node score (lower is better) whose first element orders nodes by free GPUs:
    ascending (fewest free first) or not. The cluster index then scans nodes level by level and
    stops at the first level with a fit, instead of scoring every node."""

    score: NodeScore
    fewest_free_first: bool
    # True when the score's first key is the free-GPU count, so the first bucket with a fit wins.
    first_bucket_wins: bool = True
    # Which free GPUs of the chosen node a worker gets; None: the lowest indices.
    pick_gpus: GpuPicker | None = None
    # For GPU shares: True when the score puts nodes that already share a GPU first, then orders
    # by free count, so the scan may stop early as for whole GPUs.
    shares_first: bool = False
    # Finds the node the scan would, faster (frag: from the cluster's nodes grouped by key).
    choose: Chooser | None = None
    # The plugin to use for a pool whose workers (demand, count), running and waiting, are these,
    # given what the pool's last cycle used (``learned``): frag measures nodes against the pool's
    # own mix of workers. None: this one, whatever the pool.
    for_pool: Callable[[Iterable[tuple[WorkerDemand, int]], object | None], PlacementPlugin] | None = None
    learned: object | None = None  # what for_pool learned (frag: its FragPlacement), for the next cycle


def _frag_for_pool(workers: Iterable[tuple[WorkerDemand, int]], last: object | None) -> PlacementPlugin:
    plugin = frag.for_pool(workers, last if isinstance(last, frag.FragPlacement) else None)
    return PlacementPlugin(plugin.score, True, first_bucket_wins=False, choose=plugin.choose, learned=plugin)


PLACEMENTS: dict[str, PlacementPlugin] = {
    "binpack": PlacementPlugin(binpack.score, fewest_free_first=True, shares_first=True),
    "spread": PlacementPlugin(spread.score, fewest_free_first=False),
    "topology": PlacementPlugin(topology.score, True, first_bucket_wins=False, pick_gpus=topology.pick_gpus),
    # Fragmentation is not ordered by free GPUs: ``choose`` scores each distinct node key instead.
    "frag": PlacementPlugin(
        frag.DEFAULT.score, True, first_bucket_wins=False, choose=frag.DEFAULT.choose, for_pool=_frag_for_pool
    ),
}
JOB_ORDERS: dict[str, JobOrder] = {"priority_fifo": order.priority_fifo, "fifo": order.fifo}


def placement(name: str) -> PlacementPlugin:
    try:
        return PLACEMENTS[name]
    except KeyError:
        raise InvalidInput(f"unknown placement {name!r}: use one of {', '.join(PLACEMENTS)}") from None


def job_order(name: str) -> JobOrder:
    try:
        return JOB_ORDERS[name]
    except KeyError:
        raise InvalidInput(f"unknown job order {name!r}: use one of {', '.join(JOB_ORDERS)}") from None
