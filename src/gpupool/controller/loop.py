"""The controller loop: reap exits, settle jobs, schedule, apply. One thread, short transactions,
no database session open while processes are launched or polled."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sqlalchemy import select

from gpupool.clock import Clock
from gpupool.controller.applier import Applier
from gpupool.controller.monitor import Monitor
from gpupool.controller.recovery import recover
from gpupool.domain.decisions import CycleResult
from gpupool.executors.base import Executor
from gpupool.scheduler import SchedulerConfig, schedule
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database
from gpupool.store.orm import JobRow
from gpupool.store.snapshot import load_snapshot

log = logging.getLogger("gpupool.controller")


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    interval_s: float = 0.5
    kill_grace_s: float = 10.0


class Controller:
    def __init__(
        self, db: Database, executor: Executor, clock: Clock, config: SchedulerConfig, settings: ControllerSettings
    ) -> None:
        self._db = db
        self._executor = executor
        self._clock = clock
        self._config = config
        self._settings = settings
        self._monitor = Monitor(db, executor, clock)
        self._applier = Applier(db, executor, clock, settings.kill_grace_s)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_cycle_s = 0.0

    def start(self) -> None:
        """Register nodes, recover from a previous run, then run the loop in a thread."""
        with self._db.tx() as s:
            node_repo.register_nodes(s, self._executor.nodes(), self._clock.now())
        self._monitor.settle(recover(self._db, self._executor, self._clock))
        self._thread = threading.Thread(target=self._run, name="gpupool-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def wake(self) -> None:
        """Run a cycle now (after a submit or cancel) instead of at the next tick."""
        self._wake.set()

    def tick(self) -> CycleResult:
        started = time.perf_counter()
        touched = self._monitor.reap()
        with self._db.tx() as s:
            touched |= set(s.scalars(select(JobRow.id).where(JobRow.cancel_requested.is_(True))))
        self._monitor.settle(touched)
        with self._db.tx() as s:
            snapshot = load_snapshot(s, self._clock.now())
        result = schedule(snapshot, self._config)
        for decision in result.starts:
            self._applier.start(decision)
        with self._db.tx() as s:
            job_repo.set_reasons(s, result.pending)
        self.last_cycle_s = time.perf_counter() - started
        return result

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.tick()
            except Exception:
                log.exception("controller cycle failed; retrying")
            self._wake.wait(self._settings.interval_s)
