"""Elastic jobs' workers above their minimum in one cycle (issue 35): what ``actions/shrink`` may
stop and ``actions/grow`` adds to.

An elastic job's minimum counts against its project's quota like a rigid gang's workers (it is all
``JobSpec.total_gpus`` and the session's ``allocated`` count); the workers above it are borrowed
capacity, kept here per project and per user so that limits count them and reclaim sees a project
whose width goes beyond its quota. Built only where a running job is elastic (``CycleMemory``
counts them): a cluster without one pays nothing and decides exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpupool.domain.jobs import Placement
from gpupool.domain.snapshot import RunningJob


@dataclass(slots=True)
class Extras:
    jobs: dict[int, RunningJob]  # running elastic jobs not being stopped whole, by id
    gpus: dict[str, float] = field(default_factory=dict)  # project -> GPUs in workers above minimums
    by_user: dict[tuple[str, str], float] = field(default_factory=dict)  # the same per (project, owner)
    # Workers this cycle stopped, and leaving ones whose GPUs are promised to a waiting job: by job.
    gone: dict[int, set[int]] = field(default_factory=dict)
    promised: set[tuple[int, int]] = field(default_factory=set)  # (job, worker) of leaving ones promised

    @classmethod
    def of(cls, running: Iterable[RunningJob]) -> Extras:
        found = cls({r.id: r for r in running if r.spec.max_workers is not None and not r.stopping})
        for job in found.jobs.values():
            found.count(job, len(found.extra_workers(job)))
        return found

    def count(self, job: RunningJob, workers: int) -> None:
        """``workers`` more of ``job``'s workers above its minimum (fewer where negative)."""
        gpus = workers * job.spec.gpus
        project, mine = job.spec.project, (job.spec.project, job.owner)
        self.gpus[project] = self.gpus.get(project, 0.0) + gpus
        self.by_user[mine] = self.by_user.get(mine, 0.0) + gpus

    def width(self, job: RunningJob) -> int:
        """The workers it keeps after this cycle's shrinks."""
        return job.width - len(self.gone.get(job.id, ()))

    def extra_workers(self, job: RunningJob) -> list[int]:
        """Its workers above its minimum that may be stopped, the highest numbers first: never
        worker 0 (it hosts the rendezvous), none leaving or stopped this cycle, and never so many
        that it would run on fewer than its minimum."""
        gone = self.gone.get(job.id, set())
        live = sorted(
            (p.worker for p in job.placements if p.worker not in job.leaving and p.worker not in gone), reverse=True
        )
        above = len(live) - job.spec.workers
        return [w for w in live if w != 0][: max(above, 0)]

    def leaving(self) -> list[tuple[RunningJob, Placement]]:
        """Leaving workers (a shrink of an earlier cycle) whose GPUs no waiting job counts on yet."""
        return [
            (job, p)
            for job in self.jobs.values()
            for p in job.placements
            if p.worker in job.leaving and (job.id, p.worker) not in self.promised
        ]

    def busy(self) -> bool:
        """Whether there is anything to shrink or count on: extra or leaving workers."""
        return any(job.leaving or len(job.placements) > job.spec.workers for job in self.jobs.values())
