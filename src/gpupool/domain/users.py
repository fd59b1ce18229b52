"""Users, their roles, and the scopes of their tokens: the one definition of each name.

A user has a role (what they may do at most); each of their tokens has a scope (what that token
may do), never wider than the role allows. ``effective_scope`` is the one rule that combines them.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpupool.domain.errors import InvalidInput
from gpupool.domain.names import NAME_RE

ADMIN_USER = "admin"  # the built-in user that owns the head's bootstrap admin token
JOIN_ROLE = "join"  # the role of the join token: it only lets a node join
# The head's gateway: an identity of its own, minted afresh at every head start and kept nowhere a
# token route reaches, so no user token can revoke or narrow it. It reads routes and reports load.
GATEWAY_ROLE = "gateway"
RESERVED_NAMES = frozenset({JOIN_ROLE, GATEWAY_ROLE})
MAX_TOKEN_NAME = 64
_TOKEN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_UNIX_USER = 32
MIN_EXPIRY = timedelta(minutes=1)
MAX_EXPIRY = timedelta(days=3653)  # ten years

_UNIX_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\$?$")


class Role(enum.StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


class Scope(enum.StrEnum):
    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def covers(self, other: Scope) -> bool:
        return self.rank >= other.rank


_RANK = {Scope.READ: 0, Scope.SUBMIT: 1, Scope.ADMIN: 2}
# The widest scope each role's tokens may have; "user" is the role of tokens made before users existed.
_WIDEST = {
    Role.ADMIN.value: Scope.ADMIN,
    Role.MEMBER.value: Scope.SUBMIT,
    Role.VIEWER.value: Scope.READ,
    JOIN_ROLE: Scope.READ,
    GATEWAY_ROLE: Scope.READ,
}


def widest_scope(role: str) -> Scope:
    """The widest scope a token of this role may have (an unknown or legacy role: submit)."""
    return _WIDEST.get(role, Scope.SUBMIT)


def effective_scope(role: str, scope: str | None) -> Scope:
    """What a token may do: its scope, narrowed to its user's role (a demoted user's old admin
    token is worth no more than the new role)."""
    widest = widest_scope(role)
    if scope is None:
        return widest
    own = Scope(scope)
    return own if widest.covers(own) else widest


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: Role
    unix_user: str | None
    disabled: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token as it may be shown: never the token or its hash."""

    id: int
    name: str | None
    user: str
    scope: str | None
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None


def check_user_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"invalid user name {name!r}: 1-63 letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    if name in RESERVED_NAMES:
        raise InvalidInput(f"the user name {name!r} is reserved", code="reserved_name")
    return name


def check_unix_user(unix_user: str | None) -> str | None:
    if unix_user is not None and not _UNIX_RE.match(unix_user):
        raise InvalidInput(f"invalid unix user {unix_user!r}: a POSIX login name of at most {MAX_UNIX_USER} characters")
    return unix_user


def check_token_name(name: str | None) -> str | None:
    """A token's name is shown in listings: spelled as a user's name is (letters, digits, '.', '_'
    and '-'), so no control character or markup reaches a terminal."""
    if name is not None and (len(name) > MAX_TOKEN_NAME or not _TOKEN_NAME_RE.fullmatch(name)):
        raise InvalidInput(
            f"invalid token name {name[:80]!r}: 1-{MAX_TOKEN_NAME} letters, digits, '.', '_' and '-',"
            " starting with a letter or digit"
        )
    return name


def expiry(now: datetime, after_s: float | None) -> datetime | None:
    """When a token made now expires; ``None``: never. Bounded to 1 minute .. 10 years."""
    if after_s is None:
        return None
    if not MIN_EXPIRY.total_seconds() <= after_s <= MAX_EXPIRY.total_seconds():  # NaN fails too
        raise InvalidInput("a token expires between 1 minute and 10 years after it is made (e.g. 90d)")
    return now + timedelta(seconds=after_s)
