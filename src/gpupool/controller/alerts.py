"""The controller's alert step: temperature and XID alerts after each round of GPU readings,
node-down alerts after each node sync. The rules are ``domain.alerts``; this only loads, asks
and stores, and never stops the loop."""

from __future__ import annotations

import logging

from gpupool.clock import Clock
from gpupool.controller.telemetry import Round
from gpupool.domain.alerts import AlertRules, Verdicts, evaluate_gpus, evaluate_nodes
from gpupool.domain.telemetry import GpuKey
from gpupool.store import alerts as alert_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Database

log = logging.getLogger("gpupool.controller")


class AlertWatch:
    def __init__(self, db: Database, clock: Clock, rules: AlertRules) -> None:
        self._db = db
        self._clock = clock
        self._rules = rules
        self._xid_seen: dict[GpuKey, float] | None = None  # loaded from the store at first use

    def observe(self, readings: Round) -> Verdicts:
        now = self._clock.now()
        with self._db.tx() as s:
            if self._xid_seen is None:
                self._xid_seen = alert_repo.xid_seen(s)
            verdicts = evaluate_gpus(
                alert_repo.active(s), readings.samples, readings.holders, self._xid_seen, now, self._rules
            )
            alert_repo.apply(s, verdicts, now)
        for sample in readings.samples:
            self._xid_seen[(sample.node, sample.index)] = float(sample.xid_errors or 0)
        return verdicts

    def nodes(self) -> Verdicts:
        now = self._clock.now()
        with self._db.tx() as s:
            verdicts = evaluate_nodes(alert_repo.active(s), node_repo.down_nodes(s), now)
            alert_repo.apply(s, verdicts, now)
        return verdicts
