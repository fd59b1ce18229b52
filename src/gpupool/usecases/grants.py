"""Who may submit where, remembered for a second between submissions.

Checking a submission's project and the caller's membership was a sixth of a lone submission's
cost on the head (two ORM reads in its transaction). A grant is remembered only where the
database lets one writer in at a time (SQLite): every change of a project or a membership calls
``forget`` inside its own transaction, so no submission committed after that change can use a
grant read before it, and nothing is remembered while the change is under way (grants are
remembered only inside submissions' transactions, which wait for the writer lock). Only grants
are remembered: a refusal is always read afresh, with its full message. On PostgreSQL, where
writers run side by side, every submission takes its project row FOR SHARE as before.
"""

from __future__ import annotations

import threading
import time

TTL_S = 1.0  # a backstop: the same as a token's in the API's principal cache
MAX_GRANTS = 4096


class SubmitGrants:
    def __init__(self, ttl_s: float = TTL_S) -> None:
        self._ttl = ttl_s
        self._lock = threading.Lock()
        self._granted: dict[tuple[str, str, bool], float] = {}

    def granted(self, user: str, project: str, admin: bool) -> bool:
        at = self._granted.get((user, project, admin))
        return at is not None and time.monotonic() - at <= self._ttl

    def grant(self, user: str, project: str, admin: bool) -> None:
        with self._lock:
            if len(self._granted) >= MAX_GRANTS:
                self._granted.clear()
            self._granted[(user, project, admin)] = time.monotonic()

    def forget(self) -> None:
        """A project or a membership is changing: call inside the transaction that changes it."""
        with self._lock:
            self._granted.clear()
