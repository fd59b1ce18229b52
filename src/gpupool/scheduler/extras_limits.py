"""Which limits a waiting job is refused by that elastic jobs' extra workers fill (issue 35).

A limit caps what a project (or a unit's projects together) holds, extra workers above elastic
jobs' minimums included (``Extras.held``). Those extras are opportunistic: a waiting job of equal or
higher priority that only a full limit holds back takes them, inside the levels at their limit
(its own project's, or any project's under a unit at its limit), and ``actions/shrink`` stops
them for it. A limit that extras inside it could not bring back in reach is no scope: the job
waits with its limit reason, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.decisions import ReasonCode
from gpupool.domain.snapshot import PendingJob, RunningJob
from gpupool.scheduler.extras import Extras
from gpupool.scheduler.session import Session

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Scope:
    over: tuple[str, ...]  # the levels ``need`` more GPUs would take beyond their limit, nearest first
    projects: frozenset[str]  # the projects whose extra workers count against them
    within: str  # how a shrink names the limit: "its limit" (the project's), "unit u's limit"


def scope(session: Session, extras: Extras, job: PendingJob) -> Scope | None:
    """The levels at their limit that alone hold ``job`` back, where extra workers of its standing
    or below inside them could make room; None: no such levels (refused by something else)."""
    reason = session.reasons.get(job.id)
    if reason is None or reason.code is not ReasonCode.LIMIT or job.id in session.shrunk_for:
        return None
    name, need = job.spec.project, job.spec.total_gpus
    held = extras.with_held(session.allocated)
    over: dict[str, float] = {}
    limit = session.project(name).limit
    if limit is not None and (excess := held.get(name, 0.0) + need - limit) > EPS:
        over[name] = excess
    levels = session.levels
    if levels is not None:
        over.update(levels.excess(name, need, held))
    if not over:
        return None
    projects: set[str] = set()
    for level in over:
        inside = {level} if level == name else {p for p in held if levels is not None and level in levels.units_of(p)}
        takeable = sum(_takeable(extras, job, r) for r in extras.jobs.values() if r.spec.project in inside)
        takeable += sum(extras.apart.get(p, 0.0) for p in inside)
        if takeable + EPS < over[level]:
            return None
        projects |= inside
    nearest = next(iter(over))
    within = "its limit" if nearest == name else f"unit {nearest}'s limit"
    return Scope(tuple(over), frozenset(projects), within)


def inside(found: Scope, job: PendingJob, running: RunningJob) -> bool:
    """Whether ``running``'s extra workers count against ``found``'s limits and give way to ``job``."""
    return running.spec.project in found.projects and running.spec.priority.rank <= job.spec.priority.rank


def _takeable(extras: Extras, job: PendingJob, running: RunningJob) -> float:
    if running.spec.priority.rank > job.spec.priority.rank:
        return 0.0
    return len(extras.extra_workers(running)) * running.spec.gpus
