"""Usage: fold what projects, and each user within a project, hold now into their recent usage;
fair share between projects, and the order of users' jobs within one, read it."""

from __future__ import annotations

import math

from gpupool.controller.steps.parts import PartsStep
from gpupool.store import projects as project_repo
from gpupool.store import user_usage as user_usage_repo


class AccrueUsage(PartsStep):
    name = "usage"

    @property
    def every_s(self) -> float:
        return self._parts.settings.usage_every_s

    def run(self, now: float) -> bool:
        p = self._parts
        if math.isinf(p.settings.usage_every_s):
            return False  # no usage history at all, as in the simulator (the parity tests)
        at, half_life_s = p.clock.now(), p.settings.fair_share_half_life_s
        with p.db.tx() as s:
            holding, _, _ = project_repo.usage(s)
            project_repo.accrue_usage(s, holding, at, half_life_s)
            user_usage_repo.accrue(s, user_usage_repo.held(s), at, half_life_s)
        return False
