"""The scheduling cycle: load a snapshot, ``schedule()`` it, start and stop what it decided, and
write why each waiting job waits. It runs only when something changed (a submit, a cancel, an exit,
a start), a full cycle is due, or the time when a deferred job may start has come."""

from __future__ import annotations

import logging
from datetime import datetime

from gpupool.controller.steps.parts import Parts, PartsStep
from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.scheduler import CycleMemory, schedule
from gpupool.store import arrays as array_repo
from gpupool.store import jobs as job_repo
from gpupool.store.snapshot import SpecCache, load_snapshot
from gpupool.usecases.jobs import make_array_tasks

log = logging.getLogger("gpupool.controller")


def _idle_deferred_reason(until: datetime) -> Reason:
    return Reason(
        ReasonCode.IDLE_HOLD,
        "preempted for sitting idle; the jobs that waited go first, and it is scheduled again from "
        f"{until:%H:%M:%S} UTC",
    )


class ScheduleCycle(PartsStep):
    name = "schedule"  # every tick; run() says whether a cycle is due: dirty, touched, a full cycle or a wake time

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._specs = SpecCache()
        self._memory = CycleMemory()  # the scheduler's index, carried from cycle to cycle
        self._written: dict[int, Reason] = {}
        self._last_full = 0.0
        # When the first deferred job (a restart's back-off, an idle job preempted) may start again,
        # or the scheduler's decisions change by time alone (``CycleResult.wake_at``): a cycle runs
        # then, not at the next full cycle up to full_cycle_s later.
        self._wake_at: datetime | None = None

    def run(self, now: float) -> bool:
        p, shared = self._parts, self._parts.shared
        due = now - self._last_full >= p.settings.full_cycle_s
        woken = self._wake_at is not None and p.clock.now() >= self._wake_at
        if not (shared.dirty or shared.touched or due or woken):
            return False
        shared.dirty = False
        self._last_full = now
        self._make_array_tasks()
        with p.db.read() as s:  # no writer waits while the snapshot is read
            deferred = job_repo.deferred(s, p.clock.now())
            deferred_until = min((until for until, _ in deferred.values()), default=None)
            capped = array_repo.capped(s)
            snapshot = load_snapshot(
                s, p.clock.now(), self._specs, capped=capped, power_budget_w=p.settings.power_budget_w
            )
        if deferred:
            # A job backing off keeps the reason its requeue wrote (with its delay); idle ones get theirs.
            idle = {i: _idle_deferred_reason(until) for i, (until, backoff) in deferred.items() if not backoff}
            with p.db.tx() as s:
                job_repo.set_reasons(s, idle)
        result = schedule(snapshot, p.config, memory=self._memory)
        self._wake_at = min((t for t in (deferred_until, result.wake_at) if t is not None), default=None)
        specs = {job_id: job.spec for job_id, job in result.started.items()}
        for job_id, attempt in p.applier.start_all(result.starts, specs).items():
            if attempt == 1:
                p.on_first_start((p.clock.now() - result.started[job_id].submitted_at).total_seconds())
        p.applier.preempt_all(result.preemptions)
        if result.grows or result.shrinks:  # elastic jobs (issue 35): specs as the snapshot had them
            running = {job.id: job.spec for job in snapshot.running}
            p.applier.grow_all(result.grows, running)
            p.applier.shrink_all(result.shrinks)
        if result.starts or result.grows:
            p.ports.changed()  # pushed by the next step, in this tick
        moved = bool(result.starts or result.preemptions or result.grows or result.shrinks)
        if moved:
            shared.dirty = True  # the next cycle sees the new placements and the stopping jobs
        self._write_reasons({**result.pending, **capped})
        shared.waiting = bool(result.pending)
        shared.result = result
        return moved

    def _make_array_tasks(self) -> None:
        """An array is accepted as one record: its other tasks are written here, before the snapshot
        that schedules them. Should that fail, this cycle schedules without them (they are counted
        as pending meanwhile) and the next cycle tries again: one bad array never stops the pool."""
        try:
            make_array_tasks(self._parts.db)
        except Exception:
            log.exception("could not write the tasks of an array accepted as one record; the next cycle tries again")

    def _write_reasons(self, reasons: dict[int, Reason]) -> None:
        """Write only reasons that differ from what this controller last wrote."""
        changed = {i: r for i, r in reasons.items() if self._written.get(i) != r}
        if changed:
            with self._parts.db.tx() as s:
                job_repo.set_reasons(s, changed)
        self._written = dict(reasons)
