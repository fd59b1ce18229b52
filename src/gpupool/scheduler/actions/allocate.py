"""Allocate: queues in the policy's queue order (by default a queue per project, the one furthest
below its fair share first); within a queue, the job order (priority class, then submit time),
with the policy's user order deciding between users within a class (by default the user who used
least lately goes first: ``user_queue``). A job starts when its whole gang fits now and the
policy's quota check lets it, and its owner's limit in the project (``user_limit``), if any.

A job that cannot start asks the policy's blocking hook what it blocks behind it: nothing
(greedy), every queue (fifo), its own queue (fifo per project), or a reservation (default), after
which every job left is the backfill action's to start, if it cannot delay the reserved one. A
job that could not fit even an empty cluster (or its project's quota) blocks nothing.

With ``--max-wait`` (``aging``), the jobs that waited that long form a queue of their own, the
longest waiting first, that comes before every other; each is checked and blocks as in its own
queue, and one that does not fit is reserved for whatever the policy's blocking."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from gpupool.domain.decisions import Reason
from gpupool.domain.jobs import Priority
from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler import aging, user_limit
from gpupool.scheduler.hooks import Hooks, QuotaCheck, UserOrder, one_line, one_queue
from gpupool.scheduler.reservation import reserve
from gpupool.scheduler.session import Session
from gpupool.scheduler.user_queue import UserQueue

AGED = "\x00aged"  # the queue of the jobs past --max-wait: no project is named so
_AS_GIVEN: UserOrder[Session] = UserOrder(one_line, lambda session, job: 0.0)  # the aged queue's order


def run(session: Session) -> None:
    hooks = session.hooks
    rank, key = hooks.queue_order.rank, hooks.queue_order.key
    if session.config.max_wait_s > 0:
        rank, queues = _aged_first(session, hooks, rank)
    else:
        queues = _queues(session, hooks, session.queue)
    memo = _Memo(session, hooks.quota_check, rank)
    heap = [(rank(session, name), name) for name in queues]
    heapq.heapify(heap)
    waiting: list[PendingJob] = []
    blocked: set[str] = set()  # queues held up behind a job that cannot start now
    limited = user_limit.any_user_limits(session)  # else no job is checked for a user limit
    while heap:
        _, name = heapq.heappop(heap)
        queue = queues[name]
        while True:  # the same queue's next job, for as long as it would come off the heap next anyway
            job = queue.popleft()
            own = name if name != AGED else key(job)  # an aged job blocks, and is blocked, as in its queue
            refusal = memo.quota(job)
            mine = _user_limited(session, job, limited, refusal)
            if refusal is not None:
                session.reasons[job.id] = refusal
                waiting.append(job)
                blocked.update(hooks.blocking(session, job, own, queues, refusal))
            elif mine is not None:  # its user's limit: it blocks nobody, other users' jobs may start
                session.reasons[job.id] = mine
                waiting.append(job)
            elif own in blocked or session.reservation is not None:
                waiting.append(job)  # behind a job that cannot start, or behind the reservation: backfill decides
            else:
                _try_start(session, job, name == AGED, own, queues, waiting, blocked)
            if not queue:
                break
            if name in blocked:
                waiting.extend(queues.pop(name).drain())  # the rest of a blocked queue waits, in order
                break
            entry = (memo.rank(name), name)
            if heap and heap[0] < entry:  # (names are unique: never equal)
                heapq.heappush(heap, entry)
                break
            if session.reservation is not None:
                _wait_behind_reservation(session, hooks, memo, name, queues, waiting, blocked, limited)
                break
    session.queue = waiting


def _try_start(
    session: Session,
    job: PendingJob,
    aged: bool,
    own: str,
    queues: dict[str, UserQueue],
    waiting: list[PendingJob],
    blocked: set[str],
) -> None:
    """Start the job where its gang fits and the power budget lets it; else it waits, blocking
    what the policy says (an aged job that does not fit keeps its place: ``_hold_place``)."""
    placements = session.try_place_gang(job)
    power = None if placements is None else session.start(job, placements)
    if placements is None or power is not None:  # no room, or no power (a refusal)
        waiting.append(job)
        blocked.update(session.hooks.blocking(session, job, own, queues, power))
        if aged and placements is None:
            _hold_place(session, job, own, blocked)


def _user_limited(session: Session, job: PendingJob, limited: bool, refusal: Reason | None) -> Reason | None:
    """Its owner's limit in the project, for a job its quota lets through (``limited``: some project has one)."""
    return None if refusal is not None or not limited else user_limit.refusal(session, job)


