"""`gpupool audit`: who changed what, from where, and how it went (admins)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from gpupool.cli.common import DEFAULT_URL, Output, client, console, print_json
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.render import parse_time
from gpupool.cli.tables import Col, Listing
from gpupool.domain.audit import printable

RESULT_STYLE = {"ok": "green", "denied": "red", "invalid": "yellow", "failed": "bold red"}


def audit(
    since: Annotated[
        str | None, typer.Option(help="only this recent: a duration ago (1d, 2h) or an ISO 8601 time [default: all]")
    ] = None,
    user: Annotated[str | None, typer.Option(help="only this user's requests")] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many, the newest")] = 1000,
    url: UrlOpt = DEFAULT_URL,
    output: OutputOpt = Output.TABLE,
) -> None:
    """The audit log, newest first: every request that changed something (submit, cancel, drain,
    projects, users, tokens, joins) and every failed sign-in, kept 90 days. Admins only."""
    with client(url) as c:
        entries = c.audit(since, user, limit)
    if output is Output.JSON:
        print_json(entries)
        return
    if not entries:
        console.print("no audit entries" + (f" since {since}" if since else ""))
        return
    console.print(audit_table(entries))


AUDIT_COLUMNS = (
    Col("TIME (UTC)"),
    Col("USER"),
    Col("TOKEN", justify="right", drop=2),
    Col("ACTION"),
    Col("TARGET", wrap=True),
    Col("RESULT"),
    Col("CLIENT", drop=1),
)


def audit_table(entries: list[dict[str, Any]]) -> Listing:
    """One line an entry; the target wraps on a narrow terminal, the rest never does. Text anyone
    could have sent (a path, a name) is shown escaped, as it is stored: an entry written before the
    head escaped at write time cannot act on the terminal either."""
    table = Listing(AUDIT_COLUMNS)
    for e in entries:
        table.add_row(
            f"{parse_time(e['at']):%m-%d %H:%M:%S}",
            _shown(e["user"]) or "-",
            "-" if e["token_id"] is None else str(e["token_id"]),
            _shown(e["action"]),
            _shown(e["target"]),
            Text(f"{e['result']} {e['status']}", style=RESULT_STYLE.get(e["result"], "")),
            _shown(e["client"]) or "-",
        )
    return table


def _shown(text: str | None) -> str:
    return printable(text, 10_000, backslash=False) or ""
