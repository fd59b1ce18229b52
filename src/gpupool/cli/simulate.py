"""``gpupool simulate``: replay a job trace through the real scheduler on a virtual clock."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpupool.cli.common import Output, OutputOpt, console, print_json
from gpupool.domain.errors import InvalidInput
from gpupool.scheduler import SchedulerConfig, registry
from gpupool.sim import cluster as sim_cluster
from gpupool.sim.engine import simulate as run
from gpupool.sim.metrics import summarize
from gpupool.sim.trace import fit_to_nodes, load

POLICIES = {
    "default": SchedulerConfig(),
    "greedy": SchedulerConfig(actions=("allocate",)),
    "fifo": SchedulerConfig(actions=("allocate",), strict=True, fair_share=False, job_order="fifo"),
    "fifo-isolated": SchedulerConfig(actions=("allocate",), strict=True, isolated=True, job_order="fifo"),
}


def simulate(
    trace: Path,
    format: Annotated[str, typer.Option("--format", help="auto, gpupool or philly")] = "auto",
    nodes: Annotated[int | None, typer.Option(help="cluster size (with --gpus-per-node)")] = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    gpu_model: Annotated[str, typer.Option(help="GPU model of a uniform cluster")] = "GPU",
    cluster: Annotated[Path | None, typer.Option(help="nodes CSV: name,gpus,gpu_model[,cpus,memory_mib]")] = None,
    projects: Annotated[Path | None, typer.Option(help="projects CSV: name,quota[,limit,weight]")] = None,
    policy: Annotated[str, typer.Option(help="default (quotas, backfill, reclaim), greedy or fifo")] = "default",
    placement: Annotated[str, typer.Option(help="binpack, spread or topology")] = "binpack",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Replay TRACE through the same scheduler the head runs, and report queueing and utilisation."""
    if policy not in POLICIES:
        raise InvalidInput(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
    registry.placement(placement)
    if cluster is not None:
        node_list = sim_cluster.load_cluster(cluster)
    elif nodes is not None:
        node_list = sim_cluster.uniform(nodes, gpus_per_node, gpu_model)
    else:
        raise InvalidInput("give the cluster: --nodes N [--gpus-per-node G] or --cluster NODES.csv")
    project_list = sim_cluster.load_projects(projects) if projects else []
    jobs = fit_to_nodes(load(trace, format), max(len(n.gpus) for n in node_list))
    started = time.perf_counter()
    result = run(jobs, node_list, project_list, replace(POLICIES[policy], placement=placement))
    figures = summarize(result, time.perf_counter() - started)
    if output is Output.JSON:
        print_json(figures)
        return
    table = Table(
        box=None,
        header_style="bold",
        pad_edge=False,
        title=f"{trace.name}: {policy} policy, {len(node_list)} nodes, {result.capacity} GPUs",
        title_justify="left",
    )
    table.add_column("FIGURE")
    table.add_column("VALUE", justify="right")
    for key, value in figures.items():
        if key == "placed":
            continue
        text = (
            f"{value:.3f}"
            if isinstance(value, float) and ("utilization" in key or key in ("fairness",) or "allocation" in key)
            else (f"{value:,.1f}" if isinstance(value, float) else f"{value:,}")
        )
        table.add_row(key, text)
    console.print(table)
