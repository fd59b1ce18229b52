"""Group commit of submissions: the requests that arrive together share one transaction.

A submission is acknowledged only once it is committed (DESIGN §6), and one transaction per
request made the writer lock, the ORM's per-object work and the commit itself the ceiling: ~8 ms a
submission, whatever the number of clients. Here the first request thread to find no commit
under way leads: it takes every submission queued by then (its own included), checks each as
``jobs.submit_once`` would, writes them with a few multi-row statements in one transaction,
commits, and hands each waiting thread its own answer. Threads that arrive meanwhile queue for the
next leader, so the batch grows with the load and a lone request is committed at once. The API
awaits ``submit_async`` instead: its requests queue on the event loop and a committer thread leads.

Each submission keeps its own outcome: one refused (not a member, unsatisfiable, a reused
idempotency key) is answered with its error and the others go on. Should the shared transaction
itself fail, each submission is tried again alone, so one cannot take the others down with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from math import inf

from gpupool.domain.errors import GpupoolError
from gpupool.domain.jobs import JobSpec
from gpupool.domain.nodes import Node
from gpupool.domain.records import JobRecord
from gpupool.services.access import require_submit
from gpupool.services.context import HeadContext
from gpupool.services.jobs import check_satisfiable
from gpupool.store import bulk, idempotency
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal

MAX_GROUP = 500  # submissions in one transaction at most
IDLE_COMMITTER_S = 5.0  # the committer thread ends after this long without a submission


@dataclass(eq=False, slots=True)
class _Submission:
    spec: JobSpec
    who: Principal
    key: str | None
    fingerprint: str = ""
    done: bool = False
    job: JobRecord | None = None
    replayed: bool = False
    error: BaseException | None = None
    run_as: str | None = None
    same_as: _Submission | None = field(default=None, repr=False)  # an earlier one with its key
    answer: asyncio.Future[tuple[JobRecord, bool]] | None = field(default=None, repr=False)  # submit_async's

    def outcome(self) -> tuple[JobRecord, bool]:
        if self.error is not None:
            raise self.error
        assert self.job is not None
        return self.job, self.replayed


class GroupCommit:
    def __init__(self, ctx: HeadContext, max_group: int = MAX_GROUP) -> None:
        self._ctx = ctx
        self._max = max_group
        self._cond = threading.Condition()
        self._queue: list[_Submission] = []
        self._leading = False
        self._committer: threading.Thread | None = None  # commits submit_async's groups
        self._committer_waits = False  # it waits for a submission (under _cond): notify it
        self._nodes = _NodeCache()
        self.groups = 0  # transactions committed, for tests and benchmarks
        self.submissions = 0

    def submit(self, spec: JobSpec, who: Principal, key: str | None = None) -> tuple[JobRecord, bool]:
        """As ``jobs.submit_once``: the job, and whether it is a replay of the key's first request."""
        mine = _Submission(spec, who, key)
        if key is not None:
            mine.fingerprint = idempotency.fingerprint(spec.to_dict())
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

    async def submit_async(self, spec: JobSpec, who: Principal, key: str | None = None) -> tuple[JobRecord, bool]:
        """``submit`` for a request on the event loop: it waits for its group's commit without
        holding a thread. A committer thread takes whatever is queued when it is free, commits it and
        answers the whole group with one call into each waiting loop; the requests of a burst then
        queue on the loop, not as threads taking turns at the interpreter lock. Measured: 8 clients
        into a full cluster went from ~300 to ~500 submissions/s."""
        mine = _Submission(spec, who, key, answer=asyncio.get_running_loop().create_future())
        if key is not None:
            mine.fingerprint = idempotency.fingerprint(spec.to_dict())
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
            self._ctx.wake_controller()

    def _commit(self, group: list[_Submission]) -> None:
        self._commit_group(group)
        _answer_async(group)

    def _commit_group(self, group: list[_Submission]) -> None:
        try:
            with self._ctx.db.tx() as s:
                self._write(s, group, self._ctx.clock.now())
        except Exception as exc:  # the shared transaction failed: each alone, so one cannot sink the rest
            if len(group) == 1:
                group[0].error, group[0].job = exc, None
            else:
                for one in group:
                    one.error = one.job = one.same_as = None
                    self._commit_group([one])
        for one in group:
            one.done = True
        self.groups += 1
        self.submissions += len(group)

    def _write(self, s: Tx, group: list[_Submission], now: datetime) -> None:
        known = idempotency.find_many(s, [(one.who.user, one.key) for one in group if one.key is not None], now)
        checks = _Checks(s, self._ctx, self._nodes)
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
                    one.job, one.replayed = _replay(s, one, *known[mark]), True
                    continue
                checks.run(one)
            except GpupoolError as exc:
                one.error = exc
                continue
            if one.key is not None:
                first_with[mark] = one
            new.append(one)
        for one, job in zip(new, bulk.insert_jobs(s, [(n.spec, n.who.user, n.run_as) for n in new], now), strict=True):
            one.job = job
        idempotency.remember_many(s, _keyed(new), now)
        for one in group:
            if one.same_as is not None:
                _answer_repeat(one, one.same_as)


