"""What one scheduling cycle hands to the next, so a cycle costs what changed, not the cluster's size.

Indexing free resources from a snapshot is linear in nodes and running jobs: on 352 nodes it took
7 ms, most of a quiet cycle, and it was nearly all of a simulated event. Successive snapshots
differ by a few jobs, so ``CycleMemory`` keeps the last cycle's index and applies the difference:
jobs that ended give their resources back, jobs that appeared take theirs. A snapshot whose nodes
differ in any way (one joined, drained, went down, a GPU turned unhealthy) rebuilds it from scratch.

The invariant that makes this sound: after a cycle the index holds exactly the running jobs it
was given plus the jobs the cycle started, because every action that tries something (a gang
that does not fit, a reservation, victims) restores what it tried. ``tests/scheduler/test_incremental.py``
checks it against a fresh index after every cycle of random traces. A cycle that raises forgets
everything, and the next one rebuilds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress
from operator import attrgetter, is_, is_not, itemgetter, not_

from gpupool.domain.decisions import GrowJob, StartJob
from gpupool.domain.jobs import JobSpec, Placement
from gpupool.domain.nodes import Node
from gpupool.domain.resources import GPU_FRACTION_STEPS
from gpupool.domain.snapshot import PendingJob, Snapshot
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.demand import WorkerDemand

_ID, _PLACEMENTS, _FIRST, _SECOND = attrgetter("id"), attrgetter("placements"), itemgetter(0), itemgetter(1)
_WORKERS = attrgetter("spec.workers")


class CycleMemory:
    """Owned by one caller (the controller, the simulator) and passed to every ``schedule()``."""

    def __init__(self) -> None:
        self._nodes: tuple[Node, ...] | None = None
        self._cluster: ClusterState | None = None
        self._placed: dict[int, tuple[tuple[Placement, ...], JobSpec, str]] = {}  # placements, spec, owner
        # Thousandths of a GPU, counted in integers so that adding and removing jobs in any
        # order gives exactly the sum a fresh count would: fair-share ranks compare these.
        self._allocated: dict[str, int] = defaultdict(int)
        self._bound: dict[str, int] = defaultdict(int)
        self._jobs: dict[str, int] = defaultdict(int)  # running jobs per project: which projects hold anything
        self._by_user: dict[tuple[str, str], int] = defaultdict(int)  # the same thousandths per (project, owner)
        # Answers that hold as long as the nodes do (``capacity.ever_fits`` per job shape).
        self.per_nodes: dict[object, bool] = {}
        # Each project's nodes and their GPUs (``partition``), by partition name and quotas: a pure
        # function of the nodes and projects, found once for as long as the nodes stay the same.
        self.partitions: dict[object, tuple[dict[str, frozenset[str]], dict[str, int]]] = {}
        # What each job needs per worker, by job id: a long queue is looked at every cycle.
        self.demands: dict[int, WorkerDemand] = {}
        # The running jobs' workers by demand, kept as jobs come and go once a placement that
        # learns the pool's mix first asks (``workers``): counting thousands of jobs at every
        # simulated event was a third of a Philly replay. None: nobody asked since the last rebuild.
        self._running_workers: Counter[WorkerDemand] | None = None
        # One object per distinct demand: equal demands are then the same object, which a dict
        # look-up tells at once, where comparing two equal dataclasses runs Python code (counting
        # 15,000 jobs' demands took 26 ms, most of it comparing).
        self._shapes: dict[WorkerDemand, WorkerDemand] = {}
        self.elastic = 0  # running elastic jobs (issue 35): with none, a cycle looks for none
        self.rebuilds = 0  # how often the index was built from scratch (for tests and profiling)
        # The last cycle's queue in the job order, with each job's key, and the order it was in.
        self._ranked: list[tuple[tuple[int, float, int], PendingJob]] = []
        self._order: Callable[[PendingJob], tuple[int, float, int]] | None = None
        # The displace action's index of running jobs (``displace_index``), for its configuration.
        self.displace: object | None = None
        # What a placement that learns from the pool learned last cycle (``hooks.PlacementPlugin.learned``).
        self.placement: object | None = None

    def open(self, snapshot: Snapshot) -> tuple[ClusterState, defaultdict[str, float], defaultdict[str, float]]:
        """The free-resource index for ``snapshot`` and GPUs held per project (all, and in
        interactive and inference jobs). The caller's cycle may change all three; the index must
        end the cycle as described in the module docstring, the two dicts are copies."""
        if self._cluster is None or not (self._nodes is snapshot.nodes or self._nodes == snapshot.nodes):
            self._rebuild(snapshot)
        else:
            self._apply_difference(snapshot)
        assert self._cluster is not None
        self._cluster.generation = 0
        if len(self.demands) > 2 * len(snapshot.pending) + 1024:  # forget jobs no longer waiting
            waiting = {j.id for j in snapshot.pending}
            self.demands = {i: d for i, d in self.demands.items() if i in waiting}
        allocated = defaultdict(float, {p: self._allocated[p] / GPU_FRACTION_STEPS for p, n in self._jobs.items() if n})
        bound = defaultdict(float, {p: n / GPU_FRACTION_STEPS for p, n in self._bound.items() if n})
        return self._cluster, allocated, bound

    def demand(self, job: PendingJob) -> WorkerDemand:
        """What a waiting job needs per worker, found once."""
        demand = self.demands.get(job.id)
        if demand is None:
            demand = self.demands[job.id] = self._one(WorkerDemand.of(job.spec))
        return demand

    def workers(self, pending: Sequence[PendingJob]) -> Counter[WorkerDemand]:
        """The pool's workers by demand: the running jobs' (as ``open`` last saw them) and those of
        ``pending``, a gang counting each worker. Through builtins where it can: a cycle asks."""
        if self._running_workers is None:
            self._running_workers = Counter()
            for _, spec, _ in self._placed.values():
                self._count_workers(spec, +1)
        known = self.demands
        for job in compress(pending, map(not_, map(known.__contains__, map(_ID, pending)))):
            self.demand(job)  # the few that came since the last cycle
        workers = self._running_workers.copy()
        workers.update(map(known.__getitem__, map(_ID, pending)))  # a job a worker
        for job in compress(pending, map((1).__lt__, map(_WORKERS, pending))):  # gangs' other workers
            workers[known[job.id]] += job.spec.workers - 1
        return workers

    def _count_workers(self, spec: JobSpec, sign: int) -> None:
        assert self._running_workers is not None
        demand = self._one(WorkerDemand.of(spec))
        left = self._running_workers[demand] + sign * spec.workers
        if left:
            self._running_workers[demand] = left
        else:
            del self._running_workers[demand]

    def _one(self, demand: WorkerDemand) -> WorkerDemand:
        if len(self._shapes) > 100_000:  # demands that vary without end (memory in MiB, say)
            self._shapes.clear()
        return self._shapes.setdefault(demand, demand)

    def in_order(
        self, pending: Sequence[PendingJob], order: Callable[[PendingJob], tuple[int, float, int]]
    ) -> list[tuple[tuple[int, float, int], PendingJob]]:
        """``pending`` with its keys, sorted by ``order``. Sorting thousands of jobs at every cycle
        compared keys in vain: the jobs still waiting keep their last order and keys (a job order
        reads the job's id, spec and submit time, which a job keeps), and only the new ones are
        sorted and merged in."""
        if order is not self._order:
            self._order, self._ranked = order, []
        current = dict(zip(map(_ID, pending), pending, strict=True))
        ranked = self._ranked
        olds = list(map(_SECOND, ranked))
        # The very same objects (the simulator's) keep their keys without a Python step per job;
        # other objects for a job still waiting (the head reads its jobs afresh, with the same
        # spec objects) are checked one by one.
        now = list(map(current.get, map(_ID, olds)))
        same = list(map(is_, now, olds))
        kept = list(compress(ranked, same))
        if len(kept) < len(now) - now.count(None):
            kept = [
                (key, job)
                for (key, old), job, alike in zip(ranked, now, same, strict=True)
                if job is not None
                and (
                    alike
                    or (job.spec is old.spec and job.submitted_at == old.submitted_at and job.attained == old.attained)
                )
            ]
        if len(kept) < len(current):
            known = set(map(_ID, map(_SECOND, kept)))
            new = list(compress(pending, map(not_, map(known.__contains__, map(_ID, pending)))))
            kept.extend(sorted(zip(map(order, new), new, strict=True), key=_FIRST))
            kept.sort(key=_FIRST)  # two sorted runs: merged in one pass
        self._ranked = kept
        return kept

    def started(self, starts: Iterable[StartJob], jobs: Mapping[int, PendingJob]) -> None:
        """The jobs a cycle started (``jobs`` by id): their resources are already taken in the index."""
        for start in starts:
            spec, owner = jobs[start.job_id].spec, jobs[start.job_id].owner
            self._placed[start.job_id] = (start.placements, spec, owner)
            self._count(spec, owner, +1)

    def grew(self, grows: Iterable[GrowJob]) -> None:
        """Workers a cycle added to running elastic jobs: their resources are already taken in the index."""
        for grow in grows:
            placements, spec, owner = self._placed[grow.job_id]
            self._placed[grow.job_id] = ((*placements, *grow.placements), spec, owner)

    def user_held(self, project: str, user: str) -> float:
        """GPUs ``user``'s running jobs hold in ``project``, as of the snapshot ``open`` was given."""
        return self._by_user.get((project, user), 0) / GPU_FRACTION_STEPS

    def held_by_user(self) -> dict[tuple[str, str], float]:
        """Every (project, user) that holds GPUs, and how many (for tests and reports)."""
        return {key: n / GPU_FRACTION_STEPS for key, n in self._by_user.items() if n}

    def forget(self) -> None:
        """After a cycle that failed half-way: the index may hold its half-made changes."""
        self._cluster = None
        self._nodes = None
        self.displace = None

    def _rebuild(self, snapshot: Snapshot) -> None:
        self._cluster = ClusterState(snapshot)
        self._nodes = snapshot.nodes
        self.per_nodes.clear()
        self.partitions.clear()
        self._placed = {r.id: (r.placements, r.spec, r.owner) for r in snapshot.running}
        self._allocated.clear()
        self._bound.clear()
        self._jobs.clear()
        self._by_user.clear()
        self.elastic = 0
        self._running_workers = None
        for _, spec, owner in self._placed.values():
            self._count(spec, owner, +1)
        self.rebuilds += 1

    def _apply_difference(self, snapshot: Snapshot) -> None:
        assert self._cluster is not None
        cluster, placed, running = self._cluster, self._placed, snapshot.running
        # This runs over every running job at every cycle and every simulated event, so the
        # common case goes through builtins: a job whose placements are the very objects this
        # memory recorded (the simulator's, and the head's starts until it reads them back) is
        # where it was; only the others are compared one by one.
        current = dict(zip(map(_ID, running), running, strict=True))
        where = dict(zip(map(_ID, running), map(_PLACEMENTS, running), strict=True))
        suspects = compress(list(placed), map(is_not, map(where.get, placed), map(_FIRST, placed.values())))
        # Give back everything that ended or moved (after a preemption and a restart between two
        # cycles, placed elsewhere) before taking anything: a job restarted on GPUs another one
        # just left must find them free.
        gone = [job_id for job_id in suspects if (now := where.get(job_id)) is None or now != placed[job_id][0]]
        for job_id in gone:
            placements, spec, owner = placed.pop(job_id)
            for p in placements:
                cluster.give_back(p)
            self._count(spec, owner, -1)
        if len(placed) == len(current):
            return
        for job_id in [i for i in current if i not in placed]:  # in the snapshot's order, as a rebuild
            job = current[job_id]
            for p in job.placements:
                cluster.take(p)
            placed[job_id] = (job.placements, job.spec, job.owner)
            self._count(job.spec, job.owner, +1)

    def _count(self, spec: JobSpec, owner: str, sign: int) -> None:
        steps = sign * round(spec.total_gpus * GPU_FRACTION_STEPS)
        self._allocated[spec.project] += steps
        self._by_user[(spec.project, owner)] += steps
        self._jobs[spec.project] += sign
        if self._running_workers is not None:
            self._count_workers(spec, sign)
        if spec.quota_bound:
            self._bound[spec.project] += steps
        if spec.max_workers is not None:
            self.elastic += sign
