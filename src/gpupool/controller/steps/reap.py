"""Reap and settle: record workers' exits, stop overdue jobs, settle drains, and settle each job
that was touched (``controller/monitor.py``)."""

from __future__ import annotations

from gpupool.controller.steps.parts import Parts, PartsStep
from gpupool.store import drain as drain_repo
from gpupool.store import jobs as job_repo

POLL_S = 1.0  # once the backend rings at exits, workers are still polled this often (a killed supervisor cannot ring)


class ReapAndSettle(PartsStep):
    name = "reap"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.heard_exits = False  # whether the backend rings at exits (Controller.rings_at_exits)
        self.rang = False  # an exit rang since the last poll
        self._last_poll = 0.0

    def run(self, now: float) -> bool:
        p = self._parts
        reaped = self._reap(now)
        if reaped:
            p.ports.changed()
            p.user_logs.changed()
        touched = set(reaped)
        with p.db.tx() as s:
            job_repo.stop_overdue(s, p.clock.now())
            drain_repo.settle_drains(s, p.clock.now())
            touched |= job_repo.stopping(s)
        p.monitor.settle(touched)
        p.shared.touched |= touched
        return bool(reaped)  # exits were reaped: this tick moved work along

    def _reap(self, now: float) -> set[int]:
        if self.heard_exits and not self.rang and now - self._last_poll < POLL_S:
            return set()
        self.rang = False  # before polling: a ring during the poll calls for another
        self._last_poll = now
        return self._parts.monitor.reap()
