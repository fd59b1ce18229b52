"""``schedule``: the one function the head, the simulator and the start estimate call."""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain.decisions import CycleResult, Reason, ReasonCode
from gpupool.domain.errors import InvalidInput
from gpupool.domain.snapshot import Snapshot
from gpupool.scheduler import aging, registry
from gpupool.scheduler.actions import allocate, backfill, displace, grow, preempt, reclaim, shrink
from gpupool.scheduler.config import SchedulerConfig
from gpupool.scheduler.demand import WorkerDemand
from gpupool.scheduler.explain import Known, explain, explain_partition
from gpupool.scheduler.incremental import CycleMemory
from gpupool.scheduler.plugins.users import behind_lighter_users
from gpupool.scheduler.session import Session

ACTIONS: dict[str, Callable[[Session], None]] = {
    "allocate": allocate.run,
    "backfill": backfill.run,
    "shrink": shrink.run,
    "reclaim": reclaim.run,
    "preempt": preempt.run,
    "displace": displace.run,
    "grow": grow.run,
}
# Reasons a job may wait for while other users' later jobs of its project go first; the rest say
# it could never start, or that GPUs are on their way to it.
BEHIND_USERS = frozenset(
    {
        ReasonCode.RESOURCES,
        ReasonCode.FRAGMENTED,
        ReasonCode.GANG,
        ReasonCode.CPUS,
        ReasonCode.MEMORY,
        ReasonCode.PRIORITY,
        ReasonCode.BACKFILL,
        ReasonCode.LIMIT,
        ReasonCode.QUOTA,
    }
)


def schedule(
    snapshot: Snapshot,
    config: SchedulerConfig | None = None,
    *,
    memory: CycleMemory | None = None,
    explain_pending: bool = True,
) -> CycleResult:
    """Decide starts and preemptions for ``snapshot``; pure but for ``memory``, which makes the
    next call cheaper (see ``incremental``) and keeps the mix a learning placement measured
    against (``frag.for_pool``) until the pool drifts from it. ``explain_pending=False`` skips the reasons,
    which the simulator does not show."""
    config = config or SchedulerConfig()
    session = open_session(snapshot, config, memory)
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
        memory.started(session.starts, session.started_jobs)
        if session.grows:
            memory.grew(session.grows)
    return CycleResult(
        starts=tuple(session.starts),
        pending=reasons,
        preemptions=tuple(session.preemptions),
        wake_at=session.wake_at,
        started=dict(session.started_jobs),
        grows=tuple(session.grows),
        shrinks=tuple(session.shrinks),
    )


def open_session(snapshot: Snapshot, config: SchedulerConfig, memory: CycleMemory | None = None) -> Session:
    """A session with the hooks ``config`` names (the registry is above the session)."""
    return Session.open(snapshot, config, registry.hooks(config), memory)


def _explain(session: Session) -> dict[int, Reason]:
    # Jobs of the same shape get the same reason against the same free resources: explain each
    # shape once, so a queue of thousands of similar jobs costs a handful of explanations.
    by_shape: dict[tuple[WorkerDemand, int, str | None], Reason] = {}
    known: Known = {}  # node lists shared by shapes that ask for the same GPUs
    reasons: dict[int, Reason] = {}
    given, demands = session.reasons, session.memory.demands  # (a pass over every waiting job)
    for job in session.queue:
        reason, note = given.get(job.id), ""  # a policy reason (quota, limit) given by an action
        if reason is None:
            demand = demands.get(job.id) or session.demand(job)
            if session.per_model is not None:  # placed only on models its per-model limits leave
                demand, note = session.per_model.narrowed(
                    job.spec.project, demand, job.spec.total_gpus, session.cluster
                )
            members = session.nodes_of(job.spec.project)
            shape = (demand, job.spec.workers, None if members is None else job.spec.project)
            reason = by_shape.get(shape)
            if reason is None and members is not None:  # confined to its project's nodes
                owned = session.partition_gpus.get(job.spec.project, 0)
                reason = by_shape[shape] = explain_partition(job, session.cluster, demand, members, owned)
            elif reason is None:
                reason = by_shape[shape] = explain(job, session.cluster, demand, known)
        reasons[job.id] = Reason(reason.code, reason.message + note) if note else reason
    hooks = session.hooks
    notes = behind_lighter_users(session, session.queue, hooks.user_order, hooks.job_order)
    max_wait_s, now = session.config.max_wait_s, session.snapshot.now
    aged = aging.overdue(session.queue, now, max_wait_s)[0] if max_wait_s > 0 else []
    first = {job.id for job in aged}  # they go before later jobs of lighter users too
    for job_id, note in notes.items():
        reason = reasons[job_id]
        if reason.code in BEHIND_USERS and job_id not in first:
            reasons[job_id] = Reason(reason.code, reason.message + note)
    for job in aged:
        reason = reasons[job.id]
        reasons[job.id] = Reason(reason.code, reason.message + aging.note(aging.waited_s(job, now), max_wait_s))
    return reasons
