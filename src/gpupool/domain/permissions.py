"""Who may do what: the kinds of rule a route can have, and the one function that applies them.

The table that gives every route its rule is ``api/permissions.py``; this module says what each
rule means. A rule is checked in two steps. The request's token is checked against the rule
before anything runs (``refusal``): a viewer cannot reach a submit route, a read-only token
cannot reach one that changes anything. What needs the object (whose job is it? is this project
theirs?) is checked by the service that loads it (``may_act_on_job``, ``may_submit_to``), with
the same rule named in its refusal.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from gpupool.domain.users import GATEWAY_ROLE, JOIN_ROLE, Role, Scope, effective_scope


class Who(enum.StrEnum):
    PUBLIC = "public"  # no token: health, the dashboard's files, the API docs
    NODE = "node"  # the join token (a node joining the cluster), or an admin
    ANYONE = "anyone"  # any user, viewers included: the queue, nodes, metrics and reports are public
    MEMBER = "member"  # members and admins, to the projects they belong to (viewers may not)
    OWNER = "owner"  # the job's owner, a manager of the job's project, or an admin
    SELF = "self"  # the user's own (tokens); anyone's for an admin
    GATEWAY = "gateway"  # the head's own gateway (its identity of its own), or an admin
    ADMIN = "admin"


class ProjectRole(enum.StrEnum):
    """A user's role in one project: a manager acts on every job of the project."""

    MANAGER = "manager"
    MEMBER = "member"


@dataclass(frozen=True, slots=True)
class Rule:
    """``who`` may call the route with a token whose scope covers ``scope``."""

    who: Who
    scope: Scope = Scope.READ

    def describe(self) -> str:
        return _WORDS[self.who] + ("" if self.scope is Scope.READ else f", with a token of scope {self.scope.value}")


_WORDS = {
    Who.PUBLIC: "anyone, without a token",
    Who.NODE: "a joining node's join token, or an admin",
    Who.ANYONE: "any user",
    Who.MEMBER: "a member of the project, or an admin",
    Who.OWNER: "the job's owner, a manager of its project, or an admin",
    Who.SELF: "the user themselves, or an admin",
    Who.GATEWAY: "the head's gateway, or an admin",
    Who.ADMIN: "an admin",
}


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # forbidden: the role may not; read_only_token or narrow_token: this token's scope
    message: str


def refusal(rule: Rule, role: str, scope: Scope | None) -> Refusal | None:
    """Why a token of ``role`` (its user's role) and ``scope`` may not call a route with ``rule``
    (``None``: it may, as far as the token tells; the object may still refuse)."""
    if rule.who is Who.PUBLIC:
        return None
    if role == JOIN_ROLE:
        return None if rule.who is Who.NODE else Refusal("forbidden", "a join token only lets a node join")
    if role == GATEWAY_ROLE:
        refused = Refusal("forbidden", "the gateway only reads routes and reports load")
        return None if rule.who is Who.GATEWAY else refused
    may = effective_scope(role, scope)
    if rule.who in (Who.ADMIN, Who.NODE, Who.GATEWAY) and role != Role.ADMIN.value:
        return Refusal("forbidden", f"this needs {rule.describe()}; a {role} may not")
    if rule.who is Who.MEMBER and role == Role.VIEWER.value:
        return Refusal("forbidden", f"this needs {rule.describe()}; a viewer may only look")
    needed = Scope.ADMIN if rule.who in (Who.ADMIN, Who.NODE, Who.GATEWAY) else rule.scope
    if not may.covers(needed):
        if may is Scope.READ:
            return Refusal("read_only_token", "this token has scope read: it can list and show, not change anything")
        return Refusal("narrow_token", f"this needs a token of scope {needed.value}; this one has {may.value}")
    return None


def may_revoke(caller: Scope, target: Scope) -> bool:
    """A token may revoke only tokens whose scope its own covers: a narrow token of an admin cannot
    take the admin's full tokens (the head's own among them) away."""
    return caller.covers(target)


def may_act_on_job(user: str, is_admin: bool, owner: str, project_role: ProjectRole | None) -> bool:
    """The ``OWNER`` rule on one job: its owner, a manager of its project, or an admin."""
    return is_admin or user == owner or project_role is ProjectRole.MANAGER


def may_submit_to(is_admin: bool, open_to_everyone: bool, project_role: ProjectRole | None) -> bool:
    """The ``MEMBER`` rule on one project: a member or manager of it, anyone where it is open to
    everyone (``default``, unless an admin closed it), or an admin."""
    return is_admin or open_to_everyone or project_role is not None


@dataclass(frozen=True, slots=True)
class Member:
    project: str
    user: str
    role: ProjectRole
    created_at: datetime
