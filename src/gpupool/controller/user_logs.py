"""Keep each user's logs under ``--max-user-logs``: the head asks every node for the size of each
job's logs, adds them up per owner, and has the nodes empty the oldest finished jobs' logs of an
owner over the cap (``domain/user_logs.py`` chooses), each said in its job's events.

Run after exits (a finished job's log stops growing; at most every ``soon_s``) and every
``every_s`` regardless. A node that does not answer is counted at the next round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from gpupool.clock import Clock
from gpupool.domain.nodes import Node, NodeState
from gpupool.domain.resources import format_bytes
from gpupool.domain.user_logs import JobLogs, to_empty
from gpupool.executors.base import Executor
from gpupool.store import prune
from gpupool.store.db import Database
from gpupool.store.transitions import add_event

log = logging.getLogger("gpupool.controller")


class UserLogs:
    def __init__(
        self, db: Database, executor: Executor, clock: Clock, cap: int, every_s: float = 60.0, soon_s: float = 15.0
    ) -> None:
        self._db, self._executor, self._clock = db, executor, clock
        self.cap = cap  # bytes; 0: no cap
        self._every_s, self._soon_s = every_s, soon_s
        self._last = float("-inf")
        self._soon = False

    def changed(self) -> None:
        """Jobs ended: their logs are final, count them soon."""
        self._soon = True

    def check(self, nodes: Sequence[Node]) -> int:
        """Empty what puts an owner over the cap, when due; how many jobs' logs were emptied."""
        since = time.monotonic() - self._last
        if self.cap <= 0 or not (since >= self._every_s or (self._soon and since >= self._soon_s)):
            return 0
        self._last, self._soon = time.monotonic(), False
        sizes: dict[int, int] = {}
        where: dict[int, list[str]] = {}
        for node in nodes:
            if node.state == NodeState.DOWN:
                continue
            try:
                found = self._executor.log_sizes(node.name)
            except Exception as exc:
                log.warning("node %s did not say how much its jobs' logs hold: %s", node.name, exc)
                continue
            for job_id, size in found.items():
                sizes[job_id] = sizes.get(job_id, 0) + size
                where.setdefault(job_id, []).append(node.name)
        with self._db.read() as s:
            owners = prune.log_owners(s, sorted(sizes))
        jobs = [JobLogs(j, owner, sizes[j], finished) for j, (owner, finished) in owners.items()]
        chosen = to_empty(jobs, self.cap)
        by_node: dict[tuple[str, str], list[int]] = {}  # (node, owner) -> jobs: one call, one note each
        for job in chosen:
            for name in where[job.job_id]:
                by_node.setdefault((name, job.owner), []).append(job.job_id)
        emptied: set[int] = set()
        for (name, owner), job_ids in by_node.items():
            note = (
                f"gpupool: this log was emptied: {owner}'s logs passed --max-user-logs ({format_bytes(self.cap)}),"
                " and the oldest finished jobs' logs go first"
            )
            try:
                self._executor.empty_logs(name, job_ids, note)
                emptied.update(job_ids)
            except Exception as exc:
                log.warning("node %s could not empty the logs of jobs %s: %s", name, job_ids, exc)
        said = [job for job in chosen if job.job_id in emptied]
        if said:
            with self._db.tx() as s:
                for job in said:
                    add_event(
                        s,
                        self._clock.now(),
                        kind="logs_emptied",
                        job_id=job.job_id,
                        message=f"its logs ({format_bytes(job.size)}) were emptied: {job.owner}'s logs passed "
                        f"--max-user-logs ({format_bytes(self.cap)}); the oldest finished jobs' logs go first",
                    )
        return len(said)
