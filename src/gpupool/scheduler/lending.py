"""Capacity never lent (issue 34, Kueue's lendingLimit): a project or unit with ``lend_limit``
lends at most that many GPUs of its unused quota; the rest stays idle for it, even when others wait.

Borrowing takes no particular GPUs, so neither does lending: what is kept is a count. A job that
would take its project beyond its quota starts only if the idle GPUs left after it still cover
what every project or unit outside its own path keeps. What a node keeps from outsiders is its
unused quota beyond its lend limit, or what the lenders below it keep together if that is more
(a unit's figure holds its children's). A job within its quota is not held back: its quota is its
own, and where others borrowed it, reclaim takes it back (within ``--reclaim-min-run``).

Built only where some project sets a lend limit (``Lending.of`` is None otherwise): a cluster
that sets none pays nothing and decides exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.domain.decisions import Reason, ReasonCode
from gpupool.domain.projects import Project
from gpupool.domain.tree import ancestors

EPS = 1e-9
Kept = list[tuple[str, float]]  # (project or unit, idle GPUs kept for it)


@dataclass(frozen=True, slots=True)
class Lending:
    projects: Mapping[str, Project]
    children: dict[str | None, tuple[str, ...]]  # by parent (None: the root), in name order
    above: dict[str, tuple[str, ...]]  # each project's units, nearest first
    capacity: float

    @classmethod
    def of(cls, projects: Mapping[str, Project], capacity: float) -> Lending | None:
        if all(p.lend_limit is None for p in projects.values()):
            return None
        parents = {name: p.parent if p.parent in projects else None for name, p in projects.items()}
        children: dict[str | None, list[str]] = {}
        for name in sorted(projects):
            children.setdefault(parents[name], []).append(name)
        above = {name: tuple(ancestors(name, parents)) for name in projects}
        return cls(projects, {k: tuple(v) for k, v in children.items()}, above, float(capacity))

    def refusal(self, project: str, need: float, allocated: Mapping[str, float]) -> Reason | None:
        """Why ``need`` more GPUs for ``project`` would lend capacity that is never lent, or None."""
        own = self.projects.get(project)
        if allocated.get(project, 0.0) + need <= (0.0 if own is None else own.quota) + EPS:
            return None  # within its quota: its own
        kept = self.kept_from(project, allocated)
        total = sum(gpus for _, gpus in kept)
        idle = self.capacity - sum(allocated.values())
        if not kept or idle - need >= total - EPS:
            return None
        named = [f"{gpus:g} for {self._describe(name)}" for name, gpus in kept]
        named[0] = named[0].replace(" for ", " idle GPUs are kept for ", 1)
        return Reason(
            ReasonCode.QUOTA,
            f"quota: {' and '.join(named)}; project {project} is beyond its quota and its job needs {need:g}"
            f" of the {max(0.0, idle):g} idle",
        )

    def kept_from(self, project: str, allocated: Mapping[str, float]) -> Kept:
        """The idle GPUs kept from ``project``'s jobs, by the lender that keeps them: every node
        beside the path from the root down to ``project``."""
        held = self._held(allocated)
        path = {project, *self.above.get(project, ())}
        found: Kept = []
        todo: list[str | None] = [None]
        while todo:
            at = todo.pop()
            for child in self.children.get(at, ()):
                if child in path:
                    todo.append(child)
                else:
                    found.extend(self._kept(child, held))
        return sorted((name, gpus) for name, gpus in found if gpus > EPS)

    def _kept(self, name: str, held: Mapping[str, float]) -> Kept:
        """What ``name`` keeps from outsiders: its own unused quota beyond its lend limit, or what
        its children keep together where that is more."""
        below = [kept for child in self.children.get(name, ()) for kept in self._kept(child, held)]
        p = self.projects[name]
        if p.lend_limit is not None:
            mine = p.quota - held.get(name, 0.0) - p.lend_limit
            if mine > EPS and mine >= sum(gpus for _, gpus in below) - EPS:
                return [(name, mine)]
        return below

    def _held(self, allocated: Mapping[str, float]) -> dict[str, float]:
        """What each project holds, and each unit's projects together."""
        held = dict(allocated)
        for name, gpus in allocated.items():
            for unit in self.above.get(name, ()):
                held[unit] = held.get(unit, 0.0) + gpus
        return held

    def _describe(self, name: str) -> str:
        kind = "unit" if name in self.children else "project"
        return f"{kind} {name} (--lend-limit {self.projects[name].lend_limit:g})"
