"""One queue of the allocate action, as a line per user: which job comes next is decided at each
pop, because starting a user's job raises that user's load and may let another user go first.

The next job is the head of the line that is least by (its priority-class key, its user's load,
the rest of its job-order key): a higher class first, then the user who used least (the policy's
``UserOrder``), then age. A user's own jobs keep the job order. With one line (one user, or the
``none`` user order) it is the job order alone, at the cost of a deque.

The lines' heads sit in a heap. Loads only grow during allocate (it starts jobs, it never stops
any), so an entry can only be stale by being too small: the top is recomputed before it is taken
and pushed back if it grew. A pop costs O(log users), not O(users)."""

from __future__ import annotations

import heapq
from collections import deque

from gpupool.domain.snapshot import PendingJob
from gpupool.scheduler.hooks import JobOrder, UserOrder, one_line
from gpupool.scheduler.session import Session

Entry = tuple[int, float, float, int, str]  # class key, user load, submit time, id, user


class UserQueue:
    __slots__ = ("_heap", "_job_order", "_lines", "_order", "_session", "_size")

    def __init__(self, session: Session, order: UserOrder[Session], job_order: JobOrder) -> None:
        self._session = session
        self._order = order
        self._job_order = job_order
        self._lines: dict[str, deque[PendingJob]] = {}  # each user's jobs, in the job order
        self._heap: list[Entry] | None = None
        self._size = 0

    @classmethod
    def of(cls, session: Session, order: UserOrder[Session], job_order: JobOrder, jobs: list[PendingJob]) -> UserQueue:
        """A queue of ``jobs``, given in the job order: one pass, and none at all with one line
        (a queue is built from the whole queue every cycle)."""
        queue = cls(session, order, job_order)
        if order.user is one_line:
            if jobs:
                queue._lines[""] = deque(jobs)
        else:
            lines = queue._lines
            for job in jobs:
                line = lines.get(order.user(job))
                if line is None:
                    lines[order.user(job)] = deque((job,))
                else:
                    line.append(job)
        queue._size = len(jobs)
        return queue

    def append(self, job: PendingJob) -> None:
        """Jobs are appended in the job order, before the first pop."""
        assert self._heap is None, "a user queue is filled before it is read"
        self._lines.setdefault(self._order.user(job), deque()).append(job)
        self._size += 1

    def __len__(self) -> int:
        return self._size

    def popleft(self) -> PendingJob:
        if self._heap is None and len(self._lines) == 1:
            ((user, line),) = self._lines.items()
            job = line.popleft()
            if not line:
                del self._lines[user]
        else:
            job = self._pop_least()
        self._size -= 1
        return job

    def drain(self) -> list[PendingJob]:
        """The jobs left, in the order they would come out now (for a queue that waits whole)."""
        if self._heap is None and len(self._lines) == 1:  # one line: its order, at once
            ((_, line),) = self._lines.items()
            self._lines.clear()
            self._size = 0
            return list(line)
        return [self.popleft() for _ in range(self._size)]

    def _pop_least(self) -> PendingJob:
        heap = self._heap
        if heap is None:
            heap = self._heap = [self._entry(user) for user in self._lines]
            heapq.heapify(heap)
        while True:
            fresh = self._entry(heap[0][-1])
            if fresh == heap[0]:
                break
            heapq.heapreplace(heap, fresh)  # its user's load grew since: look again
        user = heapq.heappop(heap)[-1]
        line = self._lines[user]
        job = line.popleft()
        if line:
            heapq.heappush(heap, self._entry(user))
        else:
            del self._lines[user]
        return job

    def _entry(self, user: str) -> Entry:
        head = self._lines[user][0]
        rank, submitted, job_id = self._job_order(head)
        return (rank, self._order.load(self._session, head), submitted, job_id, user)
