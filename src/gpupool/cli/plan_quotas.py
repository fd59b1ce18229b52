"""``gpupool plan --quotas``: the quotas that would have kept every project's and unit's p95 queue
time within the target on a fixed cluster (issue 34 item 7; the search is ``sim/quota_plan.py``).
Its options live here, as ``simulate_power``'s do, so that ``plan`` stays one command."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli.common import Output, console, print_json
from gpupool.cli.tables import Col, Listing
from gpupool.domain.errors import InvalidInput
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig
from gpupool.sim import cluster as sim_cluster
from gpupool.sim.quota_plan import QuotaPlan, plan_quotas
from gpupool.sim.trace_job import TraceJob

QuotasOpt = Annotated[
    bool,
    typer.Option(
        "--quotas",
        help="instead of sizing the cluster, find the projects file's quotas (with --nodes or --cluster) that"
        " keep every project's and unit's p95 queue time within the target",
    ),
]
NodesOpt = Annotated[int | None, typer.Option(help="with --quotas: the cluster's size (with --gpus-per-node)")]
ClusterOpt = Annotated[Path | None, typer.Option(help="with --quotas: the cluster as a nodes CSV, as simulate takes")]
MaxReplaysOpt = Annotated[int, typer.Option(help="with --quotas: replay no more often than this")]
WriteProjectsOpt = Annotated[
    Path | None, typer.Option(help="with --quotas: write the proposed projects file here (when the target is met)")
]


def fixed_cluster(
    quotas: bool,
    projects: Path | None,
    nodes: int | None,
    cluster: Path | None,
    write_projects: Path | None,
    gpus_per_node: int,
    gpu_model: str,
    alone: bool,
) -> list[Node]:
    """The cluster ``--quotas`` replays (empty without ``--quotas``), its options checked before
    the trace is read. ``alone``: none of the node search's own options (--report, --power-*)."""
    if not quotas:
        if (nodes, cluster, write_projects) != (None, None, None):
            raise InvalidInput(
                "--nodes, --cluster and --write-projects go with --quotas (plan sizes the cluster without)"
            )
        return []
    if not alone:
        raise InvalidInput("--quotas replays one given cluster: --report and --power-* go with the node search")
    if projects is None or (nodes is None) == (cluster is None):
        raise InvalidInput("--quotas needs --projects and one cluster: --nodes N [--gpus-per-node G] or --cluster")
    return sim_cluster.load_cluster(cluster) if cluster else sim_cluster.uniform(nodes or 0, gpus_per_node, gpu_model)


def run(
    jobs: Sequence[TraceJob],
    projects: Sequence[Project],
    config: SchedulerConfig,
    nodes: Sequence[Node],
    target_s: float,
    max_replays: int,
    write_projects: Path | None,
    output: Output,
    title: str,
) -> None:
    """Search, show the proposal beside the file's quotas, and exit 1 when the target is missed."""
    if max_replays < 1:
        raise InvalidInput("--max-replays must be >= 1")
    with console.status("planning quotas…", spinner="dots") as status:
        found = plan_quotas(jobs, nodes, projects, config, target_s, max_replays, status.update)
    if write_projects is not None and found.met:
        sim_cluster.write_projects(write_projects, found.projects)
    if output is Output.JSON:
        print_json(_json(found, target_s, sum(len(n.gpus) for n in nodes)))
    else:
        console.print(_table(found, title))
        if found.met:
            console.print(
                f"every project's and unit's p95 queue time ≤ {human_seconds(target_s)} ({found.replays} replays)"
            )
            if write_projects is not None:
                console.print(f"proposed projects file: {write_projects}")
    if not found.met:
        typer.echo(
            f"no quotas meet a p95 queue time of {human_seconds(target_s)} on this cluster: {found.why}", err=True
        )
        raise typer.Exit(1)


def _json(found: QuotaPlan, target_s: float, gpus: int) -> dict[str, Any]:
    return {
        "target_queue_p95_s": target_s,
        "gpus": gpus,
        "met": found.met,
        "replays": found.replays,
        "why": found.why,
        "projects": [
            {
                "name": r.name,
                "parent": r.parent,
                "unit": r.unit,
                "quota": r.quota,
                "proposed_quota": r.proposed,
                "p95_queue_s_before": _finite(r.p95_before_s),
                "p95_queue_s_after": _finite(r.p95_after_s),
                "meets": r.meets,
            }
            for r in found.rows
        ],
    }


def _table(found: QuotaPlan, title: str) -> Listing:
    columns = [Col("PROJECT"), Col("PARENT"), *(Col(c, justify="right") for c in ("QUOTA", "PROPOSED"))]
    waits = [Col("P95 BEFORE", justify="right"), Col("P95 AFTER", justify="right")]
    table = Listing([*columns, *waits, Col("MEETS")], title=title)
    for r in found.rows:
        changed = f"{r.proposed:g}" if r.proposed != r.quota else "="
        table.add_row(
            f"{r.name} (unit)" if r.unit else r.name,
            r.parent or "—",
            f"{r.quota:g}",
            changed,
            _wait(r.p95_before_s),
            _wait(r.p95_after_s),
            "yes" if r.meets else "no",
        )
    return table


def _finite(seconds: float | None) -> float | None:
    """None in JSON for "no jobs" and for "some never started" alike; ``meets`` tells them apart."""
    return None if seconds is None or math.isinf(seconds) else seconds


def _wait(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return "never started" if math.isinf(seconds) else human_seconds(seconds)


def human_seconds(seconds: float) -> str:
    """30s, 12.5m, 1.0h, 2.3d: how plan and simulate show a wait."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f}{unit}"
    return f"{seconds:,.0f}s"
