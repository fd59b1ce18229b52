"""One cycle's working state: free resources, per-project usage, the queue, what was decided."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpupool.domain.decisions import Preempt, Reason, ReasonCode, StartJob
from gpupool.domain.jobs import Placement
from gpupool.domain.projects import Project, effective_projects
from gpupool.domain.snapshot import PendingJob, Snapshot

if TYPE_CHECKING:
    from gpupool.scheduler.reservation import Reservation
from gpupool.scheduler import registry
from gpupool.scheduler.cluster import ClusterState, Statement
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.fair_share import fair_shares
from gpupool.scheduler.plugins.fit import fit_worker


@dataclass(slots=True)
class Session:
    snapshot: Snapshot
    config: SchedulerConfig
    cluster: ClusterState
    queue: list[PendingJob]
    projects: dict[str, Project]
    shares: dict[str, float]
    allocated: dict[str, float]
    starts: list[StartJob] = field(default_factory=list)
    reasons: dict[int, Reason] = field(default_factory=dict)
    preemptions: list[Preempt] = field(default_factory=list)
    claimed: set[int] = field(default_factory=set)  # running jobs whose GPUs are promised to a waiting job
    bound: dict[str, float] = field(default_factory=dict)  # GPUs of interactive and inference jobs, by project
    reservation: Reservation | None = None  # set by allocate, honoured by backfill
    held: list[tuple[str, int]] = field(default_factory=list)  # free GPUs the reservation keeps

    @classmethod
    def open(cls, snapshot: Snapshot, config: SchedulerConfig) -> Session:
        order = registry.job_order(config.job_order)
        cluster = ClusterState(snapshot)
        capacity = sum(1 for n in cluster.nodes.values() for g in n.node.gpus if g.healthy)
        projects = {p.name: p for p in effective_projects(list(snapshot.projects), capacity)}
        for name in {j.spec.project for j in snapshot.pending} | {j.spec.project for j in snapshot.running}:
            projects.setdefault(name, Project(name))
        allocated: dict[str, float] = defaultdict(float)
        bound: dict[str, float] = defaultdict(float)
        for running in snapshot.running:
            allocated[running.spec.project] += running.spec.total_gpus
            if running.spec.quota_bound:
                bound[running.spec.project] += running.spec.total_gpus
        return cls(
            snapshot,
            config,
            cluster,
            sorted(snapshot.pending, key=order),
            projects,
            fair_shares(projects.values(), capacity),
            allocated,
            bound=bound,
        )

    def project(self, name: str) -> Project:
        return self.projects.get(name) or Project(name)

    def fits(self, job: PendingJob) -> bool:
        """Would the whole gang fit now? Leaves the cluster state as it found it."""
        return self.try_place_gang(job, commit=False) is not None

    def try_place_gang(self, job: PendingJob, *, commit: bool = True) -> tuple[Placement, ...] | None:
        """Place every worker or none: a partial gang is rolled back through the statement."""
        demand = WorkerDemand.of(job.spec)
        score = registry.placement(self.config.placement)
        statement = Statement(self.cluster)
        for worker in range(job.spec.workers):
            best: tuple[tuple[tuple[int, ...], str], Placement] | None = None
            for free in self.cluster.nodes.values():
                placement = fit_worker(free, demand, worker)
                if placement is None:
                    continue
                key = (score(free, demand), free.name)
                if best is None or key < best[0]:
                    best = (key, placement)
            if best is None:
                statement.discard()
                return None
            statement.place(best[1])
        if not commit:
            placed = statement.commit()
            for p in reversed(placed):
                self.cluster.give_back(p)
            return placed
        return statement.commit()

    def hold(self, reservation: Reservation) -> None:
        """Keep the reserved GPUs that are free now from other jobs. GPUs the reservation needs
        that running jobs still hold are theirs until they end; only GPUs are reserved."""
        held: list[tuple[str, int]] = []
        for p in reservation.placements:
            free = self.cluster.nodes.get(p.node)
            if free is None:
                continue
            for index in p.gpus:
                if index in free.free_gpus:
                    free.free_gpus.discard(index)
                    held.append((p.node, index))
        self.held = held

    def unhold(self) -> None:
        for node, index in self.held:
            self.cluster.nodes[node].free_gpus.add(index)
        self.held = []

    def policy_refused(self, job_id: int) -> bool:
        """Refused by limit or quota: no amount of freed GPUs would let it start."""
        reason = self.reasons.get(job_id)
        return reason is not None and reason.code in (ReasonCode.LIMIT, ReasonCode.QUOTA)

    def record_start(self, job: PendingJob, placements: tuple[Placement, ...]) -> None:
        self.starts.append(StartJob(job.id, placements))
        self.allocated[job.spec.project] += job.spec.total_gpus
        if job.spec.quota_bound:
            self.bound[job.spec.project] = self.bound.get(job.spec.project, 0.0) + job.spec.total_gpus
