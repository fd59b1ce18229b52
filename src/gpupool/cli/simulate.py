"""``gpupool simulate``: replay a job trace through the real scheduler on a virtual clock."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from gpupool.cli import plan_quotas
from gpupool.cli import simulate_elastic as elastic_opts
from gpupool.cli import simulate_power as power_opts
from gpupool.cli.common import Output, console, print_json
from gpupool.cli.opts import OutputOpt
from gpupool.cli.plan_quotas import human_seconds
from gpupool.cli.render import bounded_duration
from gpupool.cli.tables import Col, Listing
from gpupool.domain.durations import parse_duration
from gpupool.domain.errors import InvalidInput
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig, registry
from gpupool.scheduler.config import MAX_RECLAIM_MIN_RUN_S, MAX_WAIT_BOUND_S
from gpupool.scheduler.policies import POLICIES, preset
from gpupool.sim import cluster as sim_cluster
from gpupool.sim.cluster import uniform
from gpupool.sim.elastic import DEFAULT_ALPHA
from gpupool.sim.engine import SimResult
from gpupool.sim.engine import simulate as replay
from gpupool.sim.metrics import summarize
from gpupool.sim.plan import search
from gpupool.sim.power import PowerConfig
from gpupool.sim.trace import TraceJob, fit_to_nodes, load
from gpupool.sim.workload import Window, scale_load, shuffle_arrivals

FORMATS = "auto, gpupool, philly, itp, openb or tiresias"

FormatOpt = Annotated[str, typer.Option("--format", help=FORMATS)]
ProjectsOpt = Annotated[
    Path | None,
    typer.Option(help="projects CSV: name,quota[,limit,weight,parent] (or Helios' vc,node num[,parent])"),
]
PlacementOpt = Annotated[str, typer.Option(help="frag (fragmentation-aware, the default), binpack, spread or topology")]
WindowOpt = Annotated[
    str | None, typer.Option(help="START,END: durations after the first submission (0,7d) or dates (2017-10-01,)")
]
ScaleOpt = Annotated[float, typer.Option(help="arrival rate multiplied by this (2: twice the load)")]
GpusPerNodeOpt = Annotated[int, typer.Option(help="GPUs per node")]
PartitionOpt = Annotated[
    str | None,
    typer.Option(help="fifo-isolated confines a project to: nodes (its own, sized by its quota; the default) or gpus"),
]
SeedOpt = Annotated[int | None, typer.Option(help="shuffle simultaneous arrivals (a placement study's order)")]
ReclaimMinRunOpt = Annotated[
    str, typer.Option(help="a job that borrowed beyond its quota runs this long before reclaim stops it (0 to 1d)")
]
MaxWaitOpt = Annotated[str, typer.Option(help="as gpupool up --max-wait: a job that waited this long goes first")]


@dataclass(frozen=True, slots=True)
class Study:
    """A trace shaped for replay and the policies to replay it under."""

    jobs: list[TraceJob]
    projects: list[Project]
    policies: dict[str, SchedulerConfig]
    elastic_alpha: float = DEFAULT_ALPHA  # the exponent of an elastic job's speed model (sim/elastic.py)

    @classmethod
    def prepare(
        cls,
        trace: Path,
        fmt: str,
        policy: str,
        placement: str,
        projects: Path | None,
        window: str | None,
        scale: float,
        seed: int | None,
        gpus_per_node: int,
        partition: str | None = None,
        reclaim_min_run: str = "0s",
        max_wait: str = "0s",
        models: Iterable[str] | None = None,
    ) -> Study:
        """Everything checked before any replay starts, so bad input costs no waiting. ``models``:
        the replayed cluster's GPU models, which the projects file's per-model figures must name."""
        names = policy_names(policy, placement, partition)
        min_run_s = bounded_duration("--reclaim-min-run", reclaim_min_run, 0, MAX_RECLAIM_MIN_RUN_S)
        max_wait_s = bounded_duration("--max-wait", max_wait, 0, MAX_WAIT_BOUND_S)
        parsed = Window.parse(window) if window else None
        project_list = sim_cluster.load_projects(projects, gpus_per_node, models) if projects else []
        jobs = scale_load(load(trace, fmt, parsed), scale)
        sim_cluster.check_leaves(project_list, (j.spec.project for j in jobs))
        if seed is not None:
            jobs = shuffle_arrivals(jobs, seed)
        configs = {
            n: replace(_config(n, placement, partition), reclaim_min_run_s=min_run_s, max_wait_s=max_wait_s)
            for n in dict.fromkeys(names)
        }
        return cls(fit_to_nodes(jobs, gpus_per_node), project_list, configs)

    def run(self, nodes: list[Node], policy: str, power: PowerConfig | None = None) -> tuple[SimResult, dict[str, Any]]:
        started = time.perf_counter()
        result = replay(
            self.jobs, nodes, self.projects, self.policies[policy], power=power, elastic_alpha=self.elastic_alpha
        )
        return result, summarize(result, time.perf_counter() - started)


def policy_names(policy: str, placement: str, partition: str | None = None) -> list[str]:
    names = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise InvalidInput(f"unknown policy {','.join(unknown) or policy!r}: use one of {', '.join(POLICIES)}")
    registry.placement(placement)
    for name in names:
        _config(name, placement, partition)
    return names


def _config(name: str, placement: str, partition: str | None) -> SchedulerConfig:
    """``--partition`` applies to the policies that isolate projects, so that one run can compare
    them with the others (``simulate`` refuses it where none of the policies isolates)."""
    isolates = POLICIES[name].quota_check == "isolated"
    return preset(name, placement=placement, partition=partition if isolates else None)


def simulate(
    trace: Path,
    format: FormatOpt = "auto",
    nodes: Annotated[int | None, typer.Option(help="cluster size (with --gpus-per-node)")] = None,
    gpus_per_node: GpusPerNodeOpt = 8,
    gpu_model: Annotated[str, typer.Option(help="GPU model of a uniform cluster")] = "GPU",
    cluster: Annotated[
        Path | None, typer.Option(help="nodes CSV: name,gpus,gpu_model[,cpus,memory_mib] or openb's node list")
    ] = None,
    projects: ProjectsOpt = None,
    policy: Annotated[
        str,
        typer.Option(
            help="default, fifo-share, fifo, fifo-isolated, greedy or srtf-oracle; several, comma-separated, to compare"
        ),
    ] = "default",
    placement: PlacementOpt = "frag",
    window: WindowOpt = None,
    scale_load: ScaleOpt = 1.0,
    seed: SeedOpt = None,
    partition: PartitionOpt = None,
    reclaim_min_run: ReclaimMinRunOpt = "0s",
    max_wait: MaxWaitOpt = "0s",
    report: Annotated[Path | None, typer.Option(help="write per-job CSV and PNG plots into this directory")] = None,
    output: OutputOpt = Output.TABLE,
    power_budget: power_opts.BudgetOpt = None,
    power_model: power_opts.ModelOpt = None,
    power_modes: power_opts.ModesOpt = None,
    power_seed: power_opts.PowerSeedOpt = 0,
    energy_price: power_opts.PriceOpt = None,
    carbon_intensity: power_opts.CarbonOpt = None,
    deferrable_until: power_opts.DeferUntilOpt = None,
    deferrable: power_opts.DeferrableOpt = 1.0,
    elastic: elastic_opts.ElasticOpt = None,
    elastic_alpha: elastic_opts.AlphaOpt = DEFAULT_ALPHA,
) -> None:
    """Replay TRACE through the same scheduler the head runs, and report queueing and utilisation
    (and with a power option, energy, peak power, money, CO2 and what a budget costs)."""
    names = policy_names(policy, placement, partition)
    fraction = elastic_opts.checked(elastic, elastic_alpha)
    if partition is not None and not any(POLICIES[n].quota_check == "isolated" for n in names):
        raise InvalidInput(f"--partition applies only to a policy that isolates projects (fifo-isolated), not {policy}")
    if cluster is not None:
        node_list = sim_cluster.load_cluster(cluster)
    elif nodes is not None:
        node_list = sim_cluster.uniform(nodes, gpus_per_node, gpu_model)
    else:
        raise InvalidInput("give the cluster: --nodes N [--gpus-per-node G] or --cluster NODES.csv")
    per_node = max(len(n.gpus) for n in node_list)
    study = Study.prepare(
        trace,
        format,
        policy,
        placement,
        projects,
        window,
        scale_load,
        seed,
        per_node,
        partition,
        reclaim_min_run,
        max_wait,
        (g.model for n in node_list for g in n.gpus),
    )
    study = replace(study, jobs=elastic_opts.apply(study.jobs, fraction), elastic_alpha=elastic_alpha)
    power_asked = (power_budget, power_model, power_modes, energy_price, carbon_intensity, deferrable_until)
    runs: dict[str, tuple[str, PowerConfig | None]] = {name: (name, None) for name in study.policies}
    if any(v is not None for v in power_asked):
        config = power_opts.power_config(
            node_list, len(study.jobs), power_budget, power_model, energy_price, carbon_intensity,
            deferrable_until, deferrable, power_seed,
        )  # fmt: skip
        study = replace(study, jobs=power_opts.with_modes(study.jobs, power_modes, power_seed))
        runs = {label: (name, c) for name in study.policies for label, c in power_opts.variants(name, config).items()}
    results: dict[str, SimResult] = {}
    figures: dict[str, dict[str, Any]] = {}
    with console.status("replaying…", spinner="dots") as status:
        for label, (name, power) in runs.items():
            status.update(f"replaying {len(study.jobs):,} jobs: {label}…")
            results[label], figures[label] = study.run(node_list, name, power)
    power_opts.compare(figures)
    if report is not None:
        from gpupool.sim.report import write_report  # matplotlib: only when asked for

        written = write_report(report, results, figures)
        if output is not Output.JSON:
            console.print(f"report: {len(written)} files in {report}")
    if output is Output.JSON:
        print_json(next(iter(figures.values())) if len(figures) == 1 else figures)
        return
    capacity = next(iter(results.values())).capacity
    console.print(_table(f"{trace.name}: {len(node_list)} nodes, {capacity} GPUs", figures))
    for name, f in figures.items():
        if name in study.policies:
            if f.get("per_unit"):
                console.print(_units_table(f"{name}: per unit", f["per_unit"]))
            console.print(_projects_table(f"{name}: per project", f["per_project"]))


def _table(title: str, figures: dict[str, dict[str, Any]]) -> Listing:
    table = Listing([Col("FIGURE"), *(Col(name.upper(), justify="right") for name in figures)], title=title)
    keys = dict.fromkeys(k for f in figures.values() for k in f)  # comparisons only some columns have
    for key in keys:
        if key not in ("placed", "per_project", "per_unit"):
            table.add_row(key, *(_cell(key, f.get(key)) for f in figures.values()))
    return table


def _projects_table(title: str, rows: dict[str, dict[str, Any]]) -> Listing:
    keys = ("jobs", "started", "completed", "avg_queue_s", "p95_queue_s", "avg_slowdown", "entitled")
    table = Listing([Col("PROJECT"), *(Col(k.upper(), justify="right") for k in keys)], title=title)
    for name, row in rows.items():
        table.add_row(name, *(_cell(k, row[k]) for k in keys))
    return table


def _units_table(title: str, rows: dict[str, dict[str, Any]]) -> Listing:
    """The units of a tree of projects (issue 34), over the jobs of every project below each."""
    keys = ("projects", "jobs", "started", "completed", "avg_queue_s", "p95_queue_s", "avg_slowdown")
    columns = [Col("UNIT"), Col("PARENT"), *(Col(k.upper(), justify="right") for k in keys)]
    table = Listing(columns, title=title)
    for name, row in rows.items():
        table.add_row(name, row["parent"] or "—", *(_cell(k, row[k]) for k in keys))
    return table


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and (
        "utilization" in key or "allocation" in key or "fairness" in key or key == "entitled" or "kw" in key
    ):
        return f"{value:.3f}"
    if isinstance(value, float) and key.endswith("_s") and key != "wall_s":
        return human_seconds(value)
    return f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"


def plan(
    trace: Path,
    target_queue_p95: Annotated[str, typer.Option(help="the p95 queue time to meet, e.g. 30m, 1h, 2d")],
    format: FormatOpt = "auto",
    gpus_per_node: GpusPerNodeOpt = 8,
    gpu_model: Annotated[str, typer.Option(help="GPU model of the nodes")] = "GPU",
    max_nodes: Annotated[int, typer.Option(help="search no further than this")] = 4096,
    projects: ProjectsOpt = None,
    policy: Annotated[str, typer.Option(help="default, fifo-share, fifo, fifo-isolated or greedy")] = "default",
    placement: PlacementOpt = "frag",
    window: WindowOpt = None,
    scale_load: ScaleOpt = 1.0,
    seed: SeedOpt = None,
    reclaim_min_run: ReclaimMinRunOpt = "0s",
    max_wait: MaxWaitOpt = "0s",
    report: Annotated[Path | None, typer.Option(help="write the curve as CSV and PNG into this directory")] = None,
    output: OutputOpt = Output.TABLE,
    power_budget: power_opts.BudgetOpt = None,
    power_model: power_opts.ModelOpt = None,
    power_modes: power_opts.ModesOpt = None,
    power_seed: power_opts.PowerSeedOpt = 0,
    quotas: plan_quotas.QuotasOpt = False,
    nodes: plan_quotas.NodesOpt = None,
    cluster: plan_quotas.ClusterOpt = None,
    max_replays: plan_quotas.MaxReplaysOpt = 30,
    write_projects: plan_quotas.WriteProjectsOpt = None,
    elastic: elastic_opts.ElasticOpt = None,
    elastic_alpha: elastic_opts.AlphaOpt = DEFAULT_ALPHA,
) -> None:
    """Find the smallest cluster of uniform nodes whose replay of TRACE meets a p95 queue-time target
    (with --power-budget, under that budget: a share of peak grows with the cluster, watts do not);
    with --quotas, the quotas that meet it for every project and unit on a given cluster."""
    if len(policy_names(policy, placement)) != 1:
        raise InvalidInput("plan sizes the cluster for one policy: give a single --policy")
    target = parse_duration(target_queue_p95)
    fraction = elastic_opts.checked(elastic, elastic_alpha)
    alone = report is None and all(v is None for v in (power_budget, power_model, power_modes))
    fixed = plan_quotas.fixed_cluster(quotas, projects, nodes, cluster, write_projects, gpus_per_node, gpu_model, alone)
    if gpus_per_node < 1 or max_nodes < 1:
        raise InvalidInput("--gpus-per-node and --max-nodes must be >= 1")
    study = Study.prepare(
        trace,
        format,
        policy,
        placement,
        projects,
        window,
        scale_load,
        seed,
        max(len(n.gpus) for n in fixed) if fixed else gpus_per_node,
        None,
        reclaim_min_run,
        max_wait,
        [g.model for n in fixed for g in n.gpus] if fixed else [gpu_model],
    )
    study = replace(study, jobs=elastic_opts.apply(study.jobs, fraction))
    if fixed:
        title = f"{trace.name}: {len(fixed)} nodes, {sum(len(n.gpus) for n in fixed)} GPUs, {policy} policy"
        config = study.policies[policy]
        plan_quotas.run(study.jobs, study.projects, config, fixed, target, max_replays, write_projects, output, title)
        return

    def power(cluster: list[Node]) -> PowerConfig:
        return power_opts.power_config(cluster, 0, power_budget, power_model, None, None, None, 0, 0)

    powered = any(v is not None for v in (power_budget, power_model, power_modes))
    if powered:
        power(uniform(1, gpus_per_node, gpu_model))  # bad input is refused before any replay
        study = replace(study, jobs=power_opts.with_modes(study.jobs, power_modes, power_seed))
    with console.status("sizing…", spinner="dots") as status:
        answer, curve = search(
            study.jobs,
            target,
            gpus_per_node,
            gpu_model,
            study.projects,
            study.policies[policy],
            max_nodes,
            status.update,
            power if powered else None,
            elastic_alpha,
        )
    if report is not None:
        from gpupool.sim.report import write_curve

        write_curve(report, curve, target)
    if output is Output.JSON:
        print_json(
            {
                "target_queue_p95_s": target,
                "gpus_per_node": gpus_per_node,
                "nodes": answer,
                "gpus": answer * gpus_per_node if answer else None,
                "curve": [
                    {**asdict(p), "p95_queue_s": None if math.isinf(p.p95_queue_s) else p.p95_queue_s} for p in curve
                ],
            }
        )
        return
    columns = [Col(c, justify="right") for c in ("NODES", "GPUS", "P95 QUEUE", "AVG QUEUE", "GPU UTIL")]
    table = Listing([*columns, Col("MEETS")], title=f"{trace.name}: {policy} policy")
    for p in curve:
        p95 = (
            f"> {human_seconds(target)} (stopped early)" if math.isinf(p.p95_queue_s) else human_seconds(p.p95_queue_s)
        )
        avg = "" if p.stopped_early else human_seconds(p.avg_queue_s)
        table.add_row(
            f"{p.nodes:,}",
            f"{p.gpus:,}",
            p95,
            avg,
            "" if p.stopped_early else f"{p.gpu_utilization:.3f}",
            "yes" if p.meets else "no",
        )
    console.print(table)
    if answer is None:
        console.print(f"even {max_nodes:,} nodes miss a p95 queue time of {human_seconds(target)}: raise --max-nodes")
    else:
        console.print(
            f"smallest cluster with p95 queue time ≤ {human_seconds(target)}: "
            f"{answer:,} nodes × {gpus_per_node} GPUs = {answer * gpus_per_node:,} GPUs"
        )
