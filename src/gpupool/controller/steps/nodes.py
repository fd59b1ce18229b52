"""Node sync: record the nodes the executor serves (joins, deaths on the Ray backend)."""

from __future__ import annotations

import logging

from gpupool.controller.steps.parts import PartsStep
from gpupool.store import nodes as node_repo

log = logging.getLogger("gpupool.controller")


class SyncNodes(PartsStep):
    name = "nodes"

    @property
    def every_s(self) -> float:
        return self._parts.settings.node_sync_s

    def run(self, now: float) -> bool:
        self.sync()
        return False

    def sync(self, force: bool = False) -> bool:
        """Record node joins and deaths the executor reports; True when anything changed. A down
        node's workers are then polled as lost (the reap step), their jobs requeued or failed; the
        scheduler sees the change, the port walls are handed to a node that came, and node alerts
        are raised or cleared (the next step)."""
        p = self._parts
        try:
            nodes = p.executor.nodes()
        except Exception:
            log.exception("asking the executor for its nodes failed; keeping the last known ones")
            return False
        if not force and nodes == p.shared.nodes:
            return False
        with p.db.tx() as s:
            node_repo.register_nodes(s, nodes, p.clock.now())
        p.shared.nodes = nodes  # only once recorded: a failed write is retried at the next sync
        p.shared.dirty = True
        p.shared.nodes_changed = True  # node alerts are raised or cleared by the next step
        p.ports.changed()  # a node came or went: it is given the others' ports
        return True


class WatchNodeAlerts(PartsStep):
    """After a node sync that changed something: node-down alerts raised or cleared."""

    name = "node-alerts"

    def run(self, now: float) -> bool:
        if self._parts.shared.nodes_changed:
            self._parts.shared.nodes_changed = False
            self._parts.alerts.nodes()
        return False
