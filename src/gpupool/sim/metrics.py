"""Summary figures of a simulation, the names ``gpupool simulate -o json`` promises."""

from __future__ import annotations

import math
from typing import Any

from gpupool.domain.projects import Project
from gpupool.scheduler.fair_share import fair_shares
from gpupool.sim.engine import SimResult, units_above
from gpupool.sim.fairness import across_projects, per_project, per_unit


def summarize(result: SimResult, wall_s: float) -> dict[str, Any]:
    runs = list(result.runs.values())
    done = [r for r in runs if r.finish is not None]
    started = [r for r in runs if r.first_start is not None]
    jct = sorted(r.finish - r.trace.submit_time for r in done if r.finish is not None)
    queue = sorted(r.first_start - r.trace.submit_time for r in started if r.first_start is not None)
    first = min((r.trace.submit_time for r in runs), default=0.0)
    last = max((r.finish for r in done if r.finish is not None), default=first)
    if result.timeline:
        last = max(last, result.timeline[-1][0])
    makespan = last - first
    used = sum(result.allocation_by_project.values())
    projects = per_project(result)
    return {
        "jobs": len(runs),
        "completed": len(done),
        "avg_jct_s": _mean(jct),
        "p50_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "p99_jct_s": _pct(jct, 99),
        "avg_queue_s": _mean(queue),
        "p95_queue_s": _pct(queue, 95),
        "makespan_s": makespan,
        "gpu_utilization": used / (result.capacity * makespan) if result.capacity and makespan > 0 else 0.0,
        "max_gpu_allocation": max((held for _, held, _ in result.timeline), default=0.0) / result.capacity
        if result.capacity
        else 0.0,
        "preemptions": sum(r.preemptions for r in runs),
        # How preemption is spread: jobs stopped at least once, and the most any one job was stopped.
        "preempted_jobs": sum(1 for r in runs if r.preemptions),
        "most_preemptions": max((r.preemptions for r in runs), default=0),
        "fairness": fairness(result, makespan),
        **across_projects(projects),
        "per_project": projects,
        **({"per_unit": units} if (units := per_unit(result)) else {}),  # a tree of projects only
        "wall_s": wall_s,
        **(result.power or {}),  # with a power model (sim/power.py): energy, peak kW, money, CO2
        "placed": sorted(r.trace.job_id for r in started),
    }


def fairness(result: SimResult, makespan: float) -> float:
    """Jain's index over projects' average allocation divided by their fair share (1 = fair)."""
    names = {r.trace.spec.project for r in result.runs.values()}
    units = units_above(result.projects, names)  # their shares are split among the projects below
    projects = [p for p in result.projects if p.name in names]
    known = {p.name for p in projects}
    projects += [Project(n) for n in sorted(names - known)]
    shares = fair_shares([*projects, *(p for p in result.projects if p.name in units)], result.capacity)
    xs = [
        result.allocation_by_project.get(p.name, 0.0) / makespan / shares[p.name]
        for p in projects
        if makespan > 0 and shares.get(p.name)
    ]
    if not xs or not any(xs):
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    k = max(0, math.ceil(pct / 100 * len(values)) - 1)
    return values[k]
