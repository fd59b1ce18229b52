"""Planning quotas (issue 34 item 7): which quotas would have kept every project's and every unit's
p95 queue time within a target on a fixed cluster ("what quotas would have kept every lab's p95
queue under an hour").

A greedy search, one replay a step, bounded by ``max_replays``. It starts from the file's quotas
and, while a project misses the target, raises the quota of the one that misses worst:

- from room already there: a unit whose quota is above its children's sum, or GPUs of the
  cluster no top-level quota claims; a unit whose children would outgrow it grows with them;
- else from a donor: the project that meets the target with the most to spare (shortest p95
  queue), never one raised before (so the search cannot swap GPUs back and forth), and the
  units above it that are not above the raised project shrink with it, so the GPUs move up to
  the unit both share and down to the raised project. Every unit's quota stays at least its
  children's sum, and the top level's sum within the cluster.

Each quota stays valid as ``gpupool project set`` checks it: never above the project's limit
(limits are the operator's caps; this search changes quotas only), never below its lend limit,
its per-model quotas' sum or its children's sum. A step moves as many GPUs as the project's
widest late job asks, and at least a 32nd of the cluster, so a large cluster needs few replays.
Only leaves are targeted: a unit's p95 is at most the worst p95 of the projects below it (each
has 95% of its jobs within its own), so once every project meets the target, every unit does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpupool.domain import tree
from gpupool.domain.errors import GpupoolError
from gpupool.domain.nodes import Node
from gpupool.domain.projects import Project
from gpupool.scheduler import SchedulerConfig
from gpupool.sim.engine import SimResult, simulate
from gpupool.sim.trace_job import TraceJob

PERCENTILE = 95
STEP_SHARE = 32  # a step is at least the cluster's GPUs over this


@dataclass(frozen=True, slots=True)
class Row:
    """One project or unit: its quota in the file and proposed, its p95 queue before and after
    (``inf``: more than 5% of its jobs never started; None: it had no jobs)."""

    name: str
    parent: str | None
    unit: bool
    quota: float
    proposed: float
    p95_before_s: float | None
    p95_after_s: float | None
    meets: bool


@dataclass(frozen=True, slots=True)
class QuotaPlan:
    met: bool
    replays: int
    rows: list[Row]
    projects: list[Project]  # the proposed projects, in the file's order
    why: str | None  # why the target was not met; None when it was (then the rows are the best replay's)


def plan_quotas(
    jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    projects: Sequence[Project],
    config: SchedulerConfig,
    target_s: float,
    max_replays: int,
    progress: Callable[[str], None] = lambda _: None,
) -> QuotaPlan:
    """The search of the module docstring. Projects the trace names but ``projects`` lacks are
    added with quota 0 under the root, so they can be given some."""
    listed = list(projects)
    known = {p.name for p in listed}
    listed += [Project.create(n) for n in sorted({j.spec.project for j in jobs} - known)]
    capacity = float(sum(len(n.gpus) for n in nodes))
    parents = {p.name: p.parent for p in listed}
    units = {p.parent for p in listed if p.parent is not None}
    quotas = {p.name: p.quota for p in listed}
    step = max(1.0, math.ceil(capacity / STEP_SHARE))
    raised: set[str] = set()
    before: dict[str, float] = {}
    current = listed
    replays = 0
    why: str | None = None
    best: tuple[tuple[int, float], dict[str, float], list[Project], dict[str, float]] | None = None
    while True:
        replays += 1
        progress(f"replay {replays}: {len(jobs):,} jobs on {capacity:g} GPUs…")
        result = simulate(jobs, nodes, current, config)
        p95 = _p95s(result, parents)
        before = before or p95
        late = sorted((n for n in p95 if n not in units and p95[n] > target_s), key=lambda n: (-p95[n], n))
        score = (len(late), max((p95[n] for n in late), default=0.0))
        if best is None or score < best[0]:
            best = (score, quotas, current, p95)
        if not late:
            break
        if replays >= max_replays:
            why = f"the target is still missed after {replays} replays (--max-replays)"
            break
        moved = None
        for name in late:
            amount = max(step, _widest_late(result, name, target_s))
            moved = _move(quotas, name, amount, p95, target_s, raised, parents, listed, capacity)
            if moved is not None:
                raised.add(name)
                break
        if moved is None:
            why = f"no quota can grow within the cluster's {capacity:g} GPUs, the limits and the units' quotas"
            break
        quotas, current = moved
    assert best is not None  # the first replay set it
    _, quotas, current, p95 = best  # when missed: the replay that missed least (fewest late, then least late)
    if why is not None:
        late = sorted(n for n in p95 if n not in units and p95[n] > target_s)
        why = f"at best {', '.join(late)} still wait{'s' if len(late) == 1 else ''} longer; {why}"
    rows = [
        Row(
            p.name,
            p.parent,
            p.name in units,
            p.quota,
            quotas[p.name],
            before.get(p.name),
            p95.get(p.name),
            p95.get(p.name, 0.0) <= target_s,
        )
        for p in listed
    ]
    return QuotaPlan(why is None, replays, rows, current, why)


def _move(
    quotas: dict[str, float],
    name: str,
    amount: float,
    p95: dict[str, float],
    target_s: float,
    raised: set[str],
    parents: dict[str, str | None],
    listed: list[Project],
    capacity: float,
) -> tuple[dict[str, float], list[Project]] | None:
    """``name``'s quota raised, from room already there or else from one donor, as the new
    quotas and projects; None where neither can give any."""
    limit = next(p.limit for p in listed if p.name == name)
    amount = amount if limit is None else min(amount, limit - quotas[name])  # limits are caps
    if amount <= tree.EPS:
        return None
    tries = amount
    while tries >= 1:  # room for less than a step still helps
        if (grown := _valid(_grow(quotas, name, tries, parents, capacity), listed)) is not None:
            return grown
        tries = math.floor(tries / 2)
    leaves = {p.name for p in listed} - set(parents.values())
    donors = sorted(
        (d for d in leaves if d != name and d not in raised and p95.get(d, 0.0) <= target_s and quotas[d] > 0),
        key=lambda d: (p95.get(d, 0.0), -quotas[d], d),
    )
    above = set(tree.ancestors(name, parents))
    for donor in donors:
        take = min(amount, quotas[donor])
        given = dict(quotas)
        for level in [donor, *(u for u in tree.ancestors(donor, parents) if u not in above)]:
            given[level] -= take
        if (moved := _valid(_grow(given, name, take, parents, capacity), listed)) is not None:
            return moved
    return None


def _grow(
    quotas: dict[str, float], name: str, amount: float, parents: dict[str, str | None], capacity: float
) -> dict[str, float] | None:
    """``name`` raised by ``amount``, each unit above it by what its children then outgrow; None
    where the top level would outgrow the cluster."""
    new = dict(quotas)
    new[name] += amount
    at = parents.get(name)
    while at is not None:
        over = sum(q for n, q in new.items() if parents.get(n) == at) - new[at]
        if over <= tree.EPS:
            return new
        new[at] += over
        at = parents.get(at)
    return new if sum(q for n, q in new.items() if parents.get(n) is None) <= capacity + tree.EPS else None


def _valid(quotas: dict[str, float] | None, listed: list[Project]) -> tuple[dict[str, float], list[Project]] | None:
    """The projects with these quotas, or None where one would be refused as ``project set``
    refuses it (above its limit, below its lend limit or per-model sum, or its children's)."""
    if quotas is None:
        return None
    try:
        projects = [_requota(p, quotas[p.name]) for p in listed]
        for project in projects:
            tree.validate(project, projects)
    except GpupoolError:
        return None
    return quotas, projects


def _requota(p: Project, quota: float) -> Project:
    if quota == p.quota:
        return p
    return Project.create(
        p.name,
        quota,
        p.limit,
        p.weight,
        p.idle_timeout_s,
        p.gpu_power,
        p.parent,
        p.user_limit,
        dict(p.user_limits),
        p.lend_limit,
        p.quota_by_model,
        p.limit_by_model,
    )


def _p95s(result: SimResult, parents: dict[str, str | None]) -> dict[str, float]:
    """Each project's and unit's p95 queue time over its jobs (a job that never started counts
    as waiting forever), for those with jobs."""
    waits: dict[str, list[float]] = {}
    for run in result.runs.values():
        wait = math.inf if run.first_start is None else run.first_start - run.trace.submit_time
        project = run.trace.spec.project
        for level in [project, *tree.ancestors(project, parents)]:
            waits.setdefault(level, []).append(wait)
    return {n: sorted(w)[max(0, math.ceil(PERCENTILE / 100 * len(w)) - 1)] for n, w in waits.items()}


def _widest_late(result: SimResult, name: str, target_s: float) -> float:
    """The GPUs of ``name``'s widest job that waited longer than the target (0 if none did)."""
    return max(
        (
            float(r.trace.spec.total_gpus)
            for r in result.runs.values()
            if r.trace.spec.project == name
            and (r.first_start is None or r.first_start - r.trace.submit_time > target_s)
        ),
        default=0.0,
    )
