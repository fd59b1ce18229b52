"""Hand every node the ports that jobs on the other nodes serve, so that its jobs cannot call a
replica or a published port there directly, only through the gateway (issue 30).

A node walls its own jobs' ports itself, at launch (``node/netwall.py``); what it cannot know is
what the others serve. After each change of who runs where (and every ``refresh_s`` regardless, so
a node agent that came back empty is told again), each node that is up gets the set of the others'
served ports, when it differs from what it was last given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from gpupool.domain.nodes import Node, NodeState
from gpupool.executors.base import Executor
from gpupool.store import services as service_repo
from gpupool.store.db import Database

log = logging.getLogger("gpupool.controller")

Endpoint = tuple[str, int, int]  # address, port, the job that serves it


class PortWalls:
    def __init__(self, db: Database, executor: Executor, every_s: float = 1.0, refresh_s: float = 30.0) -> None:
        self._db = db
        self._executor = executor
        self._every_s = every_s
        self._refresh_s = refresh_s
        self._given: dict[str, tuple[Endpoint, ...]] = {}  # what each node was given last
        self._last = float("-inf")
        self._last_full = float("-inf")
        self._stale = True

    def changed(self) -> None:
        """Workers started or ended: push at the next round, not a second later."""
        self._stale = True

    def push(self, nodes: Sequence[Node]) -> int:
        """Give each node that is not down the others' served ports where they changed; how many were given."""
        now = time.monotonic()
        if not self._stale and now - self._last < self._every_s:
            return 0
        self._stale, self._last = False, now
        if now - self._last_full >= self._refresh_s:
            self._given.clear()
            self._last_full = now
        with self._db.read() as s:
            served = service_repo.served_ports(s)
        given = 0
        for node in nodes:
            if node.state == NodeState.DOWN:
                self._given.pop(node.name, None)  # one that comes back is given the whole set
                continue
            others = tuple(sorted((address, port, job) for name, address, port, job in served if name != node.name))
            if self._given.get(node.name) == others:
                continue
            try:
                self._executor.protect(node.name, others)
            except Exception as exc:  # an unreachable node is told at the next round
                log.warning("could not give node %s the ports served elsewhere: %s", node.name, exc)
                continue
            self._given[node.name] = others
            given += 1
        return given
