"""Pruning: the audit log keeps ``audit_kept_s`` (90 days); finished jobs, their events, run
directories and logs are deleted ``keep_finished_s`` after they ended. Both every
``audit_prune_every_s``; finished jobs a batch per round, the next round at once while batches are full."""

from __future__ import annotations

import logging
from datetime import timedelta

from gpupool.controller.steps.parts import Parts, PartsStep
from gpupool.store import audit as audit_repo
from gpupool.store import prune

log = logging.getLogger("gpupool.controller")


class PruneAudit(PartsStep):
    name = "prune-audit"

    @property
    def every_s(self) -> float:
        return self._parts.settings.audit_prune_every_s

    def run(self, now: float) -> bool:
        p = self._parts
        with p.db.tx() as s:
            audit_repo.prune(s, p.clock.now() - timedelta(seconds=p.settings.audit_kept_s))
        return False


class PruneFinished(PartsStep):
    name = "prune-finished"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._more = False  # the last batch was full: the next round runs at once

    @property
    def every_s(self) -> float:
        return 0.0 if self._more else self._parts.settings.audit_prune_every_s

    def run(self, now: float) -> bool:
        p = self._parts
        self._more = False
        at = p.clock.now()
        with p.db.tx() as s:
            by_node = prune.prune_finished(s, at - timedelta(seconds=p.settings.keep_finished_s), at)
        for node, job_ids in sorted(by_node.items()):
            if node:
                try:
                    p.executor.forget(node, job_ids)
                except Exception as exc:  # a node that is away keeps its files; nothing else depends on them
                    log.warning("node %s could not delete the files of %d pruned job(s): %s", node, len(job_ids), exc)
        self._more = sum(len(j) for j in by_node.values()) >= prune.BATCH
        return False
