"""Fragmentation-aware placement, after FGD (Weng et al., "Beware of Fragmentation", ATC'23), with
a look-ahead over the arrival distribution.

FGD measures a node's *fragmentation* against the typical mix of workers (``Mix``): for each
shape of the mix, the GPU capacity that shape could not use there, weighted by how common the
shape is (``fragmentation``). That is a snapshot: a GPU with 0.53 left counts as fragmented for
every shape above 0.53, though a 0.47 will come and take it down to 0.06; one with 0.21 left
counts as little, though only the rarest shapes will ever fill it. ``frag`` scores instead each
free room's *expected final waste* (``expected_waste``): what the room will still hold when the
shapes that fit it have come and filled it, one after another, each step taken by shape in
proportion to its weight, and a room that only rare shapes fit left mostly unfilled (it competes
with every other room for them: ``COMPETITION``). A worker goes where that expected waste grows
least. On the openb study this is worth +0.16 points over FGD's snapshot (96.06 % against 95.90 %):
the 0.19 a 0.81-GPU worker leaves is filled by the rare 0.16s, and a 0.32 no longer goes where it
leaves 0.21, a room only those same rare shapes fit. The head's mix is the pool's own
(``for_pool``), learned from its running and waiting workers; openb's (``DEFAULT``) serves
callers with no pool to learn from.

Beyond that:

* CPUs weigh all along, not only where a shape stops fitting: a node whose free CPUs fall short of
  what its free GPUs need at the mix's CPUs per GPU strands GPUs, and that shortfall's growth
  counts (twice) beside fragmentation's, so CPU-heavy work goes to CPU-rich nodes and GPU nodes
  keep their CPUs for their GPUs (on the openb study this took CPU-stranded GPUs from 1.5 % of
  the cluster to 0.4 %);
* growths within a tenth of a GPU are equal (FGD's Kubernetes score squeezes growth through a
  sigmoid into 0..100, which does much the same; telling small growths apart did worse);
* among equals, shared GPUs and whole-GPU work keep apart: a share prefers a node that already
  shares a GPU, a whole-GPU worker one without shares, so the shares' slivers collect on few
  nodes; then the node left with the least free GPU capacity (bin-pack), then the first by name.

Everything the score reads is a small *node key*: GPU model, free CPU millicores and the free
thousandths of each GPU. A key's fragmentation and a (key, demand) score are pure, so they are
memoised: a node that did not change since it was last scored costs a look-up, and a room's
expected waste depends only on its size and the node's free cores (``_waste``). The placement study
replays 10,000 pods on 1,213 nodes through ``score_key`` on keys it keeps up to date. The live
scheduler calls ``choose``: the cluster state keeps its nodes grouped by key (``ClusterState.keys``),
so each distinct key is scored once per worker (156 keys for 1,000 nodes in the scale benchmark),
and the first node by name of the best key that passes the fit checks wins, exactly the node that
scoring every node with ``score`` and taking the lowest (score, name) would choose.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from heapq import merge
from operator import itemgetter

from gpupool.scheduler import cluster
from gpupool.scheduler.cluster import ClusterState, NodeFree, NodeKey
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.plugins.frag_mix import MILLI, OPENB_MIX, Mix, PodShape, Shape, shape_of

__all__ = ["MILLI", "OPENB_MIX", "FragPlacement", "Mix", "PodShape", "for_pool"]
# (whole GPUs, share, CPU millicores, allowed models)
DemandKey = tuple[int, int, int, frozenset[str] | None]
_MEMO_LIMIT = 100_000  # entries (some 30 MB); the memos start again beyond it: a long-lived head sees many keys
# Growths within a tenth of a GPU count as equal: among them the scan packs (the node left with
# the least GPU capacity, then the first by name), which the placement study found worth more than
# telling apart growths of a few thousandths (on seed 42: 95.6 % against 94.3 %).
QUANTUM = 100.0
# A thousandth of a GPU that the node's CPUs cannot feed counts twice one that no shape fits.
CPU_WEIGHT = 2.0
# A room that shapes of total weight w fit is filled with chance w / (w + COMPETITION): about
# certainly for common shapes, seldom where only shapes rarer than one worker in a thousand fit
# (they are too few for the rooms that wait for them). On the openb study, over ten seeds (with
# CPUs counted in millicores rather than cores): 0.0005 gave 96.01 %, 0.001 96.05 %, 0.002 95.95 %.
COMPETITION = 0.001


class FragPlacement:
    """The plugin: ``score`` for the scheduler's node scan, ``score_key`` for key-based callers."""

    def __init__(self, mix: Mix) -> None:
        self.mix = mix
        self._frag: dict[NodeKey, float] = {}
        self._node_waste: dict[NodeKey, float] = {}
        self._waste: dict[tuple[int, int], float] = {}
        self._scores: dict[tuple[NodeKey, DemandKey], tuple[int, ...] | None] = {}
        self._ranks: dict[tuple[NodeKey, DemandKey, bool], tuple[int, ...] | None] = {}

    def choose(self, state: ClusterState, demand: WorkerDemand, accept: Callable[[NodeFree], bool]) -> NodeFree | None:
        """The node ``score`` ranks first (then by name) among those ``accept`` takes, ``accept``
        being at least ``can_fit``: keys ranked once each, then their nodes by name."""
        wanted = demand_key(demand)
        with_model = self.mix.constrained or demand.models is not None
        ranked: list[tuple[tuple[int, ...], list[str]]] = []
        ranks = self._ranks
        for level in state.keys()[demand.whole_gpus :]:
            for key, names in level.items():
                rank = ranks.get((key, wanted, with_model), _MISSING)
                if rank is _MISSING:
                    rank = self._rank(key, wanted, with_model)
                if rank is not None:
                    ranked.append((rank, names))  # type: ignore[arg-type]
        ranked.sort(key=_FIRST)
        nodes = state.nodes
        start = 0
        while start < len(ranked):
            rank = ranked[start][0]
            end = start + 1
            while end < len(ranked) and ranked[end][0] == rank:
                end += 1
            group = ranked[start][1] if end == start + 1 else merge(*(names for _, names in ranked[start:end]))
            for name in group:
                free = nodes[name]
                if accept(free):
                    return free
            start = end
        return None

    def _rank(self, key: NodeKey, demand: DemandKey, with_model: bool) -> tuple[int, ...] | None:
        """``score`` for every node with this key, None where ``can_fit`` must refuse them all."""
        memo = (key, demand, with_model)
        known = self._ranks.get(memo, _MISSING)
        if known is not _MISSING:
            return known  # type: ignore[return-value]
        rank = self.score_key(key if with_model else ("", key[1], key[2]), demand)
        if rank is None and place(("", key[1], key[2]), (demand[0], demand[1], demand[2], None)) is not None:
            rank = LAST  # refused for the first GPU's model only: a node of mixed models may yet fit
        if len(self._ranks) >= _MEMO_LIMIT:
            self._ranks.clear()
        self._ranks[memo] = rank
        return rank

    def score(self, free: NodeFree, demand: WorkerDemand) -> tuple[int, ...]:
        """Lower is better. Called only for nodes where the worker fits (``can_fit``)."""
        scored = self.score_key(node_key(free, self.mix.constrained or demand.models is not None), demand_key(demand))
        # can_fit said yes; a key that disagrees (GPU memory, unhealthy GPUs) ranks last, never wrong.
        return scored if scored is not None else LAST

    def score_key(self, key: NodeKey, demand: DemandKey) -> tuple[int, ...] | None:
        """The score of a node with this key for one worker, None where it does not fit (GPUs,
        CPUs, model; memory is the caller's to check): the growth of expected waste and of CPU
        shortfall, in tenths of a GPU; then 1 if it would mix shares and whole GPUs; then the
        GPU capacity the node has left (bin-pack among equals)."""
        memo = (key, demand)
        known = self._scores.get(memo, _MISSING)
        if known is not _MISSING:
            return known  # type: ignore[return-value]
        after = place(key, demand)
        result: tuple[int, ...] | None = None
        if after is not None:
            growth = self.node_waste(after) - self.node_waste(key)
            growth += CPU_WEIGHT * (self.cpu_shortfall(after) - self.cpu_shortfall(key))
            result = (round(growth / QUANTUM), _mixing(key, demand), sum(after[2]))
        if len(self._scores) >= _MEMO_LIMIT:
            self._scores.clear()
        self._scores[memo] = result
        return result

    def cpu_shortfall(self, key: NodeKey) -> float:
        """The GPU thousandths a node's free CPUs cannot feed at the mix's CPUs per GPU (none
        where the mix's GPU work asks for no CPUs)."""
        per_cpu = self.mix.gpu_per_cpu
        return 0.0 if per_cpu is None else max(0.0, sum(key[2]) - key[1] * per_cpu)

    def node_waste(self, key: NodeKey) -> float:
        """The expected final waste of a node with this key: its rooms' (``expected_waste``), each
        against all of the node's free CPUs (the shapes' models left aside: the mix seldom names one)."""
        known = self._node_waste.get(key)
        if known is None:
            cores = key[1] // 1000
            known = sum(self.expected_waste(room, cores) for room in key[2] if room)
            if len(self._node_waste) >= _MEMO_LIMIT:
                self._node_waste.clear()
            self._node_waste[key] = known
        return known

    def expected_waste(self, room: int, cores: int) -> float:
        """The GPU thousandths of a room of ``room`` thousandths, on a node with ``cores`` free
        cores, that the mix's shapes are expected to leave unfilled: nothing fits, the whole
        room; else, with chance ``w / (w + COMPETITION)`` (w the weight of the shapes that fit)
        one of them, by weight, takes its share and its CPUs and the rest is the same question,
        otherwise the room stays as it is. Memoised on (room, cores): CPUs count in whole cores,
        so the memo stays small (sizes the mix's shares add up to, times the cores a node has)."""
        memo = (room, cores)
        known = self._waste.get(memo)
        if known is not None:
            return known
        milli_cores = cores * 1000
        fits = [(m, c, w) for m, c, w in self.mix.fillers if m <= room and c <= milli_cores]
        weight = sum(w for _, _, w in fits)
        if not fits:
            known = float(room)
        else:
            filled = sum(w * self.expected_waste(room - m, (milli_cores - c) // 1000) for m, c, w in fits) / weight
            chance = weight / (weight + COMPETITION)
            known = (1 - chance) * room + chance * filled
        if len(self._waste) >= _MEMO_LIMIT:
            self._waste.clear()
        self._waste[memo] = known
        return known

    def fragmentation(self, key: NodeKey) -> float:
        """FGD's fragmentation of a node with this key (the paper's measure, which the placement
        study's rebuild of FGD scores with; ``frag`` itself scores ``node_waste``)."""
        known = self._frag.get(key)
        if known is None:
            known = fragmentation(key, self.mix)
            if len(self._frag) >= _MEMO_LIMIT:
                self._frag.clear()
            self._frag[key] = known
        return known


def fragmentation(key: NodeKey, mix: Mix) -> float:
    """FGD's fragmentation amount of one node (everything but the "satisfied" quadrant): for each
    shape, all free GPU capacity if it cannot run there, else the free capacity on GPUs with less
    room than it needs per GPU. CPU-only shapes count all free GPU capacity too (they never use
    it), which is the same for every placement of one worker and so does not sway the choice."""
    model, cpus, left = key
    total = sum(left)
    if not total:
        return 0.0
    frag = 0.0
    for shape in mix.shapes:
        if shape.milli == 0 or cpus < shape.cpu_milli or (shape.models is not None and model not in shape.models):
            frag += shape.weight * total
            continue
        hosts = 0
        slivers = 0
        for room in left:
            if room >= shape.milli:
                hosts += 1
            else:
                slivers += room
        frag += shape.weight * (slivers if hosts >= shape.gpus else total)
    return frag


def place(key: NodeKey, demand: DemandKey) -> NodeKey | None:
    """The key after one worker is placed as ``fit.build`` places it: a share on the fullest shared
    GPU with room (best fit), else on a free GPU; whole GPUs from the free ones. None: no fit."""
    model, cpus, left = key
    whole, share, need_cpus, models = demand
    if need_cpus > cpus or (models is not None and model not in models):
        return None
    rooms = list(left)
    if share:
        best = -1
        for i, room in enumerate(rooms):
            if share <= room < MILLI and (best < 0 or room < rooms[best]):
                best = i
        if best < 0:
            if MILLI not in rooms:
                return None
            best = rooms.index(MILLI)
        rooms[best] -= share
    elif whole:
        if rooms.count(MILLI) < whole:
            return None
        for _ in range(whole):
            rooms.remove(MILLI)
            rooms.append(0)
    rooms.sort(reverse=True)
    return (model, cpus - need_cpus, tuple(rooms))


def node_key(free: NodeFree, with_model: bool = True) -> NodeKey:
    """The node's key, its model left out ("") where no shape and no demand asks for one."""
    key = cluster.node_key(free)
    return key if with_model else ("", key[1], key[2])


def demand_key(demand: WorkerDemand) -> DemandKey:
    return (demand.whole_gpus, demand.share, demand.cpu_milli, demand.models)


def _mixing(key: NodeKey, demand: DemandKey) -> int:
    """1 where the worker would mix shares and whole-GPU work on a node that has not mixed them:
    a share on a node without shared GPUs, a whole-GPU worker on a node with some."""
    if not (demand[0] or demand[1]):
        return 0
    shared = any(0 < room < MILLI for room in key[2])
    return 0 if shared == bool(demand[1]) else 1


_MISSING = object()
_FIRST = itemgetter(0)
LAST = (1 << 62,)  # the score of a node the key says cannot take the worker (can_fit said it can)
DEFAULT = FragPlacement(Mix.openb())

# A pool's mix in hundredths (``Mix.of_counts``). A pool keeps measuring against the mix it last
# used until its own has drifted from it by more than a tenth of its workers (``Mix.distance``): a
# mix that moved with every job that came or went would start the memos afresh at every cycle (on
# the placement study, 1,447 mixes for 10,771 pods and 7 times slower; 32 with the drift). The
# placements of the last few mixes are kept with their memos, all forgotten when more come (plain
# dict steps: safe beside a start estimate asking at the same time).
POOL_RESOLUTION = 100
POOL_DRIFT = 0.1
_POOLS: dict[tuple[PodShape, ...], FragPlacement] = {}
_POOLS_KEPT = 8


def for_pool(workers: Iterable[tuple[WorkerDemand, int]], last: FragPlacement | None = None) -> FragPlacement:
    """The placement measured against the pool's own mix: the shapes of its workers (each
    demand counted ``n`` times: a job's workers), running and waiting; ``last`` (the one the
    pool's previous cycle used) while the pool's mix stays within ``POOL_DRIFT`` of its. With
    no workers, ``last`` or openb's."""
    counts: Counter[Shape] = Counter()
    for demand, n in workers:
        counts[shape_of(demand)] += n
    if not counts:
        return last or DEFAULT
    mix = Mix.of_counts(counts, resolution=POOL_RESOLUTION)
    if last is not None and last.mix.distance(mix) <= POOL_DRIFT:
        return last
    plugin = _POOLS.get(mix.shapes)
    if plugin is None:
        if len(_POOLS) >= _POOLS_KEPT:
            _POOLS.clear()
        plugin = _POOLS[mix.shapes] = FragPlacement(mix)
    return plugin
