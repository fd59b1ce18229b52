"""User and token use cases. Who may do what here is decided by the token's scope (narrowed to
its user's role): reading needs ``read``, managing one's own tokens ``submit``, managing users or
another user's tokens ``admin``."""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.domain.errors import Forbidden, InvalidInput
from gpupool.domain.permissions import ProjectRole, may_revoke
from gpupool.domain.users import (
    Role,
    Scope,
    TokenInfo,
    User,
    check_token_name,
    check_unix_user,
    check_user_name,
    effective_scope,
    expiry,
    widest_scope,
)
from gpupool.store import members as member_repo
from gpupool.store import tokens as token_repo
from gpupool.store import users as user_repo
from gpupool.store.tokens import Principal
from gpupool.usecases.context import HeadContext


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token just made: the only time its plain text is seen."""

    info: TokenInfo
    token: str


def listing(ctx: HeadContext, who: Principal) -> list[tuple[User, list[str]]]:
    """Every user with the projects they belong to."""
    _require(who, Scope.READ, "list users")
    with ctx.db.read() as s:
        projects = member_repo.projects_by_user(s)
        return [(u, projects.get(u.name, [])) for u in user_repo.list_users(s)]


def projects_of(ctx: HeadContext, who: Principal) -> dict[str, ProjectRole]:
    """The caller's projects and their role in each (a join token belongs to none)."""
    with ctx.db.read() as s:
        return member_repo.roles_of(s, who.user)


def add_user(
    ctx: HeadContext, who: Principal, name: str, role: Role, unix_user: str | None, *, shared_account: bool = False
) -> tuple[User, NewToken]:
    """A new user and their first token (of the widest scope their role allows). Refused when
    their jobs would run as root, a system account, or (unless ``shared_account``) another user's."""
    _require(who, Scope.ADMIN, "add users")
    check_user_name(name)
    check_unix_user(unix_user)
    account = ctx.accounts.account_of(name, unix_user)
    if unix_user is not None and ctx.accounts.owners:
        ctx.accounts.check(name, unix_user)
    elif ctx.accounts.owners and (ctx.accounts.uid_of is None or ctx.accounts.uid_of(account) is not None):
        ctx.accounts.check(name, account)  # the account of the same name: refused if it is a system one
    now = ctx.clock.now()
    with ctx.db.tx() as s:
        ctx.accounts.check_unshared(name, account, user_repo.list_users(s), shared_account)
        user = user_repo.add_user(s, name, role, unix_user, now)
        info, plain = token_repo.issue_token(s, name, role.value, now, name="first", scope=widest_scope(role.value))
    return user, NewToken(info, plain)


def set_disabled(ctx: HeadContext, who: Principal, name: str, disabled: bool) -> User:
    _require(who, Scope.ADMIN, "disable or enable users")
    with ctx.db.tx() as s:
        return user_repo.set_disabled(s, name, disabled, ctx.clock.now())


def set_role(ctx: HeadContext, who: Principal, name: str, role: Role) -> User:
    _require(who, Scope.ADMIN, "change a user's role")
    with ctx.db.tx() as s:
        return user_repo.set_role(s, name, role, ctx.clock.now())


def set_unix_user(
    ctx: HeadContext, who: Principal, name: str, unix_user: str | None, *, shared_account: bool = False
) -> User:
    """Which Unix account ``name``'s next jobs run as; refused when the head can tell that it
    does not exist, when it is root or a system account, or (unless ``shared_account``) when
    another user's jobs run as it."""
    _require(who, Scope.ADMIN, "map users to Unix accounts")
    check_unix_user(unix_user)
    account = ctx.accounts.account_of(name, unix_user)
    if ctx.accounts.owners:
        ctx.accounts.check(name, account)
    with ctx.db.tx() as s:
        ctx.accounts.check_unshared(name, account, user_repo.list_users(s), shared_account)
        return user_repo.set_unix_user(s, name, unix_user, ctx.clock.now())


def delete_user(ctx: HeadContext, who: Principal, name: str) -> None:
    _require(who, Scope.ADMIN, "delete users")
    with ctx.db.tx() as s:
        user_repo.delete_user(s, name, ctx.clock.now())
        ctx.grants.forget()


def create_token(
    ctx: HeadContext,
    who: Principal,
    *,
    user: str | None = None,
    name: str | None = None,
    scope: Scope | None = None,
    expires_in_s: float | None = None,
) -> NewToken:
    """A token for ``user`` (the caller by default). Its scope defaults to the widest the user's
    role allows, and can be neither wider than that nor wider than the caller's own token."""
    owner = user or who.user
    own = owner == who.user
    _require(who, Scope.SUBMIT if own else Scope.ADMIN, "create tokens" if own else "create tokens for other users")
    check_token_name(name)
    now = ctx.clock.now()
    expires_at = expiry(now, expires_in_s)
    with ctx.db.tx() as s:
        target = user_repo.get_user(s, owner)
        widest = widest_scope(target.role.value)
        chosen = scope or widest
        if not widest.covers(chosen):
            raise InvalidInput(
                f"a {target.role.value}'s token can have scope {widest.value} at most, not {chosen.value}"
            )
        if not who.may(chosen):
            raise Forbidden(f"a token cannot make a token of wider scope than its own ({chosen.value})")
        info, plain = token_repo.issue_token(
            s, owner, target.role.value, now, name=name, scope=chosen, expires_at=expires_at
        )
    return NewToken(info, plain)


def list_tokens(ctx: HeadContext, who: Principal, user: str | None = None) -> list[TokenInfo]:
    """Everyone's tokens for an admin (or one user's with ``user``); one's own for anyone else."""
    own = user is None or user == who.user
    if who.is_admin:  # an admin user acting through an admin-scoped token
        own = False  # an admin lists everyone's, or the one user's asked for
    elif not own:
        _require(who, Scope.ADMIN, "list another user's tokens")
    _require(who, Scope.READ, "list tokens")
    with ctx.db.read() as s:
        listed = token_repo.list_tokens(s, who.user if own else user)
        if user is not None and not listed:
            user_repo.get_user(s, user)  # no such user: 404 rather than an empty list
        return listed


def revoke_token(ctx: HeadContext, who: Principal, token_id: int) -> TokenInfo:
    """One's own token with a ``submit`` token, anyone's as an admin; never a token of a wider
    scope than the caller's own (the head's admin token is not a narrow token's to revoke)."""
    with ctx.db.tx() as s:
        token = token_repo.get_token(s, token_id)
        own = token.user == who.user
        _require(who, Scope.SUBMIT if own else Scope.ADMIN, "revoke tokens" if own else "revoke another user's token")
        mine, theirs = effective_scope(who.role, who.scope), token_repo.token_scope(s, token_id)
        if not may_revoke(mine, theirs):
            raise Forbidden(
                f"token {token_id} has scope {theirs.value}, wider than this token's {mine.value}: "
                f"revoke it with a token of scope {theirs.value}",
                code="narrow_token",
            )
        return token_repo.revoke_token(s, token_id, ctx.clock.now())


def _require(who: Principal, scope: Scope, what: str) -> None:
    """Managing others (``scope`` admin) needs an admin; anything else needs the token's scope."""
    if scope is Scope.ADMIN and not who.is_admin:
        raise Forbidden(f"only an admin may {what}; {who.user} is a {who.role}")
    if not who.may(scope):
        raise Forbidden(f"this token's scope does not allow this ({what} needs {scope.value})")
