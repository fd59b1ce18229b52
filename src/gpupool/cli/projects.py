"""Project commands: `gpupool projects`, `gpupool project set|delete|add-member|remove-member|members`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupool.cli.common import Output, client, console, print_json
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.render import span
from gpupool.cli.tables import Col, Listing
from gpupool.domain.durations import parse_duration
from gpupool.domain.model_quotas import flag, parse_figures
from gpupool.domain.permissions import ProjectRole
from gpupool.domain.power import parse_mode
from gpupool.domain.projects import parse_user_limits

project_app = typer.Typer(
    help="Set up or remove a project (queue): quota, limit, weight, and who may submit to it.", no_args_is_help=True
)


def projects(url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """Projects with their quota, limit, weight, fair share and what they hold and wait for."""
    with client(url) as c:
        listing = c.projects()
    if output is Output.JSON:
        print_json(nested(listing))
        return
    console.print(projects_table(listing))
    for p in listing:  # only where an admin set them: the table stays as it was without
        if limits := _user_limits(p):
            console.print(f"project {p['name']}: {limits.removesuffix(', ')}")
    if any(p.get("users") for p in listing):
        console.print()
        console.print(users_table(listing))


@project_app.command("set")
def set_project(
    name: str,
    quota: Annotated[
        str, typer.Option(help="GPUs guaranteed to the project: a total (8), per GPU model (H100=8,A100=16), or both")
    ] = "0",
    limit: Annotated[
        str | None,
        typer.Option(help="most GPUs it may hold, borrowing included: a total, per GPU model (H100=12), or both"),
    ] = None,
    weight: Annotated[float, typer.Option(help="its part of the GPUs beyond all quotas")] = 1.0,
    idle_timeout: Annotated[
        str | None,
        typer.Option(
            help="preempt its interactive jobs whose GPUs sit idle this long (e.g. 30m) while others wait;"
            " warned at half [default: never]"
        ),
    ] = None,
    gpu_power: Annotated[
        str | None,
        typer.Option(
            help="its jobs' GPU power when they name none: max, efficient or a limit such as 400W [default: max]"
        ),
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option(help="the unit above it, whose quota holds its quota; '' or none for none [default: as it was]"),
    ] = None,
    user_limit: Annotated[
        list[str] | None,
        typer.Option(
            help="GPUs one user's jobs may hold here at once (4), or one user's (ann=8); again for more users;"
            " none: no limit [default: none]"
        ),
    ] = None,
    lend_limit: Annotated[
        float | None,
        typer.Option(help="most GPUs of its unused quota lent to others; the rest stays idle for it [default: all]"),
    ] = None,
    everyone: Annotated[
        bool | None,
        typer.Option(
            "--everyone/--members-only",
            help="every user may submit here, or only its members [default: as it was; a new project:"
            " members only, default: everyone]",
        ),
    ] = None,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Create or change a project (admins). Every setting is replaced (one left out gets its
    default) but who may submit and its parent, which stay as they were unless given."""
    timeout_s = None if idle_timeout is None else parse_duration(idle_timeout)
    mode = None if gpu_power is None else parse_mode(gpu_power).text  # refused here, before anything is sent
    per_user_default, per_user = parse_user_limits(user_limit or [])
    total, quotas = parse_figures("quota", quota)
    cap, limits = (None, {}) if limit is None else parse_figures("limit", limit)
    with client(url) as c:
        above = None if parent is None else "" if parent.strip().lower() in ("", "none") else parent
        given = sum(quotas.values()) if total is None else total
        per_model = {"quota_by_model": quotas, "limit_by_model": limits}
        settings = (per_user_default, per_user, lend_limit, per_model)
        project = c.set_project(name, given, cap, weight, timeout_s, everyone, mode, above, *settings)
    if output is Output.JSON:
        print_json(project)
        return
    console.print(
        f"project {name}{_under(project)}: quota {project['quota']:g}{_lends(project)}, limit "
        f"{'none' if project['limit'] is None else format(project['limit'], 'g')}, weight "
        f"{project['weight']:g}, idle timeout {_idle(project)}, GPU power {project.get('gpu_power') or 'max'}, "
        f"{_user_limits(project)}{'open to everyone' if project['everyone'] else 'members only'}{_per_model(project)}; "
        f"fair share now {project['fair_share']:g} GPUs"
    )
    if not project["everyone"]:
        console.print(f"add who may submit here with: gpupool project add-member {name} USER")


def _per_model(project: dict[str, Any]) -> str:
    """``, per model quota H100=8, limit H100=12``: the per-GPU-model figures, where set."""
    quotas, limits = project.get("quota_by_model") or {}, project.get("limit_by_model") or {}
    said = [f"quota {flag(quotas)}"] * bool(quotas) + [f"limit {flag(limits)}"] * bool(limits)
    return f", per model {', '.join(said)}" if said else ""


@project_app.command("delete")
def delete_project(name: str, url: UrlOpt = "http://127.0.0.1:7070") -> None:
    """Remove a project (refused while it has pending or running jobs)."""
    with client(url) as c:
        c.delete_project(name)
    console.print(f"project {name} deleted")


