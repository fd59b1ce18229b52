"""Carry out a cycle's decisions: write placements first, then launch, then mark running.

The write comes first so that a head killed mid-launch restarts knowing which GPUs it gave
away; recovery (``controller/recovery.py``) finishes or rolls back what was half done.
"""

from __future__ import annotations

import logging
from typing import Any

from gpupool.clock import Clock
from gpupool.domain.decisions import StartJob
from gpupool.domain.jobs import JobSpec, JobState
from gpupool.domain.worker_env import worker_env
from gpupool.executors.base import Executor
from gpupool.node.runtime import LaunchRequest
from gpupool.store import jobs as job_repo
from gpupool.store import workers as worker_repo
from gpupool.store.db import Database
from gpupool.store.transitions import transition_job

log = logging.getLogger("gpupool.controller")


class Applier:
    def __init__(self, db: Database, executor: Executor, clock: Clock, kill_grace_s: float) -> None:
        self._db = db
        self._executor = executor
        self._clock = clock
        self._grace = kill_grace_s

    def start(self, decision: StartJob, spec: JobSpec) -> int:
        """Start one job the scheduler placed; ``spec`` comes from the cycle's snapshot.
        Returns the attempt started (1: the job's first start)."""
        now = self._clock.now()
        with self._db.tx() as s:
            ticket = worker_repo.begin_start(s, decision.job_id, decision.placements, now)
        attempt, job_id = ticket.attempt, decision.job_id
        launched: list[tuple[int, dict[str, Any]]] = []
        failed: list[tuple[int, str]] = []
        try:
            rendezvous = self._executor.rendezvous(decision.placements[0].node)
        except Exception as exc:  # the node went away since the snapshot: nothing is launched
            log.exception("rendezvous for job %s failed", job_id)
            failed = [
                (worker_id, f"no rendezvous on {decision.placements[0].node}: {exc}") for worker_id, _ in ticket.workers
            ]
        for worker_id, p in ticket.workers if not failed else ():
            env = worker_env(
                job_id=job_id,
                spec=spec,
                placement=p,
                rendezvous=rendezvous,
                restarts=attempt - 1,
                preempted=ticket.preempted,
                checkpoint_dir=spec.checkpoint_dir,
            )
            gpus = ",".join(map(str, p.gpus)) or "none"
            request = LaunchRequest(
                job_id=job_id,
                attempt=attempt,
                worker=p.worker,
                argv=spec.command,
                env=env,
                workdir=spec.workdir,
                cpus=p.cpus,
                memory_mib=p.memory_mib,
                grace_s=self._grace,
                header=f"--- gpupool: job {job_id} attempt {attempt} worker {p.worker} on {p.node} GPUs {gpus} ---",
            )
            try:
                launched.append((worker_id, self._executor.launch(p.node, request)))
            except Exception as exc:  # an executor failure must not take the controller down
                log.exception("launch of job %s worker %s failed", job_id, p.worker)
                failed.append((worker_id, f"launch of worker {p.worker} on {p.node} failed: {exc}"))
        now = self._clock.now()
        with self._db.tx() as s:
            for worker_id, handle in launched:
                worker_repo.mark_launched(s, worker_id, handle, now)
            for worker_id, message in failed:
                worker_repo.record_exit(s, worker_id, None, True, now, reason="its launch failed")
                job_repo.add_job_event(s, job_id, now, "launch_failed", message)
            row = job_repo.job_row(s, job_id, lock=True)
            if row.state == JobState.STARTING.value:
                transition_job(s, row, JobState.RUNNING, now, f"running (attempt {attempt})")
        return attempt
