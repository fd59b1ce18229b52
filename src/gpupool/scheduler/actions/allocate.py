"""Allocate: projects furthest below their fair share go first; within a project, the job order
(priority class, then submit time). A job starts when its whole gang fits now and its project's
limit (and, for interactive and inference, its quota) allows it.

With backfill configured, allocation is strict: the first job that does not fit gets a
reservation and everything behind it is left to backfill, which may start only what does not
delay it. Strict without backfill (fifo) simply blocks the queue behind that job; isolated (fifo
per project) blocks only the job's own project, each confined to its quota. A job that could not
fit even an empty cluster (or its project's quota) blocks nothing. Without strictness (the greedy
policy), every job that fits starts."""

from __future__ import annotations

import heapq
from collections import defaultdict, deque

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.reservation import reserve
from gpupool.scheduler.session import Session


def run(session: Session) -> None:
    config = session.config
    queues: dict[str, deque[PendingJob]] = defaultdict(deque)
    for job in session.queue:
        queues[job.spec.project if config.fair_share or config.isolated else ""].append(job)
    heap = [(_rank(session, name), name) for name in queues]
    heapq.heapify(heap)
    waiting: list[PendingJob] = []
    backfill = "backfill" in config.actions
    strict = config.strict or backfill
    blocked: set[str] = set()  # queues a job that does not fit now holds up (strict)
    while heap:
        _, name = heapq.heappop(heap)
        job = queues[name].popleft()
        refusal = _policy_refusal(session, job)
        if refusal is not None:
            session.reasons[job.id] = refusal
            waiting.append(job)
            if config.isolated and config.strict and job.spec.total_gpus <= session.project(name).quota + 1e-9:
                blocked.add(name)  # its partition is full for now: first in line there
        elif name in blocked or (backfill and session.reservation is not None):
            waiting.append(job)  # behind the first job that does not fit: backfill decides, if configured
        else:
            placements = session.try_place_gang(job)
            if placements is not None:
                session.record_start(job, placements)
            else:
                waiting.append(job)
                if backfill and session.reservation is None:
                    session.reservation = reserve(session, job)
                    if session.reservation is not None:
                        session.hold(session.reservation)
                elif strict and session.ever_fits(job):
                    blocked.update([name] if config.isolated else queues)
        if queues[name] and name not in blocked:
            heapq.heappush(heap, (_rank(session, name), name))
        elif queues[name]:
            waiting.extend(queues.pop(name))  # the rest of a blocked queue waits, in order
    session.queue = waiting


def _rank(session: Session, name: str) -> tuple[float, str]:
    """Smaller first: the project furthest below its fair share, as a fraction of it, then by name.
    Its load is the mean of what it holds now and what it held on average lately (the decayed
    usage), so a project that used much recently yields to one that did not."""
    share = session.shares.get(name, 0.0)
    load = 0.5 * session.allocated.get(name, 0.0) + 0.5 * session.snapshot.recent_usage.get(name, 0.0)
    below = (share - load) / share if share > 0 else -1.0 - load
    return (-below, name)


def _policy_refusal(session: Session, job: PendingJob) -> Reason | None:
    project = session.project(job.spec.project)
    held = session.allocated.get(project.name, 0.0)
    need = job.spec.total_gpus
    if session.config.isolated and held + need > project.quota + 1e-9:
        return Reason(
            ReasonCode.QUOTA,
            f"quota: the isolated policy confines project {project.name} to its quota of {project.quota:g} GPUs; "
            f"it holds {held:g} and this job needs {need:g}",
        )
    if project.limit is not None and held + need > project.limit + 1e-9:
        return Reason(
            ReasonCode.LIMIT,
            f"limit: project {project.name} holds {held:g} of its limit "
            f"{project.limit:g} GPUs; this job needs {need:g} more",
        )
    # Interactive and inference must fit inside the quota beside the project's other such jobs;
    # its own train jobs do not count: the preempt action displaces them.
    bound = session.bound.get(project.name, 0.0)
    if job.spec.quota_bound and bound + need > project.quota + 1e-9:
        return Reason(
            ReasonCode.QUOTA,
            f"quota: {job.spec.priority.value} jobs run only inside the quota; project {project.name} holds "
            f"{bound:g} of its quota {project.quota:g} GPUs in interactive and inference jobs",
        )
    return None
