"""Group commit of submissions: the requests that arrive together share one transaction. It is the
one way a job is submitted: ``POST /jobs``, ``POST /jobs:batch``, ``POST /arrays`` and the
use cases' ``jobs.submit`` all come here, to the same checks (usecases/submission.py) and the
same idempotency keys.

A submission is acknowledged only once it is committed (DESIGN §6), and one transaction per
request made the writer lock, the ORM's per-object work and the commit itself the ceiling: ~8 ms a
submission, whatever the number of clients. Here the first request thread to find no commit
under way leads: it takes every submission queued by then (its own included), checks each,
writes them with a few multi-row statements in one transaction,
commits, and hands each waiting thread its own answer. Threads that arrive meanwhile queue for the
next leader, so the batch grows with the load and a lone request is committed at once. The API
awaits ``submit_async`` instead: its requests queue on the event loop and a committer thread leads.

Each submission keeps its own outcome: one refused (not a member, unsatisfiable, a reused
idempotency key) is answered with its error and the others go on; a batch is one submission, all
or none. Should the shared transaction itself fail, each submission is tried again alone, so one
cannot take the others down with it; one alone whose key a concurrent request took first is tried
once more, to answer with what that request made.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.audit import AuditEntry
from gpupool.domain.errors import GpupoolError
from gpupool.domain.jobs import JobSpec
from gpupool.domain.records import ArraySummary, JobRecord
from gpupool.store import audit as audit_repo
from gpupool.store import bulk, idempotency
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal
from gpupool.usecases.context import HeadContext
from gpupool.usecases.submission import Array, Batch, Checks, Job, Made, NodeCache, Request

# The audit entry of a submission that made (or replayed) its job (an array: its first task), written
# in the job's transaction.
Noted = Callable[[JobRecord], AuditEntry | None]
MAX_GROUP = 500  # submissions in one transaction at most
IDLE_COMMITTER_S = 5.0  # the committer thread ends after this long without a submission


@dataclass(eq=False, slots=True)
class _Submission:
    what: Request
    who: Principal
    key: str | None
    fingerprint: str = ""
    done: bool = False
    made: Made | None = None
    made_id: int = 0  # the job id its key is remembered with: the job's, or the array's first task's
    replayed: bool = False
    error: BaseException | None = None
    run_as: str | None = None
    same_as: _Submission | None = field(default=None, repr=False)  # an earlier one with its key
    answer: asyncio.Future[tuple[Made, bool]] | None = field(default=None, repr=False)  # _submit_async's
    audit: Noted | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.key is not None:
            self.fingerprint = idempotency.fingerprint(self.what.request())

    def outcome(self) -> tuple[Made, bool]:
        if self.error is not None:
            raise self.error
        assert self.made is not None
        return self.made, self.replayed


class GroupCommit:
    def __init__(self, ctx: HeadContext, max_group: int = MAX_GROUP) -> None:
        self._ctx = ctx
        self._max = max_group
        self._cond = threading.Condition()
        self._queue: list[_Submission] = []
        self._leading = False
        self._committer: threading.Thread | None = None  # commits submit_async's groups
        self._committer_waits = False  # it waits for a submission (under _cond): notify it
        self._nodes = NodeCache()
        # Per user, at most how many arrays they have in flight (Checks): an array is let through
        # without counting them, 0.5-3 ms with thousands of tasks waiting, until the bound is full.
        self._array_bounds: dict[str, int] = {}
        self.groups = 0  # transactions committed, for tests and benchmarks
        self.submissions = 0

    def submit(self, spec: JobSpec, who: Principal, key: str | None = None) -> tuple[JobRecord, bool]:
        """The job, and whether it is a replay of the key's first request (True: made then, not now)."""
        job, replayed = self._submit(_Submission(Job(spec), who, key))
        assert isinstance(job, JobRecord)
        return job, replayed

    def submit_batch(self, specs: Sequence[JobSpec], who: Principal) -> list[JobRecord]:
        """Up to ``MAX_BATCH`` jobs, all or none; the first refused refuses the batch, saying which."""
        jobs, _ = self._submit(_Submission(Batch(tuple(specs)), who, None))
        assert isinstance(jobs, list)
        return jobs

    def submit_array(
        self, spec: JobSpec, array: ArraySpec, who: Principal, key: str | None = None
    ) -> tuple[ArraySummary, bool]:
        """One task per index, accepted as one record (``bulk.insert_array``); with ``key``, as a job's."""
        made, replayed = self._submit(_Submission(Array(spec, array), who, key))
        assert isinstance(made, ArraySummary)
        return made, replayed

    def _submit(self, mine: _Submission) -> tuple[Made, bool]:
        """Queue ``mine`` and wait for its group's commit, leading the group if nobody does."""
        with self._cond:
            self._queue.append(mine)
            while self._leading and not mine.done:
                self._cond.wait()
            if mine.done:
                return mine.outcome()
            self._leading = True
            group = self._queue[: self._max]
            if mine not in group:
                group.append(mine)
            taken = {id(one) for one in group}
            self._queue = [one for one in self._queue if id(one) not in taken]
        try:
            self._commit(group)
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()
        self._ctx.wake_controller()
        return mine.outcome()

    async def submit_async(
        self, spec: JobSpec, who: Principal, key: str | None = None, audit: Noted | None = None
    ) -> tuple[JobRecord, bool]:
        """``submit`` for a request on the event loop: it waits for its group's commit without
        holding a thread. A committer thread takes whatever is queued when it is free, commits it and
        answers the whole group with one call into each waiting loop; the requests of a burst then
        queue on the loop, not as threads taking turns at the interpreter lock. Measured: 8 clients
        into a full cluster went from ~300 to ~500 submissions/s.

        ``audit``: the request's audit entry, given the job it made or replayed; it is written in
        the same transaction as the job, so the job and its entry are committed together or not at
        all, with one commit (and one fsync) for both instead of one each."""
        job, replayed = await self._submit_async(Job(spec), who, key, audit)
        assert isinstance(job, JobRecord)
        return job, replayed

    async def submit_array_async(
        self, spec: JobSpec, array: ArraySpec, who: Principal, key: str | None = None, audit: Noted | None = None
    ) -> tuple[ArraySummary, bool]:
        """``submit_array`` for a request on the event loop, as ``submit_async``; ``audit`` is given
        the array's first task (its id is the array's)."""
        made, replayed = await self._submit_async(Array(spec, array), who, key, audit)
        assert isinstance(made, ArraySummary)
        return made, replayed

    async def _submit_async(
        self, what: Request, who: Principal, key: str | None, audit: Noted | None
    ) -> tuple[Made, bool]:
        loop = asyncio.get_running_loop()
        mine = _Submission(what, who, key, answer=loop.create_future(), audit=audit)
        with self._cond:
            self._queue.append(mine)
            if self._committer is None:
                self._committer = threading.Thread(target=self._commit_queued, name="gpupool-submits", daemon=True)
                self._committer.start()
            elif self._committer_waits:  # a busy committer looks at the queue again when it is done
                self._cond.notify_all()  # (a notify costs the loop a tenth of a request in a burst)
        assert mine.answer is not None
        return await mine.answer

    def _commit_queued(self) -> None:
        """The committer thread: leads a group whenever one is queued and nobody else leads; leaves
        after a quiet while (the next ``submit_async`` starts another)."""
        while True:
            with self._cond:
                while not self._queue or self._leading:
                    self._committer_waits = True
                    woken = self._cond.wait(IDLE_COMMITTER_S)
                    self._committer_waits = False
                    if not woken and not self._queue:
                        self._committer = None
                        return
                self._leading = True
                group, self._queue = self._queue[: self._max], self._queue[self._max :]
            try:
                self._commit(group)
            finally:
                with self._cond:
                    self._leading = False
                    self._cond.notify_all()
            if any(one.answer is None for one in group):  # a thread's: no loop wakes the controller for it
                self._ctx.wake_controller()

    def _commit(self, group: list[_Submission]) -> None:
        self._commit_group(group)
        _answer_async(group, self._ctx.wake_controller)

    def _commit_group(self, group: list[_Submission], tries: int = 2) -> None:
        try:
            with self._ctx.db.tx() as s:
                in_flight = self._write(s, group, self._ctx.clock.now())
            self._array_bounds.update(in_flight)  # committed: carried to the next group
        except Exception as exc:  # the shared transaction failed: each alone, so one cannot sink the rest
            if len(group) > 1:
                for one in group:
                    one.error = one.made = one.same_as = None
                    self._commit_group([one])
            elif isinstance(exc, idempotency.KeyTaken) and tries > 1:
                self._commit_group(group, tries - 1)  # the key's look-up now finds what the other made
            else:
                group[0].error, group[0].made = exc, None
        for one in group:
            one.done = True
        self.groups += 1
        self.submissions += len(group)

    def _write(self, s: Tx, group: list[_Submission], now: datetime) -> dict[str, int]:
        """Check and write the group; at most how many arrays each user checked has in flight."""
        known = idempotency.find_many(s, [(one.who.user, one.key) for one in group if one.key is not None], now)
        checks = Checks(s, self._ctx, self._nodes, self._array_bounds)
        first_with: dict[tuple[str, str], _Submission] = {}
        new: list[_Submission] = []
        for one in group:
            one.error = None
            mark = (one.who.user, one.key or "")
            if one.key is not None and mark in first_with:
                one.same_as = first_with[mark]  # answered below, from the first one's outcome
                continue
            try:
                if one.key is not None and mark in known:
                    one.made, one.replayed = _replay(s, one, *known[mark]), True
                    continue
                one.run_as = checks.run(one.what, one.who)
            except GpupoolError as exc:
                one.error = exc
                continue
            if one.key is not None:
                first_with[mark] = one
            new.append(one)
        _insert(s, new, now)
        idempotency.remember_many(s, _keyed(new), now)
        for one in group:
            if one.same_as is not None:
                _answer_repeat(one, one.same_as)
        audit_repo.add(s, _audit_entries(group))
        return checks.arrays


