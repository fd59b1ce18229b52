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
from gpupool.domain.user_logs import JobLogs, size_text, to_empty
from gpupool.executors.base import Executor
from gpupool.store import prune
from gpupool.store.db import Database
from gpupool.store.transitions import add_event

log = logging.getLogger("gpupool.controller")


class UserLogs:
    def __init__(
        self, db: Database, executor: Executor, clock: Clock, cap: int, every_s: float = 60.0, soon_s: float = 5.0
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
        emptied: list[tuple[JobLogs, int]] = []
        for job in chosen:
            note = (
                f"gpupool: this log was emptied: {job.owner}'s logs passed --max-user-logs ({size_text(self.cap)}),"
                " and the oldest finished jobs' logs go first"
            )
            freed = 0
            for name in where[job.job_id]:
                try:
                    freed += self._executor.empty_logs(name, [job.job_id], note)
                except Exception as exc:
                    log.warning("node %s could not empty the logs of job %s: %s", name, job.job_id, exc)
            if freed:
                emptied.append((job, freed))
        if emptied:
            with self._db.tx() as s:
                for job, freed in emptied:
                    add_event(
                        s,
                        self._clock.now(),
                        kind="logs_emptied",
                        job_id=job.job_id,
                        message=f"its logs ({size_text(freed)}) were emptied: {job.owner}'s logs passed "
                        f"--max-user-logs ({size_text(self.cap)}); the oldest finished jobs' logs go first",
                    )
        return len(emptied)
