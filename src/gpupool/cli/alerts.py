"""`gpupool alerts` and `gpupool idle`: what needs an admin's attention, and which GPUs sit idle."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from gpupool.cli.common import DEFAULT_URL, Output, client, console, print_json
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.render import ago, span
from gpupool.cli.tables import Col, Listing


def alerts(
    all: Annotated[bool, typer.Option("--all", help="also alerts cleared in the last 30 days")] = False,
    url: UrlOpt = DEFAULT_URL,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Active alerts: GPUs over the temperature threshold (gpupool up --alert-temperature), XID errors, nodes down."""
    with client(url) as c:
        listing = c.alerts(include_cleared=all)
    if output is Output.JSON:
        print_json(listing)
        return
    if not listing:
        console.print("no alerts" if all else "no active alerts (gpupool alerts --all shows cleared ones)")
        return
    console.print(alerts_table(listing))


def idle(url: UrlOpt = DEFAULT_URL, output: OutputOpt = Output.TABLE) -> None:
    """GPUs allocated to a job but idle (below gpupool up's --idle-threshold for --idle-after)."""
    with client(url) as c:
        listing = c.idle_gpus()
    if output is Output.JSON:
        print_json(listing)
        return
    if not listing:
        console.print("no idle allocated GPUs")
        return
    console.print(idle_table(listing))
    console.print(
        "a project's idle timeout preempts its idle interactive jobs while others wait: "
        "gpupool project set NAME --idle-timeout 30m",
        style="dim",
    )


ALERT_COLUMNS = (
    Col("KIND"),
    Col("NODE"),
    Col("GPU", justify="right"),
    Col("JOB", justify="right"),
    Col("RAISED", wrap=True, drop=1),
    Col("STATE", wrap=True),
    Col("MESSAGE", wrap=True),
)
IDLE_COLUMNS = (
    Col("NODE"),
    Col("GPU", justify="right"),
    Col("JOB", justify="right"),
    Col("NAME", wrap=True),
    Col("USER"),
    Col("PROJECT", drop=2),
    Col("PRIORITY", drop=1),
    Col("IDLE FOR", justify="right"),
    Col("UTIL", justify="right"),
)


def alerts_table(listing: list[dict[str, Any]]) -> Listing:
    table = Listing(ALERT_COLUMNS)
    for a in listing:
        cleared = a.get("cleared_at")
        table.add_row(
            a["kind"],
            a["node"],
            "-" if a["gpu"] is None else str(a["gpu"]),
            "-" if a["job_id"] is None else str(a["job_id"]),
            f"{ago(a['raised_at'])} ago",
            Text("active", style="red") if cleared is None else f"cleared {ago(cleared)} ago",
            a["message"],
        )
    return table


def idle_table(listing: list[dict[str, Any]]) -> Listing:
    table = Listing(IDLE_COLUMNS)
    for g in listing:
        table.add_row(
            g["node"],
            str(g["gpu"]),
            str(g["job_id"]),
            g["job_name"],
            g["owner"],
            g["project"],
            g["priority"],
            span(int(g["idle_for_s"])),
            f"{g['utilization_pct']:.0f}%",
        )
    return table
