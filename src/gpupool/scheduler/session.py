"""One cycle's working state: the cluster's free resources, the queue, and what was decided."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain.decisions import Reason, StartJob
from gpupool.domain.jobs import Placement
from gpupool.domain.snapshot import PendingJob, Snapshot
from gpupool.scheduler import registry
from gpupool.scheduler.cluster import ClusterState, Statement
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.plugins.fit import fit_worker


@dataclass(slots=True)
class Session:
    snapshot: Snapshot
    config: SchedulerConfig
    cluster: ClusterState
    queue: list[PendingJob]
    starts: list[StartJob] = field(default_factory=list)
    reasons: dict[int, Reason] = field(default_factory=dict)

    @classmethod
    def open(cls, snapshot: Snapshot, config: SchedulerConfig) -> Session:
        order = registry.job_order(config.job_order)
        return cls(snapshot, config, ClusterState(snapshot), sorted(snapshot.pending, key=order))

    def try_place_gang(self, job: PendingJob) -> tuple[Placement, ...] | None:
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
        return statement.commit()
