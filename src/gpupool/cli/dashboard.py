"""`gpupool dashboard`: the link that opens the head's web dashboard already signed in.

The token rides in the URL fragment (``#token=...``): browsers never send fragments to servers, so
it stays out of access logs and proxies; the page moves it into the tab's sessionStorage and
removes it from the address bar."""

from __future__ import annotations

import webbrowser
from typing import Annotated
from urllib.parse import quote

import typer

from gpupool.cli.common import DEFAULT_URL, console, err_console, resolve_token
from gpupool.cli.opts import UrlOpt

OpenOpt = Annotated[bool, typer.Option("--open", help="also open it in the default web browser")]


def dashboard_link(url: str, token: str) -> str:
    return f"{url.rstrip('/')}/ui/#token={quote(token, safe='')}"


def dashboard(url: UrlOpt = DEFAULT_URL, open_: OpenOpt = False) -> int:
    """Print the dashboard's URL with your token (keep it private: it signs in as you); --open opens it."""
    token = resolve_token(url)
    if token is None:
        err_console.print(
            "error: no token: run gpupool login, set GPUPOOL_TOKEN, or set GPUPOOL_DATA_DIR to the head's data dir"
            " (its admin-token file)"
        )
        return 2
    link = dashboard_link(url, token)
    console.print(link)
    if open_ and not webbrowser.open(link):
        err_console.print("could not open a web browser here; open the link above yourself")
    return 0
