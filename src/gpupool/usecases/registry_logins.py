"""Users' own registry logins (issue 32): ``gpupool login --registry HOST``.

Each user sees and changes only their own; an admin too (an admin has no business with another's
registry password). The head does not try the login against the registry: it may not reach it, and
the nodes that pull are what must. A wrong one shows at the first pull, as the job's ``image``
failure, with the registry's own words.
"""

from __future__ import annotations

from gpupool.domain.errors import Forbidden, NotFound
from gpupool.domain.registries import RegistryLogin, check_login, registry_host
from gpupool.domain.users import Scope
from gpupool.store import registry_logins as login_repo
from gpupool.store.tokens import Principal
from gpupool.usecases.context import HeadContext


def listing(ctx: HeadContext, who: Principal) -> list[RegistryLogin]:
    _require(who, Scope.READ)
    with ctx.db.read() as s:
        return login_repo.listing(s, who.user)


def login(ctx: HeadContext, who: Principal, registry: str, username: str, secret: str) -> RegistryLogin:
    """Keep the caller's login to ``registry`` (replacing theirs), sealed."""
    _require(who, Scope.SUBMIT)
    host = registry_host(registry)
    check_login(username, secret)
    sealed = ctx.sealer.seal(secret)
    with ctx.db.tx() as s:
        return login_repo.save(s, who.user, host, username, sealed, ctx.clock.now())


def logout(ctx: HeadContext, who: Principal, registry: str) -> None:
    _require(who, Scope.SUBMIT)
    host = registry_host(registry)
    with ctx.db.tx() as s:
        if not login_repo.remove(s, who.user, host):
            raise NotFound(f"{who.user} has no login to {host} (gpupool login --registry lists none there)")


def _require(who: Principal, scope: Scope) -> None:
    if not who.may(scope):
        raise Forbidden(f"this token's scope does not allow this (registry logins need {scope.value})")
