"""The tree of projects (issue 34): organisational units over projects, to any depth.

A project's ``parent`` is a unit; a unit is a project with children. A unit's quota is divided
among its children, so their quotas may not sum beyond it; jobs go to leaves only. Projects with
no parent are the children of the root (the cluster): every project before issue 34 is one, so a
flat list is the one-level tree and decides exactly as before.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from gpupool.domain.errors import InvalidInput, NotFound
from gpupool.domain.projects import Project

EPS = 1e-9


def children_of(projects: Iterable[Project]) -> dict[str | None, list[Project]]:
    """Each unit's children by name (``None``: the root's), in name order."""
    found: dict[str | None, list[Project]] = defaultdict(list)
    for p in sorted(projects, key=lambda p: p.name):
        found[p.parent].append(p)
    return dict(found)


def ancestors(name: str, parents: Mapping[str, str | None]) -> list[str]:
    """The units above ``name``, nearest first (empty for a child of the root). Stops at a cycle
    or a missing parent rather than looping: ``validate`` refuses both before they are stored."""
    found: list[str] = []
    at = parents.get(name)
    while at is not None and at not in found and at != name:
        found.append(at)
        at = parents.get(at)
    return found


def validate(changed: Project, configured: Iterable[Project]) -> None:
    """Refuse ``changed`` (replacing the project of its name among ``configured``) where the tree
    would break: a parent that does not exist, a cycle, or children's quotas summing beyond
    their parent's, each naming the numbers."""
    projects = {p.name: p for p in configured}
    projects[changed.name] = changed
    if changed.parent is not None:
        if changed.parent not in projects:
            raise NotFound(
                f"no project {changed.parent} to be {changed.name}'s parent: create it first with"
                f" gpupool project set {changed.parent}",
                code="project_not_found",
            )
        parents = {p.name: p.parent for p in projects.values()}
        if changed.name in ancestors(changed.parent, parents) or changed.parent == changed.name:
            path = " under ".join([changed.name, *_upto(changed.parent, changed.name, parents)])
            raise InvalidInput(f"project {changed.name} cannot go under {changed.parent}: a cycle ({path})")
    below = children_of(projects.values())
    for unit in {changed.name, changed.parent} - {None}:
        assert unit is not None
        kids = below.get(unit, [])
        total = sum(c.quota for c in kids)
        quota = projects[unit].quota
        if kids and total > quota + EPS:
            raise InvalidInput(
                f"{unit} has quota {quota:g}; its children's quotas would sum to {total:g}"
                f" ({', '.join(f'{c.name} {c.quota:g}' for c in kids)})"
            )
        for model, own in projects[unit].quota_by_model.items():  # issue 34 item 2: per model too
            given = [(c.name, c.quota_by_model[model]) for c in kids if model in c.quota_by_model]
            if sum(v for _, v in given) > own + EPS:
                raise InvalidInput(
                    f"{unit} has quota {model}={own:g}; its children's {model} quotas would sum to"
                    f" {sum(v for _, v in given):g} ({', '.join(f'{n} {v:g}' for n, v in given)})"
                )


def _upto(start: str, stop: str, parents: Mapping[str, str | None]) -> list[str]:
    """``start`` and the units above it up to ``stop``, nearest first (the cycle's path)."""
    path = [start]
    at: str | None = start
    while at is not None and at != stop:
        at = parents.get(at)
        if at is not None:
            path.append(at)
    return path
