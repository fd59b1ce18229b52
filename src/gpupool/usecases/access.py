"""Who may do what, where it needs the object: whose job, which project (the token's part is
checked before the route runs, from ``api/permissions.py``)."""

from __future__ import annotations

from gpupool.domain.errors import Forbidden
from gpupool.domain.permissions import Rule, Who, may_act_on_job, may_submit_to
from gpupool.domain.records import JobRecord
from gpupool.store import members as member_repo
from gpupool.store.db import Tx
from gpupool.store.tokens import Principal

_OWNER = Rule(Who.OWNER)
_MEMBER = Rule(Who.MEMBER)


def require_admin(who: Principal, what: str) -> None:
    if not who.is_admin:
        raise Forbidden(f"only an admin may {what}; {who.user} is a {who.role}")


def require_job(session: Tx, who: Principal, job: JobRecord, what: str) -> None:
    """The ``OWNER`` rule: refuse, naming the rule, unless ``who`` may act on ``job``."""
    require_owner(session, who, job.owner, job.spec.project, f"{what} job {job.id}", "not_your_job")


def require_owner(session: Tx, who: Principal, owner: str, project: str, act: str, code: str) -> None:
    """The ``OWNER`` rule for anything ``owner`` made in ``project`` (a job, a service): its
    owner, a manager of the project or an admin; ``act`` says what was refused ("cancel job 7")."""
    if who.is_admin or who.user == owner:
        return
    role = member_repo.role_in(session, project, who.user)
    if not may_act_on_job(who.user, who.is_admin, owner, role):
        raise Forbidden(
            f"{who.user} may not {act}: it is {owner}'s, and only {_OWNER.describe()} may (project {project})",
            code=code,
        )


def require_submit(session: Tx, who: Principal, project: str) -> None:
    """The ``MEMBER`` rule: a project that does not exist is refused (404), one that is not the
    caller's too (403)."""
    everyone, role = member_repo.project_access(session, project, who.user, admin=who.is_admin)
    if not may_submit_to(who.is_admin, everyone, role):
        raise Forbidden(
            f"{who.user} may not submit to project {project}: only {_MEMBER.describe()} may; "
            f"ask an admin: gpupool project add-member {project} {who.user}",
            code="not_a_member",
        )


class Visibility:
    """Which jobs' insides (command, environment, working directory) a caller may see: their
    own, those of projects they manage, and every job for an admin. Read once per request."""

    def __init__(self, session: Tx, who: Principal) -> None:
        self._who = who
        self._managed = set() if who.is_admin else member_repo.managed_by(session, who.user)

    def sees(self, job: JobRecord) -> bool:
        return self._who.is_admin or job.owner == self._who.user or job.spec.project in self._managed