@project_app.command("add-member")
def add_member(
    project: str,
    user: str,
    role: Annotated[
        ProjectRole, typer.Option(help="member: submits and acts on own jobs; manager: on every job of the project")
    ] = ProjectRole.MEMBER,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Let USER submit to PROJECT (admins); again with another --role to change theirs."""
    with client(url) as c:
        member = c.add_member(project, user, role.value)
    if output is Output.JSON:
        print_json(member)
        return
    console.print(f"{user} is a {member['role']} of project {project}")


@project_app.command("remove-member")
def remove_member(project: str, user: str, url: UrlOpt = "http://127.0.0.1:7070") -> None:
    """USER submits no more to PROJECT (admins); their jobs there go on."""
    with client(url) as c:
        c.remove_member(project, user)
    console.print(f"{user} is no longer a member of project {project}")


@project_app.command("members")
def members(project: str, url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """Who belongs to PROJECT, and as what."""
    with client(url) as c:
        listing = c.members(project)
    if output is Output.JSON:
        print_json(listing)
        return
    if not listing:
        console.print(f"project {project} has no members; add one with gpupool project add-member {project} USER")
        return
    table = Listing((Col("USER"), Col("ROLE"), Col("SINCE")))
    for m in listing:
        table.add_row(m["user"], m["role"], m["created_at"][:19].replace("T", " "))
    console.print(table)


# SHARE: fair share; HELD: GPUs held now; RECENT: held on average lately; PENDING: GPUs (jobs) waiting
# IDLE: the idle timeout after which its idle interactive jobs are preempted while others wait.
# At a narrow width the figures one reads least go first: RECENT, WEIGHT, IDLE, BORROWED.
PROJECT_COLUMNS = (
    Col("PROJECT"),
    Col("QUOTA", justify="right"),
    Col("LIMIT", justify="right"),
    Col("WEIGHT", justify="right", drop=3),
    Col("SHARE", justify="right"),
    Col("HELD", justify="right"),
    Col("BORROWED", justify="right", drop=1),
    Col("RECENT", justify="right", drop=4),
    Col("PENDING", justify="right"),
    Col("IDLE", justify="right", drop=2),
)
USER_COLUMNS = (
    Col("PROJECT"),
    Col("USER"),
    Col("HELD", justify="right"),
    Col("RECENT", justify="right", drop=1),
    Col("PENDING", justify="right"),
)


def projects_table(listing: list[dict[str, Any]]) -> Listing:
    """One row a project; in a tree (issue 34) each unit before its children, indented by depth."""
    table = Listing(PROJECT_COLUMNS)
    for depth, p in _depth_first(listing):
        limit = "-" if p["limit"] is None else f"{p['limit']:g}"
        if p.get("limit_by_model"):  # per GPU model (issue 34 item 2), beside the total
            limit += f" ({flag(p['limit_by_model'])})"
        quota = f"{p['quota']:g}" + (f" ({flag(p['quota_by_model'])})" if p.get("quota_by_model") else "")
        pending = f"{p['pending']:g} ({p['pending_jobs']})" if p["pending_jobs"] else "-"
        table.add_row(
            "  " * depth + p["name"],
            f"{quota}{_lends(p, short=True)}",
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


def nested(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The projects as a tree for ``-o json``: the root's children, each with every field the
    API gives and ``children`` (empty for a leaf), so a flat cluster lists as before."""
    nodes = {p["name"]: {**p, "children": []} for p in listing}
    tops: list[dict[str, Any]] = []
    for p in listing:
        above = nodes.get(p.get("parent") or "")
        (tops if above is None else above["children"]).append(nodes[p["name"]])
    return tops


def _depth_first(listing: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    order: list[tuple[int, dict[str, Any]]] = []
    todo = [(0, p) for p in reversed(nested(listing))]
    while todo:
        depth, p = todo.pop()
        order.append((depth, p))
        todo.extend((depth + 1, c) for c in reversed(p["children"]))
    return order


def _lends(project: dict[str, Any], short: bool = False) -> str:
    """Its lend limit beside its quota, where one is set (issue 34): a cluster that sets none lists as before."""
    lends = project.get("lend_limit")
    if lends is None:
        return ""
    return f" (lend {lends:g})" if short else f" (lends at most {lends:g} of it)"


def _under(project: dict[str, Any]) -> str:
    return f" (under {project['parent']})" if project.get("parent") else ""


def users_table(listing: list[dict[str, Any]]) -> Listing:
    """Each project's users, least load first: within a priority class, their jobs go in this order."""
    table = Listing(USER_COLUMNS)
    for p in listing:
        for u in p.get("users", []):
            pending = f"{u['pending']:g} ({u['pending_jobs']})" if u["pending_jobs"] else "-"
            table.add_row(p["name"], u["user"], f"{u['allocated']:g}", f"{u['recent_usage']:.1f}", pending)
    return table


def _idle(project: dict[str, Any]) -> str:
    seconds = project.get("idle_timeout_s")
    return "never" if seconds is None else span(int(seconds))


def _user_limits(project: dict[str, Any]) -> str:
    """The user limits as ``--user-limit`` takes them ("user limit 4, ann=8, "); "" where there are none."""
    default, per_user = project.get("user_limit"), project.get("user_limits") or {}
    if default is None and not per_user:
        return ""
    each = ["none" if default is None else f"{default:g}"]
    each += [f"{user}={'none' if value is None else format(value, 'g')}" for user, value in sorted(per_user.items())]
    return f"user limit {', '.join(each)}, "