class _NodeCache:
    """The nodes a submission is checked against, read again only when ``nodes_stamp`` changes:
    parsing every node and GPU row for each group was a fifth of a lone submission's cost. Even
    the stamp is asked at most every ``STAMP_EVERY_S``: a job accepted against a node that left
    within that second waits as any job whose node leaves after its submission does, and one
    refused by nodes read earlier than that is checked again against fresh ones."""

    STAMP_EVERY_S = 1.0

    def __init__(self) -> None:
        self._stamp: tuple[object, ...] | None = None
        self._nodes: list[Node] = []
        self._asked = -inf

    def __call__(self, s: Tx, fresh: bool = False) -> list[Node]:
        now = time.monotonic()
        if fresh or now - self._asked >= self.STAMP_EVERY_S:
            stamp = node_repo.nodes_stamp(s)
            if stamp != self._stamp:
                self._nodes, self._stamp = node_repo.load_nodes(s), stamp
            self._asked = now
        return self._nodes


class _Checks:
    """What ``jobs.submit_once`` checks, with what the group shares read once."""

    def __init__(self, s: Tx, ctx: HeadContext, nodes: _NodeCache) -> None:
        self._s, self._ctx, self._read_nodes = s, ctx, nodes
        self._nodes: list[Node] | None = None
        self._fresh = False  # whether the nodes were read afresh in this group
        self._allowed: dict[tuple[str, str], GpupoolError | None] = {}

    def run(self, one: _Submission) -> None:
        self._access(one.who, one.spec.project)
        if self._nodes is None:
            self._nodes = self._read_nodes(self._s)
        try:
            check_satisfiable(one.spec, self._nodes)
        except GpupoolError:
            if self._fresh:
                raise
            self._nodes, self._fresh = self._read_nodes(self._s, fresh=True), True  # a refusal: on fresh nodes only
            check_satisfiable(one.spec, self._nodes)
        one.run_as = self._ctx.accounts.run_as(one.who.user, one.who.unix_user)

    def _access(self, who: Principal, project: str) -> None:
        """``require_submit``, once per caller and project in a group; a grant is remembered a
        moment longer where writers take turns (services/grants.py)."""
        access = (who.user, project)
        if access not in self._allowed:
            grants, remembered = self._ctx.grants, self._ctx.db.one_writer
            if remembered and grants.granted(who.user, project, who.is_admin):
                self._allowed[access] = None
            else:
                self._allowed[access] = _refusal(self._s, who, project)
                if remembered and self._allowed[access] is None:
                    grants.grant(who.user, project, who.is_admin)
        if (refused := self._allowed[access]) is not None:
            raise refused


def _answer_async(group: list[_Submission]) -> None:
    """Hand each ``submit_async`` its outcome on its own event loop: one call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Submission]] = {}
    for one in group:
        if one.answer is not None:
            by_loop.setdefault(one.answer.get_loop(), []).append(one)
    for loop, waiting in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for these answers any more
            loop.call_soon_threadsafe(_settle, waiting)


def _settle(waiting: list[_Submission]) -> None:
    for one in waiting:
        assert one.answer is not None
        if one.answer.done():  # the request was cancelled (its client left); its job stands
            continue
        if one.error is not None:
            one.answer.set_exception(one.error)
        else:
            assert one.job is not None
            one.answer.set_result((one.job, one.replayed))


def _keyed(new: list[_Submission]) -> list[tuple[str, str, str, int]]:
    """(owner, key, fingerprint, job id) of each new job submitted with a key."""
    return [(one.who.user, one.key, one.fingerprint, one.job.id) for one in new if one.key and one.job]


def _answer_repeat(one: _Submission, first: _Submission) -> None:
    """The same key twice in one group: the second is a replay of the first (or a 409)."""
    if first.error is not None:
        one.error = first.error
    elif first.fingerprint != one.fingerprint:
        one.error = idempotency.reused(one.key or "", first.job.id if first.job else 0)
    else:
        one.job, one.replayed = first.job, True


def _refusal(s: Tx, who: Principal, project: str) -> GpupoolError | None:
    try:
        require_submit(s, who, project)
    except GpupoolError as exc:
        return exc
    return None


def _replay(s: Tx, one: _Submission, job_id: int, fingerprint: str) -> JobRecord:
    if fingerprint != one.fingerprint:
        raise idempotency.reused(one.key or "", job_id)
    return job_repo.get_job(s, job_id)
