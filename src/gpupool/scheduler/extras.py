"""Elastic jobs' workers above their minimum in one cycle (issue 35): what ``actions/shrink`` may
stop and ``actions/grow`` adds to.

An elastic job's minimum counts against its project's quota like a rigid gang's workers (it is all
``JobSpec.total_gpus`` and the session's ``allocated`` count); the workers above it are borrowed
capacity, kept here per project and per user so that limits count them and reclaim sees a project
whose width goes beyond its quota. A limit is a cap on what a project holds: its checks
(``held``) count the extra workers, those leaving and those of jobs being stopped whole too,
until their GPUs are back or promised to a waiting job; quotas count minimums only. Built only
where a running job is elastic (``CycleMemory`` counts them): a cluster without one pays nothing
and decides exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    # GPUs above minimums still held but on their way back: leaving workers not promised yet, and
    # the extra workers of elastic jobs being stopped whole; by project and by (project, owner).
    apart: dict[str, float] = field(default_factory=dict)
    apart_by_user: dict[tuple[str, str], float] = field(default_factory=dict)
    folded: bool = False  # the grow action counts them in the session's own figures meanwhile

    @classmethod
    def of(cls, running: Iterable[RunningJob]) -> Extras:
        elastic = [r for r in running if r.spec.max_workers is not None]
        found = cls({r.id: r for r in elastic if not r.stopping})
        for job in elastic:
            if job.stopping:
                found.count_apart(job, max(len(job.placements) - job.spec.workers, 0))
            else:
                found.count(job, len(found.extra_workers(job)))
                found.count_apart(job, len(job.leaving))
        return found

    def count(self, job: RunningJob, workers: int) -> None:
        """``workers`` more of ``job``'s workers above its minimum (fewer where negative)."""
        gpus = workers * job.spec.gpus
        project, mine = job.spec.project, (job.spec.project, job.owner)
        self.gpus[project] = self.gpus.get(project, 0.0) + gpus
        self.by_user[mine] = self.by_user.get(mine, 0.0) + gpus

    def count_apart(self, job: RunningJob, workers: int) -> None:
        """``workers`` more of ``job``'s workers above its minimum on their way back (fewer where negative)."""
        gpus = workers * job.spec.gpus
        project, mine = job.spec.project, (job.spec.project, job.owner)
        self.apart[project] = self.apart.get(project, 0.0) + gpus
        self.apart_by_user[mine] = self.apart_by_user.get(mine, 0.0) + gpus

    def held(self, project: str) -> float:
        """What ``project`` holds above its jobs' minimums, for its limits (0 while grow folded it in)."""
        if self.folded:
            return 0.0
        return self.gpus.get(project, 0.0) + self.apart.get(project, 0.0)

    def held_by_user(self, key: tuple[str, str]) -> float:
        """The same for one (project, owner), for user limits."""
        if self.folded:
            return 0.0
        return self.by_user.get(key, 0.0) + self.apart_by_user.get(key, 0.0)

    def with_held(self, allocated: Mapping[str, float]) -> Mapping[str, float]:
        """``allocated`` (minimums) with what each project holds above them: what limits read."""
        if self.folded:
            return allocated
        merged = dict(allocated)
        for figures in (self.gpus, self.apart):
            for project, gpus in figures.items():
                merged[project] = merged.get(project, 0.0) + gpus
        return merged

    def drop(self, job: RunningJob, worker: int) -> None:
        """Stop ``worker`` of ``job`` (one of ``extra_workers``) this cycle; ``undrop`` takes it back."""
        self.gone.setdefault(job.id, set()).add(worker)
        self.count(job, -1)

    def undrop(self, job: RunningJob, worker: int) -> None:
        self.gone[job.id].discard(worker)
        self.count(job, 1)

    def promise(self, job: RunningJob, worker: int) -> None:
        """A leaving worker's GPUs are a waiting job's: they no longer count as its project's."""
        self.promised.add((job.id, worker))
        self.count_apart(job, -1)

    def unpromise(self, job: RunningJob, worker: int) -> None:
        self.promised.discard((job.id, worker))
        self.count_apart(job, 1)

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
