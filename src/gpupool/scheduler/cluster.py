"""Mutable free-resource bookkeeping for one cycle, built from a frozen snapshot.

Every tentative change goes through a ``Statement`` that records its undo, so a gang that
cannot be placed whole rolls back cleanly (the KAI-Scheduler pattern).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain.jobs import Placement
from gpupool.domain.nodes import Node
from gpupool.domain.resources import GPU_FRACTION_STEPS, fraction_steps
from gpupool.domain.snapshot import Snapshot


@dataclass(slots=True)
class NodeFree:
    """Free resources of one node. ``shared`` maps a GPU index used by fractional workers to
    the thousandths already taken; such a GPU is not in ``free_gpus``."""

    node: Node
    free_gpus: set[int]
    shared: dict[int, int]
    free_cpus: set[int]
    free_memory: int
    models: dict[int, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name


class ClusterState:
    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes: dict[str, NodeFree] = {}
        self.all_nodes = snapshot.nodes
        for node in snapshot.nodes:
            if not node.schedulable:
                continue
            self.nodes[node.name] = NodeFree(
                node=node,
                free_gpus={g.index for g in node.gpus if g.healthy},
                shared={},
                free_cpus=set(range(node.cpus)),
                free_memory=node.memory_mib,
                models={g.index: g.model for g in node.gpus},
            )
        self.held_by_running = 0
        for job in snapshot.running:
            for placement in job.placements:
                self.take(placement)
                self.held_by_running += 1

    def take(self, p: Placement) -> None:
        free = self.nodes.get(p.node)
        if free is None:  # node drained/down: its resources are not offered anyway
            return
        if p.gpu_share:
            index = p.gpus[0]
            free.free_gpus.discard(index)
            free.shared[index] = free.shared.get(index, 0) + fraction_steps(p.gpu_share)
        else:
            free.free_gpus.difference_update(p.gpus)
        free.free_cpus.difference_update(p.cpus)
        free.free_memory -= p.memory_mib

    def give_back(self, p: Placement) -> None:
        free = self.nodes.get(p.node)
        if free is None:
            return
        if p.gpu_share:
            index = p.gpus[0]
            left = free.shared.get(index, 0) - fraction_steps(p.gpu_share)
            if left <= 0:
                free.shared.pop(index, None)
                free.free_gpus.add(index)
            else:
                free.shared[index] = left
        else:
            free.free_gpus.update(p.gpus)
        free.free_cpus.update(p.cpus)
        free.free_memory += p.memory_mib

    def total_free_gpus(self) -> int:
        return sum(len(n.free_gpus) for n in self.nodes.values())


class Statement:
    """A tentative set of placements; ``discard`` undoes them in reverse order."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster
        self._done: list[Placement] = []

    def place(self, p: Placement) -> None:
        self._cluster.take(p)
        self._done.append(p)

    def discard(self) -> None:
        for p in reversed(self._done):
            self._cluster.give_back(p)
        self._done.clear()

    def commit(self) -> tuple[Placement, ...]:
        placed = tuple(self._done)
        self._done = []
        return placed


def share_fits(used: int, share: int) -> bool:
    return used + share <= GPU_FRACTION_STEPS
