"""Per-user limits inside a project (issue 34 item 4): the most GPUs one user's jobs may hold in a
project at once (``Project.user_limit``, or that user's own figure in ``user_limits``).

What a user holds is what their running jobs there hold (those being stopped too: their GPUs are
not back yet, as for the project's own limit), plus what this cycle started for them and the GPUs
it is freeing for their waiting jobs (reclaim, preempt, displace), so a limit holds within a cycle
as across cycles; a fractional GPU counts by its share. A job over it waits with ``user_limit``, a
policy refusal (``Session.policy_refused``): no job is stopped to make room for it, and it blocks
and reserves nothing, since other users' jobs may use what it cannot.

Without a user limit anywhere, nothing is checked: every decision is as it was."""

from __future__ import annotations

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.session import Session

EPSILON = 1e-9


def any_user_limits(session: Session) -> bool:
    """Whether any project has a user limit (asked once a cycle)."""
    known = session.user_limited
    if known is None:
        known = session.user_limited = any(p.has_user_limits for p in session.projects.values())
    return known


def held_back(session: Session, job: PendingJob) -> bool:
    """For the actions that stop jobs: True, with the job's reason set, where its owner's limit
    holds it now (GPUs already being freed for their other jobs count)."""
    if not any_user_limits(session):
        return False
    reason = refusal(session, job)
    if reason is not None:
        session.reasons[job.id] = reason
    return reason is not None


def refusal(session: Session, job: PendingJob) -> Reason | None:
    """Why ``job`` may not start now for its owner's limit in its project; None: it may."""
    project = session.projects.get(job.spec.project)
    if project is None or not project.has_user_limits:
        return None
    user = job.owner
    limit = project.limit_for(user)
    if limit is None:
        return None
    key = (project.name, user)
    promised = session.user_promised.get(key, 0.0)
    held = session.memory.user_held(*key) + session.user_started.get(key, 0.0) + promised
    if session.extras is not None:  # elastic jobs' workers above their minimums (issue 35)
        held += session.extras.held_by_user(key)
    need = job.spec.total_gpus
    if held + need <= limit + EPSILON:
        return None
    flag = f"--user-limit {user}={limit:g}" if user in dict(project.user_limits) else "--user-limit"
    freeing = " (GPUs being freed for their other jobs included)" if promised else ""
    if need > limit + EPSILON:
        more = f"this job needs {need:g}, more than that: it starts only once the limit is raised"
    else:
        more = f"this job needs {need:g} more"
    return Reason(
        ReasonCode.USER_LIMIT,
        f"user limit: {user or 'its owner'} holds {held:g} of their {limit:g} GPUs in project {project.name}"
        f"{freeing} ({flag}); {more}",
    )
