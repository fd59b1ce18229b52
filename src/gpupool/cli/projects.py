"""Project commands: `gpupool projects`, `gpupool project set|delete`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from gpupool.cli.common import Output, OutputOpt, UrlOpt, client, console, print_json
from gpupool.cli.render import span
from gpupool.domain.durations import parse_duration

project_app = typer.Typer(help="Set up or remove a project (queue): quota, limit, weight.", no_args_is_help=True)


def projects(url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """Projects with their quota, limit, weight, fair share and what they hold and wait for."""
    with client(url) as c:
        listing = c.projects()
    if output is Output.JSON:
        print_json(listing)
        return
    console.print(projects_table(listing))


@project_app.command("set")
def set_project(
    name: str,
    quota: Annotated[float, typer.Option(help="GPUs guaranteed to the project")] = 0.0,
    limit: Annotated[float | None, typer.Option(help="most GPUs it may hold, borrowing included")] = None,
    weight: Annotated[float, typer.Option(help="its part of the GPUs beyond all quotas")] = 1.0,
    idle_timeout: Annotated[
        str | None,
        typer.Option(
            help="preempt its interactive jobs whose GPUs sit idle this long (e.g. 30m) while others wait;"
            " warned at half [default: never]"
        ),
    ] = None,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Create or change a project. Every setting is replaced: one left out gets its default."""
    timeout_s = None if idle_timeout is None else parse_duration(idle_timeout)
    with client(url) as c:
        project = c.set_project(name, quota, limit, weight, timeout_s)
    if output is Output.JSON:
        print_json(project)
        return
    console.print(
        f"project {name}: quota {project['quota']:g}, limit "
        f"{'none' if project['limit'] is None else format(project['limit'], 'g')}, weight "
        f"{project['weight']:g}, idle timeout {_idle(project)}; fair share now {project['fair_share']:g} GPUs"
    )


@project_app.command("delete")
def delete_project(name: str, url: UrlOpt = "http://127.0.0.1:7070") -> None:
    """Remove a project (refused while it has pending or running jobs)."""
    with client(url) as c:
        c.delete_project(name)
    console.print(f"project {name} deleted")


def projects_table(listing: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    # SHARE: fair share; HELD: GPUs held now; RECENT: held on average lately; PENDING: GPUs (jobs) waiting
    # IDLE: the idle timeout after which its idle interactive jobs are preempted while others wait
    columns = ("PROJECT", "QUOTA", "LIMIT", "WEIGHT", "SHARE", "HELD", "BORROWED", "RECENT", "PENDING", "IDLE")
    for column in columns:
        table.add_column(column, justify="left" if column == "PROJECT" else "right")
    for p in listing:
        limit = "-" if p["limit"] is None else f"{p['limit']:g}"
        pending = f"{p['pending']:g} ({p['pending_jobs']})" if p["pending_jobs"] else "-"
        table.add_row(
            p["name"],
            f"{p['quota']:g}",
            limit,
            f"{p['weight']:g}",
            f"{p['fair_share']:.1f}",
            f"{p['allocated']:g}",
            f"{p['borrowed']:g}" if p["borrowed"] else "-",
            f"{p['recent_usage']:.1f}",
            pending,
            _idle(p) if p.get("idle_timeout_s") else "-",
        )
    return table


def _idle(project: dict[str, Any]) -> str:
    seconds = project.get("idle_timeout_s")
    return "never" if seconds is None else span(int(seconds))
