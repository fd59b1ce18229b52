"""The power budget at scheduling (issue 33): a job starts only if what its GPUs count
(``domain/power_budget.py``) fits the pool's budget and each of its nodes' budgets.

A job that does not fit starts capped when its mode lets it (``PowerMode.flexible``: not
``max``): every GPU of it gets the same limit, the highest that fits every budget it touches,
never below what the GPU allows; the decision carries it (``StartJob.power_cap_w``). Otherwise it
waits with reason ``power`` and a sentence of how much is needed and how much is free. Only a
job of whole GPUs is capped: a shared GPU's limit is its other jobs' too.

Opened once per session over the snapshot; each start admitted here counts at once, so the jobs
after it in the same cycle see the budget it left.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.jobs import Placement
from gpupool.domain.launch import PowerSetting
from gpupool.domain.nodes import GpuInfo
from gpupool.domain.power import idle_w, parse_mode, shared_setting, show_watts
from gpupool.domain.power_budget import PowerBudget, counted_by_node, gpu_range, gpu_watts, holders_of, mode_setting
from gpupool.domain.snapshot import PendingJob, Snapshot

EPS = 1e-6


@dataclass(slots=True)
class PowerGate:
    budget: PowerBudget
    gpus: dict[tuple[str, int], GpuInfo]
    holders: dict[tuple[str, int], list[PowerSetting | None]]
    counted: dict[str, float]  # watts counted per node, this cycle's starts included

    @classmethod
    def open(cls, snapshot: Snapshot) -> PowerGate | None:
        """None when no budget is in force: the session then never asks."""
        budget = snapshot.power
        if not budget.active:
            return None
        holders = holders_of((r.placements, r.power) for r in snapshot.running)
        gpus = {(n.name, g.index): g for n in snapshot.nodes for g in n.gpus}
        return cls(budget, gpus, holders, counted_by_node(snapshot.nodes, holders, budget))

    @property
    def total(self) -> float:
        return sum(self.counted.values())

    def full_nodes(self, job: PendingJob, per_worker_gpus: int) -> frozenset[str]:
        """Nodes whose own budget has less free than one worker of ``job`` needs at its GPUs'
        limits: placement tries the others first."""
        if not per_worker_gpus or not self.budget.nodes_w:
            return frozenset()
        full = set()
        for (node, _index), gpu in self.gpus.items():
            limit = self.budget.node_w(node)
            if limit <= 0 or node in full:
                continue
            need = per_worker_gpus * (gpu_watts(mode_setting(job.spec.gpu_power, gpu, self.budget), gpu, self.budget))
            if self.counted.get(node, 0.0) + need - per_worker_gpus * idle_w(gpu.model) > limit + EPS:
                full.add(node)
        return frozenset(full)

    def admit(self, job: PendingJob, placements: Sequence[Placement]) -> tuple[Reason | None, float | None]:
        """(None, cap) when the job may start, counted from now on (cap: the watts each of its
        GPUs is limited to, None: as asked); (reason, None) when it waits for power."""
        taken = [(p.node, i, p.gpu_share > 0) for p in placements for i in p.gpus]
        if not taken:
            return None, None
        asked = {(n, i): mode_setting(job.spec.gpu_power, self.gpus[(n, i)], self.budget) for n, i, _ in taken}
        added = self._added(taken, asked)
        over = self._over(added)
        if over is None:
            self._count(taken, asked, added)
            return None, None
        shared = any(s for _, _, s in taken)
        if parse_mode(job.spec.gpu_power).flexible and not shared:
            cap = self._cap(taken)
            lowest = max(gpu_range(self.gpus[(n, i)]).min_w for n, i, _ in taken)
            if cap is not None and cap >= lowest:
                capped: dict[tuple[str, int], PowerSetting | None] = {k: PowerSetting("limit", cap) for k in asked}
                self._count(taken, capped, self._added(taken, capped))
                return None, float(cap)
            return self._reason(job, taken, asked, over, lowest), None
        return self._reason(job, taken, asked, over, None), None

    def _added(
        self, taken: list[tuple[str, int, bool]], settings: dict[tuple[str, int], PowerSetting | None]
    ) -> dict[str, float]:
        """Watts each node would count more with these GPUs under these settings."""
        added: dict[str, float] = {}
        for node, index, _ in taken:
            gpu, held = self.gpus[(node, index)], self.holders.get((node, index), [])
            before = gpu_watts(shared_setting(held), gpu, self.budget) if held else idle_w(gpu.model)
            after = gpu_watts(shared_setting([*held, settings[(node, index)]]), gpu, self.budget)
            added[node] = added.get(node, 0.0) + after - before
        return added

    def _over(self, added: dict[str, float]) -> str | None:
        """The first budget these watts would exceed: "" for the pool's, else the node's name."""
        budget = self.budget
        if budget.cluster_w > 0 and self.total + sum(added.values()) > budget.cluster_w + EPS:
            return ""
        for node, watts in sorted(added.items()):
            limit = budget.node_w(node)
            if limit > 0 and self.counted.get(node, 0.0) + watts > limit + EPS:
                return node
        return None

    def _cap(self, taken: list[tuple[str, int, bool]]) -> int | None:
        """The highest limit, the same on every GPU, that fits every budget the job touches."""
        budget, bounds = self.budget, []
        idle = {(n, i): idle_w(self.gpus[(n, i)].model) for n, i, _ in taken}
        if budget.cluster_w > 0:
            bounds.append((budget.cluster_w - self.total + sum(idle.values())) / len(taken))
        for node in {n for n, _, _ in taken}:
            limit = budget.node_w(node)
            if limit > 0:
                mine = [w for (n, _), w in idle.items() if n == node]
                bounds.append((limit - self.counted.get(node, 0.0) + sum(mine)) / len(mine))
        return math.floor(min(bounds) + EPS) if bounds else None

    def _count(
        self,
        taken: list[tuple[str, int, bool]],
        settings: dict[tuple[str, int], PowerSetting | None],
        added: dict[str, float],
    ) -> None:
        for node, index, _ in taken:
            self.holders.setdefault((node, index), []).append(settings[(node, index)])
        for node, watts in added.items():
            self.counted[node] = self.counted.get(node, 0.0) + watts

    def _reason(
        self,
        job: PendingJob,
        taken: list[tuple[str, int, bool]],
        asked: dict[tuple[str, int], PowerSetting | None],
        over: str,
        lowest: int | None,
    ) -> Reason:
        need = sum(gpu_watts(asked[(n, i)], self.gpus[(n, i)], self.budget) for n, i, _ in taken)
        idle = [(n, idle_w(self.gpus[(n, i)].model)) for n, i, _ in taken]
        if over == "":
            limit, used = self.budget.cluster_w, self.total - sum(w for _, w in idle)
            whose = f"the cluster's {show_watts(limit)} budget"
        else:
            limit, used = self.budget.node_w(over), self.counted.get(over, 0.0) - sum(w for n, w in idle if n == over)
            whose = f"{over}'s {show_watts(limit)} budget"
        message = f"needs {show_watts(need)} at its GPUs' limits; {whose} has {show_watts(max(0.0, limit - used))} free"
        if lowest is not None:
            message += f", too little even with its GPUs capped to {lowest} W"
        elif parse_mode(job.spec.gpu_power).flexible:
            message += " (a job on shared GPUs is not capped)"
        else:
            message += " (--gpu-power efficient or a value in watts would let it start capped)"
        return Reason(ReasonCode.POWER, message)
