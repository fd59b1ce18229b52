"""Allocate: queues in the policy's queue order (by default a queue per project, the one furthest
below its fair share first); within a queue, the job order (priority class, then submit time),
with the policy's user order deciding between users within a class (by default the user who used
least lately goes first: ``user_queue``). A job starts when its whole gang fits now and the
policy's quota check lets it.

A job that cannot start asks the policy's hold-up hook what it holds up behind it: nothing
(greedy), every queue (fifo), its own queue (fifo per project), or a reservation (default), after
which every job left is the backfill action's to start, if it cannot delay the reserved one. A
job that could not fit even an empty cluster (or its project's quota) holds up nothing."""

from __future__ import annotations

import heapq

from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler import policies, registry
from gpupool.scheduler.session import Session
from gpupool.scheduler.user_queue import UserQueue


def run(session: Session) -> None:
    hooks = policies.hooks(session.config)
    key, rank = hooks.queue_order.key, hooks.queue_order.rank
    job_order = registry.job_order(session.config.job_order)
    queues: dict[str, UserQueue] = {}
    for job in session.queue:
        queue = queues.get(key(job))
        if queue is None:
            queue = queues[key(job)] = UserQueue(session, hooks.user_order, job_order)
        queue.append(job)
    heap = [(rank(session, name), name) for name in queues]
    heapq.heapify(heap)
    waiting: list[PendingJob] = []
    blocked: set[str] = set()  # queues held up behind a job that cannot start now
    while heap:
        _, name = heapq.heappop(heap)
        job = queues[name].popleft()
        refusal = hooks.quota_check(session, job)
        if refusal is not None:
            session.reasons[job.id] = refusal
            waiting.append(job)
            blocked.update(hooks.hold_up(session, job, name, queues, refusal))
        elif name in blocked or session.reservation is not None:
            waiting.append(job)  # behind a job that cannot start, or behind the reservation: backfill decides
        else:
            placements = session.try_place_gang(job)
            if placements is not None:
                session.record_start(job, placements)
            else:
                waiting.append(job)
                blocked.update(hooks.hold_up(session, job, name, queues, None))
        if queues[name] and name not in blocked:
            heapq.heappush(heap, (rank(session, name), name))
        elif queues[name]:
            waiting.extend(queues.pop(name).drain())  # the rest of a blocked queue waits, in order
    session.queue = waiting
