"""The audit log: who changed what, from where, and how it went.

One entry per API request that changes something (any method but GET, HEAD and OPTIONS) and
per failed sign-in (a 401 on any route). An entry never holds a request body, a token or an
environment value: only the time, the user and token id (none for a failed sign-in), a stable
action name (``jobs.submit``, ``nodes.drain``, ``auth.failed``), its target (``job 12``), the
result, the HTTP status and the client's address. Entries are kept ``AUDIT_KEPT``.
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta

AUDIT_KEPT = timedelta(days=90)  # entries older than this are pruned by the controller
AUTH_FAILED = "auth.failed"  # the action of a request refused for a missing or bad token


class AuditResult(enum.StrEnum):
    OK = "ok"  # 2xx (or 3xx)
    DENIED = "denied"  # 401 or 403: no valid token, or not allowed
    INVALID = "invalid"  # any other 4xx: the request was wrong (malformed, not found, conflict)
    FAILED = "failed"  # 5xx: the head could not do it


# Characters written as escapes: controls (NUL, ESC, DEL, C1: a terminal acts on them, PostgreSQL
# refuses NUL), format characters (bidi overrides, zero widths: text that reads other than it is),
# line and paragraph separators, surrogates and unassigned code points.
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def printable(text: str | None, width: int, *, backslash: bool = True) -> str | None:
    """``text`` as it is stored and shown: every unsafe character as a ``\\xNN``, ``\\uNNNN`` or
    ``\\UNNNNNNNN`` escape and a backslash doubled (so no escape can be faked), cut to ``width``.
    Anything anonymous callers send (a path) reaches the log: it must neither break the database
    nor act on the terminal of the admin who reads it. ``backslash=False``: shown again, text that
    was stored so already has its escapes (only what is unsafe is escaped)."""
    if text is None:
        return None
    if text.isprintable() and (not backslash or "\\" not in text):
        return text[:width]
    out = []
    for ch in text:
        if ch == "\\" and backslash:
            out.append("\\\\")
        elif unicodedata.category(ch) in _UNSAFE or not ch.isprintable():
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)[:width]


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
