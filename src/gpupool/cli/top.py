"""`gpupool top`: the cluster-wide nvitop, a live view of every node and GPU — utilisation,
memory, temperature, power, and the job and user on each GPU.

Head calls make one snapshot: the nodes listing (each GPU's jobs), the active jobs (their names
and owners), the latest reading of every GPU, the idle GPUs, the alerts and the services (their
replicas and the gateway's load figures). ``snapshot`` joins them into plain data
(what ``-o json`` prints) and ``top_view`` draws that data, so both are testable without a head.
A reading older than ``STALE`` (its node stopped answering) or of a node that is down counts as
no reading: it shows "-" rather than numbers that are no longer true.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from gpupool.cli.common import Output, client, console, print_json
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.render import STATE_STYLE, span
from gpupool.cli.service_load import services_table
from gpupool.cli.tables import Col, Listing
from gpupool.client import ClientError, HeadUnreachable
from gpupool.domain.nodes import NodeState

if TYPE_CHECKING:
    from gpupool.client import GpupoolClient

STALE = "1m"  # readings older than this are not shown (the head samples every few seconds)
BAR_WIDTH = 10
_NO_TERMINAL_WIDTH = 160  # --once into a pipe or file: room for every column, unless COLUMNS says otherwise


def top(
    once: Annotated[bool, typer.Option("--once", help="print one snapshot and exit (for scripts)")] = False,
    interval: Annotated[float, typer.Option(help="seconds between refreshes of the live view", min=0.1)] = 2.0,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Every node and GPU, live: utilisation, memory, temperature, power, and the job and user on
    each GPU (Ctrl-C to quit). -o json prints one snapshot as JSON."""
    with client(url) as c:
        if output is Output.JSON:
            print_json(fetch(c))
        elif once:
            width = None if console.is_terminal or os.environ.get("COLUMNS") else _NO_TERMINAL_WIDTH
            console.print(top_view(fetch(c)), width=width)
        else:
            _live(c, interval)


def fetch(c: GpupoolClient) -> dict[str, Any]:
    """One snapshot of the cluster from the head."""
    nodes = c.nodes()
    jobs = c.jobs()
    samples = c.latest_telemetry(since=STALE)
    snap = snapshot(nodes, jobs, samples, datetime.now(UTC), c.idle_gpus(), c.alerts())
    snap["services"] = _services(c)
    return snap


def _services(c: GpupoolClient) -> list[dict[str, Any]]:
    """Each service with its replica counts and load; none from a head without services (404)."""
    try:
        listing = c.services()
    except ClientError as e:
        if e.status == 404:
            return []
        raise
    keys = ("name", "project", "state", "replicas", "load")
    return [{k: s.get(k) for k in keys} for s in listing]


