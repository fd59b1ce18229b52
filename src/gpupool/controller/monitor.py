"""Watch live workers: record exits, judge each touched job, stop the rest of a failed gang."""

from __future__ import annotations

import logging

from gpupool.clock import Clock
from gpupool.domain.jobs import JobState
from gpupool.domain.outcome import Verdict, judge
from gpupool.domain.records import WorkerRecord
from gpupool.executors.base import Executor
from gpupool.store import jobs as job_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database
from gpupool.store.transitions import transition_job

log = logging.getLogger("gpupool.controller")

_VERDICT_STATE = {
    Verdict.SUCCEEDED: JobState.SUCCEEDED,
    Verdict.FAILED: JobState.FAILED,
    Verdict.CANCELLED: JobState.CANCELLED,
    Verdict.REQUEUE: JobState.PENDING,
    Verdict.PREEMPTED: JobState.PREEMPTED,
}


class Monitor:
    def __init__(self, db: Database, executor: Executor, clock: Clock) -> None:
        self._db = db
        self._executor = executor
        self._clock = clock
        self._signalled: set[int] = set()  # worker ids already sent SIGTERM

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
            for w, ended in exits:
                worker_repo.record_exit(s, w.id, ended.exit_code, ended.lost, now)
                self._signalled.discard(w.id)
        return {w.job_id for w, _ in exits}

    def settle(self, job_ids: set[int]) -> None:
        """Apply the outcome rule to each job: finish it, requeue it, or stop its other workers."""
        for job_id in sorted(job_ids):
            with self._db.tx() as s:
                row = job_repo.job_row(s, job_id, lock=True)
                state = JobState(row.state)
                if not state.active:
                    continue
                workers = worker_repo.attempt_workers(s, job_id, row.starts)
                outcome = judge(
                    workers,
                    cancel_requested=row.cancel_requested,
                    restarts=row.restarts,
                    max_restarts=row.max_restarts,
                    preempt_requested=row.preempt_requested,
                )
                if outcome.verdict is Verdict.WAIT:
                    continue
                if outcome.verdict is Verdict.STOP_REST:
                    to_stop = [w for w in workers if w.status.holds_resources]
                else:
                    to_stop = []
                    if state is JobState.STARTING:
                        transition_job(s, row, JobState.RUNNING, self._clock.now(), "running")
                    target = _VERDICT_STATE[outcome.verdict]
                    message = outcome.message
                    if outcome.verdict is Verdict.CANCELLED and row.timed_out:
                        target = JobState.FAILED
                        message = f"stopped after its max runtime of {row.max_runtime_s}s"
                    if outcome.verdict is Verdict.REQUEUE:
                        row.restarts += 1
                    row.exit_code = outcome.exit_code if target is not JobState.PENDING else row.exit_code
                    row.cancel_requested = row.preempt_requested = False
                    kind = "requeued" if target is JobState.PENDING else None
                    if outcome.lost:  # its node died or its supervisor vanished: lost, then requeued or failed
                        transition_job(s, row, JobState.LOST, self._clock.now(), f"job lost: {outcome.lost}")
                    transition_job(s, row, target, self._clock.now(), message, kind=kind)
                    if target is JobState.PREEMPTED:
                        row.preempted = True
                        requeued = (
                            f"requeued after preemption (restarts stay {row.restarts} of {row.max_restarts}: "
                            "a preemption does not count)"
                        )
                        transition_job(s, row, JobState.PENDING, self._clock.now(), requeued, kind="requeued")
            self._stop(to_stop)

    def _stop(self, workers: list[WorkerRecord]) -> None:
        for w in workers:
            if w.handle is None or w.id in self._signalled:
                continue
            try:
                self._executor.kill(w.placement.node, w.handle)
                self._signalled.add(w.id)
            except Exception:
                log.exception("stopping worker %s of job %s failed", w.placement.worker, w.job_id)
