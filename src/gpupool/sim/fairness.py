"""Per-project figures of a replay and how evenly projects fare: what "fair" should mean.

Jain's index over allocation divided by fair share (``metrics.fairness``) is low whenever a
project needs less than its share, even when nobody waits: it measures demand, not unfairness.
These figures ask what a team would ask instead:

- per project: its jobs, mean and p95 queueing delay, and mean slowdown (JCT over run time, so a
  one-minute job that waited an hour counts as badly treated, an hour-long one as not);
- across projects (those with a figure: whose jobs started, or finished): Jain's index over the
  projects' mean slowdowns and over their mean waits (1 = every project fares alike), and the
  max/min ratio of each (None where the smallest is 0);
- Jain's index over each project's allocation normalised by what it was entitled to and could
  use: min(fair share, demand), demand being the GPUs its submitted, unfinished jobs ask for.
  Averaged over time per project (spans where min(...) is 0 are skipped, so a project with
  nothing to run is not counted as starved); the engine integrates it at every event.
"""

from __future__ import annotations

import math
from typing import Any

from gpupool.domain.tree import ancestors
from gpupool.sim.engine import JobRun, SimResult


def per_project(result: SimResult) -> dict[str, dict[str, Any]]:
    """``{project: {jobs, started, completed, avg_queue_s, p95_queue_s, avg_slowdown, entitled}}``,
    by name; ``entitled``: its time-averaged allocation over min(fair share, demand) (1: it held
    what it was entitled to and could use; below, it waited for it; above, it borrowed).
    Waits are over the jobs that started, slowdowns over those that finished; None where there
    are none (a project whose jobs never start has no wait to average, not a wait of 0)."""
    by_project: dict[str, list[JobRun]] = {}
    for run in result.runs.values():
        by_project.setdefault(run.trace.spec.project, []).append(run)
    rows: dict[str, dict[str, Any]] = {}
    for name in sorted(by_project):
        rows[name] = {**_figures(by_project[name]), "entitled": _entitled(result, name)}
    return rows


def _figures(runs: list[JobRun]) -> dict[str, Any]:
    """jobs, started, completed, avg_queue_s, p95_queue_s, avg_slowdown of these runs."""
    waits = sorted(r.first_start - r.trace.submit_time for r in runs if r.first_start is not None)
    done = [s for s in (slowdown(r) for r in runs) if s is not None]
    return {
        "jobs": len(runs),
        "started": len(waits),
        "completed": sum(1 for r in runs if r.finish is not None),
        "avg_queue_s": _mean(waits) if waits else None,
        "p95_queue_s": _pct(waits, 95) if waits else None,
        "avg_slowdown": _mean(done) if done else None,
    }


def per_unit(result: SimResult) -> dict[str, dict[str, Any]]:
    """In a tree of projects (issue 34), ``{unit: {parent, projects, jobs, started, completed,
    avg_queue_s, p95_queue_s, avg_slowdown}}`` over the jobs of every project below each unit, at
    any depth, by name: how each faculty or lab fared, beside ``per_project``. Empty for a flat
    list. ``parent``: the unit above it (None: a child of the root)."""
    parents = {p.name: p.parent for p in result.projects}
    if not any(parents.values()):
        return {}
    below: dict[str, list[JobRun]] = {unit: [] for unit in parents.values() if unit is not None}
    projects: dict[str, set[str]] = {unit: set() for unit in below}
    for run in result.runs.values():
        for unit in ancestors(run.trace.spec.project, parents):
            below.setdefault(unit, []).append(run)
            projects.setdefault(unit, set()).add(run.trace.spec.project)
    rows: dict[str, dict[str, Any]] = {}
    for name in sorted(below):
        rows[name] = {"parent": parents.get(name), "projects": len(projects[name]), **_figures(below[name])}
    return rows


def across_projects(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The cross-project figures over ``per_project``'s rows (see the module docstring)."""
    slowdowns = [row["avg_slowdown"] for row in rows.values() if row["avg_slowdown"] is not None]
    waits = [row["avg_queue_s"] for row in rows.values() if row["avg_queue_s"] is not None]
    entitled = [row["entitled"] for row in rows.values() if row["entitled"] is not None]
    return {
        "slowdown_fairness": jain(slowdowns),
        "queue_fairness": jain(waits),
        "max_min_slowdown": _ratio(slowdowns),
        "max_min_queue": _ratio(waits),
        "entitled_fairness": jain(entitled),
    }


def _entitled(result: SimResult, project: str) -> float | None:
    ratio, seconds = result.entitled_by_project.get(project, (0.0, 0.0))
    return ratio / seconds if seconds > 0 else None


def slowdown(run: JobRun) -> float | None:
    """JCT over run time for a finished job with a run time; None otherwise."""
    duration = run.trace.duration
    if run.finish is None or not duration:
        return None
    return (run.finish - run.trace.submit_time) / duration


def jain(xs: list[float]) -> float:
    """Jain's index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one has everything.
    1 for no values or all zero (nobody fared worse than anybody)."""
    squares = sum(x * x for x in xs)
    if not xs or squares == 0:
        return 1.0
    return sum(xs) ** 2 / (len(xs) * squares)


def _ratio(xs: list[float]) -> float | None:
    if not xs or min(xs) <= 0:
        return None
    return max(xs) / min(xs)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    return values[max(0, math.ceil(pct / 100 * len(values)) - 1)]
