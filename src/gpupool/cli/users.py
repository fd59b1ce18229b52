"""User and token commands: `gpupool user add|list|disable|enable|set-role|delete`,
`gpupool token create|list|revoke`. A token is printed once, when it is made."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupool.cli.common import Output, client, console, print_json
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.render import ago, until
from gpupool.cli.tables import Col, Listing
from gpupool.domain.durations import parse_duration
from gpupool.domain.users import Role, Scope

user_app = typer.Typer(help="Add, list, disable, enable or delete users (admins).", no_args_is_help=True)
token_app = typer.Typer(help="Create, list or revoke API tokens.", no_args_is_help=True)


_URL = "http://127.0.0.1:7070"
_SHARED = typer.Option(
    "--shared-account",
    help="allow a Unix account another user's jobs already run as (they could read and signal each other's work)",
)


@user_app.command("add")
def add(
    name: str,
    role: Annotated[Role, typer.Option(help="what the user may do")] = Role.MEMBER,
    unix_user: Annotated[
        str | None, typer.Option(help="the Unix account their jobs run as [default: the one of the same name]")
    ] = None,
    shared_account: Annotated[bool, _SHARED] = False,
    url: UrlOpt = _URL,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Add a user and print their first token (shown this once: hand it to them). Their jobs never
    run as root or a system account (unless the head allows it: gpupool up --allow-system-accounts)."""
    with client(url) as c:
        user = c.add_user(name, role.value, unix_user, shared_account)
    if output is Output.JSON:
        print_json(user)
        return
    console.print(f"user {name} added as {user['role']}; their token (shown once, keep it secret):")
    console.print(user["token"])


@user_app.command("list")
def list_users(url: UrlOpt = _URL, output: OutputOpt = Output.TABLE) -> None:
    """Users with their role, Unix account, projects and whether they are disabled."""
    with client(url) as c:
        listing = c.users()
    if output is Output.JSON:
        print_json(listing)
        return
    console.print(users_table(listing))


@user_app.command("disable")
def disable(name: str, url: UrlOpt = _URL) -> None:
    """Stop a user's tokens from working (within a second); their running jobs go on."""
    with client(url) as c:
        c.disable_user(name)
    console.print(f"user {name} disabled")


@user_app.command("enable")
def enable(name: str, url: UrlOpt = _URL) -> None:
    """Let a disabled user's tokens work again."""
    with client(url) as c:
        c.enable_user(name)
    console.print(f"user {name} enabled")


@user_app.command("set-role")
def set_role(name: str, role: Role, url: UrlOpt = _URL) -> None:
    """Change a user's role (the last admin cannot be demoted)."""
    with client(url) as c:
        c.set_user_role(name, role.value)
    console.print(f"user {name} is now {role.value}")


@user_app.command("set-unix-user")
def set_unix_user(
    name: str,
    account: Annotated[str | None, typer.Argument(help="a Unix account on the nodes; left out: the same name")] = None,
    shared_account: Annotated[bool, _SHARED] = False,
    url: UrlOpt = _URL,
) -> None:
    """Choose the Unix account a user's jobs run as, from their next job on."""
    with client(url) as c:
        c.set_unix_user(name, account, shared_account)
    console.print(f"{name}'s jobs now run as the Unix account {account or name}")


@user_app.command("delete")
def delete(name: str, url: UrlOpt = _URL) -> None:
    """Remove a user and their tokens (refused while they own pending or running jobs)."""
    with client(url) as c:
        c.delete_user(name)
    console.print(f"user {name} deleted")


@token_app.command("create")
def create(
    user: Annotated[str | None, typer.Option(help="whose token (admins only); yours by default")] = None,
    name: Annotated[str | None, typer.Option(help="what the token is for, e.g. laptop or ci")] = None,
    expires: Annotated[str | None, typer.Option(help="expire after e.g. 90d or 12h [default: never]")] = None,
    scope: Annotated[
        Scope | None, typer.Option(help="what it may do [default: the widest the user's role allows]")
    ] = None,
    url: UrlOpt = _URL,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Create a token and print it (shown this once; only its hash is stored)."""
    expires_in_s = None if expires is None else parse_duration(expires)
    with client(url) as c:
        token = c.create_token(user, name, scope.value if scope else None, expires_in_s)
    if output is Output.JSON:
        print_json(token)
        return
    ends = f", expires in {until(token['expires_at'])}" if token["expires_at"] else ""
    console.print(
        f"token {token['id']} for {token['user']} (scope {token['scope']}{ends}); shown once, keep it secret:"
    )
    console.print(token["token"])


@token_app.command("list")
def list_tokens(
    user: Annotated[str | None, typer.Option(help="only this user's tokens (admins)")] = None,
    url: UrlOpt = _URL,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Tokens that work or expired, never their text: yours, or everyone's for an admin."""
    with client(url) as c:
        listing = c.tokens(user)
    if output is Output.JSON:
        print_json(listing)
        return
    console.print(tokens_table(listing))


@token_app.command("revoke")
def revoke(token_id: int, url: UrlOpt = _URL) -> None:
    """Revoke a token: it stops working within a second."""
    with client(url) as c:
        c.revoke_token(token_id)
    console.print(f"token {token_id} revoked")


USER_COLUMNS = (
    Col("USER"),
    Col("ROLE"),
    Col("UNIX USER", drop=1),
    Col("PROJECTS", wrap=True),
    Col("CREATED", drop=2),
    Col("STATE"),
)
TOKEN_COLUMNS = (
    Col("ID", justify="right"),
    Col("NAME", wrap=True),
    Col("USER"),
    Col("SCOPE", wrap=True),
    Col("CREATED", drop=1),
    Col("EXPIRES", wrap=True),
    Col("LAST USED", wrap=True, drop=2),
)


def users_table(listing: list[dict[str, Any]]) -> Listing:
    table = Listing(USER_COLUMNS)
    for u in listing:
        table.add_row(
            u["name"],
            u["role"],
            u["unix_user"] or "-",
            ", ".join(u["projects"]) or "-",
            ago(u["created_at"]) + " ago",
            "disabled" if u["disabled"] else "enabled",
        )
    return table


def tokens_table(listing: list[dict[str, Any]]) -> Listing:
    table = Listing(TOKEN_COLUMNS)
    for t in listing:
        expires = t["expires_at"]
        table.add_row(
            str(t["id"]),
            t["name"] or "-",
            t["user"],
            t["scope"] or "-",
            ago(t["created_at"]) + " ago",
            "never" if not expires else f"in {until(expires)}",
            ago(t["last_used_at"]) + " ago" if t["last_used_at"] else "never",
        )
    return table
