"""``schedule``: the one function the head, the simulator and the start estimate call."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain.decisions import CycleResult, Reason
from gpupool.domain.errors import InvalidInput
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler.actions import allocate, backfill, preempt, reclaim
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.explain import explain
from gpupool.scheduler.incremental import CycleMemory
from gpupool.scheduler.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {
    "allocate": allocate.run,
    "backfill": backfill.run,
    "reclaim": reclaim.run,
    "preempt": preempt.run,
}


def schedule(
    snapshot: Snapshot,
    config: SchedulerConfig | None = None,
    *,
    memory: CycleMemory | None = None,
    explain_pending: bool = True,
) -> CycleResult:
    """Decide starts and preemptions for ``snapshot``; pure but for ``memory``, which only makes
    the next call cheaper (see ``incremental``). ``explain_pending=False`` skips the reasons,
    which the simulator does not show."""
    config = config or SchedulerConfig()
    session = Session.open(snapshot, config, memory)
    try:
        for name in config.actions:
            action = ACTIONS.get(name)
            if action is None:
                raise InvalidInput(f"unknown scheduler action {name!r}: use one of {', '.join(ACTIONS)}")
            action(session)
        session.release_reserved()  # explain against what is really free
        reasons = _explain(session) if explain_pending else {}
    except BaseException:
        if memory is not None:
            memory.forget()
        raise
    if memory is not None:
        memory.started(session.starts, session.start_specs)
    return CycleResult(starts=tuple(session.starts), pending=reasons, preemptions=tuple(session.preemptions))


def _explain(session: Session) -> dict[int, Reason]:
    # Jobs of the same shape get the same reason against the same free resources: explain each
    # shape once, so a queue of thousands of similar jobs costs a handful of explanations.
    by_shape: dict[tuple[WorkerDemand, int], Reason] = {}
    reasons: dict[int, Reason] = {}
    for job in session.queue:
        if job.id in session.reasons:  # a policy reason (quota, limit) given by an action
            reasons[job.id] = session.reasons[job.id]
            continue
        demand = session.demand(job)
        shape = (demand, job.spec.workers)
        reason = by_shape.get(shape)
        if reason is None:
            reason = by_shape[shape] = explain(job, session.cluster, demand)
        reasons[job.id] = reason
    return reasons
