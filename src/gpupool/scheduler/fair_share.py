"""Fair share: a project's quota plus its weight's part of the GPUs no quota covers (DESIGN §4).

Pure arithmetic, shown to users as well as used for ordering, so both read the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupool.domain.projects import Project


def fair_shares(projects: Iterable[Project], capacity: float) -> dict[str, float]:
    listed = list(projects)
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
