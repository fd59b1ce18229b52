"""Projects (queues): a guaranteed quota, a limit on what they may hold, a weight for the rest.

Quantities are GPUs; a fractional worker counts by its share.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpupool.domain.errors import InvalidInput
from gpupool.domain.power import parse_mode

DEFAULT_PROJECT = "default"
# The one rule for names people give things: projects, users (and a job's project).
MAX_GPUS = 1_000_000  # a quota, limit or weight beyond any cluster: bounded so arithmetic stays exact
MAX_IDLE_S = 365 * 86400
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    quota: float = 0.0
    limit: float | None = None  # None: no limit beyond the cluster
    weight: float = 1.0
    # Interactive jobs whose GPUs sit idle this long are preempted while others wait (domain.idle).
    idle_timeout_s: float | None = None
    # Its jobs' GPU power mode when they name none (issue 33): "max", "efficient", "400W"; None: max.
    gpu_power: str | None = None
    # The organisational unit above it (issue 34, domain/tree.py); None: a child of the root.
    parent: str | None = None
    # At most this many GPUs of its unused quota are lent to others (issue 34, Kueue's lendingLimit);
    # the rest stays idle for it. None: it lends all, as before.
    lend_limit: float | None = None

    @classmethod
    def create(
        cls,
        name: str,
        quota: float = 0.0,
        limit: float | None = None,
        weight: float = 1.0,
        idle_timeout_s: float | None = None,
        gpu_power: str | None = None,
        parent: str | None = None,
        lend_limit: float | None = None,
    ) -> Project:
        if not NAME_RE.match(name):
            raise InvalidInput(f"invalid project name {name!r}: letters, digits, '.', '_' and '-', at most 63")
        for label, value in (("quota", quota), ("weight", weight)):
            if not isinstance(value, int | float) or math.isnan(value) or not 0 <= value <= MAX_GPUS:
                raise InvalidInput(f"{label} must be a number from 0 to {MAX_GPUS}, got {value!r}")
        if weight == 0:
            raise InvalidInput("weight must be above 0 (it is the project's part of the GPUs beyond all quotas)")
        if limit is not None:
            if math.isnan(limit) or not 0 <= limit <= MAX_GPUS:
                raise InvalidInput(f"limit must be a number from 0 to {MAX_GPUS}, got {limit!r}")
            if limit < quota:
                raise InvalidInput(f"limit {limit:g} is below quota {quota:g}: a project may always use its quota")
        _check_lend_limit(lend_limit, quota)
        if idle_timeout_s is not None and not (math.isfinite(idle_timeout_s) and 60 <= idle_timeout_s <= MAX_IDLE_S):
            raise InvalidInput(
                "idle timeout must be from 60 seconds (readings come every few seconds) to 365 days,"
                f" got {idle_timeout_s!r}"
            )
        if parent is not None and not NAME_RE.match(parent):
            raise InvalidInput(f"invalid parent name {parent!r}: letters, digits, '.', '_' and '-', at most 63")
        if parent == name:
            raise InvalidInput(f"project {name} cannot be its own parent")
        return cls(
            name,
            float(quota),
            None if limit is None else float(limit),
            float(weight),
            None if idle_timeout_s is None else float(idle_timeout_s),
            None if gpu_power is None else parse_mode(gpu_power).text,
            parent,
            None if lend_limit is None else float(lend_limit),
        )

    def describe_idle_timeout(self) -> str:
        return "off" if self.idle_timeout_s is None else f"{self.idle_timeout_s:g}s"

    def describe_limit(self) -> str:
        return "none" if self.limit is None else f"{self.limit:g}"

    def describe_lend_limit(self) -> str:
        return "all" if self.lend_limit is None else f"{self.lend_limit:g}"


def _check_lend_limit(lend_limit: float | None, quota: float) -> None:
    """0 to the quota: only unused quota is lent, so a lend limit above it would mean nothing."""
    if lend_limit is None:
        return
    if math.isnan(lend_limit) or not 0 <= lend_limit <= MAX_GPUS:
        raise InvalidInput(f"lend limit must be a number from 0 to {MAX_GPUS}, got {lend_limit!r}")
    if lend_limit > quota:
        raise InvalidInput(f"lend limit {lend_limit:g} is above quota {quota:g}: a project lends only its unused quota")


def effective_projects(configured: list[Project], capacity: float) -> list[Project]:
    """The projects the scheduler and the API reason about. Until an admin sets it, ``default``
    is guaranteed what no other project is (the whole cluster on a fresh install), so interactive
    jobs, which must fit inside a quota, run without any set-up."""
    by_name = {p.name: p for p in configured}
    # A unit's quota holds its children's: only the top level's quotas claim the cluster.
    unclaimed = max(0.0, float(capacity) - sum(p.quota for p in configured if p.parent is None))
    by_name.setdefault(DEFAULT_PROJECT, Project(DEFAULT_PROJECT, quota=unclaimed))
    return sorted(by_name.values(), key=lambda p: p.name)
