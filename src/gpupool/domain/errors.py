"""The one error tree of gpupool.

Every error a user can cause or meet carries a stable ``code`` (for scripts) and a ``message``
(for people, one line, saying what to do next where possible). The API maps the tree to HTTP in
one handler (``api/errors.py``); the CLI maps any of them to exit code 2.

    GpupoolError                 500  internal
    ├── InvalidInput             400  the request itself is malformed or out of range
    ├── Unauthorized             401  no or wrong token
    ├── Forbidden                403  authenticated, but not allowed
    ├── NotFound                 404  no such job / node / project
    ├── Conflict                 409  the request clashes with the entity's state
    │   └── Stale                409  the row changed after it was read: a guarded write was dropped
    ├── Unsatisfiable            422  well-formed, but this cluster can never run it
    └── Unavailable              503  the head cannot serve the request right now
"""

from __future__ import annotations


class GpupoolError(Exception):
    status = 500
    default_code = "internal"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code

    def __str__(self) -> str:
        return self.message


class InvalidInput(GpupoolError):
    status = 400
    default_code = "invalid_argument"


class Unauthorized(GpupoolError):
    status = 401
    default_code = "unauthorized"


class Forbidden(GpupoolError):
    status = 403
    default_code = "forbidden"


class NotFound(GpupoolError):
    status = 404
    default_code = "not_found"


class Conflict(GpupoolError):
    status = 409
    default_code = "conflict"


class Stale(Conflict):
    """A write guarded by what a reader saw (a job's state) found the row changed since. The
    controller drops such a decision and decides again next cycle; a request may simply retry."""

    default_code = "stale"


class Unsatisfiable(GpupoolError):
    status = 422
    default_code = "unsatisfiable"


class Unavailable(GpupoolError):
    status = 503
    default_code = "unavailable"
