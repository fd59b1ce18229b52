"""Audit use cases: recording entries without slowing requests, reading them (admins), pruning.

``AuditLog`` takes entries from the request path into memory (an append, no I/O) and writes
them in batches, one transaction at most every ``FLUSH_EVERY_S``, from a thread of its own.
``flush`` writes what is pending now (a reader calls it first, so it sees every request
answered before it); ``close`` stops the thread and flushes, so a clean shutdown loses nothing.
A batch that cannot be written (the database is down) is kept and tried again.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from gpupool.domain.audit import AuditEntry
from gpupool.domain.errors import Forbidden
from gpupool.services.context import HeadContext
from gpupool.services.telemetry import parse_when
from gpupool.store import audit as audit_repo
from gpupool.store.db import Database
from gpupool.store.tokens import Principal

log = logging.getLogger("gpupool.audit")

FLUSH_EVERY_S = 0.5
MAX_PENDING = 100_000  # kept while the database cannot be written; beyond, the oldest are dropped
MAX_LIMIT = 10_000


class AuditLog:
    def __init__(self, db: Database, every_s: float | None = None) -> None:
        self._db = db
        self._every_s = FLUSH_EVERY_S if every_s is None else every_s
        self._pending: deque[AuditEntry] = deque()  # append and popleft are atomic: no lock on the request path
        self._writing = threading.Lock()  # one batch written at a time, in order
        self._starting = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, entry: AuditEntry) -> None:
        """Keep ``entry`` for the next batch. Cheap: called on the request path."""
        self._pending.append(entry)
        if self._thread is None:
            self._start()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Write every entry pending now, in one transaction; how many. Raises if the write
        fails (the entries stay pending)."""
        with self._writing:
            batch: list[AuditEntry] = []
            while self._pending:
                batch.append(self._pending.popleft())
            if not batch:
                return 0
            try:
                with self._db.tx() as s:
                    audit_repo.add(s, batch)
            except Exception:
                self._pending.extendleft(reversed(batch))
                self._drop_excess()
                raise
            return len(batch)

    def close(self) -> None:
        """Stop the writer thread and write what is left. A later ``record`` starts it again."""
        with self._starting:
            thread, self._thread = self._thread, None
            self._stop.set()
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
        while not stop.wait(self._every_s):
            try:
                self.flush()
            except Exception:
                log.exception("writing the audit log failed; %d entries kept, trying again", self.pending)

    def _drop_excess(self) -> None:
        excess = len(self._pending) - MAX_PENDING
        if excess > 0:
            for _ in range(excess):
                self._pending.popleft()
            log.error("the audit log could not be written for long: dropped its %d oldest entries", excess)


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
