"""Watch live workers: record exits, settle each touched job, stop the rest of a failed gang.

What an exit means is ``domain.outcome.settle``'s to say and the store's to write
(``store.jobs.settle_job``); stopping workers is the applier's, the one component that acts on
processes."""

from __future__ import annotations

import logging

from gpupool.clock import Clock
from gpupool.controller.applier import Applier
from gpupool.domain.errors import Stale
from gpupool.domain.records import WorkerRecord
from gpupool.executors.base import Executor
from gpupool.store import jobs as job_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database

log = logging.getLogger("gpupool.controller")


class Monitor:
    def __init__(
        self,
        db: Database,
        executor: Executor,
        clock: Clock,
        applier: Applier,
        restart_backoff_s: float = 0.0,
        image_wait_s: float | None = None,
    ) -> None:
        self._db = db
        self._backoff_s = restart_backoff_s
        self._image_wait_s = image_wait_s  # None: a job waits for its image for ever
        self._executor = executor
        self._clock = clock
        self._applier = applier

    def reap(self) -> set[int]:
        """Poll every live worker; record the exits found. Returns the ids of jobs touched."""
        with self._db.tx() as s:
            live = worker_repo.live_workers(s)
        exits = []
        for w in live:
            if w.handle is None:
                continue
            try:
                ended = self._executor.poll(w.placement.node, w.handle)
            except Exception:
                log.exception("polling worker %s of job %s failed", w.placement.worker, w.job_id)
                continue
            if ended is not None:
                exits.append((w, ended))
        if not exits:
            return set()
        now = self._clock.now()
        with self._db.tx() as s:
            read = worker_repo.worker_for_exit(s, [w.id for w, _ in exits])
            for w, ended in exits:
                worker_repo.record_exit(
                    s,
                    w.id,
                    ended.exit_code,
                    ended.lost,
                    now,
                    exit_reason=ended.reason,
                    note=ended.note,
                    image_digest=ended.image_digest,
                    read=read[w.id],
                )
        self._applier.forget([w.id for w, _ in exits])
        return {w.job_id for w, _ in exits}

    def settle(self, job_ids: set[int]) -> None:
        """Apply the outcome rule to each job: finish it, requeue it, or stop its other workers.
        A job that changed meanwhile (a cancel through the API) is settled again next tick.

        One transaction for all of them, a savepoint each (a stale job is rolled back alone): each
        commit waits for the disk on the controller's one thread, and a tick of short jobs settles
        one per GPU. Should the batch fail as a whole, each job is settled on its own, as before."""
        if len(job_ids) > 1:
            try:
                to_stop = self._settle_together(sorted(job_ids))
            except Exception:  # nothing was written; the per-job path below says why
                log.info("settling %d jobs together failed; settling each alone", len(job_ids), exc_info=True)
            else:
                self._applier.kill(to_stop)
                return
        for job_id in sorted(job_ids):
            try:
                with self._db.tx() as s:
                    one = job_repo.settle_job(s, job_id, self._clock.now(), self._backoff_s, self._image_wait_s)
            except Stale:
                log.info("job %s changed while it was being settled; settling it again next cycle", job_id)
                continue
            self._applier.kill(one)

    def _settle_together(self, job_ids: list[int]) -> list[WorkerRecord]:
        to_stop: list[WorkerRecord] = []
        with self._db.tx() as s:
            now = self._clock.now()
            for job_id in job_ids:
                try:
                    with s.begin_nested():
                        to_stop += job_repo.settle_job(s, job_id, now, self._backoff_s, self._image_wait_s)
                except Stale:  # a row that moved under a flush fails the batch: each goes alone then
                    log.info("job %s changed while it was being settled; settling it again next cycle", job_id)
        return to_stop
