"""GPU power calibration (issue 33): ``gpupool node calibrate-power [NODE]`` (admin) measures each
GPU model's curve on a node (``node/power_calibrate.py``) and keeps it; ``efficient`` jobs of that
model follow it from their next start. The curves are shown with the point ``efficient`` picks."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpupool.domain.errors import GpupoolError, InvalidInput, NotFound
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import NodeState
from gpupool.domain.power import DEFAULT_MAX_SLOWDOWN, PowerCurve, PowerPoint
from gpupool.store import nodes as node_repo
from gpupool.store import power_curves as curve_repo
from gpupool.store import workers as worker_repo
from gpupool.store.tokens import Principal
from gpupool.store.transitions import add_event
from gpupool.usecases.access import require_admin
from gpupool.usecases.context import HeadContext

MIN_BOUND_S, MAX_BOUND_S = 5.0, 600.0  # per GPU model: a few settings of a second or more; at most 10 minutes


def calibrate(ctx: HeadContext, who: Principal, name: str | None, bound_s: float) -> list[dict[str, Any]]:
    """Calibrate every GPU model of node ``name`` (None: of every node that is not down), one
    GPU no job holds each; what was measured is kept, one curve per model (the latest wins)."""
    require_admin(who, "calibrate GPU power")
    if not MIN_BOUND_S <= bound_s <= MAX_BOUND_S:
        raise InvalidInput(f"--bound {bound_s:g}s is out of range: {MIN_BOUND_S:g}s to {MAX_BOUND_S:g}s per GPU model")
    with ctx.db.read() as s:
        nodes = node_repo.load_nodes(s)
        busy: dict[str, set[int]] = defaultdict(set)
        for w in worker_repo.live_workers(s):
            busy[w.placement.node].update(w.placement.gpus)
    chosen = [n for n in nodes if name is None or n.name == name]
    if name is not None and not chosen:
        raise NotFound(f"no node {name}: list nodes with gpupool nodes", code="node_not_found")
    results: list[dict[str, Any]] = []
    for node in chosen:
        if node.state is NodeState.DOWN or not node.gpus:
            why = "it is down" if node.state is NodeState.DOWN else "it has no GPU"
            results.append({"node": node.name, "model": None, "refused": f"node {node.name} not calibrated: {why}"})
            continue
        try:
            got = ctx.executor.calibrate_power(node.name, bound_s, sorted(busy[node.name]))
        except GpupoolError as exc:
            got = [{"node": node.name, "model": None, "refused": exc.message}]
        with ctx.db.tx() as s:
            for result in got:
                if not result.get("refused") and len(result.get("points") or ()) >= 2:
                    curve_repo.save_curve(s, result["model"], node.name, result["points"], ctx.clock.now())
                    add_event(s, ctx.clock.now(), kind="power_calibrated", message=summary(result))
        results += [with_efficient(r) for r in got]
    return results


def curves(ctx: HeadContext) -> list[dict[str, Any]]:
    """The stored curves, each point marked where ``efficient`` picks it (at the default slowdown)."""
    with ctx.db.read() as s:
        return [with_efficient(row) for row in curve_repo.curve_rows(s)]


def with_efficient(result: dict[str, Any], max_slowdown: float = DEFAULT_MAX_SLOWDOWN) -> dict[str, Any]:
    points = result.get("points") or []
    if len(points) < 2:
        return result
    curve = PowerCurve(
        str(result["model"]),
        tuple(
            PowerPoint(PowerSetting(p["kind"], int(p["value"])), p["speed"], p["energy"], p["watts"]) for p in points
        ),
        calibrated=True,
    )
    best = curve.efficient(max_slowdown)
    marked = [
        {**p, "efficient": (p["kind"], int(p["value"])) == (best.setting.kind, best.setting.value)} for p in points
    ]
    return {**result, "points": marked, "max_slowdown": max_slowdown}


def summary(result: dict[str, Any]) -> str:
    """One line for the cluster's events: the model, where, and what efficient saves there."""
    best = with_efficient(result)["points"]
    chosen = next((p for p in best if p.get("efficient")), best[0])
    kind = f"{chosen['value']} W limit" if chosen["kind"] == "limit" else f"SM clocks at {chosen['value']} MHz"
    return (
        f"power curve of {result['model']} measured on {result['node']} ({len(best)} settings,"
        f" {result.get('elapsed_s', 0):g}s): efficient is {kind}, {1 - chosen['speed']:.0%} slower for"
        f" {1 - chosen['energy']:.0%} less energy per unit of work"
    )
