"""Mutable free-resource bookkeeping for one cycle, built from a frozen snapshot.

Every tentative change goes through a ``Statement`` that records its undo, so a gang that
cannot be placed whole rolls back cleanly (the KAI-Scheduler pattern).

Two structures keep a cycle over thousands of nodes and jobs cheap:
- ``by_free[k]``: the nodes with exactly k free whole GPUs, so a placement looks only at nodes
  that could hold it, in the order the placement plugin prefers;
- ``keys()``: the nodes by free whole GPUs and then by node key (GPU model, free CPU millicores,
  free thousandths per GPU), built on a plugin's first call and kept up to date from then on, so a
  placement whose score reads only the key scores each key once rather than each node;
- ``generation``: bumped whenever resources come back (a job's GPUs given back), so a job shape
  that failed stays failed, without another scan, until something was freed.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field

from gpupool.domain.jobs import Placement
from gpupool.domain.nodes import Node
from gpupool.domain.resources import CPU_MILLI, GPU_FRACTION_STEPS, fraction_steps
from gpupool.domain.snapshot import Snapshot


@dataclass(slots=True)
class NodeFree:
    """Free resources of one node. ``shared`` maps a GPU index used by fractional workers to
    the thousandths already taken; such a GPU is not in ``free_gpus``. ``free_cpus`` are the
    cores no worker has pinned; workers with a fraction of a core share them, ``shared_milli``
    in all, so what is left to hand out is ``free_milli``."""

    node: Node
    free_gpus: set[int]
    shared: dict[int, int]
    free_cpus: set[int]
    free_memory: int
    models: dict[int, str] = field(default_factory=dict)
    # GPUs the probe or an admin took out of service: never free, never shared, even after the
    # job still running on one ends.
    unhealthy: frozenset[int] = frozenset()
    gpu_memory: dict[int, int] = field(default_factory=dict)  # GPU index -> its memory (MiB)
    shared_memory: dict[int, int] = field(default_factory=dict)  # shared GPU index -> MiB its shares took
    shared_milli: int = 0  # CPU millicores taken on the unpinned cores by fractional-CPU workers

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def free_milli(self) -> int:
        """CPU millicores still to hand out: a worker pinning k cores needs k * 1000 of them (the
        fractional workers keep their part of what stays unpinned), a fraction its millicores."""
        return len(self.free_cpus) * CPU_MILLI - self.shared_milli


# (GPU model of the node's first GPU or "", free CPU millicores, free thousandths per GPU, descending)
NodeKey = tuple[str, int, tuple[int, ...]]


def node_key(free: NodeFree) -> NodeKey:
    """What a node offers, in a few numbers: nodes with equal keys are alike but for memory, GPU
    memory, health and mixed models, which ``can_fit`` checks."""
    whole = len(free.free_gpus)
    gpus = free.node.gpus
    if free.shared:
        rooms = sorted([GPU_FRACTION_STEPS - used for used in free.shared.values()], reverse=True)
        left = (GPU_FRACTION_STEPS,) * whole + tuple(rooms) + (0,) * (len(gpus) - whole - len(rooms))
    else:
        left = (GPU_FRACTION_STEPS,) * whole + (0,) * (len(gpus) - whole)
    return (gpus[0].model if gpus else "", len(free.free_cpus) * CPU_MILLI - free.shared_milli, left)


class ClusterState:
    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes: dict[str, NodeFree] = {}
        self.all_nodes = snapshot.nodes
        self.generation = 0
        self.max_gpus = 0
        for node in snapshot.nodes:
            if not node.schedulable:
                continue
            self.max_gpus = max(self.max_gpus, len(node.gpus))
            self.nodes[node.name] = NodeFree(
                node=node,
                free_gpus={g.index for g in node.gpus if g.healthy},
                shared={},
                free_cpus=set(range(node.cpus)),
                free_memory=node.memory_mib,
                models={g.index: g.model for g in node.gpus},
                gpu_memory={g.index: g.memory_mib for g in node.gpus},
                unhealthy=frozenset(g.index for g in node.gpus if not g.healthy),
            )
        up = [f.node for f in self.nodes.values()]
        # What never changes within a cycle, for explanations.
        self.max_cpus = max((n.cpus for n in up), default=0)
        self.max_memory = max((n.memory_mib for n in up), default=0)
        self.models = frozenset(g.model for n in up for g in n.gpus)
        self.capacity = sum(1 for n in up for g in n.gpus if g.healthy)
        self.max_gpu_memory = max((g.memory_mib for n in up for g in n.gpus), default=0)
        self.by_free: list[dict[str, NodeFree]] = [{} for _ in range(self.max_gpus + 1)]
        self.with_shares: dict[str, NodeFree] = {}
        # Nodes with a shared GPU, by the most room (thousandths) left on any of their shared GPUs.
        self.by_room: dict[int, dict[str, NodeFree]] = {}
        self._room: dict[str, int] = {}
        self.shared_with_free: dict[str, NodeFree] = {}  # sharing nodes that also have a whole GPU free
        self._keys: list[dict[NodeKey, list[str]]] | None = None  # see keys()
        self._key_of: dict[str, tuple[NodeKey, int]] = {}  # key and free whole GPUs when last indexed
        self._changed: set[str] = set()  # nodes changed since keys() last looked
        for free in self.nodes.values():
            self.by_free[len(free.free_gpus)][free.name] = free
        for job in snapshot.running:
            for placement in job.placements:
                self.take(placement)
        self.generation = 0

    def take(self, p: Placement) -> None:
        free = self.nodes.get(p.node)
        if free is None:  # node drained/down: its resources are not offered anyway
            return
        before = len(free.free_gpus)
        if p.gpu_share:
            index = p.gpus[0]
            free.free_gpus.discard(index)
            free.shared[index] = free.shared.get(index, 0) + fraction_steps(p.gpu_share)
            free.shared_memory[index] = free.shared_memory.get(index, 0) + p.gpu_memory_mib
        else:
            free.free_gpus.difference_update(p.gpus)
        if p.cpu_milli:
            free.shared_milli += p.cpu_milli
        else:
            free.free_cpus.difference_update(p.cpus)
        free.free_memory -= p.memory_mib
        self._reindex(free, before)

    def give_back(self, p: Placement) -> None:
        free = self.nodes.get(p.node)
        if free is None:
            return
        before = len(free.free_gpus)
        if p.gpu_share:
            index = p.gpus[0]
            left = free.shared.get(index, 0) - fraction_steps(p.gpu_share)
            if left <= 0:
                free.shared.pop(index, None)
                free.shared_memory.pop(index, None)
                if index not in free.unhealthy:
                    free.free_gpus.add(index)
            else:
                free.shared[index] = left
                free.shared_memory[index] = free.shared_memory.get(index, 0) - p.gpu_memory_mib
        else:
            free.free_gpus.update(i for i in p.gpus if i not in free.unhealthy)
        if p.cpu_milli:
            free.shared_milli -= p.cpu_milli
        else:
            free.free_cpus.update(p.cpus)
        free.free_memory += p.memory_mib
        self._reindex(free, before)
        self.generation += 1

    def reserve_gpu(self, node: str, index: int) -> bool:
        """Take one free whole GPU out of circulation (a reservation). False if it was not free."""
        free = self.nodes.get(node)
        if free is None or index not in free.free_gpus:
            return False
        before = len(free.free_gpus)
        free.free_gpus.discard(index)
        self._reindex(free, before)
        return True

    def unreserve_gpu(self, node: str, index: int) -> None:
        """Undo ``reserve_gpu``. Leaves the generation alone: callers pair it with a reserve."""
        free = self.nodes[node]
        before = len(free.free_gpus)
        free.free_gpus.add(index)
        self._reindex(free, before)

    def levels(self, min_free: int, ascending: bool) -> list[dict[str, NodeFree]]:
        """The ``by_free`` buckets with at least ``min_free`` free GPUs, in the order asked for."""
        buckets = self.by_free[min_free:] if min_free <= self.max_gpus else []
        return buckets if ascending else list(reversed(buckets))

    def total_free_gpus(self) -> int:
        return sum(k * len(level) for k, level in enumerate(self.by_free))

    def keys(self) -> list[dict[NodeKey, list[str]]]:
        """``keys()[k]``: the nodes with k free whole GPUs by node key, each key's names sorted.
        Built on the first call; from then on changed nodes are noted and moved at the next call
        (a victim search or a trial placement takes and gives back many times between two)."""
        keys = self._keys
        if keys is None:
            keys = self._keys = [{} for _ in range(self.max_gpus + 1)]
            for name in sorted(self.nodes):
                free = self.nodes[name]
                key = node_key(free)
                level = len(free.free_gpus)
                self._key_of[name] = (key, level)
                keys[level].setdefault(key, []).append(name)
            self._changed.clear()
        elif self._changed:
            for name in self._changed:
                self._rekey(keys, self.nodes[name])
            self._changed.clear()
        return keys

    def _rekey(self, keys: list[dict[NodeKey, list[str]]], free: NodeFree) -> None:
        name = free.name
        key = node_key(free)
        level = len(free.free_gpus)
        old, before = self._key_of[name]
        if key == old and level == before:
            return
        names = keys[before][old]
        del names[bisect_left(names, name)]
        if not names:
            del keys[before][old]
        insort(keys[level].setdefault(key, []), name)
        self._key_of[name] = (key, level)

    def _reindex(self, free: NodeFree, before: int) -> None:
        after = len(free.free_gpus)
        if self._keys is not None:
            self._changed.add(free.name)
        if after != before:
            del self.by_free[before][free.name]
            self.by_free[after][free.name] = free
        if free.shared:
            self.with_shares[free.name] = free
        else:
            self.with_shares.pop(free.name, None)
        if free.shared and free.free_gpus:
            self.shared_with_free[free.name] = free
        else:
            self.shared_with_free.pop(free.name, None)
        room = GPU_FRACTION_STEPS - min(free.shared.values()) if free.shared else None
        old = self._room.get(free.name)
        if room == old:
            return
        if old is not None:
            bucket = self.by_room[old]
            del bucket[free.name]
            if not bucket:
                del self.by_room[old]
            del self._room[free.name]
        if room is not None:
            self.by_room.setdefault(room, {})[free.name] = free
            self._room[free.name] = room

    def with_room(self, share: int) -> list[dict[str, NodeFree]]:
        """The sharing nodes that could take ``share`` thousandths: a shared GPU with that much
        room left, or a whole GPU free beside their shared ones."""
        return [*(bucket for room, bucket in self.by_room.items() if room >= share), self.shared_with_free]


class Statement:
    """A tentative set of placements; ``discard`` undoes them in reverse order and, since the
    cluster is then exactly as before, restores its generation too."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster
        self._done: list[Placement] = []
        self._generation = cluster.generation

    def place(self, p: Placement) -> None:
        self._cluster.take(p)
        self._done.append(p)

    def discard(self) -> None:
        for p in reversed(self._done):
            self._cluster.give_back(p)
        self._done.clear()
        self._cluster.generation = self._generation

    def commit(self) -> tuple[Placement, ...]:
        placed = tuple(self._done)
        self._done = []
        return placed


def share_fits(used: int, share: int) -> bool:
    return used + share <= GPU_FRACTION_STEPS
