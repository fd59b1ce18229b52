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
from gpupool.cli.common import DEFAULT_URL, Output, OutputOpt, UrlOpt, console, err_console, find_token, print_json
from gpupool.client import ClientError, GpupoolClient
from gpupool.domain.errors import InvalidInput
from gpupool.domain.users import JOIN_ROLE

HeadArg = Annotated[
    str | None,
    typer.Argument(metavar="URL", help="the head's URL, e.g. https://head-host:7070 (default: --url / GPUPOOL_URL)"),
]


def login(head: HeadArg = None, url: UrlOpt = DEFAULT_URL) -> None:
    """Sign in to a head: paste a token (or pipe it on stdin) and keep it for this head's URL."""
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


def logout(head: HeadArg = None, url: UrlOpt = DEFAULT_URL) -> None:
    """Forget the token kept for a head (it still works until revoked: gpupool token revoke ID)."""
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
    if output is Output.JSON:
        print_json(who)
        return
    console.print(f"{who['user']} ({who['role']}) at {url.rstrip('/')}; token from {found.source}")


def _read_token(key: str) -> str:
    on_terminal = sys.stdin.isatty()
    token = (getpass.getpass(f"token for {key} (input hidden): ") if on_terminal else sys.stdin.readline()).strip()
    if not token:
        raise InvalidInput(
            "no token given: paste one at the prompt or pipe it on stdin (gpupool token create makes one)"
        )
    return token
