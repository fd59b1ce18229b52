"""The controller's idle step, after each round of GPU readings: track idle spells of held GPUs,
then apply projects' idle timeouts (warn, then preempt idle interactive jobs while others wait:
the preemption is the applier's to carry out, as every stop is).

Load → process → apply: the readings are already in hand, and the
decisions are ``domain.idle``'s pure functions.
"""

from __future__ import annotations

from gpupool.clock import Clock
from gpupool.controller.applier import Applier
from gpupool.controller.telemetry import Round
from gpupool.domain.idle import IdlePreemption, IdleSettings, IdleWarning, idle_policy, update_spells
from gpupool.domain.jobs import StopReason
from gpupool.store import idle as idle_repo
from gpupool.store.db import Database
from gpupool.store.transitions import add_event


class IdleWatch:
    def __init__(self, db: Database, clock: Clock, settings: IdleSettings, applier: Applier) -> None:
        self._db = db
        self._applier = applier
        self._clock = clock
        self._settings = settings

    def observe(self, readings: Round) -> list[IdleWarning | IdlePreemption]:
        """Update spells from a round of readings and act on idle timeouts; what was done."""
        now = self._clock.now()
        with self._db.tx() as s:
            before = idle_repo.load_spells(s)
            spells = update_spells(before, readings.samples, readings.holders, self._settings.threshold_pct)
            idle_repo.save_spells(s, before, spells)
            candidates = idle_repo.candidates(s)
            if not candidates:
                return []
            warned = idle_repo.warned_since(s, [c.job_id for c in candidates])
            actions = idle_policy(candidates, spells, warned, idle_repo.waiting(s), now, self._settings.threshold_pct)
            done: list[IdleWarning | IdlePreemption] = []
            for action in actions:
                if isinstance(action, IdleWarning):
                    add_event(s, now, kind=idle_repo.IDLE_WARNING, job_id=action.job_id, message=action.message)
                    done.append(action)
        for action in actions:  # the applier carries out stops, each in a guarded write of its own
            if isinstance(action, IdlePreemption) and self._applier.preempt(
                action.job_id, action.message, StopReason.IDLE, action.not_before
            ):
                done.append(action)
        return done
