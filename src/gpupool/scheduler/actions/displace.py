"""Displace: under a preemptive job order (``registry.PREEMPTIVE``: attained GPU time, or the
simulator's oracle), a waiting train job may stop running train jobs that rank behind it, e.g.
a job that has received no service yet displaces one that has received hours of it.

Within the quota and borrowing model: a job displaces its own project's jobs, or another
project's only where that project keeps its quota and stays at least as far above its fair share
as the displacing job's project will be (so no project loses its guarantee, and a short job
does not take GPUs from a project poorer than its own). In a tree of projects (issue 34) the
quota holds at every level of the lender's branch, and the fair shares compared are those of the
two branches where the tree splits them. Victims come from the deepest level
first (most service received), in each the first to have got there (``displace_index``); the
waiting job starts in a later cycle, once they are gone.

To bound a cycle's work the first ``TRIES`` waiting jobs that could use a victim are tried; the
rest are tried in later cycles."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler import user_limit
from gpupool.scheduler.displace_index import DisplaceIndex
from gpupool.scheduler.fair_share import rank_holding
from gpupool.scheduler.levels import Levels
from gpupool.scheduler.session import Session
from gpupool.scheduler.victims import already_failed, saying, stop_for, victims_for

TRIES = 64
_PROMISED = (ReasonCode.RECLAIM, ReasonCode.PREEMPTING)


def run(session: Session) -> None:
    hooks = session.hooks.preemptive
    if hooks is None or not session.queue:
        return
    now, config = session.snapshot.now, session.config
    known = session.memory.displace
    index = DisplaceIndex.of(known if isinstance(known, DisplaceIndex) else None, config)
    session.memory.displace = index
    running = index.update(session.snapshot.running, hooks)
    if index.empty:  # e.g. no running job checkpoints: the waiting jobs need not be looked at
        return
    tries = 0
    for job in session.queue:
        if tries >= TRIES:
            break
        if job.spec.quota_bound or session.policy_refused(job.id) or user_limit.held_back(session, job):
            continue
        given = session.reasons.get(job.id)
        if given is not None and given.code in _PROMISED:
            continue
        level = hooks.pending_level(job, now, config)
        if level is None:
            continue
        purpose = f"displace:{level[0]}:{level[1]}"
        if already_failed(session, job, purpose):
            continue
        ids = index.candidates(*level)
        first = next(ids, None)
        if first is None:
            continue
        tries += 1
        candidates = (r for i in chain((first,), ids) if not (r := running[i]).stopping)
        victims = _victims(session, job, candidates, purpose)
        if victims is not None:
            _record(session, job, victims)


def _victims(
    session: Session, job: PendingJob, candidates: Iterable[RunningJob], purpose: str
) -> list[RunningJob] | None:
    return victims_for(session, job, candidates, _fair(session, job), purpose=purpose)


def _fair(session: Session, job: PendingJob) -> Callable[[list[RunningJob], RunningJob], bool]:
    project = job.spec.project
    share = session.shares.get(project, 0.0)
    after = (session.allocated.get(project, 0.0) + job.spec.total_gpus) / share if share > 0 else float("inf")
    # Under the fair-share queue order the job must come before the lender in the next cycle,
    # or the lender's jobs (its victims among them) retake the GPUs before it starts, and it
    # displaces them again: a cycle with no end that the job never wins.
    ranked = session.config.queue_order == "fair_share"
    recent = session.snapshot.recent_usage
    mine = rank_holding(session.shares, recent, project, session.allocated.get(project, 0.0))

    levels = session.levels
    if levels is not None:  # issue 34: every level of the lender's branch keeps its quota
        return _fair_in_tree(session, job, levels, ranked, mine)

    def allowed(chosen: list[RunningJob], victim: RunningJob) -> bool:
        lender = victim.spec.project
        if lender == project:
            return True
        taken = sum(r.spec.total_gpus for r in chosen if r.spec.project == lender) + victim.spec.total_gpus
        left = session.allocated.get(lender, 0.0) - taken
        if left < session.project(lender).quota - 1e-9:
            return False
        if ranked and rank_holding(session.shares, recent, lender, left) < mine:
            return False
        lender_share = session.shares.get(lender, 0.0)
        return lender_share <= 0 or left / lender_share >= after - 1e-9

    return allowed


def _fair_in_tree(
    session: Session, job: PendingJob, levels: Levels, ranked: bool, mine: tuple[float, str]
) -> Callable[[list[RunningJob], RunningJob], bool]:
    """``_fair`` in a tree of projects: no level of the lender's path below the one it shares with
    the job's project goes under its quota, and the two branches just below that level are
    compared by fair share (each level's share is its part of its parent's), so GPUs move between
    siblings only as the level that split them would have them move."""
    project, shares, recent = job.spec.project, session.shares, session.snapshot.recent_usage
    held = levels.held_all(session.allocated)

    def allowed(chosen: list[RunningJob], victim: RunningJob) -> bool:
        lender = victim.spec.project
        if lender == project:
            return True
        own, theirs = levels.apart(project, lender)
        taken: dict[str, float] = {}
        for r in (*chosen, victim):
            for level in (r.spec.project, *levels.units_of(r.spec.project)):
                taken[level] = taken.get(level, 0.0) + r.spec.total_gpus
        for level in theirs:
            if held.get(level, 0.0) - taken.get(level, 0.0) < session.project(level).quota - 1e-9:
                return False
        left = session.allocated.get(lender, 0.0) - taken.get(lender, 0.0)
        if ranked and rank_holding(shares, recent, lender, left) < mine:
            return False
        branch, their_branch = own[-1] if own else project, theirs[-1]
        share, their_share = shares.get(branch, 0.0), shares.get(their_branch, 0.0)
        after = (held.get(branch, 0.0) + job.spec.total_gpus) / share if share > 0 else float("inf")
        their_left = held.get(their_branch, 0.0) - taken.get(their_branch, 0.0)
        return their_share <= 0 or their_left / their_share >= after - 1e-9

    return allowed


def _record(session: Session, job: PendingJob, victims: list[RunningJob]) -> None:
    why = (
        f"preempted: job {job.id} of project {job.spec.project} comes first in the "
        f"{session.config.job_order} order (less GPU time received) and waits for its GPUs"
    )
    stop_for(session, job, victims, saying(why))
    session.reasons[job.id] = Reason(
        ReasonCode.PREEMPTING,
        f"displacing {len(victims)} job(s) that come after it in the {session.config.job_order} order; "
        "starts when their GPUs are free"
        if victims
        else "waiting for jobs being stopped to free their GPUs",
    )
