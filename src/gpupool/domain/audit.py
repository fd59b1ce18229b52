"""The audit log: who changed what, from where, and how it went.

One entry per API request that changes something (any method but GET, HEAD and OPTIONS) and
per failed sign-in (a 401 on any route). An entry never holds a request body, a token or an
environment value: only the time, the user and token id (none for a failed sign-in), a stable
action name (``jobs.submit``, ``nodes.drain``, ``auth.failed``), its target (``job 12``), the
result, the HTTP status and the client's address. Entries are kept ``AUDIT_KEPT``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

AUDIT_KEPT = timedelta(days=90)  # entries older than this are pruned by the controller
AUTH_FAILED = "auth.failed"  # the action of a request refused for a missing or bad token


class AuditResult(enum.StrEnum):
    OK = "ok"  # 2xx (or 3xx)
    DENIED = "denied"  # 401 or 403: no valid token, or not allowed
    INVALID = "invalid"  # any other 4xx: the request was wrong (malformed, not found, conflict)
    FAILED = "failed"  # 5xx: the head could not do it


def result_of(status: int) -> AuditResult:
    if status in (401, 403):
        return AuditResult.DENIED
    if 400 <= status < 500:
        return AuditResult.INVALID
    return AuditResult.FAILED if status >= 500 else AuditResult.OK


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """``user`` and ``token_id`` are None for a failed sign-in; ``id`` once stored."""

    at: datetime
    user: str | None
    token_id: int | None
    action: str
    target: str
    result: AuditResult
    status: int
    client: str | None
    id: int | None = None
