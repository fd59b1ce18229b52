"""`gpupool login [URL]`, `gpupool logout [URL]`, `gpupool whoami`.

``login`` reads a token (a hidden prompt on a terminal, else one line of stdin, so that it never
shows in ``ps`` or the shell's history), asks the head whose it is, and only then keeps it in the
credentials file (``cli/credentials.py``) for that head. Every command then uses it for that head
unless GPUPOOL_TOKEN is set. ``logout`` forgets it; the token itself works on until revoked.
"""

from __future__ import annotations

import getpass
import os
import sys
from typing import Annotated

import typer

from gpupool.cli import credentials
from gpupool.cli.common import DEFAULT_URL, Output, console, err_console, find_token, print_json
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.client import ClientError, GpupoolClient
from gpupool.domain.errors import InvalidInput
from gpupool.domain.registries import registry_host
from gpupool.domain.users import JOIN_ROLE

HeadArg = Annotated[
    str | None,
    typer.Argument(metavar="URL", help="the head's URL, e.g. https://head-host:7070 (default: --url / GPUPOOL_URL)"),
]


RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        metavar="HOST",
        help="an image registry (nvcr.io, registry.lab:5000) to log in to instead: the nodes pull your images with it",
    ),
]
RegistryUserOpt = Annotated[
    str | None, typer.Option("--username", "-u", help="with --registry: the registry user ($oauthtoken for NGC)")
]


def login(
    head: HeadArg = None,
    url: UrlOpt = DEFAULT_URL,
    registry: RegistryOpt = None,
    username: RegistryUserOpt = None,
) -> None:
    """Sign in to a head: paste a token (or pipe it on stdin) and keep it for this head's URL.
    With --registry: keep your login to an image registry at the head instead (the password or
    token pasted, or piped on stdin), for the nodes' pulls of your jobs' images."""
    if registry is not None:
        _registry_login(head or url, registry, username)
        return
    if username is not None:
        raise InvalidInput("--username goes with --registry (a head's sign-in is a token alone)")
    target = head or url
    key = credentials.normalise_url(target)
    if not credentials.is_local(key) and key.startswith("http://"):
        err_console.print("warning: the token crosses the network unencrypted; prefer https")
    token = _read_token(key)
    with GpupoolClient(target, token) as c:
        try:
            who = c.whoami()
        except ClientError as exc:
            if exc.status >= 500:
                raise
            why = "unknown, expired or revoked, or its user is disabled" if exc.status == 401 else exc.message
            raise InvalidInput(f"{key} refused the token ({' '.join(why.split())}); nothing saved") from None
    if who.get("role") == JOIN_ROLE:
        raise InvalidInput("that is the head's join token, which only lets a node join; nothing saved")
    path = credentials.save(key, token, who, os.environ)
    console.print(f"signed in to {key} as {who['user']} ({who['role']})")
    if os.environ.get("GPUPOOL_TOKEN"):
        err_console.print(f"note: GPUPOOL_TOKEN is set and wins over {path}; unset it to use this token")


def logout(head: HeadArg = None, url: UrlOpt = DEFAULT_URL, registry: RegistryOpt = None) -> None:
    """Forget the token kept for a head (it still works until revoked: gpupool token revoke ID).
    With --registry: have the head forget your login to that image registry."""
    if registry is not None:
        registry = registry_host(registry)
        with GpupoolClient(head or url, find_token(head or url).value) as c:
            c.registry_logout(registry)
        console.print(f"the head forgot your login to {registry}")
        return
    key = credentials.normalise_url(head or url)
    if credentials.remove(key, os.environ):
        console.print(f"signed out of {key}")
    else:
        console.print(f"not signed in to {key}")


def whoami(url: UrlOpt = DEFAULT_URL, output: OutputOpt = Output.TABLE) -> None:
    """Whom the head takes you for (user and role), and where your token came from."""
    found = find_token(url)
    with GpupoolClient(url, found.value) as c:
        who = c.whoami()
        logins = c.registry_logins() if who.get("role") != JOIN_ROLE else []
    if output is Output.JSON:
        print_json({**who, "registries": logins})
        return
    console.print(f"{who['user']} ({who['role']}) at {url.rstrip('/')}; token from {found.source}")
    for entry in logins:
        console.print(f"registry {entry['registry']} as {entry['username']} (saved {entry['saved_at'][:16]})")


def _registry_login(head: str, registry: str, username: str | None) -> None:
    registry = registry_host(registry)  # its form checked here: a host with a path never reaches a route
    if not username:
        raise InvalidInput("give the registry user with --username (NGC's is $oauthtoken)")
    on_terminal = sys.stdin.isatty()
    prompt = f"password or token for {username} at {registry} (input hidden): "
    secret = (getpass.getpass(prompt) if on_terminal else sys.stdin.readline()).rstrip("\r\n")
    if not secret:
        raise InvalidInput("no password given: type it at the prompt or pipe it on stdin")
    with GpupoolClient(head, find_token(head).value) as c:
        saved = c.registry_login(registry, username, secret)
    console.print(
        f"the head keeps your login to {saved['registry']} as {saved['username']}; the nodes pull your jobs'"
        " images from it with it (gpupool logout --registry to forget it)"
    )


def _read_token(key: str) -> str:
    on_terminal = sys.stdin.isatty()
    token = (getpass.getpass(f"token for {key} (input hidden): ") if on_terminal else sys.stdin.readline()).strip()
    if not token:
        raise InvalidInput(
            "no token given: paste one at the prompt or pipe it on stdin (gpupool token create makes one)"
        )
    return token