def snapshot(
    nodes: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    now: datetime,
    idle: list[dict[str, Any]] | None = None,
    alerts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Join the nodes listing, the jobs listing, the latest readings, the idle GPUs and the active
    alerts into one snapshot: ``{"time", "totals", "nodes": [{"name", "state", "simulated",
    "gpus": [...]}], "alerts": [...]}``; a GPU without a current reading has null readings and
    ``sampled_at``, one that is not idle a null ``idle_for_s``."""
    by_id = {int(j["id"]): j for j in jobs}
    readings = {(str(s["node"]), int(s["gpu"])): s for s in samples}
    idle_for = {(str(g["node"]), int(g["gpu"])): float(g["idle_for_s"]) for g in idle or []}
    out_nodes: list[dict[str, Any]] = []
    for n in nodes:
        gpus = []
        for g in n["gpus"]:
            s = readings.get((n["name"], g["index"])) if n["state"] != NodeState.DOWN else None
            gpus.append(
                {
                    "index": g["index"],
                    "uuid": g["uuid"],
                    "model": g["model"],
                    "simulated": g["simulated"],
                    "healthy": g.get("healthy", True),
                    "disabled": g.get("disabled", False),
                    "utilization_pct": None if s is None else s["utilization_pct"],
                    "memory_used_mib": None if s is None else s["memory_used_mib"],
                    "memory_total_mib": g["memory_mib"] if s is None else s["memory_total_mib"],
                    "temperature_c": None if s is None else s["temperature_c"],
                    "power_w": None if s is None else s["power_w"],
                    "power_limit_w": None if s is None else s.get("power_limit_w"),
                    "sampled_at": None if s is None else s["time"],
                    "jobs": [_job(job_id, by_id.get(job_id)) for job_id in g["jobs"]],
                    "idle_for_s": idle_for.get((n["name"], g["index"])),
                }
            )
        out_nodes.append({"name": n["name"], "state": n["state"], "simulated": n["simulated"], "gpus": gpus})
    active = [{k: a[k] for k in ("kind", "node", "gpu", "job_id", "message", "raised_at")} for a in alerts or []]
    return {"time": now.isoformat(), "totals": _totals(out_nodes), "nodes": out_nodes, "alerts": active}


def _job(job_id: int, job: dict[str, Any] | None) -> dict[str, Any]:
    """A job on a GPU; name and user are null when the jobs listing no longer has it (it just ended).
    Its memory (MiB) and CPU (100 = one core) are its workers' together, from their cgroups; null
    where none was read."""
    usage = [] if job is None else job.get("usage") or []
    memory = [u["memory_mib"] for u in usage if u["memory_mib"] is not None]
    cpu = [u["cpu_pct"] for u in usage if u["cpu_pct"] is not None]
    return {
        "id": job_id,
        "name": None if job is None else job["name"],
        "user": None if job is None else job["owner"],
        "memory_mib": sum(memory) if memory else None,
        "cpu_pct": round(sum(cpu), 1) if cpu else None,
    }


def _totals(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    gpus = [g for n in nodes for g in n["gpus"]]
    utils = [g["utilization_pct"] for g in gpus if g["utilization_pct"] is not None]
    powers = [g["power_w"] for g in gpus if g["power_w"] is not None]
    return {
        "nodes": len(nodes),
        "nodes_up": sum(1 for n in nodes if n["state"] != NodeState.DOWN),
        "gpus": len(gpus),
        "gpus_allocated": sum(1 for g in gpus if g["jobs"]),
        "gpus_idle": sum(1 for g in gpus if g["idle_for_s"] is not None),
        "gpus_sampled": sum(1 for g in gpus if g["sampled_at"] is not None),
        "mean_utilization_pct": round(sum(utils) / len(utils), 1) if utils else None,
        "power_w": round(sum(powers), 1) if powers else None,
    }


def top_view(snap: dict[str, Any]) -> RenderableType:
    """The header line of totals, then one table: a row per GPU, grouped by node; then the
    services and their load, where there are any."""
    alerts = [Text(f"! {a['message']}", style="red") for a in snap.get("alerts", [])[:5]]
    services = snap.get("services") or []
    below: list[RenderableType] = [Text(""), services_table(services)] if services else []
    return Group(header(snap), gpu_table(snap["nodes"]), *below, *alerts)


def header(snap: dict[str, Any]) -> Text:
    t = snap["totals"]
    simulated = any(n["simulated"] for n in snap["nodes"])
    mean = "-" if t["mean_utilization_pct"] is None else f"{t['mean_utilization_pct']:.0f}%"
    power = "-" if t["power_w"] is None else f"{t['power_w']:.0f} W"
    up = _count(t["nodes"], "node") + ("" if t["nodes_up"] == t["nodes"] else f" ({t['nodes_up']} up)")
    text = Text("gpupool top", style="bold")
    text.append(f" · {up} · {_count(t['gpus'], 'GPU')}{' (simulated)' if simulated else ''} · ")
    text.append(f"{t['gpus_allocated']} allocated", style="bold")
    if t.get("gpus_idle"):
        text.append(f" ({t['gpus_idle']} idle)", style="yellow")
    text.append(f" · mean utilisation {mean} · power {power}")
    if snap.get("alerts"):
        text.append(f" · {_count(len(snap['alerts']), 'alert')}", style="bold red")
    text.append(f" · {_clock(snap['time'])}", style="dim")
    return text


# At a narrow width power, temperature, the job's own use, the model and the job's name go first
# (alerts say when a GPU runs hot); node, GPU, utilisation, memory and whose job it is stay.
GPU_COLUMNS = (
    Col("NODE"),
    Col("GPU", justify="right"),
    Col("MODEL", wrap=True, drop=2),
    Col("UTIL"),
    Col("MEMORY", justify="right"),
    Col("TEMP", justify="right", drop=4),
    Col("POWER", justify="right", drop=5),
    Col("LIMIT", justify="right", drop=6),  # the GPU's power limit, beside its draw (issue 33)
    Col("JOB", justify="right"),
    Col("USER", wrap=True),
    Col("NAME", wrap=True, drop=1),
    Col("USE", justify="right", drop=3),  # the job's, from its workers' cgroups
)


def gpu_table(nodes: list[dict[str, Any]]) -> Listing:
    table = Listing(GPU_COLUMNS)
    for n in nodes:
        name = Text(n["name"], style="bold")
        if n["state"] != NodeState.UP:
            name.append(f" ({n['state']})", style=STATE_STYLE.get(n["state"], ""))
        if not n["gpus"]:
            table.add_row(name, "-", "no GPU", *["" for _ in range(9)])
        for i, g in enumerate(n["gpus"]):
            table.add_row(
                name if i == 0 else "",
                str(g["index"]),
                _model(g),
                util_bar(g["utilization_pct"]),
                memory_text(g["memory_used_mib"], g["memory_total_mib"]),
                "-" if g["temperature_c"] is None else f"{g['temperature_c']:.0f}°C",
                "-" if g["power_w"] is None else f"{g['power_w']:.0f}W",
                "-" if g.get("power_limit_w") is None else f"{g['power_limit_w']:.0f}W",
                ",".join(str(j["id"]) for j in g["jobs"]) or "-",
                ",".join(j["user"] or "?" for j in g["jobs"]),
                _names(g),
                ",".join(_use(j) for j in g["jobs"]),
            )
    return table


def _use(job: dict[str, Any]) -> str:
    cpu = "-" if job["cpu_pct"] is None else f"{job['cpu_pct']:.0f}%"
    memory = "-" if job["memory_mib"] is None else _mib(job["memory_mib"])
    return f"{cpu} {memory}"


def _mib(mib: int) -> str:
    return f"{mib / 1024:.1f}G" if mib >= 1024 else f"{mib}M"


def _names(gpu: dict[str, Any]) -> Text:
    text = Text(",".join(j["name"] or "?" for j in gpu["jobs"]))
    if gpu.get("idle_for_s") is not None:
        text.append(f" idle {span(int(gpu['idle_for_s']))}", style="yellow")
    return text


def util_bar(pct: float | None, width: int = BAR_WIDTH) -> Text:
    """``█████░░░░░  52%``; "-" without a reading."""
    if pct is None:
        return Text("-")
    clamped = min(max(pct, 0.0), 100.0)
    filled = round(clamped / 100.0 * width)
    style = "green" if clamped < 50 else "yellow" if clamped < 80 else "red"
    text = Text("█" * filled, style=style)
    text.append("░" * (width - filled), style="dim")
    text.append(f" {clamped:3.0f}%")
    return text


def memory_text(used_mib: int | None, total_mib: int) -> str:
    """Used / total in GiB: ``39.1/80.0G``; ``-/80.0G`` without a reading."""
    used = "-" if used_mib is None else f"{used_mib / 1024:.1f}"
    return f"{used}/{total_mib / 1024:.1f}G"


def _model(gpu: dict[str, Any]) -> Text:
    text = Text(gpu["model"])
    if gpu["simulated"] and "simulated" not in gpu["model"].lower():
        text.append(" simulated", style="dim")
    if gpu["disabled"]:
        text.append(" (disabled)", style="magenta")
    elif not gpu["healthy"]:
        text.append(" (unhealthy)", style="red")
    return text


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _clock(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone().strftime("%H:%M:%S")


def _live(c: GpupoolClient, interval: float) -> None:
    """Redraw every ``interval`` seconds until Ctrl-C; a failed refresh keeps the last view and says why."""
    view = top_view(fetch(c))
    try:
        with Live(view, console=console.real(), auto_refresh=False, transient=False) as live:
            while True:
                time.sleep(interval)
                try:
                    view = top_view(fetch(c))
                    live.update(view, refresh=True)
                except (ClientError, HeadUnreachable) as exc:
                    problem = Text(f"refresh failed, showing the last snapshot: {exc}", style="red")
                    live.update(Group(problem, view), refresh=True)
    except KeyboardInterrupt:
        return
