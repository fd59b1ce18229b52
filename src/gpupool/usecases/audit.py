"""Audit use cases: recording entries without slowing requests, reading them (admins), pruning.

``AuditLog`` takes entries from the request path into memory and writes them in batches from a
thread of its own. An entry of a request that changed something is written *before* its answer
leaves (``durable``): the request waits for the next batch, which the writer starts at once, so a
head killed the moment after it answered still has the entry, while requests arriving together
share one transaction. Other entries (failed sign-ins) wait at most ``FLUSH_EVERY_S``.

A batch refused because the database is unavailable (``Unavailable``: down, busy, its disk
full) is kept whole and tried again later. A batch the database refuses otherwise is not tried
again as it is: if every entry refuses alone too, the database is down after all, and the batch is
kept and tried again later; else each entry that refuses alone
is counted as lost (``lost``) and logged, and the rest are written. One bad entry never blinds the
log. ``flush`` writes what is pending now (a reader calls it first, so it sees every request
answered before it); ``close`` stops the thread and flushes, so a clean shutdown loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from typing import NamedTuple

from gpupool.domain.audit import AuditEntry
from gpupool.domain.errors import Forbidden, Unavailable
from gpupool.store import audit as audit_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal
from gpupool.usecases.context import HeadContext
from gpupool.usecases.telemetry import parse_when

log = logging.getLogger("gpupool.audit")

FLUSH_EVERY_S = 0.5
DURABLE_WAIT_S = 5.0  # the longest a request waits for its entry before it is answered anyway
MAX_PENDING = 100_000  # kept while the database cannot be written; beyond, the oldest are dropped
MAX_LIMIT = 10_000


class _Pending(NamedTuple):
    entry: AuditEntry
    loop: asyncio.AbstractEventLoop | None  # with ``done``: a request waiting for this entry
    done: asyncio.Future[None] | None


class AuditLog:
    def __init__(self, db: Database, every_s: float | None = None) -> None:
        self._db = db
        self._every_s = FLUSH_EVERY_S if every_s is None else every_s
        self._pending: deque[_Pending] = deque()  # append and popleft are atomic: no lock on the request path
        self._writing = threading.Lock()  # one batch written at a time, in order
        self._starting = threading.Lock()
        self._stop = threading.Event()
        self._kick = threading.Event()  # a request waits: write now
        self._thread: threading.Thread | None = None
        self.lost = 0  # entries the database refused on their own, since the head started

    def record(self, entry: AuditEntry) -> None:
        """Keep ``entry`` for the next batch. Cheap: called on the request path."""
        self._pending.append(_Pending(entry, None, None))
        if self._thread is None:
            self._start()

    async def durable(self, entry: AuditEntry) -> None:
        """Return once ``entry`` is written (with whatever else is pending then), or after
        ``DURABLE_WAIT_S`` (the database is down: the entry stays pending and is tried again)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._pending.append(_Pending(entry, loop, done))
        if self._thread is None:
            self._start()
        self._kick.set()
        try:
            await asyncio.wait_for(asyncio.shield(done), DURABLE_WAIT_S)
        except TimeoutError:
            log.error("an audit entry could not be written within %gs; answering anyway", DURABLE_WAIT_S)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Write every entry pending now; how many were written. Raises if the database cannot
        be written at all (the entries stay pending)."""
        with self._writing:
            batch: list[_Pending] = []
            while self._pending:
                batch.append(self._pending.popleft())
            if not batch:
                return 0
            try:
                self._write([p.entry for p in batch])
                written = batch
            except Unavailable:  # the database is down, not an entry bad: all kept, tried again later
                self._pending.extendleft(reversed(batch))
                self._drop_excess()
                raise
            except Exception as refused:
                written = self._write_apart(batch, refused)
            for p in written:
                _release(p)
            return len(written)

    def _write(self, entries: list[AuditEntry]) -> None:
        with self._db.tx() as s:
            audit_repo.add(s, entries)

    def _write_apart(self, batch: list[_Pending], why: Exception) -> list[_Pending]:
        """The batch was refused (``why``): each entry alone. None written: the database is down
        (all kept, ``why`` raised); else those refused alone are lost, counted and logged."""
        written, refused = [], []
        for p in batch:
            try:
                self._write([p.entry])
                written.append(p)
            except Exception:
                refused.append(p)
        if not written:
            self._pending.extendleft(reversed(batch))
            self._drop_excess()
            raise why
        self.lost += len(refused)
        for p in refused:
            log.error("the database refused an audit entry, which is lost: %r", p.entry)
            _release(p)
        return written

    def close(self) -> None:
        """Stop the writer thread and write what is left. A later ``record`` starts it again."""
        with self._starting:
            thread, self._thread = self._thread, None
            self._stop.set()
            self._kick.set()
        if thread is not None:
            thread.join(timeout=30)
        try:
            self.flush()
        except Exception:
            log.exception("writing the audit log at shutdown failed; %d entries lost", self.pending)

    def _start(self) -> None:
        with self._starting:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, args=(self._stop,), name="gpupool-audit", daemon=True)
            self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._kick.wait(self._every_s)
            self._kick.clear()
            try:
                self.flush()
            except Exception:
                log.exception("writing the audit log failed; %d entries kept, trying again", self.pending)

    def _drop_excess(self) -> None:
        excess = len(self._pending) - MAX_PENDING
        if excess > 0:
            for _ in range(excess):
                _release(self._pending.popleft())
            log.error("the audit log could not be written for long: dropped its %d oldest entries", excess)


def _release(p: _Pending) -> None:
    """Tell the request waiting for ``p`` (if any) that it may answer."""
    if p.loop is not None and p.done is not None:
        with contextlib.suppress(RuntimeError):  # its event loop is gone (the head is stopping): nobody waits
            p.loop.call_soon_threadsafe(_finish, p.done)


def _finish(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def listing(
    ctx: HeadContext, who: Principal, since: str | None = None, user: str | None = None, limit: int = 1000
) -> list[AuditEntry]:
    """Entries newest first; ``since``: an ISO 8601 time or a duration ago (1d), default all kept."""
    if not who.is_admin:
        raise Forbidden(f"only an admin may read the audit log; {who.user} is a {who.role}")
    now = ctx.clock.now()
    start = None if since is None or not since.strip() else parse_when(since, now, now)
    with ctx.db.read() as s:
        return audit_repo.listing(s, start, user or None, max(1, min(limit, MAX_LIMIT)))
