"""Fair share: a project's quota plus its weight's part of the GPUs no quota covers (DESIGN §4).

Pure arithmetic, shown to users as well as used for ordering, so both read the same numbers.
In a tree of projects (issue 34) it is computed level by level: the root's children split the
cluster, and each unit's share is split among its children the same way. With no parents set
there is one level and the numbers are those of the flat list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupool.domain.projects import Project


def fair_shares(projects: Iterable[Project], capacity: float) -> dict[str, float]:
    """Every project's fair share, units' included."""
    listed = list(projects)
    known = {p.name for p in listed}
    below: dict[str | None, list[Project]] = {}
    for p in listed:
        below.setdefault(p.parent if p.parent in known else None, []).append(p)
    shares = _split(below.get(None, []), capacity)
    todo = [name for name in shares if name in below]
    while todo:
        unit = todo.pop()
        split = _split(below[unit], shares[unit])
        shares |= split
        todo.extend(name for name in split if name in below)
    return shares


def _split(listed: list[Project], capacity: float) -> dict[str, float]:
    """One level: each sibling's quota plus its weight's part of what their quotas leave."""
    if not listed:
        return {}
    beyond = max(0.0, capacity - sum(p.quota for p in listed))
    total_weight = sum(p.weight for p in listed) or 1.0
    shares = {}
    for p in listed:
        share = p.quota + beyond * p.weight / total_weight
        shares[p.name] = min(share, p.limit) if p.limit is not None else share
    return shares


def deficit_order(shares: Mapping[str, float], allocated: Mapping[str, float]) -> dict[str, float]:
    """How far each project is below its share, as a fraction of the share (negative: above it).
    Projects furthest below go first."""
    return {
        name: (share - allocated.get(name, 0.0)) / share if share > 0 else -allocated.get(name, 0.0)
        for name, share in shares.items()
    }


def rank_holding(
    shares: Mapping[str, float], recent_usage: Mapping[str, float], name: str, allocated: float
) -> tuple[float, str]:
    """A project's rank in the fair-share queue order were it to hold ``allocated`` GPUs now
    (smaller goes first): the project furthest below its fair share, as a fraction of it, then by
    name. Its load is the mean of what it holds and what it held on average lately (the decayed
    usage), so a project that used much recently yields to one that did not. Here, below the
    plugins, because ``displace`` asks it too: where a project would rank once its jobs stop."""
    share = shares.get(name, 0.0)
    load = 0.5 * allocated + 0.5 * recent_usage.get(name, 0.0)
    below = (share - load) / share if share > 0 else -1.0 - load
    return (-below, name)
