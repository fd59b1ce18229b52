"""Keep the power budget on measured draw (issue 33): after each round of GPU readings, if the pool
or a node with a budget of its own draws more than its budget, lower the power limits of the
lowest-priority running jobs first (then the newest started) until the excess is gone; when the
draw is back below the budget by a margin (``HYSTERESIS``), raise them again, the highest-priority
first, up to the setting they launched with.

The scheduler keeps the budget on limits at each start (``scheduler/power.py``), so this is the
safety net: for draw that its count could not foresee (a job whose node could not set its limit,
GPUs the budget did not count). Each cap applied, raised or lifted is a job event of kind
``power`` that says why; ``/metrics`` counts the throttles. Load, then the executor with no
session open, then one short write. The caps it applied are kept here; after a head restart a
job whose GPUs report a limit below its launch setting is taken as capped, and lifted in turn.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpupool.controller.steps.parts import Parts, PartsStep
from gpupool.domain.jobs import Priority
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import show_watts
from gpupool.domain.power_budget import THROTTLED, PowerBudget, gpu_range, gpu_watts
from gpupool.domain.telemetry import GpuSample
from gpupool.store import jobs as job_repo
from gpupool.store import nodes as node_repo
from gpupool.store import workers as worker_repo

log = logging.getLogger("gpupool.controller")
HYSTERESIS = 0.05  # raise caps again only once the draw is this far below the budget
STEP_W = 10  # a raise smaller than this waits for more room


@dataclass(frozen=True, slots=True)
class PowerJob:
    """A running job of whole GPUs, as the throttle weighs it."""

    id: int
    rank: int  # its priority's rank: lower is throttled first
    started_at: datetime | None
    gpus: tuple[tuple[str, int], ...]
    launch_w: float  # what each of its GPUs may draw under its launch setting
    lowest_w: int  # the lowest limit all of its GPUs take
    launch: PowerSetting | None


@dataclass(frozen=True, slots=True)
class Change:
    job: PowerJob
    cap: int | None  # the new limit of each GPU; None: back to its launch setting
    why: str


def plan(
    jobs: Sequence[PowerJob], draw: dict[tuple[str, int], float], budget: PowerBudget, caps: dict[int, int]
) -> list[Change]:
    """The caps to apply or lift now: pure, over the readings (``draw`` per GPU, watts)."""
    scopes = [("", budget.cluster_w)] if budget.cluster_w > 0 else []
    scopes += sorted((n, w) for n, w in budget.nodes_w.items() if w > 0)

    def drawn(scope: str) -> float:
        return sum(w for (node, _), w in draw.items() if scope in ("", node))

    def whose(scope: str, limit: float) -> str:
        where = "the cluster" if scope == "" else scope
        return f"{where}'s draw {show_watts(drawn(scope))} against its {show_watts(limit)} budget"

    changes: list[Change] = []
    over = [(s, limit) for s, limit in scopes if drawn(s) > limit]
    for scope, limit in over:
        excess = drawn(scope) - limit
        why = f"{THROTTLED}: {whose(scope, limit)}; lowest priority, newest first"
        for job in sorted(jobs, key=lambda j: (j.rank, -_started(j), -j.id)):
            mine = [g for g in job.gpus if scope in ("", g[0])]
            if excess <= 0 or not mine or any(c.job.id == job.id for c in changes):
                continue
            now_w = caps.get(job.id, job.launch_w)
            per_gpu = sum(draw.get(g, 0.0) for g in mine) / len(mine)
            cap = max(job.lowest_w, math.floor(min(now_w, per_gpu) - excess / len(mine)))
            if cap >= now_w:
                continue
            changes.append(Change(job, cap, why))
            excess -= len(mine) * max(0.0, per_gpu - cap)
    if over:
        return changes
    room = {s: limit * (1 - HYSTERESIS) - drawn(s) for s, limit in scopes}
    for job in sorted(jobs, key=lambda j: (-j.rank, _started(j), j.id)):
        held = caps.get(job.id)
        if held is None:
            continue
        cap = held
        touched = [s for s in room if s == "" or any(g[0] == s for g in job.gpus)]
        n = {s: sum(1 for g in job.gpus if s in ("", g[0])) for s in touched}
        spare = min((room[s] / n[s] for s in touched), default=job.launch_w)
        if spare < STEP_W:
            continue
        raised = None if cap + spare >= job.launch_w else math.floor(cap + spare)
        gained = (job.launch_w if raised is None else raised) - cap
        for s in touched:
            room[s] -= gained * n[s]
        said = "lifted" if raised is None else f"raised to {raised} W a GPU"
        changes.append(Change(job, raised, f"cap {said}: the draw is back below the budget"))
    return changes


class KeepPowerBudget(PartsStep):
    """On each round of readings, where a budget is in force or a cap is applied."""

    name = "power"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._caps: dict[int, int] = {}  # job id -> the limit its GPUs are throttled to

    def run(self, now: float) -> bool:
        p = self._parts
        readings = p.shared.readings
        if readings is None:
            return False
        with p.db.read() as s:
            budget = PowerBudget(p.settings.power_budget_w, node_repo.power_budgets(s))
            if not budget.active and not self._caps:
                return False
            workers = worker_repo.live_power(s)
            gpus = {(n.name, g.index): g for n in node_repo.load_nodes(s) for g in n.gpus}
        jobs = _jobs(workers, gpus, budget)
        draw = {(x.node, x.index): x.power_w for x in readings.samples if x.power_w is not None}
        self._caps = {j.id: c for j, c in ((j, self._caps.get(j.id)) for j in jobs) if c is not None}
        self._caps.update(_reported(jobs, readings.samples, self._caps))
        changes = plan(jobs, draw, budget, self._caps)
        said = [(c, self._apply(c)) for c in changes]
        if said:
            with p.db.tx() as s:
                for change, notes in said:
                    message = "; ".join([change.why, *notes])
                    job_repo.add_job_event(s, change.job.id, p.clock.now(), "power", message)
        return False

    def _apply(self, change: Change) -> list[str]:
        """Set the limit on each node of the job; what the nodes said (a refusal included)."""
        setting = change.job.launch if change.cap is None else PowerSetting("limit", change.cap)
        by_node: dict[str, list[int]] = defaultdict(list)
        for node, index in change.job.gpus:
            by_node[node].append(index)
        notes: list[str] = []
        for node, indices in sorted(by_node.items()):
            try:
                notes += self._parts.executor.set_gpu_power(node, indices, setting)
            except Exception as exc:  # a node that does not answer: tried again at the next round
                log.warning("setting GPU power on %s for job %s failed: %s", node, change.job.id, exc)
                return [f"{node} did not answer: {exc}"]
        if change.cap is None:
            self._caps.pop(change.job.id, None)
        else:
            self._caps[change.job.id] = change.cap
        return notes


def _jobs(
    workers: Iterable[worker_repo.LivePower], gpus: dict[tuple[str, int], GpuInfo], budget: PowerBudget
) -> list[PowerJob]:
    """The running jobs of whole GPUs (a shared GPU's limit is its other jobs' too)."""
    grouped: dict[int, list[worker_repo.LivePower]] = defaultdict(list)
    for w in workers:
        grouped[w.job_id].append(w)
    out = []
    for job_id, ws in sorted(grouped.items()):
        held = tuple((w.node, i) for w in ws for i in w.gpus if (w.node, i) in gpus)
        if not held or any(w.shared for w in ws):
            continue
        first = gpus[held[0]]
        out.append(
            PowerJob(
                job_id,
                Priority.parse(ws[0].priority).rank,
                ws[0].started_at,
                held,
                gpu_watts(ws[0].setting, first, budget),
                max(gpu_range(gpus[g]).min_w for g in held),
                ws[0].setting,
            )
        )
    return out


def _reported(jobs: Sequence[PowerJob], samples: Sequence[GpuSample], caps: dict[int, int]) -> dict[int, int]:
    """Jobs whose GPUs report a limit below their launch setting that this head did not apply:
    capped by a head before a restart."""
    limits = {(x.node, x.index): x.power_limit_w for x in samples if x.power_limit_w is not None}
    found = {}
    for job in jobs:
        seen = [limits[g] for g in job.gpus if g in limits]
        if job.id not in caps and seen and max(seen) < job.launch_w - 1:
            found[job.id] = math.floor(max(seen))
    return found


def _started(job: PowerJob) -> float:
    """When it started, for "newest first"; one still starting is the newest."""
    return job.started_at.timestamp() if job.started_at is not None else math.inf
