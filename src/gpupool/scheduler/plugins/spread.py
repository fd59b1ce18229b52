"""Spread: put work on the emptiest node (for services that should not share a failure)."""

from __future__ import annotations

from gpupool.scheduler.cluster import NodeFree
from gpupool.scheduler.demand import WorkerDemand


def score(free: NodeFree, demand: WorkerDemand) -> tuple[int, ...]:
    return (-len(free.free_gpus), -free.free_milli)
