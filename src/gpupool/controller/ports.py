"""Hand every node the ports that jobs on the other nodes serve, so that its jobs cannot call a
replica or a published port there directly, only through the gateway (issue 30).

A node walls its own jobs' ports itself, at launch (``node/netwall.py``); what it cannot know is
what the others serve. After each change of who runs where or of the nodes (and every
``refresh_s`` regardless, so a node agent that came back empty is told again), each node that is
not down gets the set of the others' served ports, when it differs from what it was last given.
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
RETRY_S = 1.0


class PortWalls:
    def __init__(self, db: Database, executor: Executor, refresh_s: float = 30.0) -> None:
        self._db = db
        self._executor = executor
        self._refresh_s = refresh_s
        self._given: dict[str, tuple[Endpoint, ...]] = {}  # what each node was given last
        self._last_full = float("-inf")
        self._stale = True
        self._retry_at: float | None = None  # a node was not told: try again then

    def changed(self) -> None:
        """Workers started or ended, or nodes came or went: push at the next round."""
        self._stale = True

    def push(self, nodes: Sequence[Node]) -> int:
        """Give each node that is not down the others' served ports where they changed; how many were given."""
        now = time.monotonic()
        if now - self._last_full >= self._refresh_s:
            self._given.clear()
            self._last_full, self._stale = now, True
        if self._retry_at is not None and now >= self._retry_at:
            self._stale, self._retry_at = True, None
        if not self._stale:
            return 0
        self._stale = False
        with self._db.read() as s:
            served = sorted(service_repo.served_ports(s), key=lambda e: (e[1], e[2], e[3]))
        given = 0
        for node in nodes:
            if node.state == NodeState.DOWN:
                self._given.pop(node.name, None)  # one that comes back is given the whole set
                continue
            others = tuple((address, port, job) for name, address, port, job in served if name != node.name)
            if self._given.get(node.name) == others:
                continue
            try:
                told = self._executor.protect(node.name, others)
            except Exception as exc:  # an unreachable node is told at the next round
                log.warning("could not give node %s the ports served elsewhere: %s", node.name, exc)
                told = False
            if not told:
                self._retry_at = now + RETRY_S  # a silent node is told once it answers, not at the refresh
                continue
            self._given[node.name] = others
            given += 1
        return given
