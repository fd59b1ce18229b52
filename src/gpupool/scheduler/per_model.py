"""Quotas and limits per GPU model in one cycle (issue 34 item 2, ``domain/model_quotas.py``).

Built only where some project has per-model figures (``PerModel.of``; None otherwise), so a
cluster that sets none decides exactly as before. A job counts against the model of the GPUs it
holds: one asking ``--gpu-model`` lands only on those models, one asking none on whatever it
lands on, which is why holdings are read from placements, not specs.

* A per-model limit caps what a project holds of that model: a job whose every possible model is
  at its limit waits (``limit_refusal``); otherwise it is placed only on models with room
  (``narrow``). A gang is checked as if all of it landed on one model: never beyond the limit.
  In a tree of projects a unit's per-model limit caps what the projects below it hold of that
  model together, and holds back each of their jobs the same way, ``why`` naming the unit.
* A per-model quota guarantees that many GPUs of that model: reclaim takes back, for a job owed
  one (``owed``), only jobs holding GPUs of that model, from projects that hold beyond their
  figures (``borrowing``), never taking a lender below its own per-model quotas (``keeps``).
  A project's total quota beyond the sum of its per-model ones guarantees GPUs of the models it
  names no figure for. A unit's per-model quotas are kept by ``keeps_units``: reclaim for a job
  outside a unit never takes the unit's projects together below them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.jobs import Placement
from gpupool.domain.projects import Project
from gpupool.domain.snapshot import RunningJob, Snapshot
from gpupool.domain.tree import ancestors
from gpupool.scheduler.cluster import ClusterState
from gpupool.scheduler.demand import WorkerDemand

EPS = 1e-9


@dataclass(slots=True)
class PerModel:
    quotas: dict[str, Mapping[str, float]]  # project -> model -> GPUs guaranteed
    limits: dict[str, Mapping[str, float]]  # project -> model -> most GPUs held
    totals: dict[str, float]  # project -> its total quota (for the models it names no figure for)
    model_of: dict[str, dict[int, str]]  # node -> GPU index -> model
    above: dict[str, tuple[str, ...]] = field(default_factory=dict)  # project -> its units, nearest first
    held: dict[tuple[str, str], float] = field(default_factory=dict)  # (project, model) -> GPUs
    _of_job: dict[int, dict[str, float]] = field(default_factory=dict)  # running job -> model -> GPUs

    @classmethod
    def of(cls, projects: Iterable[Project], snapshot: Snapshot) -> PerModel | None:
        listed = list(projects)
        quotas = {p.name: p.quota_by_model for p in listed if p.quota_by_model}
        limits = {p.name: p.limit_by_model for p in listed if p.limit_by_model}
        if not quotas and not limits:
            return None
        model_of = {n.name: {g.index: g.model for g in n.gpus} for n in snapshot.nodes}
        parents = {p.name: p.parent for p in listed}
        above = {p.name: tuple(ancestors(p.name, parents)) for p in listed if p.parent}
        found = cls(quotas, limits, {p.name: p.quota for p in listed}, model_of, above)
        for r in snapshot.running:
            found._of_job[r.id] = found.add(r.spec.project, r.placements)
        return found

    def add(self, project: str, placements: Sequence[Placement]) -> dict[str, float]:
        """Count ``placements`` as ``project``'s, and as every unit's above it; returns their GPUs by model."""
        got: dict[str, float] = {}
        for p in placements:
            models = self.model_of.get(p.node, {})
            for index in p.gpus:
                model = models.get(index, "")
                got[model] = got.get(model, 0.0) + (p.gpu_share if p.gpu_share > 0 else 1.0)
        self._count(project, got, 1.0)
        return got

    def release(self, job: RunningJob) -> None:
        """``job`` is stopped this cycle: its GPUs no longer count (as ``victims.stop_for`` does)."""
        self._count(job.spec.project, self._of_job.pop(job.id, {}), -1.0)

    def _count(self, project: str, gpus_by_model: Mapping[str, float], sign: float) -> None:
        for level in (project, *self.above.get(project, ())):
            for model, gpus in gpus_by_model.items():
                self.held[(level, model)] = self.held.get((level, model), 0.0) + sign * gpus

    def limit_refusal(
        self, project: str, models: frozenset[str] | None, need: float, here: frozenset[str]
    ) -> Reason | None:
        """Why a job needing ``need`` GPUs of ``models`` (None: any of ``here``) may not start: every
        model it could land on is at the limit for it of the project or of a unit above it."""
        blocked = self._blocked(project, need)
        possible = (here if models is None else models) & here
        if not blocked or not possible or not possible <= blocked.keys():
            return None
        said = "; ".join(
            f"{self._level(project, level)} holds {self._of(level, m, cap)}"
            for m, levels in sorted(blocked.items())
            if m in possible
            for level, cap in levels
        )
        return Reason(ReasonCode.LIMIT, f"limit: {said}; this job needs {need:g} more")

    def narrow(self, project: str, demand: WorkerDemand, need: float, here: frozenset[str]) -> WorkerDemand:
        """``demand`` allowed only the models the project may still take ``need`` GPUs of."""
        blocked = self._blocked(project, need) if demand.needs_gpu else {}
        if not blocked:
            return demand
        allowed = (here if demand.models is None else demand.models) - blocked.keys()
        return replace(demand, models=frozenset(allowed))

    def narrowed(
        self, project: str, demand: WorkerDemand, need: float, cluster: ClusterState
    ) -> tuple[WorkerDemand, str]:
        """``narrow``, and what ``why`` adds where it narrowed: the limits that left models out."""
        found = self.narrow(project, demand, need, cluster.models)
        if found is demand:
            return demand, ""
        by_level: dict[str, list[str]] = {}
        for m, levels in sorted(self._blocked(project, need).items()):
            for level, cap in levels:
                by_level.setdefault(level, []).append(self._of(level, m, cap))
        said = " and ".join(f"{self._level(project, level)} holds {', '.join(of)}" for level, of in by_level.items())
        return found, f"; only on {'|'.join(sorted(found.models or ())) or 'no model'}: {said}"

    def _blocked(self, project: str, need: float) -> dict[str, list[tuple[str, float]]]:
        """The models ``need`` more GPUs would take beyond a limit: the project's own or a unit's
        above it, each with the levels (nearest first) and their limits that it would pass."""
        found: dict[str, list[tuple[str, float]]] = {}
        if need <= 0:
            return found
        for level in (project, *self.above.get(project, ())):
            for m, cap in self.limits.get(level, {}).items():
                if self.held.get((level, m), 0.0) + need > cap + EPS:
                    found.setdefault(m, []).append((level, cap))
        return found

    def _of(self, level: str, model: str, cap: float) -> str:
        return f"{self.held.get((level, model), 0.0):g} of its {cap:g} {model} (--limit {model}={cap:g})"

    @staticmethod
    def _level(project: str, level: str) -> str:
        return f"project {project}" if level == project else f"unit {level}"

    def owed(
        self, project: str, models: frozenset[str] | None, need: float, here: frozenset[str]
    ) -> frozenset[str] | None:
        """The models whose GPUs reclaim may take back for a job of ``project``: those of its
        per-model quotas with room for ``need`` (and, within what its total quota leaves, the
        models it names none for). None: it has no per-model quota (the total rule alone)."""
        quotas = self.quotas.get(project)
        if not quotas:
            return None
        wanted = here if models is None else models
        owed = {m for m in wanted if m in quotas and self.held.get((project, m), 0.0) + need <= quotas[m] + EPS}
        unlisted = wanted - quotas.keys()
        if unlisted and self._unlisted_held(project) + need <= self._residual(project) + EPS:
            owed |= unlisted
        return frozenset(owed)

    def borrowing(self, project: str, allocated: float) -> bool:
        """Holds beyond what it is guaranteed: its total quota, or, with per-model quotas, any of them."""
        quotas = self.quotas.get(project)
        if not quotas:
            return allocated > self.totals.get(project, 0.0) + EPS
        over = any(self.held.get((project, m), 0.0) > q + EPS for m, q in quotas.items())
        return over or self._unlisted_held(project) > self._residual(project) + EPS

    def holds_any(self, job: RunningJob, models: frozenset[str]) -> bool:
        return any(m in models for m in self._of_job.get(job.id, {}))

    def keeps(self, lender: str, taken: Sequence[RunningJob]) -> bool:
        """Whether ``lender`` keeps each of its per-model quotas once ``taken`` stop (True for a
        project with none: its total quota is the caller's rule)."""
        quotas = self.quotas.get(lender)
        if not quotas:
            return True
        took: dict[str, float] = {}
        for r in taken:
            for m, gpus in self._of_job.get(r.id, {}).items():
                took[m] = took.get(m, 0.0) + gpus
        for m, q in quotas.items():
            if m in took and self.held.get((lender, m), 0.0) - took[m] < q - EPS:
                return False
        unlisted = sum(g for m, g in took.items() if m not in quotas)
        return not unlisted or self._unlisted_held(lender) - unlisted >= self._residual(lender) - EPS

    def keeps_units(self, claimer: str, taken: Sequence[RunningJob]) -> bool:
        """Whether every unit with per-model quotas keeps them once ``taken`` (all the jobs chosen
        so far, of any lender) stop for a job of ``claimer``. GPUs that stay inside a unit (the
        claimer is below it too) stay its own, so only units above a lender and not above the
        claimer are checked."""
        inside = self.above.get(claimer, ())
        took: dict[tuple[str, str], float] = {}
        for r in taken:
            for unit in self.above.get(r.spec.project, ()):
                if unit in inside or unit not in self.quotas:
                    continue
                for m, gpus in self._of_job.get(r.id, {}).items():
                    took[(unit, m)] = took.get((unit, m), 0.0) + gpus
        return all(
            self.held.get(key, 0.0) - gpus >= self.quotas[key[0]].get(key[1], 0.0) - EPS
            for key, gpus in took.items()
            if key[1] in self.quotas[key[0]]
        )

    def _unlisted_held(self, project: str) -> float:
        quotas = self.quotas.get(project, {})
        return sum(g for (p, m), g in self.held.items() if p == project and m not in quotas)

    def _residual(self, project: str) -> float:
        return max(0.0, self.totals.get(project, 0.0) - sum(self.quotas.get(project, {}).values()))
