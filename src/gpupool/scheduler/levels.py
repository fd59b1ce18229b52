"""The tree of projects within one cycle (issue 34): the units above each project, and what the
projects below a unit hold, so a unit's limit holds back every job under it.

Built only where some project has a parent (``Levels.of`` is None for a flat list): a cluster
that sets none pays nothing and decides exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.tree import ancestors

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Levels:
    above: dict[str, tuple[str, ...]]  # each project's units, nearest first (projects with a parent only)
    projects: Mapping[str, Project]

    @classmethod
    def of(cls, projects: Mapping[str, Project]) -> Levels | None:
        parents = {name: p.parent for name, p in projects.items()}
        if not any(parents.values()):
            return None
        return cls({name: tuple(ancestors(name, parents)) for name in projects if parents[name]}, projects)

    def units_of(self, project: str) -> tuple[str, ...]:
        return self.above.get(project, ())

    def held_under(self, unit: str, allocated: Mapping[str, float]) -> float:
        """GPUs held by the projects below ``unit``, at any depth."""
        return sum(held for name, held in allocated.items() if unit in self.above.get(name, ()))

    def limit_refusal(self, project: str, need: float, allocated: Mapping[str, float]) -> Reason | None:
        """Why ``need`` more GPUs for ``project`` would take a unit above it beyond its limit
        (the nearest such unit), or None."""
        for unit in self.units_of(project):
            limit = self.projects[unit].limit
            if limit is None:
                continue
            held = self.held_under(unit, allocated)
            if held + need > limit + EPS:
                return Reason(
                    ReasonCode.LIMIT,
                    f"limit: unit {unit} is at its limit of {limit:g} GPUs (its projects hold {held:g}; "
                    f"project {project}'s job needs {need:g} more)",
                )
        return None

    def excess(self, project: str, need: float, allocated: Mapping[str, float]) -> dict[str, float]:
        """The units above ``project`` that ``need`` more GPUs would take beyond their limit, each
        with how many GPUs must leave its projects first (nearest unit first)."""
        found = {}
        for unit in self.units_of(project):
            limit = self.projects[unit].limit
            if limit is not None and (over := self.held_under(unit, allocated) + need - limit) > EPS:
                found[unit] = over
        return found

    def held(self, name: str, allocated: Mapping[str, float]) -> float:
        """What a project holds, or a unit's projects together."""
        return allocated.get(name, 0.0) + self.held_under(name, allocated)

    def lenders(self, project: str, need: float, allocated: Mapping[str, float]) -> dict[str, str]:
        """Whom ``project``, below its quota and waiting for ``need`` GPUs, may reclaim from, each
        with the level on the project's path that claims from it. GPUs go back to the level that
        lent them, and a claim is made at every level of the path (the project, then each unit
        above it): a level takes back from the branches beside it, under its parent, that hold
        beyond their quota, and only while it is owed (``owes``). So a project takes back from its
        siblings what they borrowed of its quota, and what its unit lent outside from the units
        beside it. (Where a unit at its limit holds the job back, reclaim also asks that enough be
        taken from the unit's own projects.)"""
        path = (project, *self.units_of(project))
        claims: list[str] = []
        for level in path:
            # (no level takes from outside where even all its other projects' GPUs taken back
            # would leave it beyond its quota once the job holds its GPUs)
            if allocated.get(project, 0.0) + need <= self._quota(level) + EPS:
                claims.append(level)
        found: dict[str, str] = {}
        for name in allocated:
            if name == project:
                continue
            there = (name, *self.units_of(name))
            claim = next(level for level in path if level == path[-1] or self._parent(level) in there)
            if claim not in claims:
                continue
            branch = self._branch(name, self._parent(claim))
            if branch is not None and self.held(branch, allocated) > self._quota(branch) + EPS:
                found[name] = claim
        return found

    def owes(self, level: str, need: float, taken: Mapping[str, float], allocated: Mapping[str, float]) -> bool:
        """Whether ``level`` may take back from outside it for a job of ``need`` GPUs below it:
        once the job holds them, and ``taken`` (by project) is given back, the level holds no
        more than its quota. What is taken inside it (lower on the path) makes room for it."""
        return self.held(level, allocated) + need - self.held(level, taken) <= self._quota(level) + EPS

    def keeps_quotas(
        self, lender: str, taken: Mapping[str, float], allocated: Mapping[str, float], scope: str | None
    ) -> bool:
        """Whether taking ``taken`` GPUs (by project) leaves ``lender`` and every unit above it up to
        ``scope`` at its quota or above."""
        for level in (lender, *self.units_of(lender)):
            if level == scope:
                break
            left = self.held(level, allocated) - self.held(level, taken)
            if left < self._quota(level) - EPS:
                return False
        return True

    def held_all(self, allocated: Mapping[str, float]) -> dict[str, float]:
        """What every project holds, and every unit's projects together (one pass)."""
        held = dict(allocated)
        for name, gpus in allocated.items():
            for unit in self.units_of(name):
                held[unit] = held.get(unit, 0.0) + gpus
        return held

    def apart(self, a: str, b: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The levels of ``a``'s path and of ``b``'s below the level where the two meet, each
        nearest first (its last is the branch compared at the level that splits them); both
        empty where ``a`` is ``b``."""
        path_a, path_b = (a, *self.units_of(a)), (b, *self.units_of(b))
        return tuple(x for x in path_a if x not in path_b), tuple(x for x in path_b if x not in path_a)

    def _quota(self, name: str) -> float:
        found = self.projects.get(name)
        return 0.0 if found is None else found.quota

    def _parent(self, name: str) -> str | None:
        found = self.projects.get(name)
        return None if found is None else found.parent

    def _branch(self, name: str, scope: str | None) -> str | None:
        """The level just below ``scope`` on ``name``'s path (``name`` itself, or a unit above it),
        or None where ``name`` is not under ``scope``."""
        path = (name, *self.units_of(name))
        if scope is None:
            return path[-1]
        return path[path.index(scope) - 1] if scope in path[1:] else None
