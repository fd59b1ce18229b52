"""``schedule``: the one function the head, the simulator and the start estimate call."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain.decisions import CycleResult
from gpupool.domain.errors import InvalidInput
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler.actions import allocate
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.explain import explain
from gpupool.scheduler.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {"allocate": allocate.run}


def schedule(snapshot: Snapshot, config: SchedulerConfig | None = None) -> CycleResult:
    config = config or SchedulerConfig()
    session = Session.open(snapshot, config)
    for name in config.actions:
        action = ACTIONS.get(name)
        if action is None:
            raise InvalidInput(f"unknown scheduler action {name!r}: use one of {', '.join(ACTIONS)}")
        action(session)
    reasons = {job.id: explain(job, session.cluster) for job in session.queue}
    return CycleResult(starts=tuple(session.starts), pending=reasons)
