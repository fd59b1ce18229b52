"""Whether a caller may use a route of the gateway: the gateway asks (it holds no token or member
data) and keeps the answer a few seconds.

A service is its project's: its members and managers (and an admin) may call it, a viewer may only
look, a project open to everyone is open here too (the rules of submitting, ``may_submit_to``). A
job's published port (a notebook) is its owner's: the ``OWNER`` rule, as for its logs.
"""

from __future__ import annotations

from gpupool.domain.errors import Forbidden
from gpupool.domain.permissions import Rule, Who, may_submit_to, refusal
from gpupool.store import jobs as job_repo
from gpupool.store import members as member_repo
from gpupool.store.tokens import Principal
from gpupool.usecases.access import require_job
from gpupool.usecases.context import HeadContext

_MEMBER = Rule(Who.MEMBER)


def authorize(ctx: HeadContext, who: Principal, project: str | None, job_id: int | None) -> None:
    """Return if ``who`` may call the route; raise ``Forbidden`` (or ``NotFound``) if not. With
    neither a project nor a job: any user may (the gateway's ``/metrics``)."""
    if project is None and job_id is None:
        return
    denied = refusal(_MEMBER, who.role, who.scope)
    if denied is not None:
        raise Forbidden(f"{who.user} may not call services: {denied.message}", code=denied.code)
    with ctx.db.read() as s:
        if job_id is not None:
            require_job(s, who, job_repo.get_job(s, job_id), "open the published port of")
            return
        assert project is not None
        everyone, role = member_repo.project_access(s, project, who.user, admin=who.is_admin)
        if not may_submit_to(who.is_admin, everyone, role):
            raise Forbidden(
                f"{who.user} may not call services of project {project}: only {_MEMBER.describe()} may; "
                f"ask an admin: gpupool project add-member {project} {who.user}",
                code="not_a_member",
            )
