"""Which running jobs a waiting job may displace, kept from cycle to cycle.

Under a preemptive order a running job's rank moves with time (attained GPU time grows as it
runs), but only at times known when it starts: the time it passes each threshold, or its minimum
run. So each running job gets, per level, the time from which a waiting job of that level may
displace it (``PreemptiveOrder.running_keys``), and the index keeps one sorted list per level:
the candidates of a waiting job are a prefix of its level's list (``keys < bound``), found by
bisection. A cycle then costs what changed (jobs that started or ended), not the number of
running jobs, as ``CycleMemory``'s free-resource index does; the simulator's thousands of events
depend on it.

Levels are tried deepest first (the jobs that received most service), each in key order."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from itertools import compress
from operator import attrgetter, is_not

from gpupool.domain.snapshot import RunningJob
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.hooks import PreemptiveOrder

_ID = attrgetter("id")
_NEVER = float("inf")


class DisplaceIndex:
    __slots__ = ("_config", "_jobs", "_keys", "_levels")

    def __init__(self, config: SchedulerConfig) -> None:
        self._config = config
        self._jobs: dict[int, RunningJob] = {}  # as last indexed
        self._keys: dict[int, tuple[float, ...]] = {}
        self._levels: list[list[tuple[float, int]]] = []

    @classmethod
    def of(cls, known: DisplaceIndex | None, config: SchedulerConfig) -> DisplaceIndex:
        """``known`` if it was built for ``config``, else a new one."""
        return known if known is not None and known._config == config else cls(config)

    def update(self, running: tuple[RunningJob, ...], hooks: PreemptiveOrder) -> dict[int, RunningJob]:
        """Bring the index to ``running``; returns the running jobs by id."""
        current = dict(zip(map(_ID, running), running, strict=True))
        for job_id in self._jobs.keys() - current.keys():
            self._remove(job_id)
        known = self._jobs
        changed = list(compress(running, map(is_not, map(known.get, current), running)))
        for job in changed:
            old = known.get(job.id)
            if old is not None and (old.started_at, old.attained, old.spec) == (job.started_at, job.attained, job.spec):
                known[job.id] = job  # the same run, read afresh
                continue
            if old is not None:
                self._remove(job.id)
            self._add(job, hooks)
        return current

    def candidates(self, level: int, bound: float) -> Iterator[int]:
        """Ids of jobs a waiting job of ``level`` may displace: keys below ``bound`` at its level
        or deeper, deepest level first, each id once."""
        seen: set[int] = set()
        for index in range(len(self._levels) - 1, level - 1, -1):
            entries = self._levels[index]
            for _, job_id in entries[: bisect_left(entries, (bound, -1))]:
                if job_id not in seen:
                    seen.add(job_id)
                    yield job_id

    def _add(self, job: RunningJob, hooks: PreemptiveOrder) -> None:
        self._jobs[job.id] = job
        if job.spec.quota_bound or job.started_at is None:
            return  # never displaced; a starting job is indexed once it runs (a new object)
        keys = hooks.running_keys(job, self._config)
        self._keys[job.id] = keys
        while len(self._levels) < len(keys):
            self._levels.append([])
        for level, key in enumerate(keys):
            if key != _NEVER:  # a job no waiting job may ever displace (no checkpoint) costs nothing
                insort(self._levels[level], (key, job.id))

    @property
    def empty(self) -> bool:
        """No running job can ever be displaced (none checkpoints, say): nothing to look for."""
        return not any(self._levels)

    def _remove(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)
        keys = self._keys.pop(job_id, None)
        for level, key in enumerate(keys or ()):
            if key == _NEVER:
                continue
            entries = self._levels[level]
            at = bisect_left(entries, (key, job_id))
            del entries[at]
