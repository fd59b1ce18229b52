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

    def lenders(
        self, project: str, need: float, allocated: Mapping[str, float], below: str | None = None
    ) -> tuple[set[str], str | None]:
        """Whom ``project``, below its quota and waiting for ``need`` GPUs, may reclaim from, and
        the unit whose projects those are (None: the root). GPUs go back to the level that lent
        them: the claim is that of the highest level on the project's path still owed ``need``
        within its quota (the project itself, or a unit whose projects hold less than its quota);
        it is made on the branches beside that level, under the same parent, that hold beyond their
        quota. So a project whose unit is within its quota takes back from its siblings, and one
        whose unit is below it from the units beside it. ``below``: a unit at its limit, under which
        the claim stays (only its projects' GPUs make room under the limit)."""
        claim = project
        for unit in self.units_of(project):
            if unit == below:
                break
            if self.held(unit, allocated) + need <= self.projects[unit].quota + EPS:
                claim = unit
        scope = self.projects[claim].parent if claim in self.projects else None
        found = set()
        for name in allocated:
            if name == claim or claim in self.units_of(name):
                continue  # inside the level that claims
            branch = self._branch(name, scope)
            if branch is not None and self.held(branch, allocated) > self._quota(branch) + EPS:
                found.add(name)
        return found, scope

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

    def _branch(self, name: str, scope: str | None) -> str | None:
        """The level just below ``scope`` on ``name``'s path (``name`` itself, or a unit above it),
        or None where ``name`` is not under ``scope``."""
        path = (name, *self.units_of(name))
        if scope is None:
            return path[-1]
        return path[path.index(scope) - 1] if scope in path[1:] else None