def _audit_entries(group: list[_Submission]) -> list[AuditEntry]:
    """The audit entries of the group's submissions that made or replayed a job (or an array: its
    first task), in group order (the order their answers go out in)."""
    entries = []
    for one in group:
        made = one.made.first if isinstance(one.made, ArraySummary) else one.made
        if one.audit is not None and one.error is None and isinstance(made, JobRecord):
            entry = one.audit(made)
            if entry is not None:
                entries.append(entry)
    return entries


def _answer_async(group: list[_Submission], wake: Callable[[], None]) -> None:
    """Hand each ``submit_async`` its outcome on its own event loop: one call per loop, which then
    wakes the controller (``wake``) once the answers are out."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Submission]] = {}
    for one in group:
        if one.answer is not None:
            by_loop.setdefault(one.answer.get_loop(), []).append(one)
    for loop, waiting in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, waiting, wake)
        except RuntimeError:  # a closed loop: nobody waits for these answers any more; their jobs stand
            wake()


def _settle(waiting: list[_Submission], wake: Callable[[], None]) -> None:
    """The answers, then the controller's wake-up, queued on the loop behind the requests they
    resume: those send their answers first. Woken at the commit, the controller's cycle (an
    array's tasks to write: ~80 ms for 1,000) took the interpreter lock while the answers waited
    for it, up to its 5 ms switch interval."""
    for one in waiting:
        assert one.answer is not None
        if one.answer.done():  # the request was cancelled (its client left); its job stands
            continue
        if one.error is not None:
            one.answer.set_exception(one.error)
        else:
            assert one.made is not None
            one.answer.set_result((one.made, one.replayed))
    asyncio.get_running_loop().call_soon(wake)  # behind the wake-ups of the requests resolved above


def _insert(s: Tx, new: list[_Submission], now: datetime) -> None:
    """The jobs of every job and batch in a few multi-row statements, then each array's tasks."""
    rows = [(spec, one.who.user, one.run_as) for one in new for spec in _plain_jobs(one.what)]
    jobs = iter(bulk.insert_jobs(s, rows, now))
    for one in new:
        if isinstance(one.what, Job):
            one.made = next(jobs)
            one.made_id = one.made.id
        elif isinstance(one.what, Batch):
            one.made = [next(jobs) for _ in one.what.specs]
    for one in new:
        if isinstance(one.what, Array):
            first = bulk.insert_array(s, one.what.spec, one.what.array, one.who.user, now, one.run_as)
            n, cap = len(one.what.array.indices), one.what.array.max_running
            one.made = ArraySummary(first=first, tasks=n, by_state={"pending": n}, max_running=cap)
            one.made_id = first.id


def _plain_jobs(what: Request) -> tuple[JobSpec, ...]:
    """The jobs a request makes that are not an array's tasks (those are written apart)."""
    if isinstance(what, Batch):
        return what.specs
    return (what.spec,) if isinstance(what, Job) else ()


def _keyed(new: list[_Submission]) -> list[tuple[str, str, str, int]]:
    """(owner, key, fingerprint, job id) of each new submission made with a key."""
    return [(one.who.user, one.key, one.fingerprint, one.made_id) for one in new if one.key and one.made_id]


def _answer_repeat(one: _Submission, first: _Submission) -> None:
    """The same key twice in one group: the second is a replay of the first (or a 409)."""
    if first.error is not None:
        one.error = first.error
    elif first.fingerprint != one.fingerprint:
        one.error = idempotency.reused(one.key or "", first.made_id)
    else:
        one.made, one.replayed = first.made, True


def _replay(s: Tx, one: _Submission, job_id: int, fingerprint: str) -> Made:
    if fingerprint != one.fingerprint:
        raise idempotency.reused(one.key or "", job_id)
    return one.what.replay(s, job_id)