def _queues(session: Session, hooks: Hooks[Session], queue: list[PendingJob]) -> dict[str, UserQueue]:
    """``queue``'s jobs split by the queue order, each part kept in the job order."""
    key = hooks.queue_order.key
    by_key: dict[str, list[PendingJob]] = {}
    if key is one_queue:
        by_key = {"": queue} if queue else {}
    else:
        for name, job in zip(map(key, queue), queue, strict=True):
            jobs = by_key.get(name)
            if jobs is None:
                by_key[name] = [job]
            else:
                jobs.append(job)
    return {name: UserQueue.of(session, hooks.user_order, hooks.job_order, jobs) for name, jobs in by_key.items()}


def _aged_first(
    session: Session, hooks: Hooks[Session], rank: Callable[[Session, str], tuple[float, str]]
) -> tuple[Callable[[Session, str], tuple[float, str]], dict[str, UserQueue]]:
    """The queues with the jobs past --max-wait taken out into ``AGED``, the longest waiting
    first, and a queue rank that puts it before every other. The cycle wakes when the next job
    would join it."""
    aged, next_at = aging.overdue(session.queue, session.snapshot.now, session.config.max_wait_s)
    if next_at is not None:
        session.wake_at = next_at if session.wake_at is None else min(session.wake_at, next_at)
    ids = {job.id for job in aged}
    queues = _queues(session, hooks, [job for job in session.queue if job.id not in ids])
    if not aged:
        return rank, queues

    def first(session: Session, name: str) -> tuple[float, str]:
        return (-math.inf, name) if name == AGED else rank(session, name)

    return first, {AGED: UserQueue.of(session, _AS_GIVEN, hooks.job_order, aged), **queues}


def _hold_place(session: Session, job: PendingJob, own: str, blocked: set[str]) -> None:
    """An aged job that does not fit keeps its place whatever the policy's blocking: where that
    neither holds up its queue nor reserves (greedy: nobody waits for anybody), it gets the
    reservation the default policy gives, or the stream it waited behind would take every GPU
    that comes free again. (Without a backfill action, every later job then waits for it.)"""
    if session.reservation is None and own not in blocked:
        session.reservation = reserve(session, job)
        if session.reservation is not None:
            session.keep_reserved(session.reservation)


def _wait_behind_reservation(
    session: Session,
    hooks: Hooks[Session],
    memo: _Memo,
    name: str,
    queues: dict[str, UserQueue],
    waiting: list[PendingJob],
    blocked: set[str],
    limited: bool,
) -> None:
    """The rest of a queue that comes first behind the reservation. Nothing starts any more, so
    its rank stays what it is and it stays first until it is empty: each job needs only its
    quota answer, for its reason (and a refusal may still hold up the queue)."""
    for job in queues[name].drain():
        waiting.append(job)
        own = name if name != AGED else hooks.queue_order.key(job)
        if own in blocked:
            continue
        refusal = memo.quota(job)
        if refusal is not None:
            session.reasons[job.id] = refusal
            blocked.update(hooks.blocking(session, job, own, queues, refusal))
        elif limited and (mine := user_limit.refusal(session, job)) is not None:
            session.reasons[job.id] = mine


class _Memo:
    """Quota answers and queue ranks, valid until the next start.

    Both read only what a start changes (GPUs held per project): a quota check depends on the
    job's project, its GPUs and its priority class alone, and a queue's rank on its name. After
    the reservation, or once every queue is blocked, nothing starts, and the thousands of jobs
    left cost a dictionary look-up each instead of a check."""

    __slots__ = ("_check", "_quota", "_rank", "_ranks", "_session", "_starts")

    def __init__(
        self, session: Session, check: QuotaCheck[Session], rank: Callable[[Session, str], tuple[float, str]]
    ) -> None:
        self._session, self._check, self._rank = session, check, rank
        self._starts = -1
        self._quota: dict[tuple[str, float, Priority], Reason | None] = {}
        self._ranks: dict[str, tuple[float, str]] = {}

    def _fresh(self) -> None:
        if self._starts != len(self._session.starts):
            self._starts = len(self._session.starts)
            self._quota.clear()
            self._ranks.clear()

    def quota(self, job: PendingJob) -> Reason | None:
        self._fresh()
        spec = job.spec
        shape = (spec.project, spec.total_gpus, spec.priority)
        if shape in self._quota:
            return self._quota[shape]
        refusal = self._quota[shape] = self._check(self._session, job)
        return refusal

    def rank(self, name: str) -> tuple[float, str]:
        self._fresh()
        known = self._ranks.get(name)
        if known is None:
            known = self._ranks[name] = self._rank(self._session, name)
        return known
