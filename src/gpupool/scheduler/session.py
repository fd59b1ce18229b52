"""One cycle's working state: free resources, per-project usage, the queue, what was decided.

The session calls the hooks the configuration names (``hooks.Hooks``), which ``registry`` looks up
and the caller (``cycle``) passes in: the session imports no plugin."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter, itemgetter

from gpupool.domain.decisions import GrowJob, Preempt, Reason, ReasonCode, ShrinkJob, StartJob
from gpupool.domain.jobs import Placement
from gpupool.domain.projects import Project, effective_projects
from gpupool.domain.snapshot import PendingJob, RunningJob, Snapshot
from gpupool.scheduler import partition
from gpupool.scheduler.capacity import ever_fits, room_for
from gpupool.scheduler.cluster import ClusterState, NodeFree, Statement
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.extras import Extras
from gpupool.scheduler.fair_share import fair_shares
from gpupool.scheduler.fit import build, can_fit
from gpupool.scheduler.hooks import Hooks, NodePenalty, PlacementPlugin
from gpupool.scheduler.incremental import CycleMemory
from gpupool.scheduler.lending import Lending
from gpupool.scheduler.levels import Levels
from gpupool.scheduler.per_model import PerModel
from gpupool.scheduler.power import PowerGate
from gpupool.scheduler.reserved import Reservation

_PROJECT = attrgetter("spec.project")
_POLICY = frozenset({ReasonCode.LIMIT, ReasonCode.QUOTA, ReasonCode.POWER, ReasonCode.USER_LIMIT})


@dataclass(slots=True)
class Session:
    snapshot: Snapshot
    config: SchedulerConfig
    hooks: Hooks[Session]
    cluster: ClusterState
    queue: list[PendingJob]
    projects: dict[str, Project]
    shares: dict[str, float]
    allocated: dict[str, float]
    memory: CycleMemory
    starts: list[StartJob] = field(default_factory=list)
    started_jobs: dict[int, PendingJob] = field(default_factory=dict)  # what ``starts`` started, by id
    reasons: dict[int, Reason] = field(default_factory=dict)
    preemptions: list[Preempt] = field(default_factory=list)
    claimed: set[int] = field(default_factory=set)  # running jobs whose GPUs are promised to a waiting job
    bound: dict[str, float] = field(default_factory=dict)  # GPUs of interactive and inference jobs, by project
    # GPUs this cycle started, by (project, user): the user order.
    user_started: dict[tuple[str, str], float] = field(default_factory=dict)
    # GPUs being freed for waiting jobs this cycle (``victims.stop_for``), by (project, user), and
    # whether any project has user limits (None: not asked yet): what ``user_limit`` reads.
    user_promised: dict[tuple[str, str], float] = field(default_factory=dict)
    user_limited: bool | None = None
    reservation: Reservation | None = None  # set by allocate, honoured by backfill
    reserved_gpus: list[tuple[str, int]] = field(default_factory=list)  # free GPUs the reservation keeps
    no_victims: set[tuple[object, ...]] = field(default_factory=set)  # shapes no victim set can serve
    wake_at: datetime | None = None  # when a decision changes by time alone (``CycleResult.wake_at``)
    _preemptible: list[RunningJob] | None = None
    _by_project: dict[str, list[RunningJob]] | None = None
    _stopping: list[RunningJob] | None = None
    _failed: dict[tuple[WorkerDemand, int, bool, str | None], int] = field(default_factory=dict)  # -> generation
    _placement: PlacementPlugin | None = None  # the configured plugin, for this pool
    _penalties: tuple[NodePenalty, ...] = ()  # the hooks' node penalties, opened for this session
    # Each project's own nodes and their GPUs where the policy confines projects to nodes, else None.
    partitions: dict[str, frozenset[str]] | None = None
    partition_gpus: dict[str, int] = field(default_factory=dict)
    power: PowerGate | None = None  # the power budgets, where one is in force (``scheduler/power.py``)
    levels: Levels | None = None  # the tree of projects, where any has a parent (``scheduler/levels.py``)
    lending: Lending | None = None  # capacity never lent, where any project has a lend limit (``lending``)
    per_model: PerModel | None = None  # per-GPU-model quotas and limits, where any is set (``scheduler/per_model.py``)
    # Elastic jobs (issue 35), where any runs: their workers above the minimum (``extras``), what this
    # cycle decided about them, and the waiting jobs whose GPUs are on their way from shrunk workers.
    extras: Extras | None = None
    grows: list[GrowJob] = field(default_factory=list)
    shrinks: list[ShrinkJob] = field(default_factory=list)
    shrunk_for: set[int] = field(default_factory=set)

    @classmethod
    def open(
        cls, snapshot: Snapshot, config: SchedulerConfig, hooks: Hooks[Session], memory: CycleMemory | None = None
    ) -> Session:
        """``hooks``: what ``config`` names (``registry.hooks``). ``memory`` carries the
        free-resource index over from the caller's previous cycle; without it the index is built
        from the snapshot alone."""
        order = hooks.job_order
        memory = memory or CycleMemory()
        cluster, allocated, bound = memory.open(snapshot)
        projects = {p.name: p for p in effective_projects(list(snapshot.projects), cluster.capacity)}
        # Through builtins where it can: a queue of thousands is ordered at every cycle (and every
        # simulated event).
        ranked = memory.in_order(snapshot.pending, order)
        preemptive = hooks.preemptive
        if preemptive is not None:  # a waiting job's place may move as time passes (promotion)
            ranked = preemptive.promote(ranked, snapshot.now, config)
        queue = list(map(itemgetter(1), ranked))
        for name in set(map(_PROJECT, queue)) | allocated.keys():
            projects.setdefault(name, Project(name))
        sets, gpus = _partitions(snapshot, config, hooks, memory)
        session = cls(
            snapshot,
            config,
            hooks,
            cluster,
            queue,
            projects,
            fair_shares(projects.values(), cluster.capacity),
            allocated,
            memory,
            bound=bound,
            partitions=sets,
            partition_gpus=gpus,
        )
        session._penalties = tuple(open_penalty(session) for open_penalty in hooks.node_penalties)
        session.power = PowerGate.open(snapshot)
        session.levels = Levels.of(projects)
        session.lending = Lending.of(projects, cluster.capacity)
        isolated = config.quota_check == "isolated"  # confined to its per-model quotas too (``partition.confined``)
        figures = partition.confined(projects.values(), cluster.models) if isolated else projects.values()
        session.per_model = PerModel.of(figures, snapshot)
        session.extras = Extras.of(snapshot.running) if memory.elastic else None
        return session

    def nodes_of(self, project: str) -> frozenset[str] | None:
        """The nodes ``project``'s jobs may start on; None: any node."""
        if self.partitions is None:
            return None
        return self.partitions.get(project, frozenset())

    def project(self, name: str) -> Project:
        return self.projects.get(name) or Project(name)

    def demand(self, job: PendingJob) -> WorkerDemand:
        return self.memory.demand(job)

    def placement(self) -> PlacementPlugin:
        """The configured placement plugin; one that learns from the pool (frag) is given the
        pool's workers by demand, running and waiting, once a cycle."""
        if self._placement is None:
            plugin = self.hooks.placement
            if plugin.for_pool is not None:
                workers = self.memory.workers(self.snapshot.pending)
                plugin = plugin.for_pool(workers.items(), self.memory.placement)
                self.memory.placement = plugin.learned
            self._placement = plugin
        return self._placement

    def preemptible(self) -> list[RunningJob]:
        """Running train jobs not already stopping, most recently started first (built once)."""
        if self._preemptible is None:
            self._preemptible = sorted(
                (r for r in self.snapshot.running if r.preemptible),
                # Starting ones are youngest; among equals the later job. The id settles ties so the
                # choice never depends on the order the caller listed running jobs in.
                key=lambda r: (r.started_at is None, r.started_at or self.snapshot.now, r.id),
                reverse=True,
            )
        return self._preemptible

    def stopping(self) -> list[RunningJob]:
        """Running jobs already being cancelled or preempted (built once)."""
        if self._stopping is None:
            self._stopping = sorted((r for r in self.snapshot.running if r.stopping), key=lambda r: r.id)
        return self._stopping

    def preemptible_in(self, project: str) -> list[RunningJob]:
        """``preemptible()`` of one project, in the same order (grouped once per cycle)."""
        if self._by_project is None:
            self._by_project = {}
            for r in self.preemptible():
                self._by_project.setdefault(r.spec.project, []).append(r)
        return self._by_project.get(project, [])

    def ever_fits(self, job: PendingJob) -> bool:
        """Would the gang fit this cluster with nothing else running (``capacity``)?"""
        members = self.nodes_of(job.spec.project)
        shape = ("ever_fits", self.demand(job), job.spec.workers, None if members is None else job.spec.project)
        known = self.memory.per_nodes.get(shape)
        if known is None:
            if members is None:
                known = ever_fits(self.cluster, self.demand(job), job.spec.workers)
            else:  # on its own nodes that are up, idle
                up = (self.cluster.nodes[n].node for n in sorted(members) if n in self.cluster.nodes)
                known = room_for(self.demand(job), up, job.spec.workers, in_service_only=True) >= job.spec.workers
            self.memory.per_nodes[shape] = known
        return known

    def fits(self, job: PendingJob) -> bool:
        """Would the whole gang fit now? Leaves the cluster state as it found it."""
        return self.try_place_gang(job, commit=False) is not None

    def failed(self, demand: WorkerDemand, workers: int, reserving: bool) -> bool:
        """This shape already failed to fit since resources last came back: it would again."""
        return self._failed.get(_shape(demand, workers, reserving, None)) == self.cluster.generation

    def try_place_gang(self, job: PendingJob, *, commit: bool = True) -> tuple[Placement, ...] | None:
        """Place every worker or none: a partial gang is rolled back through the statement.

        A shape (demand and gang size) that failed is not tried again until resources come back
        (the cluster's generation moves), which makes a long queue of similar jobs cheap."""
        demand = self.demand(job)
        if self.per_model is not None:  # only the models its project may still take (issue 34 item 2)
            demand = self.per_model.narrow(job.spec.project, demand, job.spec.total_gpus, self.cluster.models)
        only = self.nodes_of(job.spec.project)
        shape = _shape(demand, job.spec.workers, bool(self.reserved_gpus), None if only is None else job.spec.project)
        if self._failed.get(shape) == self.cluster.generation:
            return None
        plugin = self.placement()
        statement = Statement(self.cluster)
        shunned = self._shunned(job)
        if self.power is not None:  # nodes whose own power budget is full: the others first
            full = self.power.full_nodes(job, demand.whole_gpus)
            shunned = [*(avoid | full for avoid in shunned or [frozenset()]), *shunned] if full else shunned
        cached = self.snapshot.image_nodes.get(job.spec.image, frozenset()) if job.spec.image else frozenset()
        for worker in range(job.spec.workers):
            chosen = None
            for avoid in shunned:  # the least penalised nodes first (``hooks.NodePenalty``)
                chosen = self._best_node(demand, plugin, avoid, only, cached)
                if chosen is not None:
                    break
            if chosen is None:
                chosen = self._best_node(demand, plugin, only=only, prefer=cached)
            if chosen is None:
                statement.discard()
                self._failed[shape] = self.cluster.generation
                return None
            statement.place(build(chosen, demand, worker, plugin.pick_gpus))
        placed = statement.commit()
        if not commit:  # give it all back: the cluster is as before, generation included
            generation = self.cluster.generation
            for p in reversed(placed):
                self.cluster.give_back(p)
            self.cluster.generation = generation
        return placed

    def _shunned(self, job: PendingJob) -> list[frozenset[str]]:
        """The nodes to leave out, pass by pass, before a last pass over every node: by the sum of
        the node penalties, first every penalised node, then all but the least penalised, and so
        on. None at all for a job no hook penalises (most jobs: one pass, as without them)."""
        penalty: Mapping[str, int] = {}
        for hook in self._penalties:
            given = hook(job)
            if given and penalty:
                penalty = {n: penalty.get(n, 0) + given.get(n, 0) for n in penalty.keys() | given.keys()}
            elif given:
                penalty = given
        levels = sorted({p for p in penalty.values() if p > 0})
        if not levels:
            return []
        return [frozenset(n for n, p in penalty.items() if p > below) for below in [0, *levels[:-1]]]

    def _best_node(
        self,
        demand: WorkerDemand,
        plugin: PlacementPlugin,
        avoid: frozenset[str] = frozenset(),
        only: frozenset[str] | None = None,
        prefer: frozenset[str] = frozenset(),
    ) -> NodeFree | None:
        """The best node for one worker, by the plugin's score, looking only where it could fit
        (and, for a project with its own nodes, ``only`` there). Between nodes the plugin scores
        alike, one in ``prefer`` (it holds the job's image) wins over the name order."""
        found = self._scored_best(demand, plugin, avoid, only)
        if found is None or not prefer or found.name in prefer:
            return found
        target = plugin.score(found, demand)
        for name in sorted(prefer):
            free = self.cluster.nodes.get(name)
            if free is None or name in avoid or (only is not None and name not in only):
                continue
            if can_fit(free, demand) and plugin.score(free, demand) == target:
                return free
        return found

    def _scored_best(
        self,
        demand: WorkerDemand,
        plugin: PlacementPlugin,
        avoid: frozenset[str],
        only: frozenset[str] | None,
    ) -> NodeFree | None:
        """The best node by the plugin's score alone, the name breaking ties.

        Phases of buckets are scanned in order; a phase may end the search once it found a fit
        (``stop_after``) or even at its first bucket with one (``first_wins``), where the plugin's
        score guarantees nothing later can beat it. A plugin with ``choose`` finds the same node its
        own way; a project's few nodes are scanned."""
        if plugin.choose is not None and only is None:
            return plugin.choose(self.cluster, demand, lambda free: free.name not in avoid and can_fit(free, demand))
        levels = self.cluster.levels(max(demand.whole_gpus, 1 if demand.share else 0), plugin.fewest_free_first)
        phases: list[tuple[list[dict[str, NodeFree]], bool, bool]]
        if not demand.share:
            phases = [(levels, plugin.first_bucket_wins, plugin.first_bucket_wins)]
        elif plugin.shares_first and plugin.first_bucket_wins:
            phases = [(self.cluster.with_room(demand.share), True, False), (levels, True, True)]
        else:
            phases = [([*self.cluster.with_room(demand.share), *levels], False, False)]
        best: tuple[tuple[tuple[int, ...], str], NodeFree] | None = None
        for buckets, stop_after, first_wins in phases:
            for bucket in buckets:
                # Buckets are keyed by node name. A partition smaller than a bucket is looked up in
                # it rather than the bucket scanned: a project's few nodes among hundreds.
                pairs: Iterable[tuple[str, NodeFree]] = bucket.items()
                if only is not None and len(only) < len(bucket):
                    pairs = [(n, bucket[n]) for n in only if n in bucket]
                for name, free in pairs:
                    if (only is not None and name not in only) or name in avoid or not can_fit(free, demand):
                        continue
                    key = (plugin.score(free, demand), name)
                    if best is None or key < best[0]:
                        best = (key, free)
                if best is not None and first_wins:
                    return best[1]
            if best is not None and stop_after:
                return best[1]
        return best[1] if best is not None else None

    def keep_reserved(self, reservation: Reservation) -> None:
        """Keep the reserved GPUs that are free now from other jobs. GPUs the reservation needs
        that running jobs still hold are theirs until they end; only GPUs are reserved."""
        wanted = [(p.node, i) for p in reservation.placements for i in p.gpus]
        self.reserved_gpus = [(node, i) for node, i in wanted if self.cluster.reserve_gpu(node, i)]

    def release_reserved(self) -> None:
        for node, index in self.reserved_gpus:
            self.cluster.unreserve_gpu(node, index)
        self.reserved_gpus = []

    def policy_refused(self, job_id: int) -> bool:
        """Refused by limit, quota or its user's limit: no amount of freed GPUs would let it start;
        or held for power, which the budget gives back as jobs end: no job is stopped to make room
        for watts. Or served by elastic workers being stopped for it (``actions/shrink``): nothing
        more is stopped for it."""
        reason = self.reasons.get(job_id)
        return reason is not None and (reason.code in _POLICY or job_id in self.shrunk_for)

    def start(self, job: PendingJob, placements: tuple[Placement, ...]) -> Reason | None:
        """Start a job placed (committed) by ``try_place_gang`` if the policy's quota check still
        lets it and it fits the power budgets, capped where it may be; otherwise give its placements
        back and return why it waits (``limit``, ``quota``, ``power``). The quota check is asked
        again here because backfill starts jobs it passed before others started: two jobs of one
        project, each within its --limit alone, or a lend limit, must not both start past it."""
        cap = None
        refusal = self.hooks.quota_check(self, job)
        if self.power is not None and refusal is None:
            refusal, cap = self.power.admit(job, placements)
        if refusal is not None:
            generation = self.cluster.generation
            for p in reversed(placements):
                self.cluster.give_back(p)
            self.cluster.generation = generation  # nothing came back that was not free before
            self.reasons[job.id] = refusal
            return refusal
        self.record_start(job, placements, cap)
        return None

    def record_start(self, job: PendingJob, placements: tuple[Placement, ...], cap: float | None = None) -> None:
        self.starts.append(StartJob(job.id, placements, cap))
        self.started_jobs[job.id] = job
        self.allocated[job.spec.project] += job.spec.total_gpus
        if self.per_model is not None:
            self.per_model.add(job.spec.project, placements)
        mine = (job.spec.project, job.owner)
        self.user_started[mine] = self.user_started.get(mine, 0.0) + job.spec.total_gpus
        if job.spec.quota_bound:
            self.bound[job.spec.project] = self.bound.get(job.spec.project, 0.0) + job.spec.total_gpus


def _shape(
    demand: WorkerDemand, workers: int, reserving: bool, partition: str | None
) -> tuple[WorkerDemand, int, bool, str | None]:
    """What a failed placement is remembered by: a shape fails on its own project's nodes only."""
    return (demand, workers, reserving, partition)


def _partitions(
    snapshot: Snapshot, config: SchedulerConfig, hooks: Hooks[Session], memory: CycleMemory
) -> tuple[dict[str, frozenset[str]] | None, dict[str, int]]:
    assign = hooks.partition
    if assign is None:
        return None, {}
    key = (config.partition, tuple((p.name, p.quota, p.parent) for p in snapshot.projects))
    known = memory.partitions.get(key)
    if known is None:
        sets = assign(snapshot.nodes, snapshot.projects)
        known = memory.partitions[key] = (sets, partition.owned_gpus(snapshot.nodes, sets))
    return known
