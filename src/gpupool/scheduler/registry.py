"""The explicit tables of actions and plugins a configuration may name."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain.errors import InvalidInput
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.cluster import NodeFree
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.plugins import binpack, order, spread

NodeScore = Callable[[NodeFree, WorkerDemand], tuple[int, ...]]
JobOrder = Callable[[PendingJob], tuple[int, float, int]]

PLACEMENTS: dict[str, NodeScore] = {"binpack": binpack.score, "spread": spread.score}
JOB_ORDERS: dict[str, JobOrder] = {"priority_fifo": order.priority_fifo}


def placement(name: str) -> NodeScore:
    try:
        return PLACEMENTS[name]
    except KeyError:
        raise InvalidInput(f"unknown placement {name!r}: use one of {', '.join(PLACEMENTS)}") from None


def job_order(name: str) -> JobOrder:
    try:
        return JOB_ORDERS[name]
    except KeyError:
        raise InvalidInput(f"unknown job order {name!r}: use one of {', '.join(JOB_ORDERS)}") from None
