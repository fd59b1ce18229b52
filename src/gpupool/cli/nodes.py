"""Node commands: `gpupool nodes`, the admin's `gpupool drain` / `gpupool undrain`, and
`gpupool node calibrate-power|power-curves` (issue 33)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupool.cli import node_actions
from gpupool.cli.common import Output, client, console, print_json, resolve_token
from gpupool.cli.opts import OutputOpt, UrlOpt
from gpupool.cli.tables import Col, Listing
from gpupool.domain.errors import InvalidInput
from gpupool.domain.nodes import NodeState

NodeArg = Annotated[str, typer.Argument(help="the node's name, as gpupool nodes lists it")]
GpuOpt = Annotated[int | None, typer.Option("--gpu", help="only this GPU (its index on the node)")]
ReasonOpt = Annotated[str | None, typer.Option(help="why, for the node's events")]
node_app = typer.Typer(help="An admin's settings of one node: its own power budget.", no_args_is_help=True)


def nodes(url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """List nodes, their GPUs and which jobs use them."""
    node_actions.nodes(**locals())


def drain(
    node: NodeArg,
    gpu: GpuOpt = None,
    reason: ReasonOpt = None,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Take a node out of service (admin): its jobs finish, nothing new starts on it. With --gpu,
    only that GPU: the job on it keeps running, nothing new lands on it."""
    with client(url) as c:
        record = c.drain(node, gpu=gpu, reason=reason)
    if output is Output.JSON:
        print_json(record)
    elif gpu is not None:
        on_it = _gpu(record, gpu)["jobs"]
        keeps = f" (job {', '.join(map(str, on_it))} keeps running on it)" if on_it else ""
        console.print(f"node {node} GPU {gpu}: out of service; nothing new starts on it{keeps}")
    else:
        console.print(f"node {node}: {_drain_state(record)}")


def undrain(
    node: NodeArg,
    gpu: GpuOpt = None,
    reason: ReasonOpt = None,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Put a drained node (admin), or with --gpu one GPU, back in service."""
    with client(url) as c:
        record = c.undrain(node, gpu=gpu, reason=reason)
    if output is Output.JSON:
        print_json(record)
    elif gpu is not None:
        back = "back in service"
        if not _gpu(record, gpu)["healthy"]:
            back = "mark cleared, but its probe reports it unhealthy: still out of service"
        console.print(f"node {node} GPU {gpu}: {back}")
    elif record["state"] == NodeState.DOWN:
        console.print(f"node {node}: down; it takes new jobs when it is back")
    else:
        console.print(f"node {node}: {record['state']}; it takes new jobs")


def _drain_state(record: dict[str, Any]) -> str:
    name, state = record["name"], record["state"]
    if state == NodeState.DOWN:
        return "down; it stays drained when it is back (gpupool undrain cancels that)"
    if state == NodeState.DRAINING:
        jobs = record["jobs"]
        which = f"job {jobs[0]} ends" if len(jobs) == 1 else f"jobs {', '.join(map(str, jobs))} end"
        return f"draining; nothing new starts on it, and it becomes drained when {which}"
    return f"{state}; nothing new starts on it (gpupool undrain {name} opens it again)"


def _gpu(record: dict[str, Any], index: int) -> dict[str, Any]:
    return dict(next(g for g in record["gpus"] if g["index"] == index))


@node_app.command("calibrate-power")
def calibrate_power(
    node: Annotated[str | None, typer.Argument(help="the node [default: every node that is up]")] = None,
    bound: Annotated[float, typer.Option(help="seconds each GPU model's sweep may take (5 to 600)")] = 60.0,
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Measure speed and energy per unit of work of each GPU model at a few power limits and clock
    locks, on one GPU no job holds (admin); --gpu-power efficient follows the curve from then on."""
    if not 5 <= bound <= 600:
        raise InvalidInput(f"--bound {bound:g} is out of range: 5 to 600 seconds per GPU model")
    from gpupool.client import GpupoolClient

    results: list[dict[str, Any]] = []
    with GpupoolClient(url, resolve_token(url), timeout=8 * bound + 120) as c:
        names = [node] if node else [n["name"] for n in c.nodes() if n["state"] != NodeState.DOWN]
        for name in names:
            results += c.calibrate_power(name, bound)
    if output is Output.JSON:
        print_json(results)
        return
    show_curves(results)


@node_app.command("power-curves")
def power_curves(url: UrlOpt = "http://127.0.0.1:7070", output: OutputOpt = Output.TABLE) -> None:
    """The GPU models' calibrated power curves, each setting's speed and energy per unit of work."""
    with client(url) as c:
        curves = c.power_curves()
    if output is Output.JSON:
        print_json(curves)
    elif not curves:
        console.print("no GPU model is calibrated: efficient uses its family's default (gpupool node calibrate-power)")
    else:
        show_curves(curves)


def show_curves(results: list[dict[str, Any]]) -> None:
    """One table per model: speed and energy relative to the default, the efficient point marked."""
    for r in results:
        if r.get("refused") or not r.get("points"):
            console.print(r.get("refused") or f"{r['model']} on {r['node']}: nothing measured")
            continue
        took = f" in {r['elapsed_s']:g}s" if r.get("elapsed_s") is not None else ""
        console.print(f"{r['model']} on {r['node']}{took}:")
        table = Listing((Col("SETTING"), Col("SPEED", justify="right"), Col("ENERGY", justify="right"),
                         Col("WATTS", justify="right"), Col("")))  # fmt: skip
        for p in r["points"]:
            setting = f"{p['value']} W limit" if p["kind"] == "limit" else f"SM clocks {p['value']} MHz"
            mark = f"efficient (within {r.get('max_slowdown', 0.2):.0%})" if p.get("efficient") else ""
            table.add_row(setting, f"{p['speed']:.0%}", f"{p['energy']:.0%}", f"{p['watts']:g}", mark)
        console.print(table)
        for skipped in r.get("skipped") or ():
            console.print(f"  not measured: {skipped}")


@node_app.command("set-power-budget")
def set_power_budget(
    node: NodeArg,
    budget: Annotated[str, typer.Argument(help="its GPUs' power budget (3kW, 2500W), or none")],
    url: UrlOpt = "http://127.0.0.1:7070",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Give a node a GPU power budget of its own, a rack's circuit (admin): the scheduler keeps it
    with the pool's --power-budget. ``none`` takes it away."""
    with client(url) as c:
        said = c.set_power_budget(node, budget)
    if output is Output.JSON:
        print_json(said)
    elif said["power_budget_w"] is None:
        console.print(f"node {node}: no power budget of its own")
    else:
        from gpupool.domain.power import show_watts  # ~12 ms that only this command needs

        console.print(f"node {node}: power budget {show_watts(said['power_budget_w'])}")
